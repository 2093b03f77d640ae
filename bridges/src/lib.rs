//! Bridges: serve agent-adaptor agents to programs that speak other protocols.
//!
//! - [`acp`] (feature `acp`): an [`Agent`](adaptor::Agent) as an Agent Client Protocol agent
//!   over stdio, for editors; `adaptor acp` is this.
//! - [`sse`] (feature `sse`): a run streamed as Server-Sent Events over HTTP (axum), with
//!   resume from `Last-Event-ID`.
//! - [`ag_ui`] (feature `ag-ui`): the same events as AG-UI 1.0 events, for AG-UI front ends.
//!
//! A bridge consumes only the runtime's public API (`Runner`, `Agent`, `Thread`, `Stream`,
//! `Event`, `RunResult`): it never calls a driver, spawns a process, coordinates threads or
//! decides an approval. What a protocol cannot carry is passed on explicitly (an extension
//! notification, a `CUSTOM` event), never dropped silently; each module's docs list its
//! mapping. The runtime crate itself has none of these dependencies.

#![warn(missing_docs)]

#[cfg(feature = "acp")]
pub mod acp;
#[cfg(feature = "ag-ui")]
pub mod ag_ui;
#[cfg(feature = "sse")]
pub mod sse;

/// An event as `adaptor run --json` prints it (`kind` is its tag), the one JSON form every
/// bridge passes on; an event that cannot be serialised becomes
/// `{"kind": "unserialisable", "error"}` instead of vanishing.
pub fn event_json(event: &adaptor::Event) -> serde_json::Value {
    serde_json::to_value(event)
        .unwrap_or_else(|e| serde_json::json!({"kind": "unserialisable", "error": e.to_string()}))
}

/// Fixtures shared by the bridges' unit tests.
#[cfg(test)]
pub(crate) mod fixtures {
    /// Metadata for a fixture event of run `run-1`.
    pub(crate) fn meta() -> adaptor::EventMeta {
        adaptor::EventMeta {
            run_id: "run-1".into(),
            thread_key: None,
            sequence: 1,
            time: std::time::SystemTime::UNIX_EPOCH,
            driver: "reference".into(),
            turn: None,
            source: None,
        }
    }
}
