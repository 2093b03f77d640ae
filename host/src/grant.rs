//! The process grant: what a driver's launch may ask for.
//!
//! Owns the check of a `launch` against the Agent's grant — the program must be the
//! configured command (as configured or as the resolved absolute path), the working directory
//! must stay inside the workspace, private file names must be plain names, and environment
//! names, values and arguments must be well-formed. Must not: spawn (see `process`).

use std::path::{Component, Path, PathBuf};

use crate::bindings::wit;
use crate::error::LaunchRefusal;

/// The grant for one run.
pub(crate) struct Grant<'a> {
    /// The program as configured (`claude`, `/opt/x/claude`).
    pub configured: &'a str,
    /// Its resolved absolute path.
    pub resolved: &'a Path,
    /// Canonical workspace.
    pub workspace: &'a Path,
}

impl Grant<'_> {
    /// Check a launch; returns the working directory to use.
    pub(crate) fn check(&self, launch: &wit::Launch) -> Result<PathBuf, LaunchRefusal> {
        if launch.program != self.configured && Path::new(&launch.program) != self.resolved {
            return Err(LaunchRefusal::Program {
                requested: launch.program.clone(),
                granted: self.configured.to_owned(),
            });
        }
        if let Some(i) = launch.args.iter().position(|a| a.contains('\0')) {
            return Err(LaunchRefusal::Arg(i));
        }
        for (name, value) in &launch.env {
            if name.is_empty() || name.contains('=') || name.contains('\0') || value.contains('\0')
            {
                return Err(LaunchRefusal::Env(name.clone()));
            }
        }
        for file in &launch.files {
            if !is_plain_file_name(&file.name) {
                return Err(LaunchRefusal::FileName(file.name.clone()));
            }
        }
        self.cwd(launch.cwd.as_deref())
    }

    fn cwd(&self, requested: Option<&str>) -> Result<PathBuf, LaunchRefusal> {
        let Some(requested) = requested else {
            return Ok(self.workspace.to_path_buf());
        };
        let refuse = || LaunchRefusal::Cwd {
            cwd: requested.to_owned(),
            workspace: self.workspace.display().to_string(),
        };
        let candidate = if Path::new(requested).is_absolute() {
            PathBuf::from(requested)
        } else {
            self.workspace.join(requested)
        };
        let canonical = candidate.canonicalize().map_err(|_| refuse())?;
        if canonical.starts_with(self.workspace) && canonical.is_dir() {
            Ok(canonical)
        } else {
            Err(refuse())
        }
    }
}

fn is_plain_file_name(name: &str) -> bool {
    let mut components = Path::new(name).components();
    !name.is_empty()
        && !name.contains(['/', '\\', '\0'])
        && matches!(components.next(), Some(Component::Normal(_)))
        && components.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(program: &str, cwd: Option<&str>) -> wit::Launch {
        wit::Launch {
            program: program.into(),
            args: vec![],
            env: vec![],
            cwd: cwd.map(Into::into),
            stdin: vec![],
            keep_stdin_open: false,
            files: vec![],
        }
    }

    #[test]
    fn only_the_granted_program_and_workspace_cwd_pass() {
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path().canonicalize().unwrap();
        std::fs::create_dir(ws.join("sub")).unwrap();
        let resolved = Path::new("/usr/bin/reference-provider");
        let grant = Grant {
            configured: "reference-provider",
            resolved,
            workspace: &ws,
        };
        assert_eq!(
            grant.check(&launch("reference-provider", None)).unwrap(),
            ws
        );
        assert!(
            grant
                .check(&launch("/usr/bin/reference-provider", Some("sub")))
                .is_ok()
        );
        for bad in ["sh", "/bin/sh", "reference-provider2"] {
            assert!(
                matches!(
                    grant.check(&launch(bad, None)),
                    Err(LaunchRefusal::Program { .. })
                ),
                "{bad}"
            );
        }
        for bad in ["..", "/", "/etc", "sub/../..", "missing"] {
            assert!(
                matches!(
                    grant.check(&launch("reference-provider", Some(bad))),
                    Err(LaunchRefusal::Cwd { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn file_names_must_be_plain() {
        for ok in ["schema.json", "a.b"] {
            assert!(is_plain_file_name(ok));
        }
        for bad in ["", ".", "..", "a/b", "../x", "/etc/passwd", "a\0b"] {
            assert!(!is_plain_file_name(bad), "{bad:?}");
        }
    }
}
