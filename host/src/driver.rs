//! Loading drivers: [`Driver`] (a compiled, described component plus its config) and the
//! directories where built drivers are found.
//!
//! Owns: reading `.wasm` files, compile-or-load through the engine cache, checking that the
//! component is a driver of this world (the error says what is missing), reading and
//! validating the descriptor, and config validation through the guest. Must not: run
//! sessions (see `run/`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::descriptor::Descriptor;
use crate::error::{Error, LoadError};
use crate::wasm::engine::{CompileSource, compile_cached, default_cache_dir, sha256_hex};
use crate::wasm::guest::{DriverPre, GuestInstance, GuestLimits, prepare};

/// Options for loading a driver.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Where compiled code is cached (`None` disables the cache). Default: `$ADAPTOR_CACHE_DIR`
    /// or the user cache directory.
    pub cache_dir: Option<PathBuf>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            cache_dir: default_cache_dir(),
        }
    }
}

pub(crate) struct LoadedDriver {
    pub(crate) name: Arc<str>,
    pub(crate) descriptor: Descriptor,
    pub(crate) pre: DriverPre,
    pub(crate) sha256: String,
    pub(crate) source: CompileSource,
    pub(crate) path: Option<PathBuf>,
}

/// A loaded driver component and the configuration runs will use.
///
/// Cheap to clone: the compiled component is shared.
#[derive(Clone)]
pub struct Driver {
    pub(crate) loaded: Arc<LoadedDriver>,
    pub(crate) config: serde_json::Value,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("name", &self.loaded.name)
            .field("version", &self.loaded.descriptor.version)
            .field("sha256", &self.loaded.sha256)
            .field("config", &self.config)
            .finish()
    }
}

fn run_sync<F: std::future::Future>(f: F) -> F::Output {
    // Guest calls made while loading need no reactor: they are plain wasm execution.
    futures::executor::block_on(f)
}

impl Driver {
    /// Load a driver from a `.wasm` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Driver, Error> {
        Self::from_file_with(path, &LoadOptions::default())
    }

    /// Load a driver from a `.wasm` file with explicit options.
    pub fn from_file_with(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Driver, Error> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut driver = Self::load(&path.display().to_string(), &bytes, options)?;
        if let Some(loaded) = Arc::get_mut(&mut driver.loaded) {
            loaded.path = Some(path.to_path_buf());
        }
        Ok(driver)
    }

    /// Load a driver from component bytes. `name_hint` names it in errors.
    pub fn from_bytes(name_hint: &str, bytes: &[u8]) -> Result<Driver, Error> {
        Self::load(name_hint, bytes, &LoadOptions::default())
    }

    /// Load from bytes with explicit options.
    pub fn from_bytes_with(
        name_hint: &str,
        bytes: &[u8],
        options: &LoadOptions,
    ) -> Result<Driver, Error> {
        Self::load(name_hint, bytes, options)
    }

    fn load(name_hint: &str, bytes: &[u8], options: &LoadOptions) -> Result<Driver, Error> {
        let sha256 = sha256_hex(bytes);
        let (component, source) =
            compile_cached(name_hint, bytes, &sha256, options.cache_dir.as_deref())?;
        let pre = prepare(name_hint, &component)?;
        let hint: Arc<str> = Arc::from(name_hint);
        let mut instance = run_sync(GuestInstance::new(hint, &pre, GuestLimits::default()))?;
        let descriptor = run_sync(instance.describe())?.map_err(|reason| {
            Error::Load(LoadError::InvalidDescriptor {
                driver: name_hint.to_owned(),
                reason,
            })
        })?;
        Ok(Driver {
            loaded: Arc::new(LoadedDriver {
                name: Arc::from(descriptor.name.as_str()),
                descriptor,
                pre,
                sha256,
                source,
                path: None,
            }),
            config: serde_json::Value::Object(Default::default()),
        })
    }

    /// Load a built-in driver by name (`reference`, `claude`, …) from the driver directories
    /// (see [`driver_dirs`]).
    pub fn builtin(name: &str) -> Result<Driver, Error> {
        let dirs = driver_dirs();
        for dir in &dirs {
            let candidate = dir.join(format!("{name}.wasm"));
            if candidate.is_file() {
                return Self::from_file(candidate);
            }
        }
        Err(Error::Load(LoadError::UnknownDriver {
            name: name.to_owned(),
            searched: if dirs.is_empty() {
                "no driver directories (set ADAPTOR_DRIVER_PATH)".to_owned()
            } else {
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        }))
    }

    /// Load by name or path: a value ending in `.wasm` or containing `/` is a file.
    pub fn open(name_or_path: &str) -> Result<Driver, Error> {
        if name_or_path.ends_with(".wasm") || name_or_path.contains('/') {
            Self::from_file(name_or_path)
        } else {
            Self::builtin(name_or_path)
        }
    }

    /// Replace the configuration (a JSON object), validated by the driver now.
    pub fn with_config(self, config: serde_json::Value) -> Result<Driver, Error> {
        let text = config.to_string();
        let mut instance = run_sync(GuestInstance::new(
            self.loaded.name.clone(),
            &self.loaded.pre,
            GuestLimits::default(),
        ))?;
        match run_sync(instance.validate_config(&text))? {
            Ok(()) => Ok(Driver {
                loaded: self.loaded,
                config,
            }),
            Err(e) => Err(e.into_error(self.loaded.name.to_string())),
        }
    }

    /// The driver's stable config fingerprint (`sha256:…`) for the current config.
    pub fn config_fingerprint(&self) -> Result<String, Error> {
        let mut instance = run_sync(GuestInstance::new(
            self.loaded.name.clone(),
            &self.loaded.pre,
            GuestLimits::default(),
        ))?;
        run_sync(instance.config_fingerprint(&self.config.to_string()))?
            .map_err(|e| e.into_error(self.loaded.name.to_string()))
    }

    /// Instantiate the driver in a fresh sandbox and check that its descriptor is unchanged
    /// (descriptors must be deterministic). Cheap: used by health checks and benchmarks.
    pub fn instantiate_check(&self) -> Result<(), Error> {
        let mut instance = run_sync(GuestInstance::new(
            self.loaded.name.clone(),
            &self.loaded.pre,
            GuestLimits::default(),
        ))?;
        let first = run_sync(instance.describe())?;
        let again = run_sync(instance.describe())?;
        let descriptor = first.map_err(|reason| {
            Error::Load(LoadError::InvalidDescriptor {
                driver: self.loaded.name.to_string(),
                reason,
            })
        })?;
        let same_instance = again.ok();
        if same_instance.as_ref() != Some(&descriptor) {
            return Err(Error::Load(LoadError::InvalidDescriptor {
                driver: self.loaded.name.to_string(),
                reason: "describe() returned different descriptors on two calls".into(),
            }));
        }
        if descriptor != self.loaded.descriptor {
            return Err(Error::Load(LoadError::InvalidDescriptor {
                driver: self.loaded.name.to_string(),
                reason: "describe() returned a different descriptor on a new instance".into(),
            }));
        }
        Ok(())
    }

    /// The program this driver runs as configured: the config's `command`, else the
    /// descriptor's default program.
    /// The process grant of a run (or an Inspect) of this driver in `workspace`: the
    /// configured program, the embedder's `rules`, and the paths the caller's config names in
    /// fields the driver's schema marks with `x-adaptor-path`.
    pub(crate) fn process_grant(
        &self,
        workspace: PathBuf,
        rules: &crate::grant::GrantRules<'_>,
    ) -> Result<crate::grant::ProcessGrant, Error> {
        let config_paths = crate::grant::confine::config_paths(
            &self.loaded.descriptor.config_schema,
            &self.config,
        )
        .map_err(|r| Error::ContainmentUnavailable {
            driver: self.name().to_owned(),
            reason: format!("the driver config's `{}`: {}", r.pointer, r.reason),
        })?;
        Ok(crate::grant::ProcessGrant::resolve(
            self.name(),
            self.configured_program(),
            workspace,
            rules,
            config_paths,
        ))
    }

    pub(crate) fn configured_program(&self) -> String {
        self.config
            .get("command")
            .and_then(|c| c.as_str())
            .unwrap_or(&self.loaded.descriptor.default_program)
            .to_owned()
    }

    /// Machine name.
    pub fn name(&self) -> &str {
        &self.loaded.name
    }

    /// The capability table.
    pub fn descriptor(&self) -> &Descriptor {
        &self.loaded.descriptor
    }

    /// The configuration runs will use.
    pub fn config(&self) -> &serde_json::Value {
        &self.config
    }

    /// sha256 of the component bytes.
    pub fn sha256(&self) -> &str {
        &self.loaded.sha256
    }

    /// Whether this load compiled, used the cache, or recompiled after a corrupt entry.
    pub fn compile_source(&self) -> CompileSource {
        self.loaded.source
    }

    /// The file it was loaded from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.loaded.path.as_deref()
    }
}

