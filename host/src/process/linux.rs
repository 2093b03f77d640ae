//! Linux launches and their confinement: Landlock and a PID namespace with a reaper as its
//! init.
//!
//! The shape of one confined launch (every box is one process; the host sees only the first,
//! as the pid its spawner reports — see `spawner.rs`):
//!
//! ```text
//! spawner ──clone(PID | mount [| user] namespaces)──▶ reaper (the spawner's child, group
//!                  │                                  leader, pid 1 of the new namespace,
//!                  │                                  fresh /proc, hidden paths masked,
//!                  │                                  Landlock applied)
//!                  │  vfork-style clone, exec
//!                  ▼
//!                provider (pid 2) and every descendant, setsid or not
//! ```
//!
//! - The **reaper** has `PR_SET_PDEATHSIG(SIGKILL)` towards the spawner (which has it
//!   towards the host). When the provider exits it sends SIGTERM to everything left in the
//!   namespace, waits for them to end (woken by each child's end, not polling) up to the
//!   grace period, then SIGKILL; then, the namespace empty, it writes the provider's wait
//!   status into a pipe and exits. The spawner reports that status as soon as it is
//!   written, so the pipeline sees the provider's exit (code or signal) without waiting for
//!   the reaper's own teardown. When the reaper dies (the host or the spawner was killed),
//!   the kernel kills every process of the namespace. Either way nothing started for the
//!   run survives it, and the run ends only once all of it is gone (but for the reaper's
//!   exit in progress, which runs no code of the run's).
//! - Signals the host sends to the process group reach the provider and its group as before:
//!   the reaper, as a namespace init, gets only SIGKILL from outside.
//! - **Landlock** is applied in the reaper before the provider is forked, so the provider and
//!   all its descendants inherit it; `no_new_privs` is set with it. The ruleset is built in
//!   the spawner before the fork (opening the rule paths), on the common rules' ruleset
//!   when one was prepared ahead ([`PreparedRuleset`]; see `spawner.rs`).
//! - The reaper **hides** the confinement's hidden paths (secrets beneath a rule, decided by
//!   `grant::confine`) with mounts in its mount namespace, once that namespace's mounts no
//!   longer propagate to the host's; a mask it cannot make stops the launch.
//! - Without a PID namespace (the kernel refuses one) the spawner's child is the provider,
//!   under Landlock alone, and nothing can be hidden (such a launch is refused).
//! - Forks are the raw `clone3` system call and, between fork and exec, only
//!   async-signal-safe system calls run: every string is converted before the fork. The
//!   reaper's fork of the provider (and the one-time namespace probe's child) shares the
//!   forking process's memory until its exec, as `posix_spawn` does
//!   ([`clone_sharing_memory`]): no page table is copied for a process that execs at once.
//!   (Until 2026-12 a keeper process sat between the spawner and the reaper to mirror the
//!   provider's exit: one fork and one exit report more per launch.)
//!
//! Must not: decide what is allowed (`grant::confine` does) or allocate after fork.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope,
};

use super::Confinement;
use crate::containment::{PathAccess, PathRule};

/// The newest Landlock ABI whose rights the host asks for.
const TARGET_ABI: ABI = ABI::V6;

/// The kernel's Landlock ABI version (none: not built in or disabled).
pub(crate) fn landlock_abi() -> Option<u32> {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) only returns
    // the ABI version; no memory is passed.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    (v > 0).then_some(v as u32)
}

/// Whether this process can create a PID namespace (root, or unprivileged user namespaces).
/// Tried once (see [`probe_namespaces`]) and remembered.
pub(crate) fn pid_namespace_available() -> bool {
    probe_namespaces() != Namespaces::Unavailable
}

/// Whether a launch's reaper can also mount in its mount namespace (to hide paths; a
/// security module may allow the namespaces and refuse their mounts). Tried with
/// [`pid_namespace_available`].
pub(crate) fn namespace_mounts_available() -> bool {
    probe_namespaces() == Namespaces::WithMounts
}

/// What a launch's namespaces can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Namespaces {
    /// They cannot be created.
    Unavailable,
    /// They can, but nothing can be mounted in them.
    WithoutMounts,
    /// They can, and their reaper can mount.
    WithMounts,
}

