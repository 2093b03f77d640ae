//! Workspaces: a git worktree per run (created from `HEAD` on `agent/<run id>` and removed
//! afterwards) and per thread (one checkout for all of the thread's turns, kept).
//!
//! `./x.sh build-drivers && PATH="$CARGO_TARGET_DIR/debug:$PATH" cargo run -p agent-adaptor --example worktree`
//! (needs `git` on PATH).

use std::path::Path;
use std::process::Command;

use adaptor::store::MemoryStore;
use adaptor::{Agent, Driver, Error, Release, Workspace};

fn git(repo: &Path, args: &[&str]) -> std::io::Result<()> {
    let status = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_AUTHOR_NAME", "example")
        .env("GIT_AUTHOR_EMAIL", "example@example.invalid")
        .env("GIT_COMMITTER_NAME", "example")
        .env("GIT_COMMITTER_EMAIL", "example@example.invalid")
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("git {args:?} failed")))
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let dir = std::env::temp_dir().join(format!(
        "agent-adaptor-example-worktree-{}",
        std::process::id()
    ));
    let repo = dir.join("repo");
    let io = |e: std::io::Error| Error::InvalidWorkspace {
        path: repo.display().to_string(),
        reason: e.to_string(),
    };
    std::fs::create_dir_all(&repo).map_err(io)?;
    git(&repo, &["init", "-q", "-b", "main"]).map_err(io)?;
    std::fs::write(repo.join("README.md"), "hello\n").map_err(io)?;
    git(&repo, &["add", "README.md"]).map_err(io)?;
    git(&repo, &["commit", "-q", "-m", "first"]).map_err(io)?;

    let driver = Driver::builtin("reference")?.with_config(serde_json::json!({
        "state_dir": dir.join("provider").display().to_string(),
    }))?;
    let agent = Agent::builder(driver)
        .workspace(
            Workspace::git_worktree(&repo)
                .parent_dir(dir.join("worktrees"))
                .require_clean_base(true)
                .on_release(Release::Remove),
        )
        .thread_store(MemoryStore::new())
        .build();

    // One run: its own worktree, gone afterwards.
    let one = agent.run("hello").await?;
    let cwd = one
        .raw()
        .launch
        .as_ref()
        .map(|l| l.cwd.clone())
        .unwrap_or_default();
    println!(
        "run worked in {} (exists now: {})",
        cwd.display(),
        cwd.exists()
    );

    // A thread: one worktree for all its turns, kept for the next one.
    let mut dirs = Vec::new();
    for prompt in ["first turn", "second turn"] {
        let r = agent.thread("ticket-42").run(prompt).await?;
        if let Some(launch) = r.raw().launch.as_ref() {
            dirs.push(launch.cwd.clone());
        }
        println!("thread turn: {}", r.text);
    }
    let kept = dirs.first().cloned().unwrap_or_default();
    println!(
        "thread worktree: {} (exists now: {})",
        kept.display(),
        kept.exists()
    );
    agent.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    if cwd.as_os_str().is_empty() || cwd.exists() || !dirs.iter().all(|d| *d == kept) {
        eprintln!("unexpected worktree behaviour");
        std::process::exit(1);
    }
    Ok(())
}
