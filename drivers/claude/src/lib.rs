//! The Claude Code driver: protocol knowledge of `claude -p --output-format stream-json`, and
//! nothing else.
//!
//! This file owns the descriptor, the config and the command line (policy mapping, resume,
//! native structured output, appended system prompt through a private file). `stream.rs`
//! maps the CLI's stdout frames to events, transcript, usage and the terminal result;
//! `control.rs` maps `can_use_tool` control requests to approval requests and writes the
//! `control_response` frames back. It never does I/O: the host runs the process.
//!
//! Transports: one-shot with the prompt as plain text on stdin; when any approval mode is
//! explicit and the CLI must ask (ask, or auto-deny which the host answers), the bidirectional
//! SDK mode (`--input-format stream-json --permission-prompt-tool stdio`) with the prompt as a
//! user frame and stdin kept open until the terminal `result`.

mod control;
pub mod dialect;
mod stream;

use adaptor_sdk::json::{self, check_fields, str_field, u64_field};
use adaptor_sdk::mcp;
use adaptor_sdk::{
    ApprovalCaps, ConfigError, DecisionMode, DecisionModes, Descriptor, Driver, Launch, McpCaps,
    McpTransport, ModelInfo, PolicyCaps, PrivateFile, RunRequest, Sandbox, SandboxLevels,
    SchemaMechanism, SessionCaps, SessionMode, StartError, StreamingCaps, StructuredOutputCaps,
    Toggle, VersionRange,
};
use serde_json::{Value, json};

pub use dialect::{ClaudeCode, Dialect, Transport};
pub use stream::{ClaudeSession, StreamJsonSession};

/// Name of the checkpoint encoding (the resume id is Claude's session id).
pub const CODEC: &str = "claude/session/v1";

/// The Claude Code versions this driver was verified with.
pub const VERIFIED_VERSIONS: &[&str] = &["2.1.197", "2.1.332"];

/// The stream-json frames this driver knows, as `(type, subtype)` (`None`: any subtype, or
/// none): those it maps, and those it knowingly keeps as vendor events (`system/status`;
/// `system/thinking_tokens`, a running estimate while the model thinks, not usage;
/// `control_response`). A frame outside this set is still never dropped (a vendor event and a
/// system transcript item); the drift gate
/// (`claude_e2e::every_frame_of_the_pinned_cli_is_known`) fails when the pinned CLI sends one,
/// so a new frame is looked at when the pin moves.
pub const KNOWN_FRAMES: &[(&str, Option<&str>)] = &[
    ("system", Some("init")),
    ("system", Some("api_retry")),
    ("system", Some("permission_denied")),
    ("system", Some("session_state_changed")),
    ("system", Some("status")),
    ("system", Some("thinking_tokens")),
    // Background work (kept as vendor events): subagents and shells started, their progress
    // and completion, and 2.1.332's whole set of live background tasks.
    ("system", Some("task_started")),
    ("system", Some("task_progress")),
    ("system", Some("task_updated")),
    ("system", Some("task_notification")),
    ("system", Some("background_tasks_changed")),
    ("conversation_reset", None),
    // The life of a user frame that carries a `uuid` (queued, started, completed, …).
    ("command_lifecycle", None),
    ("assistant", None),
    ("user", None),
    ("stream_event", None),
    ("control_request", None),
    ("control_response", None),
    ("control_cancel_request", None),
    ("result", Some("success")),
    ("result", Some("error_during_execution")),
    ("result", Some("error_max_turns")),
    ("result", Some("error_max_budget_usd")),
    ("result", Some("error_max_structured_output_retries")),
    ("error", None),
];

/// The environment variables a launch sets: `IS_SANDBOX` (with
/// `--dangerously-skip-permissions`, which the CLI refuses as root otherwise) and the
/// session-state frames that mark the end of a turn.
pub const LAUNCH_ENV: &[&str] = &["IS_SANDBOX", "CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS"];

/// Config fields accepted by the driver, with their JSON types.
const CONFIG_FIELDS: &[(&str, &str)] = &[
    ("command", "non-empty-string"),
    ("model", "string"),
    ("effort", "string"),
    ("max_turns", "integer"),
    ("extra_args", "array-of-strings"),
    ("transport", "string"),
    ("mcp_delivery", "string"),
];

/// Effort levels the CLI accepts (`--effort`).
const EFFORTS: &[&str] = &["low", "medium", "high", "xhigh", "max"];

