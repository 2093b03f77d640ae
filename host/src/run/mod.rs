//! `run/` — the one execution pipeline: every run (`run`, `stream`, a thread turn, the CLI)
//! goes through [`start`] / [`start_thread`], and [`Run::execute`] is its only driver.
//!
//! Stages: resolve options and workspace → fresh driver instance → validate config → resolve
//! and grant the program → build the request → `session.start` → check the launch against the
//! grant → write private files → `RunStarted` → spawn → supervise (feed chunks, perform
//! actions, timers, cancel, timeout, end-of-turn) → reap the process group → `on-exit` →
//! `finish` → classify → `RunFinished` → result.
//!
//! Rooms: this file (orchestration: the run's state, the thread stage around the attempt, one
//! fresh fallback), `prepare` (everything resolved before a process starts), `turn` (one turn on
//! an attached process, from spawn to the classified result), `supervise` (the select loop
//! and the driver's actions), `output` (the output budget), `classify` (outcome + process
//! facts → result, pure), `guard` (the driver's events and outcome checked against the WIT's
//! rules before they are forwarded), `decisions` (approval requests of one run), `resident` (kept
//! processes of threads), `coordinator` (the thread stage: fingerprint, lease, record,
//! finalize).
//!
//! Before `RunStarted` an error is returned with no events; after it, exactly one
//! `RunFinished` is the last event whatever happens. Must not: know any provider protocol,
//! spawn except through `process`, or decide a launch except through `grant`.

mod classify;
pub(crate) mod coordinator;
pub(crate) mod decisions;
mod guard;
mod output;
mod prepare;
pub(crate) mod resident;
mod supervise;
mod turn;
pub(crate) mod warm;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::agent::{AgentInner, RunOptions, Spawn};
use crate::error::{Error, FailureReason, StartRefusal};
use crate::event::blank_meta;
use crate::event::*;
use crate::process::{PrivateDir, ProcessSpec};
use crate::result::RunResult;
use crate::session::{Action, Launch};
use crate::stream::{Emitter, Pipeline, Stream};
use crate::structured::Mechanism;
use crate::wasm::convert::build_request;
use crate::wasm::guest::{GuestInstance, GuestSession, Interrupt};
use coordinator::{Coordinator, FingerprintInput, ThreadBinding, thread_fingerprint};
use resident::Resident;

use crate::grant::resolve_workspace;
pub use classify::{CHECKPOINT_INVALIDATED, SUMMARY_MAX_BYTES, SUMMARY_TRUNCATED};
pub(crate) use classify::{Classify, classify, finished_event};
pub use guard::{CONTRACT_VIOLATION, MAX_PLAUSIBLE_COST_USD, MAX_PLAUSIBLE_TOKENS};
pub(crate) use prepare::plan;

pub(crate) fn new_run_id() -> String {
    format!("run-{:016x}", crate::store::unique_bits() as u64)
}

/// A run just started: its stream, and its pipeline, which nothing drives yet — `stream`
/// spawns it at once ([`spawned`](Self::spawned)), `run` drives it in the caller's task
/// ([`run`](Self::run)). One pipeline either way; only who polls it differs. (`pub` only
/// because the sealed `Start` trait names it; this module is private.)
pub struct Started {
    stream: Stream,
    /// None when the agent was already closed (the stream's result says so).
    pipeline: Option<Pipeline>,
}

impl Started {
    /// Give the pipeline its own task and return the stream at once (`stream`): the events
    /// arrive while the caller does other things.
    pub(crate) fn spawned(self) -> Stream {
        if let Some(pipeline) = self.pipeline {
            tokio::spawn(pipeline);
        }
        self.stream
    }

    /// Drive the pipeline in the caller's task to the run's result, its events unread
    /// (`run`: no hand-off to another task and back). A caller that stops waiting hands the
    /// rest of the run to a task of its own ([`Stream::drive_to_result`]).
    pub(crate) async fn run(self) -> Result<RunResult, Error> {
        self.stream.drive_to_result(self.pipeline).await
    }
}

/// Start a run: its stream and its pipeline, not yet driven.
pub(crate) fn start(inner: &Arc<AgentInner>, prompt: String, options: RunOptions) -> Started {
    launch(inner, prompt, options, None)
}

