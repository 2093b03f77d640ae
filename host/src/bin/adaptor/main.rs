//! `adaptor`: run a prompt through a `.wasm` driver from the command line, and list drivers.
//!
//! Owns argument parsing, the readable terminal view (sanitised: control and escape
//! sequences from drivers or providers never reach the terminal), JSONL output, Ctrl-C and
//! exit codes. Everything else is the library's single pipeline.
//!
//! Exit codes: 0 success · 1 the run failed · 2 usage, config or setup error · 3 driver fault
//! (trap or contract violation) · 130 cancelled with Ctrl-C.

mod approve;
mod threads;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use adaptor::{Agent, Driver, Error, Event, Phase, RunOptions, RunResult};
use clap::{Parser, Subcommand};
use futures::StreamExt;

#[derive(Parser)]
#[command(
    name = "adaptor",
    version,
    about = "Drive coding-agent CLIs through sandboxed WASM drivers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one prompt and stream the result.
    Run(Box<RunArgs>),
    /// Inspect a driver and its CLI on this machine (read-only).
    Inspect {
        /// Built-in driver name or path to a `.wasm` driver.
        #[arg(long, default_value = "reference")]
        driver: String,
        /// Driver config as a JSON object, or `@file.json`.
        #[arg(long)]
        config: Option<String>,
        /// Print the inspection as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Inspect and manage stored threads (`run --thread KEY` creates and continues them).
    #[command(subcommand)]
    Threads(threads::ThreadsCommand),
    /// List the drivers found in the driver directories.
    Drivers {
        /// Print descriptors as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// Built-in driver name or path to a `.wasm` driver.
    #[arg(long, default_value = "reference")]
    driver: String,
    /// Driver config as a JSON object, or `@file.json`.
    #[arg(long)]
    config: Option<String>,
    /// Model override.
    #[arg(long)]
    model: Option<String>,
    /// Workspace directory (default: current directory).
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// Timeout in seconds.
    #[arg(long)]
    timeout: Option<f64>,
    /// Policy preset: inherit, read-only, workspace-write or unrestricted (checked against the
    /// driver before anything starts).
    #[arg(long, value_name = "PRESET")]
    policy: Option<String>,
    /// Web search: allow or deny (default: the CLI's own setting).
    #[arg(long, value_name = "allow|deny")]
    web_search: Option<String>,
    /// Approval requests: `ask` at the terminal (5 minutes each; without a terminal they are
    /// denied), `auto` (approve tools and plans, decline questions) or `deny` (refuse
    /// everything; the agent carries on without). Default: the CLI's own setting, and a
    /// request that arrives anyway is reported unanswered.
    #[arg(long, value_enum, value_name = "ask|auto|deny")]
    approve: Option<approve::Approve>,
    /// A JSON Schema file: the answer must satisfy it; the validated JSON is printed.
    #[arg(long, value_name = "FILE")]
    schema: Option<PathBuf>,
    /// Resume this provider session id (e.g. the `session` of an earlier run).
    #[arg(long, value_name = "SESSION_ID", conflicts_with = "thread")]
    resume: Option<String>,
    /// Run in the thread KEY: resume its stored session (or start one) and save the new
    /// checkpoint, across runs and processes.
    #[arg(long, value_name = "KEY")]
    thread: Option<String>,
    /// With `--thread`: fail instead of starting a new session when KEY has none.
    #[arg(long, requires = "thread")]
    resume_only: bool,
    /// With `--thread`: the lease's time-to-live in seconds (default 30; renewed every third
    /// of it). After a crash, the thread is free again once it lapses.
    #[arg(long, value_name = "SECONDS", requires = "thread")]
    lease_ttl: Option<f64>,
    /// Thread store: a SQLite file path or a `postgres://` URL (default: the SQLite file
    /// under your data directory, or `$ADAPTOR_THREAD_DB`).
    #[arg(long, value_name = "PATH|URL")]
    store: Option<String>,
    /// Save the run as a cassette `<DIR>/<run id>.json` (for `adaptertest replay`).
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    /// Pass this variable of your environment to the provider (repeatable). By default the
    /// provider only sees an allowlist (PATH, HOME, locale, XDG dirs…), never your secrets.
    #[arg(long, value_name = "NAME")]
    pass_env: Vec<String>,
    /// Set a variable in the provider's environment (repeatable).
    #[arg(long, value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Print events as JSON Lines (plus a final `result` line).
    #[arg(long)]
    json: bool,
    /// The prompt.
    prompt: String,
}

const EXIT_RUN_FAILED: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_DRIVER_FAULT: u8 = 3;
const EXIT_INTERRUPTED: u8 = 130;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ADAPTOR_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("adaptor: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_DRIVER_FAULT);
        }
    };
    match cli.command {
        Command::Drivers { json } => list_drivers(json),
        Command::Run(args) => runtime.block_on(run(*args, None)),
        Command::Threads(cmd) => runtime.block_on(threads::main(cmd)),
        Command::Inspect {
            driver,
            config,
            json,
        } => runtime.block_on(inspect(&driver, config.as_deref(), json)),
    }
}

