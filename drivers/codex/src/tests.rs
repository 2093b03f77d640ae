//! Native tests: command lines per transport, config validation, and the parsers on output
//! recorded from the real Codex CLI (`testdata/`, captured against the project's mock
//! Responses API).

use super::*;
use adaptor_sdk::harness::{Harness, request};
use adaptor_sdk::{Decision, Launch, RunRequest, StartError};

fn start(req: RunRequest) -> Launch {
    Harness::<CodexSession>::start(req).expect("start").1
}

#[test]
fn exec_command_line() {
    let mut req = request("hello");
    req.streaming = false;
    req.model = Some("gpt-5.5".into());
    req.policy.sandbox = Sandbox::WorkspaceWrite;
    req.policy.web_search = Toggle::Deny;
    req.config_json = json!({"effort": "high"}).to_string();
    let launch = start(req);
    assert_eq!(launch.program, "codex");
    assert_eq!(
        launch.args,
        [
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--sandbox",
            "danger-full-access",
            "--model",
            "gpt-5.5",
            "-c",
            "web_search=\"disabled\"",
            "-c",
            "model_reasoning_effort=\"high\"",
            "-"
        ]
    );
    assert_eq!(launch.stdin, b"hello");
    assert!(!launch.keep_stdin_open);
}

#[test]
fn streaming_or_asking_uses_the_app_server() {
    let launch = start({
        let mut r = request("hello");
        r.streaming = true;
        r
    });
    assert_eq!(launch.args[0], "app-server");
    assert!(launch.keep_stdin_open);
    // The handshake and the thread call go out at launch, in order; none carries the prompt.
    let frames = frames_of(&launch.stdin);
    let methods: Vec<&str> = frames.iter().filter_map(|v| v["method"].as_str()).collect();
    assert_eq!(methods, ["initialize", "initialized", "thread/start"]);
    assert!(!String::from_utf8_lossy(&launch.stdin).contains("hello"));
    let launch = start({
        let mut r = request("hello");
        r.streaming = false;
        r.policy.permission = DecisionMode::Ask;
        r
    });
    assert_eq!(launch.args[0], "app-server");
}

#[test]
fn config_refuses_owned_flags_and_keys() {
    for (config, path) in [
        (
            json!({"extra_args": ["--sandbox", "read-only"]}),
            "/extra_args/0",
        ),
        (
            json!({"extra_args": ["-c", "approval_policy=\"never\""]}),
            "/extra_args/1",
        ),
        (json!({"effort": "huge"}), "/effort"),
        (json!({"transport": "ws"}), "/transport"),
    ] {
        let err = CodexDriver::validate_config(&config).unwrap_err();
        assert_eq!(err.path, path, "{config}");
    }
    CodexDriver::validate_config(&json!({"extra_args": ["-c", "features.plugins=false"]})).unwrap();
}

#[test]
fn toml_strings_are_escaped() {
    assert_eq!(toml_string("a \"b\"\n\\"), r#""a \"b\"\n\\""#);
}

// ---- parsers on recorded output ---------------------------------------------------------------

use adaptor_sdk::harness::{Replay, exited, replay};
use adaptor_sdk::{Action, ApprovalKind, Event, FailureReason, ItemKind, Phase, SessionMode};

macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!("../testdata/", $name, ".jsonl")).as_slice()
    };
}

const EXEC: &[(&str, &[u8], i32)] = &[
    ("exec_plain", fixture!("exec_plain"), 0),
    ("exec_reasoning", fixture!("exec_reasoning"), 0),
    (
        "exec_tool_exec_command",
        fixture!("exec_tool_exec_command"),
        0,
    ),
    (
        "exec_tool_exec_failing",
        fixture!("exec_tool_exec_failing"),
        0,
    ),
    (
        "exec_tool_apply_patch",
        fixture!("exec_tool_apply_patch"),
        0,
    ),
    ("exec_output_schema", fixture!("exec_output_schema"), 0),
    ("exec_error_400", fixture!("exec_error_400"), 1),
    ("exec_error_500", fixture!("exec_error_500"), 1),
    (
        "exec_error_stream_failed",
        fixture!("exec_error_stream_failed"),
        1,
    ),
];

