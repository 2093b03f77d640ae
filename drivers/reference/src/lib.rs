//! The reference driver: protocol knowledge of the scripted `reference-provider` CLI (see
//! `drivers/reference-provider/PROTOCOL.md`), and nothing else.
//!
//! It builds the provider's command line from the request and maps its JSON Lines onto the
//! unified contract: session → `init`, thinking and text deltas → reasoning/text lifecycles,
//! `tool_call`/`tool_result` → a tool lifecycle, `result` → terminal payload, summary, usage and
//! checkpoint, `error` → failure, `approval_request` → an approval request whose decision is
//! written back as an `approval_response` line. It never does I/O: the host runs the process.

use adaptor_sdk::json::{self, JsonLine, check_fields, describe_exit, str_field, u64_field};
use adaptor_sdk::{
    Actions, ApprovalCaps, ApprovalKind, ApprovalRequest, Carry, Checkpoint, Choice, ConfigError,
    Decision, DecisionMode, DecisionModes, Descriptor, Driver, ExitStatus, Failure, FailureReason,
    Fallback, InputError, ItemKind, Launch, Line, LineFramer, McpCaps, ModelInfo, Outcome,
    PolicyCaps, PrivateFile, ProfileFile, ProfilePart, ProfileSpec, RunRequest, RunResources,
    Sandbox, SandboxLevels, SchemaMechanism, Session, SessionCaps, SessionMode, SessionState,
    StartError, StreamingCaps, StructuredOutputCaps, TerminalPayload, Toggle, Transcript,
    TurnRequest, Usage, VersionRange, empty_outcome, items, top_scope,
};
use serde_json::{Value, json};

/// Name of the checkpoint encoding.
pub const CODEC: &str = "reference/session/v1";

/// Config fields accepted by the driver, with their JSON types.
const CONFIG_FIELDS: &[(&str, &str)] = &[
    ("command", "non-empty-string"),
    ("model", "string"),
    ("state_dir", "string"),
    ("delay_ms", "integer"),
    ("extra_args", "array-of-strings"),
    ("transport", "string"),
];

/// The reference driver.
pub struct ReferenceDriver;

impl Driver for ReferenceDriver {
    type Session = ReferenceSession;

    /// `REFERENCE_PROVIDER_STATE_DIR` moves the provider's sessions; its login is
    /// `auth.json` (read for the `account` of its session line, never rewritten: linked),
    /// `settings.json` and `mcp.json` are copied.
    fn profile() -> Option<ProfileSpec> {
        let file = ProfileFile::same_name;
        Some(ProfileSpec {
            config_dir_variable: "REFERENCE_PROVIDER_STATE_DIR".into(),
            native_dir: ".local/state/reference-provider".into(),
            files: vec![
                file(ProfilePart::Auth, "auth.json", Carry::Link),
                file(ProfilePart::Settings, "settings.json", Carry::Copy),
                file(ProfilePart::Mcp, "mcp.json", Carry::Copy),
            ],
            auth_store_variable: None,
        })
    }

