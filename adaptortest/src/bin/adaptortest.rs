//! `adaptortest`: check a `.wasm` driver against the contract, or replay a cassette.
//!
//! ```text
//! adaptortest check DRIVER.wasm [--config JSON] [--cassette FILE|DIR]... [--no-faults]
//!                  [--live] [--json | --markdown]
//! adaptortest replay --driver DRIVER.wasm CASSETTE [--stderr FILE] [--exit-code N] [--json]
//! ```
//!
//! Exit codes: 0 all clauses pass (or the replay ran) · 1 a clause failed · 2 usage error.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use adaptor::cassette::Cassette;
use adaptor::{Driver, Event, Phase};
use adaptortest::check::{CheckOptions, check_driver};
use adaptortest::replay::{ReplayOptions, Timing, replay_cassette, replay_json};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "adaptortest",
    version,
    about = "Conformance kit for agent-adaptor WASM drivers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every clause that applies to the driver.
    Check(CheckArgs),
    /// The capability matrix and clause results as Markdown (for a driver's README); the same
    /// clauses as `check`.
    Report(CheckArgs),
    /// Replay one cassette (or a plain stdout capture) through a driver and print the outcome.
    Replay {
        /// The driver component.
        #[arg(long)]
        driver: PathBuf,
        /// A cassette, or a plain stdout capture.
        cassette: PathBuf,
        /// For a plain capture: the stderr capture.
        #[arg(long)]
        stderr: Option<PathBuf>,
        /// For a plain capture: the exit code (default 0).
        #[arg(long, default_value_t = 0)]
        exit_code: i32,
        /// Driver config (JSON object, or @file); default: the cassette's.
        #[arg(long)]
        config: Option<String>,
        /// Replay timing.
        #[arg(long, default_value = "fast")]
        timing: String,
        /// Print one JSON object with `events` and `outcome`.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct CheckArgs {
    /// The driver component.
    driver: PathBuf,
    /// Suite config (JSON object, or @file).
    #[arg(long)]
    config: Option<String>,
    /// Cassettes to replay (files, or directories of `*.json`).
    #[arg(long = "cassette")]
    cassettes: Vec<PathBuf>,
    /// Replay timing: `fast` (default), `recorded`, or a factor.
    #[arg(long, default_value = "fast")]
    timing: String,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Skip fault injection.
    #[arg(long)]
    no_faults: bool,
    /// Also run the live clauses: the real CLI answers "Reply with exactly: OK" (also
    /// enabled by ADAPTORTEST_LIVE=1). Never on by default: it may call a paid service.
    #[arg(long)]
    live: bool,
    /// Print the capability matrix and results as Markdown.
    #[arg(long)]
    markdown: bool,
}

fn usage(message: &str) -> ExitCode {
    eprintln!("adaptortest: {message}");
    ExitCode::from(2)
}

fn parse_config(text: &str) -> Result<serde_json::Value, String> {
    let text = match text.strip_prefix('@') {
        Some(p) => std::fs::read_to_string(p).map_err(|e| format!("cannot read {p}: {e}"))?,
        None => text.to_owned(),
    };
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("--config is not JSON: {e}"))?;
    if v.is_object() {
        Ok(v)
    } else {
        Err("--config must be a JSON object".into())
    }
}

fn parse_timing(text: &str) -> Result<Timing, String> {
    match text {
        "fast" => Ok(Timing::Fast),
        "recorded" => Ok(Timing::Recorded),
        other => other
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map(Timing::Factor)
            .ok_or_else(|| format!("--timing must be fast, recorded or a factor, not `{other}`")),
    }
}

/// `--config` and `--timing`, shared by every subcommand.
fn parse_common(
    config: Option<&str>,
    timing: &str,
) -> Result<(Option<serde_json::Value>, Timing), String> {
    Ok((config.map(parse_config).transpose()?, parse_timing(timing)?))
}

/// Cassette files named directly or found in directories, sorted.
fn cassette_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .flatten()
                .map(|e| e.path())
                .filter(|f| f.extension().is_some_and(|x| x == "json"))
                .collect();
            found.sort();
            out.extend(found);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// A cassette file, or a plain stdout capture.
