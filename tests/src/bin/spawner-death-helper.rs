//! Helper for `tests/tests/integration/orphans.rs`: a host whose spawner process is killed in
//! the middle of a run (its own process, so no other test's providers go with it). It starts
//! a run whose provider forks a SIGTERM-ignoring grandchild, kills the host's spawner with
//! SIGKILL, drains the run, then runs a second prompt, and prints what it saw:
//! `PIDS <provider> <grandchild> <spawner>`, `FIRST <how the first run ended>`,
//! `SECOND <the second run's text or error>`, and `SPAWNER <the spawner's argv[0]>`. With
//! `--fork-spawner` the spawner is forked at start (`AGAIN <why a second fork was refused>`);
//! without, `LATE <why a fork after the runtime started was refused>`.

use std::io::Write;
use std::time::Duration;

use adaptor_integration_tests::*;
use futures::StreamExt;

/// The parent of `pid` and its command name.
fn parent_of(pid: u32) -> (u32, String) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let ppid = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(1)
        .unwrap();
    let ppid: u32 = ppid.parse().unwrap();
    let comm = std::fs::read_to_string(format!("/proc/{ppid}/comm")).expect("comm");
    (ppid, comm.trim_end().to_owned())
}

fn main() {
    // `--fork-spawner`: the spawner is forked first thing (`adaptor::fork_spawner`), as
    // `adaptor run` does; otherwise it is started on first use, and a fork asked for once
    // the runtime's threads run is refused.
    let fork = std::env::args().any(|a| a == "--fork-spawner");
    if fork {
        adaptor::fork_spawner().expect("forked from main, with one thread");
        let again = adaptor::fork_spawner().expect_err("the spawner thread runs");
        println!("AGAIN {again}");
    }
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    if !fork {
        let late = adaptor::fork_spawner().expect_err("refused once other threads run");
        println!("LATE {late}");
    }
    runtime.block_on(async {
        let (state, ws) = (tmp(), tmp());
        let agent = agent_builder(reference(state.path()), ws.path()).build();
        let mut stream = agent.stream("[[grandchild]] [[ignore-term]] [[hang]] wait");
        let mut events = events_until_notice(&mut stream, "pids").await;
        assert!(
            notice(&events, "pids").is_some(),
            "the provider reports its pids"
        );
        let spawned = spawn_pid(&events).expect("spawn event");
        let below = descendants(spawned);
        let (spawner, name) = parent_of(spawned);
        assert_eq!(
            name, "adaptor-spawner",
            "the provider's parent is the spawner"
        );
        assert_eq!(
            parent_of(spawner).0,
            std::process::id(),
            "the spawner is ours"
        );
        println!(
            "PIDS {spawned} {} {spawner}",
            below.last().expect("the provider and its grandchild")
        );
        let cmdline = std::fs::read(format!("/proc/{spawner}/cmdline")).expect("cmdline");
        let arg0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        println!("SPAWNER {}", String::from_utf8_lossy(arg0));
        std::io::stdout().flush().expect("stdout");
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(spawner as libc::pid_t, libc::SIGKILL) };
        let rest = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(ev) = stream.next().await {
                events.push(ev);
            }
            stream.result().await
        })
        .await
        .expect("the run ends after its spawner died");
        let said = notice(&events, "process.error").map(|n| n.message.clone());
        println!("FIRST {:?} {}", said, rest.is_err());
        let second = agent.run("hello again").await;
        match second {
            Ok(r) => println!("SECOND {}", r.text),
            Err(e) => println!("SECOND error {e}"),
        }
    });
}
