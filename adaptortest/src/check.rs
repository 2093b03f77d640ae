//! The clause runner behind `adaptortest check`: static clauses on the component and its
//! descriptor, then dynamic clauses on every cassette replayed through the host.
//!
//! | id | clause |
//! |---|---|
//! | DRV-01 | the component loads as an `adaptor:driver@0.1` driver with a valid descriptor |
//! | DRV-02 | the descriptor is identical across instances and loads |
//! | CFG-01 | validating `{}` never traps (accepting or rejecting are both fine) |
//! | CFG-02 | the suite config is accepted |
//! | CFG-03 | an unknown config field is rejected |
//! | CFG-04 | the config schema is a JSON object schema that declares `command` |
//! | CAP-01 | resume ⇒ a codec name and a stable `sha256:` config fingerprint (across instances and key order) |
//! | CAP-02 | fork ⇒ resume |
//! | SO-01 | structured-output modifiers ⇒ a declared mechanism |
//! | RUN-00 | the driver never traps on recorded output |
//! | RUN-01 | raw stdout/stderr hold exactly the recorded bytes |
//! | EVT-12 | capabilities declared absent never show up (no thinking without `reasoning`, no tool-argument deltas without `tool-call-args`) |
//! | USG-01 | usage is reported only when observed: the result's usage equals the last `usage` event (none without one) |
//! | SES-04 | a valid checkpoint resumes: the resume id reaches the new command line or stdin |
//! | HST-01 | the host finds no contract violation in the driver's events or outcome (part lifecycles, tool results, nothing after the turn ended, plausible usage, an outcome that matches its events) |
//! | EVT-*, RUN-04, RSP-* | see [`crate::clauses`], on every cassette |
//!
//! Must not: print (the binary renders reports).

use std::path::Path;

use adaptor::cassette::Cassette;
use adaptor::{Driver, Error, StreamKind};
use serde::Serialize;
use serde_json::{Value, json};

use crate::replay::{ReplayOptions, replay_cassette};

/// Outcome of one clause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Satisfied.
    Pass,
    /// Broken.
    Fail,
    /// Does not apply (capability not declared, no cassette…).
    Skip,
}

/// One line of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClauseResult {
    /// Clause id.
    pub id: String,
    /// Status.
    pub status: Status,
    /// Why (for failures: what was wrong and where).
    pub reason: String,
}

/// A conformance report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Driver name (or file, when it did not load).
    pub driver: String,
    /// Driver version.
    pub version: String,
    /// Results, in clause order.
    pub results: Vec<ClauseResult>,
}

impl Report {
    /// True if any clause failed.
    pub fn failed(&self) -> bool {
        self.results.iter().any(|r| r.status == Status::Fail)
    }

    /// The result of clause `id`.
    pub fn get(&self, id: &str) -> Option<&ClauseResult> {
        self.results.iter().find(|r| r.id == id)
    }

    /// One line per clause.
    pub fn render_text(&self) -> String {
        let mut out = format!("adaptortest: {} {}\n", self.driver, self.version);
        for r in &self.results {
            let status = match r.status {
                Status::Pass => "pass",
                Status::Fail => "FAIL",
                Status::Skip => "skip",
            };
            out.push_str(&format!("{:<7} {:<4}  {}\n", r.id, status, r.reason));
        }
        let count = |s| self.results.iter().filter(|r| r.status == s).count();
        out.push_str(&format!(
            "{} passed, {} failed, {} skipped\n",
            count(Status::Pass),
            count(Status::Fail),
            count(Status::Skip)
        ));
        out
    }
}

/// What to check.
#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// The suite config (default `{}`).
    pub config: Option<Value>,
    /// Cassettes to replay, with display names.
    pub cassettes: Vec<(String, Cassette)>,
    /// Replay options.
    pub replay: ReplayOptions,
    /// Skip fault injection (FLT-*).
    pub skip_faults: bool,
    /// Run the live clauses (LIV-*): the real CLI, through the real pipeline. Off by default
    /// so ordinary CI never calls a paid service.
    pub live: bool,
    /// Extra directories to find the driver's program in (after PATH).
    pub program_dirs: Vec<std::path::PathBuf>,
}

