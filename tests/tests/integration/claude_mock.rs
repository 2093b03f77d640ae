//! The real Claude Code CLI (2.1.197) against `mock_anthropic`, run directly (not through the
//! host): proves that the mock speaks the Messages API well enough for the CLI, and pins the
//! CLI's `stream-json` output for the scenarios the Claude driver relies on.
//!
//! The CLI must be installed (`claude_path`); when it is not, these tests fail and say how to
//! install it. Set `ADAPTOR_CLAUDE_CAPTURE_DIR` to keep each run's raw stdout as
//! `<dir>/<scenario>.jsonl`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use adaptor_integration_tests::mock_anthropic::*;
use serde_json::{Value, json};

/// Longest a single CLI run may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

fn claude_bin() -> PathBuf {
    match claude_path() {
        Some(path) if path.exists() => path,
        found => panic!(
            "the Claude Code CLI is not installed ({}); install it with\n    {CLAUDE_INSTALL_HINT}\n\
             or point ADAPTOR_CLAUDE_BIN at a claude 2.1.197 binary",
            found.map_or("not found".to_string(), |p| format!(
                "{} is missing",
                p.display()
            ))
        ),
    }
}

/// A HOME and a working directory for one CLI session.
struct Sandbox {
    home: tempfile::TempDir,
    cwd: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        Sandbox {
            home: tempfile::tempdir().expect("temp home"),
            cwd: tempfile::tempdir().expect("temp cwd"),
        }
    }

    /// `claude -p --output-format stream-json --verbose <args>` with `prompt` on stdin.
    fn command(&self, mock: &MockAnthropic, args: &[&str]) -> Command {
        let mut cmd = Command::new(claude_bin());
        cmd.args(["-p", "--output-format", "stream-json", "--verbose"])
            .args(args)
            .current_dir(self.cwd.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(claude_env(self.home.path(), &mock.base_url()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn run(&self, mock: &MockAnthropic, scenario: &str, args: &[&str], prompt: &str) -> Run {
        let mut child = self.command(mock, args).spawn().expect("spawn claude");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(prompt.as_bytes()).expect("write prompt");
        drop(stdin);
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let output = match rx.recv_timeout(RUN_TIMEOUT) {
            Ok(output) => output.expect("wait for claude"),
            Err(_) => {
                // SAFETY: kill(2) on the pid of the child this test spawned.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                panic!("{scenario}: claude did not finish within {RUN_TIMEOUT:?}");
            }
        };
        Run::new(scenario, output)
    }
}

/// The outcome of one CLI run.
struct Run {
    scenario: String,
    code: Option<i32>,
    stdout: String,
    stderr: String,
    lines: Vec<Value>,
}

impl Run {
    fn new(scenario: &str, output: Output) -> Run {
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        save_capture(scenario, &stdout);
        let lines = stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{scenario}: bad line {l}: {e}"))
            })
            .collect();
        Run {
            scenario: scenario.to_string(),
            code: output.status.code(),
            stdout,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            lines,
        }
    }

    fn context(&self) -> String {
        format!(
            "scenario {} exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.scenario, self.code, self.stdout, self.stderr
        )
    }

    fn assert_exit(&self, code: i32) {
        assert_eq!(self.code, Some(code), "{}", self.context());
    }

    fn of_type<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.lines
            .iter()
            .filter(move |l| l["type"].as_str() == Some(kind))
    }

    fn result(&self) -> &Value {
        let results: Vec<&Value> = self.of_type("result").collect();
        assert_eq!(results.len(), 1, "one result line\n{}", self.context());
        assert!(
            std::ptr::eq(results[0], self.lines.last().unwrap()),
            "the result line comes last\n{}",
            self.context()
        );
        results[0]
    }

    /// Content blocks of all `assistant` lines, in order.
    fn assistant_blocks(&self) -> Vec<&Value> {
        self.of_type("assistant")
            .flat_map(|l| l["message"]["content"].as_array().unwrap().iter())
            .collect()
    }

    /// Content blocks of all `user` lines, in order.
    fn user_blocks(&self) -> Vec<&Value> {
        self.of_type("user")
            .flat_map(|l| l["message"]["content"].as_array().into_iter().flatten())
            .collect()
    }

    fn session_id(&self) -> String {
        self.result()["session_id"]
            .as_str()
            .expect("session_id")
            .to_string()
    }
}

