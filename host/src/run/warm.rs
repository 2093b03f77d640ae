//! Prewarmed provider processes (`AgentBuilder::prewarm`): started, idle CLI processes that
//! wait for their first input, so a run skips the CLI's start-up.
//!
//! Owns the per-agent pool: filling it (a warm process is prepared by the same preparation
//! as a run — driver instance, grant, the driver's `start`, confinement — for the agent's
//! default options and a placeholder prompt, then spawned through `process`), the check that
//! the driver's launch does not depend on the prompt, idle reaping, and stopping everything
//! on close. A run takes a warm process only when the launch it prepared itself on the warm
//! process's private directory is the very one the process was started with (program,
//! arguments, environment, working directory, private files, confinement, instructions
//! bundle): a warm process is never used across configs, workspaces, profiles or policies.
//! Before a run takes it, a warm process is written at most its launch's own input, and only
//! when that input is the same whatever the prompt (a protocol handshake such as the Codex
//! app-server's `initialize` and `thread/start`, an ACP agent's `initialize`): then the run
//! that takes it must have prepared those very bytes, and starts past them. A launch whose
//! input carries the prompt (Claude Code's stream-json user message) gets nothing. What the
//! process printed meanwhile stays in its pipes for that run's driver.
//!
//! Must not: decide what to spawn (`prepare` + `grant` do), speak any protocol, or hand one
//! process to two runs (a taken process leaves the pool for good).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::{Prepared, Run};
use crate::agent::AgentInner;
use crate::error::Error;
use crate::process::{self, PrivateDir, ProcessSpec};
use crate::session::Launch;

/// The placeholder prompt a warm process is prepared with (it never reaches the process).
const WARM_PROMPT: &str = "(prewarmed process)";
/// A second placeholder: preparing with it must give the same launch, else the driver puts
/// the prompt on the command line, in the environment or in a file, and no run could ever
/// take a warm process.
const PROBE_PROMPT: &str = "(a different prompt)";

/// A warm process that exits sooner than this after its start, with no run having taken
/// it, shows a launch the CLI does not keep waiting on (Claude Code's plain `-p` gives up
/// after 3 s without stdin): refilling would only start and lose processes.
const SHORT_LIVED: Duration = Duration::from_secs(60);

/// Launch input longer than this is never written before a run takes the process: well
/// under a pipe's capacity (64 KiB on Linux), so the write completes without the process
/// reading it.
const EARLY_INPUT_MAX: usize = 16 * 1024;

/// A started provider process that has received nothing yet, or only its launch's
/// prompt-independent input.
pub(crate) struct Warm {
    spawned: process::Spawned,
    private_dir: PrivateDir,
    /// What it was started for.
    identity: Identity,
    born: Instant,
}

/// A warm process as the run that took it sees it.
pub(crate) struct Taken {
    pub spawned: process::Spawned,
    /// How long it waited for a run.
    pub waited: Duration,
    /// Whether the launch's input was written to it before the run took it.
    pub input_written: bool,
}

/// Everything a process is started with; a run takes a warm process only if its own launch
/// has the same identity.
pub(crate) struct Identity {
    /// The driver's launch without its stdin bytes (written when a run takes the process).
    launch: Launch,
    spec: ProcessSpec,
    /// The instructions bundle written into the private directory (its fingerprint).
    bundle: Option<String>,
    /// The launch's stdin bytes.
    stdin: Vec<u8>,
    /// Whether `stdin` was written to the process already (then a run must bring the same).
    stdin_written: bool,
}

impl Identity {
    pub(crate) fn new(launch: &Launch, spec: &ProcessSpec, bundle: Option<String>) -> Identity {
        Identity {
            launch: Launch {
                stdin: Vec::new(),
                ..launch.clone()
            },
            spec: spec.clone(),
            bundle,
            stdin: launch.stdin.clone(),
            stdin_written: false,
        }
    }

