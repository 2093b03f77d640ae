//! Fuzz the host's validation of driver outputs: the input is a chunk size, an exit code and
//! a script for the `puppet` test driver, whose events, actions and outcome are whatever the
//! script says. The host must return a result or a typed error, never panic or trap.
#![no_main]

use std::sync::OnceLock;

use adaptor::replay::replay_session;
use adaptor::{Driver, Error, ExitInfo, RunOptions, StreamKind};

fn puppet() -> &'static Driver {
    static DRIVER: OnceLock<Driver> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let path = std::env::var_os("ADAPTOR_PUPPET_WASM")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                let target = std::env::var_os("CARGO_TARGET_DIR")
                    .map(std::path::PathBuf::from)
                    .unwrap_or_else(|| {
                        std::path::PathBuf::from(std::env::var_os("HOME").expect("HOME"))
                            .join(".cache/agent-adaptor-target")
                    });
                target.join("test-drivers/puppet.wasm")
            });
        Driver::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let [chunk, code, stdout @ ..] = data else {
        return;
    };
    let chunks: Vec<(StreamKind, Vec<u8>)> = stdout
        .chunks(usize::from(*chunk).max(1))
        .map(|c| (StreamKind::Stdout, c.to_vec()))
        .collect();
    let exit = ExitInfo {
        code: Some(i32::from(code % 3)),
        signal: None,
        ..ExitInfo::default()
    };
    let replay = futures::executor::block_on(replay_session(
        puppet(),
        "fuzz",
        &RunOptions::new(),
        &chunks,
        exit,
    ));
    match replay.result {
        Ok(_) | Err(Error::Run(_)) | Err(Error::DriverContract { .. }) => {}
        Err(other) => panic!("untyped or unexpected error: {other:?}"),
    }
});
