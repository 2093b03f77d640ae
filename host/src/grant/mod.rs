//! The process grant: what the processes of one run (or one Inspect) may be, decided once
//! before anything starts, and the check of every launch a driver asks for against it.
//!
//! A [`ProcessGrant`] is one value: the program as configured and resolved to an absolute
//! path (program resolution lives here and nowhere else), the canonical workspace, the
//! environment rules (an allowlist of the host's variables, the variables the embedder opted
//! into or set — which always win — then the driver's additions, none of them on the
//! denylist of `env`) and the confinement (`confine`: what the provider may read and write,
//! applied by the kernel). A launch passes when the program is the configured one (by name
//! or resolved path), its working directory stays inside the workspace, private file names
//! are plain names, environment names are not denied and names, values and arguments are
//! well-formed. Must not: spawn (see `process`) or name WIT types (the pipeline hands a
//! [`LaunchAsk`] view).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use crate::containment::{Containment, ContainmentReport};
use crate::error::{Error, LaunchRefusal};
use crate::process::{self, ProcessSpec};

pub(crate) mod confine;
pub(crate) mod env;

pub use env::{DRIVER_ENDPOINT_VARIABLES, DRIVER_ENV_DENYLIST};

/// Variables passed from the host's environment by default. Anything else (API keys,
/// tokens) must be opted into per variable with `AgentBuilder::pass_env`. `TMPDIR` is not
/// passed: each provider gets a private one of its run (unless the caller sets or passes
/// `TMPDIR` itself).
pub const DEFAULT_ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TZ",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_STATE_HOME",
];

/// What a driver asks to launch (a view of its `launch`, free of WIT types).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LaunchAsk<'a> {
    /// The program, by name or path.
    pub program: &'a str,
    /// The arguments.
    pub args: &'a [String],
    /// Environment additions.
    pub env: &'a [(String, String)],
    /// The working directory (relative to the workspace, or absolute inside it).
    pub cwd: Option<&'a str>,
    /// Names of the private files it wants written.
    pub file_names: &'a [&'a str],
    /// Variables the caller gave the run's stdio MCP servers (`Mcp::stdio(…).env(k, v)`): a
    /// launch may pass exactly these pairs on (for a CLI that hands its own environment to
    /// the servers) without declaring the caller's names.
    pub mcp_env: &'a [(String, String)],
}

/// What the embedder decided about the processes of its runs (the agent's settings).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GrantRules<'a> {
    /// Directories searched after PATH (trusted wherever they are).
    pub program_dirs: &'a [PathBuf],
    /// Host variables passed on by name, beyond the allowlist.
    pub pass_env: &'a [String],
    /// Variables set for every process.
    pub set_env: &'a [(String, String)],
    /// `PR_SET_PDEATHSIG` on Linux.
    pub parent_death_signal: bool,
    /// The caller's containment settings.
    pub containment: &'a Containment,
    /// SIGTERM → SIGKILL grace for leftovers.
    pub grace: std::time::Duration,
}

/// The run's own directories a launch is confined to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunPaths<'a> {
    /// The private files directory, when the launch has files.
    pub files: Option<&'a Path>,
    /// The per-run `TMPDIR`.
    pub tmp: &'a Path,
    /// No writes to the workspace.
    pub read_only: bool,
    /// No writes to the CLI's state (Inspect's probes).
    pub state_read_only: bool,
    /// Programs the caller declared as stdio MCP servers by absolute path: the CLI starts
    /// them, so they are readable and executable (the caller's choice, never the driver's).
    pub mcp_programs: &'a [PathBuf],
    /// The run's materialized skill set (read and execute).
    pub skills: Option<&'a Path>,
    /// The run's instructions bundle (read).
    pub instructions: Option<&'a Path>,
}

/// A launch is coming (a run is being prepared, or a process starts in order to run one):
/// have the spawner build the Landlock ruleset of [`launch_common`] while the run prepares
/// the rest.
pub(crate) fn expect_launch() {
    if let Some(common) = launch_common() {
        process::expect_launch(common);
    }
}

