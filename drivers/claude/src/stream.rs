//! The stream-json mapping: one [`ClaudeSession`] per run turns the CLI's stdout frames into
//! events, transcript items, usage and the outcome.
//!
//! Frames: `system` (`init` → session, `api_retry` → notice, others → vendor events),
//! `assistant` (content blocks text / thinking / tool_use, each usually in its own frame
//! sharing `message.id`; usage de-duplicated per message id), `user` (tool results),
//! `stream_event` (with `--include-partial-messages`: token deltas, thinking deltas, tool
//! argument deltas), `control_request` (approvals, see `control.rs`), `result` (the terminal
//! frame: summary, usage totals, cost, structured output, success or error). Subagent
//! messages are scoped by `parent_tool_use_id`. Must not: do I/O or decide policy.

use std::collections::{BTreeMap, HashSet};
use std::marker::PhantomData;

use adaptor_sdk::json::{JsonLine, describe_exit, json_line, str_field, u64_field};
use adaptor_sdk::{
    Actions, Checkpoint, Decision, ExitStatus, Failure, FailureReason, ItemKind, Launch, Line,
    LineFramer, Outcome, RunRequest, Scope, Session, SessionState, StartError, TerminalPayload,
    Transcript, Usage, empty_outcome, items,
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

/// The terminal `result` frame's facts.
struct ResultFrame {
    success: bool,
    session_id: Option<String>,
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
    result: Option<ResultFrame>,
    terminal: Option<TerminalPayload>,
    structured: Option<String>,
    error: Option<(FailureReason, String, Option<String>)>,
    malformed: Option<String>,
    status: Option<ExitStatus>,
    /// The prompt's `user` frame, held back until the `initialize` handshake is answered.
    pending_prompt: Option<Value>,
    /// Stdout of a whole-document (`--output-format json`) run.
    whole: Vec<u8>,
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
        if self.terminal.is_some() && kind != "system" {
            self.malformed
                .get_or_insert(format!("`{kind}` frame after the terminal result frame"));
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
                ]
                .iter()
                .filter_map(|k| frame.get(*k).map(|v| ((*k).to_owned(), v.clone())))
                .collect();
                item.data_json = Some(Value::Object(data).to_string());
                self.transcript.push(item, out);
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
            _ => out.vendor("system", raw),
        }
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
        if str_field(response, "subtype") == Some("success") {
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
            let details = json!({
                "subtype": subtype,
                "api_error_status": frame.get("api_error_status").cloned().unwrap_or(Value::Null),
                "permission_denials": frame.get("permission_denials").cloned().unwrap_or(Value::Null),
            });
            self.error.get_or_insert((
                FailureReason::AgentError,
                message,
                Some(details.to_string()),
            ));
        }
        if let Some(u) = frame
            .get("usage")
            .filter(|u| u.is_object() && !D::RESULT_USAGE_IS_SESSION_TOTAL)
        {
            let mut usage = usage_of(u);
            usage.cost_usd = frame.get("total_cost_usd").and_then(Value::as_f64);
            self.usage = Some(usage);
            out.usage(usage);
        }
        self.structured = frame
            .get("structured_output")
            .filter(|v| !v.is_null())
            .map(Value::to_string);
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
        out.end_turn();
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
            structured: None,
            error: None,
            malformed: None,
            status: None,
            pending_prompt: None,
            whole: Vec::new(),
            dialect: PhantomData,
        }
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
        let mut next = Self::new(request);
        std::mem::swap(&mut next.stdout, &mut self.stdout);
        std::mem::swap(&mut next.stderr, &mut self.stderr);
        next.transport = Transport {
            partial: next.request.streaming,
            ..self.transport
        };
        next.session_id = self.session_id.take();
        *self = next;
        write_frame(out, &user_frame(&self.request.prompt));
        Ok(())
    }

    fn start(&mut self) -> Result<Launch, StartError> {
        let (launch, transport) = D::launch(&self.request, &self.config)?;
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
        if self.transport.bidirectional && self.terminal.is_none() {
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
            let valid = failure.is_none()
                && self
                    .result
                    .as_ref()
                    .is_some_and(|r| r.success && r.session_id.is_some());
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
