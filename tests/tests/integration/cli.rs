//! The `adaptor` binary: readable view, JSONL, `drivers`, exit codes and Ctrl-C.

use std::process::{Command, Stdio};
use std::time::Duration;

use adaptor_integration_tests::*;

fn adaptor() -> Command {
    adaptor_cli()
}

fn config(state: &std::path::Path) -> String {
    reference_config(state)
}

/// `adaptor` is a launcher for `adaptor-host` beside it: without it, a clear error.
#[test]
fn the_launcher_without_its_host_executable_says_so() {
    let alone = tempfile::tempdir().unwrap();
    std::fs::copy(adaptor_exe(), alone.path().join("adaptor")).unwrap();
    let out = Command::new(alone.path().join("adaptor"))
        .env("ADAPTOR_SOCKET", "")
        .args(["run", "Hello"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "adaptor: cannot run {}: No such file or directory",
            alone.path().join("adaptor-host").display()
        )) && stderr.contains("install or build both"),
        "{stderr}"
    );
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

/// `adaptor run` leaves its agent to the process's exit (`leave_to_exit`): what must be
/// cleaned up is cleaned up by the run itself, before the output ends. With `TMPDIR` of its
/// own, nothing is left in it once `adaptor run` has exited — not the run directory, with
/// or without a thread store.
#[test]
fn a_finished_run_leaves_no_run_directory() {
    let state = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let store = state.path().join("threads.db");
    let store = store.display().to_string();
    for extra in [&[][..], &["--thread", "t1", "--store", store.as_str()][..]] {
        let out = adaptor()
            .env("TMPDIR", tmp.path())
            .args(["run", "--config", &config(state.path())])
            .args(extra)
            .arg("Hello CLI")
            .output()
            .unwrap();
        assert_exit(&out, 0);
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{extra:?}: left in TMPDIR: {left:?}");
    }
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
    // The run's duration and, within it, how long its provider process lived.
    let duration = result["duration_ms"].as_f64().expect("duration_ms");
    let provider = result["provider_ms"].as_f64().expect("provider_ms");
    assert!(
        0.0 < provider && provider < duration,
        "{provider} within {duration}"
    );
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

/// `adaptor run --json PROMPT` on the reference driver, its stdout and stderr piped.
fn json_run(state: &std::path::Path, prompt: &str) -> std::process::Child {
    adaptor()
        .args(["run", "--json", "--config", &config(state), prompt])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn ctrl_c_cancels_cleanly_and_leaves_no_process() {
    let state = tempfile::tempdir().unwrap();
    let mut child = json_run(state.path(), "[[grandchild]] [[hang]] interrupt me");
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut pids = None;
        let mut spawned = None;
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if v["kind"] == "process_info" && v["process"] == "spawn" {
                spawned = v["pid"].as_u64().map(|p| p as u32);
            }
            if v["kind"] == "notice" && v["notice"] == "pids" {
                // The provider's pids are those of its PID namespace: take the host's.
                let spawned = spawned.expect("spawn event before the pids");
                let below = descendants(spawned);
                pids = Some((spawned, *below.last().expect("the provider's processes")));
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

/// `adaptor run` forks its spawner at start (`adaptor::fork_spawner`), not the executable
/// started afresh: the spawner carries adaptor's own command line, and is set up as a started
/// one would be (its own process group, stdio on /dev/null, SIGPIPE at its default so the
/// providers start with it). Killed with SIGKILL, adaptor takes it and the provider with it.
#[test]
fn adaptor_run_forks_its_spawner_which_dies_with_it() {
    let state = tempfile::tempdir().unwrap();
    let mut child = json_run(state.path(), "[[hang]] wait for the kill");
    let host = child.id();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    let spawned = loop {
        let line = lines.next().expect("a spawn event").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["kind"] == "process_info" && v["process"] == "spawn" {
            break v["pid"].as_u64().expect("the spawned pid") as u32;
        }
    };
    let stat = |pid: u32| -> Vec<String> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let (_, fields) = stat.rsplit_once(')').unwrap();
        fields.split_whitespace().map(str::to_owned).collect()
    };
    // Fields after the command name: state, ppid, pgrp, …
    let spawner: u32 = stat(spawned)[1].parse().unwrap();
    let comm = std::fs::read_to_string(format!("/proc/{spawner}/comm")).unwrap();
    assert_eq!(comm.trim_end(), "adaptor-spawner");
    assert_eq!(
        stat(spawner)[1],
        host.to_string(),
        "the spawner is adaptor's child"
    );
    assert_eq!(
        stat(spawner)[2],
        spawner.to_string(),
        "in its own process group"
    );
    let cmdline = std::fs::read(format!("/proc/{spawner}/cmdline")).unwrap();
    let arg0 = cmdline.split(|b| *b == 0).next().unwrap();
    assert!(
        arg0.ends_with(b"/adaptor"),
        "forked: adaptor's own command line, not a fresh `adaptor-spawner` ({})",
        String::from_utf8_lossy(&cmdline)
    );
    for fd in 0..3 {
        let target = std::fs::read_link(format!("/proc/{spawner}/fd/{fd}")).unwrap();
        assert_eq!(target, std::path::Path::new("/dev/null"), "fd {fd}");
    }
    let status = std::fs::read_to_string(format!("/proc/{spawner}/status")).unwrap();
    let ignored = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
        .unwrap();
    assert_eq!(
        ignored & (1 << (libc::SIGPIPE - 1)),
        0,
        "SIGPIPE is not ignored"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let gone = (0..250).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        !pid_alive(spawner) && !group_alive(spawned)
    });
    assert!(
        gone,
        "the spawner {spawner} or the provider's group outlived adaptor"
    );
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

/// The first-five-minutes failure: `./x.sh run "Say hello"` from a fresh clone runs
/// `./target/debug/adaptor` with the clone as its workspace, so the directory holding
/// `adaptor` and `reference-provider` lies inside the workspace — and PATH does not have it.
/// The CLI names its own directory as a program directory, which is trusted wherever it is.
#[test]
fn the_provider_beside_adaptor_is_found_when_the_build_dir_is_inside_the_workspace() {
    let state = tempfile::tempdir().unwrap();
    // The directory above `target/` (the clone, or the CI cache's parent): the build dir is
    // inside this workspace.
    let workspace = target_dir().parent().unwrap().to_path_buf();
    assert!(bin_dir().starts_with(&workspace));
    let out = adaptor()
        .current_dir(&workspace)
        .env("PATH", "/usr/bin:/bin")
        .args(["run", "--config", &config(state.path()), "fresh clone"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Reference reply: fresh clone"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A PATH entry inside the workspace is still never trusted: with the binary's own
    // directory out of the picture (a config naming the program by bare name resolves
    // through PATH, then the CLI's directory) the error says what was skipped.
    let out = adaptor()
        .current_dir(bin_dir())
        .env("PATH", bin_dir())
        .args([
            "run",
            "--config",
            r#"{"command":"no-such-provider-anywhere"}"#,
            "hi",
        ])
        .output()
        .unwrap();
    assert_exit(&out, 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("skipped 1 PATH entry") && stderr.contains("no-such-provider-anywhere"),
        "{stderr}"
    );
}

/// Read a `--json` run's stdout up to the provider's spawn: the rest of the lines, unread,
/// and the provider's pid.
fn read_to_the_spawn(
    child: &mut std::process::Child,
) -> (
    std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    u32,
) {
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut provider = None;
    for line in lines.by_ref().take(50) {
        let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if v["kind"] == "process_info" && v["process"] == "spawn" {
            provider = v["pid"].as_u64().map(|p| p as u32);
            break;
        }
    }
    (
        lines,
        provider.expect("the spawn is among the first events"),
    )
}

/// `adaptor run --json PROMPT` with stdout piped (and stderr as given).

#[test]
fn a_closed_stdout_ends_the_run_quietly_with_141() {
    let state = tempfile::tempdir().unwrap();
    let mut child = spawn_json_run(
        adaptor(),
        state.path(),
        "[[spam 200000]] [[sleep 300]] a long answer",
        Stdio::piped(),
    );
    let (lines, provider) = read_to_the_spawn(&mut child);
    drop(lines); // `| head`: the reader goes away
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("Broken pipe"), "quiet: {stderr}");
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !pid_alive(provider),
        "the run was cancelled, its provider stopped"
    );

    // Every command survives it, not only `run`.
    let mut child = adaptor()
        .args(["completions", "bash"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    assert!(matches!(status.code(), Some(0 | 141)), "{status:?}");
}

#[test]
fn colour_follows_the_flag_and_no_color() {
    let state = tempfile::tempdir().unwrap();
    let run = |color: Option<&str>, no_color: bool| {
        let mut cmd = adaptor();
        cmd.arg("run").args(["--config", &config(state.path())]);
        if let Some(c) = color {
            cmd.args(["--color", c]);
        }
        if no_color {
            cmd.env("NO_COLOR", "1");
        } else {
            cmd.env_remove("NO_COLOR");
        }
        let out = cmd.arg("colour").output().unwrap();
        assert_exit(&out, 0);
        String::from_utf8(out.stdout).unwrap()
    };
    // Into a pipe: no escape codes unless asked for.
    assert!(!run(None, false).contains('\x1b'));
    assert!(run(Some("always"), false).contains("\x1b[2m"));
    assert!(
        run(Some("always"), true).contains("\x1b[2m"),
        "the flag wins"
    );
    assert!(!run(Some("never"), false).contains('\x1b'));
    // On a terminal: colour, unless NO_COLOR or --color never.
    let on_tty = |extra: &str, no_color: bool| {
        let line = format!(
            "{} run --config '{}' {extra} 'tty colour'",
            adaptor_exe().display(),
            config(state.path())
        );
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &line, "/dev/null"])
            .env("XDG_CONFIG_HOME", NO_CONFIG_DIR)
            .env("TERM", "xterm")
            .stdin(Stdio::null());
        if no_color {
            cmd.env("NO_COLOR", "1");
        } else {
            cmd.env_remove("NO_COLOR");
        }
        let out = cmd.output().expect("script(1) runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let final_line = |text: &str| {
        text.lines()
            .find(|l| l.contains("model reference-1"))
            .unwrap_or_else(|| panic!("no final line in {text:?}"))
            .to_owned()
    };
    assert!(final_line(&on_tty("", false)).contains("\x1b[2m"));
    assert!(!final_line(&on_tty("", true)).contains("\x1b[2m"));
    assert!(!final_line(&on_tty("--color never", false)).contains("\x1b[2m"));
}

#[test]
fn a_live_status_line_shows_on_a_terminal_only() {
    let state = tempfile::tempdir().unwrap();
    let prompt = "[[sleep 1200]] status please";
    let line = format!(
        "{} run --config '{}' '{prompt}'",
        adaptor_exe().display(),
        config(state.path())
    );
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("XDG_CONFIG_HOME", NO_CONFIG_DIR)
        .env("TERM", "xterm")
        .env_remove("ADAPTOR_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("script(1) runs");
    let screen = String::from_utf8_lossy(&out.stdout);
    let status_at = screen
        .find("waiting for the agent")
        .unwrap_or_else(|| panic!("no status line: {screen:?}"));
    let text_at = screen
        .find("Reference reply: status please")
        .expect("the reply");
    assert!(status_at < text_at, "the status comes while waiting");
    // Cleared (erase line) before the text is printed, and not drawn again after it.
    let cleared = screen[status_at..text_at].rfind("\x1b[2K");
    assert!(cleared.is_some(), "erased before printing: {screen:?}");
    assert!(!screen[text_at..].contains("waiting for the agent"));

    // Not a terminal: never drawn (neither on stdout nor on stderr).
    let out = adaptor()
        .args(["run", "--config", &config(state.path()), prompt])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    for stream in [&out.stdout, &out.stderr] {
        let text = String::from_utf8_lossy(stream);
        assert!(
            !text.contains("waiting for") && !text.contains('\x1b'),
            "{text:?}"
        );
    }
}

#[test]
fn the_config_file_sets_defaults_and_flags_win() {
    let state = tempfile::tempdir().unwrap();
    let xdg = tempfile::tempdir().unwrap();
    std::fs::create_dir(xdg.path().join("agent-adaptor")).unwrap();
    let file = xdg.path().join("agent-adaptor").join("config.toml");
    std::fs::write(
        &file,
        format!(
            "driver = \"reference\"\nmodel = \"reference-2\"\npolicy = \"read-only\"\n\n\
             [drivers.reference]\nstate_dir = {:?}\n",
            state.path().display().to_string()
        ),
    )
    .unwrap();
    let with_file = || {
        let mut cmd = adaptor();
        cmd.env("XDG_CONFIG_HOME", xdg.path());
        cmd
    };
    let show = with_file()
        .args(["config", "show", "--json", "--model", "reference-3"])
        .output()
        .unwrap();
    assert_exit(&show, 0);
    let doc: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(doc["config_file"]["loaded"], true);
    assert_eq!(doc["driver"]["source"], "config file (driver)");
    assert_eq!(
        doc["config"]["value"]["state_dir"],
        state.path().display().to_string()
    );
    assert_eq!(doc["config"]["source"], "config file (drivers.reference)");
    assert_eq!(doc["model"]["value"], "reference-3");
    assert_eq!(doc["model"]["source"], "flag --model");
    assert_eq!(doc["policy"]["value"], "read-only");
    assert!(
        doc["store"]["source"]
            .as_str()
            .unwrap()
            .starts_with("default")
    );
    let readable = with_file().args(["config", "show"]).output().unwrap();
    assert_exit(&readable, 0);
    let readable = String::from_utf8_lossy(&readable.stdout);
    assert!(
        readable.contains(&format!("{} (loaded)", file.display()))
            && readable.contains("config file (model)"),
        "{readable}"
    );

    // A run uses the file (model, policy, driver config) ...
    let out = with_file()
        .args(["run", "--json", "from file"])
        .output()
        .unwrap();
    let lines = json_lines(&out);
    let result = lines.last().unwrap();
    assert_eq!(result["model"], "reference-2");
    assert!(
        spawned_command(&lines).contains("--sandbox read-only"),
        "{}",
        spawned_command(&lines)
    );
    // ... and a flag wins.
    let out = with_file()
        .args(["run", "--json", "--model", "reference-1", "from flag"])
        .output()
        .unwrap();
    assert_eq!(json_lines(&out).last().unwrap()["model"], "reference-1");

    // A wrong key is a usage error naming the file and the key; nothing runs.
    std::fs::write(&file, "modle = \"reference-2\"\n").unwrap();
    let out = with_file().args(["run", "hi"]).output().unwrap();
    assert_exit(&out, 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("modle") && stderr.contains(&file.display().to_string()),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    // An explicit ADAPTOR_CONFIG must exist.
    let out = adaptor()
        .env("ADAPTOR_CONFIG", xdg.path().join("missing.toml"))
        .args(["config", "show"])
        .output()
        .unwrap();
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.toml"));
}

#[test]
fn completions_for_each_shell_and_help_with_examples() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = adaptor().args(["completions", shell]).output().unwrap();
        assert_exit(&out, 0);
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(
            script.contains("adaptor") && script.contains("threads"),
            "{shell}"
        );
        if shell == "bash" {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("adaptor.bash");
            std::fs::write(&file, &script).unwrap();
            let check = Command::new("bash").arg("-n").arg(&file).output().unwrap();
            assert!(check.status.success(), "{check:?}");
        }
    }
    let out = adaptor().args(["completions", "tcsh"]).output().unwrap();
    assert_exit(&out, 2);
    for sub in [
        &["--help"][..],
        &["run", "--help"],
        &["inspect", "--help"],
        &["threads", "--help"],
        &["drivers", "--help"],
        &["config", "show", "--help"],
        &["completions", "--help"],
    ] {
        let out = adaptor().args(sub).output().unwrap();
        assert_exit(&out, 0);
        let help = String::from_utf8(out.stdout).unwrap();
        assert!(help.contains("Examples:\n  adaptor "), "{sub:?}: {help}");
    }
}

/// Ctrl-C while the CLI is blocked writing to a stdout nobody reads (`| sleep 60`): the run is
/// cancelled at once, the blocked output is sent to `/dev/null` after the watchdog's patience
/// (4 s), and the run ends as any cancelled run does: its provider reaped, exit 130, within
/// seconds — through the event loop, not by the process exiting around it.
#[test]
fn ctrl_c_ends_a_run_whose_stdout_is_not_read() {
    let state = tempfile::tempdir().unwrap();
    let mut child = spawn_json_run(
        adaptor(),
        state.path(),
        "[[spam 200000]] [[sleep 200]] nobody reads this",
        Stdio::piped(),
    );
    // Read up to the provider's spawn, then keep the pipe open but never read it again, so
    // the CLI blocks on a full pipe.
    let (lines, provider) = read_to_the_spawn(&mut child);
    let stderr = child.stderr.take().unwrap();
    let messages = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut { stderr }, &mut text).unwrap();
        text
    });
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: kill(2) on a pid this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("adaptor still running 15 s after Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(lines);
    let stderr = messages.join().unwrap();
    assert_eq!(status.code(), Some(130), "stderr: {stderr}");
    assert!(
        stderr.contains("output is blocked; stopping after Ctrl-C"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("the run did not stop"),
        "the event loop ended the run, not the last resort: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!pid_alive(provider), "the provider was reaped");
}

#[test]
fn dry_run_prints_the_launch_and_the_containment_and_starts_nothing() {
    let (state, ws) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sessions = state.path().join("sessions");
    let out = adaptor()
        .args(["run", "--dry-run", "--config"])
        .arg(config(&sessions))
        .args(["--env", "MY_TOKEN=abc123", "--cwd"])
        .arg(ws.path())
        .arg("look but do not touch")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let text = String::from_utf8(out.stdout).unwrap();
    for expected in [
        "driver reference would launch (nothing was started):",
        "  arg[0]: --state-dir",
        "  env MY_TOKEN=<masked: 6 bytes>",
        "  stdin: 21 bytes, then closed",
        "containment: enforce · Landlock ABI",
        "(workspace)",
        "(state (config /state_dir))",
    ] {
        assert!(text.contains(expected), "{expected:?} in:\n{text}");
    }
    assert!(!sessions.exists(), "nothing ran, so no session was saved");
    // The JSON plan has the same facts.
    let out = adaptor()
        .args(["run", "--dry-run", "--json", "--config"])
        .arg(config(&sessions))
        .arg("hi")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["driver"], "reference");
    assert_eq!(plan["containment"]["filesystem_enforced"], true);
    assert!(plan["env"].as_array().unwrap().len() > 2);
    // `/etc`: its entries folded into one line (root), or one rule and its secrets hidden
    // (a host that is not root).
    let hidden = plan["containment"]["hidden"].as_array().unwrap();
    let etc = if hidden.is_empty() {
        "/etc: "
    } else {
        "hidden     /etc/"
    };
    assert!(text.contains(etc), "{etc:?} in:\n{text}");
}

#[test]
fn inspect_prints_the_containment_and_a_missing_allowed_path_is_a_usage_error() {
    let state = tempfile::tempdir().unwrap();
    let out = adaptor()
        .args(["inspect", "--config"])
        .arg(config(state.path()))
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("containment: enforce · Landlock ABI") && text.contains("PID namespace yes"),
        "{text}"
    );
    let out = adaptor()
        .args([
            "run",
            "--allow-read",
            "/nonexistent/adaptor-path",
            "--config",
        ])
        .arg(config(state.path()))
        .arg("hi")
        .output()
        .unwrap();
    assert_exit(&out, 2);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("cannot confine") && err.contains("/nonexistent/adaptor-path"),
        "{err}"
    );
}

/// No raw control character from a driver or provider in what a command printed.
fn assert_inert(what: &str, out: &std::process::Output) {
    for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let text = String::from_utf8_lossy(bytes);
        assert!(
            !text.contains(['\x1b', '\x07', '\r']),
            "{what}: a control character reached {stream}: {text:?}"
        );
    }
}

