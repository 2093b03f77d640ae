//! Classification: a driver's outcome plus the process facts → the run's result. Pure (no
//! I/O, no events): host corrections are returned as notices for the caller to emit.
//!
//! The order of precedence for a failure: host knowledge first (cancel, timeout, an approval
//! outcome or the output limit), then the driver's reported failure, then an abnormal exit. A
//! checkpoint a driver marked valid on a failed run is invalidated, with a notice.

use std::time::{Duration, Instant};

use crate::error::{Error, FailureReason, RunError};
use crate::event::RunFinished;
use crate::event::blank_meta;
use crate::process;
use crate::result::{ExitInfo, RawStreams, RunResult};
use crate::session::DriverOutcome;

/// The `RunFinished` event describing `result`.
pub(crate) fn finished_event(result: &Result<RunResult, Error>) -> RunFinished {
    match result {
        Ok(r) => RunFinished {
            meta: blank_meta(),
            usage: r.usage.clone(),
            failed: false,
            reason: None,
            message: None,
        },
        Err(Error::Run(e)) => RunFinished {
            meta: blank_meta(),
            usage: e.result.usage.clone(),
            failed: true,
            reason: Some(e.reason.clone()),
            message: Some(e.message.clone()),
        },
        Err(other) => RunFinished {
            meta: blank_meta(),
            usage: None,
            failed: true,
            reason: None,
            message: Some(other.to_string()),
        },
    }
}

/// Notice kind emitted when the host invalidates a checkpoint a driver claimed valid on a
/// failed run (conformance clause RSP-01 looks for it).
pub const CHECKPOINT_INVALIDATED: &str = "checkpoint.invalidated";

/// Notice kind emitted when the host shortens a driver's summary to [`SUMMARY_MAX_BYTES`].
pub const SUMMARY_TRUNCATED: &str = "summary.truncated";

/// The longest summary a run result carries, in bytes: a summary is a line for a list or a
/// log, not a second copy of the answer. Longer ones are cut at a character boundary (and
/// end with `…`); the full text stays in `text` or the raw terminal payload, and a
/// [`SUMMARY_TRUNCATED`] notice says so.
pub const SUMMARY_MAX_BYTES: usize = 1024;

/// `summary` bounded to [`SUMMARY_MAX_BYTES`]; the original length when it was cut.
fn bound_summary(summary: String) -> (String, Option<usize>) {
    if summary.len() <= SUMMARY_MAX_BYTES {
        return (summary, None);
    }
    let original = summary.len();
    let mut cut = SUMMARY_MAX_BYTES - '…'.len_utf8();
    while !summary.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut bounded = summary;
    bounded.truncate(cut);
    bounded.push('…');
    (bounded, Some(original))
}

/// Facts about a run that classification needs.
pub(crate) struct Classify {
    pub driver: String,
    pub run_id: String,
    pub timeout: Option<Duration>,
    pub idle: Option<Duration>,
    pub started: Instant,
    /// A failure the host knows of: an approval outcome that ended the run (denied or timed
    /// out with `abort`, unanswered) or the output limit.
    pub host_failure: Option<(FailureReason, String)>,
}

