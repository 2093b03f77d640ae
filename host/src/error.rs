//! The crate's one error type, [`Error`], and the business-failure type [`RunError`].
//!
//! Pre-start problems (bad config, program not found, launch refused, …) are distinct
//! variants; failures after the provider process started are [`Error::Run`] carrying the
//! partial [`RunResult`]. Must not: format for terminals or decide exit codes (the CLI does).

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use crate::result::RunResult;

/// Every error this crate returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A driver could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A driver store operation (install, remove, list, verify, or resolving an installed
    /// driver's name) failed; the store is as it was.
    #[error(transparent)]
    Install(#[from] InstallError),
    /// An approval answer was refused (already resolved, wrong kind, expired, detached, not a
    /// choice).
    #[error(transparent)]
    Approval(#[from] crate::approval::ApprovalError),
    /// A thread could not run or be saved (see [`ThreadError`](crate::ThreadError)).
    #[error(transparent)]
    Thread(#[from] ThreadError),
    /// An MCP server declaration cannot be delivered (see [`McpError`](crate::McpError)).
    /// Nothing was started.
    #[error(transparent)]
    Mcp(#[from] crate::mcp::McpError),
    /// The agent's tools cannot be served (see [`ToolsError`](crate::ToolsError)). Nothing was
    /// started.
    #[cfg(feature = "tools")]
    #[error(transparent)]
    Tools(#[from] crate::tools::ToolsError),
    /// The driver rejected its configuration.
    #[error("driver `{driver}` rejected its config at `{path}`: {message}")]
    InvalidConfig {
        /// Driver name.
        driver: String,
        /// JSON pointer of the offending field (empty for the whole object).
        path: String,
        /// What was wrong.
        message: String,
    },
    /// The driver trapped (panic, CPU or memory limit, …). The instance was discarded; the
    /// next run starts from a fresh one.
    #[error("driver `{driver}` trapped in `{call}`: {message}")]
    DriverTrap {
        /// Driver name.
        driver: String,
        /// The guest function that trapped.
        call: &'static str,
        /// Trap message (with the guest's stderr, e.g. a panic message).
        message: String,
    },
    /// A sandbox limit stopped a driver call. The instance is discarded (the next run gets a
    /// fresh one); a run in progress fails and its process group is stopped.
    #[error("driver `{driver}` exceeded its {limit} in `{call}`")]
    LimitExceeded {
        /// Driver name.
        driver: String,
        /// The guest function that was stopped.
        call: &'static str,
        /// Which limit, with its value.
        limit: Limit,
    },
    /// The driver returned something the host refuses (an invalid event, bad JSON, …).
    #[error("driver `{driver}` broke the contract in `{call}`: {message}")]
    DriverContract {
        /// Driver name.
        driver: String,
        /// The guest function concerned.
        call: &'static str,
        /// What was wrong.
        message: String,
    },
    /// The driver refused to start this request.
    #[error("driver `{driver}` refused the request ({kind}): {message}")]
    StartRefused {
        /// Driver name.
        driver: String,
        /// Why.
        kind: StartRefusal,
        /// The driver's explanation.
        message: String,
    },
    /// The driver asked for a process launch the grant does not allow. Nothing was spawned.
    #[error("launch refused for driver `{driver}`: {refusal}")]
    LaunchRefused {
        /// Driver name.
        driver: String,
        /// What was refused.
        refusal: LaunchRefusal,
    },
    /// The kernel cannot confine the provider as the caller's [`Containment`](crate::Containment)
    /// requires (no Landlock, no PID namespace, a path to allow that does not exist). Nothing
    /// was spawned. [`Containment::best_effort`](crate::Containment::best_effort) runs anyway.
    #[error("cannot confine the provider of driver `{driver}`: {reason}")]
    ContainmentUnavailable {
        /// Driver name.
        driver: String,
        /// What is missing.
        reason: String,
    },
    /// Instructions were given to a driver whose descriptor does not declare
    /// `instructions`: they would be dropped, so the run is refused before anything starts.
    #[error(
        "driver `{driver}` cannot pass instructions to its CLI (its descriptor does not declare `instructions`)"
    )]
    InstructionsUnsupported {
        /// Driver name.
        driver: String,
    },
    /// [`RunOptions::steering`](crate::RunOptions::steering) was asked of a driver whose
    /// descriptor does not declare `steering`. Nothing was started.
    #[error(
        "driver `{driver}` cannot take input while a turn runs (its descriptor does not declare `steering`)"
    )]
    SteeringUnsupported {
        /// Driver name.
        driver: String,
    },
    /// [`AgentBuilder::prewarm`](crate::AgentBuilder::prewarm): no process can be started
    /// before its run for this driver and these default options (the launch depends on the
    /// prompt, the defaults are fixed per run, or the CLI does not wait for its first input
    /// and exited soon after its start). Nothing is left running.
    #[error("driver `{driver}` cannot keep prewarmed processes: {reason}")]
    PrewarmUnsupported {
        /// Driver name.
        driver: String,
        /// Why.
        reason: String,
    },
    /// [`RunOptions::skills`](crate::RunOptions::skills) were given to a driver whose
    /// descriptor does not declare `skills`. Nothing was started (skills are never silently
    /// dropped).
    #[error(
        "driver `{driver}` cannot pass skills to its CLI (its descriptor does not declare `skills`); {count} skill(s) were asked for"
    )]
    SkillsUnsupported {
        /// Driver name.
        driver: String,
        /// How many skills the run had.
        count: usize,
    },
    /// The run's skills could not be resolved, checked or written (see
    /// [`SkillError`](crate::SkillError)). Nothing was started.
    #[error(transparent)]
    Skill(#[from] crate::skills::SkillError),
    /// The run's managed workspace (a git worktree) could not be resolved (see
    /// [`WorkspaceError`](crate::WorkspaceError)). Nothing was started.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// The agent's dedicated profile could not be made (see
    /// [`ProfileError`](crate::ProfileError)). Nothing was started.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// The run's instructions bundle was refused (see
    /// [`InstructionsError`](crate::InstructionsError)). Nothing was started.
    #[error(transparent)]
    Instructions(#[from] InstructionsError),
    /// The granted program could not be found.
    #[error("program `{program}` for driver `{driver}` was not found: {detail}")]
    ProgramNotFound {
        /// Driver name.
        driver: String,
        /// The configured program.
        program: String,
        /// Where it was looked for.
        detail: String,
    },
    /// The workspace directory is unusable.
    #[error("invalid workspace `{path}`: {reason}")]
    InvalidWorkspace {
        /// The path given.
        path: String,
        /// Why.
        reason: String,
    },
    /// Spawning the provider process failed.
    #[error("could not start `{program}` for driver `{driver}`: {source}")]
    Spawn {
        /// Driver name.
        driver: String,
        /// The program.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// An explicit policy value the driver cannot honour. Nothing was started.
    #[error("driver `{driver}` does not support {dimension} = {value}")]
    PolicyUnsupported {
        /// Driver name.
        driver: String,
        /// The policy dimension (`sandbox`, `web_search`, `browser`).
        dimension: String,
        /// The requested value.
        value: String,
    },
    /// An explicit approval mode the driver cannot honour. Nothing was started.
    #[error("driver `{driver}` does not support approval mode {mode} for {kind}")]
    ApprovalModeUnsupported {
        /// Driver name.
        driver: String,
        /// `permission`, `plan_review`, `question` or `fallback`.
        kind: String,
        /// The requested mode.
        mode: String,
    },
    /// The output schema is unusable (does not compile, recursive, non-local references).
    /// Nothing was started.
    #[error("invalid output schema: {reason}")]
    InvalidSchema {
        /// What is wrong.
        reason: String,
    },
    /// No structured-output mechanism of the driver fits this run. Nothing was started.
    #[error("driver `{driver}` cannot produce structured output here: {reason}")]
    StructuredOutputUnsupported {
        /// Driver name.
        driver: String,
        /// Why.
        reason: String,
    },
    /// The result could not be decoded into the requested type.
    #[error("cannot decode the result: {message}")]
    Decode {
        /// What went wrong.
        message: String,
    },
    /// A checkpoint given to resume cannot be used with this driver.
    #[error("cannot resume with this checkpoint for driver `{driver}`: {reason}")]
    InvalidCheckpoint {
        /// Driver name.
        driver: String,
        /// Why (not resumable, codec mismatch, not valid).
        reason: String,
    },
    /// The agent was closed; no more runs.
    #[error("the agent is closed")]
    AgentClosed,
    /// The run started and failed; the partial result is inside.
    #[error(transparent)]
    Run(Box<RunError>),
    /// The run task ended without a result (the runtime shut down).
    #[error("the run ended without a result: {0}")]
    Lost(String),
}

impl Error {
    /// The [`RunError`] if this is a business failure of a started run.
    pub fn as_run_error(&self) -> Option<&RunError> {
        match self {
            Error::Run(e) => Some(e),
            _ => None,
        }
    }
}

/// Why a driver refused to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StartRefusal {
    /// The request cannot be expressed for this CLI.
    InvalidRequest,
    /// Not supported in this combination.
    Unsupported,
    /// The resume state belongs elsewhere.
    ResumeRejected,
}

impl fmt::Display for StartRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StartRefusal::InvalidRequest => "invalid request",
            StartRefusal::Unsupported => "unsupported",
            StartRefusal::ResumeRejected => "resume rejected",
        })
    }
}