fn load_any(path: &Path, stderr: Option<&Path>, exit_code: i32) -> Result<Cassette, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let looks_like_cassette = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .is_some_and(|v| v.get("format").is_some());
    if looks_like_cassette {
        let text = String::from_utf8(bytes).map_err(|e| e.to_string())?;
        return Cassette::from_json(&text, &path.display().to_string()).map_err(|e| e.to_string());
    }
    let stderr = match stderr {
        Some(p) => std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?,
        None => Vec::new(),
    };
    Ok(Cassette::from_capture(&bytes, &stderr, exit_code))
}

async fn check(args: CheckArgs, force_markdown: bool) -> ExitCode {
    let CheckArgs {
        driver,
        config,
        cassettes,
        timing,
        json,
        no_faults,
        live,
        markdown,
    } = args;
    let markdown = markdown || force_markdown;
    let (config, timing) = match parse_common(config.as_deref(), &timing) {
        Ok(x) => x,
        Err(e) => return usage(&e),
    };
    let files = match cassette_files(&cassettes) {
        Ok(f) => f,
        Err(e) => return usage(&e),
    };
    let mut loaded = Vec::new();
    for f in files {
        match Cassette::load(&f) {
            Ok(c) => loaded.push((
                f.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                c,
            )),
            Err(e) => return usage(&e.to_string()),
        }
    }
    let options = CheckOptions {
        config,
        cassettes: loaded,
        replay: ReplayOptions {
            timing,
            ..ReplayOptions::default()
        },
        skip_faults: no_faults,
        live: live || std::env::var("ADAPTORTEST_LIVE").is_ok_and(|v| v == "1"),
        program_dirs: std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(PathBuf::from))
            .into_iter()
            .collect(),
    };
    let report = check_driver(&driver, &options).await;
    if markdown {
        match Driver::from_file(&driver) {
            Ok(d) => print!(
                "{}",
                adaptortest::check::render_markdown(d.descriptor(), &report)
            ),
            Err(_) => print!("{}", report.render_text()),
        }
    } else if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serialises")
        );
    } else {
        print!("{}", report.render_text());
    }
    if report.failed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Check(args) => check(args, false).await,
        Command::Report(args) => check(args, true).await,
        Command::Replay {
            driver,
            cassette,
            stderr,
            exit_code,
            config,
            timing,
            json,
        } => {
            let (config, timing) = match parse_common(config.as_deref(), &timing) {
                Ok(x) => x,
                Err(e) => return usage(&e),
            };
            let cassette = match load_any(&cassette, stderr.as_deref(), exit_code) {
                Ok(c) => c,
                Err(e) => return usage(&e),
            };
            let loaded = match Driver::from_file(&driver) {
                Ok(d) => d,
                Err(e) => return usage(&e.to_string()),
            };
            let options = ReplayOptions {
                timing,
                config,
                ..ReplayOptions::default()
            };
            let replayed = match replay_cassette(&loaded, &cassette, &options).await {
                Ok(r) => r,
                Err(e) => return usage(&e.to_string()),
            };
            if json {
                println!("{}", replay_json(&replayed));
            } else {
                print_replay(&replayed);
            }
            ExitCode::SUCCESS
        }
    }
}

fn print_replay(replayed: &adaptortest::Replayed) {
    for ev in &replayed.events {
        match ev {
            Event::TextDelta(d) if d.phase == Phase::Delta => {
                println!("{:>5} text      {:?}", d.meta.sequence, d.text)
            }
            Event::Thinking(d) if d.phase == Phase::Delta => {
                println!("{:>5} thinking  {:?}", d.meta.sequence, d.text)
            }
            Event::ProcessInfo(_) => {}
            other => println!("{:>5} {}", other.meta().sequence, other.kind()),
        }
    }
    let doc = replay_json(replayed);
    println!(
        "outcome: {}",
        serde_json::to_string_pretty(&doc["outcome"]).expect("serialises")
    );
}
