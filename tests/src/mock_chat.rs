//! A scripted mock of the OpenAI Chat Completions API, for end-to-end tests that run the real
//! Qwen Code (`@qwen-code/qwen-code` 0.24.4) and OpenCode (`opencode-ai` 1.18.33) CLIs
//! offline.
//!
//! This file owns the mock server ([`MockChat`]), its deterministic "brain", the CLI
//! configurations that point them at it ([`qwen_home`], [`opencode_config`]), the environments
//! they need ([`qwen_env`], [`opencode_env`]) and the lookup of the installed CLIs
//! ([`qwen_path`], [`opencode_path`]). The server plumbing (127.0.0.1 only, an OS-chosen port,
//! a thread and tokio runtime of its own, request recording, SSE framing) and the brain's
//! shared parts (`TOOL` parsing, fault commands, schema synthesis) live in
//! [`crate::mock_http`].
//!
//! # Endpoints
//!
//! * `POST /v1/chat/completions`: the reply chosen by the brain, streamed as data-only
//!   server-sent events ending in `data: [DONE]` when the body has `"stream": true` (both CLIs
//!   always stream), else one `chat.completion` JSON object;
//! * `GET /v1/models`: a one-model list ([`DEFAULT_MODEL`]);
//! * anything else: 404 with an OpenAI error body.
//!
//! Every request is recorded ([`MockChat::all_requests`]); the bodies of the Chat Completions
//! calls are available on their own ([`MockChat::requests`]), and without the CLIs'
//! background helper calls ([`MockChat::main_requests`], see [`Helper`]). Both CLIs send
//! `authorization: Bearer dummy` and nothing but `POST /v1/chat/completions`, always with
//! `stream: true` and `stream_options.include_usage: true` except where noted:
//!
//! * Qwen Code 0.24.4 (`qwen --acp`, `user-agent: QwenCode/0.24.4 (linux; x64)`): per model
//!   call of a turn one request with 17 tools and `max_tokens: 32000`; after the turn, in the
//!   background, the memory task ([`Helper::Memory`]) and often a follow-up suggestion
//!   ([`Helper::Suggestion`], answered to the client as a
//!   `qwen/notify/session/prompt-suggestion` notification). In approval mode `auto` (not the
//!   one [`qwen_home`] sets) each risky tool call is first put to a permission classifier
//!   ([`Helper::ForcedTool`], `stream: false`, `tool_choice: "required"`);
//! * OpenCode 1.18.33 (`opencode acp`, `user-agent: opencode/1.18.33 ai-sdk/…`): before the
//!   first turn of a session a title request ([`Helper::Title`], no tools), then per model
//!   call one request with 10 tools and `tool_choice: "auto"`.
//!
//! # The brain
//!
//! The reply is chosen from the request's `messages`. The *user text* is the text of the last
//! `role: "user"` message that has text that is not injected context (see
//! [`is_injected_context`]); a text the CLI shell-quoted (`"TOOL bash {\"a\":1}"`, what
//! `opencode run` sends) is unquoted. `system` messages are never user text. The first rule
//! that matches wins:
//!
//! 1. the request is a helper call ([`helper_kind`]) → a short text ([`TITLE_TEXT`] for a
//!    title request, [`MEMORY_TEXT`] for a memory task, [`SUGGESTION_TEXT`] for a follow-up
//!    suggestion), or for a side query that forces a tool call, a call of that tool with an
//!    instance synthesised from its `parameters` in which a `shouldBlock` field is always
//!    `false` (Qwen's auto-mode permission classifier then lets the action through);
//! 2. the last message has `role: "tool"` → text `TOOL_RESULT_SEEN: <first 120 chars of its
//!    content>`;
//! 3. the user text contains `TOOL <name> <json>` → text `Calling <name>.`, then a tool call
//!    (`id` `call_mock_<n>`, n counting tool calls from 1 per server, `arguments` = the JSON as
//!    a string), finish reason `tool_calls`. Shell-escaped JSON (`{\"a\":1}`) is accepted too;
//! 4. `response_format.type == "json_schema"` → the text of a JSON instance synthesised from
//!    `response_format.json_schema.schema` ([`crate::mock_http::synthesise`]);
//! 5. the request offers a tool named `structured_output` (how Qwen's `--json-schema` reaches
//!    the API) → a call of it with an instance synthesised from its `parameters`;
//! 6. `MOCK_ERROR <status>` → that HTTP status with `{"error":{"message","type","code"}}`;
//!    then `MOCK_JSON <json>` → that JSON value, compact, as the text (a model following a
//!    host's structured-output instructions; [`crate::mock_http::mock_json`]);
//! 7. `MOCK_SLOW` → 20 content deltas ([`SLOW_CHUNKS`]) 250 ms apart ([`SLOW_INTERVAL`]);
//! 8. otherwise → text `Hello from mock-chat! user_msgs=<n> you said: <text>`, where `n`
//!    counts the user messages that carry text other than injected context: it proves that a
//!    resumed session carried its history.
//!
//! The stream is a role chunk (`delta: {role: "assistant", content: ""}`), the text in at
//! least two content deltas, per tool call a delta with `index`, `id`, `type` and
//! `function.name` (empty `arguments`) then two argument fragments, a chunk with
//! `finish_reason` (`"stop"` or `"tool_calls"`) and an empty delta, then (when
//! `stream_options.include_usage` is true) a usage-only chunk (`choices: []`), then
//! `data: [DONE]`. Every chunk has `id`, `object: "chat.completion.chunk"`, `created`,
//! `model` (the request's).
//!
//! # Usage numbers
//!
//! Every reply reports the same usage: `prompt_tokens` = [`PROMPT_TOKENS`],
//! `completion_tokens` = [`COMPLETION_TOKENS`], `total_tokens` = [`TOTAL_TOKENS`].
//!
//! What the CLIs make of them over ACP (helper calls are never counted):
//!
//! * Qwen Code 0.24.4: after each main model call a `session/update` `agent_message_chunk`
//!   with empty text and `_meta.usage = {inputTokens: 23, outputTokens: 7, totalTokens: 30,
//!   thoughtTokens: 0, cachedReadTokens: 0}` (plus `durationMs`, and `apiErrors` once a call
//!   of the session failed); the `session/prompt` result carries none;
//! * OpenCode 1.18.33: at the end of each turn a `usage_update` `{used: 23, size: 128000,
//!   cost: {amount: 0, currency: "USD"}}` (`used` = the last call's prompt tokens, `size` =
//!   the model's context limit from [`opencode_config`]) and the `session/prompt` result's
//!   `usage = {inputTokens: 23, outputTokens: 7, totalTokens: 30}`: the last model call's
//!   usage, not a sum (a turn with a tool call, two calls, reports the same). A cancelled or
//!   failed turn reports `used: 0` (and zero usage when cancelled).

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