fn save_capture(scenario: &str, stdout: &str) {
    if let Some(dir) = std::env::var_os("ADAPTOR_CLAUDE_CAPTURE_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("capture dir");
        std::fs::write(dir.join(format!("{scenario}.jsonl")), stdout).expect("write capture");
    }
}

fn expected_usage_per_request() -> Value {
    json!({
        "input_tokens": INPUT_TOKENS,
        "cache_read_input_tokens": CACHE_READ_INPUT_TOKENS,
        "cache_creation_input_tokens": CACHE_CREATION_INPUT_TOKENS,
        "output_tokens": OUTPUT_TOKENS,
    })
}

fn assert_result_usage(run: &Run, requests: u64) {
    let usage = &run.result()["usage"];
    for (key, per_request) in expected_usage_per_request().as_object().unwrap() {
        assert_eq!(
            usage[key].as_u64(),
            Some(per_request.as_u64().unwrap() * requests),
            "result.usage.{key}\n{}",
            run.context()
        );
    }
}

/// The `POST /v1/messages` calls among `requests`.
fn messages_calls(requests: &[RecordedRequest]) -> impl Iterator<Item = &RecordedRequest> {
    requests
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/v1/messages")
}

/// One line per request, for assertion messages (the bodies are huge).
fn summary(requests: &[RecordedRequest]) -> String {
    requests
        .iter()
        .map(|r| {
            let body = r.body.clone().unwrap_or_default();
            format!(
                "{} {}?{} -> {} model={} max_tokens={} tools={} stream={} last_user={:?}\n",
                r.method,
                r.path,
                r.query.as_deref().unwrap_or(""),
                r.status,
                body["model"],
                body["max_tokens"],
                body["tools"].as_array().map_or(0, Vec::len),
                body["stream"],
                body.get("messages").map(last_user_text).unwrap_or_default(),
            )
        })
        .collect()
}

fn last_user_text(messages: &Value) -> String {
    let last = messages
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .expect("a user message");
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .rev()
            .filter_map(|b| b["text"].as_str())
            .find(|t| !t.starts_with("<system-reminder>"))
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

#[tokio::test]
async fn plain_text_turn() {
    let mock = MockAnthropic::start().await;
    let sandbox = Sandbox::new();
    let run = sandbox.run(&mock, "plain_text", &[], "hello there");
    run.assert_exit(0);

    let init = run.lines.first().expect("an init line");
    assert_eq!(init["type"], "system", "{}", run.context());
    assert_eq!(init["subtype"], "init", "{}", run.context());

    let text = "Hello from mock-anthropic! user_msgs=1 you said: hello there";
    let blocks = run.assistant_blocks();
    assert_eq!(blocks, vec![&json!({ "type": "text", "text": text })]);
    let assistant = run.of_type("assistant").next().unwrap();
    let usage = &assistant["message"]["usage"];
    assert_eq!(usage["input_tokens"], INPUT_TOKENS, "{}", run.context());
    assert_eq!(
        usage["cache_read_input_tokens"],
        CACHE_READ_INPUT_TOKENS,
        "{}",
        run.context()
    );
    assert_eq!(
        usage["cache_creation_input_tokens"],
        CACHE_CREATION_INPUT_TOKENS,
        "{}",
        run.context()
    );

    let result = run.result();
    assert_eq!(result["subtype"], "success");
    assert_eq!(result["is_error"], false);
    assert_eq!(result["result"], text);
    assert_eq!(result["num_turns"], 1);
    assert_result_usage(&run, 1);

    // Besides the Messages call the CLI only sends a `HEAD /` connection warm-up.
    let all = mock.all_requests();
    let (messages, others): (Vec<_>, Vec<_>) = all.iter().partition(|r| r.path == "/v1/messages");
    assert!(
        others.iter().all(|r| r.method == "HEAD" && r.path == "/"),
        "{}",
        summary(&all)
    );
    assert_eq!(messages.len(), 1, "{}", summary(&all));
    let request = messages[0];
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/v1/messages")
    );
    assert_eq!(request.query.as_deref(), Some("beta=true"));
    assert_eq!(request.header("x-api-key"), Some("dummy"));
    let body = request.body.as_ref().unwrap();
    assert_eq!(body["stream"], true);
    assert_eq!(last_user_text(&body["messages"]), "hello there");
    let model_usage = result["modelUsage"].as_object().unwrap();
    assert_eq!(model_usage.len(), 1, "{}", run.context());
    let model_usage = model_usage.values().next().unwrap();
    assert_eq!(model_usage["inputTokens"], INPUT_TOKENS);
    assert_eq!(model_usage["outputTokens"], OUTPUT_TOKENS);
    assert_eq!(model_usage["cacheReadInputTokens"], CACHE_READ_INPUT_TOKENS);
    assert_eq!(
        model_usage["cacheCreationInputTokens"],
        CACHE_CREATION_INPUT_TOKENS
    );
    let model = body["model"].as_str().unwrap();
    assert_eq!(assistant["message"]["model"], model);
}

