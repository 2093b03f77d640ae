//! Containment vocabulary: what the caller decides about the confinement of provider
//! processes ([`Containment`]) and what a run or an Inspect actually got
//! ([`ContainmentReport`]).
//!
//! The threat model: a driver is untrusted code that chooses the argv, environment additions,
//! stdin and private files of one powerful program (the agent CLI). Whatever it asks, the
//! host promises that the provider and every descendant
//!
//! - cannot be handed a loader, interpreter, shell or tool-config variable, nor override the
//!   caller's own variables (`grant` refuses the launch, naming the variable);
//! - reads only the system, the CLI's install directory, the workspace, the CLI's own state
//!   and the run's files, and writes only the workspace (none under a `read-only` policy),
//!   the run's `TMPDIR` and the CLI's state — enforced by the kernel (Landlock), not by
//!   vetting argv;
//! - cannot signal processes outside its run (Landlock signal scoping, where the kernel has
//!   it);
//! - does not outlive the run: it runs in a PID namespace of its own whose init is the host's
//!   reaper, so `setsid` daemons and double forks die with the run, also when the host is
//!   killed with SIGKILL.
//!
//! Must not: perform anything (see `grant` for the decision and `process` for the kernel
//! calls).

use std::path::PathBuf;

/// What to do where the kernel cannot confine a provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ContainmentMode {
    /// Refuse to start a provider the kernel cannot confine (no Landlock, no PID namespace):
    /// the run fails with [`Error::ContainmentUnavailable`](crate::Error::ContainmentUnavailable)
    /// before anything is spawned. The default.
    #[default]
    Enforce,
    /// Confine as far as the kernel allows and say what was not enforced in the
    /// [`ContainmentReport`] (the caller's explicit choice, e.g. on macOS or an old kernel).
    BestEffort,
}

/// The caller's containment settings for every provider process of an Agent (runs and
/// Inspect probes alike), set with [`AgentBuilder::containment`](crate::AgentBuilder::containment).
///
/// The default confines each provider to: read and execute the system (`/usr`, `/bin`,
/// `/lib*`, `/opt`, most of `/etc`), the CLI's install directory and the directories on the
/// provider's `PATH`; read `/proc`, `/sys`, the common device nodes, the run's private files
/// and git's user config; read and write the workspace, the run's `TMPDIR` and the CLI's
/// state directories (see [`state_dir`](Self::state_dir)). Nothing else of the host user's
/// files is visible.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Containment {
    pub(crate) mode: ContainmentMode,
    pub(crate) allow_read: Vec<PathBuf>,
    pub(crate) allow_write: Vec<PathBuf>,
    pub(crate) state_dirs: Option<Vec<PathBuf>>,
    pub(crate) allow_env: Vec<String>,
}

impl Containment {
    /// The default: enforced, nothing widened.
    pub fn new() -> Self {
        Self::default()
    }

    /// Confine as far as the kernel allows instead of refusing to run
    /// ([`ContainmentMode::BestEffort`]).
    pub fn best_effort(mut self) -> Self {
        self.mode = ContainmentMode::BestEffort;
        self
    }

    /// Let providers read (and execute) files under `path` too. It must exist when a run
    /// starts, or the run fails before launch.
    pub fn allow_read(mut self, path: impl Into<PathBuf>) -> Self {
        self.allow_read.push(path.into());
        self
    }

    /// Let providers read, write and execute files under `path` too. It must exist when a
    /// run starts, or the run fails before launch.
    pub fn allow_write(mut self, path: impl Into<PathBuf>) -> Self {
        self.allow_write.push(path.into());
        self
    }

    /// A directory (or file) where the CLI keeps its own state (sessions, settings,
    /// credentials), readable and writable by the provider. Naming one replaces the host's
    /// defaults for known CLIs, which are resolved against the provider's environment
    /// (caller-set, never driver-set): `claude` → `$CLAUDE_CONFIG_DIR`, else `~/.claude` and
    /// `~/.claude.json`; `codex` → `$CODEX_HOME`, else `~/.codex`, and
    /// `/tmp/codex-daemon-<uid>`; `reference-provider` → `~/.reference-provider`; `gemini` →
    /// `~/.gemini`; `qwen` → `~/.qwen`; `codebuddy` → `$CODEBUDDY_CONFIG_DIR`, else
    /// `~/.codebuddy`; `agent` / `cursor-agent` (Cursor Agent) → `$CURSOR_CONFIG_DIR`, else
    /// `~/.cursor`; `opencode` → its XDG config, data, state and cache directories. Missing state directories are created (0700) before launch. A CLI the
    /// host does not know gets no state directory unless the caller names one.
    pub fn state_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.state_dirs
            .get_or_insert_with(Vec::new)
            .push(path.into());
        self
    }

    /// Let drivers set the environment variable `name` although the host's denylist
    /// ([`DRIVER_ENV_DENYLIST`](crate::DRIVER_ENV_DENYLIST)) covers it. Exact names only.
    pub fn allow_driver_env(mut self, name: impl Into<String>) -> Self {
        self.allow_env.push(name.into());
        self
    }

    /// The mode.
    pub fn mode(&self) -> ContainmentMode {
        self.mode
    }
}

/// What a provider may do with the files under a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathAccess {
    /// Read files and list directories.
    Read,
    /// Read, list and execute.
    ReadExecute,
    /// Everything but making device nodes: create, write, remove, rename, execute (a device
    /// node for the disk, made in a writable directory by a root provider, would read every
    /// file on it).
    ReadWrite,
    /// Read, write and ioctl on a device node (`/dev/null`, `/dev/tty`, …); no creation.
    Device,
}

/// One filesystem rule: `access` to everything beneath `path`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PathRule {
    /// The path (canonical).
    pub path: PathBuf,
    /// What is allowed beneath it.
    pub access: PathAccess,
    /// Why the host grants it (`workspace`, `system`, `state`, `caller`,
    /// `state (config /state_dir)`, …).
    pub why: String,
}

/// What the confinement of a launch is, and what of it the kernel enforces.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ContainmentReport {
    /// The caller's mode.
    pub mode: ContainmentMode,
    /// The kernel's Landlock ABI version (none: no Landlock).
    pub landlock_abi: Option<u32>,
    /// Whether the filesystem rules are enforced by the kernel.
    pub filesystem_enforced: bool,
    /// Whether the provider is kept from signalling processes outside its run (Landlock
    /// ABI 6).
    pub signals_scoped: bool,
    /// Whether the provider runs in a PID namespace of its own (no survivors).
    pub pid_namespace: bool,
    /// The filesystem rules, in the order they were decided.
    pub rules: Vec<PathRule>,
    /// Secrets beneath a rule, hidden from the provider by mounts over them in its own mount
    /// namespace (with a PID namespace): `/etc`'s password hashes, host keys, private TLS
    /// keys and the like, when `/etc` is granted whole (a host that is not root). Opening a
    /// hidden file fails with "permission denied"; a hidden directory is empty. The names of
    /// secrets that lead nowhere (absent, or dangling links) are listed too: they are hidden
    /// should they appear before the launch. Otherwise `/etc` is granted entry by entry, without them, and this is
    /// empty.
    pub hidden: Vec<PathBuf>,
    /// What is not enforced and why (best-effort mode), or other remarks.
    pub notes: Vec<String>,
}
