//! Runs streamed over HTTP as Server-Sent Events (axum), for web front ends.
//!
//! Owns the run log a client reads from and re-attaches to, and its HTTP routes. Must not:
//! run anything itself — a run is the runtime's one pipeline, started through
//! [`Runner::stream`] (or [`Agent::thread`] with [`OnThreads`]) — nor decide an approval:
//! a person answers through `POST /runs/{id}/approvals/{approval}`.
//!
//! # Routes ([`router`])
//!
//! | Route | What |
//! |---|---|
//! | `POST /runs` `{"prompt": "…", "thread": "…"?}` | start a run; `201 {"run_id", "events"}` |
//! | `GET /runs/{id}/events` | the run's events as SSE: `id` = the event's sequence number, `event` = its kind (`text_delta`, `tool_call`, …), `data` = the event as `adaptor run --json` prints it; then one `result` event and the end of the stream |
//! | `POST /runs/{id}/approvals/{approval}` `{"decision": "approve" \| "deny" \| "answer", "reason"?, "answer"?}` | answer an approval request (`204`; `409` when it was already resolved) |
//! | `POST /runs/{id}/cancel` | cancel the run (`202`) |
//!
//! # Resume and disconnects
//!
//! Each run keeps its latest [`HubOptions::buffer`] events. A client that reconnects with
//! `Last-Event-ID: N` (as a browser's `EventSource` does by itself) gets every kept event
//! after `N`; when some of them are no longer kept, a `gap` event (`{"first_missing",
//! "last_missing"}`) says so before the rest — never a silent hole. When no client has been
//! attached for [`HubOptions::reconnect_grace`] (a closed tab, a dropped connection that does
//! not come back), the run is cancelled. A finished run stays readable for
//! [`HubOptions::retention`].

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use adaptor::{
    Agent, ApprovalRequest, Canceller, Error, Event, RunOptions, RunResult, Runner, Stream,
};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::watch;

/// How runs start: any [`Runner`] (a thread name in the request is refused), or an agent's
/// threads ([`OnThreads`]).
pub trait StartRun: Send + Sync + 'static {
    /// Start the run `request` asks for, or say why not.
    fn start(&self, request: &RunRequest, options: RunOptions) -> Result<Stream, String>;

    /// Whether a request's `thread` names a thread (an AG-UI `threadId` is passed on only
    /// then).
    fn runs_threads(&self) -> bool {
        false
    }
}

impl<R: Runner + Send + Sync + 'static> StartRun for R {
    fn start(&self, request: &RunRequest, options: RunOptions) -> Result<Stream, String> {
        if request.thread.is_some() {
            return Err("this server does not run threads: leave out `thread`".into());
        }
        Ok(self.stream(request.prompt.clone(), options))
    }
}

/// Runs on an agent's threads: a request's `thread` (or an AG-UI `threadId`) names the
/// thread `<prefix><thread>`; without one, a plain run.
#[derive(Debug, Clone)]
pub struct OnThreads {
    agent: Agent,
    prefix: String,
}

impl OnThreads {
    /// Threads of `agent`, their keys prefixed with `prefix` (e.g. `web:`), so that the
    /// names clients choose never reach another user's threads in the same store.
    pub fn new(agent: Agent, prefix: impl Into<String>) -> Self {
        Self {
            agent,
            prefix: prefix.into(),
        }
    }
}

impl StartRun for OnThreads {
    fn runs_threads(&self) -> bool {
        true
    }

    fn start(&self, request: &RunRequest, options: RunOptions) -> Result<Stream, String> {
        Ok(match &request.thread {
            Some(name) if name.is_empty() => return Err("`thread` must not be empty".into()),
            Some(name) => self
                .agent
                .thread(format!("{}{name}", self.prefix))
                .stream_with(request.prompt.clone(), options),
            None => self.agent.stream_with(request.prompt.clone(), options),
        })
    }
}

/// A request to start a run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// The prompt.
    pub prompt: String,
    /// The thread to run in (with [`OnThreads`]).
    #[serde(default)]
    pub thread: Option<String>,
}

/// Limits of a [`RunHub`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HubOptions {
    /// Events kept per run for clients that reconnect (default 10,000).
    pub buffer: usize,
    /// How long a run goes on with no client attached before it is cancelled (default 10 s).
    pub reconnect_grace: Duration,
    /// How long a finished run stays readable (default 60 s).
    pub retention: Duration,
    /// Runs at once; more are refused with `429` (default 64).
    pub max_runs: usize,
}

impl HubOptions {
    /// Set [`buffer`](Self::buffer).
    pub fn with_buffer(mut self, events: usize) -> Self {
        self.buffer = events;
        self
    }

