//! Approvals: the one [`ApprovalRequest`] type, answered exactly once.
//!
//! A driver asks for a decision (`request-approval`); the pipeline applies the policy
//! (auto-approve / auto-deny answer at once) or asks: it emits the request as
//! [`Event::ApprovalRequest`](crate::Event::ApprovalRequest) and hands a clone to the
//! [`ApprovalHandler`], if one is configured. Every clone shares one slot, so the callback form
//! and the event form (answering from another task) are the same path: the first
//! [`approve`](ApprovalRequest::approve) / [`deny`](ApprovalRequest::deny) /
//! [`answer`](ApprovalRequest::answer) wins and every later one gets
//! [`ApprovalError::AlreadyResolved`].
//!
//! Nobody is asked to consent on the caller's behalf: when the last copy of a pending request
//! is dropped unanswered (no handler, and the consumer ignored or never saw the event — as in
//! `Agent::run`, which reads no events), the request is resolved
//! [`Resolution::Unanswered`] and the run fails with reason `approval_unanswered`.
//!
//! Owns: the request/answer types, the slot's exactly-once state machine and the typed answer
//! errors. Must not: apply timeouts or fallbacks (the policy and the pipeline do) or talk to
//! drivers.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::Serialize;
use tokio::sync::{mpsc, watch};

use crate::event::EventMeta;
use crate::event::blank_meta;

/// What is being asked.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalKind {
    /// May a tool run? Answer with `approve` / `approve_with` / `deny`.
    Permission,
    /// Approve a plan? Answer with `approve` / `deny`.
    PlanReview,
    /// A question with (usually) choices. Answer with `answer`, or `deny` to decline.
    Question,
    /// A kind this host does not know, named by the driver. Every answer form is accepted.
    Other(String),
}

impl fmt::Display for ApprovalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApprovalKind::Permission => f.write_str("permission"),
            ApprovalKind::PlanReview => f.write_str("plan_review"),
            ApprovalKind::Question => f.write_str("question"),
            ApprovalKind::Other(name) => write!(f, "other({name})"),
        }
    }
}

/// One choice offered with a question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Choice {
    /// What [`ApprovalRequest::answer`] takes.
    pub key: String,
    /// Text for humans.
    pub label: String,
    /// Longer explanation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "resolution", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Resolution {
    /// Allowed, optionally with a replacement for the tool input.
    Approved {
        /// The replacement input, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        updated_input: Option<serde_json::Value>,
    },
    /// Refused.
    Denied {
        /// The reason given to the agent.
        reason: String,
    },
    /// A question was answered.
    Answered {
        /// The choice key or free text.
        answer: String,
    },
    /// Nobody answered before the policy's deadline.
    TimedOut,
    /// Nobody could answer: no handler, and every copy of the request was dropped unanswered.
    Unanswered,
    /// The run was cancelled while the request was pending.
    Cancelled,
    /// The run ended (the provider exited or timed out) before anyone answered.
    Withdrawn,
}

impl fmt::Display for Resolution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resolution::Approved { .. } => f.write_str("approved"),
            Resolution::Denied { reason } => write!(f, "denied: {reason}"),
            Resolution::Answered { answer } => write!(f, "answered `{answer}`"),
            Resolution::TimedOut => f.write_str("timed out"),
            Resolution::Unanswered => f.write_str("unanswered"),
            Resolution::Cancelled => f.write_str("cancelled"),
            Resolution::Withdrawn => f.write_str("withdrawn: the run ended"),
        }
    }
}

