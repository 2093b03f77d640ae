//! Managed workspaces through the host (issue 19): a git worktree per run (removed after
//! it, also after a failure) or per thread (kept: one thread, one checkout), created with the
//! real `git`; a dirty base refused when asked; the worktree part of the thread fingerprint.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use adaptor::store::{MemoryStore, ThreadStore};
use adaptor::{Error, RunOptions, ThreadError, Workspace, WorkspaceError};
use adaptor_integration_tests::{agent_builder, collect, reference, tmp};

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A repository with one commit (`README.md`).
fn repo(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("README.md"), "base\n").unwrap();
    git(dir, &["add", "README.md"]);
    git(dir, &["commit", "-q", "-m", "base"]);
}

fn branches(repo: &Path) -> String {
    git(repo, &["branch", "--list", "agent/*"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_gets_its_own_worktree_and_it_is_removed_after_success_or_failure() {
    let (state, ws, src, parent) = (tmp(), tmp(), tmp(), tmp());
    repo(src.path());
    let agent = agent_builder(reference(state.path()), ws.path())
        .workspace(Workspace::git_worktree(src.path()).parent_dir(parent.path()))
        .build();
    let r = agent.run("hello").await.expect("run in a worktree");
    let cwd = r.raw().launch.as_ref().unwrap().cwd.clone();
    assert!(
        cwd.starts_with(parent.path().canonicalize().unwrap()),
        "{cwd:?}"
    );
    assert!(
        cwd.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("agent-")
    );
    assert!(!cwd.exists(), "removed after the run");
    assert_eq!(branches(src.path()), "", "its unused branch too");

    let failed = agent.run("[[fail]] hello").await;
    assert!(failed.is_err());
    assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
    assert_eq!(branches(src.path()), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_keeps_one_worktree_across_turns_and_its_fingerprint_names_it() {
    let (state, ws, src, parent) = (tmp(), tmp(), tmp(), tmp());
    repo(src.path());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent_builder(reference(state.path()), ws.path())
        .shared_thread_store(store)
        .workspace(Workspace::git_worktree(src.path()).parent_dir(parent.path()))
        .build();
    let one = agent.thread("ticket-7").run("one").await.unwrap();
    let two = agent.thread("ticket-7").run("two").await.unwrap();
    let cwd = one.raw().launch.as_ref().unwrap().cwd.clone();
    assert!(cwd.ends_with("agent-ticket-7"), "{cwd:?}");
    assert!(cwd.join("README.md").is_file(), "checked out from the base");
    // The second turn may continue on the resident process: no new launch record then.
    if let Some(launch) = two.raw().launch.as_ref() {
        assert_eq!(launch.cwd, cwd);
    }
    assert_eq!(two.thread.unwrap().start, adaptor::ThreadStart::Resumed);
    assert!(branches(src.path()).contains("agent/ticket-7"));

    // The same thread in a plain directory is another checkout: refused.
    let (events, r) = collect(
        agent
            .thread("ticket-7")
            .stream_with("three", RunOptions::new().workspace(ws.path())),
    )
    .await;
    assert!(events.is_empty());
    assert!(
        matches!(r, Err(Error::Thread(ThreadError::Incompatible { .. }))),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dirty_base_is_refused_before_anything_starts_when_asked() {
    let (state, ws, src, parent) = (tmp(), tmp(), tmp(), tmp());
    repo(src.path());
    std::fs::write(src.path().join("README.md"), "edited\n").unwrap();
    let agent = agent_builder(reference(state.path()), ws.path())
        .workspace(
            Workspace::git_worktree(src.path())
                .parent_dir(parent.path())
                .require_clean_base(true),
        )
        .build();
    let (events, r) = collect(agent.stream("hello")).await;
    assert!(events.is_empty());
    assert!(
        matches!(&r, Err(Error::Workspace(WorkspaceError::DirtyBase { status, .. })) if status.contains("README.md")),
        "{r:?}"
    );
    assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
    assert_eq!(branches(src.path()), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_shows_the_worktree_and_leaves_nothing_behind() {
    let (state, ws, src, parent) = (tmp(), tmp(), tmp(), tmp());
    repo(src.path());
    let agent = agent_builder(reference(state.path()), ws.path())
        .workspace(Workspace::git_worktree(src.path()).parent_dir(parent.path()))
        .build();
    let plan = agent.dry_run("hello").await.expect("plan");
    assert!(
        plan.cwd.starts_with(parent.path().canonicalize().unwrap()),
        "{:?}",
        plan.cwd
    );
    assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
    assert_eq!(branches(src.path()), "");
}
