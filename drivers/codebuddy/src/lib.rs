//! The CodeBuddy Code driver: protocol knowledge of `codebuddy --print --output-format
//! stream-json` and of its SDK control transport, and nothing else.
//!
//! CodeBuddy Code speaks Claude Code's stream-json protocol (the same `system` / `assistant` /
//! `user` / `stream_event` / `control_request` / `result` frames), so the frame mapping,
//! approvals, usage, checkpoints and resident turns are the Claude driver's
//! [`claude_driver::StreamJsonSession`], used here as a library in CodeBuddy's
//! [`Dialect`]. This file owns what differs: the descriptor, the config, the command line
//! (the prompt as the trailing argument in headless runs; `--permission-mode`, `--effort`
//! levels of its own; native structured output through `--output-format json
//! --json-schema`), the permission answer shape (`{"allowed": …}`), plan files under
//! `.codebuddy/plans/`, and the `initialize` handshake of the control transport. It never
//! does I/O: the host runs the process.
//!
//! Transports: **headless** (`--print --output-format stream-json --verbose … -- <prompt>`,
//! stdin unused) when nothing is asked; **control** (`--input-format=stream-json
//! --output-format=stream-json --verbose`, the SDK's own command line) when an approval mode
//! asks or auto-denies, when plan review is auto-approved without permissions being, or when
//! the config asks for `transport: stream-json` (a resident process for threads): stdin
//! carries an `initialize` control request, then the prompt as a `user` frame once the CLI
//! has answered, then `control_response` answers to its `can_use_tool` requests.

use adaptor_sdk::json::{self, check_fields, str_field, u64_field};
use adaptor_sdk::mcp;
use adaptor_sdk::{
    ApprovalCaps, ConfigError, DecisionMode, DecisionModes, Descriptor, Driver, Launch, McpCaps,
    McpTransport, PolicyCaps, RunRequest, Sandbox, SandboxLevels, SchemaMechanism, SessionCaps,
    SessionMode, StartError, StreamingCaps, StructuredOutputCaps, Toggle, VersionRange,
};
use claude_driver::dialect::{INITIALIZE_REQUEST_ID, ndjson};
use claude_driver::{Dialect, StreamJsonSession, Transport};
use serde_json::{Value, json};

/// Name of the checkpoint encoding (the resume id is CodeBuddy's session id).
pub const CODEC: &str = "codebuddy/session/v1";

/// The CodeBuddy Code versions this driver was verified with (end to end, offline, against
/// the project's Chat Completions mock).
pub const VERIFIED_VERSIONS: &[&str] = &["2.117.0"];

/// The stream-json frames this driver knows, as `(type, subtype)` (`None`: any subtype, or
/// none). `file-history-snapshot` (the CLI's file checkpoints) and `system/status` are kept
/// as vendor events; a frame outside this set is never dropped either (a vendor event and a
/// system transcript item), and the drift gate (`codebuddy_e2e::every_frame_of_the_pinned_cli_is_known`)
/// fails when the pinned CLI sends one.
pub const KNOWN_FRAMES: &[(&str, Option<&str>)] = &[
    ("system", Some("init")),
    ("system", Some("status")),
    ("file-history-snapshot", None),
    ("assistant", None),
    ("user", None),
    ("stream_event", None),
    ("control_request", None),
    ("control_response", None),
    ("result", Some("success")),
    ("result", Some("error_during_execution")),
    ("result", Some("error_max_turns")),
];

/// Config fields accepted by the driver, with their JSON types.
const CONFIG_FIELDS: &[(&str, &str)] = &[
    ("command", "non-empty-string"),
    ("model", "string"),
    ("effort", "string"),
    ("permission_mode", "string"),
    ("max_turns", "integer"),
    ("extra_args", "array-of-strings"),
    ("transport", "string"),
];

/// Effort levels the CLI accepts (`--effort`).
const EFFORTS: &[&str] = &["minimal", "low", "medium", "high", "xhigh", "max"];

/// Permission modes the CLI accepts (`--permission-mode`).
const PERMISSION_MODES: &[&str] = &[
    "default",
    "acceptEdits",
    "plan",
    "auto",
    "dontAsk",
    "bypassPermissions",
];

