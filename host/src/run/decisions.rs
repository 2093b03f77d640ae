//! The run's side of approvals: what happens between a driver's `request-approval` and the
//! `on-decision` it gets back.
//!
//! Applies the policy to each request (auto-approve and auto-deny answer at once; ask and
//! inherit ask someone), creates the [`ApprovalRequest`] given to the stream and the handler,
//! tracks pending requests and their deadlines, applies the fallbacks (`abort`, `continue`,
//! `retry` — re-asks are done by the host, so any driver that can ask supports them) and
//! records the approval failure that ends the run. Sans-IO towards the pipeline: every method
//! returns [`Step`]s (events to emit, decisions to deliver) for the supervisor to perform.
//! Must not: touch the process or the driver directly.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::approval::{
    ApprovalHandler, ApprovalKind, ApprovalRequest, NewRequest, Resolution, Settled, Slot,
};
use crate::error::FailureReason;
use crate::event::blank_meta;
use crate::event::{ApprovalResolved, Event};
use crate::policy::{ApprovalPolicy, DecisionMode, Fallback, QuestionMode};
use crate::session::{AskRequest, Decision};

/// Something the supervisor must do.
pub(crate) enum Step {
    /// Emit this event.
    Emit(Box<Event>),
    /// Deliver this decision to the driver (`on-decision`).
    Deliver(String, Decision),
}

/// What the policy says to do with a request of some kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ask,
    Approve,
    Deny,
}

struct Pending {
    slot: Arc<Slot>,
    request: AskRequest,
    kind: ApprovalKind,
    attempt: u32,
    deadline: Option<Instant>,
}

/// Approval state of one run.
pub(crate) struct Decisions {
    driver: String,
    policy: ApprovalPolicy,
    handler: Option<ApprovalHandler>,
    tx: mpsc::UnboundedSender<Settled>,
    rx: mpsc::UnboundedReceiver<Settled>,
    pending: HashMap<String, Pending>,
    tasks: Vec<JoinHandle<()>>,
    failure: Option<(FailureReason, String)>,
}

