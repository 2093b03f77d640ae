//! Builders for what a session returns: [`Actions`] (the ordered list of host actions),
//! [`Transcript`] (which emits the mirrored `item` event for every entry it records, so clause
//! RUN-04 holds by construction), transcript [`items`], [`empty_outcome`] and
//! [`stopped_by_host`].

use crate::{
    Action, ApprovalRequest, Event, ExitStatus, Failure, FailureReason, ItemKind, Notice, Outcome,
    Phase, Scope, SessionInfo, Signal, TextPart, Timer, ToolCall, ToolResult, TranscriptItem,
    Usage, VendorEvent,
};

/// The top-level scope (not inside a subagent).
pub fn top_scope() -> Scope {
    Scope {
        parent_tool_call_id: None,
    }
}

/// An outcome with nothing in it; fill in the fields you observed.
pub fn empty_outcome() -> Outcome {
    Outcome {
        text: String::new(),
        summary: None,
        transcript: Vec::new(),
        terminal: None,
        usage: None,
        model: None,
        structured_output: None,
        checkpoint: None,
        failure: None,
        metadata: Vec::new(),
    }
}

/// The failure of a run the host itself ended — cancelled or timed out — whatever the CLI
/// printed before it stopped: what every driver's outcome checks first.
pub fn stopped_by_host(status: Option<&ExitStatus>) -> Option<Failure> {
    let status = status?;
    let (reason, message) = if status.cancelled {
        (FailureReason::Cancelled, "the run was cancelled")
    } else if status.timed_out {
        (FailureReason::TimedOut, "the run timed out")
    } else {
        return None;
    };
    Some(Failure {
        reason,
        message: message.into(),
        details_json: None,
    })
}

/// Ordered actions for the host.
#[derive(Debug, Default, Clone)]
pub struct Actions(Vec<Action>);

impl Actions {
    /// No actions yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append any action.
    pub fn push(&mut self, action: Action) {
        self.0.push(action);
    }

    /// Emit an event.
    pub fn emit(&mut self, event: Event) {
        self.0.push(Action::Emit(event));
    }

    /// The actions so far.
    pub fn as_slice(&self) -> &[Action] {
        &self.0
    }

    /// Take the actions.
    pub fn into_vec(self) -> Vec<Action> {
        self.0
    }

    fn text_part(&mut self, thinking: bool, id: &str, phase: Phase, text: &str, scope: &Scope) {
        let part = TextPart {
            message_id: id.to_owned(),
            phase,
            text: text.to_owned(),
            scope: scope.clone(),
        };
        self.emit(if thinking {
            Event::Thinking(part)
        } else {
            Event::Text(part)
        });
    }

    /// Assistant text message `id` starts.
    pub fn text_start(&mut self, id: &str, scope: &Scope) {
        self.text_part(false, id, Phase::Start, "", scope);
    }

    /// A piece of assistant text.
    pub fn text_delta(&mut self, id: &str, text: &str, scope: &Scope) {
        self.text_part(false, id, Phase::Delta, text, scope);
    }

    /// Assistant text message `id` ends.
    pub fn text_end(&mut self, id: &str, scope: &Scope) {
        self.text_part(false, id, Phase::End, "", scope);
    }

    /// Reasoning block `id` starts.
    pub fn thinking_start(&mut self, id: &str, scope: &Scope) {
        self.text_part(true, id, Phase::Start, "", scope);
    }

    /// A piece of reasoning.
    pub fn thinking_delta(&mut self, id: &str, text: &str, scope: &Scope) {
        self.text_part(true, id, Phase::Delta, text, scope);
    }

    /// Reasoning block `id` ends.
    pub fn thinking_end(&mut self, id: &str, scope: &Scope) {
        self.text_part(true, id, Phase::End, "", scope);
    }

    /// Tool call `id` starts; `args_json` when the arguments are already complete.
    pub fn tool_start(&mut self, id: &str, name: &str, args_json: Option<String>, scope: &Scope) {
        self.emit(Event::ToolCall(ToolCall {
            id: id.to_owned(),
            name: name.to_owned(),
            phase: Phase::Start,
            args_json,
            args_delta: None,
            scope: scope.clone(),
        }));
    }

    /// A fragment of tool call `id`'s argument JSON.
    pub fn tool_args_delta(&mut self, id: &str, name: &str, delta: &str, scope: &Scope) {
        self.emit(Event::ToolCall(ToolCall {
            id: id.to_owned(),
            name: name.to_owned(),
            phase: Phase::Delta,
            args_json: None,
            args_delta: Some(delta.to_owned()),
            scope: scope.clone(),
        }));
    }

    /// Tool call `id`'s arguments are complete.
    pub fn tool_end(&mut self, id: &str, name: &str, args_json: Option<String>, scope: &Scope) {
        self.emit(Event::ToolCall(ToolCall {
            id: id.to_owned(),
            name: name.to_owned(),
            phase: Phase::End,
            args_json,
            args_delta: None,
            scope: scope.clone(),
        }));
    }

