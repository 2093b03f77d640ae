//! Native tests: the command line, config validation, and the strict parser on frames in
//! the shapes of Cursor Agent's documented and recorded output (`testdata/`: the documented
//! read/write example, the live-recorded MCP and subagent shapes of 2026-07-23, the
//! partial-output forms, an unknown frame), plus every protocol violation the contract
//! names.

use super::*;
use adaptor_sdk::harness::{Harness, Replay, exited, replay, request};
use adaptor_sdk::{Event, ExitStatus, FailureReason, ItemKind, Phase, SessionMode, SessionState};

macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!("../testdata/", $name, ".jsonl")).as_slice()
    };
}

const ALL: &[(&str, &[u8], bool)] = &[
    (
        "documented_read_write",
        fixture!("documented_read_write"),
        false,
    ),
    ("live_mcp_task", fixture!("live_mcp_task"), false),
    ("partial_forms", fixture!("partial_forms"), true),
    ("unknown_frame", fixture!("unknown_frame"), false),
];

fn start(req: RunRequest) -> Result<Launch, StartError> {
    Harness::<CursorSession>::start(req).map(|(_, l)| l)
}

fn replayed(bytes: &[u8], streaming: bool, code: i32) -> Replay {
    let mut req = request("prompt");
    req.streaming = streaming;
    replay::<CursorSession>(req, bytes, 0, exited(code)).expect("start")
}

fn reason(r: &Replay) -> Option<FailureReason> {
    r.outcome.failure.as_ref().map(|f| f.reason.clone())
}

#[test]
fn command_line_and_prompt_on_stdin() {
    let mut req = request("-looks like a flag");
    req.streaming = true;
    req.workspace = "/w".into();
    req.model = Some("gpt-5".into());
    req.policy.permission = DecisionMode::AutoApprove;
    req.config_json = json!({"mode": "ask", "extra_args": ["--sandbox", "enabled"]}).to_string();
    let launch = start(req).unwrap();
    assert_eq!(launch.program, "agent");
    assert_eq!(
        launch.args,
        [
            "-p",
            "--output-format",
            "stream-json",
            "--workspace",
            "/w",
            "--stream-partial-output",
            "--model",
            "gpt-5",
            "--mode",
            "ask",
            "--force",
            "--sandbox",
            "enabled"
        ]
    );
    assert_eq!(launch.stdin, b"-looks like a flag");
    assert!(!launch.keep_stdin_open);
}

#[test]
fn resume_ids_are_checked_and_unsupported_requests_refused() {
    let mut req = request("p");
    req.resume = Some(adaptor_sdk::Resume {
        mode: SessionMode::ContinueOnly,
        state: SessionState {
            resume_id: "c6b62c6f-7ead-4fd6-9922-e952131177ff".into(),
            display_id: None,
            data: Vec::new(),
        },
    });
    let args = start(req.clone()).unwrap().args;
    assert!(args.contains(&"--resume=c6b62c6f-7ead-4fd6-9922-e952131177ff".to_owned()));
    let mut bad = req.clone();
    bad.resume.as_mut().unwrap().state.resume_id = "--force".into();
    assert!(matches!(start(bad), Err(StartError::ResumeRejected(_))));
    let mut instructions = request("p");
    instructions.instructions = Some("be brief".into());
    assert!(matches!(
        start(instructions),
        Err(StartError::Unsupported(_))
    ));
    let mut ask = request("p");
    ask.policy.permission = DecisionMode::Ask;
    assert!(matches!(start(ask), Err(StartError::Unsupported(_))));
    for (config, path) in [
        (json!({"mode": "plan"}), "/mode"),
        (json!({"extra_args": ["--resume=x"]}), "/extra_args/0"),
        (json!({"extra_args": ["--x", "--yolo"]}), "/extra_args/1"),
        (json!({"effort": "high"}), "/effort"),
    ] {
        assert_eq!(
            CursorDriver::validate_config(&config).unwrap_err().path,
            path,
            "{config}"
        );
    }
}

