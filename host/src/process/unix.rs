//! Linux/Unix process control: process groups, parent-death signal, group signalling.
//!
//! Every provider runs as the leader of its own process group, so a signal to the group
//! reaches every descendant that did not deliberately leave it. On Linux the child also gets
//! `PR_SET_PDEATHSIG(SIGKILL)`, so a host that dies without cleanup still takes it down.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
#[cfg(not(target_os = "linux"))]
use std::process::Stdio;

use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

use super::{ProcessSpec, Sig};

/// A spawned provider.
pub(crate) struct Spawned {
    pub child: ProviderChild,
    pub pid: u32,
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
    pub guard: GroupGuard,
    /// When the host learned that the program runs (its `exec` done): the spawner's report,
    /// as its reader thread read it ([`Launched::at`](super::spawner::Launched::at)).
    pub started: std::time::Instant,
}

/// The provider's exit, as the spawner reports it (see [`Exit`](super::spawner::Exit)).
pub(crate) struct ProviderChild {
    exit: tokio::sync::watch::Receiver<Option<super::spawner::Exit>>,
}

impl ProviderChild {
    /// A child whose exit is reported through `exit` (for tests).
    #[cfg(test)]
    pub(crate) fn reported_through(
        exit: tokio::sync::watch::Receiver<Option<super::spawner::Exit>>,
    ) -> ProviderChild {
        ProviderChild { exit }
    }

    /// Wait for the exit (cancel-safe). An error when the spawner ended first (the process
    /// died with it).
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        let exit = self
            .exit
            .wait_for(Option::is_some)
            .await
            .map_err(|_| spawner_gone())?;
        Ok(ExitStatus::from_raw(
            exit.expect("waited for a status").status,
        ))
    }

    /// The exit status if the process has ended.
    pub(crate) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(exit) = *self.exit.borrow() {
            return Ok(Some(ExitStatus::from_raw(exit.status)));
        }
        match self.exit.has_changed() {
            Err(_) => Err(spawner_gone()),
            Ok(_) => Ok(None),
        }
    }

    /// Whether the exit was reported by the launch's reaper once its namespace was empty,
    /// and the reaper is not reaped yet: the process group holds nothing but the reaper,
    /// which is exiting.
    pub(crate) fn only_the_reaper_is_left(&self) -> bool {
        self.exit.borrow().is_some_and(|exit| exit.reaper_exiting)
    }

    /// Wait until the spawner has reaped the reaper of an exit reported by it; `false`
    /// when the spawner ended first.
    pub(super) async fn reaper_reaped(&mut self) -> bool {
        self.exit
            .wait_for(|exit| exit.is_some_and(|exit| !exit.reaper_exiting))
            .await
            .is_ok()
    }
}

fn spawner_gone() -> io::Error {
    io::Error::other("the host's spawner ended before the provider's exit was reported")
}

/// Kills the process group with SIGKILL when dropped while armed (host panic, task abort,
/// runtime shutdown): no provider outlives its run.
pub(crate) struct GroupGuard {
    pgid: i32,
    armed: bool,
}

impl Spawned {
    /// The child's identity (pid, group, start time).
    pub(crate) fn identity(&self) -> crate::result::ProcessIdentity {
        crate::result::ProcessIdentity {
            pid: self.pid,
            pgid: self.guard.pgid,
            start_ticks: start_ticks(self.pid),
        }
    }
}

/// Field 22 of `/proc/<pid>/stat`: the start time in clock ticks after boot.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after `(comm)`: state is field 3, so starttime (22) is the 20th after it.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

impl GroupGuard {
    /// An armed guard of group `pgid` (for tests).
    #[cfg(test)]
    pub(crate) fn armed(pgid: i32) -> GroupGuard {
        GroupGuard { pgid, armed: true }
    }

    /// Whether dropping it would kill the group.
    #[cfg(test)]
    pub(crate) fn is_armed(&self) -> bool {
        self.armed
    }

    /// The process group id.
    pub(crate) fn pgid(&self) -> i32 {
        self.pgid
    }

    /// The group is known to be gone.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = signal_group(self.pgid, Sig::Kill);
        }
    }
}