/// Start a thread run: the same pipeline with the thread stage.
pub(crate) fn start_thread(
    inner: &Arc<AgentInner>,
    prompt: String,
    options: RunOptions,
    binding: ThreadBinding,
) -> Started {
    launch(inner, prompt, options, Some(binding))
}

fn launch(
    inner: &Arc<AgentInner>,
    prompt: String,
    options: RunOptions,
    thread: Option<ThreadBinding>,
) -> Started {
    let run_id = new_run_id();
    let (tx, rx) = mpsc::channel(inner.settings.event_buffer.max(2));
    let (result_tx, result_rx) = oneshot::channel();
    let cancel = inner.cancel.child_token();
    let (steer_tx, steer_rx) = match options.steering {
        Some(true) => {
            let (tx, rx) = mpsc::unbounded_channel();
            (Some(tx), Some(rx))
        }
        _ => (None, None),
    };
    let stream = Stream::new(run_id.clone(), rx, result_rx, cancel.clone(), steer_tx);
    if inner.closed.load(Ordering::SeqCst) {
        let _ = result_tx.send(Err(Error::AgentClosed));
        return Started {
            stream,
            pipeline: None,
        };
    }
    let emitter = Emitter::new(
        tx,
        run_id.clone(),
        inner.driver.name().to_owned(),
        inner.settings.blocking_events,
        cancel.clone(),
    );
    let span = tracing::info_span!("run", run_id = %run_id, driver = %inner.driver.name());
    let mut run = Box::new(Run::new(
        inner, run_id, prompt, options, emitter, cancel, thread,
    ));
    run.steer = steer_rx;
    let pipeline = async move {
        // The run and its future are boxed: the pipeline, which is moved a few times before
        // it is polled (instrumented, tracked, pinned), is two pointers instead of the
        // run's whole state machine.
        let result = Box::pin(run.execute()).await;
        // Everything the run holds (its event sender first) goes before the result is sent.
        drop(run);
        let _ = result_tx.send(result);
    }
    .instrument(span);
    Started {
        stream,
        pipeline: Some(Box::pin(inner.tracker.track_future(pipeline))),
    }
}

struct Run {
    inner: Arc<AgentInner>,
    run_id: String,
    prompt: String,
    options: RunOptions,
    emitter: Emitter,
    cancel: CancellationToken,
    started: Instant,
    mechanism: Option<Mechanism>,
    /// A thread run's binding, until the thread stage takes it.
    thread: Option<ThreadBinding>,
    /// The thread stage of a thread run.
    coordinator: Option<Coordinator>,
    /// A thread run: what a resident process must have been started for to be reused.
    resident_signature: Option<resident::Signature>,
    /// The process of this turn, kept alive for the thread's next turn.
    kept: Option<Resident>,
    /// The MCP delivery, once resolved ([`Run::delivery`]).
    delivery: Option<Arc<crate::mcp::Delivery>>,
    /// The run's managed workspace (a git worktree), once resolved: released at the end of a
    /// run that is not on a thread.
    managed_workspace: Option<(
        crate::workspace::Workspace,
        crate::workspace::ResolvedWorkspace,
    )>,
    /// The run's skills, once materialized ([`Run::skill_set`]).
    skills: Option<Option<Arc<crate::skills::SkillSet>>>,
    /// The run's profile and instructions bundle, once resolved ([`Run::resources`]).
    resources: Option<Arc<RunResources>>,
    /// Input for the running turn ([`Stream::steer`]), for a steerable run.
    steer: Option<mpsc::UnboundedReceiver<crate::stream::SteerRequest>>,
    /// Why the agent's prewarmed process did not serve this run (announced once it started).
    warm_miss: Option<String>,
    /// The canonical workspace directory, once resolved ([`Run::workspace_dir`]).
    workspace: std::cell::OnceCell<std::path::PathBuf>,
}

/// The run's resources besides skills and the workspace, resolved once before launch.
#[derive(Debug)]
struct RunResources {
    /// The agent's dedicated profile, made (`None`: the user's own).
    profile: Option<crate::profile::ResolvedProfile>,
    /// The run's instructions bundle, checked (written into the run's directory by
    /// `prepare`).
    bundle: Option<crate::instructions::CheckedBundle>,
}

