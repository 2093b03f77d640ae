//! The supervisor: the select loop of one turn — pipes, the process, timers, cancel,
//! timeout, the idle watchdog, approvals, end of turn — and the driver's actions performed
//! under the grant (stdin writes, signals to the process group, timers, approval requests).
//!
//! Must not: spawn, or decide the run's outcome (it reports how the loop ended; `turn` and
//! `classify` decide).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::decisions::{Decisions, Step};
use super::guard::{CONTRACT_VIOLATION, Claims, Stage, Violation};
use super::output::{Admit, OutputBudget};
use crate::approval::Resolution;
use crate::error::{Error, FailureReason, Limit};
use crate::event::blank_meta;
use crate::event::*;
use crate::process::{self, Sig};
use crate::result::{ChunkRecord, RawStreams, StreamKind};
use crate::session::{Action, Decision, DriverSignal};
use crate::stream::{Emitter, SteerRequest};
use crate::wasm::guest::GuestLimits;
use crate::wasm::guest::GuestSession;

/// Read size for stdout/stderr chunks.
const CHUNK: usize = 64 * 1024;
/// After the process exits, how long descendants may keep its pipes open.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// The run loop's state (built by `turn`, which reads the captured output afterwards).
pub(super) struct Supervisor<'a> {
    pub(super) session: &'a mut GuestSession,
    pub(super) emitter: &'a mut Emitter,
    pub(super) driver: String,
    pub(super) pgid: i32,
    pub(super) grace: Duration,
    pub(super) stdin: Option<StdinSender>,
    pub(super) stdin_writer: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    pub(super) timers: HashMap<u64, Instant>,
    /// Decisions waiting to be delivered to the driver (`on-decision`).
    pub(super) deliveries: VecDeque<(String, Decision)>,
    /// Approval requests of this run.
    pub(super) asks: Decisions,
    /// The process is being stopped (cancel, timeout, …).
    pub(super) stopping: bool,
    /// A graceful stop is under way: terminate at this time (and why).
    pub(super) terminate_at: Option<(Instant, String)>,
    pub(super) kill_at: Option<Instant>,
    pub(super) turn_ended: bool,
    pub(super) raw: RawStreams,
    pub(super) spawned_at: Instant,
    pub(super) idle_fired: bool,
    /// What the provider may write (bytes in all, bytes per line).
    pub(super) budget: OutputBudget,
    /// The driver's events and outcome, checked before they are forwarded.
    pub(super) claims: Claims,
    /// The first rule the driver broke; from then on its events are withheld.
    pub(super) violation: Option<Violation>,
    /// Driver events withheld after the violation (reported in one notice).
    pub(super) withheld: u64,
    /// The Agent's limits (the host resources a driver's actions may hold).
    pub(super) limits: GuestLimits,
    /// What this turn's driver used of them.
    pub(super) used: Used,
    /// Input the caller adds to the running turn (a steerable run only).
    pub(super) steer: Option<&'a mut mpsc::UnboundedReceiver<SteerRequest>>,
}

/// The host resources a driver's actions used in this turn (see [`GuestLimits`]).
#[derive(Debug, Default)]
pub(super) struct Used {
    timer_fires: u64,
    events: u64,
    approvals: usize,
    stdin_bytes: usize,
}

/// How a turn's run loop ended.
#[derive(Debug)]
pub(super) enum LoopEnd {
    /// The turn ended and the process lives on for the thread's next turn.
    KeptAlive,
    /// The process is gone (exited, or was stopped) and its pipes are closed.
    Exited {
        /// Its exit status, if it was observed.
        status: Option<std::process::ExitStatus>,
        /// Stopped because the run was cancelled.
        cancelled: bool,
        /// Stopped by the run timeout or the idle watchdog.
        timed_out: bool,
    },
}

/// The loop's outcome: how it ended, or an error that ends the run (a trap, a contract
/// violation).
pub(super) type LoopOutcome = Result<LoopEnd, Error>;