/// Flags the driver owns: extra args may not set them (they would contradict the request).
const OWNED_FLAGS: &[&str] = &[
    "-p",
    "--print",
    "--output-format",
    "--input-format",
    "--verbose",
    "--include-partial-messages",
    "--permission-prompt-tool",
    "--permission-mode",
    "--dangerously-skip-permissions",
    "--allow-dangerously-skip-permissions",
    "-r",
    "--resume",
    "-c",
    "--continue",
    "--fork-session",
    "--json-schema",
    "--model",
    "--effort",
    "--max-turns",
    "--system-prompt",
    "--system-prompt-file",
    "--append-system-prompt",
    "--append-system-prompt-file",
    "--chrome",
    "--no-chrome",
    "--await-initialize",
];

/// The Claude Code driver.
pub struct ClaudeDriver;

impl Driver for ClaudeDriver {
    type Session = ClaudeSession;

    fn describe() -> Descriptor {
        let all = DecisionModes::ASK | DecisionModes::AUTO_APPROVE | DecisionModes::AUTO_DENY;
        Descriptor {
            name: "claude".into(),
            display_name: "Claude Code".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            default_program: "claude".into(),
            cli_versions: VersionRange {
                min: Some("2.1.0".into()),
                max_exclusive: Some("3.0.0".into()),
                verified: VERIFIED_VERSIONS.iter().map(|v| (*v).into()).collect(),
            },
            config_schema: config_schema().to_string(),
            models: ["opus", "sonnet", "haiku"]
                .iter()
                .map(|m| ModelInfo {
                    id: (*m).into(),
                    label: format!("Claude {m} (CLI alias)"),
                })
                .collect(),
            sessions: SessionCaps {
                resume: true,
                fork: true,
                codec: CODEC.into(),
            },
            persistent_process: true,
            structured_output: StructuredOutputCaps {
                native: true,
                prompt_validate: true,
                with_streaming: true,
                // `--json-schema` in the bidirectional mode is not verified: with approvals
                // the host validates a prompted answer instead.
                native_with_approvals: false,
            },
            policy: PolicyCaps {
                // Claude Code has no sandbox level and no web-search switch on its command line.
                sandbox: SandboxLevels::empty(),
                web_search: false,
                browser: true,
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
            // `--mcp-config <private file>`: every transport; header references `${NAME}`
            // are expanded by the CLI from its environment (2.1.197 checked).
            mcp: McpCaps {
                stdio: true,
                http: true,
                sse: true,
            },
            // `--plugin-dir <the host's skill bundle>` (see `launch`).
            skills: true,
            instructions: true,
        }
    }

    fn launch_env() -> Vec<String> {
        LAUNCH_ENV.iter().map(|v| (*v).to_owned()).collect()
    }

    /// `CLAUDE_CONFIG_DIR` moves settings, transcripts (`projects/`), plugins and the global
    /// state file `.claude.json` (which holds the user's MCP servers; by default it sits
    /// beside `~/.claude`, as `~/.claude.json`). The login is never linked: Claude Code
    /// replaces `.credentials.json` by rename at every token refresh, which would detach a
    /// link and fork the rotating refresh token. `CLAUDE_SECURESTORAGE_CONFIG_DIR` points the
    /// credential store (and its refresh locks) at the user's own profile instead.
    fn profile() -> Option<adaptor_sdk::ProfileSpec> {
        use adaptor_sdk::{Carry, ProfileFile, ProfilePart};
        Some(adaptor_sdk::ProfileSpec {
            config_dir_variable: "CLAUDE_CONFIG_DIR".into(),
            native_dir: ".claude".into(),
            files: vec![
                ProfileFile::same_name(ProfilePart::Settings, "settings.json", Carry::Copy),
                ProfileFile {
                    part: ProfilePart::Mcp,
                    source: ".claude.json".into(),
                    default_source: Some(".claude.json".into()),
                    target: ".claude.json".into(),
                    carry: Carry::Copy,
                },
            ],
            auth_store_variable: Some("CLAUDE_SECURESTORAGE_CONFIG_DIR".into()),
        })
    }

    /// Steering: a steerable request runs with stream-json input (stdin open); the input is
    /// another SDK `user` frame, which Claude Code folds into the turn between tool calls or
    /// runs right after it (before `idle`, so its reply is the run's too).
    fn steering() -> bool {
        true
    }

    fn validate_config(config: &Value) -> Result<(), ConfigError> {
        check_fields(config, CONFIG_FIELDS)?;
        json::check_one_of(config, "effort", EFFORTS)?;
        json::check_one_of(config, "transport", &["auto", "stream-json"])?;
        json::check_one_of(config, "mcp_delivery", &["file", "stdin"])?;
        json::check_positive(config, "max_turns")?;
        json::check_owned_flags(config, OWNED_FLAGS)
    }

    fn config_fingerprint(config: &Value) -> Result<String, ConfigError> {
        Self::validate_config(config)?;
        // What the session was made with: the configured model and effort and the extra
        // arguments (a per-call model is in the thread fingerprint too, so a configured one
        // must be). The command path, turn limit and transport do not change the session.
        let relevant = json!({
            "model": json::str_field(config, "model"),
            "effort": json::str_field(config, "effort"),
            "extra_args": config.get("extra_args"),
        });
        Ok(json::canonical_fingerprint(
            "claude/configured-driver/v2;claude/session/v1",
            &relevant,
        ))
    }
}

fn config_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Claude Code driver config",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "command": {"type": "string", "description": "The claude program (default: claude on PATH)."},
            "model": {"type": "string", "description": "Model or alias (`--model`); a per-run model wins."},
            "effort": {"enum": EFFORTS, "description": "Reasoning effort (`--effort`)."},
            "max_turns": {"type": "integer", "minimum": 1, "description": "Agentic turn limit per run (`--max-turns`)."},
            "extra_args": {"type": "array", "items": {"type": "string"}, "description": "Arguments appended to the command line; flags the driver sets from the request are refused."},
            "transport": {"type": "string", "enum": ["auto", "stream-json"], "description": "`stream-json`: always send the prompt as an SDK `user` frame with stdin kept open (`--input-format stream-json`), so a thread can keep the CLI for its next turns (resident process). Default `auto`: the prompt is stdin text, except when approvals are asked."},
            "mcp_delivery": {"type": "string", "enum": ["file", "stdin"], "description": "How MCP servers reach the CLI. Default `file`: a private 0600 `--mcp-config` file (every version). `stdin`: in the `initialize` request on stdin with `--await-initialize` (Claude Code 2.1.332 and later; nothing written to disk), over stream-json input."}
        }
    })
}