/// A thread run that starts a fresh session because the stored one was rejected before
/// launch (announced with `ThreadFallback` once the run has started).
struct Fallback {
    /// The record that could not be resumed.
    previous_record_id: String,
    /// Why the driver refused it.
    reason: String,
}

/// How a turn gets its process.
enum Attach {
    /// Spawn what `session.start` asked for.
    Spawn(Box<Prepared>),
    /// Continue on the thread's resident process; `next-turn` returned these actions.
    Reuse(Box<Resident>, Vec<Action>),
}

/// What starts the turn once the process is attached.
enum Initial {
    /// A new process: the launch's stdin bytes, whether stdin stays open, and whether the
    /// bytes were written already (to a prewarmed process, before the run took it).
    Launch {
        stdin: Vec<u8>,
        keep_open: bool,
        written: bool,
    },
    /// A resident process: the driver's `next-turn` actions (typically a stdin frame).
    Actions(Vec<Action>),
}

/// Everything resolved before the process starts.
struct Prepared {
    session: GuestSession,
    launch: Launch,
    /// MCP credential values of the run (masked in dry runs).
    secrets: Vec<String>,
    spec: ProcessSpec,
    private_dir: PrivateDir,
    containment: crate::containment::ContainmentReport,
    /// The instructions bundle's fingerprint (what a warm process is compared on).
    bundle: Option<String>,
    /// A prewarmed process started with exactly this launch.
    warm: Option<warm::Taken>,
}

impl Prepared {
    /// This preparation on `warm`'s process and private directory (it was prepared on that
    /// directory and found identical).
    fn on(mut self, warm: warm::Warm) -> Prepared {
        let (taken, private_dir) = warm.into_taken();
        self.private_dir = private_dir;
        self.warm = Some(taken);
        self
    }
}

impl Run {
    fn new(
        inner: &Arc<AgentInner>,
        run_id: String,
        prompt: String,
        options: RunOptions,
        emitter: Emitter,
        cancel: CancellationToken,
        thread: Option<ThreadBinding>,
    ) -> Run {
        Run {
            inner: inner.clone(),
            run_id,
            prompt,
            options,
            emitter,
            cancel,
            started: Instant::now(),
            mechanism: None,
            thread,
            coordinator: None,
            resident_signature: None,
            kept: None,
            delivery: None,
            skills: None,
            resources: None,
            managed_workspace: None,
            steer: None,
            warm_miss: None,
            workspace: std::cell::OnceCell::new(),
        }
    }

    /// The run's MCP delivery (declared servers and the host tool server), resolved once
    /// against the driver's capabilities.
    async fn delivery(&mut self) -> Result<Arc<crate::mcp::Delivery>, Error> {
        if let Some(d) = &self.delivery {
            return Ok(d.clone());
        }
        let host = self.inner.host_tools().await?;
        let settings = &self.inner.settings;
        let delivery = crate::mcp::resolve(
            self.inner.driver.name(),
            &self.inner.driver.loaded.descriptor.mcp,
            self.options.mcp.as_deref().unwrap_or_default(),
            host.as_ref(),
            &|name| {
                settings
                    .set_env
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            },
            &|name| std::env::var(name).ok(),
        )?;
        let delivery = Arc::new(delivery);
        self.delivery = Some(delivery.clone());
        Ok(delivery)
    }

    /// The run's skills: refused for a driver without skills support, then resolved,
    /// checked and written to the skill cache once (`None` when the run has none).
    async fn skill_set(&mut self) -> Result<Option<Arc<crate::skills::SkillSet>>, Error> {
        if let Some(set) = &self.skills {
            return Ok(set.clone());
        }
        let skills = self.options.skills.as_deref().unwrap_or_default();
        if !skills.is_empty() && !self.inner.driver.loaded.descriptor.skills {
            return Err(Error::SkillsUnsupported {
                driver: self.driver_name(),
                count: skills.len(),
            });
        }
        let set = self.inner.materialize_skills(skills).await?.map(Arc::new);
        self.skills = Some(set.clone());
        Ok(set)
    }

