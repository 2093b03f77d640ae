//! Helper for `tests/tests/integration/stores.rs`: one process of the multi-process store checks.
//!
//! ```text
//! store-racer race <store> <key> <record-id> <dir> <worker> <rounds> <ttl-ms> [--stale-hold]
//! store-racer finalize-loop <store> <key>
//! ```
//!
//! `<store>` is `sqlite:<path>` or `postgres:<url>`. `race` prints one JSON
//! [`RaceReport`](adaptortest::store_suite::RaceReport) line; `finalize-loop`
//! prints `ready` after its first commit and runs until killed. Failures go to stderr with
//! exit code 1, bad usage exits 2. The logic lives in `adaptortest::store_suite` (shared with the
//! in-process memory-store race); this file only parses arguments.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use adaptor_integration_tests::open_store;
use adaptortest::store_suite::{RaceConfig, finalize_loop, race_worker};

const USAGE: &str = "usage: store-racer race <store> <key> <record-id> <dir> <worker> <rounds> \
                     <ttl-ms> [--stale-hold] | store-racer finalize-loop <store> <key>";

fn number<T: std::str::FromStr>(args: &[String], index: usize, name: &str) -> Result<T, String> {
    args.get(index)
        .ok_or_else(|| format!("missing <{name}>"))?
        .parse()
        .map_err(|_| format!("<{name}> is not a number: {:?}", args[index]))
}

async fn run(args: Vec<String>) -> Result<(), (u8, String)> {
    let usage = |m: String| (2, format!("{m}\n{USAGE}"));
    match args.first().map(String::as_str) {
        Some("race") if args.len() == 8 || args.len() == 9 => {
            let stale_hold = match args.get(8).map(String::as_str) {
                None => false,
                Some("--stale-hold") => true,
                Some(other) => return Err(usage(format!("unknown flag {other:?}"))),
            };
            let config = RaceConfig {
                key: args[2].clone(),
                record_id: args[3].clone(),
                dir: PathBuf::from(&args[4]),
                worker: number(&args, 5, "worker").map_err(usage)?,
                rounds: number(&args, 6, "rounds").map_err(usage)?,
                ttl: Duration::from_millis(number(&args, 7, "ttl-ms").map_err(usage)?),
                stale_hold,
            };
            let store = open_store(&args[1])
                .await
                .map_err(|e| (1, format!("open: {e}")))?;
            let report = race_worker(store.as_ref(), &config)
                .await
                .map_err(|e| (1, format!("racer {}: {e}", config.worker)))?;
            let line = serde_json::to_string(&report).map_err(|e| (1, e.to_string()))?;
            println!("{line}");
            Ok(())
        }
        Some("finalize-loop") if args.len() == 3 => {
            let store = open_store(&args[1])
                .await
                .map_err(|e| (1, format!("open: {e}")))?;
            finalize_loop(store.as_ref(), &args[2])
                .await
                .map_err(|e| (1, e))
        }
        _ => Err(usage(format!("bad arguments {args:?}"))),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("store-racer: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, message)) => {
            eprintln!("store-racer: {message}");
            ExitCode::from(code)
        }
    }
}