/// What about a launch the grant refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchRefusal {
    /// The program is not the granted one.
    #[error("program `{requested}` is not the granted program `{granted}`")]
    Program {
        /// What the driver asked for.
        requested: String,
        /// What the grant allows.
        granted: String,
    },
    /// The working directory leaves the workspace.
    #[error("working directory `{cwd}` is outside the workspace `{workspace}`")]
    Cwd {
        /// The requested cwd.
        cwd: String,
        /// The workspace.
        workspace: String,
    },
    /// A private file name is not a plain file name.
    #[error("private file name `{0}` is not a plain file name")]
    FileName(String),
    /// An environment variable name or value is unusable.
    #[error("environment variable `{0}` has an invalid name or value")]
    Env(String),
    /// An argument contains a NUL byte.
    #[error("argument {0} contains a NUL byte")]
    Arg(usize),
    /// The driver set a variable the host sets for this run's MCP delivery (the host tool
    /// server's token, a bearer-token variable the caller declared).
    #[error(
        "environment variable `{0}` carries an MCP credential the host sets; a driver may not set it"
    )]
    HostEnv(String),
    /// The driver set an environment variable its descriptor does not declare
    /// (`driver-info.launch-env`).
    #[error(
        "environment variable `{0}` is not in the driver's declared launch environment (launch-env)"
    )]
    UndeclaredEnv(String),
    /// The driver set an environment variable the host's denylist covers
    /// ([`DRIVER_ENV_DENYLIST`](crate::DRIVER_ENV_DENYLIST)): a loader, interpreter, shell or
    /// tool-config variable, or one that moves the CLI's state.
    #[error(
        "environment variable `{name}` may not be set by a driver (denylist entry `{rule}`); a caller can allow it with Containment::allow_driver_env"
    )]
    DeniedEnv {
        /// The variable.
        name: String,
        /// The denylist entry that covers it.
        rule: String,
    },
    /// The driver set an endpoint variable
    /// ([`DRIVER_ENDPOINT_VARIABLES`](crate::DRIVER_ENDPOINT_VARIABLES)) while a secret the
    /// caller gave the provider is in its environment: the secret would go to the driver's
    /// endpoint.
    #[error(
        "environment variable `{name}` (endpoint rule `{rule}`) may not be set by a driver while the caller's secret `{secret}` is in the provider's environment; the caller can set it, or allow it with Containment::allow_driver_env"
    )]
    EndpointWithSecret {
        /// The variable.
        name: String,
        /// The endpoint rule that covers it.
        rule: String,
        /// The caller's secret-looking variable.
        secret: String,
    },
}

