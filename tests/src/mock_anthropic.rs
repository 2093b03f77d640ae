//! A scripted mock of the Anthropic Messages API, for end-to-end tests that run the real
//! Claude Code CLI offline.
//!
//! This file owns the mock server ([`MockAnthropic`]), its deterministic "brain", the
//! environment that points the CLI at it ([`claude_env`]) and the lookup of the installed CLI
//! ([`claude_path`]). It listens on `127.0.0.1` only, on a port chosen by the OS, and runs on
//! its own thread with its own tokio runtime, so a test may block (for example in
//! `std::process::Command::output`) while the CLI talks to it. That server plumbing, the SSE
//! framing, request recording and the brain's shared parts (`TOOL` parsing, schema
//! synthesis) live in [`crate::mock_http`].
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

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

pub use crate::mock_http::RecordedRequest;
use crate::mock_http::{
    Incoming, MockServer, SseEvent, json_response, mock_error_status, parse_tool_command,
    slow_chunks, split_in_two, sse_response, synthesise,
};

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

/// Counters of a running mock.
#[derive(Default)]
struct Shared {
    tool_calls: AtomicU64,
    messages: AtomicU64,
}

/// A running mock Anthropic API on `127.0.0.1`. It stops when dropped.
pub struct MockAnthropic {
    server: MockServer,
}

impl MockAnthropic {
    /// Starts the mock on `127.0.0.1` and an OS-chosen port. It serves from a thread of its
    /// own, so the caller's runtime (if any) may block while a CLI talks to it.
    pub async fn start() -> MockAnthropic {
        let shared = Arc::new(Shared::default());
        MockAnthropic {
            server: MockServer::start("mock-anthropic", move |request| handle(&shared, request)),
        }
    }

    /// Base URL for `ANTHROPIC_BASE_URL`, e.g. `http://127.0.0.1:40123`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// The JSON bodies of the `POST /v1/messages` requests received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.server.posted_bodies("/v1/messages")
    }

    /// Every request received so far (any path, including unknown ones), in order.
    pub fn all_requests(&self) -> Vec<RecordedRequest> {
        self.server.all_requests()
    }

    /// Stops the server now (dropping the handle does the same).
    pub fn shutdown(self) {
        drop(self);
    }
}

/// Where the Claude Code CLI is installed: `$ADAPTOR_CLAUDE_BIN` if set, else
/// `$HOME/.cache/agent-adaptor-clis/claude/node_modules/.bin/claude` if it exists.
/// See [`CLAUDE_INSTALL_HINT`] for how to install it.
pub fn claude_path() -> Option<PathBuf> {
    crate::mock_http::installed_cli("ADAPTOR_CLAUDE_BIN", "claude", "claude")
}

/// The version of the Claude Code CLI the tests run (`$ADAPTOR_CLAUDE_VERSION`, else the
/// oldest supported one, 2.1.197): `./x.sh test` runs the Claude end-to-end tests once per
/// pinned version.
pub fn claude_version() -> String {
    std::env::var("ADAPTOR_CLAUDE_VERSION")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "2.1.197".to_owned())
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

/// The handler: dispatches on method and path (the request is recorded by [`MockServer`]).
fn handle(shared: &Shared, request: &Incoming<'_>) -> Response {
    match (request.method, request.path) {
        (&Method::POST, "/v1/messages") => {
            let n = shared.messages.fetch_add(1, Ordering::SeqCst) + 1;
            messages(shared, n, request.body.unwrap_or(&Value::Null))
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
        (method, path) => error_response(
            StatusCode::NOT_FOUND,
            "not_found_error",
            &format!("mock-anthropic: no route for {method} {path}"),
        ),
    }
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
        sse_response(
            events
                .into_iter()
                .map(|(name, data, slow)| SseEvent {
                    event: name,
                    data,
                    delay: slow.then_some(SLOW_INTERVAL),
                })
                .collect(),
        )
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
        let input = synthesise(&schema);
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
    if let Some(status) = mock_error_status(&text) {
        return Reply::Error(status);
    }

    // 6. MOCK_SLOW.
    if text.contains("MOCK_SLOW") {
        return Reply::Slow(slow_chunks(SLOW_CHUNKS));
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
