//! A scripted mock of the Gemini API (`generativelanguage` v1beta), for end-to-end tests that
//! run the real Gemini CLI (`@google/gemini-cli` 0.61.0) offline.
//!
//! This file owns the mock server ([`MockGemini`]), its deterministic "brain", the Gemini CLI
//! settings that point it at the mock ([`gemini_home`]), the environment the CLI needs
//! ([`gemini_env`]) and the lookup of the installed CLI ([`gemini_path`]). The server plumbing
//! (127.0.0.1 only, an OS-chosen port, a thread and tokio runtime of its own, request
//! recording, SSE framing) and the brain's shared parts (`TOOL` parsing, fault commands,
//! schema synthesis) live in [`crate::mock_http`].
//!
//! # Endpoints
//!
//! * `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`: the reply chosen by the
//!   brain as data-only server-sent events (`data: <GenerateContentResponse>`);
//! * `POST /v1beta/models/{model}:generateContent`: the same reply as one JSON
//!   `GenerateContentResponse`;
//! * `POST /v1beta/models/{model}:countTokens`: `{"totalTokens": COUNT_TOKENS}`;
//! * anything else: 404 with a Gemini error body.
//!
//! Every request is recorded ([`MockGemini::all_requests`]); the bodies of the
//! `generateContent` / `streamGenerateContent` calls are also available on their own
//! ([`MockGemini::requests`]). The CLI sends `x-goog-api-key: dummy` (the `GEMINI_API_KEY` of
//! [`gemini_env`]) and `x-goog-api-client: google-genai-sdk/…`.
//!
//! What Gemini CLI 0.61.0 (`gemini --acp`, default model `auto`) calls, per prompt: a router
//! classifier `POST /v1beta/models/gemini-3.5-flash-lite:generateContent` (schema
//! `{complexity_reasoning, complexity_score}`, `responseJsonSchema` with upper-case types),
//! then `POST /v1beta/models/gemini-3.8-flash:streamGenerateContent?alt=sse` with the
//! conversation, 15 tools and a system instruction, and one more streamed call after each
//! batch of function responses. `-m <model>` skips the router. It never called `countTokens`
//! nor anything else. Its `user-agent` is `GeminiCLI-acp/0.61.0/…`.
//! [`MockGemini::main_requests`] leaves the schema-constrained helper calls out.
//!
//! # The brain
//!
//! The reply is chosen from the request's `contents` (`{role: "user"|"model", parts}`). The
//! *user text* is the last text part of the last user content that has text other than
//! injected context (the CLI's `<session_context>…</session_context>` preamble: a content of
//! its own in the router call, the first part of the first user content in the main call).
//! The first rule that matches wins:
//!
//! 1. `generationConfig.responseJsonSchema` or `responseSchema` is set (the CLI's router and
//!    next-speaker helper calls, with `responseMimeType: "application/json"`; their schemas
//!    use upper-case types such as `OBJECT`) → the text of a JSON instance synthesised from
//!    the schema ([`crate::mock_http::synthesise`]), with a `next_speaker` field always
//!    `"user"`. This rule comes first so that a helper call never gets a tool call or an
//!    error meant for the main call;
//! 2. the last content is a user content with a `functionResponse` part → text
//!    `TOOL_RESULT_SEEN: <first 120 chars of its response>`: `response.output` (or
//!    `response.error`) when it is a string, else the JSON text of that value (of the whole
//!    `response` when it has neither);
//! 3. the user text contains `TOOL <name> <json>` → text `Calling <name>.`, then a
//!    `functionCall` part (`name`, `args` = the JSON, `id` `call_mock_<n>`, n counting tool
//!    calls from 1 per server). Shell-escaped JSON (`{\"a\":1}`) is accepted too;
//! 4. `MOCK_ERROR <status>` → that HTTP status with `{"error":{"code","message","status"}}`
//!    (400 `INVALID_ARGUMENT`, 401 `UNAUTHENTICATED`, 403 `PERMISSION_DENIED`, 404
//!    `NOT_FOUND`, 429 `RESOURCE_EXHAUSTED`, 503 `UNAVAILABLE`, else `INTERNAL`); then
//!    `MOCK_JSON <json>` → that JSON value, compact, as the text (a model following a host's
//!    structured-output instructions; [`crate::mock_http::mock_json`]);
//! 5. `MOCK_SLOW` → 20 text chunks ([`SLOW_CHUNKS`]) 250 ms apart ([`SLOW_INTERVAL`]);
//! 6. otherwise → text `Hello from mock-gemini! user_msgs=<n> you said: <text>`, where `n`
//!    counts the user contents that carry text (not only function responses): it proves that
//!    a resumed session carried its history.
//!
//! A streamed reply sends its text in at least two chunks, each
//! `{candidates:[{content:{role:"model",parts:[{text}]},index:0}],modelVersion,responseId}`,
//! then the function call (if any) in a chunk of its own; the last chunk also carries
//! `finishReason: "STOP"` and the usage. The model reported (`modelVersion`) is the one in
//! the request's path.
//!
//! # Usage numbers
//!
//! Every reply reports the same `usageMetadata`: `promptTokenCount` = [`PROMPT_TOKENS`],
//! `candidatesTokenCount` = [`CANDIDATES_TOKENS`], `totalTokenCount` = [`TOTAL_TOKENS`].
//!
//! What Gemini CLI 0.61.0 makes of them over ACP: the `session/prompt` result carries
//! `_meta.quota.token_count = {input_tokens, output_tokens}` summed over the turn's main
//! calls (17 / 5 for a plain turn, 34 / 10 for a turn with one tool call; the router calls
//! are not counted) and `_meta.quota.model_usage = [{model, token_count}]` per model (the
//! call after a function response is listed under model `auto`). There is no
//! `usage_update`. A cancelled or failed prompt reports no usage.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