/// A driver failed to load.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// Reading the file failed.
    #[error("could not read driver `{path}`: {source}")]
    Read {
        /// The path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The bytes are not a component of the driver world.
    #[error("`{driver}` is not an adaptor:driver driver: {reason}")]
    NotADriver {
        /// File or name.
        driver: String,
        /// What is missing or wrong.
        reason: String,
    },
    /// The driver was built against a version of the contract this host does not load.
    #[error(
        "driver `{driver}` was built against adaptor:driver@{found}; this host loads {}",
        supported.join(", ")
    )]
    UnsupportedWitVersion {
        /// File or name.
        driver: String,
        /// The version the component exports (`adaptor:driver/driver@<found>`).
        found: String,
        /// The released versions this host loads, oldest first.
        supported: Vec<String>,
    },
    /// Compilation failed.
    #[error("could not compile driver: {0}")]
    Compile(String),
    /// A preset file (`NAME.preset.json` in a driver directory) cannot be used.
    #[error("driver preset `{path}` is invalid: {reason}")]
    InvalidPreset {
        /// The preset file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// No built-in driver has that name.
    #[error("no driver named `{name}` in {searched}")]
    UnknownDriver {
        /// The requested name.
        name: String,
        /// Directories searched.
        searched: String,
    },
    /// The component imports an interface the host does not grant drivers (anything beyond
    /// the driver world's own imports and the WASI interfaces linked with an empty context).
    #[error("driver `{driver}` imports `{import}`, which drivers may not use")]
    ForbiddenImport {
        /// File or name.
        driver: String,
        /// The refused import.
        import: String,
    },
    /// The driver's descriptor is unusable.
    #[error("driver `{driver}` has an invalid descriptor: {reason}")]
    InvalidDescriptor {
        /// Driver.
        driver: String,
        /// What is wrong.
        reason: String,
    },
    /// An installed driver's bytes are not the ones its lock record pins.
    #[error(
        "installed driver `{driver}` at `{path}` was changed: the lock file pins sha256:{expected}, the file is sha256:{found}; reinstall it"
    )]
    IntegrityMismatch {
        /// `name@version`.
        driver: String,
        /// The component file.
        path: String,
        /// The lock file's sha256.
        expected: String,
        /// The file's sha256.
        found: String,
    },
    /// An installed driver's descriptor differs from its lock record (the lock was edited).
    #[error(
        "installed driver `{driver}`: the lock file records {field} {locked:?}, the component declares {found:?}; the lock file was edited, reinstall the driver"
    )]
    LockMismatch {
        /// `name@version`.
        driver: String,
        /// The field that differs.
        field: String,
        /// What the lock records.
        locked: String,
        /// What the component declares.
        found: String,
    },
}

/// Why a driver refused input for a running turn (see [`SteerError::Refused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InputRefusal {
    /// This run's transport has no channel for input while it runs.
    Unsupported,
    /// The turn is over.
    TurnOver,
    /// The input cannot be sent as given.
    Invalid,
}

impl fmt::Display for InputRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InputRefusal::Unsupported => "unsupported",
            InputRefusal::TurnOver => "turn over",
            InputRefusal::Invalid => "invalid",
        })
    }
}

