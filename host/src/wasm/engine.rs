//! The process-wide wasmtime [`Engine`], its epoch ticker and the on-disk cache of compiled
//! drivers.
//!
//! Owns: engine configuration (Cranelift, no unneeded proposals, fuel for guest CPU, epoch
//! interruption for the wall-clock bound), the 10 ms epoch ticker thread (parked while no guest
//! call runs), and compile-or-load
//! with a cache keyed by the wasm's sha256, the wasmtime version, a hash of the engine
//! configuration and the entry layout. Only files this module wrote are ever deserialized, and
//! each carries a checksum that is verified before deserializing.
//! Must not: run guests or know about drivers' semantics.
//!
//! A cache entry is the compiled artifact exactly as [`Engine::precompile_component`] wrote it
//! (an ELF object), followed by a 24-byte trailer: the XXH3-128 of the artifact (16 bytes,
//! little-endian) and [`CACHE_MAGIC`]. A cached load maps the file once to check the trailer,
//! then lets wasmtime map the file itself ([`Component::deserialize_file`]): the code is not
//! copied into fresh memory, so it stays clean page cache shared by every host running the
//! driver. The checksum guards against an entry damaged on disk (a torn write the rename
//! protocol missed, a bad sector) before its native code runs in the host; it is not a
//! signature: whatever can write this 0700 directory can put native code into the next host
//! that loads from it (a keyed check would not help: its key would sit in the same home
//! directory). Providers reach it only through a workspace or `allow_write` path the caller
//! chose above it.
//! Entries are written to a temporary file, synced and renamed into place, never rewritten in
//! place, so a file a host has mapped never changes under it (truncating an entry in place
//! while a host maps it would fault that host; delete entries instead). A cached load marks
//! its entry used (the modification time, at most daily); writing an entry deletes the ones
//! not used for 30 days (other driver builds, wasmtime versions, layouts), and the records
//! below not rewritten for as long, so the directory stays bounded by what this machine runs.
//!
//! A driver file is read and hashed on a cached load only until the cache has a record of it
//! (`file_stamps`): its sha256 under its stamp (device, inode, size, modification and status
//! change times), and the stamp of its entry when the entry's checksum passed in this boot.
//! A load whose file and entry still have those stamps reads neither (the hash and the
//! checksum were about 0.3 ms of a 0.9 ms cached load).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine};

use super::file_stamps::{self, FileStamp};
use crate::error::{Error, LoadError};

/// Epoch tick length: the per-call wall-clock bound is counted in these.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// A description of the engine configuration, hashed into cache keys. Change it whenever
/// [`engine_config`] changes.
const ENGINE_CONFIG_ID: &str =
    "cranelift;opt=speed;fuel;epoch;no-gc;no-stack-switching;stack=1MiB;v2";

/// The wasmtime version this host links (pinned exactly in the workspace manifest).
pub(crate) const WASMTIME_VERSION: &str = "48.0.8";

/// The last 8 bytes of every cache entry written by this module (layout 2: artifact, then
/// its XXH3-128, then this). Hashed into the cache key, so entries of another layout are never
/// looked up.
const CACHE_MAGIC: &[u8; 8] = b"AACWASM2";

/// Bytes after the artifact: its checksum and [`CACHE_MAGIC`].
const TRAILER_LEN: usize = 16 + CACHE_MAGIC.len();

/// An entry not used for this long is deleted the next time this host writes an entry.
const UNUSED_FOR: Duration = Duration::from_secs(30 * 24 * 3600);

/// A cached load marks its entry as used (its modification time) at most this often.
const MARK_USED_EVERY: Duration = Duration::from_secs(24 * 3600);

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
        let ticker = std::thread::Builder::new()
            .name("adaptor-epoch".into())
            .spawn(move || tick(weak))
            .expect("spawn epoch ticker thread");
        TICKER
            .set(ticker.thread().clone())
            .expect("the engine is made once");
        engine
    })
}

/// Guest calls (instantiations included) running now in this process: the ticker ticks
/// only while there is one.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// The ticker's thread, to wake when a guest call begins.
static TICKER: OnceLock<std::thread::Thread> = OnceLock::new();

