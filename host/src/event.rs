//! The public event model: [`Event`] and its payloads, each carrying host-assigned
//! [`EventMeta`].
//!
//! Owns the event types and which of them may be dropped under backpressure
//! ([`Event::is_droppable`]). Must not: assign sequence numbers (the stream's emitter does) or
//! talk to drivers.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Serialize, Serializer};

use crate::approval::{ApprovalKind, ApprovalRequest, Resolution};
use crate::error::FailureReason;
use crate::result::{StreamKind, TranscriptItem, Usage};

/// Metadata the host attaches to every event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventMeta {
    /// The run.
    pub run_id: String,
    /// The thread key, for thread runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_key: Option<String>,
    /// Strictly increasing per run, starting at 1; assigned by the host only.
    pub sequence: u64,
    /// When the host received the event.
    #[serde(rename = "time_ms", serialize_with = "ser_time")]
    pub time: SystemTime,
    /// The driver that produced the run.
    pub driver: String,
    /// The turn's number in its thread: 1 for the first turn of a session (a new thread, a
    /// fork, a fresh session after a rejected resume), one more than the record's `turns` when
    /// it resumes. Set on every event of a thread run (it changes to 1 after a
    /// [`ThreadFallback`]); `None` on a plain run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    /// What produced the event, in provider coordinates: the output chunk, timer, decision or
    /// exit whose driver callback returned it. Assigned by the host (a driver cannot claim
    /// another source); `None` for events the host makes itself (lifecycle, notices,
    /// approvals resolved, drops).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<EventSource>,
}

/// The provider input that made a driver return an event (see [`EventMeta::source`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventSource {
    /// A chunk of provider output: `chunk` indexes [`RawStreams::chunks`](crate::RawStreams),
    /// `offset..offset + len` is its byte range in that stream's bytes.
    Output {
        /// Stdout or stderr.
        stream: StreamKind,
        /// Index of the chunk record in the run's raw streams.
        chunk: usize,
        /// Byte offset of the chunk in its stream.
        offset: usize,
        /// Chunk length in bytes.
        len: usize,
    },
    /// A timer the driver set fired.
    Timer {
        /// The driver's timer id.
        id: u64,
    },
    /// An approval decision reached the driver.
    Decision {
        /// The approval request id.
        request_id: String,
    },
    /// The run was cancelled or timed out and the driver was asked to stop the turn.
    Cancel,
    /// A kept process was handed the next turn of its thread.
    NextTurn,
    /// The caller added input to the running turn ([`Stream::steer`](crate::Stream::steer)).
    Input,
    /// The provider process ended.
    Exit,
}

fn ser_time<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    s.serialize_u64(ms as u64)
}

/// Lifecycle phase of a streamed part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The part begins.
    Start,
    /// More content.
    Delta,
    /// The part is complete.
    End,
}

/// Assistant text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TextDelta {
    /// Host metadata.
    #[serde(flatten)]
    pub meta: EventMeta,
    /// Message (content block) id.
    pub message_id: String,
    /// Phase.
    pub phase: Phase,
    /// The text piece (empty on start/end).
    pub text: String,
    /// Subagent scope: the tool call that spawned it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_tool_call_id: Option<String>,
}

/// A tool call's lifecycle.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    /// Host metadata.
    #[serde(flatten)]
    pub meta: EventMeta,
    /// Tool call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Phase.
    pub phase: Phase,
    /// Complete arguments when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<serde_json::Value>,
    /// Argument JSON fragment (phase delta).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args_delta: Option<String>,
    /// Subagent scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_tool_call_id: Option<String>,
}

/// A tool's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResult {
    /// Host metadata.
    #[serde(flatten)]
    pub meta: EventMeta,
    /// Tool call id.
    pub id: String,
    /// Output text.
    pub output: String,
    /// The tool failed.
    pub is_error: bool,
    /// Subagent scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_tool_call_id: Option<String>,
}

/// A transcript item, mirrored from the driver.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemEvent {
    /// Host metadata.
    #[serde(flatten)]
    pub meta: EventMeta,
    /// The item.
    pub item: TranscriptItem,
}

/// Cumulative usage so far.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageUpdate {
    /// Host metadata.
    #[serde(flatten)]
    pub meta: EventMeta,
    /// Usage.
    pub usage: Usage,
}

/// The provider session became known.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionStarted {
    /// Host metadata.
    #[serde(flatten)]
    pub meta: EventMeta,
    /// Provider session id.
    pub session_id: Option<String>,
    /// Model.
    pub model: Option<String>,
}

/// What a [`ProcessInfo`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessInfoKind {
    /// The process was spawned.
    Spawn,
    /// A chunk of stdout.
    Stdout,
    /// A chunk of stderr.
    Stderr,
    /// A signal was sent to the process group.
    Signal,
    /// The process ended.
    Exit,
}

