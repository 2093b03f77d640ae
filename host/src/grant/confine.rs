//! The filesystem confinement of one launch, decided from the grant, the caller's policy and
//! [`Containment`], and the provider's final environment (caller-set, never driver-set: the
//! variables that name directories are on the driver denylist).
//!
//! Owns: which paths a provider may read, execute and write, and why (the
//! [`PathRule`] list a report shows), which secrets beneath them are hidden by mounts (see
//! [`SystemRules`]), including the host's table of known CLIs' state directories.
//! Must not: open, create or restrict anything (`process` applies the plan; the only file
//! access here is reading metadata, `/etc`'s listing and a program's `#!` line).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::containment::{Containment, PathAccess, PathRule};
use crate::process::CommonRules;

/// `/etc` entries a provider may not read: password hashes, sudo rules, host keys, private
/// TLS keys.
const ETC_SECRETS: &[&str] = &[
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "ssh",
    "security",
    "ssl",
    "pki",
    "krb5.keytab",
    "machine-id",
    "credstore",
    "credstore.encrypted",
];

/// `/etc/ssl` and `/etc/pki` entries a provider may read (certificates, not keys).
const ETC_TLS_PUBLIC: &[&str] = &[
    "certs",
    "openssl.cnf",
    "ca-trust",
    "tls",
    "ca-certificates.conf",
];

/// System directories: read and execute.
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
];

/// Device nodes every program expects.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// The rules every launch gets — the system directories, `/etc` without its secrets,
/// `/proc`, `/sys`, the device nodes — decided once per process (about 1 ms of `/etc`
/// listing and path resolution per launch otherwise), ahead of the first launch when the
/// spawner starts early (`super::expect_launch`), in both of `/etc`'s forms (see
/// [`SystemRules`]).
pub(crate) fn system_rules() -> &'static SystemRules {
    static RULES: std::sync::OnceLock<SystemRules> = std::sync::OnceLock::new();
    RULES.get_or_init(|| {
        let mut plan = ConfinementPlan::default();
        for dir in SYSTEM_DIRS {
            plan.add(Path::new(dir), PathAccess::ReadExecute, "system");
        }
        let etc = EtcGrants::of(Path::new("/etc"));
        let mut tail = ConfinementPlan::default();
        tail.add(Path::new("/proc"), PathAccess::Read, "system");
        tail.add(Path::new("/sys"), PathAccess::Read, "system");
        for dev in DEVICES {
            tail.add(Path::new(dev), PathAccess::Device, "device");
        }
        tail.add(Path::new("/dev/shm"), PathAccess::ReadWrite, "device");
        let form = |etc_rules: &[PathRule]| {
            let mut rules = plan.clone();
            for rule in etc_rules.iter().chain(&tail.rules) {
                rules.add_canonical(rule.path.clone(), rule.access, &rule.why);
            }
            rules.rules
        };
        SystemRules {
            entries: form(&etc.entries),
            hiding: form(&etc.whole),
            hidden: etc.hidden,
        }
    })
}

/// The system rules in the two forms a launch can take. `/etc` holds secrets (password
/// hashes, host keys, private TLS keys) beside what every program reads, and Landlock
/// cannot deny a path beneath one it allows, so:
/// - a provider in a mount namespace of its own that runs with no capabilities (a host
///   that is not root: the provider is an unprivileged user in a user namespace) gets
///   `/etc` whole, and its secrets are hidden by mounts over them in that namespace (a
///   file by `/dev/null` on a `nodev` mount, so opening it fails with "permission denied"
///   as before; a directory by an empty read-only `tmpfs`), which it can neither unmount
///   (Landlock refuses mounts to a sandboxed process) nor see past: a dozen rules and a few
///   mounts, instead of
/// - one Landlock rule per entry of `/etc` but the secrets (about 150 on a Debian
///   system), each opened at every launch: the form of a launch without namespaces, and
///   of a root host's, whose provider could reach a hidden file's inode past its mask (by
///   handle, or through a clone of the mount tree) where the whole `/etc` rule would let
///   it read it. A rule per entry grants such an inode nothing.
#[derive(Debug)]
pub(crate) struct SystemRules {
    /// `/etc` entry by entry, without its secrets.
    pub entries: Vec<PathRule>,
    /// `/etc` whole, for a launch that hides [`hidden`](Self::hidden).
    pub hiding: Vec<PathRule>,
    /// The secrets of `/etc` (canonical, outer before inner), and the names of those that
    /// lead nowhere (yet).
    pub hidden: Vec<PathBuf>,
}

impl SystemRules {
    /// The rules of one form, [`hiding`](Self::hiding) or [`entries`](Self::entries), as
    /// the rule set every launch of that form begins with: the spawner builds its Landlock
    /// ruleset ahead of a launch.
    pub(crate) fn common(&'static self, hide: bool) -> CommonRules {
        CommonRules::of(if hide { &self.hiding } else { &self.entries })
    }
}

