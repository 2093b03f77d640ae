//! A scripted mock of the OpenAI Responses API, for end-to-end tests that run the real Codex
//! CLI (`codex-cli 0.171.0`) offline.
//!
//! This file owns the mock server ([`MockOpenAi`]), its deterministic "brain", the Codex
//! configuration that points the CLI at it ([`codex_home`]), the environment the CLI needs
//! ([`codex_env`]) and the lookup of the installed CLI ([`codex_path`]). The server plumbing
//! (127.0.0.1 only, an OS-chosen port, a thread and tokio runtime of its own, request
//! recording, SSE framing) and the brain's shared parts (`TOOL` parsing, schema synthesis)
//! live in [`crate::mock_http`].
//!
//! # Endpoints
//!
//! * `POST /v1/responses`: the reply chosen by the brain, streamed as server-sent events when
//!   the body has `"stream": true` (Codex always streams), else one JSON response object.
//! * anything else: 404 with an OpenAI error body. Codex 0.171.0 configured by [`codex_home`]
//!   sends nothing but `POST /v1/responses`.
//!
//! Every request is recorded ([`MockOpenAi::all_requests`]); the bodies of the Responses calls
//! are also available on their own ([`MockOpenAi::requests`]). Codex sends
//! `authorization: Bearer dummy` (the value of `MOCK_API_KEY`), `originator: codex_exec` (exec)
//! or the client name given to `initialize` (app-server), `session-id`, `thread-id`,
//! `x-codex-turn-metadata` and `x-codex-window-id`.
//!
//! # The brain
//!
//! The reply is chosen from the request's `input` items. The *user text* is the text of the
//! last `role: "user"` message's last `input_text` that is not injected context: texts
//! starting with `<environment_context>`, `<user_instructions>`, `<turn_aborted>` or
//! `# AGENTS.md instructions` are skipped, and so are `developer` messages. The first rule
//! that matches wins:
//!
//! 1. the last input item is a `function_call_output` or `custom_tool_call_output` → text
//!    `TOOL_RESULT_SEEN: <first 120 chars of its output>`;
//!    When it is a `tool_search_output` (the answer to rule 2's search) instead → a
//!    `function_call` of the tool it lists whose full name is the pending `TOOL <name>`
//!    (a namespace `ns` with tool `t` matches `ns__t`; the call carries `namespace`), or text
//!    `TOOL_SEARCH_FOUND_NOTHING: <name>`;
//! 2. the user text contains `TOOL <name> <json>` and the request does not offer `<name>` but
//!    offers `tool_search` (Codex 0.171 defers MCP tools behind it) → text `Searching for
//!    <name>.`, then a client-executed `tool_search_call` whose query is the name's words
//!    (`mcp__srv__stamp` → `mcp srv stamp`). Otherwise → text `Calling <name>.`, then a
//!    `function_call` item (`name`, `arguments` = the JSON as a string, `call_id`
//!    `call_mock_<n>`, n counting tool calls from 1 per server). For `apply_patch`, which Codex
//!    offers as a freeform *custom* tool, a `custom_tool_call` item whose `input` is the JSON's
//!    `input` string instead. Shell-escaped JSON (`{\"a\":1}`) is accepted too;
//! 3. the request has `text.format.type == "json_schema"` (how `--output-schema` and the
//!    app-server `outputSchema` reach the API) → the text of a JSON instance synthesised from
//!    `text.format.schema` ([`crate::mock_http::synthesise`]);
//! 4. the user text contains `THINK` → a `reasoning` item (summary `"Let me think"` +
//!    `" about it."` streamed as `response.reasoning_summary_text.delta`, raw content
//!    [`THINK_TEXT`] as `response.reasoning_text.delta`), then the rule-8 text;
//! 5. `MOCK_ERROR <status>` → that HTTP status with `{"error":{"message","type","code"}}`
//!    (400 `invalid_request_error`, 401 `invalid_api_key`, 429 `rate_limit_exceeded`,
//!    500/503 `server_error`, ...);
//! 6. `MOCK_SLOW` → 20 text deltas ([`SLOW_CHUNKS`]) 250 ms apart ([`SLOW_INTERVAL`]);
//! 7. `MOCK_FAIL_STREAM` → a complete message item (text [`FAIL_STREAM_TEXT`]), then
//!    `response.failed` with error code `server_error` and message [`FAIL_STREAM_MESSAGE`];
//! 8. otherwise → text `Hello from mock-openai! user_msgs=<n> you said: <text>`, where `n`
//!    counts the user messages that carry text other than injected context: it proves that a
//!    resumed thread carried its history.
//!
//! The stream is `response.created` → `response.in_progress` → per output item
//! `response.output_item.added`, then for a message `response.content_part.added` /
//! `response.output_text.delta` (at least two chunks) / `response.output_text.done` /
//! `response.content_part.done`, for a function call `response.function_call_arguments.delta`
//! (two chunks) / `.done`, for a custom tool call `response.custom_tool_call_input.delta`
//! (two chunks) / `.done`, for reasoning the summary-part and reasoning-text events, then
//! `response.output_item.done` → `response.completed` (with usage) or `response.failed`. Every
//! event carries `type` and a `sequence_number` counting from 0. The model reported is the
//! request's `model`.
//!
//! # Usage numbers
//!
//! Every completed response reports the same usage: `input_tokens` = [`INPUT_TOKENS`],
//! `input_tokens_details.cached_tokens` = [`CACHED_TOKENS`], `output_tokens` =
//! [`OUTPUT_TOKENS`], `output_tokens_details.reasoning_tokens` = [`REASONING_TOKENS`],
//! `total_tokens` = [`TOTAL_TOKENS`].
//!
//! What Codex 0.171.0 makes of them (both transports report the thread's running total,
//! not the turn's own usage):
//!
//! * `codex exec --json`: `turn.completed.usage` = `{input_tokens, cached_input_tokens,
//!   cache_write_input_tokens, output_tokens, reasoning_output_tokens}` summed over every
//!   request of the thread so far: 31 / 7 / 0 / 11 / 0 per request. A turn with one tool call
//!   makes two requests (62 / 14 / 0 / 22 / 0); `codex exec resume` of a thread whose first
//!   run made one request reports 62 / 14 / 0 / 22 / 0 after one more request. There is no
//!   `total_tokens`; `input_tokens` includes the cached tokens, as in the API.
//! * `codex app-server`: after each completed request, `thread/tokenUsage/updated
//!   {threadId, turnId, tokenUsage: {last, total, modelContextWindow}}`, where `last` is that
//!   request's usage (`inputTokens` 31, `cachedInputTokens` 7, `cacheWriteInputTokens` 0,
//!   `outputTokens` 11, `reasoningOutputTokens` 0, `totalTokens` 42) and `total` the running
//!   sum over the thread (84 after two requests, and so on across turns).
//!   `modelContextWindow` is 258400 for `gpt-5.5`. `thread/resume` is followed by one
//!   `thread/tokenUsage/updated` with the restored total (and the last turn's id).
//!
//! A request that fails (HTTP error, `response.failed`) or is interrupted makes no usage
//! update.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

