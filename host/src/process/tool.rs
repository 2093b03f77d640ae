//! Host tools: short helper programs the host runs for itself (`git` for workspaces), not
//! providers.
//!
//! Owns: spawning a host tool as the leader of a process group of its own with stdin closed,
//! the program looked up on the host's `PATH` without relative entries or entries inside the
//! working directory, capturing its stdout and stderr up to [`MAX_TOOL_OUTPUT`] each,
//! and killing the whole group when it overruns its time or its caller stops waiting. A host
//! tool runs with the host's own rights and environment (plus the caller's extra variables).
//! Must not: run providers (no grant, no confinement here), decide what to run, or interpret
//! the tool's output.

use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

/// How much of each of stdout and stderr a host tool's output keeps (1 MiB); the rest is
/// read and dropped, and the output says it was truncated.
pub(crate) const MAX_TOOL_OUTPUT: usize = 1 << 20;

/// What a host tool printed and how it ended.
#[derive(Debug)]
pub(crate) struct ToolOutput {
    /// How the tool exited.
    pub status: ExitStatus,
    /// Its stdout, at most [`MAX_TOOL_OUTPUT`] bytes.
    pub stdout: Vec<u8>,
    /// Its stderr, at most [`MAX_TOOL_OUTPUT`] bytes.
    pub stderr: Vec<u8>,
    /// Stdout was longer than [`MAX_TOOL_OUTPUT`] and was cut.
    pub stdout_truncated: bool,
    /// Stderr was longer than [`MAX_TOOL_OUTPUT`] and was cut.
    pub stderr_truncated: bool,
}

impl ToolOutput {
    /// The tool exited with status 0.
    pub(crate) fn success(&self) -> bool {
        self.status.success()
    }

    /// Stdout as text (lossy UTF-8).
    pub(crate) fn stdout_text(&self) -> String {
        text(&self.stdout, self.stdout_truncated)
    }

    /// Stderr as text (lossy UTF-8), with a note when it was truncated.
    pub(crate) fn stderr_text(&self) -> String {
        text(&self.stderr, self.stderr_truncated)
    }
}

fn text(bytes: &[u8], truncated: bool) -> String {
    let mut s = String::from_utf8_lossy(bytes).into_owned();
    if truncated {
        s.push_str("\n[output truncated at 1 MiB]");
    }
    s
}

/// Kills the tool's process group with SIGKILL when dropped while armed (the caller's future
/// was dropped mid-run, or reading failed): no host tool outlives its call.
struct GroupKiller {
    pgid: Option<i32>,
    armed: bool,
}

impl GroupKiller {
    fn kill(&mut self) {
        if self.armed {
            self.armed = false;
            #[cfg(unix)]
            if let Some(pgid) = self.pgid {
                let _ = super::signal_group(pgid, super::Sig::Kill);
            }
        }
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Run `program` with `args` in `cwd` and wait for it, at most `timeout`.
///
/// `env` adjusts the inherited environment: `(name, Some(value))` sets a variable,
/// `(name, None)` removes it. A bare `program` name is looked up on the host's `PATH`, skipping
/// relative entries and entries inside `cwd` (a repository must not plant the tool).
///
/// A non-zero exit is not an error here: the caller reads [`ToolOutput::status`]. Errors are
/// the tool not starting, reading its output failing, and — kind
/// [`io::ErrorKind::TimedOut`] — the tool overrunning `timeout`, after which its whole process
/// group has been killed (SIGKILL) and the tool reaped.
pub(crate) async fn run_host_tool(
    program: &str,
    args: &[&OsStr],
    env: &[(&str, Option<&OsStr>)],
    cwd: &Path,
    timeout: Duration,
) -> io::Result<ToolOutput> {
    let cwd = tokio::fs::canonicalize(cwd).await.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("working directory {}: {e}", cwd.display()),
        )
    })?;
    let path_var = std::env::var_os("PATH");
    let resolved = super::resolve_program(program, path_var.as_deref(), &cwd, &[])
        .map_err(|e| io::Error::new(io::ErrorKind::NotFound, format!("`{program}`: {e}")))?;
    let mut cmd = Command::new(&resolved);
    cmd.args(args)
        .current_dir(&cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    cmd.process_group(0);
    for (name, value) in env {
        match value {
            Some(value) => cmd.env(name, value),
            None => cmd.env_remove(name),
        };
    }
    let mut child = cmd.spawn()?;
    let mut killer = GroupKiller {
        pgid: child.id().map(|pid| pid as i32),
        armed: true,
    };
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let finished = tokio::time::timeout(timeout, async {
        let (out, err, status) = tokio::join!(
            read_bounded(stdout, MAX_TOOL_OUTPUT),
            read_bounded(stderr, MAX_TOOL_OUTPUT),
            child.wait()
        );
        io::Result::Ok((out?, err?, status?))
    })
    .await;
    match finished {
        Ok(Ok(((stdout, stdout_truncated), (stderr, stderr_truncated), status))) => {
            // The leader is reaped and its pipes are closed: nothing of the call is left
            // to kill, and its group id may be reused.
            killer.armed = false;
            Ok(ToolOutput {
                status,
                stdout,
                stderr,
                stdout_truncated,
                stderr_truncated,
            })
        }
        Ok(Err(e)) => {
            killer.kill();
            let _ = child.wait().await;
            Err(e)
        }
        Err(_) => {
            killer.kill();
            let _ = child.kill().await;
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "`{program}` did not finish within {} s; its process group was killed",
                    timeout.as_secs_f64()
                ),
            ))
        }
    }
}

