//! The stream-json mapping: one [`ClaudeSession`] per run turns the CLI's stdout frames into
//! events, transcript items, usage and the outcome.
//!
//! Frames: `system` (`init` → session, model and the CLI's `capabilities`; `api_retry` →
//! notice; `permission_denied` → notice; `session_state_changed` → the turn's end; others →
//! vendor events), `assistant` (content blocks text / thinking / tool_use, each usually in its
//! own frame sharing `message.id`; usage de-duplicated per message id), `user` (tool
//! results), `stream_event` (with `--include-partial-messages`: token deltas, thinking
//! deltas, tool argument deltas), `control_request` (approvals, see `control.rs`),
//! `conversation_reset` (the session id changes at the next `system/init`), `result` (the
//! turn's result: summary, usage, cost, structured output, success or error — one turn may
//! produce several, see below). Subagent messages are scoped by `parent_tool_use_id`.
//!
//! **The end of a turn.** The launch asks for session-state frames
//! (`CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS=1`); a CLI that sends them says `running` before
//! its first `system/init`, and `idle` once every result of the turn was written — after
//! background subagents finished and held-back results were flushed, which may be several
//! `result` frames. With those frames the turn ends at `idle`; without them (a caller turned
//! them off, an older CLI) it ends at the first `result`. Must not: do I/O or decide policy.

use std::collections::{BTreeMap, HashSet};
use std::marker::PhantomData;

use adaptor_sdk::json::{JsonLine, describe_exit, json_line, str_field, u64_field};
use adaptor_sdk::{
    Actions, Checkpoint, Decision, ExitStatus, Failure, FailureReason, InputError, ItemKind,
    Launch, Line, LineFramer, Outcome, RunRequest, Scope, Session, SessionState, StartError,
    TerminalPayload, Transcript, TurnRequest, Usage, empty_outcome, items,
};
use serde_json::{Value, json};

use crate::control::{Controls, Incoming};
use crate::dialect::{ClaudeCode, Dialect, INITIALIZE_REQUEST_ID, Transport, ndjson, user_frame};

/// A content block being streamed (`stream_event`).
struct OpenBlock {
    scope: Scope,
    index: u64,
    kind: BlockKind,
}

enum BlockKind {
    Text {
        id: String,
        text: String,
    },
    Thinking {
        id: String,
        text: String,
    },
    Tool {
        id: String,
        name: String,
        args: String,
    },
    Other,
}

/// The latest `result` frame's facts.
struct ResultFrame {
    success: bool,
    session_id: Option<String>,
}

/// Token and cost totals of a `modelUsage`-shaped object (`{<model>: {inputTokens, …,
/// costUSD}}`), summed over its models.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Totals {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
    cost: f64,
}

impl Totals {
    /// The sum over the models of `value`; `None` when it is not an object.
    fn of(value: &Value) -> Option<Totals> {
        let models = value.as_object()?;
        let mut t = Totals::default();
        for m in models.values() {
            t.input += u64_field(m, "inputTokens").unwrap_or(0);
            t.output += u64_field(m, "outputTokens").unwrap_or(0);
            t.cache_read += u64_field(m, "cacheReadInputTokens").unwrap_or(0);
            t.cache_write += u64_field(m, "cacheCreationInputTokens").unwrap_or(0);
            t.cost += m.get("costUSD").and_then(Value::as_f64).unwrap_or(0.0);
        }
        Some(t)
    }

    fn plus(self, o: Totals) -> Totals {
        Totals {
            input: self.input + o.input,
            output: self.output + o.output,
            cache_read: self.cache_read + o.cache_read,
            cache_write: self.cache_write + o.cache_write,
            cost: self.cost + o.cost,
        }
    }

    /// `self - earlier`, or `self` when a counter went down (the CLI restarted its totals,
    /// e.g. after `/clear`).
    fn since(self, earlier: Totals) -> Totals {
        if self.input < earlier.input
            || self.output < earlier.output
            || self.cache_read < earlier.cache_read
            || self.cache_write < earlier.cache_write
            || self.cost < earlier.cost
        {
            return self;
        }
        Totals {
            input: self.input - earlier.input,
            output: self.output - earlier.output,
            cache_read: self.cache_read - earlier.cache_read,
            cache_write: self.cache_write - earlier.cache_write,
            cost: self.cost - earlier.cost,
        }
    }

    fn usage(self) -> Usage {
        Usage {
            input_tokens: Some(self.input),
            output_tokens: Some(self.output),
            cache_read_tokens: Some(self.cache_read),
            cache_write_tokens: Some(self.cache_write),
            reasoning_tokens: None,
            cost_usd: Some(self.cost),
        }
    }

    fn json(self, basis: &str) -> Value {
        json!({
            "input_tokens": self.input,
            "output_tokens": self.output,
            "cache_read_tokens": self.cache_read,
            "cache_write_tokens": self.cache_write,
            "cost_usd": self.cost,
            "basis": basis,
        })
    }
}

/// How the turn's usage was computed (the outcome's `usage_source` metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UsageSource {
    /// The sum of the turn's results' `model_usage_since_last_result` (Claude Code 2.1.332:
    /// per result, never carried across processes — the value meant to be summed).
    SinceLastResult,
    /// The last result's `modelUsage` minus the totals this process reported at the end of
    /// its previous turn (2.1.197: `modelUsage` counts the process's calls, subagents
    /// included).
    ModelUsageDelta,
    /// The last result's `usage` and `total_cost_usd` (a CLI reporting neither).
    ResultUsage,
    /// The sum over the turn's assistant messages (a dialect whose result totals are the
    /// session's, or no result).
    AssistantMessages,
}