    /// Set [`reconnect_grace`](Self::reconnect_grace).
    pub fn with_reconnect_grace(mut self, grace: Duration) -> Self {
        self.reconnect_grace = grace;
        self
    }

    /// Set [`retention`](Self::retention).
    pub fn with_retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Set [`max_runs`](Self::max_runs).
    pub fn with_max_runs(mut self, runs: usize) -> Self {
        self.max_runs = runs;
        self
    }
}

impl Default for HubOptions {
    fn default() -> Self {
        Self {
            buffer: 10_000,
            reconnect_grace: Duration::from_secs(10),
            retention: Duration::from_secs(60),
            max_runs: 64,
        }
    }
}

/// The runs a server streams: started here, read (and re-read) by clients.
pub struct RunHub {
    starter: Box<dyn StartRun>,
    options: RunOptions,
    limits: HubOptions,
    runs: Mutex<HashMap<String, Arc<RunLog>>>,
}

impl std::fmt::Debug for RunHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHub")
            .field("limits", &self.limits)
            .field("runs", &lock(&self.runs).len())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Why a run could not be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The request was refused (names what was wrong).
    #[error("{0}")]
    Refused(String),
    /// [`HubOptions::max_runs`] runs are going on.
    #[error("{0} runs are going on already")]
    TooMany(usize),
}

impl RunHub {
    /// A hub starting runs with `starter` and `options` (model, policy… for every run).
    pub fn new(starter: impl StartRun, options: RunOptions, limits: HubOptions) -> Arc<Self> {
        Arc::new(Self {
            starter: Box::new(starter),
            options,
            limits,
            runs: Mutex::new(HashMap::new()),
        })
    }

    /// Start a run; its log fills as it goes, whether or not anyone reads it yet.
    pub fn start(self: &Arc<Self>, request: &RunRequest) -> Result<Arc<RunLog>, StartError> {
        if request.prompt.trim().is_empty() {
            return Err(StartError::Refused("`prompt` must not be empty".into()));
        }
        let running = lock(&self.runs).values().filter(|r| !r.is_done()).count();
        if running >= self.limits.max_runs {
            return Err(StartError::TooMany(running));
        }
        let stream = self
            .starter
            .start(request, self.options.clone())
            .map_err(StartError::Refused)?;
        let (version, _) = watch::channel(0u64);
        let log = Arc::new(RunLog {
            id: stream.run_id().to_owned(),
            canceller: stream.canceller(),
            state: Mutex::new(LogState::default()),
            version,
            attached: AtomicUsize::new(0),
            approvals: Mutex::new(HashMap::new()),
            buffer: self.limits.buffer.max(1),
            grace: self.limits.reconnect_grace,
        });
        lock(&self.runs).insert(log.id.clone(), log.clone());
        tokio::spawn(pump(self.clone(), log.clone(), stream));
        log.detached();
        Ok(log)
    }

    /// Whether requests name threads ([`StartRun::runs_threads`]).
    pub fn runs_threads(&self) -> bool {
        self.starter.runs_threads()
    }

    /// The run `id`, while it is kept.
    pub fn get(&self, id: &str) -> Option<Arc<RunLog>> {
        lock(&self.runs).get(id).cloned()
    }

    /// Cancel every run (a server shutting down).
    pub fn cancel_all(&self) {
        for log in lock(&self.runs).values() {
            log.canceller.cancel();
        }
    }
}

/// One run's events as the hub keeps them.
pub struct RunLog {
    id: String,
    canceller: Canceller,
    state: Mutex<LogState>,
    version: watch::Sender<u64>,
    attached: AtomicUsize,
    approvals: Mutex<HashMap<String, ApprovalRequest>>,
    buffer: usize,
    grace: Duration,
}

impl std::fmt::Debug for RunLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLog")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct LogState {
    events: VecDeque<Arc<Event>>,
    result: Option<Value>,
}

/// What a reader gets next from a [`RunLog`].
#[derive(Debug, Clone)]
pub enum Entry {
    /// The next event.
    Event(Arc<Event>),
    /// Events `first..=last` (sequence numbers) are no longer kept.
    Gap {
        /// The first missing sequence number.
        first: u64,
        /// The last missing sequence number.
        last: u64,
    },
    /// The run's outcome (always last): see [`result_json`].
    Result(Value),
}

impl RunLog {
    /// The run id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Cancel the run.
    pub fn cancel(&self) {
        self.canceller.cancel();
    }

    /// Whether the run has ended (its result is known).
    pub fn is_done(&self) -> bool {
        lock(&self.state).result.is_some()
    }