pub use crate::mock_http::RecordedRequest;
use crate::mock_http::{
    Incoming, MockServer, SseEvent, json_response, mock_error_status, parse_tool_command,
    slow_chunks, split_in_two, sse_response, synthesise,
};

/// `usage.input_tokens` of every completed response (it includes the cached tokens).
pub const INPUT_TOKENS: u64 = 31;
/// `usage.input_tokens_details.cached_tokens` of every completed response.
pub const CACHED_TOKENS: u64 = 7;
/// `usage.output_tokens` of every completed response.
pub const OUTPUT_TOKENS: u64 = 11;
/// `usage.output_tokens_details.reasoning_tokens` of every completed response.
pub const REASONING_TOKENS: u64 = 0;
/// `usage.total_tokens` of every completed response.
pub const TOTAL_TOKENS: u64 = INPUT_TOKENS + OUTPUT_TOKENS;
/// Number of text deltas streamed for `MOCK_SLOW`.
pub const SLOW_CHUNKS: usize = 20;
/// Pause before each `MOCK_SLOW` text delta.
pub const SLOW_INTERVAL: Duration = Duration::from_millis(250);
/// The text of the message streamed before `response.failed` for `MOCK_FAIL_STREAM`.
pub const FAIL_STREAM_TEXT: &str = "Partial answer before the failure.";
/// The error message of `response.failed` for `MOCK_FAIL_STREAM`.
pub const FAIL_STREAM_MESSAGE: &str = "mock injected stream failure";
/// The raw reasoning text of the `THINK` reply (its summary is `Let me think about it.`).
pub const THINK_TEXT: &str = "Thinking hard about it.";
/// The model [`codex_home`] configures, and the one reported when a request names none. It
/// must be a slug Codex knows: with an unknown one Codex emits an error item
/// (`Model metadata for ... not found`) on every turn.
pub const DEFAULT_MODEL: &str = "gpt-5.5";
/// The API key [`codex_env`] puts in `MOCK_API_KEY` (Codex sends it as a bearer token).
pub const API_KEY: &str = "dummy";
/// Command that installs the Codex CLI where [`codex_path`] looks for it.
pub const CODEX_INSTALL_HINT: &str =
    "npm install --prefix $HOME/.cache/agent-adaptor-clis/codex @openai/codex@0.171.0";