    fn describe() -> Descriptor {
        Descriptor {
            name: "reference".into(),
            display_name: "Reference provider".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            default_program: "reference-provider".into(),
            cli_versions: VersionRange {
                min: Some("1.0.0".into()),
                max_exclusive: Some("2.0.0".into()),
                verified: vec!["1.0.0".into()],
            },
            config_schema: config_schema().to_string(),
            models: vec![ModelInfo {
                id: "reference-1".into(),
                label: "Reference model".into(),
            }],
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
                native_with_approvals: true,
            },
            policy: PolicyCaps {
                sandbox: SandboxLevels::READ_ONLY | SandboxLevels::WORKSPACE_WRITE,
                web_search: true,
                browser: false,
            },
            // Every explicit mode runs the provider with `--approvals stdio`; the host applies
            // auto-approve / auto-deny to the requests, so all three are honoured.
            approvals: ApprovalCaps {
                permission: DecisionModes::ASK
                    | DecisionModes::AUTO_APPROVE
                    | DecisionModes::AUTO_DENY,
                plan_review: DecisionModes::ASK
                    | DecisionModes::AUTO_APPROVE
                    | DecisionModes::AUTO_DENY,
                question: DecisionModes::ASK | DecisionModes::AUTO_DENY,
            },
            streaming: StreamingCaps {
                incremental: true,
                token_level: true,
                reasoning: true,
                tool_call_args: false,
            },
            // `--mcp-config <private file>` (the common `mcpServers` JSON); the provider's
            // scripted MCP client speaks stdio and streamable HTTP and expands `${NAME}`.
            mcp: McpCaps {
                stdio: true,
                http: true,
                sse: false,
            },
            // `--plugin-dir <the host's skill bundle>`: the provider reads every
            // `skills/<key>/SKILL.md` at turn start and lists them in its session line.
            skills: true,
            instructions: true,
        }
    }

    /// Steering: with a steerable request the provider runs with `--approvals stdio` and
    /// takes `{"type":"input"}` frames while the turn runs.
    fn steering() -> bool {
        true
    }

    fn validate_config(config: &Value) -> Result<(), ConfigError> {
        check_fields(config, CONFIG_FIELDS)?;
        json::check_one_of(config, "transport", &["one-shot", "stdio"])
    }

    fn config_fingerprint(config: &Value) -> Result<String, ConfigError> {
        Self::validate_config(config)?;
        // Only what decides whether a stored session can be resumed: the model and where the
        // provider keeps its sessions. The command path and pacing do not matter.
        let relevant = json!({
            "model": str_field(config, "model"),
            "state_dir": str_field(config, "state_dir"),
        });
        Ok(json::canonical_fingerprint(
            "reference/configured-driver/v1;reference/session/v1",
            &relevant,
        ))
    }
}

fn config_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Reference driver config",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "command": {"type": "string", "description": "Provider program (default: reference-provider on PATH)."},
            "model": {"type": "string", "description": "Model name reported by the provider (default reference-1)."},
            "state_dir": {"type": "string", "x-adaptor-path": "state", "description": "Directory where the provider keeps sessions (absolute; the host lets the provider read and write it, and creates it when missing)."},
            "delay_ms": {"type": "integer", "minimum": 0, "description": "Pause between output lines, in milliseconds."},
            "extra_args": {"type": "array", "items": {"type": "string"}, "description": "Arguments appended to the command line."},
            "transport": {"type": "string", "enum": ["one-shot", "stdio"], "description": "`stdio`: the prompt travels as a JSON frame and stdin stays open, so a thread can keep the provider for its next turns (resident process). Default `one-shot`: the prompt is stdin itself, except when approvals are asked (then `stdio`)."}
        }
    })
}

/// Open streamed part (text or thinking) and the text accumulated for it.
#[derive(Debug, Default)]
struct OpenPart {
    id: String,
    text: String,
}

/// State of one reference-provider turn.
pub struct ReferenceSession {
    request: RunRequest,
    config: Value,
    stdout: LineFramer,
    stderr: LineFramer,
    transcript: Transcript,
    text: Option<OpenPart>,
    thinking: Option<OpenPart>,
    open_tools: Vec<(String, String)>,
    replies: Vec<String>,
    session_id: Option<String>,
    model: Option<String>,
    usage: Option<Usage>,
    summary: Option<String>,
    terminal: Option<TerminalPayload>,
    result_success: bool,
    result_session_id: Option<String>,
    error: Option<(FailureReason, String)>,
    malformed: Option<String>,
    status: Option<ExitStatus>,
    structured: Option<String>,
    /// The provider asks over stdin (`--approvals stdio`).
    asks: bool,
    /// The prompt travels as a stdin frame and stdin stays open: the process can serve more
    /// turns (`next-turn`).
    stdio: bool,
    /// Why the last interrupting refusal was sent (names the failure if the turn ends on it).
    refusal: Option<FailureReason>,
    /// The caller may add input while the turn runs: the stdio transport, whose stdin stays
    /// open for `{"type":"input"}` frames.
    steerable: bool,
    /// The run's dedicated profile (the host set `REFERENCE_PROVIDER_STATE_DIR` to it).
    profile_dir: Option<String>,
}

