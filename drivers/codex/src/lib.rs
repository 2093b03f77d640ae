//! The Codex driver: protocol knowledge of the Codex CLI, and nothing else.
//!
//! Two transports. **exec** (`codex exec --json`, prompt on stdin, JSON Lines events) for
//! runs that neither stream nor ask; **app-server** (`codex app-server`, JSON-RPC over stdio,
//! the client lives in this driver) when the caller streams or an approval mode asks, because
//! only the app-server sends token deltas and server-initiated approval requests.
//!
//! This file owns the descriptor, the config and both command lines (policy flags, model,
//! effort, output schema through a private file, resume). `items.rs` maps Codex thread items
//! (shared by both transports) to events and transcript; `exec.rs` and `appserver.rs` own the
//! two wire protocols. It never does I/O: the host runs the process.

mod appserver;
mod exec;
mod items;
mod session;

use adaptor_sdk::json::{self, check_fields, str_field};
use adaptor_sdk::{
    ApprovalCaps, ConfigError, DecisionMode, DecisionModes, Descriptor, Driver, McpCaps,
    McpTransport, ModelInfo, PolicyCaps, RunRequest, Sandbox, SandboxLevels, SessionCaps,
    StartError, StreamingCaps, StructuredOutputCaps, Toggle, VersionRange,
};
use serde_json::{Value, json};

pub use session::CodexSession;

/// Name of the checkpoint encoding (the resume id is Codex's thread id).
pub const CODEC: &str = "codex/thread/v1";

/// The Codex CLI versions this driver was verified with.
pub const VERIFIED_VERSIONS: &[&str] = &["0.171.0"];

/// Config fields accepted by the driver, with their JSON types.
const CONFIG_FIELDS: &[(&str, &str)] = &[
    ("command", "non-empty-string"),
    ("model", "string"),
    ("effort", "string"),
    ("transport", "string"),
    ("skip_git_repo_check", "boolean"),
    ("extra_args", "array-of-strings"),
];

/// Reasoning efforts (`-c model_reasoning_effort=…`).
const EFFORTS: &[&str] = &["minimal", "low", "medium", "high", "xhigh"];

/// Flags the driver owns (they would contradict the request).
const OWNED_FLAGS: &[&str] = &[
    "--json",
    "--search",
    "-s",
    "--sandbox",
    "-a",
    "--ask-for-approval",
    "--full-auto",
    "--approve-for-me",
    "--dangerously-bypass-approvals-and-sandbox",
    "--output-schema",
    "-o",
    "--output-last-message",
    "-m",
    "--model",
    "resume",
    "fork",
];

/// `-c key=value` overrides the driver owns.
const OWNED_CONFIG_KEYS: &[&str] = &[
    "web_search",
    "sandbox_mode",
    "approval_policy",
    "model",
    "model_reasoning_effort",
    "developer_instructions",
];

/// The Codex driver.
pub struct CodexDriver;

impl Driver for CodexDriver {
    type Session = CodexSession;

    fn describe() -> Descriptor {
        Descriptor {
            name: "codex".into(),
            display_name: "Codex CLI".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            default_program: "codex".into(),
            cli_versions: VersionRange {
                min: Some("0.171.0".into()),
                max_exclusive: Some("0.172.0".into()),
                verified: VERIFIED_VERSIONS.iter().map(|v| (*v).into()).collect(),
            },
            config_schema: config_schema().to_string(),
            models: ["gpt-5.5", "gpt-5.5-codex"]
                .iter()
                .map(|m| ModelInfo {
                    id: (*m).into(),
                    label: (*m).into(),
                })
                .collect(),
            sessions: SessionCaps {
                resume: true,
                // `thread/fork` on the app-server (a fork always uses it, see `transport`).
                fork: true,
                codec: CODEC.into(),
            },
            persistent_process: true,
            structured_output: StructuredOutputCaps {
                native: true,
                prompt_validate: true,
                with_streaming: true,
                native_with_approvals: true,
            },
            policy: PolicyCaps {
                sandbox: SandboxLevels::READ_ONLY
                    | SandboxLevels::WORKSPACE_WRITE
                    | SandboxLevels::UNRESTRICTED,
                web_search: true,
                browser: false,
            },
            approvals: ApprovalCaps {
                // Command and file-change approvals come from the app-server; Codex has no
                // plan review or question requests.
                permission: DecisionModes::ASK
                    | DecisionModes::AUTO_APPROVE
                    | DecisionModes::AUTO_DENY,
                plan_review: DecisionModes::empty(),
                question: DecisionModes::empty(),
            },
            streaming: StreamingCaps {
                incremental: true,
                token_level: true,
                reasoning: true,
                tool_call_args: false,
            },
            // `-c mcp_servers.<name>.…` overrides on both transports; credentials travel in
            // the environment (`bearer_token_env_var`, `env_http_headers`, `env_vars`),
            // never on argv. Codex has no legacy SSE client.
            mcp: McpCaps {
                stdio: true,
                http: true,
                sse: false,
            },
            // The host's skill bundle as an extra skill root (`skills/extraRoots/set`,
            // app-server transport only).
            skills: true,
            instructions: true,
        }
    }