pub use crate::mock_http::RecordedRequest;
use crate::mock_http::{
    Incoming, MockServer, SseEvent, data_sse_response, json_response, mock_error_status, mock_json,
    parse_tool_command, slow_chunks, split_in_two, synthesise,
};

/// `usageMetadata.promptTokenCount` of every reply.
pub const PROMPT_TOKENS: u64 = 17;
/// `usageMetadata.candidatesTokenCount` of every reply.
pub const CANDIDATES_TOKENS: u64 = 5;
/// `usageMetadata.totalTokenCount` of every reply.
pub const TOTAL_TOKENS: u64 = PROMPT_TOKENS + CANDIDATES_TOKENS;
/// `totalTokens` answered by `:countTokens`.
pub const COUNT_TOKENS: u64 = 10;
/// Number of text chunks streamed for `MOCK_SLOW`.
pub const SLOW_CHUNKS: usize = 20;
/// Pause before each `MOCK_SLOW` text chunk.
pub const SLOW_INTERVAL: Duration = Duration::from_millis(250);
/// The API key [`gemini_env`] sets (`GEMINI_API_KEY`; the CLI sends it as `x-goog-api-key`).
pub const API_KEY: &str = "dummy";
/// Command that installs the Gemini CLI where [`gemini_path`] looks for it.
pub const GEMINI_INSTALL_HINT: &str =
    "npm install --prefix $HOME/.cache/agent-adaptor-clis/gemini @google/gemini-cli@0.61.0";

/// The path prefix of every model method.
const MODELS_PREFIX: &str = "/v1beta/models/";

/// Counters of a running mock.
#[derive(Default)]
struct Shared {
    tool_calls: AtomicU64,
    responses: AtomicU64,
}

/// A running mock Gemini API on `127.0.0.1`. It stops when dropped.
pub struct MockGemini {
    server: MockServer,
}

impl MockGemini {
    /// Starts the mock on `127.0.0.1` and an OS-chosen port. It serves from a thread of its
    /// own, so the caller's runtime (if any) may block while a CLI talks to it.
    pub async fn start() -> MockGemini {
        let shared = Arc::new(Shared::default());
        MockGemini {
            server: MockServer::start("mock-gemini", move |request| handle(&shared, request)),
        }
    }