/// Tried once, by creating a child in new namespaces that makes its mounts private and
/// binds `/dev/null` onto itself there, then exits. The child shares the host's memory until
/// it exits (`CLONE_VM | CLONE_VFORK`, as `posix_spawn` does), so the probe does not copy
/// the host's page tables.
fn probe_namespaces() -> Namespaces {
    /// The probe child's exit code when its namespaces work but its mounts do not.
    const NO_MOUNTS: libc::c_int = 3;
    static PROBED: std::sync::OnceLock<Namespaces> = std::sync::OnceLock::new();
    *PROBED.get_or_init(|| {
        extern "C" fn try_mounts(_: *mut libc::c_void) -> libc::c_int {
            // SAFETY: plain system calls on C strings, in a mount namespace of its own (the
            // bind is undone with it, and made only once mounts no longer propagate).
            let mounted = unsafe {
                libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) == 0
                    && bind(c"/dev/null", c"/dev/null")
            };
            if mounted { 0 } else { NO_MOUNTS }
        }
        let mut stack = vec![0u128; 1024]; // 16 KiB, 16-byte aligned
        // SAFETY: the child runs `try_mounts` on `stack` (the top of which is passed, as the
        // stack grows down) and exits; this thread is suspended until it has, so the stack
        // outlives it.
        let started = unsafe {
            clone_sharing_memory(
                try_mounts,
                stack.as_mut_ptr().add(stack.len()).cast(),
                namespace_flags(),
                std::ptr::null_mut(),
            )
        };
        let Ok(pid) = started else {
            return Namespaces::Unavailable;
        };
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r != pid || !libc::WIFEXITED(status) {
            return Namespaces::Unavailable;
        }
        match libc::WEXITSTATUS(status) {
            0 => Namespaces::WithMounts,
            NO_MOUNTS => Namespaces::WithoutMounts,
            _ => Namespaces::Unavailable,
        }
    })
}

fn namespace_flags() -> libc::c_int {
    // SAFETY: geteuid(2) cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let base = libc::CLONE_NEWPID | libc::CLONE_NEWNS;
    if root {
        base
    } else {
        base | libc::CLONE_NEWUSER
    }
}

/// A launch's confinement, prepared in the spawner (see `spawner.rs`) before the fork.
struct Confiner {
    ruleset: Option<OwnedFd>,
    namespace: bool,
    /// Paths to hide by mounts in the reaper's mount namespace (see [`Confiner::hide`]).
    hidden: Vec<std::ffi::CString>,
    flags: libc::c_int,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    grace_ms: u64,
    /// Landlock rights for the namespace's `/proc` (read).
    proc_access: u64,
}