#[test]
fn no_escape_sequence_from_a_driver_reaches_the_terminal() {
    // The hostile driver puts escape sequences in its text, thinking, tool call, notice and
    // approval request (`[[escapes]]`), in a program name it asks to launch
    // (`[[spawn-escape]]`) and, run through a shell, in its Inspect probe's output.
    let (state, ws, db) = (tmp(), tmp(), tmp());
    let hostile = test_driver_path("hostile").display().to_string();
    let reference_like = serde_json::json!({
        "command": provider_path().display().to_string(),
        "state_dir": state.path().display().to_string(),
    })
    .to_string();
    let store = db.path().join("threads.sqlite3").display().to_string();
    let cwd = ws.path().display().to_string();
    let run = |extra: &[&str], prompt: &str| {
        let mut args = vec![
            "run",
            "--driver",
            &hostile,
            "--config",
            &reference_like,
            "--cwd",
            &cwd,
        ];
        args.extend_from_slice(extra);
        args.push(prompt);
        adaptor().args(&args).output().unwrap()
    };
    let readable = run(&[], "[[escapes]] hi");
    assert_inert("run", &readable);
    let shown = String::from_utf8_lossy(&readable.stdout);
    assert!(shown.contains("text") && shown.contains("tool"), "{shown}");
    assert_inert(
        "run --approve ask",
        &run(&["--approve", "ask"], "[[escapes]] hi"),
    );
    assert_inert(
        "run --approve deny",
        &run(&["--approve", "deny"], "[[escapes]] hi"),
    );
    let json = run(&["--json"], "[[escapes]] hi");
    assert_inert("run --json", &json);
    assert!(
        String::from_utf8_lossy(&json.stdout).contains("\\u001b"),
        "JSON escapes them"
    );
    let refused = run(&[], "[[spawn-escape]] hi");
    assert_exit(&refused, 2);
    assert_inert("a refused launch", &refused);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("pwned"));
    // A thread key with escapes, listed.
    let key = "key\x1b]0;pwned\x07";
    let threaded = run(&["--thread", key, "--store", &store], "hi");
    assert_exit(&threaded, 0);
    assert_inert("a thread run", &threaded);
    let listed = adaptor()
        .args(["threads", "list", "--store", &store])
        .output()
        .unwrap();
    assert_exit(&listed, 0);
    assert_inert("threads list", &listed);
    // Inspect with a CLI whose `--version` prints an escape sequence.
    let bin = tmp();
    let cli = bin.path().join("escaping-cli.sh");
    std::fs::write(
        &cli,
        "#!/bin/sh\nprintf '\\033]0;pwned\\007'\necho probe-ran\n",
    )
    .unwrap();
    std::fs::set_permissions(&cli, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let sh = serde_json::json!({"command": cli.display().to_string()}).to_string();
    let inspected = adaptor()
        .args(["inspect", "--driver", &hostile, "--config", &sh])
        .output()
        .unwrap();
    assert_inert("inspect", &inspected);
    assert!(String::from_utf8_lossy(&inspected.stdout).contains("probe-ran"));
}