impl UsageSource {
    fn as_str(self) -> &'static str {
        match self {
            UsageSource::SinceLastResult => "model_usage_since_last_result",
            UsageSource::ModelUsageDelta => "model_usage_delta",
            UsageSource::ResultUsage => "result_usage",
            UsageSource::AssistantMessages => "assistant_messages",
        }
    }
}

/// What one CLI process has told so far, carried from turn to turn of a resident process.
#[derive(Debug, Clone, Default)]
struct ProcessFacts {
    /// The CLI sends `system/session_state_changed` frames (seen at least once).
    state_events: bool,
    /// `system/init.capabilities` (Claude Code 2.1.332+): an open set of protocol features.
    capabilities: Vec<String>,
    /// `result_index` of the last result read (numbered per process).
    last_result_index: Option<u64>,
    /// The `modelUsage` totals of the last result read (the baseline of the next turn).
    model_usage: Option<Totals>,
}

/// The Claude Code session (the stream-json mapping in Claude Code's dialect).
pub type ClaudeSession = StreamJsonSession<ClaudeCode>;

/// Longest whole-document output (`--output-format json`) read, in bytes.
const MAX_WHOLE_JSON: usize = 32 * 1024 * 1024;

/// State of one turn of a CLI speaking the stream-json protocol in dialect `D`.
pub struct StreamJsonSession<D: Dialect> {
    request: RunRequest,
    config: Value,
    transport: Transport,
    stdout: LineFramer,
    stderr: LineFramer,
    transcript: Transcript,
    controls: Controls,
    session_id: Option<String>,
    model: Option<String>,
    /// Assistant text blocks (top level), joined for the run's text.
    texts: Vec<String>,
    /// Latest usage per message id (cumulative counters repeat across frames of a message).
    usage_by_message: BTreeMap<String, Usage>,
    /// Messages whose blocks were streamed as `stream_event`s already.
    streamed: HashSet<String>,
    /// Content blocks seen per message id in `assistant` frames (each frame usually carries
    /// one block of the message; this numbers them).
    blocks_seen: BTreeMap<String, usize>,
    /// Current message id per scope (from `message_start`).
    current_message: BTreeMap<Option<String>, String>,
    open_blocks: Vec<OpenBlock>,
    /// Tool calls without a result yet.
    open_tools: Vec<String>,
    usage: Option<Usage>,
    summary: Option<String>,
    /// The latest result of the turn (a turn may write several).
    result: Option<ResultFrame>,
    /// The latest result's exact line.
    terminal: Option<TerminalPayload>,
    /// `EndTurn` was returned: only `system` frames may follow.
    turn_over: bool,
    process: ProcessFacts,
    /// The `modelUsage` totals of this process before the turn began.
    baseline: Option<Totals>,
    /// The sum of the turn's results' `model_usage_since_last_result`, when they carry it.
    since_last: Option<Totals>,
    usage_source: Option<UsageSource>,
    /// The latest result's `modelUsage` totals (cumulative: see `cumulative_basis`).
    cumulative: Option<Totals>,
    structured: Option<String>,
    error: Option<(FailureReason, String, Option<String>)>,
    malformed: Option<String>,
    status: Option<ExitStatus>,
    /// The prompt's `user` frame, held back until the `initialize` handshake is answered.
    pending_prompt: Option<Value>,
    /// Stdout of a whole-document (`--output-format json`) run.
    whole: Vec<u8>,
    /// The caller may add input while the turn runs (stream-json input, stdin open).
    steerable: bool,
    dialect: PhantomData<D>,
}

fn scope_of(frame: &Value) -> Scope {
    Scope {
        parent_tool_call_id: str_field(frame, "parent_tool_use_id").map(str::to_owned),
    }
}

fn scoped(mut item: adaptor_sdk::TranscriptItem, scope: &Scope) -> adaptor_sdk::TranscriptItem {
    item.scope = scope.clone();
    item
}

/// Claude's usage object → the contract's usage (absent counters stay absent).
pub fn usage_of(u: &Value) -> Usage {
    Usage {
        input_tokens: u64_field(u, "input_tokens"),
        output_tokens: u64_field(u, "output_tokens"),
        cache_read_tokens: u64_field(u, "cache_read_input_tokens")
            .or_else(|| u64_field(u, "cached_input_tokens")),
        cache_write_tokens: u64_field(u, "cache_creation_input_tokens"),
        reasoning_tokens: None,
        cost_usd: None,
    }
}

fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

/// Text of a `tool_result` block's `content` (a string or a list of text blocks).
fn tool_result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| str_field(b, "text"))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

impl<D: Dialect> StreamJsonSession<D> {
    /// A fresh turn state for `request`, whose config is already parsed as `config`.
    fn with_config(request: RunRequest, config: Value) -> Self {
        Self {
            request,
            config,
            transport: Transport::default(),
            stdout: LineFramer::default(),
            stderr: LineFramer::new(64 * 1024),
            transcript: Transcript::default(),
            controls: Controls::default(),
            session_id: None,
            model: None,
            texts: Vec::new(),
            usage_by_message: BTreeMap::new(),
            streamed: HashSet::new(),
            blocks_seen: BTreeMap::new(),
            current_message: BTreeMap::new(),
            open_blocks: Vec::new(),
            open_tools: Vec::new(),
            usage: None,
            summary: None,
            result: None,
            terminal: None,
            turn_over: false,
            process: ProcessFacts::default(),
            baseline: None,
            since_last: None,
            usage_source: None,
            cumulative: None,
            structured: None,
            error: None,
            malformed: None,
            status: None,
            pending_prompt: None,
            whole: Vec::new(),
            steerable: false,
            dialect: PhantomData,
        }
    }