#[tokio::test]
async fn bash_tool_call_round_trip() {
    let mock = MockAnthropic::start().await;
    let sandbox = Sandbox::new();
    let input = json!({ "command": "echo hi", "description": "say hi" });
    let run = sandbox.run(
        &mock,
        "tool_bash",
        &["--allowedTools", "Bash"],
        &format!("TOOL Bash {input}"),
    );
    run.assert_exit(0);

    let blocks = run.assistant_blocks();
    assert_eq!(
        blocks[0],
        &json!({ "type": "text", "text": "Calling Bash." })
    );
    let tool_use = blocks
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap_or_else(|| panic!("no tool_use\n{}", run.context()));
    assert_eq!(tool_use["name"], "Bash");
    assert_eq!(tool_use["input"], input);
    assert_eq!(tool_use["id"], "toolu_mock_1");

    let user_blocks = run.user_blocks();
    let tool_result = user_blocks
        .iter()
        .find(|b| b["type"] == "tool_result")
        .unwrap_or_else(|| panic!("no tool_result\n{}", run.context()));
    assert_eq!(tool_result["tool_use_id"], "toolu_mock_1");
    assert_ne!(tool_result["is_error"], true, "{}", run.context());

    let result = run.result();
    assert_eq!(result["is_error"], false);
    assert_eq!(
        result["result"],
        "TOOL_RESULT_SEEN: hi",
        "{}",
        run.context()
    );
    assert_eq!(result["num_turns"], 2);
    assert_eq!(result["permission_denials"], json!([]));
    assert_result_usage(&run, 2);
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn denied_bash_tool_call() {
    let mock = MockAnthropic::start().await;
    let sandbox = Sandbox::new();
    let input = json!({ "command": "touch created_by_mock.txt" });
    let run = sandbox.run(
        &mock,
        "tool_bash_denied",
        &[],
        &format!("TOOL Bash {input}"),
    );
    run.assert_exit(0);
    assert!(
        !sandbox.cwd.path().join("created_by_mock.txt").exists(),
        "the denied command ran"
    );
    let user_blocks = run.user_blocks();
    let tool_result = user_blocks
        .iter()
        .find(|b| b["type"] == "tool_result")
        .unwrap_or_else(|| panic!("no tool_result\n{}", run.context()));
    assert_eq!(tool_result["is_error"], true, "{}", run.context());
    let result = run.result();
    assert!(
        result["result"]
            .as_str()
            .unwrap()
            .starts_with("TOOL_RESULT_SEEN: "),
        "{}",
        run.context()
    );
    let denials = result["permission_denials"].as_array().unwrap();
    assert_eq!(denials.len(), 1, "{}", run.context());
    assert_eq!(denials[0]["tool_name"], "Bash");
    assert_eq!(denials[0]["tool_use_id"], "toolu_mock_1");
    assert_eq!(denials[0]["tool_input"], input);
}

#[tokio::test]
async fn thinking_block() {
    let mock = MockAnthropic::start().await;
    let sandbox = Sandbox::new();
    let run = sandbox.run(&mock, "think", &[], "THINK please");
    run.assert_exit(0);
    let blocks = run.assistant_blocks();
    assert_eq!(blocks.len(), 2, "{}", run.context());
    assert_eq!(blocks[0]["type"], "thinking");
    assert_eq!(blocks[0]["thinking"], "Let me think about it.");
    assert_eq!(blocks[0]["signature"], "sig");
    let text = "Hello from mock-anthropic! user_msgs=1 you said: THINK please";
    assert_eq!(blocks[1], &json!({ "type": "text", "text": text }));
    assert_eq!(run.result()["result"], text);
}

#[tokio::test]
async fn partial_messages_are_streamed() {
    let mock = MockAnthropic::start().await;
    let sandbox = Sandbox::new();
    let run = sandbox.run(
        &mock,
        "partial_messages",
        &["--include-partial-messages"],
        "stream it",
    );
    run.assert_exit(0);
    let events: Vec<&Value> = run.of_type("stream_event").map(|l| &l["event"]).collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    for kind in [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ] {
        assert!(kinds.contains(&kind), "no {kind} event\n{}", run.context());
    }
    let deltas: String = events
        .iter()
        .filter(|e| e["delta"]["type"] == "text_delta")
        .map(|e| e["delta"]["text"].as_str().unwrap())
        .collect();
    let text = "Hello from mock-anthropic! user_msgs=1 you said: stream it";
    assert_eq!(deltas, text);
    assert!(
        events
            .iter()
            .filter(|e| e["delta"]["type"] == "text_delta")
            .count()
            >= 2
    );
    assert_eq!(run.result()["result"], text);
}

#[tokio::test]
async fn resume_carries_history() {
    let mock = MockAnthropic::start().await;
    let sandbox = Sandbox::new();
    let first = sandbox.run(&mock, "resume_first", &[], "first turn");
    first.assert_exit(0);
    let session = first.session_id();
    let second = sandbox.run(
        &mock,
        "resume_second",
        &["--resume", &session],
        "second turn",
    );
    second.assert_exit(0);
    assert_eq!(second.session_id(), session, "{}", second.context());
    assert_eq!(
        second.result()["result"],
        "Hello from mock-anthropic! user_msgs=2 you said: second turn"
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let history = requests[1]["messages"].to_string();
    assert!(history.contains("first turn"), "{history}");
    assert!(
        history.contains("Hello from mock-anthropic! user_msgs=1"),
        "{history}"
    );
}

#[tokio::test]
async fn json_schema_structured_output() {
    let mock = MockAnthropic::start().await;
    let sandbox = Sandbox::new();
    let schema = json!({
        "type": "object",
        "properties": {
            "answer": { "type": "string" },
            "count": { "type": "integer" },
            "mood": { "enum": ["happy", "sad"] },
            "tags": { "type": "array", "items": { "type": "string" }, "minItems": 1 },
        },
        "required": ["answer", "count", "mood", "tags"],
        "additionalProperties": false,
    });
    let run = sandbox.run(
        &mock,
        "json_schema",
        &["--json-schema", &schema.to_string()],
        "give me data",
    );
    run.assert_exit(0);
    let expected = json!({ "answer": "mock", "count": 1, "mood": "happy", "tags": ["mock"] });
    let result = run.result();
    assert_eq!(result["is_error"], false, "{}", run.context());
    assert_eq!(result["structured_output"], expected, "{}", run.context());
    let text: Value = serde_json::from_str(result["result"].as_str().unwrap()).unwrap();
    assert_eq!(text, expected, "result.result is the JSON text");
    assert_eq!(
        mock.requests().len(),
        1,
        "no request after StructuredOutput"
    );
    let tool_use = run
        .assistant_blocks()
        .into_iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap_or_else(|| panic!("no tool_use\n{}", run.context()));
    assert_eq!(tool_use["name"], "StructuredOutput");
    assert_eq!(tool_use["input"], expected);
    let tools = mock.requests()[0]["tools"].clone();
    let offered = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "StructuredOutput")
        .expect("StructuredOutput offered");
    assert_eq!(offered["input_schema"]["properties"], schema["properties"]);
}

#[tokio::test]
async fn overloaded_error_is_retried_then_reported() {
    let mock = MockAnthropic::start().await;
    let sandbox = Sandbox::new();
    let run = sandbox.run(&mock, "error_529", &[], "MOCK_ERROR 529");
    run.assert_exit(1);
    let result = run.result();
    assert_eq!(result["is_error"], true, "{}", run.context());
    assert_eq!(result["api_error_status"], 529, "{}", run.context());
    let retry = run
        .of_type("system")
        .find(|l| l["subtype"] == "api_retry")
        .unwrap_or_else(|| panic!("no api_retry line\n{}", run.context()));
    assert_eq!(retry["error_status"], 529);
    let all = mock.all_requests();
    let statuses: Vec<u16> = messages_calls(&all).map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [529, 529],
        "one try and one retry: {}",
        summary(&all)
    );
}

