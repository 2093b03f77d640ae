//! The HTTP bridges: runs as Server-Sent Events (resume from `Last-Event-ID`, approvals,
//! cancel when the client goes) and as AG-UI events (interrupts and their resume), read by
//! real HTTP clients — curl, and Debian's Chromium (driven by Playwright) running the
//! example's page.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use adaptor_bridges::sse::{self, HubOptions, RunHub};
use adaptor_integration_tests::*;
use serde_json::{Value, json};

/// The example server (`bridges/examples/web.rs`), on a free port; killed on drop.
struct Web {
    child: Child,
    url: String,
}

impl Web {
    fn start() -> Self {
        let exe = bin_dir().join("examples").join("web");
        assert!(
            exe.is_file(),
            "{} is missing: cargo build --workspace --all-targets",
            exe.display()
        );
        let mut child = Command::new(exe)
            .arg("127.0.0.1:0")
            .env("ADAPTOR_DRIVER_PATH", target_dir().join("drivers"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the web example");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("the listening line");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .trim_end_matches('/')
            .to_owned();
        Self { child, url }
    }
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "60"])
        .args(args)
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn post(url: &str, body: &Value) -> String {
    curl(&[
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "-d",
        &body.to_string(),
        url,
    ])
}

/// One SSE message: its `id`, `event` and `data` fields.
#[derive(Debug, Default, Clone)]
struct Message {
    id: Option<String>,
    event: Option<String>,
    data: String,
}

fn parse_sse(text: &str) -> Vec<Message> {
    let mut out = Vec::new();
    let mut current = Message::default();
    for line in text.lines() {
        if line.is_empty() {
            if !current.data.is_empty() || current.event.is_some() {
                out.push(std::mem::take(&mut current));
            }
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => current.id = Some(value.to_owned()),
            "event" => current.event = Some(value.to_owned()),
            "data" => {
                if !current.data.is_empty() {
                    current.data.push('\n');
                }
                current.data.push_str(value);
            }
            _ => {}
        }
    }
    out
}

fn start_run(web: &Web, prompt: &str) -> String {
    let created: Value = serde_json::from_str(&post(
        &format!("{}/runs", web.url),
        &json!({ "prompt": prompt }),
    ))
    .unwrap();
    created["run_id"].as_str().expect("run_id").to_owned()
}

#[test]
fn a_run_streams_as_sse_with_sequence_ids_a_result_and_resume_from_last_event_id() {
    let web = Web::start();
    let id = start_run(&web, "hello web");
    let events = parse_sse(&curl(&["-N", &format!("{}/runs/{id}/events", web.url)]));
    let last = events.last().expect("events");
    assert_eq!(last.event.as_deref(), Some("result"));
    let result: Value = serde_json::from_str(&last.data).unwrap();
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(result["text"], "Reference reply: hello web");
    let ids: Vec<u64> = events
        .iter()
        .filter_map(|m| m.id.as_deref())
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(
        ids,
        (1..=ids.len() as u64).collect::<Vec<_>>(),
        "ids are the sequence numbers"
    );
    assert_eq!(events[0].event.as_deref(), Some("run_started"));
    for m in events.iter().filter(|m| m.id.is_some()) {
        let data: Value = serde_json::from_str(&m.data).unwrap();
        assert_eq!(
            data["kind"].as_str(),
            m.event.as_deref(),
            "the event name is the kind"
        );
    }
    assert!(
        events
            .iter()
            .any(|m| m.event.as_deref() == Some("tool_call"))
    );
    // A client that had up to 3 gets the rest (the run is kept after its end too).
    let resumed = parse_sse(&curl(&[
        "-N",
        "-H",
        "Last-Event-ID: 3",
        &format!("{}/runs/{id}/events", web.url),
    ]));
    assert_eq!(resumed[0].id.as_deref(), Some("4"));
    assert_eq!(resumed.len(), events.len() - 3);
    // Bad input gets a typed error.
    let bad = curl(&[
        "-H",
        "Last-Event-ID: x",
        &format!("{}/runs/{id}/events", web.url),
    ]);
    assert!(bad.contains("Last-Event-ID"), "{bad}");
    let missing = curl(&[&format!("{}/runs/run-nope/events", web.url)]);
    assert!(missing.contains("no run"), "{missing}");
    let empty = post(&format!("{}/runs", web.url), &json!({ "prompt": " " }));
    assert!(empty.contains("prompt"), "{empty}");
}

#[test]
fn an_approval_is_answered_over_http_while_the_stream_waits() {
    let web = Web::start();
    let id = start_run(&web, "[[ask-permission]] may I");
    let mut reader = Command::new("curl")
        .args([
            "-sSN",
            "--max-time",
            "60",
            &format!("{}/runs/{id}/events", web.url),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(reader.stdout.take().unwrap());
    let mut text = String::new();
    let mut answered = false;
    for line in lines.lines() {
        let line = line.unwrap();
        if !answered && line.starts_with("data:") && line.contains("\"kind\":\"approval_request\"")
        {
            let req: Value = serde_json::from_str(line.trim_start_matches("data:").trim()).unwrap();
            assert_eq!(req["approval_kind"], "permission");
            let approval = req["id"].as_str().unwrap();
            let url = format!("{}/runs/{id}/approvals/{approval}", web.url);
            let out = post(&url, &json!({"decision": "approve"}));
            assert_eq!(out, "", "204");
            // Exactly once: a second answer is refused.
            let again = post(&url, &json!({"decision": "deny"}));
            assert!(
                again.contains("no pending approval") || again.contains("already"),
                "{again}"
            );
            answered = true;
        }
        text.push_str(&line);
        text.push('\n');
    }
    reader.wait().unwrap();
    let events = parse_sse(&text);
    let result: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
    assert_eq!(result["ok"], true, "{result}");
    let resolved: Vec<Value> = events
        .iter()
        .filter(|m| m.event.as_deref() == Some("approval_resolved"))
        .map(|m| serde_json::from_str(&m.data).unwrap())
        .collect();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["resolution"], "approved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_nobody_reads_any_more_is_cancelled_after_the_grace() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let hub = RunHub::new(
        agent.clone(),
        adaptor::RunOptions::new(),
        HubOptions::default().with_reconnect_grace(Duration::from_millis(300)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(axum::serve(listener, sse::router(hub.clone())).into_future());
    let created: Value = {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            serde_json::from_str(&post(
                &format!("{url}/runs"),
                &json!({"prompt": "[[sleep 30000]] slow"}),
            ))
            .unwrap()
        })
        .await
        .unwrap()
    };
    let id = created["run_id"].as_str().unwrap().to_owned();
    // A client reads for a moment, then goes away.
    let events_url = format!("{url}/runs/{id}/events");
    tokio::task::spawn_blocking(move || {
        let _ = Command::new("curl")
            .args(["-sN", "--max-time", "1", &events_url])
            .output();
    })
    .await
    .unwrap();
    let log = hub.get(&id).unwrap();
    let started = Instant::now();
    assert!(
        eventually(Duration::from_secs(20), || log.is_done()).await,
        "the run ended without a reader"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    let entry = log.next_after(u64::MAX - 1, false).await.unwrap();
    let adaptor_bridges::sse::Entry::Result(result) = entry else {
        panic!("{entry:?}")
    };
    assert_eq!(result["reason"], "cancelled", "{result}");
    server.abort();
    agent.close().await;
}

/// AG-UI events from `curl -N` of `POST /ag-ui`.
fn ag_ui(web: &Web, input: &Value) -> Vec<Value> {
    let text = post(&format!("{}/ag-ui", web.url), input);
    parse_sse(&text)
        .iter()
        .map(|m| {
            assert!(
                m.event.is_none() && m.id.is_none(),
                "AG-UI frames are data only"
            );
            serde_json::from_str(&m.data).unwrap()
        })
        .collect()
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

#[test]
fn ag_ui_streams_a_run_and_an_approval_is_an_interrupt_answered_by_resume() {
    let web = Web::start();
    let events = ag_ui(
        &web,
        &json!({"threadId": "t1", "runId": "r1", "messages": [{"id": "m1", "role": "user", "content": "hello agui"}], "tools": [], "context": []}),
    );
    let t = types(&events);
    assert_eq!(t.first(), Some(&"RUN_STARTED"));
    assert_eq!(t.last(), Some(&"RUN_FINISHED"));
    for expected in [
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "REASONING_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "STATE_SNAPSHOT",
    ] {
        assert!(t.contains(&expected), "{expected} missing in {t:?}");
    }
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Reference reply: hello agui");
    assert_eq!(events[0]["threadId"], "t1");
    assert_eq!(events.last().unwrap()["result"]["ok"], true);

    // An approval ends the AG-UI run with an interrupt …
    let first = ag_ui(
        &web,
        &json!({"threadId": "t2", "runId": "r1", "messages": [{"id": "m1", "role": "user", "content": "[[ask-permission]] guarded"}], "tools": [], "context": []}),
    );
    let finish = first.last().unwrap();
    assert_eq!(finish["type"], "RUN_FINISHED", "{first:?}");
    assert_eq!(finish["outcome"]["type"], "interrupt");
    let interrupt = &finish["outcome"]["interrupts"][0];
    assert_eq!(interrupt["reason"], "tool_approval");
    assert_eq!(interrupt["toolCallId"], "call-1");
    // … and the answer resumes the same run as a new AG-UI run.
    let second = ag_ui(
        &web,
        &json!({"threadId": "t2", "runId": "r2", "messages": [], "tools": [], "context": [],
                "resume": [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "approve"}}]}),
    );
    let t = types(&second);
    assert_eq!(t.first(), Some(&"RUN_STARTED"));
    assert_eq!(second[0]["runId"], "r2");
    assert!(t.contains(&"TOOL_CALL_RESULT"), "{t:?}");
    let done = second.last().unwrap();
    assert_eq!(done["type"], "RUN_FINISHED");
    assert_eq!(done["result"]["text"], "Reference reply: guarded");
    // Nothing to resume any more.
    let none = post(
        &format!("{}/ag-ui", web.url),
        &json!({"threadId": "t2", "runId": "r3", "messages": [], "resume": [{"interruptId": "x", "status": "cancelled"}]}),
    );
    assert!(none.contains("no interrupted run"), "{none}");
}

/// `playwright-core`'s `node_modules` (installed by `./x.sh test`): `$ADAPTOR_PLAYWRIGHT`,
/// else the CLI cache.
fn playwright() -> PathBuf {
    let dir = std::env::var_os("ADAPTOR_PLAYWRIGHT")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME"))
                .join(".cache/agent-adaptor-clis/playwright/node_modules")
        });
    assert!(
        dir.join("playwright-core").is_dir() && Path::new("/usr/bin/chromium").is_file(),
        "playwright-core in {} or Debian's chromium is missing (./x.sh test installs both)",
        dir.display()
    );
    dir
}

#[test]
fn the_page_streams_a_run_with_its_tool_call_in_headless_chromium() {
    let web = Web::start();
    let shots = tmp();
    let screenshot = shots.path().join("page.png");
    // The page runs the prompt from its URL and approves the interrupt by itself.
    let url = format!(
        "{}/?prompt=%5B%5Bask-permission%5D%5D%20from%20the%20browser&approve=auto",
        web.url
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("web/page_check.cjs");
    let out = Command::new("node")
        .arg(&script)
        .arg(&url)
        .arg(&screenshot)
        .env("NODE_PATH", playwright())
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(shown["status"], "done", "{shown}");
    assert_eq!(shown["text"], "Reference reply: from the browser");
    assert_eq!(shown["reasoning"], "Planning the reply.");
    assert_eq!(shown["interrupts"], 0, "the interrupt was answered");
    assert_eq!(
        shown["tools"],
        json!([{"id": "call-1", "name": "echo", "args": "{\"text\":\"from the browser\"}", "result": "from the browser"}])
    );
    let png = std::fs::read(&screenshot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 1000);
}