fn list_drivers(json: bool) -> ExitCode {
    let drivers = adaptor::available_drivers();
    if drivers.is_empty() {
        eprintln!(
            "adaptor: no drivers found (searched: {}); build them with `./x.sh build-drivers` or set ADAPTOR_DRIVER_PATH",
            adaptor::driver_dirs()
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        return ExitCode::from(EXIT_USAGE);
    }
    let mut failed = false;
    for (path, loaded) in drivers {
        match loaded {
            Ok(d) if json => {
                let line = serde_json::json!({
                    "path": path.display().to_string(),
                    "sha256": d.sha256(),
                    "descriptor": d.descriptor(),
                });
                println!("{line}");
            }
            Ok(d) => {
                let desc = d.descriptor();
                println!(
                    "{:<12} {:<8} {:<24} {}  [{}]",
                    sanitize(&desc.name),
                    sanitize(&desc.version),
                    sanitize(&desc.display_name),
                    desc.capability_summary(),
                    path.display()
                );
            }
            Err(e) => {
                failed = true;
                eprintln!("{}: {}", path.display(), sanitize(&e.to_string()));
            }
        }
    }
    if failed {
        ExitCode::from(EXIT_DRIVER_FAULT)
    } else {
        ExitCode::SUCCESS
    }
}

fn parse_config(text: &str) -> Result<serde_json::Value, String> {
    let text = match text.strip_prefix('@') {
        Some(path) => {
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?
        }
        None => text.to_owned(),
    };
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("--config is not valid JSON: {e}"))?;
    if !value.is_object() {
        return Err("--config must be a JSON object".into());
    }
    Ok(value)
}

/// Load a driver by name or path and apply `--config`.
fn load_driver(name: &str, config: Option<&str>) -> Result<Driver, ExitCode> {
    let driver = Driver::open(name).map_err(|e| report(&e))?;
    match config.map(parse_config).transpose() {
        Ok(Some(config)) => driver.with_config(config).map_err(|e| report(&e)),
        Ok(None) => Ok(driver),
        Err(msg) => {
            eprintln!("adaptor: {msg}");
            Err(ExitCode::from(EXIT_USAGE))
        }
    }
}

/// An agent whose programs may also be found beside the `adaptor` binary.
fn agent_builder(driver: Driver) -> adaptor::AgentBuilder {
    let builder = Agent::builder(driver);
    match std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(PathBuf::from))
    {
        // Programs installed beside `adaptor` (like the reference provider) are found even
        // when not on PATH.
        Some(dir) => builder.program_dir(dir),
        None => builder,
    }
}

