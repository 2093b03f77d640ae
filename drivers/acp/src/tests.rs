//! Native tests: the command line, config validation, and the protocol state machine — on
//! frames written from the protocol here, and on output recorded from the real agents
//! (`testdata/`, captured against the project's mocks; see `recorded.rs`).

use super::*;
use adaptor_sdk::harness::{Harness, events_of, exited, request};
use adaptor_sdk::{
    Action, Decision, DecisionMode, Event, FailureReason, Fallback, Launch, Phase, Resume,
    RunRequest, SessionMode, SessionState, StartError,
};

mod recorded;

const SID: &str = "sess-1";

fn config() -> String {
    json!({"command": "agent", "args": ["--acp"]}).to_string()
}

fn req(prompt: &str) -> RunRequest {
    let mut r = request(prompt);
    r.config_json = config();
    r
}

fn start(req: RunRequest) -> Launch {
    Harness::<AcpSession>::start(req).expect("start").1
}

/// Frames the driver wrote to stdin in `actions`.
fn written(actions: &[Action]) -> Vec<Value> {
    let mut frames = Vec::new();
    for action in actions {
        if let Action::WriteStdin(bytes) = action {
            for line in String::from_utf8_lossy(bytes).lines() {
                frames.push(serde_json::from_str(line).expect("a JSON frame"));
            }
        }
    }
    frames
}

