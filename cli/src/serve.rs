//! `adaptor serve`, a resident host, and the runs `adaptor run` hands to it (the caller's
//! side is the library's `handover`, which the `adaptor` launcher runs).
//!
//! A one-shot `adaptor run` spends most of its own time on what every run repeats: starting
//! the process, building the runtime and loading the driver, tearing the process down. A
//! resident host does that once; each `adaptor run` then sends it its arguments, its
//! working directory and its stdin, stdout and stderr (the descriptors themselves, so a
//! terminal, a pipe, colour and a closed `| head` behave as they would here), and exits with
//! the code the host sends back. The run itself is the CLI's own, on the host's main
//! thread, one at a time, with the same settings, containment and output.
//!
//! Who may be served, each checked by the host before it accepts (otherwise the run is
//! done by the caller itself, as without a host; `ADAPTOR_LOG=debug` says why):
//!
//! - the same user: the socket's directory is the user's own, not open to anyone else
//!   (checked by both sides), and each side checks the other's user id (`SO_PEERCRED`);
//! - never a process confined by a run (a provider, or anything it started, of this host or
//!   any other): the host runs with the user's whole view, so serving one would let it out
//!   of its confinement. The caller must have `no_new_privs` unset (Landlock confinement
//!   sets it, irrevocably, for every descendant) and be in the host's PID and mount
//!   namespaces (a run's namespaces are its own). Read from `/proc` for the process named by
//!   the connection's pidfd (`SO_PEERPIDFD`, Linux 6.5), alive after the read, so a reused
//!   pid cannot stand in for it. A host that has `no_new_privs` itself (some containers)
//!   could not tell, and does not start;
//! - the same build: the `adaptor-host` the caller would run otherwise is the host's own
//!   executable (device, inode, size, mtime), so a reinstalled `adaptor` is never served by
//!   the old one;
//! - the same environment: every variable equal to the host's, except the shell's own
//!   bookkeeping ([`SHELL_BOOKKEEPING`]), which a run does not read unless its `--pass-env`
//!   names one or it has `--mcp-config` (whose `${VAR}`s may): then those count too. The
//!   run reads the host's environment, which is then the caller's;
//! - a run that needs nothing of its caller's process but its descriptors: not
//!   `--approve ask`, which asks on the caller's terminal (`/dev/tty`);
//! - one run at a time: a second caller meanwhile runs by itself.
//!
//! Lifetimes: the caller's Ctrl-C is sent to the host, which cancels the run as Ctrl-C
//! does here; a caller that goes away (killed, hung up) cancels its run. A caller whose
//! host has not ended the run 9 s after its Ctrl-C (as long as a run of its own could take
//! to stop) exits 130 by itself. The host's own Ctrl-C or SIGTERM cancels the run it serves
//! and stops it; its runs' providers never outlive it (the same spawner and reaper as every
//! run).
//!
//! The socket: `$ADAPTOR_SOCKET` (absolute; empty turns serving off for the callers that
//! see it), else `$XDG_RUNTIME_DIR/agent-adaptor/serve.sock`, else
//! `<temp dir>/agent-adaptor-<uid>/serve.sock`.
//!
//! Owns: the socket, the host's side of the protocol (`handover` describes it), the
//! checks above, and pointing the process's descriptors 0–2 and working directory at a
//! served caller's for its run. Must not: run anything itself (a served run is
//! `main::run_command`, the same as a local one).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use crate::interrupt::{Remote, RemoteCtrlC, Source};
use crate::output::sanitize;
use crate::{Cli, Command, EXIT_DRIVER_FAULT, EXIT_USAGE, errln};
use adaptor_cli::handover::{
    ACCEPTED, Body, CANCEL, EXITED, Identity, MAGIC, MAX_BODY, REFUSED, SOCKET_ENV, euid, open_dir,
    peer_uid, private_dir, socket_path,
};