const APP: &[(&str, &[u8])] = &[
    ("appserver_basic", fixture!("appserver_basic")),
    ("appserver_reasoning", fixture!("appserver_reasoning")),
    (
        "appserver_approval_accept",
        fixture!("appserver_approval_accept"),
    ),
    (
        "appserver_approval_decline",
        fixture!("appserver_approval_decline"),
    ),
    (
        "appserver_approval_file_change",
        fixture!("appserver_approval_file_change"),
    ),
    (
        "appserver_output_schema",
        fixture!("appserver_output_schema"),
    ),
];

fn exec_replay(bytes: &[u8], chunk: usize, code: i32) -> Replay {
    let mut req = request("prompt");
    req.streaming = false;
    replay::<CodexSession>(req, bytes, chunk, exited(code)).expect("start")
}

fn app_replay(bytes: &[u8], chunk: usize) -> Replay {
    let mut req = request("prompt");
    req.streaming = true;
    replay::<CodexSession>(req, bytes, chunk, exited(0)).expect("start")
}

#[test]
fn any_split_of_the_bytes_gives_the_same_events_and_outcome() {
    for (name, bytes, code) in EXEC {
        let whole = exec_replay(bytes, 0, *code);
        for chunk in [1, 3, 17, 256] {
            let split = exec_replay(bytes, chunk, *code);
            assert_eq!(split.events(), whole.events(), "{name} at {chunk}");
            assert_eq!(split.outcome, whole.outcome, "{name} at {chunk}");
        }
    }
    for (name, bytes) in APP {
        let whole = app_replay(bytes, 0);
        for chunk in [1, 3, 17, 256] {
            let split = app_replay(bytes, chunk);
            assert_eq!(split.events(), whole.events(), "{name} at {chunk}");
            assert_eq!(split.outcome, whole.outcome, "{name} at {chunk}");
        }
    }
}

#[test]
fn exec_plain_maps_text_usage_thread_and_checkpoint() {
    let bytes = fixture!("exec_plain");
    let r = exec_replay(bytes, 0, 0);
    let o = &r.outcome;
    assert_eq!(
        o.text,
        "Hello from mock-openai! user_msgs=1 you said: hello there"
    );
    assert!(o.failure.is_none(), "{:?}", o.failure);
    let u = o.usage.expect("usage");
    assert_eq!(
        (
            u.input_tokens,
            u.cache_read_tokens,
            u.output_tokens,
            u.reasoning_tokens
        ),
        (Some(31), Some(7), Some(11), Some(0))
    );
    let cp = o.checkpoint.clone().expect("checkpoint");
    assert!(cp.valid);
    assert_eq!(cp.state.resume_id, "01a22c43-f937-7de0-9f11-acf02ac8ea43");
    let terminal = o.terminal.clone().unwrap();
    assert_eq!(terminal.event, "turn.completed");
    assert_eq!(
        terminal.json,
        std::str::from_utf8(bytes).unwrap().lines().last().unwrap()
    );
}

#[test]
fn a_resumed_run_reports_its_own_usage_not_the_threads() {
    let bytes = fixture!("exec_resume_second");
    let mut req = request("second");
    req.streaming = false;
    req.resume = Some(adaptor_sdk::Resume {
        mode: SessionMode::ContinueOnly,
        state: adaptor_sdk::SessionState {
            resume_id: "01a22c43-f937-7de0-9f11-acf02ac8ea43".into(),
            display_id: None,
            data: vec![(
                "usage_total".into(),
                r#"{"input":31,"cached":7,"cache_write":0,"output":11,"reasoning":0}"#.into(),
            )],
        },
    });
    let r = replay::<CodexSession>(req, bytes, 0, exited(0)).unwrap();
    let u = r.outcome.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.cache_read_tokens, u.output_tokens),
        (Some(31), Some(7), Some(11))
    );
    let data = r.outcome.checkpoint.unwrap().state.data;
    assert!(
        data[0].1.contains(r#""input":62"#),
        "the thread total is kept: {data:?}"
    );
}

