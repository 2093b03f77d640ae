//! Native parser tests on recorded provider output (no wasm, no process).

use super::*;
use adaptor_sdk::Event;
use adaptor_sdk::harness::{exited, replay, request};

const HAPPY: &[u8] = include_bytes!("../testdata/happy.jsonl");
const FAILURE: &[u8] = include_bytes!("../testdata/failure.jsonl");

fn run(bytes: &[u8], chunk: usize, code: i32) -> adaptor_sdk::harness::Replay {
    replay::<ReferenceSession>(request("hello"), bytes, chunk, exited(code)).expect("start")
}

#[test]
fn happy_turn_maps_every_field() {
    let r = run(HAPPY, 0, 0);
    assert_eq!(r.launch.program, "reference-provider");
    assert_eq!(r.launch.stdin, b"hello");
    assert!(!r.launch.keep_stdin_open);
    let o = &r.outcome;
    assert_eq!(o.text, "Reference reply: hello");
    assert_eq!(o.summary.as_deref(), Some("Answered in 1 turn(s)."));
    assert_eq!(o.model.as_deref(), Some("reference-1"));
    let usage = o.usage.expect("usage");
    assert_eq!(usage.input_tokens, Some(15));
    assert_eq!(usage.output_tokens, Some(22));
    assert_eq!(usage.cache_read_tokens, Some(0));
    assert_eq!(usage.cache_write_tokens, None, "absent is not zero");
    let cp = o.checkpoint.clone().expect("checkpoint");
    assert!(cp.valid);
    assert_eq!(cp.state.resume_id, "ref-0123456789abcdef");
    let terminal = o.terminal.clone().expect("terminal");
    assert_eq!(terminal.event, "result");
    assert_eq!(
        terminal.json,
        std::str::from_utf8(HAPPY).unwrap().lines().last().unwrap()
    );
    assert!(o.failure.is_none());
    let kinds: Vec<ItemKind> = o.transcript.iter().map(|i| i.kind.clone()).collect();
    assert_eq!(
        kinds,
        vec![
            ItemKind::Init,
            ItemKind::Thinking,
            ItemKind::ToolCall,
            ItemKind::ToolResult,
            ItemKind::Assistant,
            ItemKind::Result
        ]
    );
}

#[test]
fn item_events_mirror_the_transcript() {
    let r = run(HAPPY, 0, 0);
    let items: Vec<_> = r
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Item(i) => Some(i),
            _ => None,
        })
        .collect();
    assert_eq!(items, r.outcome.transcript);
}

#[test]
fn any_chunking_gives_the_same_events_and_outcome() {
    let whole = run(HAPPY, 0, 0);
    for chunk in [1, 2, 3, 7, 64, 1000] {
        let split = run(HAPPY, chunk, 0);
        assert_eq!(split.actions, whole.actions, "chunk size {chunk}");
        assert_eq!(split.outcome, whole.outcome, "chunk size {chunk}");
    }
    for cut in 0..HAPPY.len() {
        let (mut h, _) =
            adaptor_sdk::harness::Harness::<ReferenceSession>::start(request("hello")).unwrap();
        h.stdout(&HAPPY[..cut]);
        h.stdout(&HAPPY[cut..]);
        let (actions, outcome) = h.exit(exited(0));
        assert_eq!(actions, whole.actions, "cut at {cut}");
        assert_eq!(outcome, whole.outcome, "cut at {cut}");
    }
}

#[test]
fn failure_turn_has_no_valid_checkpoint() {
    let r = run(FAILURE, 0, 1);
    let f = r.outcome.failure.clone().expect("failure");
    assert_eq!(f.reason, FailureReason::AgentError);
    assert_eq!(f.message, "reference failure requested");
    assert!(!r.outcome.checkpoint.expect("checkpoint").valid);
}

#[test]
fn nonzero_exit_after_success_is_a_failure() {
    let r = run(HAPPY, 0, 2);
    let f = r.outcome.failure.clone().expect("failure");
    assert!(f.message.contains("exited with code 2"), "{}", f.message);
    assert!(!r.outcome.checkpoint.expect("checkpoint").valid);
}

