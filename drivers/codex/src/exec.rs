//! The exec transport: `codex exec --json … -` with the prompt on stdin, and its JSON Lines
//! events: `thread.started{thread_id}`, `turn.started`, `item.started|updated|completed{item}`,
//! `turn.completed{usage}` (terminal, success), `turn.failed{error{message}}` (terminal,
//! failure) and `error{message}` (retries and failures; a failure when no turn completes).
//! Must not: map items (see `items.rs`).

use adaptor_sdk::json::{str_field, u64_field};
use adaptor_sdk::{
    Actions, FailureReason, Launch, PrivateFile, SchemaMechanism, SessionMode, StartError, Usage,
};
use serde_json::Value;

use crate::session::CodexSession;
use crate::{approval_policy, config_overrides, extra_args, sandbox_mode, toml_string};

/// Messages Codex prints when `resume` names a thread it does not have.
const UNKNOWN_THREAD: &[&str] = &["no rollout found", "unknown thread", "thread not found"];

/// `turn.completed` usage → the contract's usage.
pub(crate) fn exec_usage(u: &Value) -> Usage {
    Usage {
        input_tokens: u64_field(u, "input_tokens"),
        output_tokens: u64_field(u, "output_tokens"),
        cache_read_tokens: u64_field(u, "cached_input_tokens"),
        cache_write_tokens: u64_field(u, "cache_write_input_tokens"),
        reasoning_tokens: u64_field(u, "reasoning_output_tokens"),
        cost_usd: None,
    }
}

/// True when `message` says a resumed thread does not exist.
pub(crate) fn is_unknown_thread(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    UNKNOWN_THREAD.iter().any(|m| lower.contains(m))
}

impl CodexSession {
    pub(crate) fn exec_launch(&mut self) -> Result<Launch, StartError> {
        let request = &self.request;
        let config = &self.config;
        let mut args: Vec<String> = vec!["exec".into(), "--json".into()];
        if config
            .get("skip_git_repo_check")
            .and_then(Value::as_bool)
            .unwrap_or(true)
        {
            args.push("--skip-git-repo-check".into());
        }
        if let Some(mode) = sandbox_mode(request.policy.sandbox) {
            args.extend(["--sandbox".into(), mode.into()]);
        }
        if let Some(policy) = approval_policy(request.policy.permission) {
            if policy != "never" {
                return Err(StartError::Unsupported(
                    "codex exec cannot ask for approvals; use the app-server transport".into(),
                ));
            }
            args.extend(["-c".into(), "approval_policy=\"never\"".into()]);
        }
        if let Some(model) = adaptor_sdk::json::requested_model(request, config) {
            args.extend(["--model".into(), model]);
        }
        args.extend(config_overrides(request, config));
        let crate::McpLaunch {
            args: mcp_args,
            env,
        } = crate::mcp_overrides(request)?;
        args.extend(mcp_args);
        if let Some(text) = request.instructions.as_deref().filter(|t| !t.is_empty()) {
            args.extend([
                "-c".into(),
                format!("developer_instructions={}", toml_string(text)),
            ]);
        }
        let mut files = Vec::new();
        if let Some(schema) = &request.output_schema
            && schema.mechanism == SchemaMechanism::Native
        {
            files.push(PrivateFile {
                name: "output-schema.json".into(),
                contents: crate::schema_for_cli(&schema.schema_json)
                    .map_err(StartError::InvalidRequest)?
                    .into_bytes(),
            });
            args.extend([
                "--output-schema".into(),
                format!("{}/output-schema.json", request.private_dir),
            ]);
        }
        args.extend(extra_args(config));
        if let Some(resume) = &request.resume {
            debug_assert_ne!(resume.mode, SessionMode::Fork);
            args.extend(["resume".into(), resume.state.resume_id.clone()]);
        }
        // The prompt is read from stdin; stdin is closed after it (exec waits for EOF).
        args.push("-".into());
        Ok(Launch {
            program: str_field(config, "command").unwrap_or("codex").to_owned(),
            args,
            env,
            cwd: None,
            stdin: request.prompt.as_bytes().to_vec(),
            keep_stdin_open: false,
            files,
        })
    }

    pub(crate) fn exec_frame(&mut self, frame: &Value, raw: &str, out: &mut Actions) {
        let kind = str_field(frame, "type").unwrap_or_default();
        match kind {
            "thread.started" => {
                if let Some(id) = str_field(frame, "thread_id") {
                    self.thread_started(id, out);
                }
            }
            "turn.started" => {}
            "item.started" | "item.updated" => {
                if let Some(item) = frame.get("item") {
                    self.item_started(item, out);
                }
            }
            "item.completed" => {
                if let Some(item) = frame.get("item") {
                    self.item_completed(item, out);
                }
            }
            "turn.completed" => {
                if let Some(u) = frame.get("usage").filter(|u| u.is_object()) {
                    self.thread_total(exec_usage(u), out);
                }
                self.completed = true;
                self.set_terminal("turn.completed", raw, out);
            }
            "turn.failed" => {
                let message = frame
                    .get("error")
                    .and_then(|e| str_field(e, "message"))
                    .or(self.last_error.as_deref())
                    .unwrap_or("the turn failed")
                    .to_owned();
                let reason = if self.request.resume.is_some() && is_unknown_thread(&message) {
                    FailureReason::ResumeRejected
                } else {
                    FailureReason::AgentError
                };
                self.failure.get_or_insert((reason, message));
                self.set_terminal("turn.failed", raw, out);
            }
            "error" => {
                let message = str_field(frame, "message")
                    .unwrap_or("Codex reported an error")
                    .to_owned();
                out.notice("codex-error", &message, Some(raw.to_owned()));
                if self.request.resume.is_some() && is_unknown_thread(&message) {
                    self.failure
                        .get_or_insert((FailureReason::ResumeRejected, message.clone()));
                }
                self.last_error = Some(message);
            }
            other => out.vendor(other, raw),
        }
    }
}
