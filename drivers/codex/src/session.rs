//! One Codex run: the state both transports share and the [`Session`] entry points, which
//! dispatch to `exec.rs` or `appserver.rs`. Must not: know wire details (the transport files
//! do) or item shapes (`items.rs` does).

use adaptor_sdk::json::{JsonLine, describe_exit, json_line, str_field};
use adaptor_sdk::{
    Actions, Checkpoint, Decision, ExitStatus, Failure, FailureReason, ItemKind, Launch,
    LineFramer, Outcome, RunRequest, Session, SessionState, StartError, TerminalPayload,
    Transcript, Usage, empty_outcome, items,
};
use serde_json::Value;

use crate::appserver::AppServer;
use crate::{Transport, transport};

/// Checkpoint data key: the thread's total usage after the run (so a resumed run can report
/// its own usage, not the thread's).
const USAGE_TOTAL: &str = "usage_total";

fn usage_to_json(u: &Usage) -> String {
    serde_json::json!({
        "input": u.input_tokens, "cached": u.cache_read_tokens, "cache_write": u.cache_write_tokens,
        "output": u.output_tokens, "reasoning": u.reasoning_tokens,
    })
    .to_string()
}

fn usage_from_json(text: &str) -> Option<Usage> {
    let v: Value = serde_json::from_str(text).ok()?;
    let n = |k: &str| adaptor_sdk::json::u64_field(&v, k);
    Some(Usage {
        input_tokens: n("input"),
        output_tokens: n("output"),
        cache_read_tokens: n("cached"),
        cache_write_tokens: n("cache_write"),
        reasoning_tokens: n("reasoning"),
        cost_usd: None,
    })
}

/// State of one Codex run.
pub struct CodexSession {
    pub(crate) request: RunRequest,
    pub(crate) config: Value,
    pub(crate) transport: Transport,
    stdout: LineFramer,
    stderr: LineFramer,
    pub(crate) transcript: Transcript,
    /// Final agent messages, joined for the run's text.
    pub(crate) texts: Vec<String>,
    /// Streamed parts still open: (is reasoning, item id).
    pub(crate) streaming_parts: Vec<(bool, String)>,
    /// Tool items started and not finished: (item id, tool name).
    pub(crate) open_tools: Vec<(String, String)>,
    pub(crate) thread_id: Option<String>,
    /// This run's usage (Codex reports thread totals; see [`CodexSession::thread_total`]).
    pub(crate) usage: Option<Usage>,
    /// The thread's total usage as last reported (kept in the checkpoint).
    pub(crate) total: Option<Usage>,
    /// The thread's total before this run (from the checkpoint, or reported for an earlier
    /// turn on the app-server).
    pub(crate) baseline: Option<Usage>,
    /// The turn completed (exec `turn.completed`, app-server `turn/completed` completed).
    pub(crate) completed: bool,
    pub(crate) terminal: Option<TerminalPayload>,
    pub(crate) failure: Option<(FailureReason, String)>,
    /// The last `error` message seen (Codex reports retries and failures this way).
    pub(crate) last_error: Option<String>,
    pub(crate) malformed: Option<String>,
    pub(crate) structured: Option<String>,
    pub(crate) app: AppServer,
    status: Option<ExitStatus>,
    /// The caller may add input while the turn runs (the app-server's `turn/steer`).
    steerable: bool,
}

impl CodexSession {
    /// A fresh turn state for `request`, whose config is already parsed as `config`.
    fn with_config(request: RunRequest, config: Value) -> Self {
        Self {
            transport: transport(&request, &config),
            request,
            config,
            stdout: LineFramer::default(),
            stderr: LineFramer::new(64 * 1024),
            transcript: Transcript::default(),
            texts: Vec::new(),
            streaming_parts: Vec::new(),
            open_tools: Vec::new(),
            thread_id: None,
            usage: None,
            total: None,
            baseline: None,
            completed: false,
            terminal: None,
            failure: None,
            last_error: None,
            malformed: None,
            structured: None,
            app: AppServer::default(),
            status: None,
            steerable: false,
        }
    }