fn tools(r: &Replay) -> Vec<(String, Value, String, bool)> {
    let t = &r.outcome.transcript;
    t.iter()
        .filter(|i| i.kind == ItemKind::ToolCall)
        .map(|c| {
            let res = t
                .iter()
                .find(|i| i.kind == ItemKind::ToolResult && i.tool_call_id == c.tool_call_id)
                .unwrap();
            (
                c.tool_name.clone().unwrap(),
                serde_json::from_str(c.input_json.as_deref().unwrap()).unwrap(),
                res.text.clone().unwrap_or_default(),
                res.is_error,
            )
        })
        .collect()
}

#[test]
fn exec_tool_items() {
    let r = exec_replay(fixture!("exec_tool_exec_command"), 0, 0);
    let t = tools(&r);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].0, "shell");
    assert!(
        t[0].1["command"].to_string().contains("echo hi"),
        "{}",
        t[0].1
    );
    assert!(t[0].2.contains("hi"), "{}", t[0].2);
    assert!(!t[0].3);
    let r = exec_replay(fixture!("exec_tool_exec_failing"), 0, 0);
    let t = tools(&r);
    assert!(t[0].3, "a non-zero exit code is an error result");
    assert!(t[0].2.contains("No such file or directory"), "{}", t[0].2);
    let r = exec_replay(fixture!("exec_tool_apply_patch"), 0, 0);
    let t = tools(&r);
    assert_eq!(t[0].0, "apply_patch");
    assert!(
        t[0].2.starts_with("add ") && t[0].2.ends_with("hello.txt"),
        "{}",
        t[0].2
    );
}

#[test]
fn exec_failures_keep_the_partial_text_and_the_message() {
    let r = exec_replay(fixture!("exec_error_stream_failed"), 0, 1);
    let f = r.outcome.failure.clone().unwrap();
    assert_eq!(f.reason, FailureReason::AgentError);
    assert!(f.message.contains("stream disconnected"), "{}", f.message);
    assert_eq!(r.outcome.text, "Partial answer before the failure.");
    assert!(!r.outcome.checkpoint.unwrap().valid);
    assert_eq!(r.outcome.terminal.unwrap().event, "turn.failed");
    let r = exec_replay(fixture!("exec_error_500"), 0, 1);
    assert!(r.outcome.failure.is_some());
}

#[test]
fn frames_after_the_terminal_one_are_a_protocol_error() {
    let mut bytes = fixture!("exec_plain").to_vec();
    bytes.extend_from_slice(b"{\"type\":\"turn.started\"}\n");
    let r = exec_replay(&bytes, 0, 0);
    let f = r.outcome.failure.clone().unwrap();
    assert_eq!(f.reason, FailureReason::ProtocolError);
    assert!(!r.outcome.checkpoint.unwrap().valid);
}

#[test]
fn app_server_streams_text_reasoning_and_usage() {
    let r = app_replay(fixture!("appserver_basic"), 0);
    assert!(r.outcome.failure.is_none(), "{:?}", r.outcome.failure);
    let deltas: Vec<String> = r
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Text(t) if t.phase == Phase::Delta => Some(t.text),
            _ => None,
        })
        .collect();
    assert!(deltas.len() >= 2);
    assert_eq!(deltas.concat(), r.outcome.text);
    let u = r.outcome.usage.unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (Some(31), Some(11)));
    assert!(r.outcome.checkpoint.unwrap().valid);
    let r = app_replay(fixture!("appserver_reasoning"), 0);
    assert!(
        r.events()
            .iter()
            .any(|e| matches!(e, Event::Thinking(t) if t.phase == Phase::Delta))
    );
    // The client's own requests follow the server's responses.
    let stdin: Vec<Value> = r
        .actions
        .iter()
        .flat_map(|a| match a {
            Action::WriteStdin(b) => frames_of(b),
            _ => Vec::new(),
        })
        .collect();
    let methods: Vec<&str> = stdin.iter().filter_map(|v| v["method"].as_str()).collect();
    assert_eq!(methods, ["turn/start"]);
}

