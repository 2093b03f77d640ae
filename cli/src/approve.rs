//! `adaptor run --approve ask|auto|deny`: the approval policy the flag stands for, and the
//! interactive terminal prompt that answers requests under `ask`.
//!
//! The prompt talks to the controlling terminal (`/dev/tty`), not stdin/stdout, so it works
//! with `--json` and with piped output. Without a terminal every request is denied with a
//! message on stderr — never approved. Requests are asked one at a time. Must not: decide
//! anything the user did not type (an empty or unrecognised answer declines).

use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::status::StatusLine;
use adaptor::{
    ApprovalHandler, ApprovalKind, ApprovalPolicy, ApprovalRequest, DecisionMode, Fallback,
    QuestionMode, Resolution,
};

/// How long a person at the terminal has for each request.
pub const TERMINAL_TIMEOUT: Duration = Duration::from_secs(300);

/// The `--approve` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Approve {
    /// Ask at the terminal (no terminal: deny).
    Ask,
    /// Approve permissions and plans without asking; decline questions; the agent carries on.
    Auto,
    /// Deny everything without asking; the agent carries on without the tool.
    Deny,
}

impl Approve {
    /// The approval policy for this flag value, for a driver with `caps`: an approval kind
    /// the driver cannot handle in this mode (Codex and ACP agents have no plan review) is
    /// left to the CLI's own setting (`inherit`) instead of refusing the whole run.
    pub fn policy_for(self, caps: &adaptor::ApprovalCaps) -> ApprovalPolicy {
        let mut policy = self.policy();
        let supports = |modes: &adaptor::DecisionModes, mode: DecisionMode| match mode {
            DecisionMode::Ask => modes.ask,
            DecisionMode::AutoApprove => modes.auto_approve,
            DecisionMode::AutoDeny => modes.auto_deny,
            _ => true,
        };
        if !supports(&caps.permission, policy.permission) {
            policy.permission = DecisionMode::Inherit;
        }
        if !supports(&caps.plan_review, policy.plan_review) {
            policy.plan_review = DecisionMode::Inherit;
        }
        let question = match policy.question {
            QuestionMode::Ask => caps.question.ask,
            QuestionMode::AutoDeny => caps.question.auto_deny,
            _ => true,
        };
        if !question {
            policy.question = QuestionMode::Inherit;
        }
        policy
    }

    /// The approval policy for this flag value.
    pub fn policy(self) -> ApprovalPolicy {
        let base = ApprovalPolicy::default();
        match self {
            Approve::Ask => ApprovalPolicy {
                permission: DecisionMode::Ask,
                plan_review: DecisionMode::Ask,
                question: QuestionMode::Ask,
                timeout: Some(TERMINAL_TIMEOUT),
                ..base
            },
            Approve::Auto => ApprovalPolicy {
                permission: DecisionMode::AutoApprove,
                plan_review: DecisionMode::AutoApprove,
                question: QuestionMode::AutoDeny,
                on_reject: Fallback::Continue,
                ..base
            },
            Approve::Deny => ApprovalPolicy {
                permission: DecisionMode::AutoDeny,
                plan_review: DecisionMode::AutoDeny,
                question: QuestionMode::AutoDeny,
                on_reject: Fallback::Continue,
                ..base
            },
        }
    }
}

/// The handler behind `--approve ask`. The status line stays hidden while a request is
/// asked, so the prompt owns the terminal.
pub fn terminal_handler(status: StatusLine) -> ApprovalHandler {
    let one_at_a_time = Arc::new(tokio::sync::Mutex::new(()));
    ApprovalHandler::new(move |req: ApprovalRequest| {
        let lock = one_at_a_time.clone();
        let status = status.clone();
        async move {
            let _turn = lock.lock().await;
            if req.resolution().is_some() {
                return;
            }
            let _prompting = status.pause();
            let (tx, rx) = tokio::sync::oneshot::channel();
            let question = req.clone();
            let typed = Arc::new(AtomicBool::new(false));
            let typed_here = typed.clone();
            // A plain thread: a blocked terminal read must not keep the runtime from
            // shutting down when the run ends first.
            std::thread::spawn(move || {
                let _ = tx.send(ask_at_terminal(&question, &typed_here));
            });
            tokio::select! {
                asked = rx => {
                    let outcome = match asked {
                        Ok(Ok(())) => Ok(()),
                        Ok(Err(no_tty)) => {
                            crate::errln!("adaptor: {no_tty}; approval `{}` denied", req.id);
                            req.deny(format!("{no_tty} (adaptor run --approve ask)"))
                        }
                        Err(_) => req.deny("the terminal prompt failed"),
                    };
                    if let Err(e) = outcome {
                        crate::errln!("adaptor: {e}");
                    }
                }
                resolution = req.settled() => {
                    if !typed.load(Ordering::SeqCst) {
                        crate::errln!("\nadaptor: approval `{}` ended while waiting: {resolution}", req.id);
                    }
                }
            }
        }
    })
}

