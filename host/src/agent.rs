//! [`Agent`]: a driver plus defaults, and the entry points `run` / `stream`.
//!
//! Owns option scoping: construction-only settings live on [`AgentBuilder`] (they have no
//! per-call counterpart, so misusing them per call does not compile); shared options are
//! [`RunOptions`], set as defaults on the builder and overridden per call (nearer scope wins,
//! each field replaced whole, defaults never mutated). `run` is `stream` plus
//! [`Stream::result`]: one code path. Must not: spawn or supervise (see `run/`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::approval::{ApprovalHandler, ApprovalRequest};
use crate::driver::Driver;
use crate::error::Error;
use crate::policy::Policy;
use crate::result::{Checkpoint, RunResult};
use crate::store::ThreadStore;
use crate::stream::Stream;
use crate::structured::Schema;
use crate::wasm::guest::GuestLimits;

/// Options that can be set as Agent defaults and overridden per call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunOptions {
    pub(crate) model: Option<String>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) workspace: Option<crate::workspace::Workspace>,
    pub(crate) instructions: Option<String>,
    pub(crate) metadata: Option<BTreeMap<String, String>>,
    pub(crate) streaming: Option<bool>,
    pub(crate) resume: Option<Checkpoint>,
    pub(crate) policy: Option<Policy>,
    pub(crate) schema: Option<Schema>,
    pub(crate) approval_handler: Option<ApprovalHandler>,
    pub(crate) identity: Option<String>,
    pub(crate) spawn: Option<Spawn>,
    pub(crate) mcp: Option<Vec<crate::mcp::Mcp>>,
    pub(crate) steering: Option<bool>,
    pub(crate) skills: Option<Vec<crate::skills::Skill>>,
    pub(crate) instructions_bundle: Option<crate::instructions::InstructionsBundle>,
}

/// Whether a thread run may use the thread's resident provider process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Spawn {
    /// Reuse the thread's resident process when the driver supports it (the default), and
    /// keep the process for the next turn.
    #[default]
    Reuse,
    /// Start a one-shot process for this run (it resumes the stored session and exits at
    /// the end of the turn). A resident process of the thread is stopped first.
    OneShot,
}

macro_rules! shared_options {
    ($ty:ident $(, $field:ident)?) => {
        impl $ty {
            /// Model to use (passed to the driver; wins over the driver config's model).
            pub fn model(mut self, model: impl Into<String>) -> Self {
                self$(.$field)?.model = Some(model.into());
                self
            }

            /// Wall-clock limit for the whole run, counted from its start (preparing it — the
            /// driver's `start`, writing its private files — included); the provider's
            /// process group is stopped when it elapses, a driver call still running long is
            /// interrupted, and the run fails with reason `timeout`.
            pub fn timeout(mut self, timeout: Duration) -> Self {
                self$(.$field)?.timeout = Some(timeout);
                self
            }

            /// Where the provider works (default: the current directory): a directory
            /// (`&Path`, `PathBuf`, `&str`, …, used as it is) or a
            /// [`Workspace::git_worktree`](crate::Workspace::git_worktree) the host creates
            /// before the run and releases after it (a thread's worktree is kept for its
            /// next turns: one thread, one checkout). The provider runs there and may not be
            /// started outside it; the resolved directory is part of the thread fingerprint.
            pub fn workspace(mut self, workspace: impl Into<crate::workspace::Workspace>) -> Self {
                self$(.$field)?.workspace = Some(workspace.into());
                self
            }

            /// Instructions appended to the system prompt (drivers that declare it).
            pub fn instructions(mut self, text: impl Into<String>) -> Self {
                self$(.$field)?.instructions = Some(text.into());
                self
            }

            /// Caller metadata for the run, merged by key over the outer scope's (a key set
            /// here wins; keys set only outside are kept).
            pub fn metadata(mut self, metadata: BTreeMap<String, String>) -> Self {
                self$(.$field)?.metadata = Some(metadata);
                self
            }

            /// The run policy (replaces the outer scope's policy whole). Checked against the
            /// driver's descriptor before anything starts.
            pub fn policy(mut self, policy: Policy) -> Self {
                self$(.$field)?.policy = Some(policy);
                self
            }

            /// Answer approval requests with this async callback (run in a task of its own per
            /// request). It answers through the request's methods — the same exactly-once
            /// path as a consumer answering `Event::ApprovalRequest` from the stream; whoever
            /// answers first wins. Without a handler, `run` reports requests unanswered (the
            /// run fails with `approval_unanswered`); nothing is ever approved on your behalf.
            /// Timeouts and fallbacks come from the policy.
            pub fn on_approval<F, Fut>(mut self, handler: F) -> Self
            where
                F: Fn(ApprovalRequest) -> Fut + Send + Sync + 'static,
                Fut: std::future::Future<Output = ()> + Send + 'static,
            {
                self$(.$field)?.approval_handler = Some(ApprovalHandler::new(handler));
                self
            }

            /// Like [`on_approval`](Self::on_approval), with a prepared handler.
            pub fn approval_handler(mut self, handler: ApprovalHandler) -> Self {
                self$(.$field)?.approval_handler = Some(handler);
                self
            }

            /// Who runs the agent (a tenant, user or role name). Not sent to the provider;
            /// part of the thread fingerprint, so one identity never resumes another's
            /// thread.
            pub fn identity(mut self, identity: impl Into<String>) -> Self {
                self$(.$field)?.identity = Some(identity.into());
                self
            }

            /// Whether a thread run may reuse (and keep) the thread's resident provider
            /// process, for drivers that declare `persistent_process` (default
            /// [`Spawn::Reuse`]). Plain `Agent` runs are always one-shot.
            pub fn spawn(mut self, spawn: Spawn) -> Self {
                self$(.$field)?.spawn = Some(spawn);
                self
            }

            /// MCP servers the CLI should be given ([`Mcp::stdio`](crate::Mcp::stdio),
            /// [`Mcp::http`](crate::Mcp::http), [`Mcp::sse`](crate::Mcp::sse)). Replaces the
            /// whole list of the wider scope (per call replaces the agent's default). Checked
            /// before launch: unique names, transports the driver declares, bearer-token
            /// variables that exist. Header values and tokens are never logged and are masked
            /// in dry runs.
            pub fn mcp<I, S>(mut self, servers: I) -> Self
            where
                I: IntoIterator<Item = S>,
                S: Into<crate::mcp::Mcp>,
            {
                self$(.$field)?.mcp = Some(servers.into_iter().map(Into::into).collect());
                self
            }

            /// Ask the driver for its incremental transport (token deltas). Default: on for
            /// `stream`, on for `run` too (it is the same pipeline).
            pub fn streaming(mut self, on: bool) -> Self {
                self$(.$field)?.streaming = Some(on);
                self
            }

            /// Skills the CLI can load ([`Skill::dir`](crate::Skill::dir),
            /// [`Skill::inline`](crate::Skill::inline), [`Skill::archive`](crate::Skill::archive),
            /// [`Skill::key`](crate::Skill::key)). Appended, not replaced: a run sees the
            /// agent's skills and its own. Two skills with one key must have the same
            /// contents ([`SkillError::Conflict`](crate::SkillError::Conflict)). Checked and
            /// written to the skill cache before launch (a refusal starts nothing); a driver
            /// whose descriptor does not declare `skills` is refused
            /// ([`Error::SkillsUnsupported`](crate::Error::SkillsUnsupported)).
            pub fn skills<I>(mut self, skills: I) -> Self
            where
                I: IntoIterator<Item = crate::skills::Skill>,
            {
                self$(.$field)?
                    .skills
                    .get_or_insert_with(Vec::new)
                    .extend(skills);
                self
            }

            /// An instructions bundle ([`InstructionsBundle::dir`](crate::InstructionsBundle::dir),
            /// [`inline`](crate::InstructionsBundle::inline),
            /// [`files`](crate::InstructionsBundle::files)): checked and written, read-only to
            /// the provider, into the run's private directory before launch; the driver is
            /// told where, and passes the entry file to its CLI (the built-in drivers append
            /// its text to the system prompt, with a line naming the directory so the model
            /// can read the files it refers to). Replaces the wider scope's bundle. Refused
            /// before anything starts by a driver whose descriptor does not declare
            /// `instructions` or that was built against a contract before
            /// `adaptor:driver@0.3.0` ([`Error::Instructions`](crate::Error::Instructions)).
            pub fn instructions_bundle(
                mut self,
                bundle: crate::instructions::InstructionsBundle,
            ) -> Self {
                self$(.$field)?.instructions_bundle = Some(bundle);
                self
            }
        }
    };
}

