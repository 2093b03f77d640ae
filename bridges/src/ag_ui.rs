//! Runs as AG-UI 1.0 events over SSE, for AG-UI front ends (CopilotKit and others).
//!
//! Owns the AG-UI event types ([`AgUiEvent`], from the 1.0 schema), the mapping of a run's
//! events onto them ([`AgUiMapper`], a pure function of the events so far), and the
//! `POST /ag-ui` route. Runs go through the same [`RunHub`] as the plain SSE routes. Must
//! not: run anything itself, or answer an approval the client did not answer.
//!
//! # The mapping
//!
//! | agent-adaptor | AG-UI |
//! |---|---|
//! | the request | `RUN_STARTED` (`threadId`, `runId` from the `RunAgentInput`) |
//! | text deltas | `TEXT_MESSAGE_START` / `_CONTENT` / `_END` (role `assistant`) |
//! | thinking | `REASONING_START`, `REASONING_MESSAGE_START` / `_CONTENT` / `_END`, `REASONING_END` |
//! | tool call start / argument fragments / end | `TOOL_CALL_START` / `TOOL_CALL_ARGS` / `TOOL_CALL_END` (whole arguments as one `ARGS` when the driver streams none) |
//! | tool result | `TOOL_CALL_RESULT` (role `tool`) |
//! | transcript items | the same text and tool events, when no delta carried them |
//! | session, model, usage | `STATE_SNAPSHOT` `{"session_id", "model", "usage"}` |
//! | an approval request | the AG-UI run ends: `RUN_FINISHED` with `outcome: {"type": "interrupt", "interrupts": [{"id", "reason", "message", "toolCallId", "responseSchema", "metadata"}]}`; the run itself waits. The client answers with a new `RunAgentInput` on the same `threadId` whose `resume` holds `{"interruptId", "status": "resolved", "payload": {"decision": "approve" \| "deny" \| "answer", …}}` (or `"status": "cancelled"`, a denial), and the stream goes on as a new AG-UI run |
//! | the result | `RUN_FINISHED` (`result`: the run's outcome JSON); a cancelled run: `outcome: {"type": "cancelled"}`; a failure: `RUN_ERROR` (`message`, `code` = the failure reason) |
//! | anything else (notices, process facts, vendor events, …) | `CUSTOM` named `adaptor.<kind>`, the event as its `value` |

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use adaptor::{ApprovalKind, ApprovalRequest, Event, ItemKind, Phase, Usage};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::sse::{
    ApprovalAnswer, Attached, Entry, RunHub, RunLog, RunRequest, StartError, apply_answer, problem,
};

/// The AG-UI protocol version these events follow.
pub const PROTOCOL_VERSION: &str = "1.0";

/// One AG-UI event (the 1.0 schema's names and fields; absent optional fields are left
/// out).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "SCREAMING_SNAKE_CASE",
    rename_all_fields = "camelCase"
)]
#[non_exhaustive]
#[allow(missing_docs)] // The fields are the schema's, named as it names them.
pub enum AgUiEvent {
    /// A run began.
    RunStarted { thread_id: String, run_id: String },
    /// A run ended; `outcome` absent means success.
    RunFinished {
        thread_id: String,
        run_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        outcome: Option<Value>,
    },
    /// A run failed.
    RunError {
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<String>,
    },
    /// An assistant message begins.
    TextMessageStart { message_id: String, role: String },
    /// More of its text.
    TextMessageContent { message_id: String, delta: String },
    /// It is complete.
    TextMessageEnd { message_id: String },
    /// A tool call begins.
    ToolCallStart {
        tool_call_id: String,
        tool_call_name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_message_id: Option<String>,
    },
    /// A fragment of its JSON arguments.
    ToolCallArgs { tool_call_id: String, delta: String },
    /// Its arguments are complete.
    ToolCallEnd { tool_call_id: String },
    /// Its result.
    ToolCallResult {
        message_id: String,
        tool_call_id: String,
        content: String,
        role: String,
    },
    /// Reasoning begins.
    ReasoningStart { message_id: String },
    /// A reasoning message begins.
    ReasoningMessageStart { message_id: String, role: String },
    /// More of it.
    ReasoningMessageContent { message_id: String, delta: String },
    /// It is complete.
    ReasoningMessageEnd { message_id: String },
    /// Reasoning ends.
    ReasoningEnd { message_id: String },
    /// The whole shared state.
    StateSnapshot { snapshot: Value },
    /// Anything else.
    Custom { name: String, value: Value },
}

