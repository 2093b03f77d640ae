//! Loading drivers: built-ins by name, non-driver files, and the compiled-code cache.

use adaptor::{CompileSource, Driver, Error, LoadError, LoadOptions};
use adaptor_integration_tests::*;

fn not_a_driver(bytes: &[u8]) -> String {
    match Driver::from_bytes_with("bad.wasm", bytes, &LoadOptions { cache_dir: None }) {
        Err(Error::Load(LoadError::NotADriver { driver, reason })) => {
            assert_eq!(driver, "bad.wasm");
            reason
        }
        other => panic!("expected NotADriver, got {other:?}"),
    }
}

#[test]
fn files_that_are_not_drivers_are_rejected_with_the_reason() {
    assert!(not_a_driver(b"definitely not wasm").contains("not a WebAssembly file"));
    let core_module = b"\0asm\x01\0\0\0";
    assert!(not_a_driver(core_module).contains("core WebAssembly module"));
    let empty_component = b"\0asm\x0d\0\x01\0";
    let reason = not_a_driver(empty_component);
    assert!(reason.contains("adaptor:driver/driver"), "{reason}");
}

#[test]
fn builtin_drivers_are_found_by_name() {
    let d = Driver::builtin("reference").expect("reference driver is installed");
    assert_eq!(d.name(), "reference");
    assert_eq!(d.descriptor().default_program, "reference-provider");
    assert!(d.descriptor().sessions.resume);
    assert!(matches!(
        Driver::builtin("no-such-driver"),
        Err(Error::Load(LoadError::UnknownDriver { .. }))
    ));
    assert!(
        adaptor::available_drivers()
            .iter()
            .any(|(_, d)| d.as_ref().is_ok_and(|d| d.name() == "reference"))
    );
}

/// `adaptor::prepare_process` may run on other threads while a load runs (as `adaptor run`
/// does it beside its own load): every caller ends, the load waits for or shares what they
/// built, and the driver works.
#[test]
fn preparing_the_process_beside_loads_is_safe_and_repeatable() {
    let preparing: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(adaptor::prepare_process))
        .collect();
    let loaded = std::thread::spawn(|| Driver::builtin("reference"));
    for thread in preparing {
        thread.join().expect("prepare_process does not panic");
    }
    let driver = loaded
        .join()
        .expect("the load does not panic")
        .expect("reference loads");
    assert_eq!(driver.descriptor().default_program, "reference-provider");
    adaptor::prepare_process();
}

#[test]
fn compiled_cache_is_reused_and_corrupt_entries_are_recompiled() {
    let cache = tempfile::tempdir().unwrap();
    let options = LoadOptions {
        cache_dir: Some(cache.path().to_path_buf()),
    };
    let path = driver_path("reference");
    let first = Driver::from_file_with(&path, &options).unwrap();
    assert_eq!(first.compile_source(), CompileSource::Compiled);
    let second = Driver::from_file_with(&path, &options).unwrap();
    assert_eq!(second.compile_source(), CompileSource::Cached);
    // The cached code (mapped from the entry) runs a turn.
    let state = tmp();
    let ws = tmp();
    let cached = with_reference_provider(second, state.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let result = rt
        .block_on(
            agent_builder(cached, ws.path())
                .build()
                .run("hello from the cache"),
        )
        .expect("a turn through the cached driver");
    assert_eq!(result.text, "Reference reply: hello from the cache");
    let descriptor = first.descriptor().clone();
    // A mapped entry must not be modified in place: the test corrupts it below, so the
    // drivers that map it go first.
    drop((first, result));
    // Beside the entry, a record of the driver file's stamp may sit (`<dev>-<ino>.id`).
    let entries: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];
    let mut bytes = std::fs::read(entry).unwrap();
    assert!(
        bytes.ends_with(b"AACWASM2"),
        "entry layout: artifact, checksum, magic"
    );
    // Corrupt the compiled code: flip bytes in the middle of the payload.
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 64] {
        *b ^= 0xff;
    }
    std::fs::write(entry, &bytes).unwrap();
    let third = Driver::from_file_with(&path, &options).unwrap();
    assert_eq!(third.compile_source(), CompileSource::Recompiled);
    assert_eq!(third.descriptor(), &descriptor);
    drop(third);
    // Truncated entries too.
    std::fs::write(entry, &bytes[..100]).unwrap();
    assert_eq!(
        Driver::from_file_with(&path, &options)
            .unwrap()
            .compile_source(),
        CompileSource::Recompiled
    );
    assert_eq!(
        Driver::from_file_with(&path, &options)
            .unwrap()
            .compile_source(),
        CompileSource::Cached
    );
}

