//! The Codex driver end to end: `codex.wasm` in the host, running the **real** Codex CLI
//! (0.171.0, installed by `./x.sh test`) against the project's mock Responses API on
//! 127.0.0.1, over both transports (`exec --json` when not streaming, the JSON-RPC
//! app-server when streaming or asking). Each scenario asserts exact text, item contents, the
//! usage the mock serves, the thread id and the checkpoint's validity.

use std::path::Path;
use std::time::Duration;

use adaptor::store::SqliteStore;
use adaptor::{
    Agent, ApprovalKind, ApprovalPolicy, DecisionMode, Error, Event, FailureReason, ItemKind,
    Phase, Policy, RunOptions, RunResult, Sandbox, Schema, ThreadStart,
};
use adaptor_integration_tests::mock_openai::*;
use adaptor_integration_tests::*;
use futures::StreamExt;
use serde_json::{Value, json};

/// The mock, a CODEX_HOME, a HOME and a workspace.
struct Codex {
    mock: MockOpenAi,
    codex_home: tempfile::TempDir,
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
}

impl Codex {
    async fn new() -> Self {
        let c = Self {
            mock: MockOpenAi::start().await,
            codex_home: tmp(),
            home: tmp(),
            ws: tmp(),
        };
        codex_home(c.codex_home.path(), &c.mock.base_url(), c.ws.path()).expect("config.toml");
        c
    }

    fn agent(&self) -> adaptor::AgentBuilder {
        let codex = codex_path()
            .filter(|p| p.exists())
            .unwrap_or_else(|| panic!("the Codex CLI is missing: {CODEX_INSTALL_HINT}"));
        let driver = adaptor::Driver::from_file(driver_path("codex"))
            .expect("codex.wasm (./x.sh build-drivers)")
            .with_config(json!({ "command": codex.display().to_string() }))
            .expect("config");
        let mut builder = Agent::builder(driver)
            .workspace(self.ws.path())
            .grace_period(Duration::from_millis(500))
            .timeout(Duration::from_secs(120));
        for (k, v) in codex_env(self.codex_home.path(), self.home.path()) {
            builder = builder.env(k, v);
        }
        builder
    }

    fn ws(&self) -> &Path {
        self.ws.path()
    }
}

/// Both transports: exec (not streaming) and the app-server (streaming).
const TRANSPORTS: [(&str, bool); 2] = [("exec", false), ("app-server", true)];

fn options(streaming: bool) -> RunOptions {
    RunOptions::new().streaming(streaming)
}

fn transport_of(r: &RunResult) -> String {
    r.metadata.get("transport").cloned().unwrap_or_default()
}

fn valid_checkpoint(r: &RunResult) -> String {
    let cp = r.checkpoint.as_ref().expect("checkpoint");
    assert!(
        cp.is_valid(),
        "checkpoint should be valid ({})",
        transport_of(r)
    );
    assert_eq!(cp.codec(), "codex/thread/v1");
    cp.resume_id().to_owned()
}

fn tool_items(r: &RunResult) -> Vec<(String, Value, String, bool)> {
    let calls: Vec<_> = r
        .transcript()
        .iter()
        .filter(|i| i.kind == ItemKind::ToolCall)
        .cloned()
        .collect();
    calls
        .into_iter()
        .map(|c| {
            let result = r
                .transcript()
                .iter()
                .find(|i| i.kind == ItemKind::ToolResult && i.tool_call_id == c.tool_call_id)
                .cloned()
                .expect("result for every call");
            (
                c.tool_name.clone().unwrap_or_default(),
                c.input.clone().unwrap_or(Value::Null),
                result.text.clone().unwrap_or_default(),
                result.is_error,
            )
        })
        .collect()
}

