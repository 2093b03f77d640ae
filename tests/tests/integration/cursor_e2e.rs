//! The Cursor driver end to end: `cursor.wasm` in the host, running `fake-cursor-agent` (a
//! scripted stand-in for Cursor Agent, which cannot be installed here; it emits the
//! documented and recorded stream-json frames byte for byte) through the real process layer,
//! containment and threads. Installed as `agent` (a symlink), so the host treats it as
//! Cursor Agent and grants it Cursor's state directory, where the fake keeps its sessions.

use std::path::{Path, PathBuf};
use std::time::Duration;

use adaptor::{
    Agent, ApprovalPolicy, DecisionMode, Error, Event, FailureReason, ItemKind, Mcp, Phase, Policy,
    RunOptions, RunResult, ThreadStart,
};
use adaptor_integration_tests::*;
use serde_json::json;

/// A home with the fake installed as `agent`, a workspace, and an agent wired to both.
struct Cursor {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    program: PathBuf,
}

impl Cursor {
    fn new() -> Self {
        let home = tmp();
        let bin = home.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let program = bin.join("agent");
        std::os::unix::fs::symlink(bin_dir().join("fake-cursor-agent"), &program)
            .expect("symlink the fake as `agent` (cargo build -p fake-clis)");
        Self {
            home,
            ws: tmp(),
            program,
        }
    }

    fn agent(&self) -> adaptor::AgentBuilder {
        let driver = adaptor::Driver::from_file(driver_path("cursor"))
            .expect("cursor.wasm (./x.sh build-drivers)")
            .with_config(json!({ "command": self.program.display().to_string() }))
            .expect("config");
        Agent::builder(driver)
            .workspace(self.ws.path())
            .grace_period(Duration::from_millis(500))
            .timeout(Duration::from_secs(60))
            .env("HOME", self.home.path().display().to_string())
    }

    fn ws(&self) -> &Path {
        self.ws.path()
    }
}

fn valid_checkpoint(r: &RunResult) -> String {
    let cp = r.checkpoint.as_ref().expect("checkpoint");
    assert!(cp.is_valid(), "checkpoint should be valid");
    assert_eq!(cp.codec(), "cursor/session/v1");
    assert_eq!(r.session_id(), Some(cp.resume_id()));
    cp.resume_id().to_owned()
}