/// Input for a running turn ([`Stream::steer`](crate::Stream::steer)) that was not delivered.
/// Nothing reached the provider in any of these cases.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SteerError {
    /// The run was not started with [`RunOptions::steering`](crate::RunOptions::steering).
    #[error("this run does not take input while it runs: start it with RunOptions::steering(true)")]
    NotSteerable,
    /// The input is empty or longer than [`MAX_STEER_BYTES`](crate::MAX_STEER_BYTES).
    #[error("the input is {0}")]
    Invalid(String),
    /// The turn is over (its end was read, the process exited, or the run ended).
    #[error("the turn is over: {0}")]
    TurnOver(String),
    /// The driver refused it.
    #[error("driver `{driver}` refused the input ({kind}): {message}")]
    Refused {
        /// The driver.
        driver: String,
        /// Why.
        kind: InputRefusal,
        /// The driver's message.
        message: String,
    },
}

/// A sandbox limit of driver instances (see `GuestLimits`), with the value in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "limit", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Limit {
    /// Linear memory per instance.
    Memory {
        /// Bytes.
        bytes: usize,
    },
    /// Guest CPU per call, in wasmtime fuel (executed WebAssembly, not time).
    CpuPerCall {
        /// Fuel.
        fuel: u64,
    },
    /// Guest CPU over one turn (all calls of its instance), in fuel.
    CpuPerRun {
        /// Fuel.
        fuel: u64,
    },
    /// Wall-clock time of one call: a call that waits instead of computing.
    WallPerCall {
        /// Milliseconds.
        ms: u64,
    },
    /// The wasm call stack.
    Stack,
    /// Actions returned by one call.
    ActionsPerCall {
        /// The maximum.
        max: usize,
    },
    /// Log messages written during one call.
    LogsPerCall {
        /// The maximum.
        max: u32,
    },
    /// Data one call may copy between guest and host (its arguments and results: a huge
    /// outcome or event list stops here).
    HostcallBytes {
        /// Bytes.
        bytes: usize,
    },
    /// Timers set at once.
    TimersLive {
        /// The maximum.
        max: usize,
    },
    /// Timer fires in one turn.
    TimerFiresPerTurn {
        /// The maximum.
        max: u64,
    },
    /// Bytes written to the provider's stdin in one turn.
    StdinPerTurn {
        /// Bytes.
        bytes: usize,
    },
    /// Approval requests pending at once.
    ApprovalsPending {
        /// The maximum.
        max: usize,
    },
    /// Approval requests in one turn.
    ApprovalsPerTurn {
        /// The maximum.
        max: usize,
    },
    /// Events emitted in one turn.
    EventsPerTurn {
        /// The maximum.
        max: u64,
    },
    /// Private files of one launch.
    PrivateFiles {
        /// The maximum.
        max: usize,
    },
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Memory { bytes } => write!(f, "memory limit of {} MiB", bytes >> 20),
            Limit::CpuPerCall { fuel } => write!(f, "CPU budget of {fuel} fuel per call"),
            Limit::CpuPerRun { fuel } => write!(f, "CPU budget of {fuel} fuel per run"),
            Limit::WallPerCall { ms } => write!(f, "wall-clock bound of {ms} ms per call"),
            Limit::Stack => f.write_str("stack limit"),
            Limit::ActionsPerCall { max } => write!(f, "limit of {max} actions per call"),
            Limit::LogsPerCall { max } => write!(f, "limit of {max} log messages per call"),
            Limit::HostcallBytes { bytes } => {
                write!(f, "limit of {} MiB copied per call", bytes >> 20)
            }
            Limit::TimersLive { max } => write!(f, "limit of {max} timers set at once"),
            Limit::TimerFiresPerTurn { max } => write!(f, "limit of {max} timer fires per turn"),
            Limit::StdinPerTurn { bytes } => {
                write!(f, "limit of {} MiB written to stdin per turn", bytes >> 20)
            }
            Limit::ApprovalsPending { max } => {
                write!(f, "limit of {max} approval requests pending at once")
            }
            Limit::ApprovalsPerTurn { max } => {
                write!(f, "limit of {max} approval requests per turn")
            }
            Limit::EventsPerTurn { max } => write!(f, "limit of {max} events per turn"),
            Limit::PrivateFiles { max } => write!(f, "limit of {max} private files per launch"),
        }
    }
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureReason {
    /// The agent or its CLI reported an error, or the process ended abnormally.
    AgentError,
    /// An approval was denied.
    ApprovalDenied,
    /// An approval timed out.
    ApprovalTimeout,
    /// A question nobody could answer.
    ApprovalUnanswered,
    /// Cancelled by the caller (or the agent was dropped/closed).
    Cancelled,
    /// The run's timeout elapsed.
    Timeout,
    /// The CLI refused because of policy.
    PolicyViolation,
    /// The provider rejected the resume id.
    ResumeRejected,
    /// The provider's output broke its protocol.
    ProtocolError,
    /// The final output does not satisfy the requested schema.
    InvalidOutput,
    /// The provider wrote more than the Agent's `max_output_bytes`; it was stopped.
    OutputLimit,
    /// The driver broke a rule of the WIT contract that the host checks (a part lifecycle, a
    /// tool result for no call, an event after the turn ended, implausible usage, an outcome
    /// that contradicts its events); the message names the rule. The provider was stopped
    /// and the driver's later events were not forwarded.
    ContractViolation,
    /// The provider's API throttled the requests (HTTP 429, `rate_limit_error`) and the CLI
    /// gave up retrying: retrying later may succeed.
    RateLimited,
    /// The provider's API was overloaded (HTTP 529, `overloaded_error`) after the CLI's own
    /// retries: retrying later may succeed.
    Overloaded,
    /// The provider's API refused the credentials (HTTP 401, `authentication_error`).
    AuthenticationFailed,
    /// The agent used up its turn limit (e.g. Claude Code's `--max-turns`) before finishing.
    MaxTurns,
    /// The conversation no longer fits the model's context window (`prompt_too_long`).
    ContextLimit,
    /// The agent used up its spending budget.
    BudgetExhausted,
    /// Another reason, named by the driver.
    Other(String),
}