impl Supervisor<'_> {
    pub(super) async fn run_loop(
        &mut self,
        spawned: &mut process::Spawned,
        cancel: &CancellationToken,
        timeout: Option<Duration>,
        end_turn_grace: Duration,
        idle: Option<Duration>,
        keep_alive: bool,
    ) -> LoopOutcome {
        let mut stdout = spawned.stdout.take();
        let mut stderr = spawned.stderr.take();
        // Read into spare capacity: a turn's buffers are not zeroed first.
        let mut out_buf = Vec::with_capacity(CHUNK);
        let mut err_buf = Vec::with_capacity(CHUNK);
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut last_output = Instant::now();
        let mut status: Option<std::process::ExitStatus> = None;
        let mut cancelled = false;
        let mut timed_out = false;
        let mut drain_until: Option<Instant> = None;
        let mut end_turn_deadline: Option<Instant> = None;
        let mut end_turn_seen = false;
        loop {
            // Decisions are delivered one per turn of the loop, and not once the run is
            // cancelled: a driver answering each decision with more requests cannot keep
            // Ctrl-C waiting (what is left is delivered after the exit, as events only).
            if !cancel.is_cancelled()
                && let Some((id, decision)) = self.deliveries.pop_front()
            {
                let actions = self.session.on_decision(&id, &decision).await?;
                self.apply(EventSource::Decision { request_id: id }, actions)
                    .await?;
                continue;
            }
            if self.asks.aborting() && !self.turn_ended && status.is_none() {
                // An approval outcome ended the run: the driver was told; the process gets the
                // end-of-turn grace to stop by itself.
                self.turn_ended = true;
            }
            if self.turn_ended
                && !end_turn_seen
                && keep_alive
                && status.is_none()
                && self.stdin.is_some()
                && !self.stopping
                && !self.asks.aborting()
            {
                // A resident turn is complete: the process stays for the next one.
                self.close_approvals(Resolution::Withdrawn).await;
                self.asks.abort_handlers();
                spawned.stdout = stdout;
                spawned.stderr = stderr;
                return Ok(LoopEnd::KeptAlive);
            }
            if self.turn_ended && !end_turn_seen {
                end_turn_seen = true;
                self.stdin = None;
                end_turn_deadline = Some(Instant::now() + end_turn_grace);
            }
            if status.is_some() && stdout.is_none() && stderr.is_none() {
                break;
            }
            let stopping = cancelled || timed_out;
            let next_timer = self
                .timers
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(id, at)| (*id, *at));
            let approval_deadline = self.asks.next_deadline();
            tokio::select! {
                _ = cancel.cancelled(), if !stopping && status.is_none() => {
                    cancelled = true;
                    self.close_approvals(Resolution::Cancelled).await;
                    self.stop("cancel").await?;
                }
                _ = sleep_opt(deadline), if !stopping && status.is_none() => {
                    timed_out = true;
                    self.close_approvals(Resolution::Withdrawn).await;
                    self.stop("timeout").await?;
                }
                _ = sleep_opt(idle.map(|d| last_output + d)), if !stopping && status.is_none() => {
                    timed_out = true;
                    self.idle_fired = true;
                    self.close_approvals(Resolution::Withdrawn).await;
                    self.terminate("no output within the idle timeout").await;
                }
                settled = self.asks.next_settled() => {
                    let mut steps = Vec::new();
                    self.asks.on_settled(settled, &mut steps);
                    self.perform(steps).await;
                }
                _ = sleep_opt(approval_deadline) => {
                    let mut steps = Vec::new();
                    self.asks.on_deadline(Instant::now(), &mut steps);
                    self.perform(steps).await;
                }
                _ = sleep_opt(self.terminate_at.as_ref().map(|(at, _)| *at)) => {
                    if let Some((_, why)) = self.terminate_at.take() {
                        self.terminate(&format!("{why}: the provider did not stop within the grace period")).await;
                    }
                }
                _ = sleep_opt(self.kill_at) => {
                    self.kill_at = None;
                    self.signal(Sig::Kill, "grace period elapsed").await;
                }
                _ = sleep_opt(end_turn_deadline), if status.is_none() && !stopping => {
                    end_turn_deadline = None;
                    self.notice("process.lingering", "the provider kept running after its turn ended; stopping it").await;
                    self.close_approvals(Resolution::Withdrawn).await;
                    self.terminate("lingering after end of turn").await;
                }
                _ = sleep_opt(drain_until) => {
                    // Descendants still hold the pipes open after the provider exited.
                    drain_until = None;
                    self.signal(Sig::Kill, "pipes held open after exit").await;
                    stdout = None;
                    stderr = None;
                }
                _ = sleep_opt(next_timer.map(|(_, at)| at)) => {
                    if let Some((id, _)) = next_timer {
                        self.timers.remove(&id);
                        self.used.timer_fires += 1;
                        if self.used.timer_fires > self.limits.timer_fires_per_turn {
                            return Err(self.limit("session.on-timer", Limit::TimerFiresPerTurn {
                                max: self.limits.timer_fires_per_turn,
                            }));
                        }
                        let actions = self.session.on_timer(id).await?;
                        self.apply(EventSource::Timer { id }, actions).await?;
                    }
                }
                Some(request) = recv_steer(&mut self.steer) => {
                    self.on_steer(request, status.is_some() || stopping).await?;
                }
                n = read_opt(&mut stdout, &mut out_buf) => {
                    if self.on_read(StreamKind::Stdout, n, &out_buf).await? {
                        last_output = Instant::now();
                    } else {
                        stdout = None;
                    }
                }
                n = read_opt(&mut stderr, &mut err_buf) => {
                    if self.on_read(StreamKind::Stderr, n, &err_buf).await? {
                        last_output = Instant::now();
                    } else {
                        stderr = None;
                    }
                }
                st = spawned.child.wait(), if status.is_none() => {
                    match st {
                        Ok(st) => {
                            status = Some(st);
                            self.raw.exited = Some(self.spawned_at.elapsed());
                        }
                        Err(e) => {
                            self.notice("process.error", &format!("waiting for the provider failed: {e}")).await;
                            self.signal(Sig::Kill, "wait failed").await;
                            status = Some(process::killed_status());
                        }
                    }
                    drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
                }
            }
        }
        self.close_approvals(Resolution::Withdrawn).await;
        self.asks.abort_handlers();
        Ok(LoopEnd::Exited {
            status,
            cancelled,
            timed_out,
        })
    }

    /// Resolve every pending approval request (the run is ending) and report it.
    async fn close_approvals(&mut self, resolution: Resolution) {
        let mut steps = Vec::new();
        self.asks.close(resolution, &mut steps);
        self.perform(steps).await;
    }

    /// Emit the events and queue the decisions of an approval step list.
    async fn perform(&mut self, steps: Vec<Step>) {
        for step in steps {
            match step {
                Step::Emit(event) => self.emitter.emit(*event).await,
                Step::Deliver(id, decision) => self.deliveries.push_back((id, decision)),
            }
        }
    }

    /// Decisions that became known after the process ended still reach the driver (their
    /// actions can only emit events by then).
    pub(super) async fn deliver_after_exit(&mut self) -> Result<(), Error> {
        while let Some((id, decision)) = self.deliveries.pop_front() {
            let actions = self.session.on_decision(&id, &decision).await?;
            self.apply_after_exit(EventSource::Decision { request_id: id }, actions)
                .await?;
        }
        Ok(())
    }

    /// Handle one read from a pipe: `Ok(true)` when bytes arrived, `Ok(false)` at end of file
    /// or on a read error (reported as a notice, never dropped).
    async fn on_read(
        &mut self,
        stream: StreamKind,
        read: std::io::Result<usize>,
        buf: &[u8],
    ) -> Result<bool, Error> {
        let is_stdout = stream == StreamKind::Stdout;
        match read {
            Ok(0) => Ok(false),
            Ok(n) => {
                self.on_chunk(is_stdout, &buf[..n]).await?;
                Ok(true)
            }
            Err(e) => {
                let name = if is_stdout { "stdout" } else { "stderr" };
                self.notice(
                    &format!("{name}.error"),
                    &format!("reading the provider's {name} failed: {e}"),
                )
                .await;
                Ok(false)
            }
        }
    }

    async fn on_chunk(&mut self, is_stdout: bool, chunk: &[u8]) -> Result<(), Error> {
        let kind = if is_stdout {
            StreamKind::Stdout
        } else {
            StreamKind::Stderr
        };
        match self.budget.admit(kind, chunk) {
            Admit::Keep => {}
            Admit::Discard => return Ok(()),
            Admit::Overflow(why) => {
                self.notice(
                    "output.limit",
                    &format!("{why}; stopping it — further output is discarded"),
                )
                .await;
                self.terminate("output limit").await;
                return Ok(());
            }
        }
        let (stream, bytes) = if is_stdout {
            (StreamKind::Stdout, &mut self.raw.stdout)
        } else {
            (StreamKind::Stderr, &mut self.raw.stderr)
        };
        let offset = bytes.len();
        bytes.extend_from_slice(chunk);
        let source = EventSource::Output {
            stream,
            chunk: self.raw.chunks.len(),
            offset,
            len: chunk.len(),
        };
        self.raw.chunks.push(ChunkRecord {
            stream,
            at: self.spawned_at.elapsed(),
            offset,
            len: chunk.len(),
        });
        self.emitter
            .emit(Event::ProcessInfo(ProcessInfo {
                meta: EventMeta {
                    source: Some(source.clone()),
                    ..blank_meta()
                },
                process: if is_stdout {
                    ProcessInfoKind::Stdout
                } else {
                    ProcessInfoKind::Stderr
                },
                pid: None,
                text: String::from_utf8_lossy(chunk).into_owned(),
                bytes: chunk.len(),
            }))
            .await;
        let actions = if is_stdout {
            self.session.on_stdout(chunk).await?
        } else {
            self.session.on_stderr(chunk).await?
        };
        self.apply(source, actions).await
    }

    pub(super) async fn notice(&mut self, kind: &str, message: &str) {
        tracing::debug!(kind, message, "notice");
        self.emitter
            .emit(Event::Notice(Notice {
                meta: blank_meta(),
                notice: kind.to_owned(),
                message: message.to_owned(),
                data: None,
            }))
            .await;
    }

    async fn signal(&mut self, sig: Sig, why: &str) {
        tracing::info!(
            pgid = self.pgid,
            signal = sig.name(),
            why,
            "signalling provider process group"
        );
        let text = match process::signal_group(self.pgid, sig) {
            Ok(true) => format!("{} sent to the process group ({why})", sig.name()),
            Ok(false) => return,
            Err(e) => format!("{} could not be sent ({why}): {e}", sig.name()),
        };
        self.emitter
            .emit(Event::ProcessInfo(ProcessInfo {
                meta: blank_meta(),
                process: ProcessInfoKind::Signal,
                pid: None,
                text,
                bytes: 0,
            }))
            .await;
    }

    /// SIGTERM now, SIGKILL after the grace period.
    /// Stop the turn for `why` (cancel, timeout): the driver may stop it gracefully first
    /// (`on-cancel`, e.g. a JSON-RPC interrupt); the process group is terminated after the
    /// grace period whatever happens — at once when the driver has nothing to do.
    async fn stop(&mut self, why: &str) -> Result<(), Error> {
        let actions = self.session.on_cancel().await?;
        if actions.is_empty() {
            self.terminate(why).await;
            return Ok(());
        }
        tracing::info!(driver = %self.driver, why, "the driver stops the turn gracefully");
        self.apply(EventSource::Cancel, actions).await?;
        if !self.stopping {
            self.terminate_at = Some((Instant::now() + self.grace, why.to_owned()));
        }
        Ok(())
    }

    async fn terminate(&mut self, why: &str) {
        self.terminate_at = None;
        self.stopping = true;
        self.stdin = None;
        self.signal(Sig::Terminate, why).await;
        self.kill_at = Some(Instant::now() + self.grace);
    }

    /// Record the launch's input a prewarmed process was written before this run took it
    /// (byte for byte this run's own launch input): the first stdin chunk, at zero.
    pub(super) fn record_written_before(&mut self, bytes: Vec<u8>) {
        let offset = self.raw.stdin.len();
        self.raw.stdin.extend_from_slice(&bytes);
        self.stdin_chunk(offset, Duration::ZERO);
    }

    /// The stdin bytes from `offset` to the end of the capture, written at `at`, as a chunk.
    fn stdin_chunk(&mut self, offset: usize, at: Duration) {
        self.raw.chunks.push(ChunkRecord {
            stream: StreamKind::Stdin,
            at,
            offset,
            len: self.raw.stdin.len() - offset,
        });
    }

    pub(super) async fn write_stdin(&mut self, bytes: Vec<u8>) {
        let len = bytes.len();
        let offset = self.raw.stdin.len();
        // The write's time is when the bytes are handed over, not when `write` returns: a
        // provider woken by them may run on this thread's CPU before `write` returns (see
        // [`ChunkRecord::at`](crate::ChunkRecord::at)).
        let at = self.spawned_at.elapsed();
        let sent = match &self.stdin {
            Some(stdin) => {
                self.raw.stdin.extend_from_slice(&bytes);
                stdin.send(bytes)
            }
            None => false,
        };
        if sent {
            self.stdin_chunk(offset, at);
        } else {
            self.raw.stdin.truncate(offset);
        }
        if !sent && self.stopping {
            tracing::debug!(driver = %self.driver, len, "stdin write while stopping the provider dropped");
        } else if !sent {
            self.notice(
                "stdin.closed",
                &format!("the driver wrote {len} bytes to stdin after it was closed; they were not delivered"),
            )
            .await;
        }
    }

    /// Perform the actions a driver callback returned; the events among them are stamped with
    /// `source`, the input the callback was given.
    pub(super) async fn apply(
        &mut self,
        source: EventSource,
        actions: Vec<Action>,
    ) -> Result<(), Error> {
        for action in actions {
            match action {
                Action::Emit(event) => {
                    self.count_event()?;
                    self.forward(*event, &source).await
                }
                Action::WriteStdin(bytes) => {
                    self.used.stdin_bytes += bytes.len();
                    if self.used.stdin_bytes > self.limits.stdin_bytes_per_turn {
                        return Err(self.limit(
                            "write-stdin",
                            Limit::StdinPerTurn {
                                bytes: self.limits.stdin_bytes_per_turn,
                            },
                        ));
                    }
                    self.write_stdin(bytes).await
                }
                Action::CloseStdin => self.stdin = None,
                Action::RequestApproval(request) => {
                    self.used.approvals += 1;
                    if self.used.approvals > self.limits.approvals_per_turn {
                        return Err(self.limit(
                            "request-approval",
                            Limit::ApprovalsPerTurn {
                                max: self.limits.approvals_per_turn,
                            },
                        ));
                    }
                    if self.asks.pending_count() >= self.limits.approvals_pending {
                        return Err(self.limit(
                            "request-approval",
                            Limit::ApprovalsPending {
                                max: self.limits.approvals_pending,
                            },
                        ));
                    }
                    let mut steps = Vec::new();
                    self.asks.request(request, &mut steps).map_err(|message| {
                        Error::DriverContract {
                            driver: self.driver.clone(),
                            call: "request-approval",
                            message,
                        }
                    })?;
                    self.perform(steps).await;
                }
                Action::SetTimer { id, after } => {
                    if !self.timers.contains_key(&id)
                        && self.timers.len() >= self.limits.timers_live
                    {
                        return Err(self.limit(
                            "set-timer",
                            Limit::TimersLive {
                                max: self.limits.timers_live,
                            },
                        ));
                    }
                    self.timers.insert(id, Instant::now() + after);
                }
                Action::CancelTimer(id) => {
                    self.timers.remove(&id);
                }
                Action::Signal(sig) => match sig {
                    DriverSignal::Interrupt => {
                        self.signal(Sig::Interrupt, "requested by the driver").await
                    }
                    DriverSignal::Terminate => self.terminate("requested by the driver").await,
                    DriverSignal::Kill => self.signal(Sig::Kill, "requested by the driver").await,
                },
                Action::EndTurn => {
                    self.turn_ended = true;
                    if self.claims.stage == Stage::Running {
                        self.claims.stage = Stage::Ended;
                    }
                }
            }
        }
        Ok(())
    }

    /// The caller's input for the running turn: handed to the driver (`on-input`) and its
    /// actions performed, unless the turn is over; the caller learns which.
    async fn on_steer(&mut self, request: SteerRequest, over: bool) -> Result<(), Error> {
        use crate::error::SteerError;
        if over || self.turn_ended || self.stopping || self.asks.aborting() {
            let _ = request.reply.send(Err(SteerError::TurnOver(
                "the turn has ended or is being stopped".into(),
            )));
            return Ok(());
        }
        match self.session.on_input(&request.text).await? {
            Ok(actions) => {
                self.apply(EventSource::Input, actions).await?;
                let _ = request.reply.send(Ok(()));
            }
            Err((kind, message)) => {
                let _ = request.reply.send(Err(SteerError::Refused {
                    driver: self.driver.clone(),
                    kind,
                    message,
                }));
            }
        }
        Ok(())
    }

    /// Count one driver event against the turn's limit.
    fn count_event(&mut self) -> Result<(), Error> {
        self.used.events += 1;
        if self.used.events > self.limits.events_per_turn {
            return Err(self.limit(
                "emit",
                Limit::EventsPerTurn {
                    max: self.limits.events_per_turn,
                },
            ));
        }
        Ok(())
    }

    /// A host-resource limit the driver's actions hit: the run ends with it.
    fn limit(&self, call: &'static str, limit: Limit) -> Error {
        tracing::warn!(driver = %self.driver, call, %limit, "driver stopped by a limit");
        Error::LimitExceeded {
            driver: self.driver.clone(),
            call,
            limit,
        }
    }

    /// Forward one driver event after checking it against the contract. The first violation
    /// is reported (a `driver.contract_violation` notice naming the rule), stops the provider
    /// and fails the run; the driver's events after it are withheld and counted.
    async fn forward(&mut self, event: Event, source: &EventSource) {
        if self.violation.is_some() {
            self.withheld += 1;
            return;
        }
        match self.claims.check(&event) {
            Ok(()) => self.emitter.emit(sourced(event, source)).await,
            Err(v) => {
                self.withheld += 1;
                // Boxed: the rare path's future would otherwise be part of every event's.
                Box::pin(self.violate(v)).await;
            }
        }
    }

    /// Record the driver's first contract violation: report it and stop the provider.
    pub(super) async fn violate(&mut self, v: Violation) {
        if self.violation.is_some() {
            return;
        }
        tracing::warn!(driver = %self.driver, rule = v.rule, message = %v.message, "driver contract violation");
        self.emitter
            .emit(Event::Notice(Notice {
                meta: blank_meta(),
                notice: CONTRACT_VIOLATION.to_owned(),
                message: format!(
                    "driver `{}` broke the contract: {v}; the run fails",
                    self.driver
                ),
                data: Some(serde_json::json!({"rule": v.rule})),
            }))
            .await;
        self.violation = Some(v);
        if !self.stopping {
            self.terminate("driver contract violation").await;
        }
    }

    /// The run's failure for a contract violation (and a notice for withheld events).
    pub(super) async fn violation_failure(&mut self) -> Option<(FailureReason, String)> {
        let v = self.violation.clone()?;
        if self.withheld > 1 {
            self.notice(
                "driver.events_withheld",
                &format!(
                    "{} events of driver `{}` were not forwarded: the offending one and every later one",
                    self.withheld, self.driver
                ),
            )
            .await;
        }
        Some((
            FailureReason::ContractViolation,
            format!("driver `{}` broke the contract: {v}", self.driver),
        ))
    }

    /// After exit only events make sense; anything else is logged, never silently lost.
    pub(super) async fn apply_after_exit(
        &mut self,
        source: EventSource,
        actions: Vec<Action>,
    ) -> Result<(), Error> {
        for action in actions {
            match action {
                Action::Emit(event) => {
                    self.count_event()?;
                    self.forward(*event, &source).await
                }
                Action::EndTurn => {}
                other => {
                    tracing::debug!(driver = %self.driver, action = ?other, "action after the process exited ignored");
                }
            }
        }
        Ok(())
    }

    /// Close stdin and wait (bounded) for the writer; returns its error, if any.
    pub(super) async fn close_stdin_and_join(&mut self, grace: Duration) -> Option<String> {
        self.stdin = None;
        let writer = self.stdin_writer.take()?;
        match tokio::time::timeout(grace, writer).await {
            Ok(Ok(Ok(()))) => None,
            Ok(Ok(Err(e))) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                Some("the provider closed its stdin before reading everything (broken pipe)".into())
            }
            Ok(Ok(Err(e))) => Some(e.to_string()),
            Ok(Err(join)) => Some(format!("stdin writer task failed: {join}")),
            Err(_) => Some("stdin writer did not finish within the grace period".into()),
        }
    }
}

