//! Native tests: command lines per transport, config validation, and the parser on output
//! recorded from the real CodeBuddy Code CLI 2.117.0 (`testdata/`, captured offline against
//! the project's Chat Completions mock: `mock-serve chat`).

use super::*;
use adaptor_sdk::harness::{Harness, Replay, exited, replay, request};
use adaptor_sdk::{
    Action, ApprovalKind, Decision, Event, ExitStatus, FailureReason, ItemKind, OutputSchema,
    Phase, SessionState,
};

macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!("../testdata/", $name, ".jsonl")).as_slice()
    };
}

const ALL: &[(&str, &[u8])] = &[
    ("headless_plain", fixture!("headless_plain")),
    ("headless_partial", fixture!("headless_partial")),
    ("headless_tool_bash", fixture!("headless_tool_bash")),
    ("resume_second", fixture!("resume_second")),
    ("headless_error_500", fixture!("headless_error_500")),
];

fn start(req: RunRequest) -> Launch {
    Harness::<CodeBuddySession>::start(req).expect("start").1
}

fn replayed(bytes: &[u8], chunk: usize, code: i32, streaming: bool) -> Replay {
    let mut req = request("prompt");
    req.streaming = streaming;
    replay::<CodeBuddySession>(req, bytes, chunk, exited(code)).expect("start")
}

fn native_schema() -> OutputSchema {
    OutputSchema {
        // Sorted, with `$schema` (which the driver drops) last: the same output whether or
        // not serde_json preserves insertion order (the ACP SDK turns that on natively).
        schema_json: r#"{"properties":{"answer":{"type":"string"}},"required":["answer"],"type":"object","$schema":"x"}"#.into(),
        name: None,
        description: None,
        mechanism: SchemaMechanism::Native,
    }
}

#[test]
fn headless_command_line_puts_the_prompt_last() {
    let mut req = request("-x looks like a flag");
    req.streaming = true;
    req.model = Some("gpt-5.5".into());
    req.instructions = Some("Be brief.".into());
    req.config_json = json!({"effort": "max", "max_turns": 3}).to_string();
    let launch = start(req);
    assert_eq!(launch.program, "codebuddy");
    assert_eq!(
        launch.args,
        [
            "--print",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
            "--model",
            "gpt-5.5",
            "--effort",
            "max",
            "--max-turns",
            "3",
            "--append-system-prompt=Be brief.",
            "--",
            "-x looks like a flag",
        ]
    );
    assert!(launch.stdin.is_empty());
    assert!(!launch.keep_stdin_open);
    assert_eq!(
        launch.env,
        [("DISABLE_AUTOUPDATER".to_owned(), "1".to_owned())]
    );
}

#[test]
fn permission_mode_comes_from_the_config_or_the_policy() {
    let mut req = request("p");
    req.policy.permission = DecisionMode::AutoApprove;
    req.policy.plan_review = DecisionMode::AutoApprove;
    let args = start(req.clone()).args.join(" ");
    assert!(
        args.contains("--permission-mode bypassPermissions"),
        "{args}"
    );
    req.config_json = json!({"permission_mode": "acceptEdits"}).to_string();
    let args = start(req).args.join(" ");
    assert!(args.contains("--permission-mode acceptEdits"), "{args}");
    assert!(!args.contains("bypassPermissions"), "{args}");
}

#[test]
fn asking_uses_the_control_transport_with_the_initialize_handshake() {
    for policy in [
        |r: &mut RunRequest| r.policy.permission = DecisionMode::Ask,
        |r: &mut RunRequest| r.policy.question = DecisionMode::AutoDeny,
        // Plan review auto-approved by the host still needs the CLI to ask.
        |r: &mut RunRequest| r.policy.plan_review = DecisionMode::AutoApprove,
    ] {
        let mut req = request("hello");
        policy(&mut req);
        let launch = start(req);
        assert_eq!(
            &launch.args[..3],
            [
                "--input-format=stream-json",
                "--output-format=stream-json",
                "--verbose"
            ]
        );
        assert!(!launch.args.iter().any(|a| a == "hello" || a == "--print"));
        assert!(launch.keep_stdin_open);
        let first: Value = serde_json::from_slice(&launch.stdin).unwrap();
        assert_eq!(
            first,
            json!({"type":"control_request","request_id":"agent-adaptor-initialize",
                   "request":{"subtype":"initialize","hasPrompt":true,"capabilities":{"askUserQuestion":true}}})
        );
        // The host refuses `CODEBUDDY_*` from a driver: none is set.
        assert!(!launch.env.iter().any(|(k, _)| k.starts_with("CODEBUDDY_")));
    }
}