    /// The run's profile (made as asked) and instructions bundle (checked), once; a driver
    /// that cannot take them is refused here, before anything starts.
    fn resources(&mut self) -> Result<Arc<RunResources>, Error> {
        if let Some(r) = &self.resources {
            return Ok(r.clone());
        }
        let descriptor = &self.inner.driver.loaded.descriptor;
        let bundle = match &self.options.instructions_bundle {
            None => None,
            Some(bundle) => {
                let unsupported = |reason: String| crate::error::InstructionsError::Unsupported {
                    driver: self.driver_name(),
                    reason,
                };
                if !descriptor.instructions {
                    return Err(unsupported(
                        "its descriptor does not declare `instructions`".into(),
                    )
                    .into());
                }
                if matches!(descriptor.wit_version.as_str(), "0.1.0" | "0.2.0") {
                    return Err(unsupported(format!(
                        "it was built against adaptor:driver@{}, which has no run resources \
                         (0.3.0 does)",
                        descriptor.wit_version
                    ))
                    .into());
                }
                Some(bundle.check()?)
            }
        };
        let profile = self.inner.materialize_profile()?;
        let resources = Arc::new(RunResources { profile, bundle });
        self.resources = Some(resources.clone());
        Ok(resources)
    }

    /// Resolve a managed workspace (a git worktree) once, before anything else: from here on
    /// the run's workspace is its directory.
    pub(super) async fn resolve_managed_workspace(&mut self) -> Result<(), Error> {
        use crate::workspace::{Workspace, WorkspaceManager, WorkspaceRequest};
        let Some(workspace @ Workspace::GitWorktree(_)) = self.options.workspace.clone() else {
            return Ok(());
        };
        let request = WorkspaceRequest {
            run_id: &self.run_id,
            thread_key: self.thread.as_ref().map(|b| b.key.as_str()),
        };
        let resolved = workspace.resolve(&request).await?;
        self.options.workspace = Some(Workspace::Dir(resolved.dir().to_path_buf()));
        self.managed_workspace = Some((workspace, resolved));
        Ok(())
    }

    /// The run's canonical workspace directory: the caller's directory (default: the
    /// current one), or the managed workspace resolved for this run. An unresolved managed
    /// workspace is an error, never a silent fallback to the current directory. Resolved
    /// once per run (after the managed workspace, which comes first).
    fn workspace_dir(&self) -> Result<std::path::PathBuf, Error> {
        if let Some(dir) = self.workspace.get() {
            return Ok(dir.clone());
        }
        let dir = self.resolve_workspace_dir()?;
        Ok(self.workspace.get_or_init(|| dir).clone())
    }

    fn resolve_workspace_dir(&self) -> Result<std::path::PathBuf, Error> {
        match &self.options.workspace {
            None => resolve_workspace(None),
            Some(workspace) => match workspace.as_dir() {
                Some(dir) => resolve_workspace(Some(dir)),
                None => Err(Error::InvalidWorkspace {
                    path: workspace.base_dir().display().to_string(),
                    reason: "the git worktree was not resolved before the run's preparation".into(),
                }),
            },
        }
    }

    /// Release the managed workspace of a run that is not on a thread (even after a
    /// failure). A failure to release is logged and returned: the caller reports it (a
    /// notice in a started run, the error of a dry run), it is never dropped.
    pub(super) async fn release_managed_workspace(
        &mut self,
        failed: bool,
        on_thread: bool,
    ) -> Result<(), crate::error::WorkspaceError> {
        use crate::workspace::WorkspaceManager;
        let Some((workspace, resolved)) = self.managed_workspace.take() else {
            return Ok(());
        };
        if on_thread {
            return Ok(());
        }
        workspace
            .release(&resolved, failed)
            .await
            .inspect_err(|problem| {
                tracing::warn!(dir = %resolved.dir().display(), %problem, "releasing the workspace failed");
            })
    }

    async fn execute(&mut self) -> Result<RunResult, Error> {
        let on_thread = self.thread.is_some();
        let result = self.execute_in_workspace(on_thread).await;
        // Refused before `RunStarted` (a finished run released it already): nothing may be
        // emitted, and the run fails with its own error; a failure to release as well is
        // logged by the release.
        if self
            .release_managed_workspace(result.is_err(), on_thread)
            .await
            .is_err()
        {
            tracing::warn!("the run was refused before it started and its worktree stays behind");
        }
        result
    }

