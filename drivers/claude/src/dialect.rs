//! What differs between the CLIs that speak Claude Code's stream-json protocol (Claude Code
//! itself; CodeBuddy Code, whose `--print --output-format stream-json` and SDK control
//! protocol are the same frames with other answer shapes): the command line, the shape of a
//! permission answer, the name used in messages, where plan files are written, and whether
//! the prompt waits for an `initialize` handshake.
//!
//! [`crate::StreamJsonSession`] holds everything else — the frame mapping, approvals, usage,
//! checkpoints, resident turns — once for every dialect. Must not: do I/O or map frames.

use adaptor_sdk::{Launch, RunRequest, StartError};
use serde_json::{Value, json};

/// The `request_id` of the `initialize` control request a handshaking transport sends first.
pub const INITIALIZE_REQUEST_ID: &str = "agent-adaptor-initialize";

/// How the CLI is driven for one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Transport {
    /// The CLI asks the host about tools over stdin (`control_request` / `can_use_tool`).
    pub bidirectional: bool,
    /// `--input-format stream-json`: the prompt is a `user` frame and stdin stays open, so
    /// the process can serve further turns (always when `bidirectional`).
    pub stream_input: bool,
    /// `--include-partial-messages`: token deltas as `stream_event` frames.
    pub partial: bool,
    /// Stdin starts with an `initialize` control request ([`INITIALIZE_REQUEST_ID`]); the
    /// prompt's `user` frame is written once the CLI has answered it.
    pub handshake: bool,
    /// `--output-format json`: stdout is one JSON document (a result object, or an array of
    /// history records ending in one), read whole when the process exits.
    pub whole_json: bool,
    /// The `initialize` request carries the MCP servers (`--await-initialize`): the CLI must
    /// answer `mcp_servers_applied: true`, or the run fails before the prompt is sent.
    pub mcp_in_initialize: bool,
}

/// One CLI speaking the stream-json protocol.
pub trait Dialect: 'static {
    /// The CLI's name in messages ("Claude Code").
    const PRODUCT: &'static str;
    /// A path fragment of the plan files the CLI writes in plan mode (CodeBuddy Code:
    /// `/.codebuddy/plans/`): the last `Write` of such a file is the plan an `ExitPlanMode`
    /// request without a `plan` field refers to. `None`: plans always come inline.
    const PLAN_DIR: Option<&'static str> = None;
    /// The `result` frame's `usage` and `total_cost_usd` are the whole session's totals, not
    /// the turn's (CodeBuddy Code 2.117.0, also in a resumed or resident turn): the turn's
    /// usage is then the sum over its assistant messages, and no cost is reported (the
    /// session totals stay in the terminal payload).
    const RESULT_USAGE_IS_SESSION_TOTAL: bool = false;

    /// The launch for `request` (already checked against the descriptor by the host) and
    /// the transport it selects; `steerable`: the caller may add input while the turn runs
    /// (only for a dialect whose driver declares steering), so stdin must stay open.
    fn launch(
        request: &RunRequest,
        config: &Value,
        steerable: bool,
    ) -> Result<(Launch, Transport), StartError>;

    /// The tool a wrapper call stands for (CodeBuddy Code's `DeferExecuteTool` with input
    /// `{"toolName", "params"}`): the inner tool's name and input, shown in events,
    /// transcript and approval requests. Answers still carry the wrapper's own input.
    fn unwrap_tool(_name: &str, _input: &Value) -> Option<(String, Value)> {
        None
    }

    /// The `response` of a `control_response` that lets a tool run with `input`.
    fn allow(input: Value, tool_use_id: Option<&str>) -> Value;

    /// The `response` of a `control_response` that refuses a tool; `interrupt` ends the turn.
    fn deny(message: &str, interrupt: bool, tool_use_id: Option<&str>) -> Value;
}

/// The SDK `user` frame carrying `prompt` (both CLIs read this shape on stdin).
pub fn user_frame(prompt: &str) -> Value {
    json!({
        "type": "user",
        "session_id": "",
        "parent_tool_use_id": null,
        "message": {"role": "user", "content": prompt},
    })
}

/// `frame` as one NDJSON line.
pub fn ndjson(frame: &Value) -> Vec<u8> {
    let mut line = frame.to_string();
    line.push('\n');
    line.into_bytes()
}

/// Claude Code.
pub struct ClaudeCode;

impl Dialect for ClaudeCode {
    const PRODUCT: &'static str = "Claude Code";

    fn launch(
        request: &RunRequest,
        config: &Value,
        steerable: bool,
    ) -> Result<(Launch, Transport), StartError> {
        crate::launch(request, config, steerable)
    }

    fn allow(input: Value, tool_use_id: Option<&str>) -> Value {
        let mut inner = json!({ "behavior": "allow", "updatedInput": input });
        if let Some(t) = tool_use_id {
            inner["toolUseID"] = json!(t);
        }
        inner
    }

    fn deny(message: &str, interrupt: bool, tool_use_id: Option<&str>) -> Value {
        let mut inner = json!({ "behavior": "deny", "message": message, "interrupt": interrupt });
        if let Some(t) = tool_use_id {
            inner["toolUseID"] = json!(t);
        }
        inner
    }
}