/// The epoch ticker: one epoch every [`EPOCH_TICK`] while a guest call runs, parked while
/// none does. An idle host (a resident `adaptor serve`, an embedder's agent between runs)
/// then has no thread waking a hundred times a second for nothing. A call that begins
/// wakes it ([`Ticking::begin`]); its first tick comes one tick later, as it would have
/// with a ticker that never stopped, so the per-call bounds count the same. After the last
/// call ends it ticks at most once more. Ends with the engine (never, as it is static).
fn tick(engine: wasmtime::EngineWeak) {
    loop {
        if RUNNING.load(Ordering::SeqCst) == 0 {
            // A `begin` between the load and the park leaves its token: no wake-up is lost.
            std::thread::park();
            continue;
        }
        std::thread::sleep(EPOCH_TICK);
        match engine.upgrade() {
            Some(engine) => engine.increment_epoch(),
            None => return,
        }
    }
}

/// A guest call running (see [`tick`]): while one exists, the epochs that bound calls
/// advance. Held by the code making the call, across the call's `await`: a call whose
/// future is dropped drops it too.
pub(crate) struct Ticking(());

impl Ticking {
    /// A call begins: count it, and wake the ticker if it was the only one.
    pub(crate) fn begin() -> Ticking {
        engine();
        if RUNNING.fetch_add(1, Ordering::SeqCst) == 0
            && let Some(ticker) = TICKER.get()
        {
            ticker.unpark();
        }
        Ticking(())
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
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
    h.update(b"\0");
    h.update(CACHE_MAGIC);
    hex::encode(h.finalize())
}

/// A component to compile or load, as the caller has it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wasm<'a> {
    /// Its bytes.
    Bytes(&'a [u8]),
    /// A file: a cached load only hashes it, in pieces, with no buffer the size of the
    /// component (allocating, faulting in and unmapping one for the sha256 alone was about
    /// as costly as the hash); it is read whole only to compile.
    File(&'a Path),
}

/// Compile `wasm` (a component) or load it from `cache_dir`; also returns the sha256 of the
/// component bytes the result was compiled from.
pub(crate) fn compile_cached(
    name_hint: &str,
    wasm: Wasm<'_>,
    cache_dir: Option<&Path>,
) -> Result<(Component, CompileSource, String), Error> {
    compile_cached_at(name_hint, wasm, cache_dir, std::time::SystemTime::now())
}

/// [`compile_cached`] at the time `now` (which decides whether a file's stamp is settled).
fn compile_cached_at(
    name_hint: &str,
    wasm: Wasm<'_>,
    cache_dir: Option<&Path>,
    now: std::time::SystemTime,
) -> Result<(Component, CompileSource, String), Error> {
    let read_error = |path: &Path, source| {
        Error::Load(LoadError::Read {
            path: path.display().to_string(),
            source,
        })
    };
    let read = |path: &Path| std::fs::read(path).map_err(|e| read_error(path, e));
    let Some(dir) = cache_dir else {
        let file;
        let bytes = match wasm {
            Wasm::Bytes(bytes) => bytes,
            Wasm::File(path) => {
                file = read(path)?;
                &file[..]
            }
        };
        let component = compile(name_hint, bytes)?;
        return Ok((component, CompileSource::Compiled, sha256_hex(bytes)));
    };
    let (wasm_sha, known) = match wasm {
        Wasm::Bytes(bytes) => (sha256_hex(bytes), None),
        Wasm::File(path) => identify(path, dir, now).map_err(|e| read_error(path, e))?,
    };
    let entry = entry_path(dir, &wasm_sha);
    // A record of the file names this entry (its sha256 is where `wasm_sha` came from).
    let trusted = known
        .as_ref()
        .and_then(|k| k.record.as_ref())
        .and_then(file_stamps::Record::entry_verified_this_boot);
    let source = match cached(&entry, trusted) {
        Ok((component, entry_stamp)) => {
            if let Some(known) = known {
                known.remember(dir, &wasm_sha, entry_stamp);
            }
            return Ok((component, CompileSource::Cached, wasm_sha));
        }
        Err(source) => source,
    };
    match wasm {
        Wasm::Bytes(bytes) => {
            let component = compile_into(name_hint, bytes, dir, &wasm_sha)?;
            Ok((component, source, wasm_sha))
        }
        Wasm::File(path) => {
            let bytes = read(path)?;
            // The file may have changed since it was hashed: the entry names what is compiled.
            let sha = sha256_hex(&bytes);
            let component = compile_into(name_hint, &bytes, dir, &sha)?;
            Ok((component, source, sha))
        }
    }
}

/// A driver file as [`identify`] found it: its stamp, whether that stamp may be recorded
/// (settled, and unchanged while the file was hashed), and its record, if one matched.
struct KnownFile {
    stamp: FileStamp,
    recordable: bool,
    record: Option<file_stamps::Record>,
}

impl KnownFile {
    /// Record what this load learnt, when it differs from the record: the file's sha256
    /// and the stamp of the entry that loaded (`None`: its checksum was not checked now, nor
    /// under this stamp in this boot).
    fn remember(self, dir: &Path, wasm_sha: &str, entry: Option<FileStamp>) {
        if !self.recordable {
            return;
        }
        let record = file_stamps::Record {
            wasm: self.stamp,
            sha256: wasm_sha.to_owned(),
            entry: entry.and_then(|stamp| Some((file_stamps::boot_id()?.to_owned(), stamp))),
        };
        if self.record.as_ref() != Some(&record) {
            file_stamps::write(dir, &record);
        }
    }
}

/// The sha256 of the driver file at `path`, from its record in the cache `dir` when the
/// file's stamp matches one (see `file_stamps`), else by hashing it.
fn identify(
    path: &Path,
    dir: &Path,
    now: std::time::SystemTime,
) -> std::io::Result<(String, Option<KnownFile>)> {
    let file = std::fs::File::open(path)?;
    let Some(stamp) = FileStamp::of(&file.metadata()?) else {
        return Ok((sha256_reader(&file)?, None));
    };
    if let Some(record) = file_stamps::read(dir, &stamp) {
        let known = KnownFile {
            stamp,
            recordable: true,
            record: Some(record.clone()),
        };
        return Ok((record.sha256, Some(known)));
    }
    let sha = sha256_reader(&file)?;
    let after = FileStamp::of(&file.metadata()?);
    let known = KnownFile {
        stamp,
        recordable: after == Some(stamp) && stamp.settled(now),
        record: None,
    };
    Ok((sha, Some(known)))
}

/// The cache entry of the component whose sha256 is `wasm_sha`.
fn entry_path(dir: &Path, wasm_sha: &str) -> PathBuf {
    dir.join(format!("{}.cwasm", cache_key(wasm_sha)))
}

/// The component in the cache entry at `path`, with the entry's stamp when its checksum
/// passed now or it still has the stamp `trusted` (checked in this boot, see `file_stamps`);
/// else how it must be obtained: compiled (no entry, or one that could not be read) or
/// recompiled (an unusable entry, now removed).
fn cached(
    path: &Path,
    trusted: Option<FileStamp>,
) -> Result<(Component, Option<FileStamp>), CompileSource> {
    let unchanged = trusted.filter(|&trusted| {
        std::fs::metadata(path).ok().and_then(|m| FileStamp::of(&m)) == Some(trusted)
    });
    let verdict = if let Some(stamp) = unchanged {
        // SAFETY: as below; this entry's checksum passed in this boot and the entry has not
        // been replaced or written since (its stamp is the same).
        unsafe { Component::deserialize_file(engine(), path) }
            .map(|c| (c, Some(stamp)))
            .map_err(|e| e.to_string())
    } else {
        let (bytes, stamp) = match EntryBytes::open(path) {
            Ok(opened) => opened,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(CompileSource::Compiled);
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "could not read compiled driver cache entry; compiling");
                return Err(CompileSource::Compiled);
            }
        };
        if verified_artifact(&bytes).is_some() {
            drop(bytes);
            // SAFETY: the file holds an artifact produced by `Engine::precompile_component` of
            // this module (trailer magic and checksum verified above, in a directory only we
            // write, keyed by wasmtime version, engine configuration and layout). Entries are
            // renamed into place and never modified in place, so the mapping stays valid.
            unsafe { Component::deserialize_file(engine(), path) }
                .map(|c| (c, stamp))
                .map_err(|e| e.to_string())
        } else {
            Err("corrupt (checksum or trailer does not match)".to_owned())
        }
    };
    match verdict {
        Ok((component, stamp)) => {
            // Marking the entry used changes its stamp: the next load checks it again.
            let stamp = stamp.filter(|_| !mark_used(path));
            Ok((component, stamp))
        }
        Err(reason) => {
            tracing::warn!(path = %path.display(), %reason, "discarding unusable compiled driver cache entry");
            if let Err(e) = std::fs::remove_file(path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), error = %e, "could not remove unusable compiled driver cache entry");
            }
            Err(CompileSource::Recompiled)
        }
    }
}

