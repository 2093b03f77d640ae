//! What `adaptor run` prints: the readable view (text as it arrives, tool calls and results,
//! thinking dimmed, notices on stderr, a final summary line) or JSON Lines (one event per
//! line, then one `result` line).
//!
//! Owns the layout of both views and keeps the status line informed (what the agent is doing;
//! cleared before anything prints). Every string from a driver or provider goes through
//! [`sanitize`]. Must not: run, cancel or decide exit codes.

use std::time::Instant;

use adaptor::{Error, Event, Phase, ProcessInfoKind, RunResult};

use crate::approve;
use crate::output::sanitize;
use crate::status::{QUIET_BEFORE_SHOWING, StatusLine};
use crate::{errln, out, outln};

/// The view of one run.
pub struct View {
    json: bool,
    styled: bool,
    mid_line: bool,
    in_thinking: bool,
    status: StatusLine,
    last_output: Instant,
}

impl View {
    /// `json`: JSON Lines; `styled`: escape codes for dim text are allowed on stdout.
    pub fn new(json: bool, styled: bool, status: StatusLine) -> Self {
        Self {
            json,
            styled,
            mid_line: false,
            in_thinking: false,
            status,
            last_output: Instant::now(),
        }
    }

    /// When the status line should appear, if it is not on screen and may appear at all.
    pub fn status_due(&self) -> Option<tokio::time::Instant> {
        (self.status.enabled() && !self.status.visible() && !self.mid_line)
            .then(|| tokio::time::Instant::from_std(self.last_output + QUIET_BEFORE_SHOWING))
    }

    /// Draw the status line (its time has come).
    pub fn show_status(&mut self) {
        if !self.mid_line {
            self.status.show();
        }
    }

    /// Clear the status line before printing.
    fn printing(&mut self) {
        self.status.hide();
        self.last_output = Instant::now();
    }

    fn line_break(&mut self) {
        if self.mid_line {
            self.printing();
            outln!();
            self.mid_line = false;
        }
    }

    /// Print `s` dimmed when styled (the sink sanitises it either way).
    fn dim(&self, s: &str) {
        if self.styled {
            crate::output::write_stdout_dim(s);
        } else {
            out!("{s}");
        }
    }

    /// Show one event.
    pub fn event(&mut self, ev: &Event) {
        if self.json {
            match serde_json::to_string(ev) {
                Ok(line) => outln!("{line}"),
                Err(e) => errln!("adaptor: cannot serialise event: {e}"),
            }
            return;
        }
        match ev {
            Event::RunStarted(s) => {
                let program = std::path::Path::new(&s.program)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| s.program.clone());
                self.status
                    .set_activity(format!("starting {}", sanitize(&program)));
            }
            Event::ProcessInfo(p) if p.process == ProcessInfoKind::Spawn => {
                self.status.set_activity("waiting for the agent");
            }
            Event::TextDelta(d) if d.phase == Phase::Delta => {
                if self.in_thinking {
                    self.line_break();
                    self.in_thinking = false;
                }
                self.printing();
                out!("{}", sanitize(&d.text));
                self.mid_line = !d.text.ends_with('\n');
                self.status.set_activity("writing");
            }
            Event::Thinking(d) if d.phase == Phase::Delta => {
                if !self.in_thinking {
                    self.line_break();
                    self.in_thinking = true;
                }
                self.printing();
                self.dim(&d.text);
                self.mid_line = true;
                self.status.set_activity("thinking");
            }
            Event::ToolCall(c) if c.phase == Phase::Start => {
                self.line_break();
                self.in_thinking = false;
                let args = c.args.as_ref().map(|a| a.to_string()).unwrap_or_default();
                self.printing();
                outln!(
                    "→ {} {}",
                    sanitize(&c.name),
                    sanitize(&truncate(&args, 200))
                );
                self.status
                    .set_activity(format!("running {}", sanitize(&truncate(&c.name, 40))));
            }
            Event::ToolResult(r) => {
                self.line_break();
                let mark = if r.is_error { "✗" } else { "←" };
                self.printing();
                outln!("{mark} {}", sanitize(&truncate(&r.output, 200)));
                self.status.set_activity("working");
            }
            Event::Notice(n) => {
                self.line_break();
                self.printing();
                errln!("! {}: {}", sanitize(&n.notice), sanitize(&n.message));
            }
            Event::ThreadFallback(f) => {
                self.line_break();
                self.printing();
                errln!(
                    "! thread {:?}: the stored session was rejected ({}); starting a fresh one",
                    sanitize(&f.key),
                    sanitize(&f.reason)
                );
            }
            Event::ApprovalRequest(_) => self.status.set_activity("waiting for approval"),
            Event::ApprovalResolved(a) => {
                self.line_break();
                self.printing();
                errln!(
                    "? {} `{}`: {}",
                    a.kind,
                    sanitize(&a.id),
                    approve::describe(&a.resolution, a.by_policy)
                );
                self.status.set_activity("working");
            }
            _ => {}
        }
    }

    /// Show the outcome: the final summary line(s), or the JSON `result` line.
    pub fn finish(&mut self, result: &Result<RunResult, Error>) {
        self.status.hide();
        let res = match result {
            Ok(r) => Some(r),
            Err(Error::Run(e)) => Some(&e.result),
            Err(_) => None,
        };
        if self.json {
            let line = match result {
                Ok(r) => result_json(r, None),
                Err(Error::Run(e)) => result_json(
                    &e.result,
                    Some(serde_json::json!({"reason": e.reason, "message": e.message})),
                ),
                Err(e) => serde_json::json!({"kind": "result", "error": e.to_string()}),
            };
            outln!("{line}");
            return;
        }
        self.line_break();
        if let Some(r) = res {
            let usage = r
                .usage
                .as_ref()
                .map(|u| {
                    format!(
                        "{} in / {} out tokens",
                        u.input_tokens.map_or("?".into(), |n| n.to_string()),
                        u.output_tokens.map_or("?".into(), |n| n.to_string())
                    )
                })
                .unwrap_or_else(|| "usage not reported".into());
            let line = format!(
                "— {} · model {} · session {} · {:.2}s",
                usage,
                r.model.as_deref().unwrap_or("?"),
                r.session_id().unwrap_or("none"),
                r.duration.as_secs_f64()
            );
            self.dim(&line);
            outln!();
            if let Some(t) = &r.thread {
                let how = match &t.start {
                    adaptor::ThreadStart::New => "new session".to_owned(),
                    adaptor::ThreadStart::Resumed => "resumed".to_owned(),
                    adaptor::ThreadStart::Forked { parent_key, .. } => {
                        format!("forked from {parent_key:?}")
                    }
                    adaptor::ThreadStart::FreshAfterRejection { .. } => {
                        "fresh session after a rejected resume".to_owned()
                    }
                };
                let line = format!("— thread {:?} · record {} · {how}", t.key, t.record_id);
                self.dim(&line);
                outln!();
            }
        }
    }
}

fn result_json(r: &RunResult, failure: Option<serde_json::Value>) -> serde_json::Value {
    serde_json::json!({
        "kind": "result",
        "run_id": r.run_id,
        "provider": r.provider,
        "text": r.text,
        "summary": r.summary,
        "usage": r.usage,
        "model": r.model,
        "checkpoint": r.checkpoint,
        "structured": r.structured,
        "exit": r.exit,
        "thread": r.thread,
        "failure": failure,
        "duration_ms": r.duration.as_secs_f64() * 1e3,
        "provider_ms": r.raw().exited.map(|d| d.as_secs_f64() * 1e3),
    })
}

/// At most `max` characters, with an ellipsis when cut.
pub fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}
