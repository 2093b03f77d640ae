//! The spawner: the one process that forks providers, so the host never forks itself.
//!
//! Forking the host is slow and heavy once wasmtime has mapped its reservations and the
//! host has grown: every fork copies the host's page tables, and on Linux each confined
//! launch keeps a fork that does not exec alive for the run (the reaper of its PID
//! namespace, see `linux.rs`), holding a copy of its parent's page tables (measured when
//! they were forks of the host, with a keeper process beside each: a thousand parked
//! sessions ran a 24 GiB machine out of memory). The spawner is the host's own executable
//! started afresh (`/proc/self/exe`), intercepted before `main` by an `.init_array` hook of
//! this crate, so it never maps wasmtime nor starts a runtime: its forks are cheap and its
//! reapers small. It is started once per host process, on first use (an `Agent`
//! being built starts it in the background). A program may instead fork it first thing in
//! `main` (`crate::fork_spawner`, as `adaptor run` does): the process is then small
//! and single-threaded, and the fork spares starting the executable a second time; the child
//! sets itself up as a started spawner is set up and runs the same [`serve`].
//!
//! ```text
//! host ──socket──▶ spawner (own process group; PR_SET_PDEATHSIG towards the host)
//!                    │ fork (+ confinement, as before)
//!                    ▼
//!                  reaper ─▶ provider      (each dies with its parent)
//! ```
//!
//! Protocol (a private Unix stream socket pair, frames of a 4-byte little-endian length and a
//! JSON body, see [`ToSpawner`]): the host sends a [`Request`] per launch; the spawner answers each with a
//! [`Reply::Spawned`] carrying the provider's stdin, stdout and stderr as file descriptors
//! (`SCM_RIGHTS`), or a [`Reply::Failed`], and later sends [`Reply::Exited`] with the wait
//! status once it has reaped the child (it watches each with a pidfd). Under a PID
//! namespace it also sends it earlier, as soon as the reaper writes the provider's status,
//! which it does once every process of the namespace has ended and been reaped
//! ([`Exit::reaper_exiting`]): the host works out the run's result while the reaper's own
//! teardown (its memory, its namespaces: about 0.2 ms) runs, and waits for the second
//! report only before the run ends.
//!
//! Common rules: every launch's rules begin with the system's (some 160 as root, `/etc`
//! entry by entry; see `grant::confine::SystemRules`), and Landlock binds a rule by opening
//! its path, which took about a millisecond between a launch's request and its fork. The
//! host registers such a set once per spawner ([`ToSpawner::Common`]) and names it in each
//! launch instead of sending its rules; when a launch is expected (the spawner started
//! early, or a run began its preparation: [`ToSpawner::Expect`]) the spawner builds that
//! set's ruleset while the host prepares the run, and the launch adds only its own rules
//! to it ([`CommonSets`]). A prepared ruleset serves one launch, and only within a second
//! of being built (`PreparedRuleset`: a rule binds the file its path named when it was
//! opened); any other launch builds its own as before.
//!
//! No-orphan guarantees are unchanged: the spawner has the parent-death signal towards the
//! host's spawner thread (which lives as long as the host), every provider (or its reaper)
//! has it towards the spawner, and a spawner that sees the host's end of the socket close
//! kills every process group it started. If the spawner dies while the host lives, its
//! providers die with it, their runs see their exit as an error, and the next launch starts
//! a new spawner.
//!
//! When the executable cannot serve as the spawner (the hook is not linked into it, or
//! `/proc/self/exe` cannot be executed), the same serving loop runs on a thread of the host
//! instead: the same protocol and guarantees, with the fork cost in the host (logged once).
//!
//! Must not: decide what is spawned (`grant` does), nor how a launch is confined (the
//! `Confinement` says), nor run anything in the spawner but this loop.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::unix::PreparedRuleset;
use super::{CommonRules, Confinement, ProcessSpec};
use crate::containment::{PathAccess, PathRule};

/// `argv[0]` of the spawner process.
const SPAWNER_ARG0: &str = "adaptor-spawner";
/// Environment variable naming the spawner's socket descriptor (with [`SPAWNER_ARG0`]).
const SPAWNER_FD_ENV: &str = "AGENT_ADAPTOR_SPAWNER_FD";
/// The spawner's socket descriptor number.
const SPAWNER_SOCKET_FD: RawFd = 3;
/// Largest frame either side accepts (a launch's argv and environment are bounded by the
/// kernel's 2 MiB `ARG_MAX`; JSON encodes bytes of paths and environment as numbers).
const MAX_FRAME: usize = 16 << 20;

/// Set by the hook in every process this crate is linked into: proof that
/// `/proc/self/exe`, started as the spawner, runs [`serve`] rather than the program's `main`.
static HOOK_RAN: AtomicBool = AtomicBool::new(false);

/// Runs before `main` in every executable that links this crate. In an ordinary start it
/// only records that it ran; started as the spawner (`argv[0]` and the descriptor variable
/// both set), it serves on the descriptor and exits without returning to `main`. glibc only:
/// it passes `argc` and `argv` to `.init_array` functions (musl passes nothing, so there the
/// hook is left out and the serving loop runs on a host thread).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[used]
#[unsafe(link_section = ".init_array")]
static SPAWNER_HOOK: extern "C" fn(libc::c_int, *const *const libc::c_char) = spawner_hook;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" fn spawner_hook(argc: libc::c_int, argv: *const *const libc::c_char) {
    HOOK_RAN.store(true, Ordering::Relaxed);
    if argc < 1 || argv.is_null() {
        return;
    }
    // SAFETY: glibc passes the program's argv to `.init_array` functions; argv[0] is a
    // NUL-terminated string when argc >= 1.
    let arg0 = unsafe { std::ffi::CStr::from_ptr(*argv) };
    if arg0.to_bytes() != SPAWNER_ARG0.as_bytes() {
        return;
    }
    let Some(fd) = std::env::var_os(SPAWNER_FD_ENV)
        .and_then(|v| v.to_str().and_then(|s| s.parse::<RawFd>().ok()))
    else {
        return;
    };
    become_spawner(fd)
}

/// The spawner's life once its socket is descriptor `fd` and nothing else of the host's is
/// open (an executed spawner from the hook, a forked one from [`serve_forked`]): named,
/// the socket close-on-exec again, serve, exit without returning into the program.
#[cfg(target_os = "linux")]
fn become_spawner(fd: RawFd) -> ! {
    // Named for `ps` and `/proc/<pid>/comm` (otherwise `exe`, from `/proc/self/exe`).
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"adaptor-spawner".as_ptr(), 0, 0, 0) };
    // SAFETY: the host passed this descriptor (its end of the pair) and nothing else owns it.
    let socket = unsafe { UnixStream::from_raw_fd(fd) };
    let code = match set_cloexec(fd).and_then(|()| serve(socket)) {
        Ok(()) => 0,
        Err(_) => 1,
    };
    // SAFETY: ends the spawner without running the program's `main` or its destructors.
    unsafe { libc::_exit(code) }
}

/// Make `fd` (at 3 or above) the spawner's socket as [`SPAWNER_SOCKET_FD`], inheritable,
/// and close every descriptor above it: what the host left inheritable must not live on in
/// the spawner (a pipe kept open there never reaches EOF). Async-signal-safe (it runs
/// between fork and exec).
///
/// # Safety
/// Only in a freshly forked child that owns `fd`.
#[cfg(target_os = "linux")]
unsafe fn keep_only_socket(fd: RawFd) -> io::Result<()> {
    // SAFETY: plain system calls on the child's own descriptors (dup2 clears close-on-exec).
    unsafe {
        let kept = if fd == SPAWNER_SOCKET_FD {
            libc::fcntl(fd, libc::F_SETFD, 0)
        } else {
            libc::dup2(fd, SPAWNER_SOCKET_FD)
        };
        if kept < 0 {
            return Err(io::Error::last_os_error());
        }
        libc::syscall(
            libc::SYS_close_range,
            (SPAWNER_SOCKET_FD + 1) as u32,
            u32::MAX,
            0u32,
        );
    }
    Ok(())
}

fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl(2) on a descriptor this process owns.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What the host sends the spawner.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ToSpawner {
    /// Start a process: answered with [`Reply::Spawned`] or [`Reply::Failed`].
    Launch(Request),
    /// Register common rule set `id` (see [`CommonRules`]): sent once per connection,
    /// before the first launch or hint that names it.
    Common { id: u64, rules: Vec<WireRule> },
    /// A launch that names common set `id` is expected soon: build its Landlock ruleset
    /// now, unless one is ready and fresh (see [`CommonSets`]).
    Expect { id: u64 },
}

/// One launch, as the host sends it.
#[derive(Debug, Serialize, Deserialize)]
struct Request {
    /// Chosen by the host; the reply carries it back.
    id: u64,
    spec: WireSpec,
}