/// Examples shown by `adaptor serve --help`.
pub const EXAMPLES: &str = "\
Examples:
  adaptor serve &                 # then, from this shell:
  adaptor run \"Say hello\"         # served: no runtime or driver to load
  ADAPTOR_SOCKET= adaptor run hi  # not served (an empty ADAPTOR_SOCKET turns it off)

The socket: $ADAPTOR_SOCKET, else $XDG_RUNTIME_DIR/agent-adaptor/serve.sock, else
<temp dir>/agent-adaptor-<uid>/serve.sock. Runs are served one at a time, for the same
user, the same adaptor executable and the same environment (the shell's _, PWD, OLDPWD
and SHLVL aside); any other run runs by itself, as without a host (ADAPTOR_LOG=debug says
why). Ctrl-C or SIGTERM stops serving.";

/// Variables a shell keeps for itself, which differ between a host started from a shell
/// and the runs started from it later, and which no run reads (unless named by
/// `--pass-env`, or an `--mcp-config` may expand them).
pub(crate) const SHELL_BOOKKEEPING: [&str; 4] = ["_", "PWD", "OLDPWD", "SHLVL"];

/// How long a caller has to send its request once connected.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// `adaptor serve`: serve runs until Ctrl-C or SIGTERM (see the module docs).
pub(crate) fn serve(runtime: &tokio::runtime::Runtime) -> ExitCode {
    match Host::open() {
        Ok((host, acceptor)) => host.serve(acceptor, runtime),
        Err(e) => {
            errln!("adaptor: cannot serve: {}", sanitize(&e.to_string()));
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// The serving process's own side: its socket and descriptors, and the drivers it keeps.
struct Host {
    path: PathBuf,
    /// The socket file's inode, to remove only our own at the end.
    inode: u64,
    /// Whether a run is being served (the acceptor refuses callers meanwhile).
    busy: Arc<AtomicBool>,
    /// The host's own descriptors 0–2 and working directory, put back after each run.
    own: [OwnedFd; 4],
    /// The drivers its runs loaded, shared with later runs while their files are unchanged.
    loaded: adaptor::LoadedDrivers,
}

/// A request the acceptor admitted, for the main thread to serve.
struct Request {
    conn: UnixStream,
    /// The caller's descriptors 0, 1, 2 and working directory.
    fds: [OwnedFd; 4],
    cli: Cli,
}

/// Work for the main thread.
enum Job {
    Serve(Box<Request>),
    Stop,
}

/// The socket's listening side, and what it checks callers against: moved to the thread that
/// accepts.
struct Acceptor {
    listener: UnixListener,
    admission: Admission,
}

impl Host {
    /// Check this process may serve, make the socket, and take what a served run puts back.
    fn open() -> io::Result<(Host, Acceptor)> {
        if no_new_privs(Path::new("/proc/self"))? {
            return Err(io::Error::other(
                "this process has no_new_privs set, so it could not tell its callers from \
                 processes a run confines (which have it too)",
            ));
        }
        let path = socket_path().ok_or_else(|| {
            io::Error::other(format!("{SOCKET_ENV} is empty, which turns serving off"))
        })?;
        if !path.is_absolute() {
            return Err(io::Error::other(format!(
                "{SOCKET_ENV} must be an absolute path, not {}",
                path.display()
            )));
        }
        let dir = path
            .parent()
            .ok_or_else(|| io::Error::other("the socket path has no directory"))?;
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display()))),
        }
        private_dir(dir)?;
        let own = [
            dup(0)?,
            dup(1)?,
            dup(2)?,
            open_dir(c".")
                .map_err(|e| io::Error::new(e.kind(), format!("the working directory: {e}")))?,
        ];
        let busy = Arc::new(AtomicBool::new(false));
        let admission = Admission {
            namespaces: Namespaces::of(Path::new("/proc/self"))
                .map_err(|e| io::Error::new(e.kind(), format!("this process's namespaces: {e}")))?,
            identity: Identity::of(Path::new("/proc/self/exe"))?,
            env: std::env::vars_os().collect(),
            busy: busy.clone(),
        };
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if !meta.file_type().is_socket() {
                return Err(io::Error::other(format!(
                    "{} exists and is not a socket",
                    path.display()
                )));
            }
            match UnixStream::connect(&path) {
                // Nobody listens: a host that ended without removing it.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    std::fs::remove_file(&path)?
                }
                Ok(_) => {
                    return Err(io::Error::other(format!(
                        "another host already serves {}",
                        path.display()
                    )));
                }
                // A host too busy to take the connection now, or a socket we may not use:
                // not ours to remove.
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{} is in use or unusable: {e}", path.display()),
                    ));
                }
            }
        }
        let listener = UnixListener::bind(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let inode = std::fs::symlink_metadata(&path)?.ino();
        let host = Host {
            path,
            inode,
            busy,
            own,
            loaded: adaptor::LoadedDrivers::new(),
        };
        std::fs::set_permissions(&host.path, std::fs::Permissions::from_mode(0o600))
            .inspect_err(|_| host.remove_socket())?;
        Ok((
            host,
            Acceptor {
                listener,
                admission,
            },
        ))
    }

    fn serve(self, acceptor: Acceptor, runtime: &tokio::runtime::Runtime) -> ExitCode {
        let (jobs, next_job) = mpsc::channel::<Job>();
        let serving: Arc<Mutex<Option<RemoteCtrlC>>> = Arc::default();
        if let Err(e) = stop_on_signals(jobs.clone(), serving.clone(), &self.own[2]) {
            errln!("adaptor: cannot watch for Ctrl-C and SIGTERM: {e}");
            self.remove_socket();
            return ExitCode::from(EXIT_DRIVER_FAULT);
        }
        let Acceptor {
            listener,
            admission,
        } = acceptor;
        let own_stderr = self.own[2].try_clone().map(std::fs::File::from);
        let acceptor = std::thread::Builder::new()
            .name("adaptor-serve-accept".into())
            .spawn(move || {
                // Its log lines are the host's, whichever caller's run is being served.
                if let Ok(stderr) = own_stderr {
                    crate::output::keep_stderr_of_this_thread(stderr);
                }
                for conn in listener.incoming() {
                    match conn {
                        Ok(conn) => {
                            if let Some(request) = admission.admit(conn)
                                && jobs.send(Job::Serve(Box::new(request))).is_err()
                            {
                                return;
                            }
                        }
                        Err(e) => tracing::warn!("adaptor serve: accept: {e}"),
                    }
                }
            });
        if let Err(e) = acceptor {
            errln!("adaptor: cannot serve: {e}");
            self.remove_socket();
            return ExitCode::from(EXIT_DRIVER_FAULT);
        }
        errln!(
            "adaptor: serving `adaptor run` on {} (Ctrl-C to stop)",
            self.path.display()
        );
        let mut code = ExitCode::SUCCESS;
        while let Ok(Job::Serve(request)) = next_job.recv() {
            if let Err(e) = self.serve_one(*request, runtime, &serving) {
                // The host's own descriptors or directory could not be put back: it cannot
                // serve the next run as itself.
                errln!("adaptor: stopped serving: {e}");
                code = ExitCode::from(EXIT_DRIVER_FAULT);
                break;
            }
            self.busy.store(false, Ordering::SeqCst);
            // The next run's driver instance, made while no caller waits for it (one that
            // comes meanwhile waits the fraction of a millisecond this takes).
            self.loaded.make_spares();
        }
        self.remove_socket();
        errln!("adaptor: stopped serving {}", self.path.display());
        code
    }

    /// Serve one admitted run on this (the main) thread, with the caller's descriptors and
    /// working directory in place of the host's; `Err` only when the host's own could not be
    /// put back afterwards.
    fn serve_one(
        &self,
        request: Request,
        runtime: &tokio::runtime::Runtime,
        serving: &Mutex<Option<RemoteCtrlC>>,
    ) -> io::Result<()> {
        let Request { conn, fds, cli } = request;
        let (remote, ctrl_c) = match Remote::new() {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!("adaptor serve: cannot watch the caller's Ctrl-C: {e}");
                let _ = (&conn).write_all(&[EXITED, EXIT_DRIVER_FAULT]);
                return Ok(());
            }
        };
        *lock(serving) = RemoteCtrlC::try_clone(&ctrl_c).ok();
        // The caller's Ctrl-C and hang-up, for as long as the run lasts.
        let listener = conn.try_clone().map(|conn| {
            std::thread::Builder::new()
                .name("adaptor-serve-caller".into())
                .spawn(move || {
                    let mut byte = [0u8; 1];
                    loop {
                        match (&conn).read(&mut byte) {
                            Ok(1) if byte[0] == CANCEL => ctrl_c.ctrl_c(),
                            Ok(1) => {}
                            // Gone (or the run is over: the host shut the connection).
                            _ => {
                                ctrl_c.ctrl_c();
                                return;
                            }
                        }
                    }
                })
        });
        let code = match put_in_place(&fds) {
            Ok(()) => {
                crate::output::reset_stdout();
                let Command::Run(crate::Deferred(args)) = cli.command else {
                    unreachable!("only `adaptor run` is admitted")
                };
                let code = crate::run_command(
                    args,
                    None,
                    Some(&self.loaded),
                    runtime,
                    cli.color,
                    Source::Remote(remote),
                );
                exit_number(code)
            }
            Err(e) => {
                drop(remote);
                tracing::warn!("adaptor serve: cannot take the caller's descriptors: {e}");
                EXIT_DRIVER_FAULT
            }
        };
        // Nothing of this run's output may reach the next caller.
        let _ = io::stdout().flush();
        let restored = put_in_place(&self.own);
        crate::output::reset_stdout();
        *lock(serving) = None;
        // Its output is written (every write returned), so the code comes after it.
        if let Err(e) = (&conn).write_all(&[EXITED, code]) {
            tracing::debug!("adaptor serve: the caller left before its exit code ({e})");
        }
        let _ = conn.shutdown(std::net::Shutdown::Both);
        tracing::debug!("adaptor serve: served a run (exit {code})");
        if let Ok(Ok(thread)) = listener {
            let _ = thread.join();
        }
        restored
    }

    /// Remove the socket file if it is still the one this host bound.
    fn remove_socket(&self) {
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.inode)
            && let Err(e) = std::fs::remove_file(&self.path)
        {
            errln!("adaptor: cannot remove {}: {e}", self.path.display());
        }
    }
}

