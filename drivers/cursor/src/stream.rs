//! The strict stream-json parser: one [`CursorSession`] per run turns Cursor Agent's stdout
//! frames into events, transcript items, usage and the outcome.
//!
//! Only the official frames are mapped: `system/init` (session, model), `user` (the prompt
//! echo), `assistant` (text), `tool_call` `started` / `completed` (exactly one `*ToolCall`
//! variant — or the generic `function` — with its result envelope on completion) and
//! `result`. Every frame must carry the session's `session_id` (missing or changing is a
//! protocol error), and nothing may follow the result. Any other frame type is kept as a
//! vendor event and a system transcript item, never dropped.
//!
//! Assistant text with `--stream-partial-output` comes in several forms in one run (reported
//! on Cursor's forum, 2026): frames with `timestamp_ms` and no `model_call_id` are deltas;
//! a frame with `model_call_id` repeats the text of the model call just streamed; a frame
//! without `timestamp_ms` echoes the whole response. Deltas are streamed and make the text;
//! a repeat closes the streamed part (its text is used only if nothing was streamed); the
//! echo is kept as a vendor event. Must not: do I/O or decide policy.

use std::collections::HashMap;

use adaptor_sdk::json::{JsonLine, describe_exit, json_line, str_field, u64_field};
use adaptor_sdk::{
    Actions, Checkpoint, Decision, ExitStatus, Failure, FailureReason, ItemKind, Launch, Line,
    LineFramer, Outcome, RunRequest, Scope, Session, SessionState, StartError, TerminalPayload,
    Transcript, Usage, empty_outcome, items, top_scope,
};
use serde_json::Value;

use crate::launch;

/// A started tool call waiting for its completion.
struct OpenTool {
    variant: String,
    name: String,
}

/// State of one Cursor Agent run.
pub struct CursorSession {
    request: RunRequest,
    config: Value,
    stdout: LineFramer,
    stderr: LineFramer,
    transcript: Transcript,
    scope: Scope,
    session_id: Option<String>,
    model: Option<String>,
    /// Assistant text segments, in order (concatenated for the run's text).
    texts: Vec<String>,
    /// The text part being streamed from deltas: its id and text so far.
    streaming_part: Option<(String, String)>,
    parts: usize,
    tools: HashMap<String, OpenTool>,
    usage: Option<Usage>,
    result_text: Option<String>,
    success: bool,
    terminal: Option<TerminalPayload>,
    error: Option<String>,
    malformed: Option<String>,
    status: Option<ExitStatus>,
}

/// Cursor's usage object, in snake or camel case; absent counters stay absent.
fn usage_of(u: &Value) -> Usage {
    let first = |keys: &[&str]| keys.iter().find_map(|k| u64_field(u, k));
    Usage {
        input_tokens: first(&["input_tokens", "inputTokens"]),
        output_tokens: first(&["output_tokens", "outputTokens"]),
        cache_read_tokens: first(&[
            "cache_read_input_tokens",
            "cached_input_tokens",
            "cacheReadTokens",
        ]),
        cache_write_tokens: first(&["cache_creation_input_tokens", "cacheWriteTokens"]),
        reasoning_tokens: None,
        cost_usd: None,
    }
}

/// The text blocks of a `message.content` list, concatenated (`None` when there are none).
fn message_text(frame: &Value) -> Option<String> {
    let blocks = frame.get("message")?.get("content")?.as_array()?;
    let texts: Vec<&str> = blocks
        .iter()
        .filter(|b| str_field(b, "type") == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    (!texts.is_empty()).then(|| texts.concat())
}

/// The tool name a variant key stands for: `readToolCall` → `read`; an MCP call →
/// `<provider>/<tool>`; the generic `function` → its `name`.
fn tool_name(variant: &str, call: &Value) -> String {
    let args = call.get("args").unwrap_or(&Value::Null);
    match variant {
        "mcpToolCall" => match (
            str_field(args, "providerIdentifier"),
            str_field(args, "toolName"),
        ) {
            (Some(p), Some(t)) => format!("{p}/{t}"),
            _ => str_field(args, "name").unwrap_or("mcp").to_owned(),
        },
        "function" => str_field(call, "name").unwrap_or("function").to_owned(),
        _ => variant.trim_end_matches("ToolCall").to_owned(),
    }
}

/// The arguments of a call as JSON text (`function.arguments` is already a JSON string).
fn tool_args(variant: &str, call: &Value) -> Option<String> {
    if variant == "function" {
        return str_field(call, "arguments").map(str::to_owned);
    }
    call.get("args").map(Value::to_string)
}

/// The output text of a result envelope's payload.
fn output_text(payload: &Value) -> String {
    if let Some(text) = payload.as_str() {
        return text.to_owned();
    }
    match payload.get("content") {
        Some(Value::String(s)) => return s.clone(),
        Some(Value::Array(parts)) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter_map(|p| {
                    p.get("text")
                        .and_then(|t| t.get("text").or(Some(t)))
                        .and_then(Value::as_str)
                })
                .collect();
            if !texts.is_empty() {
                return texts.join("\n");
            }
        }
        _ => {}
    }
    if let Some(steps) = payload.get("conversationSteps").and_then(Value::as_array) {
        let texts: Vec<&str> = steps
            .iter()
            .filter_map(|s| s.pointer("/assistantMessage/text").and_then(Value::as_str))
            .collect();
        if !texts.is_empty() {
            return texts.join("\n");
        }
    }
    for key in ["error", "errorMessage", "message", "reason", "command"] {
        if let Some(text) = str_field(payload, key) {
            return text.to_owned();
        }
    }
    payload.to_string()
}

