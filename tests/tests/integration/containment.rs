//! The containment suite: the hostile driver (`tests/drivers/hostile`, `[[shell]]` mode)
//! granted a shell — the most powerful "CLI" there is — tries every escape class of the
//! threat model. Each attack fails with its typed error before anything is spawned, or runs
//! and is confined by the kernel; the next run on the same Agent is fine.

use std::path::Path;
use std::time::Duration;

use adaptor::{Agent, AgentBuilder, Containment, Error, LaunchRefusal, Policy, Sandbox};
use adaptor_integration_tests::*;

/// A hostile agent granted `/bin/sh`, in workspace `ws`.
fn shell_agent(ws: &Path) -> AgentBuilder {
    let driver = adaptor::Driver::from_file(test_driver_path("hostile"))
        .expect("hostile.wasm")
        .with_config(serde_json::json!({"command": "/bin/sh"}))
        .expect("config");
    agent_builder(driver, ws).timeout(Duration::from_secs(60))
}

/// Run `script` through the shell; its stdout, and its stderr.
async fn shell(agent: &Agent, head: &str, script: &str) -> (String, String) {
    let r = agent
        .run(format!("{head} [[shell]] {script}"))
        .await
        .unwrap_or_else(|e| panic!("the shell run fails: {e}"));
    let (out, err) = r.text.split_once("--stderr--").expect("shell text");
    (out.to_owned(), err.to_owned())
}

