//! Installed drivers (`DriverStore`, `adaptor drivers install|list|verify|remove|sign`):
//! install from a `.wasm`, a directory and an OCI image layout; the lock file's record; AOT
//! compilation at install; `name@version`; pinned loads that fail closed naming both hashes;
//! hand-edited lock files; bad components and name conflicts refused with the previous
//! install intact; publisher signatures; reload affecting new sessions only.
//!
//! Two versions of one driver: the testbed driver declares the version `1.0.0-testbed`, a
//! literal found exactly once in its component, patched in place to `1.0.1-testbed`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use adaptor::store::{MemoryStore, ThreadStore};
use adaptor::{
    CompileSource, Driver, DriverStore, Error, InstallError, Installed, LoadError, LoadOptions,
    SignatureError, SigningKey, TrustedKey,
};
use adaptor_integration_tests::*;
use sha2::{Digest, Sha256};

const V1: &str = "1.0.0-testbed";
const V2: &str = "1.0.1-testbed";

/// A store in a fresh directory, with a compile cache of its own and no built-in names.
struct Fixture {
    dir: tempfile::TempDir,
    store: DriverStore,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tmp();
        let store = DriverStore::at(dir.path().join("store"))
            .load_options(LoadOptions {
                cache_dir: Some(dir.path().join("cache")),
            })
            .builtin_dirs(Vec::new());
        Fixture { dir, store }
    }

    /// Write `bytes` as `name` in the fixture directory.
    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn install(&self, source: &Path) -> Result<Installed, InstallError> {
        self.store.install(self.store.prepare(source, None)?)
    }

    /// The store's files and lock, to compare before and after a refused operation.
    fn snapshot(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![self.store.root().to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if !p.ends_with(".install.lock") {
                    out.push((p.clone(), std::fs::read(&p).unwrap()));
                }
            }
        }
        out.sort();
        out
    }
}

fn testbed_bytes() -> Vec<u8> {
    std::fs::read(test_driver_path("testbed")).unwrap()
}

/// The testbed component with its version literal `1.0.0-testbed` replaced by `version`
/// (same length).
fn testbed_version(version: &str) -> Vec<u8> {
    let mut bytes = testbed_bytes();
    assert_eq!(version.len(), V1.len());
    let at: Vec<usize> = bytes
        .windows(V1.len())
        .enumerate()
        .filter(|(_, w)| *w == V1.as_bytes())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "the version literal occurs exactly once");
    bytes[at[0]..at[0] + V1.len()].copy_from_slice(version.as_bytes());
    bytes
}

/// The component with a custom section appended: other bytes, the same driver.
fn with_custom_section(mut bytes: Vec<u8>, payload: &[u8]) -> Vec<u8> {
    let name = b"note";
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(payload);
    bytes.push(0);
    let mut len = section.len();
    loop {
        let byte = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            bytes.push(byte);
            break;
        }
        bytes.push(byte | 0x80);
    }
    bytes.extend_from_slice(&section);
    bytes
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The `adaptor` CLI with its driver store at `store` and its compile cache in `home`.
fn store_cli(home: &Path, store: &Path) -> std::process::Command {
    let mut c = adaptor_cli();
    c.env("ADAPTOR_DRIVER_STORE", store)
        .env("ADAPTOR_CACHE_DIR", home.join("cache"));
    c
}

