//! One turn on an attached process: spawn (or take the resident process), start the
//! supervisor, and after the loop either keep the process for the thread's next turn or reap
//! its whole group, then `on-exit` → `finish` → classify.
//!
//! Must not: decide what to spawn (that is `prepare` and `grant`) or interpret provider
//! output (the driver does).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::classify::{describe_exit, exit_info};
use super::decisions::Decisions;
use super::guard::{Claims, Stage};
use super::output::OutputBudget;
use super::resident::Resident;
use super::supervise::{LoopEnd, StdinSender, Supervisor, stdin_writer};
use super::{Attach, Classify, Initial, Prepared, Run, classify};
use crate::error::{Error, FailureReason};
use crate::event::blank_meta;
use crate::event::*;
use crate::process::{self, PrivateDir};
use crate::result::{ExitInfo, LaunchRecord, RawStreams, RunResult};
use crate::session::{DriverOutcome, SessionExit};
use crate::structured;
use crate::wasm::guest::GuestSession;

/// The process a turn runs on, once attached (spawned, or the thread's resident one).
struct Attached {
    session: GuestSession,
    spawned: process::Spawned,
    launch: Arc<LaunchRecord>,
    private_dir: PrivateDir,
    /// What starts the turn.
    initial: Initial,
    /// Whether the process may stay for the thread's next turn.
    keep_alive: bool,
    /// A resident process's open stdin; a new process's stdin is piped here.
    stdin: Option<StdinPipe>,
    /// When the run attached to the process (`ChunkRecord::at` counts from it): when the
    /// host learned that the process it spawned runs, else when it took a prewarmed or
    /// resident one.
    attached_at: Instant,
}

