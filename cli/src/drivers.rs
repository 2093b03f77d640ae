//! `adaptor drivers …`: list the drivers this machine has (built-in and installed), and
//! install, verify, remove and sign third-party drivers, and scaffold new ones.
//!
//! Owns: the subcommands' arguments, the confirmation before an install (what the driver
//! declares, shown to the person installing; `--yes` for scripts), and the output. The
//! store's rules (lock file, pinning, signatures) are the library's `DriverStore`. Must not: run prompts.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use adaptor::{DriverStore, InstallError, Installed, InstalledDriver, SigningKey, TrustedKey};
use clap::Subcommand;

use crate::output::sanitize;
use crate::settings::{self, Flags};
use crate::{EXIT_DRIVER_FAULT, EXIT_RUN_FAILED, EXIT_USAGE, errln, outln};

/// Examples shown by `adaptor drivers --help`.
pub const EXAMPLES: &str = "\
Examples:
  adaptor drivers                                  # built-in and installed drivers
  adaptor drivers install ./my-driver.wasm         # shows what it declares, asks, installs
  adaptor drivers install ./image-layout --yes     # an OCI image layout (oras, skopeo)
  adaptor run --driver my-driver@1.2.0 \"Hi\"        # one of several installed versions
  adaptor drivers verify                           # every installed driver against the lock
  adaptor drivers remove my-driver@1.2.0
  adaptor drivers keygen --out acme.key            # a publisher key; sign with it:
  adaptor drivers sign ./my-driver.wasm --key acme.key
  adaptor drivers new my-driver                    # a driver crate that builds and passes";

