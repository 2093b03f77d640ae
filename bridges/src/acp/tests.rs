//! The event → `session/update` mapping on fixture events, one per rule.

use adaptor::{
    Event, ItemEvent, ItemKind, Notice, Phase, ProcessInfo, ProcessInfoKind, TextDelta, ToolCall,
    ToolResult, TranscriptItem, Usage, UsageUpdate, VendorEvent,
};
use agent_client_protocol::v1::schema::{
    ContentBlock, PlanEntryStatus, SessionUpdate, ToolCallStatus, ToolKind,
};
use serde_json::json;

use super::updates::{Outgoing, UpdateMapper};
use super::{is_session_id, new_session_id, prompt_text};

use crate::fixtures::meta;

fn text(phase: Phase, text: &str) -> TextDelta {
    TextDelta {
        meta: meta(),
        message_id: "m1".into(),
        phase,
        text: text.into(),
        parent_tool_call_id: None,
    }
}

fn call(phase: Phase, name: &str, args: Option<serde_json::Value>) -> Event {
    Event::ToolCall(ToolCall {
        meta: meta(),
        id: "c1".into(),
        name: name.into(),
        phase,
        args,
        args_delta: None,
        parent_tool_call_id: None,
    })
}

fn item(kind: ItemKind, text: Option<&str>) -> Event {
    Event::Item(ItemEvent {
        meta: meta(),
        item: TranscriptItem {
            kind,
            text: text.map(str::to_owned),
            tool_call_id: None,
            tool_name: None,
            input: None,
            is_error: false,
            model: None,
            session_id: None,
            parent_tool_call_id: None,
            data: None,
        },
    })
}

fn updates(out: Vec<Outgoing>) -> Vec<SessionUpdate> {
    out.into_iter()
        .map(|o| match o {
            Outgoing::Update(u) => *u,
            Outgoing::Extension(e) => panic!("unexpected extension {e}"),
        })
        .collect()
}