/// `usage.prompt_tokens` of every reply.
pub const PROMPT_TOKENS: u64 = 23;
/// `usage.completion_tokens` of every reply.
pub const COMPLETION_TOKENS: u64 = 7;
/// `usage.total_tokens` of every reply.
pub const TOTAL_TOKENS: u64 = PROMPT_TOKENS + COMPLETION_TOKENS;
/// Number of content deltas streamed for `MOCK_SLOW`.
pub const SLOW_CHUNKS: usize = 20;
/// Pause before each `MOCK_SLOW` content delta.
pub const SLOW_INTERVAL: Duration = Duration::from_millis(250);
/// The model [`qwen_env`] and [`opencode_config`] configure, and the one reported when a
/// request names none.
pub const DEFAULT_MODEL: &str = "mock-model";
/// The API key the CLIs are given (they send it as a bearer token).
pub const API_KEY: &str = "dummy";
/// The reply to a title-generator helper call.
pub const TITLE_TEXT: &str = "Mock session title";
/// The reply to Qwen's background memory task.
pub const MEMORY_TEXT: &str = "Nothing to remember.";
/// The reply to Qwen's follow-up suggestion request (what the user might type next).
pub const SUGGESTION_TEXT: &str = "run the tests";
/// Command that installs Qwen Code where [`qwen_path`] looks for it.
pub const QWEN_INSTALL_HINT: &str =
    "npm install --prefix $HOME/.cache/agent-adaptor-clis/qwen @qwen-code/qwen-code@0.24.4";
/// Command that installs OpenCode where [`opencode_path`] looks for it.
pub const OPENCODE_INSTALL_HINT: &str =
    "npm install --prefix $HOME/.cache/agent-adaptor-clis/opencode opencode-ai@1.18.33";

/// Counters of a running mock.
#[derive(Default)]
struct Shared {
    tool_calls: AtomicU64,
    completions: AtomicU64,
}

/// A running mock OpenAI Chat Completions API on `127.0.0.1`. It stops when dropped.
pub struct MockChat {
    server: MockServer,
}

impl MockChat {
    /// Starts the mock on `127.0.0.1` and an OS-chosen port. It serves from a thread of its
    /// own, so the caller's runtime (if any) may block while a CLI talks to it.
    pub async fn start() -> MockChat {
        let shared = Arc::new(Shared::default());
        MockChat {
            server: MockServer::start("mock-chat", move |request| handle(&shared, request)),
        }
    }

