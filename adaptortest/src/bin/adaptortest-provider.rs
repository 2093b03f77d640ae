//! `adaptortest-provider`: a scripted fake CLI that replays a cassette.
//!
//! Reads the cassette named by `ADAPTORTEST_CASSETTE`, drains its stdin (appending it to
//! `ADAPTORTEST_STDIN_LOG` when set), writes the recorded stdout/stderr chunks in order — with
//! the recorded timing, scaled by `ADAPTORTEST_TIMING` (`recorded` = 1.0, the default; `fast`
//! = 0; or a factor) — and ends with the recorded exit code or signal. A cassette that ends
//! with exit code 0 ends like a CLI that finished its turn: it first reads its input until the
//! host closes it (at the end of the turn) or stdin has been quiet for 2 s (at most 10 s in
//! all), so the frames the driver writes in answer to the output are delivered rather than
//! lost to a broken pipe. Its own arguments are
//! ignored: they are whatever the driver under test builds. Exit code 120 means the cassette
//! could not be used (the message is on stderr).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use adaptor::StreamKind;
use adaptor::cassette::Cassette;

fn fail(message: &str) -> ! {
    eprintln!("adaptortest-provider: {message}");
    std::process::exit(120);
}

fn main() {
    let path = std::env::var_os("ADAPTORTEST_CASSETTE")
        .unwrap_or_else(|| fail("ADAPTORTEST_CASSETTE is not set"));
    let cassette =
        Cassette::load(std::path::Path::new(&path)).unwrap_or_else(|e| fail(&e.to_string()));
    let factor = match std::env::var("ADAPTORTEST_TIMING").as_deref() {
        Err(_) | Ok("recorded") => 1.0,
        Ok("fast") => 0.0,
        Ok(other) => other
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .unwrap_or_else(|| fail("ADAPTORTEST_TIMING must be `recorded`, `fast` or a factor")),
    };
    let stdin_log = std::env::var_os("ADAPTORTEST_STDIN_LOG");
    let start = Instant::now();
    // Milliseconds since `start` of the last stdin activity.
    let last_input = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = last_input.clone();
    let drain = std::thread::spawn(move || {
        let mut log = stdin_log.and_then(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .ok()
        });
        let mut buf = [0u8; 8192];
        let mut stdin = std::io::stdin().lock();
        while let Ok(n) = stdin.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.store(
                start.elapsed().as_millis() as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
            if let Some(f) = log.as_mut() {
                let _ = f.write_all(&buf[..n]);
            }
        }
    });
    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr().lock();
    for chunk in &cassette.chunks {
        let bytes = chunk.bytes().unwrap_or_else(|e| fail(&e));
        let due = Duration::from_secs_f64(chunk.at_ms * factor / 1e3);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        let written = match chunk.stream {
            StreamKind::Stdout => stdout.write_all(&bytes).and_then(|()| stdout.flush()),
            StreamKind::Stderr => stderr.write_all(&bytes).and_then(|()| stderr.flush()),
            StreamKind::Stdin => Ok(()),
        };
        if written.is_err() {
            // The reader went away (the host stopped us): end like a killed CLI.
            std::process::exit(141);
        }
    }
    if cassette.exit.signal.is_none() && cassette.exit.code == Some(0) {
        let output_done = start.elapsed();
        let cap = output_done + Duration::from_secs(10);
        loop {
            let now = start.elapsed();
            let last = Duration::from_millis(last_input.load(std::sync::atomic::Ordering::Relaxed))
                .max(output_done);
            if drain.is_finished() || now >= cap || now - last >= Duration::from_secs(2) {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    if let Some(signal) = cassette.exit.signal {
        // SAFETY: restoring the default action and raising a signal on ourselves.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }
    std::process::exit(cassette.exit.code.unwrap_or(1));
}