impl std::fmt::Debug for Confiner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confiner")
            .field("landlock", &self.ruleset.is_some())
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl Confiner {
    /// Prepare `confinement` in the spawner: create the missing state directories (0700), build
    /// the Landlock ruleset (opening every rule's path; on `base`, the common rules' ruleset
    /// prepared ahead, when the launch names one), fix the namespace flags.
    fn new(confinement: &Confinement, base: Option<PreparedRuleset>) -> io::Result<Confiner> {
        for dir in &confinement.create {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "could not create the state directory {}: {e}",
                            dir.display()
                        ),
                    )
                })?;
        }
        if !confinement.hidden.is_empty() && !confinement.pid_namespace {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "paths can be hidden only in a mount namespace of the launch's own",
            ));
        }
        let ruleset = if confinement.landlock {
            Some(build_ruleset(base, &confinement.rules)?)
        } else {
            None
        };
        let hidden = confinement
            .hidden
            .iter()
            .map(|p| c_string(p.as_os_str().as_bytes(), "a hidden path"))
            .collect::<io::Result<Vec<_>>>()?;
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Ok(Confiner {
            ruleset,
            namespace: confinement.pid_namespace,
            hidden,
            flags: namespace_flags(),
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            grace_ms: confinement.grace.as_millis().min(u128::from(u32::MAX)) as u64,
            proc_access: access_for(PathAccess::Read).bits(),
        })
    }

    /// In the reaper, the namespaces' first process: map this user (a user namespace), give
    /// the namespace its own `/proc` and hide the hidden paths (once mounts no longer
    /// propagate to the host's), then Landlock, which the provider inherits (and which keeps
    /// it from unmounting what hides them).
    ///
    /// # Safety
    ///
    /// Only in the child of a launch: async-signal-safe system calls only.
    unsafe fn enter_namespaces(&self) -> io::Result<()> {
        unsafe {
            if self.flags & libc::CLONE_NEWUSER != 0 {
                write_file(c"/proc/self/setgroups", b"deny")?;
                write_file(c"/proc/self/uid_map", &self.uid_map)?;
                write_file(c"/proc/self/gid_map", &self.gid_map)?;
            }
            let private = libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) == 0;
            if !private && !self.hidden.is_empty() {
                // Mounts made now would show in the host's namespace: fail closed.
                return Err(io::Error::last_os_error());
            }
            if private
                && libc::mount(
                    c"proc".as_ptr(),
                    c"/proc".as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                ) == 0
            {
                // The host's /proc rule names the old mount: grant the new one.
                self.allow_new_proc()?;
            }
            self.hide()?;
            self.restrict()
        }
    }

    /// Hide every hidden path that exists: a file under a bind of `/dev/null` made read-only
    /// and `nodev` (so opening it fails with EACCES, also for root, which no file mode
    /// would stop), a directory under an empty read-only `tmpfs`. The first mask of each
    /// kind is made; every other one is a bind of it, which keeps its mount flags. A path
    /// that no longer exists (or lies under one hidden already) has nothing to hide; any
    /// other failure stops the launch.
    unsafe fn hide(&self) -> io::Result<()> {
        let (mut file_mask, mut dir_mask) = (None::<&std::ffi::CStr>, None::<&std::ffi::CStr>);
        unsafe {
            for path in &self.hidden {
                let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
                if libc::stat(path.as_ptr(), stat.as_mut_ptr()) != 0 {
                    let e = io::Error::last_os_error();
                    if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) {
                        continue;
                    }
                    return Err(e);
                }
                let is_dir = stat.assume_init().st_mode & libc::S_IFMT == libc::S_IFDIR;
                let mask = if is_dir {
                    &mut dir_mask
                } else {
                    &mut file_mask
                };
                let made = match *mask {
                    Some(first) => bind(first, path),
                    None if is_dir => {
                        libc::mount(
                            c"tmpfs".as_ptr(),
                            path.as_ptr(),
                            c"tmpfs".as_ptr(),
                            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                            c"size=4k,mode=555".as_ptr().cast(),
                        ) == 0
                    }
                    None => bind(c"/dev/null", path) && seal(path),
                };
                if !made {
                    return Err(io::Error::last_os_error());
                }
                mask.get_or_insert(path);
            }
        }
        Ok(())
    }

    /// Add a read rule for the namespace's own `/proc` to the ruleset.
    unsafe fn allow_new_proc(&self) -> io::Result<()> {
        let Some(ruleset) = &self.ruleset else {
            return Ok(());
        };
        /// `struct landlock_path_beneath_attr` (packed).
        #[repr(C, packed)]
        struct PathBeneathAttr {
            allowed_access: u64,
            parent_fd: i32,
        }
        unsafe {
            let fd = libc::open(c"/proc".as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let attr = PathBeneathAttr {
                allowed_access: self.proc_access,
                parent_fd: fd,
            };
            const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
            let r = libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                LANDLOCK_RULE_PATH_BENEATH,
                &raw const attr,
                0u32,
            );
            libc::close(fd);
            if r != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    unsafe fn restrict(&self) -> io::Result<()> {
        let Some(fd) = &self.ruleset else {
            return Ok(());
        };
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Start `spec` (in the spawner): the leader of a new process group, its stdio piped, under
/// its confinement. Every path, argument and variable is converted before the fork; the
/// child makes only async-signal-safe system calls until it execs. An error of the child
/// before its exec (a namespace, Landlock, `chdir`, `execve`) comes back through a
/// close-on-exec pipe as the call's error, as `std::process::Command` reports it.
pub(crate) fn launch(
    spec: &super::ProcessSpec,
    base: Option<PreparedRuleset>,
) -> io::Result<super::unix::Started> {
    let confiner = Confiner::new(&spec.confinement, base)?;
    let program = c_string(spec.program.as_os_str().as_bytes(), "the program path")?;
    let mut args = vec![program.clone()];
    for arg in &spec.args {
        args.push(c_string(arg.as_bytes(), "an argument")?);
    }
    let mut env = Vec::with_capacity(spec.env.len());
    for (name, value) in &spec.env {
        let mut entry = name.as_bytes().to_vec();
        entry.push(b'=');
        entry.extend_from_slice(value.as_bytes());
        env.push(c_string(&entry, "an environment variable")?);
    }
    let argv = null_terminated(&args);
    let envp = null_terminated(&env);
    let cwd = c_string(spec.cwd.as_os_str().as_bytes(), "the working directory")?;
    let (stdin_child, stdin_parent) = pipe(0)?;
    let (stdout_parent, stdout_child) = pipe(0)?;
    let (stderr_parent, stderr_child) = pipe(0)?;
    let (error_r, error_w) = pipe(0)?;
    // Non-blocking: the reaper never waits on a pipe a provider could have filled, and
    // the spawner reads what is there once the reaper is reaped.
    let status = if confiner.namespace {
        Some(pipe(libc::O_NONBLOCK)?)
    } else {
        None
    };
    // Every reaper closes its copy of the write end first, also one that does not check.
    let alive = if confiner.namespace {
        Some(spawner_alive_pipe()?)
    } else {
        None
    };
    // Never touched here: only the provider's child writes it, in the reaper's copy.
    let mut provider_stack = Vec::<u128>::with_capacity(PROVIDER_STACK / 16);
    let plan = ChildPlan {
        confiner: &confiner,
        program: &program,
        argv: &argv,
        envp: &envp,
        cwd: &cwd,
        stdio: [
            stdin_child.as_raw_fd(),
            stdout_child.as_raw_fd(),
            stderr_child.as_raw_fd(),
        ],
        error: error_w.as_raw_fd(),
        status: status.as_ref().map_or(-1, |(_, w)| w.as_raw_fd()),
        alive,
        death_signal: spec.parent_death_signal,
        // SAFETY: getpid(2) cannot fail.
        parent: unsafe { libc::getpid() },
        // SAFETY: the top of the allocation (the stack grows down).
        provider_stack: unsafe {
            provider_stack
                .as_mut_ptr()
                .add(provider_stack.capacity())
                .cast()
        },
    };
    let flags = if confiner.namespace {
        confiner.flags
    } else {
        0
    };
    // SAFETY: the child runs `ChildPlan::run`, which makes only async-signal-safe system
    // calls on memory prepared above, and never returns.
    let pid = unsafe { clone_process(flags)? };
    if pid == 0 {
        // SAFETY: in the child, see above.
        unsafe { plan.run() }
    }
    drop((stdin_child, stdout_child, stderr_child, error_w));
    let status = status.map(|(r, _w)| r);
    match exec_error(&error_r) {
        None => Ok(super::unix::Started {
            pid: pid as u32,
            stdio: [stdin_parent, stdout_parent, stderr_parent],
            status,
        }),
        Some(e) => {
            // The child (or, under a namespace, the reaper once the provider failed) has
            // exited or is about to.
            let mut ignored = 0;
            // SAFETY: waiting for our own child.
            while unsafe { libc::waitpid(pid, &mut ignored, 0) } < 0
                && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
            {}
            Err(e)
        }
    }
}

/// The size of the stack the provider's child runs on from its fork by the reaper to its
/// exec: it calls a handful of system calls (`dup2`, `sigprocmask`, `execve`) and, when one
/// fails, writes its error.
const PROVIDER_STACK: usize = 64 * 1024;

/// What the child of [`launch`] needs, prepared before the fork.
struct ChildPlan<'a> {
    confiner: &'a Confiner,
    program: &'a std::ffi::CStr,
    /// NULL-terminated pointers into the launch's `CString`s.
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    cwd: &'a std::ffi::CStr,
    /// The child's ends of stdin, stdout and stderr (all at 3 or above).
    stdio: [RawFd; 3],
    /// The write end of the close-on-exec pipe that reports an error before the exec.
    error: RawFd,
    /// The write end of the reaper's status pipe (-1 without a namespace).
    status: RawFd,
    /// Under a namespace, the spawner's alive pipe (read, write).
    alive: Option<(RawFd, RawFd)>,
    /// Whether the child dies with the spawner (`PR_SET_PDEATHSIG`).
    death_signal: bool,
    /// The spawner's pid.
    parent: libc::pid_t,
    /// The top of the stack the provider's child runs on until its exec under a namespace
    /// (see [`ChildPlan::start_provider`]): memory of the launch's, 16-byte aligned, which
    /// the reaper has as a copy.
    provider_stack: *mut libc::c_void,
}

impl ChildPlan<'_> {
    /// The child's life: on success the provider execs (and, under a namespace, this
    /// process becomes its reaper); any error is written to the error pipe and the child
    /// exits with 127.
    ///
    /// # Safety
    ///
    /// Only in the child of `clone_process`: async-signal-safe system calls only.
    unsafe fn run(&self) -> ! {
        unsafe { self.fail(self.start()) }
    }

    /// Returns only with the error that stopped the launch.
    unsafe fn start(&self) -> io::Error {
        unsafe {
            // The spawner must be the only holder of the alive pipe's write end (see
            // `spawner_alive_pipe`): first thing, before anything can fail.
            if let Some((_, alive_w)) = self.alive {
                libc::close(alive_w);
            }
            if libc::chdir(self.cwd.as_ptr()) != 0 || libc::setpgid(0, 0) != 0 {
                return io::Error::last_os_error();
            }
            if !self.confiner.namespace {
                if self.death_signal
                    && let Err(e) = super::unix::die_with_parent(self.parent)
                {
                    return e;
                }
                if let Err(e) = self.confiner.restrict() {
                    return e;
                }
                return self.exec();
            }
            // The reaper: pid 1 of the new namespaces.
            if let Some((alive_r, _)) = self.alive.filter(|_| self.death_signal) {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return io::Error::last_os_error();
                }
                // The spawner holds the only write end: EOF means it is already gone (its
                // descriptors close before its children are told of its death), and the
                // signal set above may never come. (`getppid` cannot tell: the parent is
                // outside this namespace.)
                let mut byte = 0u8;
                if libc::read(alive_r, (&raw mut byte).cast(), 1) == 0 {
                    libc::_exit(137);
                }
                libc::close(alive_r);
            }
            if let Err(e) = self.confiner.enter_namespaces() {
                return e;
            }
            let provider = match self.start_provider() {
                Err(e) => return e,
                Ok(provider) => provider,
            };
            // The provider has exec'd (or failed, its error already in the pipe): say so
            // with a byte (see `exec_error`) rather than by the pipe's end alone. A write
            // wakes the waiting spawner as a hand-over to this CPU, which this process
            // leaves at once; the pipe's end woke it on the CPU it last ran on, behind the
            // starting provider (docs/performance.md, "The host's own overhead").
            //
            // The write's result is not needed: a spawner that no longer reads has given
            // up the launch (and a SIGPIPE ends this reaper, its namespace with it).
            let started = STARTED_MARK;
            libc::write(self.error, (&raw const started).cast(), 1);
            libc::close(self.error);
            reaper_loop(provider, self.status, self.confiner.grace_ms)
        }
    }

    /// The reaper's fork of the provider, sharing the reaper's memory until the provider's
    /// `execve` ([`clone_sharing_memory`], on [`ChildPlan::provider_stack`]): no page table
    /// of the reaper (a copy of the spawner: the host's executable mapped whole, its heap) is
    /// copied for a process that replaces its memory at once, and the exec has no copy to
    /// tear down. The child starts with every signal blocked and unblocks them only just
    /// before its `execve` (see [`ChildPlan::exec`]), which resets every handler. An error
    /// before the exec reaches the error pipe as with a copied child; the child then exits
    /// 127.
    ///
    /// # Safety
    ///
    /// Only in the reaper (the child of a launch), with `self` alive until this returns.
    unsafe fn start_provider(&self) -> io::Result<libc::pid_t> {
        extern "C" fn provider(plan: *mut libc::c_void) -> libc::c_int {
            // SAFETY: `plan` is the reaper's `ChildPlan`, alive while this child runs (the
            // reaper is suspended until it execs or exits); the child makes only
            // async-signal-safe system calls, as any child of a launch.
            unsafe {
                let plan = &*plan.cast::<ChildPlan>();
                libc::close(plan.status);
                plan.fail(plan.exec())
            }
        }
        // SAFETY: the stack is this launch's (see `launch`), and `self` outlives the child's
        // use of it: this thread is suspended until the child has exec'd or exited.
        unsafe {
            clone_sharing_memory(
                provider,
                self.provider_stack,
                0,
                std::ptr::from_ref(self).cast_mut().cast(),
            )
        }
    }

    /// Report `error` (what stopped the launch before its exec) through the error pipe and
    /// exit 127.
    ///
    /// # Safety
    ///
    /// Only in a child of a launch, before its exec.
    unsafe fn fail(&self, error: io::Error) -> ! {
        unsafe {
            let errno: libc::c_int = error.raw_os_error().unwrap_or(libc::EINVAL);
            libc::write(
                self.error,
                (&raw const errno).cast(),
                std::mem::size_of::<libc::c_int>(),
            );
            libc::_exit(127)
        }
    }

    /// The provider's last step: stdio in place, the signal state a new program expects
    /// (what `std::process::Command` does: an empty mask, SIGPIPE at its default, which
    /// Rust programs ignore), every other descriptor closed at exec, then `execve`.
    unsafe fn exec(&self) -> io::Error {
        unsafe {
            for (target, &fd) in self.stdio.iter().enumerate() {
                // dup2 clears close-on-exec on the copy; the originals (all at 3 or above)
                // keep it.
                if libc::dup2(fd, target as libc::c_int) < 0 {
                    return io::Error::last_os_error();
                }
            }
            let mut empty = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(empty.as_mut_ptr());
            libc::sigprocmask(libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut());
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            // Nothing the spawner (or a host serving launches itself) left inheritable
            // reaches the provider; kernels before 5.11 refuse the flag, and what is
            // close-on-exec already closes anyway.
            const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC);
            libc::execve(
                self.program.as_ptr(),
                self.argv.as_ptr(),
                self.envp.as_ptr(),
            );
            io::Error::last_os_error()
        }
    }
}