fn chunk_text(u: &SessionUpdate) -> &str {
    match u {
        SessionUpdate::AgentMessageChunk(c) | SessionUpdate::AgentThoughtChunk(c) => {
            match &c.content {
                ContentBlock::Text(t) => &t.text,
                other => panic!("{other:?}"),
            }
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn text_and_thought_deltas_become_chunks_and_their_items_repeat_nothing() {
    let mut m = UpdateMapper::default();
    assert!(m.map(&Event::TextDelta(text(Phase::Start, ""))).is_empty());
    let u = updates(m.map(&Event::TextDelta(text(Phase::Delta, "Hel"))));
    assert!(matches!(u[0], SessionUpdate::AgentMessageChunk(_)));
    assert_eq!(chunk_text(&u[0]), "Hel");
    let u = updates(m.map(&Event::Thinking(text(Phase::Delta, "hmm"))));
    assert!(matches!(u[0], SessionUpdate::AgentThoughtChunk(_)));
    assert!(m.map(&item(ItemKind::Assistant, Some("Hello"))).is_empty());
    assert!(m.map(&item(ItemKind::Thinking, Some("hmm"))).is_empty());
    // The next message came without deltas (a driver that does not stream): its item is
    // the only carrier of its text.
    let u = updates(m.map(&item(ItemKind::Assistant, Some("Second"))));
    assert_eq!(chunk_text(&u[0]), "Second");
}

#[test]
fn a_tool_call_is_announced_then_completed_with_its_output() {
    let mut m = UpdateMapper::default();
    let u = updates(m.map(&call(
        Phase::Start,
        "Bash",
        Some(json!({"command": "ls -la"})),
    )));
    match &u[0] {
        SessionUpdate::ToolCall(c) => {
            assert_eq!(c.tool_call_id.0.as_ref(), "c1");
            assert_eq!(c.title, "Bash: ls -la");
            assert_eq!(c.kind, ToolKind::Execute);
            assert_eq!(c.status, ToolCallStatus::InProgress);
            assert_eq!(c.raw_input, Some(json!({"command": "ls -la"})));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        m.map(&call(Phase::Delta, "Bash", None)).is_empty(),
        "no fragments in ACP"
    );
    let u = updates(m.map(&call(
        Phase::End,
        "Bash",
        Some(json!({"command": "ls -la"})),
    )));
    assert!(matches!(&u[0], SessionUpdate::ToolCallUpdate(up)
        if up.fields.raw_input.is_some() && up.fields.title.as_deref() == Some("Bash: ls -la")));
    let u = updates(m.map(&Event::ToolResult(ToolResult {
        meta: meta(),
        id: "c1".into(),
        output: "a\nb".into(),
        is_error: true,
        parent_tool_call_id: None,
    })));
    match &u[0] {
        SessionUpdate::ToolCallUpdate(up) => {
            assert_eq!(up.fields.status, Some(ToolCallStatus::Failed));
            assert_eq!(up.fields.raw_output, Some(json!("a\nb")));
            assert_eq!(up.fields.content.as_ref().map(Vec::len), Some(1));
        }
        other => panic!("{other:?}"),
    }
    // The items mirroring the call and its result repeat nothing.
    let mut call_item = item(ItemKind::ToolCall, None);
    let mut result_item = item(ItemKind::ToolResult, Some("a\nb"));
    for ev in [&mut call_item, &mut result_item] {
        if let Event::Item(i) = ev {
            i.item.tool_call_id = Some("c1".into());
        }
    }
    assert!(m.map(&call_item).is_empty());
    assert!(m.map(&result_item).is_empty());
}

#[test]
fn a_result_for_an_unannounced_call_announces_it_first() {
    let mut m = UpdateMapper::default();
    let u = updates(m.map(&Event::ToolResult(ToolResult {
        meta: meta(),
        id: "c9".into(),
        output: String::new(),
        is_error: false,
        parent_tool_call_id: None,
    })));
    assert!(matches!(u[0], SessionUpdate::ToolCall(_)));
    assert!(
        matches!(&u[1], SessionUpdate::ToolCallUpdate(up) if up.fields.status == Some(ToolCallStatus::Completed))
    );
}

#[test]
fn plans_come_from_todo_write_codex_todo_lists_and_acp_plans() {
    let mut m = UpdateMapper::default();
    m.map(&call(Phase::Start, "TodoWrite", None));
    let u = updates(m.map(&call(
        Phase::End,
        "TodoWrite",
        Some(json!({"todos": [
            {"content": "Read", "status": "completed", "activeForm": "Reading"},
            {"content": "Write", "status": "in_progress", "activeForm": "Writing"}
        ]})),
    )));
    let SessionUpdate::Plan(plan) = &u[1] else {
        panic!("{u:?}")
    };
    assert_eq!(plan.entries.len(), 2);
    assert_eq!(plan.entries[0].status, PlanEntryStatus::Completed);
    assert_eq!(plan.entries[1].status, PlanEntryStatus::InProgress);

    for (name, json) in [
        (
            "todo_list",
            json!({"type": "todo_list", "items": [{"text": "x", "completed": true}]}),
        ),
        (
            "acp/plan",
            json!({"sessionUpdate": "plan", "entries": [{"content": "x", "priority": "high", "status": "completed"}]}),
        ),
    ] {
        let out = m.map(&Event::Vendor(VendorEvent {
            meta: meta(),
            name: name.into(),
            json,
        }));
        assert_eq!(out.len(), 2, "the plan, and the vendor event itself");
        let Outgoing::Update(update) = &out[0] else {
            panic!("{out:?}")
        };
        let SessionUpdate::Plan(plan) = update.as_ref() else {
            panic!("{out:?}")
        };
        assert_eq!(plan.entries[0].content, "x");
        assert_eq!(plan.entries[0].status, PlanEntryStatus::Completed);
        assert!(matches!(&out[1], Outgoing::Extension(e) if e["kind"] == "vendor"));
    }
}

#[test]
fn usage_notices_and_the_rest_are_never_dropped_silently() {
    let mut m = UpdateMapper::default();
    let u = updates(m.map(&Event::Usage(UsageUpdate {
        meta: meta(),
        usage: Usage {
            input_tokens: Some(10),
            output_tokens: Some(5),
            cache_read_tokens: Some(100),
            cost_usd: Some(0.25),
            ..Usage::default()
        },
    })));
    let SessionUpdate::UsageUpdate(usage) = &u[0] else {
        panic!("{u:?}")
    };
    assert_eq!(usage.used, 115);
    assert_eq!(
        usage.cost.as_ref().map(|c| (c.amount, c.currency.as_str())),
        Some((0.25, "USD"))
    );
    let u = updates(m.map(&Event::Notice(Notice {
        meta: meta(),
        notice: "api-retry".into(),
        message: "retrying".into(),
        data: None,
    })));
    assert!(matches!(&u[0], SessionUpdate::Notice(n) if n.title == "api-retry"));
    // Raw output chunks are documented as not forwarded; a spawn is passed on.
    let info = |process| {
        Event::ProcessInfo(ProcessInfo {
            meta: meta(),
            process,
            pid: Some(1),
            text: "x".into(),
            bytes: 1,
        })
    };
    assert!(m.map(&info(ProcessInfoKind::Stdout)).is_empty());
    let out = m.map(&info(ProcessInfoKind::Spawn));
    assert!(matches!(&out[..], [Outgoing::Extension(e)] if e["kind"] == "process_info"));
    // A transcript item with no update of its own rides along too.
    let out = m.map(&item(ItemKind::Summary, Some("sum")));
    assert!(matches!(&out[..], [Outgoing::Extension(e)] if e["kind"] == "item"));
}

#[test]
fn prompts_join_text_and_embedded_resources_and_refuse_images() {
    use agent_client_protocol::v1::schema::{
        EmbeddedResource, EmbeddedResourceResource, ImageContent, TextResourceContents,
    };
    let text = prompt_text(&[
        ContentBlock::from("Review this".to_owned()),
        ContentBlock::Resource(EmbeddedResource::new(
            EmbeddedResourceResource::TextResourceContents(TextResourceContents::new(
                "fn main() {}",
                "file:///src/main.rs",
            )),
        )),
    ])
    .unwrap();
    assert_eq!(
        text,
        "Review this\n\n<resource uri=\"file:///src/main.rs\">\nfn main() {}\n</resource>"
    );
    let err =
        prompt_text(&[ContentBlock::Image(ImageContent::new("AAAA", "image/png"))]).unwrap_err();
    assert!(err.data.unwrap().to_string().contains("images"));
    assert!(prompt_text(&[ContentBlock::from("  ".to_owned())]).is_err());
}

#[test]
fn session_ids_are_unique_and_only_their_form_names_a_thread() {
    let a = new_session_id();
    let b = new_session_id();
    assert_ne!(a, b);
    assert!(is_session_id(&a.0) && is_session_id(&b.0));
    assert!(!is_session_id("../../etc"));
    assert!(!is_session_id("ticket-42"));
    assert!(!is_session_id(&a.0.to_uppercase()));
}

#[test]
fn a_question_offers_its_choices_or_only_a_decline() {
    use adaptor::{ApprovalKind, ApprovalRequest, Choice};
    use agent_client_protocol::v1::schema::PermissionOptionKind;
    let free = ApprovalRequest::detached(ApprovalKind::Question, "Which?");
    let options = super::permission_options(&free);
    assert_eq!(options.len(), 1);
    assert_eq!(options[0].kind, PermissionOptionKind::RejectOnce);
    let mut choosing = ApprovalRequest::detached(ApprovalKind::Question, "Which?");
    choosing.choices = vec![Choice {
        key: "a".into(),
        label: "A".into(),
        description: None,
    }];
    let ids: Vec<String> = super::permission_options(&choosing)
        .iter()
        .map(|o| o.option_id.0.to_string())
        .collect();
    assert_eq!(ids, ["answer:a", "reject"]);
    let permission = ApprovalRequest::detached(ApprovalKind::Permission, "Allow?");
    let ids: Vec<String> = super::permission_options(&permission)
        .iter()
        .map(|o| o.option_id.0.to_string())
        .collect();
    assert_eq!(ids, ["allow", "reject"]);
}