/// The JSON frames (one per line) of stdin bytes.
fn frames_of(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect()
}

#[test]
fn server_approval_requests_become_approvals_and_decisions_answers() {
    let bytes = fixture!("appserver_approval_accept");
    let mut req = request("prompt");
    req.streaming = true;
    req.policy.permission = DecisionMode::Ask;
    let (mut s, _) = Harness::<CodexSession>::start(req).unwrap();
    let text = std::str::from_utf8(bytes).unwrap();
    let mut approval = None;
    for line in text.lines() {
        let actions = s.stdout(format!("{line}\n").as_bytes());
        if let Some(Action::RequestApproval(r)) = actions
            .iter()
            .find(|a| matches!(a, Action::RequestApproval(_)))
        {
            approval = Some(r.clone());
            break;
        }
    }
    let req = approval.expect("asked");
    assert_eq!(req.kind, ApprovalKind::Permission);
    assert_eq!(req.tool_name.as_deref(), Some("shell"));
    assert!(req.title.starts_with("Run `"), "{}", req.title);
    let mut answer = |d| match s.decide(&req.id, d).as_slice() {
        [Action::WriteStdin(b)] => serde_json::from_slice::<Value>(b).unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        answer(Decision::Approve(None)),
        json!({"id": 0, "result": {"decision": "accept"}})
    );
}

#[test]
fn fuzz_smoke_on_mutated_recordings() {
    // The CI smoke run of the fuzz property (see tests/fuzz/ for the long run).
    let seeds = EXEC
        .iter()
        .map(|(_, b, _)| *b)
        .chain(APP.iter().map(|(_, b)| *b))
        .collect::<Vec<_>>();
    for input in adaptor_sdk::harness::fuzz_inputs(&seeds, 1500, 0x5eed) {
        adaptor_sdk::harness::fuzz_replay::<CodexSession>(&input);
    }
}

#[test]
fn the_app_server_takes_a_next_turn_on_the_same_thread() {
    use adaptor_sdk::Action;
    let mut req = request("hello");
    req.streaming = true;
    let (mut h, launch) = Harness::<CodexSession>::start(req.clone()).expect("start");
    assert_eq!(launch.args[0], "app-server");
    // Without a thread yet there is nothing to continue.
    assert!(matches!(
        h.next_turn(req.clone()),
        Err(StartError::InvalidRequest(_))
    ));
    let (mut h, _) = Harness::<CodexSession>::start(req.clone()).expect("start");
    h.stdout(b"{\"method\":\"thread/started\",\"params\":{\"thread\":{\"id\":\"thr-1\"}}}\n");
    let mut next = req;
    next.prompt = "again".into();
    let actions = h.next_turn(next).expect("next turn");
    let [Action::WriteStdin(bytes)] = actions.as_slice() else {
        panic!("one stdin frame: {actions:?}")
    };
    let frame: Value = serde_json::from_slice(bytes).unwrap();
    assert_eq!(frame["method"], "turn/start");
    assert_eq!(frame["params"]["threadId"], "thr-1");
    assert_eq!(frame["params"]["input"][0]["text"], "again");
    assert_eq!(
        frame["id"], 3,
        "request ids keep counting on one process (initialize 1, thread/start 2)"
    );
    assert!(frame["params"].get("effort").is_none());
    // A turn whose config changed is built from the new config, not the kept parse.
    let mut third = request("third");
    third.streaming = true;
    third.config_json = json!({"effort": "high"}).to_string();
    let actions = h.next_turn(third).expect("next turn with another config");
    let [Action::WriteStdin(bytes)] = actions.as_slice() else {
        panic!("one stdin frame: {actions:?}")
    };
    let frame: Value = serde_json::from_slice(bytes).unwrap();
    assert_eq!(frame["params"]["effort"], "high");

    // exec runs one turn per process.
    let mut exec = request("x");
    exec.streaming = false;
    let (mut h, _) = Harness::<CodexSession>::start(exec.clone()).expect("start");
    assert!(matches!(h.next_turn(exec), Err(StartError::Unsupported(_))));
}