async fn inspect(name: &str, config: Option<&str>, json: bool) -> ExitCode {
    let driver = match load_driver(name, config) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let inspection = match agent_builder(driver).build().inspect().await {
        Ok(i) => i,
        Err(e) => return report(&e),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&inspection).expect("inspection serialises")
        );
    } else {
        let env = &inspection.environment;
        println!(
            "{} {} — environment: {}",
            sanitize(&inspection.driver),
            sanitize(&inspection.version),
            level_name(env.status)
        );
        for c in &env.checks {
            println!(
                "  {:<5} {:<14} {}",
                level_name(c.level),
                sanitize(&c.code),
                sanitize(&c.message)
            );
            if let Some(h) = &c.hint {
                println!("        hint: {}", sanitize(h));
            }
        }
        let range = &env.supported;
        println!(
            "  installed CLI: {} · supported {} ..< {} · verified {}",
            env.cli_version
                .as_deref()
                .map(sanitize)
                .unwrap_or_else(|| "unknown".into()),
            range.min.as_deref().unwrap_or("any"),
            range.max_exclusive.as_deref().unwrap_or("any"),
            if range.verified.is_empty() {
                "none".into()
            } else {
                range.verified.join(", ")
            }
        );
        let models: Vec<String> = inspection
            .models
            .iter()
            .map(|m| format!("{} ({})", m.id, m.label))
            .collect();
        println!(
            "models: {}",
            if models.is_empty() {
                "none listed".into()
            } else {
                sanitize(&models.join(", "))
            }
        );
        for (what, a) in [
            ("quota", availability(&inspection.quota)),
            ("skills", availability(&inspection.skills)),
        ] {
            println!("{what}: {a}");
        }
        let fields: Vec<&str> = inspection
            .config_schema
            .get("properties")
            .and_then(|p| p.as_object())
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        println!("config fields: {}", sanitize(&fields.join(", ")));
    }
    if inspection.environment.status == adaptor::CheckLevel::Fail {
        ExitCode::from(EXIT_RUN_FAILED)
    } else {
        ExitCode::SUCCESS
    }
}

fn level_name(level: adaptor::CheckLevel) -> &'static str {
    match level {
        adaptor::CheckLevel::Pass => "pass",
        adaptor::CheckLevel::Warn => "warn",
        adaptor::CheckLevel::Fail => "FAIL",
    }
}

fn availability<T: std::fmt::Debug>(a: &adaptor::Availability<T>) -> String {
    match a {
        adaptor::Availability::Supported { value } => format!("supported ({value:?})"),
        adaptor::Availability::Unsupported { reason } => {
            format!("unsupported — {}", sanitize(reason))
        }
    }
}

