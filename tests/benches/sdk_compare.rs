//! Benchmark (not a test): agent-adaptor side by side with the raw CLIs and the official SDKs,
//! on the real pinned Claude Code and Codex CLIs against the project's mock model servers
//! (loopback only), every path interleaved, in an order shuffled each round.
//!
//! One-shot rows (a new CLI process per turn): the raw CLI; `adaptor run` (a whole process:
//! start-up, driver load from the compiled cache, the run); `adaptor run` served by a resident
//! host (`adaptor serve`, started once for the whole bench; the row checks that the host served
//! each of its runs); `Agent::run` in process; the same
//! with `AgentBuilder::prewarm(1)` (the measured run starts on a process started ≥ 1 s before
//! it, as when requests arrive at least that far apart; for Claude Code with the driver's
//! stream-json transport, since plain `-p` gives up after 3 s without stdin); for Codex,
//! `adaptor run` once more with the driver's exec transport (`codex exec --json`, the raw
//! row's entry point: for a streaming caller such as `adaptor run` the driver's default is the
//! app-server, a different code path of the CLI with its handshake); the official SDKs (the Claude Agent
//! SDK for TypeScript and Python, the Codex SDK for TypeScript) through the scripts in
//! `tests/sdk-bench/`, pointed at the same pinned CLI. Wall time and, where the path shows its
//! events, time to first text. For our one-shot paths also the host's own time: the wall time
//! minus the provider process's life as the host saw it (`RawStreams::exited`; `adaptor run`
//! runs with `--json` and its result line's `provider_ms`), which the one-shot target (at most
//! 5 ms for `adaptor run`) is read on: a Claude Code one-shot varies by tens of ms from run to
//! run, far more than the paired rows of ten rounds can resolve.
//!
//! Session rows (20 turns in one conversation): a minimal loop speaking the CLI's own stdin
//! protocol, written here (the floor: Claude Code stream-json input, the Codex app-server's
//! JSON-RPC); a `Thread` on its resident process; the SDKs' own multi-turn sessions. Per turn,
//! medians of turns 2–20 (turn 1 includes the start-up). Claude Code has two floors: with the
//! driver's flags and end of turn (`idle`), which the `Thread` is compared with, and with the
//! TS SDK's (`--permission-mode default`, `CLAUDE_CODE_ENTRYPOINT=sdk-ts`, no partial
//! messages, end at `result`), which the SDKs are compared with. Per thread turn the bench
//! also prints the host's own time: the caller's wall time minus the provider's span (from
//! the prompt written to its stdin to the last output read), which is what the host adds
//! over a loop that writes at once and returns on the last line, measured without the
//! CLI's run-to-run noise. The prompt's write is timed when its bytes are handed to the pipe
//! (`ChunkRecord::at`): the floor's loop pays the `write` itself too, and a CLI woken by it
//! may run on the writing thread's CPU before `write` returns.
//!
//! Also: the `adaptor run` process's peak RSS beside the CLI (VmHWM, sampled every 5 ms, and
//! the largest private share seen, `RssAnon`: the rest is clean pages of the executable and
//! shared libraries, shared with every process running them and reclaimable; in an untimed
//! run of its own each round, as the sampling costs the process under it) and
//! the cold compile and cached load of the built-in drivers.
//!
//! Every row checks that the mock saw exactly the model requests it should (one per turn).
//! Run with `./x.sh bench` (installs the CLIs and the SDKs; release build). Rounds: `BENCH_ROUNDS`
//! (default 10); turns per session: `BENCH_TURNS` (default 20).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use adaptor::store::MemoryStore;
use adaptor::{Agent, AgentBuilder, Driver, Event, LoadOptions};
use adaptor_integration_tests::mock_anthropic::{MockAnthropic, claude_env, claude_path};
use adaptor_integration_tests::mock_openai::{MockOpenAi, codex_env, codex_home, codex_path};
use adaptor_integration_tests::{bin_dir, driver_path, own_time_of_json_run, proc_kib};
use futures::StreamExt;
use serde_json::{Value, json};

const PROMPT: &str = "Say hello";

/// How an `adaptor run` row runs.
#[derive(Clone, Copy)]
enum Launch {
    /// A process of its own, as without a resident host.
    Local,
    /// Handed to the bench's resident host (`adaptor serve`).
    Served,
}

/// The order of `paths` paths in round `round`: a permutation that differs from round to
/// round, neighbours included (shuffled by a generator seeded with the round, so a run is
/// reproducible).
fn round_order(paths: usize, round: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..paths).collect();
    fastrand::Rng::with_seed(round as u64).shuffle(&mut order);
    order
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "no samples");
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The median and the 90th percentile of `v` (not empty), and how many samples it has.
fn p50_p90(v: &[f64]) -> (f64, f64, usize) {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[(v.len() - 1) * 9 / 10], v.len())
}

/// Which CLI (and which mock) a measurement is on.
#[derive(Clone, Copy, Debug)]
enum Cli {
    Claude,
    Codex,
}

