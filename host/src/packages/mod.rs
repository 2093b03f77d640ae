//! Installed drivers: a [`DriverStore`] installs third-party driver components, records each
//! in a lock file, pins every load to the recorded sha256, verifies publisher signatures, and
//! lists, verifies and removes them; `name@version` selects one of several installed versions.
//!
//! Layout of a store rooted at `ROOT` (default `~/.local/share/agent-adaptor/store`, or
//! `$ADAPTOR_DRIVER_STORE`):
//!
//! ```text
//! ROOT/drivers.lock.json                     the lock file (outside the component tree)
//! ROOT/components/NAME/VERSION/driver.wasm   each installed component, never rewritten
//! ROOT/.install.lock                         serializes installs and removals (flock)
//! ```
//!
//! Owns: the store layout, the lock file's format and validation, the install transaction
//! (every check happens before anything is written; the component file lands before the lock
//! names it, so a failed install leaves the previous state intact), pinned loading (bytes vs
//! the lock's sha256, descriptor vs the lock's record), and ahead-of-time compilation at
//! install (the compiled code goes to the engine's cache, keyed by the component's sha256, so
//! the first run loads it instead of compiling). Must not: run sessions, or trust either the
//! lock or the bytes alone.

mod open;
mod signature;
mod source;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use signature::{SIGNATURE_ALGORITHM, SigningKey, TrustedKey};
pub use source::{MAX_COMPONENT_BYTES, WASM_LAYER_MEDIA_TYPE};

use crate::driver::{Driver, LoadOptions, Origin};
use crate::error::{Error, InstallError, LoadError, SignatureError};
use crate::wasm::engine::sha256_hex;

/// The environment variable that moves the user's driver store.
pub const DRIVER_STORE_ENV: &str = "ADAPTOR_DRIVER_STORE";

/// The lock file's name in the store root.
pub const LOCK_FILE: &str = "drivers.lock.json";

/// The lock file format this host writes and reads.
const LOCK_FORMAT: u32 = 1;

/// One installed driver, as the lock file records it and `adaptor drivers install` shows it
/// before installing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct InstalledDriver {
    /// The descriptor's machine name.
    pub name: String,
    /// The descriptor's version (semver).
    pub version: String,
    /// sha256 of the component's bytes (hex): every load checks it.
    pub sha256: String,
    /// The `adaptor:driver` contract version it was built against.
    pub wit_version: String,
    /// What it declares it can do (see [`Descriptor::capability_summary`](crate::Descriptor::capability_summary)).
    pub capabilities: String,
    /// The environment names its launches may set (`None`: a `0.1.0` driver, which cannot
    /// declare them; the host's denylist alone applies).
    pub launch_env: Option<Vec<String>>,
    /// The program it runs unless a config names another.
    pub default_program: String,
    /// Where it was installed from.
    pub source: String,
    /// The trusted key whose signature verified at install, if it was signed.
    pub signed_by: Option<String>,
    /// The component file, relative to the store root.
    pub file: String,
    /// When it was installed (seconds since the Unix epoch).
    pub installed_at: u64,
}

/// The lock file.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LockFile {
    format: u32,
    drivers: Vec<InstalledDriver>,
}

/// A driver read, loaded and checked, ready for [`DriverStore::install`]: nothing has been
/// written to the store yet (its compiled code is in the engine cache).
pub struct Package {
    record: InstalledDriver,
    bytes: Vec<u8>,
    driver: Driver,
}

impl std::fmt::Debug for Package {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Package")
            .field("record", &self.record)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl Package {
    /// What will be recorded: show it to the person installing.
    pub fn record(&self) -> &InstalledDriver {
        &self.record
    }

    /// The loaded driver (its descriptor, config schema, …).
    pub fn driver(&self) -> &Driver {
        &self.driver
    }
}

/// What [`DriverStore::install`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installed {
    /// Newly installed.
    New(InstalledDriver),
    /// The same bytes were installed under this name and version already (the file was
    /// checked, and restored if it had been damaged).
    Already(InstalledDriver),
}

impl Installed {
    /// The lock record either way.
    pub fn record(&self) -> &InstalledDriver {
        match self {
            Installed::New(r) | Installed::Already(r) => r,
        }
    }
}

