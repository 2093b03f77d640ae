//! One ACP run: the protocol state machine.
//!
//! `initialize` (protocol version checked, capabilities read) → `session/new`, or
//! `session/load` / `session/resume` for a thread → the session's model, mode and config
//! options (`session/set_config_option`, `session/set_mode`, `session/set_model`) → one
//! `session/prompt`, whose result ends the turn. The agent's `session/request_permission`
//! becomes an approval request; `fs/*`, `terminal/*` and any other request get a JSON-RPC
//! error. A resident process serves the next turn with another `session/prompt`.
//!
//! Owns: the order of calls, the agent's requests, cancel, the outcome and the checkpoint.
//! Must not: map `session/update` contents (`updates.rs`) or encode frames (`rpc.rs`).

use std::collections::{BTreeMap, VecDeque};

use adaptor_sdk::json::{JsonLine, describe_exit, json_line, str_field, u64_field};
use adaptor_sdk::{
    Actions, ApprovalKind, ApprovalRequest, Checkpoint, Choice, Decision, ExitStatus, Failure,
    FailureReason, Fallback, ItemKind, Launch, LineFramer, McpServer, McpTransport, Outcome,
    RunRequest, Session, SessionMode, SessionState, StartError, TerminalPayload, Transcript, Usage,
    empty_outcome, items,
};
use serde_json::{Value, json};

use crate::rpc::{self, Call, Frame, Rpc};
use crate::updates::Updates;
use crate::{PROTOCOL_VERSION, Restore, agent_args, restore, strings};

/// Checkpoint data key: the session's cumulative cost in US dollars after the run (a
/// resumed run reports its own cost, not the session's).
const COST_TOTAL: &str = "cost_total";

/// After `session/load` answers, the prompt waits until no history update arrived for this
/// long (the replay may trail the response)…
const SETTLE_MS: u64 = 200;
/// …but no longer than this many periods (then later updates count as the turn's).
const SETTLE_MAX_TICKS: u32 = 25;
const SETTLE_TIMER: u64 = 1;

/// A loaded session waiting for the agent's history replay to end.
#[derive(Debug)]
struct Settling {
    result: Value,
    raw: String,
    /// Replayed updates counted at the last tick.
    seen: u64,
    ticks: u32,
}

/// The most stderr kept for a failure message.
const STDERR_TAIL: usize = 2000;

/// Where the connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Initializing,
    Opening,
    Configuring,
    Prompting,
    Done,
}

/// A permission request awaiting the host's decision.
#[derive(Debug)]
struct PendingApproval {
    rpc_id: Value,
    options: Vec<Value>,
}

/// State of one ACP run (and, on a resident process, of the connection across turns).
pub struct AcpSession {
    pub(crate) request: RunRequest,
    pub(crate) config: Value,
    stdout: LineFramer,
    stderr: LineFramer,
    /// Stdout lines received on this connection (the position in error messages).
    line_no: u64,
    rpc: Rpc,
    stage: Stage,
    /// `initialize`'s `agentCapabilities`.
    capabilities: Value,
    session_id: Option<String>,
    /// `session/load` is running: the agent replays the history, which belongs to the runs
    /// that made it, not to this one.
    replaying: bool,
    replayed: u64,
    /// Calls still to make before the prompt.
    setup: VecDeque<(Call, &'static str, Value)>,
    pub(crate) transcript: Transcript,
    pub(crate) texts: Vec<String>,
    pub(crate) updates: Updates,
    approvals: BTreeMap<String, PendingApproval>,
    usage: Option<Usage>,
    /// The session's cumulative cost as last reported, and before this run.
    cost_total: Option<f64>,
    cost_baseline: Option<f64>,
    model: Option<String>,
    stop_reason: Option<String>,
    terminal: Option<TerminalPayload>,
    failure: Option<(FailureReason, String)>,
    malformed: Option<String>,
    /// A refused approval that ends the turn: the reason the turn fails with.
    refusal: Option<(FailureReason, String)>,
    cancel_sent: bool,
    stderr_tail: String,
    status: Option<ExitStatus>,
    /// The usage changed since the last usage event.
    pending_usage: bool,
    /// `session/load` answered; the replay is settling.
    settling: Option<Settling>,
}

impl AcpSession {
    /// A protocol problem at the current stdout line (the first one is kept).
    pub(crate) fn protocol_problem(&mut self, problem: String) {
        let line = self.line_no;
        self.malformed
            .get_or_insert_with(|| format!("stdout line {line}: {problem}"));
    }

    fn line_failure(
        &mut self,
        reason: FailureReason,
        message: String,
        raw: &str,
        out: &mut Actions,
    ) {
        let line = self.line_no;
        self.failure
            .get_or_insert((reason, format!("{message} (stdout line {line})")));
        self.set_terminal("error", raw, out);
    }

    /// Record the terminal frame (exactly once) and end the turn.
    fn set_terminal(&mut self, event: &str, raw: &str, out: &mut Actions) {
        if self.terminal.is_some() {
            return;
        }
        self.close_open(out);
        self.stage = Stage::Done;
        self.terminal = Some(TerminalPayload {
            event: event.into(),
            json: raw.trim_end_matches(['\r', '\n']).to_owned(),
        });
        let mut item = items::blank(ItemKind::Result);
        item.text = self.texts.last().cloned();
        // The turn's own verdict: an approval refused while the agent goes on is the
        // outcome's business (it may be decided before or after this frame).
        item.is_error = self.failure.is_some();
        item.session_id = self.session_id.clone();
        if let Some(stop) = &self.stop_reason {
            item.data_json = Some(json!({ "stopReason": stop }).to_string());
        }
        self.transcript.push(item, out);
        out.end_turn();
    }