/// One CLI's one-shot paths.
struct OneShot<'a> {
    cli: Cli,
    driver: &'static str,
    program: &'a Path,
    env: &'a [(String, String)],
    cold: &'a Agent,
    /// The builder of the prewarmed row's agent (`prewarm` is added there): the agent is
    /// built for that row alone and closed after it, so that no warm process of ours idles
    /// beside the other rows (an idle Codex app-server's file-watcher thread woke during
    /// them, taking CPU from whatever was measured).
    warm: &'a dyn Fn() -> AgentBuilder,
    /// Driver config added to `adaptor run`'s for one more `adaptor run` row each (the Codex
    /// driver's exec transport: the raw row's own entry point, where its default for a
    /// streaming caller is the app-server).
    adaptor_variants: Vec<Value>,
    /// (runner, script) of each official SDK.
    sdks: Vec<(&'a Path, &'static str)>,
}

impl OneShot<'_> {
    /// Fill `warm`'s pool and give the new process a second to finish starting (untimed:
    /// nothing is measured meanwhile).
    fn warm_up(rt: &tokio::runtime::Runtime, warm: &Agent) {
        rt.block_on(async {
            warm.warm_up().await.expect("prewarm");
            tokio::time::sleep(Duration::from_secs(1)).await;
        })
    }
}

/// Samples of one path: wall and time to first text (ms).
#[derive(Default)]
struct Row {
    wall: Vec<f64>,
    first_text: Vec<f64>,
    host: Vec<f64>,
}

impl Row {
    fn push(&mut self, sample: Sample) {
        self.wall.push(sample.wall);
        if let Some(f) = sample.first {
            self.first_text.push(f);
        }
        if let Some(h) = sample.host {
            self.host.push(h);
        }
    }
}

/// One path's measurement in one round, ms.
#[derive(Clone, Copy, Default)]
struct Sample {
    /// Wall time, as the caller sees it.
    wall: f64,
    /// Time to the first text the caller sees, where the path shows it.
    first: Option<f64>,
    /// The host's own time, for our paths: the wall time minus the provider process's life
    /// as the host saw it (`RawStreams::exited`, `adaptor run --json`'s `provider_ms`) —
    /// preparing and launching it, concluding after its exit, and for `adaptor run` the
    /// process's own start and end. The CLI's run-to-run noise is not in it.
    host: Option<f64>,
}

impl Sample {
    fn of((wall, first): (f64, Option<f64>)) -> Sample {
        Sample {
            wall,
            first,
            host: None,
        }
    }
}

/// Time to first text of a Claude Code stream-json line, if it carries text.
fn claude_text(line: &str) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        return false;
    };
    match v["type"].as_str() {
        Some("stream_event") => v["event"]["delta"]["type"] == "text_delta",
        Some("assistant") => v["message"]["content"]
            .as_array()
            .is_some_and(|c| c.iter().any(|p| p["type"] == "text")),
        _ => false,
    }
}

/// Read `child`'s stdout lines until `done` says so; the time of the first line `text` accepts.
fn read_until(
    child: &mut Child,
    start: Instant,
    text: impl Fn(&str) -> bool,
    done: impl Fn(&str) -> bool,
) -> Option<f64> {
    let stdout = child.stdout.as_mut().expect("piped stdout");
    let mut first = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read stdout");
        if first.is_none() && text(&line) {
            first = Some(ms(start.elapsed()));
        }
        if done(&line) {
            break;
        }
    }
    first
}

/// The mocks, homes, workspace and CLIs of one benchmark run.
struct Bench {
    anthropic: MockAnthropic,
    openai: MockOpenAi,
    claude: PathBuf,
    codex: PathBuf,
    claude_home: tempfile::TempDir,
    codex_home: tempfile::TempDir,
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    sdk_dir: PathBuf,
    python: PathBuf,
    /// The resident host's log, and the directory of its socket (`run/`, which the host
    /// makes private: a temporary directory here is open to others).
    serve_dir: tempfile::TempDir,
}

/// The log filter of the resident host and of the runs it serves (their environments must
/// be the same): its line per served run, and warnings.
const SERVE_LOG: &str = "adaptor_host::serve=debug,warn";

impl Bench {
    /// The environment of an `adaptor` served by the resident host, and of the host.
    fn served_env(&self) -> Vec<(String, String)> {
        vec![
            (
                "ADAPTOR_SOCKET".into(),
                self.serve_dir
                    .path()
                    .join("run/serve.sock")
                    .display()
                    .to_string(),
            ),
            ("ADAPTOR_LOG".into(), SERVE_LOG.into()),
        ]
    }

    /// How many runs the resident host has served.
    fn served(&self) -> usize {
        std::fs::read_to_string(self.serve_dir.path().join("serve.log"))
            .unwrap_or_default()
            .matches("adaptor serve: served a run (exit 0)")
            .count()
    }

    /// Start `adaptor serve` (stopped by the caller: SIGTERM, then waited for).
    fn start_host(&self) -> Child {
        let log = std::fs::File::create(self.serve_dir.path().join("serve.log")).unwrap();
        let child = self
            .command(&bin_dir().join("adaptor"), &self.served_env())
            .arg("serve")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn adaptor serve");
        let socket = self.serve_dir.path().join("run/serve.sock");
        let until = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            assert!(Instant::now() < until, "adaptor serve did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        child
    }

    fn claude_env(&self) -> Vec<(String, String)> {
        claude_env(self.claude_home.path(), &self.anthropic.base_url())
    }

    fn codex_env(&self) -> Vec<(String, String)> {
        codex_env(self.codex_home.path(), self.home.path())
    }

    /// A command with only `PATH` and `env` (what the host passes the CLI, and no more),
    /// run in the workspace: the bench's own working directory (set in `main`), which every
    /// child inherits. Not `Command::current_dir`: for it the standard library of a static
    /// glibc build (as the release is) forks the whole bench — its threads, mocks and
    /// agents — instead of starting the child as `posix_spawn` does, which added about
    /// 0.5 ms to every row's wall time and, uncounted by the raw CLI, to the host's own
    /// time of `adaptor run` (a `sched` trace: fork to `exec` 0.87 against 0.35 ms).
    fn command(&self, program: &Path, env: &[(String, String)]) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        cmd
    }

