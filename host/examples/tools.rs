//! Let the agent call your functions: a typed host tool, served to the CLI by the agent's own
//! MCP server on 127.0.0.1 (the CLI gets the server's URL and its bearer token; you never see
//! MCP). A rejection reaches the model as a tool error, and so does a handler that fails.
//!
//! `./x.sh build-drivers && PATH="$CARGO_TARGET_DIR/debug:$PATH" cargo run -p agent-adaptor --example tools`
//! (the reference provider calls MCP tools when its prompt carries
//! `[[mcp-call SERVER:TOOL:JSON]]`; with Claude Code or Codex, the model decides).

use adaptor::{Agent, Driver, Event, Phase, Tool, ToolError};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the model passes.
#[derive(Deserialize, JsonSchema)]
struct LookupInput {
    /// The issue number.
    number: u64,
}

/// What the model gets back.
#[derive(Serialize, JsonSchema)]
struct Issue {
    number: u64,
    title: String,
    open: bool,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let lookup = Tool::define(
        "lookup_issue",
        "Look up an issue of the tracker by number",
        |input: LookupInput| async move {
            match input.number {
                0 => Err(ToolError::reject("not_found", "there is no issue 0")),
                n => Ok(Issue {
                    number: n,
                    title: format!("Crash on start-up #{n}"),
                    open: true,
                }),
            }
        },
    )
    .read_only()
    .revision("lookup_issue/v1");
    let agent = Agent::builder(Driver::builtin("reference")?)
        .tools([lookup])
        .build();
    let mut stream = agent.stream(
        r#"Check the issues [[mcp-call host:lookup_issue:{"number":42}]] [[mcp-call host:lookup_issue:{"number":0}]]"#,
    );
    let mut results = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Event::ToolCall(call)
                if call.phase == Phase::End && call.name.starts_with("mcp__host__") =>
            {
                println!("the agent calls {} {:?}", call.name, call.args)
            }
            Event::ToolResult(r) if r.id.starts_with("mcp-") => {
                println!(
                    "  → {}{}",
                    if r.is_error { "error: " } else { "" },
                    r.output
                );
                results.push(r);
            }
            _ => {}
        }
    }
    let result = stream.result().await?;
    println!("{}", result.text);
    agent.close().await;
    // The example is run by the test suite: it fails loudly if the round trip did not happen.
    let ok = results.len() == 2
        && !results[0].is_error
        && results[0].output.contains("Crash on start-up #42")
        && results[1].is_error
        && results[1].output == "not_found: there is no issue 0";
    if !ok {
        return Err(format!("unexpected tool results: {results:?}").into());
    }
    Ok(())
}