#[test]
fn any_split_of_the_bytes_gives_the_same_events_and_outcome() {
    for (name, bytes, streaming) in ALL {
        let mut req = request("prompt");
        req.streaming = *streaming;
        let whole = replay::<CursorSession>(req.clone(), bytes, 0, exited(0)).unwrap();
        assert!(
            whole.outcome.failure.is_none(),
            "{name}: {:?}",
            whole.outcome.failure
        );
        for chunk in [1, 3, 64, 1000] {
            let split = replay::<CursorSession>(req.clone(), bytes, chunk, exited(0)).unwrap();
            assert_eq!(split.events(), whole.events(), "{name}: chunk {chunk}");
            assert_eq!(split.outcome, whole.outcome, "{name}: chunk {chunk}");
        }
    }
}

#[test]
fn documented_run_maps_text_tools_session_and_checkpoint() {
    let r = replayed(fixture!("documented_read_write"), false, 0);
    let o = &r.outcome;
    assert_eq!(o.text, "I'll read the README.md file and create a summary");
    assert_eq!(o.summary, None, "Cursor has no summary");
    assert_eq!(o.model.as_deref(), Some("Claude 4 Sonnet"));
    assert_eq!(o.usage, None, "no usage is invented");
    let cp = o.checkpoint.clone().expect("checkpoint");
    assert!(cp.valid);
    assert_eq!(cp.state.resume_id, "c6b62c6f-7ead-4fd6-9922-e952131177ff");
    let tools: Vec<(String, Option<String>)> = o
        .transcript
        .iter()
        .filter(|i| i.kind == ItemKind::ToolCall)
        .map(|i| (i.tool_name.clone().unwrap(), i.input_json.clone()))
        .collect();
    assert_eq!(
        tools[0],
        ("read".into(), Some(r#"{"path":"README.md"}"#.into()))
    );
    assert_eq!(tools[1].0, "write");
    let results: Vec<&str> = o
        .transcript
        .iter()
        .filter(|i| i.kind == ItemKind::ToolResult)
        .map(|i| i.text.as_deref().unwrap())
        .collect();
    assert!(results[0].starts_with("# Project"));
    assert!(results[1].contains("linesCreated"));
    assert_eq!(o.terminal.as_ref().unwrap().event, "result");
}

#[test]
fn mcp_task_and_rejected_calls_from_the_live_shapes() {
    let r = replayed(fixture!("live_mcp_task"), false, 0);
    let results: Vec<(String, String, bool)> = r
        .outcome
        .transcript
        .iter()
        .filter(|i| i.kind == ItemKind::ToolResult)
        .map(|i| {
            (
                i.tool_name.clone().unwrap(),
                i.text.clone().unwrap(),
                i.is_error,
            )
        })
        .collect();
    assert_eq!(
        results,
        [
            ("docs/lookup".into(), r#"{"token":"DOCS_OK"}"#.into(), false),
            ("task".into(), "HELPER_OK".into(), false),
            ("shell".into(), "not allowed without --force".into(), true),
        ]
    );
    assert_eq!(
        r.outcome.text, "DOCS_OK HELPER_OK",
        "the result text when no assistant text came"
    );
}

#[test]
fn partial_output_streams_deltas_once() {
    let r = replayed(fixture!("partial_forms"), true, 0);
    let deltas: Vec<String> = r
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Text(t) if t.phase == Phase::Delta => Some(t.text),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["Reading", " the file...", " It is", " missing."]);
    assert_eq!(r.outcome.text, "Reading the file... It is missing.");
    // The closing echo is kept, not dropped.
    assert!(
        r.events()
            .iter()
            .any(|e| matches!(e, Event::Other(v) if v.name == "assistant"))
    );
    let failed = r
        .outcome
        .transcript
        .iter()
        .find(|i| i.kind == ItemKind::ToolResult)
        .unwrap();
    assert!(failed.is_error);
    assert_eq!(failed.text.as_deref(), Some("File not found: a.txt"));
}

#[test]
fn unknown_frames_are_vendor_events_and_system_items() {
    let r = replayed(fixture!("unknown_frame"), false, 0);
    assert!(r.outcome.failure.is_none());
    assert!(
        r.events()
            .iter()
            .any(|e| matches!(e, Event::Other(v) if v.name == "connection"))
    );
    assert!(
        r.outcome
            .transcript
            .iter()
            .any(|i| i.kind == ItemKind::System)
    );
}

/// `documented_read_write` with `edit` applied to its lines.
fn edited(edit: impl FnOnce(&mut Vec<String>)) -> Vec<u8> {
    let text = std::str::from_utf8(fixture!("documented_read_write")).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    edit(&mut lines);
    let mut out = lines.join("\n");
    out.push('\n');
    out.into_bytes()
}

#[test]
fn every_protocol_violation_fails_without_a_valid_checkpoint() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "a frame without session_id",
            edited(|l| {
                l[2] = l[2].replace(
                    r#","session_id":"c6b62c6f-7ead-4fd6-9922-e952131177ff""#,
                    "",
                )
            }),
        ),
        (
            "a changing session_id",
            edited(|l| l[2] = l[2].replace("c6b62c6f", "d7c73d7f")),
        ),
        (
            "a frame after the result",
            edited(|l| {
                let late = l[2].clone();
                l.push(late)
            }),
        ),
        (
            "two variants",
            edited(|l| {
                l[3] = l[3].replace(
                    r#""readToolCall":{"args":{"path":"README.md"}}"#,
                    r#""readToolCall":{"args":{}},"writeToolCall":{"args":{}}"#,
                )
            }),
        ),
        (
            "no result envelope",
            edited(|l| l[4] = l[4].replace(r#""result":{"success""#, r#""outcome":{"success""#)),
        ),
        (
            "completed before started",
            edited(|l| {
                l.remove(3);
            }),
        ),
        (
            "a result without is_error",
            edited(|l| l[8] = l[8].replace(r#""is_error":false,"#, "")),
        ),
        ("a truncated line", {
            let mut b = edited(|l| {
                l.pop();
            });
            b.extend_from_slice(br#"{"type":"result","subtype":"succ"#);
            b
        }),
    ];
    for (name, bytes) in cases {
        let r = replayed(&bytes, false, 0);
        assert_eq!(reason(&r), Some(FailureReason::ProtocolError), "{name}");
        assert!(
            !r.outcome.checkpoint.as_ref().is_some_and(|c| c.valid),
            "{name}: no valid checkpoint"
        );
    }
}

#[test]
fn failures_exit_codes_and_error_results() {
    // Exit 1 without a result: the last stderr line is the message.
    let mut req = request("p");
    req.streaming = false;
    let (mut h, _) = Harness::<CursorSession>::start(req.clone()).unwrap();
    let init = std::str::from_utf8(fixture!("documented_read_write"))
        .unwrap()
        .lines()
        .next()
        .unwrap();
    h.stdout(format!("{init}\n").as_bytes());
    h.stderr(b"Error: network unreachable\n");
    let (_, o) = h.exit(exited(1));
    let f = o.failure.expect("failure");
    assert_eq!(f.reason, FailureReason::AgentError);
    assert!(
        f.message.ends_with(": Error: network unreachable"),
        "{}",
        f.message
    );
    assert!(!o.checkpoint.unwrap().valid);
    // A success frame, then a non-zero exit.
    let r = replayed(fixture!("documented_read_write"), false, 2);
    assert_eq!(reason(&r), Some(FailureReason::AgentError));
    assert!(!r.outcome.checkpoint.unwrap().valid);
    // An error result.
    let bytes = edited(|l| {
        l[8] = l[8]
            .replace(r#""subtype":"success""#, r#""subtype":"error""#)
            .replace(r#""is_error":false"#, r#""is_error":true"#)
    });
    let r = replayed(&bytes, false, 0);
    assert_eq!(reason(&r), Some(FailureReason::AgentError));
    assert!(!r.outcome.checkpoint.unwrap().valid);
    // Killed by the host mid-run.
    let killed = ExitStatus {
        code: None,
        signal: Some(9),
        timed_out: true,
        cancelled: false,
    };
    let r =
        replay::<CursorSession>(req, &fixture!("documented_read_write")[..300], 0, killed).unwrap();
    assert!(r.outcome.failure.is_some());
    assert!(!r.outcome.checkpoint.unwrap().valid);
}