    fn handle_line(&mut self, line: Line, out: &mut Actions) {
        let (frame, text) = match json_line(line) {
            JsonLine::Blank => return,
            JsonLine::Oversized(problem) | JsonLine::Malformed(problem) => {
                self.malformed.get_or_insert(problem);
                return;
            }
            JsonLine::Text(text) => {
                self.transcript
                    .push(items::text(ItemKind::Stdout, &text), out);
                return;
            }
            JsonLine::Object(frame, text) => (frame, text),
        };
        self.handle_frame(frame, text, out);
    }

    fn handle_frame(&mut self, frame: Value, text: String, out: &mut Actions) {
        let kind = str_field(&frame, "type").unwrap_or_default().to_owned();
        if self.turn_over && kind != "system" {
            self.malformed
                .get_or_insert(format!("`{kind}` frame after the end of the turn"));
            return;
        }
        if let Some(id) = str_field(&frame, "session_id").filter(|id| !id.is_empty())
            && self.session_id.is_none()
        {
            self.session_id = Some(id.to_owned());
        }
        match kind.as_str() {
            "system" => self.on_system(&frame, &text, out),
            "assistant" => self.on_assistant(&frame, out),
            "user" => self.on_user(&frame, out),
            "stream_event" => self.on_stream_event(&frame, out),
            "control_request" => self.on_control_request(&frame, out),
            "control_response" => self.on_control_response(&frame, &text, out),
            // A request the CLI withdrew (it answered itself); nothing to map.
            "control_cancel_request" => out.vendor(&kind, &text),
            "result" => self.on_result(&frame, &text, out),
            "conversation_reset" => self.on_conversation_reset(&frame, &text, out),
            "error" => {
                let message = str_field(&frame, "message")
                    .or_else(|| str_field(&frame, "error"))
                    .unwrap_or("the CLI reported an error")
                    .to_owned();
                let mut item = items::text(ItemKind::Failure, &message);
                item.is_error = true;
                self.transcript.push(item, out);
                self.error
                    .get_or_insert((FailureReason::AgentError, message, None));
            }
            _ => {
                out.vendor(&kind, &text);
                let mut item = items::text(ItemKind::System, &text);
                item.data_json = Some(text.clone());
                self.transcript.push(item, out);
            }
        }
    }

    fn on_system(&mut self, frame: &Value, raw: &str, out: &mut Actions) {
        match str_field(frame, "subtype") {
            Some("init") => {
                // The session of this turn: after a `conversation_reset` (`/clear`) the CLI
                // continues in a new session, which the next `init` names.
                if let Some(id) = str_field(frame, "session_id").filter(|id| !id.is_empty()) {
                    self.session_id = Some(id.to_owned());
                }
                if let Some(caps) = frame.get("capabilities").and_then(Value::as_array) {
                    self.process.capabilities = caps
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect();
                }
                let model = str_field(frame, "model").map(str::to_owned);
                if model.is_some() {
                    self.model = model.clone();
                }
                out.session(self.session_id.clone(), model.clone());
                let mut item = items::blank(ItemKind::Init);
                item.session_id = self.session_id.clone();
                item.model = model;
                let data: serde_json::Map<String, Value> = [
                    "cwd",
                    "permissionMode",
                    "claude_code_version",
                    "apiKeySource",
                    "capabilities",
                    "skills",
                    "plugins",
                ]
                .iter()
                .filter_map(|k| frame.get(*k).map(|v| ((*k).to_owned(), v.clone())))
                .collect();
                item.data_json = Some(Value::Object(data).to_string());
                self.transcript.push(item, out);
                // A plugin (the host's skill bundle among them) the CLI could not load is
                // reported here only: surface it rather than run without the skills.
                if let Some(errors) = frame
                    .get("plugin_errors")
                    .and_then(Value::as_array)
                    .filter(|e| !e.is_empty())
                {
                    out.notice(
                        "plugin-errors",
                        &format!("Claude Code could not load {} plugin(s)", errors.len()),
                        Some(Value::Array(errors.clone()).to_string()),
                    );
                }
            }
            Some("api_retry") => {
                let status = frame.get("error_status").map(Value::to_string);
                let message = format!(
                    "API error {} ({}); retry {} of {} in {} ms",
                    status.as_deref().unwrap_or("?"),
                    str_field(frame, "error").unwrap_or("unknown"),
                    u64_field(frame, "attempt").unwrap_or(0),
                    u64_field(frame, "max_retries").unwrap_or(0),
                    frame
                        .get("retry_delay_ms")
                        .and_then(Value::as_f64)
                        .unwrap_or(0.0)
                        .round()
                );
                out.notice("api-retry", &message, Some(raw.to_owned()));
            }
            Some("permission_denied") => {
                // Advisory (the result's `permission_denials` is the record): a tool the CLI
                // refused without asking anyone (2.1.332 also reports implicit denials).
                let tool = str_field(frame, "tool_name").unwrap_or("a tool");
                let message = str_field(frame, "message")
                    .or_else(|| str_field(frame, "decision_reason"))
                    .map_or_else(
                        || format!("{} denied {tool}", D::PRODUCT),
                        |m| format!("{tool}: {m}"),
                    );
                out.notice("permission-denied", &message, Some(raw.to_owned()));
            }
            Some("session_state_changed") => {
                self.process.state_events = true;
                out.vendor("system", raw);
                // `idle` is the authoritative end of the turn: every result is written and
                // the background work the CLI waits for is done.
                if str_field(frame, "state") == Some("idle")
                    && self.result.is_some()
                    && !self.turn_over
                {
                    self.end_turn(out);
                }
            }
            _ => out.vendor("system", raw),
        }
    }