impl CursorSession {
    fn protocol_error(&mut self, problem: String) {
        self.malformed.get_or_insert(problem);
    }

    fn handle_line(&mut self, line: Line, out: &mut Actions) {
        let (frame, raw) = match json_line(line) {
            JsonLine::Blank => return,
            JsonLine::Oversized(problem) | JsonLine::Malformed(problem) => {
                return self.protocol_error(problem);
            }
            JsonLine::Text(text) => {
                return self
                    .transcript
                    .push(items::text(ItemKind::Stdout, &text), out);
            }
            JsonLine::Object(frame, raw) => (frame, raw),
        };
        let kind = str_field(&frame, "type").unwrap_or_default().to_owned();
        if self.terminal.is_some() {
            return self.protocol_error(format!("`{kind}` frame after the result frame"));
        }
        match str_field(&frame, "session_id").filter(|s| !s.is_empty()) {
            None => return self.protocol_error(format!("`{kind}` frame without a session_id")),
            Some(id) => match &self.session_id {
                Some(known) if known != id => {
                    return self.protocol_error(format!(
                        "the session_id changed from `{known}` to `{id}` in a `{kind}` frame"
                    ));
                }
                Some(_) => {}
                None => self.session_id = Some(id.to_owned()),
            },
        }
        match kind.as_str() {
            "system" if str_field(&frame, "subtype") == Some("init") => self.on_init(&frame, out),
            "user" => {
                if let Some(text) = message_text(&frame) {
                    self.transcript
                        .push(items::text(ItemKind::User, &text), out);
                }
            }
            "assistant" => self.on_assistant(&frame, &raw, out),
            "tool_call" => self.on_tool_call(&frame, out),
            "result" => self.on_result(&frame, &raw, out),
            _ => {
                out.vendor(&kind, &raw);
                let mut item = items::text(ItemKind::System, &raw);
                item.data_json = Some(raw.clone());
                self.transcript.push(item, out);
            }
        }
    }

    fn on_init(&mut self, frame: &Value, out: &mut Actions) {
        self.model = str_field(frame, "model").map(str::to_owned);
        out.session(self.session_id.clone(), self.model.clone());
        let mut item = items::blank(ItemKind::Init);
        item.session_id = self.session_id.clone();
        item.model = self.model.clone();
        let data: serde_json::Map<String, Value> = ["cwd", "permissionMode", "apiKeySource"]
            .iter()
            .filter_map(|k| frame.get(*k).map(|v| ((*k).to_owned(), v.clone())))
            .collect();
        item.data_json = Some(Value::Object(data).to_string());
        self.transcript.push(item, out);
    }

    /// A complete assistant message segment: one text part.
    fn push_segment(&mut self, text: String, out: &mut Actions) {
        let id = format!("text-{}", self.parts);
        self.parts += 1;
        let scope = self.scope.clone();
        out.text_start(&id, &scope);
        out.text_delta(&id, &text, &scope);
        out.text_end(&id, &scope);
        self.end_segment(text, out);
    }

    fn end_segment(&mut self, text: String, out: &mut Actions) {
        self.transcript
            .push(items::text(ItemKind::Assistant, &text), out);
        self.texts.push(text);
    }

    /// Close the part streamed from deltas, if one is open.
    fn close_streamed(&mut self, out: &mut Actions) {
        if let Some((id, text)) = self.streaming_part.take() {
            out.text_end(&id, &self.scope.clone());
            self.end_segment(text, out);
        }
    }