impl FailureReason {
    /// Stable snake_case name.
    pub fn as_str(&self) -> &str {
        match self {
            FailureReason::AgentError => "agent_error",
            FailureReason::ApprovalDenied => "approval_denied",
            FailureReason::ApprovalTimeout => "approval_timeout",
            FailureReason::ApprovalUnanswered => "approval_unanswered",
            FailureReason::Cancelled => "cancelled",
            FailureReason::Timeout => "timeout",
            FailureReason::PolicyViolation => "policy_violation",
            FailureReason::ResumeRejected => "resume_rejected",
            FailureReason::ProtocolError => "protocol_error",
            FailureReason::InvalidOutput => "invalid_output",
            FailureReason::OutputLimit => "output_limit",
            FailureReason::ContractViolation => "contract_violation",
            FailureReason::RateLimited => "rate_limited",
            FailureReason::Overloaded => "overloaded",
            FailureReason::AuthenticationFailed => "authentication_failed",
            FailureReason::MaxTurns => "max_turns",
            FailureReason::ContextLimit => "context_limit",
            FailureReason::BudgetExhausted => "budget_exhausted",
            FailureReason::Other(s) => s,
        }
    }

    /// The reason named `name`: a typed variant for every name [`as_str`](Self::as_str)
    /// gives, [`Other`](Self::Other) for the rest. Drivers name the typed reasons the WIT has
    /// no case for with `other(name)` (e.g. `other("rate_limited")`).
    pub fn from_name(name: &str) -> FailureReason {
        match name {
            "agent_error" => FailureReason::AgentError,
            "approval_denied" => FailureReason::ApprovalDenied,
            "approval_timeout" => FailureReason::ApprovalTimeout,
            "approval_unanswered" => FailureReason::ApprovalUnanswered,
            "cancelled" => FailureReason::Cancelled,
            "timeout" => FailureReason::Timeout,
            "policy_violation" => FailureReason::PolicyViolation,
            "resume_rejected" => FailureReason::ResumeRejected,
            "protocol_error" => FailureReason::ProtocolError,
            "invalid_output" => FailureReason::InvalidOutput,
            "output_limit" => FailureReason::OutputLimit,
            "contract_violation" => FailureReason::ContractViolation,
            "rate_limited" => FailureReason::RateLimited,
            "overloaded" => FailureReason::Overloaded,
            "authentication_failed" => FailureReason::AuthenticationFailed,
            "max_turns" => FailureReason::MaxTurns,
            "context_limit" => FailureReason::ContextLimit,
            "budget_exhausted" => FailureReason::BudgetExhausted,
            other => FailureReason::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A started run that failed, with everything observed up to the failure.
#[derive(Debug)]
pub struct RunError {
    /// Why.
    pub reason: FailureReason,
    /// The provider's (or host's) message.
    pub message: String,
    /// Extra details from the driver, if any.
    pub details: Option<serde_json::Value>,
    /// The partial result: text so far, transcript, raw streams, usage…
    pub result: RunResult,
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "run failed ({}): {}", self.reason, self.message)
    }
}

impl std::error::Error for RunError {}

/// A failure of the thread layer. Every variant names the thread key; those that happen
/// after the provider ran carry its result, so nothing the run produced is lost.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ThreadError {
    /// The agent has no thread store (`AgentBuilder::thread_store`).
    #[error(
        "thread {key:?}: the agent has no thread store (set one with AgentBuilder::thread_store)"
    )]
    StoreRequired {
        /// The key.
        key: String,
    },
    /// The driver cannot do what the thread needs (resume, fork).
    #[error("thread {key:?}: driver `{driver}` does not support {what}")]
    Unsupported {
        /// The key.
        key: String,
        /// The driver.
        driver: String,
        /// `resuming sessions` or `forking sessions`.
        what: &'static str,
    },
    /// Resume-only run (or fork) and the key has no active checkpoint.
    #[error("thread {key:?} has no active checkpoint")]
    NotFound {
        /// The key (for a fork: the parent's key).
        key: String,
    },
    /// Another owner is running this thread.
    #[error("thread {key:?} is busy: leased by `{holder}`")]
    Busy {
        /// The key.
        key: String,
        /// Lease owner.
        holder: String,
    },
    /// The stored session belongs to another configuration (driver, codec, model,
    /// workspace, instructions, identity…); refused before any process started.
    #[error("thread {key:?} is incompatible with this agent: {reason}")]
    Incompatible {
        /// The key.
        key: String,
        /// What differs.
        reason: String,
    },
    /// The thread's lease expired or was taken over during the run; nothing was persisted.
    #[error("thread {key:?}: the lease was lost during the run; nothing was persisted")]
    LeaseLost {
        /// The key.
        key: String,
        /// What the run produced (absent if it was stopped before finishing).
        result: Option<Box<RunResult>>,
    },
    /// The run succeeded but gave no valid checkpoint, so the thread could not be saved.
    #[error("thread {key:?}: the run succeeded but produced no valid checkpoint to persist")]
    CheckpointMissing {
        /// The key.
        key: String,
        /// The run's result.
        result: Box<RunResult>,
    },
    /// A fork's target key already has an active record.
    #[error("thread {key:?} already exists")]
    AlreadyExists {
        /// The key.
        key: String,
    },
    /// The driver refused to resume the stored session, and the mode allows no fresh start
    /// (resume-only or fork).
    #[error("thread {key:?}: resume rejected: {message}")]
    ResumeRejected {
        /// The key.
        key: String,
        /// The driver's explanation.
        message: String,
    },
    /// The store failed.
    #[error("thread {key:?}: {source}")]
    Store {
        /// The key.
        key: String,
        /// The store's error.
        source: StoreError,
        /// The run's result, if the failure came when persisting it.
        result: Option<Box<RunResult>>,
    },
}

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Another owner holds an unexpired lease on the target.
    #[error("`{target}` is leased by `{holder}` until it is released or expires")]
    Busy {
        /// The lease target.
        target: String,
        /// The owner holding it.
        holder: String,
    },
    /// The lease is no longer current (expired, or taken over by another owner).
    #[error("the lease on `{target}` was lost (expired or taken over)")]
    LeaseLost {
        /// The lease target.
        target: String,
    },
    /// The key already has an active record (fork onto a used key).
    #[error("thread key {key:?} already has an active record")]
    AlreadyExists {
        /// The key.
        key: String,
    },
    /// No record with this id.
    #[error("no thread record with id `{id}`")]
    NotFound {
        /// The record id.
        id: String,
    },
    /// A stored row could not be decoded.
    #[error("{store} store: record `{id}` is unreadable: {message}")]
    Corrupt {
        /// Store kind (`sqlite`, `postgres`, `memory`).
        store: &'static str,
        /// The record id (or lease target).
        id: String,
        /// What was wrong.
        message: String,
    },
    /// The backend failed (I/O, connection, SQL).
    #[error("{store} store: {message}")]
    Backend {
        /// Store kind (`sqlite`, `postgres`, `memory`).
        store: &'static str,
        /// The backend's message.
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::FailureReason;

    #[test]
    fn failure_reason_names_round_trip() {
        for reason in [
            FailureReason::AgentError,
            FailureReason::ApprovalDenied,
            FailureReason::ApprovalTimeout,
            FailureReason::ApprovalUnanswered,
            FailureReason::Cancelled,
            FailureReason::Timeout,
            FailureReason::PolicyViolation,
            FailureReason::ResumeRejected,
            FailureReason::ProtocolError,
            FailureReason::InvalidOutput,
            FailureReason::OutputLimit,
            FailureReason::ContractViolation,
            FailureReason::RateLimited,
            FailureReason::Overloaded,
            FailureReason::AuthenticationFailed,
            FailureReason::MaxTurns,
            FailureReason::ContextLimit,
            FailureReason::BudgetExhausted,
            FailureReason::Other("driver_specific".into()),
        ] {
            assert_eq!(FailureReason::from_name(reason.as_str()), reason);
        }
    }
}

