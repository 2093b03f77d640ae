//! Conversions between the generated WIT types and the crate's public types, with the
//! host-side validation of what drivers return (JSON fields must be JSON, names non-empty,
//! events well-formed), and the run request the driver sees, built from host options.
//!
//! Must not: hold pipeline state.

use std::collections::BTreeMap;
use std::path::Path;

use super::bindings::{wit_resources, wit_session};
use super::wit;
use crate::approval::{ApprovalKind, Choice};
use crate::descriptor::*;
use crate::error::{Error, InputRefusal, StartRefusal};
use crate::event::Phase;
use crate::event::blank_meta;
use crate::event::{
    Event, EventMeta, ItemEvent, Notice, SessionStarted, TextDelta, ToolCall, ToolResult,
    UsageUpdate, VendorEvent,
};
use crate::policy::{DecisionMode, Fallback, Policy, QuestionMode, Sandbox, Toggle};
use crate::result::{Checkpoint, ItemKind, SessionState, TerminalPayload, TranscriptItem, Usage};
use crate::session::{
    Action, AskRequest, Check, CheckLevel, ConfigRejection, Decision, DriverFailure, DriverOutcome,
    DriverSignal, Launch, Probe, ProbeOutput, RequestOptions, Resume, SessionExit, SessionMode,
};
use crate::structured::Mechanism;

/// A driver's default program is a bare name looked up on PATH. A path would let the driver
/// choose which directory the host grants as the CLI's install directory (read and execute):
/// only the caller's config `command` may name a path.
fn check_default_program(program: &str) -> Result<(), String> {
    if program.trim().is_empty() {
        return Err("default-program is empty".into());
    }
    if program.contains(['/', '\\', '\0']) {
        return Err(format!(
            "default-program `{program}` must be a bare program name (a path belongs in the caller's `command`)"
        ));
    }
    Ok(())
}

/// What `describe` returned, in the version of the contract the driver was built against.
pub(crate) enum DriverInfo {
    /// `0.3.0`: as `0.2.0`, and the profile (from `profile`, filled in after `describe`).
    V0_3(wit_session::DriverInfo, Option<wit_resources::ProfileSpec>),
    /// `0.2.0`: the descriptor, steering and the launch environment.
    V0_2(wit_session::DriverInfo),
    /// `0.1.0`: the bare descriptor.
    V0_1(wit::Descriptor),
}

