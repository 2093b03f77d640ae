//! Native tests: the command line per request, and the parser on output recorded from the
//! real Claude Code CLI (`testdata/`, captured against the project's mock Messages API).

use super::*;
use adaptor_sdk::harness::{Harness, request};

fn start(req: RunRequest) -> Launch {
    Harness::<ClaudeSession>::start(req).expect("start").1
}

#[test]
fn one_shot_command_line() {
    let mut req = request("hello");
    req.model = Some("sonnet".into());
    req.streaming = true;
    let launch = start(req);
    assert_eq!(launch.program, "claude");
    assert_eq!(
        launch.args,
        [
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
            "--model",
            "sonnet"
        ]
    );
    assert_eq!(launch.stdin, b"hello");
    assert!(!launch.keep_stdin_open);
}

#[test]
fn asking_uses_the_bidirectional_mode() {
    let mut req = request("hello");
    req.policy.permission = DecisionMode::Ask;
    req.streaming = false;
    let launch = start(req);
    assert!(launch.args.windows(4).any(|w| w
        == [
            "--input-format",
            "stream-json",
            "--permission-prompt-tool",
            "stdio"
        ]));
    assert!(launch.keep_stdin_open);
    let frame: Value = serde_json::from_slice(&launch.stdin).unwrap();
    assert_eq!(frame["type"], "user");
    assert_eq!(frame["message"]["content"], "hello");
}

#[test]
fn auto_approve_bypasses_permissions_with_the_root_env() {
    let mut req = request("hello");
    req.policy.permission = DecisionMode::AutoApprove;
    let launch = start(req);
    assert!(
        launch
            .args
            .iter()
            .any(|a| a == "--dangerously-skip-permissions")
    );
    assert!(
        launch
            .env
            .contains(&("IS_SANDBOX".to_owned(), "1".to_owned()))
    );
}

#[test]
fn every_launch_asks_for_session_state_frames() {
    for transport in ["auto", "stream-json"] {
        let mut req = request("hello");
        req.config_json = json!({ "transport": transport }).to_string();
        let launch = start(req);
        assert!(
            launch.env.contains(&(
                "CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS".to_owned(),
                "1".to_owned()
            )),
            "{transport}: {:?}",
            launch.env
        );
    }
}

#[test]
fn resume_instructions_schema_and_config() {
    let mut req = request("hello");
    req.streaming = false;
    req.config_json =
        json!({"effort": "high", "max_turns": 3, "extra_args": ["--add-dir", "/x"]}).to_string();
    req.instructions = Some("Be brief.".into());
    req.resume = Some(adaptor_sdk::Resume {
        mode: SessionMode::ContinueOnly,
        state: adaptor_sdk::SessionState {
            resume_id: "11111111-2222-4333-8444-555555555555".into(),
            display_id: None,
            data: Vec::new(),
        },
    });
    req.output_schema = Some(adaptor_sdk::OutputSchema {
        schema_json: r#"{"$schema":"x","type":"object","properties":{"a":{"type":"string"}}}"#
            .into(),
        name: None,
        description: None,
        mechanism: SchemaMechanism::Native,
    });
    let launch = start(req.clone());
    let args = launch.args.join(" ");
    assert!(
        args.contains("--resume=11111111-2222-4333-8444-555555555555"),
        "{args}"
    );
    // A stored id that is not a session id never reaches the command line.
    let mut forged = req.clone();
    if let Some(r) = forged.resume.as_mut() {
        r.state.resume_id = r#"--settings={"apiKeyHelper":"touch /tmp/pwned"}"#.into();
    }
    assert!(matches!(
        Harness::<ClaudeSession>::start(forged),
        Err(StartError::ResumeRejected(m)) if m.contains("not a Claude Code session id")
    ));
    assert!(args.contains("--effort high --max-turns 3"), "{args}");
    assert!(
        args.contains(&format!(
            "--append-system-prompt-file {}/append-system-prompt.md",
            req.private_dir
        )),
        "{args}"
    );
    assert!(
        args.contains(r#"--json-schema {"properties":{"a":{"type":"string"}},"type":"object"}"#),
        "{args}"
    );
    assert!(args.ends_with("--add-dir /x"), "{args}");
    assert_eq!(launch.files[0].contents, b"Be brief.");
}

#[test]
fn config_refuses_owned_flags_and_bad_values() {
    for (config, path) in [
        (
            json!({"extra_args": ["--verbose", "--model=opus"]}),
            "/extra_args/1",
        ),
        (json!({"effort": "extreme"}), "/effort"),
        (json!({"max_turns": 0}), "/max_turns"),
        (json!({"modle": "x"}), "/modle"),
    ] {
        let config = if path == "/extra_args/1" {
            json!({"extra_args": ["--add-dir", "--model=opus"]})
        } else {
            config
        };
        let err = ClaudeDriver::validate_config(&config).unwrap_err();
        assert_eq!(err.path, path, "{config}");
    }
}

// ---- parser on recorded output ---------------------------------------------------------------

use adaptor_sdk::harness::{Replay, exited, replay};
use adaptor_sdk::{
    Action, ApprovalKind, Decision, Event, ExitStatus, FailureReason, ItemKind, Phase,
};

macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!("../testdata/", $name, ".jsonl")).as_slice()
    };
}