/// Why an install, removal, listing or verification failed. On every error the store is as
/// it was before the call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InstallError {
    /// The component is not a loadable driver (not a component, truncated, an unsupported
    /// contract version, a forbidden import, a bad descriptor, …).
    #[error("cannot install `{source_path}`: {error}")]
    NotADriver {
        /// What was being installed.
        source_path: String,
        /// Why it does not load.
        error: Box<Error>,
    },
    /// The source is not a `.wasm`, a directory with one, or a usable OCI image layout.
    #[error("cannot install from `{path}`: {reason}")]
    Source {
        /// The source.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The driver's descriptor cannot be installed as it stands.
    #[error("driver `{name}` cannot be installed: {reason}")]
    InvalidPackage {
        /// The descriptor's name.
        name: String,
        /// What is wrong (its name or version).
        reason: String,
    },
    /// Another driver already answers to this name.
    #[error("the name `{name}` is taken by {by}; a driver cannot shadow it")]
    NameTaken {
        /// The name.
        name: String,
        /// Who holds it (a built-in driver's file).
        by: String,
    },
    /// This name and version is installed with other bytes.
    #[error(
        "{name}@{version} is already installed with sha256:{installed}; this component is sha256:{new}. Publish it under a new version, or remove the installed one first"
    )]
    VersionConflict {
        /// The name.
        name: String,
        /// The version.
        version: String,
        /// The installed component's sha256.
        installed: String,
        /// The new component's sha256.
        new: String,
    },
    /// A publisher signature did not verify.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// The lock file cannot be read as this host writes it (edited by hand, truncated, …).
    #[error("the driver lock file `{path}` is invalid: {reason}")]
    LockFile {
        /// The lock file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// No installed driver matches.
    #[error("no installed driver {spec} (installed: {installed})")]
    NotInstalled {
        /// `name` or `name@version`.
        spec: String,
        /// What is installed, or `none`.
        installed: String,
    },
    /// Several versions are installed and the request must name one.
    #[error("{name} has several installed versions ({versions}); name one as {name}@VERSION")]
    Ambiguous {
        /// The name.
        name: String,
        /// The installed versions.
        versions: String,
    },
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// No store location: no `$ADAPTOR_DRIVER_STORE` and no user data directory.
    #[error("no driver store: set ADAPTOR_DRIVER_STORE (no user data directory is known)")]
    NoStore,
}

