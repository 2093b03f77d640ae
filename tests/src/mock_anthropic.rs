//! A scripted mock of the Anthropic Messages API, for end-to-end tests that run the real
//! Claude Code CLI offline.
//!
//! This file owns the mock server ([`MockAnthropic`]), its deterministic "brain", the
//! environment that points the CLI at it ([`claude_env`]) and the lookup of the installed CLI
//! ([`claude_path`]). It listens on `127.0.0.1` only, on a port chosen by the OS, and runs on
//! its own thread with its own tokio runtime, so a test may block (for example in
//! `std::process::Command::output`) while the CLI talks to it.
//!
//! # Endpoints
//!
//! * `POST /v1/messages` (the CLI adds `?beta=true`): the reply chosen by the brain, streamed
//!   as server-sent events when the body has `"stream": true`, else as one JSON message.
//! * `POST /v1/messages/count_tokens`: `{"input_tokens": 10}` ([`COUNT_TOKENS`]).
//! * `GET /v1/models`: a one-model list.
//! * anything else: 404 with an Anthropic error body.
//!
//! Every request is recorded ([`MockAnthropic::all_requests`]); the bodies of the Messages
//! calls are also available on their own ([`MockAnthropic::requests`]). Besides its
//! `POST /v1/messages?beta=true` calls, Claude Code 2.1.197 sends one `HEAD /` at start-up
//! (a connection warm-up, `user-agent: Bun/...`, possibly after the first Messages call); it
//! gets the 404 and ignores it.
//!
//! # The brain
//!
//! The reply is chosen from the latest user turn: the last message whose role is `user`
//! (`role: "system"` entries, which the CLI puts in the middle of `messages`, are skipped).
//! The *user text* is the last text block of that message that is not a `<system-reminder>`
//! (or the message itself when its content is a string). The first rule that matches wins:
//!
//! 1. that message has a `tool_result` block → text
//!    `TOOL_RESULT_SEEN: <first 120 chars of the result text>`;
//! 2. the user text contains `TOOL <name> <json>` → text `Calling <name>.`, then a `tool_use`
//!    of `<name>` with that input and id `toolu_mock_<n>` (n counts tool calls from 1 per
//!    server), stop reason `tool_use`. Shell-escaped JSON (`{\"a\":1}`) is accepted too;
//! 3. the request offers a tool named `StructuredOutput` (how `--json-schema` reaches the API)
//!    → a call of it with an instance synthesised from its `input_schema` (first `const` or
//!    `enum` value, strings `"mock"`, numbers `1`, booleans `true`, objects with every
//!    property, arrays with `minItems` items), stop reason `tool_use`;
//! 4. the user text contains `THINK` → a thinking block (`"Let me think"`, `" about it."`,
//!    signature `"sig"`), then the rule-7 text;
//! 5. `MOCK_ERROR <status>` → that HTTP status with `{"type":"error","error":{...}}`
//!    (529 `overloaded_error`, 400 `invalid_request_error`, 429 `rate_limit_error`, 500
//!    `api_error`, ...);
//! 6. `MOCK_SLOW` → 20 text deltas ([`SLOW_CHUNKS`]) 250 ms apart ([`SLOW_INTERVAL`]);
//! 7. otherwise → text `Hello from mock-anthropic! user_msgs=<n> you said: <text>`, where `n`
//!    counts the user messages that carry text (not only tool results or system reminders):
//!    it proves that a resumed session carried its history.
//!
//! Text is streamed in at least two `text_delta` chunks, tool input in two
//! `input_json_delta` chunks. The event sequence is `message_start`, `ping`, then per block
//! `content_block_start` / `content_block_delta`... / `content_block_stop`, then
//! `message_delta` (stop reason and usage) and `message_stop`. The model reported is the
//! request's `model`.
//!
//! # Usage numbers
//!
//! Every reply reports the same usage. `message_start` carries `input_tokens` =
//! [`INPUT_TOKENS`], `output_tokens` = [`START_OUTPUT_TOKENS`], `cache_read_input_tokens` =
//! [`CACHE_READ_INPUT_TOKENS`], `cache_creation_input_tokens` =
//! [`CACHE_CREATION_INPUT_TOKENS`]; `message_delta` carries `output_tokens` =
//! [`OUTPUT_TOKENS`].
//!
//! What Claude Code 2.1.197 makes of them (`claude -p --output-format stream-json
//! --verbose`, one API request):
//!
//! * each `assistant` line's `message.usage` is the `message_start` usage as received:
//!   `input_tokens` 21, `output_tokens` 1, `cache_read_input_tokens` 5,
//!   `cache_creation_input_tokens` 3 (the `message_delta` update is not reflected there);
//! * the `result` line's `usage` is the final usage of the message, summed over the API
//!   requests of the run: `input_tokens` 21, `cache_read_input_tokens` 5,
//!   `cache_creation_input_tokens` 3 and `output_tokens` 9 (the `message_delta` value
//!   replaces the `message_start` one) per request; `modelUsage.<model>` has the same
//!   numbers as `inputTokens`, `outputTokens`, `cacheReadInputTokens`,
//!   `cacheCreationInputTokens`, keyed by the CLI's own model name (`claude-opus-4-8[1m]`
//!   by default, not the `model` of the reply); `total_cost_usd` is 0.00035125 per request.
//!   A run with one tool call makes two requests, so its `result.usage` has
//!   `input_tokens` 42, `cache_read_input_tokens` 10, `cache_creation_input_tokens` 6 and
//!   `output_tokens` 18.
//!
//! API errors make no usage: the CLI reports a synthetic assistant message
//! (`model: "<synthetic>"`, all usage 0) and `result.is_error: true`, `api_error_status`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use futures::StreamExt;
use serde_json::{Map, Value, json};

