//! Dedicated profiles and instructions bundles through the host (issue 19): the host makes
//! the profile directory, carries the user's login and settings as the driver declares,
//! points the CLI at it itself and grants it; the provider's sessions land there; the
//! profile joins the thread fingerprint. A bundle is checked, written read-only beside the
//! run and reaches the CLI's system prompt. Refusals start nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use adaptor::store::{MemoryStore, ThreadStore};
use adaptor::{
    Agent, Driver, Error, InstructionsBundle, InstructionsError, Observed, PathAccess, Profile,
    ProfileError, ProfilePart, RunOptions, StartRefusal, ThreadError,
};
use adaptor_integration_tests::{agent_builder, collect, driver_path, provider_path, tmp};
use serde_json::{Value, json};

/// The reference driver with no `state_dir`: the provider keeps its sessions where
/// `REFERENCE_PROVIDER_STATE_DIR` says, else under `$HOME/.local/state/reference-provider`.
fn reference_unconfigured() -> Driver {
    Driver::from_file(driver_path("reference"))
        .expect("reference.wasm")
        .with_config(json!({ "command": provider_path().display().to_string() }))
        .expect("config")
}

/// The reference driver as built against `adaptor:driver@0.2.0` (a fixture), unconfigured.
fn reference_v0_2_0() -> Driver {
    Driver::from_file(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference-driver-v0.2.0.wasm"),
    )
    .expect("the 0.2.0 fixture")
    .with_config(json!({ "command": provider_path().display().to_string() }))
    .expect("config")
}

