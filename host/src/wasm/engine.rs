//! The process-wide wasmtime [`Engine`], its epoch ticker and the on-disk cache of compiled
//! drivers.
//!
//! Owns: engine configuration (Cranelift, no unneeded proposals, fuel for guest CPU, epoch
//! interruption for the wall-clock bound), the 10 ms epoch ticker thread, and compile-or-load with a cache keyed by the wasm's sha256,
//! the wasmtime version and a hash of the engine configuration. Only files this module wrote
//! are ever deserialized, and each carries a checksum that is verified before deserializing.
//! Must not: run guests or know about drivers' semantics.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine};

use crate::error::{Error, LoadError};

/// Epoch tick length: the per-call wall-clock bound is counted in these.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// A description of the engine configuration, hashed into cache keys. Change it whenever
/// [`engine_config`] changes.
const ENGINE_CONFIG_ID: &str =
    "cranelift;opt=speed;fuel;epoch;no-gc;no-stack-switching;stack=1MiB;v2";

/// The wasmtime version this host links (pinned exactly in the workspace manifest).
pub(crate) const WASMTIME_VERSION: &str = "48.0.8";

/// Magic prefix of cache entries written by this module.
const CACHE_MAGIC: &[u8; 8] = b"AACWASM1";

fn engine_config() -> Config {
    let mut config = Config::new();
    config.consume_fuel(true);
    config.epoch_interruption(true);
    config.wasm_component_model(true);
    config.wasm_gc(false);
    config.wasm_stack_switching(false);
    config.max_wasm_stack(1 << 20);
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    config
}

/// The shared engine (created on first use, with its epoch ticker).
pub(crate) fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let engine = Engine::new(&engine_config()).expect("static engine configuration is valid");
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("adaptor-epoch".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                }
            })
            .expect("spawn epoch ticker thread");
        engine
    })
}

/// Where compiled drivers are cached: `$ADAPTOR_CACHE_DIR`, else the user cache dir.
pub(crate) fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("ADAPTOR_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    dirs::cache_dir().map(|d| d.join("agent-adaptor").join("compiled"))
}

/// How a component was obtained (reported by benchmarks and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileSource {
    /// Compiled now (no usable cache entry).
    Compiled,
    /// Loaded from the on-disk cache.
    Cached,
    /// A cache entry existed but was corrupt; it was discarded and the driver recompiled.
    Recompiled,
}

/// Hex sha256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn cache_key(wasm_sha: &str) -> String {
    let mut h = Sha256::new();
    h.update(wasm_sha.as_bytes());
    h.update(b"\0wasmtime-");
    h.update(WASMTIME_VERSION.as_bytes());
    h.update(b"\0");
    h.update(ENGINE_CONFIG_ID.as_bytes());
    hex::encode(h.finalize())
}

/// Compile `wasm` (a component) or load it from `cache_dir`.
pub(crate) fn compile_cached(
    name_hint: &str,
    wasm: &[u8],
    wasm_sha: &str,
    cache_dir: Option<&Path>,
) -> Result<(Component, CompileSource), Error> {
    let engine = engine();
    let Some(dir) = cache_dir else {
        return Ok((compile(name_hint, wasm)?, CompileSource::Compiled));
    };
    let path = dir.join(format!("{}.cwasm", cache_key(wasm_sha)));
    let mut source = CompileSource::Compiled;
    if let Ok(bytes) = std::fs::read(&path) {
        match verified_payload(&bytes) {
            // SAFETY: the payload was produced by `Engine::precompile_component` of this
            // module (magic + sha256 checksum verified above, in a directory only we write,
            // keyed by wasmtime version and engine configuration).
            Some(payload) => match unsafe { Component::deserialize(engine, payload) } {
                Ok(component) => return Ok((component, CompileSource::Cached)),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "discarding unusable compiled driver cache entry");
                    source = CompileSource::Recompiled;
                }
            },
            None => {
                tracing::warn!(path = %path.display(), "discarding corrupt compiled driver cache entry");
                source = CompileSource::Recompiled;
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    let compiled = engine
        .precompile_component(wasm)
        .map_err(|e| not_a_component(name_hint, wasm, e))?;
    // SAFETY: `compiled` was just produced by this engine.
    let component = unsafe { Component::deserialize(engine, &compiled) }
        .map_err(|e| Error::Load(LoadError::Compile(format!("{name_hint}: {e}"))))?;
    if let Err(e) = write_entry(dir, &path, &compiled) {
        tracing::warn!(path = %path.display(), error = %e, "could not write compiled driver cache entry");
    }
    Ok((component, source))
}

fn compile(name_hint: &str, wasm: &[u8]) -> Result<Component, Error> {
    Component::new(engine(), wasm).map_err(|e| not_a_component(name_hint, wasm, e))
}

fn not_a_component(name_hint: &str, wasm: &[u8], e: wasmtime::Error) -> Error {
    let what = if wasm.len() < 8 || &wasm[..4] != b"\0asm" {
        "not a WebAssembly file".to_owned()
    } else if wasm[4..8] == [1, 0, 0, 0] {
        "a core WebAssembly module, not a component (componentize it for the adaptor:driver world)"
            .to_owned()
    } else {
        format!("not a valid component: {e}")
    };
    Error::Load(LoadError::NotADriver {
        driver: name_hint.to_owned(),
        reason: what,
    })
}

fn verified_payload(bytes: &[u8]) -> Option<&[u8]> {
    let rest = bytes.strip_prefix(CACHE_MAGIC.as_slice())?;
    if rest.len() < 32 {
        return None;
    }
    let (sum, payload) = rest.split_at(32);
    (Sha256::digest(payload).as_slice() == sum).then_some(payload)
}

fn write_entry(dir: &Path, path: &Path, compiled: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id()
    ));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(CACHE_MAGIC)?;
        f.write_all(&Sha256::digest(compiled))?;
        f.write_all(compiled)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}
