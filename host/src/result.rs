//! The run's result: [`RunResult`], [`Usage`], [`TranscriptItem`], [`RawStreams`],
//! [`Checkpoint`], [`SessionState`].
//!
//! Owns the public shape of what a finished (or failed) run produced. Must not: parse provider
//! output (drivers do) or decide success (the pipeline does).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Token usage. `None` means "not reported"; `Some(0)` means "reported as zero".
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Usage {
    /// Input tokens.
    pub input_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: Option<u64>,
    /// Input tokens served from cache.
    pub cache_read_tokens: Option<u64>,
    /// Input tokens written to cache.
    pub cache_write_tokens: Option<u64>,
    /// Reasoning tokens.
    pub reasoning_tokens: Option<u64>,
    /// Cost in US dollars.
    pub cost_usd: Option<f64>,
}

/// Kind of a transcript item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ItemKind {
    /// Assistant text.
    Assistant,
    /// Reasoning.
    Thinking,
    /// User message.
    User,
    /// Tool call.
    ToolCall,
    /// Tool result.
    ToolResult,
    /// Session init.
    Init,
    /// Terminal result.
    Result,
    /// Non-protocol stdout line.
    Stdout,
    /// Stderr line.
    Stderr,
    /// System message.
    System,
    /// Summary.
    Summary,
    /// Question.
    Question,
    /// Failure.
    Failure,
    /// Other, named.
    Other(String),
}

/// One transcript entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TranscriptItem {
    /// Kind.
    pub kind: ItemKind,
    /// Text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Tool call id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Tool name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// Tool input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<serde_json::Value>,
    /// Error flag.
    pub is_error: bool,
    /// Model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Provider session id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Subagent scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_tool_call_id: Option<String>,
    /// Extra provider data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

/// The provider's official terminal event, exactly as received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TerminalPayload {
    /// Event name (`result`, `turn.completed`…).
    pub event: String,
    /// Exact JSON text.
    pub json: String,
}

/// Which stream a [`ChunkRecord`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamKind {
    /// Bytes the host wrote to the provider's stdin.
    Stdin,
    /// Bytes the provider wrote to stdout.
    Stdout,
    /// Bytes the provider wrote to stderr.
    Stderr,
}

/// One read from (or write to) the provider, in order: enough to replay a run with its
/// timing and chunking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ChunkRecord {
    /// The stream.
    pub stream: StreamKind,
    /// Time since the run attached to the process: for a process it spawned, when the host
    /// learned that its program runs (the spawner's report, read on a thread of its own);
    /// else the moment the run took a prewarmed or resident process. Input written to a
    /// prewarmed process before the run took it (its launch's prompt-independent input) is
    /// recorded first, at zero.
    ///
    /// A read is timed when it returned; a write when the host handed its bytes over (to the
    /// pipe, or to the writer task when the pipe was full), before the `write` call returns.
    /// The provider can read them from that moment, and one that was idle is often run at
    /// once on the writing thread's CPU, so that `write` returns only when the provider
    /// yields (measured beside Claude Code after a 100 ms pause: 1.1–1.4 ms p50).
    pub at: Duration,
    /// Offset of the chunk in that stream's bytes ([`RawStreams::stdout`], …).
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

/// The process the host launched for a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LaunchRecord {
    /// The program as the driver asked for it.
    pub program: String,
    /// The absolute path that ran.
    pub resolved: std::path::PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// Working directory.
    pub cwd: std::path::PathBuf,
    /// The process identity, recorded at spawn (none for a replay).
    pub process: Option<ProcessIdentity>,
    /// How the process was confined (none for a replay).
    pub containment: Option<crate::containment::ContainmentReport>,
}

/// What a run would launch, decided without spawning anything
/// ([`Agent::dry_run`](crate::Agent::dry_run)): for a person reviewing a third-party driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LaunchPlan {
    /// Driver name.
    pub driver: String,
    /// The program as the driver asked for it.
    pub program: String,
    /// The absolute path that would run.
    pub resolved: std::path::PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// Working directory.
    pub cwd: std::path::PathBuf,
    /// The whole environment, name and value, sorted by name; values of names that look
    /// like secrets (`KEY`, `TOKEN`, `SECRET`, `PASSWORD`, `CREDENTIAL`, `AUTH`, `COOKIE`,
    /// `SESSION`, `PRIVATE`) are masked as `<masked: N bytes>`.
    pub env: Vec<(String, String)>,
    /// The variables the driver added (names only; their values are in `env`).
    pub driver_env: Vec<String>,
    /// The private files the driver asked for: name and size.
    pub files: Vec<(String, usize)>,
    /// Bytes the host would write to stdin at start.
    pub stdin_bytes: usize,
    /// Whether stdin would stay open after them.
    pub keep_stdin_open: bool,
    /// The confinement the process would get.
    pub containment: crate::containment::ContainmentReport,
}