/// Counters of a running mock.
#[derive(Default)]
struct Shared {
    tool_calls: AtomicU64,
    responses: AtomicU64,
}

/// A running mock OpenAI Responses API on `127.0.0.1`. It stops when dropped.
pub struct MockOpenAi {
    server: MockServer,
}

impl MockOpenAi {
    /// Starts the mock on `127.0.0.1` and an OS-chosen port. It serves from a thread of its
    /// own, so the caller's runtime (if any) may block while a CLI talks to it.
    pub async fn start() -> MockOpenAi {
        let shared = Arc::new(Shared::default());
        MockOpenAi {
            server: MockServer::start("mock-openai", move |request| handle(&shared, request)),
        }
    }

    /// Base URL for a Codex model provider's `base_url`, e.g. `http://127.0.0.1:40123/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.addr())
    }

    /// The JSON bodies of the `POST /v1/responses` requests received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.server.posted_bodies("/v1/responses")
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

/// Where the Codex CLI is installed: `$ADAPTOR_CODEX_BIN` if set, else
/// `$HOME/.cache/agent-adaptor-clis/codex/node_modules/.bin/codex` if it exists (a node shim
/// that runs the native binary of `@openai/codex-linux-x64`; `node` must be on `PATH`).
/// See [`CODEX_INSTALL_HINT`] for how to install it.
pub fn codex_path() -> Option<PathBuf> {
    crate::mock_http::installed_cli("ADAPTOR_CODEX_BIN", "codex", "codex")
}

/// Writes `<dir>/config.toml`: a Codex configuration that uses the mock at `base_url` (a
/// provider `mock`, Responses wire API, key from `MOCK_API_KEY`, no retries), model
/// [`DEFAULT_MODEL`], `approval_policy = "never"`, `sandbox_mode = "workspace-write"`, no
/// update check, plugins off (otherwise Codex resolves `api.github.com` to sync curated
/// plugins), analytics, feedback and OpenTelemetry off, and `workspace` trusted (as given and,
/// when it differs, canonicalised). `codex --strict-config` accepts it. Creates `dir` and
/// `<dir>/tmp` (the `TMPDIR` of [`codex_env`]) if missing; `dir` is the CLI's `CODEX_HOME`,
/// where it keeps its threads (`sessions/YYYY/MM/DD/rollout-*.jsonl`).
///
/// The trust entry does not spare `codex exec` its git check: in a workspace that is not a
/// git repository, exec stops with `Not inside a trusted directory and
/// --skip-git-repo-check was not specified.` (exit 1) unless given `--skip-git-repo-check`.
/// `codex app-server` has no such check.
pub fn codex_home(dir: &Path, base_url: &str, workspace: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("tmp"))?;
    let quote = |s: &str| Value::String(s.to_string()).to_string();
    let mut projects = vec![workspace.to_path_buf()];
    if let Ok(canonical) = workspace.canonicalize()
        && canonical != workspace
    {
        projects.push(canonical);
    }
    let mut config = format!(
        r#"model = {model}
model_provider = "mock"
approval_policy = "never"
sandbox_mode = "workspace-write"
check_for_update_on_startup = false

[model_providers.mock]
name = "Mock Responses"
base_url = {base_url}
wire_api = "responses"
env_key = "MOCK_API_KEY"
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 30000

[features]
plugins = false

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
"#,
        model = quote(DEFAULT_MODEL),
        base_url = quote(base_url),
    );
    for project in projects {
        config.push_str(&format!(
            "\n[projects.{}]\ntrust_level = \"trusted\"\n",
            quote(&project.display().to_string())
        ));
    }
    std::fs::write(dir.join("config.toml"), config)
}