    /// `/clear`, plan-mode exit or a fresh session: the CLI goes on in a new session, whose
    /// id the next `system/init` carries (`new_conversation_id` is not that id).
    fn on_conversation_reset(&mut self, frame: &Value, raw: &str, out: &mut Actions) {
        let trigger = str_field(frame, "trigger").unwrap_or("unknown");
        out.notice(
            "conversation-reset",
            &format!(
                "{} started a new conversation ({trigger}); the session id changes",
                D::PRODUCT
            ),
            Some(raw.to_owned()),
        );
        let mut item = items::text(ItemKind::System, raw);
        item.data_json = Some(raw.to_owned());
        self.transcript.push(item, out);
    }

    fn end_turn(&mut self, out: &mut Actions) {
        self.turn_over = true;
        out.end_turn();
    }

    fn on_assistant(&mut self, frame: &Value, out: &mut Actions) {
        let scope = scope_of(frame);
        let message = frame.get("message").unwrap_or(&Value::Null);
        let message_id = str_field(message, "id").unwrap_or("message").to_owned();
        if let Some(model) = str_field(message, "model").filter(|m| !m.starts_with('<')) {
            self.model = Some(model.to_owned());
        }
        let streamed = self.streamed.contains(&message_id);
        let blocks = message
            .get("content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for block in &blocks {
            let seen = self.blocks_seen.entry(message_id.clone()).or_default();
            let part_id = format!("{message_id}-{seen}");
            *seen += 1;
            match str_field(block, "type") {
                Some("text") => {
                    let text = str_field(block, "text").unwrap_or_default();
                    if !streamed {
                        out.text_start(&part_id, &scope);
                        out.text_delta(&part_id, text, &scope);
                        out.text_end(&part_id, &scope);
                    }
                    if scope.parent_tool_call_id.is_none() && !text.is_empty() {
                        self.texts.push(text.to_owned());
                    }
                    self.transcript
                        .push(scoped(items::text(ItemKind::Assistant, text), &scope), out);
                }
                Some("thinking") | Some("redacted_thinking") => {
                    let text = str_field(block, "thinking")
                        .or_else(|| str_field(block, "text"))
                        .unwrap_or_default();
                    if !streamed {
                        let id = format!("thinking-{part_id}");
                        out.thinking_start(&id, &scope);
                        out.thinking_delta(&id, text, &scope);
                        out.thinking_end(&id, &scope);
                    }
                    self.transcript
                        .push(scoped(items::text(ItemKind::Thinking, text), &scope), out);
                }
                Some("tool_use") => {
                    let id = str_field(block, "id").unwrap_or_default().to_owned();
                    let mut name = str_field(block, "name").unwrap_or_default().to_owned();
                    let unwrapped = block
                        .get("input")
                        .and_then(|input| D::unwrap_tool(&name, input));
                    let block = &match unwrapped {
                        Some((inner, input)) => {
                            name = inner;
                            json!({ "input": input })
                        }
                        None => block.clone(),
                    };
                    if id.is_empty() || name.is_empty() {
                        self.malformed
                            .get_or_insert("tool_use block without id or name".into());
                        continue;
                    }
                    if let Some(dir) = D::PLAN_DIR
                        && name == "Write"
                        && let Some(input) = block.get("input")
                        && str_field(input, "file_path").is_some_and(|p| p.contains(dir))
                    {
                        self.controls.plan = str_field(input, "content").map(str::to_owned);
                    }
                    let input = block.get("input").map(Value::to_string);
                    if !streamed {
                        out.tool_start(&id, &name, input.clone(), &scope);
                        out.tool_end(&id, &name, input.clone(), &scope);
                    }
                    if !self.open_tools.contains(&id) {
                        self.open_tools.push(id.clone());
                    }
                    self.transcript
                        .push(scoped(items::tool_call(&id, &name, input), &scope), out);
                }
                _ => {}
            }
        }
        if let Some(u) = message.get("usage").filter(|u| u.is_object()) {
            self.usage_by_message.insert(message_id, usage_of(u));
            let total = self.usage_by_message.values().fold(
                Usage {
                    input_tokens: None,
                    output_tokens: None,
                    cache_read_tokens: None,
                    cache_write_tokens: None,
                    reasoning_tokens: None,
                    cost_usd: None,
                },
                |acc, u| Usage {
                    input_tokens: add(acc.input_tokens, u.input_tokens),
                    output_tokens: add(acc.output_tokens, u.output_tokens),
                    cache_read_tokens: add(acc.cache_read_tokens, u.cache_read_tokens),
                    cache_write_tokens: add(acc.cache_write_tokens, u.cache_write_tokens),
                    reasoning_tokens: None,
                    cost_usd: None,
                },
            );
            if self.usage != Some(total) {
                self.usage = Some(total);
                out.usage(total);
            }
        }
    }

    fn on_user(&mut self, frame: &Value, out: &mut Actions) {
        if frame.get("isReplay").and_then(Value::as_bool) == Some(true) {
            return;
        }
        let scope = scope_of(frame);
        let content = frame
            .get("message")
            .and_then(|m| m.get("content"))
            .cloned()
            .unwrap_or(Value::Null);
        let blocks = match content {
            Value::Array(blocks) => blocks,
            Value::String(text) => {
                self.transcript
                    .push(scoped(items::text(ItemKind::User, &text), &scope), out);
                return;
            }
            _ => return,
        };
        for block in &blocks {
            match str_field(block, "type") {
                Some("tool_result") => {
                    let id = str_field(block, "tool_use_id")
                        .unwrap_or_default()
                        .to_owned();
                    let output = tool_result_text(block.get("content"));
                    let is_error = block
                        .get("is_error")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    self.open_tools.retain(|open| *open != id);
                    out.tool_result(&id, &output, is_error, &scope);
                    self.transcript.push(
                        scoped(items::tool_result(&id, &output, is_error), &scope),
                        out,
                    );
                }
                Some("text") => {
                    let text = str_field(block, "text").unwrap_or_default();
                    self.transcript
                        .push(scoped(items::text(ItemKind::User, text), &scope), out);
                }
                _ => {}
            }
        }
    }

