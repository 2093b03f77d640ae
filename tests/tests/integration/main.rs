//! The integration and end-to-end tests, in one test binary (wasmtime and the host are linked
//! once instead of once per file; on the 2-core CI machine that is the difference between
//! one link and seventeen). Each module is one area; `cargo test --test integration cli::`
//! runs one of them.

mod acp_e2e;
mod acp_server;
mod approvals;
mod claude_e2e;
mod claude_mock;
mod cli;
mod cli_threads;
mod codebuddy_e2e;
mod codex_e2e;
mod codex_mock;
mod conformance;
mod containment;
mod contract_rules;
mod cursor_e2e;
mod driver_store;
mod fuzz_host;
mod hostile;
mod loading;
mod orphans;
mod pipeline;
mod prewarm;
mod profiles;
mod resident;
mod serve;
mod skills;
mod steering;
mod stores;
mod structured;
mod threads;
mod tools;
mod web_bridges;
mod wit_versions;
mod workspaces;