/// `fork(2)`, with `flags` (namespaces), as the raw system call (`clone3`, or `clone` where
/// a seccomp filter refuses `clone3` with `ENOSYS`): no `atfork` handler runs, so a child
/// of a multithreaded process (a host serving launches itself) does not wait for a lock
/// another thread held, and the reaper can fork the provider without glibc's state.
///
/// # Safety
///
/// The child must make only async-signal-safe calls until it execs or exits.
unsafe fn clone_process(flags: libc::c_int) -> io::Result<libc::pid_t> {
    /// The first fields of `struct clone_args` (`CLONE_ARGS_SIZE_VER0`).
    #[repr(C)]
    struct CloneArgs {
        flags: u64,
        pidfd: u64,
        child_tid: u64,
        parent_tid: u64,
        exit_signal: u64,
        stack: u64,
        stack_size: u64,
        tls: u64,
    }
    let args = CloneArgs {
        flags: flags as u32 as u64,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: 0,
        stack_size: 0,
        tls: 0,
    };
    // SAFETY: clone3 with no stack is fork with `flags`: the child runs on a copy of this
    // stack; the caller keeps the child to async-signal-safe calls.
    let mut pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &raw const args,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
        // SAFETY: as above; the arguments after the flags (stack, and the thread-id and
        // TLS pointers, in whichever order the architecture takes them) are all zero.
        pid = unsafe {
            libc::syscall(
                libc::SYS_clone,
                (flags | libc::SIGCHLD) as libc::c_ulong,
                0usize,
                0usize,
                0usize,
                0usize,
            )
        };
    }
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid as libc::pid_t)
}

