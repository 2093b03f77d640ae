//! Event and result clauses: pure functions over what a run produced.
//! Must not: run drivers or processes.

use adaptor::lifecycle::{Lifecycles, PartRule};
use adaptor::{Error, Event, Phase, RunResult};
use serde::Serialize;

/// One clause a run broke.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Clause id, e.g. `EVT-03`.
    pub clause: &'static str,
    /// What was wrong.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.clause, self.message)
    }
}

fn v(clause: &'static str, message: impl Into<String>) -> Violation {
    Violation {
        clause,
        message: message.into(),
    }
}

/// Check the event clauses (EVT-00..EVT-11) on the complete event list of one run.
pub fn check_events(events: &[Event]) -> Vec<Violation> {
    let mut out = Vec::new();
    let Some(first) = events.first() else {
        out.push(v("EVT-01", "a started run emitted no events"));
        return out;
    };
    let run_id = &first.meta().run_id;
    for (i, pair) in events.windows(2).enumerate() {
        if pair[1].meta().sequence <= pair[0].meta().sequence {
            out.push(v(
                "EVT-00",
                format!("sequence does not increase at event {}", i + 1),
            ));
        }
    }
    if first.meta().sequence != 1 {
        out.push(v(
            "EVT-00",
            format!("first sequence is {}, not 1", first.meta().sequence),
        ));
    }
    if events.iter().any(|e| &e.meta().run_id != run_id) {
        out.push(v("EVT-00", "events carry different run ids"));
    }
    let starts = events
        .iter()
        .filter(|e| matches!(e, Event::RunStarted(_)))
        .count();
    if starts != 1 || !matches!(first, Event::RunStarted(_)) {
        out.push(v(
            "EVT-01",
            format!(
                "{starts} RunStarted events; the first event is `{}`",
                first.kind()
            ),
        ));
    }
    let finishes = events
        .iter()
        .filter(|e| matches!(e, Event::RunFinished(_)))
        .count();
    if finishes != 1 || !matches!(events.last(), Some(Event::RunFinished(_))) {
        out.push(v(
            "EVT-02",
            format!(
                "{finishes} RunFinished events; the last event is `{}`",
                events.last().map_or("none", Event::kind)
            ),
        ));
    }
    // The lifecycle rules are the host's own (`adaptor::lifecycle`), reported as clauses.
    let mut parts = Lifecycles::default();
    for e in events {
        if let Err(violation) = parts.check(e) {
            let clause = match violation.rule {
                PartRule::Text => "EVT-03",
                PartRule::EmptyText | PartRule::EmptyThinking => "EVT-04",
                PartRule::Thinking => "EVT-06",
                _ => "EVT-05",
            };
            out.push(v(clause, violation.message));
        }
    }
    for (what, id) in parts.open() {
        out.push(v(
            "EVT-11",
            format!("{what} `{id}` still open at the end of the run"),
        ));
    }
    out
}

/// Check the result clauses (RUN-04, RSP-01, RSP-03, RSP-05, USG-01, HST-01) given the run's events and its
/// outcome (`Ok` result or the partial result inside a `RunError`).
pub fn check_result(events: &[Event], result: &Result<RunResult, Error>) -> Vec<Violation> {
    let mut out = Vec::new();
    let (res, failed) = match result {
        Ok(r) => (r, false),
        Err(Error::Run(e)) => (&e.result, true),
        Err(_) => return out,
    };
    let items: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Item(i) => Some(&i.item),
            _ => None,
        })
        .collect();
    let transcript: Vec<_> = res.transcript().iter().collect();
    if items != transcript {
        out.push(v(
            "RUN-04",
            format!(
                "{} item events vs {} transcript entries, or different order/content",
                items.len(),
                transcript.len()
            ),
        ));
    }
    if failed && res.checkpoint.as_ref().is_some_and(|c| c.is_valid()) {
        out.push(v("RSP-01", "a failed run carries a valid checkpoint"));
    }
    // HST-01: the host found the driver breaking a rule it checks (the run failed with
    // `contract_violation`; the notice names the rule). The driver could not know its run
    // would fail, so the checkpoint the host invalidated then is not also an RSP-01.
    let violated = matches!(result, Err(Error::Run(e)) if e.reason == adaptor::FailureReason::ContractViolation);
    for e in events {
        match e {
            Event::Notice(n) if n.notice == adaptor::CONTRACT_VIOLATION => {
                out.push(v("HST-01", n.message.clone()));
            }
            Event::Notice(n) if n.notice == adaptor::CHECKPOINT_INVALIDATED && !violated => {
                out.push(v("RSP-01", n.message.clone()));
            }
            _ => {}
        }
    }
    let last_usage = events.iter().rev().find_map(|e| match e {
        Event::Usage(u) => Some(&u.usage),
        _ => None,
    });
    if res.usage.as_ref() != last_usage {
        out.push(v(
            "USG-01",
            match (&res.usage, last_usage) {
                (Some(_), None) => "the result reports usage that no usage event ever carried (absent must stay absent)".to_owned(),
                (None, Some(_)) => "usage events were emitted but the result has no usage".to_owned(),
                _ => "the result's usage differs from the last usage event".to_owned(),
            },
        ));
    }
    let stdout = String::from_utf8_lossy(&res.raw().stdout);
    if !res.text.is_empty() && res.text.trim() == stdout.trim() {
        out.push(v("RSP-03", "the final text is the raw protocol stdout"));
    }
    if let Some(t) = res.terminal() {
        if t.event.is_empty() {
            out.push(v("RSP-05", "terminal payload without an event name"));
        }
        if serde_json::from_str::<serde_json::Value>(&t.json).is_err() {
            out.push(v("RSP-05", "terminal payload is not valid JSON"));
        }
    }
    out
}

/// EVT-12: what a descriptor declares absent never shows up — no thinking events without
/// `streaming.reasoning`, no tool-argument deltas without `streaming.tool-call-args`.
pub fn check_declared_negatives(
    events: &[Event],
    descriptor: &adaptor::Descriptor,
) -> Vec<Violation> {
    let mut out = Vec::new();
    if !descriptor.streaming.reasoning && events.iter().any(|e| matches!(e, Event::Thinking(_))) {
        out.push(v(
            "EVT-12",
            "thinking events although the descriptor declares no reasoning",
        ));
    }
    if !descriptor.streaming.tool_call_args
        && events
            .iter()
            .any(|e| matches!(e, Event::ToolCall(c) if c.phase == Phase::Delta))
    {
        out.push(v(
            "EVT-12",
            "tool-argument deltas although the descriptor declares no tool-call-args streaming",
        ));
    }
    out
}