#[test]
fn a_native_schema_reports_the_final_message_as_structured_output() {
    let bytes = fixture!("exec_output_schema");
    let with_schema = |mechanism| {
        let mut req = request("prompt");
        req.streaming = false;
        req.output_schema = Some(adaptor_sdk::OutputSchema {
            schema_json: r#"{"type":"object"}"#.into(),
            name: None,
            description: None,
            mechanism,
        });
        replay::<CodexSession>(req, bytes, 0, exited(0)).expect("start")
    };
    let native = with_schema(adaptor_sdk::SchemaMechanism::Native);
    let value: Value =
        serde_json::from_str(native.outcome.structured_output.as_deref().expect("native")).unwrap();
    assert_eq!(
        value,
        serde_json::from_str::<Value>(&native.outcome.text).unwrap()
    );
    // Prompt and validate: the host reads the text; the driver claims nothing.
    let prompted = with_schema(adaptor_sdk::SchemaMechanism::PromptValidate);
    assert_eq!(prompted.outcome.structured_output, None);
    // No schema: nothing either.
    assert_eq!(exec_replay(bytes, 0, 0).outcome.structured_output, None);
}

#[test]
fn the_config_fingerprint_covers_model_effort_and_extra_args_not_the_command() {
    adaptor_sdk::harness::assert_fingerprint_covers::<CodexDriver>(
        &[serde_json::json!({"command": "/opt/cli"})],
        &[
            serde_json::json!({"model": "other"}),
            serde_json::json!({"effort": "high"}),
            serde_json::json!({"extra_args": ["--add-dir", "/srv/data"]}),
        ],
    );
}

#[test]
fn a_resume_id_that_is_not_a_thread_id_is_refused_before_launch() {
    for streaming in [false, true] {
        let mut req = request("second");
        req.streaming = streaming;
        req.resume = Some(adaptor_sdk::Resume {
            mode: SessionMode::ContinueOnly,
            state: adaptor_sdk::SessionState {
                resume_id: "--dangerously-bypass-approvals-and-sandbox".into(),
                display_id: None,
                data: Vec::new(),
            },
        });
        assert!(matches!(
            adaptor_sdk::harness::Harness::<CodexSession>::start(req),
            Err(StartError::ResumeRejected(m)) if m.contains("not a Codex thread id")
        ));
    }
}