async fn still_healthy(agent: &Agent, after: &str) {
    let (out, _) = shell(agent, "", "echo healthy").await;
    assert_eq!(out.trim(), "healthy", "after {after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loader_interpreter_shell_and_config_variables_are_refused_before_spawn() {
    let ws = tmp();
    let agent = shell_agent(ws.path()).build();
    for (name, rule) in [
        ("LD_PRELOAD", "LD_*"),
        ("LD_LIBRARY_PATH", "LD_*"),
        ("NODE_OPTIONS", "NODE_*"),
        ("BUN_OPTIONS", "BUN_*"),
        ("BASH_ENV", "BASH_ENV"),
        ("ENV", "ENV"),
        ("PYTHONPATH", "PYTHON*"),
        ("GIT_CONFIG_COUNT", "GIT_*"),
        ("CLAUDE_CONFIG_DIR", "CLAUDE_CONFIG_DIR"),
        ("CODEX_HOME", "CODEX_HOME"),
        ("PATH", "PATH"),
        ("HOME", "HOME"),
        ("TMPDIR", "TMPDIR"),
        ("XDG_CONFIG_HOME", "XDG_*"),
    ] {
        let marker = ws.path().join(format!("spawned-{name}"));
        let (events, result) = collect(agent.stream(format!(
            "[[env {name}=/tmp/evil]] [[shell]] touch {}",
            marker.display()
        )))
        .await;
        match result {
            Err(Error::LaunchRefused {
                refusal: LaunchRefusal::DeniedEnv { name: n, rule: r },
                ..
            }) => assert_eq!((n.as_str(), r.as_str()), (name, rule)),
            other => panic!("{name}: expected DeniedEnv, got {other:?}"),
        }
        assert!(events.is_empty(), "{name}: nothing started: {events:?}");
        assert!(!marker.exists(), "{name}: nothing was spawned");
        still_healthy(&agent, name).await;
    }
}

/// A driver declares every variable its launches may set (`driver-info.launch-env`): one it
/// did not declare is refused before anything starts, even a harmless-looking one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_variable_the_driver_did_not_declare_is_refused_before_spawn() {
    let ws = tmp();
    let agent = shell_agent(ws.path()).build();
    let declared = agent.driver().descriptor().launch_env.clone().unwrap();
    assert!(!declared.iter().any(|d| d == "SURPRISE"), "{declared:?}");
    let marker = ws.path().join("spawned");
    let (events, result) = collect(agent.stream(format!(
        "[[env SURPRISE=1]] [[shell]] touch {}",
        marker.display()
    )))
    .await;
    match result {
        Err(Error::LaunchRefused {
            refusal: LaunchRefusal::UndeclaredEnv(name),
            ..
        }) => assert_eq!(name, "SURPRISE"),
        other => panic!("expected UndeclaredEnv, got {other:?}"),
    }
    assert!(events.is_empty() && !marker.exists(), "nothing started");
    // A declared prefix covers its names.
    let (out, _) = shell(&agent, "[[env HOSTILE_MODE=on]]", "echo $HOSTILE_MODE").await;
    assert_eq!(out.trim(), "on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_cannot_point_the_cli_elsewhere_while_a_caller_secret_is_present() {
    let ws = tmp();
    // Without a caller secret in the provider's environment, an endpoint is the driver's
    // business (a mock, a proxy it documents).
    let open = shell_agent(ws.path()).build();
    let (out, _) = shell(
        &open,
        "[[env ANTHROPIC_BASE_URL=http://127.0.0.1:9]]",
        "echo $ANTHROPIC_BASE_URL",
    )
    .await;
    assert_eq!(out.trim(), "http://127.0.0.1:9");
    // With the caller's key there, the same launch is refused before anything starts: the
    // key would go to the driver's endpoint.
    let keyed = shell_agent(ws.path())
        .env("ANTHROPIC_API_KEY", "sk-caller")
        .build();
    let marker = ws.path().join("spawned");
    let (events, result) = collect(keyed.stream(format!(
        "[[env ANTHROPIC_BASE_URL=http://127.0.0.1:9]] [[shell]] touch {}",
        marker.display()
    )))
    .await;
    match result {
        Err(Error::LaunchRefused {
            refusal: LaunchRefusal::EndpointWithSecret { name, rule, secret },
            ..
        }) => assert_eq!(
            (name.as_str(), rule.as_str(), secret.as_str()),
            ("ANTHROPIC_BASE_URL", "*_BASE_URL", "ANTHROPIC_API_KEY")
        ),
        other => panic!("expected EndpointWithSecret, got {other:?}"),
    }
    assert!(events.is_empty() && !marker.exists(), "nothing started");
    // The caller's own endpoint wins over the driver's, and is no refusal.
    let both = shell_agent(ws.path())
        .env("ANTHROPIC_API_KEY", "sk-caller")
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:7")
        .build();
    let (out, _) = shell(
        &both,
        "[[env ANTHROPIC_BASE_URL=http://127.0.0.1:9]]",
        "echo $ANTHROPIC_BASE_URL",
    )
    .await;
    assert_eq!(out.trim(), "http://127.0.0.1:7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_variables_win_and_a_denied_name_can_be_allowed() {
    let ws = tmp();
    let agent = shell_agent(ws.path())
        .env("CALLER_SET", "from-the-caller")
        .containment(Containment::new().allow_driver_env("NODE_OPTIONS"))
        .build();
    let (out, _) = shell(
        &agent,
        "[[env CALLER_SET=from-the-driver]] [[env NODE_OPTIONS=--no-warnings]]",
        "echo $CALLER_SET; echo $NODE_OPTIONS",
    )
    .await;
    assert_eq!(out, "from-the-caller\n--no-warnings\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filesystem_outside_the_run_is_out_of_reach() {
    let (ws, outside, other_ws) = (tmp(), tmp(), tmp());
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "the host user's secret").unwrap();
    let agent = shell_agent(ws.path()).build();
    let etc_target = format!("/etc/adaptor-pwned-{}", std::process::id());
    let script = format!(
        "cat {secret}; echo pwned > {other}/pwned; echo pwned > {etc_target}; \
         ls {outside}; cat /etc/shadow; echo ok > in-ws.txt && echo wrote-ws; \
         echo ok > $TMPDIR/t && echo wrote-tmp; mknod disk b 8 0 && echo made-a-device; \
         cat /etc/hostname > /dev/null && echo read-etc",
        secret = secret.display(),
        other = other_ws.path().display(),
        outside = outside.path().display(),
    );
    let (out, err) = shell(&agent, "", &script).await;
    assert_eq!(out, "wrote-ws\nwrote-tmp\nread-etc\n", "stderr: {err}");
    assert!(!out.contains("secret"));
    for denied in [
        "secret.txt: Permission denied".to_owned(),
        "pwned: Permission denied".to_owned(),
        format!("{etc_target}: Permission denied"),
        "shadow: Permission denied".to_owned(),
    ] {
        assert!(err.contains(&denied), "{denied} in {err}");
    }
    assert!(!other_ws.path().join("pwned").exists());
    assert!(!Path::new(&etc_target).exists());
    assert_eq!(
        std::fs::read_to_string(ws.path().join("in-ws.txt")).unwrap(),
        "ok\n"
    );
    // A read-only policy takes the workspace's write away too.
    let read_only = Policy {
        sandbox: Sandbox::ReadOnly,
        ..Policy::default()
    };
    let r = agent
        .run_with(
            "[[shell]] echo no > ro.txt || echo refused",
            adaptor::RunOptions::new().policy(read_only),
        )
        .await
        .unwrap();
    assert!(r.text.starts_with("refused\n"), "{}", r.text);
    assert!(!ws.path().join("ro.txt").exists());
    still_healthy(&agent, "filesystem attacks").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_files_are_data_in_a_private_directory_removed_after_the_run() {
    let ws = tmp();
    let agent = shell_agent(ws.path()).build();
    let (out, err) = shell(
        &agent,
        "[[file evil.sh]]",
        "d=$HOSTILE_PRIVATE_DIR; stat -c '%a' \"$d\" \"$d/evil.sh\" \"$d/..\"; \
         \"$d/evil.sh\" || echo exec-refused; echo x > \"$d/new\" || echo write-refused; \
         echo \"$d\"",
    )
    .await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        &lines[..5],
        ["700", "600", "700", "exec-refused", "write-refused"],
        "stderr: {err}"
    );
    let dir = Path::new(lines[5]);
    assert!(!dir.exists(), "{} removed after the run", dir.display());
    assert!(!dir.parent().unwrap().exists(), "the run directory is gone");
}

/// Processes containing `marker` in their command line.
fn with_marker(marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            (String::from_utf8_lossy(&cmd).contains(marker) && pid_alive(pid)).then_some(pid)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setsid_daemons_and_double_forks_do_not_survive_the_run() {
    let ws = tmp();
    let agent = shell_agent(ws.path()).build();
    let (out, _) = shell(
        &agent,
        "",
        "(setsid sleep 987001 > /dev/null 2>&1 &); (sh -c 'sleep 987002 > /dev/null 2>&1 &' &); \
         sleep 0.2; echo started",
    )
    .await;
    assert_eq!(out, "started\n");
    assert!(
        eventually(Duration::from_secs(5), || with_marker("98700").is_empty()).await,
        "survivors: {:?}",
        with_marker("98700")
    );
    still_healthy(&agent, "daemons").await;
}

/// A run returns only once every process it started is gone and reaped: the provider's
/// exit is reported as soon as its namespace is empty, while the reaper (the group's
/// leader) is still tearing itself down, and the run waits for that too before it returns.
/// The window is a fraction of a millisecond and the run's own work usually outlasts it, so
/// this end-to-end check rarely sees it open; the waiting itself is unit-tested
/// (`process::tests::a_group_left_to_its_exiting_reaper_ends_when_the_reaper_is_reaped`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_returns_only_once_its_reaper_is_reaped() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    for round in 0..25 {
        let result = agent.run("[[grandchild]] hello").await.expect("a run");
        // (The grandchild makes the reaper stop a leftover before it reports.)
        let process = result
            .raw()
            .launch
            .as_ref()
            .and_then(|l| l.process)
            .expect("the launch's process");
        let proc_dir = format!("/proc/{}", process.pid);
        assert!(
            !Path::new(&proc_dir).exists(),
            "round {round}: the group's leader {} is not reaped when the run returns",
            process.pid
        );
        assert!(!group_alive(process.pgid as u32), "round {round}");
    }
}

/// What the provider leaves behind is first asked to stop (SIGTERM: a leftover that traps it
/// gets to clean up), and what ignores it is killed at the end of the grace period — all of it
/// before the run returns, not eventually.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_are_asked_to_stop_then_killed_before_the_run_returns() {
    let ws = tmp();
    let agent = shell_agent(ws.path()).build();
    let (out, _) = shell(
        &agent,
        "",
        "(trap 'echo polite > stopped.txt; exit 0' TERM; sleep 987301 & wait) > /dev/null 2>&1 & \
         (trap '' TERM; exec sleep 987302) > /dev/null 2>&1 & \
         sleep 0.2; echo started",
    )
    .await;
    assert_eq!(out, "started\n");
    assert_eq!(
        with_marker("98730"),
        Vec::<u32>::new(),
        "leftovers alive when the run returned"
    );
    let stopped = std::fs::read_to_string(ws.path().join("stopped.txt")).unwrap_or_default();
    assert_eq!(
        stopped, "polite\n",
        "the leftover that traps SIGTERM ran its trap"
    );
    still_healthy(&agent, "leftovers").await;
}