    async fn execute_in_workspace(&mut self, on_thread: bool) -> Result<RunResult, Error> {
        self.resolve_managed_workspace().await?;
        if let Some(binding) = self.thread.take()
            && let Err(e) = self.begin_thread(binding).await
        {
            return Err(self.interrupted_before_start(e));
        }
        // The thread lease is renewed, in this task, from the moment it is held until the
        // run's work ends (preparing and spawning can take longer than its TTL on a loaded
        // host: measured, a thousand first turns at once); a lost lease cancels the run.
        let renewal = self
            .coordinator
            .as_ref()
            .map(|c| c.renewal(self.cancel.clone()));
        let keep_lease = async move {
            match renewal {
                Some(renewal) => renewal.await,
                None => std::future::pending().await,
            }
        };
        let attempt = tokio::select! {
            biased;
            done = self.attempt() => done,
            never = keep_lease => match never {},
        };
        let mut result = match attempt {
            Ok(result) => result,
            Err(e) => {
                // Before `RunStarted`: no events, and no lease left behind.
                if let Some(mut c) = self.coordinator.take()
                    && let Some(problem) = c.release().await
                {
                    tracing::warn!(key = %c.key(), %problem, "releasing the thread lease failed");
                }
                return Err(self.interrupted_before_start(e));
            }
        };
        if let Some(mut c) = self.coordinator.take() {
            result = c.finish(result).await;
            if let Some(mut kept) = self.kept.take() {
                match (&result, c.persisted()) {
                    (Ok(r), Some((record_id, turns))) => {
                        kept.record_id = record_id;
                        kept.turns = turns;
                        let key = r
                            .thread
                            .as_ref()
                            .map_or_else(|| c.key().to_owned(), |t| t.key.clone());
                        self.inner.residents.park(
                            key,
                            kept,
                            self.inner.settings.resident_idle,
                            self.inner.settings.grace_period,
                        );
                    }
                    _ => resident::stop(kept, self.inner.settings.grace_period).await,
                }
            }
            if let Some(problem) = c.release().await {
                tracing::warn!(key = %c.key(), %problem, "releasing the thread lease failed");
                self.emitter
                    .emit(Event::Notice(Notice {
                        meta: blank_meta(),
                        notice: "thread.lease_release_failed".into(),
                        message: format!(
                            "releasing the lease of thread {:?} failed (it lapses after its TTL): {problem}",
                            c.key()
                        ),
                        data: None,
                    }))
                    .await;
            }
        }
        if let Err(problem) = self
            .release_managed_workspace(result.is_err(), on_thread)
            .await
        {
            self.emitter
                .emit(Event::Notice(Notice {
                    meta: blank_meta(),
                    notice: "workspace.release_failed".into(),
                    message: format!("releasing the run's worktree failed: {problem}"),
                    data: None,
                }))
                .await;
        }
        let finished = finished_event(&result);
        match &result {
            Ok(_) => tracing::info!(
                elapsed_ms = self.started.elapsed().as_millis() as u64,
                "run succeeded"
            ),
            Err(e) => tracing::info!(error = %e, "run failed"),
        }
        self.emitter.finish(finished).await;
        result
    }

    /// The run's process work, once the thread stage (if any) holds its lease: attach a
    /// process, `RunStarted`, supervise, and one fresh attempt when the provider rejects the
    /// stored session. `Err` is a refusal before `RunStarted` (nothing was emitted); `Ok`
    /// holds the run's outcome.
    async fn attempt(&mut self) -> Result<Result<RunResult, Error>, Error> {
        let (attach, mut fallback) = self.attach().await?;
        if let Some(c) = &self.coordinator {
            self.emitter.set_turn(c.turn());
        }
        let program = match &attach {
            Attach::Spawn(p) => p.spec.program.display().to_string(),
            Attach::Reuse(r, _) => r.launch.resolved.display().to_string(),
        };
        self.emitter
            .emit(Event::RunStarted(RunStarted {
                meta: blank_meta(),
                program,
                model: self.options.model.clone(),
            }))
            .await;
        if let Some(Fallback {
            previous_record_id,
            reason,
        }) = fallback.take()
        {
            self.announce_fallback(previous_record_id, reason).await;
        }
        self.announce_warm_pool().await;
        // The stages of a turn are boxed where they are large or rare: every enclosing future
        // then stays small, so none of them copies kilobytes per turn when it is moved (see
        // "Per turn in a conversation" in docs/performance.md).
        let mut result = Box::pin(self.supervise(attach)).await;
        // The provider rejected the stored session: one fresh attempt, announced.
        if let Err(Error::Run(e)) = &result
            && e.reason == FailureReason::ResumeRejected
            && let Some(previous) = self
                .coordinator
                .as_mut()
                .and_then(|c| c.fall_back(&e.message))
        {
            let reason = e.message.clone();
            self.announce_fallback(previous, reason).await;
            if let Some(stale) = self.kept.take() {
                resident::stop(stale, self.inner.settings.grace_period).await;
            }
            result = match Box::pin(self.prepare()).await {
                Ok(prepared) => Box::pin(self.supervise(Attach::Spawn(Box::new(prepared)))).await,
                Err(e) => Err(e),
            };
        }
        Ok(result)
    }