    /// Answer the pending approval `approval`: `None` when there is no such request.
    pub fn approval(&self, approval: &str) -> Option<ApprovalRequest> {
        lock(&self.approvals).get(approval).cloned()
    }

    /// The entries after sequence number `after`, waiting until there is one; `None` once
    /// the result has been read.
    pub async fn next_after(&self, after: u64, result_read: bool) -> Option<Entry> {
        let mut seen = self.version.subscribe();
        loop {
            {
                let state = lock(&self.state);
                if let Some(first) = state.events.front() {
                    let first = first.meta().sequence;
                    if after + 1 < first {
                        return Some(Entry::Gap {
                            first: after + 1,
                            last: first - 1,
                        });
                    }
                }
                // Sequence numbers increase: a binary search, not a scan per event read.
                let next = state.events.partition_point(|e| e.meta().sequence <= after);
                if let Some(event) = state.events.get(next) {
                    return Some(Entry::Event(event.clone()));
                }
                if let Some(result) = &state.result {
                    return (!result_read).then(|| Entry::Result(result.clone()));
                }
            }
            if seen.changed().await.is_err() {
                return None;
            }
        }
    }

    /// A reader attached: while one is, the run is not cancelled for want of readers.
    pub fn attach(self: &Arc<Self>) -> Attached {
        self.attached.fetch_add(1, Ordering::SeqCst);
        Attached(self.clone())
    }

    fn detached(self: &Arc<Self>) {
        let log = self.clone();
        let grace = self.grace;
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            if log.attached.load(Ordering::SeqCst) == 0 && !log.is_done() {
                tracing::info!(run = %log.id, "no client for {grace:?}: cancelling the run");
                log.canceller.cancel();
            }
        });
    }
}

/// A reader of a [`RunLog`]; when the last one goes, the reconnect grace starts.
#[derive(Debug)]
pub struct Attached(Arc<RunLog>);

impl Drop for Attached {
    fn drop(&mut self) {
        if self.0.attached.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.detached();
        }
    }
}

/// Read the run into its log; keep approval requests answerable; record the result.
async fn pump(hub: Arc<RunHub>, log: Arc<RunLog>, mut stream: Stream) {
    while let Some(event) = stream.next().await {
        match &event {
            Event::ApprovalRequest(req) => {
                lock(&log.approvals).insert(req.id.clone(), req.clone());
            }
            Event::ApprovalResolved(done) => {
                lock(&log.approvals).remove(&done.id);
            }
            _ => {}
        }
        {
            let mut state = lock(&log.state);
            if state.events.len() == log.buffer {
                state.events.pop_front();
            }
            state.events.push_back(Arc::new(event));
        }
        log.version.send_modify(|v| *v += 1);
    }
    let result = result_json(&stream.result().await);
    lock(&log.approvals).clear();
    lock(&log.state).result = Some(result);
    log.version.send_modify(|v| *v += 1);
    let retention = hub.limits.retention;
    tokio::spawn(async move {
        tokio::time::sleep(retention).await;
        lock(&hub.runs).remove(&log.id);
    });
}

/// A run's outcome as JSON: `{"run_id", "ok", "text", "model", "session_id", "usage",
/// "duration_ms"}`, and on failure `"reason"` and `"message"`.
pub fn result_json(result: &Result<RunResult, Error>) -> Value {
    let (run, failure) = match result {
        Ok(r) => (Some(r), None),
        Err(Error::Run(e)) => (Some(&e.result), Some((json!(e.reason), e.message.clone()))),
        Err(e) => (None, Some((json!("setup"), e.to_string()))),
    };
    let mut out = json!({ "ok": failure.is_none() });
    if let Some(r) = run {
        out["run_id"] = json!(r.run_id);
        out["text"] = json!(r.text);
        out["model"] = json!(r.model);
        out["session_id"] = json!(r.session_id());
        out["usage"] = json!(r.usage);
        out["duration_ms"] = json!(r.duration.as_millis() as u64);
    }
    if let Some((reason, message)) = failure {
        out["reason"] = reason;
        out["message"] = json!(message);
    }
    out
}

/// The SSE routes over `hub` (see the module docs).
pub fn router(hub: Arc<RunHub>) -> Router {
    Router::new()
        .route("/runs", post(start_run))
        .route("/runs/{id}/events", get(events))
        .route("/runs/{id}/cancel", post(cancel))
        .route("/runs/{id}/approvals/{approval}", post(answer))
        .with_state(hub)
}