/// Ctrl-C and SIGTERM: cancel the run being served, then stop.
fn stop_on_signals(
    jobs: mpsc::Sender<Job>,
    serving: Arc<Mutex<Option<RemoteCtrlC>>>,
    own_stderr: &OwnedFd,
) -> io::Result<()> {
    let own_stderr = std::fs::File::from(own_stderr.try_clone()?);
    let (listen, tell) = std::os::unix::net::UnixStream::pair()?;
    let raw = tell.as_raw_fd();
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the action calls only write(2), async-signal-safe, on `tell`, which is
        // moved into the thread below and never closed while the process runs.
        unsafe {
            signal_hook_registry::register(signal, move || {
                let byte = 1u8;
                libc::write(raw, (&raw const byte).cast(), 1);
            })
        }?;
    }
    std::thread::Builder::new()
        .name("adaptor-serve-signals".into())
        .spawn(move || {
            crate::output::keep_stderr_of_this_thread(own_stderr);
            let _tell = tell;
            let mut byte = [0u8; 1];
            loop {
                match (&listen).read(&mut byte) {
                    Ok(_) => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        errln!("adaptor: stopped watching for Ctrl-C and SIGTERM: {e}");
                        return;
                    }
                }
            }
            if let Some(ctrl_c) = &*lock(&serving) {
                ctrl_c.ctrl_c();
            }
            let _ = jobs.send(Job::Stop);
        })?;
    Ok(())
}