/// Whether an environment variable's name looks like it holds a secret.
pub(crate) fn looks_secret(name: &str) -> bool {
    const MARKERS: &[&str] = &[
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "AUTH",
        "COOKIE",
        "SESSION",
        "PRIVATE",
    ];
    let upper = name.to_ascii_uppercase();
    MARKERS.iter().any(|m| upper.contains(m))
}

/// `<masked: N bytes>` for values of secret-looking names.
pub(crate) fn mask_secret(name: &str, value: &str) -> String {
    if looks_secret(name) {
        format!("<masked: {} bytes>", value.len())
    } else {
        value.to_owned()
    }
}

/// Who the host's child for a run is: enough to tell it from a later process that reuses
/// the pid. Under a PID namespace this is the namespace's reaper, its init (the provider runs
/// as pid 2 of the namespace, below it); signals to the group reach the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProcessIdentity {
    /// The pid of the host's child.
    pub pid: u32,
    /// Its process group (every signal the host sends goes to the group).
    pub pgid: i32,
    /// Its start time in clock ticks after boot (`/proc/<pid>/stat` field 22), where the
    /// platform has it.
    pub start_ticks: Option<u64>,
}

/// Complete raw process I/O.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawStreams {
    /// Every stdout byte.
    pub stdout: Vec<u8>,
    /// Every stderr byte.
    pub stderr: Vec<u8>,
    /// Every byte the host wrote to stdin.
    pub stdin: Vec<u8>,
    /// The reads and writes, in order, with timing.
    pub chunks: Vec<ChunkRecord>,
    /// What was launched (none if the run failed before spawning). Shared, not copied: a
    /// thread's resident process serves many turns, and each turn's result refers to the
    /// one record of its launch (its containment report lists every filesystem rule).
    pub launch: Option<std::sync::Arc<LaunchRecord>>,
    /// The terminal event.
    pub terminal: Option<TerminalPayload>,
    /// When the host saw the provider process exit, timed as [`ChunkRecord::at`] is (since
    /// the run attached to the process): how long the process lived in this run as the host
    /// can tell, from the spawner's report that its program runs (read on a thread of its
    /// own, so a busy host does not delay it) to the report of its exit. `None` when it did
    /// not exit in this run (a thread kept it for its next turn), never started, or waiting
    /// for it failed.
    ///
    /// For a run on a process of its own, [`RunResult::duration`] minus this is the host's
    /// own time in the run: preparing and launching the process, then concluding after its
    /// exit (a caller's wall time around the run, or around an `adaptor run` process, minus
    /// this counts the rest too). `adaptor run --json` prints it as the result line's
    /// `provider_ms`.
    pub exited: Option<Duration>,
}

impl RawStreams {
    /// The bytes of one recorded chunk.
    pub fn chunk_bytes(&self, chunk: &ChunkRecord) -> &[u8] {
        let bytes = match chunk.stream {
            StreamKind::Stdin => &self.stdin,
            StreamKind::Stdout => &self.stdout,
            StreamKind::Stderr => &self.stderr,
        };
        bytes
            .get(chunk.offset..chunk.offset + chunk.len)
            .unwrap_or_default()
    }
}

/// What a provider needs to continue a session: its codec, resume id and the driver's guard
/// data. A thread store keeps one per record; the driver's resume guards (workspace, profile,
/// instructions) check its `data` before launch.
///
/// Plain data: a store rebuilds it from its rows. It is not a [`Checkpoint`] and cannot be
/// passed to a run; the runtime resumes a stored state only through its thread, under the
/// thread's lease and fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionState {
    /// Checkpoint encoding name (the driver's codec).
    pub codec: String,
    /// Provider resume id.
    pub resume_id: String,
    /// Id for humans.
    pub display_id: Option<String>,
    /// Driver-private data.
    pub data: BTreeMap<String, String>,
}

/// A resume point produced by a driver's parser at the end of a run.
///
/// Opaque: only the runtime makes one (from the driver's outcome, after its own checks), so a
/// caller cannot forge a valid checkpoint or resume an id it made up. Pass one from a
/// [`RunResult`] to [`RunOptions::resume`](crate::RunOptions::resume) to continue a plain run in
/// this process; to continue across processes, run in a [`Thread`](crate::Thread), whose store
/// keeps the [`SessionState`].
///
/// ```compile_fail
/// // The fields are private: a checkpoint cannot be built by hand.
/// fn forge(state: adaptor::SessionState) -> adaptor::Checkpoint {
///     adaptor::Checkpoint { state, valid: true }
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Checkpoint {
    #[serde(flatten)]
    state: SessionState,
    valid: bool,
}

