//! Bindings for drivers built against `adaptor:driver@0.2.0` (`wit/v0.2.0/`, frozen), mapped
//! onto the newest contract (Zed's `since_vX_Y_Z` pattern).
//!
//! `0.3.0` keeps every type of the `types` and `session-types` interfaces exactly as `0.2.0`
//! declared them, so both are the newest bindings' own types (`with`) and nothing is
//! converted: only the `driver` interface differs — there is no `profile`, and the session
//! is built from the `turn-request` alone. [`crate::wasm::guest`] fills in what `0.2.0`
//! cannot say (no profile; no resources, so the host refuses a dedicated profile or an
//! instructions bundle before anything starts).
//! Must not: change, ever (a released version is frozen).

#![allow(missing_docs, clippy::all)]

wasmtime::component::bindgen!({
    world: "driver-world",
    path: "../wit/v0.2.0",
    imports: { default: async },
    exports: { default: async },
    with: {
        "adaptor:driver/types@0.2.0": crate::wasm::bindings::adaptor::driver::types,
        "adaptor:driver/session-types@0.2.0": crate::wasm::bindings::adaptor::driver::session_types,
    },
});