fn command_of(args: &Value) -> String {
    match &args["command"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_text_on_both_transports() {
    for (name, streaming) in TRANSPORTS {
        let c = Codex::new().await;
        let agent = c.agent().build();
        let (events, result) = collect(agent.stream_with("hello there", options(streaming))).await;
        let r = result.unwrap_or_else(|e| panic!("{name}: {e}"));
        record_cassette(&format!("plain-{name}"), &r, "hello there");
        assert_eq!(transport_of(&r), name);
        assert_eq!(
            r.text, "Hello from mock-openai! user_msgs=1 you said: hello there",
            "{name}"
        );
        let u = r.usage.as_ref().expect("usage");
        assert_eq!(u.input_tokens, Some(INPUT_TOKENS), "{name}");
        assert_eq!(u.cache_read_tokens, Some(CACHED_TOKENS), "{name}");
        assert_eq!(u.output_tokens, Some(OUTPUT_TOKENS), "{name}");
        let thread = valid_checkpoint(&r);
        assert_eq!(r.session_id(), Some(thread.as_str()));
        if streaming {
            let deltas = events
                .iter()
                .filter(|e| matches!(e, Event::TextDelta(t) if t.phase == Phase::Delta))
                .count();
            assert!(deltas >= 2, "token deltas over the app-server");
        }
        assert_eq!(c.mock.requests().len(), 1, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_commands_succeeding_and_failing() {
    for (name, streaming) in TRANSPORTS {
        let c = Codex::new().await;
        std::fs::write(c.ws().join("notes.txt"), "alpha\n").unwrap();
        let agent = c.agent().build();
        let r = agent
            .run_with(
                r#"TOOL exec_command {"cmd":"echo hi && cat notes.txt"}"#,
                options(streaming).policy(Policy {
                    sandbox: Sandbox::WorkspaceWrite,
                    approvals: ApprovalPolicy {
                        permission: DecisionMode::AutoApprove,
                        ..ApprovalPolicy::default()
                    },
                    ..Policy::default()
                }),
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        record_cassette(
            &format!("shell-{name}"),
            &r,
            r#"TOOL exec_command {"cmd":"echo hi && cat notes.txt"}"#,
        );
        let tools = tool_items(&r);
        assert_eq!(tools.len(), 1, "{name}: {tools:?}");
        let (tool, args, output, is_error) = &tools[0];
        assert_eq!(tool, "shell");
        assert!(
            command_of(args).contains("echo hi && cat notes.txt"),
            "{args}"
        );
        assert_eq!(output.trim(), "hi\nalpha", "{name}");
        assert!(!is_error);
        assert!(r.text.contains("TOOL_RESULT_SEEN"), "{name}: {}", r.text);
        valid_checkpoint(&r);

        let r = agent
            .run_with(
                r#"TOOL exec_command {"cmd":"ls /nonexistent_dir"}"#,
                options(streaming),
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let tools = tool_items(&r);
        let (_, _, output, is_error) = &tools[0];
        assert!(is_error, "{name}: a failing command is an error result");
        assert!(output.contains("No such file or directory"), "{output}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_patch_changes_a_file() {
    for (name, streaming) in TRANSPORTS {
        let c = Codex::new().await;
        let agent = c.agent().build();
        let r = agent
            .run_with(
                r#"TOOL apply_patch {"input":"*** Begin Patch\n*** Add File: hello.txt\n+hello from codex\n*** End Patch\n"}"#,
                options(streaming).policy(Policy {
                    sandbox: Sandbox::WorkspaceWrite,
                    approvals: ApprovalPolicy {
                        permission: DecisionMode::AutoApprove,
                        ..ApprovalPolicy::default()
                    },
                    ..Policy::default()
                }),
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let tools = tool_items(&r);
        let (tool, args, output, is_error) = &tools[0];
        assert_eq!(tool, "apply_patch");
        assert!(args["changes"].to_string().contains("hello.txt"), "{args}");
        assert!(output.contains("hello.txt"), "{output}");
        assert!(!is_error);
        assert_eq!(
            std::fs::read_to_string(c.ws().join("hello.txt")).unwrap(),
            "hello from codex\n",
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_continues_the_thread() {
    for (name, streaming) in TRANSPORTS {
        let c = Codex::new().await;
        let agent = c.agent().build();
        let first = agent
            .run_with("first turn", options(streaming))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let thread = valid_checkpoint(&first);
        let second = agent
            .run_with(
                "second turn",
                options(streaming).resume(first.checkpoint.clone().unwrap()),
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            second.text, "Hello from mock-openai! user_msgs=2 you said: second turn",
            "{name}"
        );
        assert_eq!(valid_checkpoint(&second), thread, "{name}: same thread");
        let u = second.usage.as_ref().expect("usage");
        assert_eq!(
            (u.input_tokens, u.cache_read_tokens, u.output_tokens),
            (Some(INPUT_TOKENS), Some(CACHED_TOKENS), Some(OUTPUT_TOKENS)),
            "{name}: this run's usage, not the thread's total"
        );
        let last = c.mock.requests().last().unwrap().to_string();
        assert!(last.contains("first turn"), "{name}: history carried");

        // A thread Codex no longer knows (its rollouts are gone) is a typed resume rejection.
        std::fs::remove_dir_all(c.codex_home.path().join("sessions")).expect("codex sessions");
        let e = run_error(
            agent
                .run_with(
                    "third",
                    options(streaming).resume(second.checkpoint.clone().unwrap()),
                )
                .await,
        );
        assert_eq!(
            e.reason,
            FailureReason::ResumeRejected,
            "{name}: {}",
            e.message
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_in_a_sqlite_store_resumes_the_thread_on_both_transports() {
    for (name, streaming) in TRANSPORTS {
        let c = Codex::new().await;
        let db = tmp();
        let store = SqliteStore::open(db.path().join("threads.sqlite3")).expect("sqlite store");
        let agent = c.agent().thread_store(store).build();
        let thread = agent.thread("codex-e2e");

        let first = thread
            .run_with("first turn", options(streaming))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(transport_of(&first), name);
        assert_eq!(
            first.text, "Hello from mock-openai! user_msgs=1 you said: first turn",
            "{name}"
        );
        let thread_id = valid_checkpoint(&first);
        assert_eq!(first.session_id(), Some(thread_id.as_str()), "{name}");
        let info = first.thread.clone().expect("thread info");
        assert_eq!(info.key, "codex-e2e");
        assert_eq!(info.start, ThreadStart::New, "{name}");
        assert_eq!(
            thread.session_state().await.unwrap().as_ref(),
            first.checkpoint.as_ref().map(adaptor::Checkpoint::state),
            "{name}: the first checkpoint is stored"
        );

        let second = thread
            .run_with("second turn", options(streaming))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(transport_of(&second), name);
        assert_eq!(
            second.text, "Hello from mock-openai! user_msgs=2 you said: second turn",
            "{name}"
        );
        let info2 = second.thread.clone().expect("thread info");
        assert_eq!(info2.start, ThreadStart::Resumed, "{name}");
        assert_eq!(info2.record_id, info.record_id, "{name}: same record");
        assert_eq!(valid_checkpoint(&second), thread_id, "{name}: same thread");

        let sent = c.mock.requests();
        assert_eq!(sent.len(), 2, "{name}");
        let input = sent[1]["input"].to_string();
        assert!(
            input.contains("first turn"),
            "{name}: the second request's input carries the first turn: {input}"
        );
        let record = thread.record().await.unwrap().expect("active record");
        assert_eq!(record.id, info.record_id, "{name}");
        assert_eq!(record.turns, 2, "{name}");
        assert_eq!(record.driver, "codex");
        assert_eq!(record.state.resume_id, thread_id, "{name}");
    }
}

#[test]
fn thread_continues_across_two_cli_processes_on_both_transports() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let codex = codex_path()
        .filter(|p| p.exists())
        .unwrap_or_else(|| panic!("the Codex CLI is missing: {CODEX_INSTALL_HINT}"));
    for (name, _) in TRANSPORTS {
        let c = runtime.block_on(Codex::new());
        let db = tmp();
        let store = db.path().join("threads.sqlite3").display().to_string();
        // The CLI always streams (app-server by default): pin each transport in the config.
        let config =
            json!({ "command": codex.display().to_string(), "transport": name }).to_string();
        let env: Vec<String> = codex_env(c.codex_home.path(), c.home.path())
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let run = |prompt: &str| {
            let mut cmd = adaptor_cli();
            cmd.args(["run", "--thread", "codex-cli", "--store", &store])
                .args(["--driver", "codex", "--config", &config, "--cwd"])
                .arg(c.ws());
            for pair in &env {
                cmd.args(["--env", pair]);
            }
            let out = cmd.args(["--json", prompt]).output().expect("adaptor runs");
            let lines = json_lines(&out);
            let result = lines.last().expect("a result line").clone();
            assert_eq!(result["kind"], "result", "{name}: {result}");
            (spawned_command(&lines), result)
        };

        let (launched, first) = run("first turn");
        let exec_line = format!(
            "{} exec --json --skip-git-repo-check --sandbox danger-full-access",
            codex.display()
        );
        let app_server_line = format!("{} app-server", codex.display());
        if name == "exec" {
            assert_eq!(launched, format!("{exec_line} -"));
        } else {
            assert_eq!(launched, app_server_line);
        }
        assert_eq!(
            first["text"], "Hello from mock-openai! user_msgs=1 you said: first turn",
            "{name}"
        );
        assert_eq!(first["thread"]["key"], "codex-cli");
        assert_eq!(first["thread"]["start"]["kind"], "new", "{name}: {first}");
        assert_eq!(first["checkpoint"]["valid"], true, "{name}");
        assert_eq!(first["checkpoint"]["codec"], "codex/thread/v1");
        let record_id = first["thread"]["record_id"].as_str().expect("record id");
        let thread_id = first["checkpoint"]["resume_id"]
            .as_str()
            .expect("thread id");

        let (launched, second) = run("second turn");
        if name == "exec" {
            assert_eq!(launched, format!("{exec_line} resume {thread_id} -"));
        } else {
            assert_eq!(launched, app_server_line);
        }
        assert_eq!(
            second["text"], "Hello from mock-openai! user_msgs=2 you said: second turn",
            "{name}"
        );
        assert_eq!(
            second["thread"]["start"]["kind"], "resumed",
            "{name}: {second}"
        );
        assert_eq!(second["thread"]["record_id"], record_id, "{name}");
        assert_eq!(second["checkpoint"]["valid"], true, "{name}");
        assert_eq!(
            second["checkpoint"]["resume_id"], thread_id,
            "{name}: same thread"
        );
        let sent = c.mock.requests();
        assert_eq!(sent.len(), 2, "{name}");
        let input = sent[1]["input"].to_string();
        assert!(
            input.contains("first turn"),
            "{name}: the second process's request carries the first turn: {input}"
        );

        let out = adaptor_cli()
            .args(["threads", "show", "codex-cli", "--store", &store, "--json"])
            .output()
            .expect("adaptor runs");
        let records = json_lines(&out);
        assert_eq!(records.len(), 1, "{name}: {records:?}");
        let record = &records[0];
        assert_eq!(record["id"], record_id, "{name}");
        assert_eq!(record["key"], "codex-cli");
        assert_eq!(record["status"], "active", "{name}");
        assert_eq!(record["driver"], "codex");
        assert_eq!(record["turns"], 2, "{name}");
        assert_eq!(record["state"]["resume_id"], thread_id, "{name}");
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Person {
    name: String,
    age: i64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_output_schema() {
    for (name, streaming) in TRANSPORTS {
        let c = Codex::new().await;
        let agent = c.agent().build();
        let r = agent
            .run_with(
                "describe a person",
                options(streaming).schema(Schema::of::<Person>().unwrap()),
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let s = r.structured.as_ref().unwrap();
        assert_eq!(s.mechanism, adaptor::Mechanism::Native);
        assert!(s.valid, "{name}: {:?}", s.errors);
        assert_eq!(s.value, Some(json!({"name": "mock", "age": 1})), "{name}");
        let sent = c.mock.requests();
        assert_eq!(sent[0]["text"]["format"]["type"], "json_schema", "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_server_errors_fail_with_the_message() {
    for (name, streaming) in TRANSPORTS {
        let c = Codex::new().await;
        let agent = c.agent().build();
        for status in [400, 429, 500] {
            let e = run_error(
                agent
                    .run_with(format!("MOCK_ERROR {status}"), options(streaming))
                    .await,
            );
            if status == 500 {
                record_cassette(&format!("error-500-{name}"), &e.result, "MOCK_ERROR 500");
            }
            assert_eq!(e.reason, FailureReason::AgentError, "{name} {status}");
            assert!(!e.message.is_empty());
            assert!(
                !e.result.checkpoint.as_ref().is_some_and(|c| c.is_valid()),
                "{name} {status}: no valid checkpoint"
            );
        }
    }
}

fn ask() -> RunOptions {
    options(true).policy(Policy {
        approvals: ApprovalPolicy {
            permission: DecisionMode::Ask,
            ..ApprovalPolicy::default()
        },
        ..Policy::default()
    })
}

const TOUCH: &str = r#"TOOL exec_command {"cmd":"touch approved.txt"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_through_the_app_server() {
    let c = Codex::new().await;
    let agent = c.agent().build();
    let mut stream = agent.stream_with(TOUCH, ask());
    let mut asked = 0;
    while let Some(ev) = stream.next().await {
        if let Event::ApprovalRequest(req) = ev {
            asked += 1;
            assert_eq!(req.kind, ApprovalKind::Permission);
            assert_eq!(req.tool_name.as_deref(), Some("shell"));
            assert!(req.title.contains("touch approved.txt"), "{}", req.title);
            req.approve().unwrap();
        }
    }
    let r = stream.result().await.expect("approved");
    record_cassette("approval-accepted-app-server", &r, TOUCH);
    assert_eq!(asked, 1);
    assert!(c.ws().join("approved.txt").exists());
    valid_checkpoint(&r);

    let mut stream = agent.stream_with(r#"TOOL exec_command {"cmd":"touch denied.txt"}"#, ask());
    while let Some(ev) = stream.next().await {
        if let Event::ApprovalRequest(req) = ev {
            req.deny("no files today").unwrap();
        }
    }
    let e = match stream.result().await {
        Err(Error::Run(e)) => e,
        other => panic!("{other:?}"),
    };
    assert_eq!(e.reason, FailureReason::ApprovalDenied, "{}", e.message);
    assert!(!c.ws().join("denied.txt").exists(), "the command never ran");
    let stdin = String::from_utf8_lossy(&e.result.raw().stdin).into_owned();
    assert!(stdin.contains(r#""decision":"cancel""#), "{stdin}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_interrupts_a_streaming_turn() {
    let c = Codex::new().await;
    let agent = c.agent().build();
    let mut stream = agent.stream_with("MOCK_SLOW please", options(true));
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
    assert!(!e.result.checkpoint.as_ref().is_some_and(|c| c.is_valid()));
    // Graceful: the driver sent `turn/interrupt`, the turn completed as interrupted and the
    // app-server exited by itself when stdin closed — no signal was needed.
    let stdin = String::from_utf8_lossy(&e.result.raw().stdin).into_owned();
    assert!(stdin.contains(r#""method":"turn/interrupt""#), "{stdin}");
    let terminal: Value = serde_json::from_str(&e.result.terminal().unwrap().json).unwrap();
    assert_eq!(terminal["params"]["turn"]["status"], "interrupted");
    assert_eq!(e.result.exit.signal, None, "{:?}", e.result.exit);
    assert!(e.result.exit.cancelled);
}

/// Steering on the real app-server: input added while the model streams a slow reply is a
/// `turn/steer` for the running turn; Codex takes it into the same turn (a second model
/// request carrying it, with the first reply in its history), and the run holds both replies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_added_while_a_turn_runs_is_steered_into_it() {
    let c = Codex::new().await;
    let agent = c.agent().build();
    let mut stream = agent.stream_with(
        "MOCK_SLOW please",
        RunOptions::new().steering(true).streaming(true),
    );
    while let Some(ev) = stream.next().await {
        if matches!(&ev, Event::TextDelta(t) if t.phase == Phase::Delta) {
            stream.steer("and one more thing").await.expect("delivered");
            break;
        }
    }
    let r = stream.result().await.expect("run");
    assert_eq!(transport_of(&r), "app-server");
    let stdin = String::from_utf8_lossy(&r.raw().stdin).into_owned();
    assert!(stdin.contains(r#""method":"turn/steer""#), "{stdin}");
    assert!(
        r.transcript()
            .iter()
            .any(|i| i.kind == ItemKind::User && i.text.as_deref() == Some("and one more thing")),
        "the app-server took the input"
    );
    let sent = c.mock.requests();
    let last = sent.last().unwrap().to_string();
    assert!(last.contains("and one more thing"), "{last}");
    assert!(r.text.contains("and one more thing"), "{}", r.text);
    valid_checkpoint(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_killed_mid_turn_keeps_the_partial_text() {
    let c = Codex::new().await;
    let agent = c.agent().build();
    let mut stream = agent.stream_with("MOCK_SLOW please", options(true));
    let mut partial = String::new();
    let mut pid = None;
    while let Some(ev) = stream.next().await {
        match ev {
            Event::ProcessInfo(p) if p.process == adaptor::ProcessInfoKind::Spawn => pid = p.pid,
            Event::TextDelta(t) if t.phase == Phase::Delta => {
                partial.push_str(&t.text);
                if let Some(pid) = pid.take() {
                    // The CLI dies mid-turn (not a cancel): its whole process group is killed
                    // from outside.
                    unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
                }
            }
            _ => {}
        }
    }
    let e = run_error(stream.result().await);
    assert_eq!(e.reason, FailureReason::AgentError, "{}", e.message);
    assert!(
        e.message.contains("before the turn completed"),
        "{}",
        e.message
    );
    assert!(!partial.is_empty());
    assert!(!e.result.checkpoint.as_ref().is_some_and(|c| c.is_valid()));
    assert!(e.result.exit.signal.is_some(), "{:?}", e.result.exit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reports_the_installed_version_and_warns_outside_the_range() {
    let c = Codex::new().await;
    let report = c.agent().build().inspect().await.expect("inspect");
    assert_eq!(report.environment.cli_version.as_deref(), Some("0.171.0"));
    assert_eq!(report.environment.status, adaptor::CheckLevel::Pass);

    let dir = tmp();
    let fake = fake_cli(dir.path(), "codex", "codex-cli 0.180.2");
    let driver = adaptor::Driver::from_file(driver_path("codex"))
        .unwrap()
        .with_config(json!({ "command": fake.display().to_string() }))
        .unwrap();
    let report = Agent::builder(driver)
        .workspace(c.ws())
        .build()
        .inspect()
        .await
        .unwrap();
    assert_eq!(report.environment.cli_version.as_deref(), Some("0.180.2"));
    assert_eq!(report.environment.status, adaptor::CheckLevel::Warn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_keeps_one_app_server_across_turns() {
    let c = Codex::new().await;
    let agent = c
        .agent()
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let thread = agent.thread("codex-resident");
    let (events, first) = collect(thread.stream_with("first turn", options(true))).await;
    let first = first.expect("first");
    assert_eq!(transport_of(&first), "app-server");
    assert_eq!(
        first.text,
        "Hello from mock-openai! user_msgs=1 you said: first turn"
    );
    assert!(
        first.exit.kept_alive,
        "the app-server stays for the next turn"
    );
    let thread_id = valid_checkpoint(&first);
    let pid = events
        .iter()
        .find_map(|e| match e {
            Event::ProcessInfo(p) if p.process == adaptor::ProcessInfoKind::Spawn => p.pid,
            _ => None,
        })
        .expect("spawned");

    let (events, second) = collect(thread.stream_with("second turn", options(true))).await;
    let second = second.expect("second");
    assert_eq!(
        second.text,
        "Hello from mock-openai! user_msgs=2 you said: second turn"
    );
    assert!(
        !events.iter().any(
            |e| matches!(e, Event::ProcessInfo(p) if p.process == adaptor::ProcessInfoKind::Spawn)
        ),
        "no new process"
    );
    assert!(events.iter().any(
        |e| matches!(e, Event::Notice(n) if n.notice == "process.reused"
        && n.data.as_ref().is_some_and(|d| d["pid"] == pid))
    ));
    assert_eq!(valid_checkpoint(&second), thread_id, "same thread");
    // Usage is this turn's own (the thread total minus the first turn's).
    let u = second.usage.as_ref().expect("usage");
    assert_eq!(u.input_tokens, Some(INPUT_TOKENS));
    assert_eq!(u.output_tokens, Some(OUTPUT_TOKENS));
    let sent = c.mock.requests();
    assert_eq!(sent.len(), 2);
    assert!(sent[1]["input"].to_string().contains("first turn"));
    agent.close().await;
    assert!(
        !pid_alive(pid),
        "Agent::close stops the resident app-server"
    );
}

/// Drift gate: the app-server's JSON schema as the pinned Codex generates it
/// (`codex app-server generate-json-schema`) is the one stored beside the driver
/// (`drivers/codex/schema/app-server/`: the method catalogues, each with the definitions it
/// uses), whose methods the driver's unit tests check it uses. A Codex that changed its
/// protocol fails here, naming the methods and definitions that changed.
#[test]
fn the_app_server_schema_has_not_drifted() {
    let codex = codex_path()
        .filter(|p| p.exists())
        .unwrap_or_else(|| panic!("the Codex CLI is missing: {CODEX_INSTALL_HINT}"));
    let out = tmp();
    let home = tmp();
    let status = std::process::Command::new(&codex)
        .args(["app-server", "generate-json-schema", "--out"])
        .arg(out.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("CODEX_HOME", home.path())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("codex runs");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let stored = Path::new(env!("CARGO_MANIFEST_DIR")).join("../drivers/codex/schema/app-server");
    let mut drift = Vec::new();
    for file in [
        "ClientRequest.json",
        "ClientNotification.json",
        "ServerNotification.json",
        "ServerRequest.json",
    ] {
        let read = |dir: &Path| -> Value {
            let path = dir.join(file);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            serde_json::from_str(&text).expect("schema JSON")
        };
        let (want, got) = (read(&stored), read(out.path()));
        if want == got {
            continue;
        }
        let methods = |v: &Value| -> std::collections::BTreeSet<String> {
            v["oneOf"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|o| {
                    o["properties"]["method"]["enum"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .filter_map(|m| m.as_str().map(str::to_owned))
                .collect()
        };
        let (before, after) = (methods(&want), methods(&got));
        let empty = serde_json::Map::new();
        let defs = |v: &Value| {
            v["definitions"]
                .as_object()
                .cloned()
                .unwrap_or_else(|| empty.clone())
        };
        let (old, new) = (defs(&want), defs(&got));
        let changed: Vec<&String> = old
            .keys()
            .chain(new.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter(|k| old.get(*k) != new.get(*k))
            .collect();
        drift.push(format!(
            "{file}: methods added {:?}, removed {:?}; definitions changed {changed:?}",
            after.difference(&before).collect::<Vec<_>>(),
            before.difference(&after).collect::<Vec<_>>(),
        ));
    }
    assert!(
        drift.is_empty(),
        "the pinned Codex's app-server schema differs from drivers/codex/schema/app-server \
         (check the driver against it, then copy the four files from `codex app-server \
         generate-json-schema --out DIR`):\n{}",
        drift.join("\n")
    );
}

/// A forked thread is a new Codex thread with the parent's history (`thread/fork` on the
/// app-server, whatever the run would otherwise use); the parent goes on without the branch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_thread_is_a_new_codex_thread_from_the_parent() {
    let c = Codex::new().await;
    let agent = c
        .agent()
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let parent = agent.thread("codex-parent");
    // Not streaming: the parent's turns run on exec.
    let first = parent
        .run_with("first turn", options(false))
        .await
        .expect("first");
    let parent_thread = valid_checkpoint(&first);

    let child = parent.fork("codex-child");
    let forked = child
        .run_with("branch turn", options(false))
        .await
        .expect("fork");
    assert_eq!(
        forked.text,
        "Hello from mock-openai! user_msgs=2 you said: branch turn"
    );
    assert_eq!(transport_of(&forked), "app-server");
    let child_thread = valid_checkpoint(&forked);
    assert_ne!(child_thread, parent_thread, "a fork is a new thread");
    assert!(matches!(
        forked.thread.as_ref().unwrap().start,
        ThreadStart::Forked { .. }
    ));
    let stdin = String::from_utf8_lossy(&forked.raw().stdin).into_owned();
    assert!(
        stdin.contains(r#""method":"thread/fork""#) && stdin.contains(&parent_thread),
        "{stdin}"
    );

    // The parent continues its own thread, without the branch.
    let second = parent
        .run_with("parent again", options(false))
        .await
        .expect("parent");
    assert_eq!(valid_checkpoint(&second), parent_thread);
    assert_eq!(
        second.text,
        "Hello from mock-openai! user_msgs=2 you said: parent again"
    );
}

/// Host tools and a declared stdio MCP server over both transports. Codex 0.171 defers MCP
/// tools behind its client-side `tool_search`: the mock model searches first
/// (`tool_search_call`), then calls what was found in its namespace.
mod host_tools {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The outputs of `function_call_output` items the mock received.
    fn seen_outputs(c: &Codex) -> Vec<String> {
        let mut out = Vec::new();
        for body in c.mock.requests() {
            for item in body["input"].as_array().into_iter().flatten() {
                if item["type"] == "function_call_output" {
                    let text = match &item["output"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    if !out.contains(&text) {
                        out.push(text);
                    }
                }
            }
        }
        out
    }

    /// The names of the tools Codex offered the model.
    fn offered_tools(c: &Codex) -> Vec<String> {
        let mut names = Vec::new();
        for body in c.mock.requests() {
            for t in body["tools"].as_array().into_iter().flatten() {
                if let Some(n) = t["name"].as_str()
                    && !names.iter().any(|x: &String| x == n)
                {
                    names.push(n.to_owned());
                }
            }
        }
        names
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_host_tool_is_called_by_codex_over_both_transports() {
        for streaming in [false, true] {
            let c = Codex::new().await;
            let calls = Arc::new(AtomicUsize::new(0));
            let agent = c.agent().tools([lookup_tool(calls.clone())]).build();
            let r = agent
                .run_with(
                    r#"TOOL mcp__host__lookup_issue {"number":7}"#,
                    auto_approve(streaming),
                )
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "streaming={streaming}: {e}; tools offered: {:?}",
                        offered_tools(&c)
                    )
                });
            assert_eq!(
                calls.load(Ordering::SeqCst),
                1,
                "streaming={streaming}; offered: {:?}; outputs: {:?}",
                offered_tools(&c),
                seen_outputs(&c)
            );
            let seen = seen_outputs(&c);
            assert!(
                seen.iter().any(|t| t.contains("Issue number 7")),
                "{seen:?}"
            );
            let results = tool_outcomes(&r);
            assert_eq!(results.len(), 1, "{results:?}");
            assert!(results[0].0.contains("lookup_issue"), "{results:?}");
            assert!(results[0].1.contains("Issue number 7"), "{results:?}");
            // The token travels in the environment, never on argv.
            let launch = r.raw().launch.clone().unwrap();
            assert!(
                launch
                    .args
                    .iter()
                    .any(|a| a.starts_with("mcp_servers.host.bearer_token_env_var=")),
                "{launch:?}"
            );
            agent.close().await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn codex_sees_a_rejection_and_a_panic_as_tool_errors() {
        let c = Codex::new().await;
        let agent = c.agent().tools([lookup_tool(Arc::default())]).build();
        for number in [0, 13] {
            agent
                .run_with(
                    format!(r#"TOOL mcp__host__lookup_issue {{"number":{number}}}"#),
                    auto_approve(false),
                )
                .await
                .expect("the run continues after a tool error");
        }
        let seen = seen_outputs(&c).join("\n");
        assert!(seen.contains("not_found: there is no issue 0"), "{seen}");
        assert!(seen.contains("internal_error"), "{seen}");
        assert!(!seen.contains("secret"), "{seen}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_declared_stdio_server_is_started_by_codex_and_called() {
        let c = Codex::new().await;
        let log = c.ws.path().join("stamper.log");
        let agent = c.agent().mcp([stdio_stamper(&log)]).build();
        let r = agent
            .run_with(
                r#"TOOL mcp__stamper__stamp {"text":"hi"}"#,
                auto_approve(false),
            )
            .await
            .expect("run");
        let seen = seen_outputs(&c);
        assert!(
            seen.iter().any(|t| t.contains("STAMPED:hi:secret-len=12")),
            "{seen:?}; offered {:?}",
            offered_tools(&c)
        );
        assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 1);
        let launch = r.raw().launch.clone().unwrap();
        assert!(
            !launch.args.iter().any(|a| a.contains("s3cr3t-value")),
            "{launch:?}"
        );
    }
}

/// Skills (issue 19): the host's bundle goes in as an extra skill root on the app-server
/// (`skills/extraRoots/set` before `thread/start`), also for a run that would otherwise use
/// `exec`; the model's developer message lists the skill with its description. A config that
/// pins `exec` is refused before launch, never run without the skills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_reach_the_model_as_an_extra_skill_root() {
    let c = Codex::new().await;
    let cache = tmp();
    let md = PROBE_SKILL_MD;
    let agent = c
        .agent()
        .skill_cache(cache.path())
        .skills([adaptor::Skill::inline("probe-skill", md)])
        .build();
    let r = agent
        .run_with("hello there", options(false))
        .await
        .expect("run with a skill");
    assert_eq!(transport_of(&r), "app-server");
    assert_eq!(
        r.text,
        "Hello from mock-openai! user_msgs=1 you said: hello there"
    );
    let sent = c.mock.requests();
    assert_eq!(sent.len(), 1);
    let body = sent[0].to_string();
    assert!(
        body.contains("probe-skill: Use when the user says PROBE-7"),
        "the skill is listed for the model: {}",
        &body[..body.len().min(4000)]
    );

    let driver = adaptor::Driver::from_file(driver_path("codex"))
        .unwrap()
        .with_config(json!({
            "command": codex_path().unwrap().display().to_string(),
            "transport": "exec",
        }))
        .unwrap();
    let pinned = Agent::builder(driver)
        .workspace(c.ws())
        .skill_cache(cache.path())
        .skills([adaptor::Skill::inline("probe-skill", md)])
        .build();
    let (events, r) = collect(pinned.stream("hello")).await;
    assert!(events.is_empty());
    assert!(
        matches!(&r, Err(Error::StartRefused { message, .. }) if message.contains("skills need the app-server")),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_with_dedicated_profiles_keep_their_sessions_apart() {
    let c = Codex::new().await;
    // The user's login, linked into one profile (an API-key login: no refresh here).
    let native_auth = c.codex_home.path().join("auth.json");
    std::fs::write(&native_auth, r#"{"OPENAI_API_KEY":null}"#).unwrap();
    let profiles = tmp();
    let (dir_a, dir_b) = (profiles.path().join("a"), profiles.path().join("b"));
    let a = c
        .agent()
        .profile(
            adaptor::Profile::clone_native(&dir_a)
                .link_auth()
                .copy_settings(),
        )
        .build();
    let b = c
        .agent()
        .profile(adaptor::Profile::clone_native(&dir_b).copy_settings())
        .build();
    // Both transports at once: exec for one agent, the app-server for the other.
    let (ra, rb) = tokio::join!(
        a.run_with("hello from a", options(false)),
        b.run_with("hello from b", options(true))
    );
    let (ra, rb) = (ra.expect("agent a"), rb.expect("agent b"));
    assert_eq!(transport_of(&ra), "exec");
    assert_eq!(transport_of(&rb), "app-server");
    let (id_a, id_b) = (ra.session_id().unwrap(), rb.session_id().unwrap());
    let rollouts = |dir: &Path, id: &str| files_containing(&dir.join("sessions"), id);
    assert_eq!(
        rollouts(&dir_a, id_a).len(),
        1,
        "{:?}",
        rollouts(&dir_a, "")
    );
    assert_eq!(
        rollouts(&dir_b, id_b).len(),
        1,
        "{:?}",
        rollouts(&dir_b, "")
    );
    assert!(rollouts(&dir_a, id_b).is_empty() && rollouts(&dir_b, id_a).is_empty());
    assert!(files_containing(&c.codex_home.path().join("sessions"), "rollout").is_empty());
    // The login is still the user's file, through the link.
    assert_eq!(
        std::fs::read_link(dir_a.join("auth.json")).unwrap(),
        native_auth
    );
    assert!(!dir_b.join("auth.json").exists());
    assert_eq!(c.mock.requests().len(), 2);
}

/// A prewarmed app-server is handed its handshake and `thread/start` before any run takes it
/// (they do not depend on the prompt): the run starts at `turn/start` on a thread the process
/// already opened, and its raw capture still holds every byte it was written, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prewarmed_app_server_has_its_thread_open_before_the_run() {
    let c = Codex::new().await;
    let agent = c.agent().streaming(true).prewarm(1).build();
    assert_eq!(agent.warm_up().await.unwrap(), 1);
    // The warm process answers its handshake while no run holds it; nothing reaches the
    // model before a prompt does.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(c.mock.requests().is_empty());
    let (events, result) = collect(agent.stream("hello there")).await;
    let r = result.unwrap();
    assert_eq!(
        r.text,
        "Hello from mock-openai! user_msgs=1 you said: hello there"
    );
    valid_checkpoint(&r);
    let methods = methods_after_prewritten_input(&events, &r);
    assert_eq!(
        methods,
        ["initialize", "initialized", "thread/start", "turn/start"]
    );
    assert_eq!(c.mock.requests().len(), 1);
    agent.close().await;
}
