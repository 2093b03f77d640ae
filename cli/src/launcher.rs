//! `adaptor`, the launcher: hand an `adaptor run` to a resident host, else run
//! `adaptor-host`.
//!
//! Every `adaptor` command starts here. An `adaptor run` that a resident host (`adaptor
//! serve`) accepts is served, and this process exits with the run's exit code; any other
//! command, or a run no host serves, executes `adaptor-host` from this executable's own
//! directory in this process's place (`execve`: the same process id, arguments, argv[0],
//! environment and descriptors), with why a host did not serve it, if one was asked, in
//! `ADAPTOR_NOT_SERVED`.
//!
//! Why a second executable: `adaptor-host` takes about 0.7 ms longer than a small
//! executable to start and exit (relocating 670 KB of pointers before `main`: 284 page
//! faults against 38), which was most of a served run's cost at the caller. A command that
//! is not served pays this launcher's start on top, about 0.4 ms (both measured in
//! docs/performance.md).
//!
//! Owns: choosing between the two. Must not: parse more of the command line than its first
//! word (the host and `adaptor-host` parse it), or link anything but the library.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;

use adaptor_cli::handover::{self, HandOver};
use adaptor_cli::{EXIT_USAGE, HOST_EXECUTABLE, NOT_SERVED_ENV};

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let host = match host_executable() {
        Ok(host) => host,
        Err(e) => return fail(format_args!("cannot find {HOST_EXECUTABLE}: {e}")),
    };
    let not_served = match handover::hand_over(&args, &host) {
        HandOver::Served(code) => return ExitCode::from(code),
        HandOver::Local(why) => why,
    };
    let mut command = std::process::Command::new(&host);
    command.args(args.iter().skip(1));
    if let Some(arg0) = args.first() {
        command.arg0(arg0);
    }
    // A value the caller set itself is not the launcher's to pass on.
    command.env_remove(NOT_SERVED_ENV);
    if let Some(why) = not_served {
        command.env(NOT_SERVED_ENV, why);
    }
    let e = command.exec();
    fail(format_args!(
        "cannot run {}: {e} (`adaptor` runs the `{HOST_EXECUTABLE}` installed beside it; \
         install or build both)",
        host.display()
    ))
}

/// `adaptor-host` in this executable's directory.
fn host_executable() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .ok_or_else(|| std::io::Error::other(format!("{} has no directory", exe.display())))?;
    Ok(dir.join(HOST_EXECUTABLE))
}

/// Say what went wrong on stderr (ignoring failure) and exit 2.
fn fail(message: std::fmt::Arguments<'_>) -> ExitCode {
    let _ = writeln!(std::io::stderr().lock(), "adaptor: {message}");
    ExitCode::from(EXIT_USAGE)
}
