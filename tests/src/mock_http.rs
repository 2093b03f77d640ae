//! Plumbing shared by the scripted model-API mocks ([`crate::mock_anthropic`],
//! [`crate::mock_openai`], [`crate::mock_gemini`], [`crate::mock_chat`]).
//!
//! This file owns what does not depend on the API being mocked:
//!
//! * [`MockServer`]: an axum server on `127.0.0.1` and an OS-chosen port, on a thread of its
//!   own with its own tokio runtime (so a test may block, for example in
//!   `std::process::Command::output`, while a CLI talks to it), recording every request
//!   ([`RecordedRequest`]) and stopping when dropped;
//! * the response helpers: [`json_response`] and server-sent events ([`sse_response`],
//!   framed `event: <name>\n` + `data: <json>\n\n`, chunked, `text/event-stream`;
//!   [`data_sse_response`] for data-only framing, optionally ending in `data: [DONE]`);
//! * the parts of the deterministic "brain" every mock uses: finding `TOOL <name> <json>` in
//!   a prompt ([`parse_tool_command`]), the `MOCK_ERROR <status>` and `MOCK_SLOW` fault
//!   commands ([`mock_error_status`], [`slow_chunks`]), synthesising a JSON instance of a schema
//!   ([`synthesise`]) and splitting streamed text into chunks ([`split_in_two`]).
//!
//! What each mock answers (routes, reply shapes, usage numbers) stays in its own module.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use futures::StreamExt;
use serde_json::{Map, Value, json};

/// Upper bound on a request body a mock reads.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// One HTTP request a mock received.
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

/// A request as handed to a mock's handler (the body already read and parsed).
#[derive(Debug)]
pub struct Incoming<'a> {
    /// HTTP method.
    pub method: &'a Method,
    /// Path without the query.
    pub path: &'a str,
    /// Raw query string, if any.
    pub query: Option<&'a str>,
    /// Request headers.
    pub headers: &'a HeaderMap,
    /// The body parsed as JSON, or `None` when empty or not JSON.
    pub body: Option<&'a Value>,
}