    pub(crate) fn set_cost_total(&mut self, total: f64) {
        self.cost_total = Some(total);
        if self.replaying {
            return;
        }
        let before = self.cost_baseline.unwrap_or(0.0);
        let cost = (total - before).max(0.0);
        let mut usage = self.usage.unwrap_or(Usage {
            input_tokens: None,
            output_tokens: None,
            cache_read_tokens: None,
            cache_write_tokens: None,
            reasoning_tokens: None,
            cost_usd: None,
        });
        if usage.cost_usd != Some(cost) {
            usage.cost_usd = Some(cost);
            self.set_usage(usage);
        }
    }

    /// Qwen Code's extension: each model call's usage in the `_meta.usage` of an update
    /// (ACP `Usage` field names). Summed over the turn; a prompt result's own `usage` wins.
    pub(crate) fn add_update_usage(&mut self, reported: &Value) {
        if self.replaying {
            return;
        }
        let call = acp_usage(reported, None);
        let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        let mut usage = self.usage.unwrap_or(call);
        if self.usage.is_some() {
            usage.input_tokens = sum(usage.input_tokens, call.input_tokens);
            usage.output_tokens = sum(usage.output_tokens, call.output_tokens);
            usage.cache_read_tokens = sum(usage.cache_read_tokens, call.cache_read_tokens);
            usage.cache_write_tokens = sum(usage.cache_write_tokens, call.cache_write_tokens);
            usage.reasoning_tokens = sum(usage.reasoning_tokens, call.reasoning_tokens);
        }
        self.set_usage(usage);
    }

    fn set_usage(&mut self, usage: Usage) {
        self.usage = Some(usage);
        self.pending_usage = true;
    }

    fn on_line(&mut self, frame: Value, raw: &str, out: &mut Actions) {
        let classified = match rpc::classify(&frame) {
            Ok(f) => f,
            Err(problem) => {
                self.protocol_problem(problem);
                return;
            }
        };
        match classified {
            Frame::Response { id, outcome } => {
                let Some(call) = self.rpc.take(id) else {
                    self.protocol_problem(format!("a response to unknown request id {id}"));
                    return;
                };
                match outcome {
                    Ok(result) => self.response(call, result, raw, out),
                    Err(error) => self.error_response(call, error, raw, out),
                }
            }
            Frame::Request { id, method, params } => {
                let (id, method, params) = (id.clone(), method.to_owned(), params.clone());
                self.agent_request(&id, &method, &params, out);
            }
            Frame::Notification { method, params } => {
                let (method, params) = (method.to_owned(), params.clone());
                self.notification(&method, &params, raw, out);
            }
        }
        self.flush_usage(out);
    }

    fn flush_usage(&mut self, out: &mut Actions) {
        if std::mem::take(&mut self.pending_usage)
            && let Some(usage) = self.usage
        {
            out.usage(usage);
        }
    }

    fn error_response(&mut self, call: Call, error: &Value, raw: &str, out: &mut Actions) {
        let detail = rpc::describe_error(error);
        let (reason, message) = match &call {
            Call::Initialize => (
                FailureReason::AgentError,
                format!("the agent refused initialize: {detail}"),
            ),
            Call::NewSession => (
                FailureReason::AgentError,
                format!("the agent refused session/new: {detail}"),
            ),
            Call::LoadSession | Call::ResumeSession => (
                FailureReason::ResumeRejected,
                format!("the agent could not restore the session: {detail}"),
            ),
            Call::SetConfigOption(id) => (
                FailureReason::AgentError,
                format!("the agent refused config option `{id}`: {detail}"),
            ),
            Call::SetMode => (
                FailureReason::AgentError,
                format!("the agent refused the mode: {detail}"),
            ),
            Call::SetModel => (
                FailureReason::AgentError,
                format!("the agent refused the model: {detail}"),
            ),
            Call::Prompt => (FailureReason::AgentError, detail),
        };
        self.line_failure(reason, message, raw, out);
    }

    fn response(&mut self, call: Call, result: &Value, raw: &str, out: &mut Actions) {
        match call {
            Call::Initialize => self.initialized(result, raw, out),
            Call::NewSession | Call::LoadSession | Call::ResumeSession => {
                let id = if call == Call::NewSession {
                    match str_field(result, "sessionId") {
                        Some(id) if !id.is_empty() => id.to_owned(),
                        _ => {
                            self.line_failure(
                                FailureReason::ProtocolError,
                                "session/new returned no sessionId".into(),
                                raw,
                                out,
                            );
                            return;
                        }
                    }
                } else if call == Call::LoadSession {
                    // The replay may go on after the response (Gemini CLI sends most of the
                    // history after it, even after the next prompt was sent): the prompt
                    // waits until the agent has been quiet for a settle period.
                    self.settling = Some(Settling {
                        result: result.clone(),
                        raw: raw.to_owned(),
                        seen: self.replayed,
                        ticks: 0,
                    });
                    out.set_timer(SETTLE_TIMER, SETTLE_MS);
                    return;
                } else {
                    self.session_id.clone().unwrap_or_default()
                };
                self.opened(id, result, raw, out);
            }
            Call::SetConfigOption(_) | Call::SetMode | Call::SetModel => {
                self.next_setup(out);
            }
            Call::Prompt => {
                let stop = str_field(result, "stopReason").map(str::to_owned);
                self.prompt_usage(result);
                self.flush_usage(out);
                match stop.as_deref() {
                    Some("end_turn") => {}
                    Some("cancelled") => {
                        let (reason, message) = self.refusal.clone().unwrap_or((
                            FailureReason::Cancelled,
                            "the turn was cancelled (stop reason cancelled)".into(),
                        ));
                        self.failure.get_or_insert((reason, message));
                    }
                    Some(other) => {
                        let why = match other {
                            "refusal" => "the agent refused to continue",
                            "max_tokens" => "the model reached its token limit",
                            "max_turn_requests" => "the turn reached its model request limit",
                            _ => "the turn ended early",
                        };
                        self.failure.get_or_insert((
                            FailureReason::AgentError,
                            format!("{why} (stop reason {other})"),
                        ));
                    }
                    None => {
                        self.protocol_problem("a session/prompt result without stopReason".into());
                    }
                }
                self.stop_reason = stop;
                self.set_terminal("session/prompt", raw, out);
            }
        }
    }