#[test]
fn the_prompt_is_written_once_the_cli_answers_initialize() {
    let mut req = request("hello there");
    req.policy.permission = DecisionMode::Ask;
    let (mut h, _) = Harness::<CodeBuddySession>::start(req).unwrap();
    let bytes = fixture!("control_bash_allowed");
    let first = std::str::from_utf8(bytes).unwrap().lines().next().unwrap();
    let actions = h.stdout(format!("{first}\n").as_bytes());
    let writes: Vec<Value> = actions
        .iter()
        .filter_map(|a| match a {
            Action::WriteStdin(b) => Some(serde_json::from_slice(b).unwrap()),
            _ => None,
        })
        .collect();
    assert_eq!(
        writes,
        [
            json!({"type":"user","session_id":"","parent_tool_use_id":null,
                "message":{"role":"user","content":"hello there"}})
        ]
    );
    // A second answer to the same id writes nothing more.
    let again = h.stdout(format!("{first}\n").as_bytes());
    assert!(!again.iter().any(|a| matches!(a, Action::WriteStdin(_))));
}

#[test]
fn a_refused_initialize_fails_the_run_and_closes_stdin() {
    let mut req = request("hello");
    req.policy.permission = DecisionMode::Ask;
    let (mut h, _) = Harness::<CodeBuddySession>::start(req).unwrap();
    let actions = h.stdout(
        br#"{"type":"control_response","response":{"subtype":"error","request_id":"agent-adaptor-initialize","error":"bad init"}}
"#,
    );
    assert!(actions.iter().any(|a| matches!(a, Action::CloseStdin)));
    assert!(!actions.iter().any(|a| matches!(a, Action::WriteStdin(_))));
    let (_, outcome) = h.exit(exited(1));
    let failure = outcome.failure.expect("failure");
    assert_eq!(failure.reason, FailureReason::AgentError);
    assert!(failure.message.contains("bad init"), "{}", failure.message);
}

#[test]
fn resume_fork_schema_mcp_and_owned_flags() {
    let mut req = request("p");
    req.streaming = false;
    req.resume = Some(adaptor_sdk::Resume {
        mode: SessionMode::Fork,
        state: SessionState {
            resume_id: "11111111-2222-4333-8444-555555555555".into(),
            display_id: None,
            data: Vec::new(),
        },
    });
    req.output_schema = Some(native_schema());
    let launch = start(req.clone());
    let args = launch.args.join(" ");
    assert!(
        args.starts_with("--print --output-format json --resume=11111111-2222-4333-8444-555555555555 --fork-session"),
        "{args}"
    );
    assert!(
        args.contains(r#"--json-schema {"properties":{"answer":{"type":"string"}},"required":["answer"],"type":"object"}"#),
        "{args}"
    );
    // Native schema only where the CLI answers it.
    let mut streaming = req.clone();
    streaming.streaming = true;
    assert!(matches!(
        Harness::<CodeBuddySession>::start(streaming),
        Err(StartError::Unsupported(_))
    ));
    // A stored id that is not a session id never reaches the command line.
    let mut bad = req.clone();
    bad.output_schema = None;
    bad.resume.as_mut().unwrap().state.resume_id = "--dangerously-skip-permissions".into();
    assert!(matches!(
        Harness::<CodeBuddySession>::start(bad),
        Err(StartError::ResumeRejected(_))
    ));
    for (config, path) in [
        (json!({"extra_args": ["--resume=x"]}), "/extra_args/0"),
        (json!({"extra_args": ["-ok", "-y"]}), "/extra_args/1"),
        (json!({"effort": "huge"}), "/effort"),
        (json!({"permission_mode": "yolo"}), "/permission_mode"),
        (json!({"max_turns": 0}), "/max_turns"),
        (json!({"unknown": 1}), "/unknown"),
    ] {
        let err = CodeBuddyDriver::validate_config(&config).unwrap_err();
        assert_eq!(err.path, path, "{config}");
    }
}

#[test]
fn any_split_of_the_bytes_gives_the_same_events_and_outcome() {
    for (name, bytes) in ALL {
        let whole = replayed(bytes, 0, 0, true);
        for chunk in [1, 3, 64, 1000] {
            let split = replayed(bytes, chunk, 0, true);
            assert_eq!(split.events(), whole.events(), "{name}: chunk {chunk}");
            assert_eq!(split.outcome, whole.outcome, "{name}: chunk {chunk}");
        }
    }
}

#[test]
fn plain_text_maps_text_usage_summary_session_and_checkpoint() {
    let r = replayed(fixture!("headless_plain"), 0, 0, false);
    let o = &r.outcome;
    let reply = "Hello from mock-chat! user_msgs=1 you said: <user_query>say hi</user_query>";
    assert_eq!(o.text, reply);
    assert_eq!(o.summary.as_deref(), Some(reply));
    assert!(o.failure.is_none(), "{:?}", o.failure);
    let u = o.usage.expect("usage");
    assert_eq!((u.input_tokens, u.output_tokens), (Some(23), Some(7)));
    assert_eq!(u.cost_usd, None);
    // A resumed turn: the result frame says 46 / 14 (the session so far); the turn is 23 / 7.
    let r2 = replayed(fixture!("resume_second"), 0, 0, false);
    let u2 = r2.outcome.usage.expect("usage");
    assert_eq!((u2.input_tokens, u2.output_tokens), (Some(23), Some(7)));
    let cp = o.checkpoint.clone().expect("checkpoint");
    assert!(cp.valid);
    assert_eq!(cp.state.resume_id, "2e98dfbf-aa4d-4de6-9596-12793d43ce0f");
    // `system/status` and `file-history-snapshot` are kept, not dropped.
    let vendor: Vec<String> = r
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Other(v) => Some(v.name),
            _ => None,
        })
        .collect();
    assert_eq!(vendor, ["system", "file-history-snapshot"]);
}