/// A [`PathRule`] on the wire: the path as bytes, its access, why.
type WireRule = (OsString, PathAccess, String);

fn wire_rules(rules: &[PathRule]) -> Vec<WireRule> {
    rules
        .iter()
        .map(|r| (r.path.clone().into_os_string(), r.access, r.why.clone()))
        .collect()
}

fn rules_from_wire(rules: Vec<WireRule>) -> Vec<PathRule> {
    rules
        .into_iter()
        .map(|(path, access, why)| PathRule {
            path: PathBuf::from(path),
            access,
            why,
        })
        .collect()
}

/// A [`ProcessSpec`] with every path and environment entry as bytes (JSON strings cannot
/// hold the non-UTF-8 paths and values Unix allows).
#[derive(Debug, Serialize, Deserialize)]
struct WireSpec {
    program: OsString,
    args: Vec<String>,
    env: Vec<(OsString, OsString)>,
    cwd: OsString,
    parent_death_signal: bool,
    /// The common rule set the launch's rules begin with (registered before), if any;
    /// `rules` then holds only those after it.
    common: Option<u64>,
    rules: Vec<WireRule>,
    hidden: Vec<OsString>,
    create: Vec<OsString>,
    landlock: bool,
    pid_namespace: bool,
    grace_ms: u64,
}

impl WireSpec {
    /// The spec on the wire, and the common rule set it names (its rules are those the
    /// spec's begin with: checked here, so a launch never loses a rule to a set it does not
    /// begin with).
    fn new(spec: &ProcessSpec) -> (WireSpec, Option<CommonRules>) {
        let c = &spec.confinement;
        let common = c
            .common
            .filter(|common| c.landlock && c.rules.starts_with(common.rules()));
        let own = common.map_or(0, |common| common.rules().len());
        let wire = WireSpec {
            program: spec.program.clone().into_os_string(),
            args: spec.args.clone(),
            env: spec.env.clone(),
            cwd: spec.cwd.clone().into_os_string(),
            parent_death_signal: spec.parent_death_signal,
            common: common.map(|common| common.id()),
            rules: wire_rules(&c.rules[own..]),
            hidden: c
                .hidden
                .iter()
                .map(|p| p.clone().into_os_string())
                .collect(),
            create: c
                .create
                .iter()
                .map(|p| p.clone().into_os_string())
                .collect(),
            landlock: c.landlock,
            pid_namespace: c.pid_namespace,
            grace_ms: c.grace.as_millis().min(u128::from(u64::MAX)) as u64,
        };
        (wire, common)
    }

    /// The spec the spawner starts: its rules are the launch's own (the common set's, which
    /// it names in [`common`](Self::common), are added from the spawner's copy).
    fn into_spec(self) -> ProcessSpec {
        ProcessSpec {
            program: PathBuf::from(self.program),
            args: self.args,
            env: self.env,
            cwd: PathBuf::from(self.cwd),
            parent_death_signal: self.parent_death_signal,
            confinement: Confinement {
                rules: rules_from_wire(self.rules),
                hidden: self.hidden.into_iter().map(PathBuf::from).collect(),
                create: self.create.into_iter().map(PathBuf::from).collect(),
                landlock: self.landlock,
                pid_namespace: self.pid_namespace,
                grace: Duration::from_millis(self.grace_ms),
                common: None,
            },
        }
    }
}

/// What the spawner tells the host.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Reply {
    /// Request `id` started as `pid` (the leader of its own process group); its stdin,
    /// stdout and stderr travel with this frame, in that order.
    Spawned { id: u64, pid: u32 },
    /// Request `id` could not be started.
    Failed {
        id: u64,
        /// The OS error number, when the failure was one.
        errno: Option<i32>,
        message: String,
    },
    /// Process `pid` ended (see [`Exit`]): once when it is reaped; under a PID namespace
    /// also before that, as soon as its reaper writes the provider's status.
    Exited { pid: u32, exit: Exit },
}

/// How a launch ended, as the spawner reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Exit {
    /// The raw wait status: the provider's, as its reaper wrote it, or that of the
    /// spawner's child itself (no namespace, or a reaper that wrote nothing).
    pub status: i32,
    /// Reported from the reaper's status pipe before the reaper itself was reaped: every
    /// process of the launch's PID namespace has ended and been reaped, and the reaper,
    /// the leader of the launch's process group, is exiting. Its teardown (its memory and
    /// namespaces, about 0.2 ms) can then run beside the host's work on the result; the
    /// same exit follows with `false` once the reaper is reaped.
    pub reaper_exiting: bool,
}

/// Write one frame (and `fds`, attached to its first byte).
fn send_frame(socket: &UnixStream, body: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(body);
    let mut sent = send_with_fds(socket.as_raw_fd(), &frame, fds)?;
    while sent < frame.len() {
        sent += send_with_fds(socket.as_raw_fd(), &frame[sent..], &[])?;
    }
    Ok(())
}

/// One `sendmsg` (with `SCM_RIGHTS` when `fds` is not empty; never raising SIGPIPE: the
/// spawner runs before the standard library ignores it); returns how many bytes went.
fn send_with_fds(socket: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    let payload = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE only computes a size.
    let space = if fds.is_empty() {
        0
    } else {
        unsafe { libc::CMSG_SPACE(payload as u32) as usize }
    };
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below outlives the sendmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
    }
    // SAFETY: the control buffer has room for one header and `fds` (CMSG_SPACE).
    if !fds.is_empty() {
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(payload as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast(), fds.len());
        }
    }
    loop {
        // SAFETY: msg points at live buffers (above).
        let n = unsafe { libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads frames and the descriptors that travel with them from a stream socket.
struct FrameReader {
    socket: UnixStream,
    bytes: Vec<u8>,
    fds: VecDeque<OwnedFd>,
}

impl FrameReader {
    fn new(socket: UnixStream) -> FrameReader {
        FrameReader {
            socket,
            bytes: Vec::new(),
            fds: VecDeque::new(),
        }
    }

    /// The next frame's body; `None` at end of stream.
    fn next(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            if self.bytes.len() >= 4 {
                let len = u32::from_le_bytes(self.bytes[..4].try_into().expect("4 bytes")) as usize;
                if len > MAX_FRAME {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("a spawner frame of {len} bytes exceeds {MAX_FRAME}"),
                    ));
                }
                if self.bytes.len() >= 4 + len {
                    let body = self.bytes[4..4 + len].to_vec();
                    self.bytes.drain(..4 + len);
                    return Ok(Some(body));
                }
            }
            if self.receive()? == 0 {
                return if self.bytes.is_empty() {
                    Ok(None)
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the spawner socket closed inside a frame",
                    ))
                };
            }
        }
    }

    /// One `recvmsg`: bytes to the buffer, descriptors (close-on-exec) to the queue. The
    /// bytes land in the buffer's spare capacity (kept between calls), not in a zeroed
    /// array on the stack: 64 KiB zeroed there touched 16 fresh stack pages at a reader's
    /// first call, and in the spawner every call after a fork copied them.
    fn receive(&mut self) -> io::Result<usize> {
        const CHUNK: usize = 64 * 1024;
        self.bytes.reserve(CHUNK);
        let spare = self.bytes.spare_capacity_mut();
        let mut control = [0u64; 32];
        let mut iov = libc::iovec {
            iov_base: spare.as_mut_ptr().cast(),
            iov_len: spare.len(),
        };
        // SAFETY: msghdr is plain data; the pointers set below outlive the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let n = loop {
            // SAFETY: msg points at live buffers (above).
            let n =
                unsafe { libc::recvmsg(self.socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        // SAFETY: walking the control messages the kernel wrote into `control`.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                    let len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    for i in 0..len / std::mem::size_of::<RawFd>() {
                        let fd = std::ptr::read_unaligned(data.add(i));
                        self.fds.push_back(OwnedFd::from_raw_fd(fd));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::other(
                "descriptors from the spawner were truncated",
            ));
        }
        // SAFETY: recvmsg wrote `n` bytes (at most `iov_len`) at the start of the spare
        // capacity.
        unsafe { self.bytes.set_len(self.bytes.len() + n) };
        Ok(n)
    }
}

// ---------------------------------------------------------------------------------------
// The serving side: runs in the spawner process (or on a host thread, as the fallback).
// ---------------------------------------------------------------------------------------

