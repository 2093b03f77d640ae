//! Helper for `tests/tests/integration/orphans.rs`: a host that panics in the middle of a run. It starts a
//! run whose provider forks a SIGTERM-ignoring grandchild, prints `PIDS <provider>
//! <grandchild>` once both exist, then panics; the test checks that neither survives.

use std::io::Write;

use adaptor::Event;
use adaptor_integration_tests::*;
use futures::StreamExt;

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let (state, ws) = (tmp(), tmp());
        let agent = agent_builder(reference(state.path()), ws.path()).build();
        let mut stream = agent.stream("[[grandchild]] [[ignore-term]] [[hang]] wait");
        while let Some(ev) = stream.next().await {
            if let Event::Notice(n) = &ev
                && n.notice == "pids"
            {
                let data: serde_json::Value = match &n.data {
                    Some(serde_json::Value::String(s)) => serde_json::from_str(s).expect("json"),
                    Some(other) => other.clone(),
                    None => panic!("pids notice without data"),
                };
                println!("PIDS {} {}", data["provider_pid"], data["grandchild_pid"]);
                std::io::stdout().flush().expect("stdout");
                panic!("the host panics in the middle of a run");
            }
        }
        panic!("the provider ended without reporting its pids");
    });
}