/// Methods of the stored app-server schema catalogue `file` (`schema/app-server/`, what the
/// pinned Codex generates; `codex_e2e::the_app_server_schema_has_not_drifted` regenerates it).
fn schema_methods(file: &str) -> Vec<String> {
    let path = format!("{}/schema/app-server/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let schema: Value = serde_json::from_str(&text).expect("schema JSON");
    schema["oneOf"]
        .as_array()
        .expect("oneOf")
        .iter()
        .flat_map(|v| {
            v["properties"]["method"]["enum"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|m| m.as_str().map(str::to_owned))
        .collect()
}

#[test]
fn every_app_server_method_the_driver_uses_is_in_the_pinned_schema() {
    let source = include_str!("appserver.rs");
    for (file, methods) in [
        (
            "ClientRequest.json",
            &[
                "initialize",
                "thread/start",
                "thread/resume",
                "turn/start",
                "turn/interrupt",
            ][..],
        ),
        ("ClientNotification.json", &["initialized"][..]),
        (
            "ServerNotification.json",
            &[
                "thread/started",
                "item/started",
                "item/completed",
                "item/agentMessage/delta",
                "item/reasoning/textDelta",
                "item/reasoning/summaryTextDelta",
                "thread/tokenUsage/updated",
                "turn/started",
                "turn/completed",
                "error",
            ][..],
        ),
        (
            "ServerRequest.json",
            &[
                "item/commandExecution/requestApproval",
                "item/fileChange/requestApproval",
            ][..],
        ),
    ] {
        let known = schema_methods(file);
        for method in methods {
            assert!(
                known.iter().any(|k| k == method),
                "{file} has no `{method}`"
            );
            // The list is what the driver's code says, not a copy that went stale.
            assert!(
                source.contains(&format!("\"{method}\"")),
                "appserver.rs does not use `{method}`"
            );
        }
    }
}

#[test]
fn a_fork_uses_the_app_servers_thread_fork() {
    let fork = |config: Value| {
        let mut r = request("branch");
        r.streaming = false;
        r.config_json = config.to_string();
        r.resume = Some(adaptor_sdk::Resume {
            mode: adaptor_sdk::SessionMode::Fork,
            state: adaptor_sdk::SessionState {
                resume_id: "019b0f8e-3a6d-7c41-9d2e-5f8a1b2c3d4e".into(),
                display_id: None,
                data: Vec::new(),
            },
        });
        r
    };
    // Not streaming, not asking: exec otherwise; a fork takes the app-server.
    let launch = start(fork(json!({})));
    assert_eq!(launch.args[0], "app-server");
    // Pinned to exec, a fork is refused before launch.
    let err = Harness::<CodexSession>::start(fork(json!({"transport": "exec"})))
        .err()
        .expect("refused");
    assert!(matches!(err, StartError::Unsupported(m) if m.contains("thread/fork")));
    // With the handshake, the driver asks for a fork of the parent, not a resume.
    let (mut h, launch) = Harness::<CodexSession>::start(fork(json!({}))).unwrap();
    let sent = frames_of(&launch.stdin);
    assert!(
        h.stdout(b"{\"id\":1,\"result\":{\"userAgent\":\"codex\"}}\n")
            .is_empty()
    );
    let fork_call = sent
        .iter()
        .find(|f| f["method"] == "thread/fork")
        .expect("thread/fork");
    assert_eq!(
        fork_call["params"]["threadId"],
        "019b0f8e-3a6d-7c41-9d2e-5f8a1b2c3d4e"
    );
    // A fork that answers with the parent's own thread is not a fork.
    let id = fork_call["id"].as_u64().unwrap();
    h.stdout(
        format!("{{\"id\":{id},\"result\":{{\"thread\":{{\"id\":\"019b0f8e-3a6d-7c41-9d2e-5f8a1b2c3d4e\"}}}}}}\n")
            .as_bytes(),
    );
    let (_, outcome) = h.exit(adaptor_sdk::harness::exited(0));
    let failure = outcome.failure.expect("failure");
    assert_eq!(failure.reason, adaptor_sdk::FailureReason::ResumeRejected);
}

#[test]
fn mcp_servers_become_overrides_with_credentials_in_the_environment() {
    use adaptor_sdk::{McpRemote, McpServer, McpStdio, McpTransport};
    let mut req = request("hi");
    req.streaming = false;
    req.mcp_servers = vec![
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
                headers: vec![
                    (
                        "Authorization".into(),
                        "Bearer ${ADAPTOR_TOOLS_TOKEN_AB}".into(),
                    ),
                    ("X-Team".into(), "header-secret".into()),
                    ("X-Other".into(), "${OTHER_VAR}".into()),
                ],
            }),
        },
    ];
    for streaming in [false, true] {
        req.streaming = streaming;
        let launch = start(req.clone());
        let overrides: Vec<&str> = launch
            .args
            .windows(2)
            .filter(|w| w[0] == "-c" && w[1].starts_with("mcp_servers."))
            .map(|w| w[1].as_str())
            .collect();
        assert_eq!(
            overrides,
            [
                r#"mcp_servers.files.command="mcp-files""#,
                r#"mcp_servers.files.args=["-v"]"#,
                r#"mcp_servers.files.env_vars=["FILES_TOKEN"]"#,
                r#"mcp_servers.host.url="http://127.0.0.1:9/mcp""#,
                r#"mcp_servers.host.bearer_token_env_var="ADAPTOR_TOOLS_TOKEN_AB""#,
                r#"mcp_servers.host.env_http_headers={"X-Team"="ADAPTOR_MCP_HEADER_2","X-Other"="OTHER_VAR"}"#,
            ],
            "streaming={streaming}"
        );
        assert!(!launch.args.iter().any(|a| a.contains("secret")));
        assert_eq!(
            launch.env,
            [
                ("FILES_TOKEN".to_owned(), "stdio-secret".to_owned()),
                (
                    "ADAPTOR_MCP_HEADER_2".to_owned(),
                    "header-secret".to_owned()
                ),
            ]
        );
    }
    req.mcp_servers = vec![McpServer {
        name: "old".into(),
        transport: McpTransport::Sse(McpRemote {
            url: "http://127.0.0.1:9/sse".into(),
            headers: vec![],
        }),
    }];
    assert!(matches!(
        Harness::<CodexSession>::start(req),
        Err(StartError::Unsupported(_))
    ));
}

