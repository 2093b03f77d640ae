//! The part lifecycles of one run's events: text and thinking parts (by message id) and tool
//! calls (by call id) start once while open, get deltas only while open — never empty for
//! text and thinking — and end once; a tool call starts with a name; a tool result names a
//! call that has ended.
//!
//! One checker for the host, which refuses a driver event that breaks a rule before
//! forwarding it (`run/guard`), and for the conformance kit, which reports the same rules
//! as clauses on a recorded stream. Owns the bookkeeping only. Must not: decide what a
//! violation does.

use std::collections::BTreeSet;

use crate::event::{Event, Phase};

/// Which lifecycle rule an event broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartRule {
    /// A text part started while open, or got a delta or an end while not open.
    Text,
    /// A text delta was empty.
    EmptyText,
    /// A thinking part started while open, or got a delta or an end while not open.
    Thinking,
    /// A thinking delta was empty.
    EmptyThinking,
    /// A tool call started while open or without a name, or got a delta or an end while not
    /// open.
    ToolCall,
    /// A tool result for a call that has not ended.
    ToolResult,
}

/// A broken lifecycle rule, and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartViolation {
    /// The rule.
    pub rule: PartRule,
    /// What the event did.
    pub message: String,
}

/// Open parts of one kind.
#[derive(Debug, Default)]
struct Parts {
    open: BTreeSet<String>,
}

impl Parts {
    fn step(
        &mut self,
        rule: PartRule,
        what: &str,
        id: &str,
        phase: Phase,
    ) -> Result<(), PartViolation> {
        let broke = |why: &str| {
            Err(PartViolation {
                rule,
                message: format!("{what} `{id}` {why}"),
            })
        };
        match phase {
            Phase::Start if !self.open.insert(id.to_owned()) => broke("started while already open"),
            Phase::Delta if !self.open.contains(id) => broke("got a delta while not open"),
            Phase::End if !self.open.remove(id) => broke("ended while not open"),
            _ => Ok(()),
        }
    }
}

/// The lifecycles of one run's (or one turn's) events, checked one event at a time.
#[derive(Debug, Default)]
pub struct Lifecycles {
    text: Parts,
    thinking: Parts,
    tools: Parts,
    ended_tools: BTreeSet<String>,
}

impl Lifecycles {
    /// Record `event` and say which rule it broke, if any (events that have no lifecycle
    /// pass). The event is recorded either way, so checking goes on after a violation.
    pub fn check(&mut self, event: &Event) -> Result<(), PartViolation> {
        let empty = |rule, what: &str, id: &str| {
            Err(PartViolation {
                rule,
                message: format!("{what} `{id}` got an empty delta"),
            })
        };
        match event {
            Event::TextDelta(d) => {
                self.text
                    .step(PartRule::Text, "text", &d.message_id, d.phase)?;
                if d.phase == Phase::Delta && d.text.is_empty() {
                    return empty(PartRule::EmptyText, "text", &d.message_id);
                }
                Ok(())
            }
            Event::Thinking(d) => {
                self.thinking
                    .step(PartRule::Thinking, "thinking", &d.message_id, d.phase)?;
                if d.phase == Phase::Delta && d.text.is_empty() {
                    return empty(PartRule::EmptyThinking, "thinking", &d.message_id);
                }
                Ok(())
            }
            Event::ToolCall(c) => {
                if c.phase == Phase::End {
                    self.ended_tools.insert(c.id.clone());
                }
                self.tools
                    .step(PartRule::ToolCall, "tool call", &c.id, c.phase)?;
                if c.phase == Phase::Start && c.name.is_empty() {
                    return Err(PartViolation {
                        rule: PartRule::ToolCall,
                        message: format!("tool call `{}` started without a name", c.id),
                    });
                }
                Ok(())
            }
            Event::ToolResult(r) if !self.ended_tools.contains(&r.id) => {
                let why = if self.tools.open.contains(&r.id) {
                    "before the call ended"
                } else {
                    "for a call that never started"
                };
                Err(PartViolation {
                    rule: PartRule::ToolResult,
                    message: format!("tool result `{}` {why}", r.id),
                })
            }
            _ => Ok(()),
        }
    }

    /// The parts still open: (`text` | `thinking` | `tool call`, id).
    pub fn open(&self) -> Vec<(&'static str, &str)> {
        [
            ("text", &self.text),
            ("thinking", &self.thinking),
            ("tool call", &self.tools),
        ]
        .into_iter()
        .flat_map(|(what, parts)| parts.open.iter().map(move |id| (what, id.as_str())))
        .collect()
    }
}
