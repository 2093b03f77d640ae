//! Shared helpers for the integration tests and the benchmark: where the built drivers and
//! the reference provider are, ready-made agents, and process-liveness checks.
//!
//! The drivers must have been built by `./x.sh build-drivers` (the test command does it).

use std::path::{Path, PathBuf};
use std::time::Duration;

use adaptor::{Agent, AgentBuilder, Driver};

pub mod mock_anthropic;
pub mod mock_chat;
pub mod mock_gemini;
pub mod mock_http;
pub mod mock_mcp;
pub mod mock_openai;
pub mod pg;

/// The cargo target directory these tests were built into.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.ancestors()
        .find(|dir| dir.join("drivers").join("reference.wasm").is_file())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| {
            panic!(
                "no drivers/reference.wasm above {}; run ./x.sh build-drivers first",
                exe.display()
            )
        })
}

/// The profile directory (`debug` or `release`) holding the native binaries.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let deps = exe.parent().expect("deps dir");
    let profile = if deps.ends_with("deps") {
        deps.parent().expect("profile dir")
    } else {
        deps
    };
    profile.to_path_buf()
}

/// The host's own time in one `adaptor run --json`: `wall` (as the caller measured it, ms)
/// minus the provider process's life, the `provider_ms` of the `result` line that ends
/// `stdout`. Panics, quoting the output, when the last line is not a result that times the
/// provider's exit.
pub fn own_time_of_json_run(stdout: &str, wall: f64) -> f64 {
    let result: serde_json::Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["kind"] == "result")
        .unwrap_or_else(|| panic!("adaptor run --json ends with its result: {stdout}"));
    let provider = result["provider_ms"]
        .as_f64()
        .unwrap_or_else(|| panic!("the result line times the provider's exit: {result}"));
    wall - provider
}

/// Path of the built reference provider.
pub fn provider_path() -> PathBuf {
    let p = bin_dir().join("reference-provider");
    assert!(
        p.is_file(),
        "{} is missing; run `cargo build -p reference-provider`",
        p.display()
    );
    p
}

/// Path of a built-in driver component.
pub fn driver_path(name: &str) -> PathBuf {
    target_dir().join("drivers").join(format!("{name}.wasm"))
}

/// Path of a test-only driver component.
pub fn test_driver_path(name: &str) -> PathBuf {
    target_dir()
        .join("test-drivers")
        .join(format!("{name}.wasm"))
}

/// A driver file configured to run the built reference provider with its state in `state`.
pub fn configured(path: &Path, state: &Path) -> Driver {
    with_reference_provider(Driver::from_file(path).expect("load driver"), state)
}

/// `driver` (the reference driver or one built on it) configured to run the built reference
/// provider with its state in `state`.
pub fn with_reference_provider(driver: Driver, state: &Path) -> Driver {
    driver
        .with_config(serde_json::json!({
            "command": provider_path().display().to_string(),
            "state_dir": state.display().to_string(),
        }))
        .expect("config accepted")
}

/// `driver` (the reference driver) configured like [`with_reference_provider`], with the
/// `stdio` transport: a thread keeps the provider process between its turns.
pub fn with_resident_reference_provider(driver: Driver, state: &Path) -> Driver {
    driver
        .with_config(serde_json::json!({
            "command": provider_path().display().to_string(),
            "state_dir": state.display().to_string(),
            "transport": "stdio",
        }))
        .expect("config accepted")
}

/// Reference driver, configured.
pub fn reference(state: &Path) -> Driver {
    configured(&driver_path("reference"), state)
}

/// Testbed driver (reference plus misbehaviour switches), configured.
pub fn testbed(state: &Path) -> Driver {
    configured(&test_driver_path("testbed"), state)
}

/// A builder with a short grace period, so kill escalation is quick in tests.
pub fn agent_builder(driver: Driver, workspace: &Path) -> AgentBuilder {
    Agent::builder(driver)
        .workspace(workspace)
        .grace_period(Duration::from_millis(300))
}

/// Live processes whose command line carries `needle` (a test's own temporary path).
pub fn processes_with(needle: &Path) -> Vec<u32> {
    let needle = needle.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) && pid_alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// A `Field:  N kB` value of a `/proc` file (`/proc/self/status`, `/proc/meminfo`), in KiB.
