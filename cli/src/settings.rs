//! The CLI's defaults: the config file, merged with flags, and `adaptor config show`.
//!
//! Owns reading `config.toml` (strictly: an unknown key or a wrong type is an error naming
//! the file and the key), the precedence (a flag wins over the file, the file over the
//! built-in default) and the record of where each effective value came from. Must not: run
//! anything or open stores.
//!
//! The file is `$ADAPTOR_CONFIG` when set (then it must exist), else
//! `$XDG_CONFIG_HOME/agent-adaptor/config.toml`, else `~/.config/agent-adaptor/config.toml`
//! (a missing default file means no defaults):
//!
//! ```toml
//! driver = "claude"            # --driver
//! model = "sonnet"             # --model
//! policy = "workspace-write"   # --policy
//! store = "postgres://u@127.0.0.1/threads"   # --store
//!
//! require-signatures = false  # `drivers install` refuses unsigned drivers when true
//!
//! [drivers.claude]             # the driver config (--config) used when the driver is `claude`
//! command = "/opt/claude/bin/claude"
//!
//! [trusted-keys]               # publishers whose driver signatures `drivers install` accepts
//! acme = "ed25519:3b6a27bc…"
//! ```
//!
//! `--config` replaces the file's table for that driver whole (like `--policy` replaces a
//! policy), so what a run gets is always one object someone wrote down.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The built-in default driver.
pub const DEFAULT_DRIVER: &str = "reference";
/// Names the config file explicitly.
pub const CONFIG_ENV: &str = "ADAPTOR_CONFIG";

/// `--policy` presets (and `policy = …` in the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyPreset {
    /// Each CLI's own settings (portable to every driver).
    Inherit,
    /// Read the workspace, change nothing.
    ReadOnly,
    /// Write inside the workspace only.
    WorkspaceWrite,
    /// No sandbox.
    Unrestricted,
}

impl PolicyPreset {
    /// The policy this preset stands for.
    pub fn policy(self) -> adaptor::Policy {
        match self {
            PolicyPreset::Inherit => adaptor::Policy::default(),
            PolicyPreset::ReadOnly => adaptor::Policy::read_only(),
            PolicyPreset::WorkspaceWrite => adaptor::Policy::workspace_write(),
            PolicyPreset::Unrestricted => adaptor::Policy::unrestricted(),
        }
    }

    /// The name as written on the command line and in the file.
    pub fn name(self) -> &'static str {
        match self {
            PolicyPreset::Inherit => "inherit",
            PolicyPreset::ReadOnly => "read-only",
            PolicyPreset::WorkspaceWrite => "workspace-write",
            PolicyPreset::Unrestricted => "unrestricted",
        }
    }
}

/// The file's contents.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    driver: Option<String>,
    model: Option<String>,
    policy: Option<PolicyPreset>,
    store: Option<String>,
    #[serde(default)]
    drivers: BTreeMap<String, toml::Table>,
    /// Publisher keys `adaptor drivers install` accepts signatures from: name → `ed25519:HEX`.
    #[serde(default, rename = "trusted-keys")]
    trusted_keys: BTreeMap<String, String>,
    /// Refuse unsigned drivers at install.
    #[serde(default, rename = "require-signatures")]
    require_signatures: bool,
}

/// Where the config file is and whether it was read.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    /// Its path (`None` when no location could be found: no HOME, no XDG_CONFIG_HOME).
    pub path: Option<PathBuf>,
    /// Whether it existed and was read.
    pub loaded: bool,
}

/// Where an effective value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A command-line flag.
    Flag(&'static str),
    /// The config file (the key, e.g. `model` or `drivers.claude`).
    File(String),
    /// The built-in default.
    Default,
}

impl Source {
    /// A short description for `config show`.
    pub fn describe(&self) -> String {
        match self {
            Source::Flag(flag) => format!("flag {flag}"),
            Source::File(key) => format!("config file ({key})"),
            Source::Default => "default".into(),
        }
    }
}

/// A value and where it came from.
#[derive(Debug, Clone)]
pub struct Setting<T> {
    /// The value (`None`: not set anywhere; the meaning of "unset" is the default's).
    pub value: T,
    /// Its origin.
    pub source: Source,
}