#[test]
fn mcp_config_servers_reach_the_cli_and_are_checked_first() {
    let (state, ws) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let file = ws.path().join("mcp.json");
    let stamper = bin_dir().join("mock-mcp-stdio");
    std::fs::write(
        &file,
        serde_json::json!({"mcpServers": {
            "stamper": {"command": stamper.display().to_string(), "env": {"MOCK_MCP_SECRET": "s3cr3t-value"}},
            "tracker": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X-Api-Key": "header-secret-42"}}
        }})
        .to_string(),
    )
    .unwrap();
    // A run: the reference provider starts the declared stdio server and calls it.
    let out = adaptor()
        .args([
            "run",
            "--json",
            "--config",
            &config(state.path()),
            "--mcp-config",
        ])
        .arg(&file)
        .arg(r#"stamp [[mcp-call stamper:stamp:{"text":"cli"}]]"#)
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let lines = json_lines(&out);
    assert!(
        lines
            .iter()
            .any(|l| l["kind"] == "tool_result" && l["output"] == "STAMPED:cli:secret-len=12"),
        "{lines:?}"
    );
    // A dry run masks the header value and the server's variable wherever they would show.
    let out = adaptor()
        .args([
            "run",
            "--dry-run",
            "--json",
            "--config",
            &config(state.path()),
            "--mcp-config",
        ])
        .arg(&file)
        .arg("hi")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("mcp-config.json"), "{shown}");
    for secret in ["header-secret-42", "s3cr3t-value"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    // Transports the driver does not declare, and malformed files, are usage errors.
    for (doc, needle) in [
        (
            r#"{"mcpServers": {"old": {"type": "sse", "url": "http://127.0.0.1:9/sse"}}}"#,
            "cannot hand a sse MCP server (`old`)",
        ),
        (
            r#"{"mcpServers": {"bad": {"command": "x", "url": "http://x"}}}"#,
            "server `bad`",
        ),
        ("not json", "not JSON"),
    ] {
        std::fs::write(&file, doc).unwrap();
        let out = adaptor()
            .args(["run", "--config", &config(state.path()), "--mcp-config"])
            .arg(&file)
            .arg("hi")
            .output()
            .unwrap();
        assert_exit(&out, 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{needle:?} in {err}");
    }
}

/// The two drivers added for Cursor Agent and CodeBuddy Code are built-ins: `adaptor drivers`
/// lists them, `--driver cursor` runs (the scripted fake installed as `agent`) and
/// `--driver codebuddy` runs the real CodeBuddy Code CLI by name (offline, against the mock
/// Chat Completions API).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_and_codebuddy_are_listed_and_run_by_name() {
    use adaptor_integration_tests::mock_chat::{MockChat, codebuddy_env, codebuddy_path};
    let out = adaptor().args(["drivers"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    for name in ["cursor", "codebuddy"] {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "{name} missing from:\n{text}"
        );
    }
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let agent = home.path().join("agent");
    std::os::unix::fs::symlink(bin_dir().join("fake-cursor-agent"), &agent).unwrap();
    let out = adaptor()
        .current_dir(ws.path())
        .args(["run", "--driver", "cursor", "--config"])
        .arg(serde_json::json!({ "command": agent.display().to_string() }).to_string())
        .args([
            "--env",
            &format!("HOME={}", home.path().display()),
            "hi cursor",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("Cursor reply: hi cursor"), "{stdout}");

    let mock = MockChat::start().await;
    let program = codebuddy_path().expect("CodeBuddy Code (./x.sh test installs it)");
    let mut cmd = adaptor();
    cmd.current_dir(ws.path()).args([
        "run",
        "--driver",
        "codebuddy",
        "--config",
        &serde_json::json!({ "command": program.display().to_string() }).to_string(),
    ]);
    for (k, v) in codebuddy_env(home.path(), &mock.base_url()) {
        cmd.args(["--env", &format!("{k}={v}")]);
    }
    let out = cmd.arg("hello by name").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(
            "Hello from mock-chat! user_msgs=1 you said: <user_query>hello by name</user_query>"
        ),
        "{stdout}"
    );
}

/// `--skill` (a directory or an archive) and `--worktree` on the command line (issue 19).
#[test]
fn skills_and_a_worktree_from_the_command_line() {
    let (state, cache, src, repo) = (tmp(), tmp(), tmp(), tmp());
    let skill = src.path().join("review");
    std::fs::create_dir(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: review\ndescription: Review diffs\n---\n",
    )
    .unwrap();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(repo.path())
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.path().join("a.txt"), "a\n").unwrap();
    git(&["add", "a.txt"]);
    git(&["commit", "-q", "-m", "a"]);
    let out = adaptor()
        .env("ADAPTOR_SKILL_CACHE", cache.path())
        .args([
            "run",
            "--json",
            "--config",
            &config(state.path()),
            "--skill",
        ])
        .arg(&skill)
        .arg("--worktree")
        .arg(repo.path())
        .arg("hello")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("review: Review diffs"), "{stdout}");
    assert!(
        stdout.contains("agent-run-"),
        "the worktree was the cwd: {stdout}"
    );

    // Not a directory and not an archive; a directory without SKILL.md: exit 2, said why.
    let notes = src.path().join("notes.txt");
    std::fs::write(&notes, "x").unwrap();
    let empty = src.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    for (path, why) in [(&notes, "not a directory"), (&empty, "no SKILL.md")] {
        let out = adaptor()
            .env("ADAPTOR_SKILL_CACHE", cache.path())
            .args(["run", "--config", &config(state.path()), "--skill"])
            .arg(path)
            .arg("hello")
            .output()
            .unwrap();
        assert_exit(&out, 2);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains(why), "{why:?} in {stderr}");
    }
}