#[test]
fn crash_mid_turn_closes_lifecycles_and_keeps_partial_text() {
    let cut = std::str::from_utf8(HAPPY)
        .unwrap()
        .find("{\"type\":\"text_delta\",\"id\":\"msg-1\",\"text\":\"reply")
        .unwrap();
    let r = run(&HAPPY[..cut], 0, 1);
    let f = r.outcome.failure.clone().expect("failure");
    assert_eq!(f.reason, FailureReason::AgentError);
    assert!(
        f.message.contains("before its result frame"),
        "{}",
        f.message
    );
    assert_eq!(r.outcome.text, "Reference ");
    let text_ends = r
        .events()
        .iter()
        .filter(|e| matches!(e, Event::Text(p) if p.phase == adaptor_sdk::Phase::End))
        .count();
    assert_eq!(text_ends, 1);
}

#[test]
fn frames_after_the_result_are_a_protocol_error() {
    let mut bytes = HAPPY.to_vec();
    bytes.extend_from_slice(b"{\"type\":\"text_delta\",\"id\":\"x\",\"text\":\"late\"}\n");
    let r = run(&bytes, 0, 0);
    assert_eq!(
        r.outcome.failure.expect("failure").reason,
        FailureReason::ProtocolError
    );
}

#[test]
fn non_json_lines_become_stdout_items_not_text() {
    let mut bytes = b"plain noise\n".to_vec();
    bytes.extend_from_slice(HAPPY);
    let r = run(&bytes, 0, 0);
    assert_eq!(r.outcome.transcript[0].kind, ItemKind::Stdout);
    assert_eq!(r.outcome.text, "Reference reply: hello");
}

#[test]
fn resume_passes_the_id_and_guards_the_workspace() {
    let mut req = request("again");
    req.resume = Some(adaptor_sdk::Resume {
        mode: SessionMode::ContinueOrStart,
        state: SessionState {
            resume_id: "ref-0123456789abcdef".into(),
            display_id: None,
            data: vec![("cwd".into(), "/workspace".into())],
        },
    });
    let mut s = ReferenceSession::new(req.clone());
    let launch = s.start().expect("start");
    assert!(
        launch
            .args
            .windows(2)
            .any(|w| w == ["--resume", "ref-0123456789abcdef"])
    );
    req.workspace = "/elsewhere".into();
    let mut s = ReferenceSession::new(req);
    assert!(matches!(s.start(), Err(StartError::ResumeRejected(_))));
}

#[test]
fn config_is_validated() {
    assert!(ReferenceDriver::validate_config(&json!({"command": "/bin/x"})).is_ok());
    let e = ReferenceDriver::validate_config(&json!({"model": 3})).unwrap_err();
    assert_eq!(e.path, "/model");
    let e = ReferenceDriver::validate_config(&json!({"bogus": true})).unwrap_err();
    assert_eq!(e.path, "/bogus");
    let a = ReferenceDriver::config_fingerprint(&json!({"model": "m", "command": "a"})).unwrap();
    let b = ReferenceDriver::config_fingerprint(&json!({"command": "b", "model": "m"})).unwrap();
    assert_eq!(a, b);
}

fn asking_request(prompt: &str) -> RunRequest {
    let mut req = request(prompt);
    req.policy.permission = DecisionMode::Ask;
    req
}

#[test]
fn explicit_approval_modes_ask_over_stdin() {
    let (_, launch) =
        adaptor_sdk::harness::Harness::<ReferenceSession>::start(asking_request("hi")).unwrap();
    assert!(
        launch
            .args
            .windows(2)
            .any(|w| w == ["--approvals", "stdio"])
    );
    assert_eq!(launch.stdin, b"{\"text\":\"hi\",\"type\":\"user\"}\n");
    assert!(launch.keep_stdin_open);
    let (_, launch) =
        adaptor_sdk::harness::Harness::<ReferenceSession>::start(request("hi")).unwrap();
    assert!(!launch.args.iter().any(|a| a == "--approvals"));
    assert_eq!(launch.stdin, b"hi");
}