/// `/etc` as a plan grants it (see [`SystemRules`]).
#[derive(Debug, Default)]
struct EtcGrants {
    entries: Vec<PathRule>,
    whole: Vec<PathRule>,
    hidden: Vec<PathBuf>,
}

impl EtcGrants {
    /// Both forms of `etc`, from one listing. Only symbolic links are resolved: any other
    /// entry of the canonical `/etc` is its own canonical path (the listing's file type says
    /// which, with no call per entry — the two resolutions per entry this used to make were
    /// some 560 `readlink` calls). A link is followed unless it leads into a secret (or to
    /// `/etc` itself) or into `/proc`; in the whole form only links leading out of `/etc`
    /// add a rule. A secret is hidden where it leads, if that is inside `/etc` (one leading
    /// out is granted by no `/etc` rule, as in the entry form).
    fn of(etc: &Path) -> EtcGrants {
        let mut grants = EtcGrants::default();
        let Ok(etc) = etc.canonicalize() else {
            return grants;
        };
        let Ok(listing) = std::fs::read_dir(&etc) else {
            return grants;
        };
        let mut listing: Vec<(OsString, bool)> = listing
            .flatten()
            .map(|e| {
                let link = e.file_type().is_ok_and(|t| t.is_symlink());
                (e.file_name(), link)
            })
            .collect();
        listing.sort();
        let mut entries = ConfinementPlan::default();
        let mut whole = ConfinementPlan::default();
        whole.add_canonical(etc.clone(), PathAccess::Read, "system");
        let mut hidden = Vec::new();
        for (name, link) in listing {
            let path = etc.join(&name);
            if matches!(name.to_str(), Some("ssl" | "pki")) {
                for public in ETC_TLS_PUBLIC {
                    entries.add(&path.join(public), PathAccess::Read, "system");
                }
                // Everything else in them is a key or may hold one.
                if let Ok(inner) = std::fs::read_dir(&path) {
                    hidden.extend(inner.flatten().filter_map(|e| {
                        let name = e.file_name();
                        let public = name.to_str().is_some_and(|n| ETC_TLS_PUBLIC.contains(&n));
                        (!public).then(|| e.path())
                    }));
                }
            } else if etc_secret(&etc, &path) {
                // Not granted in the entry form, whatever it is or leads to; hidden below.
            } else if !link {
                entries.add_canonical(path, PathAccess::Read, "system");
            } else if let Ok(target) = path.canonicalize()
                // `/etc/mtab` → `/proc/self/mounts`: covered by `/proc`, and `self` would
                // resolve to the host.
                && !target.starts_with("/proc")
                && !etc_secret(&etc, &target)
            {
                entries.add_canonical(target.clone(), PathAccess::Read, "system");
                whole.add_canonical(target, PathAccess::Read, "system");
            }
        }
        // Every secret's name (not `ssl` or `pki`, whose public entries a provider reads),
        // hidden where it leads inside `/etc` (one leading out is granted by no `/etc` rule).
        // A name that leads nowhere now (absent, or a dangling link) is hidden as it is: this
        // list is decided once per process, and should it appear before a launch, the mount
        // follows it (the reaper skips what does not exist then) — as the entry form would not
        // grant an entry that appeared after its listing.
        hidden.extend(
            ETC_SECRETS
                .iter()
                .filter(|name| !matches!(**name, "ssl" | "pki"))
                .map(|name| etc.join(name)),
        );
        let mut hidden: Vec<PathBuf> = hidden
            .into_iter()
            .filter_map(|path| match path.canonicalize() {
                Ok(target) => (target.starts_with(&etc) && target != etc).then_some(target),
                Err(_) => Some(path),
            })
            .collect();
        // Outer before inner: an inner one under a hidden directory is then already gone.
        hidden.sort();
        hidden.dedup();
        grants.entries = entries.rules;
        grants.whole = whole.rules;
        grants.hidden = hidden;
        grants
    }
}

/// Everything the plan needs to know about one launch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlanInputs<'a> {
    /// The program as configured (its file name picks the known state directories).
    pub configured: &'a str,
    /// The resolved program.
    pub program: &'a Path,
    /// The canonical workspace.
    pub workspace: &'a Path,
    /// No writes to the workspace (`Sandbox::ReadOnly`).
    pub read_only: bool,
    /// No writes to the CLI's state either (Inspect's probes: nothing they run can leave a
    /// setting or hook behind); state that exists is readable, state that does not is not
    /// created.
    pub state_read_only: bool,
    /// The run's private files, if any were written.
    pub files_dir: Option<&'a Path>,
    /// The provider's `TMPDIR`.
    pub tmp_dir: &'a Path,
    /// The provider's environment.
    pub env: &'a BTreeMap<OsString, OsString>,
    /// The caller's settings.
    pub containment: &'a Containment,
    /// Paths the caller's driver config names in fields the driver's schema marks.
    pub config_paths: &'a [ConfigPath],
    /// Stdio MCP server programs the caller declared by absolute path.
    pub mcp_programs: &'a [PathBuf],
    /// The provider gets a mount namespace of its own and no capabilities: `/etc` is
    /// granted whole and its secrets hidden by mounts (see [`SystemRules`]), instead of
    /// entry by entry.
    pub hide_by_mounts: bool,
    /// The run's materialized skill set (the host wrote it; read and execute).
    pub skills: Option<&'a Path>,
    /// The run's dedicated profile: its directory, linked user files, a shared credential
    /// store (read-write; the host made them).
    pub profile: &'a [PathBuf],
    /// The run's instructions bundle (the host wrote it; read).
    pub instructions: Option<&'a Path>,
}