#[test]
fn partial_messages_stream_text_once() {
    let r = replayed(fixture!("headless_partial"), 0, 0, true);
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
}

#[test]
fn tool_calls_and_results_pair_up() {
    let r = replayed(fixture!("headless_tool_bash"), 0, 0, false);
    let transcript = &r.outcome.transcript;
    let call = transcript
        .iter()
        .find(|i| i.kind == ItemKind::ToolCall)
        .expect("tool call");
    assert_eq!(call.tool_name.as_deref(), Some("Bash"));
    let result = transcript
        .iter()
        .find(|i| i.kind == ItemKind::ToolResult)
        .expect("tool result");
    assert_eq!(result.tool_call_id, call.tool_call_id);
    assert!(result.text.as_deref().unwrap().contains("Stdout: tool-ran"));
    assert!(!result.is_error);
}

#[test]
fn an_api_error_fails_with_the_cli_message_and_no_valid_checkpoint() {
    let r = replayed(fixture!("headless_error_500"), 0, 0, false);
    let failure = r.outcome.failure.clone().expect("failure");
    assert_eq!(failure.reason, FailureReason::AgentError);
    assert!(
        failure.message.starts_with("500 mock injected 500"),
        "{}",
        failure.message
    );
    assert!(!r.outcome.checkpoint.expect("checkpoint").valid);
}