/// The refusal message for `reason`.
fn refusal(reason: &str) -> Vec<u8> {
    let mut reply = vec![REFUSED];
    reply.extend_from_slice(&(reason.len() as u32).to_le_bytes());
    reply.extend_from_slice(reason.as_bytes());
    reply
}

/// The PID and mount namespaces of a process, as `/proc/<pid>/ns` names them.
#[derive(Debug, PartialEq, Eq)]
struct Namespaces {
    pid: PathBuf,
    mnt: PathBuf,
}

impl Namespaces {
    fn of(proc_dir: &Path) -> io::Result<Namespaces> {
        Ok(Namespaces {
            pid: std::fs::read_link(proc_dir.join("ns/pid"))?,
            mnt: std::fs::read_link(proc_dir.join("ns/mnt"))?,
        })
    }
}

/// Whether the process at `proc_dir` has `no_new_privs` set.
fn no_new_privs(proc_dir: &Path) -> io::Result<bool> {
    let status = std::fs::read_to_string(proc_dir.join("status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("NoNewPrivs:"))
        .map(|v| v.trim() != "0")
        .ok_or_else(|| io::Error::other("no NoNewPrivs line in its status"))
}

/// `Ok` when the process at the other end of `conn` is not confined by a run (see the
/// module docs); else why not.
fn unconfined(conn: &UnixStream, host: &Namespaces) -> Result<(), String> {
    let pidfd = peer_pidfd(conn).map_err(|e| {
        format!("cannot name the caller's process (SO_PEERPIDFD needs Linux 6.5): {e}")
    })?;
    let pid = pid_of(&pidfd).map_err(|e| format!("the caller's pid: {e}"))?;
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let nnp = no_new_privs(&proc_dir).map_err(|e| format!("the caller's status: {e}"))?;
    let namespaces =
        Namespaces::of(&proc_dir).map_err(|e| format!("the caller's namespaces: {e}"))?;
    // The pid named this process while it was read only if the process is still alive.
    // SAFETY: pidfd_send_signal(2) with signal 0 (a check, nothing sent) on a pidfd we own.
    let alive = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    } == 0;
    if !alive {
        return Err("the caller's process ended".into());
    }
    if nnp {
        return Err("the caller has no_new_privs set, as a process confined by a run has".into());
    }
    if namespaces != *host {
        return Err("the caller is in other PID or mount namespaces than the host".into());
    }
    Ok(())
}

/// A pidfd for the process at the other end of `conn`.
fn peer_pidfd(conn: &UnixStream) -> io::Result<OwnedFd> {
    /// `SO_PEERPIDFD` (Linux 6.5), the same on every architecture this CLI builds for.
    const SO_PEERPIDFD: libc::c_int = 77;
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt(2) SO_PEERPIDFD writes one descriptor (owned once) of that length.
    let done = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&raw mut fd).cast(),
            &mut len,
        )
    };
    if done != 0 || fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: see above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The pid (in this process's PID namespace) a pidfd names, from its `fdinfo`.
fn pid_of(pidfd: &OwnedFd) -> io::Result<u32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd()))?;
    let pid = info
        .lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .ok_or_else(|| io::Error::other("no Pid line in the pidfd's fdinfo"))?
        .trim();
    // -1: the process ended; 0: it is not in this PID namespace's view.
    pid.parse::<u32>()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| io::Error::other(format!("the pidfd names pid {pid}")))
}