const ALL: &[(&str, &[u8], i32)] = &[
    ("plain_text", fixture!("plain_text"), 0),
    ("partial_messages", fixture!("partial_messages"), 0),
    ("tool_bash", fixture!("tool_bash"), 0),
    ("tool_bash_denied", fixture!("tool_bash_denied"), 0),
    ("think", fixture!("think"), 0),
    ("json_schema", fixture!("json_schema"), 0),
    ("error_400", fixture!("error_400"), 1),
    ("error_529", fixture!("error_529"), 1),
    ("resume_second", fixture!("resume_second"), 0),
    (
        "v332_background_agent",
        fixture!("v332_background_agent"),
        0,
    ),
    (
        "v197_background_agent",
        fixture!("v197_background_agent"),
        0,
    ),
    ("v332_background_bash", fixture!("v332_background_bash"), 0),
    ("v332_clear", fixture!("v332_clear"), 0),
    (
        "v332_permission_denied",
        fixture!("v332_permission_denied"),
        0,
    ),
    ("v332_error_400", fixture!("v332_error_400"), 1),
    ("v332_resume_second", fixture!("v332_resume_second"), 0),
    ("v332_interrupted", fixture!("v332_interrupted"), 1),
];

fn replayed(bytes: &[u8], chunk: usize, code: i32, streaming: bool) -> Replay {
    let mut req = request("prompt");
    req.streaming = streaming;
    replay::<ClaudeSession>(req, bytes, chunk, exited(code)).expect("start")
}

fn killed() -> ExitStatus {
    ExitStatus {
        code: None,
        signal: Some(9),
        timed_out: false,
        cancelled: false,
    }
}

/// Whether the replay emitted a notice of `kind`.
fn has_notice(r: &Replay, kind: &str) -> bool {
    r.events()
        .iter()
        .any(|e| matches!(e, Event::Notice(n) if n.kind == kind))
}

fn last_line(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap().lines().last().unwrap()
}

#[test]
fn any_split_of_the_bytes_gives_the_same_events_and_outcome() {
    for (name, bytes, code) in ALL {
        let whole = replayed(bytes, 0, *code, true);
        for chunk in [1, 2, 3, 7, 64, 1000] {
            let split = replayed(bytes, chunk, *code, true);
            assert_eq!(
                split.events(),
                whole.events(),
                "{name}: events differ at chunk {chunk}"
            );
            assert_eq!(
                split.outcome, whole.outcome,
                "{name}: outcome differs at chunk {chunk}"
            );
        }
    }
}

#[test]
fn plain_text_maps_text_usage_summary_session_and_checkpoint() {
    let bytes = fixture!("plain_text");
    let r = replayed(bytes, 0, 0, false);
    let o = &r.outcome;
    let reply = "Hello from mock-anthropic! user_msgs=1 you said: hello there";
    assert_eq!(o.text, reply);
    assert_eq!(o.summary.as_deref(), Some(reply));
    assert!(o.failure.is_none(), "{:?}", o.failure);
    let u = o.usage.expect("usage");
    assert_eq!(
        (
            u.input_tokens,
            u.output_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens
        ),
        (Some(21), Some(9), Some(5), Some(3))
    );
    assert_eq!(u.cost_usd, Some(0.00035125));
    assert_eq!(o.model.as_deref(), Some("claude-opus-4-8"));
    let cp = o.checkpoint.clone().expect("checkpoint");
    assert!(cp.valid);
    assert_eq!(cp.state.resume_id, "81aad91c-21f6-45b5-8dc7-e4b3f059c312");
    let terminal = o.terminal.clone().expect("terminal");
    assert_eq!(terminal.event, "result");
    assert_eq!(terminal.json, last_line(bytes));
    let kinds: Vec<ItemKind> = o.transcript.iter().map(|i| i.kind.clone()).collect();
    assert_eq!(
        kinds,
        [ItemKind::Init, ItemKind::Assistant, ItemKind::Result]
    );
}

#[test]
fn partial_messages_stream_text_once() {
    let r = replayed(fixture!("partial_messages"), 0, 0, true);
    let deltas: Vec<String> = r
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Text(t) if t.phase == Phase::Delta => Some(t.text),
            _ => None,
        })
        .collect();
    assert!(deltas.len() >= 2, "{deltas:?}");
    assert_eq!(deltas.concat(), r.outcome.text);
    let starts = r
        .events()
        .into_iter()
        .filter(|e| matches!(e, Event::Text(t) if t.phase == Phase::Start))
        .count();
    assert_eq!(
        starts, 1,
        "the assistant frame must not repeat streamed text"
    );
}

#[test]
fn tool_calls_results_and_denials() {
    let r = replayed(fixture!("tool_bash"), 0, 0, false);
    let call = r
        .outcome
        .transcript
        .iter()
        .find(|i| i.kind == ItemKind::ToolCall)
        .expect("tool call");
    assert_eq!(call.tool_name.as_deref(), Some("Bash"));
    let input: Value = serde_json::from_str(call.input_json.as_deref().unwrap()).unwrap();
    assert_eq!(input["command"], "echo hi");
    let result = r
        .outcome
        .transcript
        .iter()
        .find(|i| i.kind == ItemKind::ToolResult)
        .expect("tool result");
    assert_eq!(result.tool_call_id, call.tool_call_id);
    assert_eq!(result.text.as_deref(), Some("hi"));
    assert!(!result.is_error);
    assert!(
        r.outcome.text.contains("TOOL_RESULT_SEEN: hi"),
        "{}",
        r.outcome.text
    );

    let denied = replayed(fixture!("tool_bash_denied"), 0, 0, false);
    let result = denied
        .outcome
        .transcript
        .iter()
        .find(|i| i.kind == ItemKind::ToolResult)
        .unwrap();
    assert!(result.is_error, "a denied tool's result is an error");
    assert!(
        denied.outcome.failure.is_none(),
        "the turn itself succeeded"
    );
}