/// What a config field marked with `x-adaptor-path` grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConfigPathKind {
    /// `"x-adaptor-path": "state"`: a state directory (read-write, created when missing).
    State,
    /// `"x-adaptor-path": "read"`: read and execute.
    Read,
}

/// A path from the caller's driver config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigPath {
    /// The config field (`/state_dir`).
    pub pointer: String,
    /// The caller's value.
    pub path: PathBuf,
    /// What it grants.
    pub kind: ConfigPathKind,
}

/// Why a config path cannot be granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RefusedConfigPath {
    /// The field.
    pub pointer: String,
    /// What is wrong.
    pub reason: String,
}

/// The paths the caller's `config` names in top-level fields that the driver's `schema`
/// marks with `"x-adaptor-path": "state" | "read"`.
///
/// The driver chooses only which fields are paths; the value is the caller's, so a hostile
/// driver gains at most access to a path its caller wrote into that field — never the
/// `command` field, never a relative path, never `/`, the home directory or one of its
/// ancestors, a system directory, or (for a state directory) one holding the granted program.
pub(crate) fn config_paths(
    schema: &serde_json::Value,
    config: &serde_json::Value,
) -> Result<Vec<ConfigPath>, RefusedConfigPath> {
    let mut out = Vec::new();
    let Some(properties) = schema.get("properties").and_then(|p| p.as_object()) else {
        return Ok(out);
    };
    for (field, spec) in properties {
        let kind = match spec.get("x-adaptor-path").and_then(|k| k.as_str()) {
            Some("state") => ConfigPathKind::State,
            Some("read") => ConfigPathKind::Read,
            _ => continue,
        };
        let pointer = format!("/{field}");
        let Some(value) = config.get(field).and_then(|v| v.as_str()) else {
            continue;
        };
        let refuse = |reason: &str| RefusedConfigPath {
            pointer: pointer.clone(),
            reason: reason.to_owned(),
        };
        if field == "command" {
            return Err(refuse("the program field cannot grant file access"));
        }
        let path = PathBuf::from(value);
        if !path.is_absolute() {
            return Err(refuse("a path field must hold an absolute path"));
        }
        out.push(ConfigPath {
            pointer,
            path,
            kind,
        });
    }
    Ok(out)
}

/// Directories no config path may name (or lie above).
const TOO_WIDE: &[&str] = &[
    "/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/var", "/boot", "/dev",
    "/proc", "/sys", "/home", "/root", "/tmp", "/run",
];

/// The decided confinement: the rules, the paths hidden by mounts, and the state
/// directories to create before launch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ConfinementPlan {
    pub rules: Vec<PathRule>,
    /// Paths hidden by mounts over them in the provider's mount namespace (see
    /// [`SystemRules`]).
    pub hidden: Vec<PathBuf>,
    /// State directories that do not exist yet (created 0700 before launch).
    pub create: Vec<PathBuf>,
    /// The system's rules `rules` begins with (see [`SystemRules::common`]).
    pub common: Option<CommonRules>,
}

/// Why the plan cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PlanError {
    /// A path the caller allowed does not exist.
    Missing(PathBuf),
    /// A config path cannot be granted.
    Refused(RefusedConfigPath),
}

impl ConfinementPlan {
    /// Decide the plan.
    ///
    /// Secrets are hidden (see [`SystemRules`]) only when no other rule of the launch lies on
    /// a hidden path, in it or above it — a path the caller allowed, a state directory, the
    /// workspace: a mask would take what that rule grants, and unmasking one secret would
    /// show the others beside it through the whole `/etc` rule. Such a launch gets `/etc`
    /// entry by entry, where that rule grants what it names and nothing else.
    pub(crate) fn decide(inputs: &PlanInputs<'_>) -> Result<ConfinementPlan, PlanError> {
        if inputs.hide_by_mounts {
            let (plan, system) = Self::decide_with(inputs, true)?;
            let crosses = |rule: &PathRule| {
                plan.hidden
                    .iter()
                    .any(|h| h.starts_with(&rule.path) || rule.path.starts_with(h))
            };
            if !plan.rules[system..].iter().any(crosses) {
                return Ok(plan);
            }
        }
        Self::decide_with(inputs, false).map(|(plan, _)| plan)
    }