/// What the acceptor checks a caller against.
struct Admission {
    namespaces: Namespaces,
    identity: Identity,
    env: BTreeMap<OsString, OsString>,
    busy: Arc<AtomicBool>,
}

impl Admission {
    /// Read `conn`'s request and accept it (the main thread serves it) or refuse it with a
    /// reason (its caller runs by itself); a connection that is not a well-formed request of
    /// this user is dropped.
    fn admit(&self, conn: UnixStream) -> Option<Request> {
        match peer_uid(&conn) {
            Ok(uid) if uid == euid() => {}
            Ok(uid) => {
                tracing::warn!("adaptor serve: a connection from uid {uid} was dropped");
                return None;
            }
            Err(e) => {
                tracing::warn!("adaptor serve: a connection without credentials ({e}) was dropped");
                return None;
            }
        }
        let (fds, body) = match read_request(&conn) {
            Ok(request) => request,
            Err(e) => {
                tracing::warn!("adaptor serve: a malformed request was dropped: {e}");
                return None;
            }
        };
        if let Err(reason) = unconfined(&conn, &self.namespaces) {
            tracing::warn!("adaptor serve: refused a caller: {reason}");
            let _ = (&conn).write_all(&refusal(&reason));
            return None;
        }
        match self.decide(&body) {
            Ok(cli) => match (&conn).write_all(&[ACCEPTED]) {
                Ok(()) => Some(Request { conn, fds, cli }),
                Err(_) => {
                    self.busy.store(false, Ordering::SeqCst);
                    None
                }
            },
            Err(reason) => {
                tracing::debug!("adaptor serve: refused: {reason}");
                let _ = (&conn).write_all(&refusal(&reason));
                None
            }
        }
    }