    /// The `initialize` result: check the version and capabilities, then open the session.
    fn initialized(&mut self, result: &Value, raw: &str, out: &mut Actions) {
        match u64_field(result, "protocolVersion") {
            Some(PROTOCOL_VERSION) => {}
            other => {
                let got = other.map_or_else(
                    || format!("{}", result.get("protocolVersion").unwrap_or(&Value::Null)),
                    |v| v.to_string(),
                );
                self.line_failure(
                    FailureReason::AgentError,
                    format!(
                        "the agent speaks ACP protocol version {got}; this driver speaks version {PROTOCOL_VERSION}"
                    ),
                    raw,
                    out,
                );
                return;
            }
        }
        self.capabilities = result
            .get("agentCapabilities")
            .cloned()
            .unwrap_or(Value::Null);
        if let Some(info) = result.get("agentInfo").filter(|i| i.is_object()) {
            out.vendor("acp/agent_info", &info.to_string());
            // The version the agent reports, against what the preset was verified with.
            if let (Some(agent), Some(version)) = (
                crate::agent_preset(&self.config),
                str_field(info, "version"),
            ) && !agent.verified.contains(&version)
            {
                out.notice(
                    "cli.version_unverified",
                    &format!(
                        "{} {version} is not a version this driver was verified with ({}); its protocol may differ",
                        agent.display_name,
                        agent.verified.join(", ")
                    ),
                    None,
                );
            }
        }
        if let Some((lifts, caveat)) = crate::agent_preset(&self.config).and_then(|a| a.mcp_caveat)
            && !self.request.mcp_servers.is_empty()
        {
            let mut args = crate::agent_args(&self.config);
            args.extend(strings(&self.config, "extra_args"));
            if !args.iter().any(|a| a == lifts) {
                out.notice("acp.mcp_caveat", caveat, None);
            }
        }
        let mcp = &self.capabilities["mcpCapabilities"];
        for server in &self.request.mcp_servers {
            let (transport, flag) = match &server.transport {
                McpTransport::Stdio(_) => continue,
                McpTransport::Http(_) => ("HTTP", "http"),
                McpTransport::Sse(_) => ("SSE", "sse"),
            };
            if mcp.get(flag).and_then(Value::as_bool) != Some(true) {
                self.line_failure(
                    FailureReason::AgentError,
                    format!(
                        "MCP server `{}` needs {transport}, which the agent does not accept (mcpCapabilities.{flag} is not true)",
                        server.name
                    ),
                    raw,
                    out,
                );
                return;
            }
        }
        let mcp_servers: Vec<Value> = self.request.mcp_servers.iter().map(mcp_server).collect();
        let cwd = self.request.workspace.clone();
        let Some(resume) = self.request.resume.clone() else {
            self.stage = Stage::Opening;
            let bytes = self.rpc.request(
                Call::NewSession,
                "session/new",
                json!({ "cwd": cwd, "mcpServers": mcp_servers }),
            );
            out.write_stdin(bytes);
            return;
        };
        let declares_resume = self.capabilities["sessionCapabilities"]
            .get("resume")
            .is_some_and(|r| !r.is_null());
        let declares_load = self.capabilities["loadSession"].as_bool() == Some(true);
        let how = match restore(&self.config) {
            Restore::Auto if declares_resume => Restore::Resume,
            Restore::Auto if declares_load => Restore::Load,
            Restore::Resume if declares_resume => Restore::Resume,
            Restore::Load if declares_load => Restore::Load,
            _ => Restore::None,
        };
        let id = resume.state.resume_id.clone();
        self.session_id = Some(id.clone());
        self.stage = Stage::Opening;
        let params = json!({ "sessionId": id, "cwd": cwd, "mcpServers": mcp_servers });
        let bytes =
            match how {
                Restore::Resume => self
                    .rpc
                    .request(Call::ResumeSession, "session/resume", params),
                Restore::Load => {
                    self.replaying = true;
                    self.rpc.request(Call::LoadSession, "session/load", params)
                }
                Restore::None | Restore::Auto => {
                    self.line_failure(
                    FailureReason::ResumeRejected,
                    format!(
                        "the agent cannot restore a session in a new process (it declares {}{})",
                        if declares_load { "loadSession" } else { "no loadSession" },
                        if declares_resume {
                            ", sessionCapabilities.resume"
                        } else {
                            " and no sessionCapabilities.resume"
                        }
                    ),
                    raw,
                    out,
                );
                    return;
                }
            };
        out.write_stdin(bytes);
    }

