//! The Cursor Agent driver: protocol knowledge of `agent -p --output-format stream-json`, and
//! nothing else.
//!
//! This file owns the descriptor, the config and the command line (`--workspace`, partial
//! output when streaming, resume, model, mode, `--force` for auto-approved permissions, the
//! prompt as plain text on stdin). `stream.rs` parses the CLI's stdout strictly — only the
//! official frames, `session_id` on every one, nothing after the result — into events,
//! transcript, usage and the outcome. It never does I/O: the host runs the process.
//!
//! What Cursor Agent's print mode cannot do is declared as such, so the host refuses it
//! before launch: no approvals other than auto-approved permissions, no native schema, no
//! appended system prompt, no MCP declarations (it reads MCP servers from its own config
//! files only), no resident process.

mod stream;

use adaptor_sdk::json::{self, check_fields, str_field};
use adaptor_sdk::{
    ApprovalCaps, ConfigError, DecisionMode, DecisionModes, Descriptor, Driver, Launch, McpCaps,
    PolicyCaps, RunRequest, Sandbox, SandboxLevels, SessionCaps, StartError, StreamingCaps,
    StructuredOutputCaps, Toggle, VersionRange,
};
use serde_json::{Value, json};

pub use stream::CursorSession;

/// Name of the checkpoint encoding (the resume id is Cursor's session id, its chat id).
pub const CODEC: &str = "cursor/session/v1";

/// What the driver is verified on: **recorded output only** (Cursor Agent cannot be
/// installed on the machines this project is built on). The recordings carry no version
/// string; they are labelled by the date of the CLI build they came from (the public
/// recordings of the Go agent-adaptor project, `live-20260723`, and Cursor's documented
/// stream-json format of that time).
pub const VERIFIED_VERSIONS: &[&str] = &["2026.07.23 (recorded output only)"];

/// Config fields accepted by the driver, with their JSON types.
const CONFIG_FIELDS: &[(&str, &str)] = &[
    ("command", "non-empty-string"),
    ("model", "string"),
    ("mode", "string"),
    ("extra_args", "array-of-strings"),
];

/// Flags the driver owns: extra args may not set them (they would contradict the request).
const OWNED_FLAGS: &[&str] = &[
    "-p",
    "--print",
    "--output-format",
    "--stream-partial-output",
    "--workspace",
    "--resume",
    "--continue",
    "-m",
    "--model",
    "--mode",
    "-f",
    "--force",
    "--yolo",
    "--api-key",
];

/// The Cursor Agent driver.
pub struct CursorDriver;

impl Driver for CursorDriver {
    type Session = CursorSession;

    fn describe() -> Descriptor {
        Descriptor {
            name: "cursor".into(),
            display_name: "Cursor Agent".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            default_program: "agent".into(),
            // Cursor Agent's versions are build dates (`2026.07.23-…`).
            cli_versions: VersionRange {
                min: Some("2025.8.0".into()),
                max_exclusive: None,
                verified: VERIFIED_VERSIONS.iter().map(|v| (*v).into()).collect(),
            },
            config_schema: config_schema().to_string(),
            models: Vec::new(),
            sessions: SessionCaps {
                resume: true,
                fork: false,
                codec: CODEC.into(),
            },
            persistent_process: false,
            structured_output: StructuredOutputCaps {
                native: false,
                prompt_validate: true,
                with_streaming: true,
                native_with_approvals: false,
            },
            policy: PolicyCaps {
                sandbox: SandboxLevels::empty(),
                web_search: false,
                browser: false,
            },
            // Print mode cannot ask anyone: `--force` allows every command, otherwise the
            // CLI's own settings decide.
            approvals: ApprovalCaps {
                permission: DecisionModes::AUTO_APPROVE,
                plan_review: DecisionModes::empty(),
                question: DecisionModes::empty(),
            },
            streaming: StreamingCaps {
                incremental: true,
                token_level: true,
                reasoning: false,
                tool_call_args: false,
            },
            mcp: McpCaps {
                stdio: false,
                http: false,
                sse: false,
            },
            skills: false,
            instructions: false,
        }
    }

    fn validate_config(config: &Value) -> Result<(), ConfigError> {
        check_fields(config, CONFIG_FIELDS)?;
        json::check_one_of(config, "mode", &["agent", "ask"])?;
        json::check_owned_flags(config, OWNED_FLAGS)
    }

