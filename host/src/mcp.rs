//! MCP server declarations: servers the caller asks the CLI to use for a run
//! ([`RunOptions::mcp`](crate::RunOptions::mcp)), and their checks before launch.
//!
//! The builders are typed per transport — [`Mcp::stdio`] gives a [`StdioServer`] (arguments,
//! environment), [`Mcp::http`] / [`Mcp::sse`] give a [`RemoteServer`] (headers, a bearer token
//! read from an environment variable) — so a header on a stdio server or arguments on a URL
//! do not compile. `--mcp-config` files are parsed into the same types
//! ([`Mcp::from_config_json`]), with a typed error for every mismatch.
//!
//! This file also owns the delivery rules the run applies (`resolve`): names unique and
//! well formed, transports the driver declares, environment references that exist and
//! never alias the host tool server's token variable, and the fingerprint entries (no
//! secret value is an input). Must not: spawn, or do network I/O.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::descriptor::McpCaps;

/// An MCP server declaration. Build one with [`Mcp::stdio`], [`Mcp::http`] or [`Mcp::sse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mcp {
    name: String,
    transport: Transport,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Transport {
    Stdio(StdioServer),
    Http(RemoteServer),
    Sse(RemoteServer),
}

/// A local MCP server the CLI starts and speaks to over stdio. Its `Debug` shows the
/// variables' names, never their values.
#[derive(Clone, PartialEq, Eq)]
pub struct StdioServer {
    name: String,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
}

/// A remote MCP server (streamable HTTP or legacy SSE). Its `Debug` shows the headers'
/// names, never their values.
#[derive(Clone, PartialEq, Eq)]
pub struct RemoteServer {
    name: String,
    url: String,
    sse: bool,
    headers: BTreeMap<String, String>,
    bearer_token_env: Option<String>,
}

impl std::fmt::Debug for StdioServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioServer")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl std::fmt::Debug for RemoteServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteServer")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("sse", &self.sse)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("bearer_token_env", &self.bearer_token_env)
            .finish()
    }
}

impl Mcp {
    /// A stdio server: the CLI runs `command` (resolved by the CLI, inside the run's
    /// confinement) and speaks MCP on its stdin/stdout.
    #[allow(clippy::new_ret_no_self)]
    pub fn stdio(name: impl Into<String>, command: impl Into<String>) -> StdioServer {
        StdioServer {
            name: name.into(),
            command: command.into(),
            args: Vec::new(),
            env: BTreeMap::new(),
        }
    }

    /// A streamable-HTTP server at `url`.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> RemoteServer {
        RemoteServer {
            name: name.into(),
            url: url.into(),
            sse: false,
            headers: BTreeMap::new(),
            bearer_token_env: None,
        }
    }

    /// A legacy SSE server at `url`.
    pub fn sse(name: impl Into<String>, url: impl Into<String>) -> RemoteServer {
        RemoteServer {
            sse: true,
            ..Mcp::http(name, url)
        }
    }

    /// The server's name (its key inside the CLI; tools appear as `mcp__<name>__<tool>` in
    /// Claude Code).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `stdio`, `http` or `sse`.
    pub fn transport(&self) -> &'static str {
        match self.transport {
            Transport::Stdio(_) => "stdio",
            Transport::Http(_) => "http",
            Transport::Sse(_) => "sse",
        }
    }

    /// Parse the common MCP config shape, `{"mcpServers": {"<name>": {…}}}` — a server has
    /// `command` (with optional `args`, `env`) or `url` (with optional `headers`,
    /// `bearer_token_env_var`); `type` may be `stdio`, `http` (also `streamable-http`) or
    /// `sse` and must agree with the fields. Unknown fields and mismatches are errors naming
    /// the server and the field.
    pub fn from_config_json(text: &str) -> Result<Vec<Mcp>, McpError> {
        let doc: Value = serde_json::from_str(text).map_err(|e| McpError::Config {
            server: None,
            reason: format!("not JSON: {e}"),
        })?;
        let servers = doc
            .get("mcpServers")
            .and_then(Value::as_object)
            .ok_or_else(|| McpError::Config {
                server: None,
                reason: "expected an object with an `mcpServers` object".into(),
            })?;
        if let Some(other) = doc
            .as_object()
            .and_then(|o| o.keys().find(|k| *k != "mcpServers"))
        {
            return Err(McpError::Config {
                server: None,
                reason: format!("unknown top-level field `{other}`"),
            });
        }
        servers
            .iter()
            .map(|(name, spec)| server_from_json(name, spec))
            .collect()
    }
}

