//! The ACP driver: any agent that speaks the Agent Client Protocol (JSON-RPC 2.0 over stdio)
//! — Gemini CLI (`gemini --acp`), Qwen Code (`qwen --acp`), OpenCode (`opencode acp`) and the
//! ACP adapters of other CLIs — driven as one sandboxed component.
//!
//! This file owns the descriptor, the config (its fields, the per-agent presets and what they
//! know about each agent) and the environment probes. `rpc.rs` owns JSON-RPC 2.0 framing and
//! request bookkeeping, `session.rs` the protocol state machine (initialize → session →
//! prompt, approvals, cancel, resident turns), `updates.rs` the mapping of `session/update`
//! notifications to events and transcript. It never does I/O: the host runs the process.
//!
//! The client this driver implements advertises no `fs` and no `terminal` capability: the
//! host does no file I/O for a driver, so the agent uses its own tools on the (confined) local
//! disk, and any `fs/*` or `terminal/*` request is answered with a JSON-RPC error.

mod rpc;
mod session;
mod updates;

use adaptor_sdk::json::{self, check_fields, str_field};
use adaptor_sdk::{
    ApprovalCaps, Check, CheckLevel, ConfigError, DecisionModes, Descriptor, Driver,
    EnvironmentReport, McpCaps, PolicyCaps, ProbeCommand, ProbeOutput, SandboxLevels, SessionCaps,
    StreamingCaps, StructuredOutputCaps, VersionRange,
};
use serde_json::{Value, json};

pub use session::AcpSession;

/// Name of the checkpoint encoding (the resume id is the ACP session id).
pub const CODEC: &str = "acp/session/v1";

/// The ACP protocol version this driver speaks (`initialize.protocolVersion`).
pub const PROTOCOL_VERSION: u64 = 1;

/// How a known agent restores a session in a new process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restore {
    /// `session/load` (declared by `agentCapabilities.loadSession`): the agent replays the
    /// history as `session/update` notifications before it answers.
    Load,
    /// `session/resume` (declared by `agentCapabilities.sessionCapabilities.resume`): no
    /// replay.
    Resume,
    /// Neither: a thread cannot continue in a new process (its resident process still can).
    None,
    /// Decided from what the agent declares at `initialize` (resume preferred over load).
    Auto,
}

impl Restore {
    fn parse(text: &str) -> Option<Restore> {
        match text {
            "load" => Some(Restore::Load),
            "resume" => Some(Restore::Resume),
            "none" => Some(Restore::None),
            "auto" => Some(Restore::Auto),
            _ => None,
        }
    }
}

/// What the driver knows about an ACP agent it has been verified with: the `agent` preset.
#[derive(Debug, Clone, Copy)]
pub struct AgentPreset {
    /// Preset name (the config's `agent`, and the `--driver` name of its preset file).
    pub name: &'static str,
    /// Human-readable name.
    pub display_name: &'static str,
    /// The program's usual name.
    pub program: &'static str,
    /// The arguments that start its ACP server (the config's `args` default).
    pub args: &'static [&'static str],
    /// Oldest version verified.
    pub min_version: &'static str,
    /// Versions the end-to-end tests ran against.
    pub verified: &'static [&'static str],
    /// How it restores a session in a new process (what it declares at `initialize`).
    pub restore: Restore,
    /// What keeps it from connecting the run's MCP servers, if anything: (the argument that
    /// lifts it, the notice's text). Reported as an `acp.mcp_caveat` notice when a run
    /// gives MCP servers without that argument.
    pub mcp_caveat: Option<(&'static str, &'static str)>,
}

/// The agents this driver was verified with (end-to-end, on the real CLIs, offline).
pub const AGENTS: &[AgentPreset] = &[
    AgentPreset {
        name: "gemini",
        display_name: "Gemini CLI",
        program: "gemini",
        args: &["--acp"],
        min_version: "0.61.0",
        verified: &["0.61.0"],
        restore: Restore::Load,
        mcp_caveat: Some((
            "--skip-trust",
            "Gemini CLI connects no MCP server in a folder it does not trust: trust the workspace, or pass `--skip-trust` in `extra_args`",
        )),
    },
    AgentPreset {
        name: "qwen",
        display_name: "Qwen Code",
        program: "qwen",
        args: &["--acp"],
        min_version: "0.24.4",
        verified: &["0.24.4"],
        restore: Restore::Resume,
        mcp_caveat: None,
    },
    AgentPreset {
        name: "opencode",
        display_name: "OpenCode",
        program: "opencode",
        args: &["acp"],
        min_version: "1.18.33",
        verified: &["1.18.33"],
        restore: Restore::Resume,
        mcp_caveat: None,
    },
];