/// Serve launch requests on `socket` until the host's end closes; then kill every process
/// group started here that is still alive, reap them and return.
fn serve(socket: UnixStream) -> io::Result<()> {
    const SOCKET_KEY: u64 = u64::MAX;
    // Added to a pid: the key of that child's status pipe (a pidfd's key is the bare pid).
    const STATUS_KEY: u64 = 1 << 32;
    // SAFETY: epoll_create1 returns a new descriptor or -1.
    let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if epoll < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned here.
    let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
    let watch = |fd: RawFd, key: u64| -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: key,
        };
        // SAFETY: registering a live descriptor with our epoll instance.
        if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    watch(socket.as_raw_fd(), SOCKET_KEY)?;
    // Live children, by pid (see `Child`).
    let mut children: HashMap<u32, Child> = HashMap::new();
    let mut commons = CommonSets::default();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 64];
    let mut reader = socket.try_clone()?;
    let exited = |pid: u32, status: i32, reaper_exiting: bool| {
        let exit = Exit {
            status,
            reaper_exiting,
        };
        send_frame(&socket, &encode(&Reply::Exited { pid, exit }), &[])
    };
    let result = 'serve: loop {
        // Woken to drop a prepared ruleset once it is stale, if nothing comes first.
        let timeout = commons.next_expiry().map_or(-1, |left| {
            i32::try_from(left.as_millis().saturating_add(1)).unwrap_or(i32::MAX)
        });
        // SAFETY: `events` has room for its length.
        let n = unsafe {
            libc::epoll_wait(
                epoll.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                timeout,
            )
        };
        commons.drop_stale();
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break Err(e);
        }
        for event in &events[..n as usize] {
            let key = event.u64;
            if key == SOCKET_KEY {
                let request = match read_message(&mut reader) {
                    Ok(Some(ToSpawner::Launch(r))) => r,
                    Ok(Some(ToSpawner::Common { id, rules })) => {
                        commons.register(id, rules_from_wire(rules));
                        continue;
                    }
                    Ok(Some(ToSpawner::Expect { id })) => {
                        commons.prepare(id);
                        continue;
                    }
                    Ok(None) => break 'serve Ok(()),
                    Err(e) => break 'serve Err(e),
                };
                let id = request.id;
                let common = request.spec.common;
                let spec = request.spec.into_spec();
                // A panic loses at most the set's prepared ruleset (taken out first).
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let base = match common {
                        Some(set) => commons.take(set)?,
                        None => None,
                    };
                    super::unix::start(&spec, base)
                }))
                .unwrap_or_else(|_| Err(io::Error::other("starting the process panicked")));
                let sent = match outcome {
                    Ok(super::unix::Started { pid, stdio, status }) => match pidfd_open(pid) {
                        Ok(pidfd) => {
                            // The status pipe first: when both are ready (a provider that
                            // has already ended), its event comes first, as it does when the
                            // reaper writes the status before it exits.
                            let watched = match &status {
                                Some(pipe) => watch(pipe.as_raw_fd(), STATUS_KEY | u64::from(pid)),
                                None => Ok(()),
                            }
                            .and_then(|()| watch(pidfd.as_raw_fd(), u64::from(pid)));
                            let body = encode(&Reply::Spawned { id, pid });
                            let fds = stdio.each_ref().map(|fd| fd.as_raw_fd());
                            let sent = send_frame(&socket, &body, &fds);
                            drop(stdio);
                            if watched.is_ok() {
                                children.insert(
                                    pid,
                                    Child {
                                        _pidfd: pidfd,
                                        status,
                                        reported: None,
                                    },
                                );
                                sent
                            } else {
                                // Unwatched, its exit would never be reported: end it now.
                                kill_group(pid);
                                let status =
                                    super::unix::reported_status(reap(pid), status.as_ref());
                                sent.and_then(|()| exited(pid, status, false))
                            }
                        }
                        Err(e) => {
                            kill_group(pid);
                            reap(pid);
                            send_failure(&socket, id, &e)
                        }
                    },
                    Err(e) => send_failure(&socket, id, &e),
                };
                if let Err(e) = sent {
                    break 'serve Err(e);
                }
            } else if key & STATUS_KEY != 0 {
                // A reaper's status pipe: the provider's status, written once the namespace
                // is empty, is reported at once; the reaper is reaped when its pidfd says so.
                let pid = key as u32;
                let Some(child) = children.get_mut(&pid) else {
                    continue;
                };
                let Some(pipe) = &child.status else {
                    continue;
                };
                let read = super::unix::read_provider_status(pipe);
                if matches!(&read, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
                    continue;
                }
                // Out of the epoll set before it closes (closing alone would not remove it
                // while another process still held a copy of the read end).
                // SAFETY: removing a registered descriptor from our epoll instance.
                unsafe {
                    libc::epoll_ctl(
                        epoll.as_raw_fd(),
                        libc::EPOLL_CTL_DEL,
                        pipe.as_raw_fd(),
                        std::ptr::null_mut(),
                    )
                };
                child.status = None;
                if let Ok(Some(status)) = read {
                    child.reported = Some(status);
                    if let Err(e) = exited(pid, status, true) {
                        break 'serve Err(e);
                    }
                }
                // Otherwise the reaper ended without a status (it was killed): its pidfd
                // reports its own.
            } else {
                let pid = key as u32;
                let Some(child) = children.remove(&pid) else {
                    continue;
                };
                let own = reap(pid);
                let status = child
                    .reported
                    .unwrap_or_else(|| super::unix::reported_status(own, child.status.as_ref()));
                if let Err(e) = exited(pid, status, false) {
                    break 'serve Err(e);
                }
            }
        }
    };
    // The host is gone (or its socket broke): nothing started here may outlive it.
    for &pid in children.keys() {
        kill_group(pid);
    }
    for &pid in children.keys() {
        reap(pid);
    }
    result
}

/// A process the spawner started and has not reaped yet.
struct Child {
    /// Readable once the process has ended (held open for the epoll set).
    _pidfd: OwnedFd,
    /// Under a PID namespace, the pipe its reaper writes the provider's status into, until
    /// it has been read (or found empty at its end).
    status: Option<OwnedFd>,
    /// The provider's status, once reported from that pipe (reported again, as reaped,
    /// when the reaper is).
    reported: Option<i32>,
}

/// The common rule sets the host registered ([`ToSpawner::Common`]), each with the Landlock
/// ruleset built from it ahead of a launch when the host expects one
/// ([`ToSpawner::Expect`]). A launch that names a set takes its ruleset if it is fresh (see
/// `PreparedRuleset`), else builds one then, and adds its own rules to it; a ruleset is
/// used by one launch only. One left unused is dropped once stale (the serving loop wakes
/// for it), so no open path is held longer than that.
#[derive(Default)]
struct CommonSets {
    sets: HashMap<u64, CommonSet>,
}

struct CommonSet {
    rules: Vec<PathRule>,
    /// Built ahead of a launch, not used yet.
    prepared: Option<PreparedRuleset>,
}

impl CommonSets {
    fn register(&mut self, id: u64, rules: Vec<PathRule>) {
        self.sets.insert(
            id,
            CommonSet {
                rules,
                prepared: None,
            },
        );
    }

    /// Build set `id`'s ruleset now unless a fresh one waits. A failure leaves none: the
    /// launch then builds its own, and reports what fails.
    fn prepare(&mut self, id: u64) {
        let Some(set) = self.sets.get_mut(&id) else {
            return;
        };
        if set.prepared.as_ref().is_some_and(PreparedRuleset::fresh) {
            return;
        }
        set.prepared = PreparedRuleset::build(&set.rules).ok();
    }

    /// The ruleset a launch naming set `id` starts from: the prepared one if fresh, else
    /// one built now. A set never registered is the host's error, and fails the launch.
    fn take(&mut self, id: u64) -> io::Result<Option<PreparedRuleset>> {
        let set = self.sets.get_mut(&id).ok_or_else(|| {
            io::Error::other(format!(
                "the launch names common rule set {id}, which the host never registered"
            ))
        })?;
        match set.prepared.take().filter(PreparedRuleset::fresh) {
            Some(prepared) => Ok(Some(prepared)),
            None => PreparedRuleset::build(&set.rules).map(Some),
        }
    }

    /// How long until the first prepared ruleset goes stale.
    fn next_expiry(&self) -> Option<Duration> {
        self.sets
            .values()
            .filter_map(|set| set.prepared.as_ref().map(PreparedRuleset::fresh_for))
            .min()
    }

    fn drop_stale(&mut self) {
        for set in self.sets.values_mut() {
            if set.prepared.as_ref().is_some_and(|p| !p.fresh()) {
                set.prepared = None;
            }
        }
    }
}