/// Formats defined by JSON Schema; Claude Code silently ignores a whole `--json-schema` that
/// uses any other (e.g. schemars' `uint32`), so those are removed (the host still validates
/// the answer against the full schema).
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Prepare a schema for `--json-schema`: drop `$schema`, `$id`, `$defs` / `definitions` (the
/// host has already inlined local references) and non-standard `format`s, walking only schema
/// positions (a property named `format` is kept).
pub fn preprocess_schema(schema: &str) -> Result<String, String> {
    let mut value: Value =
        serde_json::from_str(schema).map_err(|e| format!("the output schema is not JSON: {e}"))?;
    clean_schema(&mut value);
    Ok(value.to_string())
}

fn clean_schema(schema: &mut Value) {
    let Value::Object(map) = schema else { return };
    for key in ["$schema", "$id", "$defs", "definitions"] {
        map.remove(key);
    }
    if let Some(Value::String(format)) = map.get("format")
        && !STANDARD_FORMATS.contains(&format.as_str())
    {
        map.remove("format");
    }
    for (keyword, child) in map.iter_mut() {
        match (keyword.as_str(), child) {
            ("properties" | "patternProperties" | "dependentSchemas", Value::Object(named)) => {
                named.values_mut().for_each(clean_schema)
            }
            ("anyOf" | "oneOf" | "allOf" | "prefixItems" | "items", Value::Array(list)) => {
                list.iter_mut().for_each(clean_schema)
            }
            (
                "items"
                | "additionalProperties"
                | "not"
                | "contains"
                | "propertyNames"
                | "if"
                | "then"
                | "else"
                | "unevaluatedProperties"
                | "unevaluatedItems"
                | "additionalItems",
                child,
            ) => clean_schema(child),
            _ => {}
        }
    }
}

/// The launch for `request` (already checked against the descriptor by the host);
/// `steerable` keeps stdin open for input added while the turn runs (the stream-json input
/// transport).
pub fn launch(
    request: &RunRequest,
    config: &Value,
    steerable: bool,
) -> Result<(Launch, Transport), StartError> {
    ClaudeDriver::validate_config(config)
        .map_err(|e| StartError::InvalidRequest(format!("{}: {}", e.path, e.message)))?;
    let policy = &request.policy;
    if policy.sandbox != Sandbox::Inherit {
        return Err(StartError::Unsupported(
            "Claude Code has no sandbox level on its command line".into(),
        ));
    }
    if policy.web_search != Toggle::Inherit {
        return Err(StartError::Unsupported(
            "Claude Code has no web-search switch on its command line".into(),
        ));
    }
    let modes = [policy.permission, policy.plan_review, policy.question];
    let bidirectional = modes
        .iter()
        .any(|m| matches!(m, DecisionMode::Ask | DecisionMode::AutoDeny));
    // MCP servers on stdin: the `initialize` request, read at launch (`--await-initialize`).
    let mcp_on_stdin =
        !request.mcp_servers.is_empty() && str_field(config, "mcp_delivery") == Some("stdin");
    let stream_input = bidirectional
        || steerable
        || mcp_on_stdin
        || str_field(config, "transport") == Some("stream-json");
    let transport = Transport {
        bidirectional,
        stream_input,
        partial: request.streaming,
        handshake: mcp_on_stdin,
        mcp_in_initialize: mcp_on_stdin,
        ..Transport::default()
    };
    let mut args: Vec<String> = ["-p", "--output-format", "stream-json", "--verbose"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    // Session-state frames: `idle` is the authoritative end of a turn (after held-back
    // results and background subagents). A caller's own value of the variable wins.
    let mut env = vec![(
        "CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS".to_owned(),
        "1".to_owned(),
    )];
    if transport.partial {
        args.push("--include-partial-messages".into());
    }
    if bidirectional {
        args.extend(
            [
                "--input-format",
                "stream-json",
                "--permission-prompt-tool",
                "stdio",
            ]
            .iter()
            .map(|s| (*s).to_owned()),
        );
    } else if stream_input {
        args.extend(["--input-format".to_owned(), "stream-json".to_owned()]);
    }
    if !bidirectional && policy.permission == DecisionMode::AutoApprove {
        args.push("--dangerously-skip-permissions".into());
        // The CLI refuses to bypass permissions as root unless it is told it runs sandboxed.
        env.push(("IS_SANDBOX".to_owned(), "1".to_owned()));
    }
    match policy.browser {
        Toggle::Inherit => {}
        Toggle::Allow => args.push("--chrome".into()),
        Toggle::Deny => args.push("--no-chrome".into()),
    }
    if let Some(resume) = &request.resume {
        // A stored id is data, never an option: it must be a session id, and it is passed
        // attached to its flag.
        if !json::is_uuid(&resume.state.resume_id) {
            return Err(StartError::ResumeRejected(format!(
                "the resume id {:?} is not a Claude Code session id (a UUID)",
                resume.state.resume_id.chars().take(80).collect::<String>()
            )));
        }
        args.push(format!("--resume={}", resume.state.resume_id));
        if resume.mode == SessionMode::Fork {
            // A new session id with the parent's history; the parent session is unchanged.
            args.push("--fork-session".to_owned());
        }
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
    let mut files = Vec::new();
    if let Some(text) = request.instructions.as_deref().filter(|t| !t.is_empty()) {
        files.push(PrivateFile {
            name: "append-system-prompt.md".into(),
            contents: text.as_bytes().to_vec(),
        });
        args.extend([
            "--append-system-prompt-file".to_owned(),
            format!("{}/append-system-prompt.md", request.private_dir),
        ]);
    }
    // The host's skill bundle is a plugin dir: Claude Code loads its skills whatever
    // `--setting-sources` says, and shows them as `adaptor:<key>`.
    if let Some(bundle) = adaptor_sdk::skills::skill_bundle(&request.skill_dirs)
        .map_err(StartError::InvalidRequest)?
    {
        args.extend(["--plugin-dir".to_owned(), bundle.root]);
    }
    if !request.mcp_servers.is_empty() {
        for server in &request.mcp_servers {
            if let McpTransport::Http(r) | McpTransport::Sse(r) = &server.transport
                && let Some((name, _)) = r
                    .headers
                    .iter()
                    .find(|(_, v)| matches!(mcp::header_value(v), mcp::HeaderValue::Mixed(_)))
            {
                return Err(StartError::Unsupported(format!(
                    "MCP server `{}`: header `{name}` mixes `${{…}}` references with text",
                    server.name
                )));
            }
        }
        if mcp_on_stdin {
            args.push("--await-initialize".to_owned());
        } else {
            let (file, path) = mcp::config_file(&request.mcp_servers, &request.private_dir);
            files.push(file);
            args.extend(["--mcp-config".to_owned(), path]);
        }
    }
    if let Some(schema) = &request.output_schema
        && schema.mechanism == SchemaMechanism::Native
    {
        let schema = preprocess_schema(&schema.schema_json).map_err(StartError::InvalidRequest)?;
        args.extend(["--json-schema".to_owned(), schema]);
    }
    if let Some(extra) = config.get("extra_args").and_then(Value::as_array) {
        args.extend(extra.iter().filter_map(Value::as_str).map(str::to_owned));
    }
    let stdin = if mcp_on_stdin {
        // The prompt's frame follows once the CLI has answered (`StreamJsonSession`).
        let servers = mcp::config_json(&request.mcp_servers)["mcpServers"].take();
        dialect::ndjson(&json!({
            "type": "control_request",
            "request_id": dialect::INITIALIZE_REQUEST_ID,
            "request": { "subtype": "initialize", "mcpServers": servers },
        }))
    } else if stream_input {
        dialect::ndjson(&dialect::user_frame(&request.prompt))
    } else {
        request.prompt.as_bytes().to_vec()
    };
    let program = str_field(config, "command").unwrap_or("claude").to_owned();
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
adaptor_sdk::export_driver!(ClaudeDriver);

#[cfg(test)]
mod tests;