/// The rule set every launch here starts from, unless a launch's own paths change its form
/// (see [`confine::SystemRules`]), as the common set a spawner prepares ahead; `None`
/// without Landlock. Decides the system's rules if that is not done yet — the
/// once-per-process work every launch shares, the confinement rules for the system
/// directories, `/etc` and the device nodes; a launch planned meanwhile waits for it rather
/// than doing it twice. A spawner that has just started asks for it first thing (see
/// `process::start_spawner`).
pub(crate) fn launch_common() -> Option<process::CommonRules> {
    let system = confine::system_rules();
    process::common_form().map(|hide| system.common(hide))
}

/// The canonical workspace: `dir`, else the current directory; it must be a directory.
pub(crate) fn resolve_workspace(dir: Option<&Path>) -> Result<PathBuf, Error> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir().map_err(|e| Error::InvalidWorkspace {
            path: ".".into(),
            reason: e.to_string(),
        })?,
    };
    let canonical = dir.canonicalize().map_err(|e| Error::InvalidWorkspace {
        path: dir.display().to_string(),
        reason: e.to_string(),
    })?;
    if !canonical.is_dir() {
        return Err(Error::InvalidWorkspace {
            path: dir.display().to_string(),
            reason: "not a directory".into(),
        });
    }
    Ok(canonical)
}

/// The environment every provider process of these rules starts from: the host's
/// allowlist and the caller's passed variables (from the host's environment), then the
/// caller's set variables.
pub(crate) fn base_env(rules: &GrantRules<'_>) -> BTreeMap<OsString, OsString> {
    let mut base_env: BTreeMap<OsString, OsString> = BTreeMap::new();
    for name in DEFAULT_ENV_ALLOWLIST
        .iter()
        .copied()
        .chain(rules.pass_env.iter().map(String::as_str))
    {
        if let Some(value) = std::env::var_os(name) {
            base_env.insert(name.into(), value);
        }
    }
    for (k, v) in rules.set_env {
        base_env.insert(k.into(), v.into());
    }
    base_env
}

/// The grant of one run: decided once, used for its launch and for Inspect's probes alike.
#[derive(Debug, Clone)]
pub(crate) struct ProcessGrant {
    driver: String,
    /// The program as configured (`claude`, `/opt/x/claude`).
    configured: String,
    /// Its absolute path, or why it could not be found.
    resolved: Result<PathBuf, String>,
    /// Canonical workspace.
    workspace: PathBuf,
    /// The environment every process starts from (before the driver's additions).
    base_env: BTreeMap<OsString, OsString>,
    /// Names the caller set or passed: driver additions never replace them.
    caller_names: Vec<String>,
    parent_death_signal: bool,
    containment: Containment,
    grace: std::time::Duration,
    config_paths: Vec<confine::ConfigPath>,
    /// The variables the driver declared its launches may set (`None`: a driver of
    /// `adaptor:driver@0.1.0`, which cannot declare them).
    launch_env: Option<Vec<String>>,
    /// What the run's dedicated profile adds: paths the provider may read and write.
    profile_paths: Vec<PathBuf>,
}

impl ProcessGrant {
    /// A dedicated profile: the host sets its variables (as the caller would: a launch never
    /// replaces them) and the provider may read and write its paths.
    pub(crate) fn with_profile(mut self, profile: &crate::profile::ResolvedProfile) -> Self {
        for (k, v) in &profile.env {
            self.base_env.insert(k.into(), v.into());
            self.caller_names.push(k.clone());
        }
        self.profile_paths = profile.read_write.clone();
        self
    }

    /// The driver's declared launch environment (`driver-info.launch-env`).
    pub(crate) fn with_launch_env(mut self, declared: Option<Vec<String>>) -> Self {
        self.launch_env = declared;
        self
    }