/// Start `entry(arg)` in a child that shares this process's memory until it execs or
/// exits, as `posix_spawn` does (`CLONE_VM | CLONE_VFORK`, with `flags` — namespaces — on
/// top): this thread is suspended until then, and no page table is copied. The child runs
/// on `stack_top` (the top of 16-byte aligned memory it may use alone) with every signal
/// blocked, so no handler of this process's runs in it on the shared memory; the mask is
/// restored here once the clone returns.
///
/// # Safety
///
/// `entry` makes only async-signal-safe system calls and touches no memory this thread
/// uses but what it was given; `stack_top` and `arg` stay valid until the child has
/// exec'd or exited (this call returns only then).
unsafe fn clone_sharing_memory(
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    stack_top: *mut libc::c_void,
    flags: libc::c_int,
    arg: *mut libc::c_void,
) -> io::Result<libc::pid_t> {
    // SAFETY: signal masks of this thread only; the clone as the caller promised.
    unsafe {
        let mut all = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        let mut before = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigfillset(all.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), before.as_mut_ptr());
        let pid = libc::clone(
            entry,
            stack_top,
            flags | libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            arg,
        );
        let error = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, before.as_ptr(), std::ptr::null_mut());
        if pid < 0 { Err(error) } else { Ok(pid) }
    }
}