#[test]
fn steering_takes_the_app_server_and_steers_the_running_turn() {
    use adaptor_sdk::{InputError, TurnRequest};
    let steerable = |config: Value| {
        let mut r = request("hello");
        r.streaming = false;
        r.config_json = config.to_string();
        TurnRequest {
            request: r,
            steerable: true,
        }
    };
    // Exec otherwise (not streaming, not asking); a steerable request takes the app-server.
    let (mut h, launch) = Harness::<CodexSession>::start_turn(steerable(json!({}))).unwrap();
    assert_eq!(launch.args[0], "app-server");
    // Pinned to exec: refused before launch.
    let err = Harness::<CodexSession>::start_turn(steerable(json!({"transport": "exec"})))
        .err()
        .expect("refused");
    assert!(matches!(err, StartError::Unsupported(m) if m.contains("app-server")));
    // Input before the turn's id is known is held, then sent as `turn/steer` for that turn.
    assert!(h.input("early").unwrap().is_empty());
    h.stdout(b"{\"id\":1,\"result\":{\"userAgent\":\"codex\"}}\n");
    h.stdout(
        b"{\"id\":2,\"result\":{\"thread\":{\"id\":\"019b0f8e-3a6d-7c41-9d2e-5f8a1b2c3d4e\"}}}\n",
    );
    let out = h.stdout(
        b"{\"id\":3,\"result\":{\"turn\":{\"id\":\"turn-7\",\"status\":\"inProgress\"}}}\n",
    );
    let steer: Value = out
        .iter()
        .find_map(|a| match a {
            Action::WriteStdin(b) => serde_json::from_slice(b).ok(),
            _ => None,
        })
        .expect("turn/steer written");
    assert_eq!(steer["method"], "turn/steer");
    assert_eq!(steer["params"]["expectedTurnId"], "turn-7");
    assert_eq!(steer["params"]["input"][0]["text"], "early");
    // Accepted: the input is the user's. Later input goes out at once.
    let id = steer["id"].as_u64().unwrap();
    let out =
        h.stdout(format!("{{\"id\":{id},\"result\":{{\"turnId\":\"turn-7\"}}}}\n").as_bytes());
    assert!(out.iter().any(|a| matches!(
        a,
        Action::Emit(Event::Item(i)) if i.kind == ItemKind::User && i.text.as_deref() == Some("early")
    )));
    let written = h.input("later").unwrap();
    assert!(matches!(&written[0], Action::WriteStdin(_)));
    // A refused steer is a notice, never dropped.
    let out = h.stdout(
        format!(
            "{{\"id\":{},\"error\":{{\"code\":-32600,\"message\":\"no active turn\"}}}}\n",
            id + 1
        )
        .as_bytes(),
    );
    assert!(out.iter().any(|a| matches!(
        a,
        Action::Emit(Event::Notice(n)) if n.kind == "steer-refused" && n.message.contains("later")
    )));
    // Exec runs refuse input.
    let (mut exec, _) = Harness::<CodexSession>::start({
        let mut r = request("hello");
        r.streaming = false;
        r
    })
    .unwrap();
    assert!(matches!(
        exec.input("more"),
        Err(InputError::Unsupported(_))
    ));
}
