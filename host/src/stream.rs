//! The event stream of one run: the host-side [`Emitter`] (sequence numbers, timestamps,
//! backpressure, the single `Dropped` report) and the caller-side [`Stream`].
//!
//! Backpressure: the channel holds `event_buffer` events. In drop mode (the default) a
//! droppable event ([`Event::is_droppable`]) that finds the buffer full is counted and
//! discarded; every other event waits for room, so lifecycle events, tool results,
//! transcript items and the final events are never lost. Before `RunFinished` the emitter
//! sends one [`Dropped`] event with the totals. Blocking mode waits for room for every event.
//! Must not: run drivers or processes.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::SystemTime;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, SteerError};
pub(crate) use crate::event::blank_meta;
use crate::event::{DropReason, Dropped, Event, RunFinished};
use crate::result::RunResult;

/// Fill in an event's host metadata with the sequence after `previous`; returns the new
/// sequence. The only place sequence numbers are assigned.
pub(crate) fn stamp(event: &mut Event, run_id: &str, driver: &str, previous: u64) -> u64 {
    let sequence = previous + 1;
    let meta = event.meta_mut();
    meta.run_id.clear();
    meta.run_id.push_str(run_id);
    meta.driver.clear();
    meta.driver.push_str(driver);
    meta.sequence = sequence;
    meta.time = SystemTime::now();
    sequence
}

#[derive(Default)]
struct DropStats {
    count: u64,
    by_kind: BTreeMap<String, u64>,
    first: u64,
    last: u64,
    reason: Option<DropReason>,
}

/// Assigns sequence and time, applies backpressure, counts drops.
///
/// Cancel unblocks it: a send waiting for a consumer that stopped reading gives up when the
/// run is cancelled, and from then on nothing waits — an event that finds the buffer full is
/// counted in the drop report instead (it is never lost silently). The drop report and
/// `RunFinished` still come last: when they cannot be delivered at once after a cancel, a
/// small task delivers them as soon as the consumer reads again (or drops the stream), so the
/// run itself — and `Agent::close` — never waits for a consumer.
pub(crate) struct Emitter {
    tx: mpsc::Sender<Event>,
    run_id: String,
    driver: String,
    sequence: u64,
    thread_key: Option<String>,
    turn: Option<u64>,
    blocking: bool,
    dropped: DropStats,
    consumer_gone: bool,
    cancel: CancellationToken,
}

