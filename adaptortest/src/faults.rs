//! Fault injection over a cassette. Every variant must give a typed failure or a well-formed
//! partial result: never a trap, a broken event lifecycle, a valid checkpoint on a failed run,
//! or lost raw bytes.
//!
//! | id | fault |
//! |---|---|
//! | FLT-01 | stdout split into two chunks at every byte offset, and into 1-byte chunks: events and outcome identical to the unsplit replay |
//! | FLT-02 | stdout truncated at every line boundary (exit 0) and in the middle of every line (exit 1); success only if the terminal frame survived |
//! | FLT-03 | a crash mid-turn (exit 1 and SIGKILL) and a kill after complete output: always a failure |
//! | FLT-04 | a 20 MiB single line before the last line |
//! | FLT-05 | invalid UTF-8 inside the first line |
//! | FLT-06 | the last line (the terminal frame) duplicated |
//! | FLT-07 | no output for longer than the idle watchdog (through the real pipeline): stopped, `timeout`, nothing left running |
//!
//! Variants 01–06 run through [`adaptor::replay::replay_session`] (exact chunking, no
//! processes); 07 needs a process. Must not: print.

use std::time::Duration;

use adaptor::cassette::{Cassette, CassetteChunk};
use adaptor::replay::{SessionReplay, replay_session};
use adaptor::{Driver, Error, ExitInfo, FailureReason, RunOptions, StreamKind};
use std::collections::BTreeSet;

use serde_json::Value;

use crate::check::{ClauseResult, Status};
use crate::replay::{ReplayOptions, replay_cassette};

fn exit(code: Option<i32>, signal: Option<i32>) -> ExitInfo {
    ExitInfo {
        code,
        signal,
        ..ExitInfo::default()
    }
}

/// An event as JSON without what legitimately differs between replays (run id, sequence,
/// time).
fn normalized_events(replay: &SessionReplay) -> Vec<Value> {
    replay
        .events
        .iter()
        .map(|e| {
            let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
            if let Some(map) = v.as_object_mut() {
                for key in ["run_id", "sequence", "time_ms"] {
                    map.remove(key);
                }
            }
            v
        })
        .collect()
}

/// The outcome as JSON without run id and duration.
fn normalized_outcome(replay: &SessionReplay) -> Value {
    let (res, failure) = match &replay.result {
        Ok(r) => (Some(r), Value::Null),
        Err(Error::Run(e)) => (
            Some(&e.result),
            serde_json::json!([e.reason.as_str(), e.message]),
        ),
        Err(other) => (None, Value::String(other.to_string())),
    };
    match res {
        Some(r) => serde_json::json!({
            "text": r.text, "summary": r.summary, "usage": r.usage, "model": r.model,
            "checkpoint": r.checkpoint, "transcript": r.transcript(), "terminal": r.terminal(),
            "failure": failure,
        }),
        None => failure,
    }
}

/// The uniform properties; returns what was wrong. Violations of clauses in `known` (already
/// failed on clean input, reported under their own id) are not repeated here.
fn properties(replay: &SessionReplay, fed_stdout: &[u8], known: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    match &replay.result {
        Err(
            e @ (Error::DriverTrap { .. }
            | Error::LimitExceeded { .. }
            | Error::DriverContract { .. }),
        ) => {
            problems.push(e.to_string());
            return problems;
        }
        Err(Error::Run(_)) | Ok(_) => {}
        Err(other) => problems.push(format!("unexpected error: {other}")),
    }
    for v in crate::clauses::check_events(&replay.events)
        .into_iter()
        .chain(crate::clauses::check_result(&replay.events, &replay.result))
    {
        if !known.contains(v.clause) {
            problems.push(v.to_string());
        }
    }
    let raw = match &replay.result {
        Ok(r) => Some(r.raw()),
        Err(Error::Run(e)) => Some(e.result.raw()),
        Err(_) => None,
    };
    if raw.is_some_and(|raw| raw.stdout != fed_stdout) {
        problems.push("raw stdout differs from the bytes fed".into());
    }
    problems
}

struct Faults<'a> {
    driver: &'a Driver,
    prompt: String,
    options: RunOptions,
    stderr: Vec<u8>,
}