/// The spawner's alive pipe (read, write), made on first use and kept for the life of the
/// process: the write end is held only here — every child closes its copy first thing —,
/// so a reaper that reads EOF from it knows the spawner is gone. Both ends are
/// close-on-exec and non-blocking (nothing is ever written).
fn spawner_alive_pipe() -> io::Result<(RawFd, RawFd)> {
    static PIPE: std::sync::OnceLock<(OwnedFd, OwnedFd)> = std::sync::OnceLock::new();
    if PIPE.get().is_none() {
        let made = pipe(libc::O_NONBLOCK)?;
        // Only the serving thread launches; a lost race would just drop this pair.
        let _ = PIPE.set(made);
    }
    let (r, w) = PIPE.get().expect("set above");
    Ok((r.as_raw_fd(), w.as_raw_fd()))
}

/// A close-on-exec pipe (read, write) with extra `flags`, both ends at 3 or above (a
/// process started with stdio closed could get 0..2, which the child's stdio would
/// overwrite).
fn pipe(flags: libc::c_int) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2(2) fills `fds` when it returns 0.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: two fresh descriptors owned from here.
    let [r, w] = fds.map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
    Ok((above_stdio(r)?, above_stdio(w)?))
}

fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor (at 3 or above) or -1.
    let copy = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned from here.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

/// The byte a reaper writes to the error pipe once its provider's fork has returned (see
/// [`exec_error`]).
const STARTED_MARK: u8 = 0xA5;

/// The error a launch's child reported before its exec, if any: an `errno` (4 bytes,
/// written at once, so never split by a read), else success, known from the pipe's end
/// (the exec, or the child's exit, closes the last write end) or, under a namespace, from
/// the reaper's [`STARTED_MARK`] as the first byte: the reaper writes it only after its
/// provider's fork returned, that is after the provider exec'd or wrote its error and
/// exited, so an error always comes before it.
fn exec_error(pipe: &OwnedFd) -> Option<io::Error> {
    let mut errno: libc::c_int = 0;
    let mut got = 0usize;
    let size = std::mem::size_of::<libc::c_int>();
    loop {
        // SAFETY: reads into the remaining bytes of `errno`.
        let n = unsafe {
            libc::read(
                pipe.as_raw_fd(),
                (&raw mut errno).cast::<u8>().add(got).cast(),
                size - got,
            )
        };
        match n {
            0 => break,
            1 if got == 0 && errno.to_ne_bytes()[0] == STARTED_MARK => return None,
            n if n > 0 => {
                got += n as usize;
                if got == size {
                    break;
                }
            }
            _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => return Some(io::Error::last_os_error()),
        }
    }
    match got {
        0 => None,
        n if n == size => Some(io::Error::from_raw_os_error(errno)),
        _ => Some(io::Error::other(
            "the provider's process reported a truncated error before its exec",
        )),
    }
}

fn c_string(bytes: &[u8], what: &str) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} of the launch contains a NUL byte"),
        )
    })
}