fn line(value: Value) -> Vec<u8> {
    let mut bytes = value.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

fn result(id: u64, result: Value) -> Vec<u8> {
    line(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn update(update: Value) -> Vec<u8> {
    line(
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": SID, "update": update}}),
    )
}

fn chunk(text: &str) -> Vec<u8> {
    update(
        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}),
    )
}

fn initialized(caps: Value) -> Vec<u8> {
    result(
        1,
        json!({"protocolVersion": 1, "agentCapabilities": caps, "authMethods": []}),
    )
}

/// A harness past `initialize` and `session/new`, its prompt sent (request id 3).
fn prompting(req: RunRequest) -> Harness<AcpSession> {
    let (mut h, _) = Harness::<AcpSession>::start(req).expect("start");
    let out = h.stdout(&initialized(json!({"loadSession": true})));
    let sent = written(&out);
    assert_eq!(sent[0]["method"], "session/new");
    assert_eq!(sent[0]["params"]["cwd"], "/workspace");
    assert_eq!(sent[0]["params"]["mcpServers"], json!([]));
    let out = h.stdout(&result(2, json!({"sessionId": SID})));
    let sent = written(&out);
    assert_eq!(sent[0]["method"], "session/prompt");
    assert_eq!(sent[0]["id"], 3);
    assert_eq!(sent[0]["params"]["sessionId"], SID);
    h
}

fn failure(outcome: &adaptor_sdk::Outcome) -> (FailureReason, String) {
    let f = outcome.failure.as_ref().expect("a failure");
    (f.reason.clone(), f.message.clone())
}

#[test]
fn a_preset_sets_the_arguments() {
    let mut r = request("hello");
    r.config_json = json!({"agent": "gemini", "command": "gemini"}).to_string();
    let launch = start(r);
    assert_eq!(launch.program, "gemini");
    assert_eq!(launch.args, ["--acp"]);
    assert!(launch.keep_stdin_open);
    let first: Value = serde_json::from_slice(&launch.stdin).unwrap();
    assert_eq!(first["jsonrpc"], "2.0");
    assert_eq!(first["method"], "initialize");
    assert_eq!(first["params"]["protocolVersion"], 1);
    assert_eq!(
        first["params"]["clientCapabilities"],
        json!({"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false})
    );
    let mut r = request("hello");
    r.config_json =
        json!({"agent": "opencode", "command": "/opt/opencode", "extra_args": ["--print-logs"]})
            .to_string();
    let launch = start(r);
    assert_eq!(launch.program, "/opt/opencode");
    assert_eq!(launch.args, ["acp", "--print-logs"]);
}

#[test]
fn config_is_checked() {
    for (config, path) in [
        (json!({"agent": "claude"}), "/agent"),
        (json!({"restore": "maybe"}), "/restore"),
        (json!({"args": [1]}), "/args"),
        (
            json!({"config_options": {"model": "x"}}),
            "/config_options/model",
        ),
        (json!({"config_options": {"effort": 1}}), "/config_options"),
        (json!({"extra_args": ["a\nb"]}), "/extra_args/0"),
        (json!({"sandbox": true}), "/sandbox"),
    ] {
        let err = AcpDriver::validate_config(&config).unwrap_err();
        assert_eq!(err.path, path, "{config}");
    }
    let mut r = request("hello");
    r.config_json = "{}".into();
    let err = Harness::<AcpSession>::start(r).err().expect("no command");
    assert!(
        matches!(&err, StartError::InvalidRequest(m) if m.contains("`command`") && m.contains("gemini")),
        "{err:?}"
    );
}

#[test]
fn the_fingerprint_covers_what_makes_the_session() {
    adaptor_sdk::harness::assert_fingerprint_covers::<AcpDriver>(
        &[
            json!({"command": "/usr/bin/gemini"}),
            json!({"restore": "load"}),
        ],
        &[
            json!({"agent": "gemini"}),
            json!({"args": ["--acp"]}),
            json!({"model": "m"}),
            json!({"mode": "plan"}),
            json!({"config_options": {"effort": "high"}}),
        ],
    );
}

#[test]
fn a_plain_turn_streams_text_and_reports_usage() {
    let mut h = prompting(req("hi"));
    let mut out = h.stdout(&chunk("Hel"));
    out.extend(h.stdout(&update(
        json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}}),
    )));
    out.extend(h.stdout(&chunk("lo")));
    out.extend(h.stdout(&update(json!({"sessionUpdate": "usage_update", "used": 10, "size": 100, "cost": {"amount": 0.25, "currency": "USD"}}))));
    out.extend(h.stdout(&result(
        3,
        json!({"stopReason": "end_turn", "usage": {"inputTokens": 7, "outputTokens": 5, "totalTokens": 12}}),
    )));
    assert!(out.iter().any(|a| matches!(a, Action::EndTurn)));
    let events = events_of(&out);
    let texts: Vec<(Phase, String)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Text(t) => Some((t.phase, t.text.clone())),
            _ => None,
        })
        .collect();
    // The thought chunk splits the message into two parts.
    assert_eq!(texts.iter().filter(|(p, _)| *p == Phase::Start).count(), 2);
    let (_, outcome) = h.exit(exited(0));
    assert!(outcome.failure.is_none(), "{:?}", outcome.failure);
    assert_eq!(outcome.text, "Hel\n\nlo");
    let usage = outcome.usage.expect("usage");
    assert_eq!(usage.input_tokens, Some(7));
    assert_eq!(usage.output_tokens, Some(5));
    assert_eq!(usage.cache_read_tokens, None, "absent is never zero");
    assert_eq!(usage.cost_usd, Some(0.25));
    let cp = outcome.checkpoint.expect("checkpoint");
    assert!(cp.valid);
    assert_eq!(cp.state.resume_id, SID);
    assert_eq!(
        cp.state.data,
        vec![("cost_total".to_owned(), "0.25".to_owned())]
    );
}

#[test]
fn stop_reasons_other_than_end_turn_fail_with_the_reason() {
    for (stop, reason) in [
        ("refusal", FailureReason::AgentError),
        ("max_tokens", FailureReason::AgentError),
        ("max_turn_requests", FailureReason::AgentError),
        ("cancelled", FailureReason::Cancelled),
    ] {
        let mut h = prompting(req("hi"));
        h.stdout(&result(3, json!({"stopReason": stop})));
        let (_, outcome) = h.exit(exited(0));
        let (got, message) = failure(&outcome);
        assert_eq!(got, reason, "{stop}");
        assert!(message.contains(stop), "{stop}: {message}");
        assert!(!outcome.checkpoint.expect("checkpoint").valid);
    }
}