    /// What differs from `other`, for the notice of a run that could not take the process;
    /// empty when the two launches are the same. Every field of the launch and the spec is
    /// destructured, so a field added to either must be placed here before this compiles.
    pub(crate) fn differences(&self, other: &Identity) -> Vec<&'static str> {
        let Launch {
            program,
            args,
            env,
            cwd,
            stdin: _,
            keep_stdin_open,
            files,
        } = &self.launch;
        let ProcessSpec {
            program: resolved,
            args: spec_args,
            env: spec_env,
            cwd: spec_cwd,
            parent_death_signal,
            confinement,
        } = &self.spec;
        let (a, b) = (&other.launch, &other.spec);
        let mut out = Vec::new();
        if *program != a.program || *resolved != b.program {
            out.push("program");
        }
        if *args != a.args || *spec_args != b.args {
            out.push("arguments");
        }
        if *env != a.env || *spec_env != b.env {
            out.push("environment");
        }
        if *cwd != a.cwd || *spec_cwd != b.cwd {
            out.push("working directory");
        }
        if *files != a.files {
            out.push("private files");
        }
        if *keep_stdin_open != a.keep_stdin_open {
            out.push("stdin mode");
        }
        // The state directories still to create are not part of how the process is confined.
        if !confinement.confines_as(&b.confinement) || *parent_death_signal != b.parent_death_signal
        {
            out.push("confinement");
        }
        if self.bundle != other.bundle {
            out.push("instructions bundle");
        }
        if self.stdin_written && self.stdin != other.stdin {
            out.push("the input written before the run");
        }
        out
    }
}

impl Warm {
    /// The root of its private directory (a run prepares on it to compare launches).
    pub(crate) fn root(&self) -> &std::path::Path {
        self.private_dir.root()
    }

    pub(crate) fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The process, for the run that takes it, and its private directory.
    pub(crate) fn into_taken(self) -> (Taken, PrivateDir) {
        let taken = Taken {
            spawned: self.spawned,
            waited: self.born.elapsed(),
            input_written: self.identity.stdin_written,
        };
        (taken, self.private_dir)
    }

    /// Write the launch's input now, when it is the same for another prompt (`probe_stdin`,
    /// what a run with another prompt prepared), the process keeps reading its stdin, and the
    /// input is short (see [`EARLY_INPUT_MAX`]). Whether it was written.
    async fn write_prompt_free_input(&mut self, probe_stdin: &[u8]) -> std::io::Result<bool> {
        use tokio::io::AsyncWriteExt;
        let identity = &mut self.identity;
        if !identity.launch.keep_stdin_open
            || identity.stdin.is_empty()
            || identity.stdin.len() > EARLY_INPUT_MAX
            || identity.stdin != probe_stdin
        {
            return Ok(false);
        }
        let Some(stdin) = self.spawned.stdin.as_mut() else {
            return Ok(false);
        };
        stdin.write_all(&identity.stdin).await?;
        stdin.flush().await?;
        identity.stdin_written = true;
        Ok(true)
    }

    /// `None` while it runs, else how it ended (an error reading its status counts as ended).
    fn exited(&mut self) -> Option<String> {
        match self.spawned.child.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => Some(status.to_string()),
            Err(e) => Some(format!("its status could not be read: {e}")),
        }
    }
}

/// One agent's warm processes.
pub(crate) struct WarmPool {
    /// The driver's name (for the errors the pool reports).
    driver: String,
    /// How many to keep (0: the pool is off).
    target: usize,
    idle: Duration,
    grace: Duration,
    state: Mutex<PoolState>,
    /// Signalled whenever a start ends.
    changed: tokio::sync::Notify,
}

#[derive(Default)]
struct PoolState {
    ready: VecDeque<(u64, Warm)>,
    /// Being started now.
    pending: usize,
    closed: bool,
    /// Why the last fill failed, until a run or `warm_up` reports it.
    failure: Option<Error>,
    /// A warm process exited soon after its start: no refills until `warm_up`.
    stalled: bool,
    next_id: u64,
}

impl PoolState {
    /// A waiting process exited (`status`) before any run took it.
    fn lost(&mut self, warm: &Warm, status: &str, driver: &str) {
        let lived = warm.born.elapsed();
        tracing::info!(
            pid = warm.spawned.pid,
            %status,
            lived_ms = lived.as_millis() as u64,
            "a prewarmed provider process exited before any run took it"
        );
        if lived < SHORT_LIVED {
            self.stalled = true;
            self.failure = Some(Error::PrewarmUnsupported {
                driver: driver.to_owned(),
                reason: format!(
                    "a prewarmed process exited {:.1} s after its start without any input ({status}): \
                     the CLI does not wait for its first input in this launch (for Claude Code, use \
                     the stream-json transport); prewarming stops until `warm_up`",
                    lived.as_secs_f64()
                ),
            });
        }
    }
}

