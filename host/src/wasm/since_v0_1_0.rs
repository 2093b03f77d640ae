//! Bindings for drivers built against `adaptor:driver@0.1.0` (`wit/v0.1.0/`, frozen), mapped
//! onto the newest contract (Zed's `since_vX_Y_Z` pattern).
//!
//! `0.2.0` and `0.3.0` keep every type of the `types` interface exactly as `0.1.0` declared it, so the
//! `types` of `0.1.0` are the newest bindings' own types (`with`) and nothing is converted:
//! only the `driver` interface differs — `describe` returns the bare `descriptor`, the session
//! is built from a bare `run-request`, and there is no `on-input`. [`crate::wasm::guest`]
//! fills in what `0.1.0` cannot say (no steering, an undeclared launch environment).
//! Must not: change, ever (a released version is frozen).

#![allow(missing_docs, clippy::all)]

wasmtime::component::bindgen!({
    world: "driver-world",
    path: "../wit/v0.1.0",
    imports: { default: async },
    exports: { default: async },
    with: {
        "adaptor:driver/types@0.1.0": crate::wasm::bindings::adaptor::driver::types,
    },
});