fn configure(driver: Driver, state: &Path, stdio: bool) -> Driver {
    let mut config = serde_json::json!({
        "command": provider_path().display().to_string(),
        "state_dir": state.display().to_string(),
    });
    if stdio {
        config["transport"] = "stdio".into();
    }
    driver.with_config(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installed_drivers_are_recorded_compiled_selected_by_version_and_removed() {
    let f = Fixture::new();
    let source = f.file("testbed.wasm", &testbed_bytes());
    let package = f.store.prepare(&source, None).unwrap();
    let record = package.record().clone();
    assert_eq!(
        (record.name.as_str(), record.version.as_str()),
        ("testbed", V1)
    );
    assert_eq!(record.sha256, sha(&testbed_bytes()));
    assert_eq!(record.wit_version, "0.3.0");
    assert_eq!(record.default_program, "reference-provider");
    assert!(record.capabilities.contains("resume"), "{record:?}");
    assert!(record.launch_env.is_some());
    assert_eq!(record.signed_by, None);
    assert!(record.source.ends_with("testbed.wasm"));
    assert!(
        f.store.list().unwrap().is_empty(),
        "prepare writes nothing to the store"
    );

    let installed = f.store.install(package).unwrap();
    assert!(matches!(&installed, Installed::New(r) if r.name == "testbed"));
    // The lock file is outside the component tree and records it.
    let lock: serde_json::Value =
        serde_json::from_slice(&std::fs::read(f.store.lock_path()).unwrap()).unwrap();
    assert_eq!(lock["drivers"][0]["sha256"], record.sha256.as_str());
    assert!(
        !f.store
            .lock_path()
            .starts_with(f.store.root().join("components"))
    );
    // Installing the same bytes again changes nothing.
    assert!(matches!(f.install(&source).unwrap(), Installed::Already(_)));

    // A second version beside the first.
    let v2 = f.file("v2/testbed.wasm", &testbed_version(V2));
    assert!(matches!(f.install(&v2).unwrap(), Installed::New(_)));
    let versions: Vec<String> = f
        .store
        .list()
        .unwrap()
        .into_iter()
        .map(|r| r.version)
        .collect();
    assert_eq!(versions, [V1, V2]);

    // `name` is the highest version; `name@version` the one named. Both were compiled at
    // install: loading them compiles nothing.
    let newest = f.store.open("testbed").unwrap();
    assert_eq!(newest.descriptor().version, V2);
    assert_eq!(newest.compile_source(), CompileSource::Cached);
    let first = f.store.open(&format!("testbed@{V1}")).unwrap();
    assert_eq!(first.descriptor().version, V1);
    assert_eq!(first.compile_source(), CompileSource::Cached);
    assert!(matches!(
        f.store.open("testbed@9.9.9"),
        Err(Error::Install(InstallError::NotInstalled { spec, installed }))
            if spec == "testbed@9.9.9" && installed.contains(V1) && installed.contains(V2)
    ));

    // An installed driver runs like any other.
    let (state, ws) = (tmp(), tmp());
    let r = agent_builder(configure(first, state.path(), false), ws.path())
        .build()
        .run("installed")
        .await
        .unwrap();
    assert_eq!(r.text, "Reference reply: installed");

    // Removing needs a version while several are installed.
    assert!(matches!(
        f.store.remove("testbed", None),
        Err(InstallError::Ambiguous { versions, .. }) if versions == format!("{V1}, {V2}")
    ));
    let removed = f.store.remove("testbed", Some(V1)).unwrap();
    assert_eq!(removed.len(), 1);
    assert!(!f.store.root().join(&removed[0].file).exists());
    assert_eq!(f.store.list().unwrap().len(), 1);
    f.store.remove("testbed", None).unwrap();
    assert!(f.store.list().unwrap().is_empty());
    assert!(matches!(
        f.store.remove("testbed", None),
        Err(InstallError::NotInstalled { .. })
    ));
}

/// Installs into one store from several threads at once (each its own `DriverStore`
/// value, as separate processes would have): the store's file lock serializes them, so no
/// record is lost to a concurrent rewrite of the lock file.
#[test]
fn concurrent_installs_lose_no_record() {
    let f = Fixture::new();
    let versions = [
        "1.0.0-testbed",
        "1.0.1-testbed",
        "1.0.2-testbed",
        "1.0.3-testbed",
    ];
    let sources: Vec<PathBuf> = versions
        .iter()
        .map(|v| f.file(&format!("{v}/testbed.wasm"), &testbed_version(v)))
        .collect();
    let packages: Vec<_> = sources
        .iter()
        .map(|s| f.store.prepare(s, None).unwrap())
        .collect();
    std::thread::scope(|scope| {
        for package in packages {
            let store = DriverStore::at(f.store.root()).builtin_dirs(Vec::new());
            scope.spawn(move || store.install(package).unwrap());
        }
    });
    let installed: Vec<String> = f
        .store
        .list()
        .unwrap()
        .into_iter()
        .map(|r| r.version)
        .collect();
    assert_eq!(installed, versions);
    assert!(f.store.verify().unwrap().iter().all(|v| v.result.is_ok()));
}

#[test]
fn a_changed_component_fails_closed_naming_both_hashes_until_reinstalled() {
    let f = Fixture::new();
    let source = f.file("testbed.wasm", &testbed_bytes());
    let record = f.install(&source).unwrap().record().clone();
    let installed = f.store.root().join(&record.file);
    let tampered = with_custom_section(testbed_bytes(), b"tampered");
    std::fs::write(&installed, &tampered).unwrap();
    match f.store.open("testbed") {
        Err(Error::Load(LoadError::IntegrityMismatch {
            driver,
            expected,
            found,
            ..
        })) => {
            assert_eq!(driver, format!("testbed@{V1}"));
            assert_eq!(expected, record.sha256);
            assert_eq!(found, sha(&tampered));
        }
        other => panic!("expected IntegrityMismatch, got {other:?}"),
    }
    let verified = f.store.verify().unwrap();
    assert!(matches!(
        verified[0].result,
        Err(Error::Load(LoadError::IntegrityMismatch { .. }))
    ));
    // Installing the same source again restores the file.
    assert!(matches!(f.install(&source).unwrap(), Installed::Already(_)));
    f.store.open("testbed").unwrap();
    assert!(f.store.verify().unwrap()[0].result.is_ok());
}

#[test]
fn a_hand_edited_lock_file_is_a_typed_error_and_blocks_installs() {
    let f = Fixture::new();
    let source = f.file("testbed.wasm", &testbed_bytes());
    f.install(&source).unwrap();
    let lock_path = f.store.lock_path();
    let good = std::fs::read_to_string(&lock_path).unwrap();
    let edit = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut lock: serde_json::Value = serde_json::from_str(&good).unwrap();
        edit(&mut lock);
        std::fs::write(&lock_path, lock.to_string()).unwrap();
    };

    // A record that no longer matches what the component declares.
    edit(&|l| l["drivers"][0]["launch_env"] = serde_json::json!(["*"]));
    assert!(matches!(
        f.store.open("testbed"),
        Err(Error::Load(LoadError::LockMismatch { field, .. })) if field == "launch_env"
    ));
    edit(&|l| l["drivers"][0]["capabilities"] = "resume, approvals".into());
    assert!(matches!(
        f.store.open("testbed"),
        Err(Error::Load(LoadError::LockMismatch { field, .. })) if field == "capabilities"
    ));
    // A component path out of the store, a bad hash, a duplicate, an unknown field.
    edit(&|l| l["drivers"][0]["file"] = "../../etc/passwd".into());
    assert!(
        matches!(f.store.list(), Err(InstallError::LockFile { reason, .. }) if reason.contains("components/"))
    );
    edit(&|l| l["drivers"][0]["sha256"] = "abc".into());
    assert!(
        matches!(f.store.list(), Err(InstallError::LockFile { reason, .. }) if reason.contains("64 hex"))
    );
    edit(&|l| {
        let first = l["drivers"][0].clone();
        l["drivers"].as_array_mut().unwrap().push(first);
    });
    assert!(
        matches!(f.store.list(), Err(InstallError::LockFile { reason, .. }) if reason.contains("twice"))
    );
    edit(&|l| l["drivers"][0]["trusted"] = true.into());
    assert!(matches!(f.store.list(), Err(InstallError::LockFile { .. })));
    // Garbage: every operation refuses, and an install changes nothing.
    std::fs::write(&lock_path, "{\"format\": 1, \"drivers\": [").unwrap();
    let before = f.snapshot();
    let v2 = f.file("v2/testbed.wasm", &testbed_version(V2));
    assert!(matches!(f.install(&v2), Err(InstallError::LockFile { .. })));
    assert!(matches!(
        f.store.open("testbed"),
        Err(Error::Install(InstallError::LockFile { .. }))
    ));
    assert_eq!(f.snapshot(), before, "the store is as it was");
    // Put back, it works again.
    std::fs::write(&lock_path, &good).unwrap();
    f.store.open("testbed").unwrap();
}

#[test]
fn bad_components_and_name_conflicts_are_refused_with_the_store_intact() {
    let f = Fixture::new();
    let source = f.file("testbed.wasm", &testbed_bytes());
    f.install(&source).unwrap();
    let before = f.snapshot();
    let refused = |name: &str, bytes: &[u8]| -> InstallError {
        let path = f.file(name, bytes);
        let e = f.install(&path).unwrap_err();
        assert_eq!(f.snapshot(), before, "{name}: the store is as it was");
        e
    };

    // Truncated.
    let bytes = testbed_bytes();
    let e = refused("truncated.wasm", &bytes[..bytes.len() / 2]);
    assert!(
        matches!(&e, InstallError::NotADriver { error, .. } if matches!(**error, Error::Load(LoadError::NotADriver { .. }))),
        "{e:?}"
    );
    // Not WebAssembly; a core module.
    assert!(matches!(
        refused("text.wasm", b"hello"),
        InstallError::NotADriver { .. }
    ));
    let core = wat::parse_str("(module)").unwrap();
    let e = refused("core.wasm", &core);
    assert!(e.to_string().contains("core WebAssembly module"), "{e}");
    // Extra imports.
    let evil = wat::parse_str(
        r#"(component (import "evil:backdoor/net@1.0.0" (instance (export "connect" (func)))))"#,
    )
    .unwrap();
    let e = refused("evil.wasm", &evil);
    assert!(
        matches!(&e, InstallError::NotADriver { error, .. } if matches!(&**error, Error::Load(LoadError::ForbiddenImport { import, .. }) if import == "evil:backdoor/net@1.0.0")),
        "{e:?}"
    );
    // The same name and version with other bytes.
    let other = with_custom_section(testbed_bytes(), b"rebuilt");
    match refused("other.wasm", &other) {
        InstallError::VersionConflict {
            name,
            version,
            installed,
            new,
        } => {
            assert_eq!((name.as_str(), version.as_str()), ("testbed", V1));
            assert_eq!(installed, sha(&testbed_bytes()));
            assert_eq!(new, sha(&other));
        }
        other => panic!("expected VersionConflict, got {other:?}"),
    }
    // A built-in driver's name.
    let builtins = DriverStore::at(f.store.root()).load_options(LoadOptions {
        cache_dir: Some(f.dir.path().join("cache")),
    });
    let reference = builtins.prepare(&driver_path("reference"), None).unwrap();
    match builtins.install(reference) {
        Err(InstallError::NameTaken { name, by }) => {
            assert_eq!(name, "reference");
            assert!(by.contains("reference.wasm"), "{by}");
        }
        other => panic!("expected NameTaken, got {other:?}"),
    }
    assert_eq!(f.snapshot(), before);
    // A directory with two components, and one with none.
    let dir = f.dir.path().join("two");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.wasm"), testbed_bytes()).unwrap();
    std::fs::write(dir.join("b.wasm"), testbed_bytes()).unwrap();
    assert!(
        matches!(f.install(&dir), Err(InstallError::Source { reason, .. }) if reason.contains("2 `.wasm` files"))
    );
    assert!(matches!(
        f.install(&f.dir.path().join("cache-none")),
        Err(InstallError::Io { .. })
    ));
}

#[test]
fn directories_and_oci_image_layouts_install_with_every_blob_checked() {
    let f = Fixture::new();
    // A directory holding one component.
    let dir = f.dir.path().join("pkg");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("testbed.wasm"), testbed_bytes()).unwrap();
    let r = f.install(&dir).unwrap();
    assert!(r.record().source.ends_with("pkg/testbed.wasm"), "{r:?}");

    // An OCI image layout with one application/wasm layer (the image `wkg oci push` publishes, stored as an image layout).
    let layout = |wasm: &[u8], layers: usize| -> PathBuf {
        let root = tempfile::Builder::new()
            .prefix("oci")
            .tempdir_in(f.dir.path())
            .unwrap()
            .keep();
        let blobs = root.join("blobs/sha256");
        std::fs::create_dir_all(&blobs).unwrap();
        let put = |bytes: &[u8]| -> serde_json::Value {
            let digest = sha(bytes);
            std::fs::write(blobs.join(&digest), bytes).unwrap();
            serde_json::json!({"digest": format!("sha256:{digest}"), "size": bytes.len()})
        };
        let mut config = put(br#"{"architecture":"wasm","os":"wasip2"}"#);
        config["mediaType"] = "application/vnd.wasm.config.v0+json".into();
        let mut layer = put(wasm);
        layer["mediaType"] = "application/wasm".into();
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config,
            "layers": vec![layer; layers],
        });
        let mut m = put(manifest.to_string().as_bytes());
        m["mediaType"] = "application/vnd.oci.image.manifest.v1+json".into();
        std::fs::write(
            root.join("index.json"),
            serde_json::json!({"schemaVersion": 2, "manifests": [m]}).to_string(),
        )
        .unwrap();
        std::fs::write(root.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        root
    };
    let v2 = testbed_version(V2);
    let good = layout(&v2, 1);
    let r = f.install(&good).unwrap();
    assert_eq!(r.record().version, V2);
    assert!(r.record().source.starts_with("oci:"), "{r:?}");
    assert_eq!(r.record().sha256, sha(&v2));
    assert_eq!(
        f.store.open(&format!("testbed@{V2}")).unwrap().sha256(),
        sha(&v2)
    );

    // A blob whose bytes are not its digest; two wasm layers.
    let bad = layout(&v2, 1);
    std::fs::write(bad.join("blobs/sha256").join(sha(&v2)), &v2[..100]).unwrap();
    let e = f.install(&bad).unwrap_err();
    assert!(
        matches!(&e, InstallError::Source { reason, .. } if reason.contains("bytes")),
        "{e}"
    );
    let two = layout(&v2, 2);
    let e = f.install(&two).unwrap_err();
    assert!(e.to_string().contains("2 `application/wasm` layers"), "{e}");
}

