//! The host tool server: one MCP server per [`Agent`](crate::Agent), speaking streamable HTTP
//! on `127.0.0.1` (a port the OS picks), that serves the agent's [`Tool`]s to its CLI.
//!
//! Every request must carry `Authorization: Bearer <token>`, a 256-bit token drawn per server;
//! anything else gets `401` before it reaches MCP. The CLI receives the token in an
//! environment variable whose name is drawn per server too (`ADAPTOR_TOOLS_TOKEN_<hex>`), so
//! no other declaration can name it by accident. rmcp also refuses a `Host` header that is
//! not loopback (DNS rebinding). The server stops when its [`ToolServer`] is dropped (the
//! agent closes or its last handle goes).
//!
//! The only module that names `rmcp` or `axum`. Must not: know any CLI or driver.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{Tool, ToolOutcome, ToolsError};

/// A running tool server. Dropping it stops the server.
pub(crate) struct ToolServer {
    url: String,
    token: String,
    token_env: String,
    stop: CancellationToken,
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl std::fmt::Debug for ToolServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolServer")
            .field("url", &self.url)
            .field("token_env", &self.token_env)
            .finish_non_exhaustive()
    }
}

impl ToolServer {
    /// Bind `127.0.0.1:0` and serve `tools` until dropped.
    pub(crate) async fn start(tools: Arc<[Tool]>) -> Result<ToolServer, ToolsError> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| ToolsError::Server {
                reason: e.to_string(),
            })?;
        let addr = listener.local_addr().map_err(|e| ToolsError::Server {
            reason: e.to_string(),
        })?;
        let stop = CancellationToken::new();
        let token = random_hex(32);
        let token_env = format!("ADAPTOR_TOOLS_TOKEN_{}", random_hex(8).to_ascii_uppercase());
        let config = StreamableHttpServerConfig::default()
            .with_cancellation_token(stop.child_token())
            .with_sse_keep_alive(None);
        let handler = HostTools { tools };
        let service: StreamableHttpService<HostTools, LocalSessionManager> =
            StreamableHttpService::new(move || Ok(handler.clone()), Default::default(), config);
        let expected = Arc::<str>::from(format!("Bearer {token}"));
        let router =
            axum::Router::new()
                .nest_service("/mcp", service)
                .layer(axum::middleware::from_fn(
                    move |req: Request, next: Next| {
                        let expected = expected.clone();
                        async move { authorize(&expected, req, next).await }
                    },
                ));
        let shutdown = stop.clone();
        tokio::spawn(async move {
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(async move { shutdown.cancelled_owned().await })
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "the host tool server stopped with an error");
            }
        });
        tracing::debug!(%addr, "host tool server listening");
        Ok(ToolServer {
            url: format!("http://{addr}/mcp"),
            token,
            token_env,
            stop,
        })
    }

    /// The server as a run delivers it, under the name `name`.
    pub(crate) fn delivery(&self, name: &str) -> crate::mcp::HostToolServer {
        crate::mcp::HostToolServer {
            name: name.to_owned(),
            url: self.url.clone(),
            token_env: self.token_env.clone(),
            token: self.token.clone(),
        }
    }

    /// The endpoint URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }
}

