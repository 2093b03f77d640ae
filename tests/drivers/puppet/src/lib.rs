//! A test-only driver that returns whatever its stdout dictates, so fuzz input reaches the
//! host's validation of driver outputs (events, actions, the outcome) directly. Each stdout
//! line is a JSON array `[op, …]`; lines that are not are ignored (the puppet never traps on
//! input):
//!
//! - `["text"|"think", id, phase 0|1|2, text]` — a text or reasoning part;
//! - `["tool", id, name, phase, args_json|null, delta|null]` — a tool-call part, fields as given
//!   (invalid JSON in `args_json` included);
//! - `["result", id, output, is_error]`, `["usage", input, output]`, `["session", id, model]`,
//!   `["notice", kind, message, data_json|null]`, `["vendor", name, json]`;
//! - `["item", kind 0..13, text|null, tool_call_id|null, input_json|null, data_json|null]` —
//!   an item event as given;
//! - `["write", text]`, `["close"]`, `["timer", id, ms]`, `["signal", 0|1|2]`, `["end"]`,
//!   `["approval", id, kind 0..3, details_json|null]` — actions;
//! - `["outcome", text, terminal_event|null, terminal_json, resume_id|null, valid, structured|null,
//!   failure 0..12|null, details_json|null]` — what `finish` returns.
//!
//! It never ships as a built-in driver; `x.sh` installs it under `test-drivers/`.

use adaptor_sdk::{
    Action, Actions, ApprovalKind, ApprovalRequest, Checkpoint, ConfigError, Descriptor, Driver,
    Event, ExitStatus, Failure, FailureReason, ItemKind, Launch, LineFramer, Outcome, Phase,
    RunRequest, Scope, Session, SessionState, Signal, StartError, TerminalPayload, TextPart, Timer,
    ToolCall, ToolResult, TranscriptItem, Usage, empty_outcome, items, top_scope,
};
use serde_json::Value;

/// The puppet driver.
pub struct PuppetDriver;

impl Driver for PuppetDriver {
    type Session = PuppetSession;

    fn describe() -> Descriptor {
        let mut d = reference_like();
        d.name = "puppet".into();
        d.display_name = "Puppet (outputs dictated by input)".into();
        d
    }

    fn validate_config(_config: &Value) -> Result<(), ConfigError> {
        Ok(())
    }
}

fn reference_like() -> Descriptor {
    use adaptor_sdk::*;
    Descriptor {
        name: String::new(),
        display_name: String::new(),
        version: env!("CARGO_PKG_VERSION").into(),
        default_program: "puppet-cli".into(),
        cli_versions: VersionRange {
            min: None,
            max_exclusive: None,
            verified: Vec::new(),
        },
        config_schema: r#"{"type":"object","properties":{"command":{"type":"string"}}}"#.into(),
        models: Vec::new(),
        sessions: SessionCaps {
            resume: true,
            fork: false,
            codec: "puppet/v1".into(),
        },
        persistent_process: false,
        structured_output: StructuredOutputCaps {
            native: true,
            prompt_validate: true,
            with_streaming: true,
            native_with_approvals: true,
        },
        policy: PolicyCaps {
            sandbox: SandboxLevels::empty(),
            web_search: false,
            browser: false,
        },
        approvals: ApprovalCaps {
            permission: DecisionModes::ASK,
            plan_review: DecisionModes::ASK,
            question: DecisionModes::ASK,
        },
        streaming: StreamingCaps {
            incremental: true,
            token_level: true,
            reasoning: true,
            tool_call_args: true,
        },
        mcp: McpCaps {
            stdio: false,
            http: false,
            sse: false,
        },
        skills: false,
        instructions: false,
    }
}

/// A session that obeys its stdout.
pub struct PuppetSession {
    stdout: LineFramer,
    outcome: Outcome,
}

fn s(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or_default().to_owned()
}

fn opt(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_owned)
}

fn n(v: Option<&Value>) -> u64 {
    v.and_then(Value::as_u64).unwrap_or(0)
}

fn phase(v: Option<&Value>) -> Phase {
    match n(v) % 3 {
        0 => Phase::Start,
        1 => Phase::Delta,
        _ => Phase::End,
    }
}

const KINDS: [ItemKind; 13] = [
    ItemKind::Assistant,
    ItemKind::Thinking,
    ItemKind::User,
    ItemKind::ToolCall,
    ItemKind::ToolResult,
    ItemKind::Init,
    ItemKind::Result,
    ItemKind::Stdout,
    ItemKind::Stderr,
    ItemKind::System,
    ItemKind::Summary,
    ItemKind::Question,
    ItemKind::Failure,
];

fn reasons() -> [FailureReason; 12] {
    [
        FailureReason::AgentError,
        FailureReason::ApprovalDenied,
        FailureReason::ApprovalTimeout,
        FailureReason::ApprovalUnanswered,
        FailureReason::Cancelled,
        FailureReason::TimedOut,
        FailureReason::PolicyViolation,
        FailureReason::ResumeRejected,
        FailureReason::ProtocolError,
        FailureReason::Other(String::new()),
        FailureReason::AgentError,
        FailureReason::AgentError,
    ]
}

