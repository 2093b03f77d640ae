//! Conversions between the generated WIT types and the crate's public types, with the
//! host-side validation of what drivers return (JSON fields must be JSON, names non-empty).
//!
//! Must not: hold pipeline state.

use std::collections::BTreeMap;

use crate::bindings::wit;
use crate::descriptor::*;
use crate::event::Phase;
use crate::result::{Checkpoint, ItemKind, TerminalPayload, TranscriptItem, Usage};

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