/// Compile `bytes` (sha256 `wasm_sha`) and write the result into the cache `dir`; a failed
/// write is logged and the compiled component returned all the same.
fn compile_into(
    name_hint: &str,
    bytes: &[u8],
    dir: &Path,
    wasm_sha: &str,
) -> Result<Component, Error> {
    let engine = engine();
    let compiled = engine
        .precompile_component(bytes)
        .map_err(|e| not_a_component(name_hint, bytes, e))?;
    // SAFETY: `compiled` was just produced by this engine.
    let component = unsafe { Component::deserialize(engine, &compiled) }
        .map_err(|e| Error::Load(LoadError::Compile(format!("{name_hint}: {e}"))))?;
    let path = entry_path(dir, wasm_sha);
    match write_entry(dir, &path, &compiled) {
        Ok(()) => {
            prune(dir, std::time::SystemTime::now());
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "could not write compiled driver cache entry");
        }
    }
    Ok(component)
}

/// Hex sha256 of `file`'s bytes (from its current offset), read through a 64 KiB buffer.
fn sha256_reader(file: &std::fs::File) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    std::io::copy(
        &mut std::io::BufReader::with_capacity(64 * 1024, file),
        &mut hasher,
    )?;
    Ok(hex::encode(hasher.finalize()))
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

