//! The app-server transport: `codex app-server`, JSON-RPC over stdio (one JSON object per line,
//! no `jsonrpc` member). The client lives here, as a state machine over the host's write-stdin
//! actions: `initialize` → `initialized` → `thread/start` (or `thread/resume`) → `turn/start`
//! → notifications until `turn/completed`, the terminal frame.
//!
//! Notifications: `thread/started`, `item/started|completed` (items, see `items.rs`),
//! `item/agentMessage/delta` (text deltas), `item/reasoning/*Delta` (thinking deltas),
//! `thread/tokenUsage/updated` (usage), `turn/completed` (status completed / interrupted /
//! failed), `error`; anything else becomes a vendor event. Server-initiated requests
//! `item/commandExecution/requestApproval` and `item/fileChange/requestApproval` become
//! permission approvals answered with `{decision: accept | decline | cancel}`; other server
//! requests get a JSON-RPC "method not found" error. The caller's input for a running turn is
//! a `turn/steer` request (`expectedTurnId` the running turn's id). Must not: map items.

use std::collections::HashMap;

use adaptor_sdk::json::{str_field, u64_field};
use adaptor_sdk::{
    Actions, ApprovalKind, ApprovalRequest, Decision, FailureReason, Fallback, Launch,
    SchemaMechanism, StartError, Usage,
};
use serde_json::{Value, json};

use crate::session::CodexSession;
use crate::{approval_policy, config_overrides, extra_args, sandbox_mode, schema_for_cli};

/// Our requests awaiting a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Initialize,
    ThreadStart,
    ThreadResume,
    ThreadFork,
    /// `skills/extraRoots/set`: the host's skill bundle, before the thread starts.
    SkillRoots,
    TurnStart,
    Interrupt,
    /// `turn/steer`: the caller's input for the running turn.
    Steer,
}

/// JSON-RPC client state of one run.
#[derive(Default)]
pub(crate) struct AppServer {
    /// Request ids keep counting across the turns of one process.
    pub(crate) next_id: u64,
    calls: HashMap<u64, Call>,
    turn_id: Option<String>,
    /// Host approval id → the server request's JSON-RPC id.
    approvals: HashMap<String, Value>,
    /// The failure an aborting refusal stands for, if one was sent.
    pub refusal: Option<FailureReason>,
    /// The caller's input that came before the turn's id was known (sent once it is).
    pending_input: Vec<String>,
    /// `turn/steer` requests awaiting their answer: request id → the input.
    steers: HashMap<u64, String>,
}

/// App-server usage (`tokenUsage.total` or `.last`) → the contract's usage.
pub(crate) fn app_usage(u: &Value) -> Usage {
    Usage {
        input_tokens: u64_field(u, "inputTokens"),
        output_tokens: u64_field(u, "outputTokens"),
        cache_read_tokens: u64_field(u, "cachedInputTokens"),
        cache_write_tokens: None,
        reasoning_tokens: u64_field(u, "reasoningOutputTokens"),
        cost_usd: None,
    }
}

fn line(value: &Value) -> Vec<u8> {
    let mut text = value.to_string();
    text.push('\n');
    text.into_bytes()
}

impl CodexSession {
    fn call(&mut self, call: Call, method: &str, params: Value) -> Vec<u8> {
        self.app.next_id += 1;
        let id = self.app.next_id;
        self.app.calls.insert(id, call);
        line(&json!({ "id": id, "method": method, "params": params }))
    }

    /// The caller's input for the running turn: `turn/steer`, at once when the turn's id is
    /// known, else as soon as it is.
    pub(crate) fn app_input(
        &mut self,
        text: &str,
        out: &mut Actions,
    ) -> Result<(), adaptor_sdk::InputError> {
        if self.terminal.is_some() {
            return Err(adaptor_sdk::InputError::TurnOver(
                "the Codex turn has completed".into(),
            ));
        }
        self.app.pending_input.push(text.to_owned());
        self.flush_input(out);
        Ok(())
    }