impl WarmPool {
    pub(crate) fn new(driver: &str, target: usize, idle: Duration, grace: Duration) -> WarmPool {
        WarmPool {
            driver: driver.to_owned(),
            target,
            idle,
            grace,
            state: Mutex::new(PoolState::default()),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// Whether the agent keeps warm processes at all.
    pub(crate) fn enabled(&self) -> bool {
        self.target > 0
    }

    /// Take the oldest live warm process. One that exited meanwhile is dropped (its group
    /// killed); if it lived less than [`SHORT_LIVED`], the CLI does not wait for its first
    /// input in this launch (or fails at start), so the pool stops refilling until
    /// `Agent::warm_up` and the next run reports why.
    pub(crate) fn take(&self) -> Option<Warm> {
        let mut state = self.state.lock().ok()?;
        while let Some((_, mut warm)) = state.ready.pop_front() {
            match warm.exited() {
                None => return Some(warm),
                Some(status) => state.lost(&warm, &status, &self.driver),
            }
        }
        None
    }

    /// Give back a warm process a run did not take (it is still unused).
    pub(crate) fn put_back(self: &Arc<Self>, warm: Warm) {
        self.keep(warm);
    }

    /// Why filling the pool last failed (once).
    pub(crate) fn take_failure(&self) -> Option<Error> {
        self.state.lock().ok()?.failure.take()
    }

    /// How many warm processes are waiting.
    pub(crate) fn ready(&self) -> usize {
        self.state.lock().map_or(0, |s| s.ready.len())
    }

    fn keep(self: &Arc<Self>, warm: Warm) {
        let id = {
            let Ok(mut state) = self.state.lock() else {
                return;
            };
            if state.closed {
                drop(state);
                tokio::spawn(stop(warm, self.grace));
                return;
            }
            let id = state.next_id;
            state.next_id += 1;
            state.ready.push_back((id, warm));
            id
        };
        let pool: Weak<Self> = Arc::downgrade(self);
        let idle = self.idle;
        tokio::spawn(async move {
            tokio::time::sleep(idle).await;
            let Some(pool) = pool.upgrade() else { return };
            let expired = pool.state.lock().ok().and_then(|mut s| {
                let at = s.ready.iter().position(|(i, _)| *i == id)?;
                s.ready.remove(at).map(|(_, w)| w)
            });
            if let Some(warm) = expired {
                tracing::info!(
                    pid = warm.spawned.pid,
                    "stopping a prewarmed provider process no run took"
                );
                stop(warm, pool.grace).await;
            }
        });
    }

    /// Stop every warm process and start no more.
    pub(crate) async fn close(&self) {
        let all: Vec<Warm> = match self.state.lock() {
            Ok(mut state) => {
                state.closed = true;
                state.ready.drain(..).map(|(_, w)| w).collect()
            }
            Err(_) => Vec::new(),
        };
        for warm in all {
            stop(warm, self.grace).await;
        }
    }

    /// Reserve starts for what is missing; returns how many the caller must start.
    fn reserve(&self) -> usize {
        let Ok(mut state) = self.state.lock() else {
            return 0;
        };
        if state.closed || state.stalled {
            return 0;
        }
        let missing = self
            .target
            .saturating_sub(state.ready.len() + state.pending);
        state.pending += missing;
        missing
    }

    fn started(self: &Arc<Self>, made: Result<Warm, Error>) {
        let made = match made {
            Ok(warm) => Ok(warm),
            Err(problem) => {
                tracing::warn!(%problem, "could not start a prewarmed provider process");
                Err(problem)
            }
        };
        if let Ok(mut state) = self.state.lock() {
            state.pending = state.pending.saturating_sub(1);
            if let Err(problem) = made {
                state.failure = Some(problem);
                drop(state);
                self.changed.notify_waiters();
                return;
            }
        }
        if let Ok(warm) = made {
            self.keep(warm);
        }
        self.changed.notify_waiters();
    }

    /// Refill again after a short-lived warm process (an explicit `warm_up`).
    fn unstall(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.stalled = false;
        }
    }

    /// A waiting process `revalidate` checked: kept when still usable, else only uncounted.
    fn checked(self: &Arc<Self>, still: Option<Warm>) {
        if let Ok(mut state) = self.state.lock() {
            state.pending = state.pending.saturating_sub(1);
        }
        if let Some(warm) = still {
            self.keep(warm);
        }
        self.changed.notify_waiters();
    }

    /// Wait until no start is under way.
    async fn settled(&self) {
        loop {
            let changed = self.changed.notified();
            if self.state.lock().map_or(0, |s| s.pending) == 0 {
                return;
            }
            changed.await;
        }
    }
}

/// Start what the pool is missing, in the background.
pub(crate) fn refill(inner: &Arc<AgentInner>) {
    for _ in 0..inner.warm.reserve() {
        let inner = inner.clone();
        inner.tracker.clone().spawn(async move {
            let made = tokio::select! {
                made = make(&inner) => made,
                _ = inner.cancel.cancelled() => Err(Error::AgentClosed),
            };
            inner.warm.started(made);
        });
    }
}

/// Start what the pool is missing and wait for every start under way: the number of warm
/// processes then waiting, or why a start failed.
pub(crate) async fn fill(inner: &Arc<AgentInner>) -> Result<usize, Error> {
    if inner.closed.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(Error::AgentClosed);
    }
    // Starts under way finish first, so what they started is checked too.
    inner.warm.settled().await;
    inner.warm.unstall();
    revalidate(inner).await?;
    let missing = inner.warm.reserve();
    let made = futures::future::join_all((0..missing).map(|_| make(inner))).await;
    for result in made {
        inner.warm.started(result);
    }
    inner.warm.settled().await;
    match inner.warm.take_failure() {
        Some(e) => Err(e),
        None => Ok(inner.warm.ready()),
    }
}

