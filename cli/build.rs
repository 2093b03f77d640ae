//! Link settings of the `adaptor-host` executable, the whole command (nothing else is built
//! here). The `adaptor` launcher is linked with the same arguments: it has few relocations
//! to pack, and the function list names none of its functions (the linker ignores them).
//!
//! On Linux with glibc 2.36 or later, in a native build, the executable's relative
//! relocations are packed (`-z pack-relative-relocs`, `DT_RELR`): the position-independent
//! executable keeps its address randomisation, but the dynamic loader (or, in the static
//! release build `./x.sh` makes, glibc's own start-up code relocating the static-pie) reads
//! a table of kilobytes instead of the 0.9 MiB of `.rela.dyn` it read (and kept resident)
//! at every start of `adaptor` and of the spawner it re-executes. Older glibc cannot load such an
//! executable, and a cross build cannot tell what glibc its target has, so both keep the
//! ordinary table. The linker must know the option: rustc's own LLD (the default linker of
//! `x86_64-unknown-linux-gnu`) does, and so does GNU ld from 2.38, which every distribution
//! shipping glibc 2.36 has.
//!
//! In release builds the functions a run executes are laid out first and together
//! (`--symbol-ordering-file`, from `symbol-order.txt`): a process's code is mapped from the
//! page cache in 64 KiB steps, and the ~3 000 functions a run executes, scattered over the
//! 26 MB of code, kept 9.3 MiB of it resident in each `adaptor` process (3.9 MiB ordered). The list is a profile of
//! an instrumented build running the usual commands (`./x.sh symbol-order` regenerates it;
//! `symbol-order.py` says how). A stale list costs only memory: a function it does not name
//! is placed after the block, a name no longer in the build is ignored. Symbol names carry
//! hashes that change with the compiler, so the list's header names the rustc it was
//! profiled with, and a build by another rustc is linked in the default order and says so
//! (a cargo warning). Only a linker that accepts the option gets it (LLD, rustc's default
//! here, does; GNU ld does not): a one-line program is linked with it first, by the same
//! rustc, target, flags and linker.

/// A variable cargo sets for build scripts (empty when unset).
fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let native = var("TARGET") == var("HOST");
    if native
        && var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && glibc_at_least(2, 36)
    {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo::rerun-if-changed=symbol-order.txt");
    if var("PROFILE") == "release" {
        symbol_order();
    }
}

/// Hand the linker `symbol-order.txt` when it lists this compiler's names and the linker
/// takes the option; otherwise say why the executable is linked in the default order.
fn symbol_order() {
    let order = std::path::Path::new(&var("CARGO_MANIFEST_DIR")).join("symbol-order.txt");
    let text = std::fs::read_to_string(&order).unwrap_or_default();
    // Symbol hashes differ from one compiler to the next: the list names the one it was
    // profiled with in its header.
    let profiled = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .find_map(|l| l.strip_prefix("# rustc "))
        .unwrap_or("(none)");
    let ours = std::process::Command::new(var("RUSTC"))
        .arg("-V")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_default();
    let ours = ours.trim().trim_start_matches("rustc ");
    let args = [
        format!("-Wl,--symbol-ordering-file={}", order.display()),
        "-Wl,--no-warn-symbol-ordering".to_owned(),
    ];
    let unordered = if profiled != ours {
        format!(
            "cli/symbol-order.txt names the functions of rustc {profiled}, this is rustc {ours} \
             (run ./x.sh symbol-order)"
        )
    } else if !linker_accepts(&args) {
        "the linker does not accept --symbol-ordering-file".to_owned()
    } else {
        for arg in args {
            println!("cargo::rustc-link-arg-bins={arg}");
        }
        return;
    };
    println!(
        "cargo::warning=adaptor is linked in the default function order, which keeps more of \
         its code resident: {unordered}"
    );
}

/// Whether the linker of this build accepts `args`: a one-line program is linked with them
/// by the same rustc, for the same target, with the same flags and linker.
fn linker_accepts(args: &[String]) -> bool {
    let out = std::path::PathBuf::from(var("OUT_DIR"));
    let source = out.join("link_probe.rs");
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let mut rustc = std::process::Command::new(var("RUSTC"));
    rustc
        .args(["--edition=2021", "--crate-type=bin", "--target"])
        .arg(var("TARGET"))
        .arg("-o")
        .arg(out.join("link_probe"))
        .arg(&source);
    for arg in args {
        rustc.arg(format!("-Clink-arg={arg}"));
    }
    for flag in var("CARGO_ENCODED_RUSTFLAGS")
        .split('\x1f')
        .filter(|f| !f.is_empty())
    {
        rustc.arg(flag);
    }
    let linker = var("RUSTC_LINKER");
    if !linker.is_empty() {
        rustc.arg(format!("-Clinker={linker}"));
    }
    rustc
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether the glibc this build script runs on (the target's, in a native build) is at least
/// `major.minor`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn glibc_at_least(major: u32, minor: u32) -> bool {
    // SAFETY: returns a pointer to a static NUL-terminated string such as "2.36".
    let version = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    let mut parts = version
        .to_str()
        .unwrap_or_default()
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    found >= (major, minor)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn glibc_at_least(_major: u32, _minor: u32) -> bool {
    false
}
