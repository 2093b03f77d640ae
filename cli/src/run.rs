//! `adaptor run` (and the first turn of `adaptor threads fork`): flags and config-file
//! defaults into one `Agent` and `RunOptions`, the event loop (view, status line, Ctrl-C, a
//! closed stdout), recording, and the run's exit code.
//!
//! Must not: run anything itself — a run is the library's one pipeline (`Stream` + result).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use adaptor::{Error, RunOptions};
use futures::StreamExt;

use crate::output::{self, ColorChoice, sanitize};
use crate::settings::{DriverArgs, Flags, PolicyPreset, Settings};
use crate::status::{StatusLine, terminal_allows_status};
use crate::view::View;
use crate::{EXIT_INTERRUPTED, EXIT_USAGE, approve, errln, outln, report, threads};

/// `adaptor run` flags.
#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub(crate) driver: DriverArgs,
    /// Model override [default: `model` in the config file, else the driver's].
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Workspace directory (default: current directory).
    #[arg(long)]
    pub(crate) cwd: Option<PathBuf>,
    /// Work in a git worktree of the repository REPO, created from its HEAD on
    /// `agent/<run id>` (with `--thread`: `agent/<KEY>`, kept for the thread's next turns)
    /// and removed after the run (a branch with new commits is kept).
    #[arg(long, value_name = "REPO", conflicts_with = "cwd")]
    pub(crate) worktree: Option<PathBuf>,
    /// A skill for the CLI (repeatable): a directory holding `SKILL.md` (its name is the
    /// key), or a `.zip`, `.tar`, `.tgz` / `.tar.gz` archive (its name without the extension
    /// is the key). Checked before anything starts.
    #[arg(long, value_name = "PATH")]
    pub(crate) skill: Vec<PathBuf>,
    /// Run the CLI with a profile of its own in DIR (absolute; created 0700): the host points
    /// the CLI's config directory (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`, …) at it instead of
    /// the user's own.
    #[arg(long, value_name = "DIR")]
    pub(crate) profile: Option<PathBuf>,
    /// With --profile: share the user's login with it (linked, never copied).
    #[arg(long, requires = "profile")]
    pub(crate) link_auth: bool,
    /// With --profile: copy the user's settings into it (once, when it lacks them).
    #[arg(long, requires = "profile")]
    pub(crate) copy_settings: bool,
    /// With --profile: copy the user's MCP configuration into it (once).
    #[arg(long, requires = "profile")]
    pub(crate) copy_mcp: bool,
    /// An instructions bundle: every file under DIR, entry `AGENTS.md`, checked and handed
    /// to the CLI read-only (its text joins the system prompt).
    #[arg(long, value_name = "DIR")]
    pub(crate) instructions_bundle: Option<PathBuf>,
    /// Timeout in seconds.
    #[arg(long)]
    pub(crate) timeout: Option<f64>,
    /// Policy preset, checked against the driver before anything starts [default: `policy`
    /// in the config file, else inherit].
    #[arg(long, value_enum, value_name = "PRESET")]
    pub(crate) policy: Option<PolicyPreset>,
    /// Web search: allow or deny (default: the CLI's own setting).
    #[arg(long, value_name = "allow|deny")]
    pub(crate) web_search: Option<String>,
    /// Approval requests: `ask` at the terminal (5 minutes each; without a terminal they are
    /// denied), `auto` (approve tools and plans, decline questions) or `deny` (refuse
    /// everything; the agent carries on without). Kinds the driver has no such mode for (plan
    /// review on Codex) keep the CLI's own setting. Default: the CLI's own setting, and a
    /// request that arrives anyway is reported unanswered.
    #[arg(long, value_enum, value_name = "ask|auto|deny")]
    pub(crate) approve: Option<approve::Approve>,
    /// A JSON Schema file: the answer must satisfy it; the validated JSON is printed.
    #[arg(long, value_name = "FILE")]
    pub(crate) schema: Option<PathBuf>,
    /// MCP servers for the CLI, in the common `{"mcpServers": {"<name>": {…}}}` shape: a
    /// server has `command` (+ `args`, `env`) or `url` (+ `headers`, `bearer_token_env_var`),
    /// and `type` stdio, http or sse. Checked against the driver before anything starts;
    /// header values and tokens are masked in `--dry-run`.
    #[arg(long, value_name = "FILE")]
    pub(crate) mcp_config: Option<PathBuf>,
    /// Run in the thread KEY: resume its stored session (or start one) and save the new
    /// checkpoint, across runs and processes.
    #[arg(long, value_name = "KEY")]
    pub(crate) thread: Option<String>,
    /// With `--thread`: fail instead of starting a new session when KEY has none.
    #[arg(long, requires = "thread")]
    pub(crate) resume_only: bool,
    /// With `--thread`: the lease's time-to-live in seconds (default 30; renewed every third
    /// of it). After a crash, the thread is free again once it lapses.
    #[arg(long, value_name = "SECONDS", requires = "thread")]
    pub(crate) lease_ttl: Option<f64>,
    /// With `--thread`: also resume a thread record written by the driver component with
    /// this sha256 (after a driver upgrade: the old build's, see `adaptor threads show`);
    /// repeatable.
    #[arg(long, value_name = "SHA256", requires = "thread")]
    pub(crate) accept_checkpoints_from: Vec<String>,
    /// Thread store: a SQLite file path or a `postgres://` URL [default: `store` in the
    /// config file, else the SQLite file under your data directory, or `$ADAPTOR_THREAD_DB`].
    #[arg(long, value_name = "PATH|URL")]
    pub(crate) store: Option<String>,
    /// Save the run as a cassette `<DIR>/<run id>.json` (for `adaptortest replay`).
    #[arg(long, value_name = "DIR")]
    pub(crate) record: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) provider_env: crate::ProviderEnvArgs,
    #[command(flatten)]
    pub(crate) containment: crate::confine::ContainmentArgs,
    /// Print the exact launch the driver asks for — program, arguments, environment
    /// (secrets masked), private files, working directory and confinement — and start
    /// nothing (with `--json`: the plan as one JSON object).
    #[arg(long, conflicts_with = "thread")]
    pub(crate) dry_run: bool,
    /// Print events as JSON Lines (plus a final `result` line).
    #[arg(long)]
    pub(crate) json: bool,
    /// The prompt.
    pub(crate) prompt: String,
}