/// `adaptor drivers` subcommands.
#[derive(Subcommand)]
pub enum DriversCommand {
    /// List built-in and installed drivers (the default).
    List {
        /// Print JSON Lines.
        #[arg(long)]
        json: bool,
    },
    /// Install a driver component: a `.wasm`, a directory holding one, or an OCI image
    /// layout. Shows what it declares and asks first; compiles it ahead of time.
    Install {
        /// The `.wasm`, directory or OCI image layout.
        source: PathBuf,
        /// A detached signature file (default: `SOURCE.sig` when it exists).
        #[arg(long, value_name = "FILE")]
        signature: Option<PathBuf>,
        /// Install without asking.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Check every installed driver's bytes and descriptor against the lock file.
    Verify {
        /// Print JSON Lines.
        #[arg(long)]
        json: bool,
    },
    /// Remove an installed driver (`NAME`, or `NAME@VERSION` when several are installed).
    Remove {
        /// `NAME` or `NAME@VERSION`.
        spec: String,
    },
    /// Make a publisher key pair: the secret to a file, the public key on stdout.
    Keygen {
        /// Where to write the secret key (created; refused if it exists).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Sign a driver component: writes `DRIVER.wasm.sig`.
    Sign {
        /// The component.
        component: PathBuf,
        /// The secret key file (from `keygen`).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
    },
    /// Scaffold a driver crate against adaptor-sdk in `./NAME` (or `--dir`): it builds,
    /// passes its tests and `adaptortest check`, and installs, before you change a line.
    New {
        /// The driver's name (`a-z 0-9 - _`).
        name: String,
        /// Where to create it (default `./NAME`; must not exist, or be empty).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The adaptor-sdk crate to depend on (default: the `sdk-guest` of the checkout this
        /// `adaptor` was built from).
        #[arg(long, value_name = "PATH")]
        sdk: Option<PathBuf>,
    },
}

/// Run `adaptor drivers [COMMAND]`.
pub fn main(command: Option<DriversCommand>, json: bool) -> ExitCode {
    match command.unwrap_or(DriversCommand::List { json }) {
        DriversCommand::List { json } => list(json),
        DriversCommand::Install {
            source,
            signature,
            yes,
        } => install(&source, signature.as_deref(), yes),
        DriversCommand::Verify { json } => verify(json),
        DriversCommand::Remove { spec } => remove(&spec),
        DriversCommand::Keygen { out } => keygen(&out),
        DriversCommand::Sign { component, key } => sign(&component, &key),
        DriversCommand::New { name, dir, sdk } => crate::scaffold::new(&name, dir, sdk),
    }
}

/// The user's store with the config file's trusted keys.
fn store() -> Result<DriverStore, ExitCode> {
    let settings = settings::resolve(&Flags::default()).map_err(|e| {
        errln!("adaptor: {}", sanitize(&e.0));
        ExitCode::from(EXIT_USAGE)
    })?;
    let mut store = DriverStore::user().map_err(|e| fail(&e))?;
    for (name, key) in &settings.trusted_keys {
        let key = TrustedKey::parse(name, key).map_err(|e| {
            errln!(
                "adaptor: config file [trusted-keys]: {}",
                sanitize(&e.to_string())
            );
            ExitCode::from(EXIT_USAGE)
        })?;
        store = store.trust(key);
    }
    Ok(store.require_signatures(settings.require_signatures))
}

/// A store error: nothing changed; a usage or setup error (exit 2).
fn fail(e: &InstallError) -> ExitCode {
    errln!("adaptor: {}", sanitize(&e.to_string()));
    ExitCode::from(EXIT_USAGE)
}

fn list(json: bool) -> ExitCode {
    let builtins = adaptor::available_drivers();
    let installed = match DriverStore::user().and_then(|s| s.list()) {
        Ok(list) => list,
        Err(e) => {
            errln!("adaptor: the driver store: {}", sanitize(&e.to_string()));
            Vec::new()
        }
    };
    if builtins.is_empty() && installed.is_empty() {
        errln!(
            "adaptor: no drivers found (searched: {}); build them with `./x.sh build-drivers`, set ADAPTOR_DRIVER_PATH, or `adaptor drivers install`",
            adaptor::driver_dirs()
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        return ExitCode::from(EXIT_USAGE);
    }
    let mut failed = false;
    for (path, loaded) in builtins {
        match loaded {
            Ok(d) if json => {
                let line = serde_json::json!({
                    "path": path.display().to_string(),
                    "sha256": d.sha256(),
                    "preset": d.preset(),
                    "config": d.preset().map(|_| d.config()),
                    "descriptor": d.descriptor(),
                });
                outln!("{line}");
            }
            Ok(d) => {
                let desc = d.descriptor();
                let (name, display) = match d.preset() {
                    Some(preset) => (
                        preset.to_owned(),
                        d.preset_description()
                            .map(str::to_owned)
                            .unwrap_or_else(|| format!("preset of {}", desc.name)),
                    ),
                    None => (desc.name.clone(), desc.display_name.clone()),
                };
                outln!(
                    "{:<12} {:<8} {:<24} {}  [{}]",
                    sanitize(&name),
                    sanitize(&desc.version),
                    sanitize(&display),
                    desc.capability_summary(),
                    sanitize(&path.display().to_string())
                );
            }
            Err(e) => {
                failed = true;
                errln!("{}: {}", path.display(), sanitize(&e.to_string()));
            }
        }
    }
    for record in installed {
        if json {
            outln!(
                "{}",
                serde_json::json!({ "installed": record, "spec": format!("{}@{}", record.name, record.version) })
            );
        } else {
            outln!(
                "{:<12} {:<8} {:<24} {}  [installed, sha256:{}{}]",
                sanitize(&record.name),
                sanitize(&record.version),
                sanitize(&format!("{}@{}", record.name, record.version)),
                sanitize(&record.capabilities),
                &record.sha256[..12],
                record
                    .signed_by
                    .as_deref()
                    .map(|k| format!(", signed by {}", sanitize(k)))
                    .unwrap_or_default()
            );
        }
    }
    if failed {
        ExitCode::from(EXIT_DRIVER_FAULT)
    } else {
        ExitCode::SUCCESS
    }
}

/// What the person installing is shown.
fn describe(record: &InstalledDriver) -> String {
    let env = match &record.launch_env {
        None => "undeclared (a 0.1.0 driver: the host's denylist applies)".to_owned(),
        Some(names) if names.is_empty() => "none".to_owned(),
        Some(names) => names.join(", "),
    };
    format!(
        "  driver        {}@{}\n  sha256        {}\n  contract      adaptor:driver@{}\n  capabilities  {}\n  environment   {}\n  program       {}\n  signature     {}\n  from          {}",
        record.name,
        record.version,
        record.sha256,
        record.wit_version,
        record.capabilities,
        env,
        record.default_program,
        record
            .signed_by
            .as_deref()
            .map(|k| format!("verified, trusted key `{k}`"))
            .unwrap_or_else(|| "unsigned".to_owned()),
        record.source,
    )
}

fn install(source: &Path, signature: Option<&Path>, yes: bool) -> ExitCode {
    let store = match store() {
        Ok(s) => s,
        Err(code) => return code,
    };
    let package = match store.prepare(source, signature) {
        Ok(p) => p,
        Err(e) => return fail(&e),
    };
    errln!(
        "Installing into {}:\n{}",
        store.root().display(),
        sanitize(&describe(package.record()))
    );
    if !yes {
        if !std::io::stdin().is_terminal() {
            errln!("adaptor: not a terminal, so nothing was installed; pass --yes to install");
            return ExitCode::from(EXIT_USAGE);
        }
        errln!("Install it? [y/N] ");
        let mut answer = String::new();
        if std::io::stdin().read_line(&mut answer).is_err()
            || !matches!(answer.trim(), "y" | "Y" | "yes")
        {
            errln!("adaptor: nothing was installed");
            return ExitCode::from(EXIT_RUN_FAILED);
        }
    }
    match store.install(package) {
        Ok(Installed::New(r)) => {
            errln!(
                "installed {}@{} (run it with --driver {}@{} or --driver {})",
                r.name,
                r.version,
                r.name,
                r.version,
                r.name
            );
            ExitCode::SUCCESS
        }
        Ok(Installed::Already(r)) => {
            errln!(
                "{}@{} was already installed with these bytes",
                r.name,
                r.version
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

fn verify(json: bool) -> ExitCode {
    let store = match DriverStore::user() {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    let results = match store.verify() {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    let mut bad = false;
    for v in &results {
        let spec = format!("{}@{}", v.record.name, v.record.version);
        let error = v.result.as_ref().err().map(|e| e.to_string());
        bad |= error.is_some();
        if json {
            outln!(
                "{}",
                serde_json::json!({ "spec": spec, "ok": error.is_none(), "error": error })
            );
        } else {
            match &error {
                None => outln!("ok      {}", sanitize(&spec)),
                Some(e) => outln!("FAILED  {}: {}", sanitize(&spec), sanitize(e)),
            }
        }
    }
    if results.is_empty() && !json {
        errln!("no installed drivers ({})", store.lock_path().display());
    }
    if bad {
        ExitCode::from(EXIT_RUN_FAILED)
    } else {
        ExitCode::SUCCESS
    }
}

fn remove(spec: &str) -> ExitCode {
    let store = match DriverStore::user() {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    let (name, version) = match spec.split_once('@') {
        Some((n, v)) => (n, Some(v)),
        None => (spec, None),
    };
    match store.remove(name, version) {
        Ok(removed) => {
            for r in removed {
                errln!("removed {}@{}", r.name, r.version);
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

fn keygen(out: &Path) -> ExitCode {
    use std::io::Write;
    let key = SigningKey::generate();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let written = options
        .open(out)
        .and_then(|mut f| f.write_all(format!("{}\n", key.to_secret_text()).as_bytes()));
    if let Err(e) = written {
        errln!("adaptor: {}: {e}", out.display());
        return ExitCode::from(EXIT_USAGE);
    }
    errln!(
        "secret key written to {} (keep it private); the public key, for [trusted-keys]:",
        out.display()
    );
    outln!("{}", key.public_key());
    ExitCode::SUCCESS
}

fn sign(component: &Path, key_path: &Path) -> ExitCode {
    let usage = |msg: String| {
        errln!("adaptor: {}", sanitize(&msg));
        ExitCode::from(EXIT_USAGE)
    };
    let text = match std::fs::read_to_string(key_path) {
        Ok(t) => t,
        Err(e) => return usage(format!("{}: {e}", key_path.display())),
    };
    let key = match SigningKey::parse(&key_path.display().to_string(), &text) {
        Ok(k) => k,
        Err(e) => return usage(e.to_string()),
    };
    let bytes = match std::fs::read(component) {
        Ok(b) => b,
        Err(e) => return usage(format!("{}: {e}", component.display())),
    };
    let (digest, signature) = key.sign_component(&bytes);
    let mut out = component.as_os_str().to_owned();
    out.push(".sig");
    if let Err(e) = std::fs::write(&out, signature) {
        return usage(format!("{}: {e}", Path::new(&out).display()));
    }
    errln!(
        "signed sha256:{digest} with {}: {}",
        key.public_key(),
        Path::new(&out).display()
    );
    ExitCode::SUCCESS
}