    /// The session is open (new, loaded or resumed): queue its settings, then prompt.
    fn opened(&mut self, id: String, result: &Value, raw: &str, out: &mut Actions) {
        if self.session_id.as_deref() != Some(&id) {
            self.session_id = Some(id.clone());
        }
        let current_model = result
            .get("models")
            .and_then(|m| str_field(m, "currentModelId"))
            .map(str::to_owned)
            .or_else(|| config_option(result, "model").and_then(current_value));
        self.model = current_model;
        out.session(Some(id.clone()), self.model.clone());
        let mut item = items::blank(ItemKind::Init);
        item.session_id = Some(id.clone());
        item.model = self.model.clone();
        let offered = json!({
            "modes": result.get("modes"),
            "models": result.get("models"),
            "configOptions": result.get("configOptions"),
        });
        item.data_json = Some(offered.to_string());
        self.transcript.push(item, out);
        match self.settings(&id, result) {
            Ok(calls) => self.setup = calls.into(),
            Err(message) => {
                self.line_failure(FailureReason::AgentError, message, raw, out);
                return;
            }
        }
        self.stage = Stage::Configuring;
        self.next_setup(out);
    }

    /// The calls that give the session the requested model, mode and config options; an
    /// error names what the agent does not offer, and what it does.
    fn settings(
        &self,
        session: &str,
        result: &Value,
    ) -> Result<Vec<(Call, &'static str, Value)>, String> {
        let mut calls = Vec::new();
        let set_option = |id: &str, value: &str| {
            (
                Call::SetConfigOption(id.to_owned()),
                "session/set_config_option",
                json!({ "sessionId": session, "configId": id, "value": value }),
            )
        };
        if let Some(model) = adaptor_sdk::json::requested_model(&self.request, &self.config) {
            if let Some(option) = config_option(result, "model") {
                check_value(option, &model, "model")?;
                if current_value(option).as_deref() != Some(&model) {
                    calls.push(set_option(
                        str_field(option, "id").unwrap_or("model"),
                        &model,
                    ));
                }
            } else if let Some(models) = result.get("models").filter(|m| m.is_object()) {
                let available: Vec<&str> = models
                    .get("availableModels")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|m| str_field(m, "modelId")).collect())
                    .unwrap_or_default();
                if !available.contains(&model.as_str()) {
                    return Err(format!(
                        "the agent does not offer model `{model}` (it offers: {})",
                        list(&available)
                    ));
                }
                if str_field(models, "currentModelId") != Some(&model) {
                    calls.push((
                        Call::SetModel,
                        "session/set_model",
                        json!({ "sessionId": session, "modelId": model }),
                    ));
                }
            } else {
                return Err(format!(
                    "model `{model}` was asked for, but the agent offers no model selection"
                ));
            }
        }
        if let Some(mode) = str_field(&self.config, "mode") {
            if let Some(modes) = result.get("modes").filter(|m| m.is_object()) {
                let available: Vec<&str> = modes
                    .get("availableModes")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|m| str_field(m, "id")).collect())
                    .unwrap_or_default();
                if !available.contains(&mode) {
                    return Err(format!(
                        "the agent does not offer mode `{mode}` (it offers: {})",
                        list(&available)
                    ));
                }
                if str_field(modes, "currentModeId") != Some(mode) {
                    calls.push((
                        Call::SetMode,
                        "session/set_mode",
                        json!({ "sessionId": session, "modeId": mode }),
                    ));
                }
            } else if let Some(option) = config_option(result, "mode") {
                check_value(option, mode, "mode")?;
                if current_value(option).as_deref() != Some(mode) {
                    calls.push(set_option(str_field(option, "id").unwrap_or("mode"), mode));
                }
            } else {
                return Err(format!(
                    "mode `{mode}` was asked for, but the agent offers no modes"
                ));
            }
        }
        if let Some(options) = self.config.get("config_options").and_then(Value::as_object) {
            let offered: Vec<&Value> = result
                .get("configOptions")
                .and_then(Value::as_array)
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            for (id, value) in options {
                let value = value.as_str().unwrap_or_default();
                let Some(option) = offered.iter().find(|o| str_field(o, "id") == Some(id)) else {
                    let ids: Vec<&str> =
                        offered.iter().filter_map(|o| str_field(o, "id")).collect();
                    return Err(format!(
                        "the agent offers no config option `{id}` (it offers: {})",
                        list(&ids)
                    ));
                };
                check_value(option, value, id)?;
                if current_value(option).as_deref() != Some(value) {
                    calls.push(set_option(id, value));
                }
            }
        }
        Ok(calls)
    }

    /// Send the next setting call, or the prompt when none is left.
    fn next_setup(&mut self, out: &mut Actions) {
        if let Some((call, method, params)) = self.setup.pop_front() {
            let bytes = self.rpc.request(call, method, params);
            out.write_stdin(bytes);
            return;
        }
        self.send_prompt(out);
    }

    fn send_prompt(&mut self, out: &mut Actions) {
        let Some(id) = self.session_id.clone() else {
            return;
        };
        self.stage = Stage::Prompting;
        let bytes = self.rpc.request(
            Call::Prompt,
            "session/prompt",
            json!({ "sessionId": id, "prompt": [{ "type": "text", "text": self.request.prompt }] }),
        );
        out.write_stdin(bytes);
    }

    /// The prompt result's token usage (ACP `usage`), merged with the cost reported so far.
    ///
    /// Gemini CLI reports no `usage` but its own extension, `_meta.quota` (`token_count`
    /// `{input_tokens, output_tokens}` and `model_usage[{model, token_count}]`): read when
    /// `usage` is absent, and the first model it names other than `auto` (the router's
    /// pseudo-model) is the run's model.
    fn prompt_usage(&mut self, result: &Value) {
        let cost_usd = self.usage.and_then(|u| u.cost_usd);
        let usage = if let Some(u) = result.get("usage").filter(|u| u.is_object()) {
            acp_usage(u, cost_usd)
        } else if let Some(quota) = result
            .get("_meta")
            .and_then(|m| m.get("quota"))
            .filter(|q| q.is_object())
        {
            if let Some(model) = quota
                .get("model_usage")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|m| str_field(m, "model"))
                .find(|m| *m != "auto")
            {
                self.model = Some(model.to_owned());
            }
            let Some(count) = quota.get("token_count").filter(|c| c.is_object()) else {
                return;
            };
            let n = |k: &str| u64_field(count, k);
            Usage {
                input_tokens: n("input_tokens"),
                output_tokens: n("output_tokens"),
                cache_read_tokens: None,
                cache_write_tokens: None,
                reasoning_tokens: None,
                cost_usd,
            }
        } else {
            return;
        };
        if self.usage != Some(usage) {
            self.set_usage(usage);
        }
    }

    fn notification(&mut self, method: &str, params: &Value, raw: &str, out: &mut Actions) {
        if method != "session/update" {
            out.vendor(&format!("acp/{method}"), raw);
            return;
        }
        let session = str_field(params, "sessionId");
        if session.is_none() || session != self.session_id.as_deref() {
            self.protocol_problem(format!(
                "a session/update for another session ({})",
                session.map_or_else(|| "none".into(), |s| format!("{s:?}"))
            ));
            return;
        }
        let Some(update) = params.get("update").filter(|u| u.is_object()) else {
            self.protocol_problem("a session/update without an update object".into());
            return;
        };
        if self.replaying {
            self.replayed += 1;
            if str_field(update, "sessionUpdate") == Some("usage_update") {
                self.session_update(update, raw, out);
                self.cost_baseline = self.cost_total;
            }
            return;
        }
        if self.terminal.is_some() {
            // After the prompt's result (between turns of a resident process): what the
            // agent still reports is kept as data; usage still counts.
            if str_field(update, "sessionUpdate") == Some("usage_update") {
                self.session_update(update, raw, out);
            } else {
                out.vendor("acp/late_update", raw);
            }
            return;
        }
        self.session_update(update, raw, out);
    }

    fn agent_request(&mut self, id: &Value, method: &str, params: &Value, out: &mut Actions) {
        if method != "session/request_permission" {
            let why = if method.starts_with("fs/") {
                "this client offers no file system (clientCapabilities.fs is false): use the agent's own file tools"
            } else if method.starts_with("terminal/") {
                "this client offers no terminals (clientCapabilities.terminal is false)"
            } else {
                "this client does not implement it"
            };
            out.notice(
                "acp.client_request_refused",
                &format!("the agent asked for `{method}`, refused: {why}"),
                None,
            );
            out.write_stdin(rpc::error_response(
                id,
                rpc::METHOD_NOT_FOUND,
                &format!("`{method}` is not supported: {why}"),
            ));
            return;
        }
        if str_field(params, "sessionId") != self.session_id.as_deref() {
            self.protocol_problem("a permission request for another session".into());
            out.write_stdin(cancelled_outcome(id));
            return;
        }
        if self.terminal.is_some() || self.cancel_sent {
            out.write_stdin(cancelled_outcome(id));
            return;
        }
        let options: Vec<Value> = params
            .get("options")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let tool = params.get("toolCall").unwrap_or(&Value::Null);
        let tool_id = str_field(tool, "toolCallId").map(str::to_owned);
        let known = tool_id
            .as_ref()
            .and_then(|t| self.updates.tools.get(t))
            .is_some();
        if !known && tool.get("toolCallId").is_some() {
            // The request announces the call (agents may ask before a `tool_call` update).
            let mut announced = tool.clone();
            announced["sessionUpdate"] = json!("tool_call");
            self.session_update(&announced, "", out);
        }
        let title = str_field(tool, "title")
            .map(|t| format!("Allow {t}?"))
            .unwrap_or_else(|| "Allow the tool call?".into());
        let approval_id = format!("permission-{id}");
        self.approvals.insert(
            approval_id.clone(),
            PendingApproval {
                rpc_id: id.clone(),
                options: options.clone(),
            },
        );
        out.request_approval(ApprovalRequest {
            id: approval_id,
            kind: ApprovalKind::Permission,
            title,
            tool_call_id: tool_id,
            tool_name: str_field(tool, "kind").map(str::to_owned),
            choices: options
                .iter()
                .filter_map(|o| {
                    Some(Choice {
                        key: str_field(o, "optionId")?.to_owned(),
                        label: str_field(o, "name").unwrap_or_default().to_owned(),
                        description: str_field(o, "kind").map(str::to_owned),
                    })
                })
                .collect(),
            details_json: Some(json!({ "toolCall": tool, "options": options }).to_string()),
        });
    }

    /// Stop the running prompt (`session/cancel`); pending permission requests are answered
    /// `cancelled`, as ACP requires.
    fn cancel_prompt(&mut self, out: &mut Actions) {
        if self.cancel_sent || self.terminal.is_some() || !self.rpc.awaits(&Call::Prompt) {
            return;
        }
        self.cancel_sent = true;
        for (_, pending) in std::mem::take(&mut self.approvals) {
            out.write_stdin(cancelled_outcome(&pending.rpc_id));
        }
        if let Some(id) = self.session_id.clone() {
            out.write_stdin(rpc::notification(
                "session/cancel",
                json!({ "sessionId": id }),
            ));
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
            return fail(reason.clone(), message.clone());
        }
        if let Some(problem) = &self.malformed {
            return fail(FailureReason::ProtocolError, problem.clone());
        }
        if let Some((reason, message)) = &self.refusal {
            return fail(reason.clone(), message.clone());
        }
        if self.terminal.is_none() {
            let stage = match self.stage {
                Stage::Initializing => "before initialize completed",
                Stage::Opening => "before the session opened",
                Stage::Configuring => "while the session was being configured",
                Stage::Prompting | Stage::Done => "before the turn completed",
            };
            let tail = self.stderr_tail.trim();
            let why = if tail.is_empty() {
                String::new()
            } else {
                format!(": {}", adaptor_sdk::json::prefix(last_line(tail), 300))
            };
            return fail(
                FailureReason::AgentError,
                format!("the agent {} {stage}{why}", describe_exit(status)),
            );
        }
        match status {
            // A resident turn (the process lives on), or a clean exit at end of input.
            None => None,
            Some(s) if s.code == Some(0) && s.signal.is_none() => None,
            Some(s) => fail(
                FailureReason::AgentError,
                format!(
                    "the agent {} after the turn completed",
                    describe_exit(Some(s))
                ),
            ),
        }
    }
}

