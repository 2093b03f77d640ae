//! # agent-adaptor
//!
//! Drive local coding-agent CLIs (Claude Code, Codex, Cursor Agent, any ACP agent, or the
//! bundled reference provider) behind one API — [`Agent`], [`Stream`], [`Event`],
//! [`RunResult`], [`Driver`] — where every provider driver is a sandboxed WebAssembly
//! component loaded at run time (`adaptor:driver@0.1.0`, see `wit/driver.wit`).
//!
//! The host owns all I/O: it spawns the provider process the driver asks for (after checking
//! it against a grant), feeds its output to the driver, and turns the driver's actions into a
//! stream of events and a result. Drivers only parse.
//!
//! ```no_run
//! use adaptor::{Agent, Driver};
//!
//! # async fn demo() -> Result<(), adaptor::Error> {
//! let driver = Driver::builtin("reference")?;
//! let agent = Agent::builder(driver).build();
//! let result = agent.run("Say hello").await?;
//! println!("{}", result.text);
//! # Ok(()) }
//! ```
//!
//! Module map: `engine` (wasmtime engine and compiled cache), `driver` (loading), `guest`
//! (sandboxed calls), `grant` + `process` (what may be spawned, and spawning it), `pipeline`
//! (the single run path), `stream` (events and backpressure), `agent` (options), `event`,
//! `result`, `error`, `descriptor` (public types).

mod agent;
mod approval;
mod bindings;
pub mod cassette;
mod convert;
mod decisions;
mod descriptor;
mod driver;
mod engine;
mod error;
mod event;
mod grant;
mod guest;
mod inspect;
mod pipeline;
mod policy;
mod process;
pub mod replay;
mod resident;
mod result;
pub mod store;
mod stream;
mod structured;
mod thread;

pub use agent::{Agent, AgentBuilder, RunOptions, Runner, Spawn};
pub use approval::{
    ApprovalError, ApprovalFuture, ApprovalHandler, ApprovalKind, ApprovalRequest, Choice,
    Resolution,
};
pub use descriptor::{
    ApprovalCaps, DecisionModes, Descriptor, McpCaps, ModelInfo, PolicyCaps, SandboxLevels,
    SessionCaps, StreamingCaps, StructuredOutputCaps, VersionRange,
};
pub use driver::{Driver, LoadOptions, available_drivers, driver_dirs};
pub use engine::CompileSource;
pub use error::{Error, FailureReason, LaunchRefusal, Limit, LoadError, RunError, StartRefusal};
pub use event::{
    ApprovalResolved, Dropped, Event, EventMeta, ItemEvent, Notice, Phase, ProcessInfo,
    ProcessInfoKind, RunFinished, RunStarted, SessionStarted, TextDelta, ThreadFallback, ToolCall,
    ToolResult, UsageUpdate, VendorEvent,
};
pub use guest::GuestLimits;
pub use inspect::{Availability, Check, CheckLevel, EnvironmentReport, Inspection};
pub use pipeline::CHECKPOINT_INVALIDATED;
pub use policy::{ApprovalPolicy, DecisionMode, Fallback, Policy, QuestionMode, Sandbox, Toggle};
pub use process::DEFAULT_ENV_ALLOWLIST;
pub use result::{
    Checkpoint, ChunkRecord, ExitInfo, ItemKind, LaunchRecord, RawStreams, RunResult, StreamKind,
    TerminalPayload, TranscriptItem, Usage,
};
pub use stream::{Canceller, Stream};
pub use structured::{
    Mechanism, PROMPT_SCHEMA_MARKER, Schema, StructuredOutput, run_as, run_as_with,
};
pub use thread::{DEFAULT_LEASE_TTL, Thread, ThreadError, ThreadInfo, ThreadStart};

/// The WIT package version this host implements.
pub const WIT_PACKAGE: &str = "adaptor:driver@0.1.0";
