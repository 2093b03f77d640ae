//! Loading drivers: [`Driver`] (a compiled, described component plus its config), the
//! directories where built drivers are found, and driver presets.
//!
//! Owns: reading `.wasm` files, compile-or-load through the engine cache, checking that the
//! component is a driver of this world (the error says what is missing), reading and
//! validating the descriptor, config validation through the guest, and presets: a
//! `NAME.preset.json` file in a driver directory (`{"driver": "acp", "config": {…}}`) makes
//! `NAME` a built-in driver name that loads another driver with a base config, which every
//! config given later is laid over key by key. Must not: run sessions (see `run/`), or know
//! the driver store (`packages` opens installed drivers, and holds `Driver::open` and
//! `Driver::reload`, which reach it).
//!
//! Shared loads: [`LoadedDrivers`] keeps the last files a long-lived process loaded through
//! it, and a later load of the same unchanged file (by its stamp, as the compiled cache's
//! records judge it) shares that load's component instead of reading, checking and
//! describing it again. Opt-in: `Driver::open` and the other loads share nothing.
//!
//! The spare instance: loading instantiates the driver to call `describe`, and
//! [`Driver::with_config`] calls `validate-config` on that same instance; the instance is then
//! kept ([`Spare`]) for the driver's first run, which takes it instead of instantiating anew
//! (and skips its own `validate-config` when the spare has validated exactly the run's
//! config). A run on a fresh instance makes the same calls, `validate-config` first; the spare
//! has had `describe` before it, a deterministic query the contract has the host call once
//! per load. One instance instead of three took 0.1–0.5 ms off a one-shot `adaptor run` in
//! interleaved rounds (docs/performance.md, "The host's own overhead"). Only one run takes it
//! (later runs and later attempts instantiate), only with the limits it was made with
//! ([`GuestLimits::default`]), and it is dropped with the last clone of the driver. Until
//! then it holds the linear memory `describe` and `validate-config` grew it to (within
//! `memory_bytes`, 64 MiB by default), which a
//! loaded driver that never runs now keeps for as long as it is kept.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::descriptor::Descriptor;
use crate::error::{Error, LoadError};
use crate::wasm::engine::{CompileSource, Wasm, compile_cached, default_cache_dir};
use crate::wasm::file_stamps::FileStamp;
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
/// Cheap to clone: the compiled component is shared. The instance that loading made (to
/// read the descriptor) and [`with_config`](Driver::with_config) validated on is kept for
/// the first run of the driver or any of its clones; every other run gets a fresh one (see
/// the `driver` module's docs). It is freed with the last clone.
#[derive(Clone)]
pub struct Driver {
    pub(crate) loaded: Arc<LoadedDriver>,
    pub(crate) config: serde_json::Value,
    /// The preset this driver was loaded through, if any.
    preset: Option<Arc<Preset>>,
    /// Where it came from, for [`Driver::reload`].
    origin: Origin,
    /// The config as the caller gave it (before a preset's base was laid under it).
    given: serde_json::Value,
    /// The instance loading (and configuring) made, for the first run (module docs).
    /// Shared by clones: only one run takes it.
    spare: Arc<std::sync::Mutex<Option<Spare>>>,
}

/// An instance kept for a driver's first run (see the module docs): made with
/// [`GuestLimits::default`], `describe` called, and `validate-config` at most once, with
/// `validated`, which it accepted.
struct Spare {
    instance: GuestInstance,
    validated: Option<String>,
}

impl Spare {
    fn kept(spare: Option<Spare>) -> Arc<std::sync::Mutex<Option<Spare>>> {
        Arc::new(std::sync::Mutex::new(spare))
    }
}

/// Where a [`Driver`] was loaded from: what [`Driver::reload`] reads again.
#[derive(Debug, Clone)]
pub(crate) enum Origin {
    /// Bytes the caller passed: nothing to re-read.
    Bytes,
    /// A `.wasm` file.
    File(PathBuf),
    /// A built-in name (a `.wasm` or a preset in the driver directories).
    Builtin(String),
    /// An installed driver: `name` (the highest version when reloaded) or `name@version`
    /// in the driver store at `root` (see `packages`).
    Installed {
        /// The store's root.
        root: PathBuf,
        /// Its load options.
        load: LoadOptions,
        /// What was asked for.
        spec: String,
    },
}

/// A driver preset: a name for another driver with a base config.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetFile {
    /// The built-in driver it loads (a plain name, not a path or another preset).
    driver: String,
    /// The base config (a JSON object).
    config: serde_json::Map<String, serde_json::Value>,
    /// What it is, for listings.
    #[serde(default)]
    description: Option<String>,
}