#[test]
fn thinking_and_structured_output() {
    let r = replayed(fixture!("think"), 0, 0, false);
    let thinking = r
        .outcome
        .transcript
        .iter()
        .find(|i| i.kind == ItemKind::Thinking)
        .expect("thinking");
    assert_eq!(thinking.text.as_deref(), Some("Let me think about it."));
    let r = replayed(fixture!("json_schema"), 0, 0, false);
    let value: Value =
        serde_json::from_str(r.outcome.structured_output.as_deref().unwrap()).unwrap();
    assert_eq!(
        value,
        json!({"answer":"mock","count":1,"mood":"happy","tags":["mock"]})
    );
}

#[test]
fn api_errors_fail_with_the_provider_message_and_no_valid_checkpoint() {
    for (bytes, status, reason) in [
        (
            fixture!("error_529"),
            529,
            FailureReason::Other("overloaded".into()),
        ),
        (fixture!("error_400"), 400, FailureReason::AgentError),
    ] {
        let r = replayed(bytes, 0, 1, false);
        let failure = r.outcome.failure.clone().expect("failed");
        assert_eq!(failure.reason, reason);
        assert!(
            failure.message.contains(&format!("API Error: {status}")),
            "{}",
            failure.message
        );
        let details: Value =
            serde_json::from_str(failure.details_json.as_deref().unwrap()).unwrap();
        assert_eq!(details["api_error_status"], status);
        assert!(!r.outcome.checkpoint.unwrap().valid);
    }
    let r = replayed(fixture!("error_529"), 0, 1, false);
    assert!(has_notice(&r, "api-retry"));
}

#[test]
fn a_cli_killed_mid_turn_keeps_partial_text_and_closes_lifecycles() {
    let bytes = fixture!("mock_slow_killed");
    let mut req = request("prompt");
    req.streaming = true;
    let r = replay::<ClaudeSession>(req, bytes, 0, killed()).expect("start");
    let failure = r.outcome.failure.clone().expect("failed");
    assert_eq!(failure.reason, FailureReason::AgentError);
    assert!(
        failure.message.contains("killed by signal 9"),
        "{}",
        failure.message
    );
    assert!(!r.outcome.checkpoint.clone().unwrap().valid);
    let events = r.events();
    let opened = events
        .iter()
        .filter(|e| matches!(e, Event::Text(t) if t.phase == Phase::Start))
        .count();
    let closed = events
        .iter()
        .filter(|e| matches!(e, Event::Text(t) if t.phase == Phase::End))
        .count();
    assert_eq!((opened, closed), (1, 1));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Text(t) if t.phase == Phase::Delta && !t.text.is_empty()))
    );
}

/// A bidirectional session fed the recording's `control_request` line: the session, the
/// approval it asked for, and that line.
fn asked(
    bytes: &[u8],
    policy: impl FnOnce(&mut RunRequest),
) -> (Harness<ClaudeSession>, adaptor_sdk::ApprovalRequest, String) {
    let mut req = request("prompt");
    policy(&mut req);
    let (mut s, _) = Harness::<ClaudeSession>::start(req).unwrap();
    let line = std::str::from_utf8(bytes)
        .unwrap()
        .lines()
        .find(|l| l.contains("\"control_request\""))
        .unwrap()
        .to_owned();
    let actions = s.stdout(format!("{line}\n").as_bytes());
    let Some(Action::RequestApproval(req)) = actions.last() else {
        panic!("{actions:?}")
    };
    (s, req.clone(), line)
}