/// The outcome of verifying one installed driver (see [`DriverStore::verify`]).
#[derive(Debug)]
pub struct Verification {
    /// The lock record.
    pub record: InstalledDriver,
    /// `Ok` when the bytes match the sha256 and the driver loads with the recorded
    /// descriptor.
    pub result: Result<(), Error>,
}

/// A directory of installed drivers and its lock file. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DriverStore {
    inner: Arc<StoreInner>,
}

#[derive(Debug)]
struct StoreInner {
    root: PathBuf,
    trusted: Vec<TrustedKey>,
    require_signatures: bool,
    load: LoadOptions,
    builtin_dirs: Option<Vec<PathBuf>>,
}

impl DriverStore {
    /// The user's store: `$ADAPTOR_DRIVER_STORE`, else `agent-adaptor/store` in the user
    /// data directory (`~/.local/share` on Linux).
    pub fn user() -> Result<DriverStore, InstallError> {
        let root = match std::env::var_os(DRIVER_STORE_ENV).filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => dirs::data_dir()
                .ok_or(InstallError::NoStore)?
                .join("agent-adaptor")
                .join("store"),
        };
        Ok(DriverStore::at(root))
    }

    /// A store rooted at `root` (created on the first install).
    pub fn at(root: impl Into<PathBuf>) -> DriverStore {
        DriverStore {
            inner: Arc::new(StoreInner {
                root: root.into(),
                trusted: Vec::new(),
                require_signatures: false,
                load: LoadOptions::default(),
                builtin_dirs: None,
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut StoreInner)) -> DriverStore {
        let mut inner = StoreInner {
            root: self.inner.root.clone(),
            trusted: self.inner.trusted.clone(),
            require_signatures: self.inner.require_signatures,
            load: self.inner.load.clone(),
            builtin_dirs: self.inner.builtin_dirs.clone(),
        };
        f(&mut inner);
        self.inner = Arc::new(inner);
        self
    }

    /// Accept signatures by `key` at install.
    pub fn trust(self, key: TrustedKey) -> DriverStore {
        self.edit(|i| i.trusted.push(key))
    }

    /// Refuse unsigned drivers at install (default: a signature is verified when present).
    pub fn require_signatures(self, required: bool) -> DriverStore {
        self.edit(|i| i.require_signatures = required)
    }

    /// Load options (the compile cache) for installs and loads.
    pub fn load_options(self, options: LoadOptions) -> DriverStore {
        self.edit(|i| i.load = options)
    }

    /// The directories whose built-in drivers' names installed drivers may not take
    /// (default: [`driver_dirs`](crate::driver_dirs)).
    pub fn builtin_dirs(self, dirs: Vec<PathBuf>) -> DriverStore {
        self.edit(|i| i.builtin_dirs = Some(dirs))
    }

    /// The store root.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The lock file's path.
    pub fn lock_path(&self) -> PathBuf {
        self.inner.root.join(LOCK_FILE)
    }

    /// Read the component at `source` (a `.wasm`, a directory holding one, or an OCI image
    /// layout), load it (compiling it into the engine cache), check its name and version,
    /// and verify its signature: `signature`, else `SOURCE.sig` beside a file when present.
    /// Writes nothing to the store.
    pub fn prepare(
        &self,
        source: &Path,
        signature: Option<&Path>,
    ) -> Result<Package, InstallError> {
        let read = source::read(source)?;
        let sha256 = sha256_hex(&read.bytes);
        let driver =
            Driver::from_bytes_with(&source.display().to_string(), &read.bytes, &self.inner.load)
                .map_err(|e| InstallError::NotADriver {
                source_path: source.display().to_string(),
                error: Box::new(e),
            })?;
        let d = driver.descriptor();
        check_name(&d.name)?;
        semver::Version::parse(&d.version).map_err(|e| InstallError::InvalidPackage {
            name: d.name.clone(),
            reason: format!("version `{}` is not semver: {e}", d.version),
        })?;
        let signed_by = self.check_signature(&read, signature, &sha256)?;
        let record = InstalledDriver {
            name: d.name.clone(),
            version: d.version.clone(),
            sha256,
            wit_version: d.wit_version.clone(),
            capabilities: d.capability_summary(),
            launch_env: d.launch_env.clone(),
            default_program: d.default_program.clone(),
            source: read.origin,
            signed_by,
            file: format!("components/{}/{}/driver.wasm", d.name, d.version),
            installed_at: 0,
        };
        Ok(Package {
            record,
            bytes: read.bytes,
            driver,
        })
    }

    fn check_signature(
        &self,
        read: &source::Read,
        explicit: Option<&Path>,
        sha256: &str,
    ) -> Result<Option<String>, InstallError> {
        let path = match explicit {
            Some(p) => Some(p.to_path_buf()),
            None => read.signature_beside.clone().filter(|p| p.is_file()),
        };
        let Some(path) = path else {
            if self.inner.require_signatures {
                return Err(SignatureError::Missing {
                    expected: read
                        .signature_beside
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_else(|| "a signature file".to_owned()),
                }
                .into());
            }
            return Ok(None);
        };
        let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
        Ok(Some(signature::verify(
            &path,
            &text,
            sha256,
            &self.inner.trusted,
        )?))
    }

    /// Install a prepared package: the component file, then the lock record. Refused when a
    /// built-in driver has the name, or the name and version are installed with other bytes;
    /// the same bytes again are [`Installed::Already`].
    pub fn install(&self, package: Package) -> Result<Installed, InstallError> {
        let Package {
            mut record, bytes, ..
        } = package;
        if let Some(by) = self.builtin_holder(&record.name) {
            return Err(InstallError::NameTaken {
                name: record.name,
                by,
            });
        }
        let _guard = self.exclusive()?;
        let mut lock = self.read_lock()?;
        let file = self.inner.root.join(&record.file);
        if let Some(existing) = lock
            .drivers
            .iter()
            .find(|d| d.name == record.name && d.version == record.version)
        {
            if existing.sha256 != record.sha256 {
                return Err(InstallError::VersionConflict {
                    name: record.name,
                    version: record.version,
                    installed: existing.sha256.clone(),
                    new: record.sha256,
                });
            }
            let existing = existing.clone();
            let intact = std::fs::read(&file).is_ok_and(|b| sha256_hex(&b) == existing.sha256);
            if !intact {
                write_atomic(&file, &bytes)?;
            }
            return Ok(Installed::Already(existing));
        }
        record.installed_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        write_atomic(&file, &bytes)?;
        lock.drivers.push(record.clone());
        lock.drivers.sort_by(|a, b| {
            a.name
                .cmp(&b.name)
                .then_with(|| version_order(&a.version, &b.version))
        });
        if let Err(e) = self.write_lock(&lock) {
            // The lock does not name the new file: take it back out.
            let _ = std::fs::remove_file(&file);
            let _ = file.parent().map(std::fs::remove_dir);
            return Err(e);
        }
        Ok(Installed::New(record))
    }

    /// Who holds `name` among the built-in drivers, if anyone.
    fn builtin_holder(&self, name: &str) -> Option<String> {
        let dirs = match &self.inner.builtin_dirs {
            Some(dirs) => dirs.clone(),
            None => crate::driver::driver_dirs(),
        };
        dirs.iter().find_map(|dir| {
            [format!("{name}.wasm"), format!("{name}.preset.json")]
                .into_iter()
                .map(|f| dir.join(f))
                .find(|p| p.is_file())
                .map(|p| format!("the built-in driver {}", p.display()))
        })
    }

    /// Every installed driver, by name then version.
    pub fn list(&self) -> Result<Vec<InstalledDriver>, InstallError> {
        Ok(self.read_lock()?.drivers)
    }

    /// Check every installed driver: its bytes against the lock's sha256, and its
    /// descriptor against the lock's record.
    pub fn verify(&self) -> Result<Vec<Verification>, InstallError> {
        Ok(self
            .list()?
            .into_iter()
            .map(|record| {
                let result = self.load_record(&record).map(|_| ());
                Verification { record, result }
            })
            .collect())
    }

    /// Remove `name` (every version when `version` is `None`, which must then be the only
    /// one… or name one) and return what was removed.
    pub fn remove(
        &self,
        name: &str,
        version: Option<&str>,
    ) -> Result<Vec<InstalledDriver>, InstallError> {
        let _guard = self.exclusive()?;
        let mut lock = self.read_lock()?;
        let spec = match version {
            Some(v) => format!("{name}@{v}"),
            None => name.to_owned(),
        };
        let matching: Vec<InstalledDriver> = lock
            .drivers
            .iter()
            .filter(|d| d.name == name && version.is_none_or(|v| d.version == v))
            .cloned()
            .collect();
        if matching.is_empty() {
            return Err(self.not_installed(&spec, &lock));
        }
        if version.is_none() && matching.len() > 1 {
            return Err(InstallError::Ambiguous {
                name: name.to_owned(),
                versions: versions(&matching),
            });
        }
        lock.drivers
            .retain(|d| !(d.name == name && version.is_none_or(|v| d.version == v)));
        self.write_lock(&lock)?;
        // The lock no longer names them; a file that cannot be removed is reported.
        for record in &matching {
            let file = self.inner.root.join(&record.file);
            match std::fs::remove_file(&file) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&file, e)),
            }
            if let Some(dir) = file.parent() {
                let _ = std::fs::remove_dir(dir);
                let _ = dir.parent().map(std::fs::remove_dir);
            }
        }
        Ok(matching)
    }

    /// The lock record `spec` (`name` or `name@version`) selects: `name` alone is the highest
    /// installed version.
    pub fn resolve(&self, spec: &str) -> Result<InstalledDriver, InstallError> {
        let lock = self.read_lock()?;
        let (name, version) = split_spec(spec);
        let mut matching: Vec<&InstalledDriver> = lock
            .drivers
            .iter()
            .filter(|d| d.name == name && version.is_none_or(|v| d.version == v))
            .collect();
        matching.sort_by(|a, b| version_order(&a.version, &b.version));
        matching
            .pop()
            .cloned()
            .ok_or_else(|| self.not_installed(spec, &lock))
    }

    /// Load the installed driver `spec` selects (`name` or `name@version`), pinned: the bytes
    /// must have the lock's sha256 and the descriptor must be the one recorded.
    pub fn open(&self, spec: &str) -> Result<Driver, Error> {
        let record = self.resolve(spec)?;
        let mut driver = self.load_record(&record)?;
        driver.set_origin(Origin::Installed {
            root: self.inner.root.clone(),
            load: self.inner.load.clone(),
            spec: spec.to_owned(),
        });
        Ok(driver)
    }

    fn load_record(&self, record: &InstalledDriver) -> Result<Driver, Error> {
        let path = self.component_path(record)?;
        let bytes = std::fs::read(&path).map_err(|source| LoadError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let found = sha256_hex(&bytes);
        if found != record.sha256 {
            return Err(LoadError::IntegrityMismatch {
                driver: format!("{}@{}", record.name, record.version),
                path: path.display().to_string(),
                expected: record.sha256.clone(),
                found,
            }
            .into());
        }
        let driver = Driver::from_bytes_with(
            &format!("{}@{}", record.name, record.version),
            &bytes,
            &self.inner.load,
        )?;
        let d = driver.descriptor();
        let checks: [(&str, String, String); 6] = [
            ("name", record.name.clone(), d.name.clone()),
            ("version", record.version.clone(), d.version.clone()),
            (
                "wit_version",
                record.wit_version.clone(),
                d.wit_version.clone(),
            ),
            (
                "capabilities",
                record.capabilities.clone(),
                d.capability_summary(),
            ),
            (
                "launch_env",
                format!("{:?}", record.launch_env),
                format!("{:?}", d.launch_env),
            ),
            (
                "default_program",
                record.default_program.clone(),
                d.default_program.clone(),
            ),
        ];
        if let Some((field, locked, found)) = checks.into_iter().find(|(_, l, f)| l != f) {
            return Err(LoadError::LockMismatch {
                driver: format!("{}@{}", record.name, record.version),
                field: field.to_owned(),
                locked,
                found,
            }
            .into());
        }
        Ok(driver.with_path(path))
    }

    /// The component file of `record`, which must stay inside the store.
    fn component_path(&self, record: &InstalledDriver) -> Result<PathBuf, InstallError> {
        let rel = Path::new(&record.file);
        let inside = rel
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !inside || !record.file.starts_with("components/") {
            return Err(InstallError::LockFile {
                path: self.lock_path().display().to_string(),
                reason: format!(
                    "{}@{}: `file` must be a path under components/, not {:?}",
                    record.name, record.version, record.file
                ),
            });
        }
        Ok(self.inner.root.join(rel))
    }

    fn not_installed(&self, spec: &str, lock: &LockFile) -> InstallError {
        InstallError::NotInstalled {
            spec: spec.to_owned(),
            installed: if lock.drivers.is_empty() {
                "none".to_owned()
            } else {
                lock.drivers
                    .iter()
                    .map(|d| format!("{}@{}", d.name, d.version))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        }
    }

    fn read_lock(&self) -> Result<LockFile, InstallError> {
        let path = self.lock_path();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(LockFile {
                    format: LOCK_FORMAT,
                    drivers: Vec::new(),
                });
            }
            Err(e) => return Err(io(&path, e)),
        };
        let invalid = |reason: String| InstallError::LockFile {
            path: path.display().to_string(),
            reason,
        };
        let lock: LockFile = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        if lock.format != LOCK_FORMAT {
            return Err(invalid(format!(
                "format {}; this host reads format {LOCK_FORMAT}",
                lock.format
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for d in &lock.drivers {
            let id = format!("{}@{}", d.name, d.version);
            check_name(&d.name).map_err(|e| invalid(format!("{id}: {e}")))?;
            semver::Version::parse(&d.version)
                .map_err(|e| invalid(format!("{id}: version is not semver: {e}")))?;
            if d.sha256.len() != 64 || !d.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(invalid(format!("{id}: sha256 must be 64 hex digits")));
            }
            if !seen.insert(id.clone()) {
                return Err(invalid(format!("{id} is recorded twice")));
            }
            self.component_path(d)?;
        }
        Ok(lock)
    }

    fn write_lock(&self, lock: &LockFile) -> Result<(), InstallError> {
        let text = serde_json::to_string_pretty(lock).expect("lock file serializes") + "\n";
        write_atomic(&self.lock_path(), text.as_bytes())
    }

    /// Hold the store's install lock (exclusive, released on drop).
    fn exclusive(&self) -> Result<std::fs::File, InstallError> {
        let root = &self.inner.root;
        std::fs::create_dir_all(root).map_err(|e| io(root, e))?;
        let path = root.join(".install.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| io(&path, e))?;
        file.lock().map_err(|e| io(&path, e))?;
        Ok(file)
    }
}

/// `name@version` → (`name`, `Some(version)`); `name` → (`name`, `None`).
pub(crate) fn split_spec(spec: &str) -> (&str, Option<&str>) {
    match spec.split_once('@') {
        Some((name, version)) => (name, Some(version)),
        None => (spec, None),
    }
}

/// Semver order (a version that does not parse sorts first).
fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    match (semver::Version::parse(a), semver::Version::parse(b)) {
        (Ok(a), Ok(b)) => a.cmp(&b),
        (Ok(_), Err(_)) => std::cmp::Ordering::Greater,
        (Err(_), Ok(_)) => std::cmp::Ordering::Less,
        (Err(_), Err(_)) => a.cmp(b),
    }
}

fn versions(records: &[InstalledDriver]) -> String {
    records
        .iter()
        .map(|d| d.version.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `name` can be an installed driver's name: 1–64 of `a-z 0-9 - _`, starting with
/// a letter or digit (so it is also a file name, a crate name and a `--driver` value).
pub fn is_installable_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
}

fn check_name(name: &str) -> Result<(), InstallError> {
    if is_installable_name(name) {
        Ok(())
    } else {
        Err(InstallError::InvalidPackage {
            name: name.to_owned(),
            reason: "the name must be 1-64 of a-z, 0-9, `-`, `_`, starting with a letter or digit"
                .to_owned(),
        })
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), InstallError> {
    use std::io::Write;
    let dir = path.parent().expect("store paths have a parent");
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    // Unique per process and per write, so no two writers ever share a temporary file.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id(),
        WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(path, e)
    })
}

fn io(path: &Path, source: std::io::Error) -> InstallError {
    InstallError::Io {
        path: path.display().to_string(),
        source,
    }
}