#[derive(Debug)]
struct Preset {
    name: String,
    config: serde_json::Map<String, serde_json::Value>,
    description: Option<String>,
    path: PathBuf,
}

/// File name suffix of presets in driver directories.
const PRESET_SUFFIX: &str = ".preset.json";

/// The stamp of the file at `path` (following links), if it can be read.
fn file_stamp(path: &Path) -> Option<FileStamp> {
    std::fs::metadata(path)
        .ok()
        .as_ref()
        .and_then(FileStamp::of)
}

/// Drivers a long-lived process loaded, shared with its later loads of the same unchanged
/// files: [`LoadedDrivers::open`] is [`Driver::open`], but a driver file (a path, or a
/// built-in name and the driver a preset names) loaded through the same `LoadedDrivers`
/// before, and not changed since, is not read, checked against the compiled cache or
/// instantiated again; the new driver shares that load's component, descriptor and compiled
/// code. A resident host (`adaptor serve`) loads each run's driver this way in about
/// 0.1 ms instead of a millisecond (see `docs/performance.md`).
///
/// Unchanged means the same stamp (device, inode, size, modification and status-change
/// times) as when it was loaded, with both times then at least two seconds old, as the
/// compiled cache's own records require: any write to the file since gives it a later
/// status-change time, and a file replaced by another has another inode. The last eight
/// files loaded are kept (each with its compiled code), until this value is dropped. Not
/// shared: drivers of the driver store (each load checks the bytes against their pinned
/// sha256), and loads without a compiled cache ([`LoadOptions::cache_dir`] `None`). A
/// shared driver reports the [`compile_source`](Driver::compile_source) of the load it
/// shares.
#[derive(Default)]
pub struct LoadedDrivers {
    kept: std::sync::Mutex<Vec<Kept>>,
}

/// One driver file a [`LoadedDrivers`] keeps.
struct Kept {
    path: PathBuf,
    cache_dir: PathBuf,
    stamp: FileStamp,
    loaded: Arc<LoadedDriver>,
    /// An instance made ahead ([`LoadedDrivers::make_spares`]) for the next load to hand
    /// out, so that load's run does not instantiate the driver on its way.
    spare: Option<GuestInstance>,
}

impl std::fmt::Debug for LoadedDrivers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.kept().iter().map(|k| &k.path))
            .finish()
    }
}

impl LoadedDrivers {
    /// How many driver files are kept.
    const KEEP: usize = 8;