impl Session for AcpSession {
    fn new(request: RunRequest) -> Self {
        let config = adaptor_sdk::json::parse_config(&request.config_json).unwrap_or(Value::Null);
        let cost_baseline = request.resume.as_ref().and_then(|r| {
            r.state
                .data
                .iter()
                .find(|(k, _)| k == COST_TOTAL)
                .and_then(|(_, v)| v.parse::<f64>().ok())
        });
        Self {
            request,
            config,
            stdout: LineFramer::default(),
            stderr: LineFramer::new(64 * 1024),
            line_no: 0,
            rpc: Rpc::default(),
            stage: Stage::Initializing,
            capabilities: Value::Null,
            session_id: None,
            replaying: false,
            replayed: 0,
            setup: VecDeque::new(),
            transcript: Transcript::default(),
            texts: Vec::new(),
            updates: Updates::default(),
            approvals: BTreeMap::new(),
            usage: None,
            cost_total: cost_baseline,
            cost_baseline,
            model: None,
            stop_reason: None,
            terminal: None,
            failure: None,
            malformed: None,
            refusal: None,
            cancel_sent: false,
            stderr_tail: String::new(),
            status: None,
            pending_usage: false,
            settling: None,
        }
    }

    fn start(&mut self) -> Result<Launch, StartError> {
        use adaptor_sdk::Driver;
        crate::AcpDriver::validate_config(&self.config)
            .map_err(|e| StartError::InvalidRequest(format!("{}: {}", e.path, e.message)))?;
        if str_field(&self.config, "command").is_none() {
            return Err(StartError::InvalidRequest(crate::missing_command()));
        }
        if let Some(resume) = &self.request.resume {
            if resume.mode == SessionMode::Fork {
                return Err(StartError::Unsupported(
                    "ACP has no stable session fork; this driver cannot fork a thread".into(),
                ));
            }
            if restore(&self.config) == Restore::None {
                return Err(StartError::Unsupported(
                    "this agent cannot restore a session in a new process (restore: none); \
                     a thread continues only on its resident process"
                        .into(),
                ));
            }
            if resume.state.resume_id.is_empty() {
                return Err(StartError::ResumeRejected("the resume id is empty".into()));
            }
        }
        // ACP passes header values literally in `session/new`: a `${NAME}` reference of the
        // host (the host tool server's token, a caller's bearer-token variable) would reach
        // the server as text, and the driver never sees the value.
        for server in &self.request.mcp_servers {
            if let McpTransport::Http(r) | McpTransport::Sse(r) = &server.transport
                && let Some((header, _)) = r.headers.iter().find(|(_, v)| {
                    !matches!(
                        adaptor_sdk::mcp::header_value(v),
                        adaptor_sdk::mcp::HeaderValue::Literal(_)
                    )
                })
            {
                return Err(StartError::Unsupported(format!(
                    "MCP server `{}`: header `{header}` refers to an environment variable, and ACP \
                     passes header values literally (host tools and bearer-token variables cannot \
                     reach an ACP agent; give literal headers)",
                    server.name
                )));
            }
        }
        let mut args = agent_args(&self.config);
        args.extend(strings(&self.config, "extra_args"));
        let stdin = self.rpc.request(
            Call::Initialize,
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": { "readTextFile": false, "writeTextFile": false },
                    "terminal": false,
                },
                "clientInfo": {
                    "name": "agent-adaptor",
                    "title": "agent-adaptor",
                    "version": env!("CARGO_PKG_VERSION"),
                },
            }),
        );
        Ok(Launch {
            program: str_field(&self.config, "command")
                .unwrap_or_default()
                .to_owned(),
            args,
            env: Vec::new(),
            cwd: None,
            stdin,
            keep_stdin_open: true,
            files: Vec::new(),
        })
    }

    fn on_stdout(&mut self, chunk: &[u8], out: &mut Actions) {
        for line in self.stdout.push(chunk) {
            self.line_no += 1;
            match json_line(line) {
                JsonLine::Blank => {}
                JsonLine::Object(frame, text) => self.on_line(frame, &text, out),
                JsonLine::Oversized(problem) | JsonLine::Malformed(problem) => {
                    self.protocol_problem(problem);
                }
                // ACP's stdout carries JSON-RPC only: anything else is a protocol problem,
                // kept in the transcript as it came.
                JsonLine::Text(text) => {
                    self.protocol_problem(format!(
                        "a line that is not JSON-RPC: {}",
                        adaptor_sdk::json::prefix(&text, 200)
                    ));
                    self.transcript
                        .push(items::text(ItemKind::Stdout, &text), out);
                }
            }
        }
    }

    fn on_stderr(&mut self, chunk: &[u8], out: &mut Actions) {
        let lines = self.stderr.push(chunk);
        self.keep_stderr(&lines);
        self.transcript
            .push_text_lines(ItemKind::Stderr, lines, out);
    }

    fn on_decision(&mut self, id: &str, decision: Decision, out: &mut Actions) {
        let Some(pending) = self.approvals.remove(id) else {
            return;
        };
        let policy = &self.request.policy;
        let pick = |kinds: &[&str]| -> Option<String> {
            kinds.iter().find_map(|kind| {
                pending
                    .options
                    .iter()
                    .find(|o| str_field(o, "kind") == Some(*kind))
                    .and_then(|o| str_field(o, "optionId"))
                    .map(str::to_owned)
            })
        };
        let reject = || pick(&["reject_once", "reject_always"]);
        // (option to select, or None to answer `cancelled`; the refusal that ends the turn)
        let (option, refusal) = match decision {
            Decision::Approve(None) => (pick(&["allow_once", "allow_always"]), None),
            Decision::Approve(Some(_)) => {
                out.notice(
                    "acp.updated_input_unsupported",
                    "ACP cannot take a replaced tool input: the call was rejected instead of approved with other input",
                    None,
                );
                (
                    reject(),
                    Some((
                        FailureReason::ApprovalDenied,
                        "the approval replaced the tool input, which ACP cannot carry".into(),
                    )),
                )
            }
            Decision::Answer(key) => {
                let offered = pending
                    .options
                    .iter()
                    .any(|o| str_field(o, "optionId") == Some(key.as_str()));
                if offered {
                    (Some(key), None)
                } else {
                    (reject(), None)
                }
            }
            Decision::Deny(message) if policy.on_reject == Fallback::Continue => {
                let _ = message;
                (reject(), None)
            }
            Decision::Deny(message) => (
                reject(),
                Some((
                    FailureReason::ApprovalDenied,
                    if message.is_empty() {
                        "the tool call was denied".into()
                    } else {
                        format!("the tool call was denied: {message}")
                    },
                )),
            ),
            Decision::TimedOut if policy.on_timeout == Fallback::Continue => (reject(), None),
            Decision::TimedOut => (
                reject(),
                Some((
                    FailureReason::ApprovalTimeout,
                    "the approval timed out".into(),
                )),
            ),
            Decision::Unanswered => (
                reject(),
                Some((
                    FailureReason::ApprovalUnanswered,
                    "nobody answered the approval".into(),
                )),
            ),
            Decision::Cancelled => (None, None),
        };
        let answer = match option {
            Some(option) => rpc::response(
                &pending.rpc_id,
                json!({ "outcome": { "outcome": "selected", "optionId": option } }),
            ),
            None => cancelled_outcome(&pending.rpc_id),
        };
        out.write_stdin(answer);
        if let Some(refusal) = refusal {
            self.refusal.get_or_insert(refusal);
            // The refusal ends the turn: stop the prompt.
            self.cancel_prompt(out);
        }
    }

    fn on_cancel(&mut self, out: &mut Actions) {
        self.cancel_prompt(out);
    }

    fn on_timer(&mut self, id: u64, out: &mut Actions) {
        if id != SETTLE_TIMER || self.terminal.is_some() {
            return;
        }
        let Some(settling) = self.settling.as_mut() else {
            return;
        };
        settling.ticks += 1;
        if self.replayed > settling.seen && settling.ticks < SETTLE_MAX_TICKS {
            settling.seen = self.replayed;
            out.set_timer(SETTLE_TIMER, SETTLE_MS);
            return;
        }
        let settling = self.settling.take().expect("settling");
        self.replaying = false;
        if self.replayed > 0 {
            out.notice(
                "acp.history_replayed",
                &format!(
                    "the agent replayed {} history updates of the restored session (not events of this run)",
                    self.replayed
                ),
                None,
            );
        }
        let id = self.session_id.clone().unwrap_or_default();
        self.opened(id, &settling.result, &settling.raw, out);
    }

    fn on_exit(&mut self, status: &ExitStatus, out: &mut Actions) {
        if let Some(rest) = self.stdout.finish() {
            self.line_no += 1;
            match json_line(rest) {
                JsonLine::Object(frame, text) => self.on_line(frame, &text, out),
                JsonLine::Blank => {}
                _ => self.protocol_problem("a truncated last line".into()),
            }
        }
        if let Some(rest) = self.stderr.finish() {
            self.keep_stderr(std::slice::from_ref(&rest));
            self.transcript
                .push_text_lines(ItemKind::Stderr, vec![rest], out);
        }
        self.close_open(out);
        self.status = Some(*status);
    }

    fn finish(&mut self) -> Outcome {
        let failure = self.outcome_failure();
        let data = self
            .cost_total
            .map(|c| vec![(COST_TOTAL.to_owned(), c.to_string())])
            .unwrap_or_default();
        let checkpoint = self.session_id.clone().map(|id| Checkpoint {
            state: SessionState {
                resume_id: id,
                display_id: None,
                data,
            },
            valid: failure.is_none() && self.terminal.is_some(),
        });
        let mut outcome = empty_outcome();
        outcome.text = self.texts.join("\n\n");
        outcome.transcript = self.transcript.to_vec();
        outcome.terminal = self.terminal.clone();
        outcome.usage = self.usage;
        outcome.model = self.model.clone();
        outcome.checkpoint = checkpoint;
        outcome.failure = failure;
        outcome
    }

    fn next_turn(&mut self, request: RunRequest, out: &mut Actions) -> Result<(), StartError> {
        if self.status.is_some() {
            return Err(StartError::InvalidRequest(
                "the agent has already exited".into(),
            ));
        }
        let Some(session_id) = self.session_id.clone() else {
            return Err(StartError::InvalidRequest(
                "the agent has no session yet".into(),
            ));
        };
        if self.terminal.is_none() {
            return Err(StartError::InvalidRequest(
                "the previous turn has not ended".into(),
            ));
        }
        // A fresh turn on the same connection and session: partial lines, request ids, the
        // capabilities and the session's cost so far carry over.
        let mut next = AcpSession::new(request);
        std::mem::swap(&mut next.stdout, &mut self.stdout);
        std::mem::swap(&mut next.stderr, &mut self.stderr);
        std::mem::swap(&mut next.rpc, &mut self.rpc);
        next.line_no = self.line_no;
        next.capabilities = self.capabilities.take();
        next.session_id = Some(session_id);
        next.model = self.model.clone();
        next.cost_total = self.cost_total;
        next.cost_baseline = self.cost_total;
        *self = next;
        self.send_prompt(out);
        Ok(())
    }
}

