//! Host tools and declared MCP servers on the **real** Claude Code (2.1.197) and Codex
//! (0.171.0) CLIs, offline against the project's mock model servers: the mock asks for the
//! tool (`TOOL <name> <json>`), the CLI calls the agent's MCP server (or starts the declared
//! stdio server), the handler runs in this process, and the mock sees the result in its next
//! request (`TOOL_RESULT_SEEN: …`). Rejections and panics reach the model as tool errors and
//! the run goes on.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use adaptor::{
    Agent, ApprovalKind, ApprovalPolicy, ApprovalRequest, DecisionMode, Event, ItemKind, Mcp,
    Phase, Policy, RunOptions, RunResult,
};
use adaptor_integration_tests::*;
use serde_json::{Value, json};

fn auto_approve(streaming: bool) -> RunOptions {
    RunOptions::new().streaming(streaming).policy(Policy {
        approvals: ApprovalPolicy {
            permission: DecisionMode::AutoApprove,
            ..ApprovalPolicy::default()
        },
        ..Policy::default()
    })
}

/// (tool name, result text, is_error) of every tool call in the transcript.
fn tool_results(r: &RunResult) -> Vec<(String, String, bool)> {
    let t = r.transcript();
    t.iter()
        .filter(|i| i.kind == ItemKind::ToolCall)
        .map(|c| {
            let result = t
                .iter()
                .find(|i| i.kind == ItemKind::ToolResult && i.tool_call_id == c.tool_call_id);
            (
                c.tool_name.clone().unwrap_or_default(),
                result.and_then(|r| r.text.clone()).unwrap_or_default(),
                result.is_some_and(|r| r.is_error),
            )
        })
        .collect()
}

fn tool_call_events(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCall(c) if c.phase == Phase::End => Some(c.name.clone()),
            _ => None,
        })
        .collect()
}

fn stdio_stamper(log: &std::path::Path) -> Mcp {
    Mcp::stdio(
        "stamper",
        bin_dir().join("mock-mcp-stdio").display().to_string(),
    )
    .env("MOCK_MCP_SECRET", "s3cr3t-value")
    .env("MOCK_MCP_LOG", log.display().to_string())
    .into()
}

mod claude {
    use super::*;
    use adaptor_integration_tests::mock_anthropic::*;

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
            let claude = claude_path()
                .filter(|p| p.exists())
                .unwrap_or_else(|| panic!("the Claude Code CLI is missing: {CLAUDE_INSTALL_HINT}"));
            let driver = adaptor::Driver::from_file(driver_path("claude"))
                .expect("claude.wasm (./x.sh build-drivers)")
                .with_config(json!({ "command": claude.display().to_string() }))
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

        /// The `tool_result` blocks the mock received, as (text, is_error).
        fn seen_results(&self) -> Vec<(String, bool)> {
            let mut out = Vec::new();
            for body in self.mock.requests() {
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
            tool_call_events(&events),
            vec!["mcp__host__lookup_issue".to_owned()]
        );
        let results = tool_results(&r);
        assert_eq!(results.len(), 1, "{results:?}");
        assert!(results[0].1.contains("Issue number 7"), "{results:?}");
        assert!(!results[0].2);
        // The model saw the handler's output.
        let seen = c.seen_results();
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
            let results = tool_results(&r);
            assert_eq!(results.len(), 1, "{results:?}");
            assert!(results[0].2, "{results:?}");
            assert!(results[0].1.contains(expected), "{results:?}");
            assert!(!results[0].1.contains("secret"), "{results:?}");
            assert!(r.text.contains("TOOL_RESULT_SEEN"), "{}", r.text);
        }
        let seen = c.seen_results();
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
                assert!(tool_results(&r)[0].1.contains("Issue number 7"));
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
        let results = tool_results(&r);
        assert_eq!(
            results,
            vec![(
                "mcp__stamper__stamp".to_owned(),
                "STAMPED:hi:secret-len=12".to_owned(),
                false
            )]
        );
        assert!(
            c.seen_results()
                .iter()
                .any(|(t, _)| t == "STAMPED:hi:secret-len=12")
        );
        assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 1);
        // The server's variable is in the private config file, never on argv.
        let launch = r.raw().launch.clone().unwrap();
        assert!(!format!("{launch:?}").contains("s3cr3t-value"));
    }
}

mod codex {
    use super::*;
    use adaptor_integration_tests::mock_openai::*;

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
            codex_home(c.codex_home.path(), &c.mock.base_url(), c.ws.path()).expect("config");
            c
        }

        fn agent(&self) -> adaptor::AgentBuilder {
            let codex = codex_path()
                .filter(|p| p.exists())
                .unwrap_or_else(|| panic!("the Codex CLI is missing: {CODEX_INSTALL_HINT}"));
            let driver = adaptor::Driver::from_file(driver_path("codex"))
                .expect("codex.wasm (./x.sh build-drivers)")
                // Codex 0.171 defers MCP tools behind its client-side `tool_search`: the
                // mock model searches first (`tool_search_call`), then calls what was found.
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

        /// The outputs of `function_call_output` items the mock received.
        fn seen_outputs(&self) -> Vec<String> {
            let mut out = Vec::new();
            for body in self.mock.requests() {
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
        fn offered_tools(&self) -> Vec<String> {
            let mut names = Vec::new();
            for body in self.mock.requests() {
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
                        c.offered_tools()
                    )
                });
            assert_eq!(
                calls.load(Ordering::SeqCst),
                1,
                "streaming={streaming}; offered: {:?}; outputs: {:?}",
                c.offered_tools(),
                c.seen_outputs()
            );
            let seen = c.seen_outputs();
            assert!(
                seen.iter().any(|t| t.contains("Issue number 7")),
                "{seen:?}"
            );
            let results = tool_results(&r);
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
        let seen = c.seen_outputs().join("\n");
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
        let seen = c.seen_outputs();
        assert!(
            seen.iter().any(|t| t.contains("STAMPED:hi:secret-len=12")),
            "{seen:?}; offered {:?}",
            c.offered_tools()
        );
        assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 1);
        let launch = r.raw().launch.clone().unwrap();
        assert!(
            !launch.args.iter().any(|a| a.contains("s3cr3t-value")),
            "{launch:?}"
        );
    }
}