    /// The parsed `adaptor run` of an acceptable request (and the host marked busy), or why
    /// it is refused.
    fn decide(&self, body: &[u8]) -> Result<Cli, String> {
        let mut body = Body::new(body);
        let identity = Identity::decode(&mut body)?;
        let args: Vec<OsString> = body.list()?.into_iter().map(OsString::from_vec).collect();
        let env: BTreeMap<OsString, OsString> = body
            .list()?
            .into_iter()
            .map(|pair| {
                let at = pair.iter().position(|&b| b == b'=').unwrap_or(pair.len());
                let value = pair.get(at + 1..).unwrap_or_default().to_vec();
                let mut name = pair;
                name.truncate(at);
                (OsString::from_vec(name), OsString::from_vec(value))
            })
            .collect();
        if identity != self.identity {
            return Err("a different adaptor executable than the host's".into());
        }
        let cli = crate::parse_args(args)
            .map_err(|_| "the arguments do not parse (the caller reports it)".to_string())?;
        let Command::Run(crate::Deferred(run)) = &cli.command else {
            return Err("only `adaptor run` is served".into());
        };
        if run.approve == Some(crate::approve::Approve::Ask) {
            return Err("--approve ask asks on the caller's terminal".into());
        }
        let mut counted: Vec<&str> = run
            .provider_env
            .pass_env
            .iter()
            .map(String::as_str)
            .collect();
        if run.mcp_config.is_some() {
            counted.extend(SHELL_BOOKKEEPING);
        }
        let differ = differing(&self.env, &env, &counted);
        if !differ.is_empty() {
            return Err(format!(
                "the environment differs from the host's in {}",
                differ.join(", ")
            ));
        }
        if self
            .busy
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Err("the host is serving another run".into());
        }
        Ok(cli)
    }
}

/// The names (never the values) of the variables whose values differ between `host` and
/// `caller`, leaving out the shell's bookkeeping unless `counted` names it; at most five,
/// then how many more.
pub(crate) fn differing(
    host: &BTreeMap<OsString, OsString>,
    caller: &BTreeMap<OsString, OsString>,
    counted: &[&str],
) -> Vec<String> {
    let mut names: Vec<String> = host
        .keys()
        .chain(caller.keys())
        .filter(|name| {
            host.get(*name) != caller.get(*name)
                && !SHELL_BOOKKEEPING
                    .iter()
                    .any(|b| *name == *b && !counted.contains(b))
        })
        .map(|name| sanitize(&name.to_string_lossy()))
        .collect();
    names.sort();
    names.dedup();
    if names.len() > 5 {
        let more = names.len() - 5;
        names.truncate(5);
        names.push(format!("{more} more"));
    }
    names
}

