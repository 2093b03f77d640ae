//! The driver's claims, checked before they are forwarded: what the WIT says the host checks
//! about the events a driver emits and the outcome it returns.
//!
//! Rules (each violation names one, and ends the run with `contract_violation`):
//! - `text-lifecycle`, `thinking-lifecycle`, `tool-lifecycle`: a part (by message or call id)
//!   is started once while open, gets deltas only while open (never empty for text and
//!   thinking), and is ended once; a tool call starts with a name;
//! - `tool-result`: a result names a call that has ended;
//! - `after-end-turn`: once the driver ended the turn, and once the process exited, it may
//!   only close parts still open (ends, and results of its calls) and report transcript
//!   items, usage, notices and vendor events (a late token count is a report, not a lie; a
//!   new part would never end);
//! - `usage`: every counter at most [`MAX_PLAUSIBLE_TOKENS`], a cost finite, non-negative and
//!   at most [`MAX_PLAUSIBLE_COST_USD`];
//! - `outcome-usage`: the outcome's usage is the last usage event's (absent when none was
//!   emitted);
//! - `unclosed`: nothing is left open when the turn's outcome is returned.
//!
//! The lifecycle rules are [`crate::lifecycle`]'s (the conformance kit checks the same ones);
//! this module adds the turn's stages, usage and the outcome. Owns the bookkeeping only; the
//! supervisor decides what a violation does (stop the
//! provider, fail the run). Must not: fix a claim up (a wrong event is never forwarded
//! "corrected").

use crate::event::{Event, Phase, TextDelta, ToolCall};
use crate::lifecycle::{Lifecycles, PartRule};
use crate::result::Usage;
use crate::session::DriverOutcome;

/// Notice kind emitted when a driver breaks one of these rules (its `data.rule` names it).
pub const CONTRACT_VIOLATION: &str = "driver.contract_violation";

/// The largest token count a usage counter may report (a million million: beyond any real
/// turn, far below overflow).
pub const MAX_PLAUSIBLE_TOKENS: u64 = 1_000_000_000_000;

/// The largest cost a usage report may carry, in US dollars.
pub const MAX_PLAUSIBLE_COST_USD: f64 = 1_000_000.0;

/// A broken rule: its name and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    /// The rule (see the module docs).
    pub rule: &'static str,
    /// What the driver did.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rule `{}`: {}", self.rule, self.message)
    }
}

fn broke(rule: &'static str, message: String) -> Result<(), Violation> {
    Err(Violation { rule, message })
}

/// The host's name of a lifecycle rule.
fn rule_name(rule: PartRule) -> &'static str {
    match rule {
        PartRule::Text | PartRule::EmptyText => "text-lifecycle",
        PartRule::Thinking | PartRule::EmptyThinking => "thinking-lifecycle",
        PartRule::ToolResult => "tool-result",
        _ => "tool-lifecycle",
    }
}

/// Where the turn is, for the `after-end-turn` rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The turn is running.
    Running,
    /// The driver ended the turn (`end-turn`).
    Ended,
    /// The process exited and `on-exit` was answered.
    Exited,
}

/// The checks of one turn.
#[derive(Debug)]
pub(crate) struct Claims {
    parts: Lifecycles,
    last_usage: Option<Usage>,
    /// Where the turn is.
    pub stage: Stage,
}

impl Default for Claims {
    fn default() -> Self {
        Self {
            parts: Lifecycles::default(),
            last_usage: None,
            stage: Stage::Running,
        }
    }
}

impl Claims {
    /// Check one event the driver emitted (and record it).
    pub(crate) fn check(&mut self, event: &Event) -> Result<(), Violation> {
        // Closing what is open: ends, and the result of a call (a call denied or cut off
        // when the turn was stopped still gets its result; `tool-result` checks the call).
        let closing = matches!(
            event,
            Event::TextDelta(TextDelta {
                phase: Phase::End,
                ..
            }) | Event::Thinking(TextDelta {
                phase: Phase::End,
                ..
            }) | Event::ToolCall(ToolCall {
                phase: Phase::End,
                ..
            }) | Event::ToolResult(_)
        );
        if self.stage != Stage::Running
            && !closing
            && !matches!(
                event,
                Event::Item(_) | Event::Notice(_) | Event::Vendor(_) | Event::Usage(_)
            )
        {
            let when = match self.stage {
                Stage::Ended => "after it ended the turn",
                _ => "after the process exited",
            };
            return broke(
                "after-end-turn",
                format!("the driver emitted `{}` {when}", event.kind()),
            );
        }
        self.parts
            .check(event)
            .or_else(|v| broke(rule_name(v.rule), v.message))?;
        if let Event::Usage(u) = event {
            plausible(&u.usage)?;
            self.last_usage = Some(u.usage.clone());
        }
        Ok(())
    }