/// One run's events as AG-UI events: remembers which messages and tool calls are open, so
/// each gets exactly one start and one end.
#[derive(Debug, Default)]
pub struct AgUiMapper {
    open_text: HashSet<String>,
    open_reasoning: HashSet<String>,
    text_streamed: bool,
    thought_streamed: bool,
    calls: HashSet<String>,
    args_streamed: HashSet<String>,
    ended_calls: HashSet<String>,
    results: HashSet<String>,
    state: serde_json::Map<String, Value>,
    items: u64,
}

/// What a run's event is for an AG-UI stream.
#[derive(Debug, Clone)]
pub enum Mapped {
    /// These events.
    Events(Vec<AgUiEvent>),
    /// An approval request: the AG-UI run ends with this interrupt.
    Interrupt(Value),
}

impl AgUiMapper {
    /// The AG-UI events for `event`.
    pub fn map(&mut self, event: &Event) -> Mapped {
        let mut out = Vec::new();
        match event {
            Event::TextDelta(d) => {
                self.text_streamed = true;
                self.text(&d.message_id, d.phase, &d.text, &mut out);
            }
            Event::Thinking(d) => {
                self.thought_streamed = true;
                self.reasoning(&d.message_id, d.phase, &d.text, &mut out);
            }
            Event::ToolCall(c) => match c.phase {
                Phase::Start => {
                    self.start_call(&c.id, &c.name, c.parent_tool_call_id.clone(), &mut out)
                }
                Phase::Delta => {
                    self.start_call(&c.id, &c.name, c.parent_tool_call_id.clone(), &mut out);
                    if let Some(delta) = c.args_delta.as_ref().filter(|d| !d.is_empty()) {
                        self.args_streamed.insert(c.id.clone());
                        out.push(AgUiEvent::ToolCallArgs {
                            tool_call_id: c.id.clone(),
                            delta: delta.clone(),
                        });
                    }
                }
                Phase::End => {
                    self.start_call(&c.id, &c.name, c.parent_tool_call_id.clone(), &mut out);
                    self.end_call(&c.id, c.args.as_ref(), &mut out);
                }
            },
            Event::ToolResult(r) => self.result(&r.id, &r.output, &mut out),
            Event::Item(item) => {
                let i = &item.item;
                self.items += 1;
                match &i.kind {
                    ItemKind::Assistant => {
                        if !std::mem::take(&mut self.text_streamed)
                            && let Some(text) = i.text.as_deref().filter(|t| !t.is_empty())
                        {
                            let id = format!("item-{}", self.items);
                            self.text(&id, Phase::Start, "", &mut out);
                            self.text(&id, Phase::Delta, text, &mut out);
                            self.text(&id, Phase::End, "", &mut out);
                        }
                    }
                    ItemKind::Thinking => {
                        if !std::mem::take(&mut self.thought_streamed)
                            && let Some(text) = i.text.as_deref().filter(|t| !t.is_empty())
                        {
                            let id = format!("item-{}", self.items);
                            self.reasoning(&id, Phase::Start, "", &mut out);
                            self.reasoning(&id, Phase::Delta, text, &mut out);
                            self.reasoning(&id, Phase::End, "", &mut out);
                        }
                    }
                    ItemKind::ToolCall => {
                        if let Some(id) = &i.tool_call_id
                            && !self.ended_calls.contains(id)
                        {
                            let name = i.tool_name.as_deref().unwrap_or("tool");
                            self.start_call(id, name, i.parent_tool_call_id.clone(), &mut out);
                            self.end_call(id, i.input.as_ref(), &mut out);
                        }
                    }
                    ItemKind::ToolResult => {
                        if let Some(id) = &i.tool_call_id
                            && !self.results.contains(id)
                        {
                            self.result(id, i.text.as_deref().unwrap_or_default(), &mut out);
                        }
                    }
                    ItemKind::User => {}
                    _ => out.push(custom(event)),
                }
            }
            Event::Session(s) => {
                self.state.insert("session_id".into(), json!(s.session_id));
                self.state.insert("model".into(), json!(s.model));
                out.push(self.snapshot());
            }
            Event::Usage(u) => {
                self.state.insert("usage".into(), usage(&u.usage));
                out.push(self.snapshot());
            }
            Event::ApprovalRequest(req) => return Mapped::Interrupt(interrupt(req)),
            // The request and the result are the AG-UI run's own start and finish.
            Event::RunStarted(_) | Event::RunFinished(_) => {}
            _ => out.push(custom(event)),
        }
        Mapped::Events(out)
    }