/// Turn a driver's outcome (already validated at the `wasm/` boundary) plus the process
/// facts into the run's result: decide success or the failure reason (host knowledge first: cancel,
/// timeout; then the driver's failure; then an abnormal exit), and invalidate a checkpoint
/// claimed on a failed run. Host corrections are appended to `notices` (kind, message) so
/// they reach the event stream: nothing is corrected silently.
pub(crate) fn classify(
    facts: &Classify,
    outcome: DriverOutcome,
    mut raw: RawStreams,
    exit: ExitInfo,
    notices: &mut Vec<(String, String)>,
) -> Result<RunResult, Error> {
    let name = facts.driver.clone();
    raw.terminal = outcome.terminal;
    let mut checkpoint = outcome.checkpoint;
    let failure = if exit.cancelled {
        Some((
            FailureReason::Cancelled,
            "the run was cancelled".to_owned(),
            None,
        ))
    } else if exit.timed_out {
        Some((
            FailureReason::Timeout,
            if exit.no_output {
                format!(
                    "the provider wrote nothing for {} ms (idle timeout)",
                    facts.idle.unwrap_or_default().as_millis()
                )
            } else {
                format!(
                    "the run exceeded its timeout of {} ms",
                    facts.timeout.unwrap_or_default().as_millis()
                )
            },
            None,
        ))
    } else if let Some((reason, message)) = facts.host_failure.clone() {
        // The host knows why the turn ended; the driver's own report stays in the transcript.
        Some((reason, message, None))
    } else if let Some(f) = outcome.failure {
        Some((f.reason, f.message, f.details))
    } else if !exit.kept_alive && (exit.code != Some(0) || exit.signal.is_some()) {
        Some((
            FailureReason::AgentError,
            format!(
                "the provider process ended unsuccessfully: {}",
                describe_exit(&exit)
            ),
            None,
        ))
    } else {
        None
    };
    if failure.is_some()
        && let Some(cp) = checkpoint.as_mut()
        && cp.is_valid()
    {
        tracing::warn!(driver = %name, "driver marked a checkpoint valid on a failed run; the host invalidated it");
        notices.push((
                CHECKPOINT_INVALIDATED.to_owned(),
                format!(
                    "driver `{name}` marked checkpoint `{}` valid on a failed run; the host invalidated it",
                    cp.resume_id()
                ),
            ));
        cp.invalidate();
    }
    let summary = outcome.summary.map(|s| {
        let (summary, cut) = bound_summary(s);
        if let Some(original) = cut {
            notices.push((
                SUMMARY_TRUNCATED.to_owned(),
                format!(
                    "driver `{name}` returned a summary of {original} bytes; the result carries its first {} (the full text is in the raw output)",
                    summary.len()
                ),
            ));
        }
        summary
    });
    let result = RunResult {
        run_id: facts.run_id.clone(),
        provider: name,
        model: outcome.model,
        text: outcome.text,
        summary,
        usage: outcome.usage,
        metadata: outcome.metadata,
        checkpoint,
        structured_output: outcome.structured_output,
        structured: None,
        exit,
        thread: None,
        duration: facts.started.elapsed(),
        raw,
        transcript: outcome.transcript,
    };
    match failure {
        None => Ok(result),
        Some((reason, message, details)) => Err(Error::Run(Box::new(RunError {
            reason,
            message,
            details,
            result,
        }))),
    }
}

/// The error of a run cancelled or timed out before its provider started (a long driver
/// call before launch was interrupted): a [`RunError`] with `reason` (`Cancelled` or
/// `Timeout`), as a run stopped a moment later has, and an empty result — no process ran.
pub(super) fn unstarted(
    run_id: &str,
    provider: String,
    started: Instant,
    reason: FailureReason,
    message: String,
) -> Error {
    let exit = ExitInfo {
        cancelled: reason == FailureReason::Cancelled,
        timed_out: reason == FailureReason::Timeout,
        ..ExitInfo::default()
    };
    Error::Run(Box::new(RunError {
        reason,
        message,
        details: None,
        result: RunResult {
            run_id: run_id.to_owned(),
            provider,
            model: None,
            text: String::new(),
            summary: None,
            usage: None,
            metadata: Default::default(),
            checkpoint: None,
            structured_output: None,
            structured: None,
            exit,
            thread: None,
            duration: started.elapsed(),
            raw: RawStreams::default(),
            transcript: Vec::new(),
        },
    }))
}

pub(super) fn exit_info(
    status: Option<std::process::ExitStatus>,
    cancelled: bool,
    timed_out: bool,
) -> ExitInfo {
    let (code, signal) = status.map(process::exit_parts).unwrap_or((None, None));
    ExitInfo {
        code,
        signal,
        timed_out,
        cancelled,
        no_output: false,
        kept_alive: false,
    }
}