impl RunOptions {
    /// Empty options (everything inherited from the Agent).
    pub fn new() -> Self {
        Self::default()
    }

    /// `self` overridden by `nearer` (field by field; each field replaced whole).
    pub(crate) fn overridden_by(&self, nearer: &RunOptions) -> RunOptions {
        RunOptions {
            model: nearer.model.clone().or_else(|| self.model.clone()),
            timeout: nearer.timeout.or(self.timeout),
            workspace: nearer.workspace.clone().or_else(|| self.workspace.clone()),
            instructions: nearer
                .instructions
                .clone()
                .or_else(|| self.instructions.clone()),
            metadata: match (&self.metadata, &nearer.metadata) {
                (Some(outer), Some(near)) => {
                    let mut merged = outer.clone();
                    merged.extend(near.iter().map(|(k, v)| (k.clone(), v.clone())));
                    Some(merged)
                }
                (outer, near) => near.clone().or_else(|| outer.clone()),
            },
            streaming: nearer.streaming.or(self.streaming),
            resume: nearer.resume.clone().or_else(|| self.resume.clone()),
            policy: nearer.policy.or(self.policy),
            schema: nearer.schema.clone().or_else(|| self.schema.clone()),
            approval_handler: nearer
                .approval_handler
                .clone()
                .or_else(|| self.approval_handler.clone()),
            identity: nearer.identity.clone().or_else(|| self.identity.clone()),
            spawn: nearer.spawn.or(self.spawn),
            mcp: nearer.mcp.clone().or_else(|| self.mcp.clone()),
            steering: nearer.steering.or(self.steering),
            skills: match (&self.skills, &nearer.skills) {
                (Some(outer), Some(near)) => Some(outer.iter().chain(near).cloned().collect()),
                (outer, near) => near.clone().or_else(|| outer.clone()),
            },
            instructions_bundle: nearer
                .instructions_bundle
                .clone()
                .or_else(|| self.instructions_bundle.clone()),
        }
    }

    /// Ask for structured output matching `schema` (per call only). The mechanism is chosen
    /// against the driver's descriptor before launch; the result's `structured` field says
    /// which one was used and whether the output validated.
    pub fn schema(mut self, schema: Schema) -> Self {
        self.schema = Some(schema);
        self
    }

    /// Resume the provider session of `checkpoint` (from an earlier [`RunResult`]) in this
    /// call. The checkpoint must be valid and come from a driver with the same codec, else the
    /// run fails before anything starts with [`Error::InvalidCheckpoint`]. A [`Checkpoint`]
    /// cannot be built by hand, so this resumes only what a driver reported in this process;
    /// to continue a conversation across processes, use a [`Thread`](crate::Thread). Refused on
    /// a thread run (the thread resumes its own state).
    pub fn resume(mut self, checkpoint: Checkpoint) -> Self {
        self.resume = Some(checkpoint);
        self
    }

