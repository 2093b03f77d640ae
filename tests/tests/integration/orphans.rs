//! No orphans when the host itself panics mid-run: `src/bin/host-panic-helper.rs` runs as a
//! child process, starts a run whose provider forks a SIGTERM-ignoring grandchild, reports
//! their pids and panics; this test checks that neither survives.
//! (Cancel, timeout, Agent drop, close, stream drop and driver traps are in pipeline.rs.)

use std::process::Command;
use std::time::Duration;

use adaptor_integration_tests::*;

#[test]
fn a_host_panic_leaves_no_descendant_of_the_provider() {
    let out = Command::new(env!("CARGO_BIN_EXE_host-panic-helper"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "the helper must have panicked: {stdout}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the host panics"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split("PIDS ").nth(1))
        .unwrap_or_else(|| panic!("no pids reported: {stdout}"));
    let pids: Vec<u32> = line
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let (provider, grandchild) = (pids[0], pids[1]);
    let gone = || !pid_alive(provider) && !pid_alive(grandchild) && !group_alive(provider);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !gone() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !pid_alive(provider),
        "provider {provider} survived the host panic"
    );
    assert!(
        !pid_alive(grandchild),
        "grandchild {grandchild} survived the host panic"
    );
    assert!(!group_alive(provider), "process group {provider} survived");
}

/// The host's spawner process dies mid-run (killed with SIGKILL): the providers it started
/// die with it (none survives), the run ends saying why instead of hanging, and the next run
/// starts a new spawner and succeeds. In a helper process: the spawner is per process, and
/// killing this test binary's would take other tests' providers with it.
#[test]
fn a_dead_spawner_takes_its_providers_and_the_next_run_gets_a_new_one() {
    let stdout = dead_spawner(false);
    assert_eq!(
        line(&stdout, "SPAWNER "),
        "adaptor-spawner",
        "started afresh"
    );
    let late = line(&stdout, "LATE ");
    assert!(late.contains("one thread; it has"), "{late}");
}

/// The same with the spawner forked first thing in `main` (`adaptor::fork_spawner`): it
/// serves the first run, dies the same way, and the next run starts one afresh.
#[test]
fn a_dead_forked_spawner_takes_its_providers_and_the_next_run_gets_a_new_one() {
    let stdout = dead_spawner(true);
    let helper = env!("CARGO_BIN_EXE_spawner-death-helper");
    assert_eq!(
        line(&stdout, "SPAWNER "),
        helper,
        "forked: the helper's own argv"
    );
    // The first fork started the spawner thread: a second one is refused for it.
    let again = line(&stdout, "AGAIN ");
    assert!(again.contains("one thread; it has"), "{again}");
}

/// The `tag` line of the helper's output, without the tag.
fn line(stdout: &str, tag: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(tag))
        .unwrap_or_else(|| panic!("no {tag:?} line: {stdout}"))
        .to_owned()
}

/// Run the spawner-death helper (forking its spawner first when `fork`), check what every
/// variant must show, and return its output.
fn dead_spawner(fork: bool) -> String {
    let mut helper = Command::new(env!("CARGO_BIN_EXE_spawner-death-helper"));
    if fork {
        helper.arg("--fork-spawner");
    }
    let out = helper.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |tag: &str| line(&stdout, tag);
    let pids: Vec<u32> = field("PIDS ")
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let (provider, grandchild, spawner) = (pids[0], pids[1], pids[2]);
    for (what, pid) in [
        ("provider", provider),
        ("grandchild", grandchild),
        ("spawner", spawner),
    ] {
        assert!(!pid_alive(pid), "{what} {pid} survived");
    }
    assert!(!group_alive(provider), "process group {provider} survived");
    let first = field("FIRST ");
    assert!(
        first.contains("spawner") && first.ends_with("true"),
        "the first run ends with an error that names the spawner: {first}"
    );
    assert_eq!(field("SECOND "), "Reference reply: hello again", "{stdout}");
    stdout.into_owned()
}