impl PuppetSession {
    fn obey(&mut self, line: &[u8], out: &mut Actions) {
        let Ok(Value::Array(a)) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let scope = top_scope();
        let part = |a: &[Value]| TextPart {
            message_id: s(a.get(1)),
            phase: phase(a.get(2)),
            text: s(a.get(3)),
            scope: scope.clone(),
        };
        match a.first().and_then(Value::as_str).unwrap_or_default() {
            "text" => out.emit(Event::Text(part(&a))),
            "think" => out.emit(Event::Thinking(part(&a))),
            "tool" => out.emit(Event::ToolCall(ToolCall {
                id: s(a.get(1)),
                name: s(a.get(2)),
                phase: phase(a.get(3)),
                args_json: opt(a.get(4)),
                args_delta: opt(a.get(5)),
                scope: Scope {
                    parent_tool_call_id: None,
                },
            })),
            "result" => out.emit(Event::ToolResult(ToolResult {
                id: s(a.get(1)),
                output: s(a.get(2)),
                is_error: a.get(3).and_then(Value::as_bool).unwrap_or(false),
                scope,
            })),
            "usage" => out.usage(Usage {
                input_tokens: a.get(1).and_then(Value::as_u64),
                output_tokens: a.get(2).and_then(Value::as_u64),
                cache_read_tokens: None,
                cache_write_tokens: None,
                reasoning_tokens: None,
                cost_usd: None,
            }),
            "session" => out.session(opt(a.get(1)), opt(a.get(2))),
            "notice" => out.notice(&s(a.get(1)), &s(a.get(2)), opt(a.get(3))),
            "vendor" => out.vendor(&s(a.get(1)), &s(a.get(2))),
            "item" => out.emit(Event::Item(TranscriptItem {
                kind: KINDS[(n(a.get(1)) % 13) as usize].clone(),
                text: opt(a.get(2)),
                tool_call_id: opt(a.get(3)),
                input_json: opt(a.get(4)),
                data_json: opt(a.get(5)),
                ..items::blank(ItemKind::System)
            })),
            "write" => out.write_stdin(s(a.get(1)).into_bytes()),
            "close" => out.close_stdin(),
            "timer" => out.push(Action::SetTimer(Timer {
                id: n(a.get(1)),
                after_ms: n(a.get(2)) % 1000,
            })),
            "signal" => out.signal(match n(a.get(1)) % 3 {
                0 => Signal::Interrupt,
                1 => Signal::Terminate,
                _ => Signal::Kill,
            }),
            "end" => out.end_turn(),
            "approval" => out.request_approval(ApprovalRequest {
                id: s(a.get(1)),
                kind: match n(a.get(2)) % 4 {
                    0 => ApprovalKind::Permission,
                    1 => ApprovalKind::PlanReview,
                    2 => ApprovalKind::Question,
                    _ => ApprovalKind::Other("puppet".into()),
                },
                title: "puppet".into(),
                tool_call_id: None,
                tool_name: None,
                choices: Vec::new(),
                details_json: opt(a.get(3)),
            }),
            "outcome" => {
                let o = &mut self.outcome;
                o.text = s(a.get(1));
                o.terminal = opt(a.get(2)).map(|event| TerminalPayload {
                    event,
                    json: s(a.get(3)),
                });
                o.checkpoint = opt(a.get(4)).map(|resume_id| Checkpoint {
                    state: SessionState {
                        resume_id,
                        display_id: None,
                        data: Vec::new(),
                    },
                    valid: a.get(5).and_then(Value::as_bool).unwrap_or(false),
                });
                o.structured_output = opt(a.get(6));
                o.failure = a.get(7).and_then(Value::as_u64).map(|r| Failure {
                    reason: reasons()[(r % 12) as usize].clone(),
                    message: "puppet failure".into(),
                    details_json: opt(a.get(8)),
                });
            }
            _ => {}
        }
    }
}

impl Session for PuppetSession {
    fn new(_request: RunRequest) -> Self {
        Self {
            stdout: LineFramer::new(1 << 20),
            outcome: empty_outcome(),
        }
    }

    fn start(&mut self) -> Result<Launch, StartError> {
        Ok(Launch {
            program: "puppet-cli".into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            stdin: Vec::new(),
            keep_stdin_open: false,
            files: Vec::new(),
        })
    }

    fn on_stdout(&mut self, chunk: &[u8], out: &mut Actions) {
        for line in self.stdout.push(chunk) {
            if let adaptor_sdk::Line::Complete(bytes) = line {
                self.obey(&bytes, out);
            }
        }
    }

    fn on_exit(&mut self, _status: &ExitStatus, out: &mut Actions) {
        if let Some(adaptor_sdk::Line::Complete(bytes)) = self.stdout.finish() {
            self.obey(&bytes, out);
        }
    }

    fn finish(&mut self) -> Outcome {
        self.outcome.clone()
    }
}

#[cfg(target_family = "wasm")]
adaptor_sdk::export_driver!(PuppetDriver);