    /// Keep the turn open for input while it runs (per call only): the driver picks a
    /// transport that can take it, and [`Stream::steer`] adds user input to the running
    /// turn. Refused before anything starts ([`Error::SteeringUnsupported`]) by a driver whose
    /// descriptor does not declare `steering`. Off by default: a steerable transport can
    /// behave differently (Claude Code then reads its prompt as a stream-json frame).
    pub fn steering(mut self, on: bool) -> Self {
        self.steering = Some(on);
        self
    }
}

shared_options!(RunOptions);

/// What runs prompts: an [`Agent`], a [`Thread`](crate::Thread) or a [`Fork`](crate::Fork).
/// Its verbs are the contract's two, `stream` and `run` (which is `stream` plus
/// [`Stream::result`]: one pipeline). Generic code (such as [`run_as`](crate::run_as)) takes
/// any runner; the types also have `run`, `run_with`, `stream` and `stream_with` as inherent
/// methods, so callers need not import this trait. Sealed: only this crate's runners
/// implement it (each starts the crate's own pipeline), so a type of yours cannot:
///
/// ```compile_fail
/// struct Mine;
/// impl adaptor::Runner for Mine {} // error: `Start` is private to the crate
/// ```
pub trait Runner: sealed::Start {
    /// Start a run with per-call options and return its stream of events (the run's
    /// pipeline runs on a task of its own from now on).
    fn stream(&self, prompt: String, options: RunOptions) -> Stream {
        self.start(prompt, options).spawned()
    }

    /// Run to the end: the same pipeline as [`stream`](Self::stream), then the stream's
    /// result (its events are dropped unread). Not spawned: the caller's task drives it (no
    /// hand-off to another task and back); a caller that stops waiting leaves the run to
    /// finish on a task of its own, as a spawned run would.
    fn run(
        &self,
        prompt: String,
        options: RunOptions,
    ) -> impl std::future::Future<Output = Result<RunResult, Error>> + Send {
        self.start(prompt, options).run()
    }
}

/// Keeps [`Runner`] to this crate's types.
pub(crate) mod sealed {
    use super::RunOptions;

    /// Build a run of this runner (its stream and its pipeline, not yet driven).
    pub trait Start {
        /// The run of `prompt` with per-call `options` (merged over the runner's defaults).
        fn start(&self, prompt: String, options: RunOptions) -> crate::run::Started;
    }
}

impl sealed::Start for Agent {
    fn start(&self, prompt: String, options: RunOptions) -> crate::run::Started {
        crate::run::start(
            &self.inner,
            prompt,
            self.inner.defaults.overridden_by(&options),
        )
    }
}

impl Runner for Agent {}

/// Construction-only settings.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub event_buffer: usize,
    pub blocking_events: bool,
    pub grace_period: Duration,
    pub end_turn_grace: Duration,
    pub idle_timeout: Option<Duration>,
    pub max_output_bytes: usize,
    pub max_line_bytes: usize,
    pub pass_env: Vec<String>,
    pub set_env: Vec<(String, String)>,
    pub program_dirs: Vec<PathBuf>,
    pub limits: GuestLimits,
    /// Driver components (sha256) whose thread records this agent resumes besides its own.
    pub accepted_components: Vec<String>,
    pub parent_death_signal: bool,
    pub thread_store: Option<Arc<dyn ThreadStore>>,
    pub lease_ttl: Duration,
    pub resident_idle: Duration,
    /// How many prewarmed provider processes to keep (0: none).
    pub prewarm: usize,
    /// How long a prewarmed process may wait for a run before it is stopped.
    pub prewarm_idle: Duration,
    pub containment: crate::containment::Containment,
    pub skill_provider: Option<Arc<dyn crate::skills::SkillProvider>>,
    pub skill_cache: Option<PathBuf>,
    pub skill_limits: crate::skills::SkillLimits,
    /// The CLI's per-user state directory (construction only: `AgentBuilder::profile`).
    pub profile: crate::profile::Profile,
    /// The agent's host tools (construction only: `AgentBuilder::tools`).
    #[cfg(feature = "tools")]
    pub tools: Arc<[crate::tools::Tool]>,
}

impl RunOptions {
    /// What of these options a driver's request carries.
    pub(crate) fn request_options<'a>(
        &'a self,
        mcp_servers: &'a [crate::mcp::RequestServer],
        skill_dirs: &'a [String],
    ) -> crate::session::RequestOptions<'a> {
        crate::session::RequestOptions {
            mcp_servers,
            skill_dirs,
            model: self.model.as_deref(),
            instructions: self.instructions.as_deref(),
            policy: self.policy.unwrap_or_default(),
            schema: self.schema.as_ref(),
            streaming: self.streaming.unwrap_or(true),
            metadata: self.metadata.as_ref(),
            steerable: self.steering.unwrap_or(false),
        }
    }
}

impl Settings {
    /// The caller's provider environment as thread-fingerprint entries: `NAME=VALUE` for
    /// variables it set (`NAME` alone when the name looks like a secret: a new API key must
    /// not orphan a thread), `NAME` for variables it passes through.
    pub(crate) fn fingerprint_env(&self) -> Vec<String> {
        self.set_env
            .iter()
            .map(|(k, v)| {
                if crate::result::looks_secret(k) {
                    k.clone()
                } else {
                    format!("{k}={v}")
                }
            })
            .chain(self.pass_env.iter().cloned())
            .collect()
    }