type Handler = dyn Fn(&Incoming<'_>) -> Response + Send + Sync;

/// State shared by the server thread and the [`MockServer`] handle.
struct Shared {
    log: Mutex<Vec<RecordedRequest>>,
    handler: Box<Handler>,
}

/// A running mock HTTP server on `127.0.0.1`. It stops when dropped.
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MockServer {
    /// Starts a server on `127.0.0.1` and an OS-chosen port that answers every request with
    /// `handler` and records it. `name` names the thread (`<name>-<port>`) and prefixes
    /// server errors on stderr.
    pub fn start<H>(name: &str, handler: H) -> MockServer
    where
        H: Fn(&Incoming<'_>) -> Response + Send + Sync + 'static,
    {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("listener address");
        let shared = Arc::new(Shared {
            log: Mutex::new(Vec::new()),
            handler: Box::new(handler),
        });
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let state = shared.clone();
        let label = name.to_string();
        let thread = std::thread::Builder::new()
            .name(format!("{name}-{}", addr.port()))
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
                                eprintln!("{label}: server error: {err}");
                            }
                        }
                        _ = stop_rx => {}
                    }
                });
                // Dropping the runtime cancels the connections still being served.
                drop(runtime);
            })
            .expect("spawn mock thread");
        MockServer {
            addr,
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// The address the server listens on (`127.0.0.1:<port>`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far (any path, including unknown ones), in order.
    pub fn all_requests(&self) -> Vec<RecordedRequest> {
        self.log().clone()
    }

    /// The JSON bodies of the `POST <path>` requests received so far, in order.
    pub fn posted_bodies(&self, path: &str) -> Vec<Value> {
        self.log()
            .iter()
            .filter(|r| r.method == "POST" && r.path == path)
            .filter_map(|r| r.body.clone())
            .collect()
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Vec<RecordedRequest>> {
        self.shared.log.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The single axum handler: reads the body, asks the mock's handler, records the exchange.
async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_BODY)
        .await
        .unwrap_or_default();
    let body: Option<Value> = serde_json::from_slice(&bytes).ok();
    let path = parts.uri.path().to_string();
    let response = (shared.handler)(&Incoming {
        method: &parts.method,
        path: &path,
        query: parts.uri.query(),
        headers: &parts.headers,
        body: body.as_ref(),
    });
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

/// A response with `body` as `application/json`.
pub fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// One server-sent event of a streamed reply.
#[derive(Debug, Clone)]
pub struct SseEvent {
    /// The `event:` name.
    pub event: &'static str,
    /// The `data:` payload (written as one line of JSON).
    pub data: Value,
    /// Pause before the event is sent, if any.
    pub delay: Option<Duration>,
}

impl SseEvent {
    /// An event sent without pause.
    pub fn new(event: &'static str, data: Value) -> SseEvent {
        SseEvent {
            event,
            data,
            delay: None,
        }
    }
}

/// A `200 text/event-stream` response streaming `events` (chunked), each framed as
/// `event: <name>\ndata: <json>\n\n`, sleeping each event's delay before it.
pub fn sse_response(events: Vec<SseEvent>) -> Response {
    event_stream(
        events
            .into_iter()
            .map(|e| (e.delay, format!("event: {}\ndata: {}\n\n", e.event, e.data)))
            .collect(),
    )
}

/// Like [`sse_response`], but each event framed as `data: <json>\n\n` only (its `event`
/// name is not sent), as the Gemini and OpenAI Chat Completions APIs stream, and then
/// `data: [DONE]\n\n` when `done` (Chat Completions' end marker).
pub fn data_sse_response(events: Vec<SseEvent>, done: bool) -> Response {
    let mut frames: Vec<(Option<Duration>, String)> = events
        .into_iter()
        .map(|e| (e.delay, format!("data: {}\n\n", e.data)))
        .collect();
    if done {
        frames.push((None, "data: [DONE]\n\n".to_string()));
    }
    event_stream(frames)
}

/// A `200 text/event-stream` response streaming pre-framed `frames` (chunked), sleeping each
/// frame's delay before it.
fn event_stream(frames: Vec<(Option<Duration>, String)>) -> Response {
    let body = futures::stream::iter(frames).then(|(delay, frame)| async move {
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        Ok::<_, std::convert::Infallible>(frame)
    });
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Splits `s` into two non-empty halves on a char boundary (one piece if it is shorter than
/// two chars).
pub fn split_in_two(s: &str) -> Vec<String> {
    let count = s.chars().count();
    if count < 2 {
        return vec![s.to_string()];
    }
    let at = s.char_indices().nth(count / 2).map_or(s.len(), |(i, _)| i);
    vec![s[..at].to_string(), s[at..].to_string()]
}

/// The status of a `MOCK_ERROR <status>` command in `text` (500 when no number follows), if
/// the text has one.
pub fn mock_error_status(text: &str) -> Option<u16> {
    let rest = text.split("MOCK_ERROR").nth(1)?;
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some(digits.parse().unwrap_or(500))
}

/// The JSON value of a `MOCK_JSON <json>` command in `text`, compact, if the text has one
/// (what follows the value — a host's schema instructions, say — is ignored): the reply a
/// test of prompt-and-validate structured output needs from a model that follows them.
pub fn mock_json(text: &str) -> Option<String> {
    let rest = text.split("MOCK_JSON").nth(1)?.trim_start();
    let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
    values.next()?.ok().map(|v| v.to_string())
}

/// The `count` text chunks of a `MOCK_SLOW` reply: `slow chunk 1. `, `slow chunk 2. `, ...
pub fn slow_chunks(count: usize) -> Vec<String> {
    (1..=count).map(|i| format!("slow chunk {i}. ")).collect()
}

/// Finds `TOOL <name> <json>` in `text`; the JSON may be shell-escaped (`{\"a\":1}`).
pub fn parse_tool_command(text: &str) -> Option<(String, Value)> {
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

/// A JSON instance of `schema`: the first `const` or `enum` value, local `$ref`s followed,
/// the first branch of `anyOf`/`oneOf`/`allOf`, strings `"mock"`, numbers `1`, booleans
/// `true`, objects with every property, arrays with `minItems` items. Type names are matched
/// case-insensitively (Gemini's `OBJECT`, `STRING`).
pub fn synthesise(schema: &Value) -> Value {
    synthesise_in(schema, schema, 0)
}

/// [`synthesise`] for a sub-schema; `root` resolves local `$ref`s.
fn synthesise_in(schema: &Value, root: &Value, depth: usize) -> Value {
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
        return synthesise_in(target, root, depth + 1);
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(first) = obj
            .get(key)
            .and_then(Value::as_array)
            .and_then(|v| v.first())
        {
            return synthesise_in(first, root, depth + 1);
        }
    }
    let kind = match obj.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| !t.eq_ignore_ascii_case("null"))
            .unwrap_or("null"),
        _ if obj.contains_key("properties") => "object",
        _ if obj.contains_key("items") => "array",
        _ => "string",
    };
    // Gemini's `responseSchema` spells the types in upper case (`OBJECT`, `STRING`).
    match kind.to_ascii_lowercase().as_str() {
        "object" => {
            let mut out = Map::new();
            if let Some(props) = obj.get("properties").and_then(Value::as_object) {
                for (name, prop) in props {
                    out.insert(name.clone(), synthesise_in(prop, root, depth + 1));
                }
            }
            Value::Object(out)
        }
        "array" => {
            let count = obj.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = obj.get("items").cloned().unwrap_or(json!({}));
            (0..count)
                .map(|_| synthesise_in(&item, root, depth + 1))
                .collect()
        }
        "integer" | "number" => json!(1),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => json!("mock"),
    }
}

/// Where a real agent CLI is installed: `$<env_var>` if set and non-empty, else
/// `$HOME/.cache/agent-adaptor-clis/<package>/node_modules/.bin/<bin>` if it exists (where
/// `./x.sh test` installs the pinned version; `ADAPTOR_CLI_CACHE` moves that cache, and x.sh
/// then exports `$<env_var>`).
pub fn installed_cli(env_var: &str, package: &str, bin: &str) -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os(env_var).filter(|v| !v.is_empty()) {
        return Some(std::path::PathBuf::from(path));
    }
    let home = std::env::var_os("HOME")?;
    let path = std::path::PathBuf::from(home)
        .join(".cache/agent-adaptor-clis")
        .join(package)
        .join("node_modules/.bin")
        .join(bin);
    path.exists().then_some(path)
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
            synthesise(&schema),
            json!({
                "name": "mock", "count": 1, "ok": true, "kind": "a", "fixed": 7,
                "tags": ["mock", "mock"], "inner": { "x": 1 },
            })
        );
        let upper = json!({
            "type": "OBJECT",
            "properties": { "a": { "type": "STRING" }, "b": { "type": "INTEGER" } },
        });
        assert_eq!(synthesise(&upper), json!({ "a": "mock", "b": 1 }));
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
    fn parses_fault_commands() {
        assert_eq!(mock_error_status("MOCK_ERROR 429 please"), Some(429));
        assert_eq!(mock_error_status("MOCK_ERROR"), Some(500));
        assert_eq!(mock_error_status("hello"), None);
        let chunks = slow_chunks(3);
        assert_eq!(
            chunks,
            ["slow chunk 1. ", "slow chunk 2. ", "slow chunk 3. "]
        );
    }

    #[test]
    fn reads_mock_json_commands() {
        assert_eq!(
            mock_json("MOCK_JSON {\"a\": [1, 2]}\n\nRespond with only a JSON value"),
            Some(r#"{"a":[1,2]}"#.to_string())
        );
        assert_eq!(mock_json("MOCK_JSON not json"), None);
        assert_eq!(mock_json("hello"), None);
    }

    #[test]
    fn splits_text_in_two() {
        assert_eq!(split_in_two("héllo"), vec!["hé", "llo"]);
        assert_eq!(split_in_two("x"), vec!["x"]);
    }
}
