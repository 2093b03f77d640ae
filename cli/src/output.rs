//! Terminal manners: writing data to stdout and messages to stderr the way Unix tools do, and
//! the colour choice.
//!
//! Owns the `outln!`/`out!`/`errln!` macros every command prints through, the "stdout was
//! closed" flag, `--color auto|always|never` with `NO_COLOR`, and [`sanitize`], which makes
//! driver and provider text inert on a terminal. Everything written through the macros is
//! sanitised at the sink — whatever a command interpolates (an approval id, a descriptor
//! string, a program name in an error), no control character from a driver or provider
//! reaches the terminal; the only escape codes written are the CLI's own dim style
//! ([`write_stdout_dim`]) and the status line's. Must not: decide what a command prints.
//!
//! A closed stdout (`adaptor run --json "hi" | head -3`) is not an error: the first write that
//! fails with `EPIPE` marks stdout closed and later writes are skipped, so nothing panics; the
//! command notices ([`stdout_closed`]), stops its work (a run is cancelled: nobody reads its
//! output any more) and exits with [`EXIT_STDOUT_CLOSED`] (141 = 128 + SIGPIPE, the status a
//! shell shows for `yes | head`). Other write errors (a full disk) are reported once on
//! stderr and end the command the same way with exit code 1. Writes to stderr never fail a
//! command: there is nowhere left to report that.

use std::fmt;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU8, Ordering};

/// Exit code after stdout was closed by the reader (128 + SIGPIPE).
pub const EXIT_STDOUT_CLOSED: u8 = 141;

const OPEN: u8 = 0;
const CLOSED: u8 = 1;
const FAILED: u8 = 2;
static STDOUT_STATE: AtomicU8 = AtomicU8::new(OPEN);

/// How stdout stopped accepting data, if it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdoutLost {
    /// The reader went away (`EPIPE`): quiet, exit 141.
    Closed,
    /// Another write error (reported on stderr when it happened): exit 1.
    Failed,
}

impl StdoutLost {
    /// The exit code a command ends with.
    pub fn exit_code(self) -> u8 {
        match self {
            StdoutLost::Closed => EXIT_STDOUT_CLOSED,
            StdoutLost::Failed => 1,
        }
    }
}

/// Whether stdout stopped accepting data (and how).
pub fn stdout_closed() -> Option<StdoutLost> {
    match STDOUT_STATE.load(Ordering::Relaxed) {
        OPEN => None,
        CLOSED => Some(StdoutLost::Closed),
        _ => Some(StdoutLost::Failed),
    }
}

/// Forget that stdout was lost: a run that `adaptor serve` serves starts with its client's
/// stdout in place of the one a previous run lost.
pub fn reset_stdout() {
    STDOUT_STATE.store(OPEN, Ordering::Relaxed);
}

/// Write to stdout and flush; after a failed write, do nothing. Used by `out!`/`outln!`.
pub fn write_stdout(args: fmt::Arguments<'_>) {
    if STDOUT_STATE.load(Ordering::Relaxed) != OPEN {
        return;
    }
    write_stdout_raw(&sanitize(&args.to_string()));
}

/// Write `text` dimmed (the one style the CLI uses): the text is sanitised, the style codes
/// are the CLI's own.
pub fn write_stdout_dim(text: &str) {
    write_stdout_raw(&format!("\x1b[2m{}\x1b[0m", sanitize(text)));
}

fn write_stdout_raw(text: &str) {
    if STDOUT_STATE.load(Ordering::Relaxed) != OPEN {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            STDOUT_STATE.store(CLOSED, Ordering::Relaxed);
        } else {
            STDOUT_STATE.store(FAILED, Ordering::Relaxed);
            write_stderr(format_args!("adaptor: cannot write to stdout: {e}\n"));
        }
    }
}

thread_local! {
    /// Where this thread's messages and log lines go instead of descriptor 2, if set (see
    /// [`keep_stderr_of_this_thread`]).
    static THREAD_STDERR: std::cell::RefCell<Option<std::fs::File>> =
        const { std::cell::RefCell::new(None) };
}