    /// Base URL for `GOOGLE_GEMINI_BASE_URL`, e.g. `http://127.0.0.1:40123` (no path: the
    /// SDK adds `/v1beta/models/…`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// The JSON bodies of the `generateContent` and `streamGenerateContent` requests received
    /// so far (router and other helper calls included), in order.
    pub fn requests(&self) -> Vec<Value> {
        self.server
            .all_requests()
            .into_iter()
            .filter(|r| {
                r.method == "POST"
                    && matches!(
                        model_method(&r.path),
                        Some((_, "generateContent" | "streamGenerateContent"))
                    )
            })
            .filter_map(|r| r.body)
            .collect()
    }

    /// [`MockGemini::requests`] without the CLI's helper calls (those with a response schema:
    /// the router classifier, the next-speaker check): the requests of the conversation
    /// itself.
    pub fn main_requests(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|body| response_schema(body).is_none())
            .collect()
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

/// Where the Gemini CLI is installed: `$ADAPTOR_GEMINI_BIN` if set, else
/// `$HOME/.cache/agent-adaptor-clis/gemini/node_modules/.bin/gemini` if it exists (a node
/// bundle; `node` must be on `PATH`). See [`GEMINI_INSTALL_HINT`] for how to install it.
pub fn gemini_path() -> Option<PathBuf> {
    crate::mock_http::installed_cli("ADAPTOR_GEMINI_BIN", "gemini", "gemini")
}

/// Writes `<home>/.gemini/settings.json`: API-key authentication (`gemini-api-key`, the key
/// coming from `GEMINI_API_KEY`), usage statistics and telemetry off, no auto-update and no
/// update nag. Creates `<home>/.gemini` and `<home>/tmp` (the `TMPDIR` of [`gemini_env`]) if
/// missing. `home` is the CLI's `HOME`, where it keeps its sessions:
/// `.gemini/tmp/<workspace dir name>/chats/session-<YYYY-MM-DDTHH-MM>-<id prefix>.jsonl`.
///
/// Gemini CLI 0.61.0's `session/load` starts a new recording under the loaded id before it
/// reads the old one, and the file name only has minutes: a load within the wall-clock minute
/// the session was created in appends a reset to the session's own file, fails (`-32603`,
/// `data.details: "No previous sessions found for this project."`) and leaves the file with
/// no history. A load in a later minute works.
pub fn gemini_home(home: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(home.join("tmp"))?;
    let dir = home.join(".gemini");
    std::fs::create_dir_all(&dir)?;
    let settings = json!({
        "security": { "auth": { "selectedType": "gemini-api-key" } },
        "privacy": { "usageStatisticsEnabled": false },
        "telemetry": { "enabled": false },
        "general": { "disableAutoUpdate": true, "disableUpdateNag": true },
    });
    std::fs::write(dir.join("settings.json"), format!("{settings:#}\n"))
}

/// Environment for running the Gemini CLI against the mock at `base_url`, with `home`
/// (prepared by [`gemini_home`]) as its `HOME`: `HOME`, `GEMINI_API_KEY` = [`API_KEY`],
/// `GOOGLE_GEMINI_BASE_URL`, `GEMINI_TELEMETRY_ENABLED=false`, `GEMINI_CLI_NO_RELAUNCH=true`
/// (no re-exec of node with a bigger heap) and `TMPDIR` = `<home>/tmp` (created here; the CLI
/// writes `gemini-client-error-*.json` reports there on API errors).
pub fn gemini_env(home: &Path, base_url: &str) -> Vec<(String, String)> {
    let tmp = home.join("tmp");
    // Best effort: a missing TMPDIR only loses the CLI's error reports.
    let _ = std::fs::create_dir_all(&tmp);
    [
        ("HOME", home.display().to_string()),
        ("GEMINI_API_KEY", API_KEY.to_string()),
        ("GOOGLE_GEMINI_BASE_URL", base_url.to_string()),
        ("GEMINI_TELEMETRY_ENABLED", "false".to_string()),
        ("GEMINI_CLI_NO_RELAUNCH", "true".to_string()),
        ("TMPDIR", tmp.display().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The model and method of a `/v1beta/models/{model}:{method}` path.
fn model_method(path: &str) -> Option<(&str, &str)> {
    path.strip_prefix(MODELS_PREFIX)?.rsplit_once(':')
}

/// The handler: dispatches on method and path (the request is recorded by [`MockServer`]).
fn handle(shared: &Shared, request: &Incoming<'_>) -> Response {
    let body = request.body.unwrap_or(&Value::Null);
    match (request.method, model_method(request.path)) {
        (&Method::POST, Some((model, method @ ("generateContent" | "streamGenerateContent")))) => {
            let n = shared.responses.fetch_add(1, Ordering::SeqCst) + 1;
            generate(shared, n, model, method == "streamGenerateContent", body)
        }
        (&Method::POST, Some((_, "countTokens"))) => {
            json_response(StatusCode::OK, &json!({ "totalTokens": COUNT_TOKENS }))
        }
        (method, _) => error_response(
            StatusCode::NOT_FOUND,
            &format!("mock-gemini: no route for {method} {}", request.path),
        ),
    }
}

/// A Gemini error body: `{"error":{"code","message","status"}}`.
fn error_response(status: StatusCode, message: &str) -> Response {
    let name = match status.as_u16() {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        _ => "INTERNAL",
    };
    json_response(
        status,
        &json!({ "error": { "code": status.as_u16(), "message": message, "status": name } }),
    )
}

/// One part of a reply.
#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    FunctionCall {
        id: String,
        name: String,
        args: Value,
    },
}

/// What the brain decided.
#[derive(Debug, PartialEq)]
enum Reply {
    Parts(Vec<Part>),
    /// `MOCK_SLOW`: text streamed slowly, chunk by chunk.
    Slow(Vec<String>),
    Error(u16),
}

/// `POST …:generateContent` (`stream` false) and `…:streamGenerateContent` (`stream` true).
fn generate(shared: &Shared, n: u64, model: &str, stream: bool, body: &Value) -> Response {
    let response_id = format!("resp_mock_{n}");
    let (parts, slow) = match decide(shared, body) {
        Reply::Error(status) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error_response(status, &format!("mock injected {}", status.as_u16()));
        }
        Reply::Parts(parts) => (parts, None),
        Reply::Slow(chunks) => (vec![Part::Text(chunks.concat())], Some(chunks)),
    };
    let reply = Generated {
        id: &response_id,
        model,
        parts: &parts,
        slow,
    };
    if stream {
        data_sse_response(reply.chunks(), false)
    } else {
        let all = parts.iter().map(part_json).collect();
        json_response(StatusCode::OK, &reply.response(all, true))
    }
}

/// The pieces of one reply.
struct Generated<'a> {
    id: &'a str,
    model: &'a str,
    parts: &'a [Part],
    /// `MOCK_SLOW`: the text's chunks, each streamed after [`SLOW_INTERVAL`].
    slow: Option<Vec<String>>,
}