fn read_message(socket: &mut UnixStream) -> io::Result<Option<ToSpawner>> {
    let mut len = [0u8; 4];
    match socket.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a launch request of {len} bytes exceeds {MAX_FRAME}"),
        ));
    }
    let mut body = vec![0u8; len];
    socket.read_exact(&mut body)?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn send_failure(socket: &UnixStream, id: u64, e: &io::Error) -> io::Result<()> {
    let errno = e.raw_os_error();
    let reply = Reply::Failed {
        id,
        errno,
        // A bare OS error is rebuilt from its number; anything else keeps its message.
        message: if errno.is_some() {
            String::new()
        } else {
            e.to_string()
        },
    };
    send_frame(socket, &encode(&reply), &[])
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("spawner messages always encode")
}

fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open(2) returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0u32) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned here (pidfds are close-on-exec).
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// SIGKILL process group `pid` (each launch leads its own group); a group already gone is
/// not an error here.
fn kill_group(pid: u32) {
    let _ = super::unix::signal_group(pid as i32, super::Sig::Kill);
}

/// Wait for child `pid`; its raw wait status (that of SIGKILL if waiting failed).
fn reap(pid: u32) -> i32 {
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        if r >= 0 {
            return status;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return libc::SIGKILL;
        }
    }
}

// ---------------------------------------------------------------------------------------
// The host side.
// ---------------------------------------------------------------------------------------

/// A process the spawner started, as the host receives it.
pub(crate) struct Launched {
    /// Its pid (and process group id).
    pub pid: u32,
    /// Its stdin, stdout and stderr (the host's ends of the pipes).
    pub stdio: [OwnedFd; 3],
    /// Becomes `Some` once the spawner reports its end; closed without a value if the
    /// spawner ended first.
    pub exit: tokio::sync::watch::Receiver<Option<Exit>>,
    /// When the reader thread read the report: the program was running by then (the
    /// spawner reports a launch once its provider has exec'd). Taken there, not where the
    /// launch is awaited: a CLI that takes every CPU as it starts (Claude Code does) can
    /// keep a busy caller from that moment for milliseconds.
    pub at: std::time::Instant,
}

type LaunchReply = tokio::sync::oneshot::Sender<io::Result<Launched>>;

/// One launch on its way to the spawner.
struct Outgoing {
    spec: WireSpec,
    /// The common rule set `spec` names, registered with the spawner before it.
    common: Option<CommonRules>,
    reply: LaunchReply,
}

impl Outgoing {
    fn new(spec: &ProcessSpec, reply: LaunchReply) -> Outgoing {
        let (spec, common) = WireSpec::new(spec);
        Outgoing {
            spec,
            common,
            reply,
        }
    }
}

/// Start `spec` through the host's spawner (started on first use).
pub(crate) async fn launch(spec: &ProcessSpec) -> io::Result<Launched> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let gone = || io::Error::other("the host's spawner thread is gone");
    client()
        .send(Job::Launch(Box::new(Outgoing::new(spec, reply))))
        .map_err(|_| gone())?;
    answer.await.unwrap_or_else(|_| Err(gone()))
}

/// Have the spawner build `common`'s ruleset now (see `super::expect_launch`).
pub(crate) fn expect_launch(common: CommonRules) {
    let _ = client().send(Job::Expect(common));
}

/// Start the spawner now, in the background, so the first launch does not wait for it;
/// then, on the spawner thread, call `common` (the caller's once-per-process work for
/// launches, which returns the rule set they start from), have the spawner build that set's
/// ruleset, and probe the kernel, all off the first launch's path.
pub(crate) fn start_early(common: fn() -> Option<CommonRules>) {
    let _ = client().send(Job::Start { common });
}

/// What the spawner thread is asked to do.
enum Job {
    /// Make sure a spawner runs, have it prepare the common set `common` decides, then
    /// probe the kernel.
    Start { common: fn() -> Option<CommonRules> },
    /// Start a process.
    Launch(Box<Outgoing>),
    /// Prepare a common rule set's ruleset ahead of a launch.
    Expect(CommonRules),
}

/// The host's spawner thread: it starts the spawner process (so the parent-death signal
/// refers to a thread that lives as long as the host) and writes every request to it.
fn client() -> &'static mpsc::Sender<Job> {
    static CLIENT: std::sync::OnceLock<mpsc::Sender<Job>> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        let (queue, requests) = mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("adaptor-spawner".into())
            .spawn(move || {
                let mut connection: Option<Connection> = None;
                let mut next_id = 0u64;
                for job in requests {
                    let live = connection.as_ref().is_some_and(|c| c.alive());
                    if !live {
                        connection = match Connection::open() {
                            Ok(c) => Some(c),
                            Err(e) => {
                                if let Job::Launch(o) = job {
                                    let _ = o.reply.send(Err(io::Error::new(
                                        e.kind(),
                                        format!("could not start the host's spawner: {e}"),
                                    )));
                                }
                                continue;
                            }
                        };
                    }
                    let outgoing = match job {
                        Job::Launch(outgoing) => *outgoing,
                        Job::Start { common } => {
                            // Started early: the launches' common ruleset first, then the
                            // probe of what the kernel offers (a namespace probe costs about
                            // a millisecond), off the first run's path. A root host knows
                            // its common set without the probe (`super::common_form`), so
                            // its spawner builds that ruleset while the probe runs; the other
                            // way round the build ran across the first run's own launch path,
                            // the two competing for the CPUs.
                            if let Some(common) = common() {
                                expect(connection.as_ref(), common);
                            }
                            super::kernel_support();
                            continue;
                        }
                        Job::Expect(common) => {
                            expect(connection.as_ref(), common);
                            continue;
                        }
                    };
                    let Some(conn) = connection.as_ref() else {
                        continue;
                    };
                    if outgoing.reply.is_closed() {
                        continue; // Its caller stopped waiting: nothing to start.
                    }
                    next_id += 1;
                    conn.send(next_id, outgoing);
                }
            });
        if let Err(e) = started {
            // Launches then fail with "the spawner thread is gone" (their queue is closed).
            tracing::error!(error = %e, "could not start the host's spawner thread");
        }
        queue
    })
}

/// Ask the spawner behind `connection` to build `common`'s ruleset ahead of a launch. A
/// hint: a spawner that cannot be reached fails the launch itself, which reports it.
fn expect(connection: Option<&Connection>, common: CommonRules) {
    if let Some(conn) = connection
        && let Err(e) = conn
            .register(common)
            .and_then(|()| conn.write(&ToSpawner::Expect { id: common.id() }))
    {
        tracing::debug!(error = %e, "could not ask the spawner to prepare a launch");
    }
}

/// What the reader thread shares with the writer.
#[derive(Default)]
struct Shared {
    /// Launches sent and not answered yet, by request id.
    pending: HashMap<u64, LaunchReply>,
    /// Exit reporters of the processes started and not yet reaped, by pid.
    exits: HashMap<u32, tokio::sync::watch::Sender<Option<Exit>>>,
    /// The reader saw the spawner end.
    closed: bool,
}

/// The host's end of one spawner (process or thread).
struct Connection {
    socket: UnixStream,
    shared: Arc<Mutex<Shared>>,
    /// The common rule sets this spawner has been sent, by id.
    registered: Mutex<HashSet<u64>>,
}

impl Connection {
    /// Start a spawner: the executable itself when the hook is linked into it, else the
    /// serving loop on a thread of this process.
    fn open() -> io::Result<Connection> {
        Connection::process().or_else(|why| {
            static LOGGED: std::sync::Once = std::sync::Once::new();
            LOGGED.call_once(|| {
                tracing::warn!(
                    reason = %why,
                    "providers are forked from the host itself (no spawner process)"
                )
            });
            Connection::in_process()
        })
    }

    /// A spawner process: the one [`fork_at_start`] left, while it lives, else this
    /// executable started afresh.
    fn process() -> io::Result<Connection> {
        if let Some(forked) = take_forked() {
            return Connection::with_reader(forked.socket, Some(SpawnerChild::Forked(forked.pid)));
        }
        let (host_end, spawner_end) = UnixStream::pair()?;
        let child = start_process(&spawner_end)?;
        drop(spawner_end);
        Connection::with_reader(host_end, Some(SpawnerChild::Executed(child)))
    }

    /// The serving loop on a thread of this process (the thread lives as long as the
    /// connection: the parent-death signal of what it forks refers to it).
    fn in_process() -> io::Result<Connection> {
        let (host_end, spawner_end) = UnixStream::pair()?;
        std::thread::Builder::new()
            .name("adaptor-spawner-loop".into())
            .spawn(move || {
                if let Err(e) = serve(spawner_end) {
                    tracing::error!(error = %e, "the in-process spawner loop failed");
                }
            })?;
        Connection::with_reader(host_end, None)
    }

    fn with_reader(socket: UnixStream, child: Option<SpawnerChild>) -> io::Result<Connection> {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let reader = FrameReader::new(socket.try_clone()?);
        let for_reader = shared.clone();
        std::thread::Builder::new()
            .name("adaptor-spawner-reader".into())
            .spawn(move || read_replies(reader, &for_reader, child))?;
        Ok(Connection {
            socket,
            shared,
            registered: Mutex::default(),
        })
    }