    /// The thread stage before the driver starts: fingerprint, lease, record, mode.
    async fn begin_thread(&mut self, binding: ThreadBinding) -> Result<(), Error> {
        self.emitter.set_thread_key(&binding.key);
        let name = self.driver_name();
        if self.options.resume.is_some() {
            return Err(Error::InvalidCheckpoint {
                driver: name,
                reason: "a thread run resumes its thread's own checkpoint; a per-call `resume` is not allowed".into(),
            });
        }
        let workspace = self.workspace_dir()?;
        let config_fingerprint = self.config_fingerprint().await?;
        let tool_entries = self.inner.tool_fingerprint()?;
        let mcp_entries = self.delivery().await?.fingerprint.clone();
        let skill_entries = self
            .skill_set()
            .await?
            .map(|set| set.fingerprint_entries())
            .unwrap_or_default();
        let resources = self.resources()?;
        let bundle_fingerprint = resources.bundle.as_ref().map(|b| b.fingerprint());
        let driver = &self.inner.driver;
        let sessions = &driver.loaded.descriptor.sessions;
        let fingerprint = thread_fingerprint(&FingerprintInput {
            driver: &name,
            codec: &sessions.codec,
            config_fingerprint: &config_fingerprint,
            model: self.options.model.as_deref(),
            identity: self.options.identity.as_deref(),
            workspace: &workspace,
            instructions: self.options.instructions.as_deref(),
            mcp_servers: &mcp_entries,
            skills: &skill_entries,
            tools: &tool_entries,
            services: &[],
            provider_env: &self.inner.settings.fingerprint_env(),
            workspace_fingerprint: self
                .managed_workspace
                .as_ref()
                .map(|(_, resolved)| resolved.fingerprint()),
            profile_fingerprint: resources.profile.as_ref().map(|p| p.fingerprint.as_str()),
            instructions_bundle: bundle_fingerprint.as_deref(),
        });
        self.resident_signature = Some(resident::Signature {
            fingerprint: fingerprint.clone(),
            policy: self.options.policy.unwrap_or_default(),
            streaming: self.options.streaming.unwrap_or(true),
        });
        let component = (
            driver.loaded.sha256.as_str(),
            self.inner.settings.accepted_components.as_slice(),
        );
        self.coordinator =
            Some(Coordinator::begin(binding, fingerprint, &name, component, sessions).await?);
        Ok(())
    }

    /// The process for this turn: the thread's resident process when it can serve it,
    /// otherwise a prepared launch (see [`prepare_thread_aware`](Self::prepare_thread_aware)).
    async fn attach(&mut self) -> Result<(Attach, Option<Fallback>), Error> {
        if let Some((resident, actions)) = self.reuse_resident().await? {
            return Ok((Attach::Reuse(resident, actions), None));
        }
        // Spawning is boxed: a resident turn (above) does not carry its future.
        let (prepared, fallback) = Box::pin(self.prepare_thread_aware()).await?;
        Ok((Attach::Spawn(Box::new(prepared)), fallback))
    }

    /// Whether this run may keep its process for the thread's next turn: a thread run, a
    /// driver that declares resident processes, a launch that keeps stdin open, no one-shot
    /// request and no output schema (a schema is fixed on the command line of a process).
    fn may_keep(&self, launch: &Launch) -> bool {
        self.coordinator.is_some()
            && self.inner.driver.loaded.descriptor.persistent_process
            && launch.keep_stdin_open
            && self.options.spawn.unwrap_or_default() == Spawn::Reuse
            && self.options.schema.is_none()
    }