/// The provider's open stdin as the pipeline writes to it: bytes go into the pipe at once,
/// from the run's own task, when nothing is queued and the pipe has room (a resident turn's
/// prompt reaches the provider with no hand-off to another task); otherwise to the writer
/// task ([`stdin_writer`]), which writes them in order. Dropping it ends the input: the
/// writer writes what is queued, then closes the pipe.
pub(crate) struct StdinSender {
    queue: mpsc::UnboundedSender<Vec<u8>>,
    shared: std::sync::Arc<SharedStdin>,
}

struct SharedStdin {
    /// The pipe (taken by the writer when it closes it).
    pipe: tokio::sync::Mutex<Option<tokio::process::ChildStdin>>,
    /// Writes sent to the writer task and not yet written: a direct write waits behind them.
    queued: std::sync::atomic::AtomicUsize,
}

impl StdinSender {
    /// Write `bytes` (in order after every earlier write); `false` when the input is closed
    /// (the writer ended: the provider closed its end, or writing failed).
    fn send(&self, bytes: Vec<u8>) -> bool {
        use std::sync::atomic::Ordering;
        let written = self.write_now(&bytes);
        if written == bytes.len() {
            return true;
        }
        let rest = if written == 0 {
            bytes
        } else {
            bytes[written..].to_vec()
        };
        self.shared.queued.fetch_add(1, Ordering::AcqRel);
        if self.queue.send(rest).is_ok() {
            true
        } else {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
            false
        }
    }

