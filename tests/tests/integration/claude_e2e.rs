//! The Claude driver end to end: `claude.wasm` in the host, running the **real** Claude Code
//! CLI (2.1.197, and again 2.1.332: `./x.sh test` installs both and runs this module once per
//! version, the second time with `ADAPTOR_CLAUDE_BIN` and `ADAPTOR_CLAUDE_VERSION` set) against
//! the project's mock Messages API on
//! 127.0.0.1. Each scenario asserts the exact text, tool names and inputs, the usage numbers
//! the mock serves, the session id and the checkpoint's validity.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use adaptor::store::SqliteStore;
use adaptor::{
    Agent, ApprovalKind, ApprovalPolicy, ApprovalRequest, DecisionMode, Error, Event,
    FailureReason, ItemKind, Phase, Policy, RunOptions, RunResult, Schema, ThreadStart,
};
use adaptor_integration_tests::mock_anthropic::*;
use adaptor_integration_tests::*;
use futures::StreamExt;
use serde_json::{Value, json};

/// One CLI home and workspace, the mock, and an agent wired to both.
struct Claude {
    mock: MockAnthropic,
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
}

impl Claude {
    async fn new() -> Self {
        Self {
            mock: MockAnthropic::start().await,
            home: tmp(),
            ws: tmp(),
        }
    }

    fn agent(&self) -> adaptor::AgentBuilder {
        self.agent_with(json!({}))
    }

    /// [`agent`](Self::agent) with more driver config fields.
    fn agent_with(&self, mut config: Value) -> adaptor::AgentBuilder {
        let claude = claude_path()
            .filter(|p| p.exists())
            .unwrap_or_else(|| panic!("the Claude Code CLI is missing: {CLAUDE_INSTALL_HINT}"));
        config["command"] = json!(claude.display().to_string());
        let driver = adaptor::Driver::from_file(driver_path("claude"))
            .expect("claude.wasm (./x.sh build-drivers)")
            .with_config(config)
            .expect("config");
        let mut builder = Agent::builder(driver)
            .workspace(self.ws.path())
            .grace_period(Duration::from_millis(500))
            .timeout(Duration::from_secs(120));
        for (k, v) in claude_env(self.home.path(), &self.mock.base_url()) {
            builder = builder.env(k, v);
        }
        builder
    }

    fn ws(&self) -> &Path {
        self.ws.path()
    }
}

fn served_usage(r: &RunResult, requests: u64) {
    let u = r.usage.as_ref().expect("usage");
    assert_eq!(u.input_tokens, Some(INPUT_TOKENS * requests));
    assert_eq!(u.output_tokens, Some(OUTPUT_TOKENS * requests));
    assert_eq!(
        u.cache_read_tokens,
        Some(CACHE_READ_INPUT_TOKENS * requests)
    );
    assert_eq!(
        u.cache_write_tokens,
        Some(CACHE_CREATION_INPUT_TOKENS * requests)
    );
    assert!(u.cost_usd.is_some_and(|c| c > 0.0));
}

/// Two one-request turns cost the same: the second's cost is its own, not the session's
/// running total (2.1.197 and 2.1.332 report cumulative totals in every result).
fn same_cost(first: &RunResult, second: &RunResult) {
    let cost = |r: &RunResult| r.usage.as_ref().and_then(|u| u.cost_usd).expect("cost");
    assert!(
        (cost(first) - cost(second)).abs() < 1e-9,
        "turn costs {} and {}",
        cost(first),
        cost(second)
    );
    for r in [first, second] {
        assert!(
            r.metadata.contains_key("usage_source") && r.metadata.contains_key("cumulative_usage"),
            "{:?}",
            r.metadata
        );
    }
}

/// The Claude Code version under test is 2.1.332 or newer (its protocol additions).
fn newest_protocol() -> bool {
    claude_version() != "2.1.197"
}

fn valid_checkpoint(r: &RunResult) -> String {
    let cp = r.checkpoint.as_ref().expect("checkpoint");
    assert!(cp.is_valid(), "checkpoint should be valid");
    assert_eq!(cp.codec(), "claude/session/v1");
    assert_eq!(r.session_id(), Some(cp.resume_id()));
    cp.resume_id().to_owned()
}

fn tool_calls(events: &[Event]) -> Vec<(String, Value)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCall(c) if c.phase == Phase::End => {
                Some((c.name.clone(), c.args.clone().unwrap_or(Value::Null)))
            }
            _ => None,
        })
        .collect()
}

