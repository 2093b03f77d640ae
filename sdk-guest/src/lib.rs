//! # adaptor-sdk — write an agent-adaptor driver in a few hundred lines
//!
//! A driver is a WebAssembly component implementing the `adaptor:driver@0.3.0` world (see
//! `wit/v0.3.0/driver.wit`, the contract). This crate owns everything that is not protocol
//! knowledge:
//!
//! - [`bindings`]: the generated WIT types (re-exported at the crate root: [`Descriptor`],
//!   [`RunRequest`], [`Launch`], [`Action`], [`Outcome`], …);
//! - [`Driver`] and [`Session`]: plain Rust traits a driver implements, and
//!   [`export_driver!`], which turns them into the component's exports;
//! - [`LineFramer`]: a bounded line splitter for chunked stdout/stderr;
//! - [`json`]: helpers to read provider JSON and to fingerprint configs canonically;
//! - [`Actions`], [`Transcript`], [`items`]: builders that keep item events and
//!   the transcript mirrored by construction;
//! - [`mcp`]: the request's MCP servers (header references, the common config JSON);
//! - [`skills`]: the request's skill bundle (its plugin root and skills directory);
//! - [`instructions`]: the run's instructions bundle folded into the request's instructions;
//! - [`harness`]: a native harness that drives a [`Session`] with recorded bytes, no wasm
//!   involved, for unit tests of a parser.
//!
//! It must not contain any provider's protocol knowledge: that belongs in the driver crates.

#![warn(missing_docs)]

pub mod actions;
pub mod framing;
mod glue;
pub mod harness;
pub mod instructions;
pub mod json;
pub mod log;
pub mod mcp;
pub mod skills;

/// Generated bindings for the `adaptor:driver/driver-world` world.
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "driver-world",
        path: "../wit/v0.3.0",
        pub_export_macro: true,
        export_macro_name: "__export_driver_world",
        default_bindings_module: "adaptor_sdk::bindings",
        additional_derives: [PartialEq],
    });
}

pub use actions::{Actions, Transcript, empty_outcome, items, stopped_by_host, top_scope};
pub use bindings::adaptor::driver::resource_types::{
    Carry, InstructionsBundle, ProfileFile, ProfilePart, ProfileSpec, RunResources,
};
pub use bindings::adaptor::driver::session_types::{DriverInfo, InputError, TurnRequest};
pub use bindings::adaptor::driver::types::*;
pub use framing::{Line, LineFramer};
pub use glue::Adapter;

impl ProfileFile {
    /// A file of the same name in the user's profile and in a dedicated one (the common
    /// case: `auth.json`, `settings.json`), found under the profile directory in both
    /// layouts.
    pub fn same_name(part: ProfilePart, name: &str, carry: Carry) -> ProfileFile {
        ProfileFile {
            part,
            source: name.into(),
            default_source: None,
            target: name.into(),
            carry,
        }
    }
}

/// The driver-level functions of the contract (`describe`, `validate-config`, …).
///
/// Implement it on a unit struct and call [`export_driver!`] with that struct.
pub trait Driver: 'static {
    /// The per-run state machine.
    type Session: Session;

    /// The capability table; must be deterministic.
    fn describe() -> Descriptor;

    /// Whether the driver adds user input to a running turn ([`Session::on_input`]) when the
    /// request is steerable. Default: no (the host refuses steerable requests).
    fn steering() -> bool {
        false
    }

    /// Every environment variable the driver's launches may set: exact names, or prefixes
    /// ending in `*`. The host refuses a launch that sets anything else (besides the
    /// variables the caller gave a stdio MCP server, passed on unchanged). Default: none.
    fn launch_env() -> Vec<String> {
        Vec::new()
    }

    /// Where the CLI keeps its per-user state, so the host can give an agent a dedicated
    /// profile (it creates the directory, carries the files declared here and sets
    /// `config_dir_variable` itself). Must be deterministic. Default: none (the host refuses
    /// dedicated profiles for this driver).
    fn profile() -> Option<ProfileSpec> {
        None
    }

    /// Check a parsed config object.
    fn validate_config(config: &serde_json::Value) -> Result<(), ConfigError>;

    /// Fingerprint of the config parts that matter for resuming a session. The default
    /// validates the config and hashes all of it canonically under the driver's name.
    fn config_fingerprint(config: &serde_json::Value) -> Result<String, ConfigError> {
        Self::validate_config(config)?;
        Ok(json::canonical_fingerprint(&Self::describe().name, config))
    }

    /// Probe commands for an environment check. Default: `<command> --version`.
    fn environment_probes(config: &serde_json::Value) -> Result<Vec<ProbeCommand>, ConfigError> {
        Self::validate_config(config)?;
        let program = json::str_field(config, "command")
            .map(str::to_owned)
            .unwrap_or_else(|| Self::describe().default_program);
        Ok(vec![ProbeCommand {
            id: "version".into(),
            program,
            args: vec!["--version".into()],
            timeout_ms: 10_000,
        }])
    }

    /// Build the environment report. Default: reads a version from the `version` probe and
    /// compares it with [`Descriptor::cli_versions`].
    fn environment_report(
        config: &serde_json::Value,
        outputs: &[ProbeOutput],
    ) -> EnvironmentReport {
        let descriptor = Self::describe();
        let program = json::str_field(config, "command")
            .unwrap_or(&descriptor.default_program)
            .to_owned();
        json::default_environment_report(&descriptor, &program, outputs)
    }
}

