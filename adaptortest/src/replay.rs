//! Replaying a cassette through the host's real pipeline: the driver under test launches
//! `adaptortest-provider` (its config's `command` is pointed at it), which replays the
//! recorded bytes with their timing and exit status. Everything the host normally does —
//! grant check, process group, chunk feeding, events, classification — happens for real.
//!
//! Must not: feed bytes to drivers by any other route.

use std::path::PathBuf;
use std::time::Duration;

use adaptor::cassette::Cassette;
use adaptor::{Agent, Checkpoint, Driver, Error, Event, RunOptions, RunResult};
use futures::StreamExt;
use serde_json::{Value, json};

/// Replay timing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Timing {
    /// As recorded.
    Recorded,
    /// No pauses.
    Fast,
    /// Recorded gaps multiplied by this factor.
    Factor(f64),
}

impl Timing {
    fn env(self) -> String {
        match self {
            Timing::Recorded => "recorded".into(),
            Timing::Fast => "fast".into(),
            Timing::Factor(f) => f.to_string(),
        }
    }
}

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Timing of the scripted provider.
    pub timing: Timing,
    /// Driver config to use instead of the cassette's.
    pub config: Option<Value>,
    /// Resume this checkpoint.
    pub resume: Option<Checkpoint>,
    /// Run timeout.
    pub timeout: Duration,
    /// No-output watchdog for the run.
    pub idle_timeout: Option<Duration>,
    /// Workspace to run in (default: a fresh temporary directory). Resuming needs the same
    /// workspace as the run that produced the checkpoint.
    pub workspace: Option<PathBuf>,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            timing: Timing::Fast,
            config: None,
            resume: None,
            timeout: Duration::from_secs(60),
            workspace: None,
            idle_timeout: None,
        }
    }
}

/// What a replay produced.
#[derive(Debug)]
pub struct Replayed {
    /// Every event, in order.
    pub events: Vec<Event>,
    /// The run's result.
    pub result: Result<RunResult, Error>,
}

/// The scripted provider binary: `$ADAPTORTEST_PROVIDER`, else `adaptortest-provider` beside
/// the running executable (or one directory up, for test binaries in `deps/`).
pub fn scripted_provider() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("ADAPTORTEST_PROVIDER") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join("adaptortest-provider"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "adaptortest-provider not found beside {}; build it (`cargo build -p adaptortest`) or set ADAPTORTEST_PROVIDER",
                exe.display()
            )
        })
}

/// The config every replay of `cassette` gives the driver — clean ones here and the
/// fault-injected ones of the check: the suite's, else the cassette's, else the driver's, with
/// the scripted provider as `command` (a recording keeps no program path of its own).
pub fn replay_config(
    driver: &Driver,
    cassette: &Cassette,
    suite: Option<&serde_json::Value>,
    provider: &std::path::Path,
) -> serde_json::Value {
    let mut config = suite
        .cloned()
        .or_else(|| cassette.config.clone())
        .unwrap_or_else(|| driver.config().clone());
    if !config.is_object() {
        config = json!({});
    }
    config["command"] = json!(provider.display().to_string());
    config
}

/// Replay `cassette` through `driver`.
pub async fn replay_cassette(
    driver: &Driver,
    cassette: &Cassette,
    options: &ReplayOptions,
) -> Result<Replayed, Error> {
    let provider = scripted_provider().map_err(|detail| Error::ProgramNotFound {
        driver: driver.name().to_owned(),
        program: "adaptortest-provider".into(),
        detail,
    })?;
    let dir = tempfile::tempdir().map_err(|e| Error::InvalidWorkspace {
        path: std::env::temp_dir().display().to_string(),
        reason: e.to_string(),
    })?;
    let cassette_path = dir.path().join("cassette.json");
    cassette
        .save(&cassette_path)
        .map_err(|e| Error::InvalidWorkspace {
            path: cassette_path.display().to_string(),
            reason: e.to_string(),
        })?;
    let workspace = match &options.workspace {
        Some(w) => w.clone(),
        None => {
            let w = dir.path().join("workspace");
            std::fs::create_dir(&w).map_err(|e| Error::InvalidWorkspace {
                path: w.display().to_string(),
                reason: e.to_string(),
            })?;
            w
        }
    };
    let config = replay_config(driver, cassette, options.config.as_ref(), &provider);
    let driver = driver.clone().with_config(config)?;
    let agent = Agent::builder(driver)
        .workspace(&workspace)
        .env("ADAPTORTEST_CASSETTE", cassette_path.display().to_string())
        .env("ADAPTORTEST_TIMING", options.timing.env())
        // The replaying provider reads the cassette; nothing else outside its confinement.
        .containment(adaptor::Containment::new().allow_read(&cassette_path))
        .grace_period(Duration::from_millis(500))
        .timeout(options.timeout);
    let agent = match options.idle_timeout {
        Some(idle) => agent.idle_timeout(idle),
        None => agent,
    }
    .build();
    let mut run = RunOptions::new();
    if let Some(model) = &cassette.model {
        run = run.model(model.clone());
    }
    if let Some(cp) = &options.resume {
        run = run.resume(cp.clone());
    }
    let prompt = cassette.prompt.clone().unwrap_or_else(|| "replay".into());
    let mut stream = agent.stream_with(prompt, run);
    let mut events = Vec::new();
    while let Some(ev) = stream.next().await {
        events.push(ev);
    }
    let result = stream.result().await;
    Ok(Replayed { events, result })
}

/// The JSON document `adaptortest replay --json` prints: `events` and `outcome`.
pub fn replay_json(replayed: &Replayed) -> Value {
    let (res, failure) = match &replayed.result {
        Ok(r) => (Some(r), Value::Null),
        Err(Error::Run(e)) => (
            Some(&e.result),
            json!({"reason": e.reason.as_str(), "message": e.message}),
        ),
        Err(other) => (
            None,
            json!({"reason": "host_error", "message": other.to_string()}),
        ),
    };
    let outcome = match res {
        Some(r) => json!({
            "text": r.text,
            "summary": r.summary,
            "usage": r.usage.as_ref().map(|u| json!({
                "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens,
                "cache_read_tokens": u.cache_read_tokens,
                "cache_write_tokens": u.cache_write_tokens,
                "reasoning_tokens": u.reasoning_tokens,
                "cost_usd": u.cost_usd,
            })),
            "model": r.model,
            "checkpoint": r.checkpoint.as_ref().map(|c| json!({"resume_id": c.resume_id(), "valid": c.is_valid()})),
            "transcript": r.transcript(),
            "terminal": r.terminal(),
            "exit": r.exit,
            "failure": failure,
        }),
        None => json!({
            "text": "", "summary": null, "usage": null, "model": null, "checkpoint": null,
            "transcript": [], "terminal": null, "exit": null, "failure": failure,
        }),
    };
    json!({ "events": replayed.events, "outcome": outcome })
}
