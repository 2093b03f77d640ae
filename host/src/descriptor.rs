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
    /// The version of the `adaptor:driver` contract the driver was built against (`0.1.0`,
    /// `0.2.0`).
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
        if !self.wit_version.is_empty() {
            caps.push(format!("wit {}", self.wit_version));
        }
        caps.join(", ")
    }
}
