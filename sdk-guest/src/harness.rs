//! Native test harness: drive a [`Session`] with recorded bytes, without wasm and without a
//! process, exactly as the host would (start, chunks, exit, finish).
//!
//! ```ignore
//! let req = adaptor_sdk::harness::request("hello");
//! let run = adaptor_sdk::harness::replay::<MySession>(req, RECORDED, 7, adaptor_sdk::harness::exited(0))?;
//! assert_eq!(run.outcome.text, "Hi!");
//! ```

use crate::{
    Action, Actions, Decision, Event, ExitStatus, InputError, Launch, Outcome, Policy, RunRequest,
    Session, StartError, TurnRequest,
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
    /// Create the session and call `start` (a request the caller will not steer).
    pub fn start(request: RunRequest) -> Result<(Self, Launch), StartError> {
        Self::start_turn(TurnRequest {
            request,
            steerable: false,
        })
    }

    /// Create the session from a turn request (e.g. a steerable one) and call `start`.
    pub fn start_turn(turn: TurnRequest) -> Result<(Self, Launch), StartError> {
        Self::start_with_resources(
            turn,
            crate::RunResources {
                profile_dir: None,
                shared_auth: false,
                instructions: None,
            },
        )
    }

    /// Create the session from a turn request and the run's resources (a dedicated profile,
    /// an instructions bundle) as the component glue does, and call `start`.
    pub fn start_with_resources(
        turn: TurnRequest,
        resources: crate::RunResources,
    ) -> Result<(Self, Launch), StartError> {
        let turn = crate::glue::with_resources(turn, &resources);
        let mut session = S::from_resources(turn, resources);
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

    /// Add the caller's input to the running turn (`on-input`): its actions, or the refusal.
    pub fn input(&mut self, text: &str) -> Result<Vec<Action>, InputError> {
        let mut out = Actions::new();
        self.session.on_input(text, &mut out)?;
        let out = out.into_vec();
        self.actions.extend(out.iter().cloned());
        Ok(out)
    }

    /// Cancel the run (`on-cancel`).
    pub fn cancel(&mut self) -> Vec<Action> {
        self.record(|s, out| s.on_cancel(out))
    }

    /// Fire a timer.
    pub fn timer(&mut self, id: u64) -> Vec<Action> {
        self.record(|s, out| s.on_timer(id, out))
    }

    /// A resident turn ended (the driver emitted `end-turn`) and the process lives on:
    /// collect the turn's outcome without an exit, as the host does.
    pub fn finish_turn(&mut self) -> Outcome {
        self.session.finish()
    }

    /// Start another turn on the same (resident) process: `next-turn`'s actions.
    pub fn next_turn(&mut self, request: RunRequest) -> Result<Vec<Action>, StartError> {
        let mut out = Actions::new();
        self.session.next_turn(request, &mut out)?;
        let out = out.into_vec();
        self.actions.extend(out.iter().cloned());
        Ok(out)
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

/// Assert that `D`'s config fingerprint ignores the fields of `same` (each a config that must
/// fingerprint like `{}`) and changes with each config of `different` — what decides whether
/// a stored session may be resumed must be in it, and nothing else.
pub fn assert_fingerprint_covers<D: crate::Driver>(
    same: &[serde_json::Value],
    different: &[serde_json::Value],
) {
    let fp = |config: &serde_json::Value| {
        D::config_fingerprint(config).unwrap_or_else(|e| panic!("{config}: {}", e.message))
    };
    let base = fp(&serde_json::json!({}));
    for config in same {
        assert_eq!(fp(config), base, "{config} must not change the fingerprint");
    }
    for config in different {
        assert_ne!(fp(config), base, "{config} must change the fingerprint");
    }
}

/// One fuzz case for a driver's parser: `data` is interpreted as a chunk size (first byte),
/// an exit code (second byte), whether the caller streams (third byte) and the CLI's stdout
/// (the rest). The session must not panic, and these properties must hold; a violation
/// panics with what went wrong (which is what a fuzzer reports):
///
/// - split invariance: the stdout fed whole and fed in chunks gives the same events and the
///   same outcome;
/// - every text, thinking and tool lifecycle that starts also ends;
/// - a checkpoint is never valid on a failed run, and never when the exit code is not 0.
///
/// Used by the cargo-fuzz targets in `tests/fuzz/` and the CI smoke run.
pub fn fuzz_replay<S: Session>(data: &[u8]) {
    let [chunk, code, streaming, stdout @ ..] = data else {
        return;
    };
    let chunk = usize::from(*chunk).max(1);
    let code = i32::from(*code % 4);
    let mut req = request("fuzz");
    req.streaming = streaming % 2 == 1;
    let Ok(whole) = replay::<S>(req.clone(), stdout, 0, exited(code)) else {
        return;
    };
    let split = replay::<S>(req, stdout, chunk, exited(code)).expect("start is deterministic");
    assert_eq!(
        split.events(),
        whole.events(),
        "events differ when stdout is split into {chunk}-byte chunks"
    );
    assert_eq!(
        split.outcome, whole.outcome,
        "outcome differs when stdout is split into {chunk}-byte chunks"
    );
    let mut open: Vec<(u8, String)> = Vec::new();
    for event in whole.events() {
        let (kind, id, phase) = match &event {
            Event::Text(t) => (0u8, t.message_id.clone(), t.phase),
            Event::Thinking(t) => (1, t.message_id.clone(), t.phase),
            Event::ToolCall(t) => (2, t.id.clone(), t.phase),
            _ => continue,
        };
        match phase {
            crate::Phase::Start => open.push((kind, id)),
            crate::Phase::End => open.retain(|o| *o != (kind, id.clone())),
            crate::Phase::Delta => {}
        }
    }
    assert!(open.is_empty(), "lifecycles left open: {open:?}");
    if let Some(cp) = &whole.outcome.checkpoint
        && cp.valid
    {
        assert!(
            whole.outcome.failure.is_none(),
            "a valid checkpoint on a failed run"
        );
        assert_eq!(code, 0, "a valid checkpoint with exit code {code}");
    }
}

/// Deterministic fuzz inputs for [`fuzz_replay`] without a fuzzer (the CI smoke run): `count`
/// mutations of `seeds` (recorded outputs) — bytes flipped, ranges cut or repeated, lines
/// duplicated, random bytes inserted, seeds spliced — each prefixed with the three control
/// bytes `fuzz_replay` reads. The same `seed` gives the same inputs.
pub fn fuzz_inputs(seeds: &[&[u8]], count: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut state = seed | 1;
    let mut next = move || {
        // xorshift64*
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let mut inputs = Vec::with_capacity(count);
    for _ in 0..count {
        let base = seeds[(next() as usize) % seeds.len().max(1)];
        let mut body = base.to_vec();
        for _ in 0..(1 + next() % 4) {
            let len = body.len().max(1);
            let at = (next() as usize) % len;
            match next() % 6 {
                0 if !body.is_empty() => body[at] ^= 1 << (next() % 8),
                1 => body.truncate(at),
                2 => {
                    let end = (at + (next() as usize) % 64).min(body.len());
                    body.drain(at.min(body.len())..end);
                }
                3 => {
                    let end = (at + (next() as usize) % 256).min(body.len());
                    let piece = body[at.min(body.len())..end].to_vec();
                    body.splice(at.min(body.len())..at.min(body.len()), piece);
                }
                4 => {
                    let junk: Vec<u8> = (0..(next() % 16)).map(|_| next() as u8).collect();
                    body.splice(at.min(body.len())..at.min(body.len()), junk);
                }
                _ => {
                    let other = seeds[(next() as usize) % seeds.len().max(1)];
                    let cut = (next() as usize) % other.len().max(1);
                    body.truncate(at.min(body.len()));
                    body.extend_from_slice(&other[cut.min(other.len())..]);
                }
            }
        }
        let mut input = vec![next() as u8, next() as u8, next() as u8];
        input.extend(body);
        inputs.push(input);
    }
    inputs
}