impl ReferenceSession {
    fn scope() -> adaptor_sdk::Scope {
        top_scope()
    }

    fn handle_line(&mut self, line: Line, out: &mut Actions) {
        let (frame, text) = match json::json_line(line) {
            JsonLine::Blank => return,
            JsonLine::Oversized(problem) | JsonLine::Malformed(problem)
                if self.terminal.is_none() =>
            {
                self.malformed.get_or_insert(problem);
                return;
            }
            _ if self.terminal.is_some() => {
                self.malformed
                    .get_or_insert("output after the terminal result frame".into());
                return;
            }
            JsonLine::Object(frame, text) => (frame, text),
            JsonLine::Text(text) => {
                self.transcript
                    .push(items::text(ItemKind::Stdout, &text), out);
                return;
            }
            JsonLine::Oversized(_) | JsonLine::Malformed(_) => return,
        };
        let kind = str_field(&frame, "type").unwrap_or_default().to_owned();
        match kind.as_str() {
            "session" => self.on_session(&frame, out),
            "thinking_delta" => self.on_delta(true, &frame, out),
            "thinking_end" => self.close_part(true, out),
            "text_delta" => self.on_delta(false, &frame, out),
            "text_end" => self.close_part(false, out),
            "tool_call" => self.on_tool_call(&frame, out),
            "tool_result" => self.on_tool_result(&frame, out),
            "notice" => {
                let message = str_field(&frame, "message").unwrap_or(&text).to_owned();
                let kind = str_field(&frame, "kind").unwrap_or("notice").to_owned();
                out.notice(&kind, &message, Some(text.clone()));
            }
            "error" => self.on_error(&frame, out),
            "approval_request" => self.on_approval_request(&frame, out),
            // The provider took the caller's input into the turn: it is the user's.
            "input_received" => {
                let text = str_field(&frame, "text").unwrap_or_default();
                self.transcript.push(items::text(ItemKind::User, text), out);
            }
            "result" => self.on_result(&frame, &text, out),
            _ => {
                out.vendor(&kind, &text);
                let mut item = items::text(ItemKind::System, &text);
                item.data_json = Some(text.clone());
                self.transcript.push(item, out);
            }
        }
    }

    fn on_session(&mut self, frame: &Value, out: &mut Actions) {
        let id = str_field(frame, "session_id").map(str::to_owned);
        let model = str_field(frame, "model").map(str::to_owned);
        if id.is_some() {
            self.session_id = id.clone();
        }
        if model.is_some() {
            self.model = model.clone();
        }
        out.session(id.clone(), model.clone());
        let mut item = items::blank(ItemKind::Init);
        item.session_id = id;
        item.model = model;
        let reported: serde_json::Map<String, Value> =
            ["sandbox", "web_search", "skills", "instructions", "account"]
                .iter()
                .filter_map(|k| frame.get(*k).map(|v| ((*k).to_owned(), v.clone())))
                .collect();
        if !reported.is_empty() {
            item.data_json = Some(Value::Object(reported).to_string());
        }
        self.transcript.push(item, out);
    }