    /// The process rules these settings give every grant.
    pub(crate) fn grant_rules(&self) -> crate::grant::GrantRules<'_> {
        crate::grant::GrantRules {
            program_dirs: &self.program_dirs,
            pass_env: &self.pass_env,
            set_env: &self.set_env,
            parent_death_signal: self.parent_death_signal,
            containment: &self.containment,
            grace: self.grace_period,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            event_buffer: 1024,
            blocking_events: false,
            grace_period: Duration::from_secs(2),
            end_turn_grace: Duration::from_secs(10),
            idle_timeout: None,
            max_output_bytes: 256 << 20,
            max_line_bytes: 64 << 20,
            pass_env: Vec::new(),
            set_env: Vec::new(),
            program_dirs: Vec::new(),
            limits: GuestLimits::default(),
            accepted_components: Vec::new(),
            parent_death_signal: true,
            thread_store: None,
            lease_ttl: crate::thread::DEFAULT_LEASE_TTL,
            resident_idle: Duration::from_secs(300),
            prewarm: 0,
            prewarm_idle: Duration::from_secs(300),
            containment: crate::containment::Containment::default(),
            skill_provider: None,
            skill_cache: None,
            skill_limits: crate::skills::SkillLimits::default(),
            profile: crate::profile::Profile::native(),
            #[cfg(feature = "tools")]
            tools: Arc::from(Vec::new()),
        }
    }
}

/// Builds an [`Agent`].
#[derive(Debug, Clone)]
pub struct AgentBuilder {
    driver: Driver,
    defaults: RunOptions,
    settings: Settings,
}

shared_options!(AgentBuilder, defaults);

impl AgentBuilder {
    /// Event buffer capacity (default 1024). In drop mode, droppable deltas are discarded
    /// when it is full and reported in one `Dropped` event.
    pub fn event_buffer(mut self, capacity: usize) -> Self {
        self.settings.event_buffer = capacity.max(2);
        self
    }

    /// Never drop events: a slow consumer slows the run down instead.
    pub fn blocking_events(mut self) -> Self {
        self.settings.blocking_events = true;
        self
    }

    /// Time between SIGTERM and SIGKILL when stopping a provider (default 2 s).
    pub fn grace_period(mut self, grace: Duration) -> Self {
        self.settings.grace_period = grace;
        self
    }

    /// How long a one-shot provider may keep running after its turn ended (default 10 s).
    pub fn end_turn_grace(mut self, grace: Duration) -> Self {
        self.settings.end_turn_grace = grace;
        self
    }