/// Spawn `spec` as the leader of a new process group, with piped stdio, through the host's
/// spawner (`spawner.rs`): the host itself never forks.
pub(crate) async fn spawn(spec: &ProcessSpec) -> io::Result<Spawned> {
    let super::spawner::Launched {
        pid,
        stdio: [stdin, stdout, stderr],
        exit,
        at: started,
    } = super::spawner::launch(spec).await?;
    // Armed first: if wrapping the pipes fails, the group is killed.
    let guard = GroupGuard {
        pgid: pid as i32,
        armed: true,
    };
    Ok(Spawned {
        stdin: Some(ChildStdin::from_std(std::process::ChildStdin::from(stdin))?),
        stdout: Some(ChildStdout::from_std(std::process::ChildStdout::from(
            stdout,
        ))?),
        stderr: Some(ChildStderr::from_std(std::process::ChildStderr::from(
            stderr,
        ))?),
        child: ProviderChild { exit },
        pid,
        guard,
        started,
    })
}

/// A process [`start`] started: the spawner's child, which leads the launch's process
/// group — the provider itself, or, under a PID namespace, the namespace's reaper with the
/// provider below it (see `linux.rs`).
pub(crate) struct Started {
    /// The child's pid (and process group id).
    pub pid: u32,
    /// The parent's ends of the provider's stdin, stdout and stderr.
    pub stdio: [OwnedFd; 3],
    /// Under a PID namespace: the pipe the reaper writes the provider's wait status into
    /// before it exits (non-blocking; see [`read_provider_status`]).
    pub status: Option<OwnedFd>,
}

/// Start `spec` (in the spawner): the leader of a new process group, its stdio piped, under
/// its confinement (Linux: `linux::launch`). The caller reaps it.
#[cfg(target_os = "linux")]
pub(crate) fn start(spec: &ProcessSpec, base: Option<PreparedRuleset>) -> io::Result<Started> {
    super::linux::launch(spec, base)
}

#[cfg(target_os = "linux")]
pub(crate) use super::linux::PreparedRuleset;

/// A ruleset prepared ahead of a launch: none without Landlock.
#[cfg(not(target_os = "linux"))]
pub(crate) enum PreparedRuleset {}

#[cfg(not(target_os = "linux"))]
impl PreparedRuleset {
    pub(crate) fn build(_: &[crate::containment::PathRule]) -> io::Result<PreparedRuleset> {
        Err(io::Error::other("no Landlock on this system"))
    }

    pub(crate) fn fresh(&self) -> bool {
        match *self {}
    }

    pub(crate) fn fresh_for(&self) -> std::time::Duration {
        match *self {}
    }
}

/// Start `spec` (in the spawner): the leader of a new process group, its stdio piped. The
/// caller reaps it.
#[cfg(not(target_os = "linux"))]
pub(crate) fn start(spec: &ProcessSpec, base: Option<PreparedRuleset>) -> io::Result<Started> {
    let _ = base;
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new(&spec.program)
        .args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        unreachable!("all three were piped");
    };
    Ok(Started {
        pid: child.id(),
        stdio: [stdin.into(), stdout.into(), stderr.into()],
        status: None,
    })
}

/// The wait status to report for a launch's child, reaped with `own`: under a PID
/// namespace the provider's, as its reaper wrote it (see [`read_provider_status`]); the
/// child's own when the reaper wrote nothing (it was killed), and without a namespace.
pub(crate) fn reported_status(own: i32, status: Option<&OwnedFd>) -> i32 {
    match status.map(read_provider_status) {
        Some(Ok(Some(provider))) => provider,
        _ => own,
    }
}