#[tokio::test]
async fn invalid_request_error_is_reported() {
    let mock = MockAnthropic::start().await;
    let sandbox = Sandbox::new();
    let run = sandbox.run(&mock, "error_400", &[], "MOCK_ERROR 400");
    run.assert_exit(1);
    let result = run.result();
    assert_eq!(result["is_error"], true, "{}", run.context());
    assert_eq!(result["api_error_status"], 400, "{}", run.context());
    let all = mock.all_requests();
    let statuses: Vec<u16> = messages_calls(&all).map(|r| r.status).collect();
    assert_eq!(statuses, [400], "400 is not retried: {}", summary(&all));
}

/// `MOCK_SLOW` streams deltas slowly, so the CLI's partial output shows up long before the
/// reply ends and the process can be killed mid-turn.
#[tokio::test]
async fn slow_stream_can_be_killed_mid_turn() {
    let mock = MockAnthropic::start().await;
    let sandbox = Sandbox::new();
    let mut child = sandbox
        .command(&mock, &["--include-partial-messages"])
        .spawn()
        .expect("spawn claude");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"MOCK_SLOW").unwrap();
    drop(stdin);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + RUN_TIMEOUT;
    let mut captured = String::new();
    let mut saw_delta = false;
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        captured.push_str(&line);
        captured.push('\n');
        let value: Value = serde_json::from_str(&line).unwrap_or_default();
        if value["event"]["delta"]["type"] == "text_delta" {
            saw_delta = true;
            break;
        }
    }
    // The whole reply takes SLOW_CHUNKS * SLOW_INTERVAL; two intervals after the first delta
    // the turn must still be running.
    std::thread::sleep(SLOW_INTERVAL * 2);
    let still_running = matches!(child.try_wait(), Ok(None));
    child.kill().expect("kill claude");
    let status = child.wait().expect("wait claude");
    save_capture("mock_slow_killed", &captured);
    assert!(saw_delta, "no text delta before the end:\n{captured}");
    assert!(still_running, "the turn ended early:\n{captured}");
    assert!(!status.success());
    assert!(!captured.contains("\"type\":\"result\""), "{captured}");
    assert_eq!(mock.requests().len(), 1);
}