    /// Send the input held back until the turn's id was known.
    fn flush_input(&mut self, out: &mut Actions) {
        let (Some(thread), Some(turn)) = (self.thread_id.clone(), self.app.turn_id.clone()) else {
            return;
        };
        for text in std::mem::take(&mut self.app.pending_input) {
            let bytes = self.call(
                Call::Steer,
                "turn/steer",
                json!({
                    "threadId": thread,
                    "expectedTurnId": turn,
                    "input": [{ "type": "text", "text": text }],
                }),
            );
            self.app.steers.insert(self.app.next_id, text);
            out.write_stdin(bytes);
        }
    }

    /// Another turn on the same app-server process and thread: `turn/start` only (the
    /// process is initialised and the thread is loaded).
    pub(crate) fn app_next_turn(&mut self, thread_id: &str) -> Result<Vec<u8>, StartError> {
        let params = self
            .turn_params(thread_id)
            .map_err(StartError::InvalidRequest)?;
        Ok(self.call(Call::TurnStart, "turn/start", params))
    }

    pub(crate) fn app_launch(&mut self) -> Result<Launch, StartError> {
        let mut args = vec!["app-server".to_owned()];
        args.extend(config_overrides(&self.request, &self.config));
        let crate::McpLaunch {
            args: mcp_args,
            env,
        } = crate::mcp_overrides(&self.request)?;
        args.extend(mcp_args);
        args.extend(extra_args(&self.config));
        // The handshake and the call that opens the thread go out at once (the app-server
        // reads its stdin in order): none of it depends on the prompt, so the host may write
        // it to a prewarmed process before any run takes it, and the run then starts at
        // `turn/start`. The skill bundle's root must be set before the thread starts, so with
        // a bundle the thread call waits for that answer.
        let mut stdin = self.call(
            Call::Initialize,
            "initialize",
            json!({ "clientInfo": { "name": "agent-adaptor", "title": "agent-adaptor", "version": env!("CARGO_PKG_VERSION") } }),
        );
        stdin.extend(line(&json!({ "method": "initialized" })));
        let next = match adaptor_sdk::skills::skill_bundle(&self.request.skill_dirs) {
            Ok(Some(bundle)) => self.call(
                Call::SkillRoots,
                "skills/extraRoots/set",
                json!({ "extraRoots": [bundle.skills_dir] }),
            ),
            _ => self.thread_call(),
        };
        stdin.extend(next);
        Ok(Launch {
            program: str_field(&self.config, "command")
                .unwrap_or("codex")
                .to_owned(),
            args,
            env,
            cwd: None,
            stdin,
            keep_stdin_open: true,
            files: Vec::new(),
        })
    }

    /// The call that opens the run's thread: `thread/fork` (a fork: a new thread with the
    /// parent's history), `thread/resume` or `thread/start`.
    fn thread_call(&mut self) -> Vec<u8> {
        let mut params = self.thread_params();
        match &self.request.resume {
            Some(resume) if resume.mode == adaptor_sdk::SessionMode::Fork => {
                params["threadId"] = json!(resume.state.resume_id);
                self.call(Call::ThreadFork, "thread/fork", params)
            }
            Some(resume) => {
                params["threadId"] = json!(resume.state.resume_id);
                self.call(Call::ThreadResume, "thread/resume", params)
            }
            None => self.call(Call::ThreadStart, "thread/start", params),
        }
    }

    /// `thread/start` or `thread/resume` params common to both.
    fn thread_params(&self) -> Value {
        let mut params = json!({ "cwd": self.request.workspace });
        if let Some(mode) = sandbox_mode(self.request.policy.sandbox) {
            params["sandbox"] = json!(mode);
        }
        if let Some(policy) = approval_policy(self.request.policy.permission) {
            params["approvalPolicy"] = json!(policy);
        }
        if let Some(model) = adaptor_sdk::json::requested_model(&self.request, &self.config) {
            params["model"] = json!(model);
        }
        if let Some(text) = self
            .request
            .instructions
            .as_deref()
            .filter(|t| !t.is_empty())
        {
            params["developerInstructions"] = json!(text);
        }
        params
    }