    /// Base URL of the API, e.g. `http://127.0.0.1:40123/v1` (`OPENAI_BASE_URL`, a provider's
    /// `baseURL`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.addr())
    }

    /// The JSON bodies of the `POST /v1/chat/completions` requests received so far, helper
    /// calls included, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.server.posted_bodies("/v1/chat/completions")
    }

    /// [`MockChat::requests`] without the helper calls ([`helper_kind`] is `None`): the
    /// requests of the conversation itself.
    pub fn main_requests(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|body| helper_kind(body).is_none())
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

/// A background call a CLI makes besides the conversation itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Helper {
    /// OpenCode's title generator: a system message starting `You are a title generator`
    /// (sent, without tools, before the first turn of a new session).
    Title,
    /// Qwen's background memory extraction after a turn: a system message mentioning
    /// `managed memory` (`You are now acting as the managed memory extraction subagent…`,
    /// with the conversation and the file tools).
    Memory,
    /// Qwen's follow-up suggestion after a turn: the last user text starts with
    /// `[SUGGESTION MODE:` (with the conversation and the main tools).
    Suggestion,
    /// A side query that forces a call of its only tool (`tool_choice: "required"` or a named
    /// function): Qwen's `respond_in_schema` queries, such as the auto-mode permission
    /// classifier (`You are a security classifier…`, not streamed).
    ForcedTool,
}

/// Which helper call `body` (a Chat Completions request) is ([`Helper`] says how each is
/// recognised), or `None` for a request of the conversation itself.
pub fn helper_kind(body: &Value) -> Option<Helper> {
    let system = system_text(body);
    if system.trim_start().starts_with("You are a title generator") {
        return Some(Helper::Title);
    }
    if system.to_ascii_lowercase().contains("managed memory") {
        return Some(Helper::Memory);
    }
    if forced_tool(body).is_some() {
        return Some(Helper::ForcedTool);
    }
    let last_user = messages(body)
        .iter()
        .rev()
        .find(|m| role(m) == Some("user"))
        .and_then(user_text)
        .unwrap_or_default();
    last_user
        .starts_with("[SUGGESTION MODE:")
        .then_some(Helper::Suggestion)
}

/// The tool a request forces the model to call: the one named by `tool_choice`, or the only
/// tool when `tool_choice` is `"required"`.
fn forced_tool(body: &Value) -> Option<&Value> {
    let tools = body.get("tools").and_then(Value::as_array)?;
    match body.get("tool_choice")? {
        Value::String(choice) if choice == "required" && tools.len() == 1 => tools.first(),
        choice => {
            let name = choice.pointer("/function/name").and_then(Value::as_str)?;
            tools.iter().find(|t| tool_name(t) == name)
        }
    }
}

/// Where Qwen Code is installed: `$ADAPTOR_QWEN_BIN` if set, else
/// `$HOME/.cache/agent-adaptor-clis/qwen/node_modules/.bin/qwen` if it exists (a node
/// bundle; `node` must be on `PATH`). See [`QWEN_INSTALL_HINT`] for how to install it.
pub fn qwen_path() -> Option<PathBuf> {
    crate::mock_http::installed_cli("ADAPTOR_QWEN_BIN", "qwen", "qwen")
}

/// Writes `<home>/.qwen/settings.json`: OpenAI-compatible authentication (`selectedType:
/// "openai"`, key, base URL and model coming from [`qwen_env`]), usage statistics and
/// telemetry off, no auto-update (`general.enableAutoUpdate: false`, the 0.24 name), and
/// `tools.approvalMode: "default"`, so that shell commands and edits ask the client
/// (`session/request_permission`): Qwen 0.24's default, `auto`, first asks the model itself
/// (a permission-classifier side query) and prompts only when it cannot decide. Creates `<home>/.qwen` and `<home>/tmp` (the `TMPDIR` of
/// [`qwen_env`]) if missing. `home` is the CLI's `HOME`, where it keeps its sessions.
pub fn qwen_home(home: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(home.join("tmp"))?;
    let dir = home.join(".qwen");
    std::fs::create_dir_all(&dir)?;
    let settings = json!({
        "security": { "auth": { "selectedType": "openai" } },
        "privacy": { "usageStatisticsEnabled": false },
        "telemetry": { "enabled": false },
        "general": { "enableAutoUpdate": false },
        "tools": { "approvalMode": "default" },
    });
    std::fs::write(dir.join("settings.json"), format!("{settings:#}\n"))
}

