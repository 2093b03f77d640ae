//! The event → AG-UI mapping on fixture events, one per rule, compared with the JSON the
//! AG-UI 1.0 schema names.

use adaptor::{
    ApprovalKind, ApprovalRequest, Event, ItemEvent, ItemKind, Notice, Phase, SessionStarted,
    TextDelta, ToolCall, ToolResult, TranscriptItem, Usage, UsageUpdate,
};
use serde_json::{Value, json};

use super::{AgUiEvent, AgUiMapper, Mapped, prompt_of};

use crate::fixtures::meta;

fn delta(phase: Phase, text: &str) -> TextDelta {
    TextDelta {
        meta: meta(),
        message_id: "m1".into(),
        phase,
        text: text.into(),
        parent_tool_call_id: None,
    }
}

fn json_of(m: Mapped) -> Vec<Value> {
    match m {
        Mapped::Events(events) => events
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect(),
        Mapped::Interrupt(i) => panic!("unexpected interrupt {i}"),
    }
}

#[test]
fn text_deltas_become_one_message_start_content_end() {
    let mut m = AgUiMapper::default();
    assert_eq!(
        json_of(m.map(&Event::TextDelta(delta(Phase::Start, "")))),
        vec![json!({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"})]
    );
    assert_eq!(
        json_of(m.map(&Event::TextDelta(delta(Phase::Delta, "Hi")))),
        vec![json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hi"})]
    );
    assert_eq!(
        json_of(m.map(&Event::TextDelta(delta(Phase::End, "")))),
        vec![json!({"type": "TEXT_MESSAGE_END", "messageId": "m1"})]
    );
    // The item mirroring the streamed message repeats nothing.
    let item = Event::Item(ItemEvent {
        meta: meta(),
        item: TranscriptItem {
            kind: ItemKind::Assistant,
            text: Some("Hi".into()),
            tool_call_id: None,
            tool_name: None,
            input: None,
            is_error: false,
            model: None,
            session_id: None,
            parent_tool_call_id: None,
            data: None,
        },
    });
    assert!(json_of(m.map(&item)).is_empty());
    // A message that came only as an item is the whole message at once.
    let out = json_of(m.map(&item));
    let types: Vec<&str> = out.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END"
        ]
    );
}

#[test]
fn thinking_becomes_reasoning_events() {
    let mut m = AgUiMapper::default();
    let mut all = json_of(m.map(&Event::Thinking(delta(Phase::Delta, "hmm"))));
    all.extend(json_of(m.map(&Event::Thinking(delta(Phase::End, "")))));
    assert_eq!(
        all,
        vec![
            json!({"type": "REASONING_START", "messageId": "m1"}),
            json!({"type": "REASONING_MESSAGE_START", "messageId": "m1", "role": "reasoning"}),
            json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": "m1", "delta": "hmm"}),
            json!({"type": "REASONING_MESSAGE_END", "messageId": "m1"}),
            json!({"type": "REASONING_END", "messageId": "m1"}),
        ]
    );
}

fn call(phase: Phase, args: Option<Value>, args_delta: Option<&str>) -> Event {
    Event::ToolCall(ToolCall {
        meta: meta(),
        id: "c1".into(),
        name: "Bash".into(),
        phase,
        args,
        args_delta: args_delta.map(str::to_owned),
        parent_tool_call_id: None,
    })
}

#[test]
fn tool_calls_start_stream_their_arguments_end_and_report_results() {
    let mut m = AgUiMapper::default();
    assert_eq!(
        json_of(m.map(&call(Phase::Start, None, None))),
        vec![json!({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "Bash"})]
    );
    assert_eq!(
        json_of(m.map(&call(Phase::Delta, None, Some("{\"command\":")))),
        vec![json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{\"command\":"})]
    );
    assert_eq!(
        json_of(m.map(&call(Phase::End, Some(json!({"command": "ls"})), None))),
        vec![json!({"type": "TOOL_CALL_END", "toolCallId": "c1"})],
        "streamed arguments are not sent twice"
    );
    assert_eq!(
        json_of(m.map(&Event::ToolResult(ToolResult {
            meta: meta(),
            id: "c1".into(),
            output: "a b".into(),
            is_error: false,
            parent_tool_call_id: None,
        }))),
        vec![
            json!({"type": "TOOL_CALL_RESULT", "messageId": "result-c1", "toolCallId": "c1", "content": "a b", "role": "tool"})
        ]
    );
    // A driver that streams no fragments: the whole arguments as one ARGS.
    let mut m = AgUiMapper::default();
    let out = json_of(m.map(&call(Phase::End, Some(json!({"command": "ls"})), None)));
    assert_eq!(
        out,
        vec![
            json!({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "Bash"}),
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{\"command\":\"ls\"}"}),
            json!({"type": "TOOL_CALL_END", "toolCallId": "c1"}),
        ]
    );
}

#[test]
fn session_and_usage_are_state_snapshots_and_the_rest_is_custom() {
    let mut m = AgUiMapper::default();
    m.map(&Event::Session(SessionStarted {
        meta: meta(),
        session_id: Some("s-1".into()),
        model: Some("m".into()),
    }));
    let out = json_of(m.map(&Event::Usage(UsageUpdate {
        meta: meta(),
        usage: Usage {
            input_tokens: Some(3),
            ..Usage::default()
        },
    })));
    assert_eq!(out[0]["type"], "STATE_SNAPSHOT");
    assert_eq!(out[0]["snapshot"]["session_id"], "s-1");
    assert_eq!(out[0]["snapshot"]["model"], "m");
    assert_eq!(out[0]["snapshot"]["usage"]["input_tokens"], 3);
    let out = json_of(m.map(&Event::Notice(Notice {
        meta: meta(),
        notice: "api-retry".into(),
        message: "again".into(),
        data: None,
    })));
    assert_eq!(out[0]["type"], "CUSTOM");
    assert_eq!(out[0]["name"], "adaptor.notice");
    assert_eq!(out[0]["value"]["message"], "again");
}

#[test]
fn an_approval_request_is_an_interrupt_with_a_response_schema() {
    let mut m = AgUiMapper::default();
    let req = ApprovalRequest::detached(ApprovalKind::Permission, "Allow echo?");
    let Mapped::Interrupt(i) = m.map(&Event::ApprovalRequest(req)) else {
        panic!("not an interrupt")
    };
    assert_eq!(i["id"], "detached");
    assert_eq!(i["reason"], "tool_approval");
    assert_eq!(i["message"], "Allow echo?");
    assert_eq!(
        i["responseSchema"]["properties"]["decision"]["enum"],
        json!(["approve", "deny"])
    );
}

#[test]
fn events_round_trip_through_the_schema_names() {
    let e = AgUiEvent::RunFinished {
        thread_id: "t".into(),
        run_id: "r".into(),
        result: None,
        outcome: Some(json!({"type": "cancelled"})),
    };
    let v = serde_json::to_value(&e).unwrap();
    assert_eq!(
        v,
        json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "cancelled"}})
    );
    assert_eq!(serde_json::from_value::<AgUiEvent>(v).unwrap(), e);
}

#[test]
fn the_prompt_is_the_last_user_message() {
    let messages = vec![
        json!({"id": "1", "role": "user", "content": "first"}),
        json!({"id": "2", "role": "assistant", "content": "reply"}),
        json!({"id": "3", "role": "user", "content": [{"type": "text", "text": "second"}, {"type": "binary", "mimeType": "image/png"}]}),
    ];
    assert_eq!(prompt_of(&messages).as_deref(), Some("second"));
    assert_eq!(prompt_of(&messages[1..2]), None);
}