impl AcpSession {
    fn keep_stderr(&mut self, lines: &[adaptor_sdk::Line]) {
        for line in lines {
            if let adaptor_sdk::Line::Complete(bytes) = line {
                let text = String::from_utf8_lossy(bytes);
                if text.trim().is_empty() {
                    continue;
                }
                self.stderr_tail.push_str(text.trim_end());
                self.stderr_tail.push('\n');
                if self.stderr_tail.len() > STDERR_TAIL {
                    let cut = self.stderr_tail.len() - STDERR_TAIL;
                    let cut = (cut..self.stderr_tail.len())
                        .find(|i| self.stderr_tail.is_char_boundary(*i))
                        .unwrap_or(0);
                    self.stderr_tail.drain(..cut);
                }
            }
        }
    }
}

/// An ACP `Usage` object (`inputTokens`, `outputTokens`, `cachedReadTokens`,
/// `cachedWriteTokens`, `thoughtTokens`); what it does not report stays `None`.
fn acp_usage(u: &Value, cost_usd: Option<f64>) -> Usage {
    let n = |k: &str| u64_field(u, k);
    Usage {
        input_tokens: n("inputTokens"),
        output_tokens: n("outputTokens"),
        cache_read_tokens: n("cachedReadTokens"),
        cache_write_tokens: n("cachedWriteTokens"),
        reasoning_tokens: n("thoughtTokens"),
        cost_usd,
    }
}