/// Environment for running Qwen Code against the mock at `base_url` (as
/// [`MockChat::base_url`] gives it, ending in `/v1`), with `home` (prepared by [`qwen_home`])
/// as its `HOME`: `HOME`, `OPENAI_API_KEY` = [`API_KEY`], `OPENAI_BASE_URL`, `OPENAI_MODEL` =
/// [`DEFAULT_MODEL`] and `TMPDIR` = `<home>/tmp` (created here).
pub fn qwen_env(home: &Path, base_url: &str) -> Vec<(String, String)> {
    let tmp = home_tmp(home);
    [
        ("HOME", home.display().to_string()),
        ("OPENAI_API_KEY", API_KEY.to_string()),
        ("OPENAI_BASE_URL", base_url.to_string()),
        ("OPENAI_MODEL", DEFAULT_MODEL.to_string()),
        ("TMPDIR", tmp),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Where CodeBuddy Code is installed: `$ADAPTOR_CODEBUDDY_BIN` if set, else the `codebuddy`
/// wrapper `./x.sh` writes next to the CLI that `@tencent-ai/agent-sdk` 0.3.201 carries
/// (`$HOME/.cache/agent-adaptor-clis/codebuddy-sdk-0.3.201/bin/codebuddy`), if it exists.
pub fn codebuddy_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ADAPTOR_CODEBUDDY_BIN").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let path = PathBuf::from(std::env::var_os("HOME")?)
        .join(".cache/agent-adaptor-clis/codebuddy-sdk-0.3.201/bin/codebuddy");
    path.exists().then_some(path)
}

/// The environment that points CodeBuddy Code (2.117.0) at the mock: an API key
/// (`CODEBUDDY_API_KEY`, which selects the OpenAI-compatible path: the CLI then posts to
/// `<CODEBUDDY_BASE_URL>/chat/completions`), the mock's base URL, and `HOME` (where it keeps
/// its sessions under `.codebuddy/`). CodeBuddy wraps the user's text in `<user_query>` tags,
/// which the mock's reply echoes.
pub fn codebuddy_env(home: &Path, base_url: &str) -> Vec<(String, String)> {
    [
        ("HOME", home.display().to_string()),
        ("CODEBUDDY_API_KEY", API_KEY.to_string()),
        ("CODEBUDDY_BASE_URL", base_url.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Where OpenCode is installed: `$ADAPTOR_OPENCODE_BIN` if set, else
/// `$HOME/.cache/agent-adaptor-clis/opencode/node_modules/.bin/opencode` if it exists (the
/// bun-compiled binary of `opencode-linux-x64`). See [`OPENCODE_INSTALL_HINT`] for how to
/// install it.
pub fn opencode_path() -> Option<PathBuf> {
    crate::mock_http::installed_cli("ADAPTOR_OPENCODE_BIN", "opencode", "opencode")
}

/// Writes `<dir>/opencode.json` and returns its path (for `OPENCODE_CONFIG`): a provider
/// `mock` (`@ai-sdk/openai-compatible`, bundled in the binary, so nothing is installed at run
/// time) at `base_url` (ending in `/v1`) with one model [`DEFAULT_MODEL`] that can call tools,
/// used as both `model` and `small_model` (the title generator), no auto-update, sharing
/// disabled. Creates `dir` if missing.
pub fn opencode_config(dir: &Path, base_url: &str) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let model = format!("mock/{DEFAULT_MODEL}");
    let config = json!({
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "mock": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Mock (chat completions)",
                "options": { "baseURL": base_url, "apiKey": API_KEY },
                "models": {
                    DEFAULT_MODEL: {
                        "name": "Mock Model",
                        "tool_call": true,
                        "limit": { "context": 128_000, "output": 8192 },
                    },
                },
            },
        },
        "model": model,
        "small_model": model,
        "autoupdate": false,
        "share": "disabled",
    });
    let path = dir.join("opencode.json");
    std::fs::write(&path, format!("{config:#}\n"))?;
    Ok(path)
}

/// Environment for running OpenCode with `config` (written by [`opencode_config`]) and `home`
/// (a temporary directory) as its `HOME`, where it keeps its data
/// (`.local/share/opencode/`): `HOME`, `OPENCODE_CONFIG`, `OPENCODE_DISABLE_MODELS_FETCH`,
/// `…_AUTOUPDATE`, `…_LSP_DOWNLOAD`, `…_DEFAULT_PLUGINS`, `…_SHARE`, `…_CLAUDE_CODE`,
/// `…_EXTERNAL_SKILLS` (all `1`) and `TMPDIR` = `<home>/tmp` (created here; the binary
/// extracts a 5.5 MB shared library there on every run and never deletes it).
pub fn opencode_env(home: &Path, config: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("HOME".to_string(), home.display().to_string()),
        ("OPENCODE_CONFIG".to_string(), config.display().to_string()),
        ("TMPDIR".to_string(), home_tmp(home)),
    ];
    env.extend(
        [
            "MODELS_FETCH",
            "AUTOUPDATE",
            "LSP_DOWNLOAD",
            "DEFAULT_PLUGINS",
            "SHARE",
            "CLAUDE_CODE",
            "EXTERNAL_SKILLS",
        ]
        .iter()
        .map(|name| (format!("OPENCODE_DISABLE_{name}"), "1".to_string())),
    );
    env
}

