//! Linux confinement of a provider: Landlock and a PID namespace with a reaper as its init.
//!
//! The shape of one confined launch (every box is one process; the host sees only the first,
//! as the pid its spawner reports — see `spawner.rs`):
//!
//! ```text
//! spawner ──fork──▶ keeper (the spawner's child, group leader; ignores INT/TERM/HUP)
//!                  │  unshare(PID | mount [| user]) then fork
//!                  ▼
//!                reaper (pid 1 of the new namespace, fresh /proc, Landlock applied)
//!                  │  fork, exec
//!                  ▼
//!                provider (pid 2) and every descendant, setsid or not
//! ```
//!
//! - The **keeper** mirrors the provider's exit (code or signal), so the pipeline sees the
//!   provider's status; it has `PR_SET_PDEATHSIG(SIGKILL)` towards the spawner (which has it
//!   towards the host).
//! - The **reaper** has `PR_SET_PDEATHSIG(SIGKILL)` towards the keeper. When the provider
//!   exits it sends SIGTERM to everything left in the namespace, waits for them to end (woken
//!   by each child's end, not polling) up to the grace period, then SIGKILL; when the reaper
//!   dies (the host, the spawner or the keeper was killed), the kernel kills every process of
//!   the namespace. Either way nothing started for the run
//!   survives it.
//! - Signals the host sends to the process group reach the provider and its group as before:
//!   the keeper ignores the polite ones and the reaper, as a namespace init, gets only SIGKILL
//!   from outside.
//! - **Landlock** is applied in the reaper before the provider is forked, so the provider and
//!   all its descendants inherit it; `no_new_privs` is set with it. The ruleset is built in
//!   the spawner before the fork (opening the rule paths); between fork and exec only
//!   async-signal-safe system calls run.
//!
//! Must not: decide what is allowed (`grant::confine` does) or allocate after fork.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

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
/// Tried once, by creating a child in new namespaces that exits at once, and remembered.
/// The child shares the host's memory until it exits (`CLONE_VM | CLONE_VFORK`, as
/// `posix_spawn` does), so the probe does not copy the host's page tables.
pub(crate) fn pid_namespace_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        extern "C" fn exit_at_once(_: *mut libc::c_void) -> libc::c_int {
            0
        }
        let mut stack = vec![0u128; 1024]; // 16 KiB, 16-byte aligned
        let flags = namespace_flags() | libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
        // SAFETY: the child runs `exit_at_once` on `stack` (the top of which is passed, as the
        // stack grows down) and exits; CLONE_VFORK suspends this thread until it has, so the
        // stack outlives it.
        let pid = unsafe {
            libc::clone(
                exit_at_once,
                stack.as_mut_ptr().add(stack.len()).cast(),
                flags,
                std::ptr::null_mut(),
            )
        };
        if pid < 0 {
            return false;
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        r == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
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

/// What the child does between fork and exec, prepared in the spawner (see `spawner.rs`).
pub(crate) struct Confiner {
    ruleset: Option<OwnedFd>,
    namespace: bool,
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
    /// the Landlock ruleset (opening every rule's path), fix the namespace flags.
    pub(crate) fn new(confinement: &Confinement) -> io::Result<Confiner> {
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
        let ruleset = if confinement.landlock {
            Some(build_ruleset(&confinement.rules)?)
        } else {
            None
        };
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Ok(Confiner {
            ruleset,
            namespace: confinement.pid_namespace,
            flags: namespace_flags(),
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            grace_ms: confinement.grace.as_millis().min(u128::from(u32::MAX)) as u64,
            proc_access: access_for(PathAccess::Read).bits(),
        })
    }

    /// Runs in the forked child. Returns in the provider's process (which then execs); the
    /// keeper and the reaper never return.
    ///
    /// # Safety
    ///
    /// Only call between fork and exec: it forks, and uses only async-signal-safe calls.
    pub(crate) unsafe fn in_child(&self) -> io::Result<()> {
        unsafe {
            if self.namespace {
                if libc::unshare(self.flags) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if self.flags & libc::CLONE_NEWUSER != 0 {
                    write_file(c"/proc/self/setgroups", b"deny")?;
                    write_file(c"/proc/self/uid_map", &self.uid_map)?;
                    write_file(c"/proc/self/gid_map", &self.gid_map)?;
                }
                let mut status_pipe = [0; 2];
                let mut alive_pipe = [0; 2];
                if libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0
                    || libc::pipe2(alive_pipe.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                let [status_r, status_w] = status_pipe;
                let [alive_r, alive_w] = alive_pipe;
                match libc::fork() {
                    -1 => return Err(io::Error::last_os_error()),
                    0 => {}
                    reaper => keeper(reaper, status_r, alive_w),
                }
                // The reaper: pid 1 of the new namespace.
                libc::close(status_r);
                libc::close(alive_w);
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                // The keeper holds the only write end: EOF means it is already gone.
                let mut byte = 0u8;
                if libc::read(alive_r, (&raw mut byte).cast(), 1) == 0 {
                    libc::_exit(137);
                }
                // A /proc of this namespace, so the provider's pids and /proc agree; only
                // once this mount namespace no longer propagates mounts to the host's.
                let private = libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) == 0;
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
                self.restrict()?;
                match libc::fork() {
                    -1 => return Err(io::Error::last_os_error()),
                    0 => {
                        libc::close(alive_r);
                        libc::close(status_w);
                        return Ok(());
                    }
                    provider => reaper_loop(provider, status_w, self.grace_ms),
                }
            }
            self.restrict()
        }
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

/// The keeper: wait for the reaper, then end as the provider did.
unsafe fn keeper(reaper: libc::pid_t, status_r: libc::c_int, alive_w: libc::c_int) -> ! {
    unsafe {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_IGN);
        }
        // Keep the alive pipe's write end open (it closes with this process) and nothing of
        // the provider's stdio, so its end is seen when the provider's processes end.
        for fd in 0..3 {
            libc::close(fd);
        }
        let mut keep = [status_r, alive_w];
        keep.sort_unstable();
        close_from_3_except(&keep);
        let mut reaper_status = 0;
        while libc::waitpid(reaper, &mut reaper_status, 0) < 0 {
            if *libc::__errno_location() != libc::EINTR {
                libc::_exit(126);
            }
        }
        let mut provider_status: libc::c_int = 0;
        let n = libc::read(
            status_r,
            (&raw mut provider_status).cast(),
            std::mem::size_of::<libc::c_int>(),
        );
        let status = if n == std::mem::size_of::<libc::c_int>() as isize {
            provider_status
        } else {
            reaper_status
        };
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            libc::signal(sig, libc::SIG_DFL);
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            126
        })
    }
}

/// The reaper: reap everything; when the provider ends, stop what is left (SIGTERM, then
/// SIGKILL at the end of the grace period), report the provider's status to the keeper and
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
            let wait = libc::timespec {
                tv_sec: left.as_secs() as libc::time_t,
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

/// The Landlock ruleset for `rules`, as a file descriptor for `landlock_restrict_self`.
fn build_ruleset(rules: &[PathRule]) -> io::Result<OwnedFd> {
    let to_io = |e: landlock::RulesetError| io::Error::other(e.to_string());
    let all = AccessFs::from_all(TARGET_ABI);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(to_io)?
        .scope(Scope::Signal)
        .map_err(to_io)?
        .create()
        .map_err(to_io)?;
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
    Option::<OwnedFd>::from(ruleset)
        .ok_or_else(|| io::Error::other("the kernel has no Landlock support"))
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
        PathAccess::ReadWrite => AccessFs::from_all(TARGET_ABI),
        PathAccess::Device => read | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev,
    }
}
