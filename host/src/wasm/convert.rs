//! Conversions between the generated WIT types and the crate's public types, with the
//! host-side validation of what drivers return (JSON fields must be JSON, names non-empty,
//! events well-formed), and the run request the driver sees, built from host options.
//!
//! Must not: hold pipeline state.

use std::collections::BTreeMap;
use std::path::Path;

use super::wit;
use crate::agent::RunOptions;
use crate::descriptor::*;
use crate::error::Error;
use crate::event::Phase;
use crate::event::{
    Event, EventMeta, ItemEvent, Notice, SessionStarted, TextDelta, ToolCall, ToolResult,
    UsageUpdate, VendorEvent,
};
use crate::result::{Checkpoint, ItemKind, TerminalPayload, TranscriptItem, Usage};
use crate::stream::blank_meta;
use crate::structured::Mechanism;

pub(crate) fn descriptor(d: wit::Descriptor) -> Result<Descriptor, String> {
    if d.name.is_empty()
        || d.name
            .chars()
            .any(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_'))
    {
        return Err(format!(
            "name `{}` must be non-empty lowercase ASCII letters, digits, `-` or `_`",
            d.name
        ));
    }
    if d.display_name.trim().is_empty() {
        return Err("display-name is empty".into());
    }
    if d.default_program.trim().is_empty() {
        return Err("default-program is empty".into());
    }
    if d.sessions.resume && d.sessions.codec.trim().is_empty() {
        return Err("sessions.resume is declared without a codec name".into());
    }
    let config_schema: serde_json::Value = serde_json::from_str(&d.config_schema)
        .map_err(|e| format!("config-schema is not valid JSON: {e}"))?;
    if !config_schema.is_object() {
        return Err("config-schema must be a JSON object".into());
    }
    let modes = |m: wit::DecisionModes| DecisionModes {
        ask: m.contains(wit::DecisionModes::ASK),
        auto_approve: m.contains(wit::DecisionModes::AUTO_APPROVE),
        auto_deny: m.contains(wit::DecisionModes::AUTO_DENY),
        retry: m.contains(wit::DecisionModes::RETRY),
    };
    Ok(Descriptor {
        name: d.name,
        display_name: d.display_name,
        version: d.version,
        default_program: d.default_program,
        cli_versions: VersionRange {
            min: d.cli_versions.min,
            max_exclusive: d.cli_versions.max_exclusive,
            verified: d.cli_versions.verified,
        },
        config_schema,
        models: d
            .models
            .into_iter()
            .map(|m| ModelInfo {
                id: m.id,
                label: m.label,
            })
            .collect(),
        sessions: SessionCaps {
            resume: d.sessions.resume,
            fork: d.sessions.fork,
            codec: d.sessions.codec,
        },
        persistent_process: d.persistent_process,
        structured_output: StructuredOutputCaps {
            native: d.structured_output.native,
            prompt_validate: d.structured_output.prompt_validate,
            with_streaming: d.structured_output.with_streaming,
            native_with_approvals: d.structured_output.native_with_approvals,
        },
        policy: PolicyCaps {
            sandbox: SandboxLevels {
                read_only: d.policy.sandbox.contains(wit::SandboxLevels::READ_ONLY),
                workspace_write: d
                    .policy
                    .sandbox
                    .contains(wit::SandboxLevels::WORKSPACE_WRITE),
                unrestricted: d.policy.sandbox.contains(wit::SandboxLevels::UNRESTRICTED),
            },
            web_search: d.policy.web_search,
            browser: d.policy.browser,
        },
        approvals: ApprovalCaps {
            permission: modes(d.approvals.permission),
            plan_review: modes(d.approvals.plan_review),
            question: modes(d.approvals.question),
        },
        streaming: StreamingCaps {
            incremental: d.streaming.incremental,
            token_level: d.streaming.token_level,
            reasoning: d.streaming.reasoning,
            tool_call_args: d.streaming.tool_call_args,
        },
        mcp: McpCaps {
            stdio: d.mcp.stdio,
            http: d.mcp.http,
            sse: d.mcp.sse,
        },
        skills: d.skills,
        instructions: d.instructions,
    })
}

pub(crate) fn phase(p: wit::Phase) -> Phase {
    match p {
        wit::Phase::Start => Phase::Start,
        wit::Phase::Delta => Phase::Delta,
        wit::Phase::End => Phase::End,
    }
}

/// Parse a JSON string field returned by a driver; `what` names it in the error.
pub(crate) fn json_field(
    what: &str,
    text: Option<String>,
) -> Result<Option<serde_json::Value>, String> {
    text.map(|t| serde_json::from_str(&t).map_err(|e| format!("{what} is not valid JSON: {e}")))
        .transpose()
}

pub(crate) fn usage(u: wit::Usage) -> Usage {
    Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cache_read_tokens: u.cache_read_tokens,
        cache_write_tokens: u.cache_write_tokens,
        reasoning_tokens: u.reasoning_tokens,
        cost_usd: u.cost_usd,
    }
}

