//! The versions of the `adaptor:driver` contract: every released WIT file is frozen, a
//! driver built against an older released version keeps loading, running threads and passing
//! its conformance on this host, and a driver of a version the host does not load is refused
//! with both versions named.
//!
//! `tests/fixtures/reference-driver-v0.1.0.wasm` is the built-in reference driver as it was
//! built against `adaptor:driver@0.1.0` (commit fa977f3, `./x.sh build-drivers`, driver
//! profile), and `reference-driver-v0.2.0.wasm` the same against `adaptor:driver@0.2.0`
//! (commit 6a52d97): real third-party-shaped artifacts of the old contracts, not rebuilt
//! here.

use std::path::{Path, PathBuf};

use adaptor::{Driver, Error, LoadError, LoadOptions, RunOptions, ThreadStart};
use adaptor_integration_tests::*;
use adaptortest::check::{CheckOptions, check_driver};

/// The released contracts and the sha256 of their WIT file. A released version never
/// changes: a change to the contract is a new version (a new `wit/vX.Y.Z/` and bindings).
const RELEASED: &[(&str, &str)] = &[
    (
        "0.1.0",
        "df9a78777258ce0beed9636f3baa5fd99b5e506ebce39923e64582f62a5f2522",
    ),
    (
        "0.2.0",
        "1c0b0816f61458305d8f7172b01724aea9e87b77544126a49268cb357e907cf7",
    ),
    (
        "0.3.0",
        "d3b035e96faec2bde36539eb7dfc95d39abb5f49ba8580963a47fdf3c0a90f91",
    ),
];

fn wit_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../wit")
}

fn v0_1_0_driver() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference-driver-v0.1.0.wasm")
}

fn v0_2_0_driver() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference-driver-v0.2.0.wasm")
}