/// `--driver` and `--config`, shared by the commands that load a driver.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct DriverArgs {
    /// Built-in driver name or path to a `.wasm` driver [default: reference, or `driver` in
    /// the config file].
    #[arg(long)]
    pub driver: Option<String>,
    /// Driver config as a JSON object, or `@file.json` (replaces the config file's
    /// `[drivers.NAME]` table).
    #[arg(long)]
    pub config: Option<String>,
}

/// What every command runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The config file consulted.
    pub file: ConfigFile,
    /// The driver name or path.
    pub driver: Setting<String>,
    /// The driver config.
    pub driver_config: Setting<Option<serde_json::Value>>,
    /// The model.
    pub model: Setting<Option<String>>,
    /// The policy preset.
    pub policy: Setting<Option<PolicyPreset>>,
    /// The thread store (SQLite path or `postgres://` URL).
    pub store: Setting<Option<String>>,
    /// `[trusted-keys]`: name → `ed25519:HEX`.
    pub trusted_keys: Vec<(String, String)>,
    /// `require-signatures`.
    pub require_signatures: bool,
}

/// A config file or `--config` value that cannot be used (exit code 2).
#[derive(Debug)]
pub struct SettingsError(pub String);

impl std::fmt::Display for SettingsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The flag values a command was given (`None` = not given).
#[derive(Debug, Default, Clone)]
pub struct Flags<'a> {
    /// `--driver`.
    pub driver: Option<&'a str>,
    /// `--config`.
    pub config: Option<&'a str>,
    /// `--model`.
    pub model: Option<&'a str>,
    /// `--policy`.
    pub policy: Option<PolicyPreset>,
    /// `--store`.
    pub store: Option<&'a str>,
}

/// The config file's location (see the module docs).
pub fn config_path() -> (Option<PathBuf>, bool) {
    if let Some(explicit) = std::env::var_os(CONFIG_ENV).filter(|v| !v.is_empty()) {
        return (Some(PathBuf::from(explicit)), true);
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| dirs::home_dir().map(|h| h.join(".config")));
    (
        base.map(|b| b.join("agent-adaptor").join("config.toml")),
        false,
    )
}

/// Read the config file and merge the flags over it.
pub fn resolve(flags: &Flags<'_>) -> Result<Settings, SettingsError> {
    let (path, explicit) = config_path();
    let (file, loaded) = match &path {
        Some(p) => match std::fs::read_to_string(p) {
            Ok(text) => (parse_file(p, &text)?, true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
                (FileSettings::default(), false)
            }
            Err(e) => {
                return Err(SettingsError(format!(
                    "cannot read the config file {}: {e}",
                    p.display()
                )));
            }
        },
        None => (FileSettings::default(), false),
    };
    merge(ConfigFile { path, loaded }, file, flags)
}

fn parse_file(path: &Path, text: &str) -> Result<FileSettings, SettingsError> {
    toml::from_str(text).map_err(|e| {
        SettingsError(format!(
            "config file {}: {}",
            path.display(),
            e.to_string().trim_end()
        ))
    })
}

fn merge(
    file_info: ConfigFile,
    file: FileSettings,
    flags: &Flags<'_>,
) -> Result<Settings, SettingsError> {
    let driver = pick(
        flags.driver.map(str::to_owned),
        "--driver",
        file.driver,
        "driver",
    )
    .map_value(|v| v.unwrap_or_else(|| DEFAULT_DRIVER.to_owned()));
    let driver_config = match flags.config {
        Some(text) => Setting {
            value: Some(parse_config(text)?),
            source: Source::Flag("--config"),
        },
        None => match file.drivers.get(&driver.value) {
            Some(table) => Setting {
                value: Some(serde_json::to_value(table).map_err(|e| {
                    SettingsError(format!(
                        "config file: [drivers.{}] cannot be used as JSON: {e}",
                        driver.value
                    ))
                })?),
                source: Source::File(format!("drivers.{}", toml_key(&driver.value))),
            },
            None => Setting {
                value: None,
                source: Source::Default,
            },
        },
    };
    Ok(Settings {
        file: file_info,
        trusted_keys: file.trusted_keys.into_iter().collect(),
        require_signatures: file.require_signatures,
        driver,
        driver_config,
        model: pick(
            flags.model.map(str::to_owned),
            "--model",
            file.model,
            "model",
        ),
        policy: pick(flags.policy, "--policy", file.policy, "policy"),
        store: pick(
            flags.store.map(str::to_owned),
            "--store",
            file.store,
            "store",
        ),
    })
}

