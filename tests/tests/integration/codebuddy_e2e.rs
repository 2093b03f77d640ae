//! The CodeBuddy driver end to end: `codebuddy.wasm` in the host, running the **real**
//! CodeBuddy Code CLI (2.117.0, the copy `@tencent-ai/agent-sdk` 0.3.201 carries; `./x.sh`
//! installs it) against the project's mock Chat Completions API on 127.0.0.1
//! (`mock_chat`). Each scenario asserts the exact text, the tool calls, the usage the mock
//! serves, the session id and the checkpoint's validity; headless runs, the SDK control
//! transport with its approvals, native structured output, threads (resumed, resident,
//! forked) and the frame catalogue.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use adaptor::{
    Agent, ApprovalKind, ApprovalPolicy, ApprovalRequest, DecisionMode, Error, Event,
    FailureReason, ItemKind, Phase, Policy, RunOptions, RunResult, Schema, ThreadStart,
};
use adaptor_integration_tests::mock_chat::{self, MockChat, codebuddy_env, codebuddy_path};
use adaptor_integration_tests::*;
use futures::StreamExt;
use serde_json::{Value, json};

/// One CLI home and workspace, the mock, and an agent wired to both.
struct CodeBuddy {
    mock: MockChat,
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
}

impl CodeBuddy {
    async fn new() -> Self {
        Self {
            mock: MockChat::start().await,
            home: tmp(),
            ws: tmp(),
        }
    }

    fn agent(&self) -> adaptor::AgentBuilder {
        self.agent_with(json!({}))
    }

    /// [`agent`](Self::agent) with more driver config fields (a `command` of its own wins).
    fn agent_with(&self, mut config: Value) -> adaptor::AgentBuilder {
        let program = codebuddy_path().filter(|p| p.exists()).unwrap_or_else(|| {
            panic!("CodeBuddy Code is missing: run ./x.sh test (it installs @tencent-ai/agent-sdk 0.3.201)")
        });
        if config.get("command").is_none() {
            config["command"] = json!(program.display().to_string());
        }
        let driver = adaptor::Driver::from_file(driver_path("codebuddy"))
            .expect("codebuddy.wasm (./x.sh build-drivers)")
            .with_config(config)
            .expect("config");
        let mut builder = Agent::builder(driver)
            .workspace(self.ws.path())
            .grace_period(Duration::from_millis(500))
            .timeout(Duration::from_secs(120));
        for (k, v) in codebuddy_env(self.home.path(), &self.mock.base_url()) {
            builder = builder.env(k, v);
        }
        builder
    }

    fn ws(&self) -> &Path {
        self.ws.path()
    }
}

/// The mock's reply to the `n`th user message `text`.
fn reply(n: usize, text: &str) -> String {
    format!("Hello from mock-chat! user_msgs={n} you said: <user_query>{text}</user_query>")
}

fn served_usage(r: &RunResult, requests: u64) {
    let u = r.usage.as_ref().expect("usage");
    assert_eq!(
        u.cost_usd, None,
        "the result's cost is the session's, not the turn's"
    );
    assert_eq!(
        u.input_tokens,
        Some(mock_chat::PROMPT_TOKENS * requests),
        "{u:?}"
    );
    assert_eq!(
        u.output_tokens,
        Some(mock_chat::COMPLETION_TOKENS * requests),
        "{u:?}"
    );
}

fn valid_checkpoint(r: &RunResult) -> String {
    let cp = r.checkpoint.as_ref().expect("checkpoint");
    assert!(cp.is_valid(), "checkpoint should be valid");
    assert_eq!(cp.codec(), "codebuddy/session/v1");
    assert_eq!(r.session_id(), Some(cp.resume_id()));
    cp.resume_id().to_owned()
}

fn tool_results(r: &RunResult) -> Vec<(String, bool)> {
    r.transcript()
        .iter()
        .filter(|i| i.kind == ItemKind::ToolResult)
        .map(|i| (i.text.clone().unwrap_or_default(), i.is_error))
        .collect()
}

fn policy(permission: DecisionMode) -> Policy {
    Policy {
        approvals: ApprovalPolicy {
            permission,
            ..ApprovalPolicy::default()
        },
        ..Policy::default()
    }
}