/// An open stdin: where the turn's writes go, and the task that writes them.
struct StdinPipe {
    sender: StdinSender,
    writer: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Run {
    /// The driver's session codec (stamped on checkpoints).
    fn codec(&self) -> String {
        self.inner.driver.loaded.descriptor.sessions.codec.clone()
    }

    pub(super) async fn supervise(&mut self, attach: Attach) -> Result<RunResult, Error> {
        let name = self.driver_name();
        let Attached {
            mut session,
            mut spawned,
            launch: launch_record,
            private_dir,
            initial,
            keep_alive,
            stdin: pipe,
            attached_at,
        } = match attach {
            Attach::Spawn(prepared) => {
                let Prepared {
                    session,
                    launch,
                    spec,
                    private_dir,
                    containment,
                    secrets: _,
                    bundle: _,
                    warm,
                } = *prepared;
                let input_written = warm.as_ref().is_some_and(|w| w.input_written);
                let (spawned, attached_at) = match warm {
                    Some(super::warm::Taken {
                        spawned, waited, ..
                    }) => {
                        tracing::info!(
                            pid = spawned.pid,
                            waited_ms = waited.as_millis() as u64,
                            "the run takes a prewarmed provider process"
                        );
                        self.emitter
                            .emit(Event::Notice(Notice {
                                meta: blank_meta(),
                                notice: "process.prewarmed".into(),
                                message: format!(
                                    "this run starts on a prewarmed provider process (pid {}, started {} ms before it{})",
                                    spawned.pid,
                                    waited.as_millis(),
                                    if input_written {
                                        format!(", its launch's first {} input bytes written then", launch.stdin.len())
                                    } else {
                                        String::new()
                                    }
                                ),
                                data: Some(serde_json::json!({
                                    "pid": spawned.pid,
                                    "waited_ms": waited.as_millis() as u64,
                                    "input_written": if input_written { launch.stdin.len() } else { 0 },
                                })),
                            }))
                            .await;
                        (spawned, Instant::now())
                    }
                    None => {
                        let spawned =
                            process::spawn(&spec).await.map_err(|source| Error::Spawn {
                                driver: name.clone(),
                                program: spec.program.display().to_string(),
                                source,
                            })?;
                        let started = spawned.started;
                        (spawned, started)
                    }
                };
                tracing::info!(
                    pid = spawned.pid,
                    program = %spec.program.display(),
                    args = ?spec.args,
                    cwd = %spec.cwd.display(),
                    "launched provider process"
                );
                self.emitter
                    .emit(Event::ProcessInfo(ProcessInfo {
                        meta: blank_meta(),
                        process: ProcessInfoKind::Spawn,
                        pid: Some(spawned.pid),
                        text: format!("{} {}", spec.program.display(), spec.args.join(" ")),
                        bytes: 0,
                    }))
                    .await;
                let keep_alive = self.may_keep(&launch);
                let record = Arc::new(LaunchRecord {
                    program: launch.program.clone(),
                    resolved: spec.program.clone(),
                    args: spec.args.clone(),
                    cwd: spec.cwd.clone(),
                    process: Some(spawned.identity()),
                    containment: Some(containment),
                });
                let initial = Initial::Launch {
                    stdin: launch.stdin,
                    keep_open: launch.keep_stdin_open,
                    written: input_written,
                };
                Attached {
                    session,
                    spawned,
                    launch: record,
                    private_dir,
                    initial,
                    keep_alive,
                    stdin: None,
                    attached_at,
                }
            }
            Attach::Reuse(resident, actions) => {
                let r = *resident;
                tracing::info!(
                    pid = r.spawned.pid,
                    "next turn on the thread's resident provider process"
                );
                self.emitter
                    .emit(Event::Notice(Notice {
                        meta: blank_meta(),
                        notice: "process.reused".into(),
                        message: format!(
                            "this turn runs on the thread's resident provider process (pid {})",
                            r.spawned.pid
                        ),
                        data: Some(serde_json::json!({ "pid": r.spawned.pid })),
                    }))
                    .await;
                Attached {
                    session: r.session,
                    spawned: r.spawned,
                    launch: r.launch,
                    private_dir: r.private_dir,
                    initial: Initial::Actions(actions),
                    keep_alive: true,
                    stdin: Some(StdinPipe {
                        sender: r.stdin,
                        writer: r.stdin_writer,
                    }),
                    attached_at: Instant::now(),
                }
            }
        };
        let pid = spawned.pid;
        let pgid = spawned.guard.pgid();

        let codec = self.codec();
        let mut sup = Supervisor {
            session: &mut session,
            emitter: &mut self.emitter,
            driver: name.clone(),
            pgid,
            grace: self.inner.settings.grace_period,
            stdin: None,
            stdin_writer: None,
            timers: HashMap::new(),
            deliveries: VecDeque::new(),
            asks: Decisions::new(
                name.clone(),
                self.options.policy.unwrap_or_default().approvals,
                self.options.approval_handler.clone(),
            ),
            stopping: false,
            terminate_at: None,
            kill_at: None,
            turn_ended: false,
            raw: RawStreams {
                launch: Some(launch_record.clone()),
                ..RawStreams::default()
            },
            spawned_at: attached_at,
            idle_fired: false,
            budget: OutputBudget::new(
                self.inner.settings.max_output_bytes,
                self.inner.settings.max_line_bytes,
            ),
            claims: Claims::default(),
            violation: None,
            withheld: 0,
            limits: self.inner.settings.limits,
            used: Default::default(),
            steer: self.steer.as_mut(),
        };
        match pipe {
            Some(StdinPipe { sender, writer }) => {
                sup.stdin = Some(sender);
                sup.stdin_writer = writer;
            }
            None => {
                if let Some(stdin) = spawned.stdin.take() {
                    let (sender, writer) = stdin_writer(stdin);
                    sup.stdin_writer = Some(writer);
                    sup.stdin = Some(sender);
                }
            }
        }
        match initial {
            Initial::Launch {
                stdin,
                keep_open,
                written,
            } => {
                if written {
                    sup.record_written_before(stdin);
                } else if !stdin.is_empty() {
                    sup.write_stdin(stdin).await;
                }
                if !keep_open {
                    sup.stdin = None;
                }
            }
            Initial::Actions(actions) => sup.apply(EventSource::NextTurn, actions).await?,
        }

        // A long guest call is interrupted when the run is cancelled (Ctrl-C, `cancel`) or
        // reaches its timeout: the session answers to the run's `interrupt` since its first
        // call for this run. The run's timeout counts from the start of the run: what
        // preparing it took (the driver's `start`, writing its private files) is spent.
        let timeout = self
            .options
            .timeout
            .map(|t| t.saturating_sub(self.started.elapsed()));
        let outcome = sup
            .run_loop(
                &mut spawned,
                &self.cancel,
                timeout,
                self.inner.settings.end_turn_grace,
                self.inner.settings.idle_timeout,
                keep_alive,
            )
            .await;
        let exited = match outcome {
            Ok(LoopEnd::Exited {
                status,
                cancelled,
                timed_out,
            }) => Ok((status, cancelled, timed_out)),
            Err(e) => Err(e),
            Ok(LoopEnd::KeptAlive) => {
                // The turn ended and the process lives on for the thread's next turn.
                let outcome = sup.session.finish(&codec).await?;
                if let Err(v) = sup.claims.check_outcome(&outcome) {
                    sup.violate(v).await;
                }
                let raw = std::mem::take(&mut sup.raw);
                let violation = sup.violation_failure().await;
                // A driver that broke the contract does not keep its process (dropping it
                // kills the group).
                let keep = violation.is_none();
                let host_failure = violation.or_else(|| sup.asks.failure());
                let exit = ExitInfo {
                    kept_alive: true,
                    ..ExitInfo::default()
                };
                let stdin = sup.stdin.take();
                let stdin_writer = sup.stdin_writer.take();
                drop(sup);
                let result = self.conclude(outcome, raw, exit, host_failure).await;
                if let Some(stdin) = stdin.filter(|_| keep) {
                    // The next turn's calls answer to the next run's cancellation and deadline.
                    session.interrupt_on(None);
                    self.kept = Some(Resident {
                        session,
                        spawned,
                        stdin,
                        stdin_writer,
                        launch: launch_record,
                        private_dir,
                        signature: self.resident_signature.clone().unwrap_or_default(),
                        record_id: String::new(),
                        turns: 0,
                    });
                }
                return result;
            }
        };
        // Whatever happened, no process of this run survives it. A group whose reaper
        // reported its namespace empty holds only that reaper, exiting: the result is
        // worked out while it ends, and the run waits for it below, before it returns.
        let grace = self.inner.settings.grace_period;
        let reaper_ending = spawned.child.only_the_reaper_is_left();
        if !reaper_ending && let Err(e) = process::end_group(&mut spawned, grace).await {
            tracing::error!(pgid, error = %e, "could not confirm the provider process group is gone")
        }
        let result = 'concluded: {
            // A long driver call cut by the run's cancellation: the process is gone (reaped
            // above); the run ends as cancelled, without the driver's outcome.
            let mut interrupted = exited.is_err() && sup.session.was_interrupted();
            let by_caller = self.cancel.is_cancelled();
            let (status, cancelled, timed_out) = match exited {
                Err(_) if interrupted => (None, by_caller, !by_caller),
                Err(e) => break 'concluded Err(e),
                Ok(exited) => exited,
            };
            let stdin_error = sup
                .close_stdin_and_join(self.inner.settings.grace_period)
                .await;
            if let Some(e) = stdin_error {
                sup.notice(
                    "stdin.error",
                    &format!("writing to the provider's stdin failed: {e}"),
                )
                .await;
            }
            drop(private_dir);

            let mut exit = exit_info(status, cancelled, timed_out);
            exit.no_output = sup.idle_fired;
            let output_limit = sup.budget.failure();
            let session_exit = SessionExit {
                code: exit.code,
                signal: exit.signal,
                timed_out,
                cancelled,
            };
            // The process is gone: from here the driver may only close what is open and report.
            sup.claims.stage = Stage::Exited;
            let outcome = if interrupted {
                None
            } else {
                let after_exit = async {
                    sup.deliver_after_exit().await?;
                    let actions = sup.session.on_exit(session_exit).await?;
                    sup.apply_after_exit(EventSource::Exit, actions).await?;
                    sup.session.finish(&codec).await
                }
                .await;
                match after_exit {
                    Ok(outcome) => Some(outcome),
                    Err(_) if sup.session.was_interrupted() => {
                        interrupted = true;
                        None
                    }
                    Err(e) => break 'concluded Err(e),
                }
            };
            let outcome = match outcome {
                Some(outcome) => {
                    if let Err(v) = sup.claims.check_outcome(&outcome) {
                        sup.violate(v).await;
                    }
                    outcome
                }
                None => {
                    sup.notice(
                        "driver.interrupted",
                        "the run was cancelled or timed out while a driver call ran long; the call was interrupted and the driver's outcome is lost",
                    )
                    .await;
                    DriverOutcome::default()
                }
            };
            let raw = std::mem::take(&mut sup.raw);
            let violation = sup.violation_failure().await;
            let cancelled_mid_call = interrupted.then(|| {
                if by_caller {
                    (
                        FailureReason::Cancelled,
                        "the run was cancelled; a driver call that ran long was interrupted".to_owned(),
                    )
                } else {
                    (
                        FailureReason::Timeout,
                        format!(
                            "the run exceeded its timeout of {} ms; a driver call that ran long was interrupted",
                            self.options.timeout.unwrap_or_default().as_millis()
                        ),
                    )
                }
            });
            let host_failure = cancelled_mid_call.or(violation).or_else(|| {
                sup.asks
                    .failure()
                    .or_else(|| output_limit.map(|message| (FailureReason::OutputLimit, message)))
            });
            self.emitter
                .emit(Event::ProcessInfo(ProcessInfo {
                    meta: blank_meta(),
                    process: ProcessInfoKind::Exit,
                    pid: Some(pid),
                    text: describe_exit(&exit),
                    bytes: 0,
                }))
                .await;
            self.conclude(outcome, raw, exit, host_failure).await
        };
        if reaper_ending && let Err(e) = process::end_group(&mut spawned, grace).await {
            tracing::error!(pgid, error = %e, "could not confirm the provider process group is gone")
        }
        result
    }