    fn turn_params(&self, thread_id: &str) -> Result<Value, String> {
        let mut params = json!({
            "threadId": thread_id,
            "input": [{ "type": "text", "text": self.request.prompt }],
        });
        if let Some(policy) = approval_policy(self.request.policy.permission) {
            params["approvalPolicy"] = json!(policy);
        }
        if let Some(effort) = str_field(&self.config, "effort") {
            params["effort"] = json!(effort);
        }
        if let Some(schema) = &self.request.output_schema
            && schema.mechanism == SchemaMechanism::Native
        {
            let cleaned = schema_for_cli(&schema.schema_json)?;
            params["outputSchema"] = serde_json::from_str(&cleaned).map_err(|e| e.to_string())?;
        }
        Ok(params)
    }

    pub(crate) fn app_frame(&mut self, frame: &Value, raw: &str, out: &mut Actions) {
        let method = str_field(frame, "method");
        match (frame.get("id"), method) {
            (Some(id), Some(method)) => self.server_request(id.clone(), method, frame, out),
            (Some(id), None) => self.response(id, frame, raw, out),
            (None, Some(method)) => self.notification(method, frame, raw, out),
            (None, None) => {
                self.malformed
                    .get_or_insert("a JSON-RPC frame with neither id nor method".into());
            }
        }
    }

    fn fail_now(&mut self, reason: FailureReason, message: String, raw: &str, out: &mut Actions) {
        self.failure.get_or_insert((reason, message));
        self.set_terminal("error", raw, out);
    }

    fn response(&mut self, id: &Value, frame: &Value, raw: &str, out: &mut Actions) {
        let Some(call) = id.as_u64().and_then(|id| self.app.calls.remove(&id)) else {
            self.malformed
                .get_or_insert(format!("a response to unknown request id {id}"));
            return;
        };
        if call == Call::Steer {
            // The input is the user's once the app-server took it; a refusal (the turn had
            // just ended, …) is reported, never dropped.
            let text = id
                .as_u64()
                .and_then(|id| self.app.steers.remove(&id))
                .unwrap_or_default();
            match frame.get("error") {
                None => self.transcript.push(
                    adaptor_sdk::items::text(adaptor_sdk::ItemKind::User, &text),
                    out,
                ),
                Some(error) => {
                    let message = str_field(error, "message").unwrap_or("refused");
                    out.notice(
                        "steer-refused",
                        &format!("Codex did not take the input {text:?}: {message}"),
                        Some(raw.to_owned()),
                    );
                }
            }
            return;
        }
        if let Some(error) = frame.get("error") {
            let message = str_field(error, "message")
                .unwrap_or("the app-server refused the request")
                .to_owned();
            let reason = if matches!(call, Call::ThreadResume | Call::ThreadFork) {
                FailureReason::ResumeRejected
            } else {
                FailureReason::AgentError
            };
            self.fail_now(reason, message, raw, out);
            return;
        }
        let result = frame.get("result").unwrap_or(&Value::Null);
        match call {
            // `initialized` and the next call went out with `initialize` (see `app_launch`).
            Call::Initialize => {}
            // The skill bundle's root is in before the thread starts (the app-server has no
            // flag or config key for extra skill roots; a missing root would be silently
            // empty, so `start` checked the layout).
            Call::SkillRoots => {
                let next = self.thread_call();
                out.write_stdin(next);
            }
            Call::ThreadStart | Call::ThreadResume | Call::ThreadFork => {
                let Some(thread_id) = result
                    .get("thread")
                    .and_then(|t| str_field(t, "id"))
                    .map(str::to_owned)
                else {
                    self.malformed
                        .get_or_insert("thread/start result without thread.id".into());
                    return;
                };
                if call == Call::ThreadResume
                    && self
                        .request
                        .resume
                        .as_ref()
                        .is_some_and(|r| r.state.resume_id != thread_id)
                {
                    self.fail_now(
                        FailureReason::ResumeRejected,
                        format!("thread/resume returned another thread ({thread_id})"),
                        raw,
                        out,
                    );
                    return;
                }
                if call == Call::ThreadFork
                    && self
                        .request
                        .resume
                        .as_ref()
                        .is_some_and(|r| r.state.resume_id == thread_id)
                {
                    self.fail_now(
                        FailureReason::ResumeRejected,
                        format!(
                            "thread/fork returned the parent thread ({thread_id}), not a new one"
                        ),
                        raw,
                        out,
                    );
                    return;
                }
                self.thread_started(&thread_id, out);
                match self.turn_params(&thread_id) {
                    Ok(params) => {
                        let bytes = self.call(Call::TurnStart, "turn/start", params);
                        out.write_stdin(bytes);
                    }
                    Err(e) => self.fail_now(FailureReason::AgentError, e, raw, out),
                }
            }
            Call::TurnStart => {
                self.app.turn_id = result
                    .get("turn")
                    .and_then(|t| str_field(t, "id"))
                    .map(str::to_owned);
                self.flush_input(out);
            }
            // `{}`; the turn then completes with status `interrupted`.
            Call::Interrupt => {}
            Call::Steer => {}
        }
    }