/// Process-level facts owned by the host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessInfo {
    /// Host metadata.
    #[serde(flatten)]
    pub meta: EventMeta,
    /// What happened.
    pub process: ProcessInfoKind,
    /// Process id.
    pub pid: Option<u32>,
    /// Human-readable text (program line, chunk text lossily decoded, signal name, status).
    pub text: String,
    /// Chunk length in bytes (stdout/stderr).
    pub bytes: usize,
}

/// A message for humans.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Notice {
    /// Host metadata.
    #[serde(flatten)]
    pub meta: EventMeta,
    /// Machine kind (`api-retry`, `approval.unanswered`, `stdin.error`…).
    pub notice: String,
    /// Message.
    pub message: String,
    /// Data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

/// A provider event with no unified meaning.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VendorEvent {
    /// Host metadata.
    #[serde(flatten)]
    pub meta: EventMeta,
    /// Provider's name.
    pub name: String,
    /// Raw JSON (as text when it is not valid JSON).
    pub json: serde_json::Value,
}

/// Events dropped because the consumer was slow (drop mode only).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dropped {
    /// Host metadata.
    #[serde(flatten)]
    pub meta: EventMeta,
    /// How many.
    pub count: u64,
    /// How many per event kind.
    pub by_kind: BTreeMap<String, u64>,
    /// Sequence of the first dropped event.
    pub first_sequence: u64,
    /// Sequence of the last dropped event.
    pub last_sequence: u64,
    /// Why they were dropped.
    pub reason: DropReason,
}

/// Why a run's events were dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Drop mode: the buffer was full, so droppable deltas were discarded (the items that
    /// carry the same content are kept).
    BufferFull,
    /// The run was cancelled while the consumer was not reading: events that would have
    /// waited for it were discarded, so the cancel is never held up.
    Cancelled,
    /// Both, at different times of the run.
    BufferFullAndCancelled,
}

/// An approval request was resolved (by an answer, the policy, a timeout, a cancel or the
/// end of the run). Policy decisions (auto-approve / auto-deny) are reported here too, with no
/// request event before them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalResolved {
    /// Host metadata.
    #[serde(flatten)]
    pub meta: EventMeta,
    /// Request id.
    pub id: String,
    /// What was asked (`approval_kind` in JSON: `kind` names the event).
    #[serde(rename = "approval_kind")]
    pub kind: ApprovalKind,
    /// Which ask this resolves (1 for the first).
    pub attempt: u32,
    /// How it ended.
    #[serde(flatten)]
    pub resolution: Resolution,
    /// True when the policy decided without asking anyone.
    pub by_policy: bool,
}

/// The run started (always the first event).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunStarted {
    /// Host metadata.
    #[serde(flatten)]
    pub meta: EventMeta,
    /// The program launched.
    pub program: String,
    /// The model requested, if any.
    pub model: Option<String>,
}

/// The run finished (always the last event).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunFinished {
    /// Host metadata.
    #[serde(flatten)]
    pub meta: EventMeta,
    /// Final usage.
    pub usage: Option<Usage>,
    /// True when the run failed.
    pub failed: bool,
    /// Failure reason.
    pub reason: Option<FailureReason>,
    /// Failure message.
    pub message: Option<String>,
}

/// A thread run's stored session was rejected by the provider (or its driver) and the run
/// starts a fresh session instead (continue-or-start, at most once per run). The previous
/// record is archived only once the new checkpoint is persisted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadFallback {
    /// Host metadata.
    #[serde(flatten)]
    pub meta: EventMeta,
    /// The thread key.
    pub key: String,
    /// The record that could not be resumed.
    pub previous_record_id: String,
    /// Why the resume was rejected.
    pub reason: String,
}

/// Everything a run reports, in order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// First event of every started run.
    RunStarted(RunStarted),
    /// Assistant text.
    TextDelta(TextDelta),
    /// Reasoning.
    Thinking(TextDelta),
    /// Tool call lifecycle.
    ToolCall(ToolCall),
    /// Tool result.
    ToolResult(ToolResult),
    /// Transcript item.
    Item(ItemEvent),
    /// Usage update.
    Usage(UsageUpdate),
    /// Provider session known.
    Session(SessionStarted),
    /// Process facts.
    ProcessInfo(ProcessInfo),
    /// Notice.
    Notice(Notice),
    /// Vendor event.
    Vendor(VendorEvent),
    /// Events were dropped.
    Dropped(Dropped),
    /// A decision is needed: answer it with its methods (from any task), or let the
    /// [`ApprovalHandler`](crate::ApprovalHandler) do it. Never dropped under backpressure.
    ApprovalRequest(ApprovalRequest),
    /// An approval request was resolved.
    ApprovalResolved(ApprovalResolved),
    /// A thread run starts a fresh session because the stored one was rejected.
    ThreadFallback(ThreadFallback),
    /// Last event of every started run.
    RunFinished(RunFinished),
}

