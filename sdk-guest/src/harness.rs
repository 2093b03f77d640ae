//! Native test harness: drive a [`Session`] with recorded bytes, without wasm and without a
//! process, exactly as the host would (start, chunks, exit, finish).
//!
//! ```ignore
//! let req = adaptor_sdk::harness::request("hello");
//! let run = adaptor_sdk::harness::replay::<MySession>(req, RECORDED, 7, adaptor_sdk::harness::exited(0))?;
//! assert_eq!(run.outcome.text, "Hi!");
//! ```

use crate::{
    Action, Actions, Decision, Event, ExitStatus, Launch, Outcome, Policy, RunRequest, Session,
    StartError,
};

/// A session under test plus everything it asked the host to do.
pub struct Harness<S: Session> {
    session: S,
    /// All actions returned so far, in order.
    pub actions: Vec<Action>,
}

/// Result of a full replay.
#[derive(Debug, Clone)]
pub struct Replay {
    /// What `start` returned.
    pub launch: Launch,
    /// Every action, in order.
    pub actions: Vec<Action>,
    /// What `finish` returned.
    pub outcome: Outcome,
}

impl Replay {
    /// Just the emitted events.
    pub fn events(&self) -> Vec<Event> {
        events_of(&self.actions)
    }
}

/// The `emit` actions' events.
pub fn events_of(actions: &[Action]) -> Vec<Event> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Emit(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

impl<S: Session> Harness<S> {
    /// Create the session and call `start`.
    pub fn start(request: RunRequest) -> Result<(Self, Launch), StartError> {
        let mut session = S::new(request);
        let launch = session.start()?;
        Ok((
            Self {
                session,
                actions: Vec::new(),
            },
            launch,
        ))
    }

    fn record(&mut self, f: impl FnOnce(&mut S, &mut Actions)) -> Vec<Action> {
        let mut out = Actions::new();
        f(&mut self.session, &mut out);
        let out = out.into_vec();
        self.actions.extend(out.iter().cloned());
        out
    }

    /// Feed stdout bytes.
    pub fn stdout(&mut self, chunk: &[u8]) -> Vec<Action> {
        self.record(|s, out| s.on_stdout(chunk, out))
    }

    /// Feed stderr bytes.
    pub fn stderr(&mut self, chunk: &[u8]) -> Vec<Action> {
        self.record(|s, out| s.on_stderr(chunk, out))
    }

    /// Deliver a decision.
    pub fn decide(&mut self, id: &str, decision: Decision) -> Vec<Action> {
        self.record(|s, out| s.on_decision(id, decision, out))
    }

    /// Cancel the run (`on-cancel`).
    pub fn cancel(&mut self) -> Vec<Action> {
        self.record(|s, out| s.on_cancel(out))
    }

    /// Fire a timer.
    pub fn timer(&mut self, id: u64) -> Vec<Action> {
        self.record(|s, out| s.on_timer(id, out))
    }

    /// Report the exit and collect the outcome.
    pub fn exit(mut self, status: ExitStatus) -> (Vec<Action>, Outcome) {
        self.record(|s, out| s.on_exit(&status, out));
        let outcome = self.session.finish();
        (self.actions, outcome)
    }
}

/// Replay `stdout` in chunks of `chunk` bytes (0 = one chunk), then exit with `status`.
pub fn replay<S: Session>(
    request: RunRequest,
    stdout: &[u8],
    chunk: usize,
    status: ExitStatus,
) -> Result<Replay, StartError> {
    let (mut harness, launch) = Harness::<S>::start(request)?;
    if chunk == 0 {
        harness.stdout(stdout);
    } else {
        for piece in stdout.chunks(chunk) {
            harness.stdout(piece);
        }
    }
    let (actions, outcome) = harness.exit(status);
    Ok(Replay {
        launch,
        actions,
        outcome,
    })
}

/// A normal exit with `code`.
pub fn exited(code: i32) -> ExitStatus {
    ExitStatus {
        code: Some(code),
        signal: None,
        timed_out: false,
        cancelled: false,
    }
}

/// The default (all-inherit) policy.
pub fn inherit_policy() -> Policy {
    Policy {
        sandbox: crate::Sandbox::Inherit,
        web_search: crate::Toggle::Inherit,
        browser: crate::Toggle::Inherit,
        permission: crate::DecisionMode::Inherit,
        plan_review: crate::DecisionMode::Inherit,
        question: crate::DecisionMode::Inherit,
        approval_timeout_ms: None,
        on_reject: crate::Fallback::Abort,
        on_timeout: crate::Fallback::Abort,
        max_retries: 0,
    }
}

/// A plain request for `prompt` with an empty config, in `/workspace`.
pub fn request(prompt: &str) -> RunRequest {
    RunRequest {
        run_id: "run-test".into(),
        prompt: prompt.into(),
        config_json: "{}".into(),
        model: None,
        instructions: None,
        workspace: "/workspace".into(),
        private_dir: "/workspace/.private".into(),
        policy: inherit_policy(),
        output_schema: None,
        resume: None,
        streaming: false,
        mcp_servers: Vec::new(),
        skill_dirs: Vec::new(),
        metadata: Vec::new(),
    }
}