/// `adaptor run`, and `adaptor threads fork` (which runs the fork's first turn from `fork_from`).
async fn run(args: RunArgs, fork_from: Option<String>) -> ExitCode {
    let driver = match load_driver(&args.driver, args.config.as_deref()) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let mut builder = agent_builder(driver);
    for name in &args.pass_env {
        builder = builder.pass_env(name.clone());
    }
    for pair in &args.env {
        match pair.split_once('=') {
            Some((name, value)) if !name.is_empty() => builder = builder.env(name, value),
            _ => {
                eprintln!(
                    "adaptor: --env expects NAME=VALUE, not `{}`",
                    sanitize(pair)
                );
                return ExitCode::from(EXIT_USAGE);
            }
        }
    }
    if let Some(secs) = args.lease_ttl {
        if !(secs.is_finite() && secs > 0.0) {
            eprintln!("adaptor: --lease-ttl must be a positive number of seconds");
            return ExitCode::from(EXIT_USAGE);
        }
        builder = builder.lease_ttl(Duration::from_secs_f64(secs));
    }
    if args.thread.is_some() || args.store.is_some() {
        match threads::open_store(args.store.as_deref()).await {
            Ok(store) => builder = builder.shared_thread_store(store),
            Err(code) => return code,
        }
    }
    let agent = builder.build();
    let mut options = RunOptions::new();
    if let Some(m) = &args.model {
        options = options.model(m.clone());
    }
    if let Some(dir) = args.cwd {
        options = options.workspace(dir);
    }
    if let Some(secs) = args.timeout {
        if !(secs.is_finite() && secs > 0.0) {
            eprintln!("adaptor: --timeout must be a positive number of seconds");
            return ExitCode::from(EXIT_USAGE);
        }
        options = options.timeout(Duration::from_secs_f64(secs));
    }
    if args.policy.is_some() || args.web_search.is_some() || args.approve.is_some() {
        let mut policy = match args.policy.as_deref().unwrap_or("inherit") {
            "inherit" => adaptor::Policy::default(),
            "read-only" => adaptor::Policy::read_only(),
            "workspace-write" => adaptor::Policy::workspace_write(),
            "unrestricted" => adaptor::Policy::unrestricted(),
            other => {
                eprintln!(
                    "adaptor: --policy must be inherit, read-only, workspace-write or unrestricted, not `{}`",
                    sanitize(other)
                );
                return ExitCode::from(EXIT_USAGE);
            }
        };
        policy.web_search = match args.web_search.as_deref() {
            None => adaptor::Toggle::Inherit,
            Some("allow") => adaptor::Toggle::Allow,
            Some("deny") => adaptor::Toggle::Deny,
            Some(other) => {
                eprintln!(
                    "adaptor: --web-search must be allow or deny, not `{}`",
                    sanitize(other)
                );
                return ExitCode::from(EXIT_USAGE);
            }
        };
        if let Some(approve) = args.approve {
            policy.approvals = approve.policy();
            if approve == approve::Approve::Ask {
                options = options.approval_handler(approve::terminal_handler());
            }
        }
        options = options.policy(policy);
    }
    if let Some(path) = &args.schema {
        let schema = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
            .and_then(|t| {
                serde_json::from_str(&t).map_err(|e| format!("{} is not JSON: {e}", path.display()))
            });
        match schema.map(adaptor::Schema::from_json) {
            Ok(Ok(schema)) => options = options.schema(schema),
            Ok(Err(e)) => return report(&e),
            Err(msg) => {
                eprintln!("adaptor: {}", sanitize(&msg));
                return ExitCode::from(EXIT_USAGE);
            }
        }
    }
    if let Some(id) = args.resume {
        options = options.resume(adaptor::Checkpoint {
            codec: agent.driver().descriptor().sessions.codec.clone(),
            resume_id: id,
            display_id: None,
            data: Default::default(),
            valid: true,
        });
    }
    // One invocation is one turn: nothing would use a kept process (the next turn is another
    // `adaptor` process), so thread runs start one-shot CLIs that exit cleanly at the end.
    options = options.spawn(adaptor::Spawn::OneShot);
    let prompt = args.prompt;
    let model = args.model;
    let mut stream = match (&args.thread, fork_from) {
        (Some(key), Some(parent)) => agent
            .thread(parent)
            .fork(key.clone())
            .stream_with(prompt.clone(), options),
        (Some(key), None) if args.resume_only => agent
            .thread(key.clone())
            .resume_only()
            .stream_with(prompt.clone(), options),
        (Some(key), None) => agent
            .thread(key.clone())
            .stream_with(prompt.clone(), options),
        (None, _) => agent.stream_with(prompt.clone(), options),
    };
    let mut view = View::new(args.json);
    let mut interrupted = false;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            ev = stream.next() => match ev {
                Some(ev) => view.event(&ev),
                None => break,
            },
            _ = &mut ctrl_c, if !interrupted => {
                interrupted = true;
                eprintln!("\nadaptor: cancelling…");
                stream.cancel();
            }
        }
    }
    let result = stream.result().await;
    view.finish(&result);
    if args.schema.is_some()
        && !args.json
        && let Ok(r) = &result
        && let Some(value) = r.structured.as_ref().and_then(|s| s.value.as_ref())
    {
        println!(
            "{}",
            serde_json::to_string_pretty(value).expect("JSON value serialises")
        );
    }
    if let Some(dir) = &args.record {
        let recorded = match &result {
            Ok(r) => Some(r),
            Err(Error::Run(e)) => Some(&e.result),
            Err(_) => None,
        };
        match recorded {
            Some(r) => {
                let cassette = adaptor::cassette::Cassette::from_run(
                    r,
                    &prompt,
                    model.as_deref(),
                    agent.driver().config(),
                );
                let path = dir.join(format!("{}.json", r.run_id));
                if let Err(e) = std::fs::create_dir_all(dir)
                    .map_err(|e| e.to_string())
                    .and_then(|()| cassette.save(&path).map_err(|e| e.to_string()))
                {
                    eprintln!("adaptor: could not record the run: {}", sanitize(&e));
                    return ExitCode::from(EXIT_USAGE);
                }
                eprintln!("adaptor: recorded {}", path.display());
            }
            None => eprintln!("adaptor: nothing to record: the run did not start"),
        }
    }
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(_) if interrupted => ExitCode::from(EXIT_INTERRUPTED),
        Err(e) => report(&e),
    }
}

