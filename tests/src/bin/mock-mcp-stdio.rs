//! `mock-mcp-stdio`: a small MCP server on stdio, for end-to-end tests in which a CLI starts
//! a caller-declared stdio MCP server and calls it. Built on `rmcp` (the official Rust MCP
//! SDK), so what a CLI sees is a real MCP server.
//!
//! Tools:
//! * `stamp {"text": string}` → `STAMPED:<text>` (and, when the variable `MOCK_MCP_SECRET`
//!   is set, `:secret-len=<n>` so a test can tell the server's environment arrived without
//!   printing the value);
//! * `fail {}` → a tool error `mock failure`.
//!
//! Every call is appended as one JSON line to the file named by `MOCK_MCP_LOG`, if set.

use std::io::Write;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::json;

#[derive(Clone)]
struct Mock;

impl ServerHandler for Mock {
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
            other => {
                CallToolResult::error(vec![ContentBlock::text(format!("unknown tool {other}"))])
            }
        };
        Ok(result.into())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let transport = (tokio::io::stdin(), tokio::io::stdout());
    match Mock.serve(transport).await {
        Ok(service) => {
            let _ = service.waiting().await;
        }
        Err(e) => {
            eprintln!("mock-mcp-stdio: {e}");
            std::process::exit(1);
        }
    }
}