/// The error for a run without `command` (checked at start: a loaded driver's empty default
/// config is valid, a run of it is not).
pub(crate) fn missing_command() -> String {
    let names: Vec<&str> = AGENTS.iter().map(|a| a.name).collect();
    format!(
        "/command: `command` (the ACP agent's program) is required; the presets {} set it \
         (`--driver {}`)",
        names.join(", "),
        names[0]
    )
}

/// The preset named `name`.
pub fn preset(name: &str) -> Option<&'static AgentPreset> {
    AGENTS.iter().find(|a| a.name == name)
}

/// Config fields accepted by the driver, with their JSON types.
const CONFIG_FIELDS: &[(&str, &str)] = &[
    ("command", "non-empty-string"),
    ("agent", "string"),
    ("args", "array-of-strings"),
    ("model", "non-empty-string"),
    ("mode", "non-empty-string"),
    ("config_options", "object-of-strings"),
    ("restore", "string"),
    ("extra_args", "array-of-strings"),
];

/// The ACP driver.
pub struct AcpDriver;

impl Driver for AcpDriver {
    type Session = AcpSession;

    fn describe() -> Descriptor {
        let mut verified: Vec<String> = Vec::new();
        for agent in AGENTS {
            verified.extend(agent.verified.iter().map(|v| (*v).to_owned()));
        }
        Descriptor {
            name: "acp".into(),
            display_name: "Agent Client Protocol agent".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            // Never launched as such: the config's `command` is required (a preset sets it).
            default_program: "acp-agent".into(),
            // Each agent has its own versions; the environment report checks the preset's.
            cli_versions: VersionRange {
                min: None,
                max_exclusive: None,
                verified,
            },
            config_schema: config_schema().to_string(),
            // Models are the agent's: `session/new` reports them, the config's `model` picks.
            models: Vec::new(),
            sessions: SessionCaps {
                resume: true,
                fork: false,
                codec: CODEC.into(),
            },
            persistent_process: true,
            structured_output: StructuredOutputCaps {
                // ACP carries no schema: the host appends instructions and validates.
                native: false,
                prompt_validate: true,
                with_streaming: true,
                native_with_approvals: false,
            },
            policy: PolicyCaps {
                // ACP has no sandbox setting: the host's confinement enforces every level
                // for the agent and all its tools (see the README).
                sandbox: SandboxLevels::READ_ONLY
                    | SandboxLevels::WORKSPACE_WRITE
                    | SandboxLevels::UNRESTRICTED,
                web_search: false,
                browser: false,
            },
            approvals: ApprovalCaps {
                // `session/request_permission` is the only request kind ACP has.
                permission: DecisionModes::ASK
                    | DecisionModes::AUTO_APPROVE
                    | DecisionModes::AUTO_DENY,
                plan_review: DecisionModes::empty(),
                question: DecisionModes::empty(),
            },
            streaming: StreamingCaps {
                incremental: true,
                token_level: true,
                reasoning: true,
                tool_call_args: false,
            },
            // `session/new` carries MCP servers; stdio is mandatory for every ACP agent, HTTP
            // and SSE only where the agent declares them (checked at `initialize`).
            mcp: McpCaps {
                stdio: true,
                http: true,
                sse: true,
            },
            skills: false,
            // ACP has no system prompt.
            instructions: false,
        }
    }