fn server_from_json(name: &str, spec: &Value) -> Result<Mcp, McpError> {
    let err = |reason: String| McpError::Config {
        server: Some(name.to_owned()),
        reason,
    };
    let obj = spec
        .as_object()
        .ok_or_else(|| err("a server must be a JSON object".into()))?;
    let string = |field: &str| -> Result<Option<String>, McpError> {
        match obj.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(err(format!("`{field}` must be a string"))),
        }
    };
    let map = |field: &str| -> Result<BTreeMap<String, String>, McpError> {
        match obj.get(field) {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    _ => Err(err(format!("`{field}.{k}` must be a string"))),
                })
                .collect(),
            Some(_) => Err(err(format!("`{field}` must be an object of strings"))),
        }
    };
    let kind = string("type")?;
    let command = string("command")?;
    let url = string("url")?;
    let (allowed, transport): (&[&str], _) = match (kind.as_deref(), &command, &url) {
        (None | Some("stdio"), Some(command), None) => {
            let args = match obj.get("args") {
                None => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| err("`args` must be an array of strings".into()))
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err(err("`args` must be an array of strings".into())),
            };
            let server = StdioServer {
                name: name.to_owned(),
                command: command.clone(),
                args,
                env: map("env")?,
            };
            (
                &["type", "command", "args", "env"][..],
                Transport::Stdio(server),
            )
        }
        (None | Some("http" | "streamable-http" | "sse"), None, Some(url)) => {
            let server = RemoteServer {
                name: name.to_owned(),
                url: url.clone(),
                sse: kind.as_deref() == Some("sse"),
                headers: map("headers")?,
                bearer_token_env: string("bearer_token_env_var")?,
            };
            let transport = if server.sse {
                Transport::Sse(server)
            } else {
                Transport::Http(server)
            };
            (
                &["type", "url", "headers", "bearer_token_env_var"][..],
                transport,
            )
        }
        (Some(k @ ("stdio" | "http" | "streamable-http" | "sse")), _, _) => {
            return Err(err(format!(
                "type `{k}` needs {} and not {}",
                if k == "stdio" { "`command`" } else { "`url`" },
                if k == "stdio" { "`url`" } else { "`command`" }
            )));
        }
        (Some(k), _, _) => {
            return Err(err(format!(
                "unknown type `{k}` (stdio, http, streamable-http or sse)"
            )));
        }
        (None, _, _) => {
            return Err(err(
                "a server needs exactly one of `command` (stdio) or `url` (http, sse)".into(),
            ));
        }
    };
    if let Some(field) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(err(format!(
            "field `{field}` does not apply to a {} server",
            match transport {
                Transport::Stdio(_) => "stdio",
                _ => "remote",
            }
        )));
    }
    Ok(Mcp {
        name: name.to_owned(),
        transport,
    })
}

impl StdioServer {
    /// Append arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Set an environment variable of the server process (values are never logged).
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }
}

impl RemoteServer {
    /// Add an HTTP header (values may carry credentials: they are never logged, and are
    /// masked in dry-run output).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Send `Authorization: Bearer <value of the variable NAME>`. The variable is read by the
    /// CLI from its environment (the host passes it through from its own environment, or
    /// takes the value set with `AgentBuilder::env`); the value is never in the request.
    pub fn bearer_token_env(mut self, name: impl Into<String>) -> Self {
        self.bearer_token_env = Some(name.into());
        self
    }
}

impl From<StdioServer> for Mcp {
    fn from(server: StdioServer) -> Mcp {
        Mcp {
            name: server.name.clone(),
            transport: Transport::Stdio(server),
        }
    }
}

impl From<RemoteServer> for Mcp {
    fn from(server: RemoteServer) -> Mcp {
        Mcp {
            name: server.name.clone(),
            transport: if server.sse {
                Transport::Sse(server)
            } else {
                Transport::Http(server)
            },
        }
    }
}