impl Checkpoint {
    /// A checkpoint as the driver's parser reported it (`valid` is its claim; the pipeline
    /// invalidates it on a failed run).
    pub(crate) fn from_driver(state: SessionState, valid: bool) -> Self {
        Self { state, valid }
    }

    /// Checkpoint encoding name (the driver's codec).
    pub fn codec(&self) -> &str {
        &self.state.codec
    }

    /// Provider resume id.
    pub fn resume_id(&self) -> &str {
        &self.state.resume_id
    }

    /// Id for humans.
    pub fn display_id(&self) -> Option<&str> {
        self.state.display_id.as_deref()
    }

    /// Driver-private data.
    pub fn data(&self) -> &BTreeMap<String, String> {
        &self.state.data
    }

    /// Usable for resuming: set only after a clean, successful turn.
    pub fn is_valid(&self) -> bool {
        self.valid
    }

    /// The session state a store would keep.
    pub fn state(&self) -> &SessionState {
        &self.state
    }

    /// Mark this checkpoint unusable (the run it came from failed).
    pub(crate) fn invalidate(&mut self) {
        self.valid = false;
    }
}

/// How the provider process ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ExitInfo {
    /// Exit code.
    pub code: Option<i32>,
    /// Terminating signal.
    pub signal: Option<i32>,
    /// Stopped by the run timeout.
    pub timed_out: bool,
    /// Stopped by cancellation.
    pub cancelled: bool,
    /// The timeout was the idle watchdog: no output for too long.
    pub no_output: bool,
    /// The process did not exit: the turn ended and a thread kept it for its next turn.
    pub kept_alive: bool,
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// Run id.
    pub run_id: String,
    /// Driver (provider) name.
    pub provider: String,
    /// Model that answered, if reported.
    pub model: Option<String>,
    /// Final assistant text.
    pub text: String,
    /// Summary from the terminal event.
    pub summary: Option<String>,
    /// Usage, if reported.
    pub usage: Option<Usage>,
    /// Provider metadata.
    pub metadata: BTreeMap<String, String>,
    /// Resume point, if the provider reported a session.
    pub checkpoint: Option<Checkpoint>,
    /// Native structured output (raw JSON) as the driver reported it, if any.
    pub structured_output: Option<serde_json::Value>,
    /// With a schema: the mechanism used, the value found and its validation.
    pub structured: Option<crate::structured::StructuredOutput>,
    /// Process outcome.
    pub exit: ExitInfo,
    /// For thread runs: the thread, its record and how the run related to it.
    pub thread: Option<ThreadInfo>,
    /// Wall-clock duration of the run.
    pub duration: Duration,
    pub(crate) raw: RawStreams,
    pub(crate) transcript: Vec<TranscriptItem>,
}

impl RunResult {
    /// Complete raw stdout/stderr and the terminal payload.
    pub fn raw(&self) -> &RawStreams {
        &self.raw
    }

    /// The transcript, in order.
    pub fn transcript(&self) -> &[TranscriptItem] {
        &self.transcript
    }

    /// The provider's terminal event, exact JSON.
    pub fn terminal(&self) -> Option<&TerminalPayload> {
        self.raw.terminal.as_ref()
    }

    /// The provider session id, if one was reported.
    pub fn session_id(&self) -> Option<&str> {
        self.checkpoint.as_ref().map(|c| c.resume_id())
    }
}

/// How a thread run related to the stored session (on [`RunResult::thread`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ThreadStart {
    /// No active record: a new provider session.
    New,
    /// The stored session was resumed.
    Resumed,
    /// Forked from another thread's checkpoint.
    Forked {
        /// The parent thread's key.
        parent_key: String,
        /// The parent's record.
        parent_record_id: String,
    },
    /// The provider rejected the stored session; the run started a fresh one (at most once
    /// per run). Also announced by [`Event::ThreadFallback`](crate::Event::ThreadFallback).
    FreshAfterRejection {
        /// The record that could not be resumed (archived once the new one was persisted).
        previous_record_id: String,
        /// Why the resume was rejected.
        reason: String,
    },
}

/// What a thread run did to its thread (on [`RunResult::thread`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ThreadInfo {
    /// The key.
    pub key: String,
    /// The record now active for the key.
    pub record_id: String,
    /// How the run started.
    pub start: ThreadStart,
}