    /// Steering: a steerable request runs on the app-server, and the input is a `turn/steer`
    /// request for the running turn.
    fn steering() -> bool {
        true
    }

    fn launch_env() -> Vec<String> {
        // Literal MCP header values, named in `env_http_headers` (a stdio server's own
        // variables are the caller's and pass unchanged).
        vec!["ADAPTOR_MCP_HEADER_*".to_owned()]
    }

    /// `CODEX_HOME` moves config, sessions, logs and SQLite state. `auth.json` is rewritten
    /// in place on refresh, so it is linked (a copy would fork the rotating refresh token);
    /// `config.toml` holds both the settings and the MCP servers, so either part copies it.
    fn profile() -> Option<adaptor_sdk::ProfileSpec> {
        use adaptor_sdk::{Carry, ProfileFile, ProfilePart};
        let file = ProfileFile::same_name;
        Some(adaptor_sdk::ProfileSpec {
            config_dir_variable: "CODEX_HOME".into(),
            native_dir: ".codex".into(),
            files: vec![
                file(ProfilePart::Auth, "auth.json", Carry::Link),
                file(ProfilePart::Settings, "config.toml", Carry::Copy),
                file(ProfilePart::Mcp, "config.toml", Carry::Copy),
            ],
            auth_store_variable: None,
        })
    }