    fn on_delta(&mut self, thinking: bool, frame: &Value, out: &mut Actions) {
        let id = str_field(frame, "id").unwrap_or("part").to_owned();
        let delta = str_field(frame, "text").unwrap_or_default().to_owned();
        let slot = if thinking { &self.thinking } else { &self.text };
        if slot.as_ref().is_some_and(|p| p.id != id) {
            self.close_part(thinking, out);
        }
        let slot = if thinking {
            &mut self.thinking
        } else {
            &mut self.text
        };
        if slot.is_none() {
            *slot = Some(OpenPart {
                id: id.clone(),
                text: String::new(),
            });
            if thinking {
                out.thinking_start(&id, &Self::scope());
            } else {
                out.text_start(&id, &Self::scope());
            }
        }
        if delta.is_empty() {
            return;
        }
        if let Some(part) = slot.as_mut() {
            part.text.push_str(&delta);
        }
        if thinking {
            out.thinking_delta(&id, &delta, &Self::scope());
        } else {
            out.text_delta(&id, &delta, &Self::scope());
        }
    }

    fn close_part(&mut self, thinking: bool, out: &mut Actions) {
        let part = if thinking {
            self.thinking.take()
        } else {
            self.text.take()
        };
        let Some(part) = part else { return };
        if thinking {
            out.thinking_end(&part.id, &Self::scope());
            self.transcript
                .push(items::text(ItemKind::Thinking, &part.text), out);
        } else {
            out.text_end(&part.id, &Self::scope());
            self.transcript
                .push(items::text(ItemKind::Assistant, &part.text), out);
            self.replies.push(part.text);
        }
    }

    fn on_tool_call(&mut self, frame: &Value, out: &mut Actions) {
        let id = str_field(frame, "id").unwrap_or_default().to_owned();
        let name = str_field(frame, "name").unwrap_or_default().to_owned();
        if id.is_empty() || name.is_empty() {
            self.malformed
                .get_or_insert("tool_call frame without id or name".into());
            return;
        }
        let input = frame.get("input").map(Value::to_string);
        out.tool_start(&id, &name, input.clone(), &Self::scope());
        out.tool_end(&id, &name, input.clone(), &Self::scope());
        self.open_tools.push((id.clone(), name.clone()));
        self.transcript
            .push(items::tool_call(&id, &name, input), out);
    }