impl Generated<'_> {
    /// A `GenerateContentResponse` with `parts`; the `last` one also has the finish reason and
    /// the usage.
    fn response(&self, parts: Vec<Value>, last: bool) -> Value {
        let mut candidate = json!({ "content": { "role": "model", "parts": parts }, "index": 0 });
        let mut response = json!({ "modelVersion": self.model, "responseId": self.id });
        if last {
            candidate["finishReason"] = json!("STOP");
            response["usageMetadata"] = usage();
        }
        response["candidates"] = json!([candidate]);
        response
    }

    /// The streamed responses: each text in two chunks (or the slow ones), each call in one.
    fn chunks(&self) -> Vec<SseEvent> {
        let mut pieces: Vec<(Value, Option<Duration>)> = Vec::new();
        for part in self.parts {
            match (part, &self.slow) {
                (Part::Text(_), Some(chunks)) => pieces.extend(
                    chunks
                        .iter()
                        .map(|c| (json!({ "text": c }), Some(SLOW_INTERVAL))),
                ),
                (Part::Text(text), None) => pieces.extend(
                    split_in_two(text)
                        .into_iter()
                        .map(|c| (json!({ "text": c }), None)),
                ),
                (call, _) => pieces.push((part_json(call), None)),
            }
        }
        let count = pieces.len();
        pieces
            .into_iter()
            .enumerate()
            .map(|(i, (part, delay))| SseEvent {
                event: "chunk",
                data: self.response(vec![part], i + 1 == count),
                delay,
            })
            .collect()
    }
}

/// A reply part as the API spells it.
fn part_json(part: &Part) -> Value {
    match part {
        Part::Text(text) => json!({ "text": text }),
        Part::FunctionCall { id, name, args } => {
            json!({ "functionCall": { "id": id, "name": name, "args": args } })
        }
    }
}