#[test]
fn publisher_signatures_are_verified_at_install() {
    let f = Fixture::new();
    let acme = SigningKey::generate();
    let source = f.file("testbed.wasm", &testbed_bytes());
    let (digest, signature) = acme.sign_component(&testbed_bytes());
    assert_eq!(digest, sha(&testbed_bytes()));
    let sig = f.file("testbed.wasm.sig", signature.as_bytes());
    let trusted = TrustedKey::parse("acme", &acme.public_key()).unwrap();
    let store = f.store.clone().trust(trusted.clone());

    // Without the key: unknown; nothing installed.
    let e = f.store.prepare(&source, None).unwrap_err();
    assert!(
        matches!(
            e,
            InstallError::Signature(SignatureError::UnknownKey { ref public_key, .. })
                if acme.public_key().ends_with(public_key.as_str())
        ),
        "{e:?}"
    );
    // With it: verified and recorded (found beside the file).
    let package = store.prepare(&source, None).unwrap();
    assert_eq!(package.record().signed_by.as_deref(), Some("acme"));
    store.install(package).unwrap();
    assert_eq!(store.list().unwrap()[0].signed_by.as_deref(), Some("acme"));

    // A signature for other bytes, and an altered signature.
    let v2 = f.file("v2/testbed.wasm", &testbed_version(V2));
    assert!(matches!(
        store.prepare(&v2, Some(&sig)),
        Err(InstallError::Signature(
            SignatureError::OtherComponent { .. }
        ))
    ));
    let (_, v2_sig) = acme.sign_component(&testbed_version(V2));
    let mut altered: serde_json::Value = serde_json::from_str(&v2_sig).unwrap();
    let s = altered["signature"].as_str().unwrap().to_owned();
    altered["signature"] =
        format!("{}{}", if s.starts_with('f') { "e" } else { "f" }, &s[1..]).into();
    let altered = f.file("altered.sig", altered.to_string().as_bytes());
    assert!(matches!(
        store.prepare(&v2, Some(&altered)),
        Err(InstallError::Signature(SignatureError::BadSignature { key })) if key == "acme"
    ));
    // A store that requires signatures refuses an unsigned driver.
    let unsigned = f.file("unsigned/testbed.wasm", &testbed_version(V2));
    assert!(matches!(
        store
            .clone()
            .require_signatures(true)
            .prepare(&unsigned, None),
        Err(InstallError::Signature(SignatureError::Missing { .. }))
    ));
    assert_eq!(store.list().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_version_reaches_new_sessions_only_and_handles_reload_in_place() {
    let f = Fixture::new();
    f.install(&f.file("testbed.wasm", &testbed_bytes()))
        .unwrap();
    let (state, ws) = (tmp(), tmp());
    let v1 = configure(f.store.open("testbed").unwrap(), state.path(), true);
    assert_eq!(v1.descriptor().version, V1);
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent_builder(v1.clone(), ws.path())
        .shared_thread_store(store.clone())
        .build();
    let thread = agent.thread("kept");
    let first = thread.run("one").await.unwrap();
    assert!(first.exit.kept_alive, "a resident process");

    // Install 1.0.1 and remove 1.0.0 (its file is deleted): the running agent, its thread and
    // its resident process keep the component they started with.
    f.install(&f.file("v2/testbed.wasm", &testbed_version(V2)))
        .unwrap();
    f.store.remove("testbed", Some(V1)).unwrap();
    let second = thread.run("two").await.unwrap();
    assert_eq!(
        second.text,
        "Reference reply (turn 2, previously: one): two"
    );
    assert_eq!(v1.descriptor().version, V1, "a held handle does not change");

    // A reload picks up the new version with the same config; new agents use it.
    let reloaded = v1.reload().unwrap();
    assert_eq!(reloaded.descriptor().version, V2);
    assert_eq!(reloaded.config(), v1.config());
    let fresh = agent_builder(reloaded, ws.path()).build();
    let r = fresh.run("new").await.unwrap();
    assert_eq!(r.text, "Reference reply: new");
    agent.close().await;
    fresh.close().await;

    // A pinned handle reloads the version it names, and fails once that is gone.
    let pinned = f.store.open(&format!("testbed@{V2}")).unwrap();
    f.store.remove("testbed", None).unwrap();
    assert!(matches!(
        pinned.reload(),
        Err(Error::Install(InstallError::NotInstalled { .. }))
    ));
}

/// The CLI, as a person would use it: install (shown, then `--yes`), list, run by
/// `name@version`, verify, tamper, sign with a key trusted in the config file, remove.
#[test]
fn the_cli_installs_lists_runs_verifies_and_removes() {
    let home = tmp();
    let store = home.path().join("store");
    let cli = || store_cli(home.path(), &store);
    // One CLI step with its expected exit code.
    let step = |args: &[&str], code: i32| {
        let out = cli().args(args).output().unwrap();
        assert_exit(&out, code);
        out
    };
    let src = home.path().join("testbed.wasm");
    std::fs::write(&src, testbed_bytes()).unwrap();
    let src = src.display().to_string();

    // Without a terminal and without --yes: shown, not installed.
    let out = step(&["drivers", "install", &src], 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for shown in [
        "testbed@1.0.0-testbed",
        "sha256",
        "adaptor:driver@0.3.0",
        "capabilities",
        "environment",
        "program       reference-provider",
        "unsigned",
        "--yes",
    ] {
        assert!(stderr.contains(shown), "{shown}: {stderr}");
    }
    assert!(!store.join("drivers.lock.json").exists());

    step(&["drivers", "install", &src, "--yes"], 0);
    let out = step(&["drivers"], 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("testbed@1.0.0-testbed") && stdout.contains("installed, sha256:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("reference"),
        "built-ins are listed too: {stdout}"
    );

    let state = tmp();
    let config = serde_json::json!({"state_dir": state.path().display().to_string()}).to_string();
    for driver in ["testbed@1.0.0-testbed", "testbed"] {
        let out = step(
            &["run", "--driver", driver, "--config", &config, "Hi there"],
            0,
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("Reference reply: Hi there"));
    }
    let out = step(&["run", "--driver", "testbed@2.0.0", "Hi"], 2);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no installed driver testbed@2.0.0"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = step(&["drivers", "verify"], 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok      testbed@1.0.0-testbed"));
    // Tampered: verify and run fail closed, naming both hashes.
    let file = store.join("components/testbed/1.0.0-testbed/driver.wasm");
    std::fs::write(&file, with_custom_section(testbed_bytes(), b"x")).unwrap();
    let out = step(&["drivers", "verify"], 1);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("FAILED") && stdout.contains(&sha(&testbed_bytes())),
        "{stdout}"
    );
    let out = step(
        &["run", "--driver", "testbed", "--config", &config, "Hi"],
        2,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("was changed"));
    step(&["drivers", "remove", "testbed"], 0);

    // Signed by a publisher whose key the config file trusts.
    let key = home.path().join("acme.key");
    let out = step(
        &["drivers", "keygen", "--out", &key.display().to_string()],
        0,
    );
    let public = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(public.starts_with("ed25519:"), "{public}");
    step(
        &["drivers", "sign", &src, "--key", &key.display().to_string()],
        0,
    );
    let config_file = home.path().join("config.toml");
    std::fs::write(
        &config_file,
        format!("require-signatures = true\n[trusted-keys]\nacme = \"{public}\"\n"),
    )
    .unwrap();
    let out = cli()
        .env("ADAPTOR_CONFIG", &config_file)
        .args(["drivers", "install", &src, "--yes"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert!(String::from_utf8_lossy(&out.stderr).contains("verified, trusted key `acme`"));
    // Without the trusted key the same signature is refused.
    step(&["drivers", "remove", "testbed"], 0);
    let out = step(&["drivers", "install", &src, "--yes"], 2);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a trusted key"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The driver author's path, from an empty directory: `adaptor drivers new`, the crate's own
/// tests, the component build, `adaptortest check` (no failed clause), install, run. The
/// scaffold builds in a target directory of its own under this build's (kept between runs),
/// with this workspace's lock file so it resolves the versions CI already has.
#[test]
fn a_scaffolded_driver_builds_passes_the_check_installs_and_runs() {
    let home = tmp();
    let crate_dir = home.path().join("acme");
    let store = home.path().join("store");
    let cli = || store_cli(home.path(), &store);
    let out = cli()
        .current_dir(home.path())
        .args(["drivers", "new", "acme"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert!(crate_dir.join("src/lib.rs").is_file());
    let out = cli()
        .current_dir(home.path())
        .args(["drivers", "new", "acme"])
        .output()
        .unwrap();
    assert_exit(&out, 2);
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    std::fs::copy(workspace.join("Cargo.lock"), crate_dir.join("Cargo.lock")).unwrap();
    let cargo = |args: &[&str]| {
        let out = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
            .current_dir(&crate_dir)
            .env("CARGO_TARGET_DIR", target_dir().join("scaffold"))
            .args(args)
            .output()
            .unwrap();
        assert_exit(&out, 0);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let tested = cargo(&["test", "--quiet"]);
    assert!(tested.contains("3 passed"), "{tested}");
    cargo(&["build", "--release", "--target", "wasm32-wasip2"]);
    let component = target_dir().join("scaffold/wasm32-wasip2/release/acme_driver.wasm");
    let out = std::process::Command::new(bin_dir().join("adaptortest"))
        .arg("check")
        .arg(&component)
        .arg("--cassette")
        .arg(crate_dir.join("cassettes"))
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains(", 0 failed"), "{report}");
    assert!(report.contains("HST-01  pass"), "{report}");

    let out = cli()
        .arg("drivers")
        .arg("install")
        .arg(&component)
        .arg("--yes")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let out = cli()
        .env("PATH", format!("{}:/usr/bin:/bin", bin_dir().display()))
        .args(["run", "--driver", "acme", "Say hello"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Reference reply: Say hello"));
}