/// Flags the driver owns: extra args may not set them (they would contradict the request).
const OWNED_FLAGS: &[&str] = &[
    "-p",
    "--print",
    "--output-format",
    "--input-format",
    "--verbose",
    "--include-partial-messages",
    "--replay-user-messages",
    "--permission-mode",
    "-y",
    "--dangerously-skip-permissions",
    "-r",
    "--resume",
    "-c",
    "--continue",
    "--fork-session",
    "--session-id",
    "--json-schema",
    "--model",
    "--effort",
    "--max-turns",
    "--system-prompt",
    "--system-prompt-file",
    "--append-system-prompt",
    "--mcp-config",
    "--strict-mcp-config",
    "--acp",
    "--serve",
    "--bg",
    "--background",
    "--sandbox",
    "-w",
    "--worktree",
];

/// The CodeBuddy Code dialect of the stream-json protocol.
pub struct CodeBuddy;

impl Dialect for CodeBuddy {
    const PRODUCT: &'static str = "CodeBuddy Code";
    const PLAN_DIR: Option<&'static str> = Some("/.codebuddy/plans/");
    const RESULT_USAGE_IS_SESSION_TOTAL: bool = true;

    /// CodeBuddy Code's driver declares no steering: `steerable` is never set.
    fn launch(
        request: &RunRequest,
        config: &Value,
        _steerable: bool,
    ) -> Result<(Launch, Transport), StartError> {
        launch(request, config)
    }

    fn unwrap_tool(name: &str, input: &Value) -> Option<(String, Value)> {
        if name != "DeferExecuteTool" {
            return None;
        }
        let inner = str_field(input, "toolName").filter(|n| !n.is_empty())?;
        Some((
            inner.to_owned(),
            input.get("params").cloned().unwrap_or_else(|| json!({})),
        ))
    }

    fn allow(input: Value, tool_use_id: Option<&str>) -> Value {
        let mut inner = json!({ "allowed": true, "updatedInput": input });
        if let Some(t) = tool_use_id {
            inner["tool_use_id"] = json!(t);
        }
        inner
    }

    fn deny(message: &str, interrupt: bool, tool_use_id: Option<&str>) -> Value {
        let mut inner = json!({ "allowed": false, "reason": message, "interrupt": interrupt });
        if let Some(t) = tool_use_id {
            inner["tool_use_id"] = json!(t);
        }
        inner
    }
}

/// One CodeBuddy Code run.
pub type CodeBuddySession = StreamJsonSession<CodeBuddy>;

/// The CodeBuddy Code driver.
pub struct CodeBuddyDriver;

impl Driver for CodeBuddyDriver {
    type Session = CodeBuddySession;

    fn describe() -> Descriptor {
        let all = DecisionModes::ASK | DecisionModes::AUTO_APPROVE | DecisionModes::AUTO_DENY;
        Descriptor {
            name: "codebuddy".into(),
            display_name: "CodeBuddy Code".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            default_program: "codebuddy".into(),
            cli_versions: VersionRange {
                min: Some("2.100.0".into()),
                max_exclusive: Some("3.0.0".into()),
                verified: VERIFIED_VERSIONS.iter().map(|v| (*v).into()).collect(),
            },
            config_schema: config_schema().to_string(),
            // The CLI's model list depends on the account's product; none is promised here.
            models: Vec::new(),
            sessions: SessionCaps {
                resume: true,
                fork: true,
                codec: CODEC.into(),
            },
            persistent_process: true,
            structured_output: StructuredOutputCaps {
                native: true,
                prompt_validate: true,
                // `--json-schema` answers only in `--output-format json` (one document at
                // the end): not with streaming, not on the control transport.
                with_streaming: false,
                native_with_approvals: false,
            },
            policy: PolicyCaps {
                // No sandbox level and no web-search switch on the command line (`--sandbox`
                // runs the whole CLI in a container or E2B, something else).
                sandbox: SandboxLevels::empty(),
                web_search: false,
                browser: false,
            },
            approvals: ApprovalCaps {
                permission: all,
                plan_review: all,
                question: DecisionModes::ASK | DecisionModes::AUTO_DENY,
            },
            streaming: StreamingCaps {
                incremental: true,
                token_level: true,
                reasoning: true,
                tool_call_args: true,
            },
            // `--mcp-config <private file>`; header values are sent as written (`${NAME}`
            // references are refused before launch: their expansion is not verified).
            mcp: McpCaps {
                stdio: true,
                http: true,
                sse: true,
            },
            skills: false,
            instructions: true,
        }
    }