fn no_valid_checkpoint(r: &RunResult) {
    assert!(!r.checkpoint.as_ref().is_some_and(|c| c.is_valid()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_text_with_session_and_checkpoint() {
    let c = Cursor::new();
    let agent = c.agent().build();
    let r = agent
        .run_with("hello there", RunOptions::new().streaming(false))
        .await
        .expect("run");
    record_cassette("plain-text", &r, "hello there");
    assert_eq!(r.text, "Cursor reply: hello there");
    assert_eq!(r.summary, None);
    assert_eq!(r.model.as_deref(), Some("Auto"));
    valid_checkpoint(&r);
    let args = r.raw().launch.as_ref().unwrap().args.clone();
    let ws = c.ws().canonicalize().unwrap();
    assert!(
        args.windows(2)
            .any(|w| w[0] == "--workspace" && Path::new(&w[1]).canonicalize().unwrap() == ws),
        "{args:?}"
    );
    assert_eq!(r.raw().stdin, b"hello there", "the prompt goes on stdin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_output_streams_token_deltas_once() {
    let c = Cursor::new();
    let agent = c.agent().build();
    let (events, r) =
        collect(agent.stream_with("stream me", RunOptions::new().streaming(true))).await;
    let r = r.expect("run");
    record_cassette("streamed", &r, "stream me");
    let deltas: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::TextDelta(t) if t.phase == Phase::Delta => Some(t.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas.len(), 3, "{deltas:?}");
    assert_eq!(deltas.concat(), "Cursor reply: stream me");
    assert_eq!(r.text, "Cursor reply: stream me");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Vendor(v) if v.name == "assistant")),
        "the whole-response echo is kept as a vendor event"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_and_their_results() {
    let c = Cursor::new();
    std::fs::write(c.ws().join("README.md"), "# Readme\n").unwrap();
    let agent = c.agent().build();
    let prompt = "look [[tool read README.md]] [[tool write out.txt]] [[tool mcp]] [[tool task]] [[tool read missing.md]]";
    let r = agent
        .run_with(
            prompt,
            RunOptions::new().policy(Policy {
                approvals: ApprovalPolicy {
                    permission: DecisionMode::AutoApprove,
                    ..ApprovalPolicy::default()
                },
                ..Policy::default()
            }),
        )
        .await
        .expect("run");
    record_cassette("tools", &r, prompt);
    assert!(
        r.raw()
            .launch
            .as_ref()
            .unwrap()
            .args
            .contains(&"--force".to_owned())
    );
    let results: Vec<(String, String, bool)> = r
        .transcript()
        .iter()
        .filter(|i| i.kind == ItemKind::ToolResult)
        .map(|i| {
            (
                i.tool_name.clone().unwrap_or_default(),
                i.text.clone().unwrap_or_default(),
                i.is_error,
            )
        })
        .collect();
    assert_eq!(results.len(), 5, "{results:?}");
    assert_eq!(results[0], ("read".into(), "# Readme\n".into(), false));
    assert_eq!(results[1].0, "write");
    assert!(
        c.ws().join("out.txt").exists(),
        "the write landed in the workspace"
    );
    assert_eq!(results[2], ("docs/search".into(), "3 hits".into(), false));
    assert_eq!(results[3], ("task".into(), "SUBAGENT_DONE".into(), false));
    assert!(results[4].2, "a missing file is a tool error");
    assert_eq!(r.text, "I'll use the tools. Cursor reply: look");
    valid_checkpoint(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_resumes_the_session() {
    let c = Cursor::new();
    let agent = c
        .agent()
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let thread = agent.thread("cursor-thread");
    let first = thread.run("first").await.expect("first");
    assert_eq!(first.text, "Cursor reply: first");
    let session = valid_checkpoint(&first);
    let second = thread.run("second").await.expect("second");
    assert_eq!(second.text, "Turn 2 of the session: second");
    assert_eq!(valid_checkpoint(&second), session);
    assert_eq!(second.thread.as_ref().unwrap().start, ThreadStart::Resumed);
    assert!(
        second
            .raw()
            .launch
            .as_ref()
            .unwrap()
            .args
            .contains(&format!("--resume={session}"))
    );
    assert!(
        c.home.path().join(".cursor").join(&session).exists(),
        "kept in Cursor's state dir"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_violations_fail_without_a_valid_checkpoint() {
    let c = Cursor::new();
    let agent = c.agent().build();
    for directive in [
        "[[no-session-id]]",
        "[[change-session]]",
        "[[after-result]]",
        "[[two-variants]]",
        "[[truncate]]",
    ] {
        let prompt = format!("{directive} hi");
        let e = run_error(
            agent
                .run_with(&prompt, RunOptions::new().streaming(false))
                .await,
        );
        if directive == "[[after-result]]" {
            record_cassette("after-result", &e.result, &prompt);
        }
        assert_eq!(
            e.reason,
            FailureReason::ProtocolError,
            "{directive}: {}",
            e.message
        );
        no_valid_checkpoint(&e.result);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_frames_are_kept_as_vendor_events() {
    let c = Cursor::new();
    let agent = c.agent().build();
    let (events, r) =
        collect(agent.stream_with("[[unknown-frame]] hi", RunOptions::new().streaming(false)))
            .await;
    let r = r.expect("an unknown frame does not fail the run");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Vendor(v) if v.name == "connection"))
    );
    valid_checkpoint(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_failures_and_exit_codes() {
    let c = Cursor::new();
    let agent = c.agent().build();
    let e = run_error(agent.run("[[fail]] hi").await);
    record_cassette("agent-failure", &e.result, "[[fail]] hi");
    assert_eq!(e.reason, FailureReason::AgentError);
    assert!(
        e.message.ends_with("Error: network unreachable"),
        "{}",
        e.message
    );
    no_valid_checkpoint(&e.result);
    let e = run_error(agent.run("[[exit 3]] hi").await);
    assert_eq!(e.reason, FailureReason::AgentError, "{}", e.message);
    no_valid_checkpoint(&e.result);
    let e = run_error(agent.run("[[error-result]] hi").await);
    assert_eq!(e.reason, FailureReason::AgentError);
    assert_eq!(e.message, "The model refused the request.");
    no_valid_checkpoint(&e.result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cursor_cannot_do_is_refused_before_launch() {
    let c = Cursor::new();
    let agent = c.agent().build();
    let ask = RunOptions::new().policy(Policy {
        approvals: ApprovalPolicy {
            permission: DecisionMode::Ask,
            ..ApprovalPolicy::default()
        },
        ..Policy::default()
    });
    for (what, options) in [
        ("instructions", RunOptions::new().instructions("Be brief.")),
        ("approvals", ask),
        (
            "mcp",
            RunOptions::new().mcp([Mcp::stdio("docs", "/bin/true")]),
        ),
    ] {
        let (events, r) = collect(agent.stream_with("hi", options)).await;
        let err = r.expect_err(what);
        assert!(
            !matches!(err, Error::Run(_)),
            "{what}: refused before launch, got {err:?}"
        );
        assert_eq!(spawned_pid(&events), None, "{what}: nothing was started");
    }
}

/// Inspect runs `agent --version` and reads the build-date version; the verified list is the
/// recording label (no recorded version exists), so the fake is "in the supported range",
/// never "verified".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reads_the_build_date_version() {
    let c = Cursor::new();
    let report = c.agent().build().inspect().await.expect("inspect");
    let env = &report.environment;
    assert_eq!(env.cli_version.as_deref(), Some("2026.07.23"), "{env:?}");
    assert_eq!(env.status, adaptor::CheckLevel::Pass, "{env:?}");
    assert_eq!(
        env.supported.verified,
        ["2026.07.23 (recorded output only)"]
    );
    let check = env.checks.iter().find(|c| c.code == "cli.version").unwrap();
    assert!(
        check.message.contains("in the supported range"),
        "{}",
        check.message
    );
}