/// Refuse any request without the exact bearer token (compared in constant time).
async fn authorize(expected: &str, req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    if constant_time_eq(given, expected.as_bytes()) {
        next.run(req).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a valid bearer token is required",
        )
            .into_response()
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn random_hex(bytes: usize) -> String {
    use rand::Rng;
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    hex::encode(buf)
}

/// The MCP side: lists and calls the agent's tools.
#[derive(Clone)]
struct HostTools {
    tools: Arc<[Tool]>,
}

impl HostTools {
    fn listing(tool: &Tool) -> rmcp::model::Tool {
        let object = |v: &Value| v.as_object().cloned().map(Arc::new);
        let mut listed = rmcp::model::Tool::new(
            tool.name().to_owned(),
            tool.description().to_owned(),
            object(tool.input_schema_json()).unwrap_or_default(),
        );
        // MCP output schemas describe `structuredContent`, which is an object.
        if let Some(out) = tool
            .output_schema_json()
            .filter(|s| s.get("type").and_then(Value::as_str) == Some("object"))
            .and_then(object)
        {
            listed = listed.with_raw_output_schema(out);
        }
        listed.with_annotations(
            ToolAnnotations::new()
                .read_only(tool.is_read_only())
                .idempotent(tool.is_idempotent()),
        )
    }
}

impl ServerHandler for HostTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("agent-adaptor host tools", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.tools.iter().map(Self::listing).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(tool) = self.tools.iter().find(|t| t.name() == request.name) else {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "unknown_tool: there is no tool named `{}`",
                request.name
            ))])
            .into());
        };
        let args = Value::Object(request.arguments.unwrap_or_default());
        let outcome = tool.invoke(args).await;
        let result = match outcome {
            ToolOutcome::Ok(value) => {
                let text = match &value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
                if value.is_object() && tool.output_schema_json().is_some() {
                    result.structured_content = Some(value);
                }
                result
            }
            other => CallToolResult::error(vec![ContentBlock::text(
                other.error_text().unwrap_or_default(),
            )]),
        };
        Ok(result.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolError;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One HTTP/1.1 POST on a fresh connection; returns (status, body).
    async fn post(url: &str, auth: Option<&str>, body: &str) -> (u16, String) {
        let rest = url.strip_prefix("http://").unwrap();
        let (authority, path) = rest.split_once('/').unwrap();
        let mut stream = tokio::net::TcpStream::connect(authority).await.unwrap();
        let auth = auth
            .map(|a| format!("Authorization: {a}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "POST /{path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let status = response[9..12].parse().unwrap();
        (status, response)
    }

    #[test]
    fn the_listing_carries_schemas_and_annotations() {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        struct In {
            n: u32,
        }
        #[derive(serde::Serialize, schemars::JsonSchema)]
        struct Out {
            m: u32,
        }
        let tool = Tool::define("t", "d", |i: In| async move { Ok(Out { m: i.n }) })
            .read_only()
            .idempotent();
        let listed = serde_json::to_value(HostTools::listing(&tool)).unwrap();
        assert_eq!(listed["name"], "t");
        assert_eq!(listed["inputSchema"]["required"][0], "n");
        assert_eq!(listed["outputSchema"]["properties"]["m"]["type"], "integer");
        assert_eq!(listed["annotations"]["readOnlyHint"], true);
        assert_eq!(listed["annotations"]["idempotentHint"], true);
        // A non-object output has no MCP output schema (structuredContent is an object).
        let text = Tool::define("s", "d", |_: In| async move { Ok("x".to_owned()) });
        let listed = serde_json::to_value(HostTools::listing(&text)).unwrap();
        assert!(listed.get("outputSchema").is_none(), "{listed}");
    }

    const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

    #[tokio::test]
    async fn requests_without_the_token_are_refused() {
        let tool = Tool::define_json(
            "echo",
            "e",
            serde_json::json!({"type": "object"}),
            |v| async move { Ok::<_, ToolError>(v) },
        );
        let server = ToolServer::start(Arc::from(vec![tool])).await.unwrap();
        let host = server.delivery("host");
        assert!(host.url.starts_with("http://127.0.0.1:"), "{}", host.url);
        assert!(host.token_env.starts_with("ADAPTOR_TOOLS_TOKEN_"));
        assert_eq!(host.token.len(), 64);
        for auth in [None, Some("Bearer wrong"), Some(host.token.as_str())] {
            let (status, _) = post(server.url(), auth, INIT).await;
            assert_eq!(status, 401, "{auth:?}");
        }
        let good = format!("Bearer {}", host.token);
        let (status, body) = post(server.url(), Some(&good), INIT).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("agent-adaptor host tools"), "{body}");
        let url = server.url().to_owned();
        drop(server);
        // Stopped: the port no longer answers (give the task a moment to close).
        let mut refused = false;
        for _ in 0..50 {
            let rest = url.strip_prefix("http://").unwrap();
            let authority = rest.split_once('/').unwrap().0;
            if tokio::net::TcpStream::connect(authority).await.is_err() {
                refused = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(refused, "the server still listens after drop");
    }
}