    fn text(&mut self, id: &str, phase: Phase, text: &str, out: &mut Vec<AgUiEvent>) {
        if self.open_text.insert(id.to_owned()) {
            out.push(AgUiEvent::TextMessageStart {
                message_id: id.to_owned(),
                role: "assistant".into(),
            });
        }
        if !text.is_empty() {
            out.push(AgUiEvent::TextMessageContent {
                message_id: id.to_owned(),
                delta: text.to_owned(),
            });
        }
        if phase == Phase::End {
            out.push(AgUiEvent::TextMessageEnd {
                message_id: id.to_owned(),
            });
            // A later part with the same id is a new message.
            self.open_text.remove(id);
        }
    }

    fn reasoning(&mut self, id: &str, phase: Phase, text: &str, out: &mut Vec<AgUiEvent>) {
        if self.open_reasoning.insert(id.to_owned()) {
            out.push(AgUiEvent::ReasoningStart {
                message_id: id.to_owned(),
            });
            out.push(AgUiEvent::ReasoningMessageStart {
                message_id: id.to_owned(),
                role: "reasoning".into(),
            });
        }
        if !text.is_empty() {
            out.push(AgUiEvent::ReasoningMessageContent {
                message_id: id.to_owned(),
                delta: text.to_owned(),
            });
        }
        if phase == Phase::End {
            out.push(AgUiEvent::ReasoningMessageEnd {
                message_id: id.to_owned(),
            });
            out.push(AgUiEvent::ReasoningEnd {
                message_id: id.to_owned(),
            });
            self.open_reasoning.remove(id);
        }
    }

    fn start_call(
        &mut self,
        id: &str,
        name: &str,
        parent: Option<String>,
        out: &mut Vec<AgUiEvent>,
    ) {
        if self.calls.insert(id.to_owned()) {
            out.push(AgUiEvent::ToolCallStart {
                tool_call_id: id.to_owned(),
                tool_call_name: name.to_owned(),
                parent_message_id: parent,
            });
        }
    }

    fn end_call(&mut self, id: &str, args: Option<&Value>, out: &mut Vec<AgUiEvent>) {
        if !self.ended_calls.insert(id.to_owned()) {
            return;
        }
        if !self.args_streamed.contains(id)
            && let Some(args) = args
        {
            out.push(AgUiEvent::ToolCallArgs {
                tool_call_id: id.to_owned(),
                delta: args.to_string(),
            });
        }
        out.push(AgUiEvent::ToolCallEnd {
            tool_call_id: id.to_owned(),
        });
    }

    fn result(&mut self, id: &str, output: &str, out: &mut Vec<AgUiEvent>) {
        if !self.calls.contains(id) {
            self.start_call(id, "tool", None, out);
        }
        if !self.ended_calls.contains(id) {
            self.end_call(id, None, out);
        }
        self.results.insert(id.to_owned());
        out.push(AgUiEvent::ToolCallResult {
            message_id: format!("result-{id}"),
            tool_call_id: id.to_owned(),
            content: output.to_owned(),
            role: "tool".into(),
        });
    }

    fn snapshot(&self) -> AgUiEvent {
        AgUiEvent::StateSnapshot {
            snapshot: Value::Object(self.state.clone()),
        }
    }
}

fn usage(u: &Usage) -> Value {
    serde_json::to_value(u).unwrap_or(Value::Null)
}

fn custom(event: &Event) -> AgUiEvent {
    let value = crate::event_json(event);
    let kind = value["kind"].as_str().unwrap_or("event").to_owned();
    AgUiEvent::Custom {
        name: format!("adaptor.{kind}"),
        value,
    }
}

