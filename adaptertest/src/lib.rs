//! Conformance kit for `.wasm` drivers (grows in the conformance issue).