    fn launch_env() -> Vec<String> {
        vec!["DISABLE_AUTOUPDATER".to_owned()]
    }

    fn validate_config(config: &Value) -> Result<(), ConfigError> {
        check_fields(config, CONFIG_FIELDS)?;
        json::check_one_of(config, "effort", EFFORTS)?;
        json::check_one_of(config, "permission_mode", PERMISSION_MODES)?;
        json::check_one_of(config, "transport", &["auto", "stream-json"])?;
        json::check_positive(config, "max_turns")?;
        json::check_owned_flags(config, OWNED_FLAGS)
    }

    fn config_fingerprint(config: &Value) -> Result<String, ConfigError> {
        Self::validate_config(config)?;
        // What the session was made with: model, effort, permission mode and extra
        // arguments. The command path, turn limit and transport do not change the session.
        let relevant = json!({
            "model": str_field(config, "model"),
            "effort": str_field(config, "effort"),
            "permission_mode": str_field(config, "permission_mode"),
            "extra_args": config.get("extra_args"),
        });
        Ok(json::canonical_fingerprint(
            "codebuddy/configured-driver/v1;codebuddy/session/v1",
            &relevant,
        ))
    }
}

fn config_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "CodeBuddy Code driver config",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "command": {"type": "string", "description": "The codebuddy program (default: codebuddy on PATH)."},
            "model": {"type": "string", "description": "Model id (`--model`); a per-run model wins."},
            "effort": {"enum": EFFORTS, "description": "Reasoning effort (`--effort`)."},
            "permission_mode": {"enum": PERMISSION_MODES, "description": "`--permission-mode`; wins over the mode the approval policy implies (auto-approved permissions → `bypassPermissions`)."},
            "max_turns": {"type": "integer", "minimum": 1, "description": "Agentic turn limit per run (`--max-turns`)."},
            "extra_args": {"type": "array", "items": {"type": "string"}, "description": "Arguments added before the prompt; flags the driver sets from the request are refused."},
            "transport": {"type": "string", "enum": ["auto", "stream-json"], "description": "`stream-json`: always the SDK control transport (prompt as a `user` frame, stdin kept open), so a thread keeps the CLI for its next turns (resident process). Default `auto`: headless with the prompt as the last argument, unless approvals are asked."}
        }
    })
}