/// The `usageMetadata` of every reply.
fn usage() -> Value {
    json!({
        "promptTokenCount": PROMPT_TOKENS,
        "candidatesTokenCount": CANDIDATES_TOKENS,
        "totalTokenCount": TOTAL_TOKENS,
    })
}

/// The brain: the reply to a `generateContent` request (see the module doc).
fn decide(shared: &Shared, body: &Value) -> Reply {
    let contents = body
        .get("contents")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();

    // 1. A response schema (the CLI's helper calls).
    if let Some(schema) = response_schema(body) {
        let mut instance = synthesise(schema);
        if let Some(speaker) = instance.get_mut("next_speaker") {
            *speaker = json!("user");
        }
        return text_reply(instance.to_string());
    }

    // 2. A tool result.
    if let Some(response) = contents
        .last()
        .filter(|c| is_user(c))
        .and_then(|c| parts(c).iter().find_map(|p| p.get("functionResponse")))
    {
        let output: String = function_response_text(response).chars().take(120).collect();
        return text_reply(format!("TOOL_RESULT_SEEN: {output}"));
    }

    let text = contents
        .iter()
        .rev()
        .filter(|c| is_user(c))
        .find_map(user_text)
        .unwrap_or_default();

    // 3. TOOL <name> <json>.
    if let Some((name, args)) = parse_tool_command(&text) {
        let n = shared.tool_calls.fetch_add(1, Ordering::SeqCst) + 1;
        return Reply::Parts(vec![
            Part::Text(format!("Calling {name}.")),
            Part::FunctionCall {
                id: format!("call_mock_{n}"),
                name,
                args,
            },
        ]);
    }

    // 4. MOCK_ERROR <status>.
    if let Some(status) = mock_error_status(&text) {
        return Reply::Error(status);
    }

    // MOCK_JSON <json>.
    if let Some(json) = mock_json(&text) {
        return text_reply(json);
    }

    // 5. MOCK_SLOW.
    if text.contains("MOCK_SLOW") {
        return Reply::Slow(slow_chunks(SLOW_CHUNKS));
    }

    // 6. Default.
    let turns = contents
        .iter()
        .filter(|c| is_user(c) && user_text(c).is_some())
        .count();
    text_reply(format!(
        "Hello from mock-gemini! user_msgs={turns} you said: {text}"
    ))
}

/// The `generationConfig.responseJsonSchema` (or `responseSchema`) of a request, if any.
fn response_schema(body: &Value) -> Option<&Value> {
    let config = body.get("generationConfig")?;
    config
        .get("responseJsonSchema")
        .or_else(|| config.get("responseSchema"))
}

fn text_reply(text: String) -> Reply {
    Reply::Parts(vec![Part::Text(text)])
}

/// A content with `role: "user"` (the role may be omitted).
fn is_user(content: &Value) -> bool {
    matches!(
        content.get("role").and_then(Value::as_str),
        None | Some("user")
    )
}

