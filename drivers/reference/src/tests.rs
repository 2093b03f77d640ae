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
