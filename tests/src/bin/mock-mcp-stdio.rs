//! `mock-mcp-stdio`: the mock MCP server of [`adaptor_integration_tests::mock_mcp`] on stdio,
//! for end-to-end tests in which a CLI starts a caller-declared stdio MCP server and calls it.

use adaptor_integration_tests::mock_mcp::Stamper;
use rmcp::ServiceExt;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let transport = (tokio::io::stdin(), tokio::io::stdout());
    match Stamper.serve(transport).await {
        Ok(service) => {
            let _ = service.waiting().await;
        }
        Err(e) => {
            eprintln!("mock-mcp-stdio: {e}");
            std::process::exit(1);
        }
    }
}