    /// As much of `bytes` as the pipe takes without waiting, when the writer has nothing
    /// queued and is not writing (else 0: the writer keeps the order).
    fn write_now(&self, bytes: &[u8]) -> usize {
        use futures::FutureExt;
        use std::sync::atomic::Ordering;
        if self.queue.is_closed() || self.shared.queued.load(Ordering::Acquire) != 0 {
            return 0;
        }
        let Ok(mut pipe) = self.shared.pipe.try_lock() else {
            return 0;
        };
        let Some(pipe) = pipe.as_mut() else { return 0 };
        let mut written = 0;
        while written < bytes.len() {
            // One poll: a full pipe (or an error, which the writer then meets and reports)
            // leaves the rest to the writer.
            match pipe.write(&bytes[written..]).now_or_never() {
                Some(Ok(n)) if n > 0 => written += n,
                _ => break,
            }
        }
        written
    }
}

/// The provider's stdin, open: the sender the pipeline writes through and the writer task
/// behind it (its result: the first write error, if any).
pub(super) fn stdin_writer(
    stdin: tokio::process::ChildStdin,
) -> (StdinSender, tokio::task::JoinHandle<std::io::Result<()>>) {
    let (queue, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let shared = std::sync::Arc::new(SharedStdin {
        pipe: tokio::sync::Mutex::new(Some(stdin)),
        queued: std::sync::atomic::AtomicUsize::new(0),
    });
    let writer_shared = shared.clone();
    let writer = tokio::spawn(async move {
        use std::sync::atomic::Ordering;
        let shared = writer_shared;
        while let Some(bytes) = rx.recv().await {
            let mut pipe = shared.pipe.lock().await;
            let wrote = match pipe.as_mut() {
                Some(pipe) => match pipe.write_all(&bytes).await {
                    Ok(()) => pipe.flush().await,
                    Err(e) => Err(e),
                },
                None => Ok(()),
            };
            drop(pipe);
            shared.queued.fetch_sub(1, Ordering::AcqRel);
            wrote?;
        }
        if let Some(mut pipe) = shared.pipe.lock().await.take() {
            pipe.shutdown().await.ok();
        }
        Ok(())
    });
    (StdinSender { queue, shared }, writer)
}

async fn read_opt<R: AsyncRead + Unpin>(
    reader: &mut Option<R>,
    buf: &mut Vec<u8>,
) -> std::io::Result<usize> {
    match reader {
        Some(r) => {
            buf.clear();
            r.read_buf(buf).await
        }
        None => std::future::pending().await,
    }
}

/// The next steering request, or never (no channel, or every sender gone).
async fn recv_steer(
    steer: &mut Option<&mut mpsc::UnboundedReceiver<SteerRequest>>,
) -> Option<SteerRequest> {
    match steer {
        Some(rx) => match rx.recv().await {
            Some(request) => Some(request),
            None => {
                *steer = None;
                std::future::pending().await
            }
        },
        None => std::future::pending().await,
    }
}

async fn sleep_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// A driver's event, stamped with the input that produced it.
fn sourced(mut event: Event, source: &EventSource) -> Event {
    event.meta_mut().source = Some(source.clone());
    event
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// Writes that fit go straight into the pipe; one larger than the pipe is split between a
    /// direct write and the writer task, and every later write waits behind it: the provider
    /// reads every byte in order, and dropping the sender closes its input.
    #[tokio::test]
    async fn stdin_writes_keep_their_order_across_direct_and_queued_writes() {
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", "sleep 1; exec cat"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh");
        let (sender, writer) = stdin_writer(child.stdin.take().expect("stdin"));
        let mut expected = Vec::new();
        for (i, len) in [10usize, 300_000, 7, 70_000, 3].into_iter().enumerate() {
            let bytes = vec![b'a' + i as u8; len];
            expected.extend_from_slice(&bytes);
            assert!(sender.send(bytes), "write {i} accepted");
        }
        assert!(
            sender
                .shared
                .queued
                .load(std::sync::atomic::Ordering::Acquire)
                > 0,
            "a write larger than the pipe went to the writer"
        );
        drop(sender);
        let mut out = Vec::new();
        child
            .stdout
            .take()
            .expect("stdout")
            .read_to_end(&mut out)
            .await
            .expect("read");
        assert_eq!(out.len(), expected.len());
        assert!(out == expected, "bytes arrive in the order written");
        writer.await.expect("writer task").expect("no write error");
        child.wait().await.expect("cat exits at end of input");
    }
}