fn parts(content: &Value) -> &[Value] {
    content
        .get("parts")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The last text part of a content that is not empty and not injected context (the CLI's
/// `<session_context>` preamble, which it sends as a content of its own or as the first part
/// of the first user content).
fn user_text(content: &Value) -> Option<String> {
    parts(content)
        .iter()
        .rev()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .find(|t| !t.trim().is_empty() && !t.trim_start().starts_with("<session_context>"))
        .map(str::to_string)
}

/// The text of a `functionResponse`: its `response.output` or `response.error` (a string as
/// is, another value as JSON), else the whole `response` as JSON.
fn function_response_text(function_response: &Value) -> String {
    let response = function_response.get("response").unwrap_or(&Value::Null);
    match ["output", "error"].iter().find_map(|k| response.get(k)) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => response.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Value {
        json!({ "role": "user", "parts": [{ "text": text }] })
    }

    fn model(text: &str) -> Value {
        json!({ "role": "model", "parts": [{ "text": text }] })
    }

    fn decide_on(body: Value) -> Reply {
        decide(&Shared::default(), &body)
    }

    #[test]
    fn counts_turns_and_answers_the_last_text() {
        let contents = json!([
            user("<session_context>\nThis is the Gemini CLI.\n</session_context>"),
            user("first"),
            model("hi"),
            { "role": "user", "parts": [{ "text": "<session_context>x</session_context>" }, { "text": "second" }] },
        ]);
        assert_eq!(
            decide_on(json!({ "contents": contents })),
            text_reply("Hello from mock-gemini! user_msgs=2 you said: second".to_string())
        );
    }

    #[test]
    fn tool_calls_and_results() {
        let reply =
            decide_on(json!({ "contents": [user(r#"TOOL write_file {"file_path":"a"}"#)] }));
        assert_eq!(
            reply,
            Reply::Parts(vec![
                Part::Text("Calling write_file.".to_string()),
                Part::FunctionCall {
                    id: "call_mock_1".to_string(),
                    name: "write_file".to_string(),
                    args: json!({ "file_path": "a" }),
                },
            ])
        );
        let result = |response: Value| {
            json!({ "contents": [
                user("TOOL x {}"),
                { "role": "model", "parts": [{ "functionCall": { "name": "x", "args": {} } }] },
                { "role": "user", "parts": [{ "functionResponse": { "name": "x", "response": response } }] },
            ]})
        };
        assert_eq!(
            decide_on(result(json!({ "output": "done" }))),
            text_reply("TOOL_RESULT_SEEN: done".to_string())
        );
        assert_eq!(
            decide_on(result(json!({ "error": { "code": 1 } }))),
            text_reply(r#"TOOL_RESULT_SEEN: {"code":1}"#.to_string())
        );
    }

    #[test]
    fn schemas_win_and_next_speaker_is_the_user() {
        let body = json!({
            "contents": [user("MOCK_ERROR 400")],
            "generationConfig": {
                "responseMimeType": "application/json",
                "responseJsonSchema": {
                    "type": "OBJECT",
                    "properties": {
                        "reasoning": { "type": "STRING" },
                        "next_speaker": { "type": "STRING", "enum": ["model", "user"] },
                    },
                },
            },
        });
        assert_eq!(
            decide_on(body),
            // The schema's own property order (serde_json's `preserve_order`, which the ACP
            // SDK turns on across the workspace) or sorted keys: the same JSON either way.
            text_reply(json!({"reasoning": "mock", "next_speaker": "user"}).to_string())
        );
    }

    #[test]
    fn stream_chunks_are_complete() {
        let parts = [
            Part::Text("Calling x.".to_string()),
            Part::FunctionCall {
                id: "call_mock_1".to_string(),
                name: "x".to_string(),
                args: json!({ "a": 1 }),
            },
        ];
        let reply = Generated {
            id: "resp_mock_1",
            model: "gemini-test",
            parts: &parts,
            slow: None,
        };
        let chunks: Vec<Value> = reply.chunks().into_iter().map(|e| e.data).collect();
        assert_eq!(chunks.len(), 3, "{chunks:#?}");
        let text: String = chunks[..2]
            .iter()
            .map(|c| {
                c["candidates"][0]["content"]["parts"][0]["text"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        assert_eq!(text, "Calling x.");
        let last = &chunks[2];
        assert_eq!(
            last["candidates"][0]["content"]["parts"][0]["functionCall"],
            json!({ "id": "call_mock_1", "name": "x", "args": { "a": 1 } })
        );
        assert_eq!(last["candidates"][0]["finishReason"], "STOP");
        assert_eq!(last["usageMetadata"]["totalTokenCount"], TOTAL_TOKENS);
        assert!(chunks[..2].iter().all(|c| c.get("usageMetadata").is_none()
            && c["candidates"][0].get("finishReason").is_none()));
        assert!(chunks.iter().all(|c| c["modelVersion"] == "gemini-test"
            && c["candidates"][0]["content"]["role"] == "model"));
    }

    #[test]
    fn faults() {
        assert_eq!(
            decide_on(json!({ "contents": [user("MOCK_ERROR 429 please")] })),
            Reply::Error(429)
        );
        assert_eq!(
            decide_on(json!({ "contents": [user("MOCK_SLOW")] })),
            Reply::Slow(slow_chunks(SLOW_CHUNKS))
        );
    }
}