/// `<home>/tmp`, created (best effort: a missing TMPDIR only makes the CLI fall back).
fn home_tmp(home: &Path) -> String {
    let tmp = home.join("tmp");
    let _ = std::fs::create_dir_all(&tmp);
    tmp.display().to_string()
}

/// The handler: dispatches on method and path (the request is recorded by [`MockServer`]).
fn handle(shared: &Shared, request: &Incoming<'_>) -> Response {
    match (request.method, request.path) {
        (&Method::POST, "/v1/chat/completions") => {
            let n = shared.completions.fetch_add(1, Ordering::SeqCst) + 1;
            completions(shared, n, request.body.unwrap_or(&Value::Null))
        }
        (&Method::GET, "/v1/models") => json_response(
            StatusCode::OK,
            &json!({
                "object": "list",
                "data": [{ "id": DEFAULT_MODEL, "object": "model", "created": 0, "owned_by": "mock" }],
            }),
        ),
        (method, path) => error_response(
            StatusCode::NOT_FOUND,
            &format!("mock-chat: no route for {method} {path}"),
        ),
    }
}

/// An OpenAI error body: `{"error":{"message","type","code"}}`.
fn error_response(status: StatusCode, message: &str) -> Response {
    let (kind, code) = match status.as_u16() {
        400 => ("invalid_request_error", "invalid_request"),
        401 => ("invalid_request_error", "invalid_api_key"),
        404 => ("invalid_request_error", "not_found"),
        429 => ("requests", "rate_limit_exceeded"),
        _ => ("server_error", "server_error"),
    };
    json_response(
        status,
        &json!({ "error": { "message": message, "type": kind, "code": code, "param": null } }),
    )
}

/// One tool call of a reply.
#[derive(Debug, Clone, PartialEq)]
struct ToolCall {
    id: String,
    name: String,
    arguments: String,
}

/// What the brain decided.
#[derive(Debug, PartialEq)]
enum Reply {
    Message {
        text: Option<String>,
        calls: Vec<ToolCall>,
    },
    /// `MOCK_SLOW`: text streamed slowly, chunk by chunk.
    Slow(Vec<String>),
    Error(u16),
}

/// `POST /v1/chat/completions`.
fn completions(shared: &Shared, n: u64, body: &Value) -> Response {
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_MODEL);
    let id = format!("chatcmpl-mock-{n}");
    let completion = match decide(shared, body) {
        Reply::Error(status) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error_response(status, &format!("mock injected {}", status.as_u16()));
        }
        Reply::Message { text, calls } => Completion {
            id: &id,
            model,
            text,
            calls,
            slow: None,
        },
        Reply::Slow(chunks) => Completion {
            id: &id,
            model,
            text: Some(chunks.concat()),
            calls: Vec::new(),
            slow: Some(chunks),
        },
    };
    if body.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        let include_usage = body.pointer("/stream_options/include_usage") == Some(&json!(true));
        data_sse_response(completion.chunks(include_usage), true)
    } else {
        json_response(StatusCode::OK, &completion.final_response())
    }
}

/// The pieces of one completion.
struct Completion<'a> {
    id: &'a str,
    model: &'a str,
    text: Option<String>,
    calls: Vec<ToolCall>,
    /// `MOCK_SLOW`: the text's chunks, each streamed after [`SLOW_INTERVAL`].
    slow: Option<Vec<String>>,
}

impl Completion<'_> {
    fn finish_reason(&self) -> &'static str {
        if self.calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }
    }

    /// An object of type `object` with the completion's `id`, `created`, `model` and `choices`.
    fn object(&self, object: &str, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": object,
            "created": 1_767_225_600,
            "model": self.model,
            "choices": choices,
        })
    }

    /// The `chat.completion` object, for a request that did not ask to stream.
    fn final_response(&self) -> Value {
        let mut message = json!({ "role": "assistant", "content": self.text });
        if !self.calls.is_empty() {
            message["tool_calls"] = self.calls.iter().map(call_json).collect();
        }
        let choice =
            json!([{ "index": 0, "message": message, "finish_reason": self.finish_reason() }]);
        let mut reply = self.object("chat.completion", choice);
        reply["usage"] = usage();
        reply
    }

    /// The `chat.completion.chunk` events of the stream (the `[DONE]` marker not included).
    fn chunks(&self, include_usage: bool) -> Vec<SseEvent> {
        let chunk = |delta: Value, finish: Option<&str>, delay: Option<Duration>| SseEvent {
            event: "chunk",
            data: self.object(
                "chat.completion.chunk",
                json!([{ "index": 0, "delta": delta, "finish_reason": finish }]),
            ),
            delay,
        };
        let mut events = vec![chunk(
            json!({ "role": "assistant", "content": "" }),
            None,
            None,
        )];
        let (pieces, delay) = match (&self.text, &self.slow) {
            (_, Some(chunks)) => (chunks.clone(), Some(SLOW_INTERVAL)),
            (Some(text), None) => (split_in_two(text), None),
            (None, None) => (Vec::new(), None),
        };
        events.extend(
            pieces
                .into_iter()
                .map(|piece| chunk(json!({ "content": piece }), None, delay)),
        );
        for (index, call) in self.calls.iter().enumerate() {
            let head = json!({
                "index": index, "id": call.id, "type": "function",
                "function": { "name": call.name, "arguments": "" },
            });
            events.push(chunk(json!({ "tool_calls": [head] }), None, None));
            events.extend(split_in_two(&call.arguments).into_iter().map(|fragment| {
                let part = json!({ "index": index, "function": { "arguments": fragment } });
                chunk(json!({ "tool_calls": [part] }), None, None)
            }));
        }
        events.push(chunk(json!({}), Some(self.finish_reason()), None));
        if include_usage {
            let mut last = self.object("chat.completion.chunk", json!([]));
            last["usage"] = usage();
            events.push(SseEvent::new("chunk", last));
        }
        events
    }
}

