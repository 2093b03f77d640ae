//! Host tools and MCP declarations through the whole pipeline, with the reference provider
//! as the CLI (its `[[mcp-call SERVER:TOOL:JSON]]` directive is a scripted MCP client built
//! on rmcp): the agent's tool server, the bearer token in the environment, a declared stdio
//! server, rejections and panics reaching the "model" as tool errors, refusals before launch,
//! masking in dry runs, and tools on threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use adaptor::{Error, Event, Mcp, McpError, RunOptions, Tool, ToolsError};
use adaptor_integration_tests::{agent_builder, bin_dir, collect, lookup_tool, reference, tmp};

fn tool_events(events: &[Event]) -> Vec<(String, String, bool)> {
    let mut calls = std::collections::BTreeMap::new();
    let mut out = Vec::new();
    for e in events {
        match e {
            Event::ToolCall(c) => {
                calls.insert(c.id.clone(), c.name.clone());
            }
            Event::ToolResult(r) => out.push((
                calls.get(&r.id).cloned().unwrap_or_default(),
                r.output.clone(),
                r.is_error,
            )),
            _ => {}
        }
    }
    out
}

#[tokio::test]
async fn a_host_tool_is_called_and_its_result_reaches_the_cli() {
    let (ws, state) = (tmp(), tmp());
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = agent_builder(reference(state.path()), ws.path())
        .tools([lookup_tool(calls.clone())])
        .build();
    let (events, result) = collect(agent.stream(
        r#"Look it up [[mcp-call host:lookup_issue:{"number":7}]] [[mcp-call host:lookup_issue:{"number":0}]] [[mcp-call host:lookup_issue:{"number":13}]] [[mcp-call host:lookup_issue:{"number":500}]] [[mcp-call host:lookup_issue:{"number":"x"}]]"#,
    ))
    .await;
    let result = result.expect("the run continues after tool errors");
    let tools = tool_events(&events);
    let host: Vec<_> = tools
        .iter()
        .filter(|(name, _, _)| name == "mcp__host__lookup_issue")
        .collect();
    assert_eq!(host.len(), 5, "{tools:?}");
    assert!(!host[0].2, "{:?}", host[0]);
    let found: serde_json::Value = serde_json::from_str(&host[0].1).expect("JSON output");
    assert_eq!(found["title"], "Issue number 7");
    assert_eq!(host[1].1, "not_found: there is no issue 0");
    assert!(host[1].2);
    for failed in [&host[2], &host[3]] {
        assert!(failed.2, "{failed:?}");
        assert!(
            failed
                .1
                .starts_with("internal_error: the tool failed in the host"),
            "{failed:?}"
        );
        assert!(
            !failed.1.contains("secret") && !failed.1.contains("db.internal"),
            "host internals leaked: {failed:?}"
        );
    }
    assert!(
        host[4].2 && host[4].1.starts_with("invalid_input: "),
        "{:?}",
        host[4]
    );
    // The handler ran for every call whose arguments decoded (the panic included).
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert!(result.text.contains("Look it up"), "{}", result.text);
    // The server survives the panic: a second run on the same agent (same server) works.
    let (events, result) =
        collect(agent.stream(r#"again [[mcp-call host:lookup_issue:{"number":8}]]"#)).await;
    result.unwrap();
    let tools = tool_events(&events);
    assert!(tools[0].1.contains("Issue number 8"), "{tools:?}");
    agent.close().await;
}

#[tokio::test]
async fn a_declared_stdio_server_is_started_by_the_cli_with_its_environment() {
    let (ws, state) = (tmp(), tmp());
    let log = ws.path().join("mcp.log");
    let server = Mcp::stdio(
        "stamper",
        bin_dir().join("mock-mcp-stdio").display().to_string(),
    )
    .env("MOCK_MCP_SECRET", "s3cr3t-value")
    .env("MOCK_MCP_LOG", log.display().to_string());
    let agent = agent_builder(reference(state.path()), ws.path())
        .mcp([server])
        .build();
    let (events, result) =
        collect(agent.stream(
            r#"stamp [[mcp-call stamper:stamp:{"text":"hi"}]] [[mcp-call stamper:fail:{}]]"#,
        ))
        .await;
    result.unwrap();
    let mut tools = tool_events(&events);
    tools.retain(|(name, _, _)| name.starts_with("mcp__"));
    assert_eq!(
        tools,
        vec![
            (
                "mcp__stamper__stamp".to_owned(),
                "STAMPED:hi:secret-len=12".to_owned(),
                false
            ),
            (
                "mcp__stamper__fail".to_owned(),
                "mock failure".to_owned(),
                true
            ),
        ]
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(logged.lines().count(), 2, "{logged}");
}

#[tokio::test]
async fn declarations_the_driver_cannot_deliver_are_refused_before_launch() {
    let (ws, state) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    // The reference driver declares stdio and http, not sse.
    let err = agent
        .run_with(
            "x",
            RunOptions::new().mcp([Mcp::sse("old", "http://127.0.0.1:9/sse")]),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Mcp(McpError::TransportUnsupported { transport: "sse", accepted, .. }) if accepted == "stdio, http"
        ),
        "{err:?}"
    );
    let err = agent
        .run_with(
            "x",
            RunOptions::new().mcp([Mcp::http("gh", "http://127.0.0.1:9/mcp")
                .bearer_token_env("ADAPTOR_TEST_SURELY_UNSET_TOKEN")]),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Mcp(McpError::TokenEnvMissing { variable, .. }) if variable == "ADAPTOR_TEST_SURELY_UNSET_TOKEN"),
        "{err:?}"
    );
    // A declared server may not take the host tools' name.
    let agent = agent_builder(reference(state.path()), ws.path())
        .tools([lookup_tool(Arc::default())])
        .mcp([Mcp::stdio("host", "x")])
        .build();
    let err = agent.run("x").await.unwrap_err();
    assert!(
        matches!(&err, Error::Mcp(McpError::Duplicate { .. })),
        "{err:?}"
    );
    // A bad tool set fails the run before launch.
    let dup = agent_builder(reference(state.path()), ws.path())
        .tools([lookup_tool(Arc::default()), lookup_tool(Arc::default())])
        .build();
    let err = dup.run("x").await.unwrap_err();
    assert!(
        matches!(&err, Error::Tools(ToolsError::Duplicate { .. })),
        "{err:?}"
    );
}

#[tokio::test]
async fn dry_runs_mask_tokens_and_header_values() {
    let (ws, state) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .env("PLAIN_NAMED_VAR", "bearer-value-123")
        .tools([lookup_tool(Arc::default())])
        .mcp(
            [
                Mcp::http("gh", "http://127.0.0.1:9/mcp").bearer_token_env("PLAIN_NAMED_VAR"),
                Mcp::http("other", "http://127.0.0.1:9/mcp").header("X-Api", "literal-header-456"),
            ]
            .map(Mcp::from),
        )
        .build();
    let plan = agent.dry_run("x").await.unwrap();
    let shown = serde_json::to_string(&plan).unwrap();
    for secret in ["bearer-value-123", "literal-header-456"] {
        assert!(!shown.contains(secret), "{secret} shown: {shown}");
    }
    let token_var = plan
        .env
        .iter()
        .find(|(k, _)| k.starts_with("ADAPTOR_TOOLS_TOKEN_"))
        .expect("the token variable is in the provider's environment");
    assert!(token_var.1.starts_with("<masked"), "{token_var:?}");
    // The name is unpredictable: another agent's server has another one.
    let other = agent_builder(reference(state.path()), ws.path())
        .tools([lookup_tool(Arc::default())])
        .build();
    let other_plan = other.dry_run("x").await.unwrap();
    assert!(
        !other_plan.env.iter().any(|(k, _)| k == &token_var.0),
        "two agents share a token variable name"
    );
    assert!(plan.files.iter().any(|(name, _)| name == "mcp-config.json"));
    agent.close().await;
    other.close().await;
}

#[tokio::test]
async fn tools_on_threads_need_revisions_that_join_the_fingerprint() {
    let (ws, state) = (tmp(), tmp());
    let store = Arc::new(adaptor::store::MemoryStore::new());
    let unrevised = Tool::define_json(
        "echo",
        "Echo",
        serde_json::json!({"type": "object"}),
        |v| async move { Ok(v) },
    );
    let agent = agent_builder(reference(state.path()), ws.path())
        .shared_thread_store(store.clone())
        .tools([unrevised.clone()])
        .build();
    let err = agent.thread("t").run("hello").await.unwrap_err();
    assert!(
        matches!(&err, Error::Tools(ToolsError::RevisionRequired { tool }) if tool == "echo"),
        "{err:?}"
    );
    let with = |rev: &str| {
        agent_builder(reference(state.path()), ws.path())
            .shared_thread_store(store.clone())
            .tools([unrevised.clone().revision(rev)])
            .build()
    };
    let v1 = with("echo/v1");
    v1.thread("t").run("hello").await.unwrap();
    v1.thread("t").run("again").await.unwrap();
    // Another revision is another contract: the stored session is not resumed with it.
    let v2 = with("echo/v2");
    let err = v2.thread("t").run("third").await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Thread(adaptor::ThreadError::Incompatible { .. })
        ),
        "{err:?}"
    );
}