    fn on_assistant(&mut self, frame: &Value, raw: &str, out: &mut Actions) {
        let Some(text) = message_text(frame) else {
            return self.protocol_error("`assistant` frame without text content".into());
        };
        if !self.request.streaming {
            return self.push_segment(text, out);
        }
        let delta = frame.get("timestamp_ms").is_some() && frame.get("model_call_id").is_none();
        if delta {
            let scope = self.scope.clone();
            if self.streaming_part.is_none() {
                let id = format!("text-{}", self.parts);
                self.parts += 1;
                out.text_start(&id, &scope);
                self.streaming_part = Some((id, String::new()));
            }
            if let Some((id, so_far)) = self.streaming_part.as_mut() {
                so_far.push_str(&text);
                out.text_delta(id, &text, &scope);
            }
        } else if frame.get("model_call_id").is_some() {
            // The model call's text again: it closes what was streamed.
            if self.streaming_part.is_some() {
                self.close_streamed(out);
            } else {
                self.push_segment(text, out);
            }
        } else {
            // The whole response once more, before the result.
            self.close_streamed(out);
            if self.texts.is_empty() {
                self.push_segment(text, out);
            } else {
                out.vendor("assistant", raw);
            }
        }
    }

    fn on_tool_call(&mut self, frame: &Value, out: &mut Actions) {
        self.close_streamed(out);
        let Some(call_id) = str_field(frame, "call_id").filter(|c| !c.is_empty()) else {
            return self.protocol_error("`tool_call` frame without a call_id".into());
        };
        let call_id = call_id.to_owned();
        let Some(wrapper) = frame.get("tool_call").and_then(Value::as_object) else {
            return self
                .protocol_error(format!("`tool_call` {call_id} without a tool_call object"));
        };
        let variants: Vec<(&String, &Value)> = wrapper
            .iter()
            .filter(|(k, _)| k.ends_with("ToolCall") || k.as_str() == "function")
            .collect();
        let [(variant, call)] = variants.as_slice() else {
            return self.protocol_error(format!(
                "`tool_call` {call_id} holds {} tool variants (exactly one `*ToolCall` is allowed)",
                variants.len()
            ));
        };
        let variant = (*variant).clone();
        let scope = self.scope.clone();
        match str_field(frame, "subtype") {
            Some("started") => {
                if self.tools.contains_key(&call_id) {
                    return self.protocol_error(format!("tool call {call_id} started twice"));
                }
                let name = tool_name(&variant, call);
                let args = tool_args(&variant, call);
                out.tool_start(&call_id, &name, args.clone(), &scope);
                out.tool_end(&call_id, &name, args.clone(), &scope);
                self.transcript
                    .push(items::tool_call(&call_id, &name, args), out);
                self.tools.insert(call_id, OpenTool { variant, name });
            }
            Some("completed") => {
                let Some(open) = self.tools.remove(&call_id) else {
                    return self.protocol_error(format!(
                        "tool call {call_id} completed but never started"
                    ));
                };
                if open.variant != variant {
                    return self.protocol_error(format!(
                        "tool call {call_id} started as `{}` and completed as `{variant}`",
                        open.variant
                    ));
                }
                let envelope = call.get("result").and_then(Value::as_object);
                let outcome = envelope.and_then(|e| match e.iter().collect::<Vec<_>>()[..] {
                    [(key, payload)] => Some((key.as_str(), payload)),
                    _ => None,
                });
                let Some((status, payload)) = outcome else {
                    return self.protocol_error(format!(
                        "completed tool call {call_id} has no result envelope with exactly one of success, failure, error, rejected"
                    ));
                };
                let is_error = match status {
                    "success" => false,
                    "failure" | "error" | "rejected" => true,
                    other => {
                        return self.protocol_error(format!(
                            "completed tool call {call_id} has an unknown result `{other}`"
                        ));
                    }
                };
                let output = output_text(payload);
                out.tool_result(&call_id, &output, is_error, &scope);
                let mut item = items::tool_result(&call_id, &output, is_error);
                item.tool_name = Some(open.name);
                self.transcript.push(item, out);
            }
            other => self.protocol_error(format!(
                "`tool_call` {call_id} with subtype {:?} (started or completed expected)",
                other.unwrap_or("none")
            )),
        }
    }