fn report(e: &Error) -> ExitCode {
    eprintln!("adaptor: {}", sanitize(&e.to_string()));
    ExitCode::from(match e {
        Error::Run(_) => EXIT_RUN_FAILED,
        // The thread could not be run or saved now (someone else holds it, the lease or the
        // store failed, no checkpoint came back): the run failed. Other thread errors
        // (missing, incompatible, unsupported…) are setup errors.
        Error::Thread(
            adaptor::ThreadError::Busy { .. }
            | adaptor::ThreadError::LeaseLost { .. }
            | adaptor::ThreadError::CheckpointMissing { .. }
            | adaptor::ThreadError::Store { .. },
        ) => EXIT_RUN_FAILED,
        Error::DriverTrap { .. }
        | Error::LimitExceeded { .. }
        | Error::DriverContract { .. }
        | Error::Spawn { .. }
        | Error::Lost(_) => EXIT_DRIVER_FAULT,
        _ => EXIT_USAGE,
    })
}

/// Replace control characters (ESC, CSI, BEL, …) except newline and tab, so text from
/// drivers and providers cannot move the cursor, set the clipboard or retitle the terminal.
fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            c if c.is_control() => '\u{fffd}',
            c => c,
        })
        .collect()
}

struct View {
    json: bool,
    color: bool,
    mid_line: bool,
    in_thinking: bool,
}

impl View {
    fn new(json: bool) -> Self {
        Self {
            json,
            color: std::io::stdout().is_terminal(),
            mid_line: false,
            in_thinking: false,
        }
    }

    fn line_break(&mut self) {
        if self.mid_line {
            println!();
            self.mid_line = false;
        }
    }