#[test]
fn native_json_output_is_read_whole_with_its_structured_output() {
    let bytes = include_bytes!("../testdata/native_json_schema.json");
    let mut req = request("give json");
    req.streaming = false;
    req.output_schema = Some(native_schema());
    for chunk in [0, 7, 4096] {
        let r = replay::<CodeBuddySession>(req.clone(), bytes, chunk, exited(0)).unwrap();
        let o = &r.outcome;
        assert!(o.failure.is_none(), "{:?}", o.failure);
        assert_eq!(o.structured_output.as_deref(), Some(r#"{"answer":"mock"}"#));
        assert!(o.checkpoint.as_ref().unwrap().valid);
        assert!(o.text.contains("Hello from mock-chat!"), "{}", o.text);
    }
    // Not JSON, or cut short: a protocol error.
    for bad in [&b"[{\"type\":\"result\""[..], b"not json", b"42"] {
        let r = replay::<CodeBuddySession>(req.clone(), bad, 0, exited(0)).unwrap();
        assert_eq!(
            r.outcome.failure.map(|f| f.reason),
            Some(FailureReason::ProtocolError)
        );
    }
}

fn control_request_line(bytes: &[u8]) -> String {
    std::str::from_utf8(bytes)
        .unwrap()
        .lines()
        .find(|l| l.contains("\"control_request\""))
        .unwrap()
        .to_owned()
}

fn asked(
    bytes: &[u8],
    policy: impl FnOnce(&mut RunRequest),
) -> (Harness<CodeBuddySession>, adaptor_sdk::ApprovalRequest) {
    let mut req = request("prompt");
    policy(&mut req);
    let (mut s, _) = Harness::<CodeBuddySession>::start(req).unwrap();
    let actions = s.stdout(format!("{}\n", control_request_line(bytes)).as_bytes());
    let Some(Action::RequestApproval(req)) = actions.last() else {
        panic!("{actions:?}")
    };
    (s, req.clone())
}

fn written(s: &mut Harness<CodeBuddySession>, id: &str, decision: Decision) -> Value {
    match s.decide(id, decision).as_slice() {
        [Action::WriteStdin(bytes)] => serde_json::from_slice::<Value>(bytes).unwrap(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn permission_requests_are_answered_in_codebuddys_shape() {
    let (mut s, req) = asked(fixture!("control_bash_allowed"), |r| {
        r.policy.permission = DecisionMode::Ask
    });
    assert_eq!(req.kind, ApprovalKind::Permission);
    assert_eq!(req.tool_name.as_deref(), Some("Bash"));
    assert_eq!(req.tool_call_id.as_deref(), Some("call_mock_1"));
    let id = req.id.clone();
    assert_eq!(
        written(&mut s, &id, Decision::Approve(None)),
        json!({"type":"control_response","response":{"subtype":"success","request_id":id,
               "response":{"allowed":true,"updatedInput":{"command":"echo tool-ran","description":"echo"},"tool_use_id":"call_mock_1"}}})
    );
    let (mut s, req) = asked(fixture!("control_bash_denied"), |r| {
        r.policy.permission = DecisionMode::Ask
    });
    let id = req.id.clone();
    assert_eq!(
        written(&mut s, &id, Decision::Deny("no".into())),
        json!({"type":"control_response","response":{"subtype":"success","request_id":id,
               "response":{"allowed":false,"reason":"no","interrupt":true,"tool_use_id":"call_mock_2"}}})
    );
}

#[test]
fn a_denied_tool_ends_the_recorded_run_as_a_denial() {
    let mut req = request("prompt");
    req.policy.permission = DecisionMode::Ask;
    let (mut s, _) = Harness::<CodeBuddySession>::start(req).unwrap();
    let bytes = fixture!("control_bash_denied");
    let mut asked = None;
    for line in std::str::from_utf8(bytes).unwrap().lines() {
        for a in s.stdout(format!("{line}\n").as_bytes()) {
            if let Action::RequestApproval(r) = a {
                asked = Some(r.id);
            }
        }
        if let Some(id) = asked.take() {
            s.decide(&id, Decision::Deny("not here".into()));
        }
    }
    let (_, outcome) = s.exit(exited(0));
    let failure = outcome.failure.expect("failure");
    assert_eq!(failure.reason, FailureReason::ApprovalDenied);
    assert!(
        failure
            .message
            .contains("Permission denied for tool(s): Bash")
    );
    assert!(!outcome.checkpoint.expect("checkpoint").valid);
}

#[test]
fn questions_and_plans_become_their_approval_kinds() {
    let (mut s, req) = asked(fixture!("control_question"), |r| {
        r.policy.question = DecisionMode::Ask
    });
    assert_eq!(req.kind, ApprovalKind::Question);
    assert_eq!(req.title, "Which color?");
    let keys: Vec<&str> = req.choices.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(keys, ["red", "blue"]);
    let id = req.id.clone();
    let frame = written(&mut s, &id, Decision::Answer("blue".into()));
    assert_eq!(
        frame["response"]["response"]["updatedInput"]["answers"],
        json!({"Which color?": "blue"})
    );
    assert_eq!(frame["response"]["response"]["allowed"], true);

    let (_, req) = asked(fixture!("control_plan"), |r| {
        r.policy.plan_review = DecisionMode::Ask
    });
    assert_eq!(req.kind, ApprovalKind::PlanReview);
    assert_eq!(req.details_json.as_deref(), Some(r#"{"plan":"1. do it"}"#));
}

#[test]
fn a_plan_written_to_the_plans_dir_is_the_plan_under_review() {
    let mut req = request("prompt");
    req.policy.plan_review = DecisionMode::Ask;
    let (mut s, _) = Harness::<CodeBuddySession>::start(req).unwrap();
    s.stdout(br##"{"type":"assistant","session_id":"s","message":{"id":"m1","content":[{"type":"tool_use","id":"w1","name":"Write","input":{"file_path":"/w/.codebuddy/plans/p.md","content":"# Plan\n1. step"}}]}}
"##);
    let actions = s.stdout(br#"{"type":"control_request","request_id":"perm_1","request":{"subtype":"can_use_tool","tool_name":"ExitPlanMode","input":{},"tool_use_id":"t2"}}
"#);
    let Some(Action::RequestApproval(req)) = actions.last() else {
        panic!("{actions:?}")
    };
    assert_eq!(
        req.details_json.as_deref(),
        Some(r##"{"plan":"# Plan\n1. step"}"##)
    );
}

#[test]
fn truncated_and_out_of_order_output_is_a_protocol_error() {
    let bytes = fixture!("headless_plain");
    let cut = &bytes[..bytes.len() - 40];
    let r = replayed(cut, 0, 0, false);
    assert_eq!(
        r.outcome.failure.clone().map(|f| f.reason),
        Some(FailureReason::ProtocolError)
    );
    assert!(!r.outcome.checkpoint.unwrap().valid);
    let mut after = bytes.to_vec();
    after.extend_from_slice(b"{\"type\":\"assistant\",\"message\":{\"content\":[]}}\n");
    let r = replayed(&after, 0, 0, false);
    assert_eq!(
        r.outcome.failure.map(|f| f.reason),
        Some(FailureReason::ProtocolError)
    );
    // A success frame, then a non-zero exit: not a success.
    let r = replayed(bytes, 0, 3, false);
    assert_eq!(
        r.outcome.failure.map(|f| f.reason),
        Some(FailureReason::AgentError)
    );
    assert!(!r.outcome.checkpoint.unwrap().valid);
    // A killed CLI.
    let killed = ExitStatus {
        code: None,
        signal: Some(9),
        timed_out: false,
        cancelled: false,
    };
    let r = replay::<CodeBuddySession>(request("p"), &bytes[..200], 0, killed).unwrap();
    assert!(r.outcome.failure.is_some());
}

#[test]
fn deferred_tools_are_shown_unwrapped_and_answered_wrapped() {
    let mut req = request("prompt");
    req.policy.permission = DecisionMode::Ask;
    let (mut s, _) = Harness::<CodeBuddySession>::start(req).unwrap();
    let actions = s.stdout(br#"{"type":"assistant","session_id":"s","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"DeferExecuteTool","input":{"toolName":"mcp__docs__search","params":{"q":"x"}}}]}}
{"type":"control_request","request_id":"perm_9","request":{"subtype":"can_use_tool","tool_name":"DeferExecuteTool","input":{"toolName":"mcp__docs__search","params":{"q":"x"}},"tool_use_id":"t1"}}
"#);
    let started = actions.iter().find_map(|a| match a {
        Action::Emit(Event::ToolCall(t)) => Some(t.clone()),
        _ => None,
    });
    let started = started.expect("tool event");
    assert_eq!(started.name, "mcp__docs__search");
    let Some(Action::RequestApproval(asked)) = actions.last() else {
        panic!("{actions:?}")
    };
    assert_eq!(asked.tool_name.as_deref(), Some("mcp__docs__search"));
    assert_eq!(
        asked.details_json.as_deref(),
        Some(r#"{"input":{"q":"x"}}"#)
    );
    let frame = written(&mut s, "perm_9", Decision::Approve(None));
    assert_eq!(
        frame["response"]["response"]["updatedInput"],
        json!({"toolName":"mcp__docs__search","params":{"q":"x"}})
    );
}

#[test]
fn unknown_frames_are_vendor_events_and_system_items() {
    let r = replayed(
        b"{\"type\":\"brand_new\",\"session_id\":\"s\",\"x\":1}\n",
        0,
        0,
        false,
    );
    assert!(
        r.events()
            .iter()
            .any(|e| matches!(e, Event::Other(v) if v.name == "brand_new"))
    );
    assert!(
        r.outcome
            .transcript
            .iter()
            .any(|i| i.kind == ItemKind::System)
    );
}

#[test]
fn the_control_transport_serves_further_turns_on_one_process() {
    let mut req = request("hello");
    req.config_json = json!({"transport": "stream-json"}).to_string();
    let (mut h, launch) = Harness::<CodeBuddySession>::start(req.clone()).unwrap();
    assert!(launch.keep_stdin_open);
    h.stdout(
        fixture!("control_question")
            .split(|b| *b == b'\n')
            .next()
            .unwrap(),
    );
    h.stdout(b"\n");
    h.stdout(fixture!("headless_plain"));
    assert!(h.actions.iter().any(|a| matches!(a, Action::EndTurn)));
    let first = h.finish_turn();
    assert!(first.failure.is_none(), "{:?}", first.failure);
    let mut next = req;
    next.prompt = "again".into();
    let actions = h.next_turn(next).expect("next turn");
    let [Action::WriteStdin(bytes)] = actions.as_slice() else {
        panic!("{actions:?}")
    };
    let frame: Value = serde_json::from_slice(bytes).unwrap();
    assert_eq!(frame["message"]["content"], "again");
}
