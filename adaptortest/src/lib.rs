//! # adaptortest — conformance checks for agent-adaptor drivers
//!
//! This crate holds the clauses a driver's observable behaviour must satisfy, as pure
//! functions over what a run produced. The clause ids follow the reference contract
//! (`EVT-*` event lifecycle, `RUN-*` run/transcript, `RSP-*` response):
//!
//! | id | clause |
//! |---|---|
//! | EVT-00 | sequence numbers start at 1 and strictly increase; one run id |
//! | EVT-01 | exactly one `RunStarted`, and it is first |
//! | EVT-02 | exactly one `RunFinished`, and it is last |
//! | EVT-03 | text: start once, deltas only while open, end once (per message id) |
//! | EVT-04 | text/thinking deltas are non-empty |
//! | EVT-05 | tool calls: start with a name, args deltas and end only while open, results only after the call ended |
//! | EVT-06 | thinking follows the same lifecycle as text |
//! | EVT-11 | every lifecycle is closed before `RunFinished` |
//! | EVT-12 | capabilities declared absent never show up in the events |
//! | RUN-04 | `Item` events mirror the result's transcript exactly, in order |
//! | RSP-01 | a valid checkpoint only on a successful run |
//! | RSP-03 | the final text is not the raw protocol stdout |
//! | RSP-05 | the terminal payload has an event name and is valid JSON |
//! | USG-01 | the result's usage equals the last `usage` event, and is absent without one |
//!
//! Modules: [`clauses`] (the checks as pure functions), [`replay`] (run a cassette through the
//! host's real pipeline against the scripted provider `adaptortest-provider`), [`check`]
//! (the static and dynamic clause runner behind `adaptortest check`).

pub mod check;
pub mod clauses;
pub mod faults;
pub mod replay;
pub mod store_suite;

pub use check::{ClauseResult, Report, Status, check_driver};
pub use clauses::{Violation, check_declared_negatives, check_events, check_result};
pub use replay::{Replayed, replay_cassette, scripted_provider};