pub(crate) fn describe_exit(exit: &ExitInfo) -> String {
    if exit.kept_alive {
        return "still running (kept for the thread's next turn)".into();
    }
    match (exit.code, exit.signal) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "unknown exit status".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::DriverFailure;

    fn facts(host_failure: Option<(FailureReason, String)>) -> Classify {
        Classify {
            driver: "reference".into(),
            run_id: "run-1".into(),
            timeout: Some(Duration::from_millis(1500)),
            idle: Some(Duration::from_millis(700)),
            started: Instant::now(),
            host_failure,
        }
    }

    fn outcome(failure: Option<DriverFailure>, valid_checkpoint: bool) -> DriverOutcome {
        DriverOutcome {
            text: "hello".into(),
            summary: None,
            transcript: vec![],
            terminal: None,
            usage: None,
            model: Some("reference-1".into()),
            structured_output: None,
            checkpoint: Some(crate::result::Checkpoint::from_driver(
                crate::result::SessionState {
                    codec: "reference/session/v1".into(),
                    resume_id: "ref-1".into(),
                    display_id: None,
                    data: Default::default(),
                },
                valid_checkpoint,
            )),
            failure,
            metadata: Default::default(),
        }
    }

    fn exit(code: Option<i32>, signal: Option<i32>) -> ExitInfo {
        ExitInfo {
            code,
            signal,
            ..ExitInfo::default()
        }
    }

    fn reason(result: &Result<RunResult, Error>) -> Option<FailureReason> {
        match result {
            Ok(_) => None,
            Err(Error::Run(e)) => Some(e.reason.clone()),
            Err(other) => panic!("not a run error: {other}"),
        }
    }

    #[test]
    fn a_clean_exit_with_no_failure_succeeds_and_keeps_the_checkpoint() {
        let mut notices = Vec::new();
        let r = classify(
            &facts(None),
            outcome(None, true),
            RawStreams::default(),
            exit(Some(0), None),
            &mut notices,
        )
        .unwrap();
        assert_eq!(r.text, "hello");
        assert!(r.checkpoint.unwrap().is_valid());
        assert!(notices.is_empty());
        // A kept-alive resident turn has no exit code yet and is not a failure either.
        let kept = ExitInfo {
            kept_alive: true,
            ..ExitInfo::default()
        };
        let r = classify(
            &facts(None),
            outcome(None, true),
            RawStreams::default(),
            kept,
            &mut notices,
        );
        assert!(r.is_ok());
    }

    #[test]
    fn host_knowledge_wins_over_the_driver_and_the_exit() {
        let driver_failure = || {
            Some(DriverFailure {
                reason: FailureReason::AgentError,
                message: "from the driver".into(),
                details: None,
            })
        };
        let cancelled = ExitInfo {
            cancelled: true,
            ..exit(None, Some(15))
        };
        let timed_out = ExitInfo {
            timed_out: true,
            ..exit(None, Some(15))
        };
        let idle = ExitInfo {
            timed_out: true,
            no_output: true,
            ..exit(None, Some(15))
        };
        let approval = Some((FailureReason::ApprovalDenied, "denied".to_owned()));
        let cases = [
            (None, cancelled, FailureReason::Cancelled, "cancelled"),
            (
                None,
                timed_out,
                FailureReason::Timeout,
                "timeout of 1500 ms",
            ),
            (None, idle, FailureReason::Timeout, "nothing for 700 ms"),
            (
                approval,
                exit(Some(0), None),
                FailureReason::ApprovalDenied,
                "denied",
            ),
        ];
        for (host, exit, want, text) in cases {
            let mut notices = Vec::new();
            let r = classify(
                &facts(host),
                outcome(driver_failure(), false),
                RawStreams::default(),
                exit,
                &mut notices,
            );
            assert_eq!(reason(&r), Some(want.clone()), "{want:?}");
            let Err(Error::Run(e)) = r else {
                unreachable!()
            };
            assert!(e.message.contains(text), "{}: {text}", e.message);
        }
    }

    #[test]
    fn the_driver_failure_comes_before_an_abnormal_exit() {
        let mut notices = Vec::new();
        let failure = DriverFailure {
            reason: FailureReason::ResumeRejected,
            message: "unknown session".into(),
            details: Some(serde_json::json!({"code": 7})),
        };
        let r = classify(
            &facts(None),
            outcome(Some(failure), false),
            RawStreams::default(),
            exit(Some(1), None),
            &mut notices,
        );
        let Err(Error::Run(e)) = r else {
            panic!("fails")
        };
        assert_eq!(e.reason, FailureReason::ResumeRejected);
        assert_eq!(e.details, Some(serde_json::json!({"code": 7})));
        // No driver failure, but a non-zero exit or a signal: never a success.
        for exit in [exit(Some(3), None), exit(None, Some(9))] {
            let r = classify(
                &facts(None),
                outcome(None, false),
                RawStreams::default(),
                exit,
                &mut notices,
            );
            assert_eq!(reason(&r), Some(FailureReason::AgentError));
        }
    }

    #[test]
    fn a_long_summary_is_bounded_at_a_character_boundary_with_a_notice() {
        let summarised = |text: String| {
            let mut notices = Vec::new();
            let mut o = outcome(None, true);
            o.summary = Some(text);
            let r = classify(
                &facts(None),
                o,
                RawStreams::default(),
                exit(Some(0), None),
                &mut notices,
            )
            .unwrap();
            (r.summary.unwrap(), notices)
        };
        let (summary, notices) = summarised("é".repeat(3000));
        assert!(summary.len() <= SUMMARY_MAX_BYTES, "{}", summary.len());
        assert!(summary.ends_with('…') && summary.starts_with("éé"));
        assert_eq!(notices.len(), 1);
        assert_eq!(notices[0].0, SUMMARY_TRUNCATED);
        assert!(notices[0].1.contains("6000 bytes"), "{}", notices[0].1);
        // A short one passes unchanged, without a notice.
        let (summary, notices) = summarised("Answered in 1 turn(s).".into());
        assert_eq!(summary, "Answered in 1 turn(s).");
        assert!(notices.is_empty());
        let exact = "x".repeat(SUMMARY_MAX_BYTES);
        assert_eq!(bound_summary(exact.clone()), (exact, None));
    }

    #[test]
    fn a_valid_checkpoint_on_a_failed_run_is_invalidated_with_a_notice() {
        let mut notices = Vec::new();
        let r = classify(
            &facts(None),
            outcome(None, true),
            RawStreams::default(),
            exit(Some(2), None),
            &mut notices,
        );
        let Err(Error::Run(e)) = r else {
            panic!("fails")
        };
        assert!(!e.result.checkpoint.unwrap().is_valid());
        assert_eq!(notices.len(), 1);
        assert_eq!(notices[0].0, CHECKPOINT_INVALIDATED);
    }

    #[test]
    fn finished_events_mirror_the_result() {
        let ok = classify(
            &facts(None),
            outcome(None, true),
            RawStreams::default(),
            exit(Some(0), None),
            &mut Vec::new(),
        );
        let f = finished_event(&ok);
        assert!(!f.failed && f.reason.is_none());
        let failed = classify(
            &facts(None),
            outcome(None, true),
            RawStreams::default(),
            exit(Some(1), None),
            &mut Vec::new(),
        );
        let f = finished_event(&failed);
        assert!(f.failed);
        assert_eq!(f.reason, Some(FailureReason::AgentError));
        let f = finished_event(&Err(Error::AgentClosed));
        assert!(f.failed && f.reason.is_none() && f.message.is_some());
    }
}
