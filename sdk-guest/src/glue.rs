//! Glue between the SDK's [`Driver`]/[`Session`] traits and the generated component exports.
//!
//! Owns the JSON parsing of `config-json` strings and the `RefCell` the component model needs
//! for `&self` resource methods. Holds no protocol knowledge.

use std::cell::RefCell;
use std::marker::PhantomData;

use crate::bindings::exports::adaptor::driver::driver::{Guest, GuestSession};
use crate::{
    Actions, ConfigError, Decision, Driver, DriverInfo, EnvironmentReport, ExitStatus, InputError,
    Launch, Outcome, ProbeCommand, ProbeOutput, ProfileSpec, RunResources, Session, StartError,
    TurnRequest, json,
};

/// Adapts a [`Driver`] to the generated `Guest` trait. Used by [`crate::export_driver!`].
pub struct Adapter<D>(PhantomData<D>);

/// Adapts a [`Session`] to the generated `GuestSession` trait; keeps the run's resources,
/// which a resident process's later turns share.
pub struct SessionAdapter<S>(RefCell<S>, RunResources);

/// The request with the run's instructions bundle folded into its instructions.
pub(crate) fn with_resources(mut turn: TurnRequest, resources: &RunResources) -> TurnRequest {
    turn.request.instructions = crate::instructions::with_bundle(
        turn.request.instructions.take(),
        resources.instructions.as_ref(),
    );
    turn
}

fn parse_config(config_json: &str) -> Result<serde_json::Value, ConfigError> {
    json::parse_config(config_json)
}

impl<D: Driver> Guest for Adapter<D> {
    type Session = SessionAdapter<D::Session>;

    fn describe() -> DriverInfo {
        DriverInfo {
            descriptor: D::describe(),
            steering: D::steering(),
            launch_env: D::launch_env(),
        }
    }

    fn profile() -> Option<ProfileSpec> {
        D::profile()
    }

    fn validate_config(config_json: String) -> Result<(), ConfigError> {
        D::validate_config(&parse_config(&config_json)?)
    }

    fn config_fingerprint(config_json: String) -> Result<String, ConfigError> {
        D::config_fingerprint(&parse_config(&config_json)?)
    }

    fn environment_probes(config_json: String) -> Result<Vec<ProbeCommand>, ConfigError> {
        D::environment_probes(&parse_config(&config_json)?)
    }

    fn check_environment(config_json: String, outputs: Vec<ProbeOutput>) -> EnvironmentReport {
        let config = parse_config(&config_json).unwrap_or(serde_json::Value::Null);
        D::environment_report(&config, &outputs)
    }
}

impl<S: Session> SessionAdapter<S> {
    fn with(&self, f: impl FnOnce(&mut S, &mut Actions)) -> Vec<crate::Action> {
        let mut out = Actions::new();
        f(&mut self.0.borrow_mut(), &mut out);
        out.into_vec()
    }
}

impl<S: Session> GuestSession for SessionAdapter<S> {
    fn new(request: TurnRequest, resources: RunResources) -> Self {
        let turn = with_resources(request, &resources);
        SessionAdapter(
            RefCell::new(S::from_resources(turn, resources.clone())),
            resources,
        )
    }

    fn start(&self) -> Result<Launch, StartError> {
        self.0.borrow_mut().start()
    }

    fn on_stdout(&self, chunk: Vec<u8>) -> Vec<crate::Action> {
        self.with(|s, out| s.on_stdout(&chunk, out))
    }

    fn on_stderr(&self, chunk: Vec<u8>) -> Vec<crate::Action> {
        self.with(|s, out| s.on_stderr(&chunk, out))
    }

    fn on_decision(&self, id: String, decision: Decision) -> Vec<crate::Action> {
        self.with(|s, out| s.on_decision(&id, decision, out))
    }

    fn on_timer(&self, id: u64) -> Vec<crate::Action> {
        self.with(|s, out| s.on_timer(id, out))
    }

    fn on_cancel(&self) -> Vec<crate::Action> {
        self.with(|s, out| s.on_cancel(out))
    }

    fn on_exit(&self, status: ExitStatus) -> Vec<crate::Action> {
        self.with(|s, out| s.on_exit(&status, out))
    }

    fn on_input(&self, text: String) -> Result<Vec<crate::Action>, InputError> {
        let mut out = Actions::new();
        self.0.borrow_mut().on_input(&text, &mut out)?;
        Ok(out.into_vec())
    }

    fn finish(&self) -> Outcome {
        self.0.borrow_mut().finish()
    }

    fn next_turn(&self, request: TurnRequest) -> Result<Vec<crate::Action>, StartError> {
        let mut out = Actions::new();
        let request = with_resources(request, &self.1).request;
        self.0.borrow_mut().next_turn(request, &mut out)?;
        Ok(out.into_vec())
    }
}