impl Decisions {
    pub(crate) fn new(
        driver: String,
        policy: ApprovalPolicy,
        handler: Option<ApprovalHandler>,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            driver,
            policy,
            handler,
            tx,
            rx,
            pending: HashMap::new(),
            tasks: Vec::new(),
            failure: None,
        }
    }

    /// The approval failure that ends the run, if any (first one wins).
    pub(crate) fn failure(&self) -> Option<(FailureReason, String)> {
        self.failure.clone()
    }

    /// True once an approval outcome means the run must end (abort or unanswered).
    pub(crate) fn aborting(&self) -> bool {
        self.failure.is_some()
    }

    fn mode(&self, kind: &ApprovalKind) -> Mode {
        let decision = |m: DecisionMode| match m {
            DecisionMode::Inherit | DecisionMode::Ask => Mode::Ask,
            DecisionMode::AutoApprove => Mode::Approve,
            DecisionMode::AutoDeny => Mode::Deny,
        };
        match kind {
            ApprovalKind::Permission => decision(self.policy.permission),
            ApprovalKind::PlanReview => decision(self.policy.plan_review),
            ApprovalKind::Question => match self.policy.question {
                QuestionMode::AutoDeny => Mode::Deny,
                QuestionMode::Inherit | QuestionMode::Ask => Mode::Ask,
            },
            ApprovalKind::Other(_) => Mode::Ask,
        }
    }

    /// Requests waiting for an answer.
    pub(crate) fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// A driver's `request-approval`. `Err` names a contract violation (duplicate pending id,
    /// details that are not a JSON object).
    pub(crate) fn request(
        &mut self,
        request: AskRequest,
        out: &mut Vec<Step>,
    ) -> Result<(), String> {
        if request.id.is_empty() {
            return Err("request-approval with an empty id".into());
        }
        if self.pending.contains_key(&request.id) {
            return Err(format!(
                "request-approval `{}` while a request with that id is pending",
                request.id
            ));
        }
        if let Some(details) = &request.details_json {
            match serde_json::from_str::<serde_json::Value>(details) {
                Ok(serde_json::Value::Object(_)) => {}
                _ => {
                    return Err(format!(
                        "request-approval `{}`: details-json is not a JSON object",
                        request.id
                    ));
                }
            }
        }
        let kind = request.kind.clone();
        match self.mode(&kind) {
            Mode::Ask => self.ask(request, kind, 1, out),
            Mode::Approve => {
                out.push(resolved(
                    &request.id,
                    &kind,
                    1,
                    Resolution::Approved {
                        updated_input: None,
                    },
                    true,
                ));
                out.push(Step::Deliver(request.id, Decision::Approve(None)));
            }
            Mode::Deny => {
                let reason = format!("{kind} requests are auto-denied by the run policy");
                out.push(resolved(
                    &request.id,
                    &kind,
                    1,
                    Resolution::Denied {
                        reason: reason.clone(),
                    },
                    true,
                ));
                // A policy refusal is final: `retry` would only be refused again.
                let fallback = match self.policy.on_reject {
                    Fallback::Retry => Fallback::Abort,
                    other => other,
                };
                self.rejected(&request, fallback, reason, out);
            }
        }
        Ok(())
    }

    fn ask(&mut self, request: AskRequest, kind: ApprovalKind, attempt: u32, out: &mut Vec<Step>) {
        let timeout = self.policy.timeout;
        let new = NewRequest {
            id: request.id.clone(),
            kind: kind.clone(),
            title: request.title.clone(),
            tool_call_id: request.tool_call_id.clone(),
            tool_name: request.tool_name.clone(),
            choices: request.choices.clone(),
            details: request
                .details_json
                .as_deref()
                .and_then(|d| serde_json::from_str(d).ok()),
            deadline: timeout.map(|t| SystemTime::now() + t),
            attempt,
        };
        let (public, slot) = ApprovalRequest::attached(new, self.tx.clone());
        tracing::info!(driver = %self.driver, id = %request.id, %kind, attempt, "approval requested");
        if let Some(handler) = &self.handler {
            self.tasks.push(tokio::spawn(handler.call(public.clone())));
        }
        self.pending.insert(
            request.id.clone(),
            Pending {
                slot,
                request,
                kind,
                attempt,
                deadline: timeout.map(|t| Instant::now() + t),
            },
        );
        out.push(Step::Emit(Box::new(Event::ApprovalRequest(public))));
    }

    /// Wait for the next answer (or abandonment) of any pending request.
    pub(crate) async fn next_settled(&mut self) -> Settled {
        match self.rx.recv().await {
            Some(s) => s,
            // `self` holds a sender, so the channel never closes.
            None => std::future::pending().await,
        }
    }

    /// The earliest deadline of a pending request.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.pending.values().filter_map(|p| p.deadline).min()
    }

    /// An answer (or abandonment) arrived.
    pub(crate) fn on_settled(&mut self, settled: Settled, out: &mut Vec<Step>) {
        let current = self
            .pending
            .get(&settled.id)
            .is_some_and(|p| p.attempt == settled.attempt);
        if !current {
            return;
        }
        if let Some(p) = self.pending.remove(&settled.id) {
            self.conclude(p, settled.resolution, out);
        }
    }

    /// Time out every request whose deadline has passed.
    pub(crate) fn on_deadline(&mut self, now: Instant, out: &mut Vec<Step>) {
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            let won = self
                .pending
                .get(&id)
                .is_some_and(|p| p.slot.settle_by_host(Resolution::TimedOut));
            if won {
                if let Some(p) = self.pending.remove(&id) {
                    self.conclude(p, Resolution::TimedOut, out);
                }
            } else if let Some(p) = self.pending.get_mut(&id) {
                // An answer won the race; it is already queued for `next_settled`.
                p.deadline = None;
            }
        }
    }

    /// The run is ending (`Cancelled`) or ended (`Withdrawn`): resolve what is still pending,
    /// then collect the answers that won the race. Cancelled requests are delivered to the
    /// driver; withdrawn ones only reported.
    pub(crate) fn close(&mut self, resolution: Resolution, out: &mut Vec<Step>) {
        let ids: Vec<String> = self.pending.keys().cloned().collect();
        for id in ids {
            let won = self
                .pending
                .get(&id)
                .is_some_and(|p| p.slot.settle_by_host(resolution.clone()));
            if won && let Some(p) = self.pending.remove(&id) {
                self.conclude(p, resolution.clone(), out);
            }
        }
        while let Ok(settled) = self.rx.try_recv() {
            self.on_settled(settled, out);
        }
    }

    /// Abort handler tasks still running (their run is over).
    pub(crate) fn abort_handlers(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }

    fn conclude(&mut self, p: Pending, resolution: Resolution, out: &mut Vec<Step>) {
        tracing::info!(driver = %self.driver, id = %p.request.id, attempt = p.attempt, %resolution, "approval resolved");
        out.push(resolved(
            &p.request.id,
            &p.kind,
            p.attempt,
            resolution.clone(),
            false,
        ));
        let id = p.request.id.clone();
        match resolution {
            Resolution::Approved { updated_input } => out.push(Step::Deliver(
                id,
                Decision::Approve(updated_input.map(|v| v.to_string())),
            )),
            Resolution::Answered { answer } => {
                out.push(Step::Deliver(id, Decision::Answer(answer)))
            }
            Resolution::Denied { reason } => {
                if self.policy.on_reject == Fallback::Retry && p.attempt <= self.policy.max_retries
                {
                    self.ask(p.request, p.kind, p.attempt + 1, out);
                } else {
                    let fallback = self.policy.on_reject;
                    self.rejected(&p.request, fallback, reason, out);
                }
            }
            Resolution::TimedOut => {
                let fallback = self.policy.on_timeout;
                if fallback == Fallback::Retry && p.attempt <= self.policy.max_retries {
                    self.ask(p.request, p.kind, p.attempt + 1, out);
                    return;
                }
                if fallback != Fallback::Continue {
                    let waited = self.policy.timeout.unwrap_or_default().as_millis();
                    self.fail(
                        FailureReason::ApprovalTimeout,
                        format!(
                            "approval `{}` ({}) was not answered within {waited} ms",
                            p.request.id, p.request.title
                        ),
                    );
                }
                out.push(Step::Deliver(id, Decision::TimedOut));
            }
            Resolution::Unanswered => {
                self.fail(
                    FailureReason::ApprovalUnanswered,
                    format!(
                        "approval `{}` ({}) could not be answered: no approval handler, and no \
                         consumer of the event stream kept the request",
                        p.request.id, p.request.title
                    ),
                );
                out.push(Step::Deliver(id, Decision::Unanswered));
            }
            Resolution::Cancelled => out.push(Step::Deliver(id, Decision::Cancelled)),
            Resolution::Withdrawn => {}
        }
    }

    fn rejected(
        &mut self,
        request: &AskRequest,
        fallback: Fallback,
        reason: String,
        out: &mut Vec<Step>,
    ) {
        if fallback != Fallback::Continue {
            self.fail(
                FailureReason::ApprovalDenied,
                format!(
                    "approval `{}` ({}) was denied: {reason}",
                    request.id, request.title
                ),
            );
        }
        out.push(Step::Deliver(request.id.clone(), Decision::Deny(reason)));
    }

    fn fail(&mut self, reason: FailureReason, message: String) {
        self.failure.get_or_insert((reason, message));
    }
}