/// Environment for running the Codex CLI with `codex_home` (written by [`codex_home`]) as its
/// `CODEX_HOME` and `home` (a temporary directory) as its `HOME`: `CODEX_HOME`, `HOME`,
/// `MOCK_API_KEY` = [`API_KEY`] and `TMPDIR` = `<codex_home>/tmp` (Codex leaves
/// `codex-bwrap-synthetic-mount-targets-<uid>/` there; `/tmp/codex-daemon-<uid>/` is
/// hard-coded). The host passes only an allowlisted environment, so everything the CLI needs
/// beyond `PATH` is in this list.
pub fn codex_env(codex_home: &Path, home: &Path) -> Vec<(String, String)> {
    [
        ("CODEX_HOME", codex_home.display().to_string()),
        ("HOME", home.display().to_string()),
        ("TMPDIR", codex_home.join("tmp").display().to_string()),
        ("MOCK_API_KEY", API_KEY.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The handler: dispatches on method and path (the request is recorded by [`MockServer`]).
fn handle(shared: &Shared, request: &Incoming<'_>) -> Response {
    match (request.method, request.path) {
        (&Method::POST, "/v1/responses") => {
            let n = shared.responses.fetch_add(1, Ordering::SeqCst) + 1;
            responses(shared, n, request.body.unwrap_or(&Value::Null))
        }
        (method, path) => error_response(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "not_found",
            &format!("mock-openai: no route for {method} {path}"),
        ),
    }
}

fn error_response(status: StatusCode, kind: &str, code: &str, message: &str) -> Response {
    json_response(
        status,
        // Keys in sorted order: the same bytes whether or not serde_json preserves insertion
        // order (the CLIs quote this body in their error messages, and the tests match it).
        &json!({ "error": { "code": code, "message": message, "param": null, "type": kind } }),
    )
}

fn api_error(status: u16) -> Response {
    let (kind, code, message) = match status {
        400 => (
            "invalid_request_error",
            "invalid_request",
            "mock-openai: invalid request",
        ),
        401 => (
            "invalid_request_error",
            "invalid_api_key",
            "mock-openai: incorrect API key provided",
        ),
        403 => (
            "invalid_request_error",
            "permission_denied",
            "mock-openai: permission denied",
        ),
        404 => (
            "invalid_request_error",
            "model_not_found",
            "mock-openai: not found",
        ),
        429 => (
            "requests",
            "rate_limit_exceeded",
            "mock-openai: rate limit reached",
        ),
        503 => (
            "server_error",
            "server_error",
            "mock-openai: service unavailable",
        ),
        _ => (
            "server_error",
            "server_error",
            "mock-openai: internal server error",
        ),
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    error_response(status, kind, code, message)
}

/// One output item of a reply.
#[derive(Debug, Clone, PartialEq)]
enum Item {
    Message(String),
    Reasoning {
        summary: Vec<String>,
        text: String,
    },
    FunctionCall {
        call_id: String,
        /// The namespace of a tool found by `tool_search` (Codex's MCP tools).
        namespace: Option<String>,
        name: String,
        arguments: String,
    },
    /// A client-executed `tool_search_call` (Codex defers MCP tools behind it).
    ToolSearch {
        call_id: String,
        query: String,
    },
    CustomToolCall {
        call_id: String,
        name: String,
        input: String,
    },
}

/// What the brain decided.
#[derive(Debug, PartialEq)]
enum Reply {
    Items(Vec<Item>),
    /// `MOCK_SLOW`: text streamed slowly, chunk by chunk.
    Slow(Vec<String>),
    /// `MOCK_FAIL_STREAM`: a message, then `response.failed`.
    FailStream(String),
    Error(u16),
}

/// `POST /v1/responses`.
fn responses(shared: &Shared, n: u64, body: &Value) -> Response {
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_MODEL)
        .to_string();
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let response_id = format!("resp_mock_{n}");
    let (items, slow, failed) = match decide(shared, body) {
        Reply::Error(status) => return api_error(status),
        Reply::Items(items) => (items, None, false),
        Reply::Slow(chunks) => (vec![Item::Message(chunks.concat())], Some(chunks), false),
        Reply::FailStream(text) => (vec![Item::Message(text)], None, true),
    };
    let stream_response = Stream {
        id: &response_id,
        model: &model,
        items: &items,
        slow,
        failed,
    };
    if stream {
        sse_response(stream_response.events())
    } else if failed {
        error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "server_error",
            FAIL_STREAM_MESSAGE,
        )
    } else {
        json_response(StatusCode::OK, &stream_response.final_response())
    }
}

/// The pieces of one streamed response.
struct Stream<'a> {
    id: &'a str,
    model: &'a str,
    items: &'a [Item],
    slow: Option<Vec<String>>,
    failed: bool,
}

impl Stream<'_> {
    fn item_id(&self, index: usize, item: &Item) -> String {
        let prefix = match item {
            Item::Message(_) => "msg",
            Item::Reasoning { .. } => "rs",
            Item::FunctionCall { .. } => "fc",
            Item::ToolSearch { .. } => "ts",
            Item::CustomToolCall { .. } => "ctc",
        };
        format!("{prefix}_{}_{index}", self.id.trim_start_matches("resp_"))
    }

    /// The item as in `response.output_item.done` (`done`) or `.added` (not `done`).
    fn item_json(&self, index: usize, item: &Item, done: bool) -> Value {
        let id = self.item_id(index, item);
        let status = if done { "completed" } else { "in_progress" };
        match item {
            Item::Message(text) => json!({
                "id": id,
                "type": "message",
                "status": status,
                "role": "assistant",
                "content": if done {
                    json!([{ "type": "output_text", "text": text, "annotations": [] }])
                } else {
                    json!([])
                },
            }),
            Item::Reasoning { summary, text } => {
                if done {
                    json!({
                        "id": id,
                        "type": "reasoning",
                        "summary": [{ "type": "summary_text", "text": summary.concat() }],
                        "content": [{ "type": "reasoning_text", "text": text }],
                        "encrypted_content": "mock-encrypted-reasoning",
                    })
                } else {
                    json!({ "id": id, "type": "reasoning", "summary": [] })
                }
            }
            Item::FunctionCall {
                call_id,
                namespace,
                name,
                arguments,
            } => {
                let mut item = json!({
                    "id": id,
                    "type": "function_call",
                    "status": status,
                    "call_id": call_id,
                    "name": name,
                    "arguments": if done { arguments.as_str() } else { "" },
                });
                if let Some(ns) = namespace {
                    item["namespace"] = json!(ns);
                }
                item
            }
            Item::ToolSearch { call_id, query } => json!({
                "id": id,
                "type": "tool_search_call",
                "status": status,
                "call_id": call_id,
                "execution": "client",
                "arguments": { "query": query },
            }),
            Item::CustomToolCall {
                call_id,
                name,
                input,
            } => json!({
                "id": id,
                "type": "custom_tool_call",
                "status": status,
                "call_id": call_id,
                "name": name,
                "input": if done { input.as_str() } else { "" },
            }),
        }
    }

    /// The response object as in `response.created` / `.in_progress` / `.completed` / `.failed`.
    fn response_json(&self, status: &str, output: Vec<Value>) -> Value {
        let (usage, error) = match status {
            "completed" => (usage(), Value::Null),
            "failed" => (
                Value::Null,
                json!({ "code": "server_error", "message": FAIL_STREAM_MESSAGE }),
            ),
            _ => (Value::Null, Value::Null),
        };
        json!({
            "id": self.id,
            "object": "response",
            "created_at": 1_767_225_600,
            "status": status,
            "model": self.model,
            "output": output,
            "usage": usage,
            "error": error,
            "incomplete_details": null,
        })
    }

    /// The whole response, for a request that did not ask to stream.
    fn final_response(&self) -> Value {
        let output = self
            .items
            .iter()
            .enumerate()
            .map(|(i, item)| self.item_json(i, item, true))
            .collect();
        self.response_json("completed", output)
    }

    /// The server-sent events of the response.
    fn events(&self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        let mut push = |name: &'static str, mut data: Value, delay: Option<Duration>| {
            data["type"] = json!(name);
            data["sequence_number"] = json!(events.len());
            events.push(SseEvent {
                event: name,
                data,
                delay,
            });
        };
        push(
            "response.created",
            json!({ "response": self.response_json("in_progress", vec![]) }),
            None,
        );
        push(
            "response.in_progress",
            json!({ "response": self.response_json("in_progress", vec![]) }),
            None,
        );
        let mut output = Vec::new();
        for (index, item) in self.items.iter().enumerate() {
            let item_id = self.item_id(index, item);
            push(
                "response.output_item.added",
                json!({ "output_index": index, "item": self.item_json(index, item, false) }),
                None,
            );
            let at = json!({ "item_id": item_id, "output_index": index });
            let with = |extra: Value| {
                let mut v = at.clone();
                if let (Some(v), Value::Object(extra)) = (v.as_object_mut(), extra) {
                    v.extend(extra);
                }
                v
            };
            match item {
                Item::Message(text) => {
                    let (chunks, delay) = match &self.slow {
                        Some(chunks) => (chunks.clone(), Some(SLOW_INTERVAL)),
                        None => (split_in_two(text), None),
                    };
                    let part = |text: &str| json!({ "type": "output_text", "text": text, "annotations": [] });
                    push(
                        "response.content_part.added",
                        with(json!({ "content_index": 0, "part": part("") })),
                        None,
                    );
                    for chunk in chunks {
                        push(
                            "response.output_text.delta",
                            with(json!({ "content_index": 0, "delta": chunk, "logprobs": [] })),
                            delay,
                        );
                    }
                    push(
                        "response.output_text.done",
                        with(json!({ "content_index": 0, "text": text, "logprobs": [] })),
                        None,
                    );
                    push(
                        "response.content_part.done",
                        with(json!({ "content_index": 0, "part": part(text) })),
                        None,
                    );
                }
                Item::Reasoning { summary, text } => {
                    let part = |text: &str| json!({ "type": "summary_text", "text": text });
                    let full = summary.concat();
                    push(
                        "response.reasoning_summary_part.added",
                        with(json!({ "summary_index": 0, "part": part("") })),
                        None,
                    );
                    for chunk in summary {
                        push(
                            "response.reasoning_summary_text.delta",
                            with(json!({ "summary_index": 0, "delta": chunk })),
                            None,
                        );
                    }
                    push(
                        "response.reasoning_summary_text.done",
                        with(json!({ "summary_index": 0, "text": full })),
                        None,
                    );
                    push(
                        "response.reasoning_summary_part.done",
                        with(json!({ "summary_index": 0, "part": part(&full) })),
                        None,
                    );
                    for chunk in split_in_two(text) {
                        push(
                            "response.reasoning_text.delta",
                            with(json!({ "content_index": 0, "delta": chunk })),
                            None,
                        );
                    }
                    push(
                        "response.reasoning_text.done",
                        with(json!({ "content_index": 0, "text": text })),
                        None,
                    );
                }
                Item::FunctionCall { arguments, .. } => {
                    for chunk in split_in_two(arguments) {
                        push(
                            "response.function_call_arguments.delta",
                            with(json!({ "delta": chunk })),
                            None,
                        );
                    }
                    push(
                        "response.function_call_arguments.done",
                        with(json!({ "arguments": arguments })),
                        None,
                    );
                }
                Item::ToolSearch { .. } => {}
                Item::CustomToolCall { input, .. } => {
                    for chunk in split_in_two(input) {
                        push(
                            "response.custom_tool_call_input.delta",
                            with(json!({ "delta": chunk })),
                            None,
                        );
                    }
                    push(
                        "response.custom_tool_call_input.done",
                        with(json!({ "input": input })),
                        None,
                    );
                }
            }
            let done = self.item_json(index, item, true);
            output.push(done.clone());
            push(
                "response.output_item.done",
                json!({ "output_index": index, "item": done }),
                None,
            );
        }
        if self.failed {
            push(
                "response.failed",
                json!({ "response": self.response_json("failed", output) }),
                None,
            );
        } else {
            push(
                "response.completed",
                json!({ "response": self.response_json("completed", output) }),
                None,
            );
        }
        events
    }
}

