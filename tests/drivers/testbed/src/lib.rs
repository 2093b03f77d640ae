//! A test-only driver for the host's own tests: it behaves exactly like the reference driver
//! unless the prompt carries one of these directives, which make it misbehave on purpose:
//!
//! - `[[driver-trap-start]]`: panic in `start` (before any process exists);
//! - `[[driver-trap-stdout]]`: panic on the first stdout chunk (while the provider runs);
//! - `[[launch-sh]]`: ask the host to launch `sh -c` instead of the granted program;
//! - `[[launch-cwd-escape]]`: ask for the working directory `..` (outside the workspace);
//! - `[[bad-private-file]]`: ask for a private file named `../escape`;
//! - `[[driver-ignore-output]]`: ignore every stdout and stderr byte;
//! - `[[driver-no-checkpoint]]`: succeed but report no checkpoint (a thread cannot be saved);
//! - `[[instance-calls]]`: report, in a `testbed.instance-calls` notice as the process exits,
//!   how often `describe` and `validate-config` have been called on this instance
//!   (`describe=1 validate=1`), so the host's tests can tell which instance served a run.
//!
//! Caller metadata `testbed=prompt-in-args` appends the prompt to the command line (a launch
//! that depends on the prompt, which prewarmed processes cannot serve).
//!
//! Its descriptor declares prompt+validate structured output only (no native schema), and
//! the version `1.0.0-testbed`.
//!
//! It never ships as a built-in driver; `x.sh` installs it under `test-drivers/`.

use adaptor_sdk::{
    Actions, ConfigError, Descriptor, Driver, ExitStatus, Launch, Outcome, PrivateFile, RunRequest,
    Session, StartError,
};
use reference_driver::{ReferenceDriver, ReferenceSession};
use std::sync::atomic::{AtomicU32, Ordering};

/// Calls of `describe` on this instance (an instance is one component instance: its statics).
static DESCRIBED: AtomicU32 = AtomicU32::new(0);
/// Calls of `validate-config` on this instance.
static VALIDATED: AtomicU32 = AtomicU32::new(0);

/// The testbed driver.
pub struct TestbedDriver;

impl Driver for TestbedDriver {
    type Session = TestbedSession;

    fn describe() -> Descriptor {
        DESCRIBED.fetch_add(1, Ordering::Relaxed);
        let mut d = ReferenceDriver::describe();
        d.name = "testbed".into();
        // A version literal found once in the component, so the driver store's tests can
        // make a second version of this driver by patching it in place.
        d.version = "1.0.0-testbed".into();
        d.display_name = "Testbed (reference with misbehaviour)".into();
        // Prompt+validate only, so the host's other structured-output mechanism is exercised.
        d.structured_output.native = false;
        d.structured_output.native_with_approvals = false;
        // No approval modes, so "unsupported approval mode" is exercised.
        d.approvals.permission = adaptor_sdk::DecisionModes::empty();
        d.approvals.plan_review = adaptor_sdk::DecisionModes::empty();
        d.approvals.question = adaptor_sdk::DecisionModes::empty();
        d
    }

    fn validate_config(config: &serde_json::Value) -> Result<(), ConfigError> {
        VALIDATED.fetch_add(1, Ordering::Relaxed);
        ReferenceDriver::validate_config(config)
    }

    fn config_fingerprint(config: &serde_json::Value) -> Result<String, ConfigError> {
        ReferenceDriver::config_fingerprint(config)
    }
}

/// A reference session with misbehaviour switches.
pub struct TestbedSession {
    inner: ReferenceSession,
    prompt: String,
}

impl TestbedSession {
    fn wants(&self, directive: &str) -> bool {
        self.prompt.contains(&format!("[[{directive}]]"))
    }
}

impl Session for TestbedSession {
    fn new(request: RunRequest) -> Self {
        let mut prompt = request.prompt.clone();
        if request
            .metadata
            .iter()
            .any(|(k, v)| k == "testbed" && v == "prompt-in-args")
        {
            // Marks the session; `start` puts the prompt itself on the command line.
            prompt.push_str("[[prompt-in-args]]");
        }
        Self {
            inner: ReferenceSession::new(request),
            prompt,
        }
    }

    fn start(&mut self) -> Result<Launch, StartError> {
        if self.wants("driver-trap-start") {
            panic!("testbed: trap requested in start");
        }
        let mut launch = self.inner.start()?;
        if self.wants("launch-sh") {
            launch.program = "sh".into();
            launch.args = vec!["-c".into(), "echo pwned".into()];
        }
        if let Some(prompt) = self.prompt.strip_suffix("[[prompt-in-args]]") {
            launch.args.push(prompt.to_owned());
        }
        if self.wants("launch-cwd-escape") {
            launch.cwd = Some("..".into());
        }
        if self.wants("bad-private-file") {
            launch.files.push(PrivateFile {
                name: "../escape".into(),
                contents: b"x".to_vec(),
            });
        }
        Ok(launch)
    }

    fn on_stdout(&mut self, chunk: &[u8], out: &mut Actions) {
        if self.wants("driver-trap-stdout") {
            panic!("testbed: trap requested on stdout");
        }
        if self.wants("driver-ignore-output") {
            return;
        }
        self.inner.on_stdout(chunk, out);
    }

    fn on_stderr(&mut self, chunk: &[u8], out: &mut Actions) {
        if self.wants("driver-ignore-output") {
            return;
        }
        self.inner.on_stderr(chunk, out);
    }

    fn on_cancel(&mut self, out: &mut Actions) {
        // A driver that "stops the turn gracefully" while the provider ignores it: the host
        // must still terminate it after the grace period.
        if self.wants("driver-graceful-cancel") {
            out.notice(
                "testbed.graceful-cancel",
                "asked the provider to stop",
                None,
            );
        }
    }

    fn on_exit(&mut self, status: &ExitStatus, out: &mut Actions) {
        if self.wants("instance-calls") {
            let calls = format!(
                "describe={} validate={}",
                DESCRIBED.load(Ordering::Relaxed),
                VALIDATED.load(Ordering::Relaxed)
            );
            out.notice("testbed.instance-calls", &calls, None);
        }
        self.inner.on_exit(status, out);
    }

    fn finish(&mut self) -> Outcome {
        let mut outcome = self.inner.finish();
        if self.wants("driver-no-checkpoint") {
            outcome.checkpoint = None;
        }
        outcome
    }
}

#[cfg(target_family = "wasm")]
adaptor_sdk::export_driver!(TestbedDriver);
