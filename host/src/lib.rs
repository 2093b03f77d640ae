//! # agent-adaptor
//!
//! Drive local coding-agent CLIs (Claude Code, Codex, Cursor Agent, any ACP agent, or the
//! bundled reference provider) behind one API — [`Agent`], [`Stream`], [`Event`],
//! [`RunResult`], [`Driver`] — where every provider driver is a sandboxed WebAssembly
//! component loaded at run time (`adaptor:driver@0.3.0`, see `wit/v0.3.0/driver.wit`; drivers
//! built against the released `0.1.0` and `0.2.0` keep loading).
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
//! ## Module tree
//!
//! The layering reads off the folders, bottom to top:
//!
//! - **vocabulary** (leaves, no I/O): `error`, `event`, `result`, `descriptor`, `policy`,
//!   `approval`, `structured`, `containment` (the caller's confinement settings and the
//!   report of what the kernel enforces), `session` (the driver session's actions and
//!   outcome in host types), `mcp` (MCP server declarations and their delivery rules),
//!   `skills` (skill sources, limits, the checked content-addressed set on disk),
//!   `workspace` (directories and git worktrees: `Workspace`, `WorkspaceManager`; its `git`
//!   runs through `process`), `profile` (the CLI's per-user state directory: `Profile`,
//!   making and observing a dedicated one), `instructions` (instructions bundles, checked
//!   and written), `relpath` (untrusted relative paths, checked);
//! - **`tools/`** (the `tools` feature) — host tools: the vocabulary (`Tool`, `ToolError`)
//!   and `server`, the agent's loopback MCP server, the only module that names `rmcp` or
//!   `axum`;
//! - **`wasm/`** — the only place that names wasmtime (`engine`, with `file_stamps` for
//!   what its compiled cache remembers of driver files; `guest`) and the
//!   WIT-generated types (`bindings` for the newest contract, `since_v0_1_0` and
//!   `since_v0_2_0` for the released `0.1.0` and `0.2.0` mapped onto it, `convert`);
//! - **`grant/` + `process/`** — the only places that decide (`grant`: the run's
//!   `ProcessGrant`: program, workspace, environment and its denylist, the filesystem
//!   confinement) and perform (`process`: confine with Landlock and a PID namespace, spawn
//!   through the spawner, signal, reap; `process::tool` runs the host's own tools, `git`)
//!   process actions;
//! - **`run/`** — the one pipeline: `prepare`, `turn`, `supervise`, `output`, `classify`,
//!   `decisions`, `resident`, `coordinator` (the thread stage);
//! - **`store/`** — thread stores behind the `ThreadStore` trait;
//! - **facade**: `agent` (options, builder, `Runner`), `stream`, `thread`, `driver`
//!   (loading), `packages` (the driver store: install, lock file, pinned loads, signatures,
//!   `Driver::open` by name or `name@version`, `Driver::reload`; above `driver`, which never
//!   names it), `inspect`, and the tool entries `cassette` and `replay` (behind the `replay` feature: a
//!   driver session fed recorded bytes outside the pipeline, for the conformance kit).
//!
//! Two knots of shared nouns remain in the import graph, on purpose (a unit test,
//! `architecture`, fails if another cycle appears, if a module outside `wasm/` names wasmtime
//! or a WIT type, if a module outside `tools/server` names rmcp or axum, or if a module
//! outside `process/` spawns):
//!
//! - `agent` ↔ `run` ↔ `thread`: the facade starts runs and hands out threads; a run reads
//!   its agent's settings and a thread runs on its agent.
//! - `approval` ↔ `error` ↔ `event` ↔ `result` ↔ `structured`: events carry approval requests
//!   and failure reasons, approval requests carry event metadata, results carry structured
//!   output and thread info, errors carry partial results.
//!
//! ## The spawner process (what linking this crate does to your executable)
//!
//! The host never forks itself: providers are forked by `adaptor-spawner`, one small process
//! per host that is your own executable started afresh from `/proc/self/exe` and taken over
//! before `main` by an `.init_array` hook of this crate (Linux with glibc). In every other
//! start of your program the hook only records that it ran. The spawner is started in the
//! background when the first `Agent` is built, lives in its own process group, dies with
//! your process, and never runs your `main`. Where your executable cannot serve as the
//! spawner, the same loop runs on a thread of your process (a warning is logged once). The
//! README's Embedding section says why (forking a host that maps wasmtime is slow and heavy).
//!
//! The sans-IO session itself is spoken in host types (`session`: launch, actions,
//! decisions, outcome, probes); only `wasm/convert` maps them onto the WIT types.

#![warn(missing_docs)]