fn pick<T>(
    flag: Option<T>,
    flag_name: &'static str,
    file: Option<T>,
    key: &str,
) -> Setting<Option<T>> {
    match (flag, file) {
        (Some(v), _) => Setting {
            value: Some(v),
            source: Source::Flag(flag_name),
        },
        (None, Some(v)) => Setting {
            value: Some(v),
            source: Source::File(key.to_owned()),
        },
        (None, None) => Setting {
            value: None,
            source: Source::Default,
        },
    }
}

impl<T> Setting<T> {
    fn map_value<U>(self, f: impl FnOnce(T) -> U) -> Setting<U> {
        Setting {
            value: f(self.value),
            source: self.source,
        }
    }
}

/// A TOML key as it must be written in a table header.
fn toml_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

/// `--config JSON|@file`: a JSON object.
pub fn parse_config(text: &str) -> Result<serde_json::Value, SettingsError> {
    let text = match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| SettingsError(format!("cannot read {path}: {e}")))?,
        None => text.to_owned(),
    };
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| SettingsError(format!("--config is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(SettingsError("--config must be a JSON object".into()));
    }
    Ok(value)
}

/// Examples shown by `adaptor config show --help`.
pub const SHOW_EXAMPLES: &str = "\
Examples:
  adaptor config show                      # the defaults every command starts from
  adaptor config show --driver claude      # what `adaptor run --driver claude` would use
  adaptor config show --json
  $EDITOR \"$(adaptor config path)\"        # edit the file (see the README for its keys)";