    /// No-output watchdog: stop the provider when it writes nothing to stdout or stderr for
    /// this long; the run fails with reason `timeout` and `exit.no_output` set. Default: off
    /// (agent CLIs can think silently for minutes; set it to what your provider tolerates).
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.settings.idle_timeout = Some(idle);
        self
    }

    /// Most bytes a provider may write to stdout and stderr together in one run (default
    /// 256 MiB; the raw capture keeps them all). Beyond it the provider is stopped, the rest
    /// is discarded (counted in a notice) and the run fails with reason `output_limit`.
    pub fn max_output_bytes(mut self, bytes: usize) -> Self {
        self.settings.max_output_bytes = bytes;
        self
    }

    /// Longest line (bytes between newlines) a provider may write on stdout or stderr
    /// (default 64 MiB). Beyond it the provider is stopped and the run fails with reason
    /// `output_limit`, like [`max_output_bytes`](Self::max_output_bytes). Drivers frame lines
    /// with their own, usually smaller, limit (a longer line is a protocol error there).
    pub fn max_line_bytes(mut self, bytes: usize) -> Self {
        self.settings.max_line_bytes = bytes;
        self
    }

    /// Pass this variable from the host's environment to the provider (the default
    /// environment is only an allowlist: PATH, HOME, locale, XDG dirs, …).
    pub fn pass_env(mut self, name: impl Into<String>) -> Self {
        self.settings.pass_env.push(name.into());
        self
    }

    /// Set a variable in the provider's environment.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.set_env.push((name.into(), value.into()));
        self
    }

    /// An extra directory searched for the provider program after PATH (a bare program
    /// name only; a configured absolute `command` is used as it is).
    ///
    /// `PATH` entries that are relative or lie inside the run's workspace are skipped, so a
    /// checked-out repository cannot plant a fake CLI. A directory named here is the host's
    /// own choice and is searched wherever it lies — also inside the workspace (the `adaptor`
    /// CLI names its own directory, which is `./target/debug` when run from a clone).
    /// A relative directory is ignored.
    pub fn program_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.settings.program_dirs.push(dir.into());
        self
    }

    /// Linux: whether providers get `PR_SET_PDEATHSIG(SIGKILL)`, so they die even if the host
    /// is killed without any chance to clean up (default: on). It makes each launch use
    /// `fork` instead of `posix_spawn`, which cost about 1.2 ms per run on the 2-core CI
    /// machine (see docs/performance.md). Process groups, cancel, timeout and drop
    /// handling stay in force either way.
    pub fn parent_death_signal(mut self, on: bool) -> Self {
        self.settings.parent_death_signal = on;
        self
    }

    /// How provider processes (runs and Inspect probes) are confined: the paths they may
    /// read and write beyond the defaults, the CLI's state directories, variables drivers
    /// may set although denied, and whether a kernel that cannot confine them refuses the
    /// run (the default) or runs best-effort. See [`Containment`](crate::Containment).
    pub fn containment(mut self, containment: crate::containment::Containment) -> Self {
        self.settings.containment = containment;
        self
    }

    /// Resume thread records written by the driver component with this sha256 (hex, as
    /// [`Driver::sha256`] and `adaptor drivers --json` show it) as well as by this agent's
    /// own: the explicit migration after a driver upgrade. Without it, a record another
    /// component wrote is [`ThreadError::Incompatible`](crate::ThreadError::Incompatible) —
    /// its resume id and guard data are that component's claims. Each run that saves stamps
    /// the record with this agent's component. Adds to the set; may be called repeatedly.
    pub fn accept_checkpoints_from(mut self, sha256: impl Into<String>) -> Self {
        self.settings.accepted_components.push(sha256.into());
        self
    }

    /// Sandbox limits for driver instances.
    pub fn guest_limits(mut self, limits: GuestLimits) -> Self {
        self.settings.limits = limits;
        self
    }

    /// Where [`Thread`](crate::Thread)s keep their sessions ([`SqliteStore`](crate::store::SqliteStore)
    /// for one machine, [`PostgresStore`](crate::store::PostgresStore) for many hosts,
    /// [`MemoryStore`](crate::store::MemoryStore) for one process).
    pub fn thread_store(self, store: impl ThreadStore + 'static) -> Self {
        self.shared_thread_store(Arc::new(store))
    }

    /// Like [`thread_store`](Self::thread_store), with a store shared with other agents.
    pub fn shared_thread_store(mut self, store: Arc<dyn ThreadStore>) -> Self {
        self.settings.thread_store = Some(store);
        self
    }

    /// How long a thread run's lease lasts without renewal (default 30 s; renewed every
    /// third of it while the run goes). A crashed host's threads become free after it.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.settings.lease_ttl = ttl;
        self
    }

    /// How long a thread's resident provider process may stay idle before it is stopped
    /// (default 5 minutes). See [`Spawn`].
    pub fn resident_idle(mut self, idle: Duration) -> Self {
        self.settings.resident_idle = idle;
        self
    }

    /// Keep `count` provider processes started and waiting for their first input (default
    /// 0: off), so a run skips the CLI's start-up (Claude Code, Codex: a few hundred
    /// milliseconds). A warm process is prepared exactly as a run with the agent's default
    /// options would be — same grant, containment and private directory rules — and a run
    /// takes one only if the launch it prepares itself is identical (program, arguments,
    /// environment, working directory, private files, confinement, instructions): never
    /// across other configs, workspaces, profiles or policies. A run with other options
    /// starts its own process and says why in a `process.prewarm_mismatch` notice. When the
    /// launch's own stdin input is the same whatever the prompt (a protocol handshake: the
    /// Codex app-server's `initialize` and `thread/start`, an ACP agent's `initialize`), it
    /// is written to the warm process at once, and only a run bringing the same bytes takes
    /// it (the `process.prewarmed` notice's `input_written`). Taken
    /// processes are replaced in the background; unused ones are stopped after
    /// [`prewarm_idle`](Self::prewarm_idle), by [`Agent::close`] and when the last handle
    /// is dropped, and none outlives the host (the same no-orphan guarantees as a run's).
    ///
    /// Needs a driver whose launch does not depend on the prompt (it goes to stdin), checked
    /// when the pool fills: [`Agent::warm_up`] returns
    /// [`Error::PrewarmUnsupported`](crate::Error::PrewarmUnsupported) otherwise, and runs
    /// report a failed fill in a `process.prewarm_failed` notice. It also needs a CLI that
    /// keeps waiting for its first input: Claude Code with the driver's `"transport":
    /// "stream-json"` (plain `-p` gives up after 3 s without stdin), Codex, ACP agents. A
    /// warm process that exits within a minute of its start stops the refilling until
    /// [`Agent::warm_up`], and the next run says why (`process.prewarm_failed`). One that a
    /// run with the default options could no longer take (its launch was decided from files
    /// that changed since, such as a state file the CLI created on its first start) is
    /// replaced. Filling starts at [`build`](Self::build) when called inside a Tokio
    /// runtime, else at the first run.
    pub fn prewarm(mut self, count: usize) -> Self {
        self.settings.prewarm = count;
        self
    }

    /// How long a prewarmed process may wait for a run before it is stopped (default 5
    /// minutes). The pool fills again at the next run.
    pub fn prewarm_idle(mut self, idle: Duration) -> Self {
        self.settings.prewarm_idle = idle;
        self
    }

    /// The host tools the agent's CLI may call (replaces the whole set). They are served by
    /// one MCP server per agent on `127.0.0.1`, started by the first run that needs it and
    /// stopped by [`Agent::close`] or when the last handle is dropped; the CLI sees them as
    /// the MCP server `host` (Claude Code: `mcp__host__<tool>`). Construction only: tools
    /// are not a per-call option. Checked at the first run (names, schemas; on threads,
    /// revisions): a bad set fails that run before launch.
    #[cfg(feature = "tools")]
    pub fn tools<I: IntoIterator<Item = crate::tools::Tool>>(mut self, tools: I) -> Self {
        self.settings.tools = tools.into_iter().collect();
        self
    }

    /// Resolve [`Skill::key`](crate::Skill::key) skills with `provider` (the caller's
    /// catalogue). Without one, a key skill stops the run
    /// ([`SkillError::NoProvider`](crate::SkillError::NoProvider)).
    pub fn skill_provider(mut self, provider: impl crate::skills::SkillProvider + 'static) -> Self {
        self.settings.skill_provider = Some(Arc::new(provider));
        self
    }

    /// Where checked skill sets are written (content-addressed, reused across runs and
    /// host processes). Default: `$ADAPTOR_SKILL_CACHE`, else
    /// `<user cache dir>/agent-adaptor/skills`.
    pub fn skill_cache(mut self, dir: impl Into<PathBuf>) -> Self {
        self.settings.skill_cache = Some(dir.into());
        self
    }

    /// Bounds on what one skill may contain (archive size, file size, total size, entry
    /// count). Default: [`SkillLimits::default`](crate::SkillLimits::default).
    pub fn skill_limits(mut self, limits: crate::skills::SkillLimits) -> Self {
        self.settings.skill_limits = limits;
        self
    }

    /// The CLI's per-user state directory ([`Profile::native`](crate::Profile::native) by
    /// default; [`Profile::dedicated`](crate::Profile::dedicated),
    /// [`Profile::clone_native`](crate::Profile::clone_native)). A dedicated profile is made
    /// (or brought back in line: missing links and copies) before every run, the host sets
    /// the driver's config-dir variable to it, and under containment the provider may write
    /// it instead of the user's own profile. It joins the thread fingerprint: a thread never
    /// resumes under another profile. Refused before anything starts
    /// ([`Error::Profile`](crate::Error::Profile)) by a driver that declares no profile.
    /// Construction only: one agent, one profile.
    pub fn profile(mut self, profile: impl Into<crate::profile::Profile>) -> Self {
        self.settings.profile = profile.into();
        self
    }

    /// Build the agent.
    pub fn build(self) -> Agent {
        crate::process::sweep_stale_run_dirs();
        // In the background, so the first launch does not wait for the spawner to start.
        #[cfg(unix)]
        crate::process::start_spawner(crate::grant::launch_common);
        let cancel = CancellationToken::new();
        let warm = crate::run::warm::WarmPool::new(
            self.driver.name(),
            self.settings.prewarm,
            self.settings.prewarm_idle,
            self.settings.grace_period,
        );
        let agent = Agent {
            inner: Arc::new(AgentInner {
                driver: self.driver,
                defaults: self.defaults,
                settings: self.settings,
                closed: AtomicBool::new(false),
                cancel: cancel.clone(),
                tracker: TaskTracker::new(),
                residents: Arc::new(crate::run::resident::ResidentPool::default()),
                warm: Arc::new(warm),
                config_fingerprint: tokio::sync::OnceCell::new(),
                #[cfg(feature = "tools")]
                tool_server: tokio::sync::Mutex::new(None),
            }),
            _life: Arc::new(Life(cancel)),
        };
        if agent.inner.warm.enabled() && tokio::runtime::Handle::try_current().is_ok() {
            crate::run::warm::refill(&agent.inner);
        }
        agent
    }
}