/// A command that changes the workspace (the CLI asks before running it).
const TOUCH: &str =
    r#"TOOL Bash {"command":"touch made_by_codebuddy.txt","description":"create a file"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_text_with_usage_session_and_checkpoint() {
    let c = CodeBuddy::new().await;
    let agent = c.agent().build();
    let r = agent
        .run_with(
            "hello there",
            RunOptions::new()
                .streaming(false)
                .instructions("Answer like a pirate."),
        )
        .await
        .expect("run succeeds");
    record_cassette("plain-text", &r, "hello there");
    assert_eq!(r.text, reply(1, "hello there"));
    assert_eq!(r.summary.as_deref(), Some(r.text.as_str()));
    served_usage(&r, 1);
    valid_checkpoint(&r);
    let args = r.raw().launch.as_ref().unwrap().args.clone();
    assert_eq!(
        &args[..4],
        ["--print", "--output-format", "stream-json", "--verbose"]
    );
    assert_eq!(args[args.len() - 2..], ["--", "hello there"]);
    assert!(args.contains(&"--append-system-prompt=Answer like a pirate.".to_owned()));
    // The appended prompt reached the model.
    let sent = c.mock.main_requests();
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0]["messages"]
            .to_string()
            .contains("Answer like a pirate.")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_messages_stream_token_deltas() {
    let c = CodeBuddy::new().await;
    let agent = c.agent().build();
    let (events, r) =
        collect(agent.stream_with("stream please", RunOptions::new().streaming(true))).await;
    let r = r.expect("run");
    record_cassette("streamed", &r, "stream please");
    let deltas: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::TextDelta(t) if t.phase == Phase::Delta => Some(t.text.clone()),
            _ => None,
        })
        .collect();
    assert!(deltas.len() >= 2, "{deltas:?}");
    assert_eq!(deltas.concat(), r.text);
    assert_eq!(r.text, reply(1, "stream please"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_approved_bash_runs_and_its_result_reaches_the_model() {
    let c = CodeBuddy::new().await;
    let agent = c.agent().build();
    let r = agent
        .run_with(
            TOUCH,
            RunOptions::new().policy(policy(DecisionMode::AutoApprove)),
        )
        .await
        .expect("tool run");
    record_cassette("bash-tool", &r, TOUCH);
    assert!(
        c.ws().join("made_by_codebuddy.txt").exists(),
        "the tool ran"
    );
    let args = r.raw().launch.as_ref().unwrap().args.join(" ");
    assert!(
        args.contains("--permission-mode bypassPermissions"),
        "{args}"
    );
    let call = r
        .transcript()
        .iter()
        .find(|i| i.kind == ItemKind::ToolCall)
        .expect("tool call")
        .clone();
    assert_eq!(call.tool_name.as_deref(), Some("Bash"));
    let results = tool_results(&r);
    assert_eq!(results.len(), 1);
    assert!(!results[0].1, "{results:?}");
    assert!(
        r.text.starts_with("Calling Bash.\n\nTOOL_RESULT_SEEN:"),
        "{}",
        r.text
    );
    valid_checkpoint(&r);
    served_usage(&r, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_allowed_through_an_approval_on_the_control_transport() {
    let c = CodeBuddy::new().await;
    let asked = Arc::new(AtomicUsize::new(0));
    let seen = asked.clone();
    let agent = c
        .agent()
        .on_approval(move |req: ApprovalRequest| {
            seen.fetch_add(1, Ordering::SeqCst);
            async move {
                assert_eq!(req.kind, ApprovalKind::Permission);
                assert_eq!(req.tool_name.as_deref(), Some("Bash"));
                assert_eq!(
                    req.details.as_ref().unwrap()["input"]["command"],
                    "touch made_by_codebuddy.txt"
                );
                req.approve().unwrap();
            }
        })
        .build();
    let r = agent
        .run_with(
            TOUCH,
            RunOptions::new()
                .streaming(false)
                .policy(policy(DecisionMode::Ask)),
        )
        .await
        .expect("approved run");
    record_cassette("approval-allowed", &r, TOUCH);
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert!(
        c.ws().join("made_by_codebuddy.txt").exists(),
        "the tool ran"
    );
    assert!(!tool_results(&r)[0].1);
    valid_checkpoint(&r);
    let args = r.raw().launch.as_ref().unwrap().args.clone();
    assert_eq!(args[0], "--input-format=stream-json");
    let stdin = String::from_utf8_lossy(&r.raw().stdin).into_owned();
    let frames: Vec<Value> = stdin
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(frames[0]["request"]["subtype"], "initialize");
    assert_eq!(frames[1]["type"], "user");
    assert_eq!(frames[2]["response"]["response"]["allowed"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_denied_through_an_approval() {
    let c = CodeBuddy::new().await;
    let agent = c.agent().build();
    let mut stream = agent.stream_with(TOUCH, RunOptions::new().policy(policy(DecisionMode::Ask)));
    while let Some(ev) = stream.next().await {
        if let Event::ApprovalRequest(req) = ev {
            req.deny("not in this repo").unwrap();
        }
    }
    let e = match stream.result().await {
        Err(Error::Run(e)) => e,
        other => panic!("{other:?}"),
    };
    assert_eq!(e.reason, FailureReason::ApprovalDenied);
    assert!(
        !c.ws().join("made_by_codebuddy.txt").exists(),
        "the tool never ran"
    );
    assert!(!e.result.checkpoint.as_ref().is_some_and(|c| c.is_valid()));
    let stdin = String::from_utf8_lossy(&e.result.raw().stdin).into_owned();
    assert!(
        stdin.contains(r#""allowed":false"#) && stdin.contains(r#""interrupt":true"#),
        "{stdin}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_through_an_approval() {
    let c = CodeBuddy::new().await;
    let agent = c
        .agent()
        .on_approval(|req: ApprovalRequest| async move {
            assert_eq!(req.kind, ApprovalKind::Question);
            assert_eq!(req.title, "Which color?");
            let keys: Vec<String> = req.choices.iter().map(|c| c.key.clone()).collect();
            assert_eq!(keys, ["red", "blue"]);
            req.answer("blue").unwrap();
        })
        .build();
    let prompt = r#"TOOL AskUserQuestion {"questions":[{"question":"Which color?","header":"Color","options":[{"label":"red","description":"warm"},{"label":"blue","description":"cool"}],"multiSelect":false}]}"#;
    let r = agent
        .run_with(
            prompt,
            RunOptions::new().policy(Policy {
                approvals: ApprovalPolicy {
                    question: adaptor::QuestionMode::Ask,
                    ..ApprovalPolicy::default()
                },
                ..Policy::default()
            }),
        )
        .await
        .expect("answered");
    assert!(r.text.contains("Which color? → blue"), "{}", r.text);
    valid_checkpoint(&r);
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Answer {
    answer: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_structured_output_reads_the_json_document() {
    let c = CodeBuddy::new().await;
    let agent = c.agent().build();
    let r = agent
        .run_with(
            "give json",
            RunOptions::new()
                .streaming(false)
                .schema(Schema::of::<Answer>().unwrap()),
        )
        .await
        .expect("structured run");
    record_cassette("structured-native", &r, "give json");
    let s = r.structured.as_ref().expect("structured");
    assert_eq!(s.mechanism, adaptor::Mechanism::Native);
    assert!(s.valid, "{:?}", s.errors);
    assert_eq!(s.value, Some(json!({"answer": "mock"})));
    let args = r.raw().launch.as_ref().unwrap().args.clone();
    assert!(args.windows(2).any(|w| w == ["--output-format", "json"]));
    assert!(args.iter().any(|a| a == "--json-schema"));
    valid_checkpoint(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_error_fails_with_the_provider_message() {
    let c = CodeBuddy::new().await;
    let agent = c.agent().build();
    let e = run_error(agent.run("MOCK_ERROR 500").await);
    record_cassette("api-error-500", &e.result, "MOCK_ERROR 500");
    assert_eq!(e.reason, FailureReason::AgentError);
    assert!(e.message.starts_with("500 "), "{}", e.message);
    assert!(!e.result.checkpoint.as_ref().is_some_and(|c| c.is_valid()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_resumes_the_session_across_processes() {
    let c = CodeBuddy::new().await;
    let agent = c
        .agent()
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let thread = agent.thread("codebuddy-thread");
    let first = thread.run("first turn").await.expect("first");
    assert_eq!(first.text, reply(1, "first turn"));
    let session = valid_checkpoint(&first);
    let second = thread.run("second turn").await.expect("second");
    assert_eq!(second.text, reply(2, "second turn"));
    assert_eq!(valid_checkpoint(&second), session, "same session");
    assert_eq!(second.thread.as_ref().unwrap().start, ThreadStart::Resumed);
    // The turn's own usage, not the session's total the result frame carries.
    served_usage(&second, 1);
    let args = second.raw().launch.as_ref().unwrap().args.clone();
    assert!(args.contains(&format!("--resume={session}")), "{args:?}");
    assert!(
        c.mock.main_requests()[1]["messages"]
            .to_string()
            .contains("first turn")
    );
}

fn reused_pid(events: &[Event]) -> Option<u64> {
    events.iter().find_map(|e| match e {
        Event::Notice(n) if n.notice == "process.reused" => {
            n.data.as_ref().and_then(|d| d["pid"].as_u64())
        }
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_keeps_one_codebuddy_process_across_turns() {
    let c = CodeBuddy::new().await;
    let agent = c
        .agent_with(json!({ "transport": "stream-json" }))
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let thread = agent.thread("codebuddy-resident");
    let (events, first) = collect(thread.stream("first turn")).await;
    let first = first.expect("first");
    assert_eq!(first.text, reply(1, "first turn"));
    assert!(first.exit.kept_alive, "the CLI stays for the next turn");
    let session = valid_checkpoint(&first);
    let pid = spawned_pid(&events).expect("spawned");
    let (events, second) = collect(thread.stream("second turn")).await;
    let second = second.expect("second");
    assert_eq!(second.text, reply(2, "second turn"));
    assert_eq!(spawned_pid(&events), None, "no new process");
    assert_eq!(reused_pid(&events), Some(u64::from(pid)));
    assert_eq!(valid_checkpoint(&second), session, "same session");
    served_usage(&second, 1);
    agent.close().await;
    assert!(!pid_alive(pid), "Agent::close stops the resident CLI");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_thread_starts_a_new_session_from_the_parent() {
    let c = CodeBuddy::new().await;
    let agent = c
        .agent()
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let parent = agent.thread("codebuddy-parent");
    let first = parent.run("first turn").await.expect("first");
    let parent_session = valid_checkpoint(&first);
    let forked = parent
        .fork("codebuddy-child")
        .run("branch turn")
        .await
        .expect("fork");
    assert_eq!(forked.text, reply(2, "branch turn"));
    let child_session = valid_checkpoint(&forked);
    assert_ne!(child_session, parent_session, "a fork is a new session");
    assert!(matches!(
        forked.thread.as_ref().unwrap().start,
        ThreadStart::Forked { .. }
    ));
    let second = parent.run("parent again").await.expect("parent");
    assert_eq!(valid_checkpoint(&second), parent_session);
    let history = c.mock.main_requests()[2]["messages"].to_string();
    assert!(
        history.contains("first turn") && !history.contains("branch turn"),
        "{history}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reports_the_installed_version() {
    let c = CodeBuddy::new().await;
    let agent = c.agent().build();
    let report = agent.inspect().await.expect("inspect");
    let text = format!("{report:?}");
    assert!(text.contains("2.117.0"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_frame_of_the_pinned_cli_is_known() {
    let c = CodeBuddy::new().await;
    let plain = c.agent().build();
    let control = c.agent_with(json!({ "transport": "stream-json" })).build();
    let auto = RunOptions::new().policy(policy(DecisionMode::AutoApprove));
    let mut raws = Vec::new();
    for (agent, prompt, options) in [
        (&plain, "hello", RunOptions::new().streaming(true)),
        (&plain, TOUCH, auto.clone()),
        (&plain, "MOCK_ERROR 500", RunOptions::new()),
        (
            &control,
            TOUCH,
            RunOptions::new()
                .streaming(true)
                .policy(policy(DecisionMode::Ask)),
        ),
    ] {
        let r = match agent.run_with(prompt, options).await {
            Ok(r) => r,
            Err(Error::Run(e)) => e.result,
            Err(e) => panic!("{prompt}: {e}"),
        };
        raws.push((prompt, r.raw().stdout.clone()));
    }
    let (seen, unknown) = unknown_frames(&raws, codebuddy_driver::KNOWN_FRAMES);
    assert!(seen > 10, "the scenarios produced frames");
    assert!(
        unknown.is_empty(),
        "CodeBuddy Code sent frames the driver does not know: {unknown:?}"
    );
}

/// A `codebuddy` in a scratch directory that runs the real CLI, then damages what it printed
/// the way `fault` says: the real frames with one fault, through the real host and process
/// layer (the CLI itself never misbehaves against the mock). The real CLI's install
/// directory is granted read/execute by the caller's containment.
fn faulty_codebuddy(dir: &Path, fault: &str) -> (std::path::PathBuf, adaptor::Containment) {
    use std::os::unix::fs::PermissionsExt;
    let real = codebuddy_path()
        .filter(|p| p.exists())
        .expect("CodeBuddy Code (./x.sh test installs it)");
    let damage = match fault {
        // The last 40 bytes (the end of the result frame and its newline) never arrive.
        "truncated" => r#"head -c -40 "$out""#,
        // A frame after the terminal result.
        "after-result" => {
            r#"cat "$out"; printf '%s\n' '{"type":"assistant","session_id":"late","message":{"content":[]}}'"#
        }
        // The result says success, the process exits 3.
        "exit-3" => r#"cat "$out"; code=3"#,
        // A frame type the driver has never seen, after `system/init`.
        "unknown" => {
            r#"head -n 1 "$out"; printf '%s\n' '{"type":"brand_new_frame","session_id":"x","detail":1}'; tail -n +2 "$out""#
        }
        other => panic!("no fault {other}"),
    };
    let script = format!(
        "#!/bin/sh\nout=\"$(mktemp)\"\n'{}' \"$@\" > \"$out\"\ncode=$?\n{damage}\nrm -f \"$out\"\nexit $code\n",
        real.display()
    );
    let path = dir.join("codebuddy");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let install = real.parent().and_then(Path::parent).unwrap().to_path_buf();
    (path, adaptor::Containment::new().allow_read(install))
}

/// The contract's outcomes for damaged output, on the real CLI's own frames: a truncated
/// last frame and a frame after the result are protocol errors, a non-zero exit after a
/// success result is an agent error — none with a valid checkpoint — and an unknown frame
/// is a vendor event and a system transcript item in a run that still succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_output_of_the_real_cli_gets_the_contracts_outcome() {
    let c = CodeBuddy::new().await;
    for (fault, reason) in [
        ("truncated", FailureReason::ProtocolError),
        ("after-result", FailureReason::ProtocolError),
        ("exit-3", FailureReason::AgentError),
    ] {
        let bin = tmp();
        let (program, containment) = faulty_codebuddy(bin.path(), fault);
        let agent = c
            .agent_with(json!({ "command": program.display().to_string() }))
            .containment(containment)
            .build();
        let e = run_error(
            agent
                .run_with("hello", RunOptions::new().streaming(false))
                .await,
        );
        assert_eq!(e.reason, reason, "{fault}: {}", e.message);
        assert!(
            !e.result.checkpoint.as_ref().is_some_and(|c| c.is_valid()),
            "{fault}: no valid checkpoint"
        );
        assert!(!e.result.raw().stdout.is_empty(), "{fault}: output kept");
    }
    let bin = tmp();
    let (program, containment) = faulty_codebuddy(bin.path(), "unknown");
    let agent = c
        .agent_with(json!({ "command": program.display().to_string() }))
        .containment(containment)
        .build();
    let (events, r) = collect(agent.stream_with("hello", RunOptions::new().streaming(false))).await;
    let r = r.expect("an unknown frame does not fail the run");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Vendor(v) if v.name == "brand_new_frame")),
        "{events:?}"
    );
    assert!(r.transcript().iter().any(|i| i.kind == ItemKind::System));
    assert_eq!(r.text, reply(1, "hello"));
    valid_checkpoint(&r);
}