/// Why an answer was refused. Every variant is returned at once; answering never blocks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// Someone (another task, the handler, the policy's timeout, a cancel) resolved it first.
    #[error("approval `{id}` was already resolved ({resolution})")]
    AlreadyResolved {
        /// Request id.
        id: String,
        /// How it was resolved.
        resolution: Resolution,
    },
    /// The answer form does not fit the request's kind (e.g. `answer` on a permission request).
    #[error("approval `{id}` is a {kind} request: `{action}` does not apply to it")]
    WrongKind {
        /// Request id.
        id: String,
        /// The request's kind.
        kind: ApprovalKind,
        /// The method that was called.
        action: &'static str,
    },
    /// The request's deadline (from the policy's approval timeout) has passed.
    #[error("approval `{id}` expired: its deadline passed before the answer")]
    Expired {
        /// Request id.
        id: String,
    },
    /// The request is not attached to a running run (its run has ended, or it was made with
    /// [`ApprovalRequest::detached`]).
    #[error("approval `{id}` is not attached to a running run")]
    Detached {
        /// Request id.
        id: String,
    },
    /// `answer` got a key that is not one of the request's choices.
    #[error("`{answer}` is not a choice of approval `{id}` (choices: {})", choices.join(", "))]
    InvalidChoice {
        /// Request id.
        id: String,
        /// The rejected answer.
        answer: String,
        /// The valid keys.
        choices: Vec<String>,
    },
}

/// A resolution reported to the run that owns the slot.
#[derive(Debug)]
pub(crate) struct Settled {
    pub id: String,
    pub attempt: u32,
    pub resolution: Resolution,
}

enum State {
    /// Waiting; answers go to the run through this sender.
    Pending(mpsc::UnboundedSender<Settled>),
    Settled(Resolution),
}

/// The state every clone of one request shares.
pub(crate) struct Slot {
    id: String,
    attempt: u32,
    kind: ApprovalKind,
    choices: Vec<String>,
    deadline: Option<SystemTime>,
    state: Mutex<State>,
    settled: watch::Sender<Option<Resolution>>,
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the state half-written (every update
        // is one assignment), so a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A caller's answer: exactly once, checked against kind, choices and deadline.
    fn answer(&self, action: &'static str, resolution: Resolution) -> Result<(), ApprovalError> {
        let id = self.id.clone();
        let mut state = self.lock();
        let tx = match &*state {
            State::Settled(Resolution::Withdrawn) => return Err(ApprovalError::Detached { id }),
            State::Settled(Resolution::TimedOut) => return Err(ApprovalError::Expired { id }),
            State::Settled(r) => {
                return Err(ApprovalError::AlreadyResolved {
                    id,
                    resolution: r.clone(),
                });
            }
            State::Pending(tx) => tx.clone(),
        };
        let fits = match (&self.kind, &resolution) {
            (ApprovalKind::Other(_), _) => true,
            (ApprovalKind::Question, Resolution::Answered { .. } | Resolution::Denied { .. }) => {
                true
            }
            (ApprovalKind::Question, _) => false,
            (_, Resolution::Answered { .. }) => false,
            _ => true,
        };
        if !fits {
            return Err(ApprovalError::WrongKind {
                id,
                kind: self.kind.clone(),
                action,
            });
        }
        if let Resolution::Answered { answer } = &resolution
            && !self.choices.is_empty()
            && !self.choices.contains(answer)
        {
            return Err(ApprovalError::InvalidChoice {
                id,
                answer: answer.clone(),
                choices: self.choices.clone(),
            });
        }
        if self.deadline.is_some_and(|d| SystemTime::now() >= d) {
            return Err(ApprovalError::Expired { id });
        }
        let settled = Settled {
            id: id.clone(),
            attempt: self.attempt,
            resolution: resolution.clone(),
        };
        if tx.send(settled).is_err() {
            *state = State::Settled(Resolution::Withdrawn);
            self.settled.send_replace(Some(Resolution::Withdrawn));
            return Err(ApprovalError::Detached { id });
        }
        *state = State::Settled(resolution.clone());
        self.settled.send_replace(Some(resolution));
        Ok(())
    }

    /// The last copy was dropped: nobody can answer any more.
    fn abandon(&self) {
        let mut state = self.lock();
        if let State::Pending(tx) = &*state {
            let _ = tx.send(Settled {
                id: self.id.clone(),
                attempt: self.attempt,
                resolution: Resolution::Unanswered,
            });
            *state = State::Settled(Resolution::Unanswered);
            self.settled.send_replace(Some(Resolution::Unanswered));
        }
    }

    /// The run resolves it itself (timeout, cancel, end of run). `false` if an answer won.
    pub(crate) fn settle_by_host(&self, resolution: Resolution) -> bool {
        let mut state = self.lock();
        if matches!(&*state, State::Settled(_)) {
            return false;
        }
        *state = State::Settled(resolution.clone());
        self.settled.send_replace(Some(resolution));
        true
    }
}

/// Dropping the last clone of a request drops this, which reports the request unanswered if
/// nobody answered it.
struct Holder(Arc<Slot>);

impl Drop for Holder {
    fn drop(&mut self) {
        self.0.abandon();
    }
}

/// A request for a human decision, carried in the event stream and given to the
/// [`ApprovalHandler`]. Clones share one answer: the first call of `approve`, `approve_with`,
/// `deny` or `answer` on any clone wins.
///
/// Keep a clone for as long as you may still answer: when the last clone of a pending request
/// is dropped, the request is resolved as [`Resolution::Unanswered`].
#[derive(Clone, Serialize)]
pub struct ApprovalRequest {
    /// Host metadata.
    #[serde(flatten)]
    pub meta: EventMeta,
    /// Request id (the driver's, unique within the run; re-asks keep it and raise `attempt`).
    pub id: String,
    /// What is being asked (`approval_kind` in JSON: `kind` names the event).
    #[serde(rename = "approval_kind")]
    pub kind: ApprovalKind,
    /// One line for humans.
    pub title: String,
    /// The tool call concerned, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The tool's name, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// Choices (questions).
    pub choices: Vec<Choice>,
    /// Details from the driver (tool input, plan text, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
    /// When the host asked.
    #[serde(serialize_with = "ser_time")]
    pub created_at: SystemTime,
    /// When the policy's timeout resolves it (`None`: no timeout).
    #[serde(serialize_with = "ser_opt_time")]
    pub deadline: Option<SystemTime>,
    /// 1 for the first ask, +1 for each re-ask under [`Fallback::Retry`](crate::Fallback).
    pub attempt: u32,
    #[serde(skip)]
    holder: Arc<Holder>,
}

fn ser_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    let ms = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    s.serialize_u64(ms)
}