/// `usage.input_tokens` of every reply (in `message_start`).
pub const INPUT_TOKENS: u64 = 21;
/// `usage.output_tokens` in `message_start`; [`OUTPUT_TOKENS`] replaces it at the end.
pub const START_OUTPUT_TOKENS: u64 = 1;
/// `usage.cache_read_input_tokens` of every reply (in `message_start`).
pub const CACHE_READ_INPUT_TOKENS: u64 = 5;
/// `usage.cache_creation_input_tokens` of every reply (in `message_start`).
pub const CACHE_CREATION_INPUT_TOKENS: u64 = 3;
/// `usage.output_tokens` in `message_delta`: the final output count of every reply.
pub const OUTPUT_TOKENS: u64 = 9;
/// `input_tokens` answered by `POST /v1/messages/count_tokens`.
pub const COUNT_TOKENS: u64 = 10;
/// Number of text deltas streamed for `MOCK_SLOW`.
pub const SLOW_CHUNKS: usize = 20;
/// Pause before each `MOCK_SLOW` text delta.
pub const SLOW_INTERVAL: Duration = Duration::from_millis(250);
/// Model named by `GET /v1/models` and used when a request names none.
pub const DEFAULT_MODEL: &str = "claude-opus-4-8";
/// Command that installs the Claude Code CLI where [`claude_path`] looks for it.
pub const CLAUDE_INSTALL_HINT: &str =
    "npm install --prefix $HOME/.cache/agent-adaptor-clis/claude @anthropic-ai/claude-code@2.1.197";

/// Upper bound on a request body the mock reads.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// One HTTP request the mock received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// HTTP method, e.g. `POST`.
    pub method: String,
    /// Path without the query, e.g. `/v1/messages`.
    pub path: String,
    /// Raw query string, e.g. `beta=true`, if any.
    pub query: Option<String>,
    /// Headers, names lower-cased, in the order received (non-UTF-8 values are dropped).
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON, or `None` when empty or not JSON.
    pub body: Option<Value>,
    /// The status the mock answered with.
    pub status: u16,
}