    fn config_fingerprint(config: &Value) -> Result<String, ConfigError> {
        Self::validate_config(config)?;
        let relevant = json!({
            "model": str_field(config, "model"),
            "mode": str_field(config, "mode"),
            "extra_args": config.get("extra_args"),
        });
        Ok(json::canonical_fingerprint(
            "cursor/configured-driver/v1;cursor/session/v1",
            &relevant,
        ))
    }
}

fn config_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Cursor Agent driver config",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "command": {"type": "string", "description": "The Cursor Agent program (default: agent on PATH)."},
            "model": {"type": "string", "description": "Model (`--model`); a per-run model wins."},
            "mode": {"enum": ["agent", "ask"], "description": "`ask`: Q&A without edits (`--mode ask`); `agent` (default): the CLI's normal mode, no flag."},
            "extra_args": {"type": "array", "items": {"type": "string"}, "description": "Arguments appended to the command line; flags the driver sets from the request are refused."}
        }
    })
}

/// Whether `id` can be a Cursor session id on a command line: 1–128 of `A-Za-z0-9._-`, not
/// starting with `-` (Cursor's ids are UUIDs; this keeps a stored id from being an option).
fn is_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The launch for `request` (already checked against the descriptor by the host).
pub(crate) fn launch(request: &RunRequest, config: &Value) -> Result<Launch, StartError> {
    CursorDriver::validate_config(config)
        .map_err(|e| StartError::InvalidRequest(format!("{}: {}", e.path, e.message)))?;
    let policy = &request.policy;
    if policy.sandbox != Sandbox::Inherit
        || policy.web_search != Toggle::Inherit
        || policy.browser != Toggle::Inherit
    {
        return Err(StartError::Unsupported(
            "Cursor Agent's print mode has no sandbox, web-search or browser switch".into(),
        ));
    }
    let asks = matches!(
        policy.permission,
        DecisionMode::Ask | DecisionMode::AutoDeny
    ) || policy.plan_review != DecisionMode::Inherit
        || policy.question != DecisionMode::Inherit;
    if asks {
        return Err(StartError::Unsupported(
            "Cursor Agent's print mode cannot ask for approvals; only auto-approved permissions (`--force`) are possible".into(),
        ));
    }
    if request
        .instructions
        .as_deref()
        .is_some_and(|t| !t.is_empty())
    {
        return Err(StartError::Unsupported(
            "Cursor Agent has no option for an appended system prompt".into(),
        ));
    }
    if !request.mcp_servers.is_empty() {
        return Err(StartError::Unsupported(
            "Cursor Agent reads MCP servers only from its own config files".into(),
        ));
    }
    let mut args: Vec<String> = vec![
        "-p".into(),
        "--output-format".into(),
        "stream-json".into(),
        "--workspace".into(),
        request.workspace.clone(),
    ];
    if request.streaming {
        args.push("--stream-partial-output".into());
    }
    if let Some(resume) = &request.resume {
        let id = &resume.state.resume_id;
        if !is_session_id(id) {
            return Err(StartError::ResumeRejected(format!(
                "the resume id {:?} is not a Cursor Agent session id",
                id.chars().take(80).collect::<String>()
            )));
        }
        args.push(format!("--resume={id}"));
    }
    if let Some(model) = json::requested_model(request, config) {
        args.extend(["--model".to_owned(), model]);
    }
    if str_field(config, "mode") == Some("ask") {
        args.extend(["--mode".to_owned(), "ask".to_owned()]);
    }
    if policy.permission == DecisionMode::AutoApprove {
        args.push("--force".into());
    }
    if let Some(extra) = config.get("extra_args").and_then(Value::as_array) {
        args.extend(extra.iter().filter_map(Value::as_str).map(str::to_owned));
    }
    Ok(Launch {
        program: str_field(config, "command").unwrap_or("agent").to_owned(),
        args,
        env: Vec::new(),
        cwd: None,
        stdin: request.prompt.as_bytes().to_vec(),
        keep_stdin_open: false,
        files: Vec::new(),
    })
}

#[cfg(all(target_family = "wasm", feature = "component"))]
adaptor_sdk::export_driver!(CursorDriver);

#[cfg(test)]
mod tests;
