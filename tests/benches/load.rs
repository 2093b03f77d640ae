//! Load benchmark (not a test): `LOAD_RUNS` (default 1000) concurrent scripted runs in one
//! host process, through the reference driver and the reference provider.
//!
//! Prints: runs completed, lost critical events (must be 0: every run must have exactly one
//! `RunStarted` first and one `RunFinished` last, its tool result, a closed text lifecycle and
//! its transcript items — all events the host never drops), peak RSS of the host process, and
//! the p50 / p99 of each run's wall time and of the host's overhead per turn (wall time minus
//! the provider's own output span, from the run's raw chunk timeline).
//!
//! Run with `./x.sh bench` (release build).

use std::time::{Duration, Instant};

use adaptor::{Agent, Driver, Event, Phase};
use adaptor_integration_tests::{driver_path, provider_path};
use futures::StreamExt;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Peak resident set size of this process (VmHWM), KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// How many of the critical events a run's stream lacks (0 for a healthy run).
fn lost_critical(events: &[Event]) -> usize {
    let mut lost = 0;
    if !matches!(events.first(), Some(Event::RunStarted(_))) {
        lost += 1;
    }
    if !matches!(events.last(), Some(Event::RunFinished(f)) if !f.failed) {
        lost += 1;
    }
    let has = |f: &dyn Fn(&Event) -> bool| events.iter().any(f);
    if !has(&|e| matches!(e, Event::ToolResult(_))) {
        lost += 1;
    }
    if !has(&|e| matches!(e, Event::TextDelta(t) if t.phase == Phase::End)) {
        lost += 1;
    }
    let items = events
        .iter()
        .filter(|e| matches!(e, Event::Item(_)))
        .count();
    // init, thinking, tool call, tool result, assistant, result
    lost += 6usize.saturating_sub(items);
    lost
}

#[tokio::main]
async fn main() {
    let runs: usize = std::env::var("LOAD_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let state = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let driver = Driver::from_file(driver_path("reference"))
        .unwrap()
        .with_config(serde_json::json!({
            "command": provider_path().display().to_string(),
            "state_dir": state.path().display().to_string(),
        }))
        .unwrap();
    let agent = Agent::builder(driver)
        .workspace(ws.path())
        .timeout(Duration::from_secs(600))
        .build();
    let rss_before = peak_rss_kib();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(runs);
    for i in 0..runs {
        let agent = agent.clone();
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let mut stream = agent.stream(format!("load run {i}"));
            let mut events = Vec::new();
            while let Some(ev) = stream.next().await {
                events.push(ev);
            }
            let result = stream.result().await;
            let wall = t.elapsed();
            (events, result, wall)
        }));
    }
    let mut completed = 0;
    let mut failed = Vec::new();
    let mut lost = 0;
    let mut walls = Vec::with_capacity(runs);
    let mut overheads = Vec::with_capacity(runs);
    for task in tasks {
        let (events, result, wall) = task.await.expect("run task");
        lost += lost_critical(&events);
        match result {
            Ok(r) => {
                completed += 1;
                walls.push(wall);
                let provider_span = r.raw().chunks.last().map(|c| c.at).unwrap_or_default();
                overheads.push(r.duration.saturating_sub(provider_span));
            }
            Err(e) => failed.push(e.to_string()),
        }
    }
    let total = started.elapsed();
    walls.sort();
    overheads.sort();
    println!("load: {runs} concurrent runs through reference.wasm in one host process");
    println!(
        "  completed {completed}/{runs} in {:.2} s · lost critical events {lost} · failed {}",
        total.as_secs_f64(),
        failed.len()
    );
    if let Some(first) = failed.first() {
        println!("  first failure: {first}");
    }
    println!(
        "  peak RSS {:.1} MiB (before the runs {:.1} MiB)",
        peak_rss_kib() as f64 / 1024.0,
        rss_before as f64 / 1024.0
    );
    if !walls.is_empty() {
        println!(
            "  run wall time p50 {:.1} ms · p99 {:.1} ms",
            ms(percentile(&walls, 0.5)),
            ms(percentile(&walls, 0.99))
        );
        println!(
            "  host overhead per turn (wall − provider output span) p50 {:.2} ms · p99 {:.2} ms",
            ms(percentile(&overheads, 0.5)),
            ms(percentile(&overheads, 0.99))
        );
    }
    assert_eq!(lost, 0, "critical events were lost");
}