fn ser_opt_time<S: serde::Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => ser_time(t, s),
        None => s.serialize_none(),
    }
}

impl fmt::Debug for ApprovalRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalRequest")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("title", &self.title)
            .field("tool_call_id", &self.tool_call_id)
            .field("tool_name", &self.tool_name)
            .field("choices", &self.choices)
            .field("details", &self.details)
            .field("attempt", &self.attempt)
            .field("resolution", &self.resolution())
            .finish_non_exhaustive()
    }
}

/// Requests compare by their data (not by the shared answer slot).
impl PartialEq for ApprovalRequest {
    fn eq(&self, other: &Self) -> bool {
        self.meta == other.meta
            && self.id == other.id
            && self.kind == other.kind
            && self.title == other.title
            && self.tool_call_id == other.tool_call_id
            && self.tool_name == other.tool_name
            && self.choices == other.choices
            && self.details == other.details
            && self.created_at == other.created_at
            && self.deadline == other.deadline
            && self.attempt == other.attempt
    }
}

/// What the pipeline needs to create a request.
pub(crate) struct NewRequest {
    pub id: String,
    pub kind: ApprovalKind,
    pub title: String,
    pub tool_call_id: Option<String>,
    pub tool_name: Option<String>,
    pub choices: Vec<Choice>,
    pub details: Option<serde_json::Value>,
    pub deadline: Option<SystemTime>,
    pub attempt: u32,
}

