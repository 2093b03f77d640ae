//! Ctrl-C during `adaptor run`, also when its event loop is blocked writing to a stdout
//! nobody reads (`adaptor run … | sleep 60`).
//!
//! The loop runs on a current-thread runtime (see `main`), so while it is blocked no task of
//! that runtime runs either; the watchdog needs none. It is one thread per run, told of
//! SIGINT by a signal action (one byte into a pipe), and the run's only Ctrl-C handler. It
//!
//! 1. cancels the run at once (the provider's process group is stopped, the run ends as
//!    cancelled and the CLI exits 130);
//! 2. if the loop has not finished within [`PATIENCE`] (blocked on its output), points
//!    stdout at `/dev/null` and interrupts the blocked write (a signal without `SA_RESTART`;
//!    the standard library retries the write, now into `/dev/null`), so the loop goes on and
//!    the run ends like any cancelled run: provider reaped, run directory removed, exit 130;
//! 3. only if the loop still has not finished within another [`PATIENCE`] (blocked on
//!    something else), exits with 130 without it. The provider's processes end with this
//!    process (the spawner and the confinement's reaper have parent-death signals), but
//!    the run's directory and result are not cleaned up or printed.
//!
//! A run that `adaptor serve` serves for another `adaptor run` gets its Ctrl-C from that
//! client instead ([`Source::Remote`]: the client's Ctrl-C, or its hang-up), with the same
//! three steps. The third ends the serving process, whose runs' providers end with it; its
//! client, told nothing, exits 130 as it would have.
//!
//! Owns: SIGINT for the run (or its client's Ctrl-C), the watchdog thread, the unblocking of stdout. Must not: act
//! before Ctrl-C, or end the process while the loop may still finish by itself.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{EXIT_INTERRUPTED, errln};

/// After Ctrl-C, how long the event loop has to finish by itself before the watchdog
/// unblocks its output, and again before it ends the process (the run's own grace period
/// is 2 s). The library's, which a served caller's wait counts with too.
pub(crate) const PATIENCE: Duration = adaptor_cli::PATIENCE;

/// Written by the signal action: Ctrl-C.
const CTRL_C: u8 = 1;
/// Written when the watchdog is dropped: the run is over.
const OVER: u8 = 0;

/// Where a run's Ctrl-C comes from.
pub(crate) enum Source {
    /// SIGINT to this process: the terminal's Ctrl-C (`adaptor run`, `threads fork`).
    Signal,
    /// A run served for another `adaptor run` process (`adaptor serve`): its client's Ctrl-C
    /// or hang-up, delivered through the [`RemoteCtrlC`] made with it. This process's own
    /// SIGINT is then the server's, not the run's.
    Remote(Remote),
}

/// The pipe a served run's watchdog listens on (see [`Source::Remote`]).
pub(crate) struct Remote {
    listen: OwnedFd,
    tell: OwnedFd,
}

impl Remote {
    /// A pipe for one served run, and the trigger that writes Ctrl-C into it.
    pub(crate) fn new() -> io::Result<(Remote, RemoteCtrlC)> {
        let (listen, tell) = pipe()?;
        let trigger = RemoteCtrlC(tell.try_clone()?);
        Ok((Remote { listen, tell }, trigger))
    }
}

/// Ctrl-C for a served run, from any thread (see [`Source::Remote`]).
pub(crate) struct RemoteCtrlC(OwnedFd);

impl RemoteCtrlC {
    /// A second trigger for the same run.
    pub(crate) fn try_clone(&self) -> io::Result<RemoteCtrlC> {
        Ok(RemoteCtrlC(self.0.try_clone()?))
    }

    /// Tell the run's watchdog that Ctrl-C came (as SIGINT would). After the run is over
    /// nobody reads the pipe, and the byte is dropped with it.
    pub(crate) fn ctrl_c(&self) {
        let byte = CTRL_C;
        // SAFETY: write(2) of one byte from a live local into our own pipe (a pipe without
        // a reader fails with EPIPE: SIGPIPE is ignored in Rust programs).
        unsafe { libc::write(self.0.as_raw_fd(), (&raw const byte).cast(), 1) };
    }
}

/// The watchdog of one run's event loop; dropping it ends its thread.
pub(crate) struct Watchdog {
    ctrl_c: Arc<AtomicBool>,
    tell: OwnedFd,
    /// The SIGINT action (`Source::Signal` only).
    action: Option<signal_hook_registry::SigId>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Watch the event loop running on this thread; `cancel` stops its run, on Ctrl-C from
    /// `source`.
    pub(crate) fn start(cancel: adaptor::Canceller, source: Source) -> io::Result<Watchdog> {
        let (listen, tell, action) = match source {
            Source::Signal => {
                let (listen, tell) = pipe()?;
                let raw = tell.as_raw_fd();
                // SAFETY: the action calls only write(2), async-signal-safe, on `tell`, which
                // stays open until the action is unregistered (in `drop`, before `tell` is
                // closed).
                let action = unsafe {
                    signal_hook_registry::register(libc::SIGINT, move || {
                        let byte = CTRL_C;
                        libc::write(raw, (&raw const byte).cast(), 1);
                    })
                }?;
                (listen, tell, Some(action))
            }
            Source::Remote(Remote { listen, tell }) => (listen, tell, None),
        };
        // SAFETY: pthread_self(3) cannot fail.
        let event_loop = EventLoopThread(unsafe { libc::pthread_self() });
        let ctrl_c = Arc::new(AtomicBool::new(false));
        let seen = ctrl_c.clone();
        let thread = std::thread::Builder::new()
            .name("adaptor-interrupt".into())
            .spawn(move || watch(&listen, &seen, &cancel, event_loop));
        match thread {
            Ok(thread) => Ok(Watchdog {
                ctrl_c,
                tell,
                action,
                thread: Some(thread),
            }),
            Err(e) => {
                if let Some(action) = action {
                    signal_hook_registry::unregister(action);
                }
                Err(e)
            }
        }
    }