    fn on_stream_event(&mut self, frame: &Value, out: &mut Actions) {
        let scope = scope_of(frame);
        let event = frame.get("event").unwrap_or(&Value::Null);
        let index = u64_field(event, "index").unwrap_or(0);
        let key = scope.parent_tool_call_id.clone();
        match str_field(event, "type") {
            Some("message_start") => {
                let id = event
                    .get("message")
                    .and_then(|m| str_field(m, "id"))
                    .unwrap_or("message")
                    .to_owned();
                self.streamed.insert(id.clone());
                self.current_message.insert(key, id);
            }
            Some("content_block_start") => {
                let message = self
                    .current_message
                    .get(&key)
                    .cloned()
                    .unwrap_or_else(|| "message".into());
                let block = event.get("content_block").unwrap_or(&Value::Null);
                let part_id = format!("{message}-{index}");
                let kind = match str_field(block, "type") {
                    Some("text") => {
                        out.text_start(&part_id, &scope);
                        BlockKind::Text {
                            id: part_id,
                            text: String::new(),
                        }
                    }
                    Some("thinking") | Some("redacted_thinking") => {
                        let id = format!("thinking-{part_id}");
                        out.thinking_start(&id, &scope);
                        BlockKind::Thinking {
                            id,
                            text: String::new(),
                        }
                    }
                    Some("tool_use") => {
                        let id = str_field(block, "id").unwrap_or(&part_id).to_owned();
                        let name = str_field(block, "name").unwrap_or("tool").to_owned();
                        out.tool_start(&id, &name, None, &scope);
                        BlockKind::Tool {
                            id,
                            name,
                            args: String::new(),
                        }
                    }
                    _ => BlockKind::Other,
                };
                self.open_blocks.push(OpenBlock { scope, index, kind });
            }
            Some("content_block_delta") => {
                let delta = event.get("delta").unwrap_or(&Value::Null);
                let Some(block) = self
                    .open_blocks
                    .iter_mut()
                    .find(|b| b.index == index && b.scope == scope)
                else {
                    return;
                };
                match (&mut block.kind, str_field(delta, "type")) {
                    (BlockKind::Text { id, text }, Some("text_delta")) => {
                        let piece = str_field(delta, "text").unwrap_or_default();
                        text.push_str(piece);
                        out.text_delta(id, piece, &scope);
                    }
                    (BlockKind::Thinking { id, text }, Some("thinking_delta")) => {
                        let piece = str_field(delta, "thinking").unwrap_or_default();
                        text.push_str(piece);
                        out.thinking_delta(id, piece, &scope);
                    }
                    (BlockKind::Tool { id, name, args }, Some("input_json_delta")) => {
                        let piece = str_field(delta, "partial_json").unwrap_or_default();
                        args.push_str(piece);
                        out.tool_args_delta(id, name, piece, &scope);
                    }
                    _ => {}
                }
            }
            Some("content_block_stop") => {
                if let Some(at) = self
                    .open_blocks
                    .iter()
                    .position(|b| b.index == index && b.scope == scope)
                {
                    let block = self.open_blocks.remove(at);
                    close_block(block, out);
                }
            }
            _ => {}
        }
    }

    fn on_control_request(&mut self, frame: &Value, out: &mut Actions) {
        match self.controls.on_request::<D>(frame) {
            Ok(Incoming::Ask(request)) => out.request_approval(request),
            Ok(Incoming::Reply(frame)) => out.write_stdin(ndjson(&frame)),
            Err(problem) => {
                self.malformed.get_or_insert(problem);
            }
        }
    }