/// `adaptor config show`: each effective setting, its value and its origin.
pub fn show(flags: &Flags<'_>, json: bool) -> std::process::ExitCode {
    use crate::output::sanitize;
    use crate::{errln, outln};
    let settings = match resolve(flags) {
        Ok(s) => s,
        Err(e) => {
            errln!("adaptor: {}", sanitize(&e.0));
            return std::process::ExitCode::from(crate::EXIT_USAGE);
        }
    };
    let default_store = || match adaptor::store::SqliteStore::default_path() {
        Ok(path) => path.display().to_string(),
        Err(e) => format!("unavailable: {e}"),
    };
    let rows: Vec<(&str, String, String)> = vec![
        (
            "driver",
            settings.driver.value.clone(),
            settings.driver.source.describe(),
        ),
        (
            "config",
            settings
                .driver_config
                .value
                .as_ref()
                .map(|c| c.to_string())
                .unwrap_or_else(|| "{} (the driver's defaults)".into()),
            settings.driver_config.source.describe(),
        ),
        (
            "model",
            settings
                .model
                .value
                .clone()
                .unwrap_or_else(|| "(the driver's default)".into()),
            settings.model.source.describe(),
        ),
        (
            "policy",
            settings
                .policy
                .value
                .unwrap_or(PolicyPreset::Inherit)
                .name()
                .to_owned(),
            settings.policy.source.describe(),
        ),
        (
            "store",
            settings.store.value.clone().unwrap_or_else(default_store),
            match settings.store.source {
                Source::Default => "default (SQLite file; $ADAPTOR_THREAD_DB moves it)".into(),
                ref other => other.describe(),
            },
        ),
    ];
    let file = match (&settings.file.path, settings.file.loaded) {
        (Some(p), true) => format!("{} (loaded)", p.display()),
        (Some(p), false) => format!("{} (not found: built-in defaults)", p.display()),
        (None, _) => "none (no HOME or XDG_CONFIG_HOME)".into(),
    };
    if json {
        let mut object = serde_json::Map::new();
        object.insert(
            "config_file".into(),
            serde_json::json!({
                "path": settings.file.path.as_ref().map(|p| p.display().to_string()),
                "loaded": settings.file.loaded,
            }),
        );
        let values = [
            serde_json::json!(settings.driver.value),
            serde_json::json!(settings.driver_config.value),
            serde_json::json!(settings.model.value),
            serde_json::json!(
                settings
                    .policy
                    .value
                    .unwrap_or(PolicyPreset::Inherit)
                    .name()
            ),
            serde_json::json!(settings.store.value.clone().unwrap_or_else(default_store)),
        ];
        for ((name, _, source), value) in rows.iter().zip(values) {
            object.insert(
                (*name).into(),
                serde_json::json!({"value": value, "source": source}),
            );
        }
        outln!("{}", serde_json::Value::Object(object));
    } else {
        outln!("config file  {}", sanitize(&file));
        for (name, value, source) in &rows {
            outln!("{name:<12} {:<48} {source}", sanitize(value));
        }
    }
    std::process::ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> FileSettings {
        parse_file(Path::new("config.toml"), text).unwrap()
    }

    fn info() -> ConfigFile {
        ConfigFile {
            path: None,
            loaded: true,
        }
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let f = file(
            "driver = \"claude\"\nmodel = \"sonnet\"\npolicy = \"read-only\"\n\
             [drivers.claude]\ncommand = \"/opt/claude\"\n[drivers.codex]\nsandbox = true\n",
        );
        let s = merge(info(), f, &Flags::default()).unwrap();
        assert_eq!(s.driver.value, "claude");
        assert_eq!(s.driver.source, Source::File("driver".into()));
        assert_eq!(
            s.driver_config.value,
            Some(serde_json::json!({"command": "/opt/claude"}))
        );
        assert_eq!(
            s.driver_config.source,
            Source::File("drivers.claude".into())
        );
        assert_eq!(s.model.value.as_deref(), Some("sonnet"));
        assert_eq!(s.policy.value, Some(PolicyPreset::ReadOnly));
        assert_eq!(s.store.source, Source::Default);

        let f = file("driver = \"claude\"\nmodel = \"sonnet\"\n[drivers.codex]\nx = 1\n");
        let flags = Flags {
            driver: Some("codex"),
            model: Some("o3"),
            ..Flags::default()
        };
        let s = merge(info(), f, &flags).unwrap();
        assert_eq!(s.driver.source, Source::Flag("--driver"));
        assert_eq!(s.driver_config.value, Some(serde_json::json!({"x": 1})));
        assert_eq!(s.model.value.as_deref(), Some("o3"));

        // --config replaces the table whole.
        let f = file("[drivers.reference]\ncommand = \"/x\"\nstate_dir = \"/s\"\n");
        let flags = Flags {
            config: Some(r#"{"state_dir":"/t"}"#),
            ..Flags::default()
        };
        let s = merge(info(), f, &flags).unwrap();
        assert_eq!(s.driver.value, DEFAULT_DRIVER);
        assert_eq!(s.driver.source, Source::Default);
        assert_eq!(
            s.driver_config.value,
            Some(serde_json::json!({"state_dir": "/t"}))
        );
    }

    #[test]
    fn bad_files_name_the_key() {
        for (text, needle) in [
            ("modle = \"x\"", "modle"),
            ("policy = \"yolo\"", "yolo"),
            ("model = 3", "model"),
            ("[drivers]\nclaude = 1", "claude"),
            ("driver = ", "config.toml"),
        ] {
            let err = parse_file(Path::new("config.toml"), text).unwrap_err();
            assert!(err.0.contains(needle), "{text:?}: {}", err.0);
            assert!(err.0.contains("config.toml"), "{}", err.0);
        }
    }

    #[test]
    fn quoted_driver_paths_are_keys() {
        let f = file("[drivers.\"/opt/vendor.wasm\"]\ncommand = \"/opt/vendor\"\n");
        let flags = Flags {
            driver: Some("/opt/vendor.wasm"),
            ..Flags::default()
        };
        let s = merge(info(), f, &flags).unwrap();
        assert_eq!(
            s.driver_config.source,
            Source::File("drivers.\"/opt/vendor.wasm\"".into())
        );
    }
}