fn last_line(text: &str) -> &str {
    text.lines().last().unwrap_or(text)
}

fn cancelled_outcome(id: &Value) -> Vec<u8> {
    rpc::response(id, json!({ "outcome": { "outcome": "cancelled" } }))
}

/// An MCP server as ACP's `session/new` takes it.
fn mcp_server(server: &McpServer) -> Value {
    let pairs = |list: &[(String, String)]| -> Vec<Value> {
        list.iter()
            .map(|(name, value)| json!({ "name": name, "value": value }))
            .collect()
    };
    match &server.transport {
        McpTransport::Stdio(s) => json!({
            "name": server.name, "command": s.command, "args": s.args, "env": pairs(&s.env),
        }),
        McpTransport::Http(r) => json!({
            "type": "http", "name": server.name, "url": r.url, "headers": pairs(&r.headers),
        }),
        McpTransport::Sse(r) => json!({
            "type": "sse", "name": server.name, "url": r.url, "headers": pairs(&r.headers),
        }),
    }
}

/// The session config option for a category (`model`, `mode`), by category or by id.
fn config_option<'a>(result: &'a Value, category: &str) -> Option<&'a Value> {
    let options = result.get("configOptions")?.as_array()?;
    options
        .iter()
        .find(|o| str_field(o, "category") == Some(category))
        .or_else(|| {
            options
                .iter()
                .find(|o| str_field(o, "id") == Some(category))
        })
}

fn current_value(option: &Value) -> Option<String> {
    str_field(option, "currentValue").map(str::to_owned)
}

/// The values a select option offers (flat or grouped).
fn option_values(option: &Value) -> Vec<&str> {
    let mut values = Vec::new();
    for entry in option
        .get("options")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(value) = str_field(entry, "value") {
            values.push(value);
        }
        for inner in entry
            .get("options")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(value) = str_field(inner, "value") {
                values.push(value);
            }
        }
    }
    values
}

fn check_value(option: &Value, value: &str, what: &str) -> Result<(), String> {
    let values = option_values(option);
    if !values.is_empty() && !values.contains(&value) {
        return Err(format!(
            "the agent does not offer {what} `{value}` (it offers: {})",
            list(&values)
        ));
    }
    Ok(())
}

fn list(items: &[&str]) -> String {
    if items.is_empty() {
        "nothing".into()
    } else {
        let shown: Vec<&str> = items.iter().take(20).copied().collect();
        let more = items.len().saturating_sub(shown.len());
        if more > 0 {
            format!("{} and {more} more", shown.join(", "))
        } else {
            shown.join(", ")
        }
    }
}
