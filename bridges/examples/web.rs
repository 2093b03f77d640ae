//! A web server for an agent: the SSE routes, AG-UI, and a page that streams a run with its
//! tool calls and approvals (AG-UI events read with `fetch`).
//!
//! ```text
//! cargo run -p adaptor-bridges --example web            # http://127.0.0.1:8787/
//! cargo run -p adaptor-bridges --example web -- 127.0.0.1:0
//! ```
//!
//! The first line on stdout is `listening on http://ADDR/`. It runs the built-in reference
//! driver (its provider, `reference-provider`, must be on PATH or beside this binary).

use adaptor::{Agent, ApprovalPolicy, DecisionMode, Driver, Fallback, Policy, RunOptions};
use adaptor_bridges::ag_ui::{self, AgUi};
use adaptor_bridges::sse::{self, HubOptions, OnThreads, RunHub};
use axum::response::Html;
use axum::routing::get;

const PAGE: &str = include_str!("web.html");

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8787".into());
    let mut builder = Agent::builder(Driver::builtin("reference")?);
    // Find `reference-provider` beside this binary too (target/debug/examples/..).
    if let Some(dir) = std::env::current_exe()?.parent().and_then(|d| d.parent()) {
        builder = builder.program_dir(dir);
    }
    // Each AG-UI `threadId` is a thread (`web:<threadId>`), kept in memory for this process.
    let agent = builder
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    // Ask the person at the page about every tool; a refusal lets the agent carry on.
    let options = RunOptions::new().policy(Policy {
        approvals: ApprovalPolicy {
            permission: DecisionMode::Ask,
            timeout: Some(std::time::Duration::from_secs(300)),
            on_reject: Fallback::Continue,
            ..ApprovalPolicy::default()
        },
        ..Policy::default()
    });
    let hub = RunHub::new(
        OnThreads::new(agent.clone(), "web:"),
        options,
        HubOptions::default(),
    );
    let app = sse::router(hub.clone())
        .merge(ag_ui::router(AgUi::new(hub.clone())))
        .route("/", get(|| async { Html(PAGE) }));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}/", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    hub.cancel_all();
    agent.close().await;
    Ok(())
}