pub(crate) fn item_kind(k: wit::ItemKind) -> ItemKind {
    match k {
        wit::ItemKind::Assistant => ItemKind::Assistant,
        wit::ItemKind::Thinking => ItemKind::Thinking,
        wit::ItemKind::User => ItemKind::User,
        wit::ItemKind::ToolCall => ItemKind::ToolCall,
        wit::ItemKind::ToolResult => ItemKind::ToolResult,
        wit::ItemKind::Init => ItemKind::Init,
        wit::ItemKind::Result => ItemKind::Result,
        wit::ItemKind::Stdout => ItemKind::Stdout,
        wit::ItemKind::Stderr => ItemKind::Stderr,
        wit::ItemKind::System => ItemKind::System,
        wit::ItemKind::Summary => ItemKind::Summary,
        wit::ItemKind::Question => ItemKind::Question,
        wit::ItemKind::Failure => ItemKind::Failure,
        wit::ItemKind::Other(s) => ItemKind::Other(s),
    }
}

pub(crate) fn item(i: wit::TranscriptItem) -> Result<TranscriptItem, String> {
    if matches!(i.kind, wit::ItemKind::ToolCall) && i.tool_name.as_deref().unwrap_or("").is_empty()
    {
        return Err("a tool-call transcript item has no tool name".into());
    }
    if matches!(i.kind, wit::ItemKind::ToolResult)
        && i.tool_call_id.as_deref().unwrap_or("").is_empty()
    {
        return Err("a tool-result transcript item has no tool call id".into());
    }
    Ok(TranscriptItem {
        kind: item_kind(i.kind),
        text: i.text,
        tool_call_id: i.tool_call_id,
        tool_name: i.tool_name,
        input: json_field("transcript item input-json", i.input_json)?,
        is_error: i.is_error,
        model: i.model,
        session_id: i.session_id,
        parent_tool_call_id: i.scope.parent_tool_call_id,
        data: json_field("transcript item data-json", i.data_json)?,
    })
}

pub(crate) fn terminal(t: wit::TerminalPayload) -> Result<TerminalPayload, String> {
    if t.event.is_empty() {
        return Err("terminal payload has an empty event name".into());
    }
    serde_json::from_str::<serde_json::Value>(&t.json)
        .map_err(|e| format!("terminal payload is not valid JSON: {e}"))?;
    Ok(TerminalPayload {
        event: t.event,
        json: t.json,
    })
}

pub(crate) fn checkpoint(codec: &str, c: wit::Checkpoint) -> Result<Checkpoint, String> {
    if c.state.resume_id.is_empty() {
        return Err("checkpoint has an empty resume id".into());
    }
    Ok(Checkpoint {
        codec: codec.to_owned(),
        resume_id: c.state.resume_id,
        display_id: c.state.display_id,
        data: c.state.data.into_iter().collect::<BTreeMap<_, _>>(),
        valid: c.valid,
    })
}

pub(crate) fn failure_reason(r: wit::FailureReason) -> crate::error::FailureReason {
    use crate::error::FailureReason as F;
    match r {
        wit::FailureReason::AgentError => F::AgentError,
        wit::FailureReason::ApprovalDenied => F::ApprovalDenied,
        wit::FailureReason::ApprovalTimeout => F::ApprovalTimeout,
        wit::FailureReason::ApprovalUnanswered => F::ApprovalUnanswered,
        wit::FailureReason::Cancelled => F::Cancelled,
        wit::FailureReason::TimedOut => F::Timeout,
        wit::FailureReason::PolicyViolation => F::PolicyViolation,
        wit::FailureReason::ResumeRejected => F::ResumeRejected,
        wit::FailureReason::ProtocolError => F::ProtocolError,
        wit::FailureReason::Other(s) => F::Other(s),
    }
}