/// One run: a pure state machine the host feeds with process output.
///
/// Every callback appends the actions for the host to `out`, in order.
pub trait Session: Sized + 'static {
    /// Create the session for a resolved request (no work yet).
    fn new(request: RunRequest) -> Self;

    /// Create the session for a turn request: the request and whether the caller may add
    /// input while the turn runs (`turn.steerable`: choose a transport that can take it, or
    /// refuse in [`start`](Self::start)). Default: [`new`](Self::new) with the request — a
    /// driver that declares [`Driver::steering`] overrides it.
    fn from_turn(turn: TurnRequest) -> Self {
        Self::new(turn.request)
    }

    /// Create the session for a turn request and the run's resources: the dedicated
    /// profile directory (the host already pointed the CLI at it) and the instructions
    /// bundle, whose text the SDK has already folded into `turn.request.instructions`
    /// ([`instructions::with_bundle`]). Default: [`from_turn`](Self::from_turn) — override it
    /// to use the resources otherwise (e.g. the profile directory).
    fn from_resources(turn: TurnRequest, _resources: RunResources) -> Self {
        Self::from_turn(turn)
    }

    /// The process to launch.
    fn start(&mut self) -> Result<Launch, StartError>;

    /// Stdout bytes, split anywhere.
    fn on_stdout(&mut self, chunk: &[u8], out: &mut Actions);

    /// Stderr bytes, split anywhere. Default: ignore (the host keeps raw stderr anyway).
    fn on_stderr(&mut self, _chunk: &[u8], _out: &mut Actions) {}

    /// The answer to an approval request. Default: ignore.
    fn on_decision(&mut self, _id: &str, _decision: Decision, _out: &mut Actions) {}

    /// A timer fired. Default: ignore.
    fn on_timer(&mut self, _id: u64, _out: &mut Actions) {}

    /// Input the caller adds to the running turn (steerable requests only): push the actions
    /// that deliver it (a stdin frame), and mirror it in the transcript as a user item. Refuse
    /// with an [`InputError`] when the transport cannot take it or the turn is over — nothing
    /// is written then. Default: unsupported.
    fn on_input(&mut self, _text: &str, _out: &mut Actions) -> Result<(), InputError> {
        Err(InputError::Unsupported(
            "this driver does not take input while a turn runs".into(),
        ))
    }

    /// The run is being cancelled (or timed out) while the process runs: push the actions
    /// that stop the turn gracefully. Default: none, so the host stops the process at once.
    /// The host terminates it after its grace period whatever happens.
    fn on_cancel(&mut self, _out: &mut Actions) {}

    /// The process ended (stdout and stderr are at EOF).
    fn on_exit(&mut self, status: &ExitStatus, out: &mut Actions);

    /// The turn's outcome. On a resident process (the host kept it after `end-turn`) this is
    /// called without `on_exit`: a turn that reached its terminal frame with no exit status
    /// is a success.
    fn finish(&mut self) -> Outcome;

    /// Start another turn on a resident process (declare `persistent_process`, and launch
    /// with `keep_stdin_open`). Reset the per-turn state, keep what belongs to the process
    /// (line framers, ids, the session), and return the frame that submits the prompt.
    /// `Harness::finish_turn` / `Harness::next_turn` test it natively. Default: unsupported.
    fn next_turn(&mut self, _request: RunRequest, _out: &mut Actions) -> Result<(), StartError> {
        Err(StartError::Unsupported(
            "this driver runs one turn per process".into(),
        ))
    }
}

/// Export a [`Driver`] implementation as the component's `driver` interface.
///
/// ```ignore
/// struct MyDriver;
/// impl adaptor_sdk::Driver for MyDriver { /* … */ }
/// adaptor_sdk::export_driver!(MyDriver);
/// ```
#[macro_export]
macro_rules! export_driver {
    ($driver:ty) => {
        type __AdaptorSdkComponent = $crate::Adapter<$driver>;
        $crate::bindings::__export_driver_world!(__AdaptorSdkComponent);
    };
}