/// An approval request as an AG-UI interrupt: its `responseSchema` is the `payload` the
/// client sends back with `resume`.
pub fn interrupt(req: &ApprovalRequest) -> Value {
    let (reason, decisions) = match &req.kind {
        ApprovalKind::Permission => ("tool_approval", vec!["approve", "deny"]),
        ApprovalKind::PlanReview => ("plan_review", vec!["approve", "deny"]),
        ApprovalKind::Question => ("question", vec!["answer", "deny"]),
        _ => ("approval", vec!["approve", "deny", "answer"]),
    };
    let mut schema = json!({
        "type": "object",
        "required": ["decision"],
        "properties": {
            "decision": {"enum": decisions},
            "reason": {"type": "string"},
        },
    });
    if !req.choices.is_empty() {
        let keys: Vec<&str> = req.choices.iter().map(|c| c.key.as_str()).collect();
        schema["properties"]["answer"] = json!({"enum": keys});
    }
    let mut interrupt = json!({
        "id": req.id,
        "reason": reason,
        "message": req.title,
        "responseSchema": schema,
        "metadata": {"details": req.details, "choices": req.choices, "tool": req.tool_name},
    });
    if let Some(call) = &req.tool_call_id {
        interrupt["toolCallId"] = json!(call);
    }
    interrupt
}

/// AG-UI's `RunAgentInput` (the fields this server reads; the others are accepted).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunAgentInput {
    /// The conversation.
    pub thread_id: String,
    /// This run.
    pub run_id: String,
    /// The messages; the last `user` message is the prompt.
    #[serde(default)]
    pub messages: Vec<Value>,
    /// Answers to the interrupts of the thread's previous AG-UI run.
    #[serde(default)]
    pub resume: Vec<ResumeEntry>,
}

/// One answer to an interrupt.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeEntry {
    /// The interrupt's id (the approval request's).
    pub interrupt_id: String,
    /// `resolved` or `cancelled`.
    pub status: String,
    /// With `resolved`: an [`ApprovalAnswer`].
    #[serde(default)]
    pub payload: Option<Value>,
}

/// The AG-UI route's state: the hub, and the runs waiting for an interrupt's answer by
/// thread id.
pub struct AgUi {
    hub: Arc<RunHub>,
    parked: Mutex<HashMap<String, Parked>>,
}

impl std::fmt::Debug for AgUi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgUi")
            .field("hub", &self.hub)
            .finish_non_exhaustive()
    }
}

/// A run waiting for its client's answer: where its AG-UI stream stopped, and a reader so
/// that it is not cancelled for want of one.
struct Parked {
    log: Arc<RunLog>,
    after: u64,
    mapper: AgUiMapper,
    _attached: Attached,
}

impl AgUi {
    /// AG-UI over `hub`'s runs.
    pub fn new(hub: Arc<RunHub>) -> Arc<Self> {
        Arc::new(Self {
            hub,
            parked: Mutex::new(HashMap::new()),
        })
    }
}

/// `POST /ag-ui`: a `RunAgentInput` in, AG-UI events out (`text/event-stream`, each event
/// one `data:` line, as AG-UI's own encoder writes them).
pub fn router(ag_ui: Arc<AgUi>) -> Router {
    Router::new().route("/ag-ui", post(run)).with_state(ag_ui)
}

/// The prompt: the text of the last `user` message (a string, or its text parts).
pub fn prompt_of(messages: &[Value]) -> Option<String> {
    let message = messages.iter().rev().find(|m| m["role"] == "user")?;
    match &message["content"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let text: Vec<&str> = parts
                .iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["text"].as_str())
                .collect();
            (!text.is_empty()).then(|| text.join("\n"))
        }
        _ => None,
    }
}