struct Results(Vec<ClauseResult>);

impl Results {
    fn push(&mut self, id: &str, status: Status, reason: impl Into<String>) {
        self.0.push(ClauseResult {
            id: id.to_owned(),
            status,
            reason: reason.into(),
        });
    }

    fn verdict(&mut self, id: &str, failures: &[String], pass: &str) {
        if failures.is_empty() {
            self.push(id, Status::Pass, pass);
        } else {
            self.push(id, Status::Fail, failures.join("; "));
        }
    }
}

/// Run every applicable clause against the driver at `path`.
pub async fn check_driver(path: &Path, options: &CheckOptions) -> Report {
    let mut r = Results(Vec::new());
    let driver = match Driver::from_file(path) {
        Ok(d) => d,
        Err(e) => {
            r.push("DRV-01", Status::Fail, e.to_string());
            return Report {
                driver: path.display().to_string(),
                version: String::new(),
                results: r.0,
            };
        }
    };
    let d = driver.descriptor().clone();
    r.push(
        "DRV-01",
        Status::Pass,
        format!("loads as `{}` ({})", d.name, d.display_name),
    );
    static_clauses(&mut r, path, &driver, options);
    dynamic_clauses(&mut r, &driver, options).await;
    fault_clauses(&mut r, &driver, options).await;
    live_clauses(&mut r, &driver, options).await;
    Report {
        driver: d.name,
        version: d.version,
        results: r.0,
    }
}

fn static_clauses(r: &mut Results, path: &Path, driver: &Driver, options: &CheckOptions) {
    let d = driver.descriptor();
    let again = Driver::from_file(path).map(|x| x.descriptor().clone());
    let mut problems = Vec::new();
    if let Err(e) = driver.instantiate_check() {
        problems.push(e.to_string());
    }
    match again {
        Ok(other) if other == *d => {}
        Ok(_) => problems.push("a second load returned a different descriptor".into()),
        Err(e) => problems.push(format!("second load failed: {e}")),
    }
    r.verdict(
        "DRV-02",
        &problems,
        "descriptor identical across instances and loads",
    );

    match driver.clone().with_config(json!({})) {
        Err(Error::DriverTrap { message, .. }) => r.push(
            "CFG-01",
            Status::Fail,
            format!("validating {{}} trapped: {message}"),
        ),
        Err(Error::InvalidConfig { .. }) => {
            r.push("CFG-01", Status::Pass, "`{}` is rejected cleanly")
        }
        Err(e) => r.push("CFG-01", Status::Fail, e.to_string()),
        Ok(_) => r.push("CFG-01", Status::Pass, "`{}` is accepted"),
    }
    let suite = options.config.clone().unwrap_or_else(|| json!({}));
    let configured = driver.clone().with_config(suite.clone());
    match &configured {
        Ok(_) => r.push(
            "CFG-02",
            Status::Pass,
            format!("suite config {suite} accepted"),
        ),
        Err(e) => r.push("CFG-02", Status::Fail, e.to_string()),
    }
    let mut foreign = if suite.is_object() {
        suite.clone()
    } else {
        json!({})
    };
    foreign["adaptortest_unknown_field"] = json!(true);
    match driver.clone().with_config(foreign) {
        Err(Error::InvalidConfig { path, .. }) => r.push(
            "CFG-03",
            Status::Pass,
            format!("unknown field rejected at `{path}`"),
        ),
        Err(e) => r.push("CFG-03", Status::Fail, format!("unexpected error: {e}")),
        Ok(_) => r.push(
            "CFG-03",
            Status::Fail,
            "a config with an unknown field was accepted",
        ),
    }
    let schema = &d.config_schema;
    let mut problems = Vec::new();
    if schema.get("type") != Some(&json!("object")) {
        problems.push("the schema's type is not \"object\"".to_owned());
    }
    if schema.pointer("/properties/command").is_none() {
        problems.push("the schema does not declare `command`".to_owned());
    }
    r.verdict("CFG-04", &problems, "object schema declaring `command`");

    if d.sessions.resume {
        let mut problems = Vec::new();
        if d.sessions.codec.trim().is_empty() {
            problems.push("no codec name".to_owned());
        }
        match &configured {
            Ok(c) => {
                let a = c.config_fingerprint();
                let b = Driver::from_file(path)
                    .and_then(|x| x.with_config(reorder(&suite)))
                    .and_then(|x| x.config_fingerprint());
                match (a, b) {
                    (Ok(a), Ok(b)) if a == b && a.starts_with("sha256:") => {}
                    (Ok(a), Ok(b)) => {
                        problems.push(format!("fingerprints differ or are malformed: {a} vs {b}"))
                    }
                    (Err(e), _) | (_, Err(e)) => problems.push(format!("fingerprint failed: {e}")),
                }
            }
            Err(_) => problems.push("suite config rejected, cannot fingerprint".to_owned()),
        }
        r.verdict(
            "CAP-01",
            &problems,
            format!("codec `{}`, stable fingerprint", d.sessions.codec).as_str(),
        );
    } else {
        r.push("CAP-01", Status::Skip, "resume not declared");
    }
    if d.sessions.fork && !d.sessions.resume {
        r.push("CAP-02", Status::Fail, "fork declared without resume");
    } else {
        r.push("CAP-02", Status::Pass, "session capabilities consistent");
    }
    let so = d.structured_output;
    if (so.with_streaming || so.native_with_approvals) && !(so.native || so.prompt_validate) {
        r.push(
            "SO-01",
            Status::Fail,
            "structured-output modifiers without a mechanism",
        );
    } else if so.native_with_approvals && !so.native {
        r.push(
            "SO-01",
            Status::Fail,
            "native-with-approvals without native",
        );
    } else {
        r.push(
            "SO-01",
            Status::Pass,
            "structured-output declarations consistent",
        );
    }
}