/// An MCP declaration that cannot be delivered. Nothing was started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// An `--mcp-config` document (or a server in it) is malformed.
    #[error("MCP config{}: {reason}", server.as_ref().map(|s| format!(" server `{s}`")).unwrap_or_default())]
    Config {
        /// The server, when the problem is inside one.
        server: Option<String>,
        /// What is wrong.
        reason: String,
    },
    /// A server's name, command, URL, header or variable name is unusable.
    #[error("MCP server `{server}`: {reason}")]
    Invalid {
        /// The server.
        server: String,
        /// What is wrong.
        reason: String,
    },
    /// Two servers (or a server and the host tools) share a name.
    #[error("two MCP servers are named `{server}`")]
    Duplicate {
        /// The name.
        server: String,
    },
    /// The driver's CLI cannot take this transport (its descriptor's `mcp` capabilities).
    #[error(
        "driver `{driver}` cannot hand a {transport} MCP server (`{server}`) to its CLI; it accepts: {accepted}"
    )]
    TransportUnsupported {
        /// The driver.
        driver: String,
        /// The server.
        server: String,
        /// `stdio`, `http` or `sse`.
        transport: &'static str,
        /// What the driver declares (or `none`).
        accepted: String,
    },
    /// A declaration names the host tool server's token variable, which would hand the host
    /// tools' credential to another server.
    #[error(
        "MCP server `{server}` names the variable `{variable}`, which carries the host tool server's token"
    )]
    TokenAlias {
        /// The server.
        server: String,
        /// The variable.
        variable: String,
    },
    /// A bearer-token variable is set neither in the host's environment nor by the caller.
    #[error(
        "MCP server `{server}`: the bearer-token variable `{variable}` is not set (in the host's environment or with AgentBuilder::env)"
    )]
    TokenEnvMissing {
        /// The server.
        server: String,
        /// The variable.
        variable: String,
    },
}

/// The name the host tool server has inside the CLI (Claude Code shows its tools as
/// `mcp__host__<tool>`). A declared server may not use it when the agent has tools.
pub const HOST_TOOLS_SERVER: &str = "host";

/// An MCP server in the driver's request (host types; `wasm/convert` maps it onto the WIT).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestServer {
    pub name: String,
    pub transport: RequestTransport,
}