    /// Decide the grant: `configured` (the driver config's `command`, else its default
    /// program) resolved against PATH outside the workspace, then the host's program
    /// directories; the environment from the allowlist and the embedder's rules; the paths
    /// of the caller's driver config that the driver's schema marks (see
    /// [`confine::config_paths`]).
    pub(crate) fn resolve(
        driver: &str,
        configured: String,
        workspace: PathBuf,
        rules: &GrantRules<'_>,
        config_paths: Vec<confine::ConfigPath>,
    ) -> ProcessGrant {
        let path_var = std::env::var_os("PATH");
        let resolved = process::resolve_program(
            &configured,
            path_var.as_deref(),
            &workspace,
            rules.program_dirs,
        );
        let base_env = base_env(rules);
        let caller_names = rules
            .pass_env
            .iter()
            .cloned()
            .chain(rules.set_env.iter().map(|(k, _)| k.clone()))
            .collect();
        ProcessGrant {
            driver: driver.to_owned(),
            configured,
            resolved,
            workspace,
            base_env,
            caller_names,
            parent_death_signal: rules.parent_death_signal,
            containment: rules.containment.clone(),
            grace: rules.grace,
            config_paths,
            launch_env: None,
            profile_paths: Vec::new(),
        }
    }

    /// The program as configured.
    pub(crate) fn configured(&self) -> &str {
        &self.configured
    }

    /// The resolved program, or [`Error::ProgramNotFound`].
    pub(crate) fn program(&self) -> Result<&Path, Error> {
        self.resolved
            .as_deref()
            .map_err(|detail| Error::ProgramNotFound {
                driver: self.driver.clone(),
                program: self.configured.clone(),
                detail: detail.clone(),
            })
    }

    /// Why the program could not be found, if it could not.
    pub(crate) fn unresolved(&self) -> Option<&str> {
        self.resolved.as_ref().err().map(String::as_str)
    }

    /// Whether `requested` names the granted program (as configured, or its resolved path).
    pub(crate) fn check_program(&self, requested: &str) -> Result<(), LaunchRefusal> {
        let resolved_match = self
            .resolved
            .as_ref()
            .is_ok_and(|p| Path::new(requested) == p);
        if requested == self.configured || resolved_match {
            Ok(())
        } else {
            Err(LaunchRefusal::Program {
                requested: requested.to_owned(),
                granted: self.configured.clone(),
            })
        }
    }

    /// Check a launch; returns the working directory to use.
    pub(crate) fn check(&self, launch: &LaunchAsk<'_>) -> Result<PathBuf, LaunchRefusal> {
        self.check_program(launch.program)?;
        if let Some(i) = launch.args.iter().position(|a| a.contains('\0')) {
            return Err(LaunchRefusal::Arg(i));
        }
        let secret = self
            .base_env
            .keys()
            .filter_map(|k| k.to_str())
            .find(|k| crate::result::looks_secret(k));
        for (name, value) in launch.env {
            if name.is_empty() || name.contains('=') || name.contains('\0') || value.contains('\0')
            {
                return Err(LaunchRefusal::Env(name.clone()));
            }
            // A name the caller set keeps the caller's value (see `spec`): no leak to refuse.
            let caller_set = self.caller_names.iter().any(|c| c == name);
            let secret = secret.filter(|_| !caller_set);
            env::check_driver_var(name, &self.containment.allow_env, secret)?;
            if let Some(declared) = &self.launch_env
                && !env::declared(name, declared)
                && !launch.mcp_env.iter().any(|(k, v)| k == name && v == value)
            {
                return Err(LaunchRefusal::UndeclaredEnv(name.clone()));
            }
        }
        for file in launch.file_names {
            if !is_plain_file_name(file) {
                return Err(LaunchRefusal::FileName((*file).to_owned()));
            }
        }
        self.cwd(launch.cwd)
    }