/// Read `reader` to its end, keeping the first `cap` bytes; `true` when more were dropped.
async fn read_bounded<R: AsyncRead + Unpin>(
    reader: Option<R>,
    cap: usize,
) -> io::Result<(Vec<u8>, bool)> {
    let Some(mut reader) = reader else {
        return Ok((Vec::new(), false));
    };
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = reader.read(&mut chunk).await?;
        if n == 0 {
            return Ok((kept, truncated));
        }
        let room = cap - kept.len();
        if n > room {
            truncated = true;
        }
        kept.extend_from_slice(&chunk[..n.min(room)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&'static str]) -> Vec<&'static OsStr> {
        args.iter().map(|a| OsStr::new(*a)).collect()
    }

    #[tokio::test]
    async fn captures_output_status_and_environment() {
        let dir = tempfile::tempdir().unwrap();
        let out = run_host_tool(
            "sh",
            &os(&["-c", "echo out $HOST_TOOL_X; echo err >&2; exit 3"]),
            &[("HOST_TOOL_X", Some(OsStr::new("set")))],
            dir.path(),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert!(!out.success());
        assert_eq!(out.stdout_text(), "out set\n");
        assert_eq!(out.stderr_text(), "err\n");
        assert!(!out.stdout_truncated && !out.stderr_truncated);
    }

    #[tokio::test]
    async fn long_output_is_cut_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let out = run_host_tool(
            "sh",
            &os(&["-c", "head -c 3000000 /dev/zero"]),
            &[],
            dir.path(),
            Duration::from_secs(20),
        )
        .await
        .unwrap();
        assert!(out.success());
        assert_eq!(out.stdout.len(), MAX_TOOL_OUTPUT);
        assert!(out.stdout_truncated);
        assert!(out.stdout_text().ends_with("[output truncated at 1 MiB]"));
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_tool_that_overruns_is_killed_with_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("grandchild");
        let script = format!("sleep 30 & echo $! > {}; wait", pid_file.to_str().unwrap());
        let started = std::time::Instant::now();
        let err = run_host_tool(
            "sh",
            &[OsStr::new("-c"), OsStr::new(&script)],
            &[],
            dir.path(),
            Duration::from_millis(500),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
        let grandchild: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild was killed with the group (it may linger as a zombie until init
        // reaps it, so look at its state rather than its existence).
        let until = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let state = std::fs::read_to_string(format!("/proc/{grandchild}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim().chars().next()))
                .flatten();
            if matches!(state, None | Some('Z') | Some('X')) {
                break;
            }
            assert!(
                std::time::Instant::now() < until,
                "grandchild {grandchild} survived: {state:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_missing_program_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = run_host_tool(
            "definitely-not-a-host-tool-xyz",
            &[],
            &[],
            dir.path(),
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
    }
}