    /// With a native output schema, Codex's final agent message is the JSON value
    /// (`--output-schema` / `outputSchema`): reported as the structured output when it parses.
    fn native_output(&self) -> Option<String> {
        let native = self
            .request
            .output_schema
            .as_ref()
            .is_some_and(|s| s.mechanism == adaptor_sdk::SchemaMechanism::Native);
        let last = self.texts.last()?;
        (native && serde_json::from_str::<Value>(last).is_ok()).then(|| last.trim().to_owned())
    }

    fn on_line(&mut self, frame: Value, text: &str, out: &mut Actions) {
        if self.terminal.is_some() {
            self.malformed.get_or_insert(format!(
                "frame after the terminal one: {}",
                adaptor_sdk::json::prefix(text, 200)
            ));
            return;
        }
        match self.transport {
            Transport::Exec => self.exec_frame(&frame, text, out),
            Transport::AppServer => self.app_frame(&frame, text, out),
        }
    }

    /// Record the terminal frame (exactly once) and end the turn.
    pub(crate) fn set_terminal(&mut self, event: &str, raw: &str, out: &mut Actions) {
        self.close_open(out);
        self.terminal = Some(TerminalPayload {
            event: event.into(),
            json: raw.trim_end_matches(['\r', '\n']).to_owned(),
        });
        let mut item = items::blank(ItemKind::Result);
        item.text = self.texts.last().cloned();
        item.is_error = self.failure.is_some();
        item.session_id = self.thread_id.clone();
        self.transcript.push(item, out);
        out.end_turn();
    }

    /// A thread id became known.
    pub(crate) fn thread_started(&mut self, id: &str, out: &mut Actions) {
        if self.thread_id.as_deref() == Some(id) {
            return;
        }
        self.thread_id = Some(id.to_owned());
        out.session(Some(id.to_owned()), self.request.model.clone());
        let mut item = items::blank(ItemKind::Init);
        item.session_id = Some(id.to_owned());
        self.transcript.push(item, out);
    }

    /// Stderr lines go to the transcript; the CLI's fatal `Error: …` line (exec prints why it
    /// could not run there, e.g. an unknown thread on resume) is kept for the failure.
    fn stderr_lines(&mut self, lines: Vec<adaptor_sdk::Line>, out: &mut Actions) {
        for line in &lines {
            if let adaptor_sdk::Line::Complete(bytes) = line
                && let Some(message) = String::from_utf8_lossy(bytes).strip_prefix("Error: ")
            {
                let message = message.trim().to_owned();
                if self.request.resume.is_some() && crate::exec::is_unknown_thread(&message) {
                    self.failure
                        .get_or_insert((FailureReason::ResumeRejected, message.clone()));
                }
                self.last_error.get_or_insert(message);
            }
        }
        self.transcript
            .push_text_lines(ItemKind::Stderr, lines, out);
    }

    /// Codex reported the thread's running total: this run's usage is the difference to the
    /// total before it. Emits a usage event when it changed.
    pub(crate) fn thread_total(&mut self, total: Usage, out: &mut Actions) {
        self.total = Some(total);
        let before = self.baseline.or_else(|| {
            let resume = self.request.resume.as_ref()?;
            let (_, json) = resume.state.data.iter().find(|(k, _)| k == USAGE_TOTAL)?;
            usage_from_json(json)
        });
        let minus = |a: Option<u64>, b: Option<u64>| a.map(|a| a.saturating_sub(b.unwrap_or(0)));
        let run = match before {
            Some(b) => Usage {
                input_tokens: minus(total.input_tokens, b.input_tokens),
                output_tokens: minus(total.output_tokens, b.output_tokens),
                cache_read_tokens: minus(total.cache_read_tokens, b.cache_read_tokens),
                cache_write_tokens: minus(total.cache_write_tokens, b.cache_write_tokens),
                reasoning_tokens: minus(total.reasoning_tokens, b.reasoning_tokens),
                cost_usd: None,
            },
            None => total,
        };
        if self.usage != Some(run) {
            self.usage = Some(run);
            out.usage(run);
        }
    }