    fn on_tool_result(&mut self, frame: &Value, out: &mut Actions) {
        let id = str_field(frame, "id").unwrap_or_default().to_owned();
        if !self.open_tools.iter().any(|(open, _)| *open == id) {
            self.malformed
                .get_or_insert(format!("tool_result for unknown tool call `{id}`"));
            return;
        }
        self.open_tools.retain(|(open, _)| *open != id);
        let output = match frame.get("output") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        };
        let is_error = frame
            .get("is_error")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        out.tool_result(&id, &output, is_error, &Self::scope());
        self.transcript
            .push(items::tool_result(&id, &output, is_error), out);
    }

    fn on_error(&mut self, frame: &Value, out: &mut Actions) {
        let message = str_field(frame, "message")
            .unwrap_or("the provider reported an error")
            .to_owned();
        let reason = match str_field(frame, "code") {
            Some("resume_rejected") => FailureReason::ResumeRejected,
            Some("approval_denied") => self
                .refusal
                .clone()
                .unwrap_or(FailureReason::ApprovalDenied),
            _ => FailureReason::AgentError,
        };
        let mut item = items::text(ItemKind::Failure, &message);
        item.is_error = true;
        item.data_json = Some(frame.to_string());
        self.transcript.push(item, out);
        self.error.get_or_insert((reason, message));
    }

    fn on_approval_request(&mut self, frame: &Value, out: &mut Actions) {
        let Some(id) = str_field(frame, "id").filter(|id| !id.is_empty()) else {
            self.malformed
                .get_or_insert("approval_request frame without id".into());
            return;
        };
        let tool = str_field(frame, "tool").map(str::to_owned);
        let (kind, title, details) = match str_field(frame, "kind") {
            Some("permission") => (
                ApprovalKind::Permission,
                format!("Allow {}?", tool.as_deref().unwrap_or("the tool")),
                frame.get("input").map(|i| json!({ "input": i })),
            ),
            Some("plan") => (
                ApprovalKind::PlanReview,
                "Approve the plan?".to_owned(),
                frame.get("plan").map(|p| json!({ "plan": p })),
            ),
            Some("question") => (
                ApprovalKind::Question,
                str_field(frame, "question")
                    .unwrap_or("Question")
                    .to_owned(),
                None,
            ),
            other => (
                ApprovalKind::Other(other.unwrap_or("unknown").to_owned()),
                "The provider asks for a decision".to_owned(),
                Some(frame.clone()),
            ),
        };
        let choices = frame
            .get("options")
            .and_then(Value::as_array)
            .map(|options| {
                options
                    .iter()
                    .filter_map(|o| {
                        let key = str_field(o, "key")?.to_owned();
                        Some(Choice {
                            label: str_field(o, "label").unwrap_or(&key).to_owned(),
                            description: str_field(o, "description").map(str::to_owned),
                            key,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.request_approval(ApprovalRequest {
            id: id.to_owned(),
            kind,
            title,
            tool_call_id: str_field(frame, "tool_call_id").map(str::to_owned),
            tool_name: tool,
            choices,
            details_json: details.filter(Value::is_object).map(|d| d.to_string()),
        });
    }

    /// The `approval_response` line for a decision. Refusals interrupt the turn when the
    /// policy's fallback is not `continue`.
    fn response(&mut self, id: &str, decision: Decision) -> Value {
        let policy = &self.request.policy;
        let deny = |message: &str, interrupt: bool| {
            json!({"behavior": "deny", "id": id, "interrupt": interrupt,
                   "message": message, "type": "approval_response"})
        };
        let (line, refusal) = match decision {
            Decision::Approve(input) => {
                let mut line = json!({"behavior": "allow", "id": id, "type": "approval_response"});
                if let Some(input) = input.and_then(|i| serde_json::from_str::<Value>(&i).ok()) {
                    line["updated_input"] = input;
                }
                (line, None)
            }
            Decision::Answer(answer) => (
                json!({"answer": answer, "behavior": "allow", "id": id, "type": "approval_response"}),
                None,
            ),
            Decision::Deny(reason) => {
                let interrupt = policy.on_reject != Fallback::Continue;
                (
                    deny(&reason, interrupt),
                    interrupt.then_some(FailureReason::ApprovalDenied),
                )
            }
            Decision::TimedOut => {
                let interrupt = policy.on_timeout != Fallback::Continue;
                (
                    deny("nobody answered in time", interrupt),
                    interrupt.then_some(FailureReason::ApprovalTimeout),
                )
            }
            Decision::Unanswered => (
                deny("nobody can answer this request", true),
                Some(FailureReason::ApprovalUnanswered),
            ),
            Decision::Cancelled => (
                deny("the run was cancelled", true),
                Some(FailureReason::Cancelled),
            ),
        };
        if refusal.is_some() {
            self.refusal = refusal;
        }
        line
    }

    fn on_result(&mut self, frame: &Value, raw: &str, out: &mut Actions) {
        self.close_part(true, out);
        self.close_part(false, out);
        self.result_success = str_field(frame, "status") == Some("success");
        self.result_session_id = str_field(frame, "session_id").map(str::to_owned);
        if let Some(model) = str_field(frame, "model") {
            self.model = Some(model.to_owned());
        }
        self.summary = str_field(frame, "summary").map(str::to_owned);
        self.structured = frame.get("structured_output").map(Value::to_string);
        if let Some(u) = frame.get("usage").filter(|u| u.is_object()) {
            let usage = Usage {
                input_tokens: u64_field(u, "input_tokens"),
                output_tokens: u64_field(u, "output_tokens"),
                cache_read_tokens: u64_field(u, "cache_read_tokens"),
                cache_write_tokens: u64_field(u, "cache_write_tokens"),
                reasoning_tokens: None,
                cost_usd: u.get("cost_usd").and_then(Value::as_f64),
            };
            out.usage(usage);
            self.usage = Some(usage);
        }
        let mut item = items::blank(ItemKind::Result);
        item.text = str_field(frame, "text").map(str::to_owned);
        item.is_error = !self.result_success;
        item.session_id = self.result_session_id.clone();
        item.model = self.model.clone();
        self.transcript.push(item, out);
        if !self.result_success && self.error.is_none() {
            self.error = Some((
                FailureReason::AgentError,
                format!(
                    "the provider ended the turn with status `{}`",
                    str_field(frame, "status").unwrap_or("unknown")
                ),
            ));
        }
        self.terminal = Some(TerminalPayload {
            event: "result".into(),
            json: raw.trim_end_matches(['\r', '\n']).to_owned(),
        });
        out.end_turn();
    }

    fn failure(&self) -> Option<Failure> {
        let status = self.status.as_ref();
        let fail = |reason, message: String| {
            Some(Failure {
                reason,
                message,
                details_json: None,
            })
        };
        if let Some(stopped) = adaptor_sdk::stopped_by_host(status) {
            return Some(stopped);
        }
        if let Some((reason, message)) = &self.error {
            return fail(reason.clone(), message.clone());
        }
        if let Some(problem) = &self.malformed {
            return fail(FailureReason::ProtocolError, problem.clone());
        }
        if self.terminal.is_none() {
            let how = describe_exit(status);
            return fail(
                FailureReason::AgentError,
                format!("the provider {how} before its result frame"),
            );
        }
        match status {
            Some(s) if s.code == Some(0) && s.signal.is_none() => None,
            // A resident turn: the result frame ended it and the process lives on.
            None => None,
            other => fail(
                FailureReason::AgentError,
                format!("the provider {}", describe_exit(other)),
            ),
        }
    }
}

impl Session for ReferenceSession {
    fn new(request: RunRequest) -> Self {
        let config = json::parse_config(&request.config_json).unwrap_or(Value::Null);
        Self {
            request,
            config,
            stdout: LineFramer::default(),
            stderr: LineFramer::new(64 * 1024),
            transcript: Transcript::default(),
            text: None,
            thinking: None,
            open_tools: Vec::new(),
            replies: Vec::new(),
            session_id: None,
            model: None,
            usage: None,
            summary: None,
            terminal: None,
            result_success: false,
            result_session_id: None,
            error: None,
            malformed: None,
            status: None,
            structured: None,
            asks: false,
            stdio: false,
            refusal: None,
            steerable: false,
            profile_dir: None,
        }
    }

    fn from_turn(turn: TurnRequest) -> Self {
        let mut session = Self::new(turn.request);
        session.steerable = turn.steerable;
        session
    }

    fn from_resources(turn: TurnRequest, resources: RunResources) -> Self {
        let mut session = Self::from_turn(turn);
        session.profile_dir = resources.profile_dir;
        session
    }

    fn on_input(&mut self, text: &str, out: &mut Actions) -> Result<(), InputError> {
        if !self.stdio {
            return Err(InputError::Unsupported(
                "the provider was started with the one-shot transport (stdin closed after the prompt)"
                    .into(),
            ));
        }
        if self.terminal.is_some() || self.status.is_some() {
            return Err(InputError::TurnOver(
                "the provider has written this turn's result".into(),
            ));
        }
        let mut frame = json!({"text": text, "type": "input"}).to_string();
        frame.push('\n');
        out.write_stdin(frame.into_bytes());
        Ok(())
    }

    fn next_turn(&mut self, request: RunRequest, out: &mut Actions) -> Result<(), StartError> {
        if !self.stdio {
            return Err(StartError::Unsupported(
                "this provider process was started with the one-shot transport".into(),
            ));
        }
        if self.status.is_some() {
            return Err(StartError::InvalidRequest(
                "the provider process has already exited".into(),
            ));
        }
        // A fresh turn state on the same process; partial output lines carry over.
        let mut next = ReferenceSession::new(request);
        std::mem::swap(&mut next.stdout, &mut self.stdout);
        std::mem::swap(&mut next.stderr, &mut self.stderr);
        let policy = &next.request.policy;
        next.asks = [policy.permission, policy.plan_review, policy.question]
            .iter()
            .any(|m| *m != DecisionMode::Inherit);
        next.stdio = true;
        let mut frame = json!({"text": next.request.prompt, "type": "user"}).to_string();
        frame.push('\n');
        *self = next;
        out.write_stdin(frame.into_bytes());
        Ok(())
    }

    fn start(&mut self) -> Result<Launch, StartError> {
        ReferenceDriver::validate_config(&self.config)
            .map_err(|e| StartError::InvalidRequest(format!("{}: {}", e.path, e.message)))?;
        let cfg = &self.config;
        let mut args = Vec::new();
        if let Some(model) = json::requested_model(&self.request, cfg) {
            args.extend(["--model".to_owned(), model]);
        }
        if let Some(dir) = str_field(cfg, "state_dir") {
            if let Some(profile) = &self.profile_dir {
                return Err(StartError::InvalidRequest(format!(
                    "the config's state_dir {dir} would override the agent's dedicated profile {profile}; drop one"
                )));
            }
            args.extend(["--state-dir".to_owned(), dir.to_owned()]);
        }
        if let Some(ms) = u64_field(cfg, "delay_ms") {
            args.extend(["--delay-ms".to_owned(), ms.to_string()]);
        }
        if let Some(text) = &self.request.instructions {
            args.extend(["--append-system-prompt".to_owned(), text.clone()]);
        }
        if let Some(bundle) = adaptor_sdk::skills::skill_bundle(&self.request.skill_dirs)
            .map_err(StartError::InvalidRequest)?
        {
            args.extend(["--plugin-dir".to_owned(), bundle.root]);
        }
        match self.request.policy.sandbox {
            Sandbox::Inherit => {}
            Sandbox::ReadOnly => args.extend(["--sandbox".to_owned(), "read-only".to_owned()]),
            Sandbox::WorkspaceWrite => {
                args.extend(["--sandbox".to_owned(), "workspace-write".to_owned()])
            }
            Sandbox::Unrestricted => {
                return Err(StartError::Unsupported(
                    "the reference provider has no unrestricted sandbox".into(),
                ));
            }
        }
        match self.request.policy.web_search {
            Toggle::Inherit => {}
            Toggle::Allow => args.extend(["--web-search".to_owned(), "allow".to_owned()]),
            Toggle::Deny => args.extend(["--web-search".to_owned(), "deny".to_owned()]),
        }
        if self.request.policy.browser != Toggle::Inherit {
            return Err(StartError::Unsupported(
                "the reference provider has no browser tool".into(),
            ));
        }
        if let Some(resume) = &self.request.resume {
            let state = &resume.state;
            let cwd = state
                .data
                .iter()
                .find(|(k, _)| k == "cwd")
                .map(|(_, v)| v.as_str());
            if cwd.is_some_and(|cwd| cwd != self.request.workspace) {
                return Err(StartError::ResumeRejected(format!(
                    "session {} belongs to workspace {}, not {}",
                    state.resume_id,
                    cwd.unwrap_or_default(),
                    self.request.workspace
                )));
            }
            args.extend(["--resume".to_owned(), state.resume_id.clone()]);
            if resume.mode == SessionMode::Fork {
                args.push("--fork-session".to_owned());
            }
        }
        let mut files = Vec::new();
        if let Some(schema) = &self.request.output_schema
            && schema.mechanism == SchemaMechanism::Native
        {
            files.push(PrivateFile {
                name: "schema.json".into(),
                contents: schema.schema_json.as_bytes().to_vec(),
            });
            args.extend([
                "--json-schema".to_owned(),
                format!("{}/schema.json", self.request.private_dir),
            ]);
        }
        if !self.request.mcp_servers.is_empty() {
            let (file, path) =
                adaptor_sdk::mcp::config_file(&self.request.mcp_servers, &self.request.private_dir);
            files.push(file);
            args.extend(["--mcp-config".to_owned(), path]);
        }
        if let Some(extra) = cfg.get("extra_args").and_then(Value::as_array) {
            args.extend(extra.iter().filter_map(Value::as_str).map(str::to_owned));
        }
        let policy = &self.request.policy;
        self.asks = [policy.permission, policy.plan_review, policy.question]
            .iter()
            .any(|m| *m != DecisionMode::Inherit);
        let stdio = self.asks || self.steerable || str_field(cfg, "transport") == Some("stdio");
        self.stdio = stdio;
        let stdin = if stdio {
            // The provider asks over stdin; the prompt travels as the first frame.
            args.extend(["--approvals".to_owned(), "stdio".to_owned()]);
            let mut frame = json!({"text": self.request.prompt, "type": "user"}).to_string();
            frame.push('\n');
            frame.into_bytes()
        } else {
            self.request.prompt.as_bytes().to_vec()
        };
        let program = str_field(cfg, "command")
            .unwrap_or("reference-provider")
            .to_owned();
        Ok(Launch {
            program,
            args,
            env: Vec::new(),
            cwd: None,
            stdin,
            keep_stdin_open: stdio,
            files,
        })
    }

    fn on_decision(&mut self, id: &str, decision: Decision, out: &mut Actions) {
        let mut line = self.response(id, decision).to_string();
        line.push('\n');
        out.write_stdin(line.into_bytes());
    }

    fn on_stdout(&mut self, chunk: &[u8], out: &mut Actions) {
        for line in self.stdout.push(chunk) {
            self.handle_line(line, out);
        }
    }

    fn on_stderr(&mut self, chunk: &[u8], out: &mut Actions) {
        let lines = self.stderr.push(chunk);
        self.transcript
            .push_text_lines(ItemKind::Stderr, lines, out);
    }

    fn on_exit(&mut self, status: &ExitStatus, out: &mut Actions) {
        if let Some(rest) = self.stdout.finish() {
            if self.terminal.is_none() {
                self.malformed.get_or_insert("truncated last line".into());
            } else {
                self.handle_line(rest, out);
            }
        }
        if let Some(rest) = self.stderr.finish() {
            self.transcript
                .push_text_lines(ItemKind::Stderr, vec![rest], out);
        }
        // Close whatever a crash left open so every lifecycle ends.
        self.close_part(true, out);
        self.close_part(false, out);
        self.status = Some(*status);
    }

    fn finish(&mut self) -> Outcome {
        let failure = self.failure();
        let checkpoint = self.session_id.clone().map(|id| {
            let valid = failure.is_none()
                && self.result_success
                && self.result_session_id.as_deref() == Some(id.as_str());
            Checkpoint {
                state: SessionState {
                    resume_id: id,
                    display_id: None,
                    data: vec![("cwd".into(), self.request.workspace.clone())],
                },
                valid,
            }
        });
        let mut outcome = empty_outcome();
        outcome.text = self.replies.join("\n\n");
        outcome.summary = self.summary.clone();
        outcome.transcript = self.transcript.to_vec();
        outcome.terminal = self.terminal.clone();
        outcome.usage = self.usage;
        outcome.model = self.model.clone();
        outcome.checkpoint = checkpoint;
        outcome.structured_output = self.structured.clone();
        outcome.failure = failure;
        outcome
    }
}

#[cfg(all(target_family = "wasm", feature = "component"))]
adaptor_sdk::export_driver!(ReferenceDriver);

#[cfg(test)]
mod tests;
