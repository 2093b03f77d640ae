//! Resident provider processes: a thread's provider process kept alive between its turns.
//!
//! Owns the per-agent pool (one process per thread key, so one writer per thread), idle
//! eviction, and stopping a resident (close stdin, wait, then the group's SIGTERM → SIGKILL).
//! Must not: decide *whether* a process may be kept or reused — the pipeline does (thread
//! run, driver declares `persistent-process`, launch keeps stdin open, same signature and the
//! store still holds the session this process continued) — nor speak any protocol.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::process::{self, PrivateDir};
use crate::result::LaunchRecord;
use crate::wasm::guest::GuestSession;

/// A live provider process whose turn ended, with the driver session that speaks to it.
pub(crate) struct Resident {
    pub session: GuestSession,
    pub spawned: process::Spawned,
    pub stdin: mpsc::UnboundedSender<Vec<u8>>,
    pub stdin_writer: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    pub launch: LaunchRecord,
    pub private_dir: PrivateDir,
    /// What the process was started for (fingerprint, policy, transport); a run with another
    /// signature gets a new process.
    pub signature: String,
    /// The thread record (and its turn count) this process has continued: if the store moved
    /// on (another host ran the thread), the process is stale.
    pub record_id: String,
    pub turns: u64,
}

impl Resident {
    /// The process has not exited yet.
    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.spawned.child.try_wait(), Ok(None))
    }
}

/// The resident processes of one agent, by thread key.
#[derive(Default)]
pub(crate) struct ResidentPool {
    slots: Mutex<HashMap<String, (u64, Resident)>>,
    generation: AtomicU64,
}

impl ResidentPool {
    /// Take the thread's resident process out of the pool (the caller owns it now).
    pub(crate) fn take(&self, key: &str) -> Option<Resident> {
        self.slots.lock().ok()?.remove(key).map(|(_, r)| r)
    }

    /// Keep `resident` for `key`; it is stopped after `idle` without a new turn.
    pub(crate) fn park(
        self: &Arc<Self>,
        key: String,
        resident: Resident,
        idle: Duration,
        grace: Duration,
    ) {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let displaced = match self.slots.lock() {
            Ok(mut slots) => slots
                .insert(key.clone(), (generation, resident))
                .map(|(_, r)| r),
            Err(_) => Some(resident),
        };
        if let Some(old) = displaced {
            // Cannot happen while the key's lease serialises its runs; never leak one anyway.
            tokio::spawn(stop(old, grace));
        }
        let pool: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(idle).await;
            let Some(pool) = pool.upgrade() else { return };
            let evicted = pool
                .slots
                .lock()
                .ok()
                .and_then(|mut slots| match slots.get(&key) {
                    Some((g, _)) if *g == generation => slots.remove(&key).map(|(_, r)| r),
                    _ => None,
                });
            if let Some(r) = evicted {
                tracing::info!(%key, pid = r.spawned.pid, "stopping an idle resident provider process");
                stop(r, grace).await;
            }
        });
    }

    /// Stop every resident process and wait until they are gone.
    pub(crate) async fn close(&self, grace: Duration) {
        let all: Vec<Resident> = match self.slots.lock() {
            Ok(mut slots) => slots.drain().map(|(_, (_, r))| r).collect(),
            Err(_) => Vec::new(),
        };
        for r in all {
            stop(r, grace).await;
        }
    }
}

/// Stop a resident process: end of input first (the CLI's own clean exit), then after
/// `grace` the process group is terminated and killed. Problems are logged: there is no run
/// left to report them to.
pub(crate) async fn stop(resident: Resident, grace: Duration) {
    let Resident {
        spawned,
        stdin,
        stdin_writer,
        ..
    } = resident;
    drop(stdin);
    stop_process(spawned, stdin_writer, grace).await;
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
    match crate::process::reap_group(pgid, grace).await {
        Ok(()) => spawned.guard.disarm(),
        Err(e) => {
            tracing::warn!(pid, pgid, error = %e, "could not confirm a kept provider's process group is gone")
        }
    }
    if let Err(e) = spawned.child.wait().await {
        tracing::warn!(pid, error = %e, "waiting for a stopped provider failed");
    }
}