    fn outcome_failure(&self) -> Option<Failure> {
        let fail = |reason, message: String| {
            Some(Failure {
                reason,
                message,
                details_json: None,
            })
        };
        let status = self.status.as_ref();
        if let Some(stopped) = adaptor_sdk::stopped_by_host(status) {
            return Some(stopped);
        }
        if let Some((reason, message)) = &self.failure {
            let reason = self.app.refusal.clone().unwrap_or(reason.clone());
            return fail(reason, message.clone());
        }
        if let Some(problem) = &self.malformed {
            return fail(FailureReason::ProtocolError, problem.clone());
        }
        if !self.completed {
            let why = match &self.last_error {
                Some(e) => format!(": {e}"),
                None => String::new(),
            };
            return fail(
                self.app
                    .refusal
                    .clone()
                    .unwrap_or(FailureReason::AgentError),
                format!(
                    "Codex {} before the turn completed{why}",
                    describe_exit(status)
                ),
            );
        }
        match status {
            Some(s) if s.code == Some(0) && s.signal.is_none() => None,
            // A resident turn: `turn/completed` ended it and the app-server lives on.
            None => None,
            other => fail(
                FailureReason::AgentError,
                format!("Codex {}", describe_exit(other)),
            ),
        }
    }
}

impl Session for CodexSession {
    fn new(request: RunRequest) -> Self {
        let config = adaptor_sdk::json::parse_config(&request.config_json).unwrap_or(Value::Null);
        Self::with_config(request, config)
    }

    fn from_turn(turn: adaptor_sdk::TurnRequest) -> Self {
        let mut session = Self::new(turn.request);
        session.steerable = turn.steerable;
        // Only the app-server takes input while a turn runs; exec reads one prompt.
        if turn.steerable && str_field(&session.config, "transport") != Some("exec") {
            session.transport = Transport::AppServer;
        }
        session
    }

    fn on_input(&mut self, text: &str, out: &mut Actions) -> Result<(), adaptor_sdk::InputError> {
        if self.transport != Transport::AppServer {
            return Err(adaptor_sdk::InputError::Unsupported(
                "Codex exec reads one prompt; input while a turn runs needs the app-server".into(),
            ));
        }
        if self.status.is_some() {
            return Err(adaptor_sdk::InputError::TurnOver(
                "the app-server has exited".into(),
            ));
        }
        self.app_input(text, out)
    }

    fn next_turn(&mut self, request: RunRequest, out: &mut Actions) -> Result<(), StartError> {
        if self.transport != Transport::AppServer {
            return Err(StartError::Unsupported(
                "only the app-server transport serves several turns".into(),
            ));
        }
        if self.status.is_some() {
            return Err(StartError::InvalidRequest(
                "the app-server has already exited".into(),
            ));
        }
        let Some(thread_id) = self.thread_id.clone() else {
            return Err(StartError::InvalidRequest(
                "the app-server has no thread yet".into(),
            ));
        };
        // A fresh turn state on the same process and thread: partial lines carry over, the
        // thread's usage total so far is this turn's baseline, request ids keep counting.
        let config = adaptor_sdk::json::next_turn_config(
            &self.request.config_json,
            &mut self.config,
            &request.config_json,
        );
        let mut next = CodexSession::with_config(request, config);
        next.transport = Transport::AppServer;
        std::mem::swap(&mut next.stdout, &mut self.stdout);
        std::mem::swap(&mut next.stderr, &mut self.stderr);
        next.thread_id = Some(thread_id.clone());
        next.baseline = self.total;
        next.total = self.total;
        next.app.next_id = self.app.next_id;
        *self = next;
        let frame = self.app_next_turn(&thread_id)?;
        out.write_stdin(frame);
        Ok(())
    }