/// Why [`fork_spawner`](crate::fork_spawner) did not fork; nothing changed, and the
/// spawner starts the usual way (the executable started afresh) on first use.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnerForkError {
    /// It was called from a thread other than the main one (the spawner dies with the
    /// thread that forked it, so it must be the one that lives as long as the process).
    #[error("fork_spawner must be called from the main thread")]
    NotMainThread,
    /// The process already runs other threads (a fork copies only the caller, so locks
    /// they hold would stay held in the spawner).
    #[error("fork_spawner must be called while the process has one thread; it has {0}")]
    Threads(usize),
    /// A spawner forked earlier was not taken yet (its thread could not start).
    #[error("a spawner was already forked")]
    AlreadyForked,
    /// A system call failed (reading the thread count, the socket pair, `fork`).
    #[error("could not fork the spawner: {0}")]
    Io(#[source] std::io::Error),
}

/// Why a signature did not verify. Nothing was installed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// The signature file is not one this host reads.
    #[error("signature file `{path}` is malformed: {reason}")]
    Malformed {
        /// The signature file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The signature was made by a key that is not among the trusted keys.
    #[error(
        "the driver is signed by ed25519:{public_key}, which is not a trusted key (trusted: {trusted})"
    )]
    UnknownKey {
        /// The signer's public key (hex).
        public_key: String,
        /// The trusted keys' names, or `none`.
        trusted: String,
    },
    /// The signature file was made for other bytes.
    #[error("the signature is for sha256:{signed}, but the driver is sha256:{actual}")]
    OtherComponent {
        /// The digest the signature file names.
        signed: String,
        /// The component's digest.
        actual: String,
    },
    /// The signature does not verify with the (trusted) key it names.
    #[error(
        "the signature by trusted key `{key}` does not verify: the component or the signature was altered"
    )]
    BadSignature {
        /// The trusted key's name.
        key: String,
    },
    /// The store requires signatures and the driver has none.
    #[error(
        "this driver store requires a publisher signature and none was given (expected `{expected}` or --signature)"
    )]
    Missing {
        /// Where a signature file was looked for.
        expected: String,
    },
    /// A key (trusted or secret) cannot be parsed.
    #[error("key `{name}` is invalid: {reason}")]
    InvalidKey {
        /// The key's name or file.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// Why a workspace could not be resolved or released. Each variant names what was wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The workspace directory does not exist or is not a directory.
    #[error("workspace {} does not exist or is not a directory", path.display())]
    NotADirectory {
        /// The path as given.
        path: PathBuf,
    },
    /// The repository of a git worktree workspace is not a git repository.
    #[error("{} is not a git repository: {message}", path.display())]
    NotARepository {
        /// The path as given.
        path: PathBuf,
        /// Why (git's message, or the file system's).
        message: String,
    },
    /// `require_clean_base` is set and the repository's checkout has changes; nothing was
    /// created.
    #[error("the repository {} has uncommitted changes and the workspace requires a clean base:\n{status}", repo.display())]
    DirtyBase {
        /// The repository.
        repo: PathBuf,
        /// The `git status --porcelain` lines (the first 20, then how many more).
        status: String,
    },
    /// The branch template cannot be expanded for this run, or does not expand to a valid
    /// branch name.
    #[error("branch template `{template}`: {reason}")]
    BadTemplate {
        /// The template.
        template: String,
        /// What is wrong (an unknown variable, `{thread}` without a thread, git's verdict on
        /// the expanded name, …).
        reason: String,
    },
    /// The base ref does not name a commit.
    #[error("base ref `{reference}` does not name a commit: {message}")]
    BadRef {
        /// The ref as given.
        reference: String,
        /// Git's message.
        message: String,
    },
    /// The worktree directory exists and is not this repository's worktree on the branch
    /// (or, at release, is no longer a registered worktree); it was left alone.
    #[error("worktree directory {} is in the way: {reason}", path.display())]
    Occupied {
        /// The worktree directory.
        path: PathBuf,
        /// What is there instead.
        reason: String,
    },
    /// Release was given a workspace this manager did not resolve.
    #[error("workspace {} was not resolved by this manager", path.display())]
    NotManaged {
        /// The workspace's directory.
        path: PathBuf,
    },
    /// A git command failed, could not start, or overran its 60 s.
    #[error("`{command}` failed: {message}")]
    Git {
        /// The command line.
        command: String,
        /// Git's stderr, trimmed (or why it did not run).
        message: String,
    },
    /// A file system operation on `path` failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path operated on.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Why an agent's dedicated profile ([`Profile`](crate::Profile)) could not be observed or
/// made. A run with such a profile fails with [`Error::Profile`] before anything starts.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// The driver declares no movable profile (its `profile` is `none`, or it was built
    /// against `adaptor:driver@0.1.0`/`0.2.0`, which cannot declare one).
    #[error(
        "driver `{driver}` declares no profile (no config-dir variable), so it cannot run with a dedicated profile"
    )]
    Unsupported {
        /// Driver name.
        driver: String,
    },
    /// A profile part was asked for (`link_auth`, `copy_settings`, `copy_mcp`) that the
    /// driver's profile does not declare.
    #[error("driver `{driver}`'s profile declares no {part} file, so `{asked}` cannot be done")]
    PartNotDeclared {
        /// Driver name.
        driver: String,
        /// The part (`auth`, `settings`, `mcp`).
        part: crate::descriptor::ProfilePart,
        /// The builder call that asked for it.
        asked: &'static str,
    },
    /// The profile directory is not an absolute path.
    #[error("the profile directory {} is not absolute", path.display())]
    RelativeDir {
        /// The path as given.
        path: PathBuf,
    },
    /// The dedicated profile directory is the user's own profile directory.
    #[error("the dedicated profile directory {} is the user's own profile directory", path.display())]
    SameAsNative {
        /// The directory.
        path: PathBuf,
    },
    /// The home directory (or the caller's config-dir variable) is needed to find the
    /// user's own profile and is not set to an absolute path.
    #[error("cannot find the user's own profile: {reason}")]
    NoNativeProfile {
        /// What is missing.
        reason: String,
    },
    /// A file of the user's own profile that was asked to be carried does not exist.
    #[error("the user's {part} file {} does not exist (asked by `{asked}`)", path.display())]
    SourceMissing {
        /// The part.
        part: crate::descriptor::ProfilePart,
        /// Where it was looked for.
        path: PathBuf,
        /// The builder call that asked for it.
        asked: &'static str,
    },
    /// A file of the user's profile to carry resolves outside the user's profile (a
    /// symlink to elsewhere): it is neither linked, copied nor granted.
    #[error(
        "{} resolves to {}, outside the user's profile: it is not carried (copy the file into the profile directory instead of linking it elsewhere)",
        path.display(),
        resolved.display()
    )]
    SourceOutside {
        /// The file in the user's profile.
        path: PathBuf,
        /// Where it resolves to.
        resolved: PathBuf,
    },
    /// Something is in the way where the profile needs a directory or a link; nothing was
    /// replaced (a regular file where the link to the user's login belongs may hold a newer
    /// token than the user's own: move it away deliberately).
    #[error("{}: {reason}", path.display())]
    Occupied {
        /// The path.
        path: PathBuf,
        /// What is there and why it is not replaced.
        reason: String,
    },
    /// A file system operation on `path` failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path operated on.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Why a run's instructions bundle ([`InstructionsBundle`](crate::InstructionsBundle)) was
