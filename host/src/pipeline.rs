//! The one execution pipeline: every run — `run`, `stream`, the CLI — goes through
//! [`start`].
//!
//! Stages: resolve options and workspace → fresh driver instance → validate config → resolve
//! and grant the program → build the request → `session.start` → check the launch against the
//! grant → write private files → `RunStarted` → spawn → supervise (feed chunks, perform
//! actions, timers, cancel, timeout, end-of-turn) → reap the process group → `on-exit` →
//! `finish` → classify → `RunFinished` → result.
//!
//! Before `RunStarted` an error is returned with no events; after it, exactly one
//! `RunFinished` is the last event whatever happens. Must not: know any provider protocol.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::agent::{AgentInner, RunOptions, Spawn};
use crate::approval::Resolution;
use crate::bindings::wit;
use crate::convert;
use crate::decisions::{Decisions, Step};
use crate::error::{Error, FailureReason, RunError, StartRefusal};
use crate::event::*;
use crate::grant::Grant;
use crate::guest::{GuestInstance, GuestSession};
use crate::process::{self, DEFAULT_ENV_ALLOWLIST, PrivateDir, ProcessSpec, Sig};
use crate::resident::{self, Resident};
use crate::result::{ChunkRecord, ExitInfo, LaunchRecord, RawStreams, RunResult, StreamKind};
use crate::stream::{Emitter, Stream, blank_meta};
use crate::structured::{self, Mechanism};
use crate::thread::{Coordinator, FingerprintInput, ThreadBinding, thread_fingerprint};

/// Read size for stdout/stderr chunks.
const CHUNK: usize = 64 * 1024;
/// After the process exits, how long descendants may keep its pipes open.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

pub(crate) fn new_run_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seed = format!("{nanos}:{}:{n}", std::process::id());
    format!("run-{}", &crate::engine::sha256_hex(seed.as_bytes())[..16])
}

/// Start a run (spawns its task) and return its stream at once.
pub(crate) fn start(inner: &Arc<AgentInner>, prompt: String, options: RunOptions) -> Stream {
    launch(inner, prompt, options, None)
}

/// Start a thread run: the same pipeline with the thread stage.
pub(crate) fn start_thread(
    inner: &Arc<AgentInner>,
    prompt: String,
    options: RunOptions,
    binding: ThreadBinding,
) -> Stream {
    launch(inner, prompt, options, Some(binding))
}

fn launch(
    inner: &Arc<AgentInner>,
    prompt: String,
    options: RunOptions,
    thread: Option<ThreadBinding>,
) -> Stream {
    let run_id = new_run_id();
    let (tx, rx) = mpsc::channel(inner.settings.event_buffer.max(2));
    let (result_tx, result_rx) = oneshot::channel();
    let cancel = inner.cancel.child_token();
    let stream = Stream::new(run_id.clone(), rx, result_rx, cancel.clone());
    if inner.closed.load(Ordering::SeqCst) {
        let _ = result_tx.send(Err(Error::AgentClosed));
        return stream;
    }
    let emitter = Emitter::new(
        tx,
        run_id.clone(),
        inner.driver.name().to_owned(),
        inner.settings.blocking_events,
    );
    let span = tracing::info_span!("run", run_id = %run_id, driver = %inner.driver.name());
    let run = Run {
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
    };
    inner.tracker.spawn(
        async move {
            let result = run.execute().await;
            let _ = result_tx.send(result);
        }
        .instrument(span),
    );
    stream
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
    resident_signature: Option<String>,
    /// The process of this turn, kept alive for the thread's next turn.
    kept: Option<Resident>,
}

/// How a turn gets its process.
enum Attach {
    /// Spawn what `session.start` asked for.
    Spawn(Box<Prepared>),
    /// Continue on the thread's resident process; `next-turn` returned these actions.
    Reuse(Box<Resident>, Vec<wit::Action>),
}

/// What starts the turn once the process is attached.
enum Initial {
    /// A new process: the launch's stdin bytes, and whether stdin stays open.
    Launch { stdin: Vec<u8>, keep_open: bool },
    /// A resident process: the driver's `next-turn` actions (typically a stdin frame).
    Actions(Vec<wit::Action>),
}

/// Everything resolved before the process starts.
struct Prepared {
    session: GuestSession,
    launch: wit::Launch,
    spec: ProcessSpec,
    private_dir: PrivateDir,
}

