//! `wasm/` — the only part of the host that names wasmtime or the WIT-generated types.
//!
//! Rooms: `engine` (the one wasmtime `Engine`, its configuration and the on-disk compiled
//! cache), `file_stamps` (what that cache remembers of the files it checked), `bindings`
//! (the `bindgen!` output for the newest contract, `adaptor:driver@0.3.0`), `since_v0_1_0`
//! and `since_v0_2_0` (the bindings of the released `0.1.0` and `0.2.0`, whose types are
//! the newest ones),
//! `guest` (a driver instance in its own `Store`, of whichever released version it was built
//! against: the WASI context written out as data, limits, every call with its deadline),
//! `convert` (WIT ↔ host types, with the host-side validation of what a driver returns).
//! Everything outside speaks the crate's own types, apart from the remaining knots listed in
//! the crate docs.
//!
//! A new version of the WIT package gets its own frozen `wit/vX.Y.Z/` and bindings; every
//! older version's module is kept and mapped onto the newest types (Zed's pattern), so every
//! released version keeps loading. [`SUPPORTED_WIT_VERSIONS`] lists them.

pub(crate) mod bindings;
pub(crate) mod convert;
pub(crate) mod engine;
pub(crate) mod file_stamps;
pub(crate) mod guest;
pub(crate) mod since_v0_1_0;
pub(crate) mod since_v0_2_0;

pub(crate) use bindings::wit;

/// Do now, on the calling thread, the once-per-process work of the first driver load (see
/// [`crate::prepare_process`]): the engine, the linker, and the CPU-feature detection of the
/// SHA-256 and ChaCha code a load, a run and a driver instance's WASI use. Each detection is
/// its own `cpuid` sequence, cached process-wide once it ran.
pub(crate) fn prepare() {
    use rand::{Rng, SeedableRng};
    use sha2::Digest;
    engine::engine();
    guest::linker();
    sha2::Sha256::digest(b"");
    rand::rngs::StdRng::seed_from_u64(0).next_u64();
}

/// The released versions of `adaptor:driver` this host loads, oldest first; the last is the
/// newest (what the SDK builds against).
pub const SUPPORTED_WIT_VERSIONS: &[&str] = &["0.1.0", "0.2.0", "0.3.0"];