    /// None loaded yet.
    pub fn new() -> LoadedDrivers {
        LoadedDrivers::default()
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Vec<Kept>> {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Make, for each kept driver whose instance made ahead was handed out (or that never
    /// had one), the instance its next load hands out: a run on it then skips instantiating
    /// the driver (about 0.1 ms). Call it when idle; a resident host (`adaptor serve`) does
    /// after each run, once its caller has its exit code. An instance that cannot be made
    /// is logged and left to the next load, which reports the failure as its own.
    pub fn make_spares(&self) {
        let wanted: Vec<Arc<LoadedDriver>> = self
            .kept()
            .iter()
            .filter(|k| k.spare.is_none())
            .map(|k| k.loaded.clone())
            .collect();
        for loaded in wanted {
            let made = run_sync(GuestInstance::new(
                loaded.name.clone(),
                &loaded.pre,
                GuestLimits::default(),
            ));
            match made {
                Ok(instance) => {
                    if let Some(k) = self
                        .kept()
                        .iter_mut()
                        .find(|k| Arc::ptr_eq(&k.loaded, &loaded) && k.spare.is_none())
                    {
                        k.spare = Some(instance);
                    }
                }
                Err(e) => {
                    tracing::warn!(driver = %loaded.name, error = %e, "could not make a driver instance ahead of its next run")
                }
            }
        }
    }

    /// How many kept drivers have an instance made ahead, waiting for their next load.
    pub fn spares(&self) -> usize {
        self.kept().iter().filter(|k| k.spare.is_some()).count()
    }

    /// The component loaded from `path` with `cache_dir` when its stamp was `stamp`, and the
    /// instance made ahead for it, if any (taken).
    fn find(
        &self,
        path: &Path,
        cache_dir: &Path,
        stamp: &FileStamp,
    ) -> Option<(Arc<LoadedDriver>, Option<GuestInstance>)> {
        self.kept()
            .iter_mut()
            .find(|k| k.path == path && k.cache_dir == cache_dir && k.stamp == *stamp)
            .map(|k| (k.loaded.clone(), k.spare.take()))
    }

    /// Keep `loaded`, read from `path` (stamped `stamp`) with `cache_dir`, in place of any
    /// earlier load of that path, dropping the oldest beyond [`Self::KEEP`].
    fn keep(&self, path: &Path, cache_dir: &Path, stamp: FileStamp, loaded: &Arc<LoadedDriver>) {
        let mut kept = self.kept();
        kept.retain(|k| !(k.path == path && k.cache_dir == cache_dir));
        kept.insert(
            0,
            Kept {
                path: path.to_path_buf(),
                cache_dir: cache_dir.to_path_buf(),
                stamp,
                loaded: loaded.clone(),
                spare: None,
            },
        );
        kept.truncate(Self::KEEP);
    }
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("name", &self.loaded.name)
            .field("version", &self.loaded.descriptor.version)
            .field("sha256", &self.loaded.sha256)
            .field("config", &self.config)
            .field("preset", &self.preset.as_ref().map(|p| &p.name))
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
        Self::from_file_sharing(path.as_ref(), options, None)
    }

    /// [`Driver::from_file_with`], sharing the component of an earlier load of the same,
    /// unchanged file kept in `shared` (see [`LoadedDrivers`]), and keeping this one there.
    pub(crate) fn from_file_sharing(
        path: &Path,
        options: &LoadOptions,
        shared: Option<&LoadedDrivers>,
    ) -> Result<Driver, Error> {
        let kept = shared
            .zip(options.cache_dir.as_deref())
            .and_then(|(shared, dir)| {
                let stamp = file_stamp(path).filter(|s| s.settled(std::time::SystemTime::now()))?;
                Some((shared, dir, stamp))
            });
        if let Some((shared, dir, stamp)) = &kept
            && let Some((loaded, spare)) = shared.find(path, dir, stamp)
        {
            return Ok(Driver {
                loaded,
                config: serde_json::Value::Object(Default::default()),
                preset: None,
                origin: Origin::File(path.to_path_buf()),
                given: serde_json::Value::Object(Default::default()),
                spare: Spare::kept(spare.map(|instance| Spare {
                    instance,
                    validated: None,
                })),
            });
        }
        let mut driver = Self::load(&path.display().to_string(), Wasm::File(path), options)?;
        driver.origin = Origin::File(path.to_path_buf());
        let driver = driver.with_path(path.to_path_buf());
        // Kept only if the file read is the one stamped before the read.
        if let Some((shared, dir, stamp)) = kept
            && file_stamp(path) == Some(stamp)
        {
            shared.keep(path, dir, stamp, &driver.loaded);
        }
        Ok(driver)
    }

    /// Record the file the driver was read from.
    pub(crate) fn with_path(mut self, path: PathBuf) -> Driver {
        if let Some(loaded) = Arc::get_mut(&mut self.loaded) {
            loaded.path = Some(path);
        }
        self
    }

    pub(crate) fn set_origin(&mut self, origin: Origin) {
        self.origin = origin;
    }

    pub(crate) fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The config as the caller gave it (a preset's base not laid under it).
    pub(crate) fn given_config(&self) -> &serde_json::Value {
        &self.given
    }

    /// Load a driver from component bytes. `name_hint` names it in errors.
    pub fn from_bytes(name_hint: &str, bytes: &[u8]) -> Result<Driver, Error> {
        Self::load(name_hint, Wasm::Bytes(bytes), &LoadOptions::default())
    }

    /// Load from bytes with explicit options.
    pub fn from_bytes_with(
        name_hint: &str,
        bytes: &[u8],
        options: &LoadOptions,
    ) -> Result<Driver, Error> {
        Self::load(name_hint, Wasm::Bytes(bytes), options)
    }

    fn load(name_hint: &str, wasm: Wasm<'_>, options: &LoadOptions) -> Result<Driver, Error> {
        let (component, source, sha256) =
            compile_cached(name_hint, wasm, options.cache_dir.as_deref())?;
        let pre = prepare(name_hint, &component)?;
        let hint: Arc<str> = Arc::from(name_hint);
        let mut instance = run_sync(GuestInstance::new(hint, &pre, GuestLimits::default()))?;
        let descriptor = run_sync(instance.describe())?.map_err(|reason| {
            Error::Load(LoadError::InvalidDescriptor {
                driver: name_hint.to_owned(),
                reason,
            })
        })?;
        let name: Arc<str> = Arc::from(descriptor.name.as_str());
        instance.name_driver(name.clone());
        let spare = Spare {
            instance,
            validated: None,
        };
        Ok(Driver {
            loaded: Arc::new(LoadedDriver {
                name,
                descriptor,
                pre,
                sha256,
                source,
                path: None,
            }),
            config: serde_json::Value::Object(Default::default()),
            preset: None,
            origin: Origin::Bytes,
            given: serde_json::Value::Object(Default::default()),
            spare: Spare::kept(Some(spare)),
        })
    }

    /// Load a built-in driver by name (`reference`, `claude`, …) from the driver directories
    /// (see [`driver_dirs`]). A name with a `NAME.preset.json` there and no `NAME.wasm` is a
    /// preset (`gemini`, `qwen`, `opencode` are presets of `acp`): the driver it names, with
    /// its config as the base of every config (see [`Driver::with_config`]).
    pub fn builtin(name: &str) -> Result<Driver, Error> {
        Self::builtin_sharing(name, None)
    }

    /// [`Driver::builtin`], sharing loads through `shared` (see [`LoadedDrivers`]).
    pub(crate) fn builtin_sharing(
        name: &str,
        shared: Option<&LoadedDrivers>,
    ) -> Result<Driver, Error> {
        // The candidates in order, each checked only as far as the lookup needs: the first
        // match is the one in `driver_dirs()`, without listing and resolving every directory
        // first (0.1 ms of every `adaptor run`).
        for dir in candidate_driver_dirs() {
            let candidate = dir.join(format!("{name}.wasm"));
            let preset = dir.join(format!("{name}{PRESET_SUFFIX}"));
            let loaded = if candidate.is_file() {
                Self::from_file_sharing(&candidate, &LoadOptions::default(), shared)
            } else if preset.is_file() && has_wasm(&dir) {
                Self::from_preset(name, &preset, shared)
            } else {
                continue;
            };
            let mut driver = loaded?;
            driver.origin = Origin::Builtin(name.to_owned());
            return Ok(driver);
        }
        Err(Self::unknown(name, &driver_dirs()))
    }

    /// Load the preset file `path`, named `name` (its driver shared through `shared`).
    fn from_preset(
        name: &str,
        path: &Path,
        shared: Option<&LoadedDrivers>,
    ) -> Result<Driver, Error> {
        let invalid = |reason: String| {
            Error::Load(LoadError::InvalidPreset {
                path: path.display().to_string(),
                reason,
            })
        };
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let file: PresetFile = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        let plain = !file.driver.is_empty()
            && file
                .driver
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !plain {
            return Err(invalid(format!(
                "`driver` must be a built-in driver's plain name, not {:?}",
                file.driver
            )));
        }
        // The driver a preset names is a `.wasm` (presets do not chain).
        let wasm = candidate_driver_dirs()
            .into_iter()
            .map(|d| d.join(format!("{}.wasm", file.driver)))
            .find(|p| p.is_file())
            .ok_or_else(|| Self::unknown(&file.driver, &driver_dirs()))?;
        let base = Self::from_file_sharing(&wasm, &LoadOptions::default(), shared)?;
        // A preset is a file beside the drivers, not the caller: like a descriptor's default
        // program, its `command` is a bare name (PATH decides where it is), and it sets no
        // field the host would grant a path for (`x-adaptor-path`: only the caller's own
        // config may name paths to grant).
        if let Some(command) = file.config.get("command")
            && !command
                .as_str()
                .is_some_and(|c| !c.trim().is_empty() && !c.contains('/'))
        {
            return Err(invalid(format!(
                "`command` must be a bare program name (resolved through PATH), not {command}; \
                 a path is the caller's to give (`--config`)"
            )));
        }
        let config = serde_json::Value::Object(file.config.clone());
        match crate::grant::confine::config_paths(&base.descriptor().config_schema, &config) {
            Ok(paths) if paths.is_empty() => {}
            Ok(paths) => {
                return Err(invalid(format!(
                    "`{}` names a path the host would grant; only the caller's config may",
                    paths[0].pointer.trim_start_matches('/')
                )));
            }
            Err(refused) => {
                return Err(invalid(format!(
                    "`{}`: {}",
                    refused.pointer.trim_start_matches('/'),
                    refused.reason
                )));
            }
        }
        let preset = Arc::new(Preset {
            name: name.to_owned(),
            config: file.config,
            description: file.description,
            path: path.to_path_buf(),
        });
        let mut driver = base.with_config(serde_json::Value::Object(preset.config.clone()))?;
        driver.preset = Some(preset);
        Ok(driver)
    }

    fn unknown(name: &str, dirs: &[PathBuf]) -> Error {
        Error::Load(LoadError::UnknownDriver {
            name: name.to_owned(),
            searched: if dirs.is_empty() {
                "no driver directories (set ADAPTOR_DRIVER_PATH)".to_owned()
            } else {
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        })
    }

    /// Replace the configuration (a JSON object), validated by the driver now (on the
    /// instance the first run will then use, if no other config was validated on it). A driver
    /// loaded through a preset keeps the preset's config as the base: each top-level key of
    /// `config` replaces the preset's key of that name, the others stay (so
    /// `{"model": "…"}` on `gemini` keeps its `command` and `agent`).
    pub fn with_config(self, config: serde_json::Value) -> Result<Driver, Error> {
        let config_given = config.clone();
        let config = match (&self.preset, config) {
            (Some(preset), serde_json::Value::Object(over)) => {
                let mut merged = preset.config.clone();
                merged.extend(over);
                serde_json::Value::Object(merged)
            }
            (_, config) => config,
        };
        let given = config_given;
        let text = config.to_string();
        // The load's spare, if no other config has been validated on it (a spare validates
        // at most one), else a fresh instance; either becomes the new driver's spare.
        let unvalidated = self
            .spare
            .lock()
            .ok()
            .and_then(|mut spare| match spare.as_ref() {
                Some(s) if s.validated.is_none() => spare.take().map(|s| s.instance),
                _ => None,
            });
        let mut instance = match unvalidated {
            Some(instance) => instance,
            None => run_sync(GuestInstance::new(
                self.loaded.name.clone(),
                &self.loaded.pre,
                GuestLimits::default(),
            ))?,
        };
        match run_sync(instance.validate_config(&text))? {
            Ok(()) => Ok(Driver {
                loaded: self.loaded,
                config,
                preset: self.preset,
                origin: self.origin,
                given,
                spare: Spare::kept(Some(Spare {
                    instance,
                    validated: Some(text),
                })),
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
        )
        .with_launch_env(self.loaded.descriptor.launch_env.clone()))
    }

    /// The spare instance for a run with `limits` and the config text `config` (this
    /// driver's), and whether it has validated that config already; `None` when another run
    /// took it, or it was made with other limits (it is dropped then: the next run would not
    /// fit it either). The run sets the instance's interrupt itself.
    pub(crate) fn take_spare(
        &self,
        limits: &GuestLimits,
        config: &str,
    ) -> Option<(GuestInstance, bool)> {
        let spare = self.spare.lock().ok()?.take()?;
        if spare.instance.limits() != limits {
            return None;
        }
        let validated = match spare.validated.as_deref() {
            None => false,
            Some(text) if text == config => true,
            // Validated for another config: not this run's instance.
            Some(_) => return None,
        };
        Some((spare.instance, validated))
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

    /// The preset it was loaded through (`gemini` for `acp`), if any.
    pub fn preset(&self) -> Option<&str> {
        self.preset.as_ref().map(|p| p.name.as_str())
    }

    /// The preset's description, if it has one.
    pub fn preset_description(&self) -> Option<&str> {
        self.preset.as_ref().and_then(|p| p.description.as_deref())
    }

    /// The preset file it was loaded through, if any.
    pub fn preset_path(&self) -> Option<&Path> {
        self.preset.as_ref().map(|p| p.path.as_path())
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
    let mut seen = std::collections::HashSet::new();
    candidate_driver_dirs()
        .into_iter()
        .filter(|d| d.is_dir() && has_wasm(d))
        .filter(|d| seen.insert(d.canonicalize().unwrap_or_else(|_| d.clone())))
        .collect()
}

/// The places [`driver_dirs`] looks at, in its order, before it keeps those that exist and
/// hold a driver (and drops repeats).
fn candidate_driver_dirs() -> Vec<PathBuf> {
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
    dirs
}

/// The preset name of a `NAME.preset.json` path.
fn preset_name(path: &Path) -> Option<&str> {
    path.file_name()?
        .to_str()?
        .strip_suffix(PRESET_SUFFIX)
        .filter(|n| !n.is_empty())
}

fn has_wasm(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "wasm"))
        })
        .unwrap_or(false)
}

/// Every `.wasm` and preset in the driver directories (first occurrence of each name wins),
/// loaded.
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
            .filter(|p| p.extension().is_some_and(|x| x == "wasm") || preset_name(p).is_some())
            .collect();
        files.sort();
        for file in files {
            let (name, preset) = match preset_name(&file) {
                Some(name) => (name.to_owned(), true),
                None => (
                    file.file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    false,
                ),
            };
            if names.insert(name.clone()) {
                let loaded = if preset {
                    Driver::from_preset(&name, &file, None)
                } else {
                    Driver::from_file(&file)
                };
                out.push((file, loaded));
            }
        }
    }
    out
}
