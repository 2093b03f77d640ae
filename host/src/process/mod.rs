//! Provider processes: spawning, signalling and reaping — the one place that spawns.
//!
//! Owns: program lookup (PATH, never through a workspace entry; `grant` calls it once per
//! run), spawning a [`ProcessSpec`] as the leader of a new process group, signalling and
//! reaping groups, the run's private directory, and the OS-specific process-group code (in
//! `unix.rs`; macOS and Windows follow behind the same functions). Must not: decide what may
//! be spawned (that is `grant`), parse output or decide run outcomes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub(crate) use unix::{Spawned, exit_parts, group_alive, killed_status, signal_group, spawn};

/// What to spawn.
#[derive(Debug, Clone)]
pub(crate) struct ProcessSpec {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: PathBuf,
    /// Linux: have the kernel SIGKILL the provider if the host dies (`PR_SET_PDEATHSIG`).
    /// Costs a fork instead of posix_spawn (about 1.2 ms per launch, measured).
    pub parent_death_signal: bool,
}

/// Signals the host sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sig {
    Interrupt,
    Terminate,
    Kill,
}

impl Sig {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Sig::Interrupt => "SIGINT",
            Sig::Terminate => "SIGTERM",
            Sig::Kill => "SIGKILL",
        }
    }
}

/// Resolve `program` to an absolute path.
///
/// A name with a `/` must be absolute. A bare name is looked up in the `PATH` entries that are
/// absolute and not inside `workspace` (so a checked-out repository cannot plant a fake CLI
/// through a relative or in-repository `PATH` entry such as `node_modules/.bin`), then in
/// `extra_dirs` — the directories the embedding host named itself
/// (`AgentBuilder::program_dir`, e.g. the directory of the `adaptor` binary). Those are the
/// host's own choice, not the environment's or the repository's, so they are trusted wherever
/// they are: a build tree inside the workspace (`./target/debug` when running from a clone) or
/// `~/.local/bin` under a workspace of `~` must not hide the host's own programs.
pub(crate) fn resolve_program(
    program: &str,
    path_var: Option<&std::ffi::OsStr>,
    workspace: &Path,
    extra_dirs: &[PathBuf],
) -> Result<PathBuf, String> {
    if program.is_empty() {
        return Err("the program name is empty".into());
    }
    if program.contains('/') {
        let p = Path::new(program);
        if !p.is_absolute() {
            return Err("a program path must be absolute".into());
        }
        return if is_executable(p) {
            Ok(p.to_path_buf())
        } else {
            Err(format!("{program} is not an executable file"))
        };
    }
    let path_dirs = path_var
        .map(|p| std::env::split_paths(p).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut skipped = 0;
    let mut searched = 0;
    for dir in &path_dirs {
        if !dir.is_absolute() {
            skipped += 1;
            continue;
        }
        let canonical = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        if canonical.starts_with(workspace) {
            skipped += 1;
            continue;
        }
        searched += 1;
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    for dir in extra_dirs.iter().filter(|d| d.is_absolute()) {
        searched += 1;
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    let skipped = match skipped {
        0 => String::new(),
        n => format!(
            "; skipped {n} PATH entr{} that {} relative or inside the workspace",
            if n == 1 { "y" } else { "ies" },
            if n == 1 { "is" } else { "are" }
        ),
    };
    Err(format!(
        "not on PATH (searched {searched} directories{skipped}); put it on PATH or set the driver config's `command` to its absolute path"
    ))
}

/// Make sure no process of the group survives: SIGTERM, grace, SIGKILL.
pub(crate) async fn reap_group(pgid: i32, grace: Duration) -> Result<(), String> {
    if !group_alive(pgid) {
        return Ok(());
    }
    tracing::info!(
        pgid,
        "terminating leftover processes of the provider's group"
    );
    signal_group(pgid, Sig::Terminate).map_err(|e| e.to_string())?;
    let until = Instant::now() + grace;
    while Instant::now() < until && group_alive(pgid) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if group_alive(pgid) {
        signal_group(pgid, Sig::Kill).map_err(|e| e.to_string())?;
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until && group_alive(pgid) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    if group_alive(pgid) {
        Err(format!("process group {pgid} still exists after SIGKILL"))
    } else {
        Ok(())
    }
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

/// A run's private 0700 directory (schemas, prompt files, MCP configs a launch asked for);
/// removed with its contents on drop.
pub(crate) struct PrivateDir {
    path: PathBuf,
    created: bool,
}

impl PrivateDir {
    pub(crate) fn path_for(run_id: &str) -> PathBuf {
        std::env::temp_dir().join(format!("adaptor-{run_id}"))
    }

    /// Where it is (it may not exist when the launch asked for no files).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Create it (0700) with `files` (name, contents; names already checked by the grant),
    /// unless there are none.
    pub(crate) fn create(path: PathBuf, files: &[(&str, &[u8])]) -> std::io::Result<PrivateDir> {
        if files.is_empty() {
            return Ok(PrivateDir {
                path,
                created: false,
            });
        }
        unix::create_private_dir(&path)?;
        let dir = PrivateDir {
            path,
            created: true,
        };
        for (name, contents) in files {
            unix::create_private_file(&dir.path.join(name), contents)?;
        }
        Ok(dir)
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        if self.created
            && let Err(e) = std::fs::remove_dir_all(&self.path)
        {
            tracing::warn!(path = %self.path.display(), error = %e, "could not remove the run's private directory");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_entries_inside_the_workspace_are_skipped() {
        let ws = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        let bin = ws_path.join("bin");
        std::fs::create_dir(&bin).unwrap();
        let fake = bin.join("sh");
        std::fs::write(&fake, "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = std::env::join_paths([
            bin.clone(),
            PathBuf::from("/bin"),
            PathBuf::from("/usr/bin"),
        ])
        .unwrap();
        let got = resolve_program("sh", Some(&path), &ws_path, &[]).unwrap();
        assert!(!got.starts_with(&ws_path), "{got:?}");
    }

    /// The first-five-minutes failure: `./x.sh run` from a fresh clone runs
    /// `./target/debug/adaptor` with the clone as workspace, so the host's own program
    /// directory lies inside the workspace. The host named it itself: it is searched.
    #[test]
    fn host_program_dirs_inside_the_workspace_are_searched() {
        let ws = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        let bin = ws_path.join("target").join("debug");
        std::fs::create_dir_all(&bin).unwrap();
        let provider = bin.join("reference-provider");
        std::fs::write(&provider, "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&provider, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = std::env::join_paths([bin.clone(), PathBuf::from("/usr/bin")]).unwrap();
        // On PATH only, inside the workspace: refused, and the error says why.
        let err = resolve_program("reference-provider", Some(&path), &ws_path, &[]).unwrap_err();
        assert!(err.contains("skipped 1 PATH entry"), "{err}");
        // Named by the host: found.
        let got = resolve_program(
            "reference-provider",
            Some(&path),
            &ws_path,
            std::slice::from_ref(&bin),
        )
        .unwrap();
        assert_eq!(got, provider);
    }

    #[test]
    fn relative_paths_and_missing_programs_are_errors() {
        let ws = Path::new("/nonexistent-ws");
        assert!(resolve_program("./x", None, ws, &[]).is_err());
        assert!(
            resolve_program(
                "definitely-not-a-program-xyz",
                Some(std::ffi::OsStr::new("/bin")),
                ws,
                &[]
            )
            .is_err()
        );
        assert!(resolve_program("", None, ws, &[]).is_err());
    }
}
