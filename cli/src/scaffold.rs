//! `adaptor drivers new NAME`: a driver crate against adaptor-sdk that builds, passes its
//! native tests and `adaptortest check`, and installs — the driver author's first five
//! minutes.
//!
//! Owns: the template files (`scaffold/*.tmpl`: a driver for the scripted
//! `reference-provider`, so everything works before the author changes a line), the two
//! cassettes it ships (the reference driver's, renamed), and where the SDK is found. Must
//! not: build anything (the author's cargo does).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::output::sanitize;
use crate::{EXIT_USAGE, errln};

const CARGO_TOML: &str = include_str!("scaffold/Cargo.toml.tmpl");
const LIB_RS: &str = include_str!("scaffold/lib.rs.tmpl");
const README: &str = include_str!("scaffold/README.md.tmpl");
const GITIGNORE: &str = include_str!("scaffold/gitignore.tmpl");
const HAPPY: &str = include_str!("../../drivers/reference/cassettes/happy.json");
const FAIL: &str = include_str!("../../drivers/reference/cassettes/fail.json");

/// The SDK of the checkout this `adaptor` was built from (adaptor-sdk is not on crates.io
/// yet, so a scaffold depends on it by path).
const BUILT_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk-guest");

/// `adaptor drivers new NAME [--dir DIR] [--sdk PATH]`.
pub fn new(name: &str, dir: Option<PathBuf>, sdk: Option<PathBuf>) -> ExitCode {
    match scaffold(name, dir, sdk) {
        Ok(dir) => {
            errln!(
                "created the driver crate {} — next (its README has the whole path):\n  cd {}\n  cargo test\n  cargo build --release --target wasm32-wasip2\n  adaptortest check target/wasm32-wasip2/release/{}.wasm --cassette cassettes\n  adaptor drivers install target/wasm32-wasip2/release/{}.wasm",
                dir.display(),
                dir.display(),
                crate_ident(name),
                crate_ident(name)
            );
            ExitCode::SUCCESS
        }
        Err(message) => {
            errln!("adaptor: {}", sanitize(&message));
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn crate_ident(name: &str) -> String {
    format!("{}_driver", name.replace('-', "_"))
}

/// `my-driver` → `MyDriverDriver`… without the doubled suffix: `my` → `MyDriver`.
fn type_name(name: &str) -> String {
    let mut out = String::new();
    for part in name.split(['-', '_']).filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'D');
    }
    if !out.ends_with("Driver") {
        out.push_str("Driver");
    }
    out
}

fn scaffold(name: &str, dir: Option<PathBuf>, sdk: Option<PathBuf>) -> Result<PathBuf, String> {
    // The store's rule, so whatever this scaffolds can be installed under its name.
    if !adaptor::is_installable_name(name) {
        return Err(format!(
            "driver name {name:?}: use 1-64 of a-z, 0-9, `-`, `_`, starting with a letter or digit"
        ));
    }
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    if dir.exists()
        && std::fs::read_dir(&dir)
            .map(|mut rd| rd.next().is_some())
            .unwrap_or(true)
    {
        return Err(format!(
            "{} exists and is not empty; choose another --dir",
            dir.display()
        ));
    }
    let sdk = sdk.unwrap_or_else(|| PathBuf::from(BUILT_SDK));
    let sdk = sdk.canonicalize().map_err(|e| {
        format!(
            "the adaptor-sdk crate at {}: {e}; pass --sdk PATH (the sdk-guest directory of an agent-adaptor checkout)",
            sdk.display()
        )
    })?;
    let manifest = std::fs::read_to_string(sdk.join("Cargo.toml")).unwrap_or_default();
    if !manifest.contains("name = \"adaptor-sdk\"") {
        return Err(format!(
            "{} is not the adaptor-sdk crate (no Cargo.toml naming it); pass --sdk PATH",
            sdk.display()
        ));
    }
    let sdk_toml = toml::Value::String(sdk.display().to_string()).to_string();
    let fill = |template: &str| {
        template
            .replace("\"{{sdk}}\"", &sdk_toml)
            .replace("{{crate_ident}}", &crate_ident(name))
            .replace("{{crate}}", &format!("{name}-driver"))
            .replace("{{type}}", &type_name(name))
            .replace("{{name}}", name)
    };
    let renamed = |cassette: &str| {
        cassette.replace(
            "\"driver\": \"reference\"",
            &format!("\"driver\": \"{name}\""),
        )
    };
    let files: [(&str, String); 6] = [
        ("Cargo.toml", fill(CARGO_TOML)),
        ("src/lib.rs", fill(LIB_RS)),
        ("README.md", fill(README)),
        (".gitignore", GITIGNORE.to_owned()),
        ("cassettes/happy.json", renamed(HAPPY)),
        ("cassettes/fail.json", renamed(FAIL)),
    ];
    for (rel, text) in files {
        write(&dir.join(rel), &text)?;
    }
    Ok(dir)
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_crate_and_type_names() {
        assert_eq!(crate_ident("my-cli"), "my_cli_driver");
        assert_eq!(type_name("my-cli"), "MyCliDriver");
        assert_eq!(type_name("acme_driver"), "AcmeDriver");
        assert_eq!(type_name("9x"), "D9xDriver");
    }

    #[test]
    fn bad_names_and_busy_directories_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(scaffold("Bad Name", Some(dir.path().join("x")), None).is_err());
        std::fs::write(dir.path().join("file"), "x").unwrap();
        let e = scaffold("ok", Some(dir.path().to_path_buf()), None).unwrap_err();
        assert!(e.contains("not empty"), "{e}");
        let e = scaffold(
            "ok",
            Some(dir.path().join("y")),
            Some(dir.path().to_path_buf()),
        )
        .unwrap_err();
        assert!(e.contains("not the adaptor-sdk crate"), "{e}");
    }
}