impl NewRequest {
    /// A first ask with no tool, choices, details or deadline.
    fn plain(id: &str, kind: ApprovalKind, title: String) -> Self {
        Self {
            id: id.to_owned(),
            kind,
            title,
            tool_call_id: None,
            tool_name: None,
            choices: Vec::new(),
            details: None,
            deadline: None,
            attempt: 1,
        }
    }
}

impl ApprovalRequest {
    /// A pending request attached to a run through `tx`; returns the run's handle on its slot.
    pub(crate) fn attached(
        new: NewRequest,
        tx: mpsc::UnboundedSender<Settled>,
    ) -> (Self, Arc<Slot>) {
        Self::with_state(new, State::Pending(tx))
    }

    /// A request attached to no run, for unit-testing approval handlers: every answer returns
    /// [`ApprovalError::Detached`] at once, and [`settled`](Self::settled) returns
    /// [`Resolution::Withdrawn`] at once.
    pub fn detached(kind: ApprovalKind, title: impl Into<String>) -> Self {
        Self::with_state(
            NewRequest::plain("detached", kind, title.into()),
            State::Settled(Resolution::Withdrawn),
        )
        .0
    }

    fn with_state(new: NewRequest, state: State) -> (Self, Arc<Slot>) {
        let initial = match &state {
            State::Settled(r) => Some(r.clone()),
            State::Pending(_) => None,
        };
        let slot = Arc::new(Slot {
            id: new.id.clone(),
            attempt: new.attempt,
            kind: new.kind.clone(),
            choices: new.choices.iter().map(|c| c.key.clone()).collect(),
            deadline: new.deadline,
            state: Mutex::new(state),
            settled: watch::Sender::new(initial),
        });
        let request = ApprovalRequest {
            meta: blank_meta(),
            id: new.id,
            kind: new.kind,
            title: new.title,
            tool_call_id: new.tool_call_id,
            tool_name: new.tool_name,
            choices: new.choices,
            details: new.details,
            created_at: SystemTime::now(),
            deadline: new.deadline,
            attempt: new.attempt,
            holder: Arc::new(Holder(slot.clone())),
        };
        (request, slot)
    }

    /// Allow (permission, plan review, other kinds).
    pub fn approve(&self) -> Result<(), ApprovalError> {
        self.holder.0.answer(
            "approve",
            Resolution::Approved {
                updated_input: None,
            },
        )
    }

    /// Allow with a replacement for the tool input (permission requests).
    pub fn approve_with(&self, updated_input: serde_json::Value) -> Result<(), ApprovalError> {
        self.holder.0.answer(
            "approve_with",
            Resolution::Approved {
                updated_input: Some(updated_input),
            },
        )
    }

    /// Refuse, with a reason the agent sees. On a question: decline to answer.
    pub fn deny(&self, reason: impl Into<String>) -> Result<(), ApprovalError> {
        self.holder.0.answer(
            "deny",
            Resolution::Denied {
                reason: reason.into(),
            },
        )
    }

    /// Answer a question: one of the choices' keys (any text when it offers no choices).
    pub fn answer(&self, option: impl Into<String>) -> Result<(), ApprovalError> {
        self.holder.0.answer(
            "answer",
            Resolution::Answered {
                answer: option.into(),
            },
        )
    }

    /// How the request was resolved so far (`None` while pending).
    pub fn resolution(&self) -> Option<Resolution> {
        self.holder.0.settled.borrow().clone()
    }

    /// Wait until the request is resolved by anyone (an answer, the timeout, a cancel, the end
    /// of the run). Lets a handler that waits for a human give up when the question is moot.
    pub async fn settled(&self) -> Resolution {
        let mut rx = self.holder.0.settled.subscribe();
        loop {
            if let Some(r) = rx.borrow_and_update().clone() {
                return r;
            }
            if rx.changed().await.is_err() {
                return Resolution::Withdrawn;
            }
        }
    }
}

