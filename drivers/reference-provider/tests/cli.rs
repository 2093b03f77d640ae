//! End-to-end tests of the `reference-provider` binary: flags, exit codes,
//! session persistence across processes and the process-level directives.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// Path of the binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_reference-provider");

/// A unique, initially absent directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Self(std::env::temp_dir().join(format!(
            "reference-provider-cli-{tag}-{}-{nanos}",
            std::process::id()
        )))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A provider command with an isolated state directory.
fn provider(state: &TempDir) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("REFERENCE_PROVIDER_STATE_DIR", state.path());
    cmd
}

/// Runs `cmd` with `prompt` on stdin and waits for it.
fn run(mut cmd: Command, prompt: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn provider");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(prompt.as_bytes())
        .unwrap();
    child.wait_with_output().expect("wait provider")
}

/// Parses every stdout line as JSON.
fn events(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// Spawns the provider with `prompt` and returns it with a reader over stdout.
fn spawn_streaming(state: &TempDir, prompt: &str) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = provider(state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn provider");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(prompt.as_bytes()).unwrap();
    drop(stdin);
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (child, stdout)
}

/// Reads one stdout line as JSON.
fn next_event(reader: &mut impl BufRead) -> Value {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

/// Whether `pid` is a live (non-zombie) process.
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// Sends `signal` (e.g. `TERM`) to `pid` with the `kill` utility.
fn send_signal(pid: u64, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

#[test]
fn version_and_usage_errors() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "reference-provider 1.0.0\n"
    );

    let out = Command::new(BIN).arg("--frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--frobnicate"));
}

#[test]
fn turn_and_resume_across_processes() {
    let state = TempDir::new("resume");
    let mut cmd = provider(&state);
    cmd.args(["--model", "demo-model"]);
    let out = run(cmd, "first prompt\n");
    assert_eq!(out.status.code(), Some(0));
    let first = events(&out);
    assert_eq!(first.len(), 10);
    let id = first[0]["session_id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 20);
    assert_eq!(first[0]["model"], json!("demo-model"));
    assert_eq!(first[9]["text"], json!("Reference reply: first prompt"));
    assert!(state.path().join(format!("{id}.json")).is_file());

    let mut cmd = provider(&state);
    cmd.args(["--resume", &id]);
    let out = run(cmd, "second");
    assert_eq!(out.status.code(), Some(0));
    let second = events(&out);
    assert_eq!(
        second[0],
        json!({"type":"session","session_id":id,"model":"reference-1","resumed":true})
    );
    assert_eq!(
        second[9]["text"],
        json!("Reference reply (turn 2, previously: first prompt): second")
    );
    assert_eq!(second[9]["summary"], json!("Answered in 2 turn(s)."));

    let mut cmd = provider(&state);
    cmd.args(["--resume", "ref-ffffffffffffffff"]);
    let out = run(cmd, "third");
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        events(&out),
        vec![json!({"type":"error","code":"resume_rejected",
                    "message":"unknown session: ref-ffffffffffffffff"})]
    );
}

#[test]
fn explicit_state_dir_overrides_environment() {
    let env_state = TempDir::new("env");
    let flag_state = TempDir::new("flag");
    let mut cmd = provider(&env_state);
    cmd.arg("--state-dir").arg(flag_state.path());
    let out = run(cmd, "hi");
    assert_eq!(out.status.code(), Some(0));
    let id = events(&out)[0]["session_id"].as_str().unwrap().to_string();
    assert!(flag_state.path().join(format!("{id}.json")).is_file());
    assert!(!env_state.path().exists());
}

#[test]
fn delay_and_sleep_pace_output() {
    let state = TempDir::new("delay");
    let mut cmd = provider(&state);
    cmd.args(["--delay-ms", "10"]);
    let started = Instant::now();
    let out = run(cmd, "hi");
    assert_eq!(out.status.code(), Some(0));
    // Ten lines, nine gaps.
    assert!(started.elapsed() >= Duration::from_millis(90));

    let started = Instant::now();
    let out = run(provider(&state), "[[sleep 60]] hi");
    assert_eq!(out.status.code(), Some(0));
    assert!(started.elapsed() >= Duration::from_millis(60));
    assert_eq!(events(&out)[4]["input"], json!({"text": "hi"}));
}

#[test]
fn noise_goes_to_both_streams() {
    let state = TempDir::new("noise");
    let out = run(provider(&state), "[[noise]] [[stderr hello]] hi");
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().next(),
        Some("reference-provider: plain text noise")
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("reference-provider: warming up\nhello\n"),
        "{stderr}"
    );
}

#[test]
fn crash_and_exit_codes() {
    let state = TempDir::new("codes");
    let out = run(provider(&state), "[[crash]] hi");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(events(&out).len(), 2);

    let out = run(provider(&state), "[[exit 42]] hi");
    assert_eq!(out.status.code(), Some(42));
    assert_eq!(events(&out)[9]["status"], json!("success"));
    assert!(!state.path().exists());
}

#[test]
fn grandchild_survives_sigterm() {
    let state = TempDir::new("grandchild");
    let (mut child, mut stdout) = spawn_streaming(&state, "[[grandchild]] [[hang]] hi");
    assert_eq!(next_event(&mut stdout)["type"], json!("session"));
    let notice = next_event(&mut stdout);
    assert_eq!(notice["type"], json!("notice"));
    assert_eq!(notice["kind"], json!("pids"));
    assert_eq!(notice["provider_pid"], json!(child.id()));
    let grandchild = notice["grandchild_pid"].as_u64().unwrap();

    send_signal(grandchild, "TERM");
    thread::sleep(Duration::from_millis(100));
    let still_alive = alive(grandchild);
    send_signal(grandchild, "KILL");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(still_alive, "grandchild should ignore SIGTERM");
}

#[test]
fn ignore_term_and_hang() {
    let state = TempDir::new("hang");
    let (mut child, mut stdout) = spawn_streaming(&state, "[[ignore-term]] [[hang]] hi");
    assert_eq!(next_event(&mut stdout)["type"], json!("session"));
    send_signal(u64::from(child.id()), "TERM");
    thread::sleep(Duration::from_millis(100));
    let still_running = child.try_wait().unwrap().is_none();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(still_running, "provider should ignore SIGTERM");
}