#[test]
fn tool_calls_keep_kind_status_locations_and_diffs() {
    let mut h = prompting(req("hi"));
    let mut out = h.stdout(&update(json!({
        "sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Write notes.txt", "kind": "edit",
        "status": "pending", "locations": [{"path": "/workspace/notes.txt"}], "rawInput": {"file_path": "notes.txt"},
    })));
    out.extend(h.stdout(&update(
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "in_progress"}),
    )));
    out.extend(h.stdout(&update(json!({
        "sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed",
        "content": [{"type": "diff", "path": "/workspace/notes.txt", "oldText": null, "newText": "hi"},
                    {"type": "content", "content": {"type": "text", "text": "wrote 2 bytes"}}],
    }))));
    out.extend(h.stdout(&update(json!({"sessionUpdate": "plan", "entries": [{"content": "x", "priority": "high", "status": "pending"}]}))));
    let events = events_of(&out);
    let phases: Vec<Phase> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCall(c) => Some(c.phase),
            _ => None,
        })
        .collect();
    assert_eq!(phases, [Phase::Start, Phase::End]);
    assert!(
        events.iter().any(
            |e| matches!(e, Event::ToolResult(r) if r.output == "wrote 2 bytes" && !r.is_error)
        )
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Other(v) if v.name == "acp/plan"))
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Other(v) if v.name == "acp/tool_call_update"))
    );
    h.stdout(&result(3, json!({"stopReason": "end_turn"})));
    let (_, outcome) = h.exit(exited(0));
    let result_item = outcome
        .transcript
        .iter()
        .find(|i| i.kind == adaptor_sdk::ItemKind::ToolResult)
        .expect("tool result");
    let data: Value = serde_json::from_str(result_item.data_json.as_deref().unwrap()).unwrap();
    assert_eq!(data["kind"], "edit");
    assert_eq!(data["status"], "completed");
    assert_eq!(data["locations"][0]["path"], "/workspace/notes.txt");
    assert_eq!(data["diffs"][0]["newText"], "hi");
}

#[test]
fn an_unfinished_tool_call_fails_when_the_turn_ends() {
    let mut h = prompting(req("hi"));
    h.stdout(&update(json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "ls", "kind": "execute", "status": "in_progress"})));
    let out = h.stdout(&result(3, json!({"stopReason": "end_turn"})));
    assert!(
        events_of(&out)
            .iter()
            .any(|e| matches!(e, Event::ToolResult(r) if r.is_error))
    );
}

fn permission_request(id: u64) -> Vec<u8> {
    line(json!({
        "jsonrpc": "2.0", "id": id, "method": "session/request_permission",
        "params": {
            "sessionId": SID,
            "toolCall": {"toolCallId": "t1", "title": "echo hi", "kind": "execute", "status": "pending"},
            "options": [
                {"optionId": "proceed_always", "name": "Always", "kind": "allow_always"},
                {"optionId": "proceed_once", "name": "Once", "kind": "allow_once"},
                {"optionId": "cancel", "name": "No", "kind": "reject_once"},
            ],
        },
    }))
}

fn asked(actions: &[Action]) -> adaptor_sdk::ApprovalRequest {
    actions
        .iter()
        .find_map(|a| match a {
            Action::RequestApproval(r) => Some(r.clone()),
            _ => None,
        })
        .expect("an approval request")
}

