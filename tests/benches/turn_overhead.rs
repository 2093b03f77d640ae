//! Benchmark (not a test): what the host adds to a turn, measured in one run.
//!
//! Prints, from interleaved rounds on this machine:
//! 1. in-process `Agent::run` through the reference driver vs spawning the reference provider
//!    directly (median ms each, difference, ratio);
//! 2. the `adaptor run` CLI process vs the provider process run directly, and its own time
//!    (its wall time minus the provider process's life, `--json`'s `provider_ms`); the same
//!    `adaptor run` handed to a resident host (`adaptor serve`, started once), interleaved;
//! 3. driver cold compile vs cached load (from bytes, which are hashed every time, and from
//!    the driver's file, as `Driver::builtin` and `adaptor run` load it: the file's stamps
//!    recorded, neither file read), and instantiating a fresh sandboxed instance;
//! 4. one host-tool round trip (MCP `tools/call` in, the handler, the result out) on
//!    loopback, p50/p99 as the CLI's MCP client sees it, against a bare rmcp server with a
//!    trivial tool (`mock_mcp::serve_http`: no bearer check, no handler wrapper), calls
//!    interleaved on one session each;
//! 5. the host's own time in a resident thread turn (`transport: stdio`, the provider kept
//!    between turns): the caller's wall time minus the provider's span in it (first prompt
//!    byte written → last output byte read), p50/p99 over `BENCH_RESIDENT_TURNS` turns
//!    (default 300) — the same measure `sdk_compare` takes on the real CLIs, free of their
//!    noise and fast enough to iterate on.
//!
//! Run with `./x.sh bench` (release build). Rounds: `BENCH_ROUNDS` (default 30).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use adaptor::{Agent, Driver, LoadOptions, Mcp, Tool};
use adaptor_integration_tests::{bin_dir, driver_path, own_time_of_json_run, provider_path};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PROMPT: &str = "benchmark prompt";

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Wait until `path` last changed 3.5 s ago by its stamps: the compiled cache trusts a
/// driver file's stamps only once they are 2 s old, and they are read here in whole seconds
/// (rounded down, so up to 1 s more), plus half a second of margin.
fn settle(path: &Path) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).unwrap();
    let changed =
        std::time::UNIX_EPOCH + Duration::from_secs(meta.ctime().max(meta.mtime()).max(0) as u64);
    let settled = changed + Duration::from_millis(3500);
    if let Ok(left) = settled.duration_since(std::time::SystemTime::now()) {
        std::thread::sleep(left);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn direct(state: &Path) -> Duration {
    let t = Instant::now();
    let mut child = tokio::process::Command::new(provider_path())
        .args(["--state-dir", &state.display().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn provider");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(PROMPT.as_bytes()).await.unwrap();
    drop(stdin);
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut out)
        .await
        .unwrap();
    let status = child.wait().await.unwrap();
    assert!(status.success() && !out.is_empty());
    t.elapsed()
}

/// The log filter of the resident host and of the runs it serves (their environments must
/// be the same): its line per served run, and warnings.
const SERVE_LOG: &str = "adaptor_host::serve=debug,warn";

/// `adaptor run --json` as a process, handed to the resident host on `served` (a socket)
/// or not: its wall time and its own (the wall time minus the provider process's life, the
/// result line's `provider_ms`).
fn cli(state: &Path, ws: &Path, served: Option<&Path>) -> (Duration, Duration) {
    let config = serde_json::json!({
        "command": provider_path().display().to_string(),
        "state_dir": state.display().to_string(),
    });
    let mut cmd = std::process::Command::new(bin_dir().join("adaptor"));
    match served {
        Some(socket) => cmd
            .env("ADAPTOR_SOCKET", socket)
            .env("ADAPTOR_LOG", SERVE_LOG),
        None => cmd.env("ADAPTOR_SOCKET", ""),
    };
    let t = Instant::now();
    let out = cmd
        .args([
            "run",
            "--json",
            "--config",
            &config.to_string(),
            "--cwd",
            &ws.display().to_string(),
            PROMPT,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run adaptor");
    let wall = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let own = own_time_of_json_run(&String::from_utf8_lossy(&out.stdout), ms(wall));
    (wall, Duration::from_secs_f64(own.max(0.0) / 1e3))
}

fn direct_process(state: &Path) -> Duration {
    let t = Instant::now();
    let mut child = std::process::Command::new(provider_path())
        .args(["--state-dir", &state.display().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(PROMPT.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    t.elapsed()
}

/// The `q`th percentile of `v`, ms.
fn percentile(v: &[f64], q: usize) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[(v.len() * q / 100).min(v.len() - 1)]
}

/// `turns` turns of one resident thread (after one warm-up turn): per turn, the host's own
/// time and the wall time, ms.
async fn resident(
    wasm: &[u8],
    options: &LoadOptions,
    state: &Path,
    ws: &Path,
    turns: usize,
) -> (Vec<f64>, Vec<f64>) {
    use adaptor::StreamKind;
    let driver = adaptor_integration_tests::with_resident_reference_provider(
        Driver::from_bytes_with("reference", wasm, options).unwrap(),
        state,
    );
    let agent = Agent::builder(driver)
        .workspace(ws)
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let thread = agent.thread("resident-bench");
    thread.run(PROMPT).await.unwrap();
    let (mut host, mut wall) = (Vec::new(), Vec::new());
    for _ in 0..turns {
        let t = Instant::now();
        let result = thread.run(PROMPT).await.unwrap();
        let elapsed = t.elapsed();
        let chunks = &result.raw().chunks;
        let written = chunks
            .iter()
            .find(|c| c.stream == StreamKind::Stdin)
            .expect("a resident turn writes its prompt");
        let read = chunks
            .iter()
            .rev()
            .find(|c| c.stream != StreamKind::Stdin)
            .expect("a turn reads output");
        assert!(
            result.exit.kept_alive,
            "the provider stays for the next turn"
        );
        host.push(ms(
            elapsed.saturating_sub(read.at.saturating_sub(written.at))
        ));
        wall.push(ms(elapsed));
    }
    agent.close().await;
    (host, wall)
}

fn main() {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let state = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let wasm = std::fs::read(driver_path("reference")).unwrap();

    // Compile and load.
    let cold: Vec<Duration> = (0..5)
        .map(|_| {
            let t = Instant::now();
            Driver::from_bytes_with("reference", &wasm, &LoadOptions { cache_dir: None }).unwrap();
            t.elapsed()
        })
        .collect();
    let cache = tempfile::tempdir().unwrap();
    let cached_opts = LoadOptions {
        cache_dir: Some(cache.path().to_path_buf()),
    };
    Driver::from_bytes_with("reference", &wasm, &cached_opts).unwrap();
    let cached: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            Driver::from_bytes_with("reference", &wasm, &cached_opts).unwrap();
            t.elapsed()
        })
        .collect();
    let driver = Driver::from_bytes_with("reference", &wasm, &cached_opts)
        .unwrap()
        .with_config(serde_json::json!({
            "command": provider_path().display().to_string(),
            "state_dir": state.path().display().to_string(),
        }))
        .unwrap();
    // From the file: once it has settled (its stamps are trusted only 2 s after its last
    // change), a first load compiles and records it, a second checks the entry once.
    let file = driver_path("reference");
    settle(&file);
    let file_cache = tempfile::tempdir().unwrap();
    let file_opts = LoadOptions {
        cache_dir: Some(file_cache.path().to_path_buf()),
    };
    Driver::from_file_with(&file, &file_opts).unwrap();
    Driver::from_file_with(&file, &file_opts).unwrap();
    let cached_file: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            Driver::from_file_with(&file, &file_opts).unwrap();
            t.elapsed()
        })
        .collect();
    let inst: Vec<Duration> = (0..200)
        .map(|_| {
            let t = Instant::now();
            driver.instantiate_check().unwrap();
            t.elapsed()
        })
        .collect();

    // Turn overhead, interleaved: direct spawn, Agent (default: parent-death signal on),
    // Agent with the parent-death signal off (posix_spawn instead of fork).
    let driver_for_tools = driver.clone();
    let agent = Agent::builder(driver.clone()).workspace(ws.path()).build();
    let lean = Agent::builder(driver)
        .workspace(ws.path())
        .parent_death_signal(false)
        .build();
    let (mut d, mut a, mut l, mut dp, mut c, mut ch) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    rt.block_on(async {
        // Warm up every path once.
        direct(state.path()).await;
        agent.run(PROMPT).await.unwrap();
        lean.run(PROMPT).await.unwrap();
        for _ in 0..rounds {
            d.push(direct(state.path()).await);
            let t = Instant::now();
            agent.run(PROMPT).await.unwrap();
            a.push(t.elapsed());
            let t = Instant::now();
            lean.run(PROMPT).await.unwrap();
            l.push(t.elapsed());
        }
    });
    // A resident host, and how many runs it served (its log's line per run).
    let serve_dir = tempfile::tempdir().unwrap();
    // In a directory the host makes private (a temporary directory here is open to others).
    let socket = serve_dir.path().join("run/serve.sock");
    let serve_log = serve_dir.path().join("serve.log");
    let mut host = std::process::Command::new(bin_dir().join("adaptor"))
        .arg("serve")
        .env("ADAPTOR_SOCKET", &socket)
        .env("ADAPTOR_LOG", SERVE_LOG)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&serve_log).unwrap())
        .spawn()
        .expect("spawn adaptor serve");
    let until = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        assert!(Instant::now() < until, "adaptor serve did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    let served = || {
        std::fs::read_to_string(&serve_log)
            .unwrap_or_default()
            .matches("adaptor serve: served a run (exit 0)")
            .count()
    };
    let (mut s, mut sh) = (vec![], vec![]);
    cli(state.path(), ws.path(), None);
    cli(state.path(), ws.path(), Some(&socket));
    let process_rounds = rounds.min(30);
    for round in 0..process_rounds {
        // The three in an order that turns each round.
        for path in (0..3).map(|i| (i + round) % 3) {
            match path {
                0 => dp.push(direct_process(state.path())),
                1 => {
                    let (wall, own) = cli(state.path(), ws.path(), None);
                    c.push(wall);
                    ch.push(own);
                }
                _ => {
                    let before = served();
                    let (wall, own) = cli(state.path(), ws.path(), Some(&socket));
                    assert_eq!(served(), before + 1, "the resident host served the run");
                    s.push(wall);
                    sh.push(own);
                }
            }
        }
    }
    // SAFETY: kill(2) on the host this bench started.
    unsafe { libc::kill(host.id() as i32, libc::SIGTERM) };
    assert!(
        host.wait().unwrap().success(),
        "adaptor serve stopped cleanly"
    );
    // Per round: `adaptor run` alone minus served (ms; either may be the larger).
    let mut paired_served: Vec<f64> = s.iter().zip(&c).map(|(s, c)| ms(*c) - ms(*s)).collect();
    paired_served.sort_by(f64::total_cmp);
    let saved = paired_served[paired_served.len() / 2];
    // Host tool round trips, interleaved with the bare server's, over one session each.
    let calls = (rounds * 20).max(200);
    let bare_url = rt.block_on(adaptor_integration_tests::mock_mcp::serve_http());
    let echo = Tool::define_json(
        "echo",
        "echo",
        serde_json::json!({"type": "object"}),
        |v| async move { Ok(v) },
    );
    let tools_agent = Agent::builder(driver_for_tools)
        .workspace(ws.path())
        .tools([echo])
        .mcp([Mcp::http("bare", bare_url)])
        .build();
    let report: serde_json::Value = rt.block_on(async {
        let r = tools_agent
            .run(format!("[[mcp-bench host,bare:echo:{calls}]]"))
            .await
            .expect("tool bench run");
        let output = r
            .transcript()
            .iter()
            .find(|i| i.tool_call_id.as_deref() == Some("mcp-bench-1") && i.text.is_some())
            .and_then(|i| i.text.clone())
            .expect("bench result");
        tools_agent.close().await;
        serde_json::from_str(&output).unwrap_or_else(|_| panic!("bench failed: {output}"))
    });
    let resident_turns: usize = std::env::var("BENCH_RESIDENT_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let (resident_host, resident_wall) = rt.block_on(resident(
        &wasm,
        &cached_opts,
        state.path(),
        ws.path(),
        resident_turns,
    ));
    let us = |server: &str, q: &str| report[server][q].as_f64().expect("a latency");
    let (d, a, l, dp, c, ch, s, sh) = (
        median(d),
        median(a),
        median(l),
        median(dp),
        median(c),
        median(ch),
        median(s),
        median(sh),
    );
    println!("turn overhead ({rounds} interleaved rounds, medians)");
    println!(
        "  in-process: provider direct {:.2} ms · Agent::run via reference.wasm {:.2} ms · host adds {:.2} ms · ratio {:.2}x",
        ms(d),
        ms(a),
        ms(a) - ms(d),
        ms(a) / ms(d)
    );
    println!(
        "  in-process, parent_death_signal(false): {:.2} ms · host adds {:.2} ms · ratio {:.2}x",
        ms(l),
        ms(l) - ms(d),
        ms(l) / ms(d)
    );
    println!(
        "  processes:  provider direct {:.2} ms · `adaptor run` {:.2} ms · CLI adds {:.2} ms · ratio {:.2}x · its own time {:.2} ms (wall − the provider process's life)",
        ms(dp),
        ms(c),
        ms(c) - ms(dp),
        ms(c) / ms(dp),
        ms(ch)
    );
    println!(
        "  served:     `adaptor run` handed to `adaptor serve` {:.2} ms · adds {:.2} ms over the provider · ratio {:.2}x · its own time {:.2} ms · {:.2} ms less than `adaptor run` alone (paired, {process_rounds} rounds)",
        ms(s),
        ms(s) - ms(dp),
        ms(s) / ms(dp),
        ms(sh),
        saved
    );
    println!(
        "driver load ({} KB component): cold compile {:.2} ms · cached load {:.3} ms · ratio {:.0}x",
        wasm.len() / 1024,
        ms(median(cold.clone())),
        ms(median(cached.clone())),
        ms(median(cold)) / ms(median(cached))
    );
    println!(
        "driver load from its file (as `Driver::builtin` loads it, its stamps recorded): cached load {:.3} ms",
        ms(median(cached_file))
    );
    println!(
        "instantiate + describe in a fresh sandbox: {:.1} µs (median of 200)",
        ms(median(inst)) * 1e3
    );
    println!(
        "resident thread turn ({resident_turns} turns, reference provider kept between turns): host's own time p50 {:.0} µs · p99 {:.0} µs · wall p50 {:.0} µs",
        percentile(&resident_host, 50) * 1e3,
        percentile(&resident_host, 99) * 1e3,
        percentile(&resident_wall, 50) * 1e3,
    );
    println!(
        "host tool round trip ({calls} interleaved calls each, loopback): p50 {:.0} µs · p99 {:.0} µs · bare rmcp server p50 {:.0} µs · p99 {:.0} µs · ratio p50 {:.2}x · p99 {:.2}x",
        us("host", "p50_us"),
        us("host", "p99_us"),
        us("bare", "p50_us"),
        us("bare", "p99_us"),
        us("host", "p50_us") / us("bare", "p50_us"),
        us("host", "p99_us") / us("bare", "p99_us"),
    );
}