/// A cache entry's bytes for its checksum: mapped on Unix, so a fresh process takes them
/// from the page cache rather than faulting in, zeroing and filling a heap copy of the whole
/// entry (measured in a new `adaptor run`: the read of a 1.1 MB entry cost about as much as
/// the rest of the cached load). Sound for the same reason wasmtime's own mapping is: entries
/// are renamed into place, never rewritten.
enum EntryBytes {
    #[cfg(unix)]
    Mapped {
        ptr: std::ptr::NonNull<libc::c_void>,
        len: usize,
    },
    Read(Vec<u8>),
}

impl EntryBytes {
    /// The entry's bytes, with the stamp of the file they were read from.
    fn open(path: &Path) -> std::io::Result<(EntryBytes, Option<FileStamp>)> {
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            let file = std::fs::File::open(path)?;
            let meta = file.metadata()?;
            let stamp = FileStamp::of(&meta);
            let len = usize::try_from(meta.len())
                .map_err(|_| std::io::Error::other("cache entry larger than the address space"))?;
            if len == 0 {
                return Ok((EntryBytes::Read(Vec::new()), stamp));
            }
            // SAFETY: a private read-only mapping of a file we opened; the pointer is checked
            // below and unmapped exactly once, in `drop`. The file is closed after mapping
            // (the mapping keeps it).
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    file.as_raw_fd(),
                    0,
                )
            };
            if ptr == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            let ptr = std::ptr::NonNull::new(ptr).ok_or_else(std::io::Error::last_os_error)?;
            Ok((EntryBytes::Mapped { ptr, len }, stamp))
        }
        #[cfg(not(unix))]
        {
            std::fs::read(path).map(|bytes| (EntryBytes::Read(bytes), None))
        }
    }
}