#[test]
fn a_permission_request_is_one_approval_with_the_offered_options() {
    let mut r = req("hi");
    r.policy.permission = DecisionMode::Ask;
    let mut h = prompting(r);
    let out = h.stdout(&permission_request(0));
    let approval = asked(&out);
    assert_eq!(approval.kind, adaptor_sdk::ApprovalKind::Permission);
    assert_eq!(approval.tool_call_id.as_deref(), Some("t1"));
    assert_eq!(approval.tool_name.as_deref(), Some("execute"));
    let keys: Vec<(&str, Option<&str>)> = approval
        .choices
        .iter()
        .map(|c| (c.key.as_str(), c.description.as_deref()))
        .collect();
    assert_eq!(
        keys,
        [
            ("proceed_always", Some("allow_always")),
            ("proceed_once", Some("allow_once")),
            ("cancel", Some("reject_once"))
        ]
    );
    // The request announced the tool call.
    assert!(
        events_of(&out)
            .iter()
            .any(|e| matches!(e, Event::ToolCall(c) if c.phase == Phase::Start))
    );
    let answer = written(&h.decide(&approval.id, Decision::Approve(None)));
    assert_eq!(
        answer,
        [
            json!({"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}})
        ]
    );
    // Answered once: a second decision writes nothing.
    assert!(written(&h.decide(&approval.id, Decision::Approve(None))).is_empty());
}

#[test]
fn a_refusal_selects_the_reject_option_and_never_an_allow() {
    for (decision, reason) in [
        (
            Decision::Deny("no".into()),
            Some(FailureReason::ApprovalDenied),
        ),
        (Decision::TimedOut, Some(FailureReason::ApprovalTimeout)),
        (
            Decision::Unanswered,
            Some(FailureReason::ApprovalUnanswered),
        ),
        (
            Decision::Approve(Some("{}".into())),
            Some(FailureReason::ApprovalDenied),
        ),
    ] {
        let mut h = prompting(req("hi"));
        let approval = asked(&h.stdout(&permission_request(7)));
        let sent = written(&h.decide(&approval.id, decision.clone()));
        assert_eq!(
            sent[0]["result"]["outcome"]["optionId"], "cancel",
            "{decision:?}"
        );
        // Abort (the default fallback): the prompt is cancelled.
        assert_eq!(sent[1]["method"], "session/cancel", "{decision:?}");
        h.stdout(&result(3, json!({"stopReason": "cancelled"})));
        let (_, outcome) = h.exit(exited(0));
        assert_eq!(Some(failure(&outcome).0), reason, "{decision:?}");
    }
    // Continue: "no", and the turn goes on.
    let mut r = req("hi");
    r.policy.on_reject = Fallback::Continue;
    let mut h = prompting(r);
    let approval = asked(&h.stdout(&permission_request(7)));
    let sent = written(&h.decide(&approval.id, Decision::Deny("no".into())));
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["result"]["outcome"]["optionId"], "cancel");
    h.stdout(&result(3, json!({"stopReason": "end_turn"})));
    assert!(h.exit(exited(0)).1.failure.is_none());
}

#[test]
fn without_a_reject_option_a_refusal_answers_cancelled() {
    let mut h = prompting(req("hi"));
    let request = line(json!({
        "jsonrpc": "2.0", "id": 9, "method": "session/request_permission",
        "params": {"sessionId": SID, "toolCall": {"toolCallId": "t9"}, "options": [{"optionId": "ok", "name": "OK", "kind": "allow_once"}]},
    }));
    let approval = asked(&h.stdout(&request));
    let sent = written(&h.decide(&approval.id, Decision::Deny(String::new())));
    assert_eq!(
        sent[0]["result"]["outcome"],
        json!({"outcome": "cancelled"})
    );
}

#[test]
fn cancel_sends_session_cancel_and_answers_pending_permissions() {
    let mut h = prompting(req("hi"));
    h.stdout(&permission_request(4));
    let sent = written(&h.cancel());
    assert_eq!(sent[0]["id"], 4);
    assert_eq!(
        sent[0]["result"]["outcome"],
        json!({"outcome": "cancelled"})
    );
    assert_eq!(
        sent[1],
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": SID}})
    );
    // Once.
    assert!(written(&h.cancel()).is_empty());
    h.stdout(&result(3, json!({"stopReason": "cancelled"})));
    let (_, outcome) = h.exit(exited(0));
    assert_eq!(failure(&outcome).0, FailureReason::Cancelled);
}

#[test]
fn file_system_and_terminal_requests_get_a_json_rpc_error() {
    let mut h = prompting(req("hi"));
    for (id, method) in [
        (11, "fs/read_text_file"),
        (12, "terminal/create"),
        (13, "x/other"),
    ] {
        let out = h.stdout(&line(
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"sessionId": SID}}),
        ));
        let sent = written(&out);
        assert_eq!(sent[0]["id"], id);
        assert_eq!(sent[0]["error"]["code"], -32601, "{method}");
        assert!(
            events_of(&out)
                .iter()
                .any(|e| matches!(e, Event::Notice(n) if n.kind == "acp.client_request_refused"))
        );
    }
}