/// The `usage` object of every completed response.
fn usage() -> Value {
    json!({
        "input_tokens": INPUT_TOKENS,
        "input_tokens_details": { "cached_tokens": CACHED_TOKENS },
        "output_tokens": OUTPUT_TOKENS,
        "output_tokens_details": { "reasoning_tokens": REASONING_TOKENS },
        "total_tokens": TOTAL_TOKENS,
    })
}

/// The brain: the reply to a Responses request (see the module doc).
fn decide(shared: &Shared, body: &Value) -> Reply {
    let input = body
        .get("input")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();

    // 1. A tool result.
    if let Some(last) = input.last()
        && matches!(
            item_type(last),
            Some("function_call_output" | "custom_tool_call_output")
        )
    {
        let output: String = tool_output_text(last).chars().take(120).collect();
        return text_reply(format!("TOOL_RESULT_SEEN: {output}"));
    }

    let text = input
        .iter()
        .rev()
        .filter(|item| is_user_message(item))
        .find_map(user_text)
        .unwrap_or_default();
    let command = parse_tool_command(&text);

    // 1b. The output of our `tool_search_call`: call the tool it found.
    if let Some(last) = input.last()
        && item_type(last) == Some("tool_search_output")
    {
        let Some((wanted, args)) = &command else {
            return text_reply("TOOL_SEARCH_SEEN".into());
        };
        let n = shared.tool_calls.fetch_add(1, Ordering::SeqCst) + 1;
        return match found_tool(last, wanted) {
            Some((namespace, name)) => Reply::Items(vec![Item::FunctionCall {
                call_id: format!("call_mock_{n}"),
                namespace,
                name,
                arguments: args.to_string(),
            }]),
            None => text_reply(format!("TOOL_SEARCH_FOUND_NOTHING: {wanted}")),
        };
    }

    // 2. TOOL <name> <json>.
    if let Some((name, args)) = command {
        let n = shared.tool_calls.fetch_add(1, Ordering::SeqCst) + 1;
        let offered = |wanted: &str| {
            body.get("tools")
                .and_then(Value::as_array)
                .is_some_and(|tools| {
                    tools.iter().any(|t| {
                        t.get("name").and_then(Value::as_str) == Some(wanted)
                            || t.get("type").and_then(Value::as_str) == Some(wanted)
                    })
                })
        };
        if name != "apply_patch" && !offered(&name) && offered("tool_search") {
            return Reply::Items(vec![
                Item::Message(format!("Searching for {name}.")),
                Item::ToolSearch {
                    call_id: format!("call_mock_{n}"),
                    // Words, as a model would search (`mcp__srv__stamp` → `mcp srv stamp`).
                    query: name
                        .split('_')
                        .filter(|w| !w.is_empty())
                        .collect::<Vec<_>>()
                        .join(" "),
                },
            ]);
        }
        let call_id = format!("call_mock_{n}");
        let call = if name == "apply_patch" {
            let input = match args.get("input") {
                Some(Value::String(s)) => s.clone(),
                _ => args.to_string(),
            };
            Item::CustomToolCall {
                call_id,
                name: name.clone(),
                input,
            }
        } else {
            Item::FunctionCall {
                call_id,
                namespace: None,
                name: name.clone(),
                arguments: args.to_string(),
            }
        };
        return Reply::Items(vec![Item::Message(format!("Calling {name}.")), call]);
    }

    // 3. Structured output.
    if let Some(format) = body.pointer("/text/format")
        && format.get("type").and_then(Value::as_str) == Some("json_schema")
    {
        let schema = format.get("schema").cloned().unwrap_or(json!({}));
        return text_reply(synthesise(&schema).to_string());
    }

    let hello = format!(
        "Hello from mock-openai! user_msgs={} you said: {text}",
        input
            .iter()
            .filter(|item| is_user_message(item) && user_text(item).is_some())
            .count()
    );

    // 4. THINK.
    if text.contains("THINK") {
        return Reply::Items(vec![
            Item::Reasoning {
                summary: vec!["Let me think".to_string(), " about it.".to_string()],
                text: THINK_TEXT.to_string(),
            },
            Item::Message(hello),
        ]);
    }

    // 5. MOCK_ERROR <status>.
    if let Some(status) = mock_error_status(&text) {
        return Reply::Error(status);
    }

    // 6. MOCK_SLOW.
    if text.contains("MOCK_SLOW") {
        return Reply::Slow(slow_chunks(SLOW_CHUNKS));
    }

    // 7. MOCK_FAIL_STREAM.
    if text.contains("MOCK_FAIL_STREAM") {
        return Reply::FailStream(FAIL_STREAM_TEXT.to_string());
    }

    // 8. Default.
    text_reply(hello)
}