const FAULTS: &[&str] = &[
    "FLT-01", "FLT-02", "FLT-03", "FLT-04", "FLT-05", "FLT-06", "FLT-07",
];

async fn fault_clauses(r: &mut Results, driver: &Driver, options: &CheckOptions) {
    let reason = if options.skip_faults {
        Some("fault injection skipped (--no-faults)")
    } else if options.cassettes.is_empty() {
        Some("no cassettes given")
    } else {
        None
    };
    if let Some(reason) = reason {
        for id in FAULTS {
            r.push(id, Status::Skip, reason);
        }
        return;
    }
    let configured = match &options.config {
        Some(c) => driver.clone().with_config(c.clone()),
        None => Ok(driver.clone()),
    };
    let known: std::collections::BTreeSet<String> =
        r.0.iter()
            .filter(|x| x.status == Status::Fail)
            .map(|x| x.id.clone())
            .collect();
    let mut per_id: std::collections::BTreeMap<String, Vec<ClauseResult>> = Default::default();
    // The program does not run here (faults are fed in process), but the driver gets the config
    // a clean replay gives it: the same `command` included.
    let provider = crate::replay::scripted_provider()
        .unwrap_or_else(|_| std::path::PathBuf::from("adaptortest-provider"));
    for (name, cassette) in &options.cassettes {
        let driver = match &configured {
            Ok(d) => {
                let config =
                    crate::replay::replay_config(d, cassette, options.config.as_ref(), &provider);
                d.clone().with_config(config).unwrap_or_else(|_| d.clone())
            }
            Err(e) => {
                r.push(
                    "FLT-01",
                    Status::Fail,
                    format!("suite config rejected: {e}"),
                );
                return;
            }
        };
        for result in crate::faults::inject_faults(&driver, name, cassette, &known).await {
            per_id.entry(result.id.clone()).or_default().push(result);
        }
    }
    for id in FAULTS {
        let results = per_id.remove(*id).unwrap_or_default();
        let failures: Vec<String> = results
            .iter()
            .filter(|x| x.status == Status::Fail)
            .map(|x| x.reason.clone())
            .collect();
        r.verdict(id, &failures, &format!("{} cassette(s)", results.len()));
    }
}