    /// The turn's result from the driver's outcome and the process facts: classify, apply
    /// the structured-output check, and report the host's corrections as notices.
    pub(super) async fn conclude(
        &mut self,
        outcome: DriverOutcome,
        raw: RawStreams,
        exit: ExitInfo,
        host_failure: Option<(FailureReason, String)>,
    ) -> Result<RunResult, Error> {
        let mut notices = Vec::new();
        let result = self.classify(outcome, raw, exit, host_failure, &mut notices);
        let result = match (&self.options.schema, self.mechanism) {
            (Some(schema), Some(mechanism)) => structured::apply(schema, mechanism, result),
            _ => result,
        };
        for (kind, message) in notices {
            self.emitter
                .emit(Event::Notice(Notice {
                    meta: blank_meta(),
                    notice: kind,
                    message,
                    data: None,
                }))
                .await;
        }
        result
    }

    fn classify(
        &self,
        outcome: DriverOutcome,
        raw: RawStreams,
        exit: ExitInfo,
        host_failure: Option<(FailureReason, String)>,
        notices: &mut Vec<(String, String)>,
    ) -> Result<RunResult, Error> {
        classify(
            &Classify {
                driver: self.driver_name(),
                run_id: self.run_id.clone(),
                timeout: self.options.timeout,
                idle: self.inner.settings.idle_timeout,
                started: self.started,
                host_failure,
            },
            outcome,
            raw,
            exit,
            notices,
        )
    }
}