#[test]
fn a_host_killed_with_sigkill_leaves_no_survivor() {
    let ws = tmp();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_host-kill-helper"))
        .arg(ws.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ready = ws.path().join("ready");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !ready.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ready.exists(), "the helper's provider never got ready");
    assert!(!with_marker("98711").is_empty(), "the daemons run");
    child.kill().unwrap(); // SIGKILL: the host gets no chance to clean up.
    child.wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !with_marker("98711").is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        with_marker("98711").is_empty(),
        "survivors of a SIGKILLed host: {:?}",
        with_marker("98711")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_cannot_signal_processes_outside_its_run() {
    let ws = tmp();
    let mut victim = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let agent = shell_agent(ws.path()).build();
    let (out, err) = shell(
        &agent,
        "",
        &format!("kill -TERM {} || echo refused", victim.id()),
    )
    .await;
    assert_eq!(out, "refused\n", "stderr: {err}");
    assert!(victim.try_wait().unwrap().is_none(), "the victim lives");
    victim.kill().unwrap();
    victim.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_probes_are_confined_like_a_launch_and_report_it() {
    // A probe whose arguments are a script is refused: probes are plain words and flags.
    let ws = tmp();
    let r = shell_agent(ws.path()).build().inspect().await;
    assert!(
        matches!(&r, Err(Error::DriverContract { call: "environment-probes", message, .. }) if message.contains("is not a plain word or flag")),
        "{r:?}"
    );
    // A CLI that misbehaves on `--version` (a script the caller configured) runs confined:
    // no write to the workspace or to its state, no secret read.
    let (bin, state) = (tmp(), tmp());
    let cli = bin.path().join("evil-cli.sh");
    std::fs::write(
        &cli,
        format!(
            "#!/bin/sh\ntouch probe-wrote && echo wrote-the-workspace\ntouch {}/hook && echo wrote-the-state\ncat /etc/shadow > /dev/null && echo read-shadow\necho probe-ran\n",
            state.path().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cli, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let driver = adaptor::Driver::from_file(test_driver_path("hostile"))
        .unwrap()
        .with_config(serde_json::json!({"command": cli.display().to_string()}))
        .unwrap();
    let agent = agent_builder(driver, ws.path())
        .containment(Containment::new().state_dir(state.path()))
        .build();
    let inspection = agent.inspect().await.unwrap();
    let check = inspection
        .environment
        .checks
        .iter()
        .find(|c| c.code == "hostile.escape")
        .expect("the escape probe ran");
    assert!(check.message.contains("probe-ran"), "{}", check.message);
    assert!(
        !check.message.contains("wrote-the-workspace"),
        "{}",
        check.message
    );
    assert!(!check.message.contains("read-shadow"), "{}", check.message);
    assert!(
        !check.message.contains("wrote-the-state"),
        "{}",
        check.message
    );
    assert!(!ws.path().join("probe-wrote").exists());
    assert!(
        !state.path().join("hook").exists(),
        "the CLI's state is read-only for probes"
    );
    match &inspection.containment {
        adaptor::Availability::Supported { value } => {
            assert!(
                value.filesystem_enforced && value.pid_namespace,
                "{value:?}"
            );
            assert!(value.landlock_abi.is_some());
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_shows_the_exact_launch_and_spawns_nothing() {
    let ws = tmp();
    let agent = shell_agent(ws.path())
        .env("ANTHROPIC_API_KEY", "sk-very-secret")
        .build();
    let marker = ws.path().join("ran");
    let plan = agent
        .dry_run(format!(
            "[[env MODE=fast]] [[file schema.json]] [[shell]] touch {}",
            marker.display()
        ))
        .await
        .unwrap();
    assert!(!marker.exists(), "nothing ran");
    assert_eq!(plan.program, "/bin/sh");
    assert_eq!(plan.args[0], "-c");
    assert!(plan.args[1].starts_with("touch "));
    assert_eq!(plan.cwd, ws.path().canonicalize().unwrap());
    let env: std::collections::BTreeMap<_, _> = plan.env.iter().cloned().collect();
    assert_eq!(env["MODE"], "fast");
    assert_eq!(env["ANTHROPIC_API_KEY"], "<masked: 14 bytes>");
    assert!(plan.driver_env.contains(&"MODE".to_owned()));
    assert_eq!(plan.files.len(), 1);
    assert_eq!(plan.files[0].0, "schema.json");
    assert!(plan.files[0].1 > 0);
    assert!(plan.containment.filesystem_enforced);
    assert!(
        plan.containment
            .rules
            .iter()
            .any(|r| r.why == "workspace" && r.access == adaptor::PathAccess::ReadWrite)
    );
    // A refused launch is the same typed error as for a run.
    assert!(matches!(
        agent.dry_run("[[env LD_PRELOAD=x]] [[shell]] true").await,
        Err(Error::LaunchRefused { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_the_caller_allows_must_exist_and_widens_the_reach() {
    let (ws, extra) = (tmp(), tmp());
    std::fs::write(extra.path().join("data.txt"), "shared").unwrap();
    let missing = extra.path().join("missing");
    let refused = shell_agent(ws.path())
        .containment(Containment::new().allow_read(&missing))
        .build();
    assert!(matches!(
        refused.run("[[shell]] true").await,
        Err(Error::ContainmentUnavailable { .. })
    ));
    let agent = shell_agent(ws.path())
        .containment(Containment::new().allow_read(extra.path()))
        .build();
    let (out, _) = shell(
        &agent,
        "",
        &format!(
            "cat {d}/data.txt; echo x > {d}/w || echo read-only",
            d = extra.path().display()
        ),
    )
    .await;
    assert_eq!(out, "sharedread-only\n");
    // allow_write: the same directory becomes writable.
    let agent = shell_agent(ws.path())
        .containment(Containment::new().allow_write(extra.path()))
        .build();
    let (out, _) = shell(
        &agent,
        "",
        &format!("echo x > {}/w && echo wrote", extra.path().display()),
    )
    .await;
    assert_eq!(out, "wrote\n");
    assert_eq!(
        std::fs::read_to_string(extra.path().join("w")).unwrap(),
        "x\n"
    );
}

/// Set directory `dir`'s modification time `ago` in the past.
fn age(dir: &Path, ago: Duration) {
    std::fs::File::open(dir)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - ago)
        .unwrap();
}

#[test]
fn run_directories_of_a_crashed_host_are_swept_on_the_next_start() {
    let temp = std::env::temp_dir();
    // Directories shaped like a run's whose lock nobody holds: what a crashed host leaves,
    // in this layout (the directory is the lock) and in the one before (a `lock` file).
    let stale = temp.join("adaptor-run-run-crashed-host-test");
    std::fs::create_dir_all(stale.join("files")).unwrap();
    std::fs::write(stale.join("files").join("schema.json"), "{}").unwrap();
    age(&stale, Duration::from_secs(120));
    let stale_before = temp.join("adaptor-run-run-crashed-older-host-test");
    std::fs::create_dir_all(stale_before.join("tmp")).unwrap();
    std::fs::write(stale_before.join("lock"), "").unwrap();
    age(&stale_before, Duration::from_secs(120));
    // Not swept: a directory just made (its host may not have locked it yet), one whose
    // host holds its lock, and one of the layout before whose host holds its `lock` file.
    let young = temp.join("adaptor-run-run-just-made-test");
    std::fs::create_dir_all(&young).unwrap();
    let live = temp.join("adaptor-run-run-live-host-test");
    std::fs::create_dir_all(live.join("tmp")).unwrap();
    let live_lock = std::fs::File::open(&live).unwrap();
    age(&live, Duration::from_secs(120));
    let live_before = temp.join("adaptor-run-run-live-older-host-test");
    std::fs::create_dir_all(&live_before).unwrap();
    let live_before_lock = std::fs::File::create(live_before.join("lock")).unwrap();
    age(&live_before, Duration::from_secs(120));
    for held in [&live_lock, &live_before_lock] {
        // SAFETY: flock(2) on a descriptor this test owns.
        assert_eq!(
            unsafe {
                libc::flock(
                    std::os::fd::AsRawFd::as_raw_fd(held),
                    libc::LOCK_EX | libc::LOCK_NB,
                )
            },
            0
        );
    }
    let ws = tmp();
    let out = adaptor_cli()
        .args(["run", "--dry-run", "hi"])
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert!(!stale.exists(), "the stale run directory was swept");
    assert!(
        !stale_before.exists(),
        "the stale older run directory was swept"
    );
    for kept in [&young, &live, &live_before] {
        assert!(kept.exists(), "{} was kept", kept.display());
        std::fs::remove_dir_all(kept).unwrap();
    }
}

/// What a provider could try against the secrets of `/etc`: a clone of the mount tree
/// (`open_tree`, Linux 5.2+; a root provider may make one), without the mounts on top of it,
/// then `etc/machine-id` opened through it. Prints `read` if that worked.
const CLONE_THE_MOUNT_TREE: &str = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for flags in (1, 1 | 0x8000):  # OPEN_TREE_CLONE, with AT_RECURSIVE
    fd = libc.syscall(428, -100, b"/", flags | 0o2000000)
    if fd < 0:
        print("no clone:", os.strerror(ctypes.get_errno()))
        continue
    try:
        os.read(os.open("etc/machine-id", os.O_RDONLY, dir_fd=fd), 8)
        print("read")
    except OSError as e:
        print("refused:", e.strerror)
"#;

/// Whoever runs the host, no secret of `/etc` is reached past the mount tree: a root
/// provider may clone it without the mounts on top, so a root host grants `/etc` entry by
/// entry (the secret has no rule to be read by); a provider of a host that is not root,
/// whose secrets are hidden by mounts, cannot clone it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_of_the_mount_tree_reveals_no_secret() {
    let python = Path::new("/usr/bin/python3");
    if !python.exists() || !Path::new("/etc/machine-id").exists() {
        eprintln!("skipped: no /usr/bin/python3 or no /etc/machine-id here");
        return;
    }
    let ws = tmp();
    std::fs::write(ws.path().join("clone.py"), CLONE_THE_MOUNT_TREE).unwrap();
    let agent = shell_agent(ws.path()).build();
    let (out, err) = shell(&agent, "", "/usr/bin/python3 clone.py").await;
    assert_eq!(out.lines().count(), 2, "stdout: {out}; stderr: {err}");
    assert!(
        out.lines()
            .all(|l| l.starts_with("no clone:") || l.starts_with("refused:")),
        "{out}"
    );
    agent.close().await;
}

/// The same confinement for a host that is not root: the namespaces come inside a user
/// namespace that maps only the host user's uid and gid. Run as root (CI), the test runs the
/// CLI as `nobody` with `setpriv`, from copies it can read (the build tree may be under a
/// 0700 home).
#[test]
fn a_host_that_is_not_root_gets_the_same_confinement() {
    // SAFETY: geteuid(2) cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let dir = tempfile::tempdir().unwrap();
    let (bin, ws, home) = (
        dir.path().join("bin"),
        dir.path().join("ws"),
        dir.path().join("home"),
    );
    for d in [&bin, &ws, &home] {
        std::fs::create_dir(d).unwrap();
    }
    let exe = bin.join("adaptor");
    std::fs::copy(adaptor_exe(), &exe).unwrap();
    // The launcher runs the command installed beside it.
    std::fs::copy(bin_dir().join("adaptor-host"), bin.join("adaptor-host")).unwrap();
    let driver = bin.join("hostile.wasm");
    std::fs::copy(test_driver_path("hostile"), &driver).unwrap();
    if root {
        use std::os::unix::fs::PermissionsExt;
        for d in [dir.path(), &bin] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        for d in [&ws, &home] {
            std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
        }
    }
    let adaptor = |prompt: &str, flags: &[&str]| {
        let mut cmd = if root {
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&exe);
            c
        } else {
            std::process::Command::new(&exe)
        };
        cmd.env_clear()
            .env("HOME", &home)
            .env("PATH", "/usr/bin:/bin")
            .env("XDG_CONFIG_HOME", home.join("no-config"))
            .current_dir(&ws)
            .args(["run", "--json"])
            .args(flags)
            .arg("--driver")
            .arg(&driver)
            .args(["--config", r#"{"command":"/bin/sh"}"#, prompt])
            .output()
            .unwrap()
    };
    // Such a host's provider has no capabilities: `/etc` is granted whole, its secrets
    // hidden by mounts in the provider's namespace (when the kernel lets the reaper mount).
    let plan = adaptor("hi", &["--dry-run"]);
    assert_exit(&plan, 0);
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let hidden = plan["containment"]["hidden"].as_array().unwrap();
    let hides = !hidden.is_empty();
    if hides && Path::new("/etc/shadow").exists() {
        assert!(hidden.iter().any(|p| p == "/etc/shadow"), "{hidden:?}");
    }
    let out = adaptor(
        "[[shell]] echo pid=$$; ls /root || echo home-denied; echo w > ok.txt && echo ws-ok; \
         (setsid sleep 987221 > /dev/null 2>&1 &); ls /etc > /dev/null && echo listed-etc; \
         cat /etc/shadow || echo no-shadow; cat /etc/hostname > /dev/null && echo read-etc; \
         echo done",
        &[],
    );
    assert_exit(&out, 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("a result line")).unwrap();
    let text = result["text"].as_str().unwrap();
    let listed = if hides { "listed-etc\n" } else { "" };
    assert!(
        text.starts_with(&format!(
            "pid=2\nhome-denied\nws-ok\n{listed}no-shadow\nread-etc\ndone\n"
        )),
        "{text}"
    );
    assert!(
        std::fs::read_to_string(ws.join("ok.txt")).is_ok(),
        "the workspace is writable"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !with_marker("987221").is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        with_marker("987221").is_empty(),
        "the daemon died with the run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_cannot_set_the_host_tool_servers_token_variable() {
    let ws = tmp();
    let marker = ws.path().join("spawned");
    let agent = shell_agent(ws.path())
        .tools([lookup_tool(Default::default())])
        .build();
    // The hostile driver reads `${ADAPTOR_TOOLS_TOKEN_…}` from the request's MCP headers and
    // sets that variable to a value of its own: refused before anything is spawned.
    let (events, result) = collect(agent.stream(format!(
        "[[steal-mcp-token]] [[shell]] touch {}",
        marker.display()
    )))
    .await;
    match result {
        Err(Error::LaunchRefused {
            refusal: LaunchRefusal::HostEnv(name),
            ..
        }) => assert!(name.starts_with("ADAPTOR_TOOLS_TOKEN_"), "{name}"),
        other => panic!("expected HostEnv, got {other:?}"),
    }
    assert!(events.is_empty(), "nothing started: {events:?}");
    assert!(!marker.exists(), "nothing was spawned");
    still_healthy(&agent, "steal-mcp-token").await;
    agent.close().await;
}