/// What a reaper's status pipe (non-blocking) holds: `Some` of the provider's wait status
/// once the reaper has written it, which it does only when every process of its namespace
/// has ended and been reaped (a status that is neither an exit nor a signal reads as exit
/// code 126); `None` at end of file without one (the reaper ended without writing); an
/// error of kind `WouldBlock` while the reaper has written nothing and lives. The reaper
/// holds the only write end (its provider closes its copy before anything else), and the
/// 4-byte write is atomic.
pub(crate) fn read_provider_status(pipe: &OwnedFd) -> io::Result<Option<i32>> {
    use std::os::fd::AsRawFd;
    let mut provider: libc::c_int = 0;
    // SAFETY: reads at most the size of `provider` into it, from a descriptor we own.
    let n = unsafe {
        libc::read(
            pipe.as_raw_fd(),
            (&raw mut provider).cast(),
            std::mem::size_of::<libc::c_int>(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n != std::mem::size_of::<libc::c_int>() as isize {
        return Ok(None);
    }
    if libc::WIFEXITED(provider) || libc::WIFSIGNALED(provider) {
        Ok(Some(provider))
    } else {
        Ok(Some(126 << 8))
    }
}

/// Between fork and exec: have the kernel SIGKILL this child when its parent (`parent`)
/// dies (`PR_SET_PDEATHSIG`), and end it at once if the parent died before that took effect.
///
/// # Safety
///
/// Only async-signal-safe calls (prctl, getppid, _exit): callable in a forked child.
#[cfg(target_os = "linux")]
pub(super) unsafe fn die_with_parent(parent: libc::pid_t) -> io::Result<()> {
    unsafe {
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
        if libc::getppid() != parent {
            libc::_exit(137);
        }
    }
    Ok(())
}

/// Send `sig` to every process in group `pgid`. `Ok(false)` when the group no longer exists.
pub(crate) fn signal_group(pgid: i32, sig: Sig) -> io::Result<bool> {
    if pgid <= 1 {
        return Err(io::Error::other(
            "refusing to signal an invalid process group",
        ));
    }
    let signo = match sig {
        Sig::Interrupt => libc::SIGINT,
        Sig::Terminate => libc::SIGTERM,
        Sig::Kill => libc::SIGKILL,
    };
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
    let rc = unsafe { libc::kill(-pgid, signo) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        Ok(false)
    } else {
        Err(err)
    }
}

/// True while any live process of group `pgid` exists. Zombies do not count: an orphaned
/// grandchild that was killed may wait a while for its new parent to reap it.
pub(crate) fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence/permission.
    if pgid <= 1 || unsafe { libc::kill(-pgid, 0) } != 0 {
        return false;
    }
    #[cfg(target_os = "linux")]
    {
        live_members_linux(pgid)
    }
    #[cfg(not(target_os = "linux"))]
    {
        true
    }
}

#[cfg(target_os = "linux")]
fn live_members_linux(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    let wanted = pgid.to_string();
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        if !name
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        // `pid (comm) state ppid pgrp …`; comm may contain spaces and parentheses.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            return false;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1);
        pgrp == Some(wanted.as_str()) && !matches!(state, Some("Z") | Some("X"))
    })
}

/// Exit code and terminating signal of a finished process.
pub(crate) fn exit_parts(status: std::process::ExitStatus) -> (Option<i32>, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    (status.code(), status.signal())
}

/// The status of a process killed with SIGKILL (when waiting for it failed).
pub(crate) fn killed_status() -> std::process::ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    std::process::ExitStatus::from_raw(libc::SIGKILL)
}

/// Create a directory only the current user can enter (0700).
pub(crate) fn create_private_dir(path: &std::path::Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(path)
}

/// Create a new file only the current user can read (0600); fails if it exists. Not
/// synced: it lives only as long as its run (the provider reads it through the page cache,
/// and a crash leaves the run's directory for the next host's sweep), and an `fsync` would
/// make each launch wait for a journal commit.
pub(crate) fn create_private_file(path: &std::path::Path, contents: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(contents)
}

/// Hold an exclusive `flock` on directory `path` for as long as the returned descriptor
/// stays open (it is the only one taking it: the directory was just made, 0700).
pub(crate) fn lock_dir(path: &std::path::Path) -> io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)?;
    // SAFETY: flock(2) on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(f)
}

/// Whether nobody holds the `flock` of `path`, a file or a directory (a missing or
/// unreadable one is not free).
pub(crate) fn lock_is_free(path: &std::path::Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    // SAFETY: flock(2) on a descriptor we own; the lock goes with the descriptor.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}