/// Validate a driver event and turn it into a public [`Event`] (meta filled in later by the
/// emitter).
pub(crate) fn convert_event(driver: &str, event: wit::Event) -> Result<Event, Error> {
    let meta = blank_meta();
    let bad = |message: String| Error::DriverContract {
        driver: driver.to_owned(),
        call: "emit",
        message,
    };
    Ok(match event {
        wit::Event::Text(p) | wit::Event::Thinking(p) if p.message_id.is_empty() => {
            return Err(bad("a text/thinking event has an empty message id".into()));
        }
        wit::Event::Text(p) => Event::TextDelta(text_delta(meta, p)),
        wit::Event::Thinking(p) => Event::Thinking(text_delta(meta, p)),
        wit::Event::ToolCall(c) => {
            if c.id.is_empty() || (c.phase == wit::Phase::Start && c.name.is_empty()) {
                return Err(bad(
                    "a tool-call event needs an id, and a name on start".into()
                ));
            }
            Event::ToolCall(ToolCall {
                meta,
                args: json_field("tool-call args-json", c.args_json).map_err(bad)?,
                id: c.id,
                name: c.name,
                phase: phase(c.phase),
                args_delta: c.args_delta,
                parent_tool_call_id: c.scope.parent_tool_call_id,
            })
        }
        wit::Event::ToolResult(r) => {
            if r.id.is_empty() {
                return Err(bad("a tool-result event has an empty id".into()));
            }
            Event::ToolResult(ToolResult {
                meta,
                id: r.id,
                output: r.output,
                is_error: r.is_error,
                parent_tool_call_id: r.scope.parent_tool_call_id,
            })
        }
        wit::Event::Item(i) => Event::Item(ItemEvent {
            meta,
            item: item(i).map_err(bad)?,
        }),
        wit::Event::Usage(u) => Event::Usage(UsageUpdate {
            meta,
            usage: usage(u),
        }),
        wit::Event::Session(s) => Event::Session(SessionStarted {
            meta,
            session_id: s.session_id,
            model: s.model,
        }),
        wit::Event::Notice(n) => Event::Notice(Notice {
            meta,
            notice: n.kind,
            message: n.message,
            data: json_field("notice data-json", n.data_json).map_err(bad)?,
        }),
        wit::Event::Other(v) => Event::Vendor(VendorEvent {
            meta,
            json: serde_json::from_str(&v.json).unwrap_or(serde_json::Value::String(v.json)),
            name: v.name,
        }),
    })
}

fn text_delta(meta: EventMeta, p: wit::TextPart) -> TextDelta {
    TextDelta {
        meta,
        message_id: p.message_id,
        phase: phase(p.phase),
        text: p.text,
        parent_tool_call_id: p.scope.parent_tool_call_id,
    }
}

/// The fully resolved request the driver sees.
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_request(
    run_id: &str,
    prompt: &str,
    config_json: String,
    options: &RunOptions,
    mechanism: Option<Mechanism>,
    workspace: &Path,
    private_dir: &Path,
    resume: Option<wit::Resume>,
) -> wit::RunRequest {
    wit::RunRequest {
        run_id: run_id.to_owned(),
        prompt: prompt.to_owned(),
        config_json,
        model: options.model.clone(),
        instructions: options.instructions.clone(),
        workspace: workspace.display().to_string(),
        private_dir: private_dir.display().to_string(),
        policy: options.policy.unwrap_or_default().to_wit(),
        output_schema: match (&options.schema, mechanism) {
            (Some(schema), Some(m)) => Some(wit::OutputSchema {
                schema_json: schema.json().to_string(),
                name: schema.wit_name(),
                description: schema.wit_description(),
                mechanism: match m {
                    Mechanism::Native => wit::SchemaMechanism::Native,
                    Mechanism::PromptValidate => wit::SchemaMechanism::PromptValidate,
                },
            }),
            _ => None,
        },
        resume,
        streaming: options.streaming.unwrap_or(true),
        mcp_servers: Vec::new(),
        skill_dirs: Vec::new(),
        metadata: options
            .metadata
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
    }
}

/// The grant's view of a driver's launch (`file_names`: the names of its private files).
pub(crate) fn launch_ask<'a>(
    launch: &'a wit::Launch,
    file_names: &'a [&'a str],
) -> crate::grant::LaunchAsk<'a> {
    crate::grant::LaunchAsk {
        program: &launch.program,
        args: &launch.args,
        env: &launch.env,
        cwd: launch.cwd.as_deref(),
        file_names,
    }
}