    /// The plan, `/etc` whole with its secrets hidden (`hide`) or entry by entry, and how
    /// many of its rules are the system's (they come first).
    fn decide_with(
        inputs: &PlanInputs<'_>,
        hide: bool,
    ) -> Result<(ConfinementPlan, usize), PlanError> {
        let mut plan = ConfinementPlan::default();
        let env = |name: &str| {
            inputs
                .env
                .get(OsStr::new(name))
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        let home = env("HOME");
        let system = system_rules();
        let common = system.common(hide);
        plan.rules.extend(common.rules().iter().cloned());
        if hide {
            plan.hidden.clone_from(&system.hidden);
        }
        plan.common = Some(common);
        let system = plan.rules.len();
        for dir in install_dirs(inputs.program, inputs.env, home.as_deref()) {
            plan.add(&dir, PathAccess::ReadExecute, "install");
        }
        if let Some(path) = inputs.env.get(OsStr::new("PATH")) {
            for dir in std::env::split_paths(path) {
                let usable = dir.is_absolute()
                    && dir != Path::new("/")
                    && !home.as_deref().is_some_and(|h| h.starts_with(&dir));
                if usable {
                    plan.add(&dir, PathAccess::ReadExecute, "path");
                }
            }
        }
        let config_home =
            env("XDG_CONFIG_HOME").or_else(|| home.as_ref().map(|h| h.join(".config")));
        if let Some(home) = &home {
            plan.add(&home.join(".gitconfig"), PathAccess::Read, "git config");
        }
        if let Some(config) = &config_home {
            plan.add(&config.join("git"), PathAccess::Read, "git config");
        }
        let workspace_access = if inputs.read_only {
            PathAccess::ReadExecute
        } else {
            PathAccess::ReadWrite
        };
        plan.add(inputs.workspace, workspace_access, "workspace");
        if let Some(files) = inputs.files_dir {
            plan.add(files, PathAccess::Read, "private files");
        }
        plan.add_or_create(inputs.tmp_dir, "tmpdir");
        let state = match &inputs.containment.state_dirs {
            Some(dirs) => dirs.iter().map(|d| StatePath::Dir(d.clone())).collect(),
            None => known_state(inputs.configured, &env, home.as_deref()),
        };
        for path in state {
            let (path, is_dir) = match path {
                StatePath::Dir(p) => (p, true),
                StatePath::File(p) => (p, false),
            };
            if inputs.state_read_only {
                if path.exists() {
                    plan.add(&path, PathAccess::Read, "state (read-only)");
                }
            } else if is_dir {
                plan.add_or_create(&path, "state");
            } else {
                plan.add(&path, PathAccess::ReadWrite, "state");
            }
        }
        for config in inputs.config_paths {
            let canonical = config
                .path
                .canonicalize()
                .unwrap_or_else(|_| config.path.clone());
            let refuse = |reason: String| {
                PlanError::Refused(RefusedConfigPath {
                    pointer: config.pointer.clone(),
                    reason,
                })
            };
            let wide = TOO_WIDE.iter().any(|w| Path::new(w) == canonical)
                || home.as_deref().is_some_and(|h| h.starts_with(&canonical));
            if wide {
                return Err(refuse(format!(
                    "{} is too wide to grant (a system directory, the home directory or above)",
                    canonical.display()
                )));
            }
            let why = format!("config {}", config.pointer);
            match config.kind {
                ConfigPathKind::State => {
                    if inputs.program.starts_with(&canonical) {
                        return Err(refuse(format!(
                            "{} holds the granted program; it cannot be writable",
                            canonical.display()
                        )));
                    }
                    if inputs.state_read_only {
                        if canonical.exists() {
                            plan.add(
                                &canonical,
                                PathAccess::Read,
                                &format!("state ({why}, read-only)"),
                            );
                        }
                    } else {
                        plan.add_or_create(&canonical, &format!("state ({why})"));
                    }
                }
                ConfigPathKind::Read => {
                    if !canonical.exists() {
                        return Err(PlanError::Missing(config.path.clone()));
                    }
                    plan.add(&canonical, PathAccess::ReadExecute, &why);
                }
            }
        }
        for program in inputs.mcp_programs {
            if !program.exists() {
                return Err(PlanError::Missing(program.clone()));
            }
            plan.add(program, PathAccess::ReadExecute, "mcp server");
        }
        if let Some(skills) = inputs.skills {
            plan.add(skills, PathAccess::ReadExecute, "skills");
        }
        if let Some(instructions) = inputs.instructions {
            plan.add(instructions, PathAccess::Read, "instructions");
        }
        for path in inputs.profile {
            if inputs.state_read_only {
                if path.exists() {
                    plan.add(path, PathAccess::Read, "profile (read-only)");
                }
            } else {
                plan.add(path, PathAccess::ReadWrite, "profile");
            }
        }
        for (paths, access) in [
            (&inputs.containment.allow_read, PathAccess::ReadExecute),
            (&inputs.containment.allow_write, PathAccess::ReadWrite),
        ] {
            for path in paths {
                let canonical = path
                    .canonicalize()
                    .map_err(|_| PlanError::Missing(path.clone()))?;
                plan.rules.push(PathRule {
                    path: canonical,
                    access,
                    why: "caller".to_owned(),
                });
            }
        }
        Ok((plan, system))
    }

    /// Add a rule for `path` (canonicalised) if it exists and no rule of the same access
    /// covers it already.
    fn add(&mut self, path: &Path, access: PathAccess, why: &str) {
        if let Ok(canonical) = path.canonicalize() {
            self.add_canonical(canonical, access, why);
        }
    }

    /// [`add`](Self::add) for a path already canonical. The cover test runs against every
    /// rule (about 200 with `/etc`'s entries), so it first compares the access and the bytes:
    /// a byte prefix is necessary for a component prefix of canonical paths, and the
    /// component-wise `Path::starts_with` only confirms the few that pass (it alone, over
    /// the ~20 000 pairs of the system rules, was over a millisecond of every new host
    /// process). A rule missed as a cover only adds a redundant rule, never removes one.
    fn add_canonical(&mut self, canonical: PathBuf, access: PathAccess, why: &str) {
        let bytes = canonical.as_os_str().as_encoded_bytes();
        let covered = self.rules.iter().any(|r| {
            r.access == access
                && bytes.starts_with(r.path.as_os_str().as_encoded_bytes())
                && canonical.starts_with(&r.path)
        });
        if !covered {
            self.rules.push(PathRule {
                path: canonical,
                access,
                why: why.to_owned(),
            });
        }
    }

    /// A read-write directory, created before launch when missing.
    fn add_or_create(&mut self, path: &Path, why: &str) {
        if path.exists() {
            self.add(path, PathAccess::ReadWrite, why);
        } else {
            self.create.push(path.to_path_buf());
            self.rules.push(PathRule {
                path: path.to_path_buf(),
                access: PathAccess::ReadWrite,
                why: why.to_owned(),
            });
        }
    }
}

/// Whether a rule for `path` (canonical: an entry of `etc`, or a link's target) would grant
/// a secret of `etc`: `etc` itself or above it, one of [`ETC_SECRETS`], or in `ssl` or `pki`
/// outside [`ETC_TLS_PUBLIC`]. The one definition of what `/etc` keeps from providers.
fn etc_secret(etc: &Path, path: &Path) -> bool {
    if etc.starts_with(path) {
        return true;
    }
    let Ok(rest) = path.strip_prefix(etc) else {
        return false;
    };
    let mut parts = rest.components().map(|c| c.as_os_str().to_string_lossy());
    match parts.next() {
        None => true,
        Some(first) if matches!(first.as_ref(), "ssl" | "pki") => !parts
            .next()
            .is_some_and(|p| ETC_TLS_PUBLIC.contains(&p.as_ref())),
        Some(first) => ETC_SECRETS.contains(&first.as_ref()),
    }
}

/// A state path of a known CLI.
enum StatePath {
    Dir(PathBuf),
    File(PathBuf),
}

/// The host's table of where known CLIs keep their state (see
/// [`Containment::state_dir`]).
fn known_state(
    configured: &str,
    env: &dyn Fn(&str) -> Option<PathBuf>,
    home: Option<&Path>,
) -> Vec<StatePath> {
    let name = Path::new(configured)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let in_home = |rel: &str| home.map(|h| StatePath::Dir(h.join(rel)));
    let xdg = |var: &str, default: &str, sub: &str| {
        env(var)
            .or_else(|| home.map(|h| h.join(default)))
            .map(|d| StatePath::Dir(d.join(sub)))
    };
    match name.as_str() {
        "claude" => match env("CLAUDE_CONFIG_DIR") {
            Some(dir) => vec![StatePath::Dir(dir)],
            None => [
                in_home(".claude"),
                home.map(|h| StatePath::File(h.join(".claude.json"))),
                home.map(|h| StatePath::File(h.join(".claude.json.backup"))),
            ]
            .into_iter()
            .flatten()
            .collect(),
        },
        "codex" => {
            let mut v: Vec<StatePath> = env("CODEX_HOME")
                .map(StatePath::Dir)
                .or_else(|| in_home(".codex"))
                .into_iter()
                .collect();
            // SAFETY: getuid(2) cannot fail and touches no memory.
            let uid = unsafe { libc::getuid() };
            v.push(StatePath::Dir(PathBuf::from(format!(
                "/tmp/codex-daemon-{uid}"
            ))));
            v
        }
        "reference-provider" => env("REFERENCE_PROVIDER_STATE_DIR")
            .map(StatePath::Dir)
            .or_else(|| in_home(".local/state/reference-provider"))
            .into_iter()
            .collect(),
        "gemini" => in_home(".gemini").into_iter().collect(),
        "codebuddy" => env("CODEBUDDY_CONFIG_DIR")
            .map(StatePath::Dir)
            .or_else(|| in_home(".codebuddy"))
            .into_iter()
            .collect(),
        // Cursor Agent (`agent`, also installed as `cursor-agent`).
        "agent" | "cursor-agent" => env("CURSOR_CONFIG_DIR")
            .map(StatePath::Dir)
            .or_else(|| in_home(".cursor"))
            .into_iter()
            .collect(),
        "qwen" => in_home(".qwen").into_iter().collect(),
        "opencode" => [
            xdg("XDG_CONFIG_HOME", ".config", "opencode"),
            xdg("XDG_DATA_HOME", ".local/share", "opencode"),
            xdg("XDG_STATE_HOME", ".local/state", "opencode"),
            xdg("XDG_CACHE_HOME", ".cache", "opencode"),
        ]
        .into_iter()
        .flatten()
        .collect(),
        _ => Vec::new(),
    }
}

/// Where the program and its interpreter are installed: for a file inside `node_modules`,
/// the directory above the topmost `node_modules`; for a file in a `bin` directory, the
/// directory above it (unless that is `/` or the home directory); else its own directory.
fn install_dirs(
    program: &Path,
    env: &BTreeMap<OsString, OsString>,
    home: Option<&Path>,
) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let Ok(canonical) = program.canonicalize() else {
        return dirs;
    };
    dirs.extend(install_root(&canonical, home));
    if let Some(interpreter) = shebang_interpreter(&canonical, env)
        && let Ok(interpreter) = interpreter.canonicalize()
    {
        dirs.extend(install_root(&interpreter, home));
    }
    dirs
}

