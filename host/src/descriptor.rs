//! The public, serialisable form of a driver's capability table ([`Descriptor`]).
//!
//! Owns the host-side mirror of the WIT `descriptor` record and its validation at load time.
//! Must not: call the guest (see `guest.rs`) or decide policy (later: `policy.rs`).

use serde::Serialize;

/// A model the driver knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelInfo {
    /// Identifier passed to the CLI.
    pub id: String,
    /// Label for humans.
    pub label: String,
}

/// CLI versions a driver was verified with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionRange {
    /// Lowest supported version (inclusive).
    pub min: Option<String>,
    /// First unsupported version (exclusive).
    pub max_exclusive: Option<String>,
    /// Versions the driver's end-to-end tests ran against.
    pub verified: Vec<String>,
}

/// Resume / fork support.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionCaps {
    /// Can resume a checkpoint.
    pub resume: bool,
    /// Can fork from a checkpoint.
    pub fork: bool,
    /// Checkpoint encoding name.
    pub codec: String,
}

/// Decision modes supported for one approval kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct DecisionModes {
    /// Ask the host.
    pub ask: bool,
    /// Proceed without asking.
    pub auto_approve: bool,
    /// Refuse without asking.
    pub auto_deny: bool,
    /// Re-ask after rejection/timeout.
    pub retry: bool,
}

/// Approval capabilities per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ApprovalCaps {
    /// Tool permission prompts.
    pub permission: DecisionModes,
    /// Plan review.
    pub plan_review: DecisionModes,
    /// Questions.
    pub question: DecisionModes,
}

/// Sandbox levels a driver can select.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SandboxLevels {
    /// Read-only.
    pub read_only: bool,
    /// Workspace-write.
    pub workspace_write: bool,
    /// Unrestricted.
    pub unrestricted: bool,
}

/// Policy dimensions a driver maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PolicyCaps {
    /// Sandbox levels.
    pub sandbox: SandboxLevels,
    /// Web search allow/deny.
    pub web_search: bool,
    /// Browser allow/deny.
    pub browser: bool,
}

/// Structured-output mechanisms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StructuredOutputCaps {
    /// Native JSON Schema support.
    pub native: bool,
    /// Prompt + local validation.
    pub prompt_validate: bool,
    /// Works when streaming.
    pub with_streaming: bool,
    /// Native works together with `ask` approvals.
    pub native_with_approvals: bool,
}

/// Streaming fidelity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StreamingCaps {
    /// Events arrive while the CLI works.
    pub incremental: bool,
    /// Token-level text deltas.
    pub token_level: bool,
    /// Reasoning is reported.
    pub reasoning: bool,
    /// Tool arguments stream.
    pub tool_call_args: bool,
}

/// MCP transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct McpCaps {
    /// stdio servers.
    pub stdio: bool,
    /// Streamable HTTP servers.
    pub http: bool,
    /// SSE servers.
    pub sse: bool,
}

/// What a file of a CLI's profile holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfilePart {
    /// The login (OAuth tokens, API keys).
    Auth,
    /// The user's settings.
    Settings,
    /// The user's MCP server configuration.
    Mcp,
}

impl std::fmt::Display for ProfilePart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProfilePart::Auth => "auth",
            ProfilePart::Settings => "settings",
            ProfilePart::Mcp => "mcp",
        })
    }
}

/// How a file of the user's profile is carried into a dedicated one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Carry {
    /// A symbolic link to the user's file (both profiles share one file; the provider may
    /// write the user's file).
    Link,
    /// A copy, made once when the dedicated profile lacks the file.
    Copy,
}

/// One file of the user's profile a dedicated profile can carry (checked at load: relative
/// paths of plain components).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProfileFile {
    /// What it holds.
    pub part: ProfilePart,
    /// Its path relative to the user's profile directory.
    pub source: String,
    /// Its path relative to the home directory when the caller's environment does not set
    /// the config-dir variable (`None`: `source` under the default profile directory).
    pub default_source: Option<String>,
    /// Its path in the dedicated profile directory.
    pub target: String,
    /// How it is carried.
    pub carry: Carry,
}