/// The one frame a decision writes back.
fn written(s: &mut Harness<ClaudeSession>, id: &str, decision: Decision) -> Value {
    match s.decide(id, decision).as_slice() {
        [Action::WriteStdin(bytes)] => serde_json::from_slice::<Value>(bytes).unwrap(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn can_use_tool_becomes_an_approval_and_the_decision_a_control_response() {
    let (mut s, req, _) = asked(fixture!("sdk_stdio_exit_plan_mode"), |r| {
        r.policy.plan_review = DecisionMode::Ask
    });
    assert_eq!(req.kind, ApprovalKind::PlanReview);
    assert_eq!(req.tool_name.as_deref(), Some("ExitPlanMode"));
    assert_eq!(req.tool_call_id.as_deref(), Some("toolu_mock_7"));
    assert_eq!(req.details_json.as_deref(), Some(r#"{"plan":"do it"}"#));
    let id = req.id.clone();
    assert_eq!(
        written(&mut s, &id, Decision::Approve(None)),
        json!({"type":"control_response","response":{"subtype":"success","request_id":id,
               "response":{"behavior":"allow","updatedInput":{"plan":"do it"},"toolUseID":"toolu_mock_7"}}})
    );
}

#[test]
fn questions_carry_their_options_and_answers_go_into_updated_input() {
    let (mut s, req, request_line) = asked(fixture!("sdk_stdio_ask_user_question"), |r| {
        r.policy.question = DecisionMode::Ask
    });
    assert_eq!(req.kind, ApprovalKind::Question);
    assert!(!req.choices.is_empty());
    let key = req.choices[0].key.clone();
    let id = req.id.clone();
    let title = req.title.clone();
    let answer = written(&mut s, &id, Decision::Answer(key.clone()));
    let inner = &answer["response"]["response"];
    assert_eq!(inner["behavior"], "allow");
    assert_eq!(inner["updatedInput"]["answers"][title.as_str()], json!(key));
    assert!(inner["updatedInput"]["questions"].is_array());
    // A refusal under the default `abort` fallback interrupts the turn.
    let (mut s, req, _) = asked(fixture!("sdk_stdio_ask_user_question"), |r| {
        r.policy.question = DecisionMode::Ask
    });
    assert_eq!(
        written(&mut s, &req.id, Decision::Deny("no".into()))["response"]["response"],
        json!({"behavior":"deny","message":"no","interrupt":true,"toolUseID":req_tool_use_id(&request_line)})
    );
}

fn req_tool_use_id(line: &str) -> Value {
    let v: Value = serde_json::from_str(line).unwrap();
    v["request"]["tool_use_id"].clone()
}

#[test]
fn schemas_lose_what_the_cli_rejects_and_keep_what_it_needs() {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "T",
        "type": "object",
        "properties": {
            "n": {"type": "integer", "format": "uint32", "minimum": 0},
            "when": {"type": "string", "format": "date-time"},
            "format": {"type": "string", "enum": ["a", "b"]},
            "list": {"type": "array", "items": {"type": "number", "format": "double"}}
        },
        "required": ["n"]
    });
    let cleaned: Value =
        serde_json::from_str(&preprocess_schema(&schema.to_string()).unwrap()).unwrap();
    assert_eq!(
        cleaned,
        json!({
            "title": "T",
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 0},
                "when": {"type": "string", "format": "date-time"},
                "format": {"type": "string", "enum": ["a", "b"]},
                "list": {"type": "array", "items": {"type": "number"}}
            },
            "required": ["n"]
        })
    );
}

#[test]
fn subagent_messages_are_scoped_and_kept_out_of_the_reply() {
    let lines = [
        r#"{"type":"system","subtype":"init","session_id":"s1","model":"m"}"#,
        r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"task-1","name":"Task","input":{"prompt":"look"}}]},"parent_tool_use_id":null,"session_id":"s1"}"#,
        r#"{"type":"assistant","message":{"id":"m2","content":[{"type":"text","text":"sub says hi"}]},"parent_tool_use_id":"task-1","session_id":"s1"}"#,
        r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"task-1","content":[{"type":"text","text":"done"}]}]},"parent_tool_use_id":null,"session_id":"s1"}"#,
        r#"{"type":"assistant","message":{"id":"m3","content":[{"type":"text","text":"top reply"}]},"parent_tool_use_id":null,"session_id":"s1"}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"result":"top reply","session_id":"s1"}"#,
    ]
    .join("\n")
        + "\n";
    let r = replayed(lines.as_bytes(), 0, 0, false);
    assert_eq!(r.outcome.text, "top reply");
    let scoped: Vec<_> = r
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Text(t) if t.phase == Phase::Delta => {
                Some((t.text, t.scope.parent_tool_call_id))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        scoped,
        [
            ("sub says hi".to_owned(), Some("task-1".to_owned())),
            ("top reply".to_owned(), None)
        ]
    );
    let result = r
        .outcome
        .transcript
        .iter()
        .find(|i| i.kind == ItemKind::ToolResult)
        .unwrap();
    assert_eq!(result.text.as_deref(), Some("done"));
}

#[test]
fn malformed_and_truncated_output_is_a_protocol_error() {
    let good = fixture!("plain_text");
    let first = std::str::from_utf8(good).unwrap().lines().next().unwrap();
    let malformed = format!("{first}\n{{\"type\":\"assistant\",\"message\":\n");
    let r = replayed(malformed.as_bytes(), 0, 0, false);
    let f = r.outcome.failure.clone().expect("failed");
    assert_eq!(f.reason, FailureReason::ProtocolError);
    assert!(f.message.contains("malformed JSON line"), "{}", f.message);
    assert!(!r.outcome.checkpoint.unwrap().valid);
    // Cut inside the result line, with no trailing newline: truncated.
    let r = replayed(&good[..good.len() - 20], 0, 0, false);
    let f = r.outcome.failure.clone().expect("failed");
    assert_eq!(f.reason, FailureReason::ProtocolError);
    assert!(f.message.contains("truncated"), "{}", f.message);
}

#[test]
fn fuzz_smoke_on_mutated_recordings() {
    // The CI smoke run of the fuzz property (see tests/fuzz/ for the long run).
    let seeds = ALL.iter().map(|(_, b, _)| *b).collect::<Vec<_>>();
    for input in adaptor_sdk::harness::fuzz_inputs(&seeds, 1500, 0x5eed) {
        adaptor_sdk::harness::fuzz_replay::<ClaudeSession>(&input);
    }
}

