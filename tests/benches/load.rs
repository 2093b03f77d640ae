//! Load benchmark (not a test): `LOAD_RUNS` (default 1000) concurrent scripted runs in one
//! host process, through the reference driver and the reference provider.
//!
//! Prints: runs completed, lost critical events (must be 0: every run must have exactly one
//! `RunStarted` first and one `RunFinished` last, its tool result, a closed text lifecycle and
//! its transcript items — all events the host never drops), peak RSS of the host process, and
//! the p50 / p99 of each run's wall time and of the host's overhead per turn (wall time minus
//! the provider's own output span, from the run's raw chunk timeline).
//!
//! Then `LOAD_THREADS` (default 1000) threads, each kept on its own resident provider
//! process (the reference driver's stdio transport): all first turns at once, a pause with
//! every session parked, then all second turns at once on the resident processes. Prints
//! completion, lost critical events (0), the host's RSS per parked session (current RSS
//! with every session parked, minus before, divided by the sessions), the p50 / p99 host
//! overhead of a resident turn, the machine memory each parked session costs, and that
//! closing the agent leaves no provider process. (Before the spawner process, each
//! provider's keeper and reaper (the keeper is gone since) were forks of the host, and 1000 parked sessions ran the
//! 24 GiB machine of the README out of memory; now they are forks of the small spawner.)
//!
//! Run with `./x.sh bench` (release build).

use std::time::{Duration, Instant};

use adaptor::store::MemoryStore;
use adaptor::{Agent, Driver, Event, Phase};
use adaptor_integration_tests::{
    driver_path, proc_kib, processes_with, provider_path, with_resident_reference_provider,
};
use futures::StreamExt;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at]
}

/// Current resident set size of this process (VmRSS), KiB.
fn rss_kib() -> u64 {
    proc_kib("/proc/self/status", "VmRSS").unwrap_or(0)
}

/// The machine's available memory (MemAvailable), KiB.
fn mem_available_kib() -> u64 {
    proc_kib("/proc/meminfo", "MemAvailable").unwrap_or(0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Peak resident set size of this process (VmHWM), KiB.
fn peak_rss_kib() -> u64 {
    proc_kib("/proc/self/status", "VmHWM").unwrap_or(0)
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
    agent.close().await;

    let threads: usize = std::env::var("LOAD_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    idle_threads(threads, state.path(), ws.path()).await;
}

/// The outcome of one turn: its events, result and wall time.
type Turn = (
    Vec<Event>,
    Result<adaptor::RunResult, adaptor::Error>,
    Duration,
);

/// One turn on every thread at once.
async fn turn_on_all(agent: &Agent, threads: usize, turn: usize) -> Vec<Turn> {
    let tasks: Vec<_> = (0..threads)
        .map(|i| {
            let agent = agent.clone();
            tokio::spawn(async move {
                let t = Instant::now();
                let thread = agent.thread(format!("idle-{i}"));
                let mut stream = thread.stream(format!("thread {i} turn {turn}"));
                let mut events = Vec::new();
                while let Some(ev) = stream.next().await {
                    events.push(ev);
                }
                let result = stream.result().await;
                (events, result, t.elapsed())
            })
        })
        .collect();
    let mut out = Vec::with_capacity(threads);
    for task in tasks {
        out.push(task.await.expect("turn task"));
    }
    out
}

/// Whether a run's events say it started its provider or reused the resident one.
fn reused(events: &[Event]) -> bool {
    events
        .iter()
        .any(|e| matches!(e, Event::Notice(n) if n.notice == "process.reused"))
}

async fn idle_threads(threads: usize, state: &std::path::Path, ws: &std::path::Path) {
    let driver = with_resident_reference_provider(
        Driver::from_file(driver_path("reference")).unwrap(),
        state,
    );
    let agent = Agent::builder(driver)
        .workspace(ws)
        .timeout(Duration::from_secs(600))
        .resident_idle(Duration::from_secs(1800))
        .thread_store(MemoryStore::new())
        .build();
    let rss_before = rss_kib();
    let available_before = mem_available_kib();
    let started = Instant::now();
    let first = turn_on_all(&agent, threads, 1).await;
    let opened = started.elapsed();
    let mut lost = 0;
    let mut failed = Vec::new();
    for (events, result, _) in &first {
        lost += lost_critical(events);
        if let Err(e) = result {
            failed.push(e.to_string());
        }
    }
    let parked = threads - failed.len();
    // Parked: every session idle on its resident process.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let parked_rss = rss_kib();
    let machine_per_session =
        available_before.saturating_sub(mem_available_kib()) as f64 / parked.max(1) as f64;
    let parked_providers = processes_with(state).len();

    let started = Instant::now();
    let second = turn_on_all(&agent, threads, 2).await;
    let resumed = started.elapsed();
    let mut overheads = Vec::with_capacity(threads);
    let mut on_resident = 0;
    for (events, result, _) in &second {
        lost += lost_critical(events);
        on_resident += usize::from(reused(events));
        match result {
            Ok(r) => {
                let provider_span = r.raw().chunks.last().map(|c| c.at).unwrap_or_default();
                overheads.push(r.duration.saturating_sub(provider_span));
            }
            Err(e) => failed.push(e.to_string()),
        }
    }
    overheads.sort();
    agent.close().await;
    let mut left = processes_with(state).len();
    for _ in 0..100 {
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = processes_with(state).len();
    }

    println!("load: {threads} threads with resident processes in one host process");
    println!(
        "  first turns {:.2} s · second turns (on the resident processes) {:.2} s · failed {} · lost critical events {lost}",
        opened.as_secs_f64(),
        resumed.as_secs_f64(),
        failed.len()
    );
    if let Some(first) = failed.first() {
        println!("  first failure: {first}");
    }
    println!(
        "  parked: {parked} sessions, {parked_providers} provider processes · host RSS {:.1} MiB (before {:.1} MiB) · {:.1} KiB per parked session",
        parked_rss as f64 / 1024.0,
        rss_before as f64 / 1024.0,
        parked_rss.saturating_sub(rss_before) as f64 / parked.max(1) as f64
    );
    println!(
        "  machine memory per parked session (MemAvailable drop: host, provider and the confinement's reaper) {:.1} MiB",
        machine_per_session / 1024.0
    );
    println!("  second turns on their resident process: {on_resident}/{threads}");
    if !overheads.is_empty() {
        println!(
            "  host overhead per resident turn (wall − provider output span) p50 {:.2} ms · p99 {:.2} ms",
            ms(percentile(&overheads, 0.5)),
            ms(percentile(&overheads, 0.99))
        );
    }
    println!("  provider processes left after close: {left}");
    assert_eq!(lost, 0, "critical events were lost");
    assert!(failed.is_empty(), "turns failed");
    assert_eq!(on_resident, threads, "every second turn reuses its process");
    assert_eq!(left, 0, "close stops every resident process");
}