impl Event {
    /// The host metadata.
    pub fn meta(&self) -> &EventMeta {
        match self {
            Event::RunStarted(e) => &e.meta,
            Event::TextDelta(e) | Event::Thinking(e) => &e.meta,
            Event::ToolCall(e) => &e.meta,
            Event::ToolResult(e) => &e.meta,
            Event::Item(e) => &e.meta,
            Event::Usage(e) => &e.meta,
            Event::Session(e) => &e.meta,
            Event::ProcessInfo(e) => &e.meta,
            Event::Notice(e) => &e.meta,
            Event::Vendor(e) => &e.meta,
            Event::Dropped(e) => &e.meta,
            Event::ApprovalRequest(e) => &e.meta,
            Event::ApprovalResolved(e) => &e.meta,
            Event::ThreadFallback(e) => &e.meta,
            Event::RunFinished(e) => &e.meta,
        }
    }

    pub(crate) fn meta_mut(&mut self) -> &mut EventMeta {
        match self {
            Event::RunStarted(e) => &mut e.meta,
            Event::TextDelta(e) | Event::Thinking(e) => &mut e.meta,
            Event::ToolCall(e) => &mut e.meta,
            Event::ToolResult(e) => &mut e.meta,
            Event::Item(e) => &mut e.meta,
            Event::Usage(e) => &mut e.meta,
            Event::Session(e) => &mut e.meta,
            Event::ProcessInfo(e) => &mut e.meta,
            Event::Notice(e) => &mut e.meta,
            Event::Vendor(e) => &mut e.meta,
            Event::Dropped(e) => &mut e.meta,
            Event::ApprovalRequest(e) => &mut e.meta,
            Event::ApprovalResolved(e) => &mut e.meta,
            Event::ThreadFallback(e) => &mut e.meta,
            Event::RunFinished(e) => &mut e.meta,
        }
    }

    /// Stable snake_case kind name (as in the JSON `kind` field).
    pub fn kind(&self) -> &'static str {
        match self {
            Event::RunStarted(_) => "run_started",
            Event::TextDelta(_) => "text_delta",
            Event::Thinking(_) => "thinking",
            Event::ToolCall(_) => "tool_call",
            Event::ToolResult(_) => "tool_result",
            Event::Item(_) => "item",
            Event::Usage(_) => "usage",
            Event::Session(_) => "session",
            Event::ProcessInfo(_) => "process_info",
            Event::Notice(_) => "notice",
            Event::Vendor(_) => "vendor",
            Event::Dropped(_) => "dropped",
            Event::ApprovalRequest(_) => "approval_request",
            Event::ApprovalResolved(_) => "approval_resolved",
            Event::ThreadFallback(_) => "thread_fallback",
            Event::RunFinished(_) => "run_finished",
        }
    }

    /// True for events a slow consumer may lose in drop mode: content-phase text and
    /// reasoning deltas, tool-argument deltas, and stdout/stderr chunk reports. Lifecycle
    /// starts/ends, tool results, transcript items, usage, notices and run events are never
    /// dropped.
    pub fn is_droppable(&self) -> bool {
        match self {
            Event::TextDelta(e) | Event::Thinking(e) => e.phase == Phase::Delta,
            Event::ToolCall(e) => e.phase == Phase::Delta,
            Event::ProcessInfo(e) => {
                matches!(e.process, ProcessInfoKind::Stdout | ProcessInfoKind::Stderr)
            }
            _ => false,
        }
    }
}

/// A placeholder meta; the emitter overwrites it.
pub(crate) fn blank_meta() -> EventMeta {
    EventMeta {
        run_id: String::new(),
        thread_key: None,
        sequence: 0,
        time: std::time::SystemTime::UNIX_EPOCH,
        driver: String::new(),
        turn: None,
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The event's tag is its only `kind`: an approval's own kind is `approval_kind` (a JSON
    /// reader keeping the last of two `kind` keys would otherwise lose the event's name).
    #[test]
    fn approval_events_serialise_one_kind_key() {
        let request = ApprovalRequest::detached(ApprovalKind::Permission, "Allow echo?");
        let resolved = ApprovalResolved {
            meta: blank_meta(),
            id: "a-1".into(),
            kind: ApprovalKind::Question,
            attempt: 1,
            resolution: Resolution::TimedOut,
            by_policy: false,
        };
        for (event, tag, kind) in [
            (
                Event::ApprovalRequest(request),
                "approval_request",
                "permission",
            ),
            (
                Event::ApprovalResolved(resolved),
                "approval_resolved",
                "question",
            ),
        ] {
            let text = serde_json::to_string(&event).unwrap();
            assert_eq!(text.matches("\"kind\":").count(), 1, "{text}");
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(value["kind"], tag);
            assert_eq!(value["approval_kind"], kind);
        }
    }
}