    /// Check the turn's outcome against what was emitted.
    pub(crate) fn check_outcome(&self, outcome: &DriverOutcome) -> Result<(), Violation> {
        if let Some((what, id)) = self.parts.open().first() {
            return broke(
                "unclosed",
                format!("{what} `{id}` is still open when the turn's outcome is returned"),
            );
        }
        if let Some(u) = &outcome.usage {
            plausible(u)?;
        }
        if outcome.usage != self.last_usage {
            let message = match (&outcome.usage, &self.last_usage) {
                (Some(_), None) => "the outcome reports usage that no usage event carried",
                (None, Some(_)) => "usage events were emitted but the outcome has no usage",
                _ => "the outcome's usage differs from the last usage event",
            };
            return broke("outcome-usage", message.to_owned());
        }
        Ok(())
    }
}

fn plausible(u: &Usage) -> Result<(), Violation> {
    for (name, value) in [
        ("input_tokens", u.input_tokens),
        ("output_tokens", u.output_tokens),
        ("cache_read_tokens", u.cache_read_tokens),
        ("cache_write_tokens", u.cache_write_tokens),
        ("reasoning_tokens", u.reasoning_tokens),
    ] {
        if let Some(v) = value
            && v > MAX_PLAUSIBLE_TOKENS
        {
            return broke(
                "usage",
                format!("{name} is {v}, over {MAX_PLAUSIBLE_TOKENS}"),
            );
        }
    }
    if let Some(cost) = u.cost_usd
        && !(cost.is_finite() && (0.0..=MAX_PLAUSIBLE_COST_USD).contains(&cost))
    {
        return broke(
            "usage",
            format!("cost_usd is {cost}, not a finite amount in 0..={MAX_PLAUSIBLE_COST_USD}"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ToolResult, UsageUpdate, blank_meta};

    fn text(phase: Phase, t: &str) -> Event {
        Event::TextDelta(TextDelta {
            meta: blank_meta(),
            message_id: "m".into(),
            phase,
            text: t.into(),
            parent_tool_call_id: None,
        })
    }

    fn tool(phase: Phase, name: &str) -> Event {
        Event::ToolCall(ToolCall {
            meta: blank_meta(),
            id: "c".into(),
            name: name.into(),
            phase,
            args: None,
            args_delta: None,
            parent_tool_call_id: None,
        })
    }

    fn result(id: &str) -> Event {
        Event::ToolResult(ToolResult {
            meta: blank_meta(),
            id: id.into(),
            output: String::new(),
            is_error: false,
            parent_tool_call_id: None,
        })
    }

    fn usage(u: Usage) -> Event {
        Event::Usage(UsageUpdate {
            meta: blank_meta(),
            usage: u,
        })
    }

    fn rule(events: &[Event]) -> Option<&'static str> {
        let mut c = Claims::default();
        events.iter().find_map(|e| c.check(e).err()).map(|v| v.rule)
    }

    #[test]
    fn part_lifecycles_are_checked() {
        assert_eq!(
            rule(&[
                text(Phase::Start, ""),
                text(Phase::Delta, "x"),
                text(Phase::End, "")
            ]),
            None
        );
        // Started again after it ended: a new part with the same id.
        assert_eq!(
            rule(&[
                text(Phase::Start, ""),
                text(Phase::End, ""),
                text(Phase::Start, "")
            ]),
            None
        );
        assert_eq!(rule(&[text(Phase::End, "")]), Some("text-lifecycle"));
        assert_eq!(rule(&[text(Phase::Delta, "x")]), Some("text-lifecycle"));
        assert_eq!(
            rule(&[text(Phase::Start, ""), text(Phase::Start, "")]),
            Some("text-lifecycle")
        );
        assert_eq!(
            rule(&[text(Phase::Start, ""), text(Phase::Delta, "")]),
            Some("text-lifecycle")
        );
        assert_eq!(rule(&[tool(Phase::Start, "")]), Some("tool-lifecycle"));
        assert_eq!(
            rule(&[
                tool(Phase::Start, "echo"),
                tool(Phase::End, "echo"),
                result("c")
            ]),
            None
        );
        assert_eq!(rule(&[result("ghost")]), Some("tool-result"));
        assert_eq!(
            rule(&[tool(Phase::Start, "echo"), result("c")]),
            Some("tool-result")
        );
    }

    #[test]
    fn after_the_turn_only_closings_and_reports_follow() {
        let mut c = Claims {
            stage: Stage::Ended,
            ..Claims::default()
        };
        assert_eq!(
            c.check(&text(Phase::Start, "")).unwrap_err().rule,
            "after-end-turn"
        );
        assert_eq!(
            c.check(&tool(Phase::Start, "echo")).unwrap_err().rule,
            "after-end-turn"
        );
        let notice = Event::Notice(crate::event::Notice {
            meta: blank_meta(),
            notice: "n".into(),
            message: String::new(),
            data: None,
        });
        assert!(c.check(&notice).is_ok());
        // Closing what is still open is allowed (a CLI killed mid-turn).
        let mut open = Claims::default();
        open.check(&tool(Phase::Start, "echo")).unwrap();
        open.stage = Stage::Exited;
        assert!(open.check(&tool(Phase::End, "echo")).is_ok());
        assert!(
            open.check(&result("c")).is_ok(),
            "the stopped call's result"
        );
        assert_eq!(
            open.check(&result("other")).unwrap_err().rule,
            "tool-result"
        );
        assert_eq!(
            open.check(&tool(Phase::End, "echo")).unwrap_err().rule,
            "tool-lifecycle"
        );
        c.stage = Stage::Exited;
        assert!(
            c.check(&usage(Usage::default())).is_ok(),
            "a late usage report"
        );
        assert!(
            c.check(&text(Phase::Start, ""))
                .unwrap_err()
                .message
                .contains("after the process exited")
        );
    }

    #[test]
    fn usage_must_be_plausible_and_the_outcome_must_repeat_the_last_report() {
        for bad in [
            Usage {
                input_tokens: Some(u64::MAX),
                ..Usage::default()
            },
            Usage {
                cost_usd: Some(f64::NAN),
                ..Usage::default()
            },
            Usage {
                cost_usd: Some(f64::INFINITY),
                ..Usage::default()
            },
            Usage {
                cost_usd: Some(-1e308),
                ..Usage::default()
            },
        ] {
            assert_eq!(rule(&[usage(bad.clone())]), Some("usage"), "{bad:?}");
        }
        let good = Usage {
            input_tokens: Some(10),
            cost_usd: Some(0.01),
            ..Usage::default()
        };
        let mut c = Claims::default();
        c.check(&usage(good.clone())).unwrap();
        let mut outcome = crate::session::DriverOutcome::default();
        assert_eq!(c.check_outcome(&outcome).unwrap_err().rule, "outcome-usage");
        outcome.usage = Some(Usage {
            input_tokens: Some(11),
            ..good.clone()
        });
        assert_eq!(c.check_outcome(&outcome).unwrap_err().rule, "outcome-usage");
        outcome.usage = Some(good);
        assert!(c.check_outcome(&outcome).is_ok());
        // Nothing emitted, nothing claimed.
        assert!(
            Claims::default()
                .check_outcome(&crate::session::DriverOutcome::default())
                .is_ok()
        );
        // Open parts at the end.
        let mut c = Claims::default();
        c.check(&tool(Phase::Start, "echo")).unwrap();
        assert_eq!(
            c.check_outcome(&crate::session::DriverOutcome::default())
                .unwrap_err()
                .rule,
            "unclosed"
        );
    }
}