    fn start(&mut self) -> Result<Launch, StartError> {
        use adaptor_sdk::Driver;
        crate::CodexDriver::validate_config(&self.config)
            .map_err(|e| StartError::InvalidRequest(format!("{}: {}", e.path, e.message)))?;
        if self.steerable && self.transport == Transport::Exec {
            return Err(StartError::Unsupported(
                "input while a turn runs needs the app-server transport; the config pins `exec`"
                    .into(),
            ));
        }
        adaptor_sdk::skills::skill_bundle(&self.request.skill_dirs)
            .map_err(StartError::InvalidRequest)?;
        if !self.request.skill_dirs.is_empty() && self.transport == Transport::Exec {
            return Err(StartError::Unsupported(
                "skills need the app-server transport (`skills/extraRoots/set`; `codex exec` has no flag for extra skill roots); the config pins `exec`"
                    .into(),
            ));
        }
        if let Some(resume) = &self.request.resume {
            if resume.mode == adaptor_sdk::SessionMode::Fork && self.transport == Transport::Exec {
                return Err(StartError::Unsupported(
                    "forking a Codex thread needs the app-server transport (`thread/fork`); \
                     `exec` cannot fork"
                        .into(),
                ));
            }
            // A stored id is data, never an argument of its own choosing (`exec resume ID`
            // takes it as a positional): it must be a Codex thread id.
            if !adaptor_sdk::json::is_uuid(&resume.state.resume_id) {
                return Err(StartError::ResumeRejected(format!(
                    "the resume id {:?} is not a Codex thread id (a UUID)",
                    resume.state.resume_id.chars().take(80).collect::<String>()
                )));
            }
        }
        match self.transport {
            Transport::Exec => self.exec_launch(),
            Transport::AppServer => self.app_launch(),
        }
    }

    fn on_stdout(&mut self, chunk: &[u8], out: &mut Actions) {
        for line in self.stdout.push(chunk) {
            match json_line(line) {
                JsonLine::Blank => {}
                JsonLine::Object(frame, text) => self.on_line(frame, &text, out),
                JsonLine::Oversized(problem) | JsonLine::Malformed(problem) => {
                    self.malformed.get_or_insert(problem);
                }
                JsonLine::Text(text) => self
                    .transcript
                    .push(items::text(ItemKind::Stdout, &text), out),
            }
        }
    }

    fn on_stderr(&mut self, chunk: &[u8], out: &mut Actions) {
        let lines = self.stderr.push(chunk);
        self.stderr_lines(lines, out);
    }

    fn on_decision(&mut self, id: &str, decision: Decision, out: &mut Actions) {
        if self.transport == Transport::AppServer {
            self.app_decision(id, decision, out);
        }
    }

    fn on_cancel(&mut self, out: &mut Actions) {
        if self.transport == Transport::AppServer {
            self.app_cancel(out);
        }
    }

    fn on_exit(&mut self, status: &ExitStatus, out: &mut Actions) {
        if let Some(rest) = self.stdout.finish() {
            if self.terminal.is_none() {
                self.malformed.get_or_insert("truncated last line".into());
            } else if let JsonLine::Object(frame, text) = json_line(rest) {
                self.on_line(frame, &text, out);
            }
        }
        if let Some(rest) = self.stderr.finish() {
            self.stderr_lines(vec![rest], out);
        }
        self.close_open(out);
        self.status = Some(*status);
    }

    fn finish(&mut self) -> Outcome {
        let failure = self.outcome_failure();
        let data = self
            .total
            .map(|t| vec![(USAGE_TOTAL.to_owned(), usage_to_json(&t))])
            .unwrap_or_default();
        let checkpoint = self.thread_id.clone().map(|id| Checkpoint {
            state: SessionState {
                resume_id: id,
                display_id: None,
                data,
            },
            valid: failure.is_none() && self.completed,
        });
        let mut outcome = empty_outcome();
        outcome.text = self.texts.join("\n\n");
        outcome.transcript = self.transcript.to_vec();
        outcome.terminal = self.terminal.clone();
        outcome.usage = self.usage;
        outcome.model = self
            .request
            .model
            .clone()
            .or_else(|| adaptor_sdk::json::str_field(&self.config, "model").map(str::to_owned));
        outcome.checkpoint = checkpoint;
        outcome.structured_output = self.structured.clone().or_else(|| self.native_output());
        outcome.failure = failure;
        outcome.metadata.push((
            "transport".into(),
            match self.transport {
                Transport::Exec => "exec".into(),
                Transport::AppServer => "app-server".into(),
            },
        ));
        outcome
    }
}