    /// What to spawn for a checked launch: the resolved program, the arguments, the
    /// environment (base, then the driver's `additions` — never over a caller-set name —
    /// and the run's `TMPDIR` unless the caller chose one), the working directory and the
    /// confinement, with the report of what the kernel enforces.
    pub(crate) fn spec(
        &self,
        args: Vec<String>,
        additions: &[(String, String)],
        cwd: PathBuf,
        run: RunPaths<'_>,
    ) -> Result<(ProcessSpec, ContainmentReport), Error> {
        let mut env = self.base_env.clone();
        for (k, v) in additions {
            if self.caller_names.iter().any(|c| c == k) {
                tracing::warn!(driver = %self.driver, variable = %k, "the driver's value for a caller-set variable is ignored: the caller's wins");
                continue;
            }
            env.insert(k.into(), v.into());
        }
        if !self.caller_names.iter().any(|c| c == "TMPDIR") {
            env.insert("TMPDIR".into(), run.tmp.into());
        }
        let program = self.program()?.to_path_buf();
        let tmp = env
            .get(std::ffi::OsStr::new("TMPDIR"))
            .map(PathBuf::from)
            .unwrap_or_else(|| run.tmp.to_path_buf());
        let kernel = process::kernel_support();
        let plan = confine::ConfinementPlan::decide(&confine::PlanInputs {
            configured: &self.configured,
            program: &program,
            workspace: &self.workspace,
            read_only: run.read_only,
            state_read_only: run.state_read_only,
            files_dir: run.files,
            tmp_dir: &tmp,
            env: &env,
            containment: &self.containment,
            config_paths: &self.config_paths,
            mcp_programs: run.mcp_programs,
            hide_by_mounts: kernel.hide_by_mounts,
            skills: run.skills,
            profile: &self.profile_paths,
            instructions: run.instructions,
        })
        .map_err(|e| Error::ContainmentUnavailable {
            driver: self.driver.clone(),
            reason: match e {
                confine::PlanError::Missing(path) => {
                    format!(
                        "the path {} the caller allowed does not exist",
                        path.display()
                    )
                }
                confine::PlanError::Refused(r) => {
                    format!("the driver config's `{}`: {}", r.pointer, r.reason)
                }
            },
        })?;
        let common = plan.common;
        let (mut confinement, report) = kernel
            .confine(
                self.containment.mode,
                plan.rules,
                plan.hidden,
                plan.create,
                self.grace,
            )
            .map_err(|reason| Error::ContainmentUnavailable {
                driver: self.driver.clone(),
                reason,
            })?;
        confinement.common = common.filter(|_| confinement.landlock);
        Ok((
            ProcessSpec {
                program,
                args,
                env: env.into_iter().collect(),
                cwd,
                parent_death_signal: self.parent_death_signal,
                confinement,
            },
            report,
        ))
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
        if canonical.starts_with(&self.workspace) && canonical.is_dir() {
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

    fn grant(ws: &Path) -> ProcessGrant {
        ProcessGrant {
            driver: "reference".into(),
            configured: "reference-provider".into(),
            resolved: Ok(PathBuf::from("/usr/bin/reference-provider")),
            workspace: ws.to_path_buf(),
            base_env: BTreeMap::new(),
            caller_names: vec!["SET_BY_HOST".into()],
            parent_death_signal: true,
            containment: Containment::new().best_effort(),
            grace: std::time::Duration::from_millis(100),
            config_paths: Vec::new(),
            launch_env: None,
            profile_paths: Vec::new(),
        }
    }

    fn run_paths(tmp: &Path) -> RunPaths<'_> {
        RunPaths {
            files: None,
            tmp,
            read_only: false,
            state_read_only: false,
            mcp_programs: &[],
            skills: None,
            instructions: None,
        }
    }

    fn launch<'a>(program: &'a str, cwd: Option<&'a str>) -> LaunchAsk<'a> {
        LaunchAsk {
            program,
            args: &[],
            env: &[],
            cwd,
            file_names: &[],
            mcp_env: &[],
        }
    }

    #[test]
    fn a_launch_sets_only_what_its_driver_declared_or_the_caller_gave_an_mcp_server() {
        let ws = tempfile::tempdir().unwrap();
        let grant =
            grant(ws.path()).with_launch_env(Some(vec!["IS_SANDBOX".into(), "MCP_H_*".into()]));
        let ok = [
            ("IS_SANDBOX".to_owned(), "1".to_owned()),
            ("MCP_H_1".to_owned(), "v".to_owned()),
        ];
        let ask = LaunchAsk {
            env: &ok,
            ..launch("reference-provider", None)
        };
        assert!(grant.check(&ask).is_ok());
        let undeclared = [("SOMETHING_ELSE".to_owned(), "1".to_owned())];
        let ask = LaunchAsk {
            env: &undeclared,
            ..launch("reference-provider", None)
        };
        assert_eq!(
            grant.check(&ask),
            Err(LaunchRefusal::UndeclaredEnv("SOMETHING_ELSE".into()))
        );
        // The caller's stdio server variable passes, with the caller's value only.
        let mcp_env = [("GITHUB_TOKEN".to_owned(), "caller".to_owned())];
        let passed = [("GITHUB_TOKEN".to_owned(), "caller".to_owned())];
        let ask = LaunchAsk {
            env: &passed,
            mcp_env: &mcp_env,
            ..launch("reference-provider", None)
        };
        assert!(grant.check(&ask).is_ok());
        let changed = [("GITHUB_TOKEN".to_owned(), "driver".to_owned())];
        let ask = LaunchAsk {
            env: &changed,
            mcp_env: &mcp_env,
            ..launch("reference-provider", None)
        };
        assert_eq!(
            grant.check(&ask),
            Err(LaunchRefusal::UndeclaredEnv("GITHUB_TOKEN".into()))
        );
        // A 0.1.0 driver declares nothing: the denylist alone applies.
        let legacy = grant.with_launch_env(None);
        let ask = LaunchAsk {
            env: &undeclared,
            ..launch("reference-provider", None)
        };
        assert!(legacy.check(&ask).is_ok());
    }

    #[test]
    fn only_the_granted_program_and_workspace_cwd_pass() {
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path().canonicalize().unwrap();
        std::fs::create_dir(ws.join("sub")).unwrap();
        let grant = grant(&ws);
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
    fn the_environment_is_the_base_then_the_driver_additions() {
        let ws = tempfile::tempdir().unwrap();
        let mut grant = grant(ws.path());
        grant.base_env.insert("PATH".into(), "/usr/bin".into());
        grant.base_env.insert("SET_BY_HOST".into(), "host".into());
        let (spec, _) = grant
            .spec(
                vec!["-p".into()],
                &[
                    ("EXTRA".into(), "1".into()),
                    ("SET_BY_HOST".into(), "driver".into()),
                ],
                ws.path().to_path_buf(),
                run_paths(Path::new("/tmp/run-tmp")),
            )
            .unwrap();
        let env: Vec<_> = spec
            .env
            .iter()
            .map(|(k, v)| (k.to_str().unwrap(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            env,
            [
                ("EXTRA", "1"),
                ("PATH", "/usr/bin"),
                ("SET_BY_HOST", "host"),
                ("TMPDIR", "/tmp/run-tmp")
            ],
            "the caller's value wins; the run's TMPDIR is set"
        );
        assert_eq!(spec.program, Path::new("/usr/bin/reference-provider"));
        grant.resolved = Err("not on PATH".into());
        assert!(matches!(
            grant.spec(
                vec![],
                &[],
                ws.path().to_path_buf(),
                run_paths(Path::new("/tmp/run-tmp"))
            ),
            Err(Error::ProgramNotFound { .. })
        ));
        assert_eq!(grant.unresolved(), Some("not on PATH"));
        // The program check still works by configured name without a resolved path.
        assert!(grant.check_program("reference-provider").is_ok());
        assert!(grant.check_program("/usr/bin/reference-provider").is_err());
    }

    #[test]
    fn denied_variables_are_refused_unless_the_caller_allows_them() {
        let ws = tempfile::tempdir().unwrap();
        let mut grant = grant(ws.path());
        let env = [("LD_PRELOAD".to_owned(), "/tmp/x.so".to_owned())];
        let ask = LaunchAsk {
            env: &env,
            ..launch("reference-provider", None)
        };
        assert_eq!(
            grant.check(&ask),
            Err(LaunchRefusal::DeniedEnv {
                name: "LD_PRELOAD".into(),
                rule: "LD_*".into()
            })
        );
        grant.containment = Containment::new().allow_driver_env("LD_PRELOAD");
        assert!(grant.check(&ask).is_ok());
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