impl std::ops::Deref for EntryBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            // SAFETY: `ptr` maps `len` readable bytes until `drop`.
            #[cfg(unix)]
            EntryBytes::Mapped { ptr, len } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr().cast::<u8>(), *len)
            },
            EntryBytes::Read(bytes) => bytes,
        }
    }
}

impl Drop for EntryBytes {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let EntryBytes::Mapped { ptr, len } = self {
            // SAFETY: unmapping the mapping made in `open`, once.
            if unsafe { libc::munmap(ptr.as_ptr(), *len) } != 0 {
                tracing::warn!(error = %std::io::Error::last_os_error(), "could not unmap a compiled driver cache entry");
            }
        }
    }
}

/// The artifact of a cache entry, if its trailer is intact and its checksum matches.
fn verified_artifact(entry: &[u8]) -> Option<&[u8]> {
    let artifact_len = entry.len().checked_sub(TRAILER_LEN)?;
    let (artifact, trailer) = entry.split_at(artifact_len);
    let (sum, magic) = trailer.split_at(16);
    (magic == CACHE_MAGIC && sum == checksum(artifact)).then_some(artifact)
}

/// XXH3-128 of `artifact`, little-endian.
fn checksum(artifact: &[u8]) -> [u8; 16] {
    xxhash_rust::xxh3::xxh3_128(artifact).to_le_bytes()
}

/// Record that the entry at `path` was just used: its modification time, moved to now when
/// it is older than [`MARK_USED_EVERY`] (one metadata read per load, a write once a day).
/// A cache this host may not write (another user's) is used all the same; the failure is
/// logged. Returns whether it moved the time.
fn mark_used(path: &Path) -> bool {
    let now = std::time::SystemTime::now();
    let stale = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|at| now.duration_since(at).unwrap_or_default() > MARK_USED_EVERY);
    if !stale {
        return false;
    }
    match std::fs::File::open(path).and_then(|f| f.set_modified(now)) {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "could not mark a compiled driver cache entry as used");
            false
        }
    }
}

/// Delete the entries of `dir` not used for [`UNUSED_FOR`] before `now` — entries of drivers,
/// wasmtime versions and layouts no host here loads any more — and temporary files a crashed
/// write left. Runs after this host wrote an entry (a compile: rare), never on a cached load.
/// Returns how many files were removed; a file that cannot be removed is logged. Deleting an
/// entry another host has mapped is safe: its mapping keeps the file's pages.
fn prune(dir: &Path, now: std::time::SystemTime) -> usize {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for item in listing.flatten() {
        let name = item.file_name();
        let name = name.to_string_lossy();
        if ![".cwasm", ".id", ".tmp"]
            .iter()
            .any(|end| name.ends_with(end))
        {
            continue;
        }
        let unused = item
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|at| now.duration_since(at).unwrap_or_default() > UNUSED_FOR);
        if !unused {
            continue;
        }
        match std::fs::remove_file(item.path()) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %item.path().display(), error = %e, "could not remove an unused compiled driver cache entry");
            }
        }
    }
    if removed > 0 {
        tracing::info!(dir = %dir.display(), removed, "removed compiled driver cache entries unused for 30 days");
    }
    removed
}

