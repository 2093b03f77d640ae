//! The sans-IO driver session in host types: what a session asks the host for
//! ([`Launch`], [`Action`]s, [`AskRequest`]s), what the host tells it ([`Decision`],
//! [`SessionExit`], [`Resume`]) and what it hands back at the end ([`DriverOutcome`]), plus
//! Inspect's probes.
//!
//! `wasm/convert` maps the WIT types of every supported package version onto these (and
//! validates what a driver returns on the way in), so the pipeline, the grant, approvals and
//! classification never name a WIT type. Must not: hold state or do I/O.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::approval::{ApprovalKind, Choice};
use crate::error::FailureReason;
use crate::event::Event;
use crate::policy::Policy;
use crate::result::{Checkpoint, SessionState, TerminalPayload, TranscriptItem, Usage};
use crate::structured::Schema;

/// The per-run options a driver's request carries (borrowed from the run's options).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestOptions<'a> {
    /// Model override.
    pub model: Option<&'a str>,
    /// Extra instructions.
    pub instructions: Option<&'a str>,
    /// The run policy.
    pub policy: Policy,
    /// The output schema, if any.
    pub schema: Option<&'a Schema>,
    /// Whether the transport streams.
    pub streaming: bool,
    /// Caller metadata.
    pub metadata: Option<&'a BTreeMap<String, String>>,
    /// The MCP servers delivered to the CLI (declarations and the host tool server).
    pub mcp_servers: &'a [crate::mcp::RequestServer],
    /// The run's materialized skill directories (absolute; one shared parent).
    pub skill_dirs: &'a [String],
    /// The caller may add input to the running turn.
    pub steerable: bool,
}

/// What a session's `start` asks the host to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Launch {
    /// The program: the configured command, by name or as its resolved path.
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment additions.
    pub env: Vec<(String, String)>,
    /// Working directory (relative to the workspace, or absolute inside it).
    pub cwd: Option<String>,
    /// Bytes written to stdin first.
    pub stdin: Vec<u8>,
    /// Whether stdin stays open after them.
    pub keep_stdin_open: bool,
    /// Private files for the run's 0700 directory: (plain name, contents).
    pub files: Vec<(String, Vec<u8>)>,
}

/// A signal the driver asks for (sent to the provider's whole process group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DriverSignal {
    /// SIGINT.
    Interrupt,
    /// A graceful stop: SIGTERM now, SIGKILL after the grace period.
    Terminate,
    /// SIGKILL.
    Kill,
}

/// One thing a session asks the host to do.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// Emit this event (validated; its metadata is filled in by the emitter).
    Emit(Box<Event>),
    /// Write bytes to the provider's stdin.
    WriteStdin(Vec<u8>),
    /// Close the provider's stdin.
    CloseStdin,
    /// Ask for a decision (answered later with `on-decision`).
    RequestApproval(AskRequest),
    /// Call `on-timer(id)` after this long.
    SetTimer {
        /// Driver-chosen id.
        id: u64,
        /// Delay.
        after: Duration,
    },
    /// Forget a timer.
    CancelTimer(u64),
    /// Signal the provider.
    Signal(DriverSignal),
    /// The turn is over.
    EndTurn,
}

/// A driver's approval request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AskRequest {
    /// Driver-chosen id, unique within the run.
    pub id: String,
    /// What kind of decision.
    pub kind: ApprovalKind,
    /// One-line summary.
    pub title: String,
    /// The tool call it is about.
    pub tool_call_id: Option<String>,
    /// The tool's name.
    pub tool_name: Option<String>,
    /// Choices (questions).
    pub choices: Vec<Choice>,
    /// Details as a JSON object string, as the driver sent it (checked by the approval stage).
    pub details_json: Option<String>,
}

/// How the host resolved an approval request (delivered with `on-decision`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Allowed; optionally with a replacement tool input (JSON text).
    Approve(Option<String>),
    /// Refused, with a reason for the agent.
    Deny(String),
    /// A question's answer.
    Answer(String),
    /// Nobody answered in time.
    TimedOut,
    /// Nobody can answer.
    Unanswered,
    /// The run is being cancelled.
    Cancelled,
}

/// How the provider process ended, as the session is told (`on-exit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionExit {
    /// Exit code.
    pub code: Option<i32>,
    /// Terminating signal.
    pub signal: Option<i32>,
    /// Stopped by a timeout.
    pub timed_out: bool,
    /// Stopped by cancel.
    pub cancelled: bool,
}

/// How a run relates to a stored session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionMode {
    /// Resume if possible, else start a new session.
    ContinueOrStart,
    /// Resume; failing to is an error.
    ContinueOnly,
    /// A new session from the parent's state.
    Fork,
}

/// The resume instructions of a run request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resume {
    /// How to relate to the checkpoint.
    pub mode: SessionMode,
    /// The session (its codec is the driver's; not sent).
    pub state: SessionState,
}

/// A failure a driver reported.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DriverFailure {
    /// Why.
    pub reason: FailureReason,
    /// The provider's message.
    pub message: String,
    /// Details (a JSON value, already parsed).
    pub details: Option<serde_json::Value>,
}

/// Everything a session's `finish` returned, validated.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct DriverOutcome {
    /// Final assistant text.
    pub text: String,
    /// Summary, if the protocol has one.
    pub summary: Option<String>,
    /// Transcript.
    pub transcript: Vec<TranscriptItem>,
    /// The terminal event.
    pub terminal: Option<TerminalPayload>,
    /// Usage (absent ≠ zero).
    pub usage: Option<Usage>,
    /// The model that answered.
    pub model: Option<String>,
    /// Native structured output (parsed JSON).
    pub structured_output: Option<serde_json::Value>,
    /// The resume point, stamped with the driver's codec.
    pub checkpoint: Option<Checkpoint>,
    /// The driver's failure report.
    pub failure: Option<DriverFailure>,
    /// Provider metadata.
    pub metadata: BTreeMap<String, String>,
}

/// A command Inspect runs on the driver's behalf (same grant as a launch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Probe {
    /// Driver-chosen id.
    pub id: String,
    /// The program.
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
    /// How long before it is killed (clamped by the host).
    pub timeout: Duration,
}

/// What a probe produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeOutput {
    /// The probe's id.
    pub id: String,
    /// Exit code.
    pub code: Option<i32>,
    /// Captured stdout (bounded).
    pub stdout: Vec<u8>,
    /// Captured stderr (bounded).
    pub stderr: Vec<u8>,
    /// Why it could not run, if it could not.
    pub error: Option<String>,
}

/// A config the driver refused (`validate-config`, `config-fingerprint`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigRejection {
    /// JSON pointer of the offending field.
    pub path: String,
    /// Why.
    pub message: String,
}

impl ConfigRejection {
    /// The typed error naming `driver`, the field and why.
    pub(crate) fn into_error(self, driver: impl Into<String>) -> crate::error::Error {
        crate::error::Error::InvalidConfig {
            driver: driver.into(),
            path: self.path,
            message: self.message,
        }
    }
}

/// Severity of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckLevel {
    /// Fine.
    Pass,
    /// Works, with a caveat.
    Warn,
    /// Broken.
    Fail,
}

/// One environment check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Stable code, e.g. `cli.version`.
    pub code: String,
    /// Severity.
    pub level: CheckLevel,
    /// What was found.
    pub message: String,
    /// What to do about it.
    pub hint: Option<String>,
}