#[test]
fn bad_input_is_a_protocol_error_naming_the_line() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("unknown request id 99", result(99, json!({}))),
        (
            "another session",
            line(
                json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "other", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}}}}),
            ),
        ),
        (
            "malformed JSON",
            b"{\"jsonrpc\": \"2.0\", \"id\": \n".to_vec(),
        ),
        ("jsonrpc", line(json!({"id": 3, "result": {}}))),
        ("not JSON-RPC", b"Loaded cached credentials.\n".to_vec()),
    ];
    for (problem, frame) in cases {
        let mut h = prompting(req("hi"));
        h.stdout(&frame);
        h.stdout(&result(3, json!({"stopReason": "end_turn"})));
        let (_, outcome) = h.exit(exited(0));
        let (reason, message) = failure(&outcome);
        assert_eq!(reason, FailureReason::ProtocolError, "{problem}: {message}");
        assert!(message.contains(problem), "{problem}: {message}");
        // initialize, session/new, the bad frame: line 3.
        assert!(message.starts_with("stdout line 3: "), "{message}");
    }
}

#[test]
fn an_agent_that_exits_mid_turn_fails_with_its_last_stderr_line() {
    let mut h = prompting(req("hi"));
    h.stdout(&chunk("partial"));
    h.stderr(b"boom: the model went away\n");
    let (_, outcome) = h.exit(exited(1));
    let (reason, message) = failure(&outcome);
    assert_eq!(reason, FailureReason::AgentError);
    assert_eq!(
        message,
        "the agent exited with code 1 before the turn completed: boom: the model went away"
    );
    assert_eq!(outcome.text, "partial");
}

#[test]
fn a_signal_after_the_turn_fails_it() {
    let mut h = prompting(req("hi"));
    h.stdout(&chunk("done"));
    h.stdout(&result(3, json!({"stopReason": "end_turn"})));
    let mut killed = exited(0);
    killed.code = None;
    killed.signal = Some(9);
    let (_, outcome) = h.exit(killed);
    let (reason, message) = failure(&outcome);
    assert_eq!(reason, FailureReason::AgentError);
    assert!(message.contains("after the turn completed"), "{message}");
    assert!(!outcome.checkpoint.unwrap().valid);
}

#[test]
fn an_error_response_fails_the_run_with_its_message() {
    let mut h = prompting(req("hi"));
    h.stdout(&line(json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32603, "message": "Internal error", "data": {"details": "[API Error: 400]"}}})));
    let (_, outcome) = h.exit(exited(0));
    let (reason, message) = failure(&outcome);
    assert_eq!(reason, FailureReason::AgentError);
    assert!(
        message.contains("Internal error (code -32603)") && message.contains("API Error: 400"),
        "{message}"
    );
    assert!(message.ends_with("(stdout line 3)"), "{message}");
}

#[test]
fn an_agent_version_outside_the_verified_ones_is_a_notice() {
    let notice = |version: &str| {
        let mut r = request("hi");
        r.config_json = json!({"agent": "gemini", "command": "gemini"}).to_string();
        let (mut h, _) = Harness::<AcpSession>::start(r).unwrap();
        let out = h.stdout(&result(
            1,
            json!({"protocolVersion": 1, "agentCapabilities": {}, "agentInfo": {"name": "gemini-cli", "version": version}}),
        ));
        events_of(&out).into_iter().find_map(|e| match e {
            Event::Notice(n) if n.kind == "cli.version_unverified" => Some(n.message),
            _ => None,
        })
    };
    assert_eq!(notice("0.61.0"), None);
    assert_eq!(
        notice("0.62.0").as_deref(),
        Some(
            "Gemini CLI 0.62.0 is not a version this driver was verified with (0.61.0); its protocol may differ"
        )
    );
}

#[test]
fn another_protocol_version_is_refused() {
    let (mut h, _) = Harness::<AcpSession>::start(req("hi")).unwrap();
    let out = h.stdout(&result(
        1,
        json!({"protocolVersion": 2, "agentCapabilities": {}}),
    ));
    assert!(written(&out).is_empty());
    let (_, outcome) = h.exit(exited(0));
    let (reason, message) = failure(&outcome);
    assert_eq!(reason, FailureReason::AgentError);
    assert!(message.contains("protocol version 2"), "{message}");
}