async fn run(
    State(ag_ui): State<Arc<AgUi>>,
    body: Result<Json<RunAgentInput>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Json(input) = match body {
        Ok(body) => body,
        Err(e) => return problem(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let (log, after, mapper) = if input.resume.is_empty() {
        let Some(prompt) = prompt_of(&input.messages) else {
            return problem(
                StatusCode::BAD_REQUEST,
                "no user message with text in `messages`",
            );
        };
        let request = RunRequest {
            prompt,
            thread: ag_ui.hub.runs_threads().then(|| input.thread_id.clone()),
        };
        match ag_ui.hub.start(&request) {
            Ok(log) => (log, 0, AgUiMapper::default()),
            Err(e @ StartError::TooMany(_)) => {
                return problem(StatusCode::TOO_MANY_REQUESTS, e.to_string());
            }
            Err(e) => return problem(StatusCode::BAD_REQUEST, e.to_string()),
        }
    } else {
        let Some(parked) = ag_ui
            .parked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&input.thread_id)
        else {
            return problem(
                StatusCode::CONFLICT,
                format!(
                    "thread `{}` has no interrupted run to resume",
                    input.thread_id
                ),
            );
        };
        for entry in &input.resume {
            let Some(request) = parked.log.approval(&entry.interrupt_id) else {
                continue; // Resolved meanwhile (a timeout, the run's end): its event says how.
            };
            let answer = match entry.status.as_str() {
                "resolved" => match entry
                    .payload
                    .clone()
                    .map(serde_json::from_value::<ApprovalAnswer>)
                {
                    Some(Ok(answer)) => answer,
                    Some(Err(e)) => {
                        return problem(
                            StatusCode::BAD_REQUEST,
                            format!("resume payload of `{}`: {e}", entry.interrupt_id),
                        );
                    }
                    None => {
                        return problem(
                            StatusCode::BAD_REQUEST,
                            format!("resume of `{}` has no payload", entry.interrupt_id),
                        );
                    }
                },
                "cancelled" => ApprovalAnswer {
                    decision: "deny".into(),
                    reason: Some("the interrupt was cancelled".into()),
                    answer: None,
                },
                other => {
                    return problem(
                        StatusCode::BAD_REQUEST,
                        format!("resume status must be resolved or cancelled, not `{other}`"),
                    );
                }
            };
            if let Err(e) = apply_answer(&request, &answer) {
                return problem(StatusCode::BAD_REQUEST, e.to_string());
            }
        }
        (parked.log, parked.after, parked.mapper)
    };
    let attached = log.attach();
    let head = AgUiEvent::RunStarted {
        thread_id: input.thread_id.clone(),
        run_id: input.run_id.clone(),
    };
    let state = Pump {
        ag_ui,
        log,
        after,
        mapper: Some(mapper),
        attached: Some(attached),
        thread_id: input.thread_id,
        run_id: input.run_id,
        queue: std::collections::VecDeque::from([head]),
        finished: false,
    };
    let stream = futures::stream::unfold(state, |mut s| async move {
        let event = s.next().await?;
        let data = serde_json::to_string(&event).unwrap_or_default();
        Some((Ok::<_, Infallible>(SseEvent::default().data(data)), s))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

struct Pump {
    ag_ui: Arc<AgUi>,
    log: Arc<RunLog>,
    after: u64,
    mapper: Option<AgUiMapper>,
    attached: Option<Attached>,
    thread_id: String,
    run_id: String,
    queue: std::collections::VecDeque<AgUiEvent>,
    finished: bool,
}

impl Pump {
    async fn next(&mut self) -> Option<AgUiEvent> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Some(event);
            }
            if self.finished {
                return None;
            }
            let entry = self.log.next_after(self.after, false).await?;
            let mapper = self.mapper.as_mut()?;
            match entry {
                Entry::Event(event) => {
                    self.after = event.meta().sequence;
                    match mapper.map(&event) {
                        Mapped::Events(events) => self.queue.extend(events),
                        Mapped::Interrupt(interrupt) => {
                            self.finished = true;
                            self.queue.push_back(AgUiEvent::RunFinished {
                                thread_id: self.thread_id.clone(),
                                run_id: self.run_id.clone(),
                                result: None,
                                outcome: Some(
                                    json!({"type": "interrupt", "interrupts": [interrupt]}),
                                ),
                            });
                            let parked = Parked {
                                log: self.log.clone(),
                                after: self.after,
                                mapper: self.mapper.take().unwrap_or_default(),
                                _attached: self.log.attach(),
                            };
                            self.attached = None;
                            self.ag_ui
                                .parked
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(self.thread_id.clone(), parked);
                        }
                    }
                }
                Entry::Gap { first, last } => {
                    self.after = last;
                    self.queue.push_back(AgUiEvent::Custom {
                        name: "adaptor.gap".into(),
                        value: json!({"first_missing": first, "last_missing": last}),
                    });
                }
                Entry::Result(result) => {
                    self.finished = true;
                    let finished = if result["ok"] == true {
                        AgUiEvent::RunFinished {
                            thread_id: self.thread_id.clone(),
                            run_id: self.run_id.clone(),
                            result: Some(result),
                            outcome: None,
                        }
                    } else if result["reason"] == "cancelled" {
                        AgUiEvent::RunFinished {
                            thread_id: self.thread_id.clone(),
                            run_id: self.run_id.clone(),
                            result: Some(result),
                            outcome: Some(json!({"type": "cancelled"})),
                        }
                    } else {
                        AgUiEvent::RunError {
                            message: result["message"]
                                .as_str()
                                .unwrap_or("the run failed")
                                .to_owned(),
                            code: result["reason"].as_str().map(str::to_owned),
                        }
                    };
                    self.queue.push_back(finished);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
