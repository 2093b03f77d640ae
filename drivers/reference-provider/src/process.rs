//! Process-level test hooks: ignoring SIGTERM, sleeping forever and spawning
//! the `--grandchild` helper process.

use std::io;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Makes this process ignore SIGTERM (it can still be killed with SIGKILL).
pub fn ignore_sigterm() {
    // SAFETY: `signal` with `SIG_IGN` installs no Rust handler, so no code runs
    // in signal context; it only changes this process's disposition for
    // SIGTERM, which nothing else in this program relies on.
    unsafe {
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
}

/// Sleeps until the process is killed.
pub fn sleep_forever() -> ! {
    loop {
        thread::sleep(Duration::from_secs(3600));
    }
}

/// How long [`spawn_grandchild`] waits for the grandchild to ignore SIGTERM.
const GRANDCHILD_READY_TIMEOUT: Duration = Duration::from_secs(5);

/// Re-executes this binary as `--grandchild` in the same process group, with
/// all standard streams null, and returns its pid. The child is not waited for.
///
/// Where `/proc` is available, returns only once the grandchild has actually
/// started ignoring SIGTERM (or after [`GRANDCHILD_READY_TIMEOUT`]), so callers
/// that signal it right after the `pids` notice see a deterministic outcome.
pub fn spawn_grandchild() -> io::Result<u32> {
    let exe = std::env::current_exe()?;
    let child = Command::new(exe)
        .arg("--grandchild")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = child.id();
    let deadline = Instant::now() + GRANDCHILD_READY_TIMEOUT;
    while ignores_sigterm(pid) == Some(false) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
    }
    Ok(pid)
}

/// Whether process `pid` ignores SIGTERM, from `/proc/<pid>/status`;
/// `None` when that cannot be determined.
fn ignores_sigterm(pid: u32) -> Option<bool> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mask = status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())?;
    Some(mask & (1 << (libc::SIGTERM - 1)) != 0)
}

/// The `--grandchild` mode: ignore SIGTERM and sleep until killed.
pub fn run_grandchild() -> ! {
    ignore_sigterm();
    sleep_forever()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_sigterm_disposition() {
        // Our own status is readable wherever /proc exists; unknown pids give `None`.
        if std::path::Path::new("/proc/self/status").exists() {
            assert!(ignores_sigterm(std::process::id()).is_some());
        }
        assert_eq!(ignores_sigterm(u32::MAX), None);
    }
}