/// Where a CLI keeps its per-user state, as its driver declares it (checked at load: the
/// variables are among the host's [`PROFILE_VARIABLES`], the paths relative and plain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProfileSpec {
    /// The variable that moves the CLI's whole per-user state (`CLAUDE_CONFIG_DIR`,
    /// `CODEX_HOME`); the host sets it for a dedicated profile.
    pub config_dir_variable: String,
    /// The user's profile directory relative to the home directory, when the caller's
    /// environment does not set the variable (`.claude`, `.codex`).
    pub native_dir: String,
    /// The files a dedicated profile can carry over.
    pub files: Vec<ProfileFile>,
    /// A variable that points the CLI's credential store elsewhere (Claude Code's
    /// `CLAUDE_SECURESTORAGE_CONFIG_DIR`): with `link_auth` the host sets it to the user's
    /// profile directory instead of carrying `auth` files.
    pub auth_store_variable: Option<String>,
}

/// The variables a driver's [`ProfileSpec`] may name: each moves a known CLI's per-user
/// state or credential store. The host sets them (to a directory it created and owns);
/// a launch may not.
pub const PROFILE_VARIABLES: &[&str] = &[
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_SECURESTORAGE_CONFIG_DIR",
    "CODEX_HOME",
    "CODEBUDDY_CONFIG_DIR",
    "CURSOR_CONFIG_DIR",
    "GEMINI_CONFIG_DIR",
    "REFERENCE_PROVIDER_STATE_DIR",
];

/// The host's own table of where each config-dir variable's CLI keeps the user's profile
/// when the variable is unset (relative to HOME), and the files of that default layout that
/// sit outside it — the same state a run with the user's own profile may write (see
/// `grant::confine::known_state`). A driver's spec must agree with it: a driver never
/// chooses which of the user's files the host links, copies or grants (a spec naming
/// `.ssh` as a CLI's profile would otherwise hand the user's keys to the CLI).
const NATIVE_LAYOUTS: &[(&str, &str, &[&str])] = &[
    ("CLAUDE_CONFIG_DIR", ".claude", &[".claude.json"]),
    ("CODEX_HOME", ".codex", &[]),
    ("CODEBUDDY_CONFIG_DIR", ".codebuddy", &[]),
    ("CURSOR_CONFIG_DIR", ".cursor", &[]),
    ("GEMINI_CONFIG_DIR", ".gemini", &[]),
    (
        "REFERENCE_PROVIDER_STATE_DIR",
        ".local/state/reference-provider",
        &[],
    ),
];

/// The variables that may point a CLI's credential store at the user's profile (with
/// `link_auth`), by the config-dir variable they belong with.
const AUTH_STORE_VARIABLES: &[(&str, &str)] =
    &[("CLAUDE_SECURESTORAGE_CONFIG_DIR", "CLAUDE_CONFIG_DIR")];