impl RecordedRequest {
    /// The value of header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Shared state of a running mock.
#[derive(Default)]
struct Shared {
    log: Mutex<Vec<RecordedRequest>>,
    tool_calls: AtomicU64,
    messages: AtomicU64,
}

/// A running mock Anthropic API on `127.0.0.1`. It stops when dropped.
pub struct MockAnthropic {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MockAnthropic {
    /// Starts the mock on `127.0.0.1` and an OS-chosen port. It serves from a thread of its
    /// own, so the caller's runtime (if any) may block while a CLI talks to it.
    pub async fn start() -> MockAnthropic {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("listener address");
        let shared = Arc::new(Shared::default());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let state = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("mock-anthropic-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("mock runtime");
                runtime.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                    let app = Router::new().fallback(handle).with_state(state);
                    let server = axum::serve(listener, app);
                    tokio::select! {
                        result = server => {
                            if let Err(err) = result {
                                eprintln!("mock-anthropic: server error: {err}");
                            }
                        }
                        _ = stop_rx => {}
                    }
                });
                // Dropping the runtime cancels the connections still being served.
                drop(runtime);
            })
            .expect("spawn mock thread");
        MockAnthropic {
            addr,
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// Base URL for `ANTHROPIC_BASE_URL`, e.g. `http://127.0.0.1:40123`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The JSON bodies of the `POST /v1/messages` requests received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.log()
            .iter()
            .filter(|r| r.method == "POST" && r.path == "/v1/messages")
            .filter_map(|r| r.body.clone())
            .collect()
    }

    /// Every request received so far (any path, including unknown ones), in order.
    pub fn all_requests(&self) -> Vec<RecordedRequest> {
        self.log().clone()
    }

