//! JSON-RPC 2.0 as ACP uses it: one JSON object per line on stdio, in both directions.
//!
//! Owns: encoding the client's requests, notifications and responses; numbering requests and
//! remembering what each one was for; classifying a received frame (response, request or
//! notification) strictly. Must not: know ACP methods' meaning (`session.rs` does).

use std::collections::BTreeMap;

use adaptor_sdk::json::str_field;
use serde_json::{Value, json};

/// What a request of ours was for, so its response can be routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Call {
    Initialize,
    NewSession,
    LoadSession,
    ResumeSession,
    /// `session/set_config_option` for this option id.
    SetConfigOption(String),
    SetMode,
    SetModel,
    Prompt,
}

/// The client's side of the connection: request ids and the calls awaiting a response.
#[derive(Debug, Default)]
pub(crate) struct Rpc {
    next_id: u64,
    pending: BTreeMap<u64, Call>,
}

impl Rpc {
    /// Encode a request and remember it.
    pub(crate) fn request(&mut self, call: Call, method: &str, params: Value) -> Vec<u8> {
        self.next_id += 1;
        self.pending.insert(self.next_id, call);
        line(&json!({ "jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params }))
    }

    /// The call a response answers, removed from the pending set; `None` for an id we never
    /// sent or that was answered already.
    pub(crate) fn take(&mut self, id: &Value) -> Option<Call> {
        id.as_u64().and_then(|id| self.pending.remove(&id))
    }

    /// Whether a call of this kind awaits its response.
    pub(crate) fn awaits(&self, call: &Call) -> bool {
        self.pending.values().any(|c| c == call)
    }
}

/// Encode a notification.
pub(crate) fn notification(method: &str, params: Value) -> Vec<u8> {
    line(&json!({ "jsonrpc": "2.0", "method": method, "params": params }))
}

/// Encode the response to an agent's request.
pub(crate) fn response(id: &Value, result: Value) -> Vec<u8> {
    line(&json!({ "jsonrpc": "2.0", "id": id, "result": result }))
}

/// Encode an error response to an agent's request.
pub(crate) fn error_response(id: &Value, code: i64, message: &str) -> Vec<u8> {
    line(&json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }))
}

/// JSON-RPC's "method not found".
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;

fn line(value: &Value) -> Vec<u8> {
    let mut bytes = value.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

/// A received frame, classified.
#[derive(Debug)]
pub(crate) enum Frame<'a> {
    /// The answer to one of our requests: its result, or its error object.
    Response {
        id: &'a Value,
        outcome: Result<&'a Value, &'a Value>,
    },
    /// A request from the agent (it awaits our response).
    Request {
        id: &'a Value,
        method: &'a str,
        params: &'a Value,
    },
    /// A notification from the agent.
    Notification { method: &'a str, params: &'a Value },
}

static NULL: Value = Value::Null;

/// Classify a frame; the error says what makes it no JSON-RPC 2.0 message.
pub(crate) fn classify(frame: &Value) -> Result<Frame<'_>, String> {
    if str_field(frame, "jsonrpc") != Some("2.0") {
        return Err("a frame without \"jsonrpc\": \"2.0\"".into());
    }
    let params = frame.get("params").unwrap_or(&NULL);
    match (frame.get("id"), str_field(frame, "method")) {
        (Some(id), Some(method)) => Ok(Frame::Request { id, method, params }),
        (None, Some(method)) => Ok(Frame::Notification { method, params }),
        (Some(id), None) => match (frame.get("result"), frame.get("error")) {
            (Some(result), None) => Ok(Frame::Response {
                id,
                outcome: Ok(result),
            }),
            (None, Some(error)) if error.is_object() => Ok(Frame::Response {
                id,
                outcome: Err(error),
            }),
            _ => Err(format!(
                "a response to id {id} without exactly one of result and error"
            )),
        },
        (None, None) => Err("a frame with neither id nor method".into()),
    }
}

/// A JSON-RPC error object as text: its message, its code and its data.
pub(crate) fn describe_error(error: &Value) -> String {
    let message = str_field(error, "message").unwrap_or("(no message)");
    let code = error
        .get("code")
        .map(Value::to_string)
        .unwrap_or_else(|| "?".into());
    match error.get("data").filter(|d| !d.is_null()) {
        Some(Value::String(data)) => format!("{message} (code {code}): {data}"),
        Some(data) => format!("{message} (code {code}): {data}"),
        None => format!("{message} (code {code})"),
    }
}