fn resume_req(config: Value) -> RunRequest {
    let mut r = request("again");
    r.config_json = config.to_string();
    r.resume = Some(Resume {
        mode: SessionMode::ContinueOnly,
        state: SessionState {
            resume_id: SID.into(),
            display_id: None,
            data: vec![("cost_total".into(), "0.25".into())],
        },
    });
    r
}

#[test]
fn a_thread_loads_its_session_and_the_replay_is_not_this_runs_output() {
    let (mut h, _) = Harness::<AcpSession>::start(resume_req(json!({"command": "a"}))).unwrap();
    let sent = written(&h.stdout(&initialized(json!({"loadSession": true}))));
    assert_eq!(sent[0]["method"], "session/load");
    assert_eq!(sent[0]["params"]["sessionId"], SID);
    assert_eq!(sent[0]["params"]["cwd"], "/workspace");
    let mut out = h.stdout(&update(json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "first"}})));
    out.extend(h.stdout(&chunk("old answer")));
    out.extend(h.stdout(&update(json!({"sessionUpdate": "usage_update", "used": 1, "size": 9, "cost": {"amount": 0.25, "currency": "USD"}}))));
    assert!(events_of(&out).iter().all(|e| !matches!(e, Event::Text(_))));
    // The load's answer; the replay goes on after it (as Gemini CLI's does).
    let out = h.stdout(&result(2, Value::Null));
    assert!(
        written(&out).is_empty(),
        "the prompt waits for the replay to settle"
    );
    assert!(
        out.iter()
            .any(|a| matches!(a, Action::SetTimer(t) if t.id == 1))
    );
    assert!(events_of(&h.stdout(&chunk("late history"))).is_empty());
    assert!(
        written(&h.timer(1)).is_empty(),
        "a replayed update came: wait again"
    );
    let out = h.timer(1);
    let sent = written(&out);
    assert_eq!(sent[0]["method"], "session/prompt");
    assert!(
        events_of(&out)
            .iter()
            .any(|e| matches!(e, Event::Notice(n) if n.kind == "acp.history_replayed"))
    );
    h.stdout(&chunk("new"));
    h.stdout(&update(json!({"sessionUpdate": "usage_update", "used": 2, "size": 9, "cost": {"amount": 0.75, "currency": "USD"}})));
    h.stdout(&result(3, json!({"stopReason": "end_turn"})));
    let (_, outcome) = h.exit(exited(0));
    assert_eq!(outcome.text, "new");
    // This run's cost, not the session's.
    assert_eq!(outcome.usage.and_then(|u| u.cost_usd), Some(0.5));
}

#[test]
fn resume_is_preferred_over_load_and_neither_is_rejected() {
    let (mut h, _) = Harness::<AcpSession>::start(resume_req(json!({"command": "a"}))).unwrap();
    let sent = written(&h.stdout(&initialized(
        json!({"loadSession": true, "sessionCapabilities": {"resume": {}}}),
    )));
    assert_eq!(sent[0]["method"], "session/resume");
    let (mut h, _) = Harness::<AcpSession>::start(resume_req(json!({"command": "a"}))).unwrap();
    h.stdout(&initialized(json!({})));
    let (_, outcome) = h.exit(exited(0));
    let (reason, message) = failure(&outcome);
    assert_eq!(reason, FailureReason::ResumeRejected);
    assert!(message.contains("no loadSession"), "{message}");
    // Known before launch.
    let err = Harness::<AcpSession>::start(resume_req(json!({"command": "a", "restore": "none"})))
        .err()
        .expect("unsupported");
    assert!(matches!(err, StartError::Unsupported(_)), "{err:?}");
    let mut fork = resume_req(json!({"command": "a"}));
    fork.resume.as_mut().unwrap().mode = SessionMode::Fork;
    assert!(matches!(
        Harness::<AcpSession>::start(fork).err(),
        Some(StartError::Unsupported(_))
    ));
}