fn tool_results(r: &RunResult) -> Vec<(String, bool)> {
    r.transcript()
        .iter()
        .filter(|i| i.kind == ItemKind::ToolResult)
        .map(|i| (i.text.clone().unwrap_or_default(), i.is_error))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_text_with_usage_session_and_checkpoint() {
    let c = Claude::new().await;
    let agent = c.agent().build();
    let (events, result) = collect(
        agent.stream_with(
            "hello there",
            RunOptions::new()
                .streaming(false)
                .instructions("Answer like a pirate."),
        ),
    )
    .await;
    let r = result.expect("run succeeds");
    record_cassette("plain-text", &r, "hello there");
    let reply = "Hello from mock-anthropic! user_msgs=1 you said: hello there";
    assert_eq!(r.text, reply);
    assert_eq!(r.summary.as_deref(), Some(reply));
    served_usage(&r, 1);
    let session = valid_checkpoint(&r);
    assert!(events.iter().any(
        |e| matches!(e, Event::Session(s) if s.session_id.as_deref() == Some(session.as_str()))
    ));
    let terminal = r.terminal().expect("terminal");
    assert_eq!(terminal.event, "result");
    let terminal_json: Value = serde_json::from_str(&terminal.json).unwrap();
    assert_eq!(terminal_json["session_id"], json!(session));
    let sent = c.mock.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["stream"], json!(true));
    assert!(
        sent[0]["system"]
            .to_string()
            .contains("Answer like a pirate."),
        "instructions reach the system prompt through the private file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_and_read_tool_calls_with_their_results() {
    let c = Claude::new().await;
    std::fs::write(c.ws().join("notes.txt"), "alpha\nbeta\n").unwrap();
    let agent = c.agent().build();
    let (events, result) = collect(agent.stream_with(
        r#"TOOL Bash {"command":"echo hi","description":"say hi"}"#,
        RunOptions::new().streaming(false),
    ))
    .await;
    let r = result.expect("bash run");
    record_cassette(
        "bash-tool",
        &r,
        r#"TOOL Bash {"command":"echo hi","description":"say hi"}"#,
    );
    assert_eq!(
        tool_calls(&events),
        [(
            "Bash".to_owned(),
            json!({"command":"echo hi","description":"say hi"})
        )]
    );
    assert_eq!(tool_results(&r), [("hi".to_owned(), false)]);
    assert_eq!(r.text, "Calling Bash.\n\nTOOL_RESULT_SEEN: hi");
    served_usage(&r, 2);
    valid_checkpoint(&r);

    let path = c.ws().join("notes.txt").display().to_string();
    let r = agent
        .run_with(
            format!(r#"TOOL Read {{"file_path":"{path}"}}"#),
            RunOptions::new().streaming(false),
        )
        .await
        .expect("read run");
    let results = tool_results(&r);
    assert_eq!(results.len(), 1);
    assert!(
        results[0].0.contains("alpha") && results[0].0.contains("beta"),
        "{results:?}"
    );
    assert!(!results[0].1);
    let call = r
        .transcript()
        .iter()
        .find(|i| i.kind == ItemKind::ToolCall)
        .unwrap();
    assert_eq!(call.tool_name.as_deref(), Some("Read"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_and_partial_message_streaming() {
    let c = Claude::new().await;
    let agent = c.agent().build();
    let (events, result) = collect(agent.stream("THINK please")).await;
    let r = result.expect("run");
    record_cassette("thinking-streamed", &r, "THINK please");
    let thinking: String = events
        .iter()
        .filter_map(|e| match e {
            Event::Thinking(t) if t.phase == Phase::Delta => Some(t.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(thinking, "Let me think about it.");
    let deltas: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::TextDelta(t) if t.phase == Phase::Delta => Some(t.text.clone()),
            _ => None,
        })
        .collect();
    assert!(deltas.len() >= 2, "token-level deltas: {deltas:?}");
    assert_eq!(deltas.concat(), r.text);
    assert_eq!(
        r.text,
        "Hello from mock-anthropic! user_msgs=1 you said: THINK please"
    );
    let args = r.raw().launch.as_ref().unwrap().args.clone();
    assert!(args.iter().any(|a| a == "--include-partial-messages"));

    // Tool-argument deltas when streaming.
    let (events, result) = collect(agent.stream(r#"TOOL Bash {"command":"echo streamed"}"#)).await;
    result.expect("tool run");
    let arg_deltas: String = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCall(c) if c.phase == Phase::Delta => c.args_delta.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&arg_deltas).unwrap(),
        json!({"command":"echo streamed"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_carries_the_first_turn() {
    let c = Claude::new().await;
    let agent = c.agent().build();
    let first = agent.run("first turn").await.expect("first");
    let session = valid_checkpoint(&first);
    let second = agent
        .run_with(
            "second turn",
            RunOptions::new().resume(first.checkpoint.clone().unwrap()),
        )
        .await
        .expect("second");
    assert_eq!(
        second.text,
        "Hello from mock-anthropic! user_msgs=2 you said: second turn"
    );
    assert_eq!(valid_checkpoint(&second), session, "same session");
    // 2.1.332 carries the session's totals into the resumed process; the turn's usage is
    // still its own.
    served_usage(&second, 1);
    same_cost(&first, &second);
    let args = second.raw().launch.as_ref().unwrap().args.clone();
    assert!(args.contains(&format!("--resume={session}")), "{args:?}");
    let sent = c.mock.requests();
    let history = sent.last().unwrap()["messages"].to_string();
    assert!(
        history.contains("first turn"),
        "the second request carries the first turn"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_in_a_sqlite_store_resumes_the_session() {
    let c = Claude::new().await;
    let db = tmp();
    let store = SqliteStore::open(db.path().join("threads.sqlite3")).expect("sqlite store");
    let agent = c.agent().thread_store(store).build();
    let thread = agent.thread("claude-e2e");

    let first = thread.run("first turn").await.expect("first");
    assert_eq!(
        first.text,
        "Hello from mock-anthropic! user_msgs=1 you said: first turn"
    );
    let session = valid_checkpoint(&first);
    let info = first.thread.clone().expect("thread info");
    assert_eq!(info.key, "claude-e2e");
    assert_eq!(info.start, ThreadStart::New);
    assert_eq!(
        thread.session_state().await.unwrap().as_ref(),
        first.checkpoint.as_ref().map(adaptor::Checkpoint::state),
        "the first checkpoint is stored"
    );

    let second = thread.run("second turn").await.expect("second");
    assert_eq!(
        second.text,
        "Hello from mock-anthropic! user_msgs=2 you said: second turn"
    );
    let info2 = second.thread.clone().expect("thread info");
    assert_eq!(info2.start, ThreadStart::Resumed);
    assert_eq!(info2.record_id, info.record_id, "same record");
    assert_eq!(valid_checkpoint(&second), session, "same session");
    let args = second.raw().launch.as_ref().unwrap().args.clone();
    assert!(args.contains(&format!("--resume={session}")), "{args:?}");

    let sent = c.mock.requests();
    assert_eq!(sent.len(), 2);
    let history = sent[1]["messages"].to_string();
    assert!(
        history.contains("first turn"),
        "the second request carries the first turn: {history}"
    );
    let record = thread.record().await.unwrap().expect("active record");
    assert_eq!(record.id, info.record_id);
    assert_eq!(record.turns, 2);
    assert_eq!(record.driver, "claude");
    assert_eq!(record.state.resume_id, session);
}

#[test]
fn thread_continues_across_two_cli_processes() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let c = runtime.block_on(Claude::new());
    let claude = claude_path()
        .filter(|p| p.exists())
        .unwrap_or_else(|| panic!("the Claude Code CLI is missing: {CLAUDE_INSTALL_HINT}"));
    let db = tmp();
    let store = db.path().join("threads.sqlite3").display().to_string();
    let config = json!({ "command": claude.display().to_string() }).to_string();
    let env: Vec<String> = claude_env(c.home.path(), &c.mock.base_url())
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let run = |prompt: &str| {
        let mut cmd = adaptor_cli();
        cmd.args(["run", "--thread", "claude-cli", "--store", &store])
            .args(["--driver", "claude", "--config", &config, "--cwd"])
            .arg(c.ws());
        for pair in &env {
            cmd.args(["--env", pair]);
        }
        let out = cmd.args(["--json", prompt]).output().expect("adaptor runs");
        let lines = json_lines(&out);
        let result = lines.last().expect("a result line").clone();
        assert_eq!(result["kind"], "result", "{result}");
        (spawned_command(&lines), result)
    };

    let (launched, first) = run("first turn");
    assert!(!launched.contains("--resume"), "{launched}");
    assert_eq!(
        first["text"],
        "Hello from mock-anthropic! user_msgs=1 you said: first turn"
    );
    assert_eq!(first["thread"]["key"], "claude-cli");
    assert_eq!(first["thread"]["start"]["kind"], "new", "{first}");
    assert_eq!(first["checkpoint"]["valid"], true);
    assert_eq!(first["checkpoint"]["codec"], "claude/session/v1");
    let record_id = first["thread"]["record_id"].as_str().expect("record id");
    let session = first["checkpoint"]["resume_id"].as_str().expect("session");

    let (launched, second) = run("second turn");
    let words: Vec<&str> = launched.split(' ').collect();
    assert!(
        words.contains(&format!("--resume={session}").as_str()),
        "{launched}"
    );
    assert_eq!(
        second["text"],
        "Hello from mock-anthropic! user_msgs=2 you said: second turn"
    );
    assert_eq!(second["thread"]["start"]["kind"], "resumed", "{second}");
    assert_eq!(second["thread"]["record_id"], record_id);
    assert_eq!(second["checkpoint"]["valid"], true);
    assert_eq!(second["checkpoint"]["resume_id"], session, "same session");
    let sent = c.mock.requests();
    assert_eq!(sent.len(), 2);
    let history = sent[1]["messages"].to_string();
    assert!(
        history.contains("first turn"),
        "the second process's request carries the first turn: {history}"
    );

    let out = adaptor_cli()
        .args(["threads", "show", "claude-cli", "--store", &store, "--json"])
        .output()
        .expect("adaptor runs");
    let records = json_lines(&out);
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record["id"], record_id);
    assert_eq!(record["key"], "claude-cli");
    assert_eq!(record["status"], "active");
    assert_eq!(record["driver"], "claude");
    assert_eq!(record["turns"], 2);
    assert_eq!(record["state"]["resume_id"], session);
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Verdict {
    verdict: String,
    score: u32,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_structured_output() {
    let c = Claude::new().await;
    let agent = c.agent().build();
    let r = agent
        .run_with(
            "review this",
            RunOptions::new().schema(Schema::of::<Verdict>().unwrap()),
        )
        .await
        .expect("structured run");
    let s = r.structured.as_ref().expect("structured");
    assert_eq!(s.mechanism, adaptor::Mechanism::Native);
    assert!(s.valid, "{:?}", s.errors);
    assert_eq!(s.value, Some(json!({"verdict": "mock", "score": 1})));
    let v: Verdict = r.decode().expect("decodes");
    assert_eq!((v.verdict.as_str(), v.score), ("mock", 1));
    let args = r.raw().launch.as_ref().unwrap().args.clone();
    assert!(args.iter().any(|a| a == "--json-schema"));
}

fn ask_permission() -> RunOptions {
    RunOptions::new().streaming(false).policy(Policy {
        approvals: ApprovalPolicy {
            permission: DecisionMode::Ask,
            ..ApprovalPolicy::default()
        },
        ..Policy::default()
    })
}

/// A command the CLI's read-only classifier does not allow by itself.
const TOUCH: &str =
    r#"TOOL Bash {"command":"touch made_by_claude.txt","description":"create a file"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_allowed_through_an_approval() {
    let c = Claude::new().await;
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
                    "touch made_by_claude.txt"
                );
                req.approve().unwrap();
            }
        })
        .build();
    let r = agent
        .run_with(TOUCH, ask_permission())
        .await
        .expect("approved run");
    record_cassette("approval-allowed", &r, TOUCH);
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert!(c.ws().join("made_by_claude.txt").exists(), "the tool ran");
    assert!(!tool_results(&r)[0].1);
    assert!(r.text.contains("TOOL_RESULT_SEEN"), "{}", r.text);
    valid_checkpoint(&r);
    let stdin = String::from_utf8_lossy(&r.raw().stdin).into_owned();
    assert!(stdin.contains(r#""behavior":"allow""#), "{stdin}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_denied_through_an_approval() {
    let c = Claude::new().await;
    let agent = c.agent().build();
    let mut stream = agent.stream_with(TOUCH, ask_permission());
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
    assert!(e.message.contains("not in this repo"), "{}", e.message);
    assert!(
        !c.ws().join("made_by_claude.txt").exists(),
        "the tool never ran"
    );
    assert!(!e.result.checkpoint.as_ref().is_some_and(|c| c.is_valid()));
    let stdin = String::from_utf8_lossy(&e.result.raw().stdin).into_owned();
    assert!(
        stdin.contains(r#""behavior":"deny""#) && stdin.contains(r#""interrupt":true"#),
        "{stdin}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_400_429_500_529_fail_with_the_provider_message() {
    let c = Claude::new().await;
    let agent = c.agent().build();
    for status in [400, 429, 500, 529] {
        let (events, result) = collect(agent.stream_with(
            format!("MOCK_ERROR {status}"),
            RunOptions::new().streaming(false),
        ))
        .await;
        let e = run_error(result);
        if matches!(status, 400 | 529) {
            record_cassette(
                &format!("api-error-{status}"),
                &e.result,
                &format!("MOCK_ERROR {status}"),
            );
        }
        let reason = match status {
            429 => FailureReason::RateLimited,
            529 => FailureReason::Overloaded,
            _ => FailureReason::AgentError,
        };
        assert_eq!(e.reason, reason, "{status}");
        assert!(
            e.message.starts_with("API Error") && e.message.contains(&status.to_string()),
            "{}",
            e.message
        );
        assert_eq!(
            e.details.as_ref().unwrap()["api_error_status"],
            json!(status)
        );
        assert!(!e.result.checkpoint.as_ref().unwrap().is_valid());
        assert_eq!(e.result.exit.code, Some(1));
        let retried = events
            .iter()
            .any(|ev| matches!(ev, Event::Notice(n) if n.notice == "api-retry"));
        assert_eq!(
            retried,
            status != 400,
            "the CLI retries {status} once (400 never)"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_turn_keeps_the_partial_text() {
    let c = Claude::new().await;
    let agent = c.agent().build();
    let mut stream = agent.stream("MOCK_SLOW please");
    let mut partial = String::new();
    let mut pid = None;
    while let Some(ev) = stream.next().await {
        match ev {
            Event::ProcessInfo(p) if p.process == adaptor::ProcessInfoKind::Spawn => pid = p.pid,
            Event::TextDelta(t) if t.phase == Phase::Delta => {
                partial.push_str(&t.text);
                if let Some(pid) = pid {
                    // The CLI dies mid-turn (not a cancel): SIGKILL from outside.
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                }
            }
            _ => {}
        }
    }
    let e = run_error(stream.result().await);
    record_cassette("killed-mid-turn", &e.result, "MOCK_SLOW please");
    assert_eq!(e.reason, FailureReason::AgentError);
    assert!(
        e.message.contains("before its result frame"),
        "{}",
        e.message
    );
    assert!(!partial.is_empty());
    assert!(e.result.text.is_empty() || partial.starts_with(&e.result.text));
    assert!(!e.result.checkpoint.as_ref().is_some_and(|c| c.is_valid()));
    assert_eq!(e.result.exit.signal, Some(9));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reports_the_installed_version_and_warns_outside_the_range() {
    let c = Claude::new().await;
    let report = c.agent().build().inspect().await.expect("inspect");
    let env = &report.environment;
    assert_eq!(env.cli_version.as_deref(), Some(claude_version().as_str()));
    assert_eq!(env.status, adaptor::CheckLevel::Pass, "{env:?}");
    assert_eq!(env.supported.verified, ["2.1.197", "2.1.332"]);

    let dir = tmp();
    let fake = fake_cli(dir.path(), "claude", "3.0.1 (Claude Code)");
    let driver = adaptor::Driver::from_file(driver_path("claude"))
        .unwrap()
        .with_config(json!({ "command": fake.display().to_string() }))
        .unwrap();
    let report = Agent::builder(driver)
        .workspace(c.ws())
        .build()
        .inspect()
        .await
        .unwrap();
    let env = &report.environment;
    assert_eq!(env.cli_version.as_deref(), Some("3.0.1"));
    assert_eq!(env.status, adaptor::CheckLevel::Warn);
    let check = env.checks.iter().find(|c| c.code == "cli.version").unwrap();
    assert!(
        check.message.contains("outside the supported range"),
        "{}",
        check.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_approve_bypasses_the_cli_permission_check() {
    let c = Claude::new().await;
    let agent = c.agent().build();
    let r = agent
        .run_with(
            TOUCH,
            RunOptions::new().streaming(false).policy(Policy {
                approvals: ApprovalPolicy {
                    permission: DecisionMode::AutoApprove,
                    ..ApprovalPolicy::default()
                },
                ..Policy::default()
            }),
        )
        .await
        .expect("auto-approved run");
    assert!(
        c.ws().join("made_by_claude.txt").exists(),
        "the tool ran without asking"
    );
    let args = r.raw().launch.as_ref().unwrap().args.clone();
    assert!(args.iter().any(|a| a == "--dangerously-skip-permissions"));
    valid_checkpoint(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_subtype_fails_the_run() {
    let c = Claude::new().await;
    let driver = adaptor::Driver::from_file(driver_path("claude"))
        .unwrap()
        .with_config(json!({
            "command": claude_path().unwrap().display().to_string(),
            "max_turns": 1,
        }))
        .unwrap();
    let mut builder = Agent::builder(driver).workspace(c.ws());
    for (k, v) in claude_env(c.home.path(), &c.mock.base_url()) {
        builder = builder.env(k, v);
    }
    let e = run_error(
        builder
            .build()
            .run_with(
                r#"TOOL Bash {"command":"echo one"}"#,
                RunOptions::new().streaming(false),
            )
            .await,
    );
    assert_eq!(e.reason, FailureReason::MaxTurns);
    assert_eq!(
        e.details.as_ref().unwrap()["subtype"],
        json!("error_max_turns")
    );
    assert!(!e.result.checkpoint.as_ref().unwrap().is_valid());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_interrupts_a_bidirectional_turn_gracefully() {
    let c = Claude::new().await;
    let agent = c.agent().build();
    let mut stream = agent.stream_with("MOCK_SLOW please", ask_permission().streaming(true));
    let mut partial = String::new();
    while let Some(ev) = stream.next().await {
        if let Event::TextDelta(t) = &ev
            && t.phase == Phase::Delta
        {
            partial.push_str(&t.text);
            stream.cancel();
        }
    }
    let e = run_error(stream.result().await);
    assert_eq!(e.reason, FailureReason::Cancelled);
    assert!(!partial.is_empty());
    let stdin = String::from_utf8_lossy(&e.result.raw().stdin).into_owned();
    assert!(stdin.contains(r#""subtype":"interrupt""#), "{stdin}");
    assert!(!e.result.checkpoint.as_ref().is_some_and(|c| c.is_valid()));
    assert!(e.result.exit.cancelled);
    // Graceful: the CLI ended the turn with its result and exited by itself.
    let terminal: Value = serde_json::from_str(&e.result.terminal().expect("result").json).unwrap();
    assert_eq!(terminal["subtype"], "error_during_execution", "{terminal}");
    assert_eq!(e.result.exit.signal, None, "{:?}", e.result.exit);
}

/// A subagent the model asks to run in the background (2.1.332 also backgrounds it unasked).
const BACKGROUND_AGENT: &str = r#"TOOL Agent {"description":"bg helper","prompt":"helper work","subagent_type":"general-purpose","run_in_background":true}"#;

/// A subagent running in the background: with stdin closed the CLI holds the turn's result
/// until the subagent is done, runs the task notification as another turn and writes both
/// results before `idle`. Every result, its text and every request's usage belong to the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_subagent_results_all_belong_to_the_run() {
    let c = Claude::new().await;
    let agent = c.agent().build();
    let (events, r) =
        collect(agent.stream_with(BACKGROUND_AGENT, RunOptions::new().streaming(false))).await;
    let r = r.expect("run");
    let results = r
        .transcript()
        .iter()
        .filter(|i| i.kind == ItemKind::Result)
        .count();
    assert_eq!(results, 2, "the turn's result and the notification turn's");
    assert!(r.text.contains("TOOL_RESULT_SEEN"), "{}", r.text);
    // The notification turn's reply comes last (the subagent's own text is scoped to its
    // tool call, not the run's).
    let replies: Vec<&str> = r
        .transcript()
        .iter()
        .filter(|i| i.kind == ItemKind::Assistant && i.parent_tool_call_id.is_none())
        .filter_map(|i| i.text.as_deref())
        .collect();
    let last = replies.last().copied().unwrap_or_default();
    assert!(
        last.starts_with("Hello from mock-anthropic!"),
        "{replies:?}"
    );
    assert!(!last.ends_with("you said: helper work"), "{replies:?}");
    valid_checkpoint(&r);
    // Main turn (2 requests), the subagent (1) and the notification turn (1).
    let requests = c.mock.requests().len() as u64;
    assert_eq!(requests, 4);
    served_usage(&r, requests);
    let states: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Vendor(v) if v.name == "system" => (v.json["subtype"]
                == "session_state_changed")
                .then(|| v.json["state"].as_str().unwrap_or_default().to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(
        states.last().map(String::as_str),
        Some("idle"),
        "{states:?}"
    );
}

/// The same in a resident thread (stdin stays open, so the CLI writes each result as it
/// comes): 2.1.332 stays `running` until the background subagent and its notification turn
/// are done, so the turn ends once, after both results; the next turn starts clean. 2.1.197
/// may say `idle` after the first result while a slow subagent still runs (its known gap,
/// in the driver README); with this instant mock it usually does not, so only 2.1.332 is
/// held to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resident_turn_waits_for_its_background_subagent() {
    let c = Claude::new().await;
    let agent = c
        .agent_with(json!({ "transport": "stream-json" }))
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let thread = agent.thread("background");
    let first = thread.run(BACKGROUND_AGENT).await.expect("first");
    let results = |r: &RunResult| {
        r.transcript()
            .iter()
            .filter(|i| i.kind == ItemKind::Result)
            .count()
    };
    let second = thread.run("second turn").await.expect("second");
    assert!(second.exit.kept_alive);
    if newest_protocol() {
        assert_eq!(results(&first), 2, "{}", first.text);
        assert_eq!(results(&second), 1, "{}", second.text);
        assert!(
            second.text.ends_with("you said: second turn"),
            "{}",
            second.text
        );
    }
    agent.close().await;
}

/// Steering: input added while Claude Code streams a slow reply is another SDK `user` frame;
/// the CLI runs it right after the reply (no `idle` in between), so the run holds both
/// replies and both results, and the mock sees the added input with the first turn's
/// history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_added_while_a_turn_runs_is_answered_in_the_same_run() {
    let c = Claude::new().await;
    let agent = c.agent().build();
    let mut stream = agent.stream_with(
        "MOCK_SLOW please",
        RunOptions::new().steering(true).streaming(true),
    );
    while let Some(event) = stream.next().await {
        if matches!(&event, Event::TextDelta(t) if t.phase == Phase::Delta) {
            stream.steer("and one more thing").await.expect("delivered");
            break;
        }
    }
    let r = stream.result().await.expect("run");
    assert!(
        r.text.ends_with("you said: and one more thing"),
        "{}",
        r.text
    );
    let results = r
        .transcript()
        .iter()
        .filter(|i| i.kind == ItemKind::Result)
        .count();
    assert_eq!(results, 2, "the reply's result and the added input's");
    assert!(
        r.transcript()
            .iter()
            .any(|i| i.kind == ItemKind::User && i.text.as_deref() == Some("and one more thing"))
    );
    let last = c.mock.requests().last().unwrap()["messages"].to_string();
    assert!(
        last.contains("MOCK_SLOW please") && last.contains("and one more thing"),
        "{last}"
    );
    valid_checkpoint(&r);
    let args = r.raw().launch.as_ref().unwrap().args.clone();
    assert!(
        args.windows(2)
            .any(|w| w == ["--input-format", "stream-json"])
    );
}

/// `/clear` starts a new conversation: the CLI moves to a new session, the checkpoint
/// follows it, and the thread's next turn continues there (one user message in context).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_moves_the_thread_to_the_new_session() {
    for transport in ["auto", "stream-json"] {
        let c = Claude::new().await;
        let agent = c
            .agent_with(json!({ "transport": transport }))
            .thread_store(adaptor::store::MemoryStore::new())
            .build();
        let thread = agent.thread("cleared");
        let first = thread.run("first turn").await.expect("first");
        let before = valid_checkpoint(&first);
        let (events, cleared) = collect(thread.stream("/clear")).await;
        let cleared = cleared.expect("clear");
        let after = valid_checkpoint(&cleared);
        assert_ne!(after, before, "{transport}: /clear starts a new session");
        let reset_notice = events
            .iter()
            .any(|e| matches!(e, Event::Notice(n) if n.notice == "conversation-reset"));
        // 2.1.197 switches sessions without saying so.
        assert_eq!(reset_notice, newest_protocol(), "{transport}");
        let third = thread.run("after clear").await.expect("third");
        assert!(
            third.text.ends_with("you said: after clear"),
            "{transport}: {}",
            third.text
        );
        assert_eq!(valid_checkpoint(&third), after, "{transport}");
        // The new session's history: the `/clear` command's output, not the first turn.
        let history = c.mock.requests().last().unwrap()["messages"].to_string();
        assert!(history.contains("after clear"), "{transport}");
        assert!(!history.contains("first turn"), "{transport}: {history}");
        agent.close().await;
    }
}

/// A tool the CLI refuses on its own (no approval mode asks): 2.1.332 says so in a
/// `system/permission_denied` frame, surfaced as a notice; the tool result is an error either
/// way and the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_the_cli_denies_by_itself_is_a_notice() {
    let c = Claude::new().await;
    let agent = c.agent().build();
    let outside = tmp();
    let target = outside.path().join("denied.txt");
    let prompt = format!(
        r#"TOOL Write {{"file_path":"{}","content":"x"}}"#,
        target.display()
    );
    let (events, r) = collect(agent.stream_with(&prompt, RunOptions::new().streaming(false))).await;
    let r = r.expect("run");
    assert!(!target.exists());
    let results = tool_results(&r);
    assert!(results.iter().any(|(_, is_error)| *is_error), "{results:?}");
    let notice = events.iter().find_map(|e| match e {
        Event::Notice(n) if n.notice == "permission-denied" => Some(n.message.clone()),
        _ => None,
    });
    if newest_protocol() {
        let notice = notice.expect("a permission-denied notice");
        assert!(notice.starts_with("Write: "), "{notice}");
    } else {
        assert_eq!(
            notice, None,
            "2.1.197 sends no permission_denied frame here"
        );
    }
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
async fn a_thread_keeps_one_claude_process_across_turns() {
    let c = Claude::new().await;
    let agent = c
        .agent_with(json!({ "transport": "stream-json" }))
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let thread = agent.thread("claude-resident");
    let (events, first) = collect(thread.stream("first turn")).await;
    let first = first.expect("first");
    assert_eq!(
        first.text,
        "Hello from mock-anthropic! user_msgs=1 you said: first turn"
    );
    assert!(first.exit.kept_alive, "the CLI stays for the next turn");
    let session = valid_checkpoint(&first);
    let pid = spawned_pid(&events).expect("spawned");
    let args = first.raw().launch.as_ref().unwrap().args.clone();
    assert!(
        args.windows(2)
            .any(|w| w == ["--input-format", "stream-json"])
    );
    assert!(!args.iter().any(|a| a == "--permission-prompt-tool"));

    let (events, second) = collect(thread.stream("second turn")).await;
    let second = second.expect("second");
    assert_eq!(
        second.text,
        "Hello from mock-anthropic! user_msgs=2 you said: second turn"
    );
    assert_eq!(spawned_pid(&events), None, "no new process");
    assert_eq!(reused_pid(&events), Some(u64::from(pid)));
    assert_eq!(valid_checkpoint(&second), session, "same session");
    assert_eq!(second.thread.as_ref().unwrap().start, ThreadStart::Resumed);
    served_usage(&second, 1);
    same_cost(&first, &second);
    let sent = c.mock.requests();
    assert_eq!(sent.len(), 2);
    assert!(sent[1]["messages"].to_string().contains("first turn"));

    let third = thread.run("third turn").await.expect("third");
    assert_eq!(
        third.text,
        "Hello from mock-anthropic! user_msgs=3 you said: third turn"
    );
    agent.close().await;
    assert!(!pid_alive(pid), "Agent::close stops the resident CLI");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_thread_starts_a_new_session_from_the_parent() {
    let c = Claude::new().await;
    let agent = c
        .agent()
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let parent = agent.thread("claude-parent");
    let first = parent.run("first turn").await.expect("first");
    let parent_session = valid_checkpoint(&first);

    let child = parent.fork("claude-child");
    let forked = child.run("branch turn").await.expect("fork");
    assert_eq!(
        forked.text,
        "Hello from mock-anthropic! user_msgs=2 you said: branch turn"
    );
    let child_session = valid_checkpoint(&forked);
    assert_ne!(child_session, parent_session, "a fork is a new session");
    assert!(matches!(
        forked.thread.as_ref().unwrap().start,
        ThreadStart::Forked { .. }
    ));
    let args = forked.raw().launch.as_ref().unwrap().args.clone();
    assert!(args.windows(2).any(|w| w
        == [
            format!("--resume={parent_session}").as_str(),
            "--fork-session"
        ]));
    assert!(
        c.mock.requests()[1]["messages"]
            .to_string()
            .contains("first turn")
    );

    // The parent continues its own session, without the branch.
    let second = parent.run("parent again").await.expect("parent");
    assert_eq!(valid_checkpoint(&second), parent_session);
    let history = c.mock.requests()[2]["messages"].to_string();
    assert!(
        history.contains("first turn") && !history.contains("branch turn"),
        "{history}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_resume_id_that_is_an_option_never_reaches_claude() {
    // Another component that called itself `claude` stored a "session id" that is a
    // `--settings` option with a command hook. The genuine driver refuses it before launch: a
    // resume-only run fails typed, a continue-or-start run starts a fresh session, and the
    // command never runs.
    let c = Claude::new().await;
    let store: std::sync::Arc<dyn adaptor::store::ThreadStore> =
        std::sync::Arc::new(adaptor::store::MemoryStore::new());
    let agent = c.agent().shared_thread_store(store.clone()).build();
    agent
        .thread("forged")
        .run("first turn")
        .await
        .expect("first");
    let marker = c.ws.path().join("pwned");
    let forged = format!(
        r#"--settings={{"apiKeyHelper":"touch {}"}}"#,
        marker.display()
    );
    rewrite_state(&*store, "forged", |s| s.resume_id = forged.clone()).await;
    let (events, r) = collect(agent.thread("forged").resume_only().stream("again")).await;
    assert!(
        !events.iter().any(|e| matches!(e, Event::ProcessInfo(_))),
        "nothing was spawned"
    );
    match r {
        Err(adaptor::Error::Thread(adaptor::ThreadError::ResumeRejected { message, .. })) => {
            assert!(
                message.contains("not a Claude Code session id"),
                "{message}"
            )
        }
        other => panic!("expected a rejected resume, got {other:?}"),
    }
    let fresh = agent
        .thread("forged")
        .run("again")
        .await
        .expect("a fresh session");
    assert!(matches!(
        fresh.thread.as_ref().unwrap().start,
        ThreadStart::FreshAfterRejection { .. }
    ));
    let args = fresh.raw().launch.as_ref().unwrap().args.join(" ");
    assert!(!args.contains("--settings"), "{args}");
    assert!(!marker.exists(), "the forged hook never ran");
}

/// Drift gate: every stream-json frame the pinned Claude Code sends in the scenarios a driver
/// must handle — partial streaming, a tool call, an API error, the stdin transport with an
/// approval — is one the driver knows (`claude_driver::KNOWN_FRAMES`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_frame_of_the_pinned_cli_is_known() {
    let c = Claude::new().await;
    let auto = RunOptions::new().policy(Policy {
        approvals: ApprovalPolicy {
            permission: DecisionMode::AutoApprove,
            ..ApprovalPolicy::default()
        },
        ..Policy::default()
    });
    let plain = c.agent().build();
    let stdin_transport = c.agent_with(json!({ "transport": "stream-json" })).build();
    let outside = tmp();
    let denied_write = format!(
        r#"TOOL Write {{"file_path":"{}","content":"x"}}"#,
        outside.path().join("denied.txt").display()
    );
    let mut raws = Vec::new();
    for (agent, prompt, options) in [
        (&plain, "THINK hello", RunOptions::new().streaming(true)),
        (&plain, TOUCH, auto.clone()),
        (&plain, "MOCK_ERROR 400", RunOptions::new()),
        (&stdin_transport, TOUCH, auto),
        // Background work, a new conversation, a refusal without asking.
        (&plain, BACKGROUND_AGENT, RunOptions::new()),
        (&plain, "/clear", RunOptions::new()),
        (&plain, &denied_write, RunOptions::new()),
    ] {
        let r = match agent.run_with(prompt, options).await {
            Ok(r) => r,
            Err(Error::Run(e)) => e.result,
            Err(e) => panic!("{prompt}: {e}"),
        };
        raws.push((prompt, r.raw().stdout.clone()));
    }
    let (seen, unknown) = unknown_frames(&raws, claude_driver::KNOWN_FRAMES);
    assert!(seen > 10, "the scenarios produced frames");
    assert!(
        unknown.is_empty(),
        "Claude Code sent frames the driver does not know (map them, or list them in \
         KNOWN_FRAMES as kept vendor events): {unknown:?}"
    );
}

/// Host tools and a declared stdio MCP server: the mock asks for the tool (`TOOL <name>
/// <json>`), the CLI calls the agent's MCP server (or starts the declared one), the handler
/// runs in this process and the mock sees its result in the next request.
mod host_tools {
    use super::*;

    /// The `tool_result` blocks the mock received, as (text, is_error).
    fn seen_results(c: &Claude) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        for body in c.mock.requests() {
            let Some(messages) = body["messages"].as_array() else {
                continue;
            };
            for m in messages {
                for b in m["content"].as_array().into_iter().flatten() {
                    if b["type"] == "tool_result" {
                        let text = match &b["content"] {
                            Value::String(s) => s.clone(),
                            Value::Array(parts) => parts
                                .iter()
                                .filter_map(|p| p["text"].as_str())
                                .collect::<Vec<_>>()
                                .join(""),
                            _ => String::new(),
                        };
                        let entry = (text, b["is_error"] == true);
                        if !out.contains(&entry) {
                            out.push(entry);
                        }
                    }
                }
            }
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_host_tool_runs_in_the_host_and_its_result_reaches_the_model() {
        let c = Claude::new().await;
        let calls = Arc::new(AtomicUsize::new(0));
        let agent = c.agent().tools([lookup_tool(calls.clone())]).build();
        let prompt = r#"TOOL mcp__host__lookup_issue {"number":7}"#;
        let (events, result) = collect(agent.stream_with(prompt, auto_approve(false))).await;
        let r = result.expect("run");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(
            tool_calls(&events)
                .into_iter()
                .map(|(name, _)| name)
                .collect::<Vec<_>>(),
            vec!["mcp__host__lookup_issue".to_owned()]
        );
        let results = tool_outcomes(&r);
        assert_eq!(results.len(), 1, "{results:?}");
        assert!(results[0].1.contains("Issue number 7"), "{results:?}");
        assert!(!results[0].2);
        // The model saw the handler's output.
        let seen = seen_results(&c);
        assert!(
            seen.iter().any(|(t, e)| t.contains("Issue number 7") && !e),
            "{seen:?}"
        );
        assert!(r.text.contains("TOOL_RESULT_SEEN"), "{}", r.text);
        // The token is not on the command line: the MCP config is a private file.
        let launch = r.raw().launch.clone().unwrap();
        assert!(launch.args.iter().any(|a| a == "--mcp-config"));
        assert!(
            !launch.args.iter().any(|a| a.contains("Bearer")),
            "{launch:?}"
        );
        agent.close().await;
    }

    /// `mcp_delivery: stdin`: the servers travel in the `initialize` request on stdin
    /// (`--await-initialize`), no file and nothing on argv; the CLI expands the host's
    /// `${…}` token reference as for `--mcp-config` (2.1.332). 2.1.197 has no such flag: the
    /// run fails before any prompt is sent, saying why.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mcp_servers_delivered_on_stdin_where_the_cli_takes_them() {
        let c = Claude::new().await;
        let calls = Arc::new(AtomicUsize::new(0));
        let agent = c
            .agent_with(json!({ "mcp_delivery": "stdin" }))
            .tools([lookup_tool(calls.clone())])
            .build();
        let prompt = r#"TOOL mcp__host__lookup_issue {"number":7}"#;
        let result = agent.run_with(prompt, auto_approve(false)).await;
        if !newest_protocol() {
            let e = run_error(result);
            assert_eq!(e.reason, FailureReason::AgentError, "{}", e.message);
            assert_eq!(calls.load(Ordering::SeqCst), 0);
            assert!(c.mock.requests().is_empty(), "no prompt reached the model");
            agent.close().await;
            return;
        }
        let r = result.expect("run");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let seen = seen_results(&c);
        assert!(
            seen.iter().any(|(t, e)| t.contains("Issue number 7") && !e),
            "{seen:?}"
        );
        let launch = r.raw().launch.clone().unwrap();
        assert!(launch.args.iter().any(|a| a == "--await-initialize"));
        assert!(
            !launch.args.iter().any(|a| a == "--mcp-config"),
            "{launch:?}"
        );
        let stdin = String::from_utf8_lossy(&r.raw().stdin).into_owned();
        let first: Value = serde_json::from_str(stdin.lines().next().unwrap()).unwrap();
        assert_eq!(first["request"]["subtype"], "initialize");
        assert!(
            first["request"]["mcpServers"]["host"]["url"].is_string(),
            "{first}"
        );
        // The token stays a reference the CLI expands; its value is on no wire we write.
        assert!(stdin.contains("${ADAPTOR_TOOLS_TOKEN_"), "{stdin}");
        agent.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rejection_and_a_panic_reach_the_model_as_tool_errors() {
        let c = Claude::new().await;
        let agent = c.agent().tools([lookup_tool(Arc::default())]).build();
        for (number, expected) in [
            (0, "not_found: there is no issue 0"),
            (13, "internal_error: the tool failed in the host"),
        ] {
            let prompt = format!(r#"TOOL mcp__host__lookup_issue {{"number":{number}}}"#);
            let r = agent
                .run_with(prompt, auto_approve(false))
                .await
                .expect("the run continues after a tool error");
            let results = tool_outcomes(&r);
            assert_eq!(results.len(), 1, "{results:?}");
            assert!(results[0].2, "{results:?}");
            assert!(results[0].1.contains(expected), "{results:?}");
            assert!(!results[0].1.contains("secret"), "{results:?}");
            assert!(r.text.contains("TOOL_RESULT_SEEN"), "{}", r.text);
        }
        let seen = seen_results(&c);
        assert!(
            seen.iter()
                .any(|(t, e)| *e && t.contains("not_found: there is no issue 0")),
            "{seen:?}"
        );
        assert!(
            seen.iter()
                .any(|(t, e)| *e && t.contains("internal_error") && !t.contains("secret")),
            "{seen:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn host_tool_permissions_follow_the_policy() {
        let c = Claude::new().await;
        let asked = Arc::new(AtomicUsize::new(0));
        let calls = Arc::new(AtomicUsize::new(0));
        let ask = RunOptions::new().streaming(false).policy(Policy {
            approvals: ApprovalPolicy {
                permission: DecisionMode::Ask,
                ..ApprovalPolicy::default()
            },
            ..Policy::default()
        });
        for approve in [true, false] {
            let seen = asked.clone();
            let agent = c
                .agent()
                .tools([lookup_tool(calls.clone())])
                .on_approval(move |req: ApprovalRequest| {
                    seen.fetch_add(1, Ordering::SeqCst);
                    async move {
                        assert_eq!(req.kind, ApprovalKind::Permission);
                        assert_eq!(req.tool_name.as_deref(), Some("mcp__host__lookup_issue"));
                        if approve {
                            req.approve().unwrap();
                        } else {
                            req.deny("not today").unwrap();
                        }
                    }
                })
                .build();
            let r = agent
                .run_with(r#"TOOL mcp__host__lookup_issue {"number":7}"#, ask.clone())
                .await;
            if approve {
                let r = r.expect("approved run");
                assert!(tool_outcomes(&r)[0].1.contains("Issue number 7"));
                assert_eq!(calls.load(Ordering::SeqCst), 1);
            } else {
                let e = run_error(r);
                assert_eq!(e.reason, adaptor::FailureReason::ApprovalDenied, "{e}");
                assert_eq!(
                    calls.load(Ordering::SeqCst),
                    1,
                    "a denied tool must not run"
                );
            }
        }
        assert_eq!(asked.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_declared_stdio_server_is_started_by_claude_and_called() {
        let c = Claude::new().await;
        let log = c.ws.path().join("stamper.log");
        let agent = c.agent().mcp([stdio_stamper(&log)]).build();
        let r = agent
            .run_with(
                r#"TOOL mcp__stamper__stamp {"text":"hi"}"#,
                auto_approve(false),
            )
            .await
            .expect("run");
        let results = tool_outcomes(&r);
        assert_eq!(
            results,
            vec![(
                "mcp__stamper__stamp".to_owned(),
                "STAMPED:hi:secret-len=12".to_owned(),
                false
            )]
        );
        assert!(
            seen_results(&c)
                .iter()
                .any(|(t, _)| t == "STAMPED:hi:secret-len=12")
        );
        assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 1);
        // The server's variable is in the private config file, never on argv.
        let launch = r.raw().launch.clone().unwrap();
        assert!(!format!("{launch:?}").contains("s3cr3t-value"));
    }
}

/// Skills (issue 19): the host's bundle goes in as `--plugin-dir`; the model's request lists the skill as `adaptor:<key>` with its description,
/// and the init event names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_reach_the_model_through_the_plugin_bundle() {
    let c = Claude::new().await;
    let cache = tmp();
    let md = PROBE_SKILL_MD;
    let agent = c
        .agent()
        .skill_cache(cache.path())
        .skills([adaptor::Skill::inline("probe-skill", md)])
        .build();
    let r = agent.run("hello there").await.expect("run with a skill");
    assert_eq!(
        r.text,
        "Hello from mock-anthropic! user_msgs=1 you said: hello there"
    );
    let sent = c.mock.requests();
    assert_eq!(sent.len(), 1);
    let body = sent[0].to_string();
    assert!(
        body.contains("adaptor:probe-skill: Use when the user says PROBE-7"),
        "the skill is listed for the model: {}",
        &body[..body.len().min(4000)]
    );
    assert!(
        !body.contains("Reply with PROBE-OK"),
        "only name and description are sent"
    );
    let init = &r.transcript()[0];
    assert!(
        init.data.as_ref().unwrap()["skills"]
            .to_string()
            .contains("probe-skill"),
        "{:?}",
        init.data
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_with_dedicated_profiles_keep_their_transcripts_apart() {
    let c = Claude::new().await;
    let profiles = tmp();
    // The user's own profile (the default layout: `~/.claude` and `~/.claude.json`).
    let native = c.home.path().join(".claude");
    std::fs::create_dir_all(&native).unwrap();
    std::fs::write(native.join("settings.json"), r#"{"cleanupPeriodDays":30}"#).unwrap();
    std::fs::write(c.home.path().join(".claude.json"), r#"{"numStartups":1}"#).unwrap();
    let (dir_a, dir_b) = (profiles.path().join("a"), profiles.path().join("b"));
    let a = c
        .agent()
        .profile(
            adaptor::Profile::clone_native(&dir_a)
                .link_auth()
                .copy_settings()
                .copy_mcp(),
        )
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let b = c
        .agent()
        .profile(adaptor::Profile::dedicated(&dir_b))
        .build();
    let thread_a = a.thread("a");
    let (ra, rb) = tokio::join!(thread_a.run("hello from a"), b.run("hello from b"));
    let (ra, rb) = (ra.expect("agent a"), rb.expect("agent b"));
    let (id_a, id_b) = (ra.session_id().unwrap(), rb.session_id().unwrap());
    // Each CLI's transcript is in its own profile, none in the other's or the user's.
    let transcripts = |dir: &Path, id: &str| files_containing(&dir.join("projects"), id);
    assert_eq!(
        transcripts(&dir_a, id_a).len(),
        1,
        "{:?}",
        transcripts(&dir_a, "")
    );
    assert_eq!(
        transcripts(&dir_b, id_b).len(),
        1,
        "{:?}",
        transcripts(&dir_b, "")
    );
    assert!(transcripts(&dir_a, id_b).is_empty() && transcripts(&dir_b, id_a).is_empty());
    assert!(files_containing(&native.join("projects"), ".jsonl").is_empty());
    // What the clone carried: copies of the settings and the global state, no login file.
    assert!(dir_a.join("settings.json").is_file());
    assert!(dir_a.join(".claude.json").is_file());
    assert!(!dir_a.join(".credentials.json").exists());
    assert_eq!(c.mock.requests().len(), 2);
    // The second turn resumes from the profile's transcript.
    let second = a.thread("a").run("and again").await.expect("second turn");
    assert_eq!(second.session_id(), Some(id_a));
    assert!(second.text.contains("user_msgs=2"), "{}", second.text);
    // The host points the CLI at the profile, and its credential store at the user's.
    let plan = a.dry_run("x").await.unwrap();
    let env = |k: &str| {
        plan.env
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        env("CLAUDE_CONFIG_DIR"),
        Some(dir_a.canonicalize().unwrap().display().to_string())
    );
    assert_eq!(
        env("CLAUDE_SECURESTORAGE_CONFIG_DIR"),
        Some(native.display().to_string())
    );
}

/// `link_auth`: Claude Code's login is never linked (it replaces `.credentials.json` by
/// rename on every refresh); the host points its credential store at the user's profile
/// (`CLAUDE_SECURESTORAGE_CONFIG_DIR`), so a dedicated profile runs under the user's login.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dedicated_profile_shares_the_users_login_through_the_credential_store() {
    let c = Claude::new().await;
    let native = c.home.path().join(".claude");
    std::fs::create_dir_all(&native).unwrap();
    let token = "sk-ant-oat01-adaptor-probe-token";
    let far = 4_102_444_800_000u64; // 2100-01-01, in ms: no refresh is due
    std::fs::write(
        native.join(".credentials.json"),
        json!({"claudeAiOauth": {
            "accessToken": token,
            "refreshToken": "sk-ant-ort01-adaptor-probe-refresh",
            "expiresAt": far,
            "scopes": ["user:inference", "user:profile"],
            "subscriptionType": "max"
        }})
        .to_string(),
    )
    .unwrap();
    let profiles = tmp();
    // The login comes from the credentials alone: no API key in the environment.
    let agent = |profile: adaptor::Profile| {
        let claude = claude_path().unwrap();
        let driver = adaptor::Driver::from_file(driver_path("claude"))
            .unwrap()
            .with_config(json!({ "command": claude.display().to_string() }))
            .unwrap();
        let mut builder = Agent::builder(driver)
            .workspace(c.ws())
            .grace_period(Duration::from_millis(500))
            .timeout(Duration::from_secs(120))
            .profile(profile);
        for (k, v) in claude_env(c.home.path(), &c.mock.base_url()) {
            if k != "ANTHROPIC_API_KEY" {
                builder = builder.env(k, v);
            }
        }
        builder.build()
    };
    let shared = agent(
        adaptor::Profile::clone_native(profiles.path().join("shared"))
            .link_auth()
            .into(),
    );
    let r = shared
        .run("hello")
        .await
        .expect("run under the user's login");
    assert!(r.text.contains("you said: hello"), "{}", r.text);
    let sent: Vec<_> = c
        .mock
        .all_requests()
        .into_iter()
        .filter(|q| q.path == "/v1/messages")
        .collect();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].header("authorization"),
        Some(format!("Bearer {token}").as_str()),
        "{:?}",
        sent[0].headers
    );
    assert!(!profiles.path().join("shared/.credentials.json").exists());
    // Without link_auth the dedicated profile has no login: the CLI says so, and nothing
    // reaches the model.
    let alone = agent(adaptor::Profile::dedicated(profiles.path().join("alone")));
    let r = alone.run("hello").await;
    assert!(
        r.is_err() || !r.as_ref().unwrap().text.contains("you said"),
        "{r:?}"
    );
    assert_eq!(
        c.mock
            .all_requests()
            .iter()
            .filter(|q| q.path == "/v1/messages")
            .count(),
        1
    );
}

/// Prewarming on the real CLI: with stream-json input the started CLI waits for its first
/// frame as long as needed (here past the 3 s that plain `-p` waits for stdin), and the run
/// on it is an ordinary run; with the plain-text transport the CLI gives up after 3 s and the
/// pool says so and stops refilling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prewarmed_cli_waits_for_its_first_input_with_stream_json() {
    let c = Claude::new().await;
    let agent = c
        .agent_with(json!({"transport": "stream-json"}))
        .prewarm(1)
        .build();
    assert_eq!(agent.warm_up().await.unwrap(), 1);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        c.mock.requests().is_empty(),
        "a warm CLI asks the model nothing"
    );
    let (events, result) = collect(agent.stream("hello there")).await;
    let r = result.expect("run succeeds");
    let taken = notice(&events, "process.prewarmed").expect("the run took the warm CLI");
    // Claude Code's stream-json input is the prompt's user message: nothing is written to
    // the warm CLI before a run takes it.
    assert_eq!(taken.data.as_ref().unwrap()["input_written"], 0);
    assert_eq!(
        r.text,
        "Hello from mock-anthropic! user_msgs=1 you said: hello there"
    );
    served_usage(&r, 1);
    valid_checkpoint(&r);
    assert_eq!(c.mock.requests().len(), 1);
    agent.close().await;

    let plain = c.agent().prewarm(1).build();
    assert_eq!(plain.warm_up().await.unwrap(), 1);
    // Its 3 s without stdin count from when the CLI is up, which takes seconds on a loaded
    // machine: wait well past them.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (events, result) = collect(plain.stream("hello there")).await;
    result.expect("the run starts its own CLI");
    assert!(notice(&events, "process.prewarmed").is_none());
    let failed = notice(&events, "process.prewarm_failed").expect("why prewarming stopped");
    assert!(failed.message.contains("stream-json"), "{}", failed.message);
    plain.close().await;
}
