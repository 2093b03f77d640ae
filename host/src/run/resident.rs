//! Resident provider processes: a thread's provider process kept alive between its turns.
//!
//! Owns the per-agent pool (one process per thread key, so one writer per thread), idle
//! eviction, and stopping a resident (close stdin, wait, then the group's SIGTERM → SIGKILL).
//! Must not: decide *whether* a process may be kept or reused — the pipeline does (thread
//! run, driver declares `persistent-process`, launch keeps stdin open, same signature and the
//! store still holds the session this process continued) — nor speak any protocol.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::process::{self, PrivateDir};
use crate::result::LaunchRecord;
use crate::wasm::guest::GuestSession;

/// A live provider process whose turn ended, with the driver session that speaks to it.
pub(crate) struct Resident {
    pub session: GuestSession,
    pub spawned: process::Spawned,
    pub stdin: super::supervise::StdinSender,
    pub stdin_writer: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    pub launch: std::sync::Arc<LaunchRecord>,
    pub private_dir: PrivateDir,
    /// What the process was started for; a run with another signature gets a new process.
    pub signature: Signature,
    /// The thread record (and its turn count) this process has continued: if the store moved
    /// on (another host ran the thread), the process is stale.
    pub record_id: String,
    pub turns: u64,
}

/// What a resident process was started for: a turn is handed to it only when its run has the
/// same thread fingerprint, policy and streaming choice. Compared field by field each turn
/// (no formatting or hashing on the turn's path).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Signature {
    /// The thread fingerprint (driver, config, model, workspace, tools, resources, ...).
    pub fingerprint: String,
    /// The run's policy (approvals, sandbox, ...), fixed on the process's command line.
    pub policy: crate::policy::Policy,
    /// Whether the run streams (a transport choice for some drivers).
    pub streaming: bool,
}

impl Resident {
    /// The process has not exited yet.
    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.spawned.child.try_wait(), Ok(None))
    }
}

/// The resident processes of one agent, by thread key, and the one task that stops those
/// idle past their deadline.
#[derive(Default)]
pub(crate) struct ResidentPool {
    state: Mutex<PoolState>,
}

#[derive(Default)]
struct PoolState {
    /// Key → (idle deadline, process).
    slots: HashMap<String, (Instant, Resident)>,
    /// Whether the reaper task runs (it ends when the pool is empty; the next park starts
    /// it again), and the deadline it sleeps until.
    reaper: Option<Instant>,
    /// Wakes the reaper when a park sets a deadline earlier than the one it sleeps until.
    wake: Arc<tokio::sync::Notify>,
}

impl ResidentPool {
    /// Take the thread's resident process out of the pool (the caller owns it now).
    pub(crate) fn take(&self, key: &str) -> Option<Resident> {
        self.state.lock().ok()?.slots.remove(key).map(|(_, r)| r)
    }

    /// Keep `resident` for `key`; it is stopped after `idle` without a new turn.
    ///
    /// One reaper task per pool stops idle processes (not a timer task per turn: a turn's
    /// park costs a map insert, and a thousand parked threads one sleeping task).
    pub(crate) fn park(
        self: &Arc<Self>,
        key: String,
        resident: Resident,
        idle: Duration,
        grace: Duration,
    ) {
        let now = Instant::now();
        // An idle time too long to represent (`Duration::MAX`): kept until the agent closes.
        let deadline = now
            .checked_add(idle)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600));
        let mut state = match self.state.lock() {
            Ok(state) => state,
            Err(_) => {
                tracing::warn!(%key, "the resident pool's lock was poisoned; stopping the process instead of keeping it");
                tokio::spawn(stop(resident, grace));
                return;
            }
        };
        if let Some((_, old)) = state.slots.insert(key, (deadline, resident)) {
            // Cannot happen while the key's lease serialises its runs; never leak one anyway.
            tokio::spawn(stop(old, grace));
        }
        match state.reaper {
            Some(wakes_at) if wakes_at <= deadline => {}
            Some(_) => {
                state.reaper = Some(deadline);
                state.wake.notify_one();
            }
            None => {
                state.reaper = Some(deadline);
                tokio::spawn(reap(Arc::downgrade(self), state.wake.clone(), grace));
            }
        }
    }

    /// Stop every resident process and wait until they are gone.
    pub(crate) async fn close(&self, grace: Duration) {
        let all: Vec<Resident> = match self.state.lock() {
            Ok(mut state) => state.slots.drain().map(|(_, (_, r))| r).collect(),
            Err(_) => Vec::new(),
        };
        for r in all {
            stop(r, grace).await;
        }
    }
}

/// The pool's reaper: sleeps until the earliest idle deadline (or a park's earlier one),
/// stops every process past its deadline, and ends when the pool is empty or dropped.
async fn reap(pool: Weak<ResidentPool>, wake: Arc<tokio::sync::Notify>, grace: Duration) {
    loop {
        let (expired, next) = {
            let Some(pool) = pool.upgrade() else { return };
            let Ok(mut state) = pool.state.lock() else {
                return;
            };
            let now = Instant::now();
            let expired: Vec<(String, Resident)> = state
                .slots
                .extract_if(|_, (deadline, _)| *deadline <= now)
                .map(|(key, (_, r))| (key, r))
                .collect();
            let next = state.slots.values().map(|(deadline, _)| *deadline).min();
            state.reaper = next;
            (expired, next)
        };
        for (key, r) in expired {
            tracing::info!(%key, pid = r.spawned.pid, "stopping an idle resident provider process");
            // Each in its own task: one slow exit must not hold back the next deadline.
            tokio::spawn(stop(r, grace));
        }
        let Some(next) = next else { return };
        tokio::select! {
            () = tokio::time::sleep_until(next.into()) => {}
            () = wake.notified() => {}
        }
    }
}

/// Stop a resident process: end of input first (the CLI's own clean exit), then after
/// `grace` the process group is terminated and killed. Problems are logged: there is no run
/// left to report them to. Boxed: the futures of a turn that may stop a process (and on the
/// common path does not) hold a pointer, not the whole stop.
pub(crate) fn stop(
    resident: Resident,
    grace: Duration,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        let Resident {
            spawned,
            stdin,
            stdin_writer,
            ..
        } = resident;
        drop(stdin);
        stop_process(spawned, stdin_writer, grace).await;
    })
}

/// Stop a kept process (resident or prewarmed): close its input (its own stdin pipe, or the
/// task writing to it), wait `grace` for it to exit, then terminate and kill its group and
/// reap it. Problems are logged.
pub(crate) async fn stop_process(
    mut spawned: process::Spawned,
    stdin_writer: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    grace: Duration,
) {
    let pid = spawned.pid;
    let pgid = spawned.guard.pgid();
    drop(spawned.stdin.take());
    if let Some(writer) = stdin_writer {
        writer.abort();
    }
    let exited = tokio::time::timeout(grace, spawned.child.wait()).await;
    if !matches!(exited, Ok(Ok(_))) {
        tracing::info!(
            pid,
            "kept provider did not exit at end of input; terminating it"
        );
    }
    if let Err(e) = crate::process::end_group(&mut spawned, grace).await {
        tracing::warn!(pid, pgid, error = %e, "could not confirm a kept provider's process group is gone")
    }
    if let Err(e) = spawned.child.wait().await {
        tracing::warn!(pid, error = %e, "waiting for a stopped provider failed");
    }
}
