//! A conversation kept in a thread store: two turns of one thread, stored in SQLite (the
//! second resumes the first's session), then a fork that branches from it.
//!
//! `./x.sh build-drivers && PATH="$CARGO_TARGET_DIR/debug:$PATH" cargo run -p agent-adaptor --example threads`
//! (the reference provider must be on PATH, as a real CLI would be).

use adaptor::store::SqliteStore;
use adaptor::{Agent, Driver, Error};

#[tokio::main]
async fn main() -> Result<(), Error> {
    // Example state lives in a fresh temp dir; an application would use
    // `SqliteStore::open_default()` (the user's data directory) so threads survive restarts.
    let dir = std::env::temp_dir().join(format!(
        "agent-adaptor-example-threads-{}",
        std::process::id()
    ));
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(&workspace).map_err(|e| Error::InvalidWorkspace {
        path: workspace.display().to_string(),
        reason: e.to_string(),
    })?;
    let store = SqliteStore::open(dir.join("threads.sqlite3")).map_err(|source| {
        adaptor::ThreadError::Store {
            key: "ticket-42".into(),
            source,
            result: None,
        }
    })?;
    let driver = Driver::builtin("reference")?.with_config(serde_json::json!({
        "state_dir": dir.join("provider").display().to_string(),
    }))?;
    // The workspace is part of the thread's fingerprint: keep it fixed.
    let agent = Agent::builder(driver)
        .workspace(&workspace)
        .thread_store(store)
        .build();

    let thread = agent.thread("ticket-42");
    for prompt in ["first", "second"] {
        let r = thread.run(prompt).await?;
        let info = r.thread.expect("a thread run reports its thread");
        println!("{} ({:?}, record {})", r.text, info.start, info.record_id);
    }
    let fork = thread.fork("ticket-42/alt");
    let r = fork.run("an alternative").await?;
    println!("{} ({:?})", r.text, r.thread.map(|t| t.start));
    agent.close().await;
    std::fs::remove_dir_all(&dir).map_err(|e| Error::InvalidWorkspace {
        path: dir.display().to_string(),
        reason: format!("could not remove the example's directory: {e}"),
    })?;
    Ok(())
}