/// One HTTP/1.1 POST of an MCP `initialize` without credentials; returns the status code.
async fn unauthenticated_initialize(url: &str) -> std::io::Result<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").expect("http URL");
    let (authority, path) = rest.split_once('/').expect("a path");
    let mut stream = tokio::net::TcpStream::connect(authority).await?;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let request = format!(
        "POST /{path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0))
}

#[tokio::test]
async fn the_tool_server_starts_lazily_refuses_strangers_and_stops_with_the_agent() {
    let (ws, state) = (tmp(), tmp());
    let build = || {
        agent_builder(reference(state.path()), ws.path())
            .tools([lookup_tool(Arc::default())])
            .build()
    };
    for end in ["close", "drop"] {
        let agent = build();
        assert_eq!(agent.tools_endpoint().await, None, "started before any run");
        agent.run("hi").await.unwrap();
        let url = agent.tools_endpoint().await.expect("started by the run");
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        assert_eq!(unauthenticated_initialize(&url).await.unwrap(), 401);
        if end == "close" {
            agent.close().await;
            assert_eq!(agent.tools_endpoint().await, None);
        } else {
            drop(agent);
        }
        let stopped = adaptor_integration_tests::eventually(Duration::from_secs(5), || {
            let authority = url
                .trim_start_matches("http://")
                .split('/')
                .next()
                .unwrap()
                .to_owned();
            std::net::TcpStream::connect(authority).is_err()
        })
        .await;
        assert!(stopped, "the tool server still listens after {end}");
    }
    // A closed agent starts no server again.
    let agent = build();
    agent.close().await;
    assert!(matches!(agent.run("hi").await, Err(Error::AgentClosed)));
    assert_eq!(agent.tools_endpoint().await, None);
}