    /// The whole stdout of an `--output-format json` run: one result object, or an array
    /// of history records ending in the result (CodeBuddy Code). Assistant messages give the
    /// text; every other record is kept as a vendor event.
    fn read_whole_document(&mut self, out: &mut Actions) {
        let bytes = std::mem::take(&mut self.whole);
        let document: Value = match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => {
                self.malformed
                    .get_or_insert(format!("the JSON output does not parse: {e}"));
                return;
            }
        };
        let records = match document {
            Value::Array(records) => records,
            object @ Value::Object(_) => vec![object],
            other => {
                self.malformed.get_or_insert(format!(
                    "the JSON output is neither an object nor an array: {}",
                    adaptor_sdk::json::prefix(&other.to_string(), 80)
                ));
                return;
            }
        };
        let scope = adaptor_sdk::top_scope();
        for record in records {
            let text = record.to_string();
            let kind = str_field(&record, "type").unwrap_or_default();
            let role = str_field(&record, "role").unwrap_or_default();
            if kind == "result" {
                self.handle_frame(record, text, out);
            } else if kind == "message" && role == "assistant" {
                let id = str_field(&record, "id").unwrap_or("message").to_owned();
                let blocks = record.get("content").and_then(Value::as_array);
                for (i, block) in blocks.into_iter().flatten().enumerate() {
                    let Some(piece) = str_field(block, "text").filter(|t| !t.is_empty()) else {
                        continue;
                    };
                    let part_id = format!("{id}-{i}");
                    out.text_start(&part_id, &scope);
                    out.text_delta(&part_id, piece, &scope);
                    out.text_end(&part_id, &scope);
                    self.texts.push(piece.to_owned());
                    self.transcript
                        .push(items::text(ItemKind::Assistant, piece), out);
                }
            } else {
                let name = if kind == "message" {
                    format!("message/{role}")
                } else {
                    kind.to_owned()
                };
                out.vendor(&name, &text);
            }
        }
    }

    /// An answer to a control request of this driver's: the `initialize` handshake releases
    /// the held-back prompt; anything else has nothing to map.
    fn on_control_response(&mut self, frame: &Value, raw: &str, out: &mut Actions) {
        let response = frame.get("response").unwrap_or(&Value::Null);
        if str_field(response, "request_id") != Some(INITIALIZE_REQUEST_ID) {
            out.vendor("control_response", raw);
            return;
        }
        out.vendor("control_response", raw);
        let Some(prompt) = self.pending_prompt.take() else {
            return;
        };
        let applied = response
            .get("response")
            .and_then(|r| r.get("mcp_servers_applied"))
            .and_then(Value::as_bool);
        if str_field(response, "subtype") == Some("success")
            && self.transport.mcp_in_initialize
            && applied != Some(true)
        {
            self.error.get_or_insert((
                FailureReason::AgentError,
                format!(
                    "{} did not apply the MCP servers sent with `initialize` (mcp_servers_applied \
                     is {}): stdin delivery needs Claude Code 2.1.332 or later; use \
                     `mcp_delivery: file`",
                    D::PRODUCT,
                    applied.map_or_else(|| "absent".to_owned(), |a| a.to_string())
                ),
                None,
            ));
            out.close_stdin();
        } else if str_field(response, "subtype") == Some("success") {
            out.write_stdin(ndjson(&prompt));
        } else {
            let message = str_field(response, "error").unwrap_or("no reason given");
            self.error.get_or_insert((
                FailureReason::AgentError,
                format!("{} refused the initialize request: {message}", D::PRODUCT),
                None,
            ));
            out.close_stdin();
        }
    }

    fn on_result(&mut self, frame: &Value, raw: &str, out: &mut Actions) {
        for block in std::mem::take(&mut self.open_blocks) {
            close_block(block, out);
        }
        let subtype = str_field(frame, "subtype").unwrap_or("unknown").to_owned();
        let is_error = frame
            .get("is_error")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let success = subtype == "success" && !is_error;
        let session_id = str_field(frame, "session_id").map(str::to_owned);
        let text = str_field(frame, "result").map(str::to_owned);
        if let Some(index) = u64_field(frame, "result_index") {
            // Numbered per process from 0; a gap means the CLI failed to write a result.
            let expected = self.process.last_result_index.map_or(0, |i| i + 1);
            if index > expected {
                out.notice(
                    "result-lost",
                    &format!(
                        "{} numbered this result {index}, but the one before it that was read is {}: {} result(s) never arrived",
                        D::PRODUCT,
                        self.process
                            .last_result_index
                            .map_or_else(|| "none".to_owned(), |i| i.to_string()),
                        index - expected
                    ),
                    None,
                );
            }
            self.process.last_result_index = Some(index);
        }
        if success {
            self.summary = text.clone();
        } else {
            let message = match text.as_deref().filter(|t| !t.is_empty()) {
                Some(t) => t.to_owned(),
                None => match frame.get("errors").and_then(Value::as_array) {
                    // CodeBuddy Code puts the reason in `errors` and leaves `result` null.
                    Some(errors) if !errors.is_empty() => errors
                        .iter()
                        .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
                        .collect::<Vec<_>>()
                        .join("; "),
                    _ => format!("{} ended the turn with `{subtype}`", D::PRODUCT),
                },
            };
            let field = |k: &str| frame.get(k).cloned().unwrap_or(Value::Null);
            let details = json!({
                "subtype": subtype,
                "terminal_reason": field("terminal_reason"),
                "api_error_status": field("api_error_status"),
                "api_error_type": field("api_error_type"),
                "permission_denials": field("permission_denials"),
            });
            self.error.get_or_insert((
                result_failure_reason(frame, &subtype),
                message,
                Some(details.to_string()),
            ));
        }
        self.account_usage(frame, out);
        if let Some(structured) = frame.get("structured_output").filter(|v| !v.is_null()) {
            self.structured = Some(structured.to_string());
        }
        let mut item = items::blank(ItemKind::Result);
        item.text = text;
        item.is_error = !success;
        item.session_id = session_id.clone();
        item.model = self.model.clone();
        self.transcript.push(item, out);
        self.result = Some(ResultFrame {
            success,
            session_id,
        });
        self.terminal = Some(TerminalPayload {
            event: "result".into(),
            json: raw.trim_end_matches(['\r', '\n']).to_owned(),
        });
        // With session-state frames the turn ends at `idle` (more results may follow: held
        // back while background subagents ran); without them, here.
        if !self.process.state_events {
            self.end_turn(out);
        }
    }

    /// The turn's usage after a result: see [`UsageSource`] for the order of preference.
    fn account_usage(&mut self, frame: &Value, out: &mut Actions) {
        if D::RESULT_USAGE_IS_SESSION_TOTAL {
            self.usage_source = self.usage.map(|_| UsageSource::AssistantMessages);
            return;
        }
        let model_usage = frame.get("modelUsage").and_then(Totals::of);
        if let Some(since) = frame
            .get("model_usage_since_last_result")
            .and_then(Totals::of)
        {
            self.since_last = Some(self.since_last.unwrap_or_default().plus(since));
        }
        // A CLI announcing capabilities carries `modelUsage` across resumed processes, so a
        // difference against this process's baseline would count earlier turns again.
        let delta_is_sound = self.process.capabilities.is_empty();
        let (usage, source) = if let Some(since) = self.since_last {
            (since.usage(), UsageSource::SinceLastResult)
        } else if let Some(total) = model_usage.filter(|_| delta_is_sound) {
            (
                total.since(self.baseline.unwrap_or_default()).usage(),
                UsageSource::ModelUsageDelta,
            )
        } else if let Some(u) = frame.get("usage").filter(|u| u.is_object()) {
            let mut usage = usage_of(u);
            usage.cost_usd = frame.get("total_cost_usd").and_then(Value::as_f64);
            (usage, UsageSource::ResultUsage)
        } else {
            return;
        };
        if let Some(total) = model_usage {
            self.cumulative = Some(total);
            self.process.model_usage = Some(total);
        }
        self.usage_source = Some(source);
        if self.usage != Some(usage) {
            self.usage = Some(usage);
            out.usage(usage);
        }
    }

    fn failure(&self) -> Option<Failure> {
        let fail = |reason, message: String, details_json: Option<String>| {
            Some(Failure {
                reason,
                message,
                details_json,
            })
        };
        let status = self.status.as_ref();
        if let Some(stopped) = adaptor_sdk::stopped_by_host(status) {
            return Some(stopped);
        }
        if let Some((reason, message, details)) = &self.error {
            // A refusal this driver sent with `interrupt` is why the turn ended.
            let reason = self.controls.refusal.clone().unwrap_or(reason.clone());
            return fail(reason, message.clone(), details.clone());
        }
        if let Some(problem) = &self.malformed {
            return fail(FailureReason::ProtocolError, problem.clone(), None);
        }
        if self.terminal.is_none() {
            let reason = self
                .controls
                .refusal
                .clone()
                .unwrap_or(FailureReason::AgentError);
            return fail(
                reason,
                format!(
                    "{} {} before its result frame",
                    D::PRODUCT,
                    describe_exit(status)
                ),
                None,
            );
        }
        match status {
            Some(s) if s.code == Some(0) && s.signal.is_none() => None,
            // A resident turn: the result frame ended it and the CLI waits for the next one.
            None => None,
            other => fail(
                FailureReason::AgentError,
                format!("{} {}", D::PRODUCT, describe_exit(other)),
                None,
            ),
        }
    }
}