    /// Stops the server now (dropping the handle does the same).
    pub fn shutdown(self) {
        drop(self);
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Vec<RecordedRequest>> {
        self.shared.log.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for MockAnthropic {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Where the Claude Code CLI is installed: `$ADAPTOR_CLAUDE_BIN` if set, else
/// `$HOME/.cache/agent-adaptor-clis/claude/node_modules/.bin/claude` if it exists.
/// See [`CLAUDE_INSTALL_HINT`] for how to install it.
pub fn claude_path() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("ADAPTOR_CLAUDE_BIN").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    let home = std::env::var_os("HOME")?;
    let path =
        PathBuf::from(home).join(".cache/agent-adaptor-clis/claude/node_modules/.bin/claude");
    path.exists().then_some(path)
}

/// Environment for running the Claude Code CLI against the mock at `base_url`, with `home`
/// (a temporary directory) as its `HOME`, where it keeps its sessions
/// (`.claude/projects/<cwd-slug>/<session>.jsonl`). It turns off the auto-updater,
/// telemetry, error reporting and every other non-essential network use, and limits API
/// retries to one. `TMPDIR` is `<home>/tmp` (the CLI creates it): otherwise the CLI leaves a
/// `claude-<uid>/<cwd-slug>/` directory in the system temp dir after every session.
pub fn claude_env(home: &Path, base_url: &str) -> Vec<(String, String)> {
    [
        ("HOME", home.display().to_string()),
        ("TMPDIR", home.join("tmp").display().to_string()),
        ("ANTHROPIC_BASE_URL", base_url.to_string()),
        ("ANTHROPIC_API_KEY", "dummy".to_string()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_string()),
        ("DISABLE_AUTOUPDATER", "1".to_string()),
        ("DISABLE_TELEMETRY", "1".to_string()),
        ("DISABLE_ERROR_REPORTING", "1".to_string()),
        ("DISABLE_BUG_COMMAND", "1".to_string()),
        (
            "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL",
            "1".to_string(),
        ),
        ("CLAUDE_CODE_MAX_RETRIES", "1".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The single handler: records the request and dispatches on method and path.
async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_BODY)
        .await
        .unwrap_or_default();
    let body: Option<Value> = serde_json::from_slice(&bytes).ok();
    let path = parts.uri.path().to_string();
    let response = match (&parts.method, path.as_str()) {
        (&Method::POST, "/v1/messages") => {
            let n = shared.messages.fetch_add(1, Ordering::SeqCst) + 1;
            messages(&shared, n, body.as_ref().unwrap_or(&Value::Null))
        }
        (&Method::POST, "/v1/messages/count_tokens") => {
            json_response(StatusCode::OK, &json!({ "input_tokens": COUNT_TOKENS }))
        }
        (&Method::GET, "/v1/models") => json_response(
            StatusCode::OK,
            &json!({
                "data": [{
                    "type": "model",
                    "id": DEFAULT_MODEL,
                    "display_name": "Mock Claude",
                    "created_at": "2025-01-01T00:00:00Z",
                }],
                "has_more": false,
                "first_id": DEFAULT_MODEL,
                "last_id": DEFAULT_MODEL,
            }),
        ),
        _ => error_response(
            StatusCode::NOT_FOUND,
            "not_found_error",
            &format!("mock-anthropic: no route for {} {}", parts.method, path),
        ),
    };
    let record = RecordedRequest {
        method: parts.method.to_string(),
        path,
        query: parts.uri.query().map(str::to_string),
        headers: parts
            .headers
            .iter()
            .filter_map(|(n, v)| Some((n.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect(),
        body,
        status: response.status().as_u16(),
    };
    shared
        .log
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(record);
    response
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn error_response(status: StatusCode, kind: &str, message: &str) -> Response {
    json_response(
        status,
        &json!({ "type": "error", "error": { "type": kind, "message": message } }),
    )
}

/// One content block of a reply.
#[derive(Debug, Clone)]
enum Block {
    Text(String),
    Thinking {
        chunks: Vec<String>,
        signature: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

/// What the brain decided.
#[derive(Debug)]
enum Reply {
    Message {
        blocks: Vec<Block>,
        stop_reason: &'static str,
    },
    /// `MOCK_SLOW`: text streamed slowly, chunk by chunk.
    Slow(Vec<String>),
    Error(u16),
}

/// `POST /v1/messages`.
fn messages(shared: &Shared, n: u64, body: &Value) -> Response {
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_MODEL)
        .to_string();
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let message_id = format!("msg_mock_{n}");
    let (blocks, stop_reason, interval) = match decide(shared, body) {
        Reply::Error(status) => return api_error(status),
        Reply::Message {
            blocks,
            stop_reason,
        } => (blocks, stop_reason, None),
        Reply::Slow(chunks) => (vec![Block::Text(chunks.concat())], "end_turn", Some(chunks)),
    };
    let mut response = if stream {
        let events = sse_events(&message_id, &model, &blocks, stop_reason, interval);
        let body = futures::stream::iter(events).then(|(name, data, slow)| async move {
            if slow {
                tokio::time::sleep(SLOW_INTERVAL).await;
            }
            Ok::<_, std::convert::Infallible>(format!("event: {name}\ndata: {data}\n\n"))
        });
        let mut response = Response::new(Body::from_stream(body));
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        response
    } else {
        let content: Vec<Value> = blocks.iter().map(block_json).collect();
        let mut usage = start_usage();
        usage["output_tokens"] = json!(OUTPUT_TOKENS);
        json_response(
            StatusCode::OK,
            &json!({
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": null,
                "usage": usage,
            }),
        )
    };
    if let Ok(value) = HeaderValue::from_str(&format!("req_mock_{n}")) {
        response.headers_mut().insert("request-id", value);
    }
    response
}

fn api_error(status: u16) -> Response {
    let (kind, message) = match status {
        400 => ("invalid_request_error", "mock-anthropic: invalid request"),
        401 => ("authentication_error", "invalid x-api-key"),
        403 => ("permission_error", "permission denied"),
        404 => ("not_found_error", "not found"),
        413 => ("request_too_large", "request too large"),
        429 => ("rate_limit_error", "Rate limited"),
        529 => ("overloaded_error", "Overloaded"),
        _ => ("api_error", "Internal server error"),
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    error_response(status, kind, message)
}

fn start_usage() -> Value {
    json!({
        "input_tokens": INPUT_TOKENS,
        "output_tokens": START_OUTPUT_TOKENS,
        "cache_read_input_tokens": CACHE_READ_INPUT_TOKENS,
        "cache_creation_input_tokens": CACHE_CREATION_INPUT_TOKENS,
    })
}

fn block_json(block: &Block) -> Value {
    match block {
        Block::Text(text) => json!({ "type": "text", "text": text }),
        Block::Thinking { chunks, signature } => {
            json!({ "type": "thinking", "thinking": chunks.concat(), "signature": signature })
        }
        Block::ToolUse { id, name, input } => {
            json!({ "type": "tool_use", "id": id, "name": name, "input": input })
        }
    }
}

/// The SSE events of a streamed reply: (event name, data, pause before it).
fn sse_events(
    message_id: &str,
    model: &str,
    blocks: &[Block],
    stop_reason: &str,
    slow_chunks: Option<Vec<String>>,
) -> Vec<(&'static str, Value, bool)> {
    let mut events = vec![
        (
            "message_start",
            json!({
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": null,
                    "stop_sequence": null,
                    "usage": start_usage(),
                },
            }),
            false,
        ),
        ("ping", json!({ "type": "ping" }), false),
    ];
    for (index, block) in blocks.iter().enumerate() {
        let (start, deltas, slow): (Value, Vec<Value>, bool) = match block {
            Block::Text(text) => {
                let (chunks, slow) = match &slow_chunks {
                    Some(chunks) => (chunks.clone(), true),
                    None => (split_in_two(text), false),
                };
                (
                    json!({ "type": "text", "text": "" }),
                    chunks
                        .into_iter()
                        .map(|t| json!({ "type": "text_delta", "text": t }))
                        .collect(),
                    slow,
                )
            }
            Block::Thinking { chunks, signature } => {
                let mut deltas: Vec<Value> = chunks
                    .iter()
                    .map(|t| json!({ "type": "thinking_delta", "thinking": t }))
                    .collect();
                deltas.push(json!({ "type": "signature_delta", "signature": signature }));
                (
                    json!({ "type": "thinking", "thinking": "", "signature": "" }),
                    deltas,
                    false,
                )
            }
            Block::ToolUse { id, name, input } => (
                json!({ "type": "tool_use", "id": id, "name": name, "input": {} }),
                split_in_two(&input.to_string())
                    .into_iter()
                    .map(|p| json!({ "type": "input_json_delta", "partial_json": p }))
                    .collect(),
                false,
            ),
        };
        events.push((
            "content_block_start",
            json!({ "type": "content_block_start", "index": index, "content_block": start }),
            false,
        ));
        for delta in deltas {
            events.push((
                "content_block_delta",
                json!({ "type": "content_block_delta", "index": index, "delta": delta }),
                slow,
            ));
        }
        events.push((
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": index }),
            false,
        ));
    }
    events.push((
        "message_delta",
        json!({
            "type": "message_delta",
            "delta": { "stop_reason": stop_reason, "stop_sequence": null },
            "usage": { "output_tokens": OUTPUT_TOKENS },
        }),
        false,
    ));
    events.push(("message_stop", json!({ "type": "message_stop" }), false));
    events
}

/// Splits `s` into two non-empty halves on a char boundary (one piece if it is shorter than
/// two chars).
fn split_in_two(s: &str) -> Vec<String> {
    let count = s.chars().count();
    if count < 2 {
        return vec![s.to_string()];
    }
    let at = s.char_indices().nth(count / 2).map_or(s.len(), |(i, _)| i);
    vec![s[..at].to_string(), s[at..].to_string()]
}

/// The brain: the reply to a Messages request (see the module doc).
fn decide(shared: &Shared, body: &Value) -> Reply {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let last_user = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"));
    let content = last_user.and_then(|m| m.get("content"));

    // 1. A tool result.
    if let Some(result) = content
        .and_then(Value::as_array)
        .and_then(|blocks| blocks.iter().find(|b| block_type(b) == Some("tool_result")))
    {
        let text: String = tool_result_text(result).chars().take(120).collect();
        return text_reply(format!("TOOL_RESULT_SEEN: {text}"));
    }

    let text = content.and_then(user_text).unwrap_or_default();

    // 2. TOOL <name> <json>.
    if let Some((name, input)) = parse_tool_command(&text) {
        return Reply::Message {
            blocks: vec![
                Block::Text(format!("Calling {name}.")),
                tool_use(shared, name, input),
            ],
            stop_reason: "tool_use",
        };
    }

    // 3. Structured output.
    if let Some(tool) = body
        .get("tools")
        .and_then(Value::as_array)
        .and_then(|tools| {
            tools
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("StructuredOutput"))
        })
    {
        let schema = tool.get("input_schema").cloned().unwrap_or(json!({}));
        let input = synthesise(&schema, &schema, 0);
        return Reply::Message {
            blocks: vec![tool_use(shared, "StructuredOutput".to_string(), input)],
            stop_reason: "tool_use",
        };
    }

    let hello = format!(
        "Hello from mock-anthropic! user_msgs={} you said: {text}",
        count_user_text_messages(messages)
    );

    // 4. THINK.
    if text.contains("THINK") {
        return Reply::Message {
            blocks: vec![
                Block::Thinking {
                    chunks: vec!["Let me think".to_string(), " about it.".to_string()],
                    signature: "sig".to_string(),
                },
                Block::Text(hello),
            ],
            stop_reason: "end_turn",
        };
    }

    // 5. MOCK_ERROR <status>.
    if let Some(rest) = text.split("MOCK_ERROR").nth(1) {
        let digits: String = rest
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        return Reply::Error(digits.parse().unwrap_or(500));
    }

    // 6. MOCK_SLOW.
    if text.contains("MOCK_SLOW") {
        return Reply::Slow(
            (1..=SLOW_CHUNKS)
                .map(|i| format!("slow chunk {i}. "))
                .collect(),
        );
    }

    // 7. Default.
    text_reply(hello)
}

fn text_reply(text: String) -> Reply {
    Reply::Message {
        blocks: vec![Block::Text(text)],
        stop_reason: "end_turn",
    }
}

fn tool_use(shared: &Shared, name: String, input: Value) -> Block {
    let n = shared.tool_calls.fetch_add(1, Ordering::SeqCst) + 1;
    Block::ToolUse {
        id: format!("toolu_mock_{n}"),
        name,
        input,
    }
}

fn block_type(block: &Value) -> Option<&str> {
    block.get("type").and_then(Value::as_str)
}

fn is_system_reminder(text: &str) -> bool {
    text.trim_start().starts_with("<system-reminder>")
}

/// The user text of a message's content: the string itself, or its last text block that is
/// not a `<system-reminder>`.
fn user_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(blocks) => blocks
            .iter()
            .rev()
            .filter(|b| block_type(b) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .find(|t| !is_system_reminder(t))
            .map(str::to_string),
        _ => None,
    }
}

/// The text of a `tool_result` block (a string, or the concatenated text blocks).
fn tool_result_text(result: &Value) -> String {
    match result.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// User messages that carry text of their own (not only tool results or system reminders).
fn count_user_text_messages(messages: &[Value]) -> usize {
    messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .filter(|m| match m.get("content") {
            Some(Value::String(s)) => !s.trim().is_empty() && !is_system_reminder(s),
            Some(Value::Array(_)) => m.get("content").and_then(user_text).is_some(),
            _ => false,
        })
        .count()
}

/// Finds `TOOL <name> <json>` in `text`; the JSON may be shell-escaped (`{\"a\":1}`).
fn parse_tool_command(text: &str) -> Option<(String, Value)> {
    let mut rest = text;
    while let Some(at) = rest.find("TOOL ") {
        let after = rest[at + "TOOL ".len()..].trim_start();
        let name_len = after.find(char::is_whitespace).unwrap_or(after.len());
        let (name, tail) = after.split_at(name_len);
        if !name.is_empty()
            && let Some(input) = first_json(tail.trim_start())
        {
            return Some((name.to_string(), input));
        }
        rest = &rest[at + 1..];
    }
    None
}

/// The JSON value at the start of `s` (trailing text allowed), or the same after
/// unescaping `\"`.
fn first_json(s: &str) -> Option<Value> {
    let parse = |s: &str| {
        serde_json::Deserializer::from_str(s)
            .into_iter::<Value>()
            .next()
            .and_then(Result::ok)
    };
    parse(s).or_else(|| parse(&s.replace("\\\"", "\"")))
}

/// A JSON instance of `schema` (see the module doc); `root` resolves local `$ref`s.
fn synthesise(schema: &Value, root: &Value, depth: usize) -> Value {
    if depth > 32 {
        return Value::Null;
    }
    let Some(obj) = schema.as_object() else {
        // `true` (or anything unexpected) accepts any value.
        return json!("mock");
    };
    if let Some(value) = obj.get("const") {
        return value.clone();
    }
    if let Some(first) = obj
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|v| v.first())
    {
        return first.clone();
    }
    if let Some(target) = obj
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix('#'))
        .and_then(|pointer| root.pointer(pointer))
    {
        return synthesise(target, root, depth + 1);
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(first) = obj
            .get(key)
            .and_then(Value::as_array)
            .and_then(|v| v.first())
        {
            return synthesise(first, root, depth + 1);
        }
    }
    let kind = match obj.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if obj.contains_key("properties") => "object",
        _ if obj.contains_key("items") => "array",
        _ => "string",
    };
    match kind {
        "object" => {
            let mut out = Map::new();
            if let Some(props) = obj.get("properties").and_then(Value::as_object) {
                for (name, prop) in props {
                    out.insert(name.clone(), synthesise(prop, root, depth + 1));
                }
            }
            Value::Object(out)
        }
        "array" => {
            let count = obj.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = obj.get("items").cloned().unwrap_or(json!({}));
            (0..count)
                .map(|_| synthesise(&item, root, depth + 1))
                .collect()
        }
        "integer" | "number" => json!(1),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => json!("mock"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthesises_schema_instances() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": { "type": "string" },
                "count": { "type": "integer" },
                "ok": { "type": "boolean" },
                "kind": { "enum": ["a", "b"] },
                "fixed": { "const": 7 },
                "tags": { "type": "array", "items": { "type": "string" }, "minItems": 2 },
                "inner": { "$ref": "#/$defs/inner" },
            },
            "$defs": { "inner": { "type": "object", "properties": { "x": { "type": "number" } } } },
        });
        assert_eq!(
            synthesise(&schema, &schema, 0),
            json!({
                "name": "mock", "count": 1, "ok": true, "kind": "a", "fixed": 7,
                "tags": ["mock", "mock"], "inner": { "x": 1 },
            })
        );
    }

    #[test]
    fn parses_tool_commands() {
        assert_eq!(
            parse_tool_command(r#"please TOOL Bash {"command":"echo hi"} thanks"#),
            Some(("Bash".to_string(), json!({ "command": "echo hi" })))
        );
        assert_eq!(
            parse_tool_command(r#"TOOL Read {\"file_path\":\"/x\"}"#),
            Some(("Read".to_string(), json!({ "file_path": "/x" })))
        );
        assert_eq!(parse_tool_command("TOOL_RESULT_SEEN: x"), None);
    }

    #[test]
    fn finds_user_text_and_counts_turns() {
        let messages = vec![
            json!({ "role": "user", "content": [
                { "type": "text", "text": "<system-reminder>ctx</system-reminder>" },
                { "type": "text", "text": "first" },
            ]}),
            json!({ "role": "assistant", "content": [{ "type": "text", "text": "hi" }] }),
            json!({ "role": "system", "content": "mid-conversation" }),
            json!({ "role": "user", "content": [
                { "type": "text", "text": "second" },
                { "type": "text", "text": "<system-reminder>x</system-reminder>" },
            ]}),
        ];
        let shared = Shared::default();
        match decide(&shared, &json!({ "messages": messages })) {
            Reply::Message { blocks, .. } => match &blocks[0] {
                Block::Text(t) => {
                    assert_eq!(t, "Hello from mock-anthropic! user_msgs=2 you said: second")
                }
                other => panic!("unexpected block {other:?}"),
            },
            other => panic!("unexpected reply {other:?}"),
        }
    }

    #[test]
    fn splits_text_in_two() {
        assert_eq!(split_in_two("héllo"), vec!["hé", "llo"]);
        assert_eq!(split_in_two("x"), vec!["x"]);
    }
}
