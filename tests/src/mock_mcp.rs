//! A small MCP server built on `rmcp` (the official Rust MCP SDK), so what a CLI or the
//! benchmark sees is a real MCP server: over stdio as the `mock-mcp-stdio` binary (a CLI starts
//! it as a caller-declared server), or over streamable HTTP on 127.0.0.1 ([`serve_http`], the
//! benchmark's baseline for a host-tool round trip).
//!
//! Tools:
//! * `stamp {"text": string}` → `STAMPED:<text>` (and, when the variable `MOCK_MCP_SECRET`
//!   is set, `:secret-len=<n>` so a test can tell the server's environment arrived without
//!   printing the value);
//! * `fail {}` → a tool error `mock failure`;
//! * `echo {}` → `{}` (the trivial call the benchmark measures).
//!
//! Every `stamp`/`fail`/`echo` call is appended as one JSON line to the file named by
//! `MOCK_MCP_LOG`, if set.

use std::io::Write;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

/// The mock server's handler (see the module docs).
#[derive(Clone)]
pub struct Stamper;

impl ServerHandler for Stamper {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let object = |v: serde_json::Value| std::sync::Arc::new(v.as_object().unwrap().clone());
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "stamp",
                "Stamp a text",
                object(
                    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
                ),
            ),
            Tool::new("fail", "Always fails", object(json!({"type": "object"}))),
            Tool::new("echo", "Returns {}", object(json!({"type": "object"}))),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Ok(path) = std::env::var("MOCK_MCP_LOG")
            && let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
        {
            let _ = writeln!(
                f,
                "{}",
                json!({"tool": request.name, "arguments": request.arguments})
            );
        }
        let result = match request.name.as_ref() {
            "stamp" => {
                let text = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("text"))
                    .and_then(|t| t.as_str())
                    .unwrap_or_default()
                    .to_owned();
                let secret = std::env::var("MOCK_MCP_SECRET")
                    .map(|s| format!(":secret-len={}", s.len()))
                    .unwrap_or_default();
                CallToolResult::success(vec![ContentBlock::text(format!("STAMPED:{text}{secret}"))])
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text("mock failure")]),
            "echo" => CallToolResult::success(vec![ContentBlock::text("{}")]),
            other => {
                CallToolResult::error(vec![ContentBlock::text(format!("unknown tool {other}"))])
            }
        };
        Ok(result.into())
    }
}

/// Serve [`Stamper`] over streamable HTTP on `127.0.0.1` (a port the OS picks) until the
/// runtime ends; returns its URL (`http://127.0.0.1:<port>/mcp`).
pub async fn serve_http() -> String {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let service: StreamableHttpService<Stamper, LocalSessionManager> = StreamableHttpService::new(
        || Ok(Stamper),
        Default::default(),
        StreamableHttpServerConfig::default().with_sse_keep_alive(None),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, axum::Router::new().nest_service("/mcp", service)).await;
    });
    format!("http://{addr}/mcp")
}