/// The endpoints the CLI does not use in these scenarios, over raw HTTP/1.1.
#[tokio::test]
async fn auxiliary_endpoints_and_unknown_paths() {
    let mock = MockAnthropic::start().await;
    let addr = mock.base_url().trim_start_matches("http://").to_string();
    let http = |request: String| -> (u16, Value) {
        let mut stream = TcpStream::connect(&addr).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).unwrap();
        let status = raw[9..12].parse().unwrap();
        let body = raw.split_once("\r\n\r\n").unwrap().1;
        (status, serde_json::from_str(body).unwrap())
    };
    let post = |path: &str, body: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let (status, body) = http(post("/v1/messages/count_tokens", r#"{"messages":[]}"#));
    assert_eq!(
        (status, body),
        (200, json!({ "input_tokens": COUNT_TOKENS }))
    );
    let (status, body) =
        http("GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".into());
    assert_eq!(status, 200);
    assert_eq!(body["data"][0]["id"], DEFAULT_MODEL);
    let (status, body) = http("GET /nope HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".into());
    assert_eq!(status, 404);
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "not_found_error");
    let message = r#"{"model":"m","messages":[{"role":"user","content":"MOCK_ERROR 429"}]}"#;
    let (status, body) = http(post("/v1/messages", message));
    assert_eq!(status, 429);
    assert_eq!(body["error"]["type"], "rate_limit_error");
    let message = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let (status, body) = http(post("/v1/messages", message));
    assert_eq!(status, 200);
    assert_eq!(
        body["content"][0]["text"],
        "Hello from mock-anthropic! user_msgs=1 you said: hi"
    );
    assert_eq!(body["usage"]["output_tokens"], OUTPUT_TOKENS);

    let paths: Vec<(String, String, u16)> = mock
        .all_requests()
        .into_iter()
        .map(|r| (r.method, r.path, r.status))
        .collect();
    let expected = [
        ("POST", "/v1/messages/count_tokens", 200),
        ("GET", "/v1/models", 200),
        ("GET", "/nope", 404),
        ("POST", "/v1/messages", 429),
        ("POST", "/v1/messages", 200),
    ];
    assert_eq!(
        paths,
        expected
            .iter()
            .map(|(m, p, s)| (m.to_string(), p.to_string(), *s))
            .collect::<Vec<_>>()
    );
    assert_eq!(mock.requests().len(), 2);
}
