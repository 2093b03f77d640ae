//! No orphans when the host itself panics mid-run: the helper below runs in a child process
//! (this test binary re-executed), starts a run whose provider forks a SIGTERM-ignoring
//! grandchild, reports their pids and panics; the parent checks that neither survives.
//! (Cancel, timeout, Agent drop, close, stream drop and driver traps are in pipeline.rs.)

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use adaptor::Event;
use adaptor_integration_tests::*;
use futures::StreamExt;

const HELPER_ENV: &str = "ADAPTOR_ORPHAN_HELPER";

#[test]
#[ignore = "helper: run in a child process by a_host_panic_leaves_no_descendant_of_the_provider"]
fn helper_host_panics_mid_run() {
    if std::env::var_os(HELPER_ENV).is_none() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (state, ws) = (tmp(), tmp());
        let agent = agent_builder(reference(state.path()), ws.path()).build();
        let mut stream = agent.stream("[[grandchild]] [[ignore-term]] [[hang]] wait");
        while let Some(ev) = stream.next().await {
            if let Event::Notice(n) = &ev
                && n.notice == "pids"
            {
                let data: serde_json::Value = match &n.data {
                    Some(serde_json::Value::String(s)) => serde_json::from_str(s).unwrap(),
                    Some(other) => other.clone(),
                    None => panic!("pids notice without data"),
                };
                println!("PIDS {} {}", data["provider_pid"], data["grandchild_pid"]);
                std::io::stdout().flush().unwrap();
                panic!("the host panics in the middle of a run");
            }
        }
        unreachable!("the provider hangs until killed");
    });
}

#[test]
fn a_host_panic_leaves_no_descendant_of_the_provider() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_host_panics_mid_run",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, "1")
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