#[test]
fn a_failed_load_is_resume_rejected() {
    let (mut h, _) = Harness::<AcpSession>::start(resume_req(json!({"command": "a"}))).unwrap();
    h.stdout(&initialized(json!({"loadSession": true})));
    h.stdout(&line(json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32002, "message": "Resource not found"}})));
    let (_, outcome) = h.exit(exited(0));
    assert_eq!(failure(&outcome).0, FailureReason::ResumeRejected);
}

#[test]
fn model_mode_and_options_are_set_before_the_prompt() {
    let mut r = req("hi");
    r.config_json = json!({"command": "a", "model": "m2", "mode": "plan", "config_options": {"effort": "high"}}).to_string();
    let (mut h, _) = Harness::<AcpSession>::start(r).unwrap();
    h.stdout(&initialized(json!({})));
    let session = json!({
        "sessionId": SID,
        "models": {"currentModelId": "m1", "availableModels": [{"modelId": "m1", "name": "M1"}, {"modelId": "m2", "name": "M2"}]},
        "modes": {"currentModeId": "default", "availableModes": [{"id": "default", "name": "D"}, {"id": "plan", "name": "P"}]},
        "configOptions": [{"id": "effort", "name": "Effort", "type": "select", "currentValue": "low", "options": [{"value": "low", "name": "Low"}, {"value": "high", "name": "High"}]}],
    });
    let sent = written(&h.stdout(&result(2, session)));
    assert_eq!(sent[0]["method"], "session/set_model");
    assert_eq!(
        sent[0]["params"],
        json!({"sessionId": SID, "modelId": "m2"})
    );
    let sent = written(&h.stdout(&result(3, json!({}))));
    assert_eq!(sent[0]["method"], "session/set_mode");
    assert_eq!(sent[0]["params"]["modeId"], "plan");
    let sent = written(&h.stdout(&result(4, json!({}))));
    assert_eq!(sent[0]["method"], "session/set_config_option");
    assert_eq!(
        sent[0]["params"],
        json!({"sessionId": SID, "configId": "effort", "value": "high"})
    );
    let sent = written(&h.stdout(&result(5, json!({}))));
    assert_eq!(sent[0]["method"], "session/prompt");
}

#[test]
fn a_model_config_option_wins_and_unknown_values_name_the_offer() {
    let mut r = req("hi");
    r.model = Some("mock/other".into());
    let (mut h, _) = Harness::<AcpSession>::start(r).unwrap();
    h.stdout(&initialized(json!({})));
    let session = json!({
        "sessionId": SID,
        "configOptions": [{"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": "mock/mock-model",
                           "options": [{"group": "mock", "name": "Mock", "options": [{"value": "mock/mock-model", "name": "Mock"}]}]}],
    });
    let out = h.stdout(&result(2, session));
    assert!(written(&out).is_empty());
    let (_, outcome) = h.exit(exited(0));
    let (reason, message) = failure(&outcome);
    assert_eq!(reason, FailureReason::AgentError);
    assert!(
        message.contains("does not offer model `mock/other` (it offers: mock/mock-model)"),
        "{message}"
    );
}

#[test]
fn http_mcp_servers_need_the_agents_capability() {
    let mut r = req("hi");
    r.mcp_servers = vec![adaptor_sdk::McpServer {
        name: "docs".into(),
        transport: adaptor_sdk::McpTransport::Http(adaptor_sdk::McpRemote {
            url: "http://127.0.0.1:9/mcp".into(),
            headers: vec![("authorization".into(), "Bearer x".into())],
        }),
    }];
    let (mut h, _) = Harness::<AcpSession>::start(r.clone()).unwrap();
    h.stdout(&initialized(json!({})));
    let (_, outcome) = h.exit(exited(0));
    assert!(failure(&outcome).1.contains("mcpCapabilities.http"));
    let (mut h, _) = Harness::<AcpSession>::start(r).unwrap();
    let sent = written(&h.stdout(&initialized(json!({"mcpCapabilities": {"http": true}}))));
    assert_eq!(
        sent[0]["params"]["mcpServers"],
        json!([{"type": "http", "name": "docs", "url": "http://127.0.0.1:9/mcp", "headers": [{"name": "authorization", "value": "Bearer x"}]}])
    );
}

