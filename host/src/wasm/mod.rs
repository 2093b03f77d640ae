//! `wasm/` — the only part of the host that names wasmtime or the WIT-generated types.
//!
//! Rooms: `engine` (the one wasmtime `Engine`, its configuration and the on-disk compiled
//! cache), `bindings` (the `bindgen!` output for `adaptor:driver@0.1.0`), `guest` (a driver
//! instance in its own `Store`: the WASI context written out as data, limits, every call
//! with its deadline), `convert` (WIT ↔ host types, with the host-side validation of what a
//! driver returns). Everything outside speaks the crate's own types, apart from the
//! remaining knots listed in the crate docs.
//!
//! When a new major of the WIT package ships, its bindings go beside `bindings` as a
//! `since_vX_Y_Z` module mapped onto the same host types (Zed's pattern), so every released
//! version keeps loading.

pub(crate) mod bindings;
pub(crate) mod convert;
pub(crate) mod engine;
pub(crate) mod guest;

pub(crate) use bindings::wit;