pub(crate) struct AgentInner {
    pub driver: Driver,
    pub defaults: RunOptions,
    pub settings: Settings,
    pub closed: AtomicBool,
    pub cancel: CancellationToken,
    pub tracker: TaskTracker,
    pub residents: Arc<crate::run::resident::ResidentPool>,
    /// Prewarmed provider processes ([`AgentBuilder::prewarm`]).
    pub warm: Arc<crate::run::warm::WarmPool>,
    /// The driver's fingerprint of the agent's config, asked of the driver by the first
    /// thread run and kept: the config is fixed for the agent's life, and a driver is a
    /// deterministic function of its inputs (fixed clocks, seeded randomness), so every
    /// later turn would get the same answer from a fresh instance.
    pub config_fingerprint: tokio::sync::OnceCell<String>,
    /// The host tool server, started by the first run that delivers tools.
    #[cfg(feature = "tools")]
    pub tool_server: tokio::sync::Mutex<Option<crate::tools::server::ToolServer>>,
}

impl AgentInner {
    /// The host tool server as a run delivers it: `None` when the agent has no tools;
    /// started on first use.
    #[cfg(feature = "tools")]
    pub(crate) async fn host_tools(&self) -> Result<Option<crate::mcp::HostToolServer>, Error> {
        if self.settings.tools.is_empty() {
            return Ok(None);
        }
        crate::tools::check(&self.settings.tools)?;
        let mut server = self.tool_server.lock().await;
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::AgentClosed);
        }
        if server.is_none() {
            *server =
                Some(crate::tools::server::ToolServer::start(self.settings.tools.clone()).await?);
        }
        Ok(server
            .as_ref()
            .map(|s| s.delivery(crate::mcp::HOST_TOOLS_SERVER)))
    }

    /// Without the `tools` feature an agent has no host tools.
    #[cfg(not(feature = "tools"))]
    pub(crate) async fn host_tools(&self) -> Result<Option<crate::mcp::HostToolServer>, Error> {
        Ok(None)
    }

    /// Resolve, check and write `skills` with this agent's provider, cache and limits.
    pub(crate) async fn materialize_skills(
        &self,
        skills: &[crate::skills::Skill],
    ) -> Result<Option<crate::skills::SkillSet>, crate::skills::SkillError> {
        let settings = &self.settings;
        let cache = settings
            .skill_cache
            .clone()
            .unwrap_or_else(crate::skills::default_cache);
        crate::skills::materialize(
            skills,
            settings.skill_provider.as_ref(),
            &cache,
            settings.skill_limits,
        )
        .await
    }

    /// Make the agent's dedicated profile as asked (`None` for the user's own).
    pub(crate) fn materialize_profile(
        &self,
    ) -> Result<Option<crate::profile::ResolvedProfile>, crate::error::ProfileError> {
        // Built only for a dedicated profile (the user's own needs no environment; this runs
        // on every thread turn).
        let env = std::cell::OnceCell::new();
        crate::profile::materialize(
            self.driver.name(),
            &self.settings.profile,
            self.driver.loaded.descriptor.profile.as_ref(),
            &|name| {
                env.get_or_init(|| crate::grant::base_env(&self.settings.grant_rules()))
                    .get(std::ffi::OsStr::new(name))
                    .cloned()
            },
        )
    }

    /// The thread-fingerprint entries of the agent's tools (each needs a revision).
    pub(crate) fn tool_fingerprint(&self) -> Result<Vec<String>, Error> {
        #[cfg(feature = "tools")]
        {
            crate::tools::check(&self.settings.tools)?;
            Ok(crate::tools::fingerprint_entries(&self.settings.tools)?)
        }
        #[cfg(not(feature = "tools"))]
        Ok(Vec::new())
    }
}