#[test]
fn the_stream_json_transport_serves_further_turns_on_one_process() {
    use adaptor_sdk::Action;
    let mut req = request("hello");
    req.config_json = json!({"transport": "stream-json"}).to_string();
    let (mut h, launch) = Harness::<ClaudeSession>::start(req.clone()).expect("start");
    assert!(launch.keep_stdin_open);
    assert!(
        launch
            .args
            .windows(2)
            .any(|w| w == ["--input-format", "stream-json"])
    );
    assert!(!launch.args.iter().any(|a| a == "--permission-prompt-tool"));
    let frame: Value = serde_json::from_slice(&launch.stdin).unwrap();
    assert_eq!(frame["message"]["content"], "hello");
    h.stdout(fixture!("plain_text"));
    assert!(h.actions.iter().any(|a| matches!(a, Action::EndTurn)));
    let first = h.finish_turn();
    assert!(
        first.failure.is_none(),
        "a resident turn ends without an exit"
    );
    let session = first.checkpoint.clone().expect("checkpoint");
    assert!(session.valid);

    let mut next = req;
    next.prompt = "again".into();
    let actions = h.next_turn(next).expect("next turn");
    let [Action::WriteStdin(bytes)] = actions.as_slice() else {
        panic!("one stdin frame: {actions:?}")
    };
    let frame: Value = serde_json::from_slice(bytes).unwrap();
    assert_eq!(frame["type"], "user");
    assert_eq!(frame["message"]["content"], "again");
    h.stdout(fixture!("plain_text"));
    let second = h.finish_turn();
    assert_eq!(
        second.checkpoint.map(|c| c.state.resume_id),
        Some(session.state.resume_id)
    );
    assert_eq!(second.text, first.text, "the turn state was reset");

    // A turn whose config text differs (the kept parse is not reused for it) is served too.
    let mut third = request("once more");
    third.config_json = json!({"transport": "stream-json", "command": "claude"}).to_string();
    let actions = h
        .next_turn(third)
        .expect("next turn with another config text");
    let [Action::WriteStdin(bytes)] = actions.as_slice() else {
        panic!("one stdin frame: {actions:?}")
    };
    let frame: Value = serde_json::from_slice(bytes).unwrap();
    assert_eq!(frame["message"]["content"], "once more");

    // The default transport reads the prompt as plain stdin: one turn only.
    let (mut one_shot, _) = Harness::<ClaudeSession>::start(request("x")).expect("start");
    assert!(matches!(
        one_shot.next_turn(request("y")),
        Err(StartError::Unsupported(_))
    ));
}

#[test]
fn fork_resumes_the_parent_into_a_new_session() {
    let mut req = request("branch");
    req.resume = Some(adaptor_sdk::Resume {
        mode: SessionMode::Fork,
        state: adaptor_sdk::SessionState {
            resume_id: "99999999-2222-4333-8444-555555555555".into(),
            display_id: None,
            data: Vec::new(),
        },
    });
    let launch = start(req);
    assert!(launch.args.windows(2).any(|w| w
        == [
            "--resume=99999999-2222-4333-8444-555555555555",
            "--fork-session"
        ]));
}

#[test]
fn the_config_fingerprint_covers_model_effort_and_extra_args_not_the_command() {
    adaptor_sdk::harness::assert_fingerprint_covers::<ClaudeDriver>(
        &[serde_json::json!({"command": "/opt/cli"})],
        &[
            serde_json::json!({"model": "other"}),
            serde_json::json!({"effort": "high"}),
            serde_json::json!({"extra_args": ["--add-dir", "/srv/data"]}),
        ],
    );
}

#[test]
fn an_unknown_frame_is_passed_on_as_a_vendor_event_and_a_system_item() {
    // A frame type this driver does not know (a newer CLI) is neither dropped nor fatal.
    let recorded = std::str::from_utf8(fixture!("plain_text")).unwrap();
    let unknown =
        r#"{"type":"brand_new_frame","session_id":"81aad91c-21f6-45b5-8dc7-e4b3f059c312","x":1}"#;
    let mut lines: Vec<&str> = recorded.lines().collect();
    let result = lines.pop().unwrap();
    lines.extend([unknown, result]);
    let bytes = format!("{}\n", lines.join("\n"));
    let r = replayed(bytes.as_bytes(), 0, 0, false);
    let events = r.events();
    let vendor: Vec<&adaptor_sdk::VendorEvent> = events
        .iter()
        .filter_map(|e| match e {
            adaptor_sdk::Event::Other(v) => Some(v),
            _ => None,
        })
        .collect();
    assert_eq!(vendor.len(), 1, "{events:?}");
    assert_eq!(vendor[0].name, "brand_new_frame");
    assert_eq!(vendor[0].json, unknown);
    assert!(
        r.outcome
            .transcript
            .iter()
            .any(|i| i.kind == ItemKind::System && i.data_json.as_deref() == Some(unknown))
    );
    assert!(r.outcome.failure.is_none());
    assert!(r.outcome.checkpoint.as_ref().unwrap().valid);
}

fn servers() -> Vec<adaptor_sdk::McpServer> {
    use adaptor_sdk::{McpRemote, McpServer, McpStdio, McpTransport};
    vec![
        McpServer {
            name: "files".into(),
            transport: McpTransport::Stdio(McpStdio {
                command: "mcp-files".into(),
                args: vec!["-v".into()],
                env: vec![("FILES_TOKEN".into(), "stdio-secret".into())],
            }),
        },
        McpServer {
            name: "host".into(),
            transport: McpTransport::Http(McpRemote {
                url: "http://127.0.0.1:9/mcp".into(),
                headers: vec![(
                    "Authorization".into(),
                    "Bearer ${ADAPTOR_TOOLS_TOKEN_AB}".into(),
                )],
            }),
        },
    ]
}