fn install_root(file: &Path, home: Option<&Path>) -> Option<PathBuf> {
    let topmost_modules = file
        .ancestors()
        .filter(|a| a.file_name() == Some(OsStr::new("node_modules")))
        .last();
    let too_wide = |d: &Path| d == Path::new("/") || home.is_some_and(|h| h.starts_with(d));
    if let Some(root) = topmost_modules.and_then(Path::parent)
        && !too_wide(root)
    {
        return Some(root.to_path_buf());
    }
    let parent = file.parent()?;
    match parent.parent() {
        Some(above) if parent.file_name() == Some(OsStr::new("bin")) && !too_wide(above) => {
            Some(above.to_path_buf())
        }
        _ if too_wide(parent) => None,
        _ => Some(parent.to_path_buf()),
    }
}

/// The interpreter of a `#!` script (`#!/usr/bin/env node` → `node` on the provider's PATH).
fn shebang_interpreter(program: &Path, env: &BTreeMap<OsString, OsString>) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let interpreter = PathBuf::from(words.next()?);
    if interpreter.file_name() != Some(OsStr::new("env")) {
        return Some(interpreter);
    }
    let name = words.find(|w| !w.starts_with('-'))?;
    let path = env.get(OsStr::new("PATH"))?;
    std::env::split_paths(path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paths of `hidden` that exist.
    fn existing(hidden: &[PathBuf]) -> Vec<PathBuf> {
        hidden.iter().filter(|p| p.exists()).cloned().collect()
    }

    fn rule<'a>(plan: &'a ConfinementPlan, path: &Path) -> Option<&'a PathRule> {
        let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        plan.rules.iter().find(|r| r.path == path)
    }

    #[test]
    fn etc_is_granted_entry_by_entry_and_no_link_leads_into_a_secret() {
        use std::os::unix::fs::symlink;
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let etc = root.join("etc");
        let elsewhere = root.join("usr-share");
        for d in [
            etc.join("ssl/private"),
            etc.join("ssl/certs"),
            etc.join("apt"),
            elsewhere.clone(),
        ] {
            std::fs::create_dir_all(d).unwrap();
        }
        for f in ["hosts", "shadow", "ssl/private/key.pem", "ssl/certs/ca.pem"] {
            std::fs::write(etc.join(f), "").unwrap();
        }
        std::fs::write(elsewhere.join("os-release"), "").unwrap();
        for (link, target) in [
            ("os-release", elsewhere.join("os-release")),
            ("hosts.alias", etc.join("hosts")),
            ("key-link", etc.join("ssl/private")),
            ("shadow-link", etc.join("shadow")),
            ("certs-link", etc.join("ssl/certs")),
            ("self", etc.clone()),
            ("up", root.clone()),
            ("mtab", PathBuf::from("/proc/self/mounts")),
            ("dangling", etc.join("missing")),
        ] {
            symlink(target, etc.join(link)).unwrap();
        }
        let grants = EtcGrants::of(&etc);
        let granted: Vec<&Path> = grants.entries.iter().map(|r| r.path.as_path()).collect();
        assert!(
            grants
                .entries
                .iter()
                .chain(&grants.whole)
                .all(|r| r.access == PathAccess::Read && r.why == "system")
        );
        // In name order, entries as themselves and links as their targets, each once
        // (`certs-link` grants `ssl/certs` before `ssl` comes; `hosts.alias` leads to a path
        // already granted).
        assert_eq!(
            granted,
            [
                etc.join("apt"),
                etc.join("ssl/certs"),
                etc.join("hosts"),
                elsewhere.join("os-release"),
            ]
        );
        // Whole: `/etc` and what a link leads to outside it; the secrets (and everything in
        // `ssl` but its public entries) hidden, outer before inner, each once.
        let whole: Vec<&Path> = grants.whole.iter().map(|r| r.path.as_path()).collect();
        assert_eq!(whole, [etc.as_path(), &elsewhere.join("os-release")]);
        assert_eq!(
            existing(&grants.hidden),
            [etc.join("shadow"), etc.join("ssl/private")]
        );
        // The other secrets' names, should they appear before a launch.
        // (All but `shadow`, which exists, and `ssl` and `pki`, hidden by their entries.)
        assert_eq!(grants.hidden.len(), 2 + ETC_SECRETS.len() - 3);
        assert!(grants.hidden.contains(&etc.join("gshadow")));
    }

    #[test]
    fn a_secret_is_hidden_where_it_leads_inside_etc_only() {
        use std::os::unix::fs::symlink;
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let etc = root.join("etc");
        std::fs::create_dir_all(etc.join("alt/ssh")).unwrap();
        std::fs::create_dir_all(root.join("outside")).unwrap();
        std::fs::write(root.join("outside/id"), "").unwrap();
        std::fs::write(etc.join("alt/shadow"), "").unwrap();
        // Secrets that are links: one into `/etc` (hidden there), one out of it (no `/etc`
        // rule grants it), one dangling (hidden by its name).
        symlink(etc.join("alt/shadow"), etc.join("shadow")).unwrap();
        symlink(etc.join("alt/ssh"), etc.join("ssh")).unwrap();
        symlink(root.join("outside/id"), etc.join("machine-id")).unwrap();
        symlink(etc.join("missing"), etc.join("gshadow")).unwrap();
        let grants = EtcGrants::of(&etc);
        assert_eq!(
            existing(&grants.hidden),
            [etc.join("alt/shadow"), etc.join("alt/ssh")]
        );
        // A dangling link is hidden by its name: should its target appear, the mount
        // follows it.
        assert!(grants.hidden.contains(&etc.join("gshadow")));
        assert!(
            grants
                .whole
                .iter()
                .all(|r| r.path != root.join("outside/id"))
        );
        assert!(
            grants
                .entries
                .iter()
                .all(|r| r.path != root.join("outside/id"))
        );
    }

    #[test]
    fn the_plan_grants_the_workspace_the_state_and_the_system_and_not_the_home() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let home = root.join("home");
        let ws = root.join("ws");
        let tmp = root.join("tmp");
        let bin = root.join("cli/node_modules/.bin");
        for d in [&home, &ws, &tmp, &bin] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(home.join(".gitconfig"), "").unwrap();
        std::fs::write(home.join("secret"), "").unwrap();
        let program = bin.join("claude");
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        let env: BTreeMap<OsString, OsString> = [
            ("HOME", home.as_os_str()),
            ("PATH", OsStr::new("/usr/bin:/bin")),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.to_owned()))
        .collect();
        let containment = Containment::new();
        let inputs = PlanInputs {
            configured: "claude",
            program: &program,
            workspace: &ws,
            read_only: false,
            state_read_only: false,
            files_dir: None,
            tmp_dir: &tmp,
            env: &env,
            containment: &containment,
            config_paths: &[],
            mcp_programs: &[],
            hide_by_mounts: false,
            skills: None,
            profile: &[],
            instructions: None,
        };
        let plan = ConfinementPlan::decide(&inputs).unwrap();
        assert!(plan.hidden.is_empty());
        assert_eq!(rule(&plan, &ws).unwrap().access, PathAccess::ReadWrite);
        assert_eq!(rule(&plan, &tmp).unwrap().access, PathAccess::ReadWrite);
        assert_eq!(
            rule(&plan, &root.join("cli")).unwrap().access,
            PathAccess::ReadExecute,
            "the npm prefix above node_modules"
        );
        assert_eq!(rule(&plan, Path::new("/usr")).unwrap().why, "system");
        assert_eq!(
            rule(&plan, &home.join(".gitconfig")).unwrap().access,
            PathAccess::Read
        );
        // Claude's state directory is created; nothing grants the home itself.
        assert_eq!(plan.create, vec![home.join(".claude")]);
        assert!(
            plan.rules
                .iter()
                .all(|r| !home.starts_with(&r.path) && r.path != home.join("secret")),
            "{plan:?}"
        );
        assert!(rule(&plan, Path::new("/etc/shadow")).is_none());
        assert!(rule(&plan, Path::new("/etc")).is_none(), "entry by entry");
        // The plan's rules begin with the system's, the common set the spawner prepares.
        let begins_with_its_common_set = |p: &ConfinementPlan, hide: bool| {
            let common = p.common.expect("a common set");
            assert_eq!(common, system_rules().common(hide));
            assert!(p.rules.starts_with(common.rules()), "{p:?}");
            assert!(
                p.rules.len() > common.rules().len(),
                "and the launch's own after"
            );
        };
        begins_with_its_common_set(&plan, false);
        // With a mount namespace: `/etc` whole, its secrets hidden; the rest is the same.
        let hiding = ConfinementPlan::decide(&PlanInputs {
            hide_by_mounts: true,
            ..inputs
        })
        .unwrap();
        assert_eq!(
            rule(&hiding, Path::new("/etc")).unwrap().access,
            PathAccess::Read
        );
        assert_eq!(hiding.hidden, system_rules().hidden);
        begins_with_its_common_set(&hiding, true);
        assert_ne!(hiding.common, plan.common);
        if Path::new("/etc/shadow").exists() {
            assert!(hiding.hidden.contains(&PathBuf::from("/etc/shadow")));
        }
        assert!(hiding.rules.len() < plan.rules.len());
        let not_etc = |p: &ConfinementPlan| -> Vec<PathRule> {
            p.rules
                .iter()
                .filter(|r| !r.path.starts_with("/etc"))
                .cloned()
                .collect()
        };
        assert_eq!(not_etc(&hiding), not_etc(&plan));
        // A rule of the caller's on a hidden path (or above one) keeps `/etc` entry by entry:
        // a mask would take what it grants, and unmasking would show the other secrets.
        if let Some(secret) = system_rules().hidden.iter().find(|p| p.exists()) {
            for allowed in [secret.as_path(), Path::new("/etc")] {
                let containment = Containment::new().allow_read(allowed);
                let crossing = ConfinementPlan::decide(&PlanInputs {
                    hide_by_mounts: true,
                    containment: &containment,
                    ..inputs
                })
                .unwrap();
                assert!(crossing.hidden.is_empty(), "{allowed:?}");
                begins_with_its_common_set(&crossing, false);
                assert!(
                    !crossing
                        .rules
                        .iter()
                        .any(|r| r.path == Path::new("/etc") && r.why == "system"),
                    "{allowed:?}: entry by entry"
                );
                assert_eq!(rule(&crossing, allowed).unwrap().why, "caller");
            }
        }
        // Read-only: the workspace loses write; a caller path must exist.
        let read_only = PlanInputs {
            read_only: true,
            state_read_only: false,
            ..inputs
        };
        let plan = ConfinementPlan::decide(&read_only).unwrap();
        assert_eq!(rule(&plan, &ws).unwrap().access, PathAccess::ReadExecute);
        let widened = Containment::new().allow_write(root.join("missing"));
        let err = ConfinementPlan::decide(&PlanInputs {
            containment: &widened,
            ..inputs
        })
        .unwrap_err();
        assert_eq!(err, PlanError::Missing(root.join("missing")));
        // A caller-named state directory replaces the known ones.
        let own = Containment::new().state_dir(root.join("state"));
        let plan = ConfinementPlan::decide(&PlanInputs {
            containment: &own,
            ..inputs
        })
        .unwrap();
        assert_eq!(plan.create, vec![root.join("state")]);
        // A config field the schema marks grants the caller's path; too-wide ones are refused.
        let schema = serde_json::json!({"properties": {
            "state_dir": {"type": "string", "x-adaptor-path": "state"},
            "command": {"type": "string", "x-adaptor-path": "state"},
        }});
        let from_config = config_paths(
            &schema,
            &serde_json::json!({"state_dir": root.join("sessions").display().to_string()}),
        )
        .unwrap();
        let plan = ConfinementPlan::decide(&PlanInputs {
            config_paths: &from_config,
            ..inputs
        })
        .unwrap();
        let granted = rule(&plan, &root.join("sessions")).unwrap();
        assert_eq!(granted.access, PathAccess::ReadWrite);
        assert_eq!(granted.why, "state (config /state_dir)");
        for (config, reason) in [
            (serde_json::json!({"command": "/bin/sh"}), "program field"),
            (serde_json::json!({"state_dir": "relative"}), "absolute"),
        ] {
            let err = config_paths(&schema, &config).unwrap_err();
            assert!(err.reason.contains(reason), "{err:?}");
        }
        for wide in ["/", "/etc", home.to_str().unwrap(), root.to_str().unwrap()] {
            let paths = config_paths(&schema, &serde_json::json!({ "state_dir": wide })).unwrap();
            let err = ConfinementPlan::decide(&PlanInputs {
                config_paths: &paths,
                ..inputs
            })
            .unwrap_err();
            assert!(matches!(err, PlanError::Refused(_)), "{wide}: {err:?}");
        }
    }

    #[test]
    fn install_roots_stay_below_home_and_root() {
        let home = Path::new("/home/u");
        assert_eq!(
            install_root(
                Path::new("/home/u/.npm/lib/node_modules/x/cli.js"),
                Some(home)
            ),
            Some(PathBuf::from("/home/u/.npm/lib"))
        );
        assert_eq!(
            install_root(Path::new("/usr/local/bin/codex"), Some(home)),
            Some(PathBuf::from("/usr/local"))
        );
        assert_eq!(
            install_root(Path::new("/home/u/bin/tool"), Some(home)),
            Some(PathBuf::from("/home/u/bin"))
        );
        assert_eq!(install_root(Path::new("/home/u/tool"), Some(home)), None);
    }
}