/// Ask `req` on `/dev/tty` and answer it. `Err` when there is no terminal.
fn ask_at_terminal(req: &ApprovalRequest, typed: &AtomicBool) -> Result<(), String> {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(|e| format!("no terminal to ask on ({e})"))?;
    let mut out = tty.try_clone().map_err(|e| format!("terminal: {e}"))?;
    let mut input = BufReader::new(tty);
    let clean = crate::output::sanitize;
    let _ = writeln!(out, "\n? {}", clean(&req.title));
    if let Some(tool) = &req.tool_name {
        let _ = writeln!(out, "  tool: {}", clean(tool));
    }
    if let Some(details) = &req.details {
        let text = match details.get("plan").and_then(|p| p.as_str()) {
            Some(plan) => plan.to_owned(),
            None => details.to_string(),
        };
        let _ = writeln!(out, "  {}", clean(&crate::view::truncate(&text, 2000)));
    }
    let mut read = |prompt: &str| -> Option<String> {
        let _ = write!(out, "{prompt}");
        let _ = out.flush();
        let mut line = String::new();
        let read = match input.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim().to_owned()),
        };
        typed.store(true, Ordering::SeqCst);
        read
    };
    let answered = match req.kind {
        ApprovalKind::Question => question(req, &mut read),
        _ => match read("  approve? [y/N] ").as_deref() {
            Some("y" | "Y" | "yes" | "Yes") => req.approve(),
            _ => req.deny("denied at the terminal"),
        },
    };
    match answered {
        Ok(()) => Ok(()),
        // Resolved elsewhere meanwhile (timeout, cancel): nothing to do.
        Err(e) => {
            crate::errln!("adaptor: {e}");
            Ok(())
        }
    }
}

/// A question: a number or a choice key; empty declines.
fn question(
    req: &ApprovalRequest,
    read: &mut dyn FnMut(&str) -> Option<String>,
) -> Result<(), adaptor::ApprovalError> {
    let mut listing = String::new();
    for (i, c) in req.choices.iter().enumerate() {
        listing.push_str(&format!(
            "  {}) {}",
            i + 1,
            crate::output::sanitize(&c.label)
        ));
        if let Some(d) = &c.description {
            listing.push_str(&format!(" — {}", crate::output::sanitize(d)));
        }
        listing.push('\n');
    }
    let prompt = if req.choices.is_empty() {
        "  answer (empty declines): ".to_owned()
    } else {
        format!("{listing}  choice (number or key, empty declines): ")
    };
    for _ in 0..3 {
        let Some(text) = read(&prompt) else { break };
        if text.is_empty() {
            break;
        }
        let key = match text.parse::<usize>() {
            Ok(n) if n >= 1 && n <= req.choices.len() => req.choices[n - 1].key.clone(),
            _ => text,
        };
        match req.answer(key) {
            Err(adaptor::ApprovalError::InvalidChoice { .. }) => continue,
            other => return other,
        }
    }
    req.deny("declined at the terminal")
}

/// How an approval ended, for the readable view.
pub fn describe(resolution: &Resolution, by_policy: bool) -> String {
    let who = if by_policy { " by policy" } else { "" };
    match resolution {
        Resolution::Approved { .. } => format!("approved{who}"),
        Resolution::Answered { answer } => {
            format!("answered `{}`", crate::output::sanitize(answer))
        }
        Resolution::Denied { reason } => {
            format!("denied{who}: {}", crate::output::sanitize(reason))
        }
        other => other.to_string(),
    }
}