/// Cancels every run of the agent when the last `Agent` handle is dropped.
struct Life(CancellationToken);

impl Drop for Life {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// A driver with defaults: runs prompts.
///
/// Cloning shares the agent. When the last clone is dropped, its running runs are cancelled
/// (their provider process groups are stopped).
#[derive(Clone)]
pub struct Agent {
    pub(crate) inner: Arc<AgentInner>,
    _life: Arc<Life>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("driver", &self.inner.driver.name())
            .field("defaults", &self.inner.defaults)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Start building an agent for `driver`.
    pub fn builder(driver: Driver) -> AgentBuilder {
        AgentBuilder {
            driver,
            defaults: RunOptions::default(),
            settings: Settings::default(),
        }
    }

    /// The driver.
    pub fn driver(&self) -> &Driver {
        &self.inner.driver
    }

    /// Run a prompt to completion. Same pipeline as [`Agent::stream`], its events not read
    /// ([`Stream::result`](crate::Stream::result)).
    pub async fn run(&self, prompt: impl Into<String>) -> Result<RunResult, Error> {
        self.run_with(prompt, RunOptions::default()).await
    }

    /// Run with per-call options.
    pub async fn run_with(
        &self,
        prompt: impl Into<String>,
        options: RunOptions,
    ) -> Result<RunResult, Error> {
        Runner::run(self, prompt.into(), options).await
    }

    /// Start a run and stream its events. Must be called inside a Tokio runtime.
    pub fn stream(&self, prompt: impl Into<String>) -> Stream {
        self.stream_with(prompt, RunOptions::default())
    }

    /// Start a run with per-call options.
    pub fn stream_with(&self, prompt: impl Into<String>, options: RunOptions) -> Stream {
        Runner::stream(self, prompt.into(), options)
    }

    /// What a run of `prompt` would launch — program, arguments, environment (secrets
    /// masked), private files, working directory and confinement — decided by the same
    /// preparation as a run (config validation, policy check, the driver's `start`, the
    /// grant's checks), with nothing spawned. A launch the grant refuses is the same error a
    /// run gets. For reviewing what a third-party driver does with a prompt.
    pub async fn dry_run(
        &self,
        prompt: impl Into<String>,
    ) -> Result<crate::result::LaunchPlan, Error> {
        self.dry_run_with(prompt, RunOptions::default()).await
    }

    /// [`dry_run`](Self::dry_run) with per-call options.
    pub async fn dry_run_with(
        &self,
        prompt: impl Into<String>,
        options: RunOptions,
    ) -> Result<crate::result::LaunchPlan, Error> {
        crate::run::plan(
            &self.inner,
            prompt.into(),
            self.inner.defaults.overridden_by(&options),
        )
        .await
    }

    /// Cancel every running run, wait for them to finish, stop every resident thread process
    /// (all their processes are gone when this returns) and refuse new runs with
    /// [`Error::AgentClosed`]. Idempotent.
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        self.inner.tracker.close();
        self.inner.cancel.cancel();
        self.inner.tracker.wait().await;
        self.inner
            .residents
            .close(self.inner.settings.grace_period)
            .await;
        self.inner.warm.close().await;
        #[cfg(feature = "tools")]
        drop(self.inner.tool_server.lock().await.take());
    }

    /// Fill the prewarmed-process pool ([`AgentBuilder::prewarm`]) and wait until it is
    /// full: the number of processes waiting. Waiting ones are checked first (one that
    /// exited or that a default run could no longer take is replaced), and refilling resumes
    /// if a short-lived process had stopped it. Errors are what a run would get (the grant,
    /// the driver's `start`, spawning) or
    /// [`Error::PrewarmUnsupported`](crate::Error::PrewarmUnsupported) (also for a waiting
    /// process that exited soon after its start); `Ok(0)` without `prewarm`.
    pub async fn warm_up(&self) -> Result<usize, Error> {
        if !self.inner.warm.enabled() {
            return Ok(0);
        }
        crate::run::warm::fill(&self.inner).await
    }

    /// The URL of the agent's host tool server (`http://127.0.0.1:<port>/mcp`) once a run
    /// has started it; `None` before that, after [`Agent::close`], or without tools. The
    /// server refuses every request that lacks the agent's bearer token, which only the
    /// agent's CLI processes receive.
    #[cfg(feature = "tools")]
    pub async fn tools_endpoint(&self) -> Option<String> {
        self.inner
            .tool_server
            .lock()
            .await
            .as_ref()
            .map(|s| s.url().to_owned())
    }

    /// The agent's profile: what was asked (the dedicated directory, the parts carried from
    /// the user's own profile) and what is on disk ([`ProfileState::in_sync`](crate::ProfileState::in_sync)).
    /// Writes nothing. For the user's own profile there is nothing to observe.
    pub fn profile_state(&self) -> Result<crate::profile::ProfileState, Error> {
        let env = crate::grant::base_env(&self.inner.settings.grant_rules());
        Ok(crate::profile::observe(
            self.inner.driver.name(),
            &self.inner.settings.profile,
            self.inner.driver.loaded.descriptor.profile.as_ref(),
            &|name| env.get(std::ffi::OsStr::new(name)).cloned(),
        )?)
    }