/// In a `tool_search_output`, the tool whose full name is `wanted`: a function named so, or
/// a function `t` of a namespace `ns` with `ns` + `__` + `t` (or `ns` + `t`) = `wanted`.
/// Returns (namespace, name).
fn found_tool(output: &Value, wanted: &str) -> Option<(Option<String>, String)> {
    let tools = output.get("tools").and_then(Value::as_array)?;
    for tool in tools {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        match tool.get("type").and_then(Value::as_str) {
            Some("namespace") => {
                for inner in tool
                    .get("tools")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let t = inner
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if format!("{name}__{t}") == wanted || format!("{name}{t}") == wanted {
                        return Some((Some(name.to_owned()), t.to_owned()));
                    }
                }
            }
            _ if name == wanted => return Some((None, name.to_owned())),
            _ => {}
        }
    }
    None
}

fn text_reply(text: String) -> Reply {
    Reply::Items(vec![Item::Message(text)])
}

fn item_type(item: &Value) -> Option<&str> {
    item.get("type").and_then(Value::as_str)
}

/// A `message` input item (the `type` may be omitted) with `role: "user"`.
fn is_user_message(item: &Value) -> bool {
    matches!(item_type(item), None | Some("message"))
        && item.get("role").and_then(Value::as_str) == Some("user")
}