impl Faults<'_> {
    async fn replay(&self, stdout_chunks: Vec<Vec<u8>>, exit: ExitInfo) -> SessionReplay {
        let mut chunks: Vec<(StreamKind, Vec<u8>)> = stdout_chunks
            .into_iter()
            .map(|c| (StreamKind::Stdout, c))
            .collect();
        if !self.stderr.is_empty() {
            chunks.push((StreamKind::Stderr, self.stderr.clone()));
        }
        replay_session(self.driver, &self.prompt, &self.options, &chunks, exit).await
    }
}

/// Run every fault against one cassette; one result per fault id. `known` lists clause ids
/// that already failed on clean replays; their violations are not counted again.
pub async fn inject_faults(
    driver: &Driver,
    name: &str,
    cassette: &Cassette,
    known: &BTreeSet<String>,
) -> Vec<ClauseResult> {
    let stdout = cassette.bytes(StreamKind::Stdout);
    let mut options = RunOptions::new();
    if let Some(m) = &cassette.model {
        options = options.model(m.clone());
    }
    let f = Faults {
        driver,
        prompt: cassette.prompt.clone().unwrap_or_else(|| "replay".into()),
        options,
        stderr: cassette.bytes(StreamKind::Stderr),
    };
    let recorded_exit = exit(cassette.exit.code, cassette.exit.signal);
    let mut results = Vec::new();
    let mut verdict = |id: &str, problems: Vec<String>, pass: String| {
        let (status, reason) = if problems.is_empty() {
            (Status::Pass, pass)
        } else {
            let shown: Vec<String> = problems.iter().take(3).cloned().collect();
            let more = problems.len().saturating_sub(3);
            let tail = if more > 0 {
                format!(" (+{more} more)")
            } else {
                String::new()
            };
            (Status::Fail, format!("{name}: {}{tail}", shown.join("; ")))
        };
        results.push(ClauseResult {
            id: id.to_owned(),
            status,
            reason,
        });
    };

    // FLT-01: chunking.
    let base = f.replay(vec![stdout.clone()], recorded_exit).await;
    let (base_events, base_outcome) = (normalized_events(&base), normalized_outcome(&base));
    let mut problems = properties(&base, &stdout, known);
    let mut splits = 0;
    for k in 1..stdout.len() {
        let r = f
            .replay(
                vec![stdout[..k].to_vec(), stdout[k..].to_vec()],
                recorded_exit,
            )
            .await;
        splits += 1;
        if normalized_events(&r) != base_events || normalized_outcome(&r) != base_outcome {
            problems.push(format!(
                "splitting stdout at byte {k} changes the events or outcome"
            ));
            break;
        }
    }
    let bytewise = f
        .replay(stdout.iter().map(|b| vec![*b]).collect(), recorded_exit)
        .await;
    if normalized_events(&bytewise) != base_events || normalized_outcome(&bytewise) != base_outcome
    {
        problems.push("1-byte chunks change the events or outcome".into());
    }
    verdict(
        "FLT-01",
        problems,
        format!("{name}: {splits} split points and 1-byte chunks agree"),
    );

    // FLT-02: truncation.
    let terminal = match &base.result {
        Ok(r) => r.terminal().map(|t| t.json.clone()),
        Err(Error::Run(e)) => e.result.terminal().map(|t| t.json.clone()),
        Err(_) => None,
    };
    let mut problems = Vec::new();
    let mut cuts = Vec::new();
    let mut line_start = 0;
    for (i, b) in stdout.iter().enumerate() {
        if *b == b'\n' {
            if i + 1 < stdout.len() {
                cuts.push((i + 1, Some(0)));
            }
            let mid = line_start + (i - line_start) / 2;
            if mid > line_start {
                cuts.push((mid, Some(1)));
            }
            line_start = i + 1;
        }
    }
    for (cut, code) in &cuts {
        let fed = stdout[..*cut].to_vec();
        let r = f.replay(vec![fed.clone()], exit(*code, None)).await;
        let mut p = properties(&r, &fed, known);
        let intact = terminal
            .as_ref()
            .is_some_and(|t| String::from_utf8_lossy(&fed).contains(t.as_str()));
        if r.result.is_ok() && !intact {
            p.push(format!("truncated at byte {cut} yet reported success"));
        }
        problems.extend(p.into_iter().map(|x| format!("cut at {cut}: {x}")));
    }
    verdict(
        "FLT-02",
        problems,
        format!("{name}: {} truncations", cuts.len()),
    );

    // FLT-03: crashes.
    let mut problems = Vec::new();
    let last_line_start = stdout[..stdout.len().saturating_sub(1)]
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let partial = stdout[..last_line_start].to_vec();
    for (label, fed, status) in [
        ("exit 1 mid-turn", partial.clone(), exit(Some(1), None)),
        ("SIGKILL mid-turn", partial, exit(None, Some(9))),
        (
            "SIGKILL after complete output",
            stdout.clone(),
            exit(None, Some(9)),
        ),
    ] {
        let r = f.replay(vec![fed.clone()], status).await;
        let mut p = properties(&r, &fed, known);
        if r.result.is_ok() {
            p.push("reported success".into());
        }
        problems.extend(p.into_iter().map(|x| format!("{label}: {x}")));
    }
    verdict("FLT-03", problems, format!("{name}: crashes are failures"));

    // FLT-04: a 20 MiB line.
    let mut huge = stdout[..last_line_start].to_vec();
    huge.extend(std::iter::repeat_n(b'x', 20 << 20));
    huge.push(b'\n');
    huge.extend_from_slice(&stdout[last_line_start..]);
    let chunks: Vec<Vec<u8>> = huge.chunks(64 << 10).map(<[u8]>::to_vec).collect();
    let r = f.replay(chunks, recorded_exit).await;
    verdict(
        "FLT-04",
        properties(&r, &huge, known),
        format!("{name}: 20 MiB line handled"),
    );

    // FLT-05: invalid UTF-8.
    let mut broken = stdout.clone();
    let at = stdout
        .iter()
        .position(|b| *b == b'\n')
        .unwrap_or(stdout.len())
        / 2;
    broken.splice(at..at, [0xff, 0xfe, 0xc3]);
    let r = f.replay(vec![broken.clone()], recorded_exit).await;
    verdict(
        "FLT-05",
        properties(&r, &broken, known),
        format!("{name}: invalid UTF-8 handled"),
    );

    // FLT-06: duplicated terminal frame.
    let mut doubled = stdout.clone();
    doubled.extend_from_slice(&stdout[last_line_start..]);
    let r = f.replay(vec![doubled.clone()], recorded_exit).await;
    verdict(
        "FLT-06",
        properties(&r, &doubled, known),
        format!("{name}: duplicated last frame handled"),
    );

    // FLT-07: silence longer than the watchdog, through the real pipeline.
    let mut silent = cassette.clone();
    // Far longer than the watchdog, so the clause means "stopped during the silence" even on a
    // loaded machine; a passing run never waits for it.
    let gap_ms = 30_000.0;
    let first_line_end = stdout
        .iter()
        .position(|b| *b == b'\n')
        .map_or(stdout.len(), |i| i + 1);
    let mut rest = stdout[first_line_end..].to_vec();
    if rest.is_empty() {
        rest = b"late\n".to_vec();
    }
    silent.chunks.retain(|c| c.stream == StreamKind::Stdin);
    silent.chunks.push(CassetteChunk::new(
        0.0,
        StreamKind::Stdout,
        &stdout[..first_line_end],
    ));
    silent
        .chunks
        .push(CassetteChunk::new(gap_ms, StreamKind::Stdout, &rest));
    if !f.stderr.is_empty() {
        silent
            .chunks
            .push(CassetteChunk::new(gap_ms, StreamKind::Stderr, &f.stderr));
    }
    let opts = ReplayOptions {
        timing: crate::replay::Timing::Recorded,
        idle_timeout: Some(Duration::from_millis(400)),
        ..ReplayOptions::default()
    };
    let mut problems = Vec::new();
    match replay_cassette(driver, &silent, &opts).await {
        Ok(r) => {
            match &r.result {
                Err(Error::Run(e))
                    if e.reason == FailureReason::Timeout && e.result.exit.no_output =>
                {
                    // Evidence, not a stopwatch: what the provider would have written after
                    // the silence never arrived.
                    if e.result.raw().stdout.len() > first_line_end {
                        problems.push(
                            "the watchdog did not stop the silent provider before its output resumed"
                                .into(),
                        );
                    }
                }
                other => problems.push(format!(
                    "expected an idle timeout, got {:?}",
                    other.as_ref().map(|x| &x.text)
                )),
            }
            problems.extend(
                crate::clauses::check_events(&r.events)
                    .iter()
                    .map(ToString::to_string),
            );
        }
        Err(e) => problems.push(e.to_string()),
    }
    verdict(
        "FLT-07",
        problems,
        format!("{name}: silent provider stopped by the watchdog"),
    );
    results
}