    /// Take the thread's resident process if it can serve this turn and hand it the turn
    /// (`next-turn`). A process that cannot (other signature, the store moved on, it
    /// exited, one-shot requested, the driver refuses) is stopped — before anything is
    /// written to it, so no prompt can reach a process that is then replaced.
    async fn reuse_resident(&mut self) -> Result<Option<(Box<Resident>, Vec<Action>)>, Error> {
        let Some(c) = &self.coordinator else {
            return Ok(None);
        };
        let Some(mut r) = self.inner.residents.take(c.key()) else {
            return Ok(None);
        };
        let grace = self.inner.settings.grace_period;
        let current = c.continued_record();
        let usable = self.options.spawn.unwrap_or_default() == Spawn::Reuse
            && self.options.schema.is_none()
            && self.resident_signature.as_ref() == Some(&r.signature)
            && current.is_some_and(|rec| rec.id == r.record_id && rec.turns == r.turns)
            && r.alive();
        if !usable {
            tracing::info!(key = %c.key(), pid = r.spawned.pid, "the thread's resident process cannot serve this turn; replacing it");
            resident::stop(r, grace).await;
            return Ok(None);
        }
        let resume = c.resume();
        let workspace = self.workspace_dir()?;
        let resolved = match self.delivery().await {
            Ok(d) => self.skill_set().await.map(|s| (d, s)),
            Err(e) => Err(e),
        };
        let (delivery, skills) = match resolved {
            Ok(both) => both,
            Err(e) => {
                resident::stop(r, grace).await;
                return Err(e);
            }
        };
        let skill_dirs = skills.map(|s| s.dirs()).unwrap_or_default();
        let request = build_request(
            &self.run_id,
            &self.prompt,
            self.inner.driver.config.to_string(),
            self.options.request_options(&delivery.servers, &skill_dirs),
            None,
            &workspace,
            &crate::process::PrivateDir::files_for(r.private_dir.root()),
            resume,
            // A resident process keeps the resources it was started with: the signature
            // (the thread fingerprint) holds the profile and the bundle.
            crate::wasm::convert::Resources::default(),
        );
        r.session.interrupt_on(Some(self.interrupt()));
        match r.session.next_turn(&request).await {
            Ok(Ok(actions)) => Ok(Some((Box::new(r), actions))),
            Ok(Err(refusal)) => {
                tracing::info!(
                    pid = r.spawned.pid,
                    ?refusal,
                    "the driver refused a next turn on the resident process; starting a new one"
                );
                resident::stop(r, grace).await;
                Ok(None)
            }
            Err(e) => {
                resident::stop(r, grace).await;
                Err(e)
            }
        }
    }

    /// [`prepare`](Self::prepare); when the driver refuses the stored session before launch
    /// and the thread may fall back, prepare a fresh session instead and say so.
    async fn prepare_thread_aware(&mut self) -> Result<(Prepared, Option<Fallback>), Error> {
        match self.prepare().await {
            Err(Error::StartRefused {
                kind: StartRefusal::ResumeRejected,
                message,
                ..
            }) if self.coordinator.is_some() => {
                let c = self.coordinator.as_mut().expect("checked");
                match c.fall_back(&message) {
                    Some(previous_record_id) => Ok((
                        self.prepare().await?,
                        Some(Fallback {
                            previous_record_id,
                            reason: message,
                        }),
                    )),
                    None => Err(c.rejected(message)),
                }
            }
            other => other.map(|p| (p, None)),
        }
    }

    async fn announce_fallback(&mut self, previous_record_id: String, reason: String) {
        let key = self
            .coordinator
            .as_ref()
            .map(|c| c.key().to_owned())
            .unwrap_or_default();
        tracing::info!(%key, previous = %previous_record_id, %reason, "resume rejected; starting a fresh session");
        if let Some(c) = &self.coordinator {
            self.emitter.set_turn(c.turn());
        }
        self.emitter
            .emit(Event::ThreadFallback(ThreadFallback {
                meta: blank_meta(),
                key,
                previous_record_id,
                reason,
            }))
            .await;
    }