    fn notification(&mut self, method: &str, frame: &Value, raw: &str, out: &mut Actions) {
        let params = frame.get("params").unwrap_or(&Value::Null);
        match method {
            "thread/started" => {
                if let Some(id) = params.get("thread").and_then(|t| str_field(t, "id")) {
                    self.thread_started(id, out);
                }
            }
            "item/started" => {
                if let Some(item) = params.get("item") {
                    self.item_started(item, out);
                }
            }
            "item/completed" => {
                if let Some(item) = params.get("item") {
                    self.item_completed(item, out);
                }
            }
            "item/agentMessage/delta" => {
                let id = str_field(params, "itemId").unwrap_or("message").to_owned();
                let delta = str_field(params, "delta").unwrap_or_default().to_owned();
                self.delta(false, &id, &delta, out);
            }
            "item/reasoning/textDelta" | "item/reasoning/summaryTextDelta" => {
                let id = str_field(params, "itemId")
                    .unwrap_or("reasoning")
                    .to_owned();
                let delta = str_field(params, "delta").unwrap_or_default().to_owned();
                self.delta(true, &id, &delta, out);
            }
            "thread/tokenUsage/updated" => {
                let total = params
                    .get("tokenUsage")
                    .and_then(|u| u.get("total"))
                    .filter(|u| u.is_object())
                    .map(app_usage);
                let ours = self.app.turn_id.is_some()
                    && str_field(params, "turnId") == self.app.turn_id.as_deref();
                match total {
                    Some(total) if ours => self.thread_total(total, out),
                    // The restored total after `thread/resume`: the baseline of this run.
                    Some(total) => self.baseline = Some(total),
                    None => {}
                }
            }
            "turn/started" => {
                if let Some(id) = params.get("turn").and_then(|t| str_field(t, "id")) {
                    self.app.turn_id = Some(id.to_owned());
                }
                self.flush_input(out);
            }
            "turn/completed" => {
                let turn = params.get("turn").unwrap_or(&Value::Null);
                match str_field(turn, "status") {
                    Some("completed") => self.completed = true,
                    Some("interrupted") => {
                        self.failure.get_or_insert((
                            self.app.refusal.clone().unwrap_or(FailureReason::Cancelled),
                            "the turn was interrupted".into(),
                        ));
                    }
                    other => {
                        let message = turn
                            .get("error")
                            .and_then(|e| str_field(e, "message"))
                            .map(str::to_owned)
                            .or_else(|| self.last_error.clone())
                            .unwrap_or_else(|| {
                                format!("the turn ended with status {}", other.unwrap_or("unknown"))
                            });
                        self.failure
                            .get_or_insert((FailureReason::AgentError, message));
                    }
                }
                self.set_terminal("turn/completed", raw, out);
            }
            "error" => {
                let message = params
                    .get("error")
                    .and_then(|e| str_field(e, "message"))
                    .unwrap_or("Codex reported an error")
                    .to_owned();
                out.notice("codex-error", &message, Some(raw.to_owned()));
                self.last_error = Some(message);
            }
            other => out.vendor(other, raw),
        }
    }

