//! Reading the run request's MCP servers the way the contract defines them: header values
//! that are literal or refer to variables the host sets (`${NAME}`, see `mcp-remote` in
//! `wit/driver.wit`), and the common `{"mcpServers": {…}}` JSON config that Claude Code and
//! other CLIs read.
//!
//! No CLI's protocol lives here; a driver picks what its CLI accepts.

use serde_json::{Map, Value, json};

use crate::bindings::adaptor::driver::types::{McpServer, McpTransport};

/// What a header value of the request stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValue<'a> {
    /// A literal value (a credential, possibly: never log it, never put it on argv).
    Literal(&'a str),
    /// The whole value is `${NAME}`: the host sets `NAME` in the CLI's environment.
    Env(&'a str),
    /// `Bearer ${NAME}`: a bearer token in the variable `NAME`, set by the host.
    BearerEnv(&'a str),
    /// `${…}` references mixed with other text (the host never sends this shape).
    Mixed(&'a str),
}

/// Classify a header value.
pub fn header_value(value: &str) -> HeaderValue<'_> {
    let whole = |v: &'_ str| -> Option<String> {
        let name = v.strip_prefix("${")?.strip_suffix('}')?;
        (!name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            .then(|| name.to_owned())
    };
    if whole(value).is_some() {
        return HeaderValue::Env(&value[2..value.len() - 1]);
    }
    if let Some(rest) = value.strip_prefix("Bearer ")
        && whole(rest).is_some()
    {
        return HeaderValue::BearerEnv(&rest[2..rest.len() - 1]);
    }
    if value.contains("${") {
        HeaderValue::Mixed(value)
    } else {
        HeaderValue::Literal(value)
    }
}

/// The transport's name (`stdio`, `http`, `sse`).
pub fn transport_name(server: &McpServer) -> &'static str {
    match server.transport {
        McpTransport::Stdio(_) => "stdio",
        McpTransport::Http(_) => "http",
        McpTransport::Sse(_) => "sse",
    }
}

/// The servers as the common MCP config document, `{"mcpServers": {"<name>": {…}}}`:
/// stdio servers as `{"type":"stdio","command","args","env"}`, remote ones as
/// `{"type":"http"|"sse","url","headers"}`. Header references stay `${NAME}`, for CLIs that
/// expand them from their environment (Claude Code does, in `--mcp-config` files). Write it
/// to a private file: values may be credentials.
pub fn config_json(servers: &[McpServer]) -> Value {
    let mut map = Map::new();
    for server in servers {
        let entry = match &server.transport {
            McpTransport::Stdio(s) => json!({
                "type": "stdio",
                "command": s.command,
                "args": s.args,
                "env": string_map(&s.env),
            }),
            McpTransport::Http(r) | McpTransport::Sse(r) => json!({
                "type": transport_name(server),
                "url": r.url,
                "headers": string_map(&r.headers),
            }),
        };
        map.insert(server.name.clone(), entry);
    }
    json!({ "mcpServers": map })
}

fn string_map(pairs: &[(String, String)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// The request's MCP servers as the private file `mcp-config.json` (written 0600 into the
/// run's private directory by the host) in the common [`config_json`] shape, and its path for
/// the CLI's flag (`--mcp-config <path>`): headers and server environments may be secrets, so
/// they never go on argv.
pub fn config_file(servers: &[McpServer], private_dir: &str) -> (crate::PrivateFile, String) {
    (
        crate::PrivateFile {
            name: "mcp-config.json".into(),
            contents: config_json(servers).to_string().into_bytes(),
        },
        format!("{private_dir}/mcp-config.json"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_classified() {
        assert_eq!(header_value("abc"), HeaderValue::Literal("abc"));
        assert_eq!(header_value("${TOK}"), HeaderValue::Env("TOK"));
        assert_eq!(header_value("Bearer ${A_1}"), HeaderValue::BearerEnv("A_1"));
        assert_eq!(header_value("x ${A}"), HeaderValue::Mixed("x ${A}"));
        assert_eq!(header_value("${A B}"), HeaderValue::Mixed("${A B}"));
        assert_eq!(
            header_value("Bearer abc"),
            HeaderValue::Literal("Bearer abc")
        );
    }
}