mod agent;
mod approval;
pub mod cassette;
mod containment;
mod descriptor;
mod driver;
mod error;
mod event;
mod grant;
mod inspect;
mod instructions;
pub mod lifecycle;
mod mcp;
mod packages;
mod policy;
mod process;
mod profile;
mod relpath;
#[cfg(feature = "replay")]
pub mod replay;
mod result;
mod run;
mod session;
mod skills;
pub mod store;
mod stream;
mod structured;
mod thread;
#[cfg(feature = "tools")]
mod tools;
mod wasm;
mod workspace;

#[cfg(test)]
mod architecture;

pub use agent::{
    Agent, AgentBuilder, RunOptions, Runner, Spawn, fork_spawner, prepare_process, run_as,
    run_as_with,
};
pub use approval::{
    ApprovalError, ApprovalFuture, ApprovalHandler, ApprovalKind, ApprovalRequest, Choice,
    Resolution,
};
pub use containment::{Containment, ContainmentMode, ContainmentReport, PathAccess, PathRule};
pub use descriptor::{
    ApprovalCaps, Carry, DecisionModes, Descriptor, McpCaps, ModelInfo, PROFILE_VARIABLES,
    PolicyCaps, ProfileFile, ProfilePart, ProfileSpec, SandboxLevels, SessionCaps, StreamingCaps,
    StructuredOutputCaps, VersionRange,
};
pub use driver::{Driver, LoadOptions, LoadedDrivers, available_drivers, driver_dirs};
pub use error::{
    Error, FailureReason, InputRefusal, InstallError, InstructionsError, LaunchRefusal, Limit,
    LoadError, ProfileError, RunError, SignatureError, SpawnerForkError, StartRefusal, SteerError,
    ThreadError,
};
pub use event::{
    ApprovalResolved, DropReason, Dropped, Event, EventMeta, EventSource, ItemEvent, Notice, Phase,
    ProcessInfo, ProcessInfoKind, RunFinished, RunStarted, SessionStarted, TextDelta,
    ThreadFallback, ToolCall, ToolResult, UsageUpdate, VendorEvent,
};
pub use grant::{DEFAULT_ENV_ALLOWLIST, DRIVER_ENDPOINT_VARIABLES, DRIVER_ENV_DENYLIST};
pub use inspect::{
    Availability, Check, CheckLevel, EnvironmentReport, Inspection, MAX_INSPECTION_TIME,
    MAX_PROBE_ARG_BYTES, MAX_PROBE_ARGS, MAX_PROBE_TIME, MAX_PROBES,
};
pub use instructions::{
    InstructionsBundle, MAX_INSTRUCTION_BYTES, MAX_INSTRUCTION_ENTRY_BYTES, MAX_INSTRUCTION_FILES,
};
pub use mcp::{HOST_TOOLS_SERVER, Mcp, McpError, RemoteServer, StdioServer};
pub use packages::{
    DRIVER_STORE_ENV, DriverStore, Installed, InstalledDriver, LOCK_FILE, MAX_COMPONENT_BYTES,
    Package, SIGNATURE_ALGORITHM, SigningKey, TrustedKey, Verification, WASM_LAYER_MEDIA_TYPE,
    is_installable_name,
};
pub use policy::{ApprovalPolicy, DecisionMode, Fallback, Policy, QuestionMode, Sandbox, Toggle};
pub use profile::{ClonedProfile, Observed, Profile, ProfileFileState, ProfileState};
pub use result::{
    Checkpoint, ChunkRecord, ExitInfo, ItemKind, LaunchPlan, LaunchRecord, ProcessIdentity,
    RawStreams, RunResult, SessionState, StreamKind, TerminalPayload, ThreadInfo, ThreadStart,
    TranscriptItem, Usage,
};
pub use run::{
    CHECKPOINT_INVALIDATED, CONTRACT_VIOLATION, MAX_PLAUSIBLE_COST_USD, MAX_PLAUSIBLE_TOKENS,
    SUMMARY_MAX_BYTES, SUMMARY_TRUNCATED,
};
pub use skills::{MAX_ARCHIVE_READ, Skill, SkillError, SkillInfo, SkillLimits, SkillProvider};
pub use stream::{Canceller, MAX_STEER_BYTES, Steerer, Stream};
pub use structured::{Mechanism, PROMPT_SCHEMA_MARKER, Schema, StructuredOutput};
pub use thread::{DEFAULT_LEASE_TTL, Fork, Thread};
#[cfg(feature = "tools")]
pub use tools::{MAX_TOOL_NAME, Tool, ToolError, ToolsError};
pub use wasm::engine::CompileSource;
pub use wasm::guest::GuestLimits;
pub use workspace::{
    GitWorktree, Release, ResolvedWorkspace, Workspace, WorkspaceError, WorkspaceManager,
    WorkspaceRequest,
};

/// The newest WIT package this host implements (what the SDK builds drivers against).
pub const WIT_PACKAGE: &str = "adaptor:driver@0.3.0";
pub use wasm::SUPPORTED_WIT_VERSIONS;