/// A JSON error response `{"error": message}` (both HTTP bridges).
pub(crate) fn problem(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

async fn start_run(
    State(hub): State<Arc<RunHub>>,
    body: Result<Json<RunRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Json(request) = match body {
        Ok(body) => body,
        Err(e) => return problem(StatusCode::BAD_REQUEST, e.body_text()),
    };
    match hub.start(&request) {
        Ok(log) => (
            StatusCode::CREATED,
            Json(json!({"run_id": log.id, "events": format!("/runs/{}/events", log.id)})),
        )
            .into_response(),
        Err(e @ StartError::TooMany(_)) => problem(StatusCode::TOO_MANY_REQUESTS, e.to_string()),
        Err(e) => problem(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

/// `Last-Event-ID`: the sequence number of the last event the client has.
fn last_event_id(headers: &HeaderMap) -> Option<Result<u64, ()>> {
    let value = headers.get("last-event-id")?;
    Some(
        value
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or(()),
    )
}

async fn events(
    State(hub): State<Arc<RunHub>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(log) = hub.get(&id) else {
        return problem(StatusCode::NOT_FOUND, format!("no run `{id}`"));
    };
    let after = match last_event_id(&headers) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(())) => {
            return problem(
                StatusCode::BAD_REQUEST,
                "Last-Event-ID must be an event's sequence number",
            );
        }
    };
    let attached = log.attach();
    let stream = futures::stream::unfold(
        (log, after, false, attached),
        |(log, after, result_read, attached)| async move {
            let entry = log.next_after(after, result_read).await?;
            let (sse, after, result_read) = match entry {
                Entry::Event(event) => {
                    let seq = event.meta().sequence;
                    // One serialisation: the JSON is the data, its tag the event name.
                    let value = crate::event_json(&event);
                    let kind = value["kind"].as_str().unwrap_or("event").to_owned();
                    let data = value.to_string();
                    (
                        SseEvent::default()
                            .id(seq.to_string())
                            .event(kind)
                            .data(data),
                        seq,
                        false,
                    )
                }
                Entry::Gap { first, last } => (
                    SseEvent::default()
                        .event("gap")
                        .data(json!({"first_missing": first, "last_missing": last}).to_string()),
                    last,
                    false,
                ),
                Entry::Result(result) => (
                    SseEvent::default().event("result").data(result.to_string()),
                    after,
                    true,
                ),
            };
            Some((
                Ok::<_, Infallible>(sse),
                (log, after, result_read, attached),
            ))
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn cancel(State(hub): State<Arc<RunHub>>, Path(id): Path<String>) -> Response {
    match hub.get(&id) {
        Some(log) => {
            log.cancel();
            StatusCode::ACCEPTED.into_response()
        }
        None => problem(StatusCode::NOT_FOUND, format!("no run `{id}`")),
    }
}

/// An answer to an approval request.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalAnswer {
    /// `approve`, `deny` or `answer`.
    pub decision: String,
    /// Why (with `deny`).
    #[serde(default)]
    pub reason: Option<String>,
    /// The choice key (with `answer`).
    #[serde(default)]
    pub answer: Option<String>,
}

/// Why an [`ApprovalAnswer`] was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// The answer is malformed (names what was wrong).
    #[error("{0}")]
    Invalid(String),
    /// The request refused it (already resolved, or the wrong form for its kind).
    #[error(transparent)]
    Refused(#[from] adaptor::ApprovalError),
}

/// Apply `answer` to `request`.
pub fn apply_answer(request: &ApprovalRequest, answer: &ApprovalAnswer) -> Result<(), AnswerError> {
    match answer.decision.as_str() {
        "approve" => Ok(request.approve()?),
        "deny" => Ok(request.deny(
            answer
                .reason
                .clone()
                .unwrap_or_else(|| "denied by the user".into()),
        )?),
        "answer" => match &answer.answer {
            Some(key) => Ok(request.answer(key.clone())?),
            None => Err(AnswerError::Invalid(
                "`decision: answer` needs the choice key in `answer`".into(),
            )),
        },
        other => Err(AnswerError::Invalid(format!(
            "`decision` must be approve, deny or answer, not `{other}`"
        ))),
    }
}

async fn answer(
    State(hub): State<Arc<RunHub>>,
    Path((id, approval)): Path<(String, String)>,
    body: Result<Json<ApprovalAnswer>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Json(body) = match body {
        Ok(body) => body,
        Err(e) => return problem(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let Some(log) = hub.get(&id) else {
        return problem(StatusCode::NOT_FOUND, format!("no run `{id}`"));
    };
    let Some(request) = log.approval(&approval) else {
        return problem(
            StatusCode::CONFLICT,
            format!("no pending approval `{approval}` in run `{id}`"),
        );
    };
    match apply_answer(&request, &body) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e @ AnswerError::Refused(_)) => problem(StatusCode::CONFLICT, e.to_string()),
        Err(e) => problem(StatusCode::BAD_REQUEST, e.to_string()),
    }
}