/// Examples shown by `adaptor run --help`.
pub const EXAMPLES: &str = "\
Examples:
  adaptor run \"Say hello\"                                  # the built-in reference driver
  adaptor run --json \"Say hello\" | jq -c 'select(.kind == \"text_delta\")'
  adaptor run --driver claude --model sonnet --policy read-only \"Review src/\"
  adaptor run --driver ./vendor.wasm --config '{\"command\":\"/opt/vendor/cli\"}' \"Hi\"
  adaptor run --thread ticket-42 \"Continue where we left off\"
  adaptor run --schema review.schema.json \"Review the diff\"
  adaptor run --driver claude --mcp-config mcp.json \"Use the issue tracker\"
  adaptor run --approve ask \"Clean up the build scripts\"";

/// The settings `args` resolve to and an agent builder for them, the driver loaded (sharing
/// `shared`'s earlier loads, if given; or the exit code of what was wrong). Synchronous, so
/// `main` can do it while the async runtime starts on another thread.
pub fn configure(
    args: &RunArgs,
    shared: Option<&adaptor::LoadedDrivers>,
) -> Result<(Settings, adaptor::AgentBuilder), ExitCode> {
    let flags = Flags {
        driver: args.driver.driver.as_deref(),
        config: args.driver.config.as_deref(),
        model: args.model.as_deref(),
        policy: args.policy,
        store: args.store.as_deref(),
    };
    crate::configured_builder(&flags, &args.containment, &args.provider_env, shared)
}