impl Emitter {
    pub(crate) fn new(
        tx: mpsc::Sender<Event>,
        run_id: String,
        driver: String,
        blocking: bool,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            tx,
            run_id,
            driver,
            sequence: 0,
            thread_key: None,
            turn: None,
            blocking,
            dropped: DropStats::default(),
            consumer_gone: false,
            cancel,
        }
    }

    /// Stamp every later event with this thread key.
    pub(crate) fn set_thread_key(&mut self, key: &str) {
        self.thread_key = Some(key.to_owned());
    }

    /// Stamp every later event with this thread turn number.
    pub(crate) fn set_turn(&mut self, turn: u64) {
        self.turn = Some(turn);
    }

    fn stamp(&mut self, event: &mut Event) {
        self.sequence = stamp(event, &self.run_id, &self.driver, self.sequence);
        let meta = event.meta_mut();
        meta.thread_key.clone_from(&self.thread_key);
        meta.turn = self.turn;
    }

    /// Deliver without waiting; a full buffer counts the event as dropped. (Over the fields,
    /// so it can run while a reservation borrows the sender.)
    fn offer(
        tx: &mpsc::Sender<Event>,
        dropped: &mut DropStats,
        consumer_gone: &mut bool,
        event: Event,
        reason: DropReason,
    ) {
        match tx.try_send(event) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(event)) => {
                dropped.reason = Some(match dropped.reason {
                    Some(earlier) if earlier != reason => DropReason::BufferFullAndCancelled,
                    _ => reason,
                });
                let seq = event.meta().sequence;
                if dropped.count == 0 {
                    dropped.first = seq;
                }
                dropped.count += 1;
                dropped.last = seq;
                *dropped.by_kind.entry(event.kind().to_owned()).or_default() += 1;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => *consumer_gone = true,
        }
    }

    /// Emit one event. It goes into the buffer when this is called if there is room (the
    /// common case) or if it is not to wait (below); only an event that must wait for room
    /// leaves work for the returned future, which waits in a boxed future of its own. So the
    /// future of every `emit` (one per event) stays small to move, and callers await it at
    /// once.
    pub(crate) fn emit(&mut self, event: Event) -> impl std::future::Future<Output = ()> + '_ {
        let waiting = self.send_now(event);
        async move {
            if let Some(event) = waiting {
                Box::pin(self.wait_and_send(event)).await;
            }
        }
    }

    /// Stamp `event` and deliver it without waiting when there is room, the consumer is gone
    /// (nothing is delivered), the run was cancelled or the event may be dropped (both
    /// offered once and counted as dropped when there is no room). Otherwise the event is
    /// handed back to wait for room.
    fn send_now(&mut self, mut event: Event) -> Option<Event> {
        self.stamp(&mut event);
        if self.consumer_gone {
            return None;
        }
        // After a cancel nothing waits; in drop mode droppable deltas never wait.
        let no_wait = if self.cancel.is_cancelled() {
            Some(DropReason::Cancelled)
        } else if !self.blocking && event.is_droppable() {
            Some(DropReason::BufferFull)
        } else {
            None
        };
        if let Some(reason) = no_wait {
            Self::offer(
                &self.tx,
                &mut self.dropped,
                &mut self.consumer_gone,
                event,
                reason,
            );
            return None;
        }
        match self.tx.try_send(event) {
            Ok(()) => None,
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.consumer_gone = true;
                None
            }
            Err(mpsc::error::TrySendError::Full(event)) => Some(event),
        }
    }

    /// Wait for room in the full buffer, or for the run's cancellation (then the event is
    /// offered once more, and counted as dropped if there is still no room).
    async fn wait_and_send(&mut self, event: Event) {
        let reserved = tokio::select! {
            biased;
            permit = self.tx.reserve() => Some(permit),
            // The consumer stopped reading and the run was cancelled: stop waiting.
            _ = self.cancel.cancelled() => None,
        };
        match reserved {
            Some(Ok(permit)) => permit.send(event),
            Some(Err(_)) => self.consumer_gone = true,
            None => Self::offer(
                &self.tx,
                &mut self.dropped,
                &mut self.consumer_gone,
                event,
                DropReason::Cancelled,
            ),
        }
    }

    /// Emit the drop report (if anything was dropped) and `RunFinished`, the last event.
    pub(crate) async fn finish(&mut self, finished: RunFinished) {
        if self.consumer_gone {
            return;
        }
        let mut last = Vec::new();
        if self.dropped.count > 0 {
            let d = std::mem::take(&mut self.dropped);
            let mut report = Event::Dropped(Dropped {
                meta: blank_meta(),
                count: d.count,
                by_kind: d.by_kind,
                first_sequence: d.first,
                last_sequence: d.last,
                reason: d.reason.unwrap_or(DropReason::BufferFull),
            });
            self.stamp(&mut report);
            last.push(report);
        }
        let mut finished = Event::RunFinished(finished);
        self.stamp(&mut finished);
        last.push(finished);
        let tx = self.tx.clone();
        let mut deliver = Box::pin(async move {
            for event in last {
                if tx.send(event).await.is_err() {
                    return;
                }
            }
        });
        if self.cancel.is_cancelled() {
            // Never wait for a consumer after a cancel: deliver in the background.
            tokio::spawn(deliver);
            return;
        }
        tokio::select! {
            biased;
            () = &mut deliver => {}
            // Cancelled while waiting for the consumer: the same delivery, from where it is,
            // goes on in the background.
            _ = self.cancel.cancelled() => {
                tokio::spawn(deliver);
            }
        }
    }
}

/// A handle that cancels one run; cheap to clone and send to other tasks.
#[derive(Debug, Clone)]
pub struct Canceller(CancellationToken);

impl Canceller {
    /// Cancel the run (idempotent). The provider's process group is terminated and the
    /// result becomes a `RunError` with reason `cancelled`.
    pub fn cancel(&self) {
        self.0.cancel();
    }
}