#[test]
fn mcp_servers_go_to_a_private_config_file() {
    let mut req = request("hi");
    req.mcp_servers = servers();
    let launch = start(req.clone());
    let at = launch
        .args
        .iter()
        .position(|a| a == "--mcp-config")
        .expect("flag");
    assert_eq!(
        launch.args[at + 1],
        format!("{}/mcp-config.json", req.private_dir)
    );
    assert!(
        !launch
            .args
            .iter()
            .any(|a| a.contains("secret") || a.contains("Bearer"))
    );
    let file = launch
        .files
        .iter()
        .find(|f| f.name == "mcp-config.json")
        .unwrap();
    let config: Value = serde_json::from_slice(&file.contents).unwrap();
    assert_eq!(
        config,
        json!({"mcpServers": {
            "files": {"type": "stdio", "command": "mcp-files", "args": ["-v"], "env": {"FILES_TOKEN": "stdio-secret"}},
            "host": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${ADAPTOR_TOOLS_TOKEN_AB}"}}
        }})
    );
    // A reference mixed into other text is refused before launch.
    let mut req = request("hi");
    req.mcp_servers = vec![adaptor_sdk::McpServer {
        name: "x".into(),
        transport: adaptor_sdk::McpTransport::Sse(adaptor_sdk::McpRemote {
            url: "http://127.0.0.1:9/sse".into(),
            headers: vec![("X".into(), "a ${B} c".into())],
        }),
    }];
    assert!(matches!(
        Harness::<ClaudeSession>::start(req),
        Err(StartError::Unsupported(_))
    ));
}

// --- Claude Code 2.1.332's protocol (recorded offline from the real CLIs) ----------------

/// Where in the actions the turn ended, counted in `result` transcript items before it.
fn results_before_end_turn(r: &Replay) -> Option<usize> {
    let mut results = 0;
    for a in &r.actions {
        match a {
            Action::Emit(Event::Item(i)) if i.kind == ItemKind::Result => results += 1,
            Action::EndTurn => return Some(results),
            _ => {}
        }
    }
    None
}

fn metadata<'a>(o: &'a adaptor_sdk::Outcome, key: &str) -> Option<&'a str> {
    o.metadata
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

#[test]
fn idle_ends_the_turn_after_every_held_back_result() {
    // A background subagent (the default since 2.1.198): the CLI holds the turn's result
    // while it runs, then writes two results (the turn's and the task notification's) and
    // only then `idle`. Both versions; 2.1.197 numbers no results.
    for (name, bytes) in [
        ("2.1.332", fixture!("v332_background_agent")),
        ("2.1.197", fixture!("v197_background_agent")),
        ("2.1.332 bash", fixture!("v332_background_bash")),
    ] {
        let r = replayed(bytes, 0, 0, false);
        assert_eq!(results_before_end_turn(&r), Some(2), "{name}");
        let o = &r.outcome;
        assert!(o.failure.is_none(), "{name}: {:?}", o.failure);
        assert!(o.checkpoint.as_ref().unwrap().valid, "{name}");
        // The reply and the notification turn's text are both the run's.
        assert!(
            o.text.contains("noted the notification"),
            "{name}: {}",
            o.text
        );
        assert_eq!(
            o.summary.as_deref(),
            Some("noted the notification"),
            "{name}"
        );
        // Background work is kept as vendor events, never dropped.
        assert!(
            r.events()
                .iter()
                .any(|e| matches!(e, Event::Other(v) if v.name == "system" && v.json.contains("task_notification"))),
            "{name}"
        );
    }
}

#[test]
fn without_session_state_frames_the_first_result_ends_the_turn() {
    let r = replayed(fixture!("plain_text"), 0, 0, false);
    assert_eq!(results_before_end_turn(&r), Some(1));
    // With them, a frame after `idle` breaks the protocol.
    let mut bytes = fixture!("v332_permission_denied").to_vec();
    bytes.extend_from_slice(
        br#"{"type":"system","subtype":"session_state_changed","state":"idle","uuid":"u","session_id":"s"}
{"type":"assistant","message":{"id":"late","content":[]},"session_id":"s"}
"#,
    );
    let r = replayed(&bytes, 0, 0, false);
    assert_eq!(results_before_end_turn(&r), Some(1));
    assert_eq!(
        r.outcome.failure.map(|f| f.reason),
        Some(FailureReason::ProtocolError)
    );
}