    fn alive(&self) -> bool {
        !lock(&self.shared).closed
    }

    /// Register and write one request (after the common rule set it names, the first
    /// time); a write failure answers it.
    fn send(&self, id: u64, outgoing: Outgoing) {
        let message = ToSpawner::Launch(Request {
            id,
            spec: outgoing.spec,
        });
        lock(&self.shared).pending.insert(id, outgoing.reply);
        let sent = match outgoing.common {
            Some(common) => self.register(common),
            None => Ok(()),
        }
        .and_then(|()| self.write(&message));
        if let Err(e) = sent
            && let Some(reply) = lock(&self.shared).pending.remove(&id)
        {
            let _ = reply.send(Err(io::Error::new(
                e.kind(),
                format!("could not reach the host's spawner: {e}"),
            )));
        }
    }

    /// Send `common`'s rules unless this spawner has them.
    fn register(&self, common: CommonRules) -> io::Result<()> {
        let mut registered = self
            .registered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if registered.contains(&common.id()) {
            return Ok(());
        }
        self.write(&ToSpawner::Common {
            id: common.id(),
            rules: wire_rules(common.rules()),
        })?;
        registered.insert(common.id());
        Ok(())
    }

    fn write(&self, message: &ToSpawner) -> io::Result<()> {
        send_frame(&self.socket, &encode(message), &[])
    }
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Execute `/proc/self/exe` as the spawner, with `socket` as its descriptor. Fails when this
/// executable does not carry the hook (then it would run the program's `main`).
fn start_process(socket: &UnixStream) -> io::Result<std::process::Child> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        if !HOOK_RAN.load(Ordering::Relaxed) {
            return Err(io::Error::other(
                "this executable does not carry the spawner hook",
            ));
        }
        // At 3 or above (a host started with stdio closed may have it at 0..2, where the
        // child's /dev/null would replace it).
        // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor or -1.
        let high = unsafe { libc::fcntl(socket.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
        if high < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor owned here (closed when this function returns).
        let high = unsafe { OwnedFd::from_raw_fd(high) };
        let fd = high.as_raw_fd();
        let host = std::process::id() as libc::pid_t;
        let mut command = std::process::Command::new("/proc/self/exe");
        command
            .arg0(SPAWNER_ARG0)
            .env_clear()
            .env(SPAWNER_FD_ENV, SPAWNER_SOCKET_FD.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            // Its own group: a Ctrl-C meant for the host must not kill every provider.
            .process_group(0);
        // SAFETY: only async-signal-safe calls (prctl, getppid, fcntl, _exit) between fork
        // and exec.
        unsafe {
            command.pre_exec(move || {
                super::unix::die_with_parent(host)?;
                keep_only_socket(fd)
            });
        }
        command.spawn()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = socket;
        Err(io::Error::other("a spawner process is only used on Linux"))
    }
}

/// The reader thread: route each reply to its launch or exit reporter until the spawner
/// ends, then fail what waits and reap the spawner process.
fn read_replies(mut reader: FrameReader, shared: &Mutex<Shared>, child: Option<SpawnerChild>) {
    let ended = loop {
        let body = match reader.next() {
            Ok(Some(body)) => body,
            Ok(None) => break "the spawner ended".to_owned(),
            Err(e) => break format!("reading from the spawner failed: {e}"),
        };
        let read_at = std::time::Instant::now();
        let reply: Reply = match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => break format!("the spawner sent an unreadable reply: {e}"),
        };
        match reply {
            Reply::Spawned { id, pid } => {
                let stdio = match (
                    reader.fds.pop_front(),
                    reader.fds.pop_front(),
                    reader.fds.pop_front(),
                ) {
                    (Some(i), Some(o), Some(e)) => [i, o, e],
                    _ => {
                        kill_group(pid);
                        break format!("the spawner sent process {pid} without its stdio");
                    }
                };
                let (exit_tx, exit) = tokio::sync::watch::channel(None);
                let reply = {
                    let mut shared = lock(shared);
                    shared.exits.insert(pid, exit_tx);
                    shared.pending.remove(&id)
                };
                let launched = Launched {
                    pid,
                    stdio,
                    exit,
                    at: read_at,
                };
                if reply.is_none_or(|r| r.send(Ok(launched)).is_err()) {
                    // Nobody waits for it any more: it must not run unattended.
                    kill_group(pid);
                }
            }
            Reply::Failed { id, errno, message } => {
                let error = match errno {
                    Some(n) => io::Error::from_raw_os_error(n),
                    None => io::Error::other(message),
                };
                if let Some(reply) = lock(shared).pending.remove(&id) {
                    let _ = reply.send(Err(error));
                }
            }
            Reply::Exited { pid, exit } => {
                let mut shared = lock(shared);
                let reporter = if exit.reaper_exiting {
                    shared.exits.get(&pid).cloned()
                } else {
                    shared.exits.remove(&pid)
                };
                if let Some(reporter) = reporter {
                    let _ = reporter.send(Some(exit));
                }
            }
        }
    };
    let (pending, exits) = {
        let mut shared = lock(shared);
        shared.closed = true;
        (
            std::mem::take(&mut shared.pending),
            std::mem::take(&mut shared.exits),
        )
    };
    if !pending.is_empty() || !exits.is_empty() {
        tracing::error!(reason = %ended, running = exits.len(), "the host's spawner ended; its processes were killed with it");
    }
    for (_, reply) in pending {
        let _ = reply.send(Err(io::Error::other(ended.clone())));
    }
    // Dropping the exit reporters tells every waiter the spawner ended first.
    drop(exits);
    if let Some(child) = child
        && let Err(e) = child.wait()
    {
        tracing::warn!(error = %e, "could not reap the spawner process");
    }
}

/// The spawner process a connection talks to, reaped when it ends.
enum SpawnerChild {
    /// This executable started afresh ([`start_process`]).
    Executed(std::process::Child),
    /// Forked at start-up ([`fork_at_start`]).
    Forked(u32),
}

impl SpawnerChild {
    fn wait(self) -> io::Result<()> {
        match self {
            SpawnerChild::Executed(mut child) => child.wait().map(drop),
            SpawnerChild::Forked(pid) => loop {
                let mut status = 0;
                // SAFETY: waiting for this process's own child.
                if unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) } >= 0 {
                    return Ok(());
                }
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            },
        }
    }
}

// ---------------------------------------------------------------------------------------
// A spawner forked at start-up (see `crate::fork_spawner`).
// ---------------------------------------------------------------------------------------

/// A spawner [`fork_at_start`] started, until the first connection takes it.
struct Forked {
    socket: UnixStream,
    pid: u32,
}

static FORKED: Mutex<Option<Forked>> = Mutex::new(None);

/// The forked spawner, if one waits and still lives (one that died is reaped and dropped:
/// the connection then starts one afresh).
fn take_forked() -> Option<Forked> {
    let forked = FORKED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take()?;
    let mut status = 0;
    // SAFETY: a non-blocking wait for this process's own child.
    let ended = unsafe { libc::waitpid(forked.pid as libc::pid_t, &mut status, libc::WNOHANG) };
    (ended == 0).then_some(forked)
}

/// The number of threads of this process (`/proc/self/stat`, field 20).
#[cfg(target_os = "linux")]
fn thread_count() -> io::Result<usize> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    stat.rsplit_once(')')
        .and_then(|(_, fields)| fields.split_whitespace().nth(17))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| io::Error::other("/proc/self/stat has no thread count"))
}

/// Fork the spawner from this process now (see `crate::fork_spawner`, which
/// documents the conditions; they are checked here).
#[cfg(target_os = "linux")]
pub(crate) fn fork_at_start() -> Result<(), crate::error::SpawnerForkError> {
    use crate::error::SpawnerForkError;
    // SAFETY: getpid(2) and gettid(2) have no preconditions.
    let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    if pid != tid {
        return Err(SpawnerForkError::NotMainThread);
    }
    // With one thread (this one), no other can start one before the fork below.
    let threads = thread_count().map_err(SpawnerForkError::Io)?;
    if threads != 1 {
        return Err(SpawnerForkError::Threads(threads));
    }
    let mut slot = FORKED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if slot.is_some() {
        return Err(SpawnerForkError::AlreadyForked);
    }
    let (host_end, spawner_end) = UnixStream::pair().map_err(SpawnerForkError::Io)?;
    // SAFETY: this process has one thread (checked above), so the child starts with every
    // lock free and may allocate; it never returns from `serve_forked`.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(SpawnerForkError::Io(io::Error::last_os_error()));
    }
    if child == 0 {
        drop(host_end);
        serve_forked(spawner_end, pid);
    }
    drop(spawner_end);
    *slot = Some(Forked {
        socket: host_end,
        pid: child as u32,
    });
    Ok(())
}