    /// Whether Ctrl-C came.
    pub(crate) fn saw_ctrl_c(&self) -> bool {
        self.ctrl_c.load(Ordering::SeqCst)
    }
}

impl Drop for Watchdog {
    /// Tells the thread the run is over and lets it end by itself: waiting for it (a wake-up
    /// on another core and its stack's release, a few hundred microseconds of a one-shot
    /// run's end) would only delay this process's exit. Once Ctrl-C has been seen it is
    /// joined, so its messages are out before the exit code is.
    fn drop(&mut self) {
        if let Some(action) = self.action {
            signal_hook_registry::unregister(action);
        }
        let byte = OVER;
        // SAFETY: write(2) of one byte from a live local into our own pipe.
        unsafe { libc::write(self.tell.as_raw_fd(), (&raw const byte).cast(), 1) };
        if let Some(thread) = self.thread.take()
            && self.saw_ctrl_c()
            && thread.join().is_err()
        {
            errln!("adaptor: the Ctrl-C watchdog panicked");
        }
    }
}

/// The watchdog thread: see the module docs.
fn watch(
    listen: &OwnedFd,
    seen: &AtomicBool,
    cancel: &adaptor::Canceller,
    event_loop: EventLoopThread,
) {
    if !matches!(next_byte(listen, None), Ok(Some(CTRL_C))) {
        return;
    }
    // Before the cancellation, so a run it ends is known to have been interrupted.
    seen.store(true, Ordering::SeqCst);
    cancel.cancel();
    errln!("\nadaptor: cancelling…");
    if over_within(listen, PATIENCE) {
        return;
    }
    errln!("\nadaptor: output is blocked; stopping after Ctrl-C");
    if let Err(e) = unblock_stdout(&event_loop) {
        errln!("adaptor: could not unblock stdout: {e}");
    }
    if over_within(listen, PATIENCE) {
        return;
    }
    errln!("adaptor: the run did not stop; exiting (its provider processes end with this one)");
    std::process::exit(i32::from(EXIT_INTERRUPTED));
}

/// Whether the run is over within `patience` (further Ctrl-Cs are ignored).
fn over_within(listen: &OwnedFd, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        match next_byte(listen, Some(left)) {
            Ok(Some(CTRL_C) | None) => continue,
            Ok(Some(_)) => return true,
            // The pipe failed (it cannot while the watchdog holds its write end): treat the
            // run as over rather than act on a guess.
            Err(_) => return true,
        }
    }
}

/// The next byte from the pipe, waiting at most `timeout` (`None`: no limit); `Ok(None)`
/// when the time is up. End of file is an error (the watchdog holds the write end).
fn next_byte(listen: &OwnedFd, timeout: Option<Duration>) -> io::Result<Option<u8>> {
    let mut poll = libc::pollfd {
        fd: listen.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // Rounded up: a wait cut short by rounding down would look like the time being up early.
    let ms = timeout.map_or(-1, |t| {
        t.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
    });
    loop {
        // SAFETY: poll(2) on one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, ms) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if ready == 0 {
            return Ok(None);
        }
        let mut byte = 0u8;
        // SAFETY: read(2) of one byte into a live local.
        return match unsafe { libc::read(listen.as_raw_fd(), (&raw mut byte).cast(), 1) } {
            1 => Ok(Some(byte)),
            0 => Err(io::ErrorKind::UnexpectedEof.into()),
            _ => Err(io::Error::last_os_error()),
        };
    }
}

/// The thread running the event loop, as `pthread_kill` names it. A plain number on glibc, a
/// pointer on musl (hence not `Send` by itself); either way a handle that any thread of the
/// process may use while the thread it names lives. That thread is the main thread:
/// `adaptor run` drives its loop with `block_on` on it (see `main`), and so does
/// `adaptor serve` for every run it serves (see `serve`); it lives until the process exits,
/// which also ends the watchdog.
struct EventLoopThread(libc::pthread_t);

// SAFETY: see above: the handle is only passed to `pthread_kill`, from the watchdog thread,
// and names the main thread, which outlives every other thread of the process.
unsafe impl Send for EventLoopThread {}

/// Point stdout at `/dev/null` and interrupt the event loop's blocked write.
fn unblock_stdout(event_loop: &EventLoopThread) -> io::Result<()> {
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
    // SAFETY: dup2(2) onto descriptor 1; `null` stays ours and closes on drop.
    if unsafe { libc::dup2(null.as_raw_fd(), libc::STDOUT_FILENO) } < 0 {
        return Err(io::Error::last_os_error());
    }
    extern "C" fn nothing(_: libc::c_int) {}
    // SAFETY: a handler that does nothing (async-signal-safe) for SIGURG, which nothing else
    // in this process uses; without SA_RESTART, so the blocked write returns EINTR (or a
    // partial count) instead of being restarted on the pipe nobody reads.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = nothing as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGURG, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        match libc::pthread_kill(event_loop.0, libc::SIGURG) {
            0 => Ok(()),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }
}

/// A pipe whose descriptors are not inherited: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2(2) fills `fds` when it returns 0; each descriptor is then owned once.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}