/// The transport of a [`RequestServer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RequestTransport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
    Sse {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// The host tool server, as a run delivers it.
#[derive(Debug, Clone)]
pub(crate) struct HostToolServer {
    /// The server name the CLI sees.
    pub name: String,
    /// Its URL (`http://127.0.0.1:<port>/mcp`).
    pub url: String,
    /// The environment variable the host sets to the token.
    pub token_env: String,
    /// The token.
    pub token: String,
}

/// What a run delivers: the request's servers, the variables the host adds to the CLI's
/// environment (name, value), and the fingerprint entries.
#[derive(Debug, Default)]
pub(crate) struct Delivery {
    pub servers: Vec<RequestServer>,
    pub env: Vec<(String, String)>,
    pub fingerprint: Vec<String>,
    /// Stdio server programs given by absolute path (the confinement lets the CLI run them).
    pub programs: Vec<std::path::PathBuf>,
    /// Every credential-like value (header values, tokens, stdio server variables), for
    /// masking in dry-run output.
    pub secrets: Vec<String>,
}

impl Delivery {
    /// Every variable the caller gave a stdio server (name and value).
    pub(crate) fn stdio_env(&self) -> Vec<(String, String)> {
        self.servers
            .iter()
            .filter_map(|s| match &s.transport {
                RequestTransport::Stdio { env, .. } => Some(env.iter().cloned()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    fn secret(&mut self, value: &str) {
        // Very short values would mask unrelated text; they are not credentials anyway.
        if value.len() >= 4 && !self.secrets.iter().any(|s| s == value) {
            self.secrets.push(value.to_owned());
        }
    }
}

/// Resolve the declarations (and the host tool server, if any) against the driver's
/// capabilities. `caller_env` is the value the caller set for a variable (`AgentBuilder::env`),
/// if any; `host_env` reads the host's own environment.
pub(crate) fn resolve(
    driver: &str,
    caps: &McpCaps,
    declared: &[Mcp],
    host_tools: Option<&HostToolServer>,
    caller_env: &dyn Fn(&str) -> Option<String>,
    host_env: &dyn Fn(&str) -> Option<String>,
) -> Result<Delivery, McpError> {
    let mut delivery = Delivery::default();
    let mut names = std::collections::BTreeSet::new();
    let accepted = || {
        let list: Vec<&str> = [
            ("stdio", caps.stdio),
            ("http", caps.http),
            ("sse", caps.sse),
        ]
        .iter()
        .filter(|(_, on)| *on)
        .map(|(n, _)| *n)
        .collect();
        if list.is_empty() {
            "none".to_owned()
        } else {
            list.join(", ")
        }
    };
    if let Some(host) = host_tools {
        names.insert(host.name.clone());
    }
    for server in declared {
        let name = &server.name;
        let invalid = |reason: String| McpError::Invalid {
            server: name.clone(),
            reason,
        };
        check_name(name).map_err(invalid)?;
        if !names.insert(name.clone()) {
            return Err(McpError::Duplicate {
                server: name.clone(),
            });
        }
        let supported = match server.transport {
            Transport::Stdio(_) => caps.stdio,
            Transport::Http(_) => caps.http,
            Transport::Sse(_) => caps.sse,
        };
        if !supported {
            return Err(McpError::TransportUnsupported {
                driver: driver.to_owned(),
                server: name.clone(),
                transport: server.transport(),
                accepted: accepted(),
            });
        }
        let alias = |text: &str| -> Result<(), McpError> {
            if let Some(host) = host_tools
                && text.contains(&host.token_env)
            {
                return Err(McpError::TokenAlias {
                    server: name.clone(),
                    variable: host.token_env.clone(),
                });
            }
            Ok(())
        };
        match &server.transport {
            Transport::Stdio(s) => {
                if s.command.trim().is_empty() {
                    return Err(invalid("the command is empty".into()));
                }
                for (k, v) in &s.env {
                    check_env_name(k).map_err(invalid)?;
                    alias(k)?;
                    alias(v)?;
                    delivery.secret(v);
                }
                for a in &s.args {
                    alias(a)?;
                }
                alias(&s.command)?;
                let command = std::path::Path::new(&s.command);
                if command.is_absolute() {
                    if !command.is_file() {
                        return Err(invalid(format!(
                            "the command {} is not a file",
                            command.display()
                        )));
                    }
                    delivery.programs.push(command.to_path_buf());
                }
                delivery.fingerprint.push(format!(
                    "{name} stdio {} {} env:{}",
                    s.command,
                    s.args.join(" "),
                    s.env.keys().cloned().collect::<Vec<_>>().join(",")
                ));
                delivery.servers.push(RequestServer {
                    name: name.clone(),
                    transport: RequestTransport::Stdio {
                        command: s.command.clone(),
                        args: s.args.clone(),
                        env: s.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    },
                });
            }
            Transport::Http(r) | Transport::Sse(r) => {
                check_url(&r.url).map_err(invalid)?;
                let mut headers: Vec<(String, String)> = Vec::new();
                for (k, v) in &r.headers {
                    check_header(k, v).map_err(invalid)?;
                    alias(v)?;
                    delivery.secret(v);
                    headers.push((k.clone(), v.clone()));
                }
                if let Some(var) = &r.bearer_token_env {
                    check_env_name(var).map_err(invalid)?;
                    alias(var)?;
                    if r.headers
                        .keys()
                        .any(|k| k.eq_ignore_ascii_case("authorization"))
                    {
                        return Err(invalid(
                            "both an `Authorization` header and a bearer-token variable are set"
                                .into(),
                        ));
                    }
                    headers.push(("Authorization".into(), format!("Bearer ${{{var}}}")));
                    match (caller_env(var), host_env(var)) {
                        // The caller set it: the grant already puts it in the environment.
                        (Some(value), _) => delivery.secret(&value),
                        (None, Some(value)) => {
                            delivery.secret(&value);
                            if !delivery.env.iter().any(|(k, _)| k == var) {
                                delivery.env.push((var.clone(), value));
                            }
                        }
                        (None, None) => {
                            return Err(McpError::TokenEnvMissing {
                                server: name.clone(),
                                variable: var.clone(),
                            });
                        }
                    }
                }
                delivery.fingerprint.push(format!(
                    "{name} {} {} headers:{}",
                    server.transport(),
                    r.url,
                    headers
                        .iter()
                        .map(|(k, _)| k.to_ascii_lowercase())
                        .collect::<Vec<_>>()
                        .join(",")
                ));
                let transport = if r.sse {
                    RequestTransport::Sse {
                        url: r.url.clone(),
                        headers,
                    }
                } else {
                    RequestTransport::Http {
                        url: r.url.clone(),
                        headers,
                    }
                };
                delivery.servers.push(RequestServer {
                    name: name.clone(),
                    transport,
                });
            }
        }
    }
    if let Some(host) = host_tools {
        if !caps.http {
            return Err(McpError::TransportUnsupported {
                driver: driver.to_owned(),
                server: host.name.clone(),
                transport: "http",
                accepted: accepted(),
            });
        }
        delivery.servers.push(RequestServer {
            name: host.name.clone(),
            transport: RequestTransport::Http {
                url: host.url.clone(),
                headers: vec![(
                    "Authorization".into(),
                    format!("Bearer ${{{}}}", host.token_env),
                )],
            },
        });
        delivery.secret(&host.token);
        delivery
            .env
            .push((host.token_env.clone(), host.token.clone()));
    }
    Ok(delivery)
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !name.contains("__");
    if ok {
        Ok(())
    } else {
        Err("the name must be 1 to 32 ASCII letters, digits, `_` or `-`, without `__`".into())
    }
}

fn check_env_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not an environment variable name (ASCII letters, digits and `_`, not starting with a digit)"
        ))
    }
}

fn check_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("the URL {url:?} is not http:// or https://"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("the URL {url:?} has no host"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the URL contains whitespace or control characters".into());
    }
    Ok(())
}

fn check_header(name: &str, value: &str) -> Result<(), String> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(format!("`{name}` is not an HTTP header name"));
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(format!(
            "the value of header `{name}` contains a line break"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: McpCaps = McpCaps {
        stdio: true,
        http: true,
        sse: true,
    };

    fn host() -> HostToolServer {
        HostToolServer {
            name: "host".into(),
            url: "http://127.0.0.1:9/mcp".into(),
            token_env: "ADAPTOR_TOOLS_TOKEN_ab12".into(),
            token: "t0k3n".into(),
        }
    }

    fn go(declared: &[Mcp], caps: &McpCaps, tools: bool) -> Result<Delivery, McpError> {
        let h = host();
        resolve(
            "d",
            caps,
            declared,
            tools.then_some(&h),
            &|k| (k == "SET").then(|| "caller".to_owned()),
            &|k| (k == "HOSTVAR").then(|| "host".to_owned()),
        )
    }

    #[test]
    fn declarations_become_request_servers() {
        let servers = [
            Mcp::stdio("files", "mcp-files")
                .args(["--root", "."])
                .env("A", "1")
                .into(),
            Mcp::http("gh", "https://example.invalid/mcp")
                .header("X-Team", "core")
                .bearer_token_env("HOSTVAR")
                .into(),
        ];
        let d = go(&servers, &ALL, true).unwrap();
        assert_eq!(d.servers.len(), 3);
        assert_eq!(
            d.servers[1].transport,
            RequestTransport::Http {
                url: "https://example.invalid/mcp".into(),
                headers: vec![
                    ("X-Team".into(), "core".into()),
                    ("Authorization".into(), "Bearer ${HOSTVAR}".into())
                ]
            }
        );
        assert_eq!(d.servers[2].name, "host");
        assert_eq!(
            d.env,
            vec![
                ("HOSTVAR".into(), "host".into()),
                ("ADAPTOR_TOOLS_TOKEN_ab12".into(), "t0k3n".into())
            ]
        );
        // A variable the caller set is in the environment already: not added twice.
        let caller: Mcp = Mcp::http("c", "http://a.invalid")
            .bearer_token_env("SET")
            .into();
        let d2 = go(&[caller], &ALL, false).unwrap();
        assert!(d2.env.is_empty(), "{:?}", d2.env);
        assert_eq!(d2.secrets, vec!["caller".to_owned()]);
        // No secret value is a fingerprint input.
        let joined = d.fingerprint.join("\n");
        assert!(
            !joined.contains("core") && !joined.contains("host\n"),
            "{joined}"
        );
    }

    #[test]
    fn refusals_are_typed() {
        let stdio_only = McpCaps {
            stdio: true,
            http: false,
            sse: false,
        };
        let http: Mcp = Mcp::http("gh", "https://x.invalid").into();
        assert!(matches!(
            go(std::slice::from_ref(&http), &stdio_only, false),
            Err(McpError::TransportUnsupported {
                transport: "http",
                ..
            })
        ));
        assert!(matches!(
            go(&[], &stdio_only, true),
            Err(McpError::TransportUnsupported { .. })
        ));
        assert!(matches!(
            go(&[http.clone(), http.clone()], &ALL, false),
            Err(McpError::Duplicate { .. })
        ));
        let named_host: Mcp = Mcp::stdio("host", "x").into();
        assert!(matches!(
            go(&[named_host], &ALL, true),
            Err(McpError::Duplicate { .. })
        ));
        let alias: Mcp = Mcp::stdio("s", "x")
            .env("T", "${ADAPTOR_TOOLS_TOKEN_ab12}")
            .into();
        assert!(matches!(
            go(&[alias], &ALL, true),
            Err(McpError::TokenAlias { .. })
        ));
        let alias: Mcp = Mcp::http("s", "http://a.invalid")
            .bearer_token_env("ADAPTOR_TOOLS_TOKEN_ab12")
            .into();
        assert!(matches!(
            go(&[alias], &ALL, true),
            Err(McpError::TokenAlias { .. })
        ));
        let missing: Mcp = Mcp::http("s", "http://a.invalid")
            .bearer_token_env("NOPE")
            .into();
        assert!(matches!(
            go(&[missing], &ALL, false),
            Err(McpError::TokenEnvMissing { .. })
        ));
        for bad in [
            Mcp::http("bad name", "http://a.invalid").into(),
            Mcp::http("a__b", "http://a.invalid").into(),
            Mcp::http("u", "ftp://a.invalid").into(),
            Mcp::http("h", "http://a.invalid")
                .header("X", "a\r\nb")
                .into(),
            Mcp::stdio("e", "x").env("1A", "v").into(),
            Mcp::stdio("c", " ").into(),
        ] {
            let bad: Mcp = bad;
            assert!(
                matches!(
                    go(std::slice::from_ref(&bad), &ALL, false),
                    Err(McpError::Invalid { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn debug_output_never_shows_values() {
        let options = crate::RunOptions::new().mcp([
            Mcp::from(Mcp::stdio("s", "x").env("API_KEY", "stdio-secret-1")),
            Mcp::from(Mcp::http("h", "http://a.invalid").header("X-Key", "header-secret-2")),
        ]);
        let shown = format!("{options:?}");
        assert!(
            shown.contains("API_KEY") && shown.contains("X-Key"),
            "{shown}"
        );
        assert!(
            !shown.contains("secret-1") && !shown.contains("secret-2"),
            "{shown}"
        );
    }

    #[test]
    fn config_files_parse_with_typed_errors() {
        let servers = Mcp::from_config_json(
            r#"{"mcpServers": {
                "files": {"command": "mcp-files", "args": ["-v"], "env": {"A": "1"}},
                "gh": {"type": "http", "url": "https://x.invalid", "headers": {"X": "y"}},
                "old": {"type": "sse", "url": "https://x.invalid/sse"}
            }}"#,
        )
        .unwrap();
        let kinds: Vec<_> = servers.iter().map(|s| (s.name(), s.transport())).collect();
        assert_eq!(
            kinds,
            vec![("files", "stdio"), ("gh", "http"), ("old", "sse")]
        );
        for (doc, needle) in [
            (r#"{"servers": {}}"#, "mcpServers"),
            (
                r#"{"mcpServers": {"a": {"command": "x", "headers": {}}}}"#,
                "`headers`",
            ),
            (
                r#"{"mcpServers": {"a": {"type": "stdio", "url": "http://x"}}}"#,
                "needs `command`",
            ),
            (
                r#"{"mcpServers": {"a": {"type": "ws", "url": "ws://x"}}}"#,
                "unknown type",
            ),
            (r#"{"mcpServers": {"a": {}}}"#, "exactly one"),
            (
                r#"{"mcpServers": {"a": {"command": "x", "args": [1]}}}"#,
                "`args`",
            ),
        ] {
            let err = Mcp::from_config_json(doc).unwrap_err().to_string();
            assert!(err.contains(needle), "{doc}: {err}");
        }
    }
}
