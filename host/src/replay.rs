//! Session replay: feed recorded bytes straight into a fresh sandboxed driver session — no
//! process, no grant, no timing — with the same driver calls, event validation, sequencing
//! and result classification as a run.
//!
//! It exists for the conformance kit's exact checks (any chunk split, truncations, injected
//! faults) and for fuzzing, where spawning a process per variant would be too slow and the OS
//! would decide the chunking. Runs always go through the pipeline; this never spawns.
//! Approval requests are answered `unanswered` at once, stdin writes are collected in
//! `raw().stdin`, timers and signals are recorded as notices and otherwise ignored.

use std::path::Path;
use std::time::Instant;

use crate::RunOptions;
use crate::driver::Driver;
use crate::error::Error;
use crate::event::blank_meta;
use crate::event::{Event, Notice, RunStarted};
use crate::result::{ChunkRecord, ExitInfo, LaunchRecord, RawStreams, RunResult, StreamKind};
use crate::run::{Classify, classify, finished_event, new_run_id};
use crate::session::{Action, Decision, SessionExit};
use crate::stream::stamp;
use crate::wasm::convert::build_request;
use crate::wasm::guest::GuestInstance;

/// What a session replay produced.
#[derive(Debug)]
pub struct SessionReplay {
    /// Every event, stamped like a run's (process chunk reports excluded).
    pub events: Vec<Event>,
    /// The result, classified exactly as a run's would be.
    pub result: Result<RunResult, Error>,
}

struct Collector {
    run_id: String,
    driver: String,
    sequence: u64,
    events: Vec<Event>,
}

impl Collector {
    fn push(&mut self, mut event: Event) {
        self.sequence = stamp(&mut event, &self.run_id, &self.driver, self.sequence);
        self.events.push(event);
    }

    fn notice(&mut self, kind: &str, message: String) {
        self.push(Event::Notice(Notice {
            meta: blank_meta(),
            notice: kind.to_owned(),
            message,
            data: None,
        }));
    }
}

/// Replay `chunks` (stdin chunks are ignored: they are the host's own writes) through a
/// fresh session of `driver` for `prompt`, then report `exit`.
pub async fn replay_session(
    driver: &Driver,
    prompt: &str,
    options: &RunOptions,
    chunks: &[(StreamKind, Vec<u8>)],
    exit: ExitInfo,
) -> SessionReplay {
    let name = driver.name().to_owned();
    let run_id = new_run_id();
    let mut out = Collector {
        run_id: run_id.clone(),
        driver: name.clone(),
        sequence: 0,
        events: Vec::new(),
    };
    let started = Instant::now();
    let result = drive(
        driver, prompt, options, chunks, exit, &mut out, &run_id, started,
    )
    .await;
    let finished = finished_event(&result);
    if !out.events.is_empty() {
        out.push(Event::RunFinished(finished));
    }
    SessionReplay {
        events: out.events,
        result,
    }
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    driver: &Driver,
    prompt: &str,
    options: &RunOptions,
    chunks: &[(StreamKind, Vec<u8>)],
    exit: ExitInfo,
    out: &mut Collector,
    run_id: &str,
    started: Instant,
) -> Result<RunResult, Error> {
    let name = driver.name().to_owned();
    let workspace = Path::new("/adaptor-replay/workspace");
    let instance = GuestInstance::new(
        driver.loaded.name.clone(),
        &driver.loaded.pre,
        crate::wasm::guest::GuestLimits::default(),
    )
    .await?;
    let request = build_request(
        run_id,
        prompt,
        driver.config.to_string(),
        options.request_options(&[], &[]),
        None,
        workspace,
        Path::new("/adaptor-replay/private"),
        None,
        crate::wasm::convert::Resources::default(),
    );
    let mut session = instance.open_session(&request).await?;
    let launch = session.start().await?;
    out.push(Event::RunStarted(RunStarted {
        meta: blank_meta(),
        program: launch.program.clone(),
        model: options.model.clone(),
    }));
    let mut raw = RawStreams {
        stdin: launch.stdin.clone(),
        launch: Some(std::sync::Arc::new(LaunchRecord {
            program: launch.program.clone(),
            resolved: launch.program.clone().into(),
            args: launch.args.clone(),
            cwd: workspace.to_path_buf(),
            process: None,
            containment: None,
        })),
        ..RawStreams::default()
    };
    for (stream, bytes) in chunks {
        let target = match stream {
            StreamKind::Stdout => &mut raw.stdout,
            StreamKind::Stderr => &mut raw.stderr,
            StreamKind::Stdin => continue,
        };
        let offset = target.len();
        target.extend_from_slice(bytes);
        raw.chunks.push(ChunkRecord {
            stream: *stream,
            at: started.elapsed(),
            offset,
            len: bytes.len(),
        });
        let actions = match stream {
            StreamKind::Stdout => session.on_stdout(bytes).await?,
            _ => session.on_stderr(bytes).await?,
        };
        apply(&mut session, actions, out, &mut raw).await?;
    }
    let status = SessionExit {
        code: exit.code,
        signal: exit.signal,
        timed_out: exit.timed_out,
        cancelled: exit.cancelled,
    };
    let actions = session.on_exit(status).await?;
    for action in actions {
        if let Action::Emit(e) = action {
            out.push(*e);
        }
    }
    let outcome = session.finish(&driver.descriptor().sessions.codec).await?;
    let mut notices = Vec::new();
    let result = classify(
        &Classify {
            driver: name,
            run_id: run_id.to_owned(),
            timeout: None,
            idle: None,
            started,
            host_failure: None,
        },
        outcome,
        raw,
        exit,
        &mut notices,
    );
    for (kind, message) in notices {
        out.notice(&kind, message);
    }
    result
}

async fn apply(
    session: &mut crate::wasm::guest::GuestSession,
    actions: Vec<Action>,
    out: &mut Collector,
    raw: &mut RawStreams,
) -> Result<(), Error> {
    let mut pending = std::collections::VecDeque::from(actions);
    while let Some(action) = pending.pop_front() {
        match action {
            Action::Emit(e) => out.push(*e),
            Action::WriteStdin(bytes) => raw.stdin.extend_from_slice(&bytes),
            Action::RequestApproval(req) => {
                out.notice(
                    "approval.unanswered",
                    format!("replay: approval `{}` reported unanswered", req.id),
                );
                let more = session.on_decision(&req.id, &Decision::Unanswered).await?;
                pending.extend(more);
            }
            Action::SetTimer { id, .. } => {
                out.notice("replay.timer", format!("timer {id} ignored in replay"))
            }
            Action::Signal(s) => {
                out.notice("replay.signal", format!("signal {s:?} ignored in replay"))
            }
            Action::CloseStdin | Action::CancelTimer(_) | Action::EndTurn => {}
        }
    }
    Ok(())
}