/// The future an [`ApprovalHandler`] returns.
pub type ApprovalFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The callback form of approvals: called (in a task of its own) with each request the policy
/// says to ask about. It answers through the request's methods, exactly like a consumer of the
/// event stream; if it returns without answering, the request stays open for the stream's
/// consumer (and is reported unanswered once every copy is gone). Pending handler tasks are
/// aborted when their run ends.
#[derive(Clone)]
pub struct ApprovalHandler(Arc<dyn Fn(ApprovalRequest) -> ApprovalFuture + Send + Sync>);

impl ApprovalHandler {
    /// Wrap an async function.
    pub fn new<F, Fut>(handler: F) -> Self
    where
        F: Fn(ApprovalRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self(Arc::new(move |req| Box::pin(handler(req))))
    }

    pub(crate) fn call(&self, request: ApprovalRequest) -> ApprovalFuture {
        (self.0)(request)
    }
}

impl fmt::Debug for ApprovalHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApprovalHandler(..)")
    }
}

/// Handlers compare by identity.
impl PartialEq for ApprovalHandler {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(kind: ApprovalKind, choices: &[&str]) -> (ApprovalRequest, Arc<Slot>) {
        let (tx, rx) = mpsc::unbounded_channel();
        std::mem::forget(rx);
        let mut new = NewRequest::plain("a1", kind, "t".into());
        new.choices = choices
            .iter()
            .map(|k| Choice {
                key: (*k).into(),
                label: k.to_uppercase(),
                description: None,
            })
            .collect();
        ApprovalRequest::attached(new, tx)
    }

    #[test]
    fn answers_are_checked_against_the_kind_and_choices() {
        let (q, _) = request(ApprovalKind::Question, &["a", "b"]);
        assert!(matches!(
            q.approve(),
            Err(ApprovalError::WrongKind {
                action: "approve",
                ..
            })
        ));
        assert!(matches!(
            q.answer("c"),
            Err(ApprovalError::InvalidChoice { .. })
        ));
        q.answer("b").unwrap();
        assert_eq!(
            q.resolution(),
            Some(Resolution::Answered { answer: "b".into() })
        );
        let (p, _) = request(ApprovalKind::Permission, &[]);
        assert!(matches!(
            p.answer("yes"),
            Err(ApprovalError::WrongKind { .. })
        ));
        p.deny("no").unwrap();
        assert!(matches!(
            p.approve(),
            Err(ApprovalError::AlreadyResolved { .. })
        ));
    }

    #[test]
    fn host_settlement_and_answers_exclude_each_other() {
        let (p, slot) = request(ApprovalKind::Permission, &[]);
        assert!(slot.settle_by_host(Resolution::TimedOut));
        assert!(matches!(p.approve(), Err(ApprovalError::Expired { .. })));
        assert!(!slot.settle_by_host(Resolution::Cancelled));
        let (p, slot) = request(ApprovalKind::PlanReview, &[]);
        p.approve().unwrap();
        assert!(!slot.settle_by_host(Resolution::TimedOut));
    }

    #[test]
    fn detached_requests_fail_at_once() {
        let r = ApprovalRequest::detached(ApprovalKind::Permission, "x");
        assert!(matches!(r.approve(), Err(ApprovalError::Detached { .. })));
        assert_eq!(r.resolution(), Some(Resolution::Withdrawn));
    }

    #[test]
    fn dropping_every_copy_reports_unanswered() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (r, slot) = ApprovalRequest::attached(
            NewRequest::plain("x", ApprovalKind::Permission, "t".into()),
            tx,
        );
        let copy = r.clone();
        drop(r);
        assert!(rx.try_recv().is_err(), "a copy is still held");
        drop(copy);
        let settled = rx.try_recv().expect("reported");
        assert_eq!(settled.resolution, Resolution::Unanswered);
        assert!(!slot.settle_by_host(Resolution::TimedOut));
    }
}
