//! The scripted MCP client: `[[mcp-call SERVER:TOOL:JSON]]` connects to `SERVER` of the
//! `--mcp-config` file (the common `{"mcpServers": {…}}` JSON, as Claude Code reads it),
//! calls `TOOL` and reports the result, the way a real CLI would. Built on `rmcp`, the
//! official Rust MCP SDK: streamable HTTP (headers sent as configured) and stdio (the server
//! process is started with the configured command, arguments and environment).
//!
//! `${NAME}` in header and environment values is replaced by the variable `NAME` of this
//! process's environment (unset → the call fails, naming it), as Claude Code does.

use std::collections::HashMap;
use std::path::Path;

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::{
    StreamableHttpClientTransport, TokioChildProcess,
    streamable_http_client::StreamableHttpClientTransportConfig,
};
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

use crate::directives::{McpBench, McpCall};

/// Make `call`; returns the result text and whether it is an error (a server that cannot be
/// reached, a protocol failure or a tool error are all reported as error results).
pub fn call(config: Option<&Path>, call: &McpCall) -> (String, bool) {
    match try_call(config, call) {
        Ok(result) => result,
        Err(message) => (format!("MCP call failed: {message}"), true),
    }
}

fn try_call(config: Option<&Path>, call: &McpCall) -> Result<(String, bool), String> {
    let doc = load_config(config)?;
    let server = server_of(&doc, &call.server)?.clone();
    block_on(async {
        tokio::time::timeout(std::time::Duration::from_secs(30), call_on(&server, call))
            .await
            .map_err(|_| "timed out after 30 s".to_owned())?
    })
}

/// The parsed `--mcp-config` file.
fn load_config(config: Option<&Path>) -> Result<Value, String> {
    let path = config.ok_or("no --mcp-config was given")?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("bad MCP config: {e}"))
}

/// The entry of server `name` in the config.
fn server_of<'a>(doc: &'a Value, name: &str) -> Result<&'a Value, String> {
    doc.get("mcpServers")
        .and_then(|s| s.get(name))
        .ok_or_else(|| format!("no MCP server `{name}` in the config"))
}

/// Run `fut` on a single-threaded runtime (the provider is otherwise synchronous).
fn block_on<T>(fut: impl std::future::Future<Output = Result<T, String>>) -> Result<T, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?
        .block_on(fut)
}

async fn call_on(server: &Value, call: &McpCall) -> Result<(String, bool), String> {
    let client = connect(server).await?;
    let mut params = CallToolRequestParams::new(call.tool.clone());
    params.arguments = call.arguments.as_object().cloned();
    let result = client.call_tool(params).await.map_err(|e| e.to_string());
    let _ = client.cancel().await;
    let result = result?;
    let text: Vec<String> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    Ok((text.join("\n"), result.is_error.unwrap_or(false)))
}

/// A connected MCP client session to `server` (one entry of `mcpServers`).
async fn connect(server: &Value) -> Result<RunningService<RoleClient, ()>, String> {
    let strings = |field: &str| -> Result<Vec<(String, String)>, String> {
        server
            .get(field)
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        let v = v.as_str().ok_or(format!("`{field}.{k}` is not a string"))?;
                        Ok((k.clone(), expand(v)?))
                    })
                    .collect()
            })
            .unwrap_or(Ok(Vec::new()))
    };
    let kind = server
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("stdio");
    match kind {
        "http" => {
            let url = server
                .get("url")
                .and_then(Value::as_str)
                .ok_or("an http server needs `url`")?;
            let mut headers = HashMap::new();
            let mut auth = None;
            for (k, v) in strings("headers")? {
                if k.eq_ignore_ascii_case("authorization") {
                    auth = Some(v.strip_prefix("Bearer ").unwrap_or(&v).to_owned());
                    continue;
                }
                let name = http::HeaderName::try_from(k.as_str()).map_err(|e| e.to_string())?;
                let value = http::HeaderValue::try_from(v.as_str()).map_err(|e| e.to_string())?;
                headers.insert(name, value);
            }
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned())
                .custom_headers(headers);
            if let Some(token) = auth {
                config = config.auth_header(token);
            }
            let transport = StreamableHttpClientTransport::from_config(config);
            ().serve(transport).await.map_err(|e| e.to_string())
        }
        "stdio" => {
            let command = server
                .get("command")
                .and_then(Value::as_str)
                .ok_or("a stdio server needs `command`")?;
            let mut cmd = tokio::process::Command::new(command);
            if let Some(args) = server.get("args").and_then(Value::as_array) {
                cmd.args(args.iter().filter_map(Value::as_str));
            }
            cmd.envs(strings("env")?);
            let transport =
                TokioChildProcess::new(cmd).map_err(|e| format!("cannot start {command}: {e}"))?;
            ().serve(transport).await.map_err(|e| e.to_string())
        }
        other => Err(format!("transport `{other}` is not supported")),
    }
}

/// `[[mcp-bench S1,S2,…:TOOL:N]]`: one session per server, then `N` rounds that call `TOOL`
/// (arguments `{}`) once on each server in turn. Returns a JSON report
/// `{"<server>": {"calls", "p50_us", "p99_us"}, …}` (round-trip latencies as the client sees
/// them), or an error text.
pub fn bench(config: Option<&Path>, bench: &McpBench) -> (String, bool) {
    let run = || -> Result<String, String> {
        let doc = load_config(config)?;
        block_on(async {
            let mut clients = Vec::new();
            for name in &bench.servers {
                let server = server_of(&doc, name)?;
                clients.push((name.clone(), connect(server).await?, Vec::new()));
            }
            for _ in 0..bench.rounds {
                for (_, client, times) in clients.iter_mut() {
                    let mut params = CallToolRequestParams::new(bench.tool.clone());
                    params.arguments = Some(serde_json::Map::new());
                    let t = std::time::Instant::now();
                    let result = client.call_tool(params).await.map_err(|e| e.to_string())?;
                    times.push(t.elapsed().as_micros() as u64);
                    if result.is_error == Some(true) {
                        return Err(format!("the tool failed: {:?}", result.content));
                    }
                }
            }
            let mut report = serde_json::Map::new();
            for (name, client, mut times) in clients {
                let _ = client.cancel().await;
                times.sort_unstable();
                let at = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
                report.insert(
                    name,
                    serde_json::json!({"calls": times.len(), "p50_us": at(0.5), "p99_us": at(0.99)}),
                );
            }
            Ok(Value::Object(report).to_string())
        })
    };
    match run() {
        Ok(report) => (report, false),
        Err(message) => (format!("MCP bench failed: {message}"), true),
    }
}

/// Replace every `${NAME}` with the variable's value.
fn expand(value: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = after.find('}').ok_or("unterminated ${ in a value")?;
        let name = &after[..end];
        let v = std::env::var(name).map_err(|_| format!("the variable {name} is not set"))?;
        out.push_str(&v);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_expand_from_the_environment() {
        // PATH is set in any test environment.
        let path = std::env::var("PATH").unwrap();
        assert_eq!(expand("a ${PATH} b").unwrap(), format!("a {path} b"));
        assert_eq!(expand("plain").unwrap(), "plain");
        assert!(expand("${REFERENCE_PROVIDER_SURELY_UNSET}").is_err());
        assert!(expand("${PATH").is_err());
    }

    #[test]
    fn without_a_config_the_call_is_an_error_result() {
        let call = McpCall {
            server: "s".into(),
            tool: "t".into(),
            arguments: serde_json::json!({}),
        };
        let (text, is_error) = super::call(None, &call);
        assert!(is_error);
        assert!(text.contains("--mcp-config"), "{text}");
    }
}