#[test]
fn approval_requests_map_and_decisions_are_written_back() {
    use adaptor_sdk::Action;
    let (mut s, _) =
        adaptor_sdk::harness::Harness::<ReferenceSession>::start(asking_request("hi")).unwrap();
    let actions = s.stdout(
        b"{\"type\":\"approval_request\",\"id\":\"approval-1\",\"kind\":\"question\",\"tool_call_id\":\"call-ask\",\"question\":\"Which greeting style?\",\"options\":[{\"key\":\"formal\",\"label\":\"Formal\",\"description\":\"Good day.\"},{\"key\":\"casual\",\"label\":\"Casual\"}]}\n",
    );
    let Some(Action::RequestApproval(req)) = actions.first() else {
        panic!("{actions:?}")
    };
    assert_eq!(req.kind, ApprovalKind::Question);
    assert_eq!(req.title, "Which greeting style?");
    assert_eq!(req.tool_call_id.as_deref(), Some("call-ask"));
    assert_eq!(
        req.choices
            .iter()
            .map(|c| c.key.as_str())
            .collect::<Vec<_>>(),
        ["formal", "casual"]
    );
    assert_eq!(req.choices[0].description.as_deref(), Some("Good day."));
    let written = |actions: Vec<Action>| -> Value {
        match actions.as_slice() {
            [Action::WriteStdin(bytes)] => serde_json::from_slice(bytes).unwrap(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        written(s.decide("approval-1", Decision::Answer("casual".into()))),
        json!({"type":"approval_response","id":"approval-1","behavior":"allow","answer":"casual"})
    );
    let actions = s.stdout(
        b"{\"type\":\"approval_request\",\"id\":\"approval-2\",\"kind\":\"permission\",\"tool_call_id\":\"call-1\",\"tool\":\"echo\",\"input\":{\"text\":\"hi\"}}\n",
    );
    let Some(Action::RequestApproval(req)) = actions.first() else {
        panic!("{actions:?}")
    };
    assert_eq!(
        (
            req.kind.clone(),
            req.title.as_str(),
            req.tool_name.as_deref()
        ),
        (ApprovalKind::Permission, "Allow echo?", Some("echo"))
    );
    assert_eq!(
        req.details_json.as_deref(),
        Some(r#"{"input":{"text":"hi"}}"#)
    );
    assert_eq!(
        written(s.decide(
            "approval-2",
            Decision::Approve(Some(r#"{"text":"x"}"#.into()))
        )),
        json!({"type":"approval_response","id":"approval-2","behavior":"allow","updated_input":{"text":"x"}})
    );
    assert_eq!(
        written(s.decide("approval-3", Decision::Deny("no".into()))),
        json!({"type":"approval_response","id":"approval-3","behavior":"deny","message":"no","interrupt":true})
    );
    assert_eq!(
        written(s.decide("approval-4", Decision::Unanswered))["interrupt"],
        json!(true)
    );
}

#[test]
fn an_interrupting_refusal_names_the_failure() {
    let (mut s, _) =
        adaptor_sdk::harness::Harness::<ReferenceSession>::start(asking_request("hi")).unwrap();
    s.stdout(b"{\"type\":\"session\",\"session_id\":\"ref-01\",\"model\":\"reference-1\",\"resumed\":false}\n");
    s.stdout(
        b"{\"type\":\"approval_request\",\"id\":\"approval-1\",\"kind\":\"plan\",\"plan\":\"p\"}\n",
    );
    s.decide("approval-1", Decision::TimedOut);
    s.stdout(b"{\"type\":\"error\",\"code\":\"approval_denied\",\"message\":\"nobody answered in time\"}\n{\"type\":\"result\",\"status\":\"error\",\"session_id\":\"ref-01\",\"model\":\"reference-1\",\"text\":\"\",\"summary\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":0}}\n");
    let (_, outcome) = s.exit(exited(1));
    let failure = outcome.failure.expect("failed");
    assert_eq!(failure.reason, FailureReason::ApprovalTimeout);
    assert!(!outcome.checkpoint.unwrap().valid);
}

#[test]
fn fuzz_smoke_on_mutated_recordings() {
    // The CI smoke run of the fuzz property (see tests/fuzz/ for the long run).
    for input in adaptor_sdk::harness::fuzz_inputs(&[HAPPY, FAILURE], 1500, 0x5eed) {
        adaptor_sdk::harness::fuzz_replay::<ReferenceSession>(&input);
    }
}

#[test]
fn the_stdio_transport_serves_further_turns_on_one_process() {
    use adaptor_sdk::Action;
    use adaptor_sdk::harness::Harness;
    let mut req = request("hello");
    req.config_json = json!({"transport": "stdio"}).to_string();
    let (mut h, launch) = Harness::<ReferenceSession>::start(req.clone()).expect("start");
    assert!(launch.keep_stdin_open);
    assert_eq!(launch.stdin, b"{\"text\":\"hello\",\"type\":\"user\"}\n");
    h.stdout(HAPPY);
    assert!(h.actions.iter().any(|a| matches!(a, Action::EndTurn)));
    let first = h.finish_turn();
    assert!(
        first.failure.is_none(),
        "a resident turn ends without an exit"
    );
    assert!(first.checkpoint.as_ref().is_some_and(|c| c.valid));

    let mut next = req;
    next.prompt = "again".into();
    let actions = h.next_turn(next).expect("next turn");
    assert_eq!(
        actions,
        vec![Action::WriteStdin(
            b"{\"text\":\"again\",\"type\":\"user\"}\n".to_vec()
        )]
    );
    h.stdout(HAPPY);
    let second = h.finish_turn();
    assert_eq!(
        second.text, "Reference reply: hello",
        "the turn state was reset"
    );

    // The one-shot transport cannot take another turn.
    let (mut one_shot, _) = Harness::<ReferenceSession>::start(request("x")).expect("start");
    assert!(matches!(
        one_shot.next_turn(request("y")),
        Err(StartError::Unsupported(_))
    ));
}

#[test]
fn a_steerable_turn_takes_input_until_its_result() {
    use adaptor_sdk::harness::Harness;
    use adaptor_sdk::{Action, InputError, TurnRequest};
    // Not steerable: the one-shot transport has no channel for input.
    let (mut h, launch) = Harness::<ReferenceSession>::start(request("hello")).unwrap();
    assert!(!launch.keep_stdin_open);
    assert!(matches!(h.input("more"), Err(InputError::Unsupported(_))));
    // Steerable: the stdio transport, input as `{"type":"input"}` frames.
    let (mut h, launch) = Harness::<ReferenceSession>::start_turn(TurnRequest {
        request: request("hello"),
        steerable: true,
    })
    .unwrap();
    assert!(launch.keep_stdin_open);
    assert!(
        launch
            .args
            .windows(2)
            .any(|w| w == ["--approvals", "stdio"])
    );
    let written = h.input("and more").unwrap();
    assert_eq!(
        written,
        [Action::WriteStdin(
            b"{\"text\":\"and more\",\"type\":\"input\"}\n".to_vec()
        )]
    );
    h.stdout(b"{\"type\":\"session\",\"session_id\":\"ref-00000000000000ab\",\"model\":\"reference-1\",\"resumed\":false}\n");
    let acted = h.stdout(b"{\"type\":\"input_received\",\"text\":\"and more\"}\n");
    assert!(acted.iter().any(|a| matches!(
        a,
        Action::Emit(Event::Item(i)) if i.kind == ItemKind::User && i.text.as_deref() == Some("and more")
    )));
    h.stdout(b"{\"type\":\"result\",\"status\":\"success\",\"session_id\":\"ref-00000000000000ab\",\"model\":\"reference-1\",\"text\":\"Reference reply: hello + and more\",\"summary\":\"s\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}\n");
    assert!(matches!(h.input("late"), Err(InputError::TurnOver(_))));
}
