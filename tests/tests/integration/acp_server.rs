//! `adaptor acp` and `adaptor_bridges::acp`: an agent served over the Agent Client Protocol,
//! driven by the ACP SDK's own client side — in process over the reference driver, through
//! the real `adaptor acp` binary on stdio, and by our own ACP driver (`acp.wasm`) talking to
//! `adaptor acp` (both ends of the protocol in one loop).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use adaptor::{Agent, ApprovalPolicy, DecisionMode, Fallback, Policy, RunOptions};
use adaptor_bridges::acp::AcpServer;
use adaptor_integration_tests::*;
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock, ImageContent, InitializeRequest, InitializeResponse,
    LoadSessionRequest, NewSessionRequest, PermissionOptionKind, PromptRequest,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    ResumeSessionRequest, SelectedPermissionOutcome, SessionId, SessionNotification, SessionUpdate,
    SetSessionModeRequest, StopReason, ToolCallStatus,
};
use agent_client_protocol::{Client, ConnectTo, Responder, UntypedMessage, V1};
use serde_json::Value;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

const LIMIT: Duration = Duration::from_secs(60);

/// How the test client answers `session/request_permission`.
#[derive(Clone, Copy)]
enum Answer {
    Allow,
    Reject,
    Cancelled,
}

/// What the test client received.
#[derive(Default)]
struct Seen {
    updates: Vec<SessionNotification>,
    events: Vec<Value>,
    permissions: Vec<RequestPermissionRequest>,
}