    fn on_result(&mut self, frame: &Value, raw: &str, out: &mut Actions) {
        self.close_streamed(out);
        let (Some(subtype), Some(is_error)) = (
            str_field(frame, "subtype"),
            frame.get("is_error").and_then(Value::as_bool),
        ) else {
            return self.protocol_error("`result` frame without subtype or is_error".into());
        };
        self.success = subtype == "success" && !is_error;
        self.result_text = str_field(frame, "result").map(str::to_owned);
        if !self.success {
            self.error = Some(
                self.result_text
                    .clone()
                    .filter(|t| !t.is_empty())
                    .unwrap_or_else(|| format!("Cursor Agent ended the run with `{subtype}`")),
            );
        }
        if let Some(u) = frame.get("usage").filter(|u| u.is_object()) {
            let usage = usage_of(u);
            self.usage = Some(usage);
            out.usage(usage);
        }
        let mut item = items::blank(ItemKind::Result);
        item.text = self.result_text.clone();
        item.is_error = !self.success;
        item.session_id = self.session_id.clone();
        item.model = self.model.clone();
        self.transcript.push(item, out);
        self.terminal = Some(TerminalPayload {
            event: "result".into(),
            json: raw.trim_end_matches(['\r', '\n']).to_owned(),
        });
        out.end_turn();
    }

    fn last_stderr(&self) -> Option<String> {
        self.transcript
            .items()
            .iter()
            .rev()
            .find(|i| i.kind == ItemKind::Stderr)
            .and_then(|i| i.text.clone())
    }

    fn failure(&self) -> Option<Failure> {
        let status = self.status.as_ref();
        if let Some(stopped) = adaptor_sdk::stopped_by_host(status) {
            return Some(stopped);
        }
        let fail = |reason, message: String| {
            Some(Failure {
                reason,
                message,
                details_json: None,
            })
        };
        if let Some(problem) = &self.malformed {
            return fail(FailureReason::ProtocolError, problem.clone());
        }
        if let Some(message) = &self.error {
            return fail(FailureReason::AgentError, message.clone());
        }
        let stderr = self
            .last_stderr()
            .map(|l| format!(": {l}"))
            .unwrap_or_default();
        if self.terminal.is_none() {
            return fail(
                FailureReason::AgentError,
                format!(
                    "Cursor Agent {} before its result frame{stderr}",
                    describe_exit(status)
                ),
            );
        }
        match status {
            Some(s) if s.code == Some(0) && s.signal.is_none() => None,
            other => fail(
                FailureReason::AgentError,
                format!(
                    "Cursor Agent {} after its result frame{stderr}",
                    describe_exit(other)
                ),
            ),
        }
    }
}

impl Session for CursorSession {
    fn new(request: RunRequest) -> Self {
        let config = adaptor_sdk::json::parse_config(&request.config_json).unwrap_or(Value::Null);
        Self {
            request,
            config,
            stdout: LineFramer::default(),
            stderr: LineFramer::new(64 * 1024),
            transcript: Transcript::default(),
            scope: top_scope(),
            session_id: None,
            model: None,
            texts: Vec::new(),
            streaming_part: None,
            parts: 0,
            tools: HashMap::new(),
            usage: None,
            result_text: None,
            success: false,
            terminal: None,
            error: None,
            malformed: None,
            status: None,
        }
    }

    fn start(&mut self) -> Result<Launch, StartError> {
        launch(&self.request, &self.config)
    }

    fn next_turn(&mut self, _request: RunRequest, _out: &mut Actions) -> Result<(), StartError> {
        Err(StartError::Unsupported(
            "Cursor Agent runs one turn per process".into(),
        ))
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

    fn on_decision(&mut self, _id: &str, _decision: Decision, _out: &mut Actions) {
        // This driver never asks: there is no request a decision could answer.
    }

    fn on_cancel(&mut self, _out: &mut Actions) {
        // Print mode has no interrupt channel: the host stops the process.
    }

    fn on_exit(&mut self, status: &ExitStatus, out: &mut Actions) {
        if let Some(rest) = self.stdout.finish() {
            if self.terminal.is_none() {
                self.protocol_error("truncated last line".into());
            } else {
                self.handle_line(rest, out);
            }
        }
        if let Some(rest) = self.stderr.finish() {
            self.transcript
                .push_text_lines(ItemKind::Stderr, vec![rest], out);
        }
        // A CLI stopped mid-message keeps the text streamed so far.
        self.close_streamed(out);
        self.status = Some(*status);
    }

    fn finish(&mut self) -> Outcome {
        let failure = self.failure();
        let checkpoint = self.session_id.clone().map(|id| Checkpoint {
            state: SessionState {
                resume_id: id,
                display_id: None,
                data: Vec::new(),
            },
            // The result frame carried this same session id (a changing one is malformed).
            valid: failure.is_none() && self.success,
        });
        let mut outcome = empty_outcome();
        outcome.text = if self.texts.is_empty() {
            self.result_text.clone().unwrap_or_default()
        } else {
            self.texts.concat()
        };
        outcome.transcript = self.transcript.to_vec();
        outcome.terminal = self.terminal.clone();
        outcome.usage = self.usage;
        outcome.model = self.model.clone();
        outcome.checkpoint = checkpoint;
        outcome.failure = failure;
        outcome
    }
}