    /// Say why the agent's prewarmed process did not serve this run, and why filling the
    /// pool failed since the last run said so.
    async fn announce_warm_pool(&mut self) {
        if let Some(differs) = self.warm_miss.take() {
            self.emitter
                .emit(Event::Notice(Notice {
                    meta: blank_meta(),
                    notice: "process.prewarm_mismatch".into(),
                    message: format!(
                        "the agent's prewarmed process was started for another launch (it differs in: {differs}); this run starts its own"
                    ),
                    data: None,
                }))
                .await;
        }
        if let Some(problem) = self.inner.warm.take_failure() {
            self.emitter
                .emit(Event::Notice(Notice {
                    meta: blank_meta(),
                    notice: "process.prewarm_failed".into(),
                    message: format!("starting a prewarmed provider process failed: {problem}"),
                    data: None,
                }))
                .await;
        }
    }

    /// The driver's fingerprint of the agent's config (see `AgentInner::config_fingerprint`):
    /// from a fresh instance on the agent's first thread run, then kept. A refusal is not
    /// kept, so each run reports it. Once kept it is read at once: the future is then a ready
    /// value, and the first run's (an instance and a driver call) is boxed, so no later run's
    /// future carries it.
    /// (Borrows nothing of the run across the await, as [`fresh_instance`](Self::fresh_instance).)
    fn config_fingerprint(
        &self,
    ) -> impl std::future::Future<Output = Result<String, Error>> + Send + 'static {
        use futures::future::Either;
        if let Some(kept) = self.inner.config_fingerprint.get() {
            return Either::Left(std::future::ready(Ok(kept.clone())));
        }
        let inner = self.inner.clone();
        let name = self.driver_name();
        let fresh = self.fresh_instance();
        Either::Right(Box::pin(async move {
            let config = &inner.driver.config;
            inner
                .config_fingerprint
                .get_or_try_init(|| async move {
                    let mut instance = fresh.await?;
                    instance
                        .config_fingerprint(&config.to_string())
                        .await?
                        .map_err(|e| e.into_error(name))
                })
                .await
                .cloned()
        }))
    }

    /// A new sandboxed instance of the driver (every run, and every attempt, gets its own).
    /// (Borrows nothing of the run across the await: a run holding a resident process is
    /// `Send` but not `Sync`.)
    /// Its long driver calls answer to this run's cancel and timeout from the first one.
    fn fresh_instance(
        &self,
    ) -> impl std::future::Future<Output = Result<GuestInstance, Error>> + Send + 'static {
        let inner = self.inner.clone();
        let interrupt = self.interrupt();
        async move {
            let driver = &inner.driver;
            let mut instance = GuestInstance::new(
                driver.loaded.name.clone(),
                &driver.loaded.pre,
                inner.settings.limits,
            )
            .await?;
            instance.interrupt_on(Some(interrupt));
            Ok(instance)
        }
    }

    /// When this run's long driver calls are interrupted: its cancellation, or its deadline
    /// (the timeout counts from the start of the run). Set on every instance and resident
    /// session that serves the run, before its first call for the run; checked on the epoch
    /// tick of a running call, so no task watches for it.
    fn interrupt(&self) -> Interrupt {
        Interrupt {
            cancel: self.cancel.clone(),
            deadline: self.options.timeout.map(|t| self.started + t),
        }
    }

    /// A refusal before `RunStarted` that is in fact this run's cancel or timeout
    /// interrupting a long driver call (`start`, `next-turn`, the session constructor…):
    /// the run ends as cancelled or timed out, as it would a moment later, not as a driver
    /// fault. Any other refusal is returned as it is.
    fn interrupted_before_start(&self, e: Error) -> Error {
        let interrupt = self.interrupt();
        if !matches!(e, Error::DriverTrap { .. }) || !interrupt.due() {
            return e;
        }
        let by_caller = self.cancel.is_cancelled();
        let (reason, message) = if by_caller {
            (
                FailureReason::Cancelled,
                format!("the run was cancelled before its provider started ({e})"),
            )
        } else {
            (
                FailureReason::Timeout,
                format!(
                    "the run exceeded its timeout of {} ms before its provider started ({e})",
                    self.options.timeout.unwrap_or_default().as_millis()
                ),
            )
        };
        classify::unstarted(
            &self.run_id,
            self.driver_name(),
            self.started,
            reason,
            message,
        )
    }

    fn driver_name(&self) -> String {
        self.inner.driver.name().to_owned()
    }
}