/// The most input one [`Stream::steer`] call may carry, in bytes (UTF-8).
pub const MAX_STEER_BYTES: usize = 1 << 20;

/// Input for the running turn, on its way to the supervisor (which answers on `reply`).
pub(crate) struct SteerRequest {
    pub text: String,
    pub reply: oneshot::Sender<Result<(), SteerError>>,
}

/// A handle that adds input to one run's turn ([`Stream::steer`]); cheap to clone and send
/// to other tasks.
#[derive(Debug, Clone)]
pub struct Steerer(Option<mpsc::UnboundedSender<SteerRequest>>);

impl std::fmt::Debug for SteerRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SteerRequest")
            .field("bytes", &self.text.len())
            .finish_non_exhaustive()
    }
}

impl Steerer {
    /// See [`Stream::steer`].
    pub async fn steer(&self, text: impl Into<String>) -> Result<(), SteerError> {
        let text = text.into();
        if text.trim().is_empty() {
            return Err(SteerError::Invalid("empty".into()));
        }
        if text.len() > MAX_STEER_BYTES {
            return Err(SteerError::Invalid(format!(
                "{} bytes, over the limit of {MAX_STEER_BYTES}",
                text.len()
            )));
        }
        let Some(tx) = &self.0 else {
            return Err(SteerError::NotSteerable);
        };
        let (reply, answer) = oneshot::channel();
        tx.send(SteerRequest { text, reply })
            .map_err(|_| SteerError::TurnOver("the run has ended".into()))?;
        answer.await.unwrap_or_else(|_| {
            Err(SteerError::TurnOver(
                "the run ended before the input reached the driver".into(),
            ))
        })
    }
}

/// The events of one run, as a [`futures::Stream`], plus its result.
///
/// Dropping a `Stream` before its result was taken cancels the run.
pub struct Stream {
    run_id: String,
    events: mpsc::Receiver<Event>,
    result: Option<oneshot::Receiver<Result<RunResult, Error>>>,
    cancel: CancellationToken,
    steer: Steerer,
}