fn null_terminated(strings: &[std::ffi::CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// Write `data` to a /proc file (user namespace maps).
unsafe fn write_file(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        libc::close(fd);
        if n != data.len() as isize {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Close every descriptor from 3 up except those in `keep` (ascending).
unsafe fn close_from_3_except(keep: &[libc::c_int]) {
    let mut next = 3;
    unsafe {
        for &k in keep {
            if k > next {
                libc::syscall(libc::SYS_close_range, next as u32, (k - 1) as u32, 0u32);
            }
            next = next.max(k + 1);
        }
        libc::syscall(libc::SYS_close_range, next as u32, u32::MAX, 0u32);
    }
}

/// The reaper: reap everything; when the provider ends, stop what is left (SIGTERM, then
/// SIGKILL at the end of the grace period), report the provider's status to the spawner and
/// exit.
///
/// What is left is waited for, not polled: SIGCHLD is blocked in this process (only here:
/// the provider was forked before, with the spawner's mask) so each end is queued, and the
/// reaper sleeps in `sigtimedwait` until a child ends or the grace period is over. A
/// leftover that stops at SIGTERM therefore ends the run as soon as it is gone (a 10 ms
/// polling step used to add up to 10 ms to every run that left a process behind).
unsafe fn reaper_loop(provider: libc::pid_t, status_w: libc::c_int, grace_ms: u64) -> ! {
    unsafe {
        for fd in 0..3 {
            libc::close(fd);
        }
        close_from_3_except(&[status_w]);
        let mut child_ended = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(child_ended.as_mut_ptr());
        libc::sigaddset(child_ended.as_mut_ptr(), libc::SIGCHLD);
        let child_ended = child_ended.assume_init();
        libc::sigprocmask(libc::SIG_BLOCK, &child_ended, std::ptr::null_mut());
        let mut provider_status = 0;
        loop {
            let mut status = 0;
            let pid = libc::waitpid(-1, &mut status, 0);
            if pid == provider {
                provider_status = status;
                break;
            }
            if pid < 0 && *libc::__errno_location() != libc::EINTR {
                break;
            }
        }
        libc::kill(-1, libc::SIGTERM);
        // `Instant::now` is `clock_gettime(CLOCK_MONOTONIC)`: async-signal-safe.
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(grace_ms);
        'left: loop {
            // Reap every child that has ended; stop when none is left (ECHILD).
            loop {
                let mut status = 0;
                match libc::waitpid(-1, &mut status, libc::WNOHANG) {
                    0 => break,
                    pid if pid > 0 => continue,
                    _ if *libc::__errno_location() == libc::EINTR => continue,
                    _ => break 'left,
                }
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                libc::kill(-1, libc::SIGKILL);
                let mut status = 0;
                while libc::waitpid(-1, &mut status, 0) > 0 {}
                break;
            }
            // `as _`: the field's own type (`libc::time_t` is deprecated on musl, whose
            // width changed); `left` is at most the grace period, a few seconds.
            let wait = libc::timespec {
                tv_sec: left.as_secs() as _,
                tv_nsec: left.subsec_nanos() as libc::c_long,
            };
            // Returns SIGCHLD when a child ended (or one ended before the call: it stays
            // pending while blocked), or EAGAIN at the deadline; both go round again.
            libc::sigtimedwait(&child_ended, std::ptr::null_mut(), &wait);
        }
        libc::write(
            status_w,
            (&raw const provider_status).cast(),
            std::mem::size_of::<libc::c_int>(),
        );
        libc::_exit(0)
    }
}

/// `mount --bind from to`; whether it succeeded.
///
/// # Safety
///
/// Async-signal-safe: a system call on C strings.
unsafe fn bind(from: &std::ffi::CStr, to: &std::ffi::CStr) -> bool {
    // SAFETY: C strings that outlive the call.
    unsafe {
        libc::mount(
            from.as_ptr(),
            to.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        ) == 0
    }
}

/// Make the bind mount at `at` read-only, `nodev`, `nosuid` and `noexec`; whether it
/// succeeded.
///
/// # Safety
///
/// Async-signal-safe: a system call on a C string.
unsafe fn seal(at: &std::ffi::CStr) -> bool {
    // SAFETY: a C string that outlives the call.
    unsafe {
        libc::mount(
            std::ptr::null(),
            at.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND
                | libc::MS_REMOUNT
                | libc::MS_RDONLY
                | libc::MS_NOSUID
                | libc::MS_NODEV
                | libc::MS_NOEXEC,
            std::ptr::null(),
        ) == 0
    }
}

/// The Landlock ruleset for `rules`, as a file descriptor for `landlock_restrict_self`.
fn build_ruleset(base: Option<PreparedRuleset>, rules: &[PathRule]) -> io::Result<OwnedFd> {
    let ruleset = match base {
        Some(base) => base.ruleset,
        None => new_ruleset()?,
    };
    Option::<OwnedFd>::from(add_rules(ruleset, rules)?)
        .ok_or_else(|| io::Error::other("the kernel has no Landlock support"))
}

/// How long a ruleset built ahead of a launch stays usable. A rule grants the file its path
/// named when the rule was added (Landlock binds the inode): a file replaced after that (a
/// new `/etc/resolv.conf` renamed over the old one) is not granted by it. A launch's own
/// ruleset binds its paths at the launch, and its provider keeps them for its whole life;
/// one prepared ahead binds them at most this much earlier — long enough for a run's
/// preparation (milliseconds) and for back-to-back runs, short enough that a launch after a
/// pause binds them anew.
const PREPARED_FRESH: std::time::Duration = std::time::Duration::from_secs(1);

/// A Landlock ruleset holding a common rule set (`super::CommonRules`: the system's),
/// built in the spawner ahead of a launch, which adds its own rules to it
/// (`super::spawner`, "Common rules").
pub(crate) struct PreparedRuleset {
    ruleset: landlock::RulesetCreated,
    built: std::time::Instant,
}

impl PreparedRuleset {
    /// Open every rule's path and add it (a path that does not exist grants nothing).
    pub(crate) fn build(rules: &[PathRule]) -> io::Result<PreparedRuleset> {
        let built = std::time::Instant::now();
        Ok(PreparedRuleset {
            ruleset: add_rules(new_ruleset()?, rules)?,
            built,
        })
    }

    /// Young enough to use (see [`PREPARED_FRESH`]).
    pub(crate) fn fresh(&self) -> bool {
        self.built.elapsed() < PREPARED_FRESH
    }

    /// How long it stays fresh.
    pub(crate) fn fresh_for(&self) -> std::time::Duration {
        PREPARED_FRESH.saturating_sub(self.built.elapsed())
    }

    /// When it was built (tests tell rulesets apart by it).
    #[cfg(test)]
    pub(crate) fn built(&self) -> std::time::Instant {
        self.built
    }

    /// Make it `by` older (tests of staleness).
    #[cfg(test)]
    pub(crate) fn age(&mut self, by: std::time::Duration) {
        self.built = self
            .built
            .checked_sub(by)
            .expect("an instant that far back");
    }
}

/// An empty ruleset handling every filesystem right and scoping signals.
fn new_ruleset() -> io::Result<landlock::RulesetCreated> {
    let to_io = |e: landlock::RulesetError| io::Error::other(e.to_string());
    let all = AccessFs::from_all(TARGET_ABI);
    Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(to_io)?
        .scope(Scope::Signal)
        .map_err(to_io)?
        .create()
        .map_err(to_io)
}

/// `ruleset` with a rule for each of `rules` whose path exists.
fn add_rules(
    mut ruleset: landlock::RulesetCreated,
    rules: &[PathRule],
) -> io::Result<landlock::RulesetCreated> {
    let to_io = |e: landlock::RulesetError| io::Error::other(e.to_string());
    for rule in rules {
        let fd = match PathFd::new(&rule.path) {
            Ok(fd) => fd,
            // Created or removed since the plan; the rule has nothing to grant.
            Err(_) => continue,
        };
        // The opened file's type (not the path's again: one path walk per rule, and no race
        // with a rename in between).
        let is_dir = is_directory(fd.as_fd());
        let mut access = access_for(rule.access);
        if !is_dir {
            access &= AccessFs::from_file(TARGET_ABI);
        }
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(to_io)?;
    }
    Ok(ruleset)
}

/// Whether `fd` (an `O_PATH` descriptor is enough) is a directory.
fn is_directory(fd: BorrowedFd<'_>) -> bool {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `fd` is open; fstat(2) fills `stat` when it returns 0, and only then is it read.
    unsafe {
        libc::fstat(fd.as_raw_fd(), stat.as_mut_ptr()) == 0
            && stat.assume_init().st_mode & libc::S_IFMT == libc::S_IFDIR
    }
}

fn access_for(access: PathAccess) -> BitFlags<AccessFs> {
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    match access {
        PathAccess::Read => read,
        PathAccess::ReadExecute => read | AccessFs::Execute,
        // Everything but making device nodes: a root provider could otherwise make one for
        // the disk in its workspace and read every file through it.
        PathAccess::ReadWrite => {
            AccessFs::from_all(TARGET_ABI) & !(AccessFs::MakeChar | AccessFs::MakeBlock)
        }
        PathAccess::Device => read | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error pipe as a reaper or a child leaves it: `written`, then every write end
    /// closed (`closed`) or one still open. Non-blocking, so a read that would wait for a
    /// write end still open fails (`WouldBlock`) instead of hanging the test.
    fn read_back(written: &[u8], closed: bool) -> Option<io::Error> {
        let (r, w) = pipe(libc::O_NONBLOCK).expect("a pipe");
        // SAFETY: writing a live buffer to a pipe we own.
        let n = unsafe { libc::write(w.as_raw_fd(), written.as_ptr().cast(), written.len()) };
        assert_eq!(n, written.len() as isize);
        let _open = if closed {
            drop(w);
            None
        } else {
            Some(w)
        };
        exec_error(&r)
    }

    #[test]
    fn the_error_pipe_reads_as_the_launch_went() {
        let errno = libc::ENOENT.to_ne_bytes();
        // Without a namespace: the exec closed the pipe, or the child wrote its error.
        assert!(read_back(&[], true).is_none());
        let e = read_back(&errno, true).expect("an error");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        // Under a namespace: the reaper's mark says the provider started, without waiting
        // for the pipe's end (the write end is still open here: a wait would never end).
        assert!(read_back(&[STARTED_MARK], false).is_none());
        // The provider's error comes before the mark and wins.
        let mut both = errno.to_vec();
        both.push(STARTED_MARK);
        let e = read_back(&both, false).expect("an error");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        // A lone byte that is not the mark is a truncated error, not a start.
        let e = read_back(&[STARTED_MARK ^ 1], true).expect("an error");
        assert!(e.to_string().contains("truncated"), "{e}");
    }
}