/// refused. Each names the file; nothing was written and nothing started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InstructionsError {
    /// The driver cannot be told about a bundle: its descriptor does not declare
    /// `instructions`, or it was built against a contract before `adaptor:driver@0.3.0`.
    #[error("driver `{driver}` cannot take an instructions bundle: {reason}")]
    Unsupported {
        /// Driver name.
        driver: String,
        /// Why.
        reason: String,
    },
    /// A path that would leave the bundle (absolute, `..`, a backslash, a drive prefix).
    #[error("instructions file `{path}`: {reason}")]
    UnsafePath {
        /// The path as given.
        path: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// Not a regular file (a symlink, a FIFO, a device, a socket).
    #[error("instructions file `{path}` is {kind}, not a regular file")]
    NotAFile {
        /// The path, relative to the bundle.
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// The same path twice.
    #[error("instructions file `{path}` is given twice")]
    Duplicate {
        /// The path.
        path: String,
    },
    /// The entry file is not in the bundle.
    #[error("the instructions bundle has no entry file `{entry}`")]
    NoEntry {
        /// The entry path.
        entry: String,
    },
    /// The entry file is not UTF-8 text.
    #[error("the instructions entry file `{entry}` is not UTF-8 text")]
    EntryNotText {
        /// The entry path.
        entry: String,
    },
    /// A limit of [`InstructionsBundle`](crate::InstructionsBundle) was exceeded.
    #[error("instructions bundle: {what} exceeds the limit of {limit} (at `{path}`)")]
    TooLarge {
        /// Which limit (`files`, `bytes`, `entry bytes`).
        what: &'static str,
        /// The limit.
        limit: u64,
        /// The file at which it was exceeded.
        path: String,
    },
    /// Reading the bundle's directory or writing it into the run's directory failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path operated on.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}