/// The launch for `request` (already checked against the descriptor by the host).
pub fn launch(request: &RunRequest, config: &Value) -> Result<(Launch, Transport), StartError> {
    CodeBuddyDriver::validate_config(config)
        .map_err(|e| StartError::InvalidRequest(format!("{}: {}", e.path, e.message)))?;
    let policy = &request.policy;
    if policy.sandbox != Sandbox::Inherit {
        return Err(StartError::Unsupported(
            "CodeBuddy Code has no sandbox level on its command line".into(),
        ));
    }
    if policy.web_search != Toggle::Inherit || policy.browser != Toggle::Inherit {
        return Err(StartError::Unsupported(
            "CodeBuddy Code has no web-search or browser switch on its command line".into(),
        ));
    }
    let asks = [policy.permission, policy.plan_review, policy.question]
        .iter()
        .any(|m| matches!(m, DecisionMode::Ask | DecisionMode::AutoDeny));
    // An auto-approved plan review still needs the CLI to ask (the host answers), unless
    // every permission is bypassed anyway.
    let plan_needs_asking = policy.plan_review == DecisionMode::AutoApprove
        && policy.permission != DecisionMode::AutoApprove;
    let bidirectional = asks || plan_needs_asking;
    let stream_input = bidirectional || str_field(config, "transport") == Some("stream-json");
    let native_schema = request
        .output_schema
        .as_ref()
        .filter(|s| s.mechanism == SchemaMechanism::Native);
    if native_schema.is_some() && (stream_input || request.streaming) {
        return Err(StartError::Unsupported(
            "CodeBuddy Code answers `--json-schema` only in a headless, non-streaming run".into(),
        ));
    }
    let transport = Transport {
        bidirectional,
        stream_input,
        partial: request.streaming,
        handshake: stream_input,
        whole_json: native_schema.is_some(),
        mcp_in_initialize: false,
    };
    let owned = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let mut args = if stream_input {
        // The SDK's own command line.
        owned(&[
            "--input-format=stream-json",
            "--output-format=stream-json",
            "--verbose",
        ])
    } else if native_schema.is_some() {
        owned(&["--print", "--output-format", "json"])
    } else {
        owned(&["--print", "--output-format", "stream-json", "--verbose"])
    };
    if transport.partial {
        args.push("--include-partial-messages".into());
    }
    if let Some(resume) = &request.resume {
        if !json::is_uuid(&resume.state.resume_id) {
            return Err(StartError::ResumeRejected(format!(
                "the resume id {:?} is not a CodeBuddy Code session id (a UUID)",
                resume.state.resume_id.chars().take(80).collect::<String>()
            )));
        }
        args.push(format!("--resume={}", resume.state.resume_id));
        if resume.mode == SessionMode::Fork {
            args.push("--fork-session".into());
        }
    }
    let permission_mode = str_field(config, "permission_mode")
        .or((policy.permission == DecisionMode::AutoApprove).then_some("bypassPermissions"));
    if let Some(mode) = permission_mode {
        args.extend(["--permission-mode".to_owned(), mode.to_owned()]);
    }
    if let Some(model) = json::requested_model(request, config) {
        args.extend(["--model".to_owned(), model]);
    }
    if let Some(effort) = str_field(config, "effort") {
        args.extend(["--effort".to_owned(), effort.to_owned()]);
    }
    if let Some(turns) = u64_field(config, "max_turns") {
        args.extend(["--max-turns".to_owned(), turns.to_string()]);
    }
    if let Some(text) = request.instructions.as_deref().filter(|t| !t.is_empty()) {
        // The CLI has no file form of the appended prompt; attached to its flag so a text
        // starting with `-` stays a value.
        args.push(format!("--append-system-prompt={text}"));
    }
    let mut files = Vec::new();
    if !request.mcp_servers.is_empty() {
        for server in &request.mcp_servers {
            if let McpTransport::Http(r) | McpTransport::Sse(r) = &server.transport
                && let Some((name, _)) = r
                    .headers
                    .iter()
                    .find(|(_, v)| !matches!(mcp::header_value(v), mcp::HeaderValue::Literal(_)))
            {
                return Err(StartError::Unsupported(format!(
                    "MCP server `{}`: header `{name}` refers to an environment variable; \
                     CodeBuddy Code's expansion of `${{…}}` in headers is not verified, so \
                     only literal header values are delivered",
                    server.name
                )));
            }
        }
        let (file, path) = mcp::config_file(&request.mcp_servers, &request.private_dir);
        files.push(file);
        args.extend([
            "--mcp-config".to_owned(),
            path,
            "--strict-mcp-config".to_owned(),
        ]);
    }
    if let Some(schema) = native_schema {
        let schema = claude_driver::preprocess_schema(&schema.schema_json)
            .map_err(StartError::InvalidRequest)?;
        args.extend(["--json-schema".to_owned(), schema]);
    }
    if let Some(extra) = config.get("extra_args").and_then(Value::as_array) {
        args.extend(extra.iter().filter_map(Value::as_str).map(str::to_owned));
    }
    // A headless run reads its prompt from the last argument; `--` keeps a prompt that
    // starts with `-` from being read as an option.
    let stdin = if stream_input {
        ndjson(&json!({
            "type": "control_request",
            "request_id": INITIALIZE_REQUEST_ID,
            "request": {
                "subtype": "initialize",
                "hasPrompt": true,
                "capabilities": { "askUserQuestion": true },
            },
        }))
    } else {
        args.extend(["--".to_owned(), request.prompt.clone()]);
        Vec::new()
    };
    // No self-update in the middle of a host's run (as the CLI's own SDKs start it). The
    // SDKs' `CODEBUDDY_*` variables (entry point, automatic memory) are not set: the host
    // never lets a driver set the provider's own variables (its denylist has
    // `CODEBUDDY_*`), and 2.117.0 does not read the entry point anyway; a caller who wants
    // them sets them on the agent.
    let env = vec![("DISABLE_AUTOUPDATER".to_owned(), "1".to_owned())];
    let program = str_field(config, "command")
        .unwrap_or("codebuddy")
        .to_owned();
    Ok((
        Launch {
            program,
            args,
            env,
            cwd: None,
            stdin,
            keep_stdin_open: stream_input,
            files,
        },
        transport,
    ))
}

#[cfg(all(target_family = "wasm", feature = "component"))]
adaptor_sdk::export_driver!(CodeBuddyDriver);

#[cfg(test)]
mod tests;