#[test]
fn a_resident_process_serves_the_next_turn_with_another_prompt() {
    let mut h = prompting(req("one"));
    h.stdout(&chunk("first"));
    h.stdout(&update(json!({"sessionUpdate": "usage_update", "used": 1, "size": 9, "cost": {"amount": 1.0, "currency": "USD"}})));
    h.stdout(&result(3, json!({"stopReason": "end_turn"})));
    assert!(h.finish_turn().failure.is_none());
    // Between turns: late updates are kept as data.
    let out = h.stdout(&update(
        json!({"sessionUpdate": "available_commands_update", "availableCommands": []}),
    ));
    assert!(events_of(&out).iter().all(|e| matches!(e, Event::Other(_))));
    let sent = written(&h.next_turn(req("two")).expect("next turn"));
    assert_eq!(sent[0]["method"], "session/prompt");
    assert_eq!(sent[0]["id"], 4);
    assert_eq!(sent[0]["params"]["prompt"][0]["text"], "two");
    h.stdout(&chunk("second"));
    h.stdout(&update(json!({"sessionUpdate": "usage_update", "used": 2, "size": 9, "cost": {"amount": 1.5, "currency": "USD"}})));
    h.stdout(&result(4, json!({"stopReason": "end_turn"})));
    let outcome = h.finish_turn();
    assert_eq!(outcome.text, "second");
    assert_eq!(outcome.usage.and_then(|u| u.cost_usd), Some(0.5));
}

#[test]
fn header_references_cannot_reach_an_acp_agent() {
    let mut r = req("hi");
    r.mcp_servers = vec![adaptor_sdk::McpServer {
        name: "host".into(),
        transport: adaptor_sdk::McpTransport::Http(adaptor_sdk::McpRemote {
            url: "http://127.0.0.1:9/mcp".into(),
            headers: vec![(
                "Authorization".into(),
                "Bearer ${ADAPTOR_TOOLS_TOKEN_AB}".into(),
            )],
        }),
    }];
    match Harness::<AcpSession>::start(r) {
        Err(StartError::Unsupported(m)) => {
            assert!(m.contains("`host`") && m.contains("literally"), "{m}")
        }
        other => panic!("expected unsupported, got {:?}", other.map(|(_, l)| l)),
    }
    // A stdio server goes to `session/new` with its environment.
    let mut r = req("hi");
    r.mcp_servers = vec![adaptor_sdk::McpServer {
        name: "files".into(),
        transport: adaptor_sdk::McpTransport::Stdio(adaptor_sdk::McpStdio {
            command: "/usr/bin/mcp-files".into(),
            args: vec!["--root".into(), ".".into()],
            env: vec![("FILES_TOKEN".into(), "t".into())],
        }),
    }];
    let (mut h, _) = Harness::<AcpSession>::start(r).unwrap();
    let sent = written(&h.stdout(&initialized(json!({}))));
    assert_eq!(
        sent[0]["params"]["mcpServers"],
        json!([{"name": "files", "command": "/usr/bin/mcp-files", "args": ["--root", "."], "env": [{"name": "FILES_TOKEN", "value": "t"}]}])
    );
}

#[test]
fn gemini_warns_that_untrusted_folders_get_no_mcp_servers() {
    let stdio = adaptor_sdk::McpServer {
        name: "files".into(),
        transport: adaptor_sdk::McpTransport::Stdio(adaptor_sdk::McpStdio {
            command: "mcp-files".into(),
            args: vec![],
            env: vec![],
        }),
    };
    for (extra, warned) in [(json!([]), true), (json!(["--skip-trust"]), false)] {
        let mut r = req("hi");
        r.config_json =
            json!({"agent": "gemini", "command": "gemini", "extra_args": extra}).to_string();
        r.mcp_servers = vec![stdio.clone()];
        let (mut h, _) = Harness::<AcpSession>::start(r).unwrap();
        let out = h.stdout(&initialized(json!({})));
        let notices: Vec<String> = events_of(&out)
            .into_iter()
            .filter_map(|e| match e {
                Event::Notice(n) => Some(n.kind),
                _ => None,
            })
            .collect();
        assert_eq!(
            notices.iter().any(|n| n == "acp.mcp_caveat"),
            warned,
            "{extra}: {notices:?}"
        );
    }
}
