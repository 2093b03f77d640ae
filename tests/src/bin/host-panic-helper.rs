//! Helper for `tests/tests/integration/orphans.rs`: a host that panics in the middle of a run. It starts a
//! run whose provider forks a SIGTERM-ignoring grandchild, prints `PIDS <provider>
//! <grandchild>` once both exist, then panics; the test checks that neither survives.

use std::io::Write;

use adaptor_integration_tests::*;

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let (state, ws) = (tmp(), tmp());
        let agent = agent_builder(reference(state.path()), ws.path()).build();
        let mut stream = agent.stream("[[grandchild]] [[ignore-term]] [[hang]] wait");
        let events = events_until_notice(&mut stream, "pids").await;
        assert!(
            notice(&events, "pids").is_some(),
            "the provider ended without reporting its pids"
        );
        // The provider's own pids are those of its PID namespace: report the host's.
        let spawned = spawn_pid(&events).expect("spawn event");
        let below = descendants(spawned);
        println!(
            "PIDS {spawned} {}",
            below.last().expect("the provider and its grandchild")
        );
        std::io::stdout().flush().expect("stdout");
        panic!("the host panics in the middle of a run");
    });
}