/// A `launch-env` entry: an environment variable name, or a prefix of one ending in `*`.
fn check_launch_env(entry: &str) -> Result<(), String> {
    let name = entry.strip_suffix('*').unwrap_or(entry);
    if name.is_empty() {
        return Err(format!(
            "launch-env entry `{entry}` names no variable (a bare `*` would allow any)"
        ));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        || name.starts_with(|c: char| c.is_ascii_digit())
    {
        return Err(format!(
            "launch-env entry `{entry}` is not an environment variable name (letters, digits \
             and `_`, not starting with a digit, optionally ending in `*`)"
        ));
    }
    Ok(())
}

pub(crate) fn descriptor(info: DriverInfo) -> Result<Descriptor, String> {
    let (info, profile, wit_version) = match info {
        DriverInfo::V0_3(info, profile) => (Some(info), profile, "0.3.0"),
        DriverInfo::V0_2(info) => (Some(info), None, "0.2.0"),
        DriverInfo::V0_1(d) => {
            let mut descriptor = descriptor_of(d)?;
            descriptor.wit_version = "0.1.0".to_owned();
            return Ok(descriptor);
        }
    };
    let info = info.expect("0.2.0 and later return driver-info");
    for entry in &info.launch_env {
        check_launch_env(entry)?;
    }
    let mut descriptor = descriptor_of(info.descriptor)?;
    descriptor.steering = info.steering;
    descriptor.launch_env = Some(info.launch_env);
    descriptor.wit_version = wit_version.to_owned();
    if let Some(spec) = profile {
        let spec = profile_spec(spec);
        spec.check()?;
        descriptor.profile = Some(spec);
    }
    Ok(descriptor)
}

/// A driver's profile spec in host types (checked by the caller).
fn profile_spec(spec: wit_resources::ProfileSpec) -> ProfileSpec {
    ProfileSpec {
        config_dir_variable: spec.config_dir_variable,
        native_dir: spec.native_dir,
        files: spec
            .files
            .into_iter()
            .map(|f| ProfileFile {
                part: match f.part {
                    wit_resources::ProfilePart::Auth => ProfilePart::Auth,
                    wit_resources::ProfilePart::Settings => ProfilePart::Settings,
                    wit_resources::ProfilePart::Mcp => ProfilePart::Mcp,
                },
                source: f.source,
                default_source: f.default_source,
                target: f.target,
                carry: match f.carry {
                    wit_resources::Carry::Link => Carry::Link,
                    wit_resources::Carry::Copy => Carry::Copy,
                },
            })
            .collect(),
        auth_store_variable: spec.auth_store_variable,
    }
}

fn descriptor_of(d: wit::Descriptor) -> Result<Descriptor, String> {
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
    // Descriptor strings are shown to people (`adaptor drivers`, `inspect`, errors): no
    // control characters, so no escape sequence reaches a terminal from a descriptor.
    let mut strings: Vec<(&str, &str)> = vec![
        ("display-name", &d.display_name),
        ("version", &d.version),
        ("default-program", &d.default_program),
        ("sessions.codec", &d.sessions.codec),
    ];
    strings.extend(
        d.cli_versions
            .min
            .as_deref()
            .map(|v| ("cli-versions.min", v)),
    );
    strings.extend(
        d.cli_versions
            .max_exclusive
            .as_deref()
            .map(|v| ("cli-versions.max-exclusive", v)),
    );
    strings.extend(
        d.cli_versions
            .verified
            .iter()
            .map(|v| ("cli-versions.verified", v.as_str())),
    );
    strings.extend(d.models.iter().flat_map(|m| {
        [
            ("models.id", m.id.as_str()),
            ("models.label", m.label.as_str()),
        ]
    }));
    if let Some((field, value)) = strings
        .iter()
        .find(|(_, v)| v.chars().any(char::is_control))
    {
        return Err(format!("{field} {value:?} contains control characters"));
    }
    check_default_program(&d.default_program)?;
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
        steering: false,
        launch_env: None,
        profile: None,
        wit_version: String::new(),
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
    // Checked, not kept: `IgnoredAny` reads the whole document (syntax, escapes, trailing
    // characters) without building a value.
    serde_json::from_str::<serde::de::IgnoredAny>(&t.json)
        .map_err(|e| format!("terminal payload is not valid JSON: {e}"))?;
    Ok(TerminalPayload {
        event: t.event,
        json: t.json,
    })
}

/// The largest resume id a checkpoint may carry, in bytes (provider ids are UUIDs or short
/// tokens; a store keeps what a driver returns, so the host bounds it).
pub(crate) const MAX_RESUME_ID_BYTES: usize = 512;
/// The most entries a checkpoint's driver data may have.
pub(crate) const MAX_CHECKPOINT_ENTRIES: usize = 64;
/// The most bytes a checkpoint's driver data may hold (keys and values together).
pub(crate) const MAX_CHECKPOINT_DATA_BYTES: usize = 64 * 1024;

pub(crate) fn checkpoint(codec: &str, c: wit::Checkpoint) -> Result<Checkpoint, String> {
    if c.state.resume_id.is_empty() {
        return Err("checkpoint has an empty resume id".into());
    }
    if c.state.resume_id.len() > MAX_RESUME_ID_BYTES {
        return Err(format!(
            "checkpoint resume id is {} bytes, over the limit of {MAX_RESUME_ID_BYTES}",
            c.state.resume_id.len()
        ));
    }
    if c.state.resume_id.chars().any(char::is_control) {
        return Err("checkpoint resume id contains control characters".into());
    }
    if c.state.data.len() > MAX_CHECKPOINT_ENTRIES {
        return Err(format!(
            "checkpoint data has {} entries, over the limit of {MAX_CHECKPOINT_ENTRIES}",
            c.state.data.len()
        ));
    }
    let bytes: usize = c.state.data.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_CHECKPOINT_DATA_BYTES {
        return Err(format!(
            "checkpoint data holds {bytes} bytes, over the limit of {MAX_CHECKPOINT_DATA_BYTES}"
        ));
    }
    Ok(Checkpoint::from_driver(
        SessionState {
            codec: codec.to_owned(),
            resume_id: c.state.resume_id,
            display_id: c.state.display_id,
            data: c.state.data.into_iter().collect::<BTreeMap<_, _>>(),
        },
        c.valid,
    ))
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
        // The typed reasons the WIT has no case for arrive by name (`other("rate_limited")`).
        wit::FailureReason::Other(s) => F::from_name(&s),
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

/// A run request in the driver's terms, opaque outside `wasm/` (built by [`build_request`],
/// handed to `open_session` / `next_turn`).
pub(crate) struct DriverRequest(
    pub(super) wit_session::TurnRequest,
    pub(super) wit_resources::RunResources,
);

/// The run's resources in host terms, for [`build_request`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Resources<'a> {
    /// The dedicated profile directory.
    pub profile_dir: Option<&'a Path>,
    /// The login is shared through the CLI's credential-store variable.
    pub shared_auth: bool,
    /// The instructions bundle: where it was written, and its checked files.
    pub instructions: Option<(&'a Path, &'a crate::instructions::CheckedBundle)>,
}

/// The fully resolved request the driver sees.
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_request(
    run_id: &str,
    prompt: &str,
    config_json: String,
    options: RequestOptions<'_>,
    mechanism: Option<Mechanism>,
    workspace: &Path,
    private_dir: &Path,
    resume: Option<Resume>,
    resources: Resources<'_>,
) -> DriverRequest {
    let steerable = options.steerable;
    let request = wit::RunRequest {
        run_id: run_id.to_owned(),
        prompt: prompt.to_owned(),
        config_json,
        model: options.model.map(str::to_owned),
        instructions: options.instructions.map(str::to_owned),
        workspace: workspace.display().to_string(),
        private_dir: private_dir.display().to_string(),
        policy: policy(options.policy),
        output_schema: match (options.schema, mechanism) {
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
        resume: resume.map(|r| wit::Resume {
            mode: match r.mode {
                SessionMode::ContinueOrStart => wit::SessionMode::ContinueOrStart,
                SessionMode::ContinueOnly => wit::SessionMode::ContinueOnly,
                SessionMode::Fork => wit::SessionMode::Fork,
            },
            state: wit::SessionState {
                resume_id: r.state.resume_id,
                display_id: r.state.display_id,
                data: r.state.data.into_iter().collect(),
            },
        }),
        streaming: options.streaming,
        mcp_servers: options.mcp_servers.iter().map(mcp_server).collect(),
        skill_dirs: options.skill_dirs.to_vec(),
        metadata: options
            .metadata
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default(),
    };
    let resources = wit_resources::RunResources {
        profile_dir: resources.profile_dir.map(|d| d.display().to_string()),
        shared_auth: resources.shared_auth,
        instructions: resources.instructions.map(|(dir, bundle)| {
            wit_resources::InstructionsBundle {
                dir: dir.display().to_string(),
                entry: bundle.entry.clone(),
                entry_text: bundle.entry_text.clone(),
                files: bundle.paths(),
            }
        }),
    };
    DriverRequest(wit_session::TurnRequest { request, steerable }, resources)
}

/// A driver's refusal of the caller's input for a running turn.
pub(crate) fn input_error(e: wit_session::InputError) -> (InputRefusal, String) {
    match e {
        wit_session::InputError::Unsupported(m) => (InputRefusal::Unsupported, m),
        wit_session::InputError::TurnOver(m) => (InputRefusal::TurnOver, m),
        wit_session::InputError::Invalid(m) => (InputRefusal::Invalid, m),
    }
}

/// An MCP server in the driver's terms.
fn mcp_server(server: &crate::mcp::RequestServer) -> wit::McpServer {
    use crate::mcp::RequestTransport as T;
    wit::McpServer {
        name: server.name.clone(),
        transport: match &server.transport {
            T::Stdio { command, args, env } => wit::McpTransport::Stdio(wit::McpStdio {
                command: command.clone(),
                args: args.clone(),
                env: env.clone(),
            }),
            T::Http { url, headers } => wit::McpTransport::Http(wit::McpRemote {
                url: url.clone(),
                headers: headers.clone(),
            }),
            T::Sse { url, headers } => wit::McpTransport::Sse(wit::McpRemote {
                url: url.clone(),
                headers: headers.clone(),
            }),
        },
    }
}

/// The run policy in the driver's terms.
pub(crate) fn policy(p: Policy) -> wit::Policy {
    let mode = |m: DecisionMode| match m {
        DecisionMode::Inherit => wit::DecisionMode::Inherit,
        DecisionMode::Ask => wit::DecisionMode::Ask,
        DecisionMode::AutoApprove => wit::DecisionMode::AutoApprove,
        DecisionMode::AutoDeny => wit::DecisionMode::AutoDeny,
    };
    let toggle = |t: Toggle| match t {
        Toggle::Inherit => wit::Toggle::Inherit,
        Toggle::Allow => wit::Toggle::Allow,
        Toggle::Deny => wit::Toggle::Deny,
    };
    let fallback = |f: Fallback| match f {
        Fallback::Abort => wit::Fallback::Abort,
        Fallback::Continue => wit::Fallback::Continue,
        Fallback::Retry => wit::Fallback::Retry,
    };
    let a = p.approvals;
    wit::Policy {
        sandbox: match p.sandbox {
            Sandbox::Inherit => wit::Sandbox::Inherit,
            Sandbox::ReadOnly => wit::Sandbox::ReadOnly,
            Sandbox::WorkspaceWrite => wit::Sandbox::WorkspaceWrite,
            Sandbox::Unrestricted => wit::Sandbox::Unrestricted,
        },
        web_search: toggle(p.web_search),
        browser: toggle(p.browser),
        permission: mode(a.permission),
        plan_review: mode(a.plan_review),
        question: match a.question {
            QuestionMode::Inherit => wit::DecisionMode::Inherit,
            QuestionMode::Ask => wit::DecisionMode::Ask,
            QuestionMode::AutoDeny => wit::DecisionMode::AutoDeny,
        },
        approval_timeout_ms: a
            .timeout
            .map(|t| t.as_millis().min(u64::MAX as u128) as u64),
        on_reject: fallback(a.on_reject),
        on_timeout: fallback(a.on_timeout),
        max_retries: a.max_retries,
    }
}

/// A session's launch in host terms.
pub(crate) fn launch(l: wit::Launch) -> Launch {
    Launch {
        program: l.program,
        args: l.args,
        env: l.env,
        cwd: l.cwd,
        stdin: l.stdin,
        keep_stdin_open: l.keep_stdin_open,
        files: l.files.into_iter().map(|f| (f.name, f.contents)).collect(),
    }
}

/// A `start-error` as the host's refusal kind and message.
pub(crate) fn start_error(e: wit::StartError) -> (StartRefusal, String) {
    match e {
        wit::StartError::InvalidRequest(m) => (StartRefusal::InvalidRequest, m),
        wit::StartError::Unsupported(m) => (StartRefusal::Unsupported, m),
        wit::StartError::ResumeRejected(m) => (StartRefusal::ResumeRejected, m),
    }
}

/// A `config-error` in host terms.
pub(crate) fn config_rejection(e: wit::ConfigError) -> ConfigRejection {
    ConfigRejection {
        path: e.path,
        message: e.message,
    }
}

/// A driver's actions, validated (events must be well-formed: [`Error::DriverContract`]).
pub(crate) fn actions(driver: &str, actions: Vec<wit::Action>) -> Result<Vec<Action>, Error> {
    actions
        .into_iter()
        .map(|a| {
            Ok(match a {
                wit::Action::Emit(e) => Action::Emit(Box::new(convert_event(driver, e)?)),
                wit::Action::WriteStdin(bytes) => Action::WriteStdin(bytes),
                wit::Action::CloseStdin => Action::CloseStdin,
                wit::Action::RequestApproval(r) => Action::RequestApproval(AskRequest {
                    id: r.id,
                    kind: match r.kind {
                        wit::ApprovalKind::Permission => ApprovalKind::Permission,
                        wit::ApprovalKind::PlanReview => ApprovalKind::PlanReview,
                        wit::ApprovalKind::Question => ApprovalKind::Question,
                        wit::ApprovalKind::Other(name) => ApprovalKind::Other(name),
                    },
                    title: r.title,
                    tool_call_id: r.tool_call_id,
                    tool_name: r.tool_name,
                    choices: r
                        .choices
                        .into_iter()
                        .map(|c| Choice {
                            key: c.key,
                            label: c.label,
                            description: c.description,
                        })
                        .collect(),
                    details_json: r.details_json,
                }),
                wit::Action::SetTimer(t) => Action::SetTimer {
                    id: t.id,
                    after: std::time::Duration::from_millis(t.after_ms),
                },
                wit::Action::CancelTimer(id) => Action::CancelTimer(id),
                wit::Action::Signal(s) => Action::Signal(match s {
                    wit::Signal::Interrupt => DriverSignal::Interrupt,
                    wit::Signal::Terminate => DriverSignal::Terminate,
                    wit::Signal::Kill => DriverSignal::Kill,
                }),
                wit::Action::EndTurn => Action::EndTurn,
            })
        })
        .collect()
}

/// A decision in the driver's terms.
pub(crate) fn decision(d: &Decision) -> wit::Decision {
    match d {
        Decision::Approve(input) => wit::Decision::Approve(input.clone()),
        Decision::Deny(reason) => wit::Decision::Deny(reason.clone()),
        Decision::Answer(answer) => wit::Decision::Answer(answer.clone()),
        Decision::TimedOut => wit::Decision::TimedOut,
        Decision::Unanswered => wit::Decision::Unanswered,
        Decision::Cancelled => wit::Decision::Cancelled,
    }
}

/// The process's end in the driver's terms.
pub(crate) fn exit_status(e: SessionExit) -> wit::ExitStatus {
    wit::ExitStatus {
        code: e.code,
        signal: e.signal,
        timed_out: e.timed_out,
        cancelled: e.cancelled,
    }
}

/// A session's outcome, validated: malformed transcript items, terminal JSON, checkpoint,
/// structured output or failure details are a contract violation of `session.finish`.
pub(crate) fn outcome(driver: &str, codec: &str, o: wit::Outcome) -> Result<DriverOutcome, Error> {
    let contract = |message: String| Error::DriverContract {
        driver: driver.to_owned(),
        call: "session.finish",
        message,
    };
    let failure = match o.failure {
        None => None,
        Some(f) => Some(DriverFailure {
            details: json_field("failure details-json", f.details_json).map_err(contract)?,
            reason: failure_reason(f.reason),
            message: f.message,
        }),
    };
    Ok(DriverOutcome {
        transcript: o
            .transcript
            .into_iter()
            .map(item)
            .collect::<Result<Vec<_>, _>>()
            .map_err(contract)?,
        terminal: o.terminal.map(terminal).transpose().map_err(contract)?,
        checkpoint: o
            .checkpoint
            .map(|c| checkpoint(codec, c))
            .transpose()
            .map_err(contract)?,
        structured_output: json_field("structured-output", o.structured_output)
            .map_err(contract)?,
        failure,
        text: o.text,
        summary: o.summary,
        usage: o.usage.map(usage),
        model: o.model,
        metadata: o.metadata.into_iter().collect(),
    })
}

/// Inspect's probes in host terms.
pub(crate) fn probes(p: Vec<wit::ProbeCommand>) -> Vec<Probe> {
    p.into_iter()
        .map(|p| Probe {
            id: p.id,
            program: p.program,
            args: p.args,
            timeout: std::time::Duration::from_millis(p.timeout_ms),
        })
        .collect()
}

/// A probe's output in the driver's terms.
pub(crate) fn probe_output(o: &ProbeOutput) -> wit::ProbeOutput {
    wit::ProbeOutput {
        id: o.id.clone(),
        code: o.code,
        stdout: o.stdout.clone(),
        stderr: o.stderr.clone(),
        error: o.error.clone(),
    }
}

/// The driver's environment checks and the CLI version it read.
pub(crate) fn environment(r: wit::EnvironmentReport) -> (Vec<Check>, Option<String>) {
    let checks = r
        .checks
        .into_iter()
        .map(|c| Check {
            code: c.code,
            level: match c.level {
                wit::CheckLevel::Pass => CheckLevel::Pass,
                wit::CheckLevel::Warn => CheckLevel::Warn,
                wit::CheckLevel::Fail => CheckLevel::Fail,
            },
            message: c.message,
            hint: c.hint,
        })
        .collect();
    (checks, r.cli_version)
}

/// A minimal valid descriptor (no capabilities), for tests.
#[cfg(test)]
pub(crate) fn minimal_descriptor() -> wit::Descriptor {
    wit::Descriptor {
        name: "minimal".into(),
        display_name: "Minimal".into(),
        version: "0.1.0".into(),
        default_program: "minimal-cli".into(),
        cli_versions: wit::VersionRange {
            min: None,
            max_exclusive: None,
            verified: vec![],
        },
        config_schema: "{}".into(),
        models: vec![],
        sessions: wit::SessionCaps {
            resume: false,
            fork: false,
            codec: String::new(),
        },
        persistent_process: false,
        structured_output: wit::StructuredOutputCaps {
            native: false,
            prompt_validate: false,
            with_streaming: false,
            native_with_approvals: false,
        },
        policy: wit::PolicyCaps {
            sandbox: wit::SandboxLevels::empty(),
            web_search: false,
            browser: false,
        },
        approvals: wit::ApprovalCaps {
            permission: wit::DecisionModes::empty(),
            plan_review: wit::DecisionModes::empty(),
            question: wit::DecisionModes::empty(),
        },
        streaming: wit::StreamingCaps {
            incremental: false,
            token_level: false,
            reasoning: false,
            tool_call_args: false,
        },
        mcp: wit::McpCaps {
            stdio: false,
            http: false,
            sse: false,
        },
        skills: false,
        instructions: false,
    }
}

/// [`minimal_descriptor`] in host types, for tests elsewhere in the crate.
#[cfg(test)]
pub(crate) fn minimal_host_descriptor() -> Descriptor {
    descriptor(DriverInfo::V0_1(minimal_descriptor())).expect("the minimal descriptor is valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_program_is_a_bare_name() {
        assert!(check_default_program("claude").is_ok());
        for bad in [
            "",
            " ",
            "/home/u/project/run.sh",
            "bin/claude",
            "a\\b",
            "a\0b",
        ] {
            assert!(check_default_program(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn descriptor_strings_carry_no_control_characters() {
        let mut d = minimal_descriptor();
        d.display_name = "Evil \x1b]0;pwned\x07".into();
        let err = descriptor(DriverInfo::V0_1(d)).unwrap_err();
        assert!(
            err.contains("display-name") && err.contains("control"),
            "{err}"
        );
        assert!(!err.contains('\x1b'), "the value is shown escaped: {err}");
        let mut d = minimal_descriptor();
        d.models = vec![wit::ModelInfo {
            id: "m".into(),
            label: "bell\x07".into(),
        }];
        assert!(
            descriptor(DriverInfo::V0_1(d))
                .unwrap_err()
                .contains("models.label")
        );
        let mut d = minimal_descriptor();
        d.version = "1.0\r".into();
        assert!(
            descriptor(DriverInfo::V0_1(d))
                .unwrap_err()
                .contains("version")
        );
    }

    #[test]
    fn a_descriptor_that_resumes_names_its_codec() {
        assert!(descriptor(DriverInfo::V0_1(minimal_descriptor())).is_ok());
        let mut d = minimal_descriptor();
        d.sessions.resume = true;
        d.sessions.codec = " ".into();
        let err = descriptor(DriverInfo::V0_1(d)).unwrap_err();
        assert!(err.contains("without a codec name"), "{err}");
        let mut d = minimal_descriptor();
        d.sessions.resume = true;
        d.sessions.codec = "minimal/v1".into();
        assert_eq!(
            descriptor(DriverInfo::V0_1(d)).unwrap().sessions.codec,
            "minimal/v1"
        );
    }

    fn empty_outcome() -> wit::Outcome {
        wit::Outcome {
            text: String::new(),
            summary: None,
            transcript: vec![],
            terminal: None,
            usage: None,
            model: None,
            structured_output: None,
            checkpoint: None,
            failure: None,
            metadata: vec![],
        }
    }

    #[test]
    fn malformed_outcomes_are_contract_errors_of_finish() {
        let mut bad = empty_outcome();
        bad.structured_output = Some("{not json".into());
        let err = outcome("x", "c", bad).unwrap_err();
        assert!(
            matches!(
                err,
                Error::DriverContract {
                    call: "session.finish",
                    ..
                }
            ),
            "{err:?}"
        );
        let mut bad = empty_outcome();
        bad.failure = Some(wit::Failure {
            reason: wit::FailureReason::AgentError,
            message: "m".into(),
            details_json: Some("[]x".into()),
        });
        assert!(outcome("x", "c", bad).is_err());
        // The terminal payload: a named event with JSON text (RSP-05).
        for (event, json, why) in [
            ("", "{}", "empty event name"),
            ("result", "{\"type\":", "not valid JSON"),
            // Checked whole although no value is built: trailing text, a bad escape, a
            // trailing comma.
            ("result", "{} x", "not valid JSON"),
            ("result", "{\"a\":\"\\q\"}", "not valid JSON"),
            ("result", "[1,]", "not valid JSON"),
        ] {
            let mut bad = empty_outcome();
            bad.terminal = Some(wit::TerminalPayload {
                event: event.into(),
                json: json.into(),
            });
            let err = outcome("x", "c", bad).unwrap_err();
            assert!(
                matches!(&err, Error::DriverContract { call: "session.finish", message, .. } if message.contains(why)),
                "{err:?}"
            );
        }
        // Resume ids and driver data are bounded.
        for (state, why) in [
            (
                wit::SessionState {
                    resume_id: "x".repeat(MAX_RESUME_ID_BYTES + 1),
                    display_id: None,
                    data: Vec::new(),
                },
                "resume id is",
            ),
            (
                wit::SessionState {
                    resume_id: "a\nb".into(),
                    display_id: None,
                    data: Vec::new(),
                },
                "control characters",
            ),
            (
                wit::SessionState {
                    resume_id: "r".into(),
                    display_id: None,
                    data: (0..=MAX_CHECKPOINT_ENTRIES)
                        .map(|i| (i.to_string(), String::new()))
                        .collect(),
                },
                "entries",
            ),
            (
                wit::SessionState {
                    resume_id: "r".into(),
                    display_id: None,
                    data: vec![("k".into(), "v".repeat(MAX_CHECKPOINT_DATA_BYTES))],
                },
                "bytes, over",
            ),
        ] {
            let mut bad = empty_outcome();
            bad.checkpoint = Some(wit::Checkpoint { state, valid: true });
            let err = outcome("x", "c", bad).unwrap_err();
            assert!(
                matches!(&err, Error::DriverContract { message, .. } if message.contains(why)),
                "{why}: {err:?}"
            );
        }
        // A checkpoint needs the provider's session id.
        let mut bad = empty_outcome();
        bad.checkpoint = Some(wit::Checkpoint {
            state: wit::SessionState {
                resume_id: String::new(),
                display_id: None,
                data: Vec::new(),
            },
            valid: true,
        });
        let err = outcome("x", "c", bad).unwrap_err();
        assert!(
            matches!(&err, Error::DriverContract { message, .. } if message.contains("empty resume id")),
            "{err:?}"
        );
        let ok = outcome("x", "codec/v1", empty_outcome()).unwrap();
        assert!(ok.failure.is_none() && ok.checkpoint.is_none());
    }

    #[test]
    fn the_default_policy_reaches_drivers_as_inherit_with_a_30_s_approval_timeout() {
        let w = policy(Policy::default());
        assert_eq!(w.sandbox, wit::Sandbox::Inherit);
        assert_eq!(w.approval_timeout_ms, Some(30_000));
    }

    #[test]
    fn actions_with_malformed_events_are_refused() {
        let bad = wit::Action::Emit(wit::Event::Text(wit::TextPart {
            message_id: String::new(),
            phase: wit::Phase::Delta,
            text: "x".into(),
            scope: wit::Scope {
                parent_tool_call_id: None,
            },
        }));
        assert!(matches!(
            actions("x", vec![wit::Action::CloseStdin, bad]),
            Err(Error::DriverContract { call: "emit", .. })
        ));
        let ok = actions(
            "x",
            vec![wit::Action::SetTimer(wit::Timer {
                id: 3,
                after_ms: 250,
            })],
        )
        .unwrap();
        assert_eq!(
            ok,
            [Action::SetTimer {
                id: 3,
                after: std::time::Duration::from_millis(250)
            }]
        );
    }

    #[test]
    fn a_0_2_driver_declares_steering_and_a_valid_launch_environment() {
        let info = |launch_env: Vec<&str>| {
            DriverInfo::V0_2(wit_session::DriverInfo {
                descriptor: minimal_descriptor(),
                steering: true,
                launch_env: launch_env.into_iter().map(str::to_owned).collect(),
            })
        };
        let d = descriptor(info(vec!["IS_SANDBOX", "ADAPTOR_MCP_HEADER_*"])).unwrap();
        assert!(d.steering);
        assert_eq!(d.wit_version, "0.2.0");
        assert_eq!(d.launch_env.as_ref().unwrap().len(), 2);
        for bad in ["*", "", "1ABC", "A B", "A*B"] {
            assert!(descriptor(info(vec![bad])).is_err(), "{bad:?}");
        }
        let legacy = descriptor(DriverInfo::V0_1(minimal_descriptor())).unwrap();
        assert!(!legacy.steering);
        assert_eq!(legacy.launch_env, None);
        assert_eq!(legacy.wit_version, "0.1.0");
    }

    #[test]
    fn a_0_3_driver_declares_a_checked_profile() {
        let spec = |var: &str, native: &str, target: &str| wit_resources::ProfileSpec {
            config_dir_variable: var.into(),
            native_dir: native.into(),
            files: vec![wit_resources::ProfileFile {
                part: wit_resources::ProfilePart::Auth,
                source: "auth.json".into(),
                default_source: None,
                target: target.into(),
                carry: wit_resources::Carry::Link,
            }],
            auth_store_variable: None,
        };
        let info = |profile| {
            DriverInfo::V0_3(
                wit_session::DriverInfo {
                    descriptor: minimal_descriptor(),
                    steering: false,
                    launch_env: vec![],
                },
                profile,
            )
        };
        let d = descriptor(info(Some(spec("CODEX_HOME", ".codex", "auth.json")))).unwrap();
        assert_eq!(d.wit_version, "0.3.0");
        let p = d.profile.unwrap();
        assert_eq!(p.config_dir_variable, "CODEX_HOME");
        assert_eq!(p.files[0].carry, Carry::Link);
        // A variable the host does not know (the host would set it to a directory), paths
        // that leave their directory: refused at load, naming the field.
        for (var, native, target, field) in [
            ("LD_PRELOAD", ".codex", "auth.json", "config-dir-variable"),
            ("PATH", ".codex", "auth.json", "config-dir-variable"),
            ("CODEX_HOME", "../etc", "auth.json", "native-dir"),
            ("CODEX_HOME", "/etc", "auth.json", "native-dir"),
            ("CODEX_HOME", ".codex", "../../x", "files.target"),
            ("CODEX_HOME", ".codex", "a//b", "files.target"),
            // A hostile driver naming the user's keys as its CLI's profile, or another
            // CLI's profile as its own: the host's table decides, not the driver.
            ("CODEX_HOME", ".ssh", "id_ed25519", "native-dir"),
            ("CLAUDE_CONFIG_DIR", ".codex", "auth.json", "native-dir"),
            // The credential-store variable is never a config-dir variable.
            (
                "CLAUDE_SECURESTORAGE_CONFIG_DIR",
                ".claude",
                "x",
                "config-dir-variable",
            ),
        ] {
            let e = descriptor(info(Some(spec(var, native, target)))).unwrap_err();
            assert!(e.contains(field), "{var} {native} {target}: {e}");
        }
        // A default-layout file outside the profile, or a credential store, the host does
        // not know for this CLI.
        let mut outside = spec("CODEX_HOME", ".codex", "auth.json");
        outside.files[0].default_source = Some(".ssh/id_ed25519".into());
        let e = descriptor(info(Some(outside))).unwrap_err();
        assert!(e.contains("default-source"), "{e}");
        let mut store = spec("CODEX_HOME", ".codex", "auth.json");
        store.auth_store_variable = Some("CLAUDE_SECURESTORAGE_CONFIG_DIR".into());
        let e = descriptor(info(Some(store))).unwrap_err();
        assert!(e.contains("auth-store-variable"), "{e}");
        assert_eq!(descriptor(info(None)).unwrap().profile, None);
    }
}