/// Send this thread's messages and log lines to `stderr` instead of descriptor 2: for the
/// threads of `adaptor serve` that work beside the run it serves, whose descriptor 2 is then
/// the caller's.
pub fn keep_stderr_of_this_thread(stderr: std::fs::File) {
    THREAD_STDERR.set(Some(stderr));
}

/// `bytes` to this thread's stderr (see [`keep_stderr_of_this_thread`]), else descriptor 2.
fn to_stderr(bytes: &[u8]) -> std::io::Result<()> {
    THREAD_STDERR.with_borrow_mut(|own| match own {
        Some(file) => file.write_all(bytes),
        None => {
            let mut err = std::io::stderr().lock();
            err.write_all(bytes).and_then(|()| err.flush())
        }
    })
}

/// Write to stderr, sanitised, ignoring failures. Used by `errln!`.
pub fn write_stderr(args: fmt::Arguments<'_>) {
    let _ = to_stderr(sanitize(&args.to_string()).as_bytes());
}

/// Print to stdout (data), surviving a closed pipe.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write_stdout(format_args!($($arg)*)) };
}

/// Print a line to stdout (data), surviving a closed pipe.
#[macro_export]
macro_rules! outln {
    () => { $crate::output::write_stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Print a line to stderr (messages, progress, errors), never failing.
#[macro_export]
macro_rules! errln {
    () => { $crate::output::write_stderr(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::write_stderr(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour when stdout is a terminal, `NO_COLOR` is unset or empty and `TERM` is not `dumb`.
    #[default]
    Auto,
    /// Always colour (even into a pipe; the flag wins over `NO_COLOR`).
    Always,
    /// Never colour.
    Never,
}

impl ColorChoice {
    /// Whether stdout gets colour and other styling escape codes.
    pub fn stdout_styled(self) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => std::io::stdout().is_terminal() && env_allows_color(),
        }
    }

    /// The matching clap setting, for help and usage errors.
    pub fn clap(self) -> clap::ColorChoice {
        match self {
            ColorChoice::Auto if !env_allows_color() => clap::ColorChoice::Never,
            ColorChoice::Auto => clap::ColorChoice::Auto,
            ColorChoice::Always => clap::ColorChoice::Always,
            ColorChoice::Never => clap::ColorChoice::Never,
        }
    }
}

/// Where log lines go: stderr, sanitised unless the log is styled (then tracing-subscriber
/// escapes control characters inside fields itself, and its own colour codes must survive).
pub fn log_writer() -> LogWriter {
    LogWriter {
        styled: stderr_styled(),
    }
}

/// The CLI's log sink (see [`log_writer`]).
#[derive(Debug, Clone, Copy)]
pub struct LogWriter {
    styled: bool,
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogLine;

    fn make_writer(&'a self) -> LogLine {
        LogLine {
            styled: self.styled,
        }
    }
}

/// One log line being written.
#[derive(Debug)]
pub struct LogLine {
    styled: bool,
}

impl Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.styled {
            to_stderr(buf)?;
        } else {
            to_stderr(sanitize(&String::from_utf8_lossy(buf)).as_bytes())?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Whether stderr gets styling (the log lines' colours): a terminal, and the environment
/// allows colour.
pub fn stderr_styled() -> bool {
    std::io::stderr().is_terminal() && env_allows_color()
}

/// `NO_COLOR` (set and not empty, see no-color.org) and `TERM=dumb` turn colour off.
fn env_allows_color() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
    !no_color && !dumb
}

/// Replace control characters (ESC, CSI, BEL, …) except newline and tab, so text from
/// drivers and providers cannot move the cursor, set the clipboard or retitle the terminal.
pub fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            c if c.is_control() => '\u{fffd}',
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_neutralised() {
        let evil = "ok\x1b]52;c;ZXZpbA==\x07 \x1b[2J\rdone\n";
        let clean = sanitize(evil);
        assert!(!clean.contains('\x1b') && !clean.contains('\x07') && !clean.contains('\r'));
        assert!(clean.ends_with("done\n"));
    }

    #[test]
    fn explicit_choices_ignore_the_terminal() {
        assert!(ColorChoice::Always.stdout_styled());
        assert!(!ColorChoice::Never.stdout_styled());
        assert_eq!(StdoutLost::Closed.exit_code(), 141);
        assert_eq!(StdoutLost::Failed.exit_code(), 1);
    }
}
