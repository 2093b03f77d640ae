//! Link settings of the `adaptor` executable (nothing else is built here).
//!
//! On Linux with glibc 2.36 or later, in a native build, the executable's relative
//! relocations are packed (`-z pack-relative-relocs`, `DT_RELR`): the position-independent
//! executable keeps its address randomisation, but the dynamic loader reads a table of
//! kilobytes instead of the 0.9 MiB of `.rela.dyn` it read (and kept resident) at every
//! start of `adaptor` and of the spawner it re-executes. Older glibc cannot load such an
//! executable, and a cross build cannot tell what glibc its target has, so both keep the
//! ordinary table. The linker must know the option: rustc's own LLD (the default linker of
//! `x86_64-unknown-linux-gnu`) does, and so does GNU ld from 2.38, which every distribution
//! shipping glibc 2.36 has.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let native = var("TARGET") == var("HOST");
    if native
        && var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && glibc_at_least(2, 36)
    {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
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
