//! The live status line: a spinner, the run's elapsed time and what the agent is doing
//! ("starting claude", "thinking", "running Bash", "waiting for approval"), drawn on stderr
//! while a run works and nothing is being printed.
//!
//! Owns when the line may appear: only in the readable view, only when stdout **and** stderr
//! are terminals (so it never reaches a pipe, a file or a log), not with `TERM=dumb` or
//! `ADAPTOR_LOG` (log lines would tear it), and only at the start of a line after a short
//! quiet spell ([`QUIET_BEFORE_SHOWING`]), so streaming text never flickers. It is cleared
//! before anything else is printed, and paused while an approval prompt owns the terminal.
//! Must not: print data (that is the view's), or decide what the agent is doing (the view
//! tells it).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long output must be quiet before the status line appears.
pub const QUIET_BEFORE_SHOWING: Duration = Duration::from_millis(250);

/// A handle to the status line (clones share it; a disabled one does nothing).
#[derive(Clone)]
pub struct StatusLine {
    inner: Option<Arc<Mutex<Inner>>>,
}

struct Inner {
    bar: Option<ProgressBar>,
    activity: String,
    started: Instant,
    pauses: usize,
}

/// While alive, the status line stays hidden (an approval prompt is using the terminal).
pub struct Paused {
    line: StatusLine,
}

impl Drop for Paused {
    fn drop(&mut self) {
        if let Some(mut inner) = self.line.lock() {
            inner.pauses = inner.pauses.saturating_sub(1);
        }
    }
}

/// Whether this process may draw a status line (see the module docs).
pub fn terminal_allows_status() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal()
        && std::io::stderr().is_terminal()
        && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
        && std::env::var_os("ADAPTOR_LOG").is_none()
}

impl StatusLine {
    /// A status line that draws (when `enabled`) or does nothing.
    pub fn new(enabled: bool, activity: impl Into<String>) -> Self {
        if !enabled {
            return Self { inner: None };
        }
        Self {
            inner: Some(Arc::new(Mutex::new(Inner {
                bar: None,
                activity: activity.into(),
                started: Instant::now(),
                pauses: 0,
            }))),
        }
    }

    fn lock(&self) -> Option<MutexGuard<'_, Inner>> {
        self.inner
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Whether it can ever draw.
    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Say what the agent is doing now (shown at once if the line is visible).
    pub fn set_activity(&self, activity: impl Into<String>) {
        if let Some(mut inner) = self.lock() {
            inner.activity = activity.into();
            let message = inner.activity.clone();
            if let Some(bar) = &inner.bar {
                bar.set_message(message);
            }
        }
    }

    /// Draw the line, unless it is visible already or paused.
    pub fn show(&self) {
        let Some(mut inner) = self.lock() else { return };
        if inner.bar.is_some() || inner.pauses > 0 {
            return;
        }
        let style = ProgressStyle::with_template("{spinner:.cyan} {msg} {seconds:.dim}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner())
            .with_key(
                "seconds",
                |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.1}s", state.elapsed().as_secs_f64());
                },
            )
            .tick_chars("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏ ");
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
            .with_style(style)
            .with_elapsed(inner.started.elapsed())
            .with_message(inner.activity.clone());
        bar.enable_steady_tick(Duration::from_millis(100));
        inner.bar = Some(bar);
    }

    /// Clear the line (before anything is printed).
    pub fn hide(&self) {
        if let Some(mut inner) = self.lock()
            && let Some(bar) = inner.bar.take()
        {
            bar.finish_and_clear();
        }
    }

    /// Whether the line is on the screen now.
    pub fn visible(&self) -> bool {
        self.lock().is_some_and(|inner| inner.bar.is_some())
    }

    /// Hide the line and keep it hidden until the guard is dropped.
    pub fn pause(&self) -> Paused {
        if let Some(mut inner) = self.lock() {
            inner.pauses += 1;
            if let Some(bar) = inner.bar.take() {
                bar.finish_and_clear();
            }
        }
        Paused { line: self.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disabled_line_never_becomes_visible() {
        let line = StatusLine::new(false, "starting");
        line.show();
        assert!(!line.visible() && !line.enabled());
    }

    #[test]
    fn a_paused_line_stays_hidden_until_resumed() {
        // Under `cargo test` stderr is not a terminal: indicatif draws nothing, but the
        // state machine is the same.
        let line = StatusLine::new(true, "starting");
        line.show();
        assert!(line.visible());
        let paused = line.pause();
        assert!(!line.visible());
        line.show();
        assert!(!line.visible(), "a prompt owns the terminal");
        drop(paused);
        line.show();
        assert!(line.visible());
        line.set_activity("thinking");
        line.hide();
        assert!(!line.visible());
    }
}