fn sha256(path: &Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn released_contracts_are_frozen() {
    for (version, hash) in RELEASED {
        let file = wit_dir().join(format!("v{version}/driver.wit"));
        assert_eq!(
            &sha256(&file),
            hash,
            "{} changed: a released contract is frozen; make the change a new version",
            file.display()
        );
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.contains(&format!("package adaptor:driver@{version};")),
            "{version}"
        );
    }
    // Every released version is loaded by the host, and the newest is what the SDK builds.
    let released: Vec<&str> = RELEASED.iter().map(|(v, _)| *v).collect();
    assert_eq!(adaptor::SUPPORTED_WIT_VERSIONS, released.as_slice());
    assert_eq!(
        adaptor::WIT_PACKAGE,
        format!("adaptor:driver@{}", released.last().unwrap())
    );
    let dirs: Vec<String> = std::fs::read_dir(wit_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for dir in dirs {
        assert!(
            released.iter().any(|v| dir == format!("v{v}")),
            "wit/{dir} is not a released version listed here"
        );
    }
}

/// A thread on the driver `file`'s resident process (the reference provider's stdio
/// transport): the second turn runs on the kept process and continues the first.
async fn a_resident_thread_continues_on(file: PathBuf, state: &Path, ws: &Path) {
    let resident = agent_builder(
        Driver::from_file(file)
            .unwrap()
            .with_config(serde_json::json!({
                "command": provider_path().display().to_string(),
                "state_dir": state.display().to_string(),
                "transport": "stdio",
            }))
            .unwrap(),
        ws,
    )
    .thread_store(adaptor::store::MemoryStore::new())
    .build();
    let kept = resident.thread("resident");
    let first = kept.run("one").await.expect("one");
    assert!(first.exit.kept_alive);
    let (events, second) = collect(kept.stream("two")).await;
    let second = second.expect("two");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, adaptor::Event::Notice(n) if n.notice == "process.reused")),
        "the second turn ran on the kept process"
    );
    assert!(second.text.contains("previously: one"), "{}", second.text);
    resident.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_built_against_0_1_0_loads_runs_and_keeps_a_thread() {
    let ws = tmp();
    let state = tmp();
    let driver = configured(&v0_1_0_driver(), state.path());
    let d = driver.descriptor();
    assert_eq!(d.wit_version, "0.1.0");
    assert!(!d.steering);
    assert_eq!(
        d.launch_env, None,
        "0.1.0 cannot declare its launch environment"
    );
    assert_eq!(d.name, "reference");
    let agent = agent_builder(driver, ws.path())
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let r = agent.run("hello").await.expect("run");
    assert_eq!(r.text, "Reference reply: hello");
    assert!(r.checkpoint.as_ref().unwrap().is_valid());
    // A thread: resumed across two turns (the session built from a bare 0.1.0 request).
    let thread = agent.thread("old-driver");
    thread.run("first").await.expect("first");
    let second = thread.run("second").await.expect("second");
    assert_eq!(second.thread.as_ref().unwrap().start, ThreadStart::Resumed);
    assert!(second.text.contains("previously: first"), "{}", second.text);
    // A resident process (`next-turn` with a bare 0.1.0 request).
    a_resident_thread_continues_on(v0_1_0_driver(), state.path(), ws.path()).await;
    // Steering is a 0.2.0 capability: refused before anything starts.
    match agent
        .run_with("steer me", RunOptions::new().steering(true))
        .await
    {
        Err(Error::SteeringUnsupported { driver }) => assert_eq!(driver, "reference"),
        other => panic!("expected SteeringUnsupported, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_built_against_0_2_0_loads_runs_steers_and_keeps_a_resident_thread() {
    let ws = tmp();
    let state = tmp();
    let driver = configured(&v0_2_0_driver(), state.path());
    let d = driver.descriptor();
    assert_eq!(d.wit_version, "0.2.0");
    assert!(d.steering);
    assert!(d.launch_env.is_some());
    assert_eq!(d.profile, None, "0.2.0 cannot declare a profile");
    let agent = agent_builder(driver, ws.path())
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let r = agent.run("hello").await.expect("run");
    assert_eq!(r.text, "Reference reply: hello");
    let thread = agent.thread("v2");
    thread.run("first").await.expect("first");
    let second = thread.run("second").await.expect("second");
    assert_eq!(second.thread.as_ref().unwrap().start, ThreadStart::Resumed);
    // A resident process: `next-turn` with a 0.2.0 `turn-request` (no resources).
    a_resident_thread_continues_on(v0_2_0_driver(), state.path(), ws.path()).await;
    // Steering is 0.2.0's: accepted (the provider runs the steerable transport).
    let steered = agent
        .run_with("steer me", RunOptions::new().steering(true))
        .await
        .expect("steerable run");
    assert!(steered.text.contains("steer me"), "{}", steered.text);
}

async fn passes_its_conformance(driver: PathBuf) {
    let cassettes =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../drivers/reference/cassettes");
    let mut loaded = Vec::new();
    for entry in std::fs::read_dir(&cassettes).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|x| x == "json") {
            loaded.push((
                path.file_name().unwrap().to_string_lossy().into_owned(),
                adaptor::cassette::Cassette::load(&path).expect("cassette"),
            ));
        }
    }
    loaded.sort_by(|a, b| a.0.cmp(&b.0));
    let options = CheckOptions {
        cassettes: loaded,
        ..CheckOptions::default()
    };
    let report = check_driver(&driver, &options).await;
    assert!(!report.failed(), "{}", report.render_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_built_against_0_1_0_passes_its_conformance() {
    passes_its_conformance(v0_1_0_driver()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_built_against_0_2_0_passes_its_conformance() {
    passes_its_conformance(v0_2_0_driver()).await;
}

fn refused(wat_text: &str) -> LoadError {
    let bytes = wat::parse_str(wat_text).expect("valid component text");
    match Driver::from_bytes_with("versioned.wasm", &bytes, &LoadOptions { cache_dir: None }) {
        Err(Error::Load(e)) => e,
        other => panic!("expected a load error, got {other:?}"),
    }
}

#[test]
fn a_driver_of_a_version_this_host_does_not_load_is_refused_naming_both() {
    for version in ["0.9.0", "0.0.1", "1.0.0"] {
        let e = refused(&format!(
            r#"(component (instance $driver) (export "adaptor:driver/driver@{version}" (instance $driver)))"#
        ));
        match &e {
            LoadError::UnsupportedWitVersion {
                driver,
                found,
                supported,
            } => {
                assert_eq!(driver, "versioned.wasm");
                assert_eq!(found, version);
                assert_eq!(supported, &["0.1.0", "0.2.0", "0.3.0"]);
            }
            other => panic!("{version}: expected UnsupportedWitVersion, got {other:?}"),
        }
        let message = e.to_string();
        assert!(
            message.contains(version) && message.contains("0.1.0, 0.2.0, 0.3.0"),
            "{message}"
        );
    }
    // A component that claims a released version but does not implement it.
    match refused(
        r#"(component (instance $driver) (export "adaptor:driver/driver@0.3.0" (instance $driver)))"#,
    ) {
        LoadError::NotADriver { reason, .. } => {
            assert!(reason.contains("0.3.0"), "{reason}")
        }
        other => panic!("expected NotADriver, got {other:?}"),
    }
}

#[test]
fn the_built_in_drivers_speak_the_newest_contract() {
    for name in ["reference", "claude", "codex", "acp", "cursor", "codebuddy"] {
        let driver = Driver::from_file(driver_path(name)).expect(name);
        assert_eq!(driver.descriptor().wit_version, "0.3.0", "{name}");
        assert!(driver.descriptor().launch_env.is_some(), "{name}");
        // The drivers of CLIs with a movable profile declare it.
        let profile = driver.descriptor().profile.as_ref();
        match name {
            "reference" | "claude" | "codex" => assert!(profile.is_some(), "{name}"),
            _ => assert!(profile.is_none(), "{name}"),
        }
    }
    let claude = Driver::from_file(driver_path("claude")).unwrap();
    let spec = claude.descriptor().profile.clone().unwrap();
    assert_eq!(spec.config_dir_variable, "CLAUDE_CONFIG_DIR");
    // Claude Code's login is shared through its credential store, never linked.
    assert_eq!(
        spec.auth_store_variable.as_deref(),
        Some("CLAUDE_SECURESTORAGE_CONFIG_DIR")
    );
    assert!(
        spec.files
            .iter()
            .all(|f| f.part != adaptor::ProfilePart::Auth)
    );
}