pub fn proc_kib(file: &str, field: &str) -> Option<u64> {
    std::fs::read_to_string(file).ok()?.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// The first `Notice` of `kind` among a run's events.
pub fn notice<'a>(events: &'a [adaptor::Event], kind: &str) -> Option<&'a adaptor::Notice> {
    events.iter().find_map(|e| match e {
        adaptor::Event::Notice(n) if n.notice == kind => Some(n),
        _ => None,
    })
}

/// Read a run's events until a `Notice` of `kind` (it included); all of them if none comes.
pub async fn events_until_notice<S>(stream: &mut S, kind: &str) -> Vec<adaptor::Event>
where
    S: futures::Stream<Item = adaptor::Event> + Unpin,
{
    use futures::StreamExt;
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        let found = matches!(&event, adaptor::Event::Notice(n) if n.notice == kind);
        events.push(event);
        if found {
            break;
        }
    }
    events
}

/// True if `pid` exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next());
            state != Some("Z") && state != Some("X")
        }
        Err(_) => false,
    }
}

/// The live descendants of `pid` (children, their children, …), as the host sees them.
/// A provider runs in a PID namespace of its own, where it sees other pids: tests find its
/// processes from the host's child (the `ProcessInfo` spawn pid) down.
pub fn descendants(pid: u32) -> Vec<u32> {
    let live = live_processes();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(live.iter().filter(|p| p.ppid == parent).map(|p| p.pid));
        i += 1;
    }
    found.remove(0);
    found
}

/// One live (non-zombie) process, from `/proc/<pid>/stat`.
struct LiveProcess {
    pid: u32,
    ppid: u32,
    pgrp: u32,
}

/// Every live (non-zombie) process the host's `/proc` shows.
fn live_processes() -> Vec<LiveProcess> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // `pid (comm) state ppid pgrp …`; comm may contain spaces and parentheses.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            if fields.len() < 3 || matches!(fields[0], "Z" | "X") {
                return None;
            }
            Some(LiveProcess {
                pid,
                ppid: fields[1].parse().ok()?,
                pgrp: fields[2].parse().ok()?,
            })
        })
        .collect()
}

/// The pid of the run's spawned process (the `ProcessInfo` spawn event).
pub fn spawn_pid(events: &[adaptor::Event]) -> Option<u32> {
    events.iter().find_map(|e| match e {
        adaptor::Event::ProcessInfo(p) if p.process == adaptor::ProcessInfoKind::Spawn => p.pid,
        _ => None,
    })
}

/// True if any live (non-zombie) process is in process group `pgid`.
pub fn group_alive(pgid: u32) -> bool {
    live_processes().iter().any(|p| p.pgrp == pgid)
}

