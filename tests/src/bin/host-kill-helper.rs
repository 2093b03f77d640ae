//! Helper for `tests/tests/integration/containment.rs`: a host that the test kills with
//! SIGKILL in the middle of a run. Its provider (the hostile driver granted `/bin/sh`) starts
//! a `setsid` daemon and a double-forked one, then writes `<workspace>/ready` and waits; the
//! test kills this process and checks that neither daemon survives.

use adaptor_integration_tests::*;

fn main() {
    let ws = std::path::PathBuf::from(std::env::args().nth(1).expect("workspace argument"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let driver = adaptor::Driver::from_file(test_driver_path("hostile"))
            .expect("hostile.wasm")
            .with_config(serde_json::json!({"command": "/bin/sh"}))
            .expect("config");
        let agent = agent_builder(driver, &ws).build();
        let result = agent
            .run(
                "[[shell]] (setsid sleep 987111 > /dev/null 2>&1 &); \
                 (sh -c 'sleep 987112 > /dev/null 2>&1 &' &); sleep 0.2; touch ready; sleep 600",
            )
            .await;
        panic!("the run was to be killed first: {result:?}");
    });
}