    /// Make the agent's dedicated profile as asked now (every run does this too): create
    /// the directory (0700), link what is linked, copy what is missing — never over a file
    /// the CLI wrote — and return the state observed afterwards.
    pub fn sync_profile(&self) -> Result<crate::profile::ProfileState, Error> {
        self.inner.materialize_profile()?;
        self.profile_state()
    }

    /// True after [`Agent::close`].
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::SeqCst)
    }
}

/// Run `prompt` on `runner` (an [`Agent`](crate::Agent) or a [`Thread`](crate::Thread)) with the schema
/// of `T` and decode the answer.
pub async fn run_as<T: serde::de::DeserializeOwned + schemars::JsonSchema>(
    runner: &impl Runner,
    prompt: impl Into<String>,
) -> Result<(T, RunResult), Error> {
    run_as_with(runner, prompt, RunOptions::new()).await
}

/// [`run_as`] with per-call options. A schema already in `options` (e.g. with
/// `return_invalid` or a name) is used as given; otherwise the schema of `T`.
pub async fn run_as_with<T: serde::de::DeserializeOwned + schemars::JsonSchema>(
    runner: &impl Runner,
    prompt: impl Into<String>,
    options: RunOptions,
) -> Result<(T, RunResult), Error> {
    let options = if options.schema.is_some() {
        options
    } else {
        options.schema(crate::structured::Schema::of::<T>()?)
    };
    let result = Runner::run(runner, prompt.into(), options).await?;
    let value = result.decode::<T>()?;
    Ok((value, result))
}

/// Start this process's spawner now by forking the process itself, for a program that
/// calls it first thing in `main`: the spawner then starts from a small process that has
/// not mapped wasmtime nor started a runtime, instead of as the executable started afresh
/// on the first [`AgentBuilder::build`](crate::AgentBuilder::build) (loading, relocating
/// and starting the executable again cost about 1.8 ms of CPU in a profile of
/// `adaptor run`, which calls this).
///
/// The forked spawner is the same as the started one: the same serving loop, its own
/// process group, the parent-death signal towards the main thread, stdio on `/dev/null`,
/// no other inherited descriptor, its environment cleared, SIGPIPE at its default. Right
/// after the fork the host's spawner thread starts and takes it, decides the confinement
/// rules every launch shares (the system directories, `/etc` without its secrets, the
/// device nodes: listing and resolving `/etc` is about half a millisecond), has the spawner
/// build their Landlock ruleset, and probes what the kernel offers for confinement (a
/// throwaway child in new namespaces, about a millisecond; a host that is not root probes
/// first, as the probe decides its rules' form), all while the program goes on loading its
/// driver, rather than when the first `Agent` is built, after that load, or at the first
/// launch. If the spawner died meanwhile, the next launch starts one the usual way.
///
/// Refused with a [`SpawnerForkError`](crate::SpawnerForkError), and nothing changed, when
/// called from a thread other than the main one or while the process has any other thread
/// (a fork copies only the caller: a lock another thread held would stay held in the
/// spawner; a second call finds the spawner thread the first one started), logged at debug
/// level too. Does nothing on systems other than Linux, where no spawner process is used.
pub fn fork_spawner() -> Result<(), crate::error::SpawnerForkError> {
    crate::process::fork_spawner(crate::grant::launch_common)
}

/// Do now, on the calling thread, the once-per-process work that the first driver load and
/// the first [`AgentBuilder::build`] would otherwise do on their own path: build the shared
/// WebAssembly engine (its compiler settings detect the CPU's features — on a virtual
/// machine each `cpuid` traps to the hypervisor, about 10 µs) and the linker every driver is
/// instantiated with, run the CPU-feature detection of the SHA-256 and ChaCha code a load
/// and a run use, and remove the run directories that crashed hosts left in the system
/// temporary directory (what `build` does first).
///
/// Meant for a thread started first thing in `main`, as `adaptor run` does (after
/// [`fork_spawner`], which must find the process with one thread): the main thread then
/// finds all of it done when it loads its driver and builds its agent, and a load or build
/// that comes first waits for the part it needs instead of doing it twice. Never needed
/// for correctness; a second call costs nothing. Let the thread finish (join it) before
/// the process exits: a sweep cut short by the process's end can leave a crashed host's
/// directory half removed, without the `lock` by which a later sweep knows it is dead.
pub fn prepare_process() {
    crate::wasm::prepare();
    crate::process::sweep_stale_run_dirs();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_env_keeps_values_but_not_secrets() {
        let settings = Settings {
            set_env: vec![
                ("HOME".into(), "/home/a".into()),
                ("ANTHROPIC_API_KEY".into(), "sk-1".into()),
            ],
            pass_env: vec!["CLAUDE_CONFIG_DIR".into()],
            ..Settings::default()
        };
        assert_eq!(
            settings.fingerprint_env(),
            ["HOME=/home/a", "ANTHROPIC_API_KEY", "CLAUDE_CONFIG_DIR"]
        );
    }

    #[test]
    fn metadata_merges_by_key_and_other_fields_are_replaced_whole() {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        let outer = RunOptions::new()
            .metadata(map(&[("tenant", "a"), ("trace", "1")]))
            .model("outer");
        let nearer = RunOptions::new().metadata(map(&[("trace", "2"), ("call", "x")]));
        let merged = outer.overridden_by(&nearer);
        assert_eq!(
            merged.metadata,
            Some(map(&[("call", "x"), ("tenant", "a"), ("trace", "2")]))
        );
        assert_eq!(merged.model.as_deref(), Some("outer"));
        assert_eq!(
            RunOptions::new().overridden_by(&nearer).metadata,
            nearer.metadata
        );
        assert_eq!(
            outer.overridden_by(&RunOptions::new()).metadata,
            outer.metadata
        );
    }
}