impl ProfileSpec {
    /// Check a driver's spec against the host's table: a known config-dir variable with its
    /// known default directory and default-layout files, a credential-store variable that
    /// belongs with it, relative plain paths, no target twice.
    pub(crate) fn check(&self) -> Result<(), String> {
        let var = self.config_dir_variable.as_str();
        let Some((_, native_dir, outside)) = NATIVE_LAYOUTS.iter().find(|(v, ..)| *v == var) else {
            return Err(format!(
                "profile.config-dir-variable `{var}` is not one of the host's config-dir variables ({})",
                NATIVE_LAYOUTS
                    .iter()
                    .map(|(v, ..)| *v)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        if self.native_dir != *native_dir {
            return Err(format!(
                "profile.native-dir `{}` is not where the host knows {var}'s CLI keeps the user's profile (`{native_dir}`)",
                self.native_dir
            ));
        }
        if let Some(v) = &self.auth_store_variable
            && !AUTH_STORE_VARIABLES.contains(&(v.as_str(), var))
        {
            return Err(format!(
                "profile.auth-store-variable `{v}` is not a credential-store variable of {var}'s CLI"
            ));
        }
        if let Some(f) = self.files.iter().find(|f| {
            f.default_source
                .as_deref()
                .is_some_and(|d| !outside.contains(&d))
        }) {
            return Err(format!(
                "profile.files.default-source `{}` is not a file the host knows {var}'s CLI keeps beside its profile",
                f.default_source.as_deref().unwrap_or_default()
            ));
        }
        let path = |p: &str, field: &str| match crate::relpath::normalise(p) {
            Ok(Some(n)) if n == p => Ok(()),
            Ok(_) => Err(format!(
                "profile.{field} `{p}` is not a plain relative path (`a/b`)"
            )),
            Err(reason) => Err(format!("profile.{field} `{p}`: {reason}")),
        };
        path(&self.native_dir, "native-dir")?;
        let mut targets = std::collections::BTreeMap::new();
        for f in &self.files {
            path(&f.source, "files.source")?;
            if let Some(d) = &f.default_source {
                path(d, "files.default-source")?;
            }
            path(&f.target, "files.target")?;
            // One file may serve two parts (Codex's `config.toml`: settings and MCP), the
            // same way; two different files may not land in one place.
            let how = (&f.source, &f.default_source, f.carry);
            if targets
                .insert(f.target.as_str(), how)
                .is_some_and(|was| was != how)
            {
                return Err(format!(
                    "profile.files.target `{}` is given twice, for different files",
                    f.target
                ));
            }
        }
        Ok(())
    }
}

/// A driver's capability table, as declared by the driver.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Descriptor {
    /// Machine name (`claude`).
    pub name: String,
    /// Human name.
    pub display_name: String,
    /// Driver version.
    pub version: String,
    /// The CLI's usual program name.
    pub default_program: String,
    /// Supported CLI versions.
    pub cli_versions: VersionRange,
    /// JSON Schema of the config object.
    pub config_schema: serde_json::Value,
    /// Known models.
    pub models: Vec<ModelInfo>,
    /// Sessions.
    pub sessions: SessionCaps,
    /// Resident processes.
    pub persistent_process: bool,
    /// Structured output.
    pub structured_output: StructuredOutputCaps,
    /// Policy.
    pub policy: PolicyCaps,
    /// Approvals.
    pub approvals: ApprovalCaps,
    /// Streaming.
    pub streaming: StreamingCaps,
    /// MCP.
    pub mcp: McpCaps,
    /// Skill directories.
    pub skills: bool,
    /// Appended instructions.
    pub instructions: bool,
    /// Input can be added to a running turn ([`RunOptions::steering`](crate::RunOptions::steering),
    /// [`Stream::steer`](crate::Stream::steer)).
    pub steering: bool,
    /// The environment variables the driver's launches may set (exact names, or prefixes
    /// ending in `*`); a launch setting any other is refused. `None` for a driver built
    /// against `adaptor:driver@0.1.0`, which cannot declare them (the host's denylist alone
    /// applies).
    pub launch_env: Option<Vec<String>>,
    /// Where the CLI keeps its per-user state, for dedicated profiles
    /// ([`Profile`](crate::Profile)); `None` when the driver declares no movable profile (or
    /// was built against a contract before `adaptor:driver@0.3.0`).
    pub profile: Option<ProfileSpec>,
    /// The version of the `adaptor:driver` contract the driver was built against (`0.1.0`,
    /// `0.2.0`, `0.3.0`).
    pub wit_version: String,
}

impl Descriptor {
    /// A one-line capability summary, e.g. `resume, streaming(token), reasoning, wit 0.2.0`.
    pub fn capability_summary(&self) -> String {
        let mut caps = Vec::new();
        if self.sessions.resume {
            caps.push("resume".to_owned());
        }
        if self.sessions.fork {
            caps.push("fork".to_owned());
        }
        if self.persistent_process {
            caps.push("persistent".to_owned());
        }
        if self.streaming.incremental {
            caps.push(if self.streaming.token_level {
                "streaming(token)".to_owned()
            } else {
                "streaming".to_owned()
            });
        }
        if self.streaming.reasoning {
            caps.push("reasoning".to_owned());
        }
        match (
            self.structured_output.native,
            self.structured_output.prompt_validate,
        ) {
            (true, _) => caps.push("schema(native)".to_owned()),
            (false, true) => caps.push("schema(prompt)".to_owned()),
            _ => {}
        }
        let a = &self.approvals;
        if a.permission.ask || a.plan_review.ask || a.question.ask {
            caps.push("approvals".to_owned());
        }
        if self.mcp.stdio || self.mcp.http || self.mcp.sse {
            caps.push("mcp".to_owned());
        }
        if self.steering {
            caps.push("steering".to_owned());
        }
        // What a dedicated profile sets and shares is shown to whoever installs the driver.
        if let Some(p) = &self.profile {
            let mut parts = vec![p.config_dir_variable.clone()];
            parts.extend(
                p.auth_store_variable
                    .as_ref()
                    .map(|v| format!("login via {v}")),
            );
            parts.extend(
                p.files
                    .iter()
                    .filter(|f| f.carry == Carry::Link)
                    .map(|f| format!("links {}", f.source)),
            );
            caps.push(format!("profile({})", parts.join("; ")));
        }
        if !self.wit_version.is_empty() {
            caps.push(format!("wit {}", self.wit_version));
        }
        caps.join(", ")
    }
}