/// Directories searched for built-in drivers, in order:
/// 1. each entry of `$ADAPTOR_DRIVER_PATH` (`:`-separated);
/// 2. `drivers/` beside the running executable, and in its parent and grandparent
///    directories (so `target/debug/adaptor` finds `target/drivers/`);
/// 3. `share/agent-adaptor/drivers` under the executable's prefix (`PREFIX/bin/adaptor`
///    finds `PREFIX/share/agent-adaptor/drivers`, where `./x.sh install` puts them);
/// 4. the user data directory (`~/.local/share/agent-adaptor/drivers`).
///
/// Only directories that exist are returned.
pub fn driver_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(path) = std::env::var_os("ADAPTOR_DRIVER_PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    if let Ok(exe) = std::env::current_exe() {
        let mut dir = exe.parent().map(Path::to_path_buf);
        for _ in 0..3 {
            let Some(d) = dir else { break };
            dirs.push(d.join("drivers"));
            dir = d.parent().map(Path::to_path_buf);
        }
        if let Some(prefix) = exe.parent().and_then(Path::parent) {
            dirs.push(prefix.join("share").join("agent-adaptor").join("drivers"));
        }
    }
    if let Some(data) = dirs::data_dir() {
        dirs.push(data.join("agent-adaptor").join("drivers"));
    }
    let mut seen = std::collections::HashSet::new();
    dirs.into_iter()
        .filter(|d| d.is_dir() && has_wasm(d))
        .filter(|d| seen.insert(d.canonicalize().unwrap_or_else(|_| d.clone())))
        .collect()
}

fn has_wasm(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "wasm"))
        })
        .unwrap_or(false)
}

/// Every `.wasm` in the driver directories (first occurrence of each file name wins), loaded.
pub fn available_drivers() -> Vec<(PathBuf, Result<Driver, Error>)> {
    let mut names = std::collections::HashSet::new();
    let mut out = Vec::new();
    for dir in driver_dirs() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
            .collect();
        files.sort();
        for file in files {
            if names.insert(file.file_name().map(|n| n.to_owned())) {
                let loaded = Driver::from_file(&file);
                out.push((file, loaded));
            }
        }
    }
    out
}
