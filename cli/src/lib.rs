//! What the two executables of the `adaptor` command share.
//!
//! `adaptor` is a small launcher (`launcher.rs`): it hands an `adaptor run` to a resident
//! host (`adaptor serve`) when one serves it, and otherwise executes `adaptor-host`, the
//! whole command (`main.rs`), in its own place — same process, arguments and environment.
//! The split exists for speed: `adaptor-host` is a 39 MB executable (wasmtime, Cranelift,
//! both thread stores) that takes about 0.7 ms longer than a small one to start and exit,
//! most of it relocating its pointers before `main`; a served run needs none of that (see
//! docs/performance.md).
//!
//! This library holds the exit codes both report, the names the two agree on, and
//! [`handover`] (the caller's side of the resident host's protocol). Must not: depend on
//! anything but `std`, `libc` and `signal-hook-registry`, so that the launcher stays small.

pub mod handover;

use std::time::Duration;

/// Exit code: the run failed.
pub const EXIT_RUN_FAILED: u8 = 1;
/// Exit code: usage, config or setup error (also: the launcher cannot start `adaptor-host`).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: driver fault (trap or contract violation); also a resident host that broke
/// off a served run.
pub const EXIT_DRIVER_FAULT: u8 = 3;
/// Exit code: cancelled with Ctrl-C.
pub const EXIT_INTERRUPTED: u8 = 130;

/// How long a run's Ctrl-C watchdog waits at each of its two steps for the run to end (see
/// `interrupt.rs`); a served caller waits for both, and a second more, before it gives up.
pub const PATIENCE: Duration = Duration::from_secs(4);

/// The file name of the whole command, which the launcher executes from its own directory.
pub const HOST_EXECUTABLE: &str = "adaptor-host";

/// Set by the launcher for `adaptor-host` when a resident host was asked and did not serve
/// the run: why (`ADAPTOR_LOG=debug` shows it). `adaptor-host` removes it from its
/// environment first thing, so no run sees it.
pub const NOT_SERVED_ENV: &str = "ADAPTOR_NOT_SERVED";
