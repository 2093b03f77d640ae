//! The `adaptor` binary: readable view, JSONL, `drivers`, exit codes and Ctrl-C.

use std::process::{Command, Stdio};
use std::time::Duration;

use adaptor_integration_tests::*;

fn adaptor() -> Command {
    let exe = bin_dir().join("adaptor");
    assert!(
        exe.is_file(),
        "{} is missing: build it first (`./x.sh test` does)",
        exe.display()
    );
    let mut cmd = Command::new(exe);
    cmd.stdin(Stdio::null());
    cmd
}

fn config(state: &std::path::Path) -> String {
    serde_json::json!({"state_dir": state.display().to_string()}).to_string()
}

#[test]
fn run_prints_text_tools_and_a_final_line() {
    let state = tempfile::tempdir().unwrap();
    let out = adaptor()
        .args(["run", "--config", &config(state.path()), "Hello CLI"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("Reference reply: Hello CLI"), "{stdout}");
    assert!(stdout.contains("→ echo"), "{stdout}");
    assert!(stdout.contains("Planning the reply."), "{stdout}");
    let last = stdout.lines().last().unwrap();
    assert!(
        last.contains("model reference-1")
            && last.contains("session ref-")
            && last.contains("in /"),
        "{last}"
    );
    assert!(
        !stdout.contains('\x1b'),
        "no escape codes when stdout is not a terminal"
    );
}

#[test]
fn json_mode_prints_one_event_per_line_then_the_result() {
    let state = tempfile::tempdir().unwrap();
    let out = adaptor()
        .args([
            "run",
            "--json",
            "--config",
            &config(state.path()),
            "json please",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect();
    assert_eq!(lines[0]["kind"], "run_started");
    assert_eq!(lines[lines.len() - 2]["kind"], "run_finished");
    let result = lines.last().unwrap();
    assert_eq!(result["kind"], "result");
    assert_eq!(result["text"], "Reference reply: json please");
    assert_eq!(result["checkpoint"]["valid"], true);
    assert!(result["usage"]["cache_write_tokens"].is_null());
    let seqs: Vec<u64> = lines[..lines.len() - 1]
        .iter()
        .map(|l| l["sequence"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[1] > w[0]));
}

#[test]
fn exit_codes_distinguish_failure_and_usage_errors() {
    let state = tempfile::tempdir().unwrap();
    let failed = adaptor()
        .args(["run", "--config", &config(state.path()), "[[fail]]"])
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&failed.stderr).contains("reference failure requested"));

    let bad_config = adaptor()
        .args(["run", "--config", r#"{"nope":1}"#, "x"])
        .output()
        .unwrap();
    assert_eq!(bad_config.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_config.stderr).contains("/nope"));

    let not_json = adaptor()
        .args(["run", "--config", "{", "x"])
        .output()
        .unwrap();
    assert_eq!(not_json.status.code(), Some(2));

    let unknown = adaptor()
        .args(["run", "--driver", "nosuch", "x"])
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(2));

    let missing_program = adaptor()
        .args(["run", "--config", r#"{"command":"/no/such/cli"}"#, "x"])
        .output()
        .unwrap();
    assert_eq!(missing_program.status.code(), Some(2));

    let usage = adaptor().args(["run"]).output().unwrap();
    assert_eq!(usage.status.code(), Some(2));

    let by_path = adaptor()
        .args([
            "run",
            "--driver",
            &driver_path("reference").display().to_string(),
            "--config",
            &config(state.path()),
            "by path",
        ])
        .output()
        .unwrap();
    assert_eq!(by_path.status.code(), Some(0));
}

#[test]
fn drivers_lists_the_builtin_reference_driver() {
    let out = adaptor().args(["drivers"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("reference") && l.contains("resume")),
        "{text}"
    );
    let json = adaptor().args(["drivers", "--json"]).output().unwrap();
    let first: serde_json::Value = serde_json::from_str(
        String::from_utf8(json.stdout)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert!(first["descriptor"]["name"].is_string());
}

#[test]
fn ctrl_c_cancels_cleanly_and_leaves_no_process() {
    let state = tempfile::tempdir().unwrap();
    let mut child = adaptor()
        .args([
            "run",
            "--json",
            "--config",
            &config(state.path()),
            "[[grandchild]] [[hang]] interrupt me",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut pids = None;
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if v["kind"] == "notice" && v["notice"] == "pids" {
                let tx = (
                    v["data"]["provider_pid"].as_u64().unwrap() as u32,
                    v["data"]["grandchild_pid"].as_u64().unwrap() as u32,
                );
                pids = Some(tx);
                // Interrupt the CLI like a terminal would.
                // SAFETY: kill(2) on a pid this test spawned.
                unsafe { libc::kill(child_pid(), libc::SIGINT) };
            }
            lines.push(v);
        }
        (pids, lines)
    });
    CHILD.store(child.id(), std::sync::atomic::Ordering::SeqCst);
    let status = child.wait().unwrap();
    let (pids, lines) = reader.join().unwrap();
    let (provider, grandchild) = pids.expect("pids reported");
    assert_eq!(status.code(), Some(130));
    assert_eq!(lines.last().unwrap()["failure"]["reason"], "cancelled");
    std::thread::sleep(Duration::from_millis(50));
    assert!(!pid_alive(provider) && !pid_alive(grandchild));
}

static CHILD: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn child_pid() -> i32 {
    loop {
        let pid = CHILD.load(std::sync::atomic::Ordering::SeqCst);
        if pid != 0 {
            return pid as i32;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn inspect_reports_the_environment_and_fails_without_the_cli() {
    let ok = adaptor().args(["inspect", "--json"]).output().unwrap();
    assert_exit(&ok, 0);
    let doc: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(doc["environment"]["status"], "pass");
    assert_eq!(doc["environment"]["cli_version"], "1.0.0");
    assert_eq!(doc["quota"]["state"], "unsupported", "never a fake success");
    assert_eq!(doc["models"][0]["id"], "reference-1");

    let missing = adaptor()
        .args([
            "inspect",
            "--config",
            r#"{"command":"/no/such/reference-cli"}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    let text = String::from_utf8(missing.stdout).unwrap();
    assert!(text.contains("environment: FAIL"), "{text}");
    assert!(
        text.contains("/no/such/reference-cli") && text.contains("hint:"),
        "{text}"
    );
}

#[test]
fn inspect_warns_about_a_cli_version_outside_the_supported_range() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake_cli(dir.path(), "future-cli", "reference-provider 2.5.0");
    let config = serde_json::json!({"command": fake.display().to_string()}).to_string();
    let out = adaptor()
        .args(["inspect", "--json", "--config", &config])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "a warning is not a failure");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["environment"]["status"], "warn");
    assert_eq!(doc["environment"]["cli_version"], "2.5.0");
    let version = doc["environment"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["code"] == "cli.version")
        .unwrap();
    assert_eq!(version["level"], "warn");
    assert!(
        version["message"]
            .as_str()
            .unwrap()
            .contains("outside the supported range")
    );
}

#[test]
fn policy_flags_are_checked_and_passed() {
    let state = tempfile::tempdir().unwrap();
    let ok = adaptor()
        .args([
            "run",
            "--json",
            "--policy",
            "read-only",
            "--web-search",
            "allow",
            "--config",
            &config(state.path()),
            "p",
        ])
        .output()
        .unwrap();
    assert_exit(&ok, 0);
    let unsupported = adaptor()
        .args([
            "run",
            "--policy",
            "unrestricted",
            "--config",
            &config(state.path()),
            "p",
        ])
        .output()
        .unwrap();
    assert_eq!(unsupported.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&unsupported.stderr)
            .contains("does not support sandbox = unrestricted")
    );
    let bad = adaptor()
        .args(["run", "--policy", "chaos", "p"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn schema_flag_prints_the_validated_json() {
    let state = tempfile::tempdir().unwrap();
    let schema = state.path().join("schema.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","properties":{"ok":{"const":true}},"required":["ok"]}"#,
    )
    .unwrap();
    let out = adaptor()
        .args(["run", "--config", &config(state.path()), "--schema"])
        .arg(&schema)
        .arg("answer")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.trim_end().ends_with("{\n  \"ok\": true\n}"),
        "{stdout}"
    );
    std::fs::write(&schema, r#"{"type": 12}"#).unwrap();
    let bad = adaptor()
        .args(["run", "--schema"])
        .arg(&schema)
        .arg("x")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("invalid output schema"));
}

#[test]
fn approve_ask_without_a_terminal_denies_never_approves() {
    use std::os::unix::process::CommandExt;
    let state = tempfile::tempdir().unwrap();
    let mut cmd = adaptor();
    cmd.args([
        "run",
        "--approve",
        "ask",
        "--config",
        &config(state.path()),
        "[[ask-permission]] hi",
    ]);
    // A new session has no controlling terminal, so `/dev/tty` cannot be opened.
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert_exit(&out, 1);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no terminal to ask on"), "{stderr}");
    assert!(stderr.contains("approval_denied"), "{stderr}");
    assert!(
        stdout.contains("✗ denied: no terminal to ask on"),
        "{stdout}"
    );
    assert!(!stdout.contains("← hi"), "the tool never ran: {stdout}");
}

#[test]
fn approve_ask_reads_answers_from_the_terminal() {
    use std::io::{Read, Write};
    let state = tempfile::tempdir().unwrap();
    let exe = bin_dir().join("adaptor");
    let line = format!(
        "{} run --approve ask --config '{}' '[[ask-question]] [[ask-permission]] hi'",
        exe.display(),
        config(state.path())
    );
    // `script` (util-linux, always on Debian) runs the command on a fresh pseudo-terminal and
    // forwards our stdin to it: the answers are typed at that terminal.
    let mut child = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1) runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"2\ny\n").unwrap();
    stdin.flush().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).unwrap();
        s
    });
    let status = child.wait().unwrap();
    drop(stdin);
    let text = reader.join().unwrap();
    assert!(status.success(), "{status:?}\n{text}");
    assert!(text.contains("1) Formal — Good day."), "{text}");
    assert!(text.contains("answered `casual`"), "{text}");
    assert!(text.contains("approve? [y/N]"), "{text}");
    assert!(text.contains("← casual"), "{text}");
    assert!(text.contains("← hi"), "{text}");
    assert!(text.contains("Reference reply: hi"), "{text}");
}

#[test]
fn approve_auto_and_deny_answer_without_asking() {
    let state = tempfile::tempdir().unwrap();
    let run = |mode: &str| {
        adaptor()
            .args([
                "run",
                "--approve",
                mode,
                "--config",
                &config(state.path()),
                "[[ask-question]] [[ask-permission]] hi",
            ])
            .output()
            .unwrap()
    };
    let out = run("auto");
    assert_exit(&out, 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("← hi"), "{stdout}");
    assert!(stderr.contains("approved by policy"), "{stderr}");
    assert!(
        stderr.contains("question `approval-1`: denied by policy"),
        "{stderr}"
    );
    let out = run("deny");
    assert_exit(&out, 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("✗ denied: permission requests are auto-denied by the run policy"),
        "{stdout}"
    );
    assert!(stdout.contains("Reference reply: hi"), "{stdout}");
}