    fn server_request(&mut self, id: Value, method: &str, frame: &Value, out: &mut Actions) {
        let params = frame.get("params").unwrap_or(&Value::Null);
        let (tool, title, details) = match method {
            "item/commandExecution/requestApproval" => {
                let command = params.get("command").cloned().unwrap_or(Value::Null);
                let shown = match &command {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" "),
                    other => other.to_string(),
                };
                (
                    "shell",
                    format!("Run `{shown}`?"),
                    json!({ "command": command, "cwd": params.get("cwd"), "reason": params.get("reason") }),
                )
            }
            "item/fileChange/requestApproval" => (
                "apply_patch",
                "Apply the file changes?".to_owned(),
                json!({ "reason": params.get("reason"), "grantRoot": params.get("grantRoot") }),
            ),
            other => {
                out.write_stdin(line(&json!({
                    "id": id,
                    "error": { "code": -32601, "message": format!("`{other}` is not supported by the agent-adaptor codex driver") },
                })));
                return;
            }
        };
        let approval_id = format!("rpc-{id}");
        self.app.approvals.insert(approval_id.clone(), id);
        out.request_approval(ApprovalRequest {
            id: approval_id,
            kind: ApprovalKind::Permission,
            title,
            tool_call_id: str_field(params, "itemId").map(str::to_owned),
            tool_name: Some(tool.into()),
            choices: Vec::new(),
            details_json: Some(details.to_string()),
        });
    }

    /// Cancel: ask the app-server to interrupt the running turn (`turn/interrupt`); it then
    /// completes the turn as `interrupted` and exits when the host closes stdin. Nothing to
    /// do before a turn runs (the host stops the process at once).
    pub(crate) fn app_cancel(&mut self, out: &mut Actions) {
        let (Some(thread), Some(turn)) = (self.thread_id.clone(), self.app.turn_id.clone()) else {
            return;
        };
        if self.terminal.is_some() {
            return;
        }
        let bytes = self.call(
            Call::Interrupt,
            "turn/interrupt",
            json!({ "threadId": thread, "turnId": turn }),
        );
        out.write_stdin(bytes);
    }

    pub(crate) fn app_decision(&mut self, id: &str, decision: Decision, out: &mut Actions) {
        let Some(rpc_id) = self.app.approvals.remove(id) else {
            return;
        };
        let policy = &self.request.policy;
        let (answer, refusal) = match decision {
            Decision::Approve(_) | Decision::Answer(_) => ("accept", None),
            Decision::Deny(_) if policy.on_reject == Fallback::Continue => ("decline", None),
            Decision::Deny(_) => ("cancel", Some(FailureReason::ApprovalDenied)),
            Decision::TimedOut if policy.on_timeout == Fallback::Continue => ("decline", None),
            Decision::TimedOut => ("cancel", Some(FailureReason::ApprovalTimeout)),
            Decision::Unanswered => ("cancel", Some(FailureReason::ApprovalUnanswered)),
            Decision::Cancelled => ("cancel", Some(FailureReason::Cancelled)),
        };
        if refusal.is_some() {
            self.app.refusal = refusal;
        }
        out.write_stdin(line(
            &json!({ "id": rpc_id, "result": { "decision": answer } }),
        ));
    }
}