    /// Run `f`, checking that `cli`'s mock saw `expected` model requests meanwhile.
    fn on<T>(&self, cli: Cli, what: &str, expected: usize, f: impl FnOnce() -> T) -> T {
        let requests = || match cli {
            Cli::Claude => self.anthropic.requests().len(),
            Cli::Codex => self.openai.requests().len(),
        };
        let before = requests();
        let out = f();
        let seen = requests() - before;
        assert_eq!(
            seen, expected,
            "{what}: the {cli:?} mock saw {seen} requests, expected {expected}"
        );
        out
    }

    fn on_claude<T>(&self, what: &str, expected: usize, f: impl FnOnce() -> T) -> T {
        self.on(Cli::Claude, what, expected, f)
    }

    fn on_codex<T>(&self, what: &str, expected: usize, f: impl FnOnce() -> T) -> T {
        self.on(Cli::Codex, what, expected, f)
    }

    /// One round of one CLI's one-shot rows: raw CLI, `adaptor run`, `Agent::run` cold, then
    /// on a prewarmed process, then `adaptor run` served by the resident host, then
    /// `adaptor run` with each of `adaptor_variants`, then each
    /// SDK script; wall and time to first text of each, in the order of the table. They run
    /// in a different order each round, shuffled ([`round_order`]): a fixed order measured
    /// every path right after the same neighbour, whose leftovers (the CLI's own background children, caches, a warm
    /// process just started) then counted against it alone — `adaptor run`, always right
    /// after the raw CLI, read 40–70 ms slower than it where an alternating A/B of the two
    /// showed none. Rotating the order is not enough: it keeps every path's neighbour (the
    /// Codex exec-transport row, always right after the prewarmed run and its pool's
    /// refill, read 28–46 ms over the raw CLI in rotated runs, where 100 alternating rounds
    /// by hand put it at 7.8 ms). The prewarmed run takes a process started ≥ 1 s before, on
    /// an agent built for that row (its pool filled then, after the other paths' runs: those
    /// outside our confinement, the raw CLI and the SDKs, create Claude Code's
    /// `~/.claude.json` on their first run, and a process warmed before that file existed is
    /// rightly refused, the confinement granting a state file only once it exists); the
    /// pool's refill (a new CLI starting) is waited out, untimed, and the agent closed before
    /// the next path. With `rss` (MiB), one more `adaptor run` after the rows, untimed, gives
    /// its peak and private RSS.
    fn one_shot_round(
        &self,
        rt: &tokio::runtime::Runtime,
        one: &OneShot<'_>,
        round: usize,
        rss: Option<&mut Vec<(f64, f64)>>,
    ) -> Vec<Sample> {
        let cli = one.cli;
        let variants = one.adaptor_variants.len();
        let paths = 5 + variants + one.sdks.len();
        let mut sample = vec![Sample::default(); paths];
        for path in round_order(paths, round) {
            sample[path] = match path {
                0 => Sample::of(self.on(cli, "raw CLI", 1, || match cli {
                    Cli::Claude => self.raw_claude(),
                    Cli::Codex => self.raw_codex(),
                })),
                1 => self.on(cli, "adaptor run", 1, || {
                    self.adaptor_run(one, &json!({}), Launch::Local, false).0
                }),
                2 => self.on(cli, "Agent::run", 1, || {
                    rt.block_on(agent_run(one.cold, false))
                }),
                3 => {
                    let warm = rt.block_on(async { (one.warm)().prewarm(1).build() });
                    OneShot::warm_up(rt, &warm);
                    let measured = self.on(cli, "Agent::run, prewarmed", 1, || {
                        rt.block_on(agent_run(&warm, true))
                    });
                    // The refill, a CLI starting, is waited out before the agent closes
                    // (which stops it): a CLI stopped in the middle of its start could leave
                    // its state files half-written for the rows after.
                    OneShot::warm_up(rt, &warm);
                    rt.block_on(warm.close());
                    measured
                }
                4 => {
                    let before = self.served();
                    let sample = self.on(cli, "adaptor run, served", 1, || {
                        self.adaptor_run(one, &json!({}), Launch::Served, false).0
                    });
                    assert_eq!(
                        self.served(),
                        before + 1,
                        "the resident host served the run"
                    );
                    sample
                }
                variant if variant < 5 + variants => {
                    let extra = &one.adaptor_variants[variant - 5];
                    self.on(cli, "adaptor run (variant)", 1, || {
                        self.adaptor_run(one, extra, Launch::Local, false).0
                    })
                }
                _ => {
                    let (runner, script) = one.sdks[path - 5 - variants];
                    self.on(cli, script, 1, || {
                        let (wall, lines) = self.sdk(runner, script, &["oneshot", PROMPT], one.env);
                        assert_eq!(lines.len(), 1);
                        Sample::of((wall, None))
                    })
                }
            };
        }
        if let Some(rss) = rss {
            // Untimed, after the round's rows: a run of its own for the memory figures.
            let (_, peaks) = self.on(cli, "adaptor run (RSS)", 1, || {
                self.adaptor_run(one, &json!({}), Launch::Local, true)
            });
            let (peak, private) = peaks.expect("sampled");
            rss.push((peak as f64 / 1024.0, private as f64 / 1024.0));
        }
        sample
    }