/// A home whose native reference profile holds a login and settings.
fn native_home() -> (tempfile::TempDir, PathBuf) {
    let home = tmp();
    let native = home.path().join(".local/state/reference-provider");
    std::fs::create_dir_all(&native).unwrap();
    std::fs::write(
        native.join("auth.json"),
        r#"{"account":"user@example.com"}"#,
    )
    .unwrap();
    std::fs::write(native.join("settings.json"), r#"{"theme":"dark"}"#).unwrap();
    std::fs::write(native.join("mcp.json"), r#"{"servers":{}}"#).unwrap();
    (home, native)
}

/// An agent on the reference driver whose providers see `home` as `HOME`.
fn agent(home: &Path, ws: &Path, profile: impl Into<Profile>) -> adaptor::AgentBuilder {
    agent_builder(reference_unconfigured(), ws)
        .env("HOME", home.display().to_string())
        .profile(profile)
}

/// What the provider reported in its session line.
fn session_line(r: &adaptor::RunResult) -> Value {
    r.transcript()[0].data.clone().unwrap_or(Value::Null)
}

/// The filesystem rules the run's provider was confined to.
fn rules(r: &adaptor::RunResult) -> Vec<adaptor::PathRule> {
    let launch = r.raw().launch.as_ref().expect("a launch");
    launch
        .containment
        .clone()
        .expect("a containment report")
        .rules
}

/// The session files in a state directory.
fn sessions_in(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ref-") && n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_with_dedicated_profiles_keep_their_sessions_apart() {
    let (home, native) = native_home();
    let (ws, profiles) = (tmp(), tmp());
    let (dir_a, dir_b) = (profiles.path().join("a"), profiles.path().join("b"));
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let a = agent(
        home.path(),
        ws.path(),
        Profile::clone_native(&dir_a).link_auth().copy_settings(),
    )
    .shared_thread_store(store.clone())
    .build();
    let b = agent(home.path(), ws.path(), Profile::dedicated(&dir_b))
        .shared_thread_store(store)
        .build();
    let (thread_a, thread_b) = (a.thread("a"), b.thread("b"));
    let (ra, rb) = tokio::join!(thread_a.run("hello"), thread_b.run("hello"));
    let (ra, rb) = (ra.expect("agent a"), rb.expect("agent b"));
    // A runs under the user's login (linked), B under none.
    assert_eq!(session_line(&ra)["account"], "user@example.com");
    assert_eq!(session_line(&rb).get("account"), None);
    // Each provider's session landed in its own profile, none in the user's.
    let id = |r: &adaptor::RunResult| format!("{}.json", r.session_id().unwrap());
    let dir_a = dir_a.canonicalize().unwrap();
    let dir_b = dir_b.canonicalize().unwrap();
    assert!(
        sessions_in(&dir_a).contains(&id(&ra)),
        "{:?}",
        sessions_in(&dir_a)
    );
    assert!(
        sessions_in(&dir_b).contains(&id(&rb)),
        "{:?}",
        sessions_in(&dir_b)
    );
    assert!(!sessions_in(&dir_a).contains(&id(&rb)));
    assert!(
        sessions_in(&native).is_empty(),
        "{:?}",
        sessions_in(&native)
    );
    // The host made the profile: 0700, the login a link to the user's, settings a copy.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&dir_b).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(
        std::fs::read_link(dir_a.join("auth.json")).unwrap(),
        native.join("auth.json")
    );
    assert!(
        !std::fs::symlink_metadata(dir_a.join("settings.json"))
            .unwrap()
            .is_symlink()
    );
    assert!(!dir_b.join("auth.json").exists());
    // The grant: the profile read-write, the user's login file too (it is shared), never
    // the user's whole profile.
    let rules_a = rules(&ra);
    assert!(
        rules_a
            .iter()
            .any(|r| r.path == dir_a && r.access == PathAccess::ReadWrite),
        "{rules_a:#?}"
    );
    assert!(
        rules_a
            .iter()
            .any(|r| r.path == native.join("auth.json") && r.access == PathAccess::ReadWrite)
    );
    assert!(!rules(&rb).iter().any(|r| r.path == native));
    // The next turn resumes the session from the profile.
    let again = a.thread("a").run("again").await.expect("second turn");
    assert_eq!(again.session_id(), ra.session_id());
    assert_eq!(
        again.thread.as_ref().unwrap().start,
        adaptor::ThreadStart::Resumed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profile_state_reports_desired_and_observed_and_sync_makes_it() {
    let (home, native) = native_home();
    let (ws, profiles) = (tmp(), tmp());
    let dir = profiles.path().join("p");
    let a = agent(
        home.path(),
        ws.path(),
        Profile::clone_native(&dir)
            .link_auth()
            .copy_settings()
            .copy_mcp(),
    )
    .build();
    let before = a.profile_state().unwrap();
    assert!(!before.in_sync() && !before.dir_exists);
    assert_eq!(
        before.variable.as_deref(),
        Some("REFERENCE_PROVIDER_STATE_DIR")
    );
    assert_eq!(before.native_dir.as_deref(), Some(native.as_path()));
    let parts: Vec<(ProfilePart, &Observed)> =
        before.files.iter().map(|f| (f.part, &f.observed)).collect();
    assert_eq!(
        parts,
        [
            (ProfilePart::Auth, &Observed::Missing),
            (ProfilePart::Settings, &Observed::Missing),
            (ProfilePart::Mcp, &Observed::Missing)
        ]
    );
    assert!(!dir.exists(), "observing writes nothing");
    let after = a.sync_profile().unwrap();
    assert!(after.in_sync(), "{after:#?}");
    assert_eq!(after.files[0].observed, Observed::Linked);
    assert_eq!(after.files[1].observed, Observed::Present);
    // The CLI replaces the link by a file of its own: reported, and never overwritten.
    std::fs::remove_file(dir.join("auth.json")).unwrap();
    std::fs::write(dir.join("auth.json"), r#"{"account":"rotated"}"#).unwrap();
    assert_eq!(
        a.profile_state().unwrap().files[0].observed,
        Observed::Replaced
    );
    let (events, r) = collect(a.stream("hello")).await;
    assert!(events.is_empty());
    assert!(
        matches!(r, Err(Error::Profile(ProfileError::Occupied { .. }))),
        "{r:?}"
    );
    // The user's own profile: nothing to observe, always in sync.
    let native_agent = agent(home.path(), ws.path(), Profile::native()).build();
    assert!(native_agent.profile_state().unwrap().in_sync());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_never_resumes_under_another_profile() {
    let (home, _native) = native_home();
    let (ws, profiles) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let with = |profile: Profile| {
        agent(home.path(), ws.path(), profile)
            .shared_thread_store(store.clone())
            .build()
    };
    let first = with(Profile::dedicated(profiles.path().join("one")));
    first.thread("t").run("one").await.unwrap();
    first.thread("t").run("two").await.unwrap();
    for other in [
        Profile::dedicated(profiles.path().join("two")),
        Profile::clone_native(profiles.path().join("one"))
            .link_auth()
            .into(),
        Profile::native(),
    ] {
        let (events, r) = collect(with(other.clone()).thread("t").stream("three")).await;
        assert!(events.is_empty(), "{other:?}");
        assert!(
            matches!(r, Err(Error::Thread(ThreadError::Incompatible { .. }))),
            "{other:?}: {r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_are_refused_before_anything_starts() {
    let (home, _native) = native_home();
    let (ws, profiles) = (tmp(), tmp());
    // A driver built against 0.2.0 cannot declare a profile.
    let old = reference_v0_2_0();
    assert_eq!(old.descriptor().profile, None);
    let a = agent_builder(old, ws.path())
        .profile(Profile::dedicated(profiles.path().join("x")))
        .build();
    let (events, r) = collect(a.stream("hello")).await;
    assert!(events.is_empty());
    assert!(
        matches!(&r, Err(Error::Profile(ProfileError::Unsupported { driver })) if driver == "reference"),
        "{r:?}"
    );
    assert!(!profiles.path().join("x").exists());
    // A relative directory; the user's own directory.
    for (profile, what) in [
        (Profile::dedicated("relative/dir"), "relative"),
        (
            Profile::dedicated(home.path().join(".local/state/reference-provider")),
            "native",
        ),
    ] {
        let r = agent(home.path(), ws.path(), profile)
            .build()
            .run("x")
            .await;
        match (what, &r) {
            ("relative", Err(Error::Profile(ProfileError::RelativeDir { .. }))) => {}
            ("native", Err(Error::Profile(ProfileError::SameAsNative { .. }))) => {}
            _ => panic!("{what}: {r:?}"),
        }
    }
    // The driver config's own state directory would override the profile: the driver
    // refuses it.
    let configured = Driver::from_file(driver_path("reference"))
        .unwrap()
        .with_config(json!({
            "command": provider_path().display().to_string(),
            "state_dir": profiles.path().join("cfg").display().to_string(),
        }))
        .unwrap();
    let r = agent_builder(configured, ws.path())
        .env("HOME", home.path().display().to_string())
        .profile(Profile::dedicated(profiles.path().join("y")))
        .build()
        .run("x")
        .await;
    assert!(
        matches!(
            &r,
            Err(Error::StartRefused {
                kind: StartRefusal::InvalidRequest,
                ..
            })
        ),
        "{r:?}"
    );
    // A dry run shows the variable the host sets.
    let plan = agent(
        home.path(),
        ws.path(),
        Profile::dedicated(profiles.path().join("z")),
    )
    .build()
    .dry_run("x")
    .await
    .unwrap();
    let z = profiles.path().join("z").canonicalize().unwrap();
    assert!(
        plan.env.contains(&(
            "REFERENCE_PROVIDER_STATE_DIR".into(),
            z.display().to_string()
        )),
        "{:?}",
        plan.env
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instructions_bundle_reaches_the_cli_read_only() {
    let (state, ws, src) = (tmp(), tmp(), tmp());
    std::fs::create_dir_all(src.path().join("docs")).unwrap();
    std::fs::write(
        src.path().join("AGENTS.md"),
        "Follow docs/style.md in every reply.\n",
    )
    .unwrap();
    std::fs::write(src.path().join("docs/style.md"), "Answer in haiku.\n").unwrap();
    let a = agent_builder(
        adaptor_integration_tests::reference(state.path()),
        ws.path(),
    )
    .instructions("Be brief.")
    .instructions_bundle(InstructionsBundle::dir(src.path()))
    .build();
    let r = a.run("hello").await.expect("run with a bundle");
    let seen = session_line(&r)["instructions"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        seen.starts_with("Be brief.\n\nFollow docs/style.md in every reply."),
        "{seen}"
    );
    assert!(seen.contains("which also holds: docs/style.md"), "{seen}");
    // The directory the text names is the one the provider may read (not write).
    let dir = seen
        .split("instructions bundle in ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .map(PathBuf::from)
        .unwrap();
    assert!(dir.ends_with("instructions"), "{dir:?}");
    let rules = rules(&r);
    assert!(
        rules
            .iter()
            .any(|rule| rule.path == dir && rule.access == PathAccess::Read),
        "{rules:#?}"
    );
    assert!(!dir.exists(), "the run's directory is removed with the run");
    // Same bundle, same thread; another bundle: the thread refuses it.
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let t = agent_builder(
        adaptor_integration_tests::reference(state.path()),
        ws.path(),
    )
    .shared_thread_store(store)
    .build();
    let v1 =
        || RunOptions::new().instructions_bundle(InstructionsBundle::inline("AGENTS.md", "v1"));
    t.thread("k").run_with("one", v1()).await.unwrap();
    t.thread("k").run_with("two", v1()).await.unwrap();
    let r = t
        .thread("k")
        .run_with(
            "three",
            RunOptions::new().instructions_bundle(InstructionsBundle::inline("AGENTS.md", "v2")),
        )
        .await;
    assert!(
        matches!(r, Err(Error::Thread(ThreadError::Incompatible { .. }))),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bundles_and_drivers_that_cannot_take_them_start_nothing() {
    let (state, ws) = (tmp(), tmp());
    let a = agent_builder(
        adaptor_integration_tests::reference(state.path()),
        ws.path(),
    )
    .build();
    let (events, r) = collect(a.stream_with(
        "x",
        RunOptions::new().instructions_bundle(InstructionsBundle::inline("../AGENTS.md", "x")),
    ))
    .await;
    assert!(events.is_empty());
    assert!(
        matches!(&r, Err(Error::Instructions(InstructionsError::UnsafePath { path, .. })) if path == "../AGENTS.md"),
        "{r:?}"
    );
    // A driver built against 0.2.0 has no run resources.
    let old = reference_v0_2_0();
    let r = Agent::builder(old)
        .workspace(ws.path())
        .build()
        .run_with(
            "x",
            RunOptions::new().instructions_bundle(InstructionsBundle::inline("AGENTS.md", "x")),
        )
        .await;
    assert!(
        matches!(&r, Err(Error::Instructions(InstructionsError::Unsupported { reason, .. })) if reason.contains("0.2.0")),
        "{r:?}"
    );
}