impl Run {
    async fn execute(mut self) -> Result<RunResult, Error> {
        if let Some(binding) = self.thread.take() {
            self.begin_thread(binding).await?;
        }
        let (attach, mut fallback) = match self.attach().await {
            Ok(p) => p,
            Err(e) => {
                // Before `RunStarted`: no events, and no lease left behind.
                if let Some(mut c) = self.coordinator.take()
                    && let Some(problem) = c.release().await
                {
                    tracing::warn!(key = %c.key(), %problem, "releasing the thread lease failed");
                }
                return Err(e);
            }
        };
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
        if let Some((previous, reason)) = fallback.take() {
            self.announce_fallback(previous, reason).await;
        }
        if let Some(c) = self.coordinator.as_mut() {
            c.start_renewal(self.cancel.clone());
        }
        let mut result = self.supervise(attach).await;
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
            result = match self.prepare().await {
                Ok(prepared) => self.supervise(Attach::Spawn(Box::new(prepared))).await,
                Err(e) => Err(e),
            };
        }
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
        let driver = &self.inner.driver;
        let workspace = resolve_workspace(self.options.workspace.as_deref())?;
        let mut instance = self.fresh_instance().await?;
        let config_fingerprint = instance
            .config_fingerprint(&driver.config.to_string())
            .await?
            .map_err(|e| Error::InvalidConfig {
                driver: name.clone(),
                path: e.path,
                message: e.message,
            })?;
        let sessions = &driver.loaded.descriptor.sessions;
        let fingerprint = thread_fingerprint(&FingerprintInput {
            driver: &name,
            codec: &sessions.codec,
            config_fingerprint: &config_fingerprint,
            model: self.options.model.as_deref(),
            identity: self.options.identity.as_deref(),
            workspace: &workspace,
            instructions: self.options.instructions.as_deref(),
            mcp_servers: &[],
            skills: &[],
            tools: &[],
            services: &[],
        });
        let policy = self.options.policy.unwrap_or_default();
        self.resident_signature = Some(crate::engine::sha256_hex(
            format!(
                "{fingerprint}\n{policy:?}\n{:?}",
                self.options.streaming.unwrap_or(true)
            )
            .as_bytes(),
        ));
        self.coordinator = Some(Coordinator::begin(binding, fingerprint, &name, sessions).await?);
        Ok(())
    }

    /// The process for this turn: the thread's resident process when it can serve it,
    /// otherwise a prepared launch (see [`prepare_thread_aware`](Self::prepare_thread_aware)).
    async fn attach(&mut self) -> Result<(Attach, Option<(String, String)>), Error> {
        if let Some((resident, actions)) = self.reuse_resident().await? {
            return Ok((Attach::Reuse(resident, actions), None));
        }
        let (prepared, fallback) = self.prepare_thread_aware().await?;
        Ok((Attach::Spawn(Box::new(prepared)), fallback))
    }

    /// Whether this run may keep its process for the thread's next turn: a thread run, a
    /// driver that declares resident processes, a launch that keeps stdin open, no one-shot
    /// request and no output schema (a schema is fixed on the command line of a process).
    fn may_keep(&self, launch: &wit::Launch) -> bool {
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
    async fn reuse_resident(&mut self) -> Result<Option<(Box<Resident>, Vec<wit::Action>)>, Error> {
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
            && self.resident_signature.as_deref() == Some(r.signature.as_str())
            && current.is_some_and(|rec| rec.id == r.record_id && rec.turns == r.turns)
            && r.alive();
        if !usable {
            tracing::info!(key = %c.key(), pid = r.spawned.pid, "the thread's resident process cannot serve this turn; replacing it");
            resident::stop(r, grace).await;
            return Ok(None);
        }
        let resume = c.resume();
        let workspace = resolve_workspace(self.options.workspace.as_deref())?;
        let request = build_request(
            &self.run_id,
            &self.prompt,
            self.inner.driver.config.to_string(),
            &self.options,
            None,
            &workspace,
            r.private_dir.path(),
            resume,
        );
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
    async fn prepare_thread_aware(
        &mut self,
    ) -> Result<(Prepared, Option<(String, String)>), Error> {
        match self.prepare().await {
            Err(Error::StartRefused {
                kind: StartRefusal::ResumeRejected,
                message,
                ..
            }) if self.coordinator.is_some() => {
                let c = self.coordinator.as_mut().expect("checked");
                match c.fall_back(&message) {
                    Some(previous) => Ok((self.prepare().await?, Some((previous, message)))),
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
        self.emitter
            .emit(Event::ThreadFallback(ThreadFallback {
                meta: blank_meta(),
                key,
                previous_record_id,
                reason,
            }))
            .await;
    }

    /// A new sandboxed instance of the driver (every run, and every attempt, gets its own).
    /// (Borrows nothing of the run across the await: a run holding a resident process is
    /// `Send` but not `Sync`.)
    fn fresh_instance(
        &self,
    ) -> impl std::future::Future<Output = Result<GuestInstance, Error>> + Send + 'static {
        let inner = self.inner.clone();
        async move {
            let driver = &inner.driver;
            GuestInstance::new(
                driver.loaded.name.clone(),
                &driver.loaded.pre,
                inner.settings.limits,
            )
            .await
        }
    }

    fn driver_name(&self) -> String {
        self.inner.driver.name().to_owned()
    }

    async fn prepare(&mut self) -> Result<Prepared, Error> {
        let driver = &self.inner.driver;
        let name = self.driver_name();
        self.options
            .policy
            .unwrap_or_default()
            .check(&driver.loaded.descriptor)?;
        let workspace = resolve_workspace(self.options.workspace.as_deref())?;
        let mut instance = self.fresh_instance().await?;
        let config_json = driver.config.to_string();
        if let Err(e) = instance.validate_config(&config_json).await? {
            return Err(Error::InvalidConfig {
                driver: name,
                path: e.path,
                message: e.message,
            });
        }
        let configured = driver
            .config
            .get("command")
            .and_then(|c| c.as_str())
            .unwrap_or(&driver.loaded.descriptor.default_program)
            .to_owned();
        let path_var = std::env::var_os("PATH");
        let resolved = process::resolve_program(
            &configured,
            path_var.as_deref(),
            &workspace,
            &self.inner.settings.program_dirs,
        )
        .map_err(|detail| Error::ProgramNotFound {
            driver: name.clone(),
            program: configured.clone(),
            detail,
        })?;
        let resume = self.resume_request()?;
        if self.options.schema.is_some() {
            let policy = self.options.policy.unwrap_or_default();
            let asks = [policy.approvals.permission, policy.approvals.plan_review]
                .contains(&crate::policy::DecisionMode::Ask)
                || policy.approvals.question == crate::policy::QuestionMode::Ask;
            let mechanism = structured::negotiate(
                &driver.loaded.descriptor,
                self.options.streaming.unwrap_or(true),
                asks,
            )?;
            self.mechanism = Some(mechanism);
        }
        let prompt = match (&self.options.schema, self.mechanism) {
            (Some(schema), Some(Mechanism::PromptValidate)) => {
                structured::with_instructions(&self.prompt, schema)
            }
            _ => self.prompt.clone(),
        };
        let private_dir = PrivateDir::path_for(&self.run_id);
        let request = build_request(
            &self.run_id,
            &prompt,
            config_json,
            &self.options,
            self.mechanism,
            &workspace,
            &private_dir,
            resume,
        );
        let mut session = instance.open_session(&request).await?;
        let launch = start_session(&mut session, &name).await?;
        let grant = Grant {
            configured: &configured,
            resolved: &resolved,
            workspace: &workspace,
        };
        let cwd = grant.check(&launch).map_err(|refusal| {
            tracing::warn!(driver = %name, program = %launch.program, %refusal, "launch refused");
            Error::LaunchRefused {
                driver: name.clone(),
                refusal,
            }
        })?;
        let private_dir =
            PrivateDir::create(private_dir, &launch.files).map_err(|e| Error::Spawn {
                driver: name.clone(),
                program: resolved.display().to_string(),
                source: e,
            })?;
        let spec = ProcessSpec {
            program: resolved,
            args: launch.args.clone(),
            env: build_env(&self.inner.settings, &launch.env),
            cwd,
            parent_death_signal: self.inner.settings.parent_death_signal,
        };
        Ok(Prepared {
            session,
            launch,
            spec,
            private_dir,
        })
    }

    /// Check a caller-supplied checkpoint against the driver and turn it into the request's
    /// resume instructions.
    fn resume_request(&self) -> Result<Option<wit::Resume>, Error> {
        if let Some(c) = &self.coordinator {
            return Ok(c.resume());
        }
        let Some(cp) = &self.options.resume else {
            return Ok(None);
        };
        let sessions = &self.inner.driver.loaded.descriptor.sessions;
        let refuse = |reason: String| Error::InvalidCheckpoint {
            driver: self.driver_name(),
            reason,
        };
        if !sessions.resume {
            return Err(refuse(
                "the driver does not support resuming sessions".into(),
            ));
        }
        if cp.codec != sessions.codec {
            return Err(refuse(format!(
                "the checkpoint was written with codec `{}`, the driver uses `{}`",
                cp.codec, sessions.codec
            )));
        }
        if !cp.valid {
            return Err(refuse(
                "the checkpoint is not valid (it comes from a run that did not finish cleanly)"
                    .into(),
            ));
        }
        if cp.resume_id.is_empty() {
            return Err(refuse("the checkpoint has an empty resume id".into()));
        }
        Ok(Some(wit::Resume {
            mode: wit::SessionMode::ContinueOnly,
            state: wit::SessionState {
                resume_id: cp.resume_id.clone(),
                display_id: cp.display_id.clone(),
                data: cp.data.clone().into_iter().collect(),
            },
        }))
    }

    async fn supervise(&mut self, attach: Attach) -> Result<RunResult, Error> {
        let name = self.driver_name();
        let (mut session, mut spawned, launch_record, private_dir, initial, keep_alive, pipe) =
            match attach {
                Attach::Spawn(prepared) => {
                    let Prepared {
                        session,
                        launch,
                        spec,
                        private_dir,
                    } = *prepared;
                    let spawned = process::spawn(&spec).map_err(|source| Error::Spawn {
                        driver: name.clone(),
                        program: spec.program.display().to_string(),
                        source,
                    })?;
                    tracing::info!(
                        pid = spawned.pid,
                        program = %spec.program.display(),
                        args = ?spec.args,
                        cwd = %spec.cwd.display(),
                        "launched provider process"
                    );
                    self.emitter
                        .emit(Event::ProcessInfo(ProcessInfo {
                            meta: blank_meta(),
                            process: ProcessInfoKind::Spawn,
                            pid: Some(spawned.pid),
                            text: format!("{} {}", spec.program.display(), spec.args.join(" ")),
                            bytes: 0,
                        }))
                        .await;
                    let keep_alive = self.may_keep(&launch);
                    let record = LaunchRecord {
                        program: launch.program.clone(),
                        resolved: spec.program.clone(),
                        args: spec.args.clone(),
                        cwd: spec.cwd.clone(),
                    };
                    let initial = Initial::Launch {
                        stdin: launch.stdin,
                        keep_open: launch.keep_stdin_open,
                    };
                    (
                        session,
                        spawned,
                        record,
                        private_dir,
                        initial,
                        keep_alive,
                        None,
                    )
                }
                Attach::Reuse(resident, actions) => {
                    let r = *resident;
                    tracing::info!(
                        pid = r.spawned.pid,
                        "next turn on the thread's resident provider process"
                    );
                    self.emitter
                        .emit(Event::Notice(Notice {
                            meta: blank_meta(),
                            notice: "process.reused".into(),
                            message: format!(
                                "this turn runs on the thread's resident provider process (pid {})",
                                r.spawned.pid
                            ),
                            data: Some(serde_json::json!({ "pid": r.spawned.pid })),
                        }))
                        .await;
                    (
                        r.session,
                        r.spawned,
                        r.launch,
                        r.private_dir,
                        Initial::Actions(actions),
                        true,
                        Some((r.stdin, r.stdin_writer)),
                    )
                }
            };
        let pid = spawned.pid;
        let pgid = spawned.guard.pgid();

        let mut sup = Supervisor {
            session: &mut session,
            emitter: &mut self.emitter,
            driver: name.clone(),
            pgid,
            grace: self.inner.settings.grace_period,
            stdin: None,
            stdin_writer: None,
            timers: HashMap::new(),
            deliveries: VecDeque::new(),
            asks: Decisions::new(
                name.clone(),
                self.options.policy.unwrap_or_default().approvals,
                self.options.approval_handler.clone(),
            ),
            stopping: false,
            terminate_at: None,
            kill_at: None,
            turn_ended: false,
            raw: RawStreams {
                launch: Some(launch_record.clone()),
                ..RawStreams::default()
            },
            spawned_at: Instant::now(),
            idle_fired: false,
            output_limit: self.inner.settings.max_output_bytes,
            line_limit: self.inner.settings.max_line_bytes,
            line_len: [0, 0],
            overflow: None,
            discarded: 0,
        };
        match pipe {
            Some((tx, writer)) => {
                sup.stdin = Some(tx);
                sup.stdin_writer = writer;
            }
            None => {
                if let Some(stdin) = spawned.stdin.take() {
                    let (tx, rx) = mpsc::unbounded_channel();
                    sup.stdin_writer = Some(tokio::spawn(write_stdin(stdin, rx)));
                    sup.stdin = Some(tx);
                }
            }
        }
        match initial {
            Initial::Launch { stdin, keep_open } => {
                if !stdin.is_empty() {
                    sup.write_stdin(stdin).await;
                }
                if !keep_open {
                    sup.stdin = None;
                }
            }
            Initial::Actions(actions) => sup.apply(actions).await?,
        }

        let outcome = sup
            .run_loop(
                &mut spawned,
                &self.cancel,
                self.options.timeout,
                self.inner.settings.end_turn_grace,
                self.inner.settings.idle_timeout,
                keep_alive,
            )
            .await;
        if let Ok((_, _, _, true)) = &outcome {
            // The turn ended and the process lives on for the thread's next turn.
            let outcome = sup.session.finish().await?;
            let raw = std::mem::take(&mut sup.raw);
            let host_failure = sup.asks.failure();
            let exit = ExitInfo {
                kept_alive: true,
                ..ExitInfo::default()
            };
            let stdin = sup.stdin.take();
            let stdin_writer = sup.stdin_writer.take();
            drop(sup);
            let result = self.conclude(outcome, raw, exit, host_failure).await;
            if let Some(stdin) = stdin {
                self.kept = Some(Resident {
                    session,
                    spawned,
                    stdin,
                    stdin_writer,
                    launch: launch_record,
                    private_dir,
                    signature: self.resident_signature.clone().unwrap_or_default(),
                    record_id: String::new(),
                    turns: 0,
                });
            }
            return result;
        }
        // Whatever happened, no process of this run survives it.
        let reap = reap_group(pgid, self.inner.settings.grace_period).await;
        match reap {
            Ok(()) => spawned.guard.disarm(),
            Err(e) => {
                tracing::error!(pgid, error = %e, "could not confirm the provider process group is gone")
            }
        }
        let (status, cancelled, timed_out, _) = outcome?;
        let stdin_error = sup
            .close_stdin_and_join(self.inner.settings.grace_period)
            .await;
        if let Some(e) = stdin_error {
            sup.notice(
                "stdin.error",
                &format!("writing to the provider's stdin failed: {e}"),
            )
            .await;
        }
        drop(private_dir);

        let mut exit = exit_info(status, cancelled, timed_out);
        exit.no_output = sup.idle_fired;
        let output_limit = sup.overflow.take().map(|why| {
            format!(
                "{why}; {} bytes after the limit were discarded",
                sup.discarded
            )
        });
        let wit_status = wit::ExitStatus {
            code: exit.code,
            signal: exit.signal,
            timed_out,
            cancelled,
        };
        sup.deliver_after_exit().await?;
        let actions = sup.session.on_exit(wit_status).await?;
        sup.apply_after_exit(actions).await?;
        let outcome = sup.session.finish().await?;
        let raw = std::mem::take(&mut sup.raw);
        let host_failure = sup
            .asks
            .failure()
            .or_else(|| output_limit.map(|message| (FailureReason::OutputLimit, message)));
        self.emitter
            .emit(Event::ProcessInfo(ProcessInfo {
                meta: blank_meta(),
                process: ProcessInfoKind::Exit,
                pid: Some(pid),
                text: describe_exit(&exit),
                bytes: 0,
            }))
            .await;
        self.conclude(outcome, raw, exit, host_failure).await
    }

    /// The turn's result from the driver's outcome and the process facts: classify, apply
    /// the structured-output check, and report the host's corrections as notices.
    async fn conclude(
        &mut self,
        outcome: wit::Outcome,
        raw: RawStreams,
        exit: ExitInfo,
        host_failure: Option<(FailureReason, String)>,
    ) -> Result<RunResult, Error> {
        let mut notices = Vec::new();
        let result = self.classify(outcome, raw, exit, host_failure, &mut notices);
        let result = match (&self.options.schema, self.mechanism) {
            (Some(schema), Some(mechanism)) => structured::apply(schema, mechanism, result),
            _ => result,
        };
        for (kind, message) in notices {
            self.emitter
                .emit(Event::Notice(Notice {
                    meta: blank_meta(),
                    notice: kind,
                    message,
                    data: None,
                }))
                .await;
        }
        result
    }

    fn classify(
        &self,
        outcome: wit::Outcome,
        raw: RawStreams,
        exit: ExitInfo,
        host_failure: Option<(FailureReason, String)>,
        notices: &mut Vec<(String, String)>,
    ) -> Result<RunResult, Error> {
        classify(
            &Classify {
                driver: self.driver_name(),
                codec: self.inner.driver.loaded.descriptor.sessions.codec.clone(),
                run_id: self.run_id.clone(),
                timeout: self.options.timeout,
                idle: self.inner.settings.idle_timeout,
                started: self.started,
                host_failure,
            },
            outcome,
            raw,
            exit,
            notices,
        )
    }
}

/// The `RunFinished` event describing `result`.
pub(crate) fn finished_event(result: &Result<RunResult, Error>) -> RunFinished {
    match result {
        Ok(r) => RunFinished {
            meta: blank_meta(),
            usage: r.usage.clone(),
            failed: false,
            reason: None,
            message: None,
        },
        Err(Error::Run(e)) => RunFinished {
            meta: blank_meta(),
            usage: e.result.usage.clone(),
            failed: true,
            reason: Some(e.reason.clone()),
            message: Some(e.message.clone()),
        },
        Err(other) => RunFinished {
            meta: blank_meta(),
            usage: None,
            failed: true,
            reason: None,
            message: Some(other.to_string()),
        },
    }
}

/// The fully resolved request the driver sees.
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_request(
    run_id: &str,
    prompt: &str,
    config_json: String,
    options: &RunOptions,
    mechanism: Option<Mechanism>,
    workspace: &Path,
    private_dir: &Path,
    resume: Option<wit::Resume>,
) -> wit::RunRequest {
    wit::RunRequest {
        run_id: run_id.to_owned(),
        prompt: prompt.to_owned(),
        config_json,
        model: options.model.clone(),
        instructions: options.instructions.clone(),
        workspace: workspace.display().to_string(),
        private_dir: private_dir.display().to_string(),
        policy: options.policy.unwrap_or_default().to_wit(),
        output_schema: match (&options.schema, mechanism) {
            (Some(schema), Some(m)) => Some(wit::OutputSchema {
                schema_json: schema.json().to_string(),
                name: schema.wit_name(),
                description: schema.wit_description(),
                mechanism: match m {
                    Mechanism::Native => wit::SchemaMechanism::Native,
                    Mechanism::PromptValidate => wit::SchemaMechanism::PromptValidate,
                },
            }),
            _ => None,
        },
        resume,
        streaming: options.streaming.unwrap_or(true),
        mcp_servers: Vec::new(),
        skill_dirs: Vec::new(),
        metadata: options
            .metadata
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
    }
}

/// `session.start`, with a refusal turned into [`Error::StartRefused`].
pub(crate) async fn start_session(
    session: &mut GuestSession,
    driver: &str,
) -> Result<wit::Launch, Error> {
    match session.start().await? {
        Ok(launch) => Ok(launch),
        Err(e) => {
            let (kind, message) = match e {
                wit::StartError::InvalidRequest(m) => (StartRefusal::InvalidRequest, m),
                wit::StartError::Unsupported(m) => (StartRefusal::Unsupported, m),
                wit::StartError::ResumeRejected(m) => (StartRefusal::ResumeRejected, m),
            };
            Err(Error::StartRefused {
                driver: driver.to_owned(),
                kind,
                message,
            })
        }
    }
}

/// Notice kind emitted when the host invalidates a checkpoint a driver claimed valid on a
/// failed run (conformance clause RSP-01 looks for it).
pub const CHECKPOINT_INVALIDATED: &str = "checkpoint.invalidated";

/// Facts about a run that classification needs.
pub(crate) struct Classify {
    pub driver: String,
    pub codec: String,
    pub run_id: String,
    pub timeout: Option<Duration>,
    pub idle: Option<Duration>,
    pub started: Instant,
    /// A failure the host knows of: an approval outcome that ended the run (denied or timed
    /// out with `abort`, unanswered) or the output limit.
    pub host_failure: Option<(FailureReason, String)>,
}

/// Turn a driver's outcome plus the process facts into the run's result: validate what the
/// driver returned, decide success or the failure reason (host knowledge first: cancel,
/// timeout; then the driver's failure; then an abnormal exit), and invalidate a checkpoint
/// claimed on a failed run. Host corrections are appended to `notices` (kind, message) so
/// they reach the event stream: nothing is corrected silently.
pub(crate) fn classify(
    facts: &Classify,
    outcome: wit::Outcome,
    mut raw: RawStreams,
    exit: ExitInfo,
    notices: &mut Vec<(String, String)>,
) -> Result<RunResult, Error> {
    let name = facts.driver.clone();
    let contract = |message: String| Error::DriverContract {
        driver: name.clone(),
        call: "session.finish",
        message,
    };
    let transcript = outcome
        .transcript
        .into_iter()
        .map(convert::item)
        .collect::<Result<Vec<_>, _>>()
        .map_err(contract)?;
    raw.terminal = outcome
        .terminal
        .map(convert::terminal)
        .transpose()
        .map_err(contract)?;
    let codec = &facts.codec;
    let mut checkpoint = outcome
        .checkpoint
        .map(|c| convert::checkpoint(codec, c))
        .transpose()
        .map_err(contract)?;
    let structured_output =
        convert::json_field("structured-output", outcome.structured_output).map_err(contract)?;
    let failure = if exit.cancelled {
        Some((
            FailureReason::Cancelled,
            "the run was cancelled".to_owned(),
            None,
        ))
    } else if exit.timed_out {
        Some((
            FailureReason::Timeout,
            if exit.no_output {
                format!(
                    "the provider wrote nothing for {} ms (idle timeout)",
                    facts.idle.unwrap_or_default().as_millis()
                )
            } else {
                format!(
                    "the run exceeded its timeout of {} ms",
                    facts.timeout.unwrap_or_default().as_millis()
                )
            },
            None,
        ))
    } else if let Some((reason, message)) = facts.host_failure.clone() {
        // The host knows why the turn ended; the driver's own report stays in the transcript.
        Some((reason, message, None))
    } else if let Some(f) = outcome.failure {
        let details =
            convert::json_field("failure details-json", f.details_json).map_err(contract)?;
        Some((convert::failure_reason(f.reason), f.message, details))
    } else if !exit.kept_alive && (exit.code != Some(0) || exit.signal.is_some()) {
        Some((
            FailureReason::AgentError,
            format!(
                "the provider process ended unsuccessfully: {}",
                describe_exit(&exit)
            ),
            None,
        ))
    } else {
        None
    };
    if failure.is_some()
        && let Some(cp) = checkpoint.as_mut()
        && cp.valid
    {
        tracing::warn!(driver = %name, "driver marked a checkpoint valid on a failed run; the host invalidated it");
        notices.push((
                CHECKPOINT_INVALIDATED.to_owned(),
                format!(
                    "driver `{name}` marked checkpoint `{}` valid on a failed run; the host invalidated it",
                    cp.resume_id
                ),
            ));
        cp.valid = false;
    }
    let result = RunResult {
        run_id: facts.run_id.clone(),
        provider: name,
        model: outcome.model,
        text: outcome.text,
        summary: outcome.summary,
        usage: outcome.usage.map(convert::usage),
        metadata: outcome.metadata.into_iter().collect::<BTreeMap<_, _>>(),
        checkpoint,
        structured_output,
        structured: None,
        exit,
        thread: None,
        duration: facts.started.elapsed(),
        raw,
        transcript,
    };
    match failure {
        None => Ok(result),
        Some((reason, message, details)) => Err(Error::Run(Box::new(RunError {
            reason,
            message,
            details,
            result,
        }))),
    }
}

/// The run loop's state.
struct Supervisor<'a> {
    session: &'a mut GuestSession,
    emitter: &'a mut Emitter,
    driver: String,
    pgid: i32,
    grace: Duration,
    stdin: Option<mpsc::UnboundedSender<Vec<u8>>>,
    stdin_writer: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    timers: HashMap<u64, Instant>,
    /// Decisions waiting to be delivered to the driver (`on-decision`).
    deliveries: VecDeque<(String, wit::Decision)>,
    /// Approval requests of this run.
    asks: Decisions,
    /// The process is being stopped (cancel, timeout, …).
    stopping: bool,
    /// A graceful stop is under way: terminate at this time (and why).
    terminate_at: Option<(Instant, String)>,
    kill_at: Option<Instant>,
    turn_ended: bool,
    raw: RawStreams,
    spawned_at: Instant,
    idle_fired: bool,
    /// Most stdout + stderr bytes kept; beyond it the provider is stopped.
    output_limit: usize,
    /// Longest line (bytes without a newline) on stdout or stderr.
    line_limit: usize,
    /// Length of the current, unterminated line on stdout and on stderr.
    line_len: [usize; 2],
    /// Which output limit stopped the provider, if one did.
    overflow: Option<String>,
    /// Bytes discarded after an output limit was reached.
    discarded: u64,
}

/// (exit status, cancelled, timed out, kept alive for the thread's next turn).
type LoopOutcome = Result<(Option<std::process::ExitStatus>, bool, bool, bool), Error>;

impl Supervisor<'_> {
    async fn run_loop(
        &mut self,
        spawned: &mut process::Spawned,
        cancel: &CancellationToken,
        timeout: Option<Duration>,
        end_turn_grace: Duration,
        idle: Option<Duration>,
        keep_alive: bool,
    ) -> LoopOutcome {
        let mut stdout = spawned.stdout.take();
        let mut stderr = spawned.stderr.take();
        let mut out_buf = vec![0u8; CHUNK];
        let mut err_buf = vec![0u8; CHUNK];
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut last_output = Instant::now();
        let mut status: Option<std::process::ExitStatus> = None;
        let mut cancelled = false;
        let mut timed_out = false;
        let mut drain_until: Option<Instant> = None;
        let mut end_turn_deadline: Option<Instant> = None;
        let mut end_turn_seen = false;
        loop {
            if let Some((id, decision)) = self.deliveries.pop_front() {
                let actions = self.session.on_decision(&id, &decision).await?;
                self.apply(actions).await?;
                continue;
            }
            if self.asks.aborting() && !self.turn_ended && status.is_none() {
                // An approval outcome ended the run: the driver was told; the process gets the
                // end-of-turn grace to stop by itself.
                self.turn_ended = true;
            }
            if self.turn_ended
                && !end_turn_seen
                && keep_alive
                && status.is_none()
                && self.stdin.is_some()
                && !self.stopping
                && !self.asks.aborting()
            {
                // A resident turn is complete: the process stays for the next one.
                self.close_approvals(Resolution::Withdrawn).await;
                self.asks.abort_handlers();
                spawned.stdout = stdout;
                spawned.stderr = stderr;
                return Ok((None, false, false, true));
            }
            if self.turn_ended && !end_turn_seen {
                end_turn_seen = true;
                self.stdin = None;
                end_turn_deadline = Some(Instant::now() + end_turn_grace);
            }
            if status.is_some() && stdout.is_none() && stderr.is_none() {
                break;
            }
            let stopping = cancelled || timed_out;
            let next_timer = self
                .timers
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(id, at)| (*id, *at));
            let approval_deadline = self.asks.next_deadline();
            tokio::select! {
                _ = cancel.cancelled(), if !stopping && status.is_none() => {
                    cancelled = true;
                    self.close_approvals(Resolution::Cancelled).await;
                    self.stop("cancel").await?;
                }
                _ = sleep_opt(deadline), if !stopping && status.is_none() => {
                    timed_out = true;
                    self.close_approvals(Resolution::Withdrawn).await;
                    self.stop("timeout").await?;
                }
                _ = sleep_opt(idle.map(|d| last_output + d)), if !stopping && status.is_none() => {
                    timed_out = true;
                    self.idle_fired = true;
                    self.close_approvals(Resolution::Withdrawn).await;
                    self.terminate("no output within the idle timeout").await;
                }
                settled = self.asks.next_settled() => {
                    let mut steps = Vec::new();
                    self.asks.on_settled(settled, &mut steps);
                    self.perform(steps).await;
                }
                _ = sleep_opt(approval_deadline) => {
                    let mut steps = Vec::new();
                    self.asks.on_deadline(Instant::now(), &mut steps);
                    self.perform(steps).await;
                }
                _ = sleep_opt(self.terminate_at.as_ref().map(|(at, _)| *at)) => {
                    if let Some((_, why)) = self.terminate_at.take() {
                        self.terminate(&format!("{why}: the provider did not stop within the grace period")).await;
                    }
                }
                _ = sleep_opt(self.kill_at) => {
                    self.kill_at = None;
                    self.signal(Sig::Kill, "grace period elapsed").await;
                }
                _ = sleep_opt(end_turn_deadline), if status.is_none() && !stopping => {
                    end_turn_deadline = None;
                    self.notice("process.lingering", "the provider kept running after its turn ended; stopping it").await;
                    self.close_approvals(Resolution::Withdrawn).await;
                    self.terminate("lingering after end of turn").await;
                }
                _ = sleep_opt(drain_until) => {
                    // Descendants still hold the pipes open after the provider exited.
                    drain_until = None;
                    self.signal(Sig::Kill, "pipes held open after exit").await;
                    stdout = None;
                    stderr = None;
                }
                _ = sleep_opt(next_timer.map(|(_, at)| at)) => {
                    if let Some((id, _)) = next_timer {
                        self.timers.remove(&id);
                        let actions = self.session.on_timer(id).await?;
                        self.apply(actions).await?;
                    }
                }
                n = read_opt(&mut stdout, &mut out_buf) => {
                    if self.on_read(StreamKind::Stdout, n, &out_buf).await? {
                        last_output = Instant::now();
                    } else {
                        stdout = None;
                    }
                }
                n = read_opt(&mut stderr, &mut err_buf) => {
                    if self.on_read(StreamKind::Stderr, n, &err_buf).await? {
                        last_output = Instant::now();
                    } else {
                        stderr = None;
                    }
                }
                st = spawned.child.wait(), if status.is_none() => {
                    match st {
                        Ok(st) => status = Some(st),
                        Err(e) => {
                            self.notice("process.error", &format!("waiting for the provider failed: {e}")).await;
                            self.signal(Sig::Kill, "wait failed").await;
                            status = Some(process::killed_status());
                        }
                    }
                    drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
                }
            }
        }
        self.close_approvals(Resolution::Withdrawn).await;
        self.asks.abort_handlers();
        Ok((status, cancelled, timed_out, false))
    }

    /// Resolve every pending approval request (the run is ending) and report it.
    async fn close_approvals(&mut self, resolution: Resolution) {
        let mut steps = Vec::new();
        self.asks.close(resolution, &mut steps);
        self.perform(steps).await;
    }

    /// Emit the events and queue the decisions of an approval step list.
    async fn perform(&mut self, steps: Vec<Step>) {
        for step in steps {
            match step {
                Step::Emit(event) => self.emitter.emit(*event).await,
                Step::Deliver(id, decision) => self.deliveries.push_back((id, decision)),
            }
        }
    }

    /// Decisions that became known after the process ended still reach the driver (their
    /// actions can only emit events by then).
    async fn deliver_after_exit(&mut self) -> Result<(), Error> {
        while let Some((id, decision)) = self.deliveries.pop_front() {
            let actions = self.session.on_decision(&id, &decision).await?;
            self.apply_after_exit(actions).await?;
        }
        Ok(())
    }

    /// Handle one read from a pipe: `Ok(true)` when bytes arrived, `Ok(false)` at end of file
    /// or on a read error (reported as a notice, never dropped).
    async fn on_read(
        &mut self,
        stream: StreamKind,
        read: std::io::Result<usize>,
        buf: &[u8],
    ) -> Result<bool, Error> {
        let is_stdout = stream == StreamKind::Stdout;
        match read {
            Ok(0) => Ok(false),
            Ok(n) => {
                self.on_chunk(is_stdout, &buf[..n]).await?;
                Ok(true)
            }
            Err(e) => {
                let name = if is_stdout { "stdout" } else { "stderr" };
                self.notice(
                    &format!("{name}.error"),
                    &format!("reading the provider's {name} failed: {e}"),
                )
                .await;
                Ok(false)
            }
        }
    }

    async fn on_chunk(&mut self, is_stdout: bool, chunk: &[u8]) -> Result<(), Error> {
        if self.overflow.is_none() {
            let kept = self.raw.stdout.len() + self.raw.stderr.len();
            // One pass: the first piece continues the current line, the rest start new ones.
            let line = &mut self.line_len[usize::from(!is_stdout)];
            let mut longest = 0;
            for (i, piece) in chunk.split(|b| *b == b'\n').enumerate() {
                *line = if i == 0 {
                    *line + piece.len()
                } else {
                    piece.len()
                };
                longest = longest.max(*line);
            }
            if kept + chunk.len() > self.output_limit {
                self.overflow = Some(format!(
                    "the provider wrote more than {} bytes (max_output_bytes)",
                    self.output_limit
                ));
            } else if longest > self.line_limit {
                self.overflow = Some(format!(
                    "the provider wrote a line longer than {} bytes (max_line_bytes)",
                    self.line_limit
                ));
            }
            if let Some(why) = self.overflow.clone() {
                self.notice(
                    "output.limit",
                    &format!("{why}; stopping it — further output is discarded"),
                )
                .await;
                self.terminate("output limit").await;
            }
        }
        if self.overflow.is_some() {
            self.discarded += chunk.len() as u64;
            return Ok(());
        }
        let (stream, bytes) = if is_stdout {
            (StreamKind::Stdout, &mut self.raw.stdout)
        } else {
            (StreamKind::Stderr, &mut self.raw.stderr)
        };
        let offset = bytes.len();
        bytes.extend_from_slice(chunk);
        self.raw.chunks.push(ChunkRecord {
            stream,
            at: self.spawned_at.elapsed(),
            offset,
            len: chunk.len(),
        });
        self.emitter
            .emit(Event::ProcessInfo(ProcessInfo {
                meta: blank_meta(),
                process: if is_stdout {
                    ProcessInfoKind::Stdout
                } else {
                    ProcessInfoKind::Stderr
                },
                pid: None,
                text: String::from_utf8_lossy(chunk).into_owned(),
                bytes: chunk.len(),
            }))
            .await;
        let actions = if is_stdout {
            self.session.on_stdout(chunk).await?
        } else {
            self.session.on_stderr(chunk).await?
        };
        self.apply(actions).await
    }

    async fn notice(&mut self, kind: &str, message: &str) {
        tracing::debug!(kind, message, "notice");
        self.emitter
            .emit(Event::Notice(Notice {
                meta: blank_meta(),
                notice: kind.to_owned(),
                message: message.to_owned(),
                data: None,
            }))
            .await;
    }

    async fn signal(&mut self, sig: Sig, why: &str) {
        tracing::info!(
            pgid = self.pgid,
            signal = sig.name(),
            why,
            "signalling provider process group"
        );
        let text = match process::signal_group(self.pgid, sig) {
            Ok(true) => format!("{} sent to the process group ({why})", sig.name()),
            Ok(false) => return,
            Err(e) => format!("{} could not be sent ({why}): {e}", sig.name()),
        };
        self.emitter
            .emit(Event::ProcessInfo(ProcessInfo {
                meta: blank_meta(),
                process: ProcessInfoKind::Signal,
                pid: None,
                text,
                bytes: 0,
            }))
            .await;
    }

    /// SIGTERM now, SIGKILL after the grace period.
    /// Stop the turn for `why` (cancel, timeout): the driver may stop it gracefully first
    /// (`on-cancel`, e.g. a JSON-RPC interrupt); the process group is terminated after the
    /// grace period whatever happens — at once when the driver has nothing to do.
    async fn stop(&mut self, why: &str) -> Result<(), Error> {
        let actions = self.session.on_cancel().await?;
        if actions.is_empty() {
            self.terminate(why).await;
            return Ok(());
        }
        tracing::info!(driver = %self.driver, why, "the driver stops the turn gracefully");
        self.apply(actions).await?;
        if !self.stopping {
            self.terminate_at = Some((Instant::now() + self.grace, why.to_owned()));
        }
        Ok(())
    }

    async fn terminate(&mut self, why: &str) {
        self.terminate_at = None;
        self.stopping = true;
        self.stdin = None;
        self.signal(Sig::Terminate, why).await;
        self.kill_at = Some(Instant::now() + self.grace);
    }

    async fn write_stdin(&mut self, bytes: Vec<u8>) {
        let len = bytes.len();
        let offset = self.raw.stdin.len();
        let sent = match &self.stdin {
            Some(tx) => {
                self.raw.stdin.extend_from_slice(&bytes);
                tx.send(bytes).is_ok()
            }
            None => false,
        };
        if sent {
            self.raw.chunks.push(ChunkRecord {
                stream: StreamKind::Stdin,
                at: self.spawned_at.elapsed(),
                offset,
                len,
            });
        } else {
            self.raw.stdin.truncate(offset);
        }
        if !sent && self.stopping {
            tracing::debug!(driver = %self.driver, len, "stdin write while stopping the provider dropped");
        } else if !sent {
            self.notice(
                "stdin.closed",
                &format!("the driver wrote {len} bytes to stdin after it was closed; they were not delivered"),
            )
            .await;
        }
    }

    async fn apply(&mut self, actions: Vec<wit::Action>) -> Result<(), Error> {
        for action in actions {
            match action {
                wit::Action::Emit(event) => {
                    let event = self.convert_event(event)?;
                    self.emitter.emit(event).await;
                }
                wit::Action::WriteStdin(bytes) => self.write_stdin(bytes).await,
                wit::Action::CloseStdin => self.stdin = None,
                wit::Action::RequestApproval(request) => {
                    let mut steps = Vec::new();
                    self.asks.request(request, &mut steps).map_err(|message| {
                        Error::DriverContract {
                            driver: self.driver.clone(),
                            call: "request-approval",
                            message,
                        }
                    })?;
                    self.perform(steps).await;
                }
                wit::Action::SetTimer(t) => {
                    self.timers
                        .insert(t.id, Instant::now() + Duration::from_millis(t.after_ms));
                }
                wit::Action::CancelTimer(id) => {
                    self.timers.remove(&id);
                }
                wit::Action::Signal(sig) => match sig {
                    wit::Signal::Interrupt => {
                        self.signal(Sig::Interrupt, "requested by the driver").await
                    }
                    wit::Signal::Terminate => self.terminate("requested by the driver").await,
                    wit::Signal::Kill => self.signal(Sig::Kill, "requested by the driver").await,
                },
                wit::Action::EndTurn => self.turn_ended = true,
            }
        }
        Ok(())
    }

    /// After exit only events make sense; anything else is logged, never silently lost.
    async fn apply_after_exit(&mut self, actions: Vec<wit::Action>) -> Result<(), Error> {
        for action in actions {
            match action {
                wit::Action::Emit(event) => {
                    let event = self.convert_event(event)?;
                    self.emitter.emit(event).await;
                }
                wit::Action::EndTurn => {}
                other => {
                    tracing::debug!(driver = %self.driver, action = ?other, "action after the process exited ignored");
                }
            }
        }
        Ok(())
    }

    fn convert_event(&self, event: wit::Event) -> Result<Event, Error> {
        convert_event(&self.driver, event)
    }

    /// Close stdin and wait (bounded) for the writer; returns its error, if any.
    async fn close_stdin_and_join(&mut self, grace: Duration) -> Option<String> {
        self.stdin = None;
        let writer = self.stdin_writer.take()?;
        match tokio::time::timeout(grace, writer).await {
            Ok(Ok(Ok(()))) => None,
            Ok(Ok(Err(e))) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                Some("the provider closed its stdin before reading everything (broken pipe)".into())
            }
            Ok(Ok(Err(e))) => Some(e.to_string()),
            Ok(Err(join)) => Some(format!("stdin writer task failed: {join}")),
            Err(_) => Some("stdin writer did not finish within the grace period".into()),
        }
    }
}