#[test]
fn usage_is_the_turns_own_and_says_how_it_was_counted() {
    // 2.1.332 resumed: `total_cost_usd` and `modelUsage` include the first process's turn;
    // the turn's own usage is `model_usage_since_last_result`.
    let r = replayed(fixture!("v332_resume_second"), 0, 0, false);
    let u = r.outcome.usage.expect("usage");
    assert_eq!((u.input_tokens, u.output_tokens), (Some(10), Some(7)));
    assert!((u.cost_usd.unwrap() - 0.00018).abs() < 1e-9, "{u:?}");
    assert_eq!(
        metadata(&r.outcome, "usage_source"),
        Some("model_usage_since_last_result")
    );
    let cumulative: Value =
        serde_json::from_str(metadata(&r.outcome, "cumulative_usage").unwrap()).unwrap();
    assert_eq!(cumulative["input_tokens"], 20);
    assert_eq!(cumulative["basis"], "session");
    // Held-back results: the first carries every call, the second `{}`: summed once.
    let r = replayed(fixture!("v332_background_agent"), 0, 0, false);
    let u = r.outcome.usage.expect("usage");
    assert_eq!(u.input_tokens, Some(40), "{u:?}");
    // 2.1.197 has no per-result usage: the process's `modelUsage` (subagent included) minus
    // what it had counted before the turn.
    let r = replayed(fixture!("v197_background_agent"), 0, 0, false);
    let u = r.outcome.usage.expect("usage");
    assert_eq!(u.input_tokens, Some(40), "{u:?}");
    assert!((u.cost_usd.unwrap() - 0.0009).abs() < 1e-9, "{u:?}");
    assert_eq!(
        metadata(&r.outcome, "usage_source"),
        Some("model_usage_delta")
    );
    let cumulative: Value =
        serde_json::from_str(metadata(&r.outcome, "cumulative_usage").unwrap()).unwrap();
    assert_eq!(cumulative["basis"], "process");
}

#[test]
fn a_resident_turn_on_2_1_197_counts_only_its_own_calls() {
    // Two turns on one process: the second result's `modelUsage` and `total_cost_usd` are
    // the process's running totals.
    let result = |inputs: u64, cost: f64| {
        format!(
            r#"{{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"0b6c2a0e-54b6-4f3e-9d22-8d7a5f1c2b3a","total_cost_usd":{cost},"usage":{{"input_tokens":10,"output_tokens":7}},"modelUsage":{{"m":{{"inputTokens":{inputs},"outputTokens":{},"cacheReadInputTokens":0,"cacheCreationInputTokens":0,"costUSD":{cost}}}}}}}
"#,
            inputs * 7 / 10
        )
    };
    let init = br#"{"type":"system","subtype":"init","session_id":"0b6c2a0e-54b6-4f3e-9d22-8d7a5f1c2b3a","model":"m"}
"#;
    let mut req = request("one");
    req.config_json = json!({ "transport": "stream-json" }).to_string();
    let (mut h, _) = Harness::<ClaudeSession>::start(req.clone()).unwrap();
    h.stdout(init);
    h.stdout(result(10, 0.2).as_bytes());
    let first = h.finish_turn();
    assert_eq!(first.usage.unwrap().input_tokens, Some(10));
    h.next_turn(request("two")).unwrap();
    h.stdout(init);
    h.stdout(result(20, 0.4).as_bytes());
    let second = h.finish_turn();
    let u = second.usage.unwrap();
    assert_eq!(u.input_tokens, Some(10), "{u:?}");
    assert!((u.cost_usd.unwrap() - 0.2).abs() < 1e-9, "{u:?}");
}

#[test]
fn a_conversation_reset_moves_the_checkpoint_to_the_new_session() {
    // `/clear` between two prompts on one process: the reset frame still carries the old
    // session; the next `system/init` names the new one.
    let r = replayed(fixture!("v332_clear"), 0, 0, false);
    assert!(r.outcome.failure.is_none(), "{:?}", r.outcome.failure);
    let cp = r.outcome.checkpoint.clone().unwrap();
    assert!(cp.valid);
    assert!(cp.state.resume_id.starts_with("2e3287ce"), "{cp:?}");
    assert!(has_notice(&r, "conversation-reset"));
}

#[test]
fn permission_denials_without_asking_are_notices() {
    let r = replayed(fixture!("v332_permission_denied"), 0, 0, false);
    let notice = r
        .events()
        .into_iter()
        .find_map(|e| match e {
            Event::Notice(n) if n.kind == "permission-denied" => Some(n),
            _ => None,
        })
        .expect("a permission-denied notice");
    assert!(notice.message.starts_with("Write: "), "{}", notice.message);
    assert!(r.outcome.failure.is_none());
}

#[test]
fn terminal_reasons_become_typed_failure_reasons() {
    // 2.1.332: `terminal_reason: api_error` with `api_error_type`.
    let r = replayed(fixture!("v332_error_400"), 0, 1, false);
    let failure = r.outcome.failure.expect("failed");
    assert_eq!(failure.reason, FailureReason::AgentError);
    let details: Value = serde_json::from_str(failure.details_json.as_deref().unwrap()).unwrap();
    assert_eq!(details["terminal_reason"], "api_error");
    assert_eq!(details["api_error_type"], "invalid_request_error");
    let frame = |extra: Value| {
        let mut f = json!({"type": "result", "subtype": "success", "is_error": true});
        f.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        f
    };
    for (f, subtype, reason) in [
        (
            json!({"terminal_reason": "max_turns"}),
            "error_max_turns",
            "max_turns",
        ),
        (
            json!({"terminal_reason": "prompt_too_long"}),
            "success",
            "context_limit",
        ),
        (
            json!({"terminal_reason": "budget_exhausted"}),
            "error_max_budget_usd",
            "budget_exhausted",
        ),
        (
            json!({}),
            "error_max_structured_output_retries",
            "invalid_output",
        ),
        (
            json!({"api_error_type": "rate_limit_error", "api_error_status": 429}),
            "success",
            "rate_limited",
        ),
        (json!({"api_error_status": 429}), "success", "rate_limited"),
        (
            json!({"api_error_type": "overloaded_error"}),
            "success",
            "overloaded",
        ),
        (
            json!({"api_error_status": 401}),
            "success",
            "authentication_failed",
        ),
    ] {
        assert_eq!(
            crate::stream::result_failure_reason(&frame(f), subtype),
            FailureReason::Other(reason.into()),
            "{reason}"
        );
    }
}

