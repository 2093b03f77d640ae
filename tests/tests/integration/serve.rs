//! `adaptor serve`, the resident host, and `adaptor run` handed to it: the same output and
//! exit codes as a run of its own, who is refused (and then runs by itself), Ctrl-C and a
//! caller that goes away, and the host's stop.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use adaptor_integration_tests::*;

/// The host's log filter, which its callers must share (the environment is compared).
const LOG: &str = "adaptor_host::serve=debug";

/// A running `adaptor serve` on a socket of its own, its stderr in a file; stopped with
/// SIGTERM on drop.
struct Host {
    child: Child,
    dir: tempfile::TempDir,
    log: PathBuf,
}

impl Host {
    fn start() -> Host {
        Host::start_in(tempfile::tempdir().unwrap())
    }

    /// A host on `run/serve.sock` in `dir`.
    fn start_in(dir: tempfile::TempDir) -> Host {
        let log = dir.path().join("serve.log");
        let mut cmd = adaptor_cli();
        cmd.env("ADAPTOR_SOCKET", dir.path().join("run/serve.sock"))
            .env("ADAPTOR_LOG", LOG)
            .arg("serve")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = cmd.spawn().unwrap();
        let host = Host { child, dir, log };
        host.wait_for_log("serving `adaptor run` on");
        host
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("run/serve.sock")
    }

    /// `adaptor` in the host's environment: handed to it when it serves the command.
    fn caller(&self) -> Command {
        self.in_its_environment(Command::new(adaptor_exe()))
    }

    /// `cmd` with the host's environment (the test's, as `adaptor_cli` changes it), stdin
    /// closed.
    fn in_its_environment(&self, mut cmd: Command) -> Command {
        for (name, value) in adaptor_cli().get_envs() {
            match value {
                Some(value) => cmd.env(name, value),
                None => cmd.env_remove(name),
            };
        }
        cmd.env("ADAPTOR_SOCKET", self.socket())
            .env("ADAPTOR_LOG", LOG)
            .stdin(Stdio::null());
        cmd
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }

    fn served(&self) -> usize {
        self.log().matches("adaptor serve: served a run").count()
    }