impl Seen {
    fn text(&self) -> String {
        self.updates
            .iter()
            .filter_map(|n| match &n.update {
                SessionUpdate::AgentMessageChunk(c) => match &c.content {
                    ContentBlock::Text(t) => Some(t.text.clone()),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    fn event_kinds(&self) -> Vec<String> {
        self.events
            .iter()
            .map(|e| e["event"]["kind"].as_str().unwrap_or("?").to_owned())
            .collect()
    }
}

/// Run `body` as an ACP client of `agent_side`, recording what the agent sends.
async fn client<R: Send + 'static>(
    agent_side: impl ConnectTo<Client> + 'static,
    answer: Answer,
    body: impl AsyncFnOnce(
        ConnectionTo<agent_client_protocol::Agent>,
        Arc<Mutex<Seen>>,
    ) -> agent_client_protocol::Result<R>,
) -> R {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (s1, s2, s3) = (seen.clone(), seen.clone(), seen.clone());
    let run = Client
        .v1()
        .on_receive_request(
            async move |req: RequestPermissionRequest,
                        responder: Responder<RequestPermissionResponse, V1>,
                        _cx: ConnectionTo<agent_client_protocol::Agent>| {
                let outcome = match answer {
                    Answer::Cancelled => RequestPermissionOutcome::Cancelled,
                    Answer::Allow | Answer::Reject => {
                        let want = match answer {
                            Answer::Allow => PermissionOptionKind::AllowOnce,
                            _ => PermissionOptionKind::RejectOnce,
                        };
                        let option = req
                            .options
                            .iter()
                            .find(|o| o.kind == want)
                            .expect("the option kind is offered");
                        RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(
                            option.option_id.clone(),
                        ))
                    }
                };
                s1.lock().unwrap().permissions.push(req);
                responder.respond(RequestPermissionResponse::new(outcome))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: SessionNotification, _cx: ConnectionTo<agent_client_protocol::Agent>| {
                s2.lock().unwrap().updates.push(n);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_notification(
            async move |n: UntypedMessage, _cx: ConnectionTo<agent_client_protocol::Agent>| {
                assert_eq!(n.method, "_adaptor/event", "an unexpected notification");
                s3.lock().unwrap().events.push(n.params);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(agent_side, async move |cx| body(cx, seen).await);
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("the ACP exchange timed out")
        .expect("the ACP connection failed")
}

async fn initialize(
    cx: &ConnectionTo<agent_client_protocol::Agent>,
) -> agent_client_protocol::Result<InitializeResponse> {
    cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
        .block_task()
        .await
}

async fn new_session(
    cx: &ConnectionTo<agent_client_protocol::Agent>,
    cwd: &Path,
) -> agent_client_protocol::Result<SessionId> {
    Ok(cx
        .send_request(NewSessionRequest::new(cwd.to_path_buf()))
        .block_task()
        .await?
        .session_id)
}

async fn prompt(
    cx: &ConnectionTo<agent_client_protocol::Agent>,
    session: &SessionId,
    text: &str,
) -> agent_client_protocol::Result<StopReason> {
    Ok(cx
        .send_request(PromptRequest::new(
            session.clone(),
            vec![ContentBlock::from(text.to_owned())],
        ))
        .block_task()
        .await?
        .stop_reason)
}

/// The approval policy `adaptor acp` uses: ask the client, wait for it, a rejection lets
/// the agent carry on.
fn asking() -> RunOptions {
    RunOptions::new().policy(Policy {
        approvals: ApprovalPolicy {
            permission: DecisionMode::Ask,
            timeout: None,
            on_reject: Fallback::Continue,
            ..ApprovalPolicy::default()
        },
        ..Policy::default()
    })
}

struct Setup {
    state: tempfile::TempDir,
    ws: tempfile::TempDir,
    store: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        Self {
            state: tmp(),
            ws: tmp(),
            store: tmp(),
        }
    }

    /// A reference agent on this setup's SQLite store (as a new process would open it).
    fn agent(&self) -> Agent {
        let store = adaptor::store::SqliteStore::open(self.store.path().join("threads.db"))
            .expect("open store");
        agent_builder(reference(self.state.path()), self.ws.path())
            .thread_store(store)
            .build()
    }

    fn server(&self) -> AcpServer {
        AcpServer::new(self.agent()).run_options(asking())
    }
}

#[tokio::test]
async fn a_prompt_streams_its_text_and_ends_the_turn_with_capabilities_true_to_the_driver() {
    let s = Setup::new();
    let ws = s.ws.path().to_path_buf();
    let (init, stop, seen) = client(
        s.server().into_component(),
        Answer::Allow,
        async |cx, seen| {
            let init = initialize(&cx).await?;
            let id = new_session(&cx, &ws).await?;
            let stop = prompt(&cx, &id, "hello there").await?;
            Ok((init, stop, seen))
        },
    )
    .await;
    let caps = &init.agent_capabilities;
    assert!(caps.load_session, "the reference driver's sessions resume");
    assert!(caps.session_capabilities.resume.is_some());
    assert!(caps.prompt_capabilities.embedded_context);
    assert!(!caps.prompt_capabilities.image && !caps.prompt_capabilities.audio);
    let descriptor = reference(s.state.path()).descriptor().clone();
    assert_eq!(caps.mcp_capabilities.http, descriptor.mcp.http);
    assert_eq!(caps.mcp_capabilities.sse, descriptor.mcp.sse);
    assert_eq!(init.agent_info.as_ref().unwrap().name, "adaptor/reference");
    assert_eq!(stop, StopReason::EndTurn);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.text(), "Reference reply: hello there");
    // Nothing is dropped silently: what ACP has no update for arrives as `_adaptor/event`.
    let kinds = seen.event_kinds();
    assert!(kinds.iter().any(|k| k == "session"), "{kinds:?}");
    assert!(
        !kinds
            .iter()
            .any(|k| k == "text_delta" || k == "run_finished"),
        "mapped events are not repeated: {kinds:?}"
    );
    assert!(seen.permissions.is_empty());
}

#[tokio::test]
async fn approvals_become_permission_requests_answered_once_and_no_answer_is_never_consent() {
    for (answer, approved) in [
        (Answer::Allow, true),
        (Answer::Reject, false),
        (Answer::Cancelled, false),
    ] {
        let s = Setup::new();
        let ws = s.ws.path().to_path_buf();
        let (stop, seen) = client(s.server().into_component(), answer, async |cx, seen| {
            initialize(&cx).await?;
            let id = new_session(&cx, &ws).await?;
            let stop = prompt(&cx, &id, "[[ask-permission]] echo this").await?;
            Ok((stop, seen))
        })
        .await;
        assert_eq!(stop, StopReason::EndTurn);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.permissions.len(), 1, "asked exactly once");
        let asked = &seen.permissions[0];
        assert!(
            asked
                .options
                .iter()
                .any(|o| o.kind == PermissionOptionKind::AllowOnce)
        );
        assert!(
            asked
                .options
                .iter()
                .any(|o| o.kind == PermissionOptionKind::RejectOnce)
        );
        let resolved: Vec<&Value> = seen
            .events
            .iter()
            .filter(|e| e["event"]["kind"] == "approval_resolved")
            .collect();
        assert_eq!(resolved.len(), 1, "{:?}", seen.event_kinds());
        let resolution = resolved[0]["event"]["resolution"].as_str().unwrap();
        assert_eq!(resolution == "approved", approved, "{resolution}");
        // The tool ran only when allowed; a refused call is reported failed.
        let finished: Vec<ToolCallStatus> = seen
            .updates
            .iter()
            .filter_map(|n| match &n.update {
                SessionUpdate::ToolCallUpdate(u) => u.fields.status,
                _ => None,
            })
            .collect();
        let expected = if approved {
            ToolCallStatus::Completed
        } else {
            ToolCallStatus::Failed
        };
        assert_eq!(finished, vec![expected], "{:?}", seen.updates);
    }
}

#[tokio::test]
async fn session_cancel_stops_the_run_and_the_turn_ends_cancelled() {
    let s = Setup::new();
    let ws = s.ws.path().to_path_buf();
    let (stop, took) = client(
        s.server().into_component(),
        Answer::Allow,
        async |cx, _seen| {
            initialize(&cx).await?;
            let id = new_session(&cx, &ws).await?;
            let started = std::time::Instant::now();
            let pending = cx
                .send_request(PromptRequest::new(
                    id.clone(),
                    vec![ContentBlock::from("[[sleep 30000]] slow".to_owned())],
                ))
                .block_task();
            let cancel = async {
                tokio::time::sleep(Duration::from_millis(500)).await;
                cx.send_notification(CancelNotification::new(id.clone()))
            };
            let (response, sent) = tokio::join!(pending, cancel);
            sent?;
            Ok((response?.stop_reason, started.elapsed()))
        },
    )
    .await;
    assert_eq!(stop, StopReason::Cancelled);
    assert!(
        took < Duration::from_secs(20),
        "cancelled promptly: {took:?}"
    );
}

#[tokio::test]
async fn sessions_resume_and_load_from_the_thread_store_in_a_new_server() {
    let s = Setup::new();
    let ws = s.ws.path().to_path_buf();
    // First server: a session and one turn, then `session/load` replays it.
    let (id, replayed) = client(
        s.server().into_component(),
        Answer::Allow,
        async |cx, seen| {
            initialize(&cx).await?;
            let id = new_session(&cx, &ws).await?;
            assert_eq!(prompt(&cx, &id, "first").await?, StopReason::EndTurn);
            let before = seen.lock().unwrap().updates.len();
            cx.send_request(LoadSessionRequest::new(id.clone(), ws.clone()))
                .block_task()
                .await?;
            let replayed: Vec<SessionUpdate> = seen.lock().unwrap().updates[before..]
                .iter()
                .map(|n| n.update.clone())
                .collect();
            Ok((id, replayed))
        },
    )
    .await;
    assert!(
        matches!(&replayed[0], SessionUpdate::UserMessageChunk(c) if matches!(&c.content, ContentBlock::Text(t) if t.text == "first")),
        "{replayed:?}"
    );
    assert!(
        replayed
            .iter()
            .any(|u| matches!(u, SessionUpdate::AgentMessageChunk(_)))
    );
    // The session id is the thread key's: a new server (a new process) resumes it.
    let key = format!("acp:{}", id.0);
    let (stop, text) = client(
        s.server().into_component(),
        Answer::Allow,
        async |cx, seen| {
            initialize(&cx).await?;
            cx.send_request(ResumeSessionRequest::new(id.clone(), ws.clone()))
                .block_task()
                .await?;
            let stop = prompt(&cx, &id, "second").await?;
            let text = seen.lock().unwrap().text();
            Ok((stop, text))
        },
    )
    .await;
    assert_eq!(stop, StopReason::EndTurn);
    assert_eq!(
        text, "Reference reply (turn 2, previously: first): second",
        "the provider session continued"
    );
    let record = s
        .agent()
        .thread(key)
        .record()
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(record.turns, 2);
    // A third server loads it: the history it did not serve is said to be missing.
    let replayed = client(
        s.server().into_component(),
        Answer::Allow,
        async |cx, seen| {
            initialize(&cx).await?;
            cx.send_request(LoadSessionRequest::new(id.clone(), ws.clone()))
                .block_task()
                .await?;
            let updates: Vec<SessionUpdate> = seen
                .lock()
                .unwrap()
                .updates
                .iter()
                .map(|n| n.update.clone())
                .collect();
            Ok(updates)
        },
    )
    .await;
    assert!(
        matches!(replayed.as_slice(), [SessionUpdate::Notice(_)]),
        "{replayed:?}"
    );
}

#[tokio::test]
async fn bad_requests_get_typed_errors_naming_what_was_wrong() {
    let s = Setup::new();
    let ws = s.ws.path().to_path_buf();
    let errors = client(
        s.server().into_component(),
        Answer::Allow,
        async |cx, _seen| {
            initialize(&cx).await?;
            let mut errors = Vec::new();
            let unknown = SessionId::new("0123456789abcdef0123456789abcdef");
            errors.push(prompt(&cx, &unknown, "hi").await.unwrap_err());
            errors.push(
                cx.send_request(ResumeSessionRequest::new(unknown.clone(), ws.clone()))
                    .block_task()
                    .await
                    .unwrap_err(),
            );
            errors.push(
                cx.send_request(ResumeSessionRequest::new(
                    SessionId::new("../other-key"),
                    ws.clone(),
                ))
                .block_task()
                .await
                .unwrap_err(),
            );
            errors.push(
                new_session(&cx, Path::new("relative/dir"))
                    .await
                    .unwrap_err(),
            );
            let id = new_session(&cx, &ws).await?;
            errors.push(
                cx.send_request(PromptRequest::new(
                    id.clone(),
                    vec![ContentBlock::Image(ImageContent::new("AAAA", "image/png"))],
                ))
                .block_task()
                .await
                .unwrap_err(),
            );
            // Not served, not advertised: method-not-found, not a silent success.
            errors.push(
                cx.send_request(SetSessionModeRequest::new(id.clone(), "plan"))
                    .block_task()
                    .await
                    .unwrap_err(),
            );
            Ok(errors)
        },
    )
    .await;
    assert_eq!(i32::from(errors[5].code), -32601, "{:?}", errors[5]);
    let shown: Vec<String> = errors
        .iter()
        .map(|e| format!("{} {}", e.message, e.data.clone().unwrap_or_default()))
        .collect();
    assert!(shown[0].contains("no session"), "{shown:?}");
    assert!(shown[1].contains("no session"), "{shown:?}");
    assert!(shown[2].contains("no session"), "{shown:?}");
    assert!(shown[3].contains("absolute"), "{shown:?}");
    assert!(shown[4].contains("image"), "{shown:?}");
}

/// `adaptor acp` on stdio, as an editor starts it.
fn adaptor_acp(args: &[&str], s: &Setup) -> tokio::process::Child {
    let mut cmd = tokio::process::Command::from(adaptor_cli());
    cmd.arg("acp")
        .args(args)
        .arg("--store")
        .arg(s.store.path().join("threads.db"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    cmd.spawn().expect("start adaptor acp")
}

#[tokio::test]
async fn the_adaptor_acp_binary_serves_a_session_over_stdio() {
    let s = Setup::new();
    let ws = s.ws.path().to_path_buf();
    let mut child = adaptor_acp(&["--driver", "reference"], &s);
    let transport = agent_client_protocol::ByteStreams::new(
        child.stdin.take().unwrap().compat_write(),
        child.stdout.take().unwrap().compat(),
    );
    let (stop, text, asked) = client(transport, Answer::Allow, async |cx, seen| {
        initialize(&cx).await?;
        let id = new_session(&cx, &ws).await?;
        let stop = prompt(&cx, &id, "[[ask-permission]] over stdio").await?;
        let seen = seen.lock().unwrap();
        Ok((stop, seen.text(), seen.permissions.len()))
    })
    .await;
    assert_eq!(stop, StopReason::EndTurn);
    assert_eq!(text, "Reference reply: over stdio");
    assert_eq!(asked, 1, "adaptor acp asks the client");
    // Closing stdin ends the server, cleanly.
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn our_acp_driver_talks_to_adaptor_acp_both_ends_of_the_protocol() {
    let s = Setup::new();
    let outer_state = tmp();
    let store = s.store.path().join("threads.db");
    let driver = adaptor::Driver::from_file(driver_path("acp"))
        .unwrap()
        .with_config(serde_json::json!({
            "command": adaptor_exe().display().to_string(),
            "args": [
                "acp",
                "--driver", driver_path("reference").display().to_string(),
                "--config", serde_json::json!({
                    "command": provider_path().display().to_string(),
                    "state_dir": outer_state.path().display().to_string(),
                }).to_string(),
                "--store", store.display().to_string(),
            ],
        }))
        .expect("config accepted");
    // The outer host confines `adaptor acp` like any CLI: grant it what it needs beyond the
    // workspace — its drivers to read, the inner provider's state and the store to write.
    let containment = adaptor::Containment::new()
        .allow_read(target_dir().join("drivers"))
        .allow_write(outer_state.path())
        .allow_write(s.store.path());
    let agent = agent_builder(driver, s.ws.path())
        .containment(containment)
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let options = RunOptions::new().policy(Policy {
        approvals: ApprovalPolicy {
            permission: DecisionMode::Ask,
            on_reject: Fallback::Continue,
            ..ApprovalPolicy::default()
        },
        ..Policy::default()
    });
    let asked = Arc::new(Mutex::new(0));
    let counted = asked.clone();
    let options = options.on_approval(move |req| {
        *counted.lock().unwrap() += 1;
        async move {
            req.approve().unwrap();
        }
    });
    let thread = agent.thread("loop");
    let first = thread
        .run_with("[[ask-permission]] round trip", options.clone())
        .await
        .expect("first turn");
    assert_eq!(first.text, "Reference reply: round trip");
    assert_eq!(
        *asked.lock().unwrap(),
        1,
        "the inner approval reached the outer host"
    );
    let tools = tool_outcomes(&first);
    assert_eq!(tools.len(), 1, "{tools:?}");
    let second = thread
        .run_with("again", options)
        .await
        .expect("second turn");
    assert_eq!(
        second.text,
        "Reference reply (turn 2, previously: round trip): again"
    );
    agent.close().await;
}

/// The real Claude Code CLI behind `adaptor acp`, against the mock Anthropic API: a tool call
/// asked of the ACP client and run, its result, and a second turn that resumes the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_served_over_acp_against_the_mock() {
    use adaptor_integration_tests::mock_anthropic::{self, MockAnthropic};
    let claude = mock_anthropic::claude_path()
        .filter(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "the Claude Code CLI is missing: {}",
                mock_anthropic::CLAUDE_INSTALL_HINT
            )
        });
    let mock = MockAnthropic::start().await;
    let s = Setup::new();
    let home = tmp();
    let config = serde_json::json!({"command": claude.display().to_string()}).to_string();
    let driver = driver_path("claude").display().to_string();
    let mut args = vec!["--driver".to_owned(), driver, "--config".to_owned(), config];
    for (k, v) in mock_anthropic::claude_env(home.path(), &mock.base_url()) {
        args.push("--env".into());
        args.push(format!("{k}={v}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = adaptor_acp(&args, &s);
    let transport = agent_client_protocol::ByteStreams::new(
        child.stdin.take().unwrap().compat_write(),
        child.stdout.take().unwrap().compat(),
    );
    let ws = s.ws.path().to_path_buf();
    let (first, second, seen) = client(transport, Answer::Allow, async |cx, seen| {
        let init = initialize(&cx).await?;
        assert_eq!(init.agent_info.as_ref().unwrap().name, "adaptor/claude");
        let id = new_session(&cx, &ws).await?;
        // `touch` is not one of the commands Claude Code runs without asking.
        let first = prompt(&cx, &id, r#"TOOL Bash {"command":"touch from-acp.txt"}"#).await?;
        let before = seen.lock().unwrap().text();
        let second = prompt(&cx, &id, "again").await?;
        let after = seen.lock().unwrap().text();
        Ok((first, second, (before, after, seen)))
    })
    .await;
    assert_eq!(first, StopReason::EndTurn);
    assert_eq!(second, StopReason::EndTurn);
    let (before, after, seen) = seen;
    assert!(before.contains("TOOL_RESULT_SEEN"), "{before}");
    assert!(
        s.ws.path().join("from-acp.txt").is_file(),
        "the allowed command ran"
    );
    assert!(
        after[before.len()..].contains("Hello from mock-anthropic! user_msgs=2 you said: again"),
        "the second turn resumed the session: {after}"
    );
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.permissions.len(), 1, "Bash was asked of the client");
        let calls: Vec<_> = seen
            .updates
            .iter()
            .filter_map(|n| match &n.update {
                SessionUpdate::ToolCall(c) => Some(c.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(
            calls[0].kind,
            agent_client_protocol::v1::schema::ToolKind::Execute
        );
        // Claude streams the arguments: the update at their end names the command.
        assert!(
            seen.updates.iter().any(|n| matches!(&n.update,
                SessionUpdate::ToolCallUpdate(u) if u.fields.title.as_deref() == Some("Bash: touch from-acp.txt"))),
            "{:?}",
            seen.updates
        );
        assert!(seen.updates.iter().any(|n| matches!(&n.update,
            SessionUpdate::ToolCallUpdate(u) if u.fields.status == Some(ToolCallStatus::Completed))));
        assert!(
            seen.updates
                .iter()
                .any(|n| matches!(&n.update, SessionUpdate::UsageUpdate(_)))
        );
    }
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_servers_of_session_new_reach_the_run() {
    use agent_client_protocol::v1::schema::{EnvVariable, McpServer, McpServerStdio};
    let s = Setup::new();
    let ws = s.ws.path().to_path_buf();
    let stamper = McpServer::Stdio(
        McpServerStdio::new("stamper", bin_dir().join("mock-mcp-stdio"))
            .env(vec![EnvVariable::new("MOCK_MCP_SECRET", "s3cr3t-value")]),
    );
    let (stop, seen) = client(
        s.server().into_component(),
        Answer::Allow,
        async |cx, seen| {
            initialize(&cx).await?;
            let id = cx
                .send_request(NewSessionRequest::new(ws.clone()).mcp_servers(vec![stamper]))
                .block_task()
                .await?
                .session_id;
            let stop = prompt(
                &cx,
                &id,
                r#"stamp [[mcp-call stamper:stamp:{"text":"acp"}]]"#,
            )
            .await?;
            Ok((stop, seen))
        },
    )
    .await;
    assert_eq!(stop, StopReason::EndTurn);
    let seen = seen.lock().unwrap();
    let outputs: Vec<Value> = seen
        .updates
        .iter()
        .filter_map(|n| match &n.update {
            SessionUpdate::ToolCallUpdate(u) => u.fields.raw_output.clone(),
            _ => None,
        })
        .collect();
    assert!(
        outputs.contains(&Value::String("STAMPED:acp:secret-len=12".into())),
        "the declared stdio server ran with its environment: {outputs:?}"
    );
}