/// A tool call as in a `chat.completion` message.
fn call_json(call: &ToolCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": { "name": call.name, "arguments": call.arguments },
    })
}

/// The `usage` of every reply.
fn usage() -> Value {
    json!({
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": TOTAL_TOKENS,
    })
}

/// The brain: the reply to a Chat Completions request (see the module doc).
fn decide(shared: &Shared, body: &Value) -> Reply {
    let messages = messages(body);

    // 1. A helper call.
    match helper_kind(body) {
        Some(Helper::Title) => return text_reply(TITLE_TEXT),
        Some(Helper::Memory) => return text_reply(MEMORY_TEXT),
        Some(Helper::Suggestion) => return text_reply(SUGGESTION_TEXT),
        Some(Helper::ForcedTool) => {
            if let Some(tool) = forced_tool(body) {
                let schema = tool.pointer("/function/parameters").unwrap_or(&Value::Null);
                let mut args = synthesise(schema);
                // The permission classifier's verdict: let the action through.
                if let Some(block) = args.get_mut("shouldBlock") {
                    *block = json!(false);
                }
                return Reply::Message {
                    text: None,
                    calls: vec![tool_call(shared, tool_name(tool).to_string(), &args)],
                };
            }
        }
        None => {}
    }

    // 2. A tool result.
    if let Some(last) = messages.last()
        && role(last) == Some("tool")
    {
        let output: String = content_text(last).chars().take(120).collect();
        return text_reply(&format!("TOOL_RESULT_SEEN: {output}"));
    }

    let text = messages
        .iter()
        .rev()
        .filter(|m| role(m) == Some("user"))
        .find_map(user_text)
        .unwrap_or_default();

    // 3. TOOL <name> <json>.
    if let Some((name, args)) = parse_tool_command(&text) {
        return Reply::Message {
            text: Some(format!("Calling {name}.")),
            calls: vec![tool_call(shared, name, &args)],
        };
    }

    // 4. Structured output through `response_format`.
    if let Some(format) = body.get("response_format")
        && format.get("type").and_then(Value::as_str) == Some("json_schema")
    {
        let schema = format
            .pointer("/json_schema/schema")
            .unwrap_or(&Value::Null);
        return text_reply(&synthesise(schema).to_string());
    }

    // 5. Structured output through Qwen's `structured_output` tool, or CodeBuddy Code's
    //    `StructuredOutput` tool (always offered; called only when the prompt asks for it,
    //    as CodeBuddy's `--json-schema` does: "You MUST call the StructuredOutput tool").
    if let Some(tool) = body
        .get("tools")
        .and_then(Value::as_array)
        .and_then(|tools| {
            tools.iter().find(|t| {
                tool_name(t) == "structured_output"
                    || (tool_name(t) == "StructuredOutput"
                        && text.contains("call the StructuredOutput tool"))
            })
        })
    {
        let schema = tool.pointer("/function/parameters").unwrap_or(&Value::Null);
        // CodeBuddy's tool declares `{"data": …}` but validates the arguments themselves
        // against the schema it states in the prompt (2.117.0: `{"data": instance}` fails
        // with "root: must have required property …").
        let args = match codebuddy_schema(&text) {
            Some(schema) if tool_name(tool) == "StructuredOutput" => synthesise(&schema),
            _ => synthesise(schema),
        };
        return Reply::Message {
            text: None,
            calls: vec![tool_call(shared, tool_name(tool).to_string(), &args)],
        };
    }

    // 6. MOCK_ERROR <status>.
    if let Some(status) = mock_error_status(&text) {
        return Reply::Error(status);
    }

    // MOCK_JSON <json>.
    if let Some(json) = mock_json(&text) {
        return text_reply(&json);
    }

    // 7. MOCK_SLOW.
    if text.contains("MOCK_SLOW") {
        return Reply::Slow(slow_chunks(SLOW_CHUNKS));
    }

    // 8. Default.
    let turns = messages
        .iter()
        .filter(|m| role(m) == Some("user") && user_text(m).is_some())
        .count();
    text_reply(&format!(
        "Hello from mock-chat! user_msgs={turns} you said: {text}"
    ))
}