#[test]
fn a_dedicated_profile_and_an_instructions_bundle_from_the_command_line() {
    let (home, profiles, bundle) = (tmp(), tmp(), tmp());
    let native = home.path().join(".local/state/reference-provider");
    std::fs::create_dir_all(&native).unwrap();
    std::fs::write(native.join("auth.json"), r#"{"account":"cli-user"}"#).unwrap();
    std::fs::write(bundle.path().join("AGENTS.md"), "Speak like a pirate.\n").unwrap();
    let dir = profiles.path().join("p");
    let out = adaptor()
        .args(["run", "--json", "--config", "{}"])
        .arg(format!("--env=HOME={}", home.path().display()))
        .arg("--profile")
        .arg(&dir)
        .arg("--link-auth")
        .arg("--instructions-bundle")
        .arg(bundle.path())
        .arg("hello")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("cli-user"), "the linked login: {stdout}");
    assert!(
        stdout.contains("Speak like a pirate."),
        "the bundle: {stdout}"
    );
    let sessions: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ref-"))
        .collect();
    assert_eq!(sessions.len(), 1, "the session is in the profile");
    assert!(
        std::fs::symlink_metadata(dir.join("auth.json"))
            .unwrap()
            .is_symlink()
    );

    // --link-auth needs --profile; a profile where a file is: exit 2, said why.
    let out = adaptor()
        .args(["run", "--config", "{}", "--link-auth", "hello"])
        .output()
        .unwrap();
    assert_exit(&out, 2);
    let file = profiles.path().join("file");
    std::fs::write(&file, "").unwrap();
    let out = adaptor()
        .args(["run", "--config", "{}"])
        .arg(format!("--env=HOME={}", home.path().display()))
        .arg("--profile")
        .arg(&file)
        .arg("hello")
        .output()
        .unwrap();
    assert_exit(&out, 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not a directory"), "{stderr}");
}