/// A run's pipeline, built and not yet driven (tracked by the agent's task tracker): the
/// run's task spawns it (`stream`), or [`Stream::drive_to_result`] drives it (`run`).
pub(crate) type Pipeline = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Drives a run's pipeline in the caller's task; if dropped before the pipeline ended (the
/// caller stopped waiting for the result), detaches the rest onto a task of its own — a run
/// is never left half-done, whoever drives it.
struct Driving(Option<(Pipeline, tokio::runtime::Handle)>);

impl Drop for Driving {
    fn drop(&mut self) {
        if let Some((pipeline, runtime)) = self.0.take() {
            runtime.spawn(pipeline);
        }
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl Stream {
    pub(crate) fn new(
        run_id: String,
        events: mpsc::Receiver<Event>,
        result: oneshot::Receiver<Result<RunResult, Error>>,
        cancel: CancellationToken,
        steer: Option<mpsc::UnboundedSender<SteerRequest>>,
    ) -> Self {
        Self {
            run_id,
            events,
            result: Some(result),
            cancel,
            steer: Steerer(steer),
        }
    }

    /// The run id (known before the first event).
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Cancel the run (idempotent).
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// A cancel handle for another task.
    pub fn canceller(&self) -> Canceller {
        Canceller(self.cancel.clone())
    }

    /// Add user input to the running turn ("steering"): the driver delivers it the way its
    /// CLI takes it — Claude Code folds it into the turn between tool calls or runs it right
    /// after (the run then holds both replies), Codex's app-server adds it to the active turn
    /// (`turn/steer`). Returns once the driver has handed it to the provider; what the
    /// provider makes of it shows in the run's events and result.
    ///
    /// Only for runs started with [`RunOptions::steering`](crate::RunOptions::steering);
    /// otherwise [`SteerError::NotSteerable`]. Refused with a typed [`SteerError`], nothing
    /// written, when the input is empty or over [`MAX_STEER_BYTES`], when the turn is over,
    /// or when the driver cannot take it now.
    pub async fn steer(&self, text: impl Into<String>) -> Result<(), SteerError> {
        self.steer.steer(text).await
    }

    /// A steering handle for another task ([`Stream::steer`]).
    pub fn steerer(&self) -> Steerer {
        self.steer.clone()
    }

    /// Discard the remaining events and return the run's result.
    ///
    /// The events not read yet are not delivered: the run stops sending them (it no longer
    /// wakes this task for each one), and what they carried is in the result (text,
    /// transcript, usage, raw streams). The run itself goes on to its end as when its events
    /// are read.
    pub async fn result(self) -> Result<RunResult, Error> {
        self.drive_to_result(None).await
    }

    /// [`result`](Self::result), driving the run's `pipeline` (which `run` did not spawn)
    /// in the caller's task first. Dropping this future before the end hands the rest of the
    /// run to a task of its own, where it ends as an abandoned spawned run does (not
    /// cancelled: the result receiver is taken first, so dropping the stream cancels nothing).
    pub(crate) async fn drive_to_result(
        mut self,
        pipeline: Option<Pipeline>,
    ) -> Result<RunResult, Error> {
        self.events.close();
        let rx = self.result.take().expect("result taken once");
        if let Some(pipeline) = pipeline {
            let mut driving = Driving(Some((pipeline, tokio::runtime::Handle::current())));
            if let Some((pipeline, _)) = driving.0.as_mut() {
                pipeline.as_mut().await;
            }
            // Ended: nothing left to detach.
            driving.0 = None;
        }
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(Error::Lost("the run task stopped without reporting".into())),
        }
    }
}

impl futures::Stream for Stream {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.events.poll_recv(cx)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.result.is_some() {
            self.cancel.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Notice, blank_meta};

    fn notice(text: &str) -> Event {
        Event::Notice(Notice {
            meta: blank_meta(),
            notice: "test".into(),
            message: text.into(),
            data: None,
        })
    }

    /// `emit` is awaited once per event: its future must stay about one event in size (it
    /// was about 2.6 events when it held the waiting path inline), so that moving it — into
    /// the caller's state, then to where it is polled — copies little per event.
    #[test]
    fn the_future_of_an_emit_is_about_one_event() {
        let (tx, _rx) = mpsc::channel(4);
        let mut emitter = Emitter::new(
            tx,
            "run-1".into(),
            "d".into(),
            true,
            CancellationToken::new(),
        );
        let future = emitter.emit(notice("a"));
        let size = std::mem::size_of_val(&future);
        assert!(
            size <= std::mem::size_of::<Event>() + 64,
            "the future of `emit` is {size} bytes, an event {}",
            std::mem::size_of::<Event>()
        );
    }

    /// With room, the event is in the buffer; with none, a blocking emitter waits until the
    /// consumer reads, then delivers in order; after a cancel a waiting event is offered and
    /// counted as dropped.
    #[tokio::test]
    async fn emit_delivers_at_once_waits_for_room_and_gives_up_at_cancel() {
        let (tx, mut rx) = mpsc::channel(1);
        let cancel = CancellationToken::new();
        let mut emitter = Emitter::new(tx, "run-1".into(), "d".into(), true, cancel.clone());
        emitter.emit(notice("first")).await;
        let mut second = Box::pin(emitter.emit(notice("second")));
        assert!(
            futures::poll!(second.as_mut()).is_pending(),
            "a full buffer makes a blocking emit wait"
        );
        let first = rx.recv().await.expect("the first event");
        second.await;
        let second = rx.recv().await.expect("the second event");
        let message = |e: &Event| match e {
            Event::Notice(n) => n.message.clone(),
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(
            (message(&first), message(&second)),
            ("first".into(), "second".into())
        );
        assert!(first.meta().sequence < second.meta().sequence);

        emitter.emit(notice("third")).await;
        let mut fourth = Box::pin(emitter.emit(notice("fourth")));
        assert!(
            futures::poll!(fourth.as_mut()).is_pending(),
            "the fourth waits for room"
        );
        cancel.cancel();
        fourth.await;
        assert_eq!(
            emitter.dropped.count, 1,
            "the waiting event was dropped at cancel"
        );
        assert_eq!(message(&rx.recv().await.expect("third")), "third");
    }
}