/// Prepare and start one warm process for the agent's default options.
async fn make(inner: &Arc<AgentInner>) -> Result<Warm, Error> {
    let driver = inner.driver.name().to_owned();
    let unsupported = |reason: String| Error::PrewarmUnsupported {
        driver: driver.clone(),
        reason,
    };
    if let Some(crate::workspace::Workspace::GitWorktree(_)) = &inner.defaults.workspace {
        return Err(unsupported(
            "the default workspace is a git worktree, made for each run".into(),
        ));
    }
    if inner.defaults.schema.is_some() || inner.defaults.resume.is_some() {
        return Err(unsupported(
            "the default options carry an output schema or a checkpoint, fixed per run".into(),
        ));
    }
    // A launch decided from a filesystem that changed meanwhile is started again (a few
    // times at most); one that changes with the prompt can never be prewarmed.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut warm = start(inner).await?;
        // The same preparation with another prompt must ask for the same process; the same
        // prompt again tells a prompt-dependent launch from a changed filesystem.
        let verdict = match probe(inner, &warm, PROBE_PROMPT).await {
            Ok(Probe::Takes { stdin }) => match warm.write_prompt_free_input(&stdin).await {
                Ok(written) => {
                    if written {
                        tracing::info!(
                            pid = warm.spawned.pid,
                            bytes = stdin.len(),
                            "wrote the launch's prompt-independent input to the prewarmed process"
                        );
                    }
                    return Ok(warm);
                }
                Err(source) => Err(Error::Spawn {
                    driver: driver.clone(),
                    program: warm.identity.spec.program.display().to_string(),
                    source,
                }),
            },
            Ok(Probe::Differs(reason)) => match probe(inner, &warm, WARM_PROMPT).await {
                Ok(Probe::Takes { .. }) => Err(unsupported(format!(
                    "the driver's launch depends on the prompt ({reason}), so no run could take a process started before its prompt"
                ))),
                Ok(Probe::Differs(_)) if attempts < 3 => Ok(()),
                Ok(Probe::Differs(again)) => Err(unsupported(format!(
                    "the driver's launch changed ({again}) on each of {attempts} starts"
                ))),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        stop(warm, inner.settings.grace_period).await;
        verdict?;
    }
}

/// Prepare and spawn one process for the agent's default options and the warm prompt.
async fn start(inner: &Arc<AgentInner>) -> Result<Warm, Error> {
    let mut run = Run::detached(inner, WARM_PROMPT.to_owned(), inner.defaults.clone());
    let Prepared {
        session,
        launch,
        spec,
        private_dir,
        bundle,
        ..
    } = run.prepare_to_launch().await?;
    drop(session);
    let spawned = process::spawn(&spec).await.map_err(|source| Error::Spawn {
        driver: inner.driver.name().to_owned(),
        program: spec.program.display().to_string(),
        source,
    })?;
    tracing::info!(pid = spawned.pid, program = %spec.program.display(), "started a prewarmed provider process");
    Ok(Warm {
        spawned,
        private_dir,
        identity: Identity::new(&launch, &spec, bundle),
        born: Instant::now(),
    })
}

/// Whether a run with the agent's default options and `prompt` could take `warm` now.
enum Probe {
    /// It could; its launch's stdin bytes.
    Takes { stdin: Vec<u8> },
    /// It could not: how its launch differs.
    Differs(String),
}

/// Prepare a run with the agent's default options and `prompt` on `warm` (nothing is
/// written or started) and compare its launch with the one `warm` was started with.
async fn probe(inner: &Arc<AgentInner>, warm: &Warm, prompt: &str) -> Result<Probe, Error> {
    let mut run = Run::detached(inner, prompt.to_owned(), inner.defaults.clone());
    Ok(match run.prepare_on(Some(warm)).await? {
        Some(prepared) => Probe::Takes {
            stdin: prepared.launch.stdin,
        },
        None => Probe::Differs(run.warm_miss.take().unwrap_or_default()),
    })
}

/// `warm` if a run with the agent's default options could still take it; otherwise it is
/// stopped — it exited (a short-lived one stops the refilling, see [`PoolState::lost`]), or
/// its launch was decided from files that changed since it started (the confinement grants
/// state files only once they exist, and a CLI creates its own on its first start).
async fn still_current(inner: &Arc<AgentInner>, mut warm: Warm) -> Result<Option<Warm>, Error> {
    let grace = inner.settings.grace_period;
    if let Some(status) = warm.exited() {
        if let Ok(mut state) = inner.warm.state.lock() {
            state.lost(&warm, &status, &inner.warm.driver);
        }
        stop(warm, grace).await;
        return Ok(None);
    }
    match probe(inner, &warm, PROBE_PROMPT).await {
        Ok(Probe::Takes { .. }) => Ok(Some(warm)),
        Ok(Probe::Differs(reason)) => {
            tracing::info!(
                pid = warm.spawned.pid,
                differs_in = %reason,
                "stopping a prewarmed provider process the agent's default launch no longer matches"
            );
            stop(warm, grace).await;
            Ok(None)
        }
        Err(e) => {
            stop(warm, grace).await;
            Err(e)
        }
    }
}

/// A run declined `warm` (its launch differs): back to the pool when a run with the agent's
/// default options could still take it, else replaced. The check is one more preparation,
/// paid only by a run that starts its own process anyway.
pub(crate) async fn decline(inner: &Arc<AgentInner>, warm: Warm) {
    match still_current(inner, warm).await {
        Ok(Some(warm)) => inner.warm.put_back(warm),
        Ok(None) => refill(inner),
        Err(problem) => {
            tracing::warn!(%problem, "could not check a prewarmed provider process; it was stopped");
            refill(inner);
        }
    }
}

/// Check every waiting process with [`still_current`], then start what is missing in the
/// background. `Agent::warm_up` calls it before filling (a run that starts meanwhile may
/// find the pool empty and start its own process); the first check that failed is returned.
pub(crate) async fn revalidate(inner: &Arc<AgentInner>) -> Result<(), Error> {
    let pool = &inner.warm;
    // Counted as starts under way while checked, so a concurrent refill does not overfill.
    let waiting: Vec<Warm> = match pool.state.lock() {
        Ok(mut state) => {
            let all: Vec<Warm> = state.ready.drain(..).map(|(_, w)| w).collect();
            state.pending += all.len();
            all
        }
        Err(_) => return Ok(()),
    };
    let mut failure = None;
    for warm in waiting {
        let still = still_current(inner, warm).await.unwrap_or_else(|e| {
            failure.get_or_insert(e);
            None
        });
        pool.checked(still);
    }
    match failure {
        Some(e) => Err(e),
        None => {
            refill(inner);
            Ok(())
        }
    }
}

/// Stop a warm process: end of input (the CLI's own exit), then its group's SIGTERM →
/// SIGKILL after `grace`; its private directory goes after it.
pub(crate) async fn stop(warm: Warm, grace: Duration) {
    let Warm {
        spawned,
        private_dir,
        ..
    } = warm;
    super::resident::stop_process(spawned, None, grace).await;
    drop(private_dir);
}