/// The prompt of the live probe.
pub const LIVE_PROMPT: &str = "Reply with exactly: OK";

async fn live_clauses(r: &mut Results, driver: &Driver, options: &CheckOptions) {
    if !options.live {
        for id in ["LIV-01", "LIV-02", "LIV-03"] {
            r.push(
                id,
                Status::Skip,
                "live clauses run the real CLI: pass --live (or set ADAPTORTEST_LIVE=1)",
            );
        }
        return;
    }
    let suite = options.config.clone().unwrap_or_else(|| json!({}));
    let driver = match driver.clone().with_config(suite) {
        Ok(d) => d,
        Err(e) => {
            r.push(
                "LIV-01",
                Status::Fail,
                format!("suite config rejected: {e}"),
            );
            return;
        }
    };
    let workspace = match tempfile::tempdir() {
        Ok(w) => w,
        Err(e) => {
            r.push(
                "LIV-01",
                Status::Fail,
                format!("no temporary workspace: {e}"),
            );
            return;
        }
    };
    let resumable = driver.descriptor().sessions.resume;
    let mut builder = adaptor::Agent::builder(driver)
        .workspace(workspace.path())
        .timeout(std::time::Duration::from_secs(300));
    for dir in &options.program_dirs {
        builder = builder.program_dir(dir);
    }
    let result = builder.build().run(LIVE_PROMPT).await;
    match &result {
        Ok(res) if res.exit.code == Some(0) => {
            r.push("LIV-01", Status::Pass, "live run succeeded, exit 0")
        }
        Ok(res) => r.push("LIV-01", Status::Fail, format!("exit {:?}", res.exit.code)),
        Err(e) => r.push("LIV-01", Status::Fail, e.to_string()),
    }
    match &result {
        Ok(res) if res.text.trim() == "OK" => r.push("LIV-02", Status::Pass, "answered `OK`"),
        Ok(res) => r.push("LIV-02", Status::Fail, format!("answered {:?}", res.text)),
        Err(_) => r.push("LIV-02", Status::Fail, "no answer"),
    }
    if !resumable {
        r.push("LIV-03", Status::Skip, "resume not declared");
    } else {
        match &result {
            Ok(res) if res.checkpoint.as_ref().is_some_and(|c| c.is_valid()) => {
                r.push("LIV-03", Status::Pass, "healthy resumable checkpoint")
            }
            _ => r.push(
                "LIV-03",
                Status::Fail,
                "no valid checkpoint from a successful live run",
            ),
        }
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn modes(m: adaptor::DecisionModes) -> String {
    let mut v = Vec::new();
    for (on, name) in [
        (m.ask, "ask"),
        (m.auto_approve, "auto-approve"),
        (m.auto_deny, "auto-deny"),
        (m.retry, "retry"),
    ] {
        if on {
            v.push(name);
        }
    }
    if v.is_empty() {
        "—".into()
    } else {
        v.join(", ")
    }
}

/// The capability matrix and clause results as Markdown (for a driver's README).
pub fn render_markdown(d: &adaptor::Descriptor, report: &Report) -> String {
    let mut out = format!("### {} (`{}` {})\n\n", d.display_name, d.name, d.version);
    out.push_str("| capability | declared |\n|---|---|\n");
    let v = &d.cli_versions;
    let mut rows: Vec<(String, String)> = vec![
        (
            "contract".into(),
            format!("`adaptor:driver@{}`", d.wit_version),
        ),
        ("default program".into(), format!("`{}`", d.default_program)),
        (
            "CLI versions".into(),
            format!(
                "{} ..< {} (verified: {})",
                v.min.as_deref().unwrap_or("any"),
                v.max_exclusive.as_deref().unwrap_or("any"),
                if v.verified.is_empty() {
                    "none".to_owned()
                } else {
                    v.verified.join(", ")
                }
            ),
        ),
        (
            "resume / fork".into(),
            format!(
                "{} / {} (codec `{}`)",
                yes_no(d.sessions.resume),
                yes_no(d.sessions.fork),
                d.sessions.codec
            ),
        ),
        (
            "persistent process".into(),
            yes_no(d.persistent_process).into(),
        ),
    ];
    let so = d.structured_output;
    let mut mech = Vec::new();
    if so.native {
        mech.push("native");
    }
    if so.prompt_validate {
        mech.push("prompt + validate");
    }
    rows.push((
        "structured output".into(),
        format!(
            "{}{}",
            if mech.is_empty() {
                "—".to_owned()
            } else {
                mech.join(", ")
            },
            if so.with_streaming {
                " (works when streaming)"
            } else {
                ""
            }
        ),
    ));
    let sb = d.policy.sandbox;
    let mut levels = Vec::new();
    for (on, name) in [
        (sb.read_only, "read-only"),
        (sb.workspace_write, "workspace-write"),
        (sb.unrestricted, "unrestricted"),
    ] {
        if on {
            levels.push(name);
        }
    }
    rows.push((
        "sandbox levels".into(),
        if levels.is_empty() {
            "—".into()
        } else {
            levels.join(", ")
        },
    ));
    rows.push((
        "web search / browser".into(),
        format!(
            "{} / {}",
            yes_no(d.policy.web_search),
            yes_no(d.policy.browser)
        ),
    ));
    rows.push((
        "approvals: permission".into(),
        modes(d.approvals.permission),
    ));
    rows.push((
        "approvals: plan review".into(),
        modes(d.approvals.plan_review),
    ));
    rows.push(("approvals: question".into(), modes(d.approvals.question)));
    let st = d.streaming;
    rows.push((
        "streaming".into(),
        format!(
            "incremental {}, token-level {}, reasoning {}, tool-call args {}",
            yes_no(st.incremental),
            yes_no(st.token_level),
            yes_no(st.reasoning),
            yes_no(st.tool_call_args)
        ),
    ));
    rows.push((
        "MCP (stdio / http / sse)".into(),
        format!(
            "{} / {} / {}",
            yes_no(d.mcp.stdio),
            yes_no(d.mcp.http),
            yes_no(d.mcp.sse)
        ),
    ));
    rows.push((
        "skills / instructions".into(),
        format!("{} / {}", yes_no(d.skills), yes_no(d.instructions)),
    ));
    rows.push(("steering".into(), yes_no(d.steering).into()));
    rows.push((
        "launch environment".into(),
        match &d.launch_env {
            None => "undeclared (0.1.0: the host's denylist alone)".into(),
            Some(names) if names.is_empty() => "none".into(),
            Some(names) => names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", "),
        },
    ));
    for (k, v) in rows {
        out.push_str(&format!("| {k} | {v} |\n"));
    }
    let count = |s| report.results.iter().filter(|r| r.status == s).count();
    out.push_str(&format!(
        "\n**Conformance:** {} passed, {} failed, {} skipped.\n\n| clause | status | detail |\n|---|---|---|\n",
        count(Status::Pass),
        count(Status::Fail),
        count(Status::Skip)
    ));
    for r in &report.results {
        let status = match r.status {
            Status::Pass => "pass",
            Status::Fail => "**FAIL**",
            Status::Skip => "skip",
        };
        out.push_str(&format!(
            "| {} | {} | {} |\n",
            r.id,
            status,
            r.reason.replace('|', "\\|")
        ));
    }
    out
}

/// The same object with its keys in reverse order (fingerprints must not care).
fn reorder(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            for (k, v) in map.iter().rev() {
                out.insert(k.clone(), reorder(v));
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

const DYNAMIC: &[&str] = &[
    "RUN-00", "RUN-01", "EVT-00", "EVT-01", "EVT-02", "EVT-03", "EVT-04", "EVT-05", "EVT-06",
    "EVT-11", "EVT-12", "RUN-04", "RSP-01", "RSP-03", "RSP-05", "USG-01", "HST-01", "SES-04",
];

async fn dynamic_clauses(r: &mut Results, driver: &Driver, options: &CheckOptions) {
    if options.cassettes.is_empty() {
        for id in DYNAMIC {
            r.push(id, Status::Skip, "no cassettes given");
        }
        return;
    }
    let mut failures: std::collections::BTreeMap<&str, Vec<String>> =
        DYNAMIC.iter().map(|id| (*id, Vec::new())).collect();
    let mut resumed = 0usize;
    for (name, cassette) in &options.cassettes {
        let workspace = match tempfile::tempdir() {
            Ok(w) => w,
            Err(e) => {
                failures
                    .get_mut("RUN-00")
                    .unwrap()
                    .push(format!("{name}: no temporary workspace: {e}"));
                continue;
            }
        };
        let replay_opts = ReplayOptions {
            config: options.config.clone(),
            workspace: Some(workspace.path().to_path_buf()),
            ..options.replay.clone()
        };
        let replayed = match replay_cassette(driver, cassette, &replay_opts).await {
            Ok(x) => x,
            Err(e) => {
                failures
                    .get_mut("RUN-00")
                    .unwrap()
                    .push(format!("{name}: could not replay: {e}"));
                continue;
            }
        };
        if let Err(
            e @ (Error::DriverTrap { .. }
            | Error::LimitExceeded { .. }
            | Error::DriverContract { .. }),
        ) = &replayed.result
        {
            failures
                .get_mut("RUN-00")
                .unwrap()
                .push(format!("{name}: {e}"));
            continue;
        }
        let res = match &replayed.result {
            Ok(res) => Some(res),
            Err(Error::Run(e)) => Some(&e.result),
            Err(_) => None,
        };
        if let Some(res) = res {
            for (stream, raw) in [
                (StreamKind::Stdout, &res.raw().stdout),
                (StreamKind::Stderr, &res.raw().stderr),
            ] {
                if *raw != cassette.bytes(stream) {
                    failures.get_mut("RUN-01").unwrap().push(format!(
                        "{name}: raw {stream:?} has {} bytes, the cassette {}",
                        raw.len(),
                        cassette.bytes(stream).len()
                    ));
                }
            }
        }
        let violations = crate::clauses::check_events(&replayed.events)
            .into_iter()
            .chain(crate::clauses::check_result(
                &replayed.events,
                &replayed.result,
            ));
        for v in violations {
            if let Some(list) = failures.get_mut(v.clause) {
                list.push(format!("{name}: {}", v.message));
            }
        }
        // SES-04: a valid checkpoint must be resumable.
        if let Ok(res) = &replayed.result
            && let Some(cp) = res.checkpoint.clone().filter(|c| c.is_valid())
        {
            resumed += 1;
            let resume_opts = ReplayOptions {
                resume: Some(cp.clone()),
                ..replay_opts.clone()
            };
            match replay_cassette(driver, cassette, &resume_opts).await {
                Ok(again) => {
                    let raw = match &again.result {
                        Ok(x) => Some(x.raw().clone()),
                        Err(Error::Run(e)) => Some(e.result.raw().clone()),
                        Err(e) => {
                            failures
                                .get_mut("SES-04")
                                .unwrap()
                                .push(format!("{name}: resuming failed before launch: {e}"));
                            None
                        }
                    };
                    if let Some(raw) = raw {
                        let args = raw.launch.map(|l| l.args.join(" ")).unwrap_or_default();
                        let stdin = String::from_utf8_lossy(&raw.stdin).into_owned();
                        if !args.contains(cp.resume_id()) && !stdin.contains(cp.resume_id()) {
                            failures.get_mut("SES-04").unwrap().push(format!(
                                "{name}: resume id `{}` reached neither the command line nor stdin",
                                cp.resume_id()
                            ));
                        }
                    }
                }
                Err(e) => failures
                    .get_mut("SES-04")
                    .unwrap()
                    .push(format!("{name}: {e}")),
            }
        }
    }
    let n = options.cassettes.len();
    for id in DYNAMIC {
        let list = &failures[id];
        if *id == "SES-04" && resumed == 0 && list.is_empty() {
            r.push(id, Status::Skip, "no cassette produced a valid checkpoint");
            continue;
        }
        r.verdict(id, list, &format!("{n} cassette(s)"));
    }
}