/// Why a failing `result` failed, as a typed reason: the result's subtype and Claude Code's
/// `terminal_reason` (2.1.332), then the API error's `api_error_type` (2.1.332) or HTTP
/// status. Names the host knows (`max_turns`, `budget_exhausted`, `invalid_output`,
/// `context_limit`, `rate_limited`, `overloaded`, `authentication_failed`) become its typed
/// reasons; anything else is `agent_error` with the details.
pub(crate) fn result_failure_reason(frame: &Value, subtype: &str) -> FailureReason {
    let named = |name: &str| FailureReason::Other(name.to_owned());
    let terminal = str_field(frame, "terminal_reason").unwrap_or_default();
    match (subtype, terminal) {
        ("error_max_turns", _) | (_, "max_turns") => return named("max_turns"),
        ("error_max_budget_usd", _) | (_, "budget_exhausted") => {
            return named("budget_exhausted");
        }
        ("error_max_structured_output_retries", _) | (_, "structured_output_retry_exhausted") => {
            return named("invalid_output");
        }
        (_, "prompt_too_long") => return named("context_limit"),
        _ => {}
    }
    match (
        str_field(frame, "api_error_type"),
        u64_field(frame, "api_error_status"),
    ) {
        (Some("rate_limit_error"), _) | (None, Some(429)) => named("rate_limited"),
        (Some("overloaded_error"), _) | (None, Some(529)) => named("overloaded"),
        (Some("authentication_error"), _) | (None, Some(401)) => named("authentication_failed"),
        _ => FailureReason::AgentError,
    }
}

fn close_block(block: OpenBlock, out: &mut Actions) {
    let scope = block.scope;
    match block.kind {
        BlockKind::Text { id, .. } => out.text_end(&id, &scope),
        BlockKind::Thinking { id, .. } => out.thinking_end(&id, &scope),
        BlockKind::Tool { id, name, args } => {
            let args = if args.trim().is_empty() {
                "{}".to_owned()
            } else {
                args
            };
            let complete = serde_json::from_str::<Value>(&args)
                .ok()
                .map(|v| v.to_string());
            out.tool_end(&id, &name, complete, &scope);
        }
        BlockKind::Other => {}
    }
}

fn write_frame(out: &mut Actions, frame: &Value) {
    out.write_stdin(ndjson(frame));
}

impl<D: Dialect> Session for StreamJsonSession<D> {
    fn new(request: RunRequest) -> Self {
        let config = adaptor_sdk::json::parse_config(&request.config_json).unwrap_or(Value::Null);
        Self::with_config(request, config)
    }

    fn from_turn(turn: TurnRequest) -> Self {
        let mut session = Self::new(turn.request);
        session.steerable = turn.steerable;
        session
    }

    fn on_input(&mut self, text: &str, out: &mut Actions) -> Result<(), InputError> {
        if !self.transport.stream_input {
            return Err(InputError::Unsupported(format!(
                "{} reads this run's prompt as plain stdin (ask for steering when the run starts)",
                D::PRODUCT
            )));
        }
        if self.turn_over || self.status.is_some() {
            return Err(InputError::TurnOver(format!(
                "{}'s turn is over",
                D::PRODUCT
            )));
        }
        // Another SDK user frame: folded into the turn between tool calls, or queued right
        // behind it (its result then comes before `idle`, in this run).
        write_frame(out, &user_frame(text));
        self.transcript.push(items::text(ItemKind::User, text), out);
        Ok(())
    }