/// Wait up to `limit` for `cond` to become true.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + limit;
    while std::time::Instant::now() < until {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

/// Assert a finished command's exit code, showing its stderr (and stdout) when it differs.
pub fn assert_exit(out: &std::process::Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stderr: {}\nstdout: {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The built `adaptor` CLI (`cargo build -p adaptor-cli`) with stdin closed, looking up
/// built-in drivers (`--driver claude`) in this build's `drivers/` directory only, reading
/// no config file (the developer's own `~/.config/agent-adaptor/config.toml` must not
/// change what a test runs), and never handing a run to a resident host (`adaptor serve`:
/// a developer's own must not serve a test's runs).
pub fn adaptor_cli() -> std::process::Command {
    let exe = adaptor_exe();
    let mut cmd = std::process::Command::new(exe);
    cmd.stdin(std::process::Stdio::null())
        .env("ADAPTOR_DRIVER_PATH", target_dir().join("drivers"))
        .env("XDG_CONFIG_HOME", NO_CONFIG_DIR)
        .env("ADAPTOR_DRIVER_STORE", NO_STORE_DIR)
        .env("ADAPTOR_SOCKET", "")
        .env_remove("ADAPTOR_CONFIG");
    cmd
}

/// The reference driver's `--config` for an `adaptor` command: its state in `state`.
pub fn reference_config(state: &Path) -> String {
    serde_json::json!({"state_dir": state.display().to_string()}).to_string()
}

/// `cmd` (an `adaptor` command: [`adaptor_cli`], or one in a resident host's environment)
/// started as `run --json PROMPT` on the reference driver with its state in `state`, its
/// stdout piped and its stderr to `stderr`.
pub fn spawn_json_run(
    mut cmd: std::process::Command,
    state: &Path,
    prompt: &str,
    stderr: std::process::Stdio,
) -> std::process::Child {
    cmd.args([
        "run",
        "--json",
        "--config",
        &reference_config(state),
        prompt,
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(stderr)
    .spawn()
    .expect("spawn adaptor run --json")
}

/// An `ADAPTOR_DRIVER_STORE` with no installed drivers.
pub const NO_STORE_DIR: &str = "/nonexistent/agent-adaptor-tests/store";

/// An `XDG_CONFIG_HOME` that holds no config file.
pub const NO_CONFIG_DIR: &str = "/nonexistent/agent-adaptor-tests/config";

/// Path of the built `adaptor` binary (panics with a hint when it is missing).
pub fn adaptor_exe() -> PathBuf {
    let exe = bin_dir().join("adaptor");
    assert!(
        exe.is_file(),
        "{} is missing: build it first (`cargo build -p adaptor-cli`; ./x.sh test does)",
        exe.display()
    );
    exe
}

/// The stdout lines of a finished `adaptor … --json` command that exited 0, each parsed as
/// JSON (panics, showing the output, on another exit code or a line that is not JSON).
pub fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    assert_exit(out, 0);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect()
}

/// The command line of the provider process a run spawned: the `text` of the one
/// `process_info` `spawn` event among `adaptor run --json` lines.
pub fn spawned_command(lines: &[serde_json::Value]) -> String {
    let spawns: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["kind"] == "process_info" && l["process"] == "spawn")
        .collect();
    assert_eq!(spawns.len(), 1, "one spawn event: {spawns:?}");
    spawns[0]["text"].as_str().expect("spawn text").to_owned()
}

/// The pid of the provider a run's events say it spawned (`process_info` `spawn`), if any.
pub fn spawned_pid(events: &[adaptor::Event]) -> Option<u32> {
    events.iter().find_map(|e| match e {
        adaptor::Event::ProcessInfo(p) if p.process == adaptor::ProcessInfoKind::Spawn => p.pid,
        _ => None,
    })
}

/// A fresh temporary directory.
pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// Every event of `stream`, then its result.
pub async fn collect(
    mut stream: adaptor::Stream,
) -> (
    Vec<adaptor::Event>,
    Result<adaptor::RunResult, adaptor::Error>,
) {
    use futures::StreamExt;
    let mut events = Vec::new();
    while let Some(ev) = stream.next().await {
        events.push(ev);
    }
    (events, stream.result().await)
}

/// The `RunError` of a failed run (panics on anything else).
pub fn run_error(r: Result<adaptor::RunResult, adaptor::Error>) -> Box<adaptor::RunError> {
    match r {
        Err(adaptor::Error::Run(e)) => e,
        other => panic!("expected a RunError, got {other:?}"),
    }
}

/// With `ADAPTOR_RECORD_CASSETTES=DIR`, save the run as `DIR/<name>.json` — how the committed
/// cassettes of the real-CLI drivers were recorded (the local CLI path is not kept).
pub fn record_cassette(name: &str, r: &adaptor::RunResult, prompt: &str) {
    record_cassette_with(name, r, prompt, &serde_json::json!({}));
}

/// [`record_cassette`] with the driver config a replay needs besides the program (the ACP
/// driver's `agent`; never a local path).
pub fn record_cassette_with(
    name: &str,
    r: &adaptor::RunResult,
    prompt: &str,
    config: &serde_json::Value,
) {
    if let Some(dir) = std::env::var_os("ADAPTOR_RECORD_CASSETTES") {
        let cassette = adaptor::cassette::Cassette::from_run(r, prompt, None, config);
        let dir = Path::new(&dir);
        std::fs::create_dir_all(dir).expect("cassette dir");
        cassette
            .save(&dir.join(format!("{name}.json")))
            .expect("cassette saved");
    }
}

/// An executable `dir/name` that prints `version_line` and exits 0: a stand-in CLI for
/// version-range checks of Inspect.
pub fn fake_cli(dir: &Path, name: &str, version_line: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\necho '{version_line}'\n")).expect("fake CLI");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// Open a store from a spec: `sqlite:<path>` or `postgres:<url>` (the racer's argument).
pub async fn open_store(spec: &str) -> Result<Box<dyn adaptor::store::ThreadStore>, String> {
    use adaptor::store::{PostgresStore, SqliteStore, ThreadStore};
    if let Some(path) = spec.strip_prefix("sqlite:") {
        return SqliteStore::open(path)
            .map(|s| Box::new(s) as Box<dyn ThreadStore>)
            .map_err(|e| e.to_string());
    }
    if let Some(url) = spec.strip_prefix("postgres:") {
        return PostgresStore::connect(url)
            .await
            .map(|s| Box::new(s) as Box<dyn ThreadStore>)
            .map_err(|e| e.to_string());
    }
    Err(format!(
        "unknown store spec {spec:?} (want sqlite:<path> or postgres:<url>)"
    ))
}

/// Rewrite the session state of the active record of `key` in `store` (as if the provider's
/// side changed: a moved project, a forgotten session), under the key's lease; returns the
/// rewritten record. The way a test makes a thread resume a state no driver reported.
pub async fn rewrite_state(
    store: &dyn adaptor::store::ThreadStore,
    key: &str,
    change: impl FnOnce(&mut adaptor::SessionState),
) -> adaptor::store::ThreadRecord {
    rewrite_record(store, key, |r| change(&mut r.state)).await
}

/// Rewrite the active record of `key` in `store` (see [`rewrite_state`]).
pub async fn rewrite_record(
    store: &dyn adaptor::store::ThreadStore,
    key: &str,
    change: impl FnOnce(&mut adaptor::store::ThreadRecord),
) -> adaptor::store::ThreadRecord {
    use adaptor::store::{Finalize, Query, lease_target_for_key};
    let mut record = store
        .resolve(&Query::Key(key.to_owned()))
        .await
        .unwrap()
        .expect("an active record");
    change(&mut record);
    let lease = store
        .acquire_lease(&lease_target_for_key(key), "test", Duration::from_secs(5))
        .await
        .unwrap();
    store
        .finalize(Finalize {
            record: record.clone(),
            archive_previous: None,
            require_key_absent: false,
            leases: vec![lease.clone()],
        })
        .await
        .unwrap();
    store.release_lease(&lease).await.unwrap();
    record
}

/// The input of [`lookup_tool`].
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct LookupInput {
    /// The issue number.
    pub number: u64,
}

/// The output of [`lookup_tool`].
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct Issue {
    /// The issue number.
    pub number: u64,
    /// Its title.
    pub title: String,
}

/// The host tool of the tool tests, `lookup_issue` (revision `lookup_issue/v1`, read-only),
/// counting its calls in `calls`: 0 is rejected, 13 panics, 500 fails internally, anything else is found.
pub fn lookup_tool(calls: std::sync::Arc<std::sync::atomic::AtomicUsize>) -> adaptor::Tool {
    adaptor::Tool::define(
        "lookup_issue",
        "Look up an issue by number",
        move |input: LookupInput| {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                match input.number {
                    0 => Err(adaptor::ToolError::reject(
                        "not_found",
                        "there is no issue 0",
                    )),
                    13 => panic!("unlucky handler state at /srv/secret/db"),
                    500 => Err(adaptor::ToolError::from(std::io::Error::other(
                        "connection to db.internal:5432 refused",
                    ))),
                    n => Ok(Issue {
                        number: n,
                        title: format!("Issue number {n}"),
                    }),
                }
            }
        },
    )
    .read_only()
    .revision("lookup_issue/v1")
}

/// Run options that auto-approve permissions (`streaming` as given): how the tool tests let
/// a CLI call a tool without asking.
pub fn auto_approve(streaming: bool) -> adaptor::RunOptions {
    adaptor::RunOptions::new()
        .streaming(streaming)
        .policy(adaptor::Policy {
            approvals: adaptor::ApprovalPolicy {
                permission: adaptor::DecisionMode::AutoApprove,
                ..adaptor::ApprovalPolicy::default()
            },
            ..adaptor::Policy::default()
        })
}

/// (tool name, result text, is_error) of every tool call in a run's transcript.
pub fn tool_outcomes(r: &adaptor::RunResult) -> Vec<(String, String, bool)> {
    use adaptor::ItemKind;
    let t = r.transcript();
    t.iter()
        .filter(|i| i.kind == ItemKind::ToolCall)
        .map(|c| {
            let result = t
                .iter()
                .find(|i| i.kind == ItemKind::ToolResult && i.tool_call_id == c.tool_call_id);
            (
                c.tool_name.clone().unwrap_or_default(),
                result.and_then(|r| r.text.clone()).unwrap_or_default(),
                result.is_some_and(|r| r.is_error),
            )
        })
        .collect()
}

/// The stdio MCP server `stamper` (`mock-mcp-stdio`, beside the test binaries) with a secret
/// in its environment (`MOCK_MCP_SECRET`, 12 bytes) and its call log at `log`.
pub fn stdio_stamper(log: &Path) -> adaptor::Mcp {
    adaptor::Mcp::stdio(
        "stamper",
        bin_dir().join("mock-mcp-stdio").display().to_string(),
    )
    .env("MOCK_MCP_SECRET", "s3cr3t-value")
    .env("MOCK_MCP_LOG", log.display().to_string())
    .into()
}

/// The JSON-RPC methods a run wrote to its provider's stdin, in order, after checking that
/// the run took a prewarmed process which had been written its launch's input before
/// (`process.prewarmed` with `input_written` > 0) and that those bytes are the run's first
/// raw stdin chunk, recorded at zero.
pub fn methods_after_prewritten_input(
    events: &[adaptor::Event],
    result: &adaptor::RunResult,
) -> Vec<String> {
    let taken = notice(events, "process.prewarmed").expect("the run took a prewarmed process");
    let written = taken.data.as_ref().expect("notice data")["input_written"]
        .as_u64()
        .expect("input_written");
    assert!(written > 0, "nothing was written before the run: {taken:?}");
    let raw = result.raw();
    let first = &raw.chunks[0];
    assert_eq!(first.stream, adaptor::StreamKind::Stdin);
    assert_eq!((first.at, first.len as u64), (Duration::ZERO, written));
    String::from_utf8_lossy(&raw.stdin)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["method"].as_str().map(str::to_owned))
        .collect()
}

/// The stream-json frames in `raws` (`(scenario, stdout)` pairs) that are not in `known`
/// (`(type, subtype)`, `None` = any subtype): the drift gates of the stream-json drivers'
/// end-to-end tests. Returns how many JSON frames were read and the unknown ones, each as
/// `type/subtype (in `scenario`)`.
pub fn unknown_frames(
    raws: &[(&str, Vec<u8>)],
    known: &[(&str, Option<&str>)],
) -> (usize, std::collections::BTreeSet<String>) {
    let mut unknown = std::collections::BTreeSet::new();
    let mut seen = 0;
    for (scenario, stdout) in raws {
        for line in String::from_utf8_lossy(stdout).lines() {
            let Ok(frame) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            seen += 1;
            let kind = frame["type"].as_str().unwrap_or("");
            let subtype = frame["subtype"].as_str();
            let listed = known
                .iter()
                .any(|(t, s)| *t == kind && (s.is_none() || *s == subtype));
            if !listed {
                unknown.insert(format!(
                    "{kind}/{} (in `{scenario}`)",
                    subtype.unwrap_or_default()
                ));
            }
        }
    }
    (seen, unknown)
}

/// The skill the real-CLI skill tests hand over: the model must see its name and
/// description (`probe-skill: Use when the user says PROBE-7`), never its body (`PROBE-OK`).
pub const PROBE_SKILL_MD: &str = "---\nname: probe-skill\ndescription: Use when the user says PROBE-7\n---\n\nReply with PROBE-OK.\n";

/// Every file under `dir` (recursively) whose name contains `needle` (none when `dir` does
/// not exist): where a CLI left a session's transcript.
pub fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            } else if entry.file_name().to_string_lossy().contains(needle) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::own_time_of_json_run;

    #[test]
    fn own_time_is_the_wall_minus_the_provider_life_of_the_last_result_line() {
        let out = concat!(
            r#"{"kind":"event","type":"text","text":"{\"kind\":\"result\"}"}"#,
            "\n",
            r#"{"kind":"result","duration_ms":7.5,"provider_ms":2.25}"#,
            "\n"
        );
        assert_eq!(own_time_of_json_run(out, 9.0), 6.75);
    }

    #[test]
    #[should_panic(expected = "ends with its result")]
    fn output_without_a_final_result_line_is_refused() {
        own_time_of_json_run(
            "{\"kind\":\"result\",\"provider_ms\":1}\n{\"kind\":\"event\"}\n",
            9.0,
        );
    }

    #[test]
    #[should_panic(expected = "times the provider's exit")]
    fn a_result_without_the_provider_life_is_refused() {
        own_time_of_json_run("{\"kind\":\"result\",\"duration_ms\":3}\n", 9.0);
    }
}