    fn dim(&self, s: &str) -> String {
        if self.color {
            format!("\x1b[2m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }

    fn event(&mut self, ev: &Event) {
        if self.json {
            match serde_json::to_string(ev) {
                Ok(line) => println!("{line}"),
                Err(e) => eprintln!("adaptor: cannot serialise event: {e}"),
            }
            return;
        }
        let mut out = std::io::stdout();
        match ev {
            Event::TextDelta(d) if d.phase == Phase::Delta => {
                if self.in_thinking {
                    self.line_break();
                    self.in_thinking = false;
                }
                print!("{}", sanitize(&d.text));
                self.mid_line = !d.text.ends_with('\n');
            }
            Event::Thinking(d) if d.phase == Phase::Delta => {
                if !self.in_thinking {
                    self.line_break();
                    self.in_thinking = true;
                }
                print!("{}", self.dim(&sanitize(&d.text)));
                self.mid_line = true;
            }
            Event::ToolCall(c) if c.phase == Phase::Start => {
                self.line_break();
                self.in_thinking = false;
                let args = c.args.as_ref().map(|a| a.to_string()).unwrap_or_default();
                println!(
                    "→ {} {}",
                    sanitize(&c.name),
                    sanitize(&truncate(&args, 200))
                );
            }
            Event::ToolResult(r) => {
                self.line_break();
                let mark = if r.is_error { "✗" } else { "←" };
                println!("{mark} {}", sanitize(&truncate(&r.output, 200)));
            }
            Event::Notice(n) => {
                self.line_break();
                eprintln!("! {}: {}", sanitize(&n.notice), sanitize(&n.message));
            }
            Event::ThreadFallback(f) => {
                self.line_break();
                eprintln!(
                    "! thread {:?}: the stored session was rejected ({}); starting a fresh one",
                    sanitize(&f.key),
                    sanitize(&f.reason)
                );
            }
            Event::ApprovalResolved(a) => {
                self.line_break();
                eprintln!(
                    "? {} `{}`: {}",
                    a.kind,
                    sanitize(&a.id),
                    approve::describe(&a.resolution, a.by_policy)
                );
            }
            _ => {}
        }
        let _ = out.flush();
    }

    fn finish(&mut self, result: &Result<RunResult, Error>) {
        let res = match result {
            Ok(r) => Some(r),
            Err(Error::Run(e)) => Some(&e.result),
            Err(_) => None,
        };
        if self.json {
            let line = match result {
                Ok(r) => result_json(r, None),
                Err(Error::Run(e)) => result_json(
                    &e.result,
                    Some(serde_json::json!({"reason": e.reason, "message": e.message})),
                ),
                Err(e) => serde_json::json!({"kind": "result", "error": e.to_string()}),
            };
            println!("{line}");
            return;
        }
        self.line_break();
        if let Some(r) = res {
            let usage = r
                .usage
                .as_ref()
                .map(|u| {
                    format!(
                        "{} in / {} out tokens",
                        u.input_tokens.map_or("?".into(), |n| n.to_string()),
                        u.output_tokens.map_or("?".into(), |n| n.to_string())
                    )
                })
                .unwrap_or_else(|| "usage not reported".into());
            let line = format!(
                "— {} · model {} · session {} · {:.2}s",
                usage,
                r.model.as_deref().unwrap_or("?"),
                r.session_id().unwrap_or("none"),
                r.duration.as_secs_f64()
            );
            println!("{}", self.dim(&sanitize(&line)));
            if let Some(t) = &r.thread {
                let how = match &t.start {
                    adaptor::ThreadStart::New => "new session".to_owned(),
                    adaptor::ThreadStart::Resumed => "resumed".to_owned(),
                    adaptor::ThreadStart::Forked { parent_key, .. } => {
                        format!("forked from {parent_key:?}")
                    }
                    adaptor::ThreadStart::FreshAfterRejection { .. } => {
                        "fresh session after a rejected resume".to_owned()
                    }
                };
                let line = format!("— thread {:?} · record {} · {how}", t.key, t.record_id);
                println!("{}", self.dim(&sanitize(&line)));
            }
        }
    }
}

fn result_json(r: &RunResult, failure: Option<serde_json::Value>) -> serde_json::Value {
    serde_json::json!({
        "kind": "result",
        "run_id": r.run_id,
        "provider": r.provider,
        "text": r.text,
        "summary": r.summary,
        "usage": r.usage,
        "model": r.model,
        "checkpoint": r.checkpoint,
        "structured": r.structured,
        "exit": r.exit,
        "thread": r.thread,
        "failure": failure,
    })
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn escape_sequences_are_neutralised() {
        let evil = "ok\x1b]52;c;ZXZpbA==\x07 \x1b[2J\rdone\n";
        let clean = sanitize(evil);
        assert!(!clean.contains('\x1b') && !clean.contains('\x07') && !clean.contains('\r'));
        assert!(clean.ends_with("done\n"));
    }
}