    fn next_turn(&mut self, request: RunRequest, out: &mut Actions) -> Result<(), StartError> {
        if !self.transport.stream_input {
            return Err(StartError::Unsupported(format!(
                "this {} process reads its prompt as plain stdin (one turn only)",
                D::PRODUCT
            )));
        }
        if self.status.is_some() {
            return Err(StartError::InvalidRequest(format!(
                "the {} process has already exited",
                D::PRODUCT
            )));
        }
        // A fresh turn state on the same process and session; partial lines carry over.
        let config = adaptor_sdk::json::next_turn_config(
            &self.request.config_json,
            &mut self.config,
            &request.config_json,
        );
        let mut next = Self::with_config(request, config);
        std::mem::swap(&mut next.stdout, &mut self.stdout);
        std::mem::swap(&mut next.stderr, &mut self.stderr);
        next.transport = Transport {
            partial: next.request.streaming,
            ..self.transport
        };
        next.session_id = self.session_id.take();
        next.process = std::mem::take(&mut self.process);
        next.baseline = next.process.model_usage;
        *self = next;
        write_frame(out, &user_frame(&self.request.prompt));
        Ok(())
    }

    fn start(&mut self) -> Result<Launch, StartError> {
        let (launch, transport) = D::launch(&self.request, &self.config, self.steerable)?;
        self.transport = transport;
        if transport.handshake {
            self.pending_prompt = Some(user_frame(&self.request.prompt));
        }
        Ok(launch)
    }

    fn on_stdout(&mut self, chunk: &[u8], out: &mut Actions) {
        if self.transport.whole_json {
            if self.whole.len() + chunk.len() > MAX_WHOLE_JSON {
                self.malformed.get_or_insert(format!(
                    "the JSON output is longer than {MAX_WHOLE_JSON} bytes"
                ));
            } else if self.terminal.is_none() {
                self.whole.extend_from_slice(chunk);
                // Read as soon as the document is complete (its events must come before the
                // process exits); a document can only end in `]` or `}`.
                let end = self.whole.iter().rposition(|b| !b.is_ascii_whitespace());
                if end.is_some_and(|i| matches!(self.whole[i], b']' | b'}'))
                    && serde_json::from_slice::<Value>(&self.whole).is_ok()
                {
                    self.read_whole_document(out);
                }
            } else if !chunk.iter().all(u8::is_ascii_whitespace) {
                self.malformed
                    .get_or_insert("output after the JSON document".into());
            }
            return;
        }
        for line in self.stdout.push(chunk) {
            self.handle_line(line, out);
        }
    }

    fn on_stderr(&mut self, chunk: &[u8], out: &mut Actions) {
        let lines = self.stderr.push(chunk);
        self.transcript
            .push_text_lines(ItemKind::Stderr, lines, out);
    }

    fn on_decision(&mut self, id: &str, decision: Decision, out: &mut Actions) {
        if let Some(frame) = self
            .controls
            .on_decision::<D>(id, decision, &self.request.policy)
        {
            write_frame(out, &frame);
        }
    }

    fn on_cancel(&mut self, out: &mut Actions) {
        // In the SDK mode the CLI takes an interrupt on stdin and ends the turn with an error
        // result; one-shot runs have no channel for it (the host stops the process).
        if self.transport.bidirectional && !self.turn_over {
            write_frame(
                out,
                &json!({
                    "type": "control_request",
                    "request_id": "agent-adaptor-interrupt",
                    "request": { "subtype": "interrupt" },
                }),
            );
        }
    }

    fn on_exit(&mut self, status: &ExitStatus, out: &mut Actions) {
        if self.transport.whole_json && !self.whole.iter().all(u8::is_ascii_whitespace) {
            // Never complete (what was read is kept in the raw streams).
            let problem = match serde_json::from_slice::<Value>(&self.whole) {
                Err(e) => format!("the JSON output does not parse: {e}"),
                Ok(_) => "the JSON output is not a result document".into(),
            };
            self.malformed.get_or_insert(problem);
        }
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
        // A CLI killed mid-turn leaves blocks open: close every lifecycle.
        for block in std::mem::take(&mut self.open_blocks) {
            close_block(block, out);
        }
        self.status = Some(*status);
    }

    fn finish(&mut self) -> Outcome {
        let failure = self.failure();
        let checkpoint = self.session_id.clone().map(|id| {
            // The last result succeeded, in the session the CLI is in now (after a
            // `conversation_reset` the result and the checkpoint name the new one).
            let valid = failure.is_none()
                && self
                    .result
                    .as_ref()
                    .is_some_and(|r| r.success && r.session_id.as_deref() == Some(id.as_str()));
            Checkpoint {
                state: SessionState {
                    resume_id: id,
                    display_id: None,
                    data: Vec::new(),
                },
                valid,
            }
        });
        let mut outcome = empty_outcome();
        outcome.text = self.texts.join("\n\n");
        outcome.summary = self.summary.clone();
        outcome.transcript = self.transcript.to_vec();
        outcome.terminal = self.terminal.clone();
        outcome.usage = self.usage;
        outcome.model = self.model.clone();
        outcome.checkpoint = checkpoint;
        outcome.structured_output = self.structured.clone();
        outcome.failure = failure;
        if let Some(source) = self.usage_source {
            outcome
                .metadata
                .push(("usage_source".into(), source.as_str().into()));
        }
        if let Some(total) = self.cumulative {
            // 2.1.332 continues its totals across resumed processes (the session's); 2.1.197
            // counts the process's calls only.
            let basis = if self.usage_source == Some(UsageSource::SinceLastResult)
                || !self.process.capabilities.is_empty()
            {
                "session"
            } else {
                "process"
            };
            outcome
                .metadata
                .push(("cumulative_usage".into(), total.json(basis).to_string()));
        }
        if self.transport.bidirectional {
            outcome
                .metadata
                .push(("transport".into(), "stream-json-bidirectional".into()));
        } else if self.transport.stream_input {
            outcome
                .metadata
                .push(("transport".into(), "stream-json".into()));
        }
        outcome
    }
}