/// Validate a driver event and turn it into a public [`Event`] (meta filled in later by the
/// emitter).
pub(crate) fn convert_event(driver: &str, event: wit::Event) -> Result<Event, Error> {
    let meta = blank_meta();
    let bad = |message: String| Error::DriverContract {
        driver: driver.to_owned(),
        call: "emit",
        message,
    };
    Ok(match event {
        wit::Event::Text(p) | wit::Event::Thinking(p) if p.message_id.is_empty() => {
            return Err(bad("a text/thinking event has an empty message id".into()));
        }
        wit::Event::Text(p) => Event::TextDelta(text_delta(meta, p)),
        wit::Event::Thinking(p) => Event::Thinking(text_delta(meta, p)),
        wit::Event::ToolCall(c) => {
            if c.id.is_empty() || (c.phase == wit::Phase::Start && c.name.is_empty()) {
                return Err(bad(
                    "a tool-call event needs an id, and a name on start".into()
                ));
            }
            Event::ToolCall(ToolCall {
                meta,
                args: convert::json_field("tool-call args-json", c.args_json).map_err(bad)?,
                id: c.id,
                name: c.name,
                phase: convert::phase(c.phase),
                args_delta: c.args_delta,
                parent_tool_call_id: c.scope.parent_tool_call_id,
            })
        }
        wit::Event::ToolResult(r) => {
            if r.id.is_empty() {
                return Err(bad("a tool-result event has an empty id".into()));
            }
            Event::ToolResult(ToolResult {
                meta,
                id: r.id,
                output: r.output,
                is_error: r.is_error,
                parent_tool_call_id: r.scope.parent_tool_call_id,
            })
        }
        wit::Event::Item(i) => Event::Item(ItemEvent {
            meta,
            item: convert::item(i).map_err(bad)?,
        }),
        wit::Event::Usage(u) => Event::Usage(UsageUpdate {
            meta,
            usage: convert::usage(u),
        }),
        wit::Event::Session(s) => Event::Session(SessionStarted {
            meta,
            session_id: s.session_id,
            model: s.model,
        }),
        wit::Event::Notice(n) => Event::Notice(Notice {
            meta,
            notice: n.kind,
            message: n.message,
            data: convert::json_field("notice data-json", n.data_json).map_err(bad)?,
        }),
        wit::Event::Other(v) => Event::Vendor(VendorEvent {
            meta,
            json: serde_json::from_str(&v.json).unwrap_or(serde_json::Value::String(v.json)),
            name: v.name,
        }),
    })
}