/// Context Codex injects as user text.
fn is_injected_context(text: &str) -> bool {
    let text = text.trim_start();
    [
        "<environment_context>",
        "<user_instructions>",
        "<turn_aborted>",
        "# AGENTS.md instructions",
    ]
    .iter()
    .any(|prefix| text.starts_with(prefix))
}

/// The user text of a message: its content when a string, else its last `input_text` that is
/// not injected context.
fn user_text(message: &Value) -> Option<String> {
    match message.get("content") {
        Some(Value::String(s)) if !s.trim().is_empty() && !is_injected_context(s) => {
            Some(s.clone())
        }
        Some(Value::Array(parts)) => parts
            .iter()
            .rev()
            .filter(|p| matches!(item_type(p), Some("input_text" | "text")))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .find(|t| !is_injected_context(t))
            .map(str::to_string),
        _ => None,
    }
}

/// The output of a `function_call_output` / `custom_tool_call_output` item: a string, or the
/// text parts of a content list joined by newlines.
fn tool_output_text(item: &Value) -> String {
    match item.get("output") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Object(obj)) => match obj.get("content") {
            Some(Value::String(s)) => s.clone(),
            _ => Value::Object(obj.clone()).to_string(),
        },
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Value {
        json!({ "type": "message", "role": "user", "content": [{ "type": "input_text", "text": text }] })
    }

    fn decide_on(input: Vec<Value>) -> Reply {
        decide(&Shared::default(), &json!({ "input": input }))
    }

    #[test]
    fn skips_injected_context_and_counts_turns() {
        let input = vec![
            json!({ "type": "message", "role": "developer", "content": [{ "type": "input_text", "text": "rules" }] }),
            user("<environment_context>\n  <cwd>/x</cwd>\n</environment_context>"),
            user("first"),
            json!({ "type": "message", "role": "assistant", "content": [{ "type": "output_text", "text": "hi" }] }),
            user("second"),
        ];
        assert_eq!(
            decide_on(input),
            text_reply("Hello from mock-openai! user_msgs=2 you said: second".to_string())
        );
    }

    #[test]
    fn deferred_tools_are_searched_then_called() {
        let shared = Shared::default();
        let ask = json!({
            "tools": [{"type": "tool_search"}, {"type": "function", "name": "exec_command"}],
            "input": [user(r#"TOOL mcp__srv__stamp {"text":"hi"}"#)],
        });
        let Reply::Items(items) = decide(&shared, &ask) else {
            panic!("items")
        };
        assert!(
            matches!(&items[1], Item::ToolSearch { query, .. } if query == "mcp srv stamp"),
            "{items:?}"
        );
        let found = json!({
            "input": [
                user(r#"TOOL mcp__srv__stamp {"text":"hi"}"#),
                {"type": "tool_search_output", "tools": [
                    {"type": "namespace", "name": "mcp__srv", "tools": [{"type": "function", "name": "stamp"}]}
                ]}
            ],
        });
        assert_eq!(
            decide(&shared, &found),
            Reply::Items(vec![Item::FunctionCall {
                call_id: "call_mock_2".into(),
                namespace: Some("mcp__srv".into()),
                name: "stamp".into(),
                arguments: r#"{"text":"hi"}"#.into(),
            }])
        );
    }

    #[test]
    fn tool_calls_and_results() {
        let reply = decide_on(vec![user(r#"TOOL exec_command {"cmd":"echo hi"}"#)]);
        assert_eq!(
            reply,
            Reply::Items(vec![
                Item::Message("Calling exec_command.".to_string()),
                Item::FunctionCall {
                    call_id: "call_mock_1".to_string(),
                    namespace: None,
                    name: "exec_command".to_string(),
                    arguments: r#"{"cmd":"echo hi"}"#.to_string(),
                },
            ])
        );
        let patch = "*** Begin Patch\n*** Add File: a.txt\n+x\n*** End Patch\n";
        let reply = decide_on(vec![user(&format!(
            "TOOL apply_patch {}",
            json!({ "input": patch })
        ))]);
        assert!(matches!(
            &reply,
            Reply::Items(items) if items[1] == Item::CustomToolCall {
                call_id: "call_mock_1".to_string(),
                name: "apply_patch".to_string(),
                input: patch.to_string(),
            }
        ));
        let reply = decide_on(vec![
            user("TOOL x {}"),
            json!({ "type": "function_call_output", "call_id": "c", "output": "done" }),
        ]);
        assert_eq!(reply, text_reply("TOOL_RESULT_SEEN: done".to_string()));
    }

    #[test]
    fn stream_events_are_numbered_and_complete() {
        let items = [Item::Message("hello".to_string())];
        let stream = Stream {
            id: "resp_mock_1",
            model: "m",
            items: &items,
            slow: None,
            failed: false,
        };
        let events = stream.events();
        let names: Vec<&str> = events.iter().map(|e| e.event).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (i, event) in events.iter().enumerate() {
            assert_eq!(event.data["sequence_number"], i);
            assert_eq!(event.data["type"], event.event);
        }
        let done = &events.last().unwrap().data["response"];
        assert_eq!(done["usage"]["total_tokens"], TOTAL_TOKENS);
        assert_eq!(done["output"][0]["content"][0]["text"], "hello");
    }
}