    fn wait_for_log(&self, text: &str) {
        let until = Instant::now() + Duration::from_secs(30);
        while !self.log().contains(text) {
            assert!(
                Instant::now() < until,
                "no {text:?} in the host's log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, and the exit status.
    fn stop(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on the process this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().unwrap()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.stop();
        }
    }
}

fn config(state: &Path) -> String {
    reference_config(state)
}

#[test]
fn a_served_run_prints_and_exits_as_a_run_of_its_own() {
    let host = Host::start();
    let state = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let served = host
        .caller()
        .current_dir(work.path())
        .args(["run", "--config", &config(state.path()), "Hello served"])
        .output()
        .unwrap();
    assert_exit(&served, 0);
    assert_eq!(host.served(), 1, "{}", host.log());
    let local = adaptor_cli()
        .current_dir(work.path())
        .args(["run", "--config", &config(state.path()), "Hello served"])
        .output()
        .unwrap();
    assert_exit(&local, 0);
    assert_eq!(host.served(), 1);
    // The same lines, but for the session id and the time on the last one.
    let lines = |out: &std::process::Output| -> Vec<String> {
        let text = String::from_utf8(out.stdout.clone()).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let last = lines.pop().unwrap();
        lines.push(last.split(" · session").next().unwrap().to_owned());
        lines
    };
    assert_eq!(lines(&served), lines(&local));
    assert!(
        lines(&served)
            .iter()
            .any(|l| l.contains("Reference reply: Hello served"))
    );
    // The run worked in the caller's directory, not the host's.
    let spawned = host
        .caller()
        .current_dir(work.path())
        .args(["run", "--json", "--config", &config(state.path()), "where"])
        .output()
        .unwrap();
    let lines = json_lines(&spawned);
    let workspace = work.path().canonicalize().unwrap();
    let result = lines.last().unwrap();
    assert_eq!(result["kind"], "result", "{result}");
    assert!(
        result
            .to_string()
            .contains(&workspace.display().to_string()),
        "{result}"
    );
    assert_eq!(host.served(), 2);
}

#[test]
fn a_served_run_fails_with_its_own_message_and_exit_code() {
    let host = Host::start();
    let out = host
        .caller()
        .args(["run", "--driver", "no-such-driver", "hi"])
        .output()
        .unwrap();
    assert_exit(&out, 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-such-driver"), "{stderr}");
    host.wait_for_log("served a run (exit 2)");
    // A closed stdout: the run is cancelled and the caller exits 141, as `yes | head`.
    let state = tempfile::tempdir().unwrap();
    let mut child = spawn_json_run(
        host.caller(),
        state.path(),
        "[[spam 200000]] [[sleep 300]] a long answer",
        Stdio::piped(),
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    lines.next().expect("a first event").unwrap();
    drop(lines);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "stderr: {stderr}");
    assert!(!stderr.contains("Broken pipe"), "quiet: {stderr}");
    host.wait_for_log("served a run (exit 141)");
}

/// `cmd` (an `adaptor` command in the host's environment) running `adaptor run` on the
/// reference driver with `args` (the prompt last): its output, once it exited 0.
fn run_ok(mut cmd: Command, state: &Path, args: &[&str]) -> std::process::Output {
    let out = cmd
        .args(["run", "--config", &config(state)])
        .args(args)
        .output()
        .unwrap();
    assert_exit(&out, 0);
    out
}

#[test]
fn a_caller_in_another_environment_or_asking_at_its_terminal_runs_by_itself() {
    let host = Host::start();
    let state = tempfile::tempdir().unwrap();
    let mut cmd = host.caller();
    cmd.env("SOME_TOKEN", "differs");
    let out = run_ok(cmd, state.path(), &["Hello"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Reference reply: Hello"));
    host.wait_for_log("refused: the environment differs from the host's in SOME_TOKEN");
    assert!(
        !host.log().contains("differs\""),
        "a value must never be logged"
    );
    // The caller's own log says why it was not served (the launcher hands the reason to
    // `adaptor-host`, which logs it once its logging is set up).
    let mut cmd = host.caller();
    cmd.env("ADAPTOR_LOG", "adaptor_host=debug");
    let out = run_ok(cmd, state.path(), &["Hello"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "not served by `adaptor serve`: refused: the environment differs from the host's \
             in ADAPTOR_LOG"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The shell's own bookkeeping is not compared…
    let mut cmd = host.caller();
    cmd.env("OLDPWD", "/somewhere/else");
    run_ok(cmd, state.path(), &["Hello"]);
    assert_eq!(host.served(), 1, "{}", host.log());
    // …unless the run passes it on.
    let mut cmd = host.caller();
    cmd.env("OLDPWD", "/somewhere/else");
    run_ok(cmd, state.path(), &["--pass-env", "OLDPWD", "Hello"]);
    host.wait_for_log("refused: the environment differs from the host's in OLDPWD");
    run_ok(host.caller(), state.path(), &["--approve", "ask", "Hello"]);
    host.wait_for_log("refused: --approve ask asks on the caller's terminal");
    // Other commands are never handed over.
    let out = host.caller().args(["drivers", "--json"]).output().unwrap();
    assert_exit(&out, 0);
    assert_eq!(host.served(), 1, "{}", host.log());
}

/// The host runs with the user's whole view: a process a run confines (its provider, or
/// anything that started) must never have a run served, or it would be out of its
/// confinement. Landlock sets `no_new_privs`; a run's namespaces are its own.
#[test]
fn a_process_confined_by_a_run_is_never_served() {
    use std::os::unix::process::CommandExt;
    let host = Host::start();
    let state = tempfile::tempdir().unwrap();
    let mut cmd = host.caller();
    cmd.args(["run", "--config", &config(state.path()), "Hello"]);
    // SAFETY: prctl(2) between fork and exec, async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert_exit(&out, 0);
    host.wait_for_log("refused a caller: the caller has no_new_privs set");
    // In a mount namespace of its own (and a user namespace, to make it without privilege).
    let mut unshare = Command::new("unshare");
    unshare.args(["--map-root-user", "--mount", "--"]);
    let out = host
        .in_its_environment(unshare)
        .arg(adaptor_exe())
        .args(["run", "--config", &config(state.path()), "Hello"])
        .output()
        .unwrap();
    host.wait_for_log("refused a caller: the caller is in other PID or mount namespaces");
    assert_eq!(host.served(), 0, "{}\n{out:?}", host.log());
}

#[test]
fn another_build_of_adaptor_is_not_served() {
    let host = Host::start();
    let copy = tempfile::tempdir().unwrap();
    for name in ["adaptor", "adaptor-host", "reference-provider"] {
        std::fs::copy(bin_dir().join(name), copy.path().join(name)).unwrap();
    }
    let state = tempfile::tempdir().unwrap();
    let out = host
        .in_its_environment(Command::new(copy.path().join("adaptor")))
        .args(["run", "--config", &config(state.path()), "Hello"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    host.wait_for_log("refused: a different adaptor executable than the host's");
    assert_eq!(host.served(), 0);
}

/// A served run started with `--json` on a hanging provider: its process, the provider's
/// pid and its grandchild's once the provider reported them.
fn hanging_run(
    host: &Host,
    state: &Path,
) -> (
    Child,
    u32,
    u32,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
) {
    let mut child = spawn_json_run(
        host.caller(),
        state,
        "[[grandchild]] [[hang]] x",
        Stdio::null(),
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut spawned = None;
    let pids = loop {
        let Some(Ok(line)) = lines.next() else {
            break None;
        };
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["kind"] == "process_info" && v["process"] == "spawn" {
            spawned = v["pid"].as_u64().map(|p| p as u32);
        }
        if v["kind"] == "notice" && v["notice"] == "pids" {
            let provider = spawned.expect("a spawn event before the pids");
            let below = descendants(provider);
            break below.last().map(|grandchild| (provider, *grandchild));
        }
    };
    match pids {
        Some((provider, grandchild)) => (child, provider, grandchild, lines),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the run ended before its provider and grandchild were reported");
        }
    }
}

fn wait_gone(pids: &[u32]) {
    let until = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|p| pid_alive(*p)) {
        assert!(Instant::now() < until, "still alive: {pids:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ctrl_c_cancels_a_served_run_and_a_caller_that_goes_away_takes_its_run() {
    let host = Host::start();
    let state = tempfile::tempdir().unwrap();
    // Ctrl-C at the caller: its run is cancelled, its result printed, exit 130.
    let (mut child, provider, grandchild, lines) = hanging_run(&host, state.path());
    // The host is busy meanwhile: a second caller runs by itself.
    let other = host
        .caller()
        .args(["run", "--config", &config(state.path()), "meanwhile"])
        .output()
        .unwrap();
    assert_exit(&other, 0);
    host.wait_for_log("refused: the host is serving another run");
    // SAFETY: kill(2) on the process this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert_eq!(status.code(), Some(130), "{rest:?}");
    let last: serde_json::Value = serde_json::from_str(rest.last().unwrap()).unwrap();
    assert_eq!(last["failure"]["reason"], "cancelled", "{last}");
    wait_gone(&[provider, grandchild]);
    host.wait_for_log("served a run (exit 130)");
    // A caller killed outright: the hang-up cancels its run, and the host serves the next.
    let (mut child, provider, grandchild, _lines) = hanging_run(&host, state.path());
    child.kill().unwrap();
    child.wait().unwrap();
    wait_gone(&[provider, grandchild]);
    let until = Instant::now() + Duration::from_secs(10);
    while host.served() < 2 {
        assert!(Instant::now() < until, "{}", host.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = host
        .caller()
        .args(["run", "--config", &config(state.path()), "after"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert_eq!(host.served(), 3, "{}", host.log());
}

/// Ctrl-C always ends the caller: a host that does not answer it (stopped here) is given as
/// long as a run of the caller's own would take to stop (its watchdog's two 4 s patiences,
/// and a second), then left; once it runs again it cancels the run the caller left.
#[test]
fn a_caller_whose_host_does_not_answer_its_ctrl_c_ends_by_itself() {
    let host = Host::start();
    let state = tempfile::tempdir().unwrap();
    let (mut child, provider, grandchild, _lines) = hanging_run(&host, state.path());
    let host_pid = host.child.id() as i32;
    // SAFETY: kill(2) on processes this test started.
    unsafe {
        libc::kill(host_pid, libc::SIGSTOP);
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let start = Instant::now();
    let status = child.wait().unwrap();
    let waited = start.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(host_pid, libc::SIGCONT) };
    assert_eq!(status.code(), Some(130));
    assert!(
        waited >= Duration::from_secs(8) && waited < Duration::from_secs(20),
        "{waited:?}"
    );
    wait_gone(&[provider, grandchild]);
    host.wait_for_log("served a run (exit 130)");
}

#[test]
fn the_host_stops_on_sigterm_cancelling_its_run_and_removing_its_socket() {
    let mut host = Host::start();
    assert!(host.socket().exists());
    let mode = std::fs::metadata(host.socket().parent().unwrap()).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o700
    );
    // A second host on the same socket is refused.
    let second = host.caller().arg("serve").output().unwrap();
    assert_exit(&second, 2);
    assert!(String::from_utf8_lossy(&second.stderr).contains("another host already serves"));
    let state = tempfile::tempdir().unwrap();
    let (mut child, provider, grandchild, _lines) = hanging_run(&host, state.path());
    let status = host.stop();
    assert_eq!(status.code(), Some(0), "{}", host.log());
    assert_eq!(child.wait().unwrap().code(), Some(130));
    wait_gone(&[provider, grandchild]);
    assert!(!host.socket().exists());
    // With no host, a caller runs by itself.
    let out = host
        .caller()
        .args(["run", "--config", &config(state.path()), "alone"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
}

#[test]
fn a_socket_directory_open_to_others_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = adaptor_cli()
        .env("ADAPTOR_SOCKET", open.join("serve.sock"))
        .arg("serve")
        .output()
        .unwrap();
    assert_exit(&out, 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("closed to others (mode 0700)"), "{stderr}");
    let out = adaptor_cli()
        .env("ADAPTOR_SOCKET", "relative/serve.sock")
        .arg("serve")
        .output()
        .unwrap();
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be an absolute path"));
}

/// The context switches of each thread of process `pid` and of its descendants (the
/// spawner), by process and thread name (threads of one name summed).
fn wakeups_by_thread(pid: u32) -> std::collections::BTreeMap<String, u64> {
    let mut by_name = std::collections::BTreeMap::new();
    for process in std::iter::once(pid).chain(descendants(pid)) {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{process}/task")) else {
            continue; // It ended meanwhile.
        };
        for task in tasks.flatten() {
            let (Ok(name), Ok(status)) = (
                std::fs::read_to_string(task.path().join("comm")),
                std::fs::read_to_string(task.path().join("status")),
            ) else {
                continue;
            };
            let switches: u64 = status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
                .sum();
            *by_name
                .entry(format!("{process}/{}", name.trim()))
                .or_insert(0) += switches;
        }
    }
    by_name
}

/// A resident host that has run a driver does not wake while it waits: the epoch ticker,
/// which bounds guest calls, is parked while none runs (it woke every 10 ms before), and no
/// other thread of the host or of its spawner process polls. The next run works as before.
#[test]
fn an_idle_host_does_not_wake() {
    let host = Host::start();
    let state = tempfile::tempdir().unwrap();
    let run = |prompt: &str| {
        let out = host
            .caller()
            .args(["run", "--config", &config(state.path()), prompt])
            .output()
            .unwrap();
        assert_exit(&out, 0);
    };
    run("first");
    assert_eq!(host.served(), 1, "{}", host.log());
    let pid = host.child.id();
    let before = wakeups_by_thread(pid);
    assert!(
        before.keys().any(|k| k.ends_with("/adaptor-epoch")),
        "{before:?}"
    );
    assert!(
        before.keys().any(|k| !k.starts_with(&format!("{pid}/"))),
        "the spawner process is counted: {before:?}"
    );
    // Quiet for a whole second, within a few: the run's leftovers (its threads ending, the
    // next run's driver instance being made, the ticker's last tick) may take a moment on
    // a busy machine. A ticker that never stops shows about 100 wake-ups in every second.
    let mut seconds = Vec::new();
    let quiet = (0..5).any(|_| {
        let before = wakeups_by_thread(pid);
        std::thread::sleep(Duration::from_secs(1));
        let after = wakeups_by_thread(pid);
        let woke: Vec<(String, u64)> = after
            .iter()
            .map(|(name, n)| {
                (
                    name.clone(),
                    n.saturating_sub(before.get(name).copied().unwrap_or(0)),
                )
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        // A stray wake-up (a signal, the kernel moving a thread) is not polling.
        let quiet = woke.iter().map(|(_, n)| n).sum::<u64>() <= 3;
        seconds.push(woke);
        quiet
    });
    assert!(
        quiet,
        "the idle host's threads woke, second by second: {seconds:?}"
    );
    run("second");
    assert_eq!(host.served(), 2, "{}", host.log());
}

/// A socket file nobody listens on (a host that was killed) is replaced by the next host;
/// one that is not a socket is refused.
#[test]
fn a_dead_hosts_socket_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    drop(std::os::unix::net::UnixListener::bind(run.join("serve.sock")).unwrap());
    assert!(run.join("serve.sock").exists());
    let host = Host::start_in(dir);
    let state = tempfile::tempdir().unwrap();
    let out = host
        .caller()
        .args([
            "run",
            "--config",
            &config(state.path()),
            "after a dead host",
        ])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert_eq!(host.served(), 1, "{}", host.log());
    drop(host);
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    std::fs::write(run.join("serve.sock"), b"not a socket").unwrap();
    let out = adaptor_cli()
        .env("ADAPTOR_SOCKET", run.join("serve.sock"))
        .arg("serve")
        .output()
        .unwrap();
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists and is not a socket"));
}