fn resolved(
    id: &str,
    kind: &ApprovalKind,
    attempt: u32,
    resolution: Resolution,
    by_policy: bool,
) -> Step {
    Step::Emit(Box::new(Event::ApprovalResolved(ApprovalResolved {
        meta: blank_meta(),
        id: id.to_owned(),
        kind: kind.clone(),
        attempt,
        resolution,
        by_policy,
    })))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn request(id: &str, kind: ApprovalKind) -> AskRequest {
        AskRequest {
            id: id.into(),
            kind,
            title: format!("title of {id}"),
            tool_call_id: None,
            tool_name: Some("Bash".into()),
            choices: vec![],
            details_json: Some("{\"command\":\"ls\"}".into()),
        }
    }

    fn policy(mode: DecisionMode, fallback: Fallback) -> ApprovalPolicy {
        ApprovalPolicy {
            permission: mode,
            plan_review: mode,
            question: QuestionMode::Ask,
            timeout: Some(Duration::from_millis(50)),
            on_timeout: fallback,
            on_reject: fallback,
            max_retries: 1,
        }
    }

    /// What the steps say, in order: `emit:<kind>` or `deliver:<id>:<decision>`.
    fn describe(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::Emit(e) => match &**e {
                    Event::ApprovalRequest(r) => format!("ask:{}#{}", r.id, r.attempt),
                    Event::ApprovalResolved(r) => format!(
                        "resolved:{}#{}:{}{}",
                        r.id,
                        r.attempt,
                        r.resolution,
                        if r.by_policy { " (policy)" } else { "" }
                    ),
                    other => format!("emit:{other:?}"),
                },
                Step::Deliver(id, d) => format!("deliver:{id}:{d:?}"),
            })
            .collect()
    }

    #[test]
    fn policy_answers_at_once_and_a_policy_refusal_is_final() {
        let mut d = Decisions::new(
            "x".into(),
            policy(DecisionMode::AutoApprove, Fallback::Abort),
            None,
        );
        let mut out = Vec::new();
        d.request(request("a", ApprovalKind::Permission), &mut out)
            .unwrap();
        let steps = describe(&out);
        assert!(steps[0].starts_with("resolved:a#1:") && steps[0].ends_with("(policy)"));
        assert_eq!(steps[1], "deliver:a:Approve(None)");
        assert!(d.failure().is_none());

        // Auto-deny with `retry`: never re-asked (it would be refused again) — it aborts.
        let mut d = Decisions::new(
            "x".into(),
            policy(DecisionMode::AutoDeny, Fallback::Retry),
            None,
        );
        let mut out = Vec::new();
        d.request(request("b", ApprovalKind::PlanReview), &mut out)
            .unwrap();
        assert!(describe(&out)[1].starts_with("deliver:b:Deny("));
        assert_eq!(d.failure().unwrap().0, FailureReason::ApprovalDenied);
        assert!(d.aborting());

        // Auto-deny with `continue`: the agent is told no and carries on.
        let mut d = Decisions::new(
            "x".into(),
            policy(DecisionMode::AutoDeny, Fallback::Continue),
            None,
        );
        let mut out = Vec::new();
        d.request(request("c", ApprovalKind::Permission), &mut out)
            .unwrap();
        assert!(d.failure().is_none());
    }

    #[test]
    fn a_timeout_re_asks_up_to_max_retries_then_aborts() {
        let mut d = Decisions::new("x".into(), policy(DecisionMode::Ask, Fallback::Retry), None);
        let mut out = Vec::new();
        d.request(request("q", ApprovalKind::Permission), &mut out)
            .unwrap();
        assert_eq!(describe(&out), ["ask:q#1"]);
        assert!(d.next_deadline().is_some());
        let later = Instant::now() + Duration::from_secs(3600);
        let mut out = Vec::new();
        d.on_deadline(later, &mut out);
        let steps = describe(&out);
        assert!(steps[0].starts_with("resolved:q#1:"), "{steps:?}");
        assert_eq!(steps[1], "ask:q#2", "re-asked");
        assert!(d.failure().is_none());
        let mut out = Vec::new();
        d.on_deadline(later, &mut out);
        let steps = describe(&out);
        assert_eq!(steps.last().unwrap(), "deliver:q:TimedOut", "{steps:?}");
        assert_eq!(d.failure().unwrap().0, FailureReason::ApprovalTimeout);
        assert!(d.next_deadline().is_none());
    }

    #[test]
    fn cancel_resolves_pending_requests_and_tells_the_driver() {
        let mut d = Decisions::new("x".into(), policy(DecisionMode::Ask, Fallback::Abort), None);
        let mut out = Vec::new();
        d.request(request("p", ApprovalKind::Question), &mut out)
            .unwrap();
        let mut out = Vec::new();
        d.close(Resolution::Cancelled, &mut out);
        assert_eq!(describe(&out).last().unwrap(), "deliver:p:Cancelled");
        // Withdrawn (the run ended) is only reported, never delivered.
        let mut d = Decisions::new("x".into(), policy(DecisionMode::Ask, Fallback::Abort), None);
        // (The emitted request is kept alive: a request whose every copy is dropped
        // unanswered resolves itself as unanswered.)
        let mut asked = Vec::new();
        d.request(request("w", ApprovalKind::Permission), &mut asked)
            .unwrap();
        let mut out = Vec::new();
        d.close(Resolution::Withdrawn, &mut out);
        assert!(describe(&out).iter().all(|s| !s.starts_with("deliver:")));
        drop(asked);
    }

    #[test]
    fn malformed_requests_are_contract_violations() {
        let mut d = Decisions::new("x".into(), policy(DecisionMode::Ask, Fallback::Abort), None);
        let mut out = Vec::new();
        assert!(
            d.request(request("", ApprovalKind::Permission), &mut out)
                .is_err()
        );
        let mut bad = request("d", ApprovalKind::Permission);
        bad.details_json = Some("[1, 2]".into());
        assert!(
            d.request(bad, &mut out)
                .unwrap_err()
                .contains("JSON object")
        );
        d.request(request("dup", ApprovalKind::Permission), &mut out)
            .unwrap();
        let err = d
            .request(request("dup", ApprovalKind::Permission), &mut out)
            .unwrap_err();
        assert!(err.contains("pending"), "{err}");
    }
}