fn text_delta(meta: EventMeta, p: wit::TextPart) -> TextDelta {
    TextDelta {
        meta,
        message_id: p.message_id,
        phase: convert::phase(p.phase),
        text: p.text,
        parent_tool_call_id: p.scope.parent_tool_call_id,
    }
}

async fn write_stdin(
    mut stdin: tokio::process::ChildStdin,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
) -> std::io::Result<()> {
    while let Some(bytes) = rx.recv().await {
        stdin.write_all(&bytes).await?;
        stdin.flush().await?;
    }
    stdin.shutdown().await.ok();
    Ok(())
}

async fn read_opt<R: AsyncRead + Unpin>(
    reader: &mut Option<R>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match reader {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn sleep_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Make sure no process of the group survives: SIGTERM, grace, SIGKILL.
pub(crate) async fn reap_group(pgid: i32, grace: Duration) -> Result<(), String> {
    if !process::group_alive(pgid) {
        return Ok(());
    }
    tracing::info!(
        pgid,
        "terminating leftover processes of the provider's group"
    );
    process::signal_group(pgid, Sig::Terminate).map_err(|e| e.to_string())?;
    let until = Instant::now() + grace;
    while Instant::now() < until && process::group_alive(pgid) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if process::group_alive(pgid) {
        process::signal_group(pgid, Sig::Kill).map_err(|e| e.to_string())?;
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until && process::group_alive(pgid) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    if process::group_alive(pgid) {
        Err(format!("process group {pgid} still exists after SIGKILL"))
    } else {
        Ok(())
    }
}

fn exit_info(
    status: Option<std::process::ExitStatus>,
    cancelled: bool,
    timed_out: bool,
) -> ExitInfo {
    let (code, signal) = status.map(process::exit_parts).unwrap_or((None, None));
    ExitInfo {
        code,
        signal,
        timed_out,
        cancelled,
        no_output: false,
        kept_alive: false,
    }
}

fn describe_exit(exit: &ExitInfo) -> String {
    if exit.kept_alive {
        return "still running (kept for the thread's next turn)".into();
    }
    match (exit.code, exit.signal) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "unknown exit status".into(),
    }
}

pub(crate) fn resolve_workspace(dir: Option<&Path>) -> Result<PathBuf, Error> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir().map_err(|e| Error::InvalidWorkspace {
            path: ".".into(),
            reason: e.to_string(),
        })?,
    };
    let canonical = dir.canonicalize().map_err(|e| Error::InvalidWorkspace {
        path: dir.display().to_string(),
        reason: e.to_string(),
    })?;
    if !canonical.is_dir() {
        return Err(Error::InvalidWorkspace {
            path: dir.display().to_string(),
            reason: "not a directory".into(),
        });
    }
    Ok(canonical)
}

pub(crate) fn build_env(
    settings: &crate::agent::Settings,
    additions: &[(String, String)],
) -> Vec<(OsString, OsString)> {
    let mut env: BTreeMap<OsString, OsString> = BTreeMap::new();
    for name in DEFAULT_ENV_ALLOWLIST
        .iter()
        .copied()
        .chain(settings.pass_env.iter().map(String::as_str))
    {
        if let Some(value) = std::env::var_os(name) {
            env.insert(name.into(), value);
        }
    }
    for (k, v) in settings.set_env.iter().chain(additions) {
        env.insert(k.into(), v.into());
    }
    env.into_iter().collect()
}