/// The forked spawner's life: set up as [`start_process`] sets up an executed one (its own
/// process group, the parent-death signal, stdio on `/dev/null`, the socket as descriptor 3
/// and no other, its environment cleared, SIGPIPE at its default so the providers start
/// with it), then the same [`become_spawner`].
#[cfg(target_os = "linux")]
fn serve_forked(socket: UnixStream, host: libc::pid_t) -> ! {
    // Above stdio first (a host started with stdio closed may have it at 0..2, where
    // /dev/null goes below), as `start_process` does.
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor or -1.
    let fd = unsafe { libc::fcntl(socket.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    drop(socket);
    // What `start_process` asks of `Command` (stdio on /dev/null, its own group) and of
    // its pre-exec step; what exec would reset (the environment, SIGPIPE, which std
    // ignores and providers would inherit).
    // SAFETY: plain system calls on this single-threaded child's own state.
    let setup = || unsafe {
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        super::unix::die_with_parent(host)?;
        if libc::setpgid(0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::clearenv();
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null < 0 {
            return Err(io::Error::last_os_error());
        }
        for stdio in 0..3 {
            if libc::dup2(null, stdio) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        keep_only_socket(fd)
    };
    if setup().is_err() {
        // SAFETY: ends the child without returning into the program.
        unsafe { libc::_exit(1) }
    }
    become_spawner(SPAWNER_SOCKET_FD)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::ffi::OsStringExt;
    use std::os::unix::process::ExitStatusExt;
    use std::time::Instant;

    use super::*;

    fn shell(script: &str) -> ProcessSpec {
        ProcessSpec {
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            env: vec![(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))],
            cwd: PathBuf::from("/"),
            parent_death_signal: true,
            confinement: Confinement {
                rules: Vec::new(),
                hidden: Vec::new(),
                create: Vec::new(),
                landlock: false,
                pid_namespace: false,
                grace: Duration::from_millis(100),
                common: None,
            },
        }
    }

    /// Frames come out whole and in order however the stream cuts them: one with a
    /// descriptor, one larger than a single receive, two in one write, and a frame the
    /// writer leaves unfinished, which ends the stream with an error rather than a frame.
    #[test]
    fn frames_arrive_whole_however_the_bytes_are_split() {
        let (writer, reader_end) = UnixStream::pair().unwrap();
        let (pipe_read, pipe_write) = std::io::pipe().unwrap();
        let large: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let sent = large.clone();
        let writing = std::thread::spawn(move || {
            send_frame(&writer, b"first", &[pipe_write.as_raw_fd()]).unwrap();
            send_frame(&writer, &sent, &[]).unwrap();
            let mut two = Vec::new();
            for body in [&b"second"[..], &b"third"[..]] {
                two.extend_from_slice(&(body.len() as u32).to_le_bytes());
                two.extend_from_slice(body);
            }
            (&writer).write_all(&two).unwrap();
            // A frame of 10 bytes of which only 3 are written.
            (&writer).write_all(&10u32.to_le_bytes()).unwrap();
            (&writer).write_all(b"cut").unwrap();
        });
        let mut reader = FrameReader::new(reader_end);
        assert_eq!(reader.next().unwrap().as_deref(), Some(&b"first"[..]));
        let passed = reader
            .fds
            .pop_front()
            .expect("the descriptor sent with the frame");
        // The descriptor is the pipe's write end: what goes into it comes out of the read end.
        std::fs::File::from(passed).write_all(b"x").unwrap();
        let mut byte = [0u8; 1];
        std::io::Read::read_exact(&mut &pipe_read, &mut byte).unwrap();
        assert_eq!(&byte, b"x");
        assert_eq!(reader.next().unwrap(), Some(large));
        assert_eq!(reader.next().unwrap().as_deref(), Some(&b"second"[..]));
        assert_eq!(reader.next().unwrap().as_deref(), Some(&b"third"[..]));
        writing.join().unwrap();
        let cut = reader.next().expect_err("the stream ends inside a frame");
        assert_eq!(cut.kind(), io::ErrorKind::UnexpectedEof);
    }

    async fn launch_on(conn: &Connection, id: u64, spec: &ProcessSpec) -> io::Result<Launched> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        conn.send(id, Outgoing::new(spec, reply));
        answer.await.expect("answered")
    }

    /// A launch of a program that does not exist fails with its OS error (not found).
    async fn refuses_a_missing_program(
        conn: &Connection,
        id: u64,
        mut spec: ProcessSpec,
        kind: &str,
    ) {
        spec.program = PathBuf::from("/nonexistent/provider");
        let err = launch_on(conn, id, &spec)
            .await
            .err()
            .expect("cannot start");
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{kind}: {err}");
    }

    /// The exit status the spawner reports for a launch.
    async fn reported_exit(
        exit: tokio::sync::watch::Receiver<Option<Exit>>,
    ) -> std::process::ExitStatus {
        std::process::ExitStatus::from_raw(reported(exit).await.status)
    }

    /// The exit the spawner reports for a launch.
    async fn reported(mut exit: tokio::sync::watch::Receiver<Option<Exit>>) -> Exit {
        let exit = *exit.wait_for(Option::is_some).await.unwrap();
        exit.expect("waited for an exit")
    }

    /// Both kinds of spawner start a process with its stdio, report its exit status once
    /// reaped, and report a program that cannot start as the OS error it was.
    #[tokio::test]
    async fn either_spawner_starts_reports_exits_and_failures() {
        for (kind, conn) in [
            (
                "process",
                Connection::process().expect("the hook is linked into tests"),
            ),
            ("in-process", Connection::in_process().unwrap()),
        ] {
            let launched = launch_on(
                &conn,
                1,
                &shell("read line; echo \"got $line\"; echo err >&2; exit 3"),
            )
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
            let (out, err) = talk(launched.stdio, b"ping\n");
            assert_eq!(
                (out.as_str(), err.as_str()),
                ("got ping\n", "err\n"),
                "{kind}"
            );
            let status = reported_exit(launched.exit).await;
            assert_eq!(status.code(), Some(3), "{kind}");

            refuses_a_missing_program(&conn, 2, shell(""), kind).await;
        }
    }

    /// A launch is timed when the reader thread reads the spawner's report, not when its
    /// caller gets round to awaiting it: a caller whose thread is kept busy after its program
    /// started (here blocked for 300 ms; a CLI that takes every CPU as it starts does this
    /// to a real host) still learns when the program started. Stamped where it is awaited,
    /// `at` would come after `awaited`.
    #[tokio::test]
    async fn a_launch_is_timed_when_its_report_is_read_not_when_it_is_awaited() {
        let dir = tempfile::tempdir().unwrap();
        for (kind, conn) in [
            (
                "process",
                Connection::process().expect("the hook is linked into tests"),
            ),
            ("in-process", Connection::in_process().unwrap()),
        ] {
            let marker = dir.path().join(kind);
            let (reply, answer) = tokio::sync::oneshot::channel();
            let script = format!("touch '{}'; cat >/dev/null", marker.display());
            conn.send(1, Outgoing::new(&shell(&script), reply));
            // The program has run by the time its marker exists; the report of its launch
            // was sent before that (once it exec'd). Block this thread meanwhile and on.
            let deadline = Instant::now() + Duration::from_secs(60);
            while !marker.exists() {
                assert!(Instant::now() < deadline, "{kind}: the program never ran");
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(300));
            let awaited = Instant::now();
            let launched = answer.await.expect("answered").expect("launched");
            assert!(
                launched.at < awaited,
                "{kind}: the launch was timed {:?} after it was awaited",
                launched.at - awaited
            );
            let [stdin, _stdout, _stderr] = launched.stdio;
            drop(stdin);
            let status = reported_exit(launched.exit).await;
            assert_eq!(status.code(), Some(0), "{kind}");
        }
    }

    /// Write `input` to a launched process's stdin, close it, and read its stdout and
    /// stderr to their ends.
    fn talk(stdio: [OwnedFd; 3], input: &[u8]) -> (String, String) {
        let [stdin, stdout, stderr] = stdio;
        let mut stdin = std::fs::File::from(stdin);
        stdin.write_all(input).unwrap();
        drop(stdin);
        let mut out = String::new();
        std::fs::File::from(stdout)
            .read_to_string(&mut out)
            .unwrap();
        let mut err = String::new();
        std::fs::File::from(stderr)
            .read_to_string(&mut err)
            .unwrap();
        (out, err)
    }

    /// Hidden paths are masked in the launch's own mount namespace, and only there: a
    /// hidden file cannot be opened (EACCES, also for root — the first file's mask and a
    /// second one, a bind of it), a hidden directory is empty (likewise), a path that does
    /// not exist is skipped; the host still sees them all.
    #[tokio::test]
    async fn hidden_paths_are_masked_in_the_launchs_namespace_only() {
        if !super::super::linux::namespace_mounts_available() {
            eprintln!("skipped: this kernel refuses mounts in new namespaces here");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["keys", "more-keys"] {
            std::fs::create_dir(root.join(d)).unwrap();
            std::fs::write(root.join(d).join("k"), "key\n").unwrap();
        }
        for f in ["secret", "other-secret", "public"] {
            std::fs::write(root.join(f), format!("{f}\n")).unwrap();
        }
        let mut spec = shell(
            "for f in secret other-secret public keys/k more-keys/k; do cat $f || echo no $f; done; \
             ls -A keys more-keys | wc -w",
        );
        spec.cwd = root.clone();
        spec.confinement.pid_namespace = true;
        spec.confinement.hidden = ["secret", "other-secret", "keys", "more-keys", "missing"]
            .iter()
            .map(|p| root.join(p))
            .collect();
        let conn = Connection::process().unwrap();
        let launched = launch_on(&conn, 1, &spec).await.unwrap();
        let (out, err) = talk(launched.stdio, b"");
        assert_eq!(
            out, "no secret\nno other-secret\npublic\nno keys/k\nno more-keys/k\n2\n",
            "stderr: {err}"
        );
        for denied in ["secret", "other-secret"] {
            assert!(
                err.contains(&format!("{denied}: Permission denied")),
                "{denied}: {err}"
            );
        }
        assert!(reported_exit(launched.exit).await.success());
        assert_eq!(
            std::fs::read_to_string(root.join("secret")).unwrap(),
            "secret\n"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("keys/k")).unwrap(),
            "key\n"
        );
        // Hiding without the namespace is refused, not skipped.
        let mut bare = shell("true");
        bare.confinement.hidden = vec![root.join("secret")];
        let Err(refused) = launch_on(&conn, 2, &bare).await else {
            panic!("a launch hiding paths without a namespace started");
        };
        assert!(refused.to_string().contains("mount namespace"), "{refused}");
    }

    /// The provider under a namespace starts with no signal blocked: the reaper forks it on
    /// shared memory with every signal blocked across the fork (`start_provider`), and the
    /// child must unblock them before its exec, which keeps the mask.
    #[tokio::test]
    async fn a_namespace_provider_starts_with_no_signal_blocked() {
        if !super::super::linux::pid_namespace_available() {
            eprintln!("skipped: this kernel refuses PID namespaces here");
            return;
        }
        // The shell reads its own status with builtins only (`/proc/self` is the reader).
        let mut spec = shell(
            "while read -r name value; do [ \"$name\" = SigBlk: ] && echo \"$value\"; done < /proc/self/status; exit 0",
        );
        spec.confinement.pid_namespace = true;
        for (kind, conn) in [
            ("process", Connection::process().unwrap()),
            ("in-process", Connection::in_process().unwrap()),
        ] {
            let launched = launch_on(&conn, 1, &spec)
                .await
                .unwrap_or_else(|e| panic!("{kind}: {e}"));
            let [stdin, stdout, _stderr] = launched.stdio;
            drop(stdin);
            let mut out = String::new();
            std::fs::File::from(stdout)
                .read_to_string(&mut out)
                .unwrap();
            assert_eq!(
                out, "0000000000000000\n",
                "{kind}: the provider's blocked signals"
            );
            assert!(reported_exit(launched.exit).await.success(), "{kind}");
        }
    }

    /// Under a PID namespace the spawner's child is the namespace's reaper (pid 1, no process
    /// between it and the spawner), the provider runs as pid 2, and the provider's exit —
    /// code or signal — is what is reported; a program that cannot start is still its OS
    /// error.
    #[tokio::test]
    async fn a_namespace_launch_reports_the_providers_own_exit() {
        if !super::super::linux::pid_namespace_available() {
            eprintln!("skipped: this kernel refuses PID namespaces here");
            return;
        }
        let in_namespace = |script: &str| {
            let mut spec = shell(script);
            spec.confinement.pid_namespace = true;
            spec
        };
        for (kind, conn) in [
            ("process", Connection::process().unwrap()),
            ("in-process", Connection::in_process().unwrap()),
        ] {
            let launched = launch_on(&conn, 1, &in_namespace("echo $$; read line; exit 3"))
                .await
                .unwrap_or_else(|e| panic!("{kind}: {e}"));
            let status = std::fs::read_to_string(format!("/proc/{}/status", launched.pid)).unwrap();
            let nspid = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .expect("NSpid")
                .split_whitespace()
                .collect::<Vec<_>>();
            assert_eq!(
                nspid,
                [launched.pid.to_string().as_str(), "1"],
                "{kind}: the spawner's child is the namespace's init"
            );
            let [stdin, stdout, _stderr] = launched.stdio;
            std::fs::File::from(stdin).write_all(b"go\n").unwrap();
            let mut out = String::new();
            std::fs::File::from(stdout)
                .read_to_string(&mut out)
                .unwrap();
            assert_eq!(out, "2\n", "{kind}: the provider is pid 2");
            // The last report is the reaped reaper's (the earlier one, made as soon as the
            // reaper wrote the status, may be replaced before this reads it: see
            // `a_namespace_launch_is_reported_before_and_after_its_reaper_is_reaped`).
            let mut exit = launched.exit;
            let reaped = exit
                .wait_for(|e| e.is_some_and(|e| !e.reaper_exiting))
                .await
                .unwrap()
                .unwrap();
            let status = std::process::ExitStatus::from_raw(reaped.status);
            assert_eq!(status.code(), Some(3), "{kind}");
            let proc_dir = format!("/proc/{}", launched.pid);
            assert!(!std::path::Path::new(&proc_dir).exists(), "{kind}: reaped");

            // A reaper killed before the provider ended writes nothing: its own end is
            // reported, once it is reaped.
            let launched = launch_on(&conn, 4, &in_namespace("exec sleep 100"))
                .await
                .unwrap();
            // SAFETY: kill(2) on the reaper this test started.
            assert_eq!(unsafe { libc::kill(launched.pid as i32, libc::SIGKILL) }, 0);
            let exit = reported(launched.exit).await;
            assert_eq!(
                exit,
                Exit {
                    status: libc::SIGKILL,
                    reaper_exiting: false
                },
                "{kind}"
            );
            assert!(!std::path::Path::new(&format!("/proc/{}", launched.pid)).exists());

            let launched = launch_on(&conn, 2, &in_namespace("kill -TERM $$"))
                .await
                .unwrap();
            let status = reported_exit(launched.exit).await;
            assert_eq!(status.signal(), Some(libc::SIGTERM), "{kind}: {status:?}");

            refuses_a_missing_program(&conn, 3, in_namespace(""), kind).await;
        }
    }

    /// Under a PID namespace the spawner reports an exit twice, in this order: as soon as the
    /// reaper has written the provider's status (its namespace empty), then once the reaper
    /// itself is reaped. Read off the protocol itself, where nothing merges the two.
    #[test]
    fn a_namespace_launch_is_reported_before_and_after_its_reaper_is_reaped() {
        if !super::super::linux::pid_namespace_available() {
            eprintln!("skipped: this kernel refuses PID namespaces here");
            return;
        }
        let (host, spawner_end) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || serve(spawner_end));
        let mut spec = shell("exit 3");
        spec.confinement.pid_namespace = true;
        let request = ToSpawner::Launch(Request {
            id: 1,
            spec: WireSpec::new(&spec).0,
        });
        send_frame(&host, &encode(&request), &[]).unwrap();
        let mut reader = FrameReader::new(host.try_clone().unwrap());
        let mut exits = Vec::new();
        let pid = loop {
            let body = reader.next().unwrap().expect("a reply");
            match serde_json::from_slice::<Reply>(&body).unwrap() {
                Reply::Spawned { id, .. } => assert_eq!(id, 1),
                Reply::Exited { pid, exit } => {
                    exits.push(exit);
                    if !exit.reaper_exiting {
                        break pid;
                    }
                }
                failed => panic!("{failed:?}"),
            }
        };
        let exit = |reaper_exiting| Exit {
            status: 3 << 8,
            reaper_exiting,
        };
        assert_eq!(exits, [exit(true), exit(false)]);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
        drop((host, reader));
        server.join().unwrap().unwrap();
    }

    /// What a reaper's status pipe holds is reported only when it is an exit or a signal; an
    /// empty pipe (the reaper was killed) reports the reaper's own status.
    #[test]
    fn a_reapers_status_is_reported_only_when_well_formed() {
        let pipe = |bytes: &[u8]| {
            let (r, w) = std::os::unix::net::UnixStream::pair().unwrap();
            (&w).write_all(bytes).unwrap();
            r.set_nonblocking(true).unwrap();
            OwnedFd::from(r)
        };
        let reported =
            |own, bytes: &[u8]| super::super::unix::reported_status(own, Some(&pipe(bytes)));
        let exited_3 = 3 << 8;
        assert_eq!(reported(0, &i32::to_ne_bytes(exited_3)), exited_3);
        assert_eq!(reported(0, &i32::to_ne_bytes(libc::SIGTERM)), libc::SIGTERM);
        // 0x137f: stopped by SIGSTOP, which no ended process has.
        assert_eq!(reported(0, &i32::to_ne_bytes(0x137f)), 126 << 8);
        assert_eq!(reported(libc::SIGKILL, b""), libc::SIGKILL);
        assert_eq!(reported(libc::SIGKILL, b"ab"), libc::SIGKILL);
        assert_eq!(
            super::super::unix::reported_status(exited_3, None),
            exited_3
        );
    }

    /// A spawner process ends when the host's end closes, and takes what it started with it.
    #[tokio::test]
    async fn a_spawner_whose_host_end_closes_kills_what_it_started() {
        let conn = Connection::process().unwrap();
        let launched = launch_on(&conn, 1, &shell("sleep 30")).await.unwrap();
        let pid = launched.pid;
        let mut exit = launched.exit;
        // Closing the host's end: the spawner kills the group, reaps and exits.
        // SAFETY: shutdown(2) on a socket this test owns.
        unsafe { libc::shutdown(conn.socket.as_raw_fd(), libc::SHUT_RDWR) };
        let closed =
            tokio::time::timeout(Duration::from_secs(10), exit.wait_for(Option::is_some)).await;
        assert!(
            matches!(closed, Ok(Err(_)) | Ok(Ok(_))),
            "the exit reporter settles"
        );
        assert!(!conn.alive(), "the reader saw the spawner end");
        let gone = (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            // SAFETY: signal 0 only checks existence.
            unsafe { libc::kill(pid as libc::pid_t, 0) != 0 }
        });
        assert!(gone, "process {pid} survived its spawner");
    }

    /// A test runs on a thread of its own, never the main one: the fork is refused and
    /// nothing is left for a connection to take.
    #[test]
    fn a_fork_from_a_thread_other_than_the_main_one_is_refused() {
        let e = crate::fork_spawner().unwrap_err();
        assert!(
            matches!(e, crate::error::SpawnerForkError::NotMainThread),
            "{e}"
        );
        assert!(take_forked().is_none());
    }

    fn read_rule(path: &str) -> PathRule {
        PathRule {
            path: PathBuf::from(path),
            access: PathAccess::ReadExecute,
            why: "test".into(),
        }
    }

    /// A common set for a test (leaked: a set lives as long as the process, as the
    /// system's does).
    fn common_set(rules: Vec<PathRule>) -> CommonRules {
        CommonRules::of(Box::leak(rules.into_boxed_slice()))
    }

    /// A spec names its common set (and carries only the rules after it) only when its
    /// rules begin with the set's and Landlock applies them; otherwise every rule travels.
    #[test]
    fn a_spec_names_its_common_set_only_when_its_rules_begin_with_it() {
        let common = common_set(vec![read_rule("/usr")]);
        let mut spec = shell("true");
        spec.confinement.landlock = true;
        spec.confinement.rules = vec![read_rule("/usr"), read_rule("/srv")];
        spec.confinement.common = Some(common);
        let (wire, named) = WireSpec::new(&spec);
        assert_eq!(named, Some(common));
        assert_eq!(wire.common, Some(common.id()));
        assert_eq!(rules_from_wire(wire.rules), [read_rule("/srv")]);
        spec.confinement.rules.reverse();
        let (wire, named) = WireSpec::new(&spec);
        assert_eq!((named, wire.common), (None, None));
        assert_eq!(rules_from_wire(wire.rules), spec.confinement.rules);
        spec.confinement.rules.reverse();
        spec.confinement.landlock = false;
        let (wire, named) = WireSpec::new(&spec);
        assert_eq!((named, wire.common, wire.rules.len()), (None, None, 2));
    }

    /// A ruleset prepared ahead serves one launch, and only while fresh: a stale one is
    /// dropped and the launch builds its own; a set the host never registered fails the
    /// launch.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_prepared_ruleset_serves_one_launch_while_fresh() {
        if super::super::linux::landlock_abi().is_none() {
            eprintln!("skipped: no Landlock in this kernel");
            return;
        }
        let mut sets = CommonSets::default();
        let unknown = sets.take(7).err().expect("never registered");
        assert!(
            unknown.to_string().contains("never registered"),
            "{unknown}"
        );
        sets.register(7, vec![read_rule("/usr")]);
        assert_eq!(sets.next_expiry(), None);
        sets.prepare(7);
        let prepared = sets.sets[&7].prepared.as_ref().expect("prepared").built();
        assert!(sets.next_expiry().expect("prepared") <= Duration::from_secs(1));
        sets.prepare(7);
        let again = sets.sets[&7].prepared.as_ref().expect("kept").built();
        assert_eq!(again, prepared, "a fresh one is not rebuilt");
        let taken = sets.take(7).unwrap().expect("a ruleset");
        assert_eq!(taken.built(), prepared);
        assert_eq!(sets.next_expiry(), None, "used by one launch only");
        let built = sets.take(7).unwrap().expect("built at the launch");
        assert!(built.built() > prepared);
        sets.prepare(7);
        let stale = sets.sets.get_mut(&7).unwrap().prepared.as_mut().unwrap();
        stale.age(Duration::from_secs(2));
        let stale = stale.built();
        assert_eq!(sets.next_expiry(), Some(Duration::ZERO));
        let fresh = sets.take(7).unwrap().expect("built at the launch");
        assert!(fresh.built() > stale, "a stale one is not used");
        sets.prepare(7);
        sets.sets
            .get_mut(&7)
            .unwrap()
            .prepared
            .as_mut()
            .unwrap()
            .age(Duration::from_secs(2));
        sets.drop_stale();
        assert!(sets.sets[&7].prepared.is_none());
    }

    /// A launch that names a common set gets the set's rules and its own, and nothing else,
    /// whether the set's ruleset is built at the launch (the set registered with it) or was
    /// prepared ahead (a hint), through a spawner process.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_launch_on_a_common_set_gets_the_sets_rules_and_its_own() {
        if super::super::linux::landlock_abi().is_none() {
            eprintln!("skipped: no Landlock in this kernel");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().canonicalize().unwrap();
        for name in ["common", "own", "other"] {
            std::fs::create_dir(dir.join(name)).unwrap();
            std::fs::write(dir.join(name).join("f"), format!("{name}\n")).unwrap();
        }
        let mut system: Vec<PathRule> = ["/usr", "/bin", "/lib", "/lib64", "/etc"]
            .into_iter()
            .filter(|p| std::path::Path::new(p).exists())
            .map(read_rule)
            .collect();
        system.push(read_rule(dir.join("common").to_str().unwrap()));
        let common = common_set(system);
        let script = format!(
            "cd /; for d in common own other; do cat {}/$d/f || echo \"no $d\"; done",
            dir.display()
        );
        let mut spec = shell(&script);
        spec.confinement.landlock = true;
        spec.confinement.rules = common.rules().to_vec();
        spec.confinement
            .rules
            .push(read_rule(dir.join("own").to_str().unwrap()));
        spec.confinement.common = Some(common);
        let conn = Connection::process().unwrap();
        for (id, hint) in [(1, false), (2, true), (3, false)] {
            if hint {
                conn.register(common).unwrap();
                conn.write(&ToSpawner::Expect { id: common.id() }).unwrap();
            }
            let launched = launch_on(&conn, id, &spec).await.unwrap();
            let (out, err) = talk(launched.stdio, b"");
            assert_eq!(out, "common\nown\nno other\n", "launch {id}: {err}");
            assert_eq!(reported_exit(launched.exit).await.code(), Some(0));
        }
    }

    #[test]
    fn paths_and_variables_that_are_not_utf8_cross_intact() {
        let mut spec = shell("true");
        let odd = OsString::from_vec(vec![b'/', b't', 0xff, b'x']);
        spec.cwd = PathBuf::from(odd.clone());
        spec.env.push((OsString::from("V"), odd.clone()));
        spec.confinement.rules.push(PathRule {
            path: PathBuf::from(odd.clone()),
            access: PathAccess::ReadWrite,
            why: "test".into(),
        });
        let body = encode(&WireSpec::new(&spec).0);
        let back: WireSpec = serde_json::from_slice(&body).unwrap();
        assert_eq!(back.into_spec(), spec);
    }
}