    /// The result of tool call `id`.
    pub fn tool_result(&mut self, id: &str, output: &str, is_error: bool, scope: &Scope) {
        self.emit(Event::ToolResult(ToolResult {
            id: id.to_owned(),
            output: output.to_owned(),
            is_error,
            scope: scope.clone(),
        }));
    }

    /// Cumulative usage so far.
    pub fn usage(&mut self, usage: Usage) {
        self.emit(Event::Usage(usage));
    }

    /// The provider session id and/or model became known.
    pub fn session(&mut self, session_id: Option<String>, model: Option<String>) {
        self.emit(Event::Session(SessionInfo { session_id, model }));
    }

    /// A notice for humans.
    pub fn notice(&mut self, kind: &str, message: &str, data_json: Option<String>) {
        self.emit(Event::Notice(Notice {
            kind: kind.to_owned(),
            message: message.to_owned(),
            data_json,
        }));
    }

    /// A provider event with no unified meaning.
    pub fn vendor(&mut self, name: &str, json: &str) {
        self.emit(Event::Other(VendorEvent {
            name: name.to_owned(),
            json: json.to_owned(),
        }));
    }

    /// Write bytes to the process's stdin.
    pub fn write_stdin(&mut self, bytes: impl Into<Vec<u8>>) {
        self.push(Action::WriteStdin(bytes.into()));
    }

    /// Close the process's stdin.
    pub fn close_stdin(&mut self) {
        self.push(Action::CloseStdin);
    }

    /// Ask the host for a decision.
    pub fn request_approval(&mut self, request: ApprovalRequest) {
        self.push(Action::RequestApproval(request));
    }

    /// Start or replace timer `id`.
    pub fn set_timer(&mut self, id: u64, after_ms: u64) {
        self.push(Action::SetTimer(Timer { id, after_ms }));
    }

    /// Signal the process group.
    pub fn signal(&mut self, signal: Signal) {
        self.push(Action::Signal(signal));
    }

    /// The turn's terminal frame was seen.
    pub fn end_turn(&mut self) {
        self.push(Action::EndTurn);
    }
}

/// The turn's transcript. Every [`Transcript::push`] also emits the mirrored `item` event.
#[derive(Debug, Default, Clone)]
pub struct Transcript {
    items: Vec<TranscriptItem>,
}

impl Transcript {
    /// Record an item and emit its `item` event.
    pub fn push(&mut self, item: TranscriptItem, out: &mut Actions) {
        out.emit(Event::Item(item.clone()));
        self.items.push(item);
    }

    /// Items so far.
    pub fn items(&self) -> &[TranscriptItem] {
        &self.items
    }

    /// A copy of the items, for [`Outcome::transcript`].
    pub fn to_vec(&self) -> Vec<TranscriptItem> {
        self.items.clone()
    }

    /// Record each non-blank complete line as a text item of `kind` (e.g. a CLI's stderr
    /// diagnostics); oversized lines are recorded by their head, marked as cut.
    pub fn push_text_lines(&mut self, kind: ItemKind, lines: Vec<crate::Line>, out: &mut Actions) {
        for line in lines {
            let text = match line {
                crate::Line::Complete(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                crate::Line::Oversized { head, len } => {
                    format!("{}… ({len} bytes, cut)", String::from_utf8_lossy(&head))
                }
            };
            if !text.trim().is_empty() {
                self.push(items::text(kind.clone(), &text), out);
            }
        }
    }
}

/// Constructors for common transcript items.
pub mod items {
    use super::*;

    /// A blank item of `kind`.
    pub fn blank(kind: ItemKind) -> TranscriptItem {
        TranscriptItem {
            kind,
            text: None,
            tool_call_id: None,
            tool_name: None,
            input_json: None,
            is_error: false,
            model: None,
            session_id: None,
            scope: top_scope(),
            data_json: None,
        }
    }

    /// A text item (assistant, thinking, user, system, stdout, stderr, failure…).
    pub fn text(kind: ItemKind, text: &str) -> TranscriptItem {
        TranscriptItem {
            text: Some(text.to_owned()),
            ..blank(kind)
        }
    }

    /// A tool call.
    pub fn tool_call(id: &str, name: &str, input_json: Option<String>) -> TranscriptItem {
        TranscriptItem {
            tool_call_id: Some(id.to_owned()),
            tool_name: Some(name.to_owned()),
            input_json,
            ..blank(ItemKind::ToolCall)
        }
    }

    /// A tool result.
    pub fn tool_result(id: &str, output: &str, is_error: bool) -> TranscriptItem {
        TranscriptItem {
            tool_call_id: Some(id.to_owned()),
            text: Some(output.to_owned()),
            is_error,
            ..blank(ItemKind::ToolResult)
        }
    }
}