    fn validate_config(config: &Value) -> Result<(), ConfigError> {
        check_fields(config, CONFIG_FIELDS)?;
        let bad = |path: &str, message: String| ConfigError {
            path: path.into(),
            message,
        };
        let names: Vec<&str> = AGENTS.iter().map(|a| a.name).collect();
        json::check_one_of(config, "agent", &names)?;
        json::check_one_of(config, "restore", &["auto", "load", "resume", "none"])?;
        for key in ["args", "extra_args"] {
            for (i, arg) in strings(config, key).iter().enumerate() {
                if arg.chars().any(char::is_control) {
                    return Err(bad(
                        &format!("/{key}/{i}"),
                        "arguments may not contain control characters".into(),
                    ));
                }
            }
        }
        if let Some(options) = config.get("config_options").and_then(Value::as_object) {
            for key in ["model", "mode"] {
                if options.contains_key(key) {
                    return Err(bad(
                        &format!("/config_options/{key}"),
                        format!("set `{key}` with the config's own `{key}` field"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn config_fingerprint(config: &Value) -> Result<String, ConfigError> {
        Self::validate_config(config)?;
        // What the session was made with: the agent, its arguments, model, mode and options.
        // The command path does not change the session (the preset or `args` say which
        // agent it is).
        let relevant = json!({
            "agent": str_field(config, "agent"),
            "args": agent_args(config),
            "model": str_field(config, "model"),
            "mode": str_field(config, "mode"),
            "config_options": config.get("config_options"),
        });
        Ok(json::canonical_fingerprint(
            "acp/configured-driver/v1;acp/session/v1",
            &relevant,
        ))
    }

    fn environment_probes(config: &Value) -> Result<Vec<ProbeCommand>, ConfigError> {
        Self::validate_config(config)?;
        // `<command> --version` (all three agents print their version alone). Models are
        // the agent's answer to `session/new`, which a probe cannot open (see the README).
        Ok(vec![ProbeCommand {
            id: "version".into(),
            program: str_field(config, "command").unwrap_or_default().to_owned(),
            args: vec!["--version".into()],
            timeout_ms: 20_000,
        }])
    }

    fn environment_report(config: &Value, outputs: &[ProbeOutput]) -> EnvironmentReport {
        let mut descriptor = Self::describe();
        let program = str_field(config, "command")
            .unwrap_or("(no command)")
            .to_owned();
        let preset = agent_preset(config);
        match preset {
            Some(agent) => {
                descriptor.display_name = agent.display_name.into();
                descriptor.cli_versions = VersionRange {
                    min: Some(agent.min_version.into()),
                    max_exclusive: None,
                    verified: agent.verified.iter().map(|v| (*v).to_owned()).collect(),
                };
            }
            None => descriptor.cli_versions.verified.clear(),
        }
        let mut report = json::default_environment_report(&descriptor, &program, outputs);
        if preset.is_none() {
            report.checks.push(Check {
                code: "acp.agent".into(),
                level: CheckLevel::Warn,
                message: format!(
                    "`{program}` is not one of the verified agents ({}); its ACP support is \
                     read at initialize",
                    AGENTS.iter().map(|a| a.name).collect::<Vec<_>>().join(", ")
                ),
                hint: Some("set `agent` in the driver config for a known agent".into()),
            });
        }
        report
    }
}

fn config_schema() -> Value {
    let names: Vec<&str> = AGENTS.iter().map(|a| a.name).collect();
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "ACP driver config",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "command": {"type": "string", "description": "The ACP agent's program (the granted command); required for a run (a preset sets it)."},
            "agent": {"enum": names, "description": "A verified agent: sets the default `args` and what the driver knows of it (versions, how it restores sessions)."},
            "args": {"type": "array", "items": {"type": "string"}, "description": "Arguments that start the agent's ACP server (default: the preset's, e.g. [\"--acp\"])."},
            "model": {"type": "string", "description": "Model, set after session/new through the agent's `model` config option or session/set_model; a per-run model wins."},
            "mode": {"type": "string", "description": "Session mode id (session/set_mode), one the agent offers."},
            "config_options": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Session config options (session/set_config_option: id → value), ones the agent offers."},
            "restore": {"enum": ["auto", "load", "resume", "none"], "description": "How a thread continues in a new process: session/load, session/resume, not at all, or (auto, default) what the agent declares."},
            "extra_args": {"type": "array", "items": {"type": "string"}, "description": "Arguments appended after `args`."}
        }
    })
}

/// The config's string array `key` (empty when absent).
pub(crate) fn strings(config: &Value, key: &str) -> Vec<String> {
    config
        .get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The preset the config names.
pub(crate) fn agent_preset(config: &Value) -> Option<&'static AgentPreset> {
    str_field(config, "agent").and_then(preset)
}

/// The arguments that start the agent's ACP server: `args`, else the preset's.
pub(crate) fn agent_args(config: &Value) -> Vec<String> {
    if config.get("args").is_some() {
        return strings(config, "args");
    }
    agent_preset(config)
        .map(|a| a.args.iter().map(|s| (*s).to_owned()).collect())
        .unwrap_or_default()
}

/// How sessions are restored: the config's `restore`, else the preset's, else `auto`.
pub(crate) fn restore(config: &Value) -> Restore {
    str_field(config, "restore")
        .and_then(Restore::parse)
        .or_else(|| agent_preset(config).map(|a| a.restore))
        .unwrap_or(Restore::Auto)
}

#[cfg(all(target_family = "wasm", feature = "component"))]
adaptor_sdk::export_driver!(AcpDriver);

#[cfg(test)]
mod tests;