#[test]
fn a_gap_in_result_numbers_is_reported() {
    let bytes = br#"{"type":"system","subtype":"init","session_id":"0b6c2a0e-54b6-4f3e-9d22-8d7a5f1c2b3a"}
{"type":"result","subtype":"success","is_error":false,"result":"a","result_index":0,"session_id":"0b6c2a0e-54b6-4f3e-9d22-8d7a5f1c2b3a"}
"#;
    let r = replayed(bytes, 0, 0, false);
    assert!(!has_notice(&r, "result-lost"));
    let bytes = br#"{"type":"system","subtype":"init","session_id":"0b6c2a0e-54b6-4f3e-9d22-8d7a5f1c2b3a"}
{"type":"result","subtype":"success","is_error":false,"result":"a","result_index":2,"session_id":"0b6c2a0e-54b6-4f3e-9d22-8d7a5f1c2b3a"}
"#;
    let r = replayed(bytes, 0, 0, false);
    assert!(has_notice(&r, "result-lost"));
}

#[test]
fn an_interrupted_2_1_332_turn_keeps_its_cut_text() {
    let r = replayed(fixture!("v332_interrupted"), 0, 1, true);
    let o = &r.outcome;
    assert!(o.failure.is_some());
    assert!(!o.checkpoint.as_ref().unwrap().valid);
    assert!(o.text.starts_with("slow reply"), "{}", o.text);
}

#[test]
fn a_steerable_run_reads_stream_json_and_takes_user_frames_until_idle() {
    use adaptor_sdk::{InputError, TurnRequest};
    let (mut h, _) = Harness::<ClaudeSession>::start(request("hello")).unwrap();
    assert!(matches!(h.input("more"), Err(InputError::Unsupported(_))));
    let (mut h, launch) = Harness::<ClaudeSession>::start_turn(TurnRequest {
        request: request("hello"),
        steerable: true,
    })
    .unwrap();
    assert!(launch.keep_stdin_open);
    assert!(
        launch
            .args
            .windows(2)
            .any(|w| w == ["--input-format", "stream-json"])
    );
    assert!(!launch.args.iter().any(|a| a == "--permission-prompt-tool"));
    let written = h.input("and the tests").unwrap();
    let frame: Value = match &written[0] {
        Action::WriteStdin(bytes) => serde_json::from_slice(bytes).unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(frame["type"], "user");
    assert_eq!(frame["message"]["content"], "and the tests");
    assert!(written.iter().any(|a| matches!(
        a,
        Action::Emit(Event::Item(i)) if i.kind == ItemKind::User
    )));
    // After `idle` the turn is over.
    h.stdout(fixture!("v332_permission_denied"));
    h.stdout(br#"{"type":"system","subtype":"session_state_changed","state":"idle","uuid":"u","session_id":"s"}
"#);
    assert!(matches!(h.input("late"), Err(InputError::TurnOver(_))));
}

#[test]
fn mcp_servers_can_travel_in_the_initialize_request() {
    let mut req = request("hello");
    req.config_json = json!({ "mcp_delivery": "stdin" }).to_string();
    req.mcp_servers = servers();
    let (mut h, launch) = Harness::<ClaudeSession>::start(req).unwrap();
    assert!(launch.args.iter().any(|a| a == "--await-initialize"));
    assert!(!launch.args.iter().any(|a| a == "--mcp-config"));
    assert!(launch.files.is_empty(), "nothing written to disk");
    assert!(launch.keep_stdin_open);
    let first: Value = serde_json::from_slice(&launch.stdin).unwrap();
    assert_eq!(first["request"]["subtype"], "initialize");
    assert!(first["request"]["mcpServers"].is_object());
    // Applied: the prompt follows. Not applied (an older CLI): the run fails, no prompt.
    let ok = h.stdout(br#"{"type":"control_response","response":{"subtype":"success","request_id":"agent-adaptor-initialize","response":{"mcp_servers_applied":true}}}
"#);
    assert!(ok.iter().any(
        |a| matches!(a, Action::WriteStdin(b) if String::from_utf8_lossy(b).contains("\"hello\""))
    ));
    let mut req = request("hello");
    req.config_json = json!({ "mcp_delivery": "stdin" }).to_string();
    req.mcp_servers = servers();
    let (mut h, _) = Harness::<ClaudeSession>::start(req).unwrap();
    let refused = h.stdout(br#"{"type":"control_response","response":{"subtype":"success","request_id":"agent-adaptor-initialize","response":{}}}
"#);
    assert!(refused.iter().any(|a| matches!(a, Action::CloseStdin)));
    assert!(!refused.iter().any(|a| matches!(a, Action::WriteStdin(_))));
    let (_, outcome) = h.exit(exited(1));
    let failure = outcome.failure.expect("failed");
    assert!(
        failure.message.contains("mcp_servers_applied"),
        "{}",
        failure.message
    );
    // Without servers nothing changes.
    let mut req = request("hello");
    req.config_json = json!({ "mcp_delivery": "stdin" }).to_string();
    assert!(!start(req).args.iter().any(|a| a == "--await-initialize"));
}
