//! [`Thread`]: a conversation under a key that survives runs and restarts — the public
//! handle, its errors and the way a run reports how it related to its thread.
//!
//! Owns: the `Thread` handle (same runner contract as [`Agent`]: `run`, `run_with`,
//! `stream`, `stream_with`), [`ThreadError`], [`ThreadInfo`] / [`ThreadStart`]. The
//! coordination stage a thread adds to the single pipeline (fingerprint, lease, record, mode
//! logic, finalize) is `run::coordinator`. Must not: run anything itself (a thread run is the
//! one pipeline).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::agent::sealed::Start;
use crate::agent::{Agent, RunOptions, Runner};
use crate::error::Error;
use crate::error::ThreadError;
use crate::result::{RunResult, SessionState};
use crate::run::coordinator::ThreadBinding;
use crate::store::{Query, StoreError, ThreadRecord, ThreadStore};
use crate::stream::Stream;

/// Default lease time-to-live; the lease is renewed every third of it while a run is going.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// A conversation with a provider under a key: each run resumes the session the previous
/// successful run left (stored in the agent's [`ThreadStore`]), across runs and restarts.
///
/// Create with [`Agent::thread`]. Cloning shares the handle (and a pending fork).
#[derive(Debug, Clone)]
pub struct Thread {
    agent: Agent,
    key: String,
    resume_only: bool,
    /// Parent key while the fork has not yet run successfully.
    fork_from: Arc<Mutex<Option<String>>>,
}

impl Agent {
    /// The thread `key` of this agent's thread store: its runs resume the active checkpoint
    /// if there is one, else start a new session (continue-or-start). Keys are opaque and
    /// compared byte for byte.
    ///
    /// # Panics
    ///
    /// If `key` is empty (a programming error).
    pub fn thread(&self, key: impl Into<String>) -> Thread {
        let key = key.into();
        assert!(!key.is_empty(), "a thread key must not be empty");
        Thread {
            agent: self.clone(),
            key,
            resume_only: false,
            fork_from: Arc::new(Mutex::new(None)),
        }
    }
}

impl Thread {
    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Resume-only mode: a run fails with [`ThreadError::NotFound`] (before anything starts)
    /// when the key has no active checkpoint, and with [`ThreadError::ResumeRejected`] or a
    /// `resume_rejected` run error when the provider refuses it — never a fresh session.
    pub fn resume_only(mut self) -> Self {
        self.resume_only = true;
        self
    }

    /// A new thread under `new_key` whose first successful run forks this thread's current
    /// checkpoint (the provider starts a new session from it); this thread is unchanged.
    /// `new_key` must be free: checked before the run and again atomically when persisting
    /// ([`ThreadError::AlreadyExists`]). Later runs of the new thread continue its own
    /// session.
    ///
    /// The result is a [`Fork`], which has no `resume_only`: a fork always starts a session
    /// of its own, so asking it to only resume would contradict it — that does not compile.
    ///
    /// # Panics
    ///
    /// If `new_key` is empty.
    pub fn fork(&self, new_key: impl Into<String>) -> Fork {
        let forked = self.agent.thread(new_key);
        *forked.fork_from.lock().expect("fresh mutex") = Some(self.key.clone());
        Fork(forked)
    }

    /// The active record of this thread, if any.
    pub async fn record(&self) -> Result<Option<ThreadRecord>, Error> {
        let store = self.store()?;
        store
            .resolve(&Query::Key(self.key.clone()))
            .await
            .map_err(|source| self.store_error(source))
    }

    /// The session state the next run resumes, if any. Plain data to look at: it resumes only
    /// through this thread (under its lease and fingerprint), never as a per-call `resume`.
    pub async fn session_state(&self) -> Result<Option<SessionState>, Error> {
        Ok(self.record().await?.map(|r| r.state))
    }

    /// Run a prompt in this thread. Same pipeline as [`Agent::run`], plus the thread stage.
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

    /// Start a run in this thread and stream its events (they carry the thread key).
    pub fn stream(&self, prompt: impl Into<String>) -> Stream {
        self.stream_with(prompt, RunOptions::default())
    }

    /// Start a run with per-call options. A per-call `resume` checkpoint is refused: the
    /// thread chooses what to resume.
    pub fn stream_with(&self, prompt: impl Into<String>, options: RunOptions) -> Stream {
        Runner::stream(self, prompt.into(), options)
    }

    fn store(&self) -> Result<&Arc<dyn ThreadStore>, Error> {
        self.agent
            .inner
            .settings
            .thread_store
            .as_ref()
            .ok_or_else(|| {
                ThreadError::StoreRequired {
                    key: self.key.clone(),
                }
                .into()
            })
    }

    fn store_error(&self, source: StoreError) -> Error {
        ThreadError::Store {
            key: self.key.clone(),
            source,
            result: None,
        }
        .into()
    }
}

impl Start for Thread {
    fn start(&self, prompt: String, options: RunOptions) -> crate::run::Started {
        let inner = &self.agent.inner;
        let binding = ThreadBinding {
            store: inner.settings.thread_store.clone(),
            key: self.key.clone(),
            resume_only: self.resume_only,
            fork_from: self.fork_from.clone(),
            lease_ttl: inner.settings.lease_ttl,
        };
        crate::run::start_thread(
            inner,
            prompt,
            inner.defaults.overridden_by(&options),
            binding,
        )
    }
}

impl Runner for Thread {}

/// A thread whose first successful run forks its parent's checkpoint
/// ([`Thread::fork`]). It runs like a [`Thread`] (its later runs continue its own session)
/// but has no `resume_only`, which a fork contradicts:
///
/// ```compile_fail
/// # fn f(agent: adaptor::Agent) {
/// let _ = agent.thread("parent").fork("child").resume_only();
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Fork(Thread);

impl Fork {
    /// The new thread's key.
    pub fn key(&self) -> &str {
        self.0.key()
    }

    /// The new thread's active record (none before the first successful run).
    pub async fn record(&self) -> Result<Option<ThreadRecord>, Error> {
        self.0.record().await
    }

    /// Run a prompt: the first successful run forks the parent, later ones continue.
    pub async fn run(&self, prompt: impl Into<String>) -> Result<RunResult, Error> {
        self.0.run(prompt).await
    }

    /// Run with per-call options.
    pub async fn run_with(
        &self,
        prompt: impl Into<String>,
        options: RunOptions,
    ) -> Result<RunResult, Error> {
        self.0.run_with(prompt, options).await
    }

    /// Start a run and stream its events.
    pub fn stream(&self, prompt: impl Into<String>) -> Stream {
        self.0.stream(prompt)
    }

    /// Start a run with per-call options.
    pub fn stream_with(&self, prompt: impl Into<String>, options: RunOptions) -> Stream {
        self.0.stream_with(prompt, options)
    }

    /// The thread itself (for a fork that already ran, the same as `agent.thread(key)`).
    pub fn into_thread(self) -> Thread {
        self.0
    }
}

impl Start for Fork {
    fn start(&self, prompt: String, options: RunOptions) -> crate::run::Started {
        self.0.start(prompt, options)
    }
}

impl Runner for Fork {}