/// Read a request: the head with its four descriptors, then the body.
fn read_request(conn: &UnixStream) -> io::Result<([OwnedFd; 4], Vec<u8>)> {
    conn.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    let mut head = [0u8; 8];
    let (got, fds) = recv_with_fds(conn, &mut head)?;
    if got == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    (&*conn).read_exact(&mut head[got..])?;
    let fds: [OwnedFd; 4] = fds.try_into().map_err(|fds: Vec<OwnedFd>| {
        io::Error::other(format!("{} descriptors, not 4", fds.len()))
    })?;
    if head[..4] != MAGIC {
        return Err(io::Error::other("not a request of this protocol version"));
    }
    let len = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
    if len > MAX_BODY {
        return Err(io::Error::other(format!("a body of {len} bytes")));
    }
    let mut body = vec![0u8; len as usize];
    (&*conn).read_exact(&mut body)?;
    conn.set_read_timeout(None)?;
    Ok((fds, body))
}

/// Receive into `buf` with up to four descriptors attached (close-on-exec).
fn recv_with_fds(conn: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let payload = 4 * std::mem::size_of::<RawFd>();
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: a zeroed msghdr is valid; its pointers outlive the call; the control
    // messages read back lie within the buffer (CMSG_NXTHDR checks against msg_controllen),
    // and each descriptor SCM_RIGHTS delivers is new to this process and owned once.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let got = loop {
            let got = libc::recvmsg(conn.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
            if got >= 0 {
                break got as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        let mut fds = Vec::new();
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::other("more descriptors than a request has"));
        }
        Ok((got, fds))
    }
}

/// Make `fds` (three descriptors and a directory) this process's descriptors 0–2 and its
/// working directory.
fn put_in_place(fds: &[OwnedFd; 4]) -> io::Result<()> {
    for (target, fd) in fds[..3].iter().enumerate() {
        // SAFETY: dup2(2) onto descriptors 0–2, which this process uses as its standard
        // streams; `fd` stays owned by the caller.
        if unsafe { libc::dup2(fd.as_raw_fd(), target as RawFd) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: fchdir(2) on an open directory descriptor.
    if unsafe { libc::fchdir(fds[3].as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A close-on-exec duplicate of descriptor `fd`.
fn dup(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl(2) F_DUPFD_CLOEXEC returns a new descriptor, owned once, or -1.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: see above.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// The number of an exit code (the codes the CLI uses are all `ExitCode::from(u8)`).
fn exit_number(code: ExitCode) -> u8 {
    (0..=u8::MAX)
        .find(|n| ExitCode::from(*n) == code)
        .unwrap_or(EXIT_DRIVER_FAULT)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<OsString, OsString> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn environments_differ_by_name_never_by_value_and_the_shells_own_variables_aside() {
        let host = env(&[
            ("PATH", "/bin"),
            ("PWD", "/a"),
            ("SECRET", "x"),
            ("_", "/bin/sh"),
        ]);
        let same = env(&[("PATH", "/bin"), ("PWD", "/b"), ("SECRET", "x")]);
        assert!(differing(&host, &same, &[]).is_empty());
        assert_eq!(differing(&host, &same, &["PWD"]), ["PWD"]);
        let other = env(&[("PATH", "/usr/bin"), ("SECRET", "y"), ("EXTRA", "1")]);
        assert_eq!(differing(&host, &other, &[]), ["EXTRA", "PATH", "SECRET"]);
        let many: BTreeMap<OsString, OsString> = (0..8)
            .map(|i| (format!("V{i}").into(), "1".into()))
            .collect();
        assert_eq!(
            differing(&BTreeMap::new(), &many, &[]).last().unwrap(),
            "3 more"
        );
    }
}