fn text_reply(text: &str) -> Reply {
    Reply::Message {
        text: Some(text.to_string()),
        calls: Vec::new(),
    }
}

fn tool_call(shared: &Shared, name: String, args: &Value) -> ToolCall {
    let n = shared.tool_calls.fetch_add(1, Ordering::SeqCst) + 1;
    ToolCall {
        id: format!("call_mock_{n}"),
        name,
        arguments: args.to_string(),
    }
}

fn role(message: &Value) -> Option<&str> {
    message.get("role").and_then(Value::as_str)
}

/// The `function.name` of a `tools` entry.
/// The schema CodeBuddy Code's `--json-schema` states in the prompt ("The tool parameters
/// must match this JSON Schema:" followed by the schema).
fn codebuddy_schema(text: &str) -> Option<Value> {
    let (_, rest) = text.split_once("must match this JSON Schema:")?;
    serde_json::Deserializer::from_str(rest.trim_start())
        .into_iter::<Value>()
        .next()?
        .ok()
}

fn tool_name(tool: &Value) -> &str {
    tool.pointer("/function/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The `messages` of a request.
fn messages(body: &Value) -> &[Value] {
    body.get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The texts of the `system` messages, joined by newlines.
fn system_text(body: &Value) -> String {
    messages(body)
        .iter()
        .filter(|m| role(m) == Some("system"))
        .map(content_text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// A message's content: a string, or its text parts joined by newlines.
fn content_text(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Context a CLI injects as user text: empty texts and texts starting with
/// `<system-reminder>` (Qwen puts its skill list in one, as the first text part of the first
/// user message; OpenCode's ACP prompts carry no injected context).
pub fn is_injected_context(text: &str) -> bool {
    let text = text.trim_start();
    text.is_empty() || text.starts_with("<system-reminder>")
}

/// The user text of a message: its last text (the string content, or the last text part) that
/// is not injected context, unquoted when the CLI shell-quoted it.
fn user_text(message: &Value) -> Option<String> {
    let texts: Vec<&str> = match message.get("content") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => Vec::new(),
    };
    texts
        .into_iter()
        .rev()
        .find(|t| !is_injected_context(t))
        .map(unquote)
}

/// `text` without the shell quoting `opencode run` adds to a message with spaces: a text
/// wrapped in double quotes loses them and its `\"` become `"`; anything else is kept.
fn unquote(text: &str) -> String {
    let trimmed = text.trim();
    match trimmed.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(inner) if trimmed.len() >= 2 => inner.replace("\\\"", "\"").replace("\\\\", "\\"),
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, text: &str) -> Value {
        json!({ "role": role, "content": text })
    }

    fn decide_on(body: Value) -> Reply {
        decide(&Shared::default(), &body)
    }

    #[test]
    fn skips_injected_context_and_counts_turns() {
        let messages = json!([
            msg("system", "You are opencode"),
            { "role": "user", "content": [
                { "type": "text", "text": "first" },
                { "type": "text", "text": "<system-reminder>ctx</system-reminder>" },
            ]},
            msg("assistant", "hi"),
            msg("user", "\"second turn\""),
        ]);
        assert_eq!(
            decide_on(json!({ "messages": messages })),
            text_reply("Hello from mock-chat! user_msgs=2 you said: second turn")
        );
    }

    #[test]
    fn tool_calls_and_results() {
        let reply = decide_on(json!({
            "messages": [msg("user", r#""TOOL bash {\"command\":\"echo hi\"}""#)],
        }));
        assert_eq!(
            reply,
            Reply::Message {
                text: Some("Calling bash.".to_string()),
                calls: vec![ToolCall {
                    id: "call_mock_1".to_string(),
                    name: "bash".to_string(),
                    arguments: r#"{"command":"echo hi"}"#.to_string(),
                }],
            }
        );
        let reply = decide_on(json!({ "messages": [
            msg("user", "TOOL x {}"),
            { "role": "assistant", "content": null, "tool_calls": [] },
            { "role": "tool", "tool_call_id": "call_mock_1", "content": "hi\n" },
        ]}));
        assert_eq!(reply, text_reply("TOOL_RESULT_SEEN: hi\n"));
    }

    #[test]
    fn structured_output_and_helpers() {
        let schema = json!({ "type": "object", "properties": { "answer": { "type": "string" } } });
        assert_eq!(
            decide_on(json!({
                "messages": [msg("user", "hi")],
                "response_format": { "type": "json_schema", "json_schema": { "name": "x", "schema": schema } },
            })),
            text_reply(r#"{"answer":"mock"}"#)
        );
        let reply = decide_on(json!({
            "messages": [msg("user", "hi")],
            "tools": [{ "type": "function", "function": { "name": "structured_output", "parameters": schema } }],
        }));
        assert!(matches!(
            reply,
            Reply::Message { text: None, calls } if calls[0].name == "structured_output"
                && calls[0].arguments == r#"{"answer":"mock"}"#
        ));
        let title = json!({ "messages": [
            msg("system", "You are a title generator. You output ONLY a thread title."),
            msg("user", "Generate a title for this conversation:\nMOCK_ERROR 500"),
        ]});
        assert_eq!(helper_kind(&title), Some(Helper::Title));
        assert_eq!(decide_on(title), text_reply(TITLE_TEXT));
        let memory = json!({ "messages": [
            msg("system", "You are now acting as the managed memory extraction subagent."),
            msg("user", "hi"),
        ]});
        assert_eq!(decide_on(memory), text_reply(MEMORY_TEXT));
        let suggestion = json!({ "messages": [
            msg("user", "hi"),
            msg("assistant", "hello"),
            msg("user", "[SUGGESTION MODE: Suggest what the user might naturally type next.]"),
        ]});
        assert_eq!(decide_on(suggestion), text_reply(SUGGESTION_TEXT));
        let classifier = json!({
            "messages": [msg("system", "You are a security classifier"), msg("user", "TOOL x {}")],
            "tool_choice": "required",
            "tools": [{ "type": "function", "function": {
                "name": "respond_in_schema",
                "parameters": { "type": "object", "properties": { "shouldBlock": { "type": "boolean" } } },
            }}],
        });
        assert_eq!(helper_kind(&classifier), Some(Helper::ForcedTool));
        assert!(matches!(
            decide_on(classifier),
            Reply::Message { text: None, calls } if calls[0].name == "respond_in_schema"
                && calls[0].arguments == r#"{"shouldBlock":false}"#
        ));
        assert_eq!(
            helper_kind(&json!({ "messages": [msg("user", "hi")] })),
            None
        );
    }

    #[test]
    fn stream_chunks_are_complete() {
        let completion = Completion {
            id: "chatcmpl-mock-1",
            model: "m",
            text: Some("Calling bash.".to_string()),
            calls: vec![ToolCall {
                id: "call_mock_1".to_string(),
                name: "bash".to_string(),
                arguments: r#"{"command":"ls"}"#.to_string(),
            }],
            slow: None,
        };
        let chunks: Vec<Value> = completion
            .chunks(true)
            .into_iter()
            .map(|e| e.data)
            .collect();
        let deltas: Vec<&Value> = chunks.iter().map(|c| &c["choices"][0]["delta"]).collect();
        assert_eq!(chunks.len(), 8, "{chunks:#?}");
        assert_eq!(deltas[0], &json!({ "role": "assistant", "content": "" }));
        let text: String = deltas[1..3]
            .iter()
            .map(|d| d["content"].as_str().unwrap())
            .collect();
        assert_eq!(text, "Calling bash.");
        assert_eq!(deltas[3]["tool_calls"][0]["id"], "call_mock_1");
        assert_eq!(deltas[3]["tool_calls"][0]["function"]["name"], "bash");
        let arguments: String = deltas[4..6]
            .iter()
            .map(|d| {
                d["tool_calls"][0]["function"]["arguments"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        assert_eq!(arguments, r#"{"command":"ls"}"#);
        assert_eq!(chunks[6]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(chunks[7]["choices"], json!([]));
        assert_eq!(chunks[7]["usage"]["total_tokens"], TOTAL_TOKENS);
        assert!(
            chunks
                .iter()
                .all(|c| c["object"] == "chat.completion.chunk")
        );
        let whole = completion.final_response();
        assert_eq!(
            whole["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            "bash"
        );
        assert_eq!(whole["usage"]["prompt_tokens"], PROMPT_TOKENS);
    }

    #[test]
    fn faults() {
        assert_eq!(
            decide_on(json!({ "messages": [msg("user", "MOCK_ERROR 400")] })),
            Reply::Error(400)
        );
        assert_eq!(
            decide_on(json!({ "messages": [msg("user", "MOCK_SLOW")] })),
            Reply::Slow(slow_chunks(SLOW_CHUNKS))
        );
    }
}