    fn validate_config(config: &Value) -> Result<(), ConfigError> {
        check_fields(config, CONFIG_FIELDS)?;
        let bad = |path: &str, message: String| ConfigError {
            path: path.into(),
            message,
        };
        json::check_one_of(config, "effort", EFFORTS)?;
        json::check_one_of(config, "transport", &["auto", "exec", "app-server"])?;
        if let Some(args) = config.get("extra_args").and_then(Value::as_array) {
            let args: Vec<&str> = args.iter().filter_map(Value::as_str).collect();
            for (i, arg) in args.iter().enumerate() {
                let flag = arg.split_once('=').map_or(*arg, |(f, _)| f);
                if OWNED_FLAGS.contains(&flag) {
                    return Err(bad(
                        &format!("/extra_args/{i}"),
                        format!(
                            "`{flag}` is set by the driver from the request; extra args may not override it"
                        ),
                    ));
                }
                if matches!(*arg, "-c" | "--config")
                    && let Some(value) = args.get(i + 1)
                {
                    let key = value.split_once('=').map_or(*value, |(k, _)| k).trim();
                    if OWNED_CONFIG_KEYS.contains(&key) {
                        return Err(bad(
                            &format!("/extra_args/{}", i + 1),
                            format!(
                                "`-c {key}=…` is set by the driver from the request; extra args may not override it"
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn config_fingerprint(config: &Value) -> Result<String, ConfigError> {
        Self::validate_config(config)?;
        // What the thread was made with: the configured model and effort and the extra
        // arguments (a per-call model is in the thread fingerprint too, so a configured one
        // must be). The command path, transport and git check do not change the thread.
        let relevant = json!({
            "model": json::str_field(config, "model"),
            "effort": json::str_field(config, "effort"),
            "extra_args": config.get("extra_args"),
        });
        Ok(json::canonical_fingerprint(
            "codex/configured-driver/v2;codex/thread/v1",
            &relevant,
        ))
    }
}

fn config_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Codex driver config",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "command": {"type": "string", "description": "The codex program (default: codex on PATH)."},
            "model": {"type": "string", "description": "Model (`--model`); a per-run model wins."},
            "effort": {"enum": EFFORTS, "description": "Reasoning effort (`-c model_reasoning_effort=…`)."},
            "transport": {"enum": ["auto", "exec", "app-server"], "description": "auto (default): app-server when streaming or asking for approvals, else exec."},
            "skip_git_repo_check": {"type": "boolean", "description": "Pass --skip-git-repo-check to exec (default true: workspaces need not be git repositories)."},
            "extra_args": {"type": "array", "items": {"type": "string"}, "description": "Arguments appended; flags and -c keys the driver sets from the request are refused."}
        }
    })
}

/// Which wire protocol a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Exec,
    AppServer,
}

/// The transport for `request`: the app-server when streaming, when approvals are asked
/// (or answered by the host), for a fork (only it has `thread/fork`) or with skills (only it
/// has extra skill roots), unless the config pins one.
pub(crate) fn transport(request: &RunRequest, config: &Value) -> Transport {
    match str_field(config, "transport") {
        Some("exec") => Transport::Exec,
        Some("app-server") => Transport::AppServer,
        // Only the app-server takes extra skill roots (`skills/extraRoots/set`).
        _ if !request.skill_dirs.is_empty() => Transport::AppServer,
        _ if request
            .resume
            .as_ref()
            .is_some_and(|r| r.mode == adaptor_sdk::SessionMode::Fork) =>
        {
            Transport::AppServer
        }
        _ => {
            let asks = matches!(
                request.policy.permission,
                DecisionMode::Ask | DecisionMode::AutoDeny
            );
            if request.streaming || asks {
                Transport::AppServer
            } else {
                Transport::Exec
            }
        }
    }
}

/// `-c` overrides shared by both transports: web search, effort, instructions.
pub(crate) fn config_overrides(request: &RunRequest, config: &Value) -> Vec<String> {
    let mut args = Vec::new();
    let mut set = |kv: String| args.extend(["-c".to_owned(), kv]);
    match request.policy.web_search {
        Toggle::Inherit => {}
        Toggle::Allow => set("web_search=\"live\"".into()),
        Toggle::Deny => set("web_search=\"disabled\"".into()),
    }
    if let Some(effort) = str_field(config, "effort") {
        set(format!("model_reasoning_effort=\"{effort}\""));
    }
    args
}

/// The request's MCP servers as `-c mcp_servers.<name>.…` overrides, plus the variables the
/// driver sets so that no credential is on argv: a literal header value goes in
/// `ADAPTOR_MCP_HEADER_<n>` (named in `env_http_headers`), a stdio server's variable is set
/// under its own name and forwarded with `env_vars`. Header references of the host
/// (`Bearer ${NAME}`, `${NAME}`) map onto `bearer_token_env_var` / `env_http_headers`.
pub(crate) fn mcp_overrides(request: &RunRequest) -> Result<McpLaunch, StartError> {
    use adaptor_sdk::mcp::{HeaderValue, header_value};
    let mut args = Vec::new();
    let mut env: Vec<(String, String)> = Vec::new();
    let mut set = |key: &str, name: &str, value: String| {
        args.extend(["-c".to_owned(), format!("mcp_servers.{name}.{key}={value}")]);
    };
    let toml_list = |items: &[String]| {
        format!(
            "[{}]",
            items
                .iter()
                .map(|i| toml_string(i))
                .collect::<Vec<_>>()
                .join(",")
        )
    };
    for server in &request.mcp_servers {
        let name = server.name.as_str();
        match &server.transport {
            McpTransport::Stdio(s) => {
                set("command", name, toml_string(&s.command));
                if !s.args.is_empty() {
                    set("args", name, toml_list(&s.args));
                }
                if !s.env.is_empty() {
                    let names: Vec<String> = s.env.iter().map(|(k, _)| k.clone()).collect();
                    set("env_vars", name, toml_list(&names));
                    env.extend(s.env.iter().cloned());
                }
            }
            McpTransport::Http(r) => {
                set("url", name, toml_string(&r.url));
                let mut env_headers: Vec<(String, String)> = Vec::new();
                for (header, value) in &r.headers {
                    match header_value(value) {
                        HeaderValue::BearerEnv(var)
                            if header.eq_ignore_ascii_case("authorization") =>
                        {
                            set("bearer_token_env_var", name, toml_string(var));
                        }
                        HeaderValue::Env(var) => env_headers.push((header.clone(), var.to_owned())),
                        HeaderValue::Literal(v) => {
                            let var = format!("ADAPTOR_MCP_HEADER_{}", env.len() + 1);
                            env.push((var.clone(), v.to_owned()));
                            env_headers.push((header.clone(), var));
                        }
                        HeaderValue::BearerEnv(_) | HeaderValue::Mixed(_) => {
                            return Err(StartError::Unsupported(format!(
                                "MCP server `{name}`: Codex cannot expand the value of header `{header}` (only `Authorization: Bearer ${{NAME}}` or a whole `${{NAME}}`)"
                            )));
                        }
                    }
                }
                if !env_headers.is_empty() {
                    let table = env_headers
                        .iter()
                        .map(|(h, v)| format!("{}={}", toml_string(h), toml_string(v)))
                        .collect::<Vec<_>>()
                        .join(",");
                    set("env_http_headers", name, format!("{{{table}}}"));
                }
            }
            McpTransport::Sse(_) => {
                return Err(StartError::Unsupported(format!(
                    "MCP server `{name}`: Codex has no SSE MCP client"
                )));
            }
        }
    }
    Ok(McpLaunch { args, env })
}

/// What the MCP servers add to a launch.
pub(crate) struct McpLaunch {
    /// `-c mcp_servers.…` overrides.
    pub args: Vec<String>,
    /// Variables the driver sets (credentials kept off argv).
    pub env: Vec<(String, String)>,
}

/// Codex's sandbox mode for a policy sandbox level: always `danger-full-access`.
///
/// Codex 0.171 restricts the filesystem of its commands only with bubblewrap ("filesystem-
/// restricted execution requires bubblewrap"; the legacy Landlock mode panics with that
/// message), and bubblewrap mounts. The host runs every provider inside a Landlock domain,
/// where the kernel refuses `mount(2)`: a Codex sandbox of its own cannot start there, and
/// every command would fail with `bwrap: setting up …`. The host's confinement is the
/// sandbox instead: it enforces `read-only` (no workspace writes) and `workspace-write` /
/// `inherit` / `unrestricted` (writes in the workspace, the run's TMPDIR and Codex's state
/// only) for Codex and all its commands, as for every CLI. What Codex's own modes add and the
/// host does not is network isolation of commands: under the host, commands keep the
/// network (see the driver README).
pub(crate) fn sandbox_mode(sandbox: Sandbox) -> Option<&'static str> {
    match sandbox {
        Sandbox::Inherit | Sandbox::ReadOnly | Sandbox::WorkspaceWrite | Sandbox::Unrestricted => {
            Some("danger-full-access")
        }
    }
}

/// Codex's approval policy for the permission mode: `never` when auto-approving, `untrusted`
/// when the host asks or auto-denies (every command then needs approval), none to inherit.
pub(crate) fn approval_policy(mode: DecisionMode) -> Option<&'static str> {
    match mode {
        DecisionMode::Inherit => None,
        DecisionMode::AutoApprove => Some("never"),
        DecisionMode::Ask | DecisionMode::AutoDeny => Some("untrusted"),
    }
}

/// Extra args from the config.
pub(crate) fn extra_args(config: &Value) -> Vec<String> {
    config
        .get("extra_args")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The output schema as Codex takes it (`--output-schema` file, `outputSchema`): without
/// `$schema`, `$id`, `$defs` / `definitions` (the host has already inlined local references).
pub(crate) fn schema_for_cli(schema: &str) -> Result<String, String> {
    let mut value: Value =
        serde_json::from_str(schema).map_err(|e| format!("the output schema is not JSON: {e}"))?;
    if let Value::Object(map) = &mut value {
        for key in ["$schema", "$id", "$defs", "definitions"] {
            map.remove(key);
        }
    }
    Ok(value.to_string())
}

/// Escape `text` as a TOML basic string (for `-c key="…"`).
pub(crate) fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(all(target_family = "wasm", feature = "component"))]
adaptor_sdk::export_driver!(CodexDriver);

#[cfg(test)]
mod tests;