/// The temporary file a cache file at `path` is written to before it is renamed into place
/// (`.NAME.PID.tmp` beside it; [`prune`] deletes those a crashed write left).
pub(crate) fn temporary_beside(path: &Path) -> PathBuf {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

fn write_entry(dir: &Path, path: &Path, compiled: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let tmp = temporary_beside(path);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(compiled)?;
        f.write_all(&checksum(compiled))?;
        f.write_all(CACHE_MAGIC)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(artifact: &[u8]) -> Vec<u8> {
        let mut bytes = artifact.to_vec();
        bytes.extend_from_slice(&checksum(artifact));
        bytes.extend_from_slice(CACHE_MAGIC);
        bytes
    }

    #[test]
    fn entries_unused_for_thirty_days_are_pruned_and_a_use_marks_an_entry() {
        let dir = tempfile::tempdir().unwrap();
        let now = std::time::SystemTime::now();
        let aged = |name: &str, age: Duration| {
            let path = dir.path().join(name);
            std::fs::write(&path, b"entry").unwrap();
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(now - age)
                .unwrap();
            path
        };
        let day = Duration::from_secs(24 * 3600);
        let old = aged("old.cwasm", UNUSED_FOR + day);
        let old_tmp = aged(".old.cwasm.123.tmp", UNUSED_FOR + day);
        // A driver file's record (see `file_stamps`) not rewritten for as long goes too.
        let old_record = aged("2049-1234.id", UNUSED_FOR + day);
        let recent = aged("recent.cwasm", UNUSED_FOR - day);
        let other = aged("notes.txt", UNUSED_FOR + day);
        // Used two days ago: a load moves its time to now; one used within the day is left.
        let used = aged("used.cwasm", 2 * day);
        let fresh = aged("fresh.cwasm", Duration::from_secs(60));
        let fresh_before = std::fs::metadata(&fresh).unwrap().modified().unwrap();
        // Whether the time moved: the entry's stamp changed, so its record no longer holds.
        assert!(mark_used(&used));
        assert!(!mark_used(&fresh));
        let used_at = std::fs::metadata(&used).unwrap().modified().unwrap();
        assert!(now.duration_since(used_at).unwrap_or_default() < day);
        assert_eq!(
            std::fs::metadata(&fresh).unwrap().modified().unwrap(),
            fresh_before
        );

        assert_eq!(prune(dir.path(), now), 3);
        assert!(!old.exists() && !old_tmp.exists() && !old_record.exists());
        assert!(recent.exists() && used.exists() && fresh.exists());
        assert!(other.exists(), "only cache files are touched");
        // A year later everything unused since goes, the other file stays.
        assert_eq!(prune(dir.path(), now + 365 * day), 3);
        assert!(other.exists());
        assert_eq!(prune(&dir.path().join("missing"), now), 0);
    }

    #[test]
    fn an_entry_verifies_only_with_its_trailer_intact() {
        let artifact = b"\x7fELF compiled code".as_slice();
        let good = entry(artifact);
        assert_eq!(verified_artifact(&good), Some(artifact));
        // Any changed byte of the artifact, the checksum or the magic fails the check.
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x01;
            assert_eq!(verified_artifact(&bad), None, "byte {at} flipped");
        }
        // Shorter than a trailer, cut anywhere, or an entry of the previous layout
        // (magic first) is refused.
        assert_eq!(verified_artifact(&good[..TRAILER_LEN - 1]), None);
        for len in 0..good.len() {
            assert_eq!(verified_artifact(&good[..len]), None, "cut at {len}");
        }
        let mut old_layout = b"AACWASM1".to_vec();
        old_layout.extend_from_slice(&[0; 32]);
        old_layout.extend_from_slice(artifact);
        assert_eq!(verified_artifact(&old_layout), None);
    }

    /// The smallest components: a header, and a header with a custom section named `name`.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";
    fn component_named(name: u8) -> Vec<u8> {
        let mut bytes = EMPTY_COMPONENT.to_vec();
        bytes.extend_from_slice(&[0, 2, 1, name]);
        bytes
    }

    fn records(dir: &Path) -> Vec<file_stamps::Record> {
        let mut found = Vec::new();
        for item in std::fs::read_dir(dir).unwrap().flatten() {
            if item.path().extension().is_some_and(|e| e == "id") {
                let meta = std::fs::metadata(item.path()).unwrap();
                assert!(meta.is_file());
                found.push(item.path());
            }
        }
        found
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap())
            .map(|text| file_stamps::tests_parse(&text).expect("a well-formed record"))
            .collect()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_settled_driver_file_is_hashed_until_recorded_and_its_entry_checked_once_per_boot() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        std::fs::create_dir(&cache).unwrap();
        let file = dir.path().join("driver.wasm");
        let a = component_named(b'a');
        std::fs::write(&file, &a).unwrap();
        let later = || std::time::SystemTime::now() + file_stamps::SETTLE + Duration::from_secs(1);
        let load = |now| compile_cached_at("t", Wasm::File(&file), Some(&cache), now).unwrap();
        let stamp = || FileStamp::of(&std::fs::metadata(&file).unwrap()).unwrap();

        // Written just now: loaded and cached, never recorded (a write within the same clock
        // tick would keep its stamp).
        let now = std::time::SystemTime::now();
        assert_eq!(load(now).1, CompileSource::Compiled);
        assert_eq!(load(now).1, CompileSource::Cached);
        assert!(records(&cache).is_empty());

        // Settled: the next load records the sha256 and the entry whose checksum it checked.
        let (_, source, sha) = load(later());
        assert_eq!(
            (source, sha.as_str()),
            (CompileSource::Cached, sha256_hex(&a).as_str())
        );
        let [record] = records(&cache).try_into().unwrap();
        assert_eq!(
            (record.wasm, record.sha256.as_str()),
            (stamp(), sha.as_str())
        );
        let entry = entry_path(&cache, &sha);
        let entry_stamp = FileStamp::of(&std::fs::metadata(&entry).unwrap()).unwrap();
        assert_eq!(record.entry_verified_this_boot(), Some(entry_stamp));

        // While the stamps hold, neither file is read: a record naming another sha256 is
        // believed, and an entry recorded as checked is not checked again (its checksum
        // here damaged after the fact, the record made to match).
        let b = component_named(b'b');
        let sha_b = sha256_hex(&b);
        compile_cached_at("t", Wasm::Bytes(&b), Some(&cache), now).unwrap();
        let believed = file_stamps::Record {
            sha256: sha_b.clone(),
            entry: None,
            ..record.clone()
        };
        file_stamps::write(&cache, &believed);
        assert_eq!(load(later()).2, sha_b);
        let mut damaged = std::fs::read(&entry).unwrap();
        let at = damaged.len() - TRAILER_LEN;
        damaged[at] ^= 0xff;
        std::fs::write(&entry, &damaged).unwrap();
        let damaged_stamp = FileStamp::of(&std::fs::metadata(&entry).unwrap()).unwrap();
        let trusted = file_stamps::Record {
            entry: Some((file_stamps::boot_id().unwrap().to_owned(), damaged_stamp)),
            ..record.clone()
        };
        file_stamps::write(&cache, &trusted);
        assert_eq!(load(later()).1, CompileSource::Cached, "not checked again");
        // The same record from another boot: checked, found damaged, recompiled.
        let other_boot = file_stamps::Record {
            entry: Some((
                "00000000-0000-0000-0000-000000000000".to_owned(),
                damaged_stamp,
            )),
            ..record.clone()
        };
        file_stamps::write(&cache, &other_boot);
        assert_eq!(load(later()).1, CompileSource::Recompiled);
        // An entry written since its check (a new stamp): checked again.
        assert_eq!(load(later()).1, CompileSource::Cached);
        let [record] = records(&cache).try_into().unwrap();
        assert!(record.entry_verified_this_boot().is_some());
        let mut damaged = std::fs::read(&entry).unwrap();
        damaged[at] ^= 0xff;
        std::fs::write(&entry, &damaged).unwrap();
        assert_eq!(load(later()).1, CompileSource::Recompiled);

        // The driver file rewritten with other bytes of the same length, its modification
        // time put back: a new status-change time, so it is hashed again.
        let before = stamp();
        file_stamps::rewrite_keeping_mtime(&file, &b);
        assert_ne!(stamp(), before);
        assert_eq!(load(later()).2, sha_b);
        std::fs::write(&file, &a).unwrap();
        assert_eq!(load(later()).2, sha);
    }

    #[test]
    fn cache_keys_name_the_entry_layout() {
        // Entries of another layout are never looked up: the magic is part of the key.
        let key = cache_key("abc");
        let mut h = Sha256::new();
        h.update(b"abc\0wasmtime-");
        h.update(WASMTIME_VERSION.as_bytes());
        h.update(b"\0");
        h.update(ENGINE_CONFIG_ID.as_bytes());
        assert_ne!(key, hex::encode(h.finalize()), "the key without the layout");
        assert_eq!(key, cache_key("abc"));
        assert_ne!(key, cache_key("abd"));
    }
}