    /// `claude -p` as the driver launches it, the prompt on stdin.
    fn raw_claude(&self) -> (f64, Option<f64>) {
        let mut env = self.claude_env();
        env.push(("CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS".into(), "1".into()));
        let start = Instant::now();
        let mut child = self
            .command(&self.claude, &env)
            .args([
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--include-partial-messages",
            ])
            .spawn()
            .expect("spawn claude");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(PROMPT.as_bytes()).unwrap();
        drop(stdin);
        let first = read_until(&mut child, start, claude_text, |_| false);
        assert!(child.wait().unwrap().success(), "claude -p failed");
        (ms(start.elapsed()), first)
    }

    /// `codex exec --json`, the prompt as its argument.
    fn raw_codex(&self) -> (f64, Option<f64>) {
        let start = Instant::now();
        let mut child = self
            .command(&self.codex, &self.codex_env())
            .args(["exec", "--json", "--skip-git-repo-check", PROMPT])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn codex");
        let first = read_until(
            &mut child,
            start,
            |l| l.contains("\"agent_message\"") && l.contains("item.completed"),
            |_| false,
        );
        assert!(child.wait().unwrap().success(), "codex exec failed");
        (ms(start.elapsed()), first)
    }

    /// `adaptor run --json` as a whole process, `extra` (an object) added to its driver
    /// config: its sample (the host's own time from its result line's `provider_ms`) and,
    /// with `rss`, its peak RSS and the largest private (anonymous) RSS seen (KiB), sampled
    /// every 5 ms until it exits. A run that samples is not one that is timed: polling the
    /// process's `/proc` status beside it added about 0.5 ms to the host's own time (paired,
    /// 30 rounds by hand).
    fn adaptor_run(
        &self,
        one: &OneShot<'_>,
        extra: &Value,
        launch: Launch,
        rss: bool,
    ) -> (Sample, Option<(u64, u64)>) {
        let (driver, env) = (one.driver, one.env);
        let mut config = json!({ "command": one.program.display().to_string() });
        if let (Some(config), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
            config.extend(extra.clone());
        }
        let config = config.to_string();
        let mut cmd = match launch {
            Launch::Served => self.command(&bin_dir().join("adaptor"), &self.served_env()),
            // Never served: the host's socket is in a directory of the bench's own.
            Launch::Local => self.command(&bin_dir().join("adaptor"), &[]),
        };
        cmd.args([
            "run", "--json", "--driver", driver, "--config", &config, "--cwd",
        ])
        .arg(self.ws.path())
        .stdin(Stdio::null());
        for (k, v) in env {
            cmd.args(["--env", &format!("{k}={v}")]);
        }
        let start = Instant::now();
        let mut child = cmd.arg(PROMPT).spawn().expect("spawn adaptor");
        let status = format!("/proc/{}/status", child.id());
        let done = std::sync::atomic::AtomicBool::new(false);
        let (wall, output, peaks) = std::thread::scope(|scope| {
            let sampler = rss.then(|| {
                scope.spawn(|| {
                    let (mut peak, mut private) = (0, 0);
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        if let Some(kib) = proc_kib(&status, "VmHWM") {
                            peak = peak.max(kib);
                        }
                        if let Some(kib) = proc_kib(&status, "RssAnon") {
                            private = private.max(kib);
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    (peak, private)
                })
            });
            let mut output = String::new();
            child
                .stdout
                .take()
                .expect("piped stdout")
                .read_to_string(&mut output)
                .expect("read adaptor's output");
            let exit = child.wait().expect("wait for adaptor");
            let wall = ms(start.elapsed());
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            assert!(exit.success(), "adaptor run --driver {driver} failed");
            let peaks = sampler.map(|s| s.join().expect("the RSS sampler"));
            (wall, output, peaks)
        });
        let sample = Sample {
            wall,
            first: None,
            host: Some(own_time_of_json_run(&output, wall)),
        };
        (sample, peaks)
    }

    /// An SDK script's `oneshot` (wall from outside) or `session` (its per-turn lines).
    fn sdk(
        &self,
        runner: &Path,
        script: &str,
        args: &[&str],
        env: &[(String, String)],
    ) -> (f64, Vec<Value>) {
        let mut env = env.to_vec();
        env.push(("BENCH_CLAUDE_BIN".into(), self.claude.display().to_string()));
        env.push(("BENCH_CODEX_BIN".into(), self.codex.display().to_string()));
        env.push((
            "BENCH_SDK_NODE_DIR".into(),
            self.sdk_dir.display().to_string(),
        ));
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("sdk-bench")
            .join(script);
        let start = Instant::now();
        let out = self
            .command(runner, &env)
            .arg(&script)
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("run the SDK script");
        let wall = ms(start.elapsed());
        assert!(
            out.status.success(),
            "{}: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let lines = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v.get("turn").is_some())
            .collect();
        (wall, lines)
    }
}

fn agent_builder(
    driver: &str,
    cli: &Path,
    config: Value,
    env: &[(String, String)],
    ws: &Path,
) -> AgentBuilder {
    let mut config = config;
    config["command"] = json!(cli.display().to_string());
    let driver = Driver::from_file(driver_path(driver))
        .expect("the built driver (./x.sh build-drivers)")
        .with_config(config)
        .expect("config");
    let mut builder = Agent::builder(driver)
        .workspace(ws)
        .grace_period(Duration::from_millis(500))
        .timeout(Duration::from_secs(120));
    for (k, v) in env {
        builder = builder.env(k, v);
    }
    builder
}

/// One in-process run: wall and time to first text. `prewarmed`: whether the run must have
/// started on a prewarmed process (and must not have, for a cold agent).
async fn agent_run(agent: &Agent, prewarmed: bool) -> Sample {
    let start = Instant::now();
    let mut stream = agent.stream(PROMPT);
    let mut first = None;
    let mut took_warm = false;
    while let Some(event) = stream.next().await {
        if first.is_none() && matches!(event, Event::TextDelta(_)) {
            first = Some(ms(start.elapsed()));
        }
        if let Event::Notice(n) = &event {
            assert!(
                !n.notice.starts_with("process.prewarm_"),
                "{}: {:?}",
                n.notice,
                n.message
            );
            took_warm |= n.notice == "process.prewarmed";
        }
    }
    let result = stream.result().await.expect("the run");
    let wall = ms(start.elapsed());
    assert_eq!(
        took_warm, prewarmed,
        "the run started on a prewarmed process"
    );
    let exited = result.raw().exited.expect("the provider's exit was seen");
    Sample {
        wall,
        first,
        host: Some(wall - ms(exited)),
    }
}

/// A line protocol on a child's stdin and stdout.
struct Pipe {
    child: Child,
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Pipe {
    fn new(mut cmd: Command) -> Pipe {
        let mut child = cmd.spawn().expect("spawn the CLI");
        Pipe {
            stdin: child.stdin.take().unwrap(),
            lines: BufReader::new(child.stdout.take().unwrap()).lines(),
            child,
        }
    }

    fn send(&mut self, v: &Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Read lines until one satisfies `done`; returns it.
    fn until(&mut self, done: impl Fn(&Value) -> bool) -> Value {
        loop {
            let line = self.lines.next().expect("the CLI ended early").unwrap();
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if done(&v) {
                return v;
            }
        }
    }

    fn close(self) {
        let Pipe {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        child.wait().unwrap();
    }
}

/// The floor for Claude Code: its stream-json input protocol spoken directly, user frames
/// into one process. `Flags::Driver`: the flags and environment the driver uses, each turn
/// ending at `idle` after its `result` frame, as the driver ends it. `Flags::Sdk`: the flags
/// and entry point the TS Agent SDK launches the CLI with, each turn ending at its `result`,
/// as the SDK ends it.
struct ClaudeFloor {
    pipe: Pipe,
    flags: Flags,
}

impl ClaudeFloor {
    fn start(b: &Bench, flags: Flags) -> ClaudeFloor {
        let mut env = b.claude_env();
        let args: &[&str] = match flags {
            Flags::Driver => {
                env.push(("CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS".into(), "1".into()));
                &[
                    "-p",
                    "--output-format",
                    "stream-json",
                    "--verbose",
                    "--include-partial-messages",
                    "--input-format",
                    "stream-json",
                ]
            }
            Flags::Sdk => {
                env.push(("CLAUDE_CODE_ENTRYPOINT".into(), "sdk-ts".into()));
                &[
                    "--output-format",
                    "stream-json",
                    "--verbose",
                    "--input-format",
                    "stream-json",
                    "--permission-mode",
                    "default",
                ]
            }
        };
        let mut cmd = b.command(&b.claude, &env);
        cmd.args(args);
        ClaudeFloor {
            pipe: Pipe::new(cmd),
            flags,
        }
    }

    /// One turn: ms.
    fn turn(&mut self) -> f64 {
        let frame = json!({"type": "user", "message": {"role": "user", "content": PROMPT}});
        let start = Instant::now();
        self.pipe.send(&frame);
        self.pipe.until(|v| v["type"] == "result");
        if self.flags == Flags::Driver {
            // With CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS, every result is written by `idle`.
            self.pipe
                .until(|v| v["subtype"] == "session_state_changed" && v["state"] == "idle");
        }
        ms(start.elapsed())
    }
}

/// Which client's launch a Claude floor copies.
#[derive(Clone, Copy, PartialEq)]
enum Flags {
    Driver,
    Sdk,
}

/// The floor for Codex: the app-server's JSON-RPC spoken directly (`initialize`,
/// `initialized`, `thread/start`, then `turn/start` … `turn/completed` per turn).
struct CodexFloor {
    pipe: Pipe,
    thread: String,
    next_id: u64,
}

impl CodexFloor {
    fn start(b: &Bench) -> CodexFloor {
        let mut cmd = b.command(&b.codex, &b.codex_env());
        cmd.arg("app-server");
        let mut pipe = Pipe::new(cmd);
        let reply = |id: u64| move |v: &Value| v["id"] == id && v.get("method").is_none();
        pipe.send(&json!({"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "floor", "version": "0"}}}));
        pipe.until(reply(1));
        pipe.send(&json!({"method": "initialized"}));
        pipe.send(&json!({"id": 2, "method": "thread/start", "params": {"cwd": b.ws.path()}}));
        let thread = pipe.until(reply(2))["result"]["thread"]["id"]
            .as_str()
            .expect("a thread id")
            .to_owned();
        CodexFloor {
            pipe,
            thread,
            next_id: 3,
        }
    }

    /// One turn: ms.
    fn turn(&mut self) -> f64 {
        let start = Instant::now();
        self.pipe.send(
            &json!({"id": self.next_id, "method": "turn/start", "params": {
            "threadId": self.thread, "input": [{"type": "text", "text": PROMPT}]}}),
        );
        self.next_id += 1;
        self.pipe.until(|v| v["method"] == "turn/completed");
        ms(start.elapsed())
    }
}

/// A floor session and a `Thread`, turn by turn alternately (paired samples: turn k of
/// each ran back to back): per-turn ms of the floor and of the thread, and the host's own
/// time in each thread turn (see [`host_time`]).
fn floor_and_thread(
    rt: &tokio::runtime::Runtime,
    mut floor: impl FnMut() -> f64,
    agent: &Agent,
    key: &str,
    turns: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let thread = agent.thread(key);
    let mut out = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..turns {
        out.0.push(floor());
        let (wall, host) = rt.block_on(async {
            let start = Instant::now();
            let result = thread.run(PROMPT).await.expect("a thread turn");
            let wall = start.elapsed();
            (ms(wall), host_time(wall, result.raw()))
        });
        out.1.push(wall);
        out.2.push(host);
    }
    out
}

/// The host's own time in a resident turn, ms: the caller's wall time minus the provider's
/// span in it — from the first bytes written to its stdin (the prompt, timed when they are
/// handed to the pipe) to the last output byte read. What is left is everything the host does before writing the prompt and after
/// the turn's last line (thread lease and state, driver calls, events, the result), free of
/// the CLI's own run-to-run noise, which dwarfs it in the paired wall times.
fn host_time(wall: std::time::Duration, raw: &adaptor::RawStreams) -> f64 {
    use adaptor::StreamKind;
    let written = raw
        .chunks
        .iter()
        .find(|c| c.stream == StreamKind::Stdin)
        .expect("a resident turn writes its prompt to stdin");
    let last_read = raw
        .chunks
        .iter()
        .rev()
        .find(|c| c.stream != StreamKind::Stdin)
        .expect("a turn reads output");
    ms(wall.saturating_sub(last_read.at.saturating_sub(written.at)))
}

/// Per-turn ms of turns 2.. of a session.
fn later(turns: &[f64]) -> Vec<f64> {
    turns.iter().skip(1).copied().collect()
}

/// Turn times of an SDK session script's lines.
fn sdk_turns(lines: &[Value]) -> Vec<f64> {
    lines.iter().filter_map(|l| l["ms"].as_f64()).collect()
}

fn cold_and_cached(name: &str) -> (usize, f64, f64) {
    let wasm = std::fs::read(driver_path(name)).unwrap();
    let cold = (0..3)
        .map(|_| {
            let t = Instant::now();
            Driver::from_bytes_with(name, &wasm, &LoadOptions { cache_dir: None }).unwrap();
            ms(t.elapsed())
        })
        .collect();
    let cache = tempfile::tempdir().unwrap();
    let cached_opts = LoadOptions {
        cache_dir: Some(cache.path().to_path_buf()),
    };
    Driver::from_bytes_with(name, &wasm, &cached_opts).unwrap();
    let cached = (0..20)
        .map(|_| {
            let t = Instant::now();
            Driver::from_bytes_with(name, &wasm, &cached_opts).unwrap();
            ms(t.elapsed())
        })
        .collect();
    (wasm.len(), median(cold), median(cached))
}

fn main() {
    let rounds: usize = env_or("BENCH_ROUNDS", 10);
    let turns: usize = env_or("BENCH_TURNS", 20);
    let cache =
        PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/agent-adaptor-clis");
    let sdk_dir = std::env::var_os("BENCH_SDK_NODE_DIR")
        .map_or_else(|| cache.join("sdk-node"), PathBuf::from);
    let python = std::env::var_os("BENCH_SDK_PYTHON")
        .map_or_else(|| cache.join("sdk-python/bin/python"), PathBuf::from);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let b = rt.block_on(async {
        Bench {
            anthropic: MockAnthropic::start().await,
            openai: MockOpenAi::start().await,
            claude: claude_path().expect("Claude Code (./x.sh installs it)"),
            codex: codex_path().expect("Codex (./x.sh installs it)"),
            claude_home: tempfile::tempdir().unwrap(),
            codex_home: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
            ws: tempfile::tempdir().unwrap(),
            sdk_dir,
            python,
            serve_dir: tempfile::tempdir().unwrap(),
        }
    });
    codex_home(b.codex_home.path(), &b.openai.base_url(), b.ws.path()).unwrap();
    // Every child starts in the workspace by inheriting it (see `Bench::command`).
    std::env::set_current_dir(b.ws.path()).expect("enter the workspace");
    let node = PathBuf::from("node");
    let (claude_env, codex_env) = (b.claude_env(), b.codex_env());
    let ws = b.ws.path();

    // Agents: cold, and with one prewarmed process.
    let claude_cold = rt
        .block_on(async { agent_builder("claude", &b.claude, json!({}), &claude_env, ws).build() });
    // Stream-json input: a resident thread's transport, and the one a warm CLI waits on
    // (plain `-p` gives up after 3 s without stdin).
    let claude_stream_json = || {
        agent_builder(
            "claude",
            &b.claude,
            json!({"transport": "stream-json"}),
            &claude_env,
            ws,
        )
    };
    let codex_builder = || agent_builder("codex", &b.codex, json!({}), &codex_env, ws);
    let codex_cold = rt.block_on(async { codex_builder().build() });
    let mut host = b.start_host();

    let mut rows: Vec<(&str, Row)> = [
        "claude: raw `claude -p`",
        "claude: `adaptor run`",
        "claude: Agent::run",
        "claude: Agent::run, prewarm(1) stream-json",
        "claude: `adaptor run`, served (adaptor serve)",
        "claude: TS Agent SDK",
        "claude: Python Agent SDK",
        "codex: raw `codex exec --json`",
        "codex: `adaptor run`",
        "codex: Agent::run",
        "codex: Agent::run, prewarm(1)",
        "codex: `adaptor run`, served (adaptor serve)",
        "codex: `adaptor run`, exec transport",
        "codex: TS Codex SDK",
    ]
    .into_iter()
    .map(|name| (name, Row::default()))
    .collect();
    let mut rss = Vec::new();
    // One unmeasured round: caches, the compiled-driver cache, the CLIs' first start.
    let claude_one = OneShot {
        cli: Cli::Claude,
        driver: "claude",
        program: &b.claude,
        env: &claude_env,
        cold: &claude_cold,
        warm: &claude_stream_json,
        adaptor_variants: Vec::new(),
        sdks: vec![(&node, "claude_sdk.mjs"), (&b.python, "claude_sdk.py")],
    };
    let codex_one = OneShot {
        cli: Cli::Codex,
        driver: "codex",
        program: &b.codex,
        env: &codex_env,
        cold: &codex_cold,
        warm: &codex_builder,
        adaptor_variants: vec![json!({"transport": "exec"})],
        sdks: vec![(&node, "codex_sdk.mjs")],
    };
    for round in 0..=rounds {
        let measured = round > 0;
        let mut sample = b.one_shot_round(&rt, &claude_one, round, Some(&mut rss));
        sample.extend(b.one_shot_round(&rt, &codex_one, round, None));
        if measured {
            for ((_, row), sample) in rows.iter_mut().zip(sample) {
                row.push(sample);
            }
        }
    }

    // Sessions: `turns` turns in one conversation, interleaved path by path.
    let claude_thread = rt.block_on(async {
        claude_stream_json()
            .thread_store(MemoryStore::new())
            .build()
    });
    let codex_thread = rt.block_on(async {
        agent_builder("codex", &b.codex, json!({}), &codex_env, ws)
            .thread_store(MemoryStore::new())
            .build()
    });
    let n = turns.to_string();
    let mut sessions: Vec<(&str, Vec<f64>)> = vec![
        ("claude: stdin-protocol floor (driver's flags)", Vec::new()),
        ("claude: stdin-protocol floor (the SDK's flags)", Vec::new()),
        ("claude: Thread (resident process)", Vec::new()),
        ("claude: TS Agent SDK session", Vec::new()),
        ("claude: Python ClaudeSDKClient", Vec::new()),
        ("codex: app-server floor", Vec::new()),
        ("codex: Thread (resident app-server)", Vec::new()),
        ("codex: TS Codex SDK thread", Vec::new()),
    ];
    // The host's own time in each thread turn 2.. (claude, codex).
    let mut host_times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let session_rounds = rounds.div_ceil(5).max(1);
    for round in 0..session_rounds {
        let key = format!("bench-{round}");
        let (claude_floor, claude_thread_turns, claude_host) =
            b.on_claude("claude floor and thread", 2 * turns, || {
                let mut floor = ClaudeFloor::start(&b, Flags::Driver);
                let both = floor_and_thread(&rt, || floor.turn(), &claude_thread, &key, turns);
                floor.pipe.close();
                both
            });
        let (codex_floor, codex_thread_turns, codex_host) =
            b.on_codex("codex floor and thread", 2 * turns, || {
                let mut floor = CodexFloor::start(&b);
                let both = floor_and_thread(&rt, || floor.turn(), &codex_thread, &key, turns);
                floor.pipe.close();
                both
            });
        let per: Vec<Vec<f64>> = vec![
            claude_floor,
            b.on_claude("claude floor, SDK flags", turns, || {
                let mut floor = ClaudeFloor::start(&b, Flags::Sdk);
                let out = (0..turns).map(|_| floor.turn()).collect();
                floor.pipe.close();
                out
            }),
            claude_thread_turns,
            b.on_claude("TS SDK session", turns, || {
                sdk_turns(
                    &b.sdk(
                        &node,
                        "claude_sdk.mjs",
                        &["session", &n, PROMPT],
                        &claude_env,
                    )
                    .1,
                )
            }),
            b.on_claude("Python SDK session", turns, || {
                sdk_turns(
                    &b.sdk(
                        &b.python,
                        "claude_sdk.py",
                        &["session", &n, PROMPT],
                        &claude_env,
                    )
                    .1,
                )
            }),
            codex_floor,
            codex_thread_turns,
            b.on_codex("Codex SDK session", turns, || {
                sdk_turns(
                    &b.sdk(&node, "codex_sdk.mjs", &["session", &n, PROMPT], &codex_env)
                        .1,
                )
            }),
        ];
        for ((_, all), turns) in sessions.iter_mut().zip(per) {
            all.extend(later(&turns));
        }
        host_times[0].extend(later(&claude_host));
        host_times[1].extend(later(&codex_host));
    }
    rt.block_on(async {
        for agent in [&claude_cold, &codex_cold, &claude_thread, &codex_thread] {
            agent.close().await;
        }
    });
    // SAFETY: kill(2) on the host this bench started.
    unsafe { libc::kill(host.id() as i32, libc::SIGTERM) };
    let stopped = host.wait().expect("wait for adaptor serve");
    assert!(stopped.success(), "adaptor serve stopped with {stopped:?}");

    // Report.
    let machine = format!(
        "{} cores, {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| c.lines().find_map(|l| l
                .strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())))
            .unwrap_or_default()
    );
    println!(
        "official SDKs vs agent-adaptor ({machine}; Claude Code {}, Codex via its npm shim; mocks on 127.0.0.1)",
        adaptor_integration_tests::mock_anthropic::claude_version()
    );
    println!(
        "one-shot ({rounds} interleaved rounds, medians; first text = first text event the caller sees)"
    );
    // Paired: each round's sample against the raw CLI's sample of the same round.
    let paired = |a: &[f64], raw: &[f64], f: fn(f64, f64) -> f64| {
        median(a.iter().zip(raw).map(|(&x, &r)| f(x, r)).collect())
    };
    for (i, (name, row)) in rows.iter().enumerate() {
        let raw = &rows[if i < 7 { 0 } else { 7 }].1;
        let wall = median(row.wall.clone());
        let first = if row.first_text.len() == rounds && raw.first_text.len() == rounds {
            format!(
                "{:.0} ms (paired {:.2}x raw)",
                median(row.first_text.clone()),
                paired(&row.first_text, &raw.first_text, |x, r| x / r)
            )
        } else {
            "—".to_owned()
        };
        println!(
            "  {name:<44} wall {wall:7.1} ms · paired {:+7.1} ms vs raw ({:.3}x) · first text {first}",
            paired(&row.wall, &raw.wall, |x, r| x - r),
            paired(&row.wall, &raw.wall, |x, r| x / r),
        );
    }
    println!(
        "host's own time per one-shot run (wall − the provider process's life as the host saw it: free of the CLI's noise; target for `adaptor run` ≤ 5 ms)"
    );
    for (name, row) in rows.iter().filter(|(_, row)| !row.host.is_empty()) {
        let (p50, p90, n) = p50_p90(&row.host);
        println!("  {name:<44} p50 {p50:5.2} ms · p90 {p90:5.2} ms ({n} runs)");
    }
    println!("per turn in one conversation ({session_rounds} sessions × turns 2–{turns}, medians)");
    let floor = |i: usize| median(sessions[i].1.clone());
    for (i, (name, all)) in sessions.iter().enumerate() {
        // Each client against the floor with its own flags.
        let f = match i {
            0..=2 => 0,
            3..=4 => 1,
            _ => 5,
        };
        let m = median(all.clone());
        println!(
            "  {name:<44} {m:7.2} ms/turn · {:+6.2} ms vs floor ({:.3}x)",
            m - floor(f),
            m / floor(f)
        );
    }
    // The thread's turn k against the floor's turn k, which ran just before it.
    for (thread, floor, name) in [(2, 0, "claude"), (6, 5, "codex")] {
        let diffs: Vec<f64> = sessions[thread]
            .1
            .iter()
            .zip(&sessions[floor].1)
            .map(|(t, f)| t - f)
            .collect();
        let (p50, p90, n) = p50_p90(&diffs);
        println!(
            "  {name}: host overhead per resident turn, paired with the floor's turn: p50 {p50:+.2} ms · p90 {p90:+.2} ms ({n} pairs)"
        );
    }
    for (times, name) in host_times.iter().zip(["claude", "codex"]) {
        let (p50, p90, n) = p50_p90(times);
        println!(
            "  {name}: host's own time per resident turn (wall − provider span, prompt written → last output read): p50 {p50:.2} ms · p90 {p90:.2} ms ({n} turns)"
        );
    }
    println!(
        "host RSS: `adaptor run --driver claude` peak {:.1} MiB, of which private {:.1} MiB (medians of {} untimed runs; VmHWM of the adaptor process alone and its largest RssAnon, sampled every 5 ms; the rest is clean pages of the executable and libraries, shared and reclaimable)",
        median(rss.iter().map(|r| r.0).collect()),
        median(rss.iter().map(|r| r.1).collect()),
        rss.len()
    );
    for name in ["claude", "codex", "reference"] {
        let (size, cold, cached) = cold_and_cached(name);
        println!(
            "driver load {name}.wasm ({} KB): cold compile {cold:.1} ms · cached load {cached:.2} ms",
            size / 1024
        );
    }
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