/// `adaptor run` on what [`configure`] made of `args`, and `adaptor threads fork` (which runs
/// the fork's first turn from `fork_from`); Ctrl-C comes from `ctrl_c` (this process's
/// SIGINT, or a served run's client).
pub async fn run(
    args: RunArgs,
    configured: (Settings, adaptor::AgentBuilder),
    fork_from: Option<String>,
    color: ColorChoice,
    ctrl_c: crate::interrupt::Source,
) -> ExitCode {
    // A served run's process goes on after it: its agent is dropped, not left to the exit.
    let process_ends_after = matches!(ctrl_c, crate::interrupt::Source::Signal);
    let (settings, mut builder) = configured;
    for sha in &args.accept_checkpoints_from {
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            errln!(
                "adaptor: --accept-checkpoints-from takes a sha256 in hex (64 digits), not {sha:?}"
            );
            return ExitCode::from(EXIT_USAGE);
        }
        builder = builder.accept_checkpoints_from(sha.to_ascii_lowercase());
    }
    if let Some(secs) = args.lease_ttl {
        if !(secs.is_finite() && secs > 0.0) {
            errln!("adaptor: --lease-ttl must be a positive number of seconds");
            return ExitCode::from(EXIT_USAGE);
        }
        builder = builder.lease_ttl(Duration::from_secs_f64(secs));
    }
    // A run with a thread store closes the store's connection at the end (see
    // `leave_to_exit`).
    let store_open = args.thread.is_some() || args.store.is_some();
    if store_open {
        match threads::open_store(settings.store.value.as_deref()).await {
            Ok(store) => builder = builder.shared_thread_store(store),
            Err(code) => return code,
        }
    }
    if let Some(dir) = &args.profile {
        let dir = match std::path::absolute(dir) {
            Ok(dir) => dir,
            Err(e) => {
                errln!("adaptor: --profile {}: {e}", dir.display());
                return ExitCode::from(EXIT_USAGE);
            }
        };
        let mut profile = adaptor::Profile::clone_native(dir);
        if args.link_auth {
            profile = profile.link_auth();
        }
        if args.copy_settings {
            profile = profile.copy_settings();
        }
        if args.copy_mcp {
            profile = profile.copy_mcp();
        }
        builder = builder.profile(profile);
    }
    let agent = builder.build();
    let mut options = RunOptions::new();
    if let Some(dir) = &args.instructions_bundle {
        options = options.instructions_bundle(adaptor::InstructionsBundle::dir(dir));
    }
    if let Some(m) = &settings.model.value {
        options = options.model(m.clone());
    }
    if let Some(dir) = args.cwd {
        options = options.workspace(dir);
    }
    if let Some(repo) = args.worktree {
        options = options.workspace(adaptor::Workspace::git_worktree(repo));
    }
    match args
        .skill
        .iter()
        .map(|p| skill_at(p))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(skills) if !skills.is_empty() => options = options.skills(skills),
        Ok(_) => {}
        Err(msg) => {
            errln!("adaptor: {}", sanitize(&msg));
            return ExitCode::from(EXIT_USAGE);
        }
    }
    if let Some(secs) = args.timeout {
        if !(secs.is_finite() && secs > 0.0) {
            errln!("adaptor: --timeout must be a positive number of seconds");
            return ExitCode::from(EXIT_USAGE);
        }
        options = options.timeout(Duration::from_secs_f64(secs));
    }
    let json = args.json;
    let status = StatusLine::new(
        !json && terminal_allows_status(),
        format!(
            "loading {}",
            sanitize(agent.driver().descriptor().name.as_str())
        ),
    );
    let preset = settings.policy.value;
    if preset.is_some() || args.web_search.is_some() || args.approve.is_some() {
        let mut policy = preset.unwrap_or(PolicyPreset::Inherit).policy();
        policy.web_search = match args.web_search.as_deref() {
            None => adaptor::Toggle::Inherit,
            Some("allow") => adaptor::Toggle::Allow,
            Some("deny") => adaptor::Toggle::Deny,
            Some(other) => {
                errln!(
                    "adaptor: --web-search must be allow or deny, not `{}`",
                    sanitize(other)
                );
                return ExitCode::from(EXIT_USAGE);
            }
        };
        if let Some(approve) = args.approve {
            policy.approvals = approve.policy_for(&agent.driver().descriptor().approvals);
            if approve == approve::Approve::Ask {
                options = options.approval_handler(approve::terminal_handler(status.clone()));
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
                errln!("adaptor: {}", sanitize(&msg));
                return ExitCode::from(EXIT_USAGE);
            }
        }
    }
    if let Some(path) = &args.mcp_config {
        let servers = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
            .and_then(|t| {
                adaptor::Mcp::from_config_json(&t).map_err(|e| format!("{}: {e}", path.display()))
            });
        match servers {
            Ok(servers) => options = options.mcp(servers),
            Err(msg) => {
                errln!("adaptor: {}", sanitize(&msg));
                return ExitCode::from(EXIT_USAGE);
            }
        }
    }
    // One invocation is one turn: nothing would use a kept process (the next turn is another
    // `adaptor` process), so thread runs start one-shot CLIs that exit cleanly at the end.
    options = options.spawn(adaptor::Spawn::OneShot);
    let prompt = args.prompt;
    if args.dry_run {
        drop(status);
        return match agent.dry_run_with(prompt, options).await {
            Ok(plan) if json => {
                outln!("{}", serde_json::to_string(&plan).expect("plan serialises"));
                ExitCode::SUCCESS
            }
            Ok(plan) => {
                for line in crate::confine::plan_lines(&plan) {
                    outln!("{line}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => report(&e),
        };
    }
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
    let mut view = View::new(json, color.stdout_styled(), status);
    // Ctrl-C has one handler, this watchdog: a thread of its own, so it also acts while the
    // loop below is blocked writing to a stdout nobody reads (`adaptor run … | sleep 60`) —
    // the loop's runtime runs on that blocked thread. It cancels the run, and unblocks the
    // loop if it must, which then ends as any cancelled run (see `interrupt`).
    let watchdog = match crate::interrupt::Watchdog::start(stream.canceller(), ctrl_c) {
        Ok(watchdog) => watchdog,
        Err(e) => {
            errln!("adaptor: cannot watch for Ctrl-C ({e}); the run was stopped");
            stream.cancel();
            let _ = stream.result().await;
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let mut stdout_lost = None;
    loop {
        let status_due = view.status_due();
        tokio::select! {
            ev = stream.next() => match ev {
                Some(ev) => view.event(&ev),
                None => break,
            },
            _ = tokio::time::sleep_until(status_due.unwrap_or_else(tokio::time::Instant::now)),
                if status_due.is_some() => view.show_status(),
        }
        if stdout_lost.is_none()
            && let Some(lost) = output::stdout_closed()
        {
            // Nobody reads the output any more: stop the agent, as `yes | head` stops `yes`.
            stdout_lost = Some(lost);
            stream.cancel();
        }
    }
    let result = stream.result().await;
    view.finish(&result);
    if args.schema.is_some()
        && !json
        && let Ok(r) = &result
        && let Some(value) = r.structured.as_ref().and_then(|s| s.value.as_ref())
    {
        outln!(
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
                    settings.model.value.as_deref(),
                    agent.driver().config(),
                );
                let path = dir.join(format!("{}.json", r.run_id));
                if let Err(e) = std::fs::create_dir_all(dir)
                    .map_err(|e| e.to_string())
                    .and_then(|()| cassette.save(&path).map_err(|e| e.to_string()))
                {
                    errln!("adaptor: could not record the run: {}", sanitize(&e));
                    return ExitCode::from(EXIT_USAGE);
                }
                errln!("adaptor: recorded {}", path.display());
            }
            None => errln!("adaptor: nothing to record: the run did not start"),
        }
    }
    let code = if let Some(lost) = stdout_lost.or_else(output::stdout_closed) {
        ExitCode::from(lost.exit_code())
    } else {
        match result {
            Ok(_) => ExitCode::SUCCESS,
            Err(_) if watchdog.saw_ctrl_c() => ExitCode::from(EXIT_INTERRUPTED),
            Err(e) => report(&e),
        }
    };
    if !store_open && process_ends_after {
        leave_to_exit(agent);
    }
    code
}

/// The agent of a one-shot command whose run is over: left to the process's exit instead
/// of dropped. Its run has ended every process it started and removed its run directory
/// before the stream ended; what is left is memory — the driver's compiled code mapped and
/// its type tables —, which the kernel reclaims at once when the process exits; dropping it
/// piece by piece (each unmapping of code a TLB flush on every core the host ran on) cost
/// about 0.1 ms of every `adaptor run` (paired medians of interleaved runs). Only an agent
/// with no thread store: a store's connection is closed properly.
fn leave_to_exit(agent: adaptor::Agent) {
    std::mem::forget(agent);
}

/// `--skill PATH`: a skill directory, or an archive whose file name (without `.zip`,
/// `.tar`, `.tgz`, `.tar.gz`) is the key.
fn skill_at(path: &std::path::Path) -> Result<adaptor::Skill, String> {
    if path.is_dir() {
        return Ok(adaptor::Skill::dir(path));
    }
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        format!(
            "--skill {}: not a directory or an archive file",
            path.display()
        )
    })?;
    let key = [".tar.gz", ".tgz", ".zip", ".tar"]
        .iter()
        .find_map(|ext| name.strip_suffix(ext))
        .ok_or_else(|| {
            format!(
                "--skill {}: not a directory, and not a .zip, .tar, .tgz or .tar.gz archive",
                path.display()
            )
        })?;
    let file = std::fs::File::open(path).map_err(|e| format!("--skill {}: {e}", path.display()))?;
    adaptor::Skill::archive(key, file).map_err(|e| format!("--skill {}: {e}", path.display()))
}