#[test]
fn a_cached_load_marks_its_entry_used_and_a_compile_prunes_entries_unused_for_30_days() {
    let cache = tempfile::tempdir().unwrap();
    let options = LoadOptions {
        cache_dir: Some(cache.path().to_path_buf()),
    };
    let age = |path: &std::path::Path, days: u64| {
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(
                std::time::SystemTime::now() - std::time::Duration::from_secs(days * 24 * 3600),
            )
            .unwrap();
    };
    let days_old = |path: &std::path::Path| {
        std::fs::metadata(path)
            .unwrap()
            .modified()
            .unwrap()
            .elapsed()
            .unwrap_or_default()
            .as_secs()
            / (24 * 3600)
    };
    Driver::from_file_with(driver_path("reference"), &options).unwrap();
    let entry = std::fs::read_dir(cache.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .expect("an entry");
    // Last used 40 days ago; a cached load marks it used now.
    age(&entry, 40);
    let cached = Driver::from_file_with(driver_path("reference"), &options).unwrap();
    assert_eq!(cached.compile_source(), CompileSource::Cached);
    assert_eq!(days_old(&entry), 0);
    // An entry no host here used for 40 days (another driver version, wasmtime or layout)
    // goes when the next compile writes an entry; the one used today stays.
    let stale = cache.path().join(format!("{}.cwasm", "0".repeat(64)));
    std::fs::write(&stale, b"an entry of another host version").unwrap();
    age(&stale, 40);
    let codex = Driver::from_file_with(driver_path("codex"), &options).unwrap();
    assert_eq!(codex.compile_source(), CompileSource::Compiled);
    assert!(!stale.exists(), "the unused entry was pruned");
    assert!(entry.exists());
    let entries = std::fs::read_dir(cache.path())
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .count();
    assert_eq!(entries, 2);
}

#[test]
fn descriptor_and_fingerprint_are_deterministic() {
    let a = Driver::from_file(driver_path("reference")).unwrap();
    let b = Driver::from_file(driver_path("reference")).unwrap();
    assert_eq!(a.descriptor(), b.descriptor());
    // A file is hashed in pieces; its sha256 is that of its bytes however it was loaded
    // (compiled into a cache, from the cache, or with no cache at all).
    let bytes = std::fs::read(driver_path("reference")).unwrap();
    let from_bytes =
        Driver::from_bytes_with("reference", &bytes, &LoadOptions { cache_dir: None }).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let cached = LoadOptions {
        cache_dir: Some(cache.path().to_path_buf()),
    };
    for options in [&cached, &cached, &LoadOptions { cache_dir: None }] {
        let from_file = Driver::from_file_with(driver_path("reference"), options).unwrap();
        assert_eq!(from_file.sha256(), from_bytes.sha256());
    }
    assert_eq!(a.sha256(), from_bytes.sha256());
    let cfg = serde_json::json!({"model": "m", "command": "/x"});
    let fa = a
        .with_config(cfg.clone())
        .unwrap()
        .config_fingerprint()
        .unwrap();
    let fb = b
        .with_config(serde_json::json!({"command": "/y", "model": "m"}))
        .unwrap()
        .config_fingerprint()
        .unwrap();
    assert_eq!(fa, fb, "command path does not affect session compatibility");
    assert!(fa.starts_with("sha256:"));
}

fn forbidden(wat_text: &str) -> (String, String) {
    let bytes = wat::parse_str(wat_text).expect("valid component text");
    match Driver::from_bytes_with("audited.wasm", &bytes, &LoadOptions { cache_dir: None }) {
        Err(Error::Load(LoadError::ForbiddenImport { driver, import })) => (driver, import),
        other => panic!("expected ForbiddenImport, got {other:?}"),
    }
}

#[test]
fn imports_beyond_the_world_and_inert_wasi_are_refused_by_name() {
    let (driver, import) = forbidden(
        r#"(component (import "evil:backdoor/net@1.0.0" (instance (export "connect" (func)))))"#,
    );
    assert_eq!(driver, "audited.wasm");
    assert_eq!(import, "evil:backdoor/net@1.0.0");
    // WASI HTTP is not linked at all: refused by name before instantiation is attempted.
    let (_, import) =
        forbidden(r#"(component (import "wasi:http/outgoing-handler@0.2.0" (instance)))"#);
    assert_eq!(import, "wasi:http/outgoing-handler@0.2.0");
    // The built-in drivers pass the audit (they import only the world and inert WASI).
    for name in ["reference", "claude", "codex", "acp"] {
        Driver::from_file(driver_path(name)).expect("built-in driver passes the audit");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_built_without_wasi_loads_and_runs() {
    // `./x.sh build-drivers` builds the reference driver for wasm32-unknown-unknown too.
    let core = target_dir().join("wasm32-unknown-unknown/driver/reference_driver.wasm");
    let module = std::fs::read(&core)
        .unwrap_or_else(|e| panic!("{}: {e} (run ./x.sh build-drivers)", core.display()));
    let component = wit_component::ComponentEncoder::default()
        .module(&module)
        .expect("core module with its component type")
        .validate(true)
        .encode()
        .expect("componentized");
    let driver = Driver::from_bytes_with(
        "reference-unknown.wasm",
        &component,
        &LoadOptions { cache_dir: None },
    )
    .expect("a WASI-free component loads");
    assert_eq!(driver.name(), "reference");
    let state = tmp();
    let ws = tmp();
    let driver = with_reference_provider(driver, state.path());
    let r = agent_builder(driver, ws.path())
        .build()
        .run("no wasi")
        .await
        .expect("runs");
    assert_eq!(r.text, "Reference reply: no wasi");
}

/// Presets are files beside the drivers, not the caller: a preset that names a program by
/// path, sets a field the host would grant a path for, chains to another preset or has an
/// unknown field is refused when loaded, naming the file and why; a good one loads as its
/// driver with its config.
#[test]
fn presets_may_not_grant_programs_or_paths() {
    let dir = tmp();
    for name in ["acp", "reference"] {
        std::os::unix::fs::symlink(driver_path(name), dir.path().join(format!("{name}.wasm")))
            .unwrap();
    }
    let presets = [
        (
            "good",
            r#"{"driver":"acp","config":{"agent":"gemini","command":"gemini"}}"#,
        ),
        (
            "by-path",
            r#"{"driver":"acp","config":{"agent":"gemini","command":"/bin/sh"}}"#,
        ),
        (
            "grants",
            r#"{"driver":"reference","config":{"state_dir":"/tmp/preset-state"}}"#,
        ),
        ("chained", r#"{"driver":"good","config":{}}"#),
        ("pathy", r#"{"driver":"../acp","config":{}}"#),
        ("unknown", r#"{"driver":"acp","config":{},"env":{"X":"1"}}"#),
    ];
    for (name, text) in presets {
        std::fs::write(dir.path().join(format!("{name}.preset.json")), text).unwrap();
    }
    let out = adaptor_cli()
        .env("ADAPTOR_DRIVER_PATH", dir.path())
        .args(["drivers", "--json"])
        .output()
        .expect("adaptor runs");
    assert_eq!(
        out.status.code(),
        Some(3),
        "a driver that fails to load is a fault"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let good: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &serde_json::Value| l["preset"] == "good")
        .collect();
    assert_eq!(good.len(), 1, "{stdout}");
    assert_eq!(good[0]["descriptor"]["name"], "acp");
    assert_eq!(good[0]["config"]["command"], "gemini");
    for (name, why) in [
        ("by-path", "`command` must be a bare program name"),
        ("grants", "`state_dir` names a path the host would grant"),
        ("chained", "no driver named `good`"),
        ("pathy", "`driver` must be a built-in driver's plain name"),
        ("unknown", "unknown field `env`"),
    ] {
        let line = stderr
            .lines()
            .find(|l| l.contains(&format!("{name}.preset.json")))
            .unwrap_or_else(|| panic!("{name}: no error line in {stderr}"));
        assert!(line.contains(why), "{name}: {line}");
    }
}

/// `LoadedDrivers` (what `adaptor serve` loads through): a second load of the same,
/// unchanged file shares the first one's component; a file written since, or written too
/// recently to tell a later write by its stamp, is read again; `Driver::open` shares nothing.
#[test]
fn loaded_drivers_share_an_unchanged_file_and_read_a_changed_one_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reference.wasm");
    std::fs::copy(driver_path("reference"), &path).unwrap();
    let path = path.display().to_string();
    let shared = adaptor::LoadedDrivers::new();
    // Just written: its stamp cannot stand for its content yet (see `file_stamps`).
    let fresh = shared.open(&path).unwrap();
    let again = shared.open(&path).unwrap();
    assert!(!std::ptr::eq(fresh.descriptor(), again.descriptor()));
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let first = shared.open(&path).unwrap();
    let second = shared.open(&path).unwrap();
    assert!(std::ptr::eq(first.descriptor(), second.descriptor()));
    assert_eq!(second.compile_source(), first.compile_source());
    let plain = Driver::open(&path).unwrap();
    assert!(!std::ptr::eq(plain.descriptor(), second.descriptor()));
    // An instance made ahead goes to the next load, once.
    assert_eq!(shared.spares(), 0);
    shared.make_spares();
    assert_eq!(shared.spares(), 1);
    let third = shared.open(&path).unwrap();
    assert_eq!(shared.spares(), 0);
    // A shared driver is configured and runs like any other, on its instance made ahead or
    // on a fresh one.
    let state = tmp();
    let ws = tmp();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (driver, prompt) in [(third, "made ahead"), (second, "shared")] {
        let result = rt
            .block_on(
                agent_builder(with_reference_provider(driver, state.path()), ws.path())
                    .build()
                    .run(prompt),
            )
            .expect("a turn through the shared driver");
        assert_eq!(result.text, format!("Reference reply: {prompt}"));
    }
    // Written again (the same bytes): read again.
    std::fs::write(&path, std::fs::read(driver_path("reference")).unwrap()).unwrap();
    let rewritten = shared.open(&path).unwrap();
    assert!(!std::ptr::eq(rewritten.descriptor(), first.descriptor()));
    // Built-in names share too.
    let builtin = shared.open("reference").unwrap();
    let builtin_again = shared.open("reference").unwrap();
    assert!(std::ptr::eq(
        builtin.descriptor(),
        builtin_again.descriptor()
    ));
    assert_eq!(builtin_again.name(), "reference");
}
