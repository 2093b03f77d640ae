//! Where a run works: the [`Workspace`] vocabulary and the [`WorkspaceManager`] that turns it
//! into a directory for one run — a plain directory, or a git worktree per run or per thread.
//!
//! Owns: resolving a workspace request to a canonical directory and its fingerprint,
//! creating, reusing and releasing git worktrees (every `git` call goes through
//! `process::run_host_tool`). Must not: spawn anything itself, decide when a run resolves
//! or releases its workspace (the pipeline does), or touch a worktree's contents beyond what
//! `git worktree` does.

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::BoxFuture;
use sha2::{Digest, Sha256};

pub use crate::error::WorkspaceError;
use crate::process::run_host_tool;

/// How long one `git` call may take before its process group is killed.
const GIT_TIMEOUT: Duration = Duration::from_secs(60);

/// How many `git status --porcelain` lines a [`WorkspaceError::DirtyBase`] lists.
const DIRTY_LINES: usize = 20;

/// Variables that would point `git -C <repo>` at another repository, removed from every git
/// call's environment (a host started from a git hook inherits them).
const GIT_LOCATION_VARIABLES: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_PREFIX",
];

/// Where a run works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workspace {
    /// An existing directory, used as it is (and left as it is).
    Dir(PathBuf),
    /// A git worktree of a repository, created per run or per thread (see [`GitWorktree`]).
    GitWorktree(GitWorktree),
}

/// A directory is a [`Workspace::Dir`].
macro_rules! dir_workspace {
    ($($ty:ty),*) => {$(
        impl From<$ty> for Workspace {
            fn from(path: $ty) -> Self {
                Workspace::Dir(PathBuf::from(path))
            }
        }
    )*};
}
dir_workspace!(PathBuf, &PathBuf, &Path, String, &String, &str);

impl Workspace {
    /// The directory of a [`Workspace::Dir`].
    pub fn as_dir(&self) -> Option<&Path> {
        match self {
            Workspace::Dir(dir) => Some(dir),
            Workspace::GitWorktree(_) => None,
        }
    }

    /// The directory itself, or a worktree's repository (where Inspect's probes run).
    pub(crate) fn base_dir(&self) -> &Path {
        match self {
            Workspace::Dir(dir) => dir,
            Workspace::GitWorktree(g) => &g.repo,
        }
    }

    /// An existing directory, used as it is.
    pub fn dir(path: impl Into<PathBuf>) -> Self {
        Workspace::Dir(path.into())
    }

    /// A git worktree of the repository at `repo` per run (or per thread), with the defaults
    /// of [`GitWorktree`]; adjust it with its builder methods and turn it into a
    /// `Workspace` with `.into()`.
    pub fn git_worktree(repo: impl Into<PathBuf>) -> GitWorktree {
        GitWorktree {
            repo: repo.into(),
            base_ref: "HEAD".to_owned(),
            branch_template: "agent/{key}".to_owned(),
            parent_dir: None,
            require_clean_base: false,
            on_release: Release::Remove,
            git_env: Vec::new(),
        }
    }
}

/// A git worktree per run (or per thread), created from `base_ref` on a new branch.
///
/// The branch is named by a template (default `agent/{key}`) with the variables `{key}` (the
/// thread key when the run is on a thread, else the run id), `{run_id}` and `{thread}` (the
/// thread key; a run without a thread cannot expand it). The worktree lives in
/// `<parent_dir>/<branch with '/' replaced by '-'>`; `parent_dir` defaults to
/// `<repo's parent>/<repo name>.worktrees`.
///
/// A worktree that already exists for the branch is reused, so the runs of one thread (with
/// the default template) share one checkout. Release ([`Release`], default
/// [`Release::Remove`]) removes the worktree and deletes the branch only when it has no
/// commits beyond the base.
///
/// Defaults: `base_ref` `HEAD`, `branch_template` `agent/{key}`, `require_clean_base` false,
/// `on_release` [`Release::Remove`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitWorktree {
    repo: PathBuf,
    base_ref: String,
    branch_template: String,
    parent_dir: Option<PathBuf>,
    require_clean_base: bool,
    on_release: Release,
    /// Extra environment for every git call (tests isolate git from the user's config).
    git_env: Vec<(&'static str, OsString)>,
}

impl GitWorktree {
    /// The commit new branches start from (any commit-ish `git rev-parse` accepts; default
    /// `HEAD`). It is resolved to a commit once per resolve.
    pub fn base_ref(mut self, base_ref: impl Into<String>) -> Self {
        self.base_ref = base_ref.into();
        self
    }

    /// The branch name template (default `agent/{key}`; variables `{key}`, `{run_id}`,
    /// `{thread}`). The expansion must be a valid branch name (`git check-ref-format
    /// --branch`).
    pub fn branch_template(mut self, template: impl Into<String>) -> Self {
        self.branch_template = template.into();
        self
    }

    /// The directory the worktrees are created in (created when missing; a relative path is
    /// taken relative to the repository). Default: `<repo's parent>/<repo name>.worktrees`.
    pub fn parent_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.parent_dir = Some(dir.into());
        self
    }

    /// Refuse to create a worktree while the repository's own checkout has uncommitted
    /// changes or untracked files (`git status --porcelain` not empty), so a run never starts
    /// from a base that differs from what the user sees. Reusing an existing worktree is not
    /// checked. Default false.
    pub fn require_clean_base(mut self, require: bool) -> Self {
        self.require_clean_base = require;
        self
    }

    /// What release does with the worktree (default [`Release::Remove`]).
    pub fn on_release(mut self, release: Release) -> Self {
        self.on_release = release;
        self
    }

    /// The repository.
    pub fn repo(&self) -> &Path {
        &self.repo
    }
}

impl From<GitWorktree> for Workspace {
    fn from(worktree: GitWorktree) -> Self {
        Workspace::GitWorktree(worktree)
    }
}

/// What [`WorkspaceManager::release`] does with a git worktree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Release {
    /// Keep the worktree and its branch as they are.
    Keep,
    /// Remove the worktree (`git worktree remove --force`: uncommitted changes in it are
    /// discarded) and delete its branch when the branch has no commits beyond the base; a
    /// branch with commits is kept, so committed work is never destroyed. Also after a failed
    /// run.
    #[default]
    Remove,
}

/// What the pipeline asks a [`WorkspaceManager`] for: the workspace of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceRequest<'a> {
    /// The run's id.
    pub run_id: &'a str,
    /// The thread's key when the run is on a thread.
    pub thread_key: Option<&'a str>,
}

impl<'a> WorkspaceRequest<'a> {
    /// A run that is not on a thread.
    pub fn run(run_id: &'a str) -> Self {
        WorkspaceRequest {
            run_id,
            thread_key: None,
        }
    }

    /// A run on the thread `thread_key`.
    pub fn on_thread(run_id: &'a str, thread_key: &'a str) -> Self {
        WorkspaceRequest {
            run_id,
            thread_key: Some(thread_key),
        }
    }

    /// The thread key when the run is on a thread, else the run id (the template's `{key}`).
    pub fn key(&self) -> &'a str {
        self.thread_key.unwrap_or(self.run_id)
    }
}

/// A resolved workspace: the canonical directory the run uses, and its fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedWorkspace {
    dir: PathBuf,
    fingerprint: String,
    branch: Option<String>,
    created: bool,
    worktree: Option<WorktreeState>,
}

/// What release needs to know about a worktree it did not keep in the manager.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WorktreeState {
    /// The canonical repository path the git calls run in.
    repo: PathBuf,
    /// The commit `base_ref` named at resolve.
    base_commit: String,
}

impl ResolvedWorkspace {
    /// A resolved workspace, for [`WorkspaceManager`]s outside this crate: `dir` should be
    /// canonical, and `fingerprint` should change whenever a different checkout is meant
    /// (this crate's managers use `sha256:<hex>`).
    pub fn new(dir: impl Into<PathBuf>, fingerprint: impl Into<String>, created: bool) -> Self {
        ResolvedWorkspace {
            dir: dir.into(),
            fingerprint: fingerprint.into(),
            branch: None,
            created,
            worktree: None,
        }
    }

    /// The same, on `branch`.
    pub fn with_branch(mut self, branch: impl Into<String>) -> Self {
        self.branch = Some(branch.into());
        self
    }

    /// The canonical directory the run works in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Identifies the checkout: `sha256:<hex>` of the canonical directory for
    /// [`Workspace::Dir`], of the repository's common git directory, the branch and the
    /// worktree directory for [`Workspace::GitWorktree`]. Runs of one thread in one reused
    /// worktree see the same fingerprint.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The worktree's branch (`None` for a plain directory).
    pub fn branch(&self) -> Option<&str> {
        self.branch.as_deref()
    }

    /// This resolve created the worktree (false for a plain directory and a reused worktree).
    pub fn created(&self) -> bool {
        self.created
    }

    /// The commit the base ref named at resolve (`None` for a plain directory); release
    /// deletes the branch only when it has no commits beyond it.
    pub fn base_commit(&self) -> Option<&str> {
        self.worktree.as_ref().map(|w| w.base_commit.as_str())
    }
}

/// Resolves a run's workspace before the run and releases it after.
pub trait WorkspaceManager: Send + Sync + std::fmt::Debug {
    /// The workspace of the run `request` describes: created or reused, canonical.
    fn resolve<'a>(
        &'a self,
        request: &'a WorkspaceRequest<'a>,
    ) -> BoxFuture<'a, Result<ResolvedWorkspace, WorkspaceError>>;

    /// Done with `workspace` (which this manager resolved); `run_failed` says how the run
    /// ended. Cleanup errors are returned, never swallowed.
    fn release<'a>(
        &'a self,
        workspace: &'a ResolvedWorkspace,
        run_failed: bool,
    ) -> BoxFuture<'a, Result<(), WorkspaceError>>;
}

impl WorkspaceManager for Workspace {
    /// [`Workspace::Dir`]: the canonical directory (it must exist and be a directory),
    /// fingerprinted by its path. [`Workspace::GitWorktree`]: see [`GitWorktree`].
    fn resolve<'a>(
        &'a self,
        request: &'a WorkspaceRequest<'a>,
    ) -> BoxFuture<'a, Result<ResolvedWorkspace, WorkspaceError>> {
        match self {
            Workspace::Dir(path) => Box::pin(resolve_dir(path)),
            Workspace::GitWorktree(worktree) => worktree.resolve(request),
        }
    }

    /// [`Workspace::Dir`]: nothing to do. [`Workspace::GitWorktree`]: see [`GitWorktree`].
    fn release<'a>(
        &'a self,
        workspace: &'a ResolvedWorkspace,
        run_failed: bool,
    ) -> BoxFuture<'a, Result<(), WorkspaceError>> {
        match self {
            Workspace::Dir(_) => Box::pin(async { Ok(()) }),
            Workspace::GitWorktree(worktree) => worktree.release(workspace, run_failed),
        }
    }
}

impl WorkspaceManager for GitWorktree {
    fn resolve<'a>(
        &'a self,
        request: &'a WorkspaceRequest<'a>,
    ) -> BoxFuture<'a, Result<ResolvedWorkspace, WorkspaceError>> {
        Box::pin(self.resolve_worktree(request))
    }

    fn release<'a>(
        &'a self,
        workspace: &'a ResolvedWorkspace,
        run_failed: bool,
    ) -> BoxFuture<'a, Result<(), WorkspaceError>> {
        Box::pin(self.release_worktree(workspace, run_failed))
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> WorkspaceError + '_ {
    move |source| WorkspaceError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `sha256:<hex>` over `parts`, separated by NUL bytes (which paths and ref names never hold).
fn fingerprint(parts: &[&[u8]]) -> String {
    let mut hash = Sha256::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            hash.update([0u8]);
        }
        hash.update(part);
    }
    format!("sha256:{}", hex::encode(hash.finalize()))
}

async fn resolve_dir(path: &Path) -> Result<ResolvedWorkspace, WorkspaceError> {
    let not_a_directory = || WorkspaceError::NotADirectory {
        path: path.to_path_buf(),
    };
    let canonical = match tokio::fs::canonicalize(path).await {
        Ok(canonical) => canonical,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Err(not_a_directory());
        }
        Err(e) => return Err(io_error(path)(e)),
    };
    let meta = tokio::fs::metadata(&canonical)
        .await
        .map_err(io_error(&canonical))?;
    if !meta.is_dir() {
        return Err(not_a_directory());
    }
    let fingerprint = fingerprint(&[canonical.as_os_str().as_encoded_bytes()]);
    Ok(ResolvedWorkspace::new(canonical, fingerprint, false))
}

/// Expand `template` for `request` (see [`GitWorktree`]).
fn expand_template(
    template: &str,
    request: &WorkspaceRequest<'_>,
) -> Result<String, WorkspaceError> {
    let bad = |reason: String| WorkspaceError::BadTemplate {
        template: template.to_owned(),
        reason,
    };
    let mut out = String::new();
    let mut rest = template;
    while let Some(at) = rest.find(['{', '}']) {
        let (literal, tail) = rest.split_at(at);
        out.push_str(literal);
        if tail.starts_with('}') {
            return Err(bad("unmatched `}`".into()));
        }
        let Some(end) = tail.find('}') else {
            return Err(bad("unclosed `{`".into()));
        };
        match &tail[1..end] {
            "key" => out.push_str(request.key()),
            "run_id" => out.push_str(request.run_id),
            "thread" => match request.thread_key {
                Some(thread) => out.push_str(thread),
                None => {
                    return Err(bad(
                        "`{thread}` is the thread key, and this run is not on a thread (`{key}` falls back to the run id)".into(),
                    ));
                }
            },
            other => {
                return Err(bad(format!(
                    "unknown variable `{{{other}}}` (known: `{{key}}`, `{{run_id}}`, `{{thread}}`)"
                )));
            }
        }
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err(bad("expands to an empty branch name".into()));
    }
    if out.starts_with('-') {
        return Err(bad(format!("`{out}` starts with `-`")));
    }
    Ok(out)
}

/// One `git worktree list --porcelain` entry.
#[derive(Debug)]
struct Listed {
    path: PathBuf,
    /// `refs/heads/<name>`, or `None` when detached or bare.
    branch: Option<String>,
}

/// What a git call printed.
struct GitOutput {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs `git -C <repo> …` with prompts off and the repository-locating variables removed.
struct Git<'a> {
    repo: &'a Path,
    env: &'a [(&'static str, OsString)],
}

impl Git<'_> {
    fn command_line(&self, args: &[&OsStr]) -> String {
        let mut line = format!("git -C {}", self.repo.display());
        for arg in args {
            line.push(' ');
            line.push_str(&arg.to_string_lossy());
        }
        line
    }

    /// Run git; a non-zero exit is returned, not an error.
    async fn run(&self, args: &[&OsStr]) -> Result<GitOutput, WorkspaceError> {
        // Hooks and fsmonitor never run in the host's git calls: a worktree is writable by
        // the provider, and command-line config wins over any file it could plant.
        let mut full: Vec<&OsStr> = vec![
            OsStr::new("-c"),
            OsStr::new("core.hooksPath=/dev/null"),
            OsStr::new("-c"),
            OsStr::new("core.fsmonitor=false"),
            OsStr::new("-C"),
            self.repo.as_os_str(),
        ];
        full.extend_from_slice(args);
        let mut env: Vec<(&str, Option<&OsStr>)> =
            vec![("GIT_TERMINAL_PROMPT", Some(OsStr::new("0")))];
        env.extend(GIT_LOCATION_VARIABLES.iter().map(|name| (*name, None)));
        env.extend(self.env.iter().map(|(k, v)| (*k, Some(v.as_os_str()))));
        let failed = |message: String| WorkspaceError::Git {
            command: self.command_line(args),
            message,
        };
        let out = run_host_tool("git", &full, &env, self.repo, GIT_TIMEOUT)
            .await
            .map_err(|e| failed(format!("could not run git: {e}")))?;
        if out.stdout_truncated {
            return Err(failed("its output exceeded 1 MiB".into()));
        }
        Ok(GitOutput {
            success: out.success(),
            stdout: out.stdout_text(),
            stderr: out.stderr_text().trim().to_owned(),
        })
    }

    /// Run git; a non-zero exit is [`WorkspaceError::Git`]. Returns stdout.
    async fn ok(&self, args: &[&OsStr]) -> Result<String, WorkspaceError> {
        let out = self.run(args).await?;
        if out.success {
            Ok(out.stdout)
        } else {
            Err(WorkspaceError::Git {
                command: self.command_line(args),
                message: out.stderr,
            })
        }
    }

    async fn branch_exists(&self, branch: &str) -> Result<bool, WorkspaceError> {
        let reference = format!("refs/heads/{branch}");
        let out = self
            .run(&[
                OsStr::new("rev-parse"),
                OsStr::new("--verify"),
                OsStr::new("--quiet"),
                OsStr::new(&reference),
            ])
            .await?;
        Ok(out.success)
    }

    async fn worktrees(&self) -> Result<Vec<Listed>, WorkspaceError> {
        let out = self
            .ok(&[
                OsStr::new("worktree"),
                OsStr::new("list"),
                OsStr::new("--porcelain"),
            ])
            .await?;
        let mut listed = Vec::new();
        for line in out.lines() {
            if let Some(path) = line.strip_prefix("worktree ") {
                listed.push(Listed {
                    path: PathBuf::from(path),
                    branch: None,
                });
            } else if let Some(branch) = line.strip_prefix("branch ")
                && let Some(last) = listed.last_mut()
            {
                last.branch = Some(branch.to_owned());
            }
        }
        Ok(listed)
    }
}

/// `path` canonicalized; when it does not exist, its canonical parent joined with its name.
async fn canonical_lenient(path: &Path) -> PathBuf {
    if let Ok(canonical) = tokio::fs::canonicalize(path).await {
        return canonical;
    }
    if let (Some(parent), Some(name)) = (path.parent(), path.file_name())
        && let Ok(parent) = tokio::fs::canonicalize(parent).await
    {
        return parent.join(name);
    }
    path.to_path_buf()
}

impl GitWorktree {
    /// The canonical repository path, or [`WorkspaceError::NotARepository`].
    async fn canonical_repo(&self) -> Result<PathBuf, WorkspaceError> {
        let canonical = tokio::fs::canonicalize(&self.repo).await.map_err(|e| {
            WorkspaceError::NotARepository {
                path: self.repo.clone(),
                message: e.to_string(),
            }
        })?;
        if !canonical.is_dir() {
            return Err(WorkspaceError::NotARepository {
                path: self.repo.clone(),
                message: "not a directory".into(),
            });
        }
        Ok(canonical)
    }

    fn git<'a>(&'a self, repo: &'a Path) -> Git<'a> {
        Git {
            repo,
            env: &self.git_env,
        }
    }

    /// Where the worktrees live, for the canonical `repo`.
    fn worktrees_dir(&self, repo: &Path) -> Result<PathBuf, WorkspaceError> {
        match &self.parent_dir {
            Some(dir) => Ok(repo.join(dir)),
            None => match (repo.parent(), repo.file_name()) {
                (Some(parent), Some(name)) => {
                    let mut name = name.to_os_string();
                    name.push(".worktrees");
                    Ok(parent.join(name))
                }
                _ => Err(WorkspaceError::Io {
                    path: repo.to_path_buf(),
                    source: io::Error::other(
                        "the repository has no parent directory to put worktrees in; set parent_dir",
                    ),
                }),
            },
        }
    }

    async fn resolve_worktree(
        &self,
        request: &WorkspaceRequest<'_>,
    ) -> Result<ResolvedWorkspace, WorkspaceError> {
        let branch = expand_template(&self.branch_template, request)?;
        let repo = self.canonical_repo().await?;
        let git = self.git(&repo);

        // A repository?
        let out = git
            .run(&[OsStr::new("rev-parse"), OsStr::new("--git-common-dir")])
            .await?;
        if !out.success {
            return Err(WorkspaceError::NotARepository {
                path: self.repo.clone(),
                message: out.stderr,
            });
        }
        let common_dir = repo.join(out.stdout.trim());
        let common_dir = tokio::fs::canonicalize(&common_dir)
            .await
            .map_err(io_error(&common_dir))?;

        // A valid branch name?
        let out = git
            .run(&[
                OsStr::new("check-ref-format"),
                OsStr::new("--branch"),
                OsStr::new(&branch),
            ])
            .await?;
        if !out.success || out.stdout.trim() != branch {
            let verdict = if out.success {
                format!("git reads `{branch}` as `{}`", out.stdout.trim())
            } else {
                out.stderr
            };
            return Err(WorkspaceError::BadTemplate {
                template: self.branch_template.clone(),
                reason: format!("`{branch}` is not a valid branch name: {verdict}"),
            });
        }

        // The base commit.
        let bad_ref = |message: String| WorkspaceError::BadRef {
            reference: self.base_ref.clone(),
            message,
        };
        if self.base_ref.is_empty() || self.base_ref.starts_with('-') {
            return Err(bad_ref("not a ref".into()));
        }
        let commitish = format!("{}^{{commit}}", self.base_ref);
        let out = git
            .run(&[
                OsStr::new("rev-parse"),
                OsStr::new("--verify"),
                OsStr::new(&commitish),
            ])
            .await?;
        if !out.success {
            return Err(bad_ref(out.stderr));
        }
        let base_commit = out.stdout.trim().to_owned();

        let dir = self.worktrees_dir(&repo)?.join(branch.replace('/', "-"));
        let worktrees = git.worktrees().await?;
        let branch_ref = format!("refs/heads/{branch}");
        let created = match tokio::fs::symlink_metadata(&dir).await {
            Ok(_) => {
                let canonical = tokio::fs::canonicalize(&dir)
                    .await
                    .map_err(io_error(&dir))?;
                let mut registered = None;
                for listed in &worktrees {
                    if canonical_lenient(&listed.path).await == canonical {
                        registered = Some(listed);
                        break;
                    }
                }
                match registered {
                    Some(listed) if listed.branch.as_deref() == Some(branch_ref.as_str()) => false,
                    Some(listed) => {
                        return Err(WorkspaceError::Occupied {
                            path: dir,
                            reason: match &listed.branch {
                                Some(other) => format!(
                                    "a worktree of {} on `{}`, not `{branch}`",
                                    repo.display(),
                                    other.trim_start_matches("refs/heads/")
                                ),
                                None => format!(
                                    "a worktree of {} with a detached HEAD, not on `{branch}`",
                                    repo.display()
                                ),
                            },
                        });
                    }
                    None => {
                        return Err(WorkspaceError::Occupied {
                            path: dir,
                            reason: format!(
                                "it exists and is not a worktree of {}",
                                repo.display()
                            ),
                        });
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.create(&git, &repo, &worktrees, &dir, &branch, &base_commit)
                    .await?;
                true
            }
            Err(e) => return Err(io_error(&dir)(e)),
        };
        let dir = tokio::fs::canonicalize(&dir)
            .await
            .map_err(io_error(&dir))?;
        let fingerprint = fingerprint(&[
            common_dir.as_os_str().as_encoded_bytes(),
            branch.as_bytes(),
            dir.as_os_str().as_encoded_bytes(),
        ]);
        Ok(ResolvedWorkspace {
            dir,
            fingerprint,
            branch: Some(branch),
            created,
            worktree: Some(WorktreeState { repo, base_commit }),
        })
    }

    /// Create the worktree at `dir` (which does not exist) on `branch`.
    async fn create(
        &self,
        git: &Git<'_>,
        repo: &Path,
        worktrees: &[Listed],
        dir: &Path,
        branch: &str,
        base_commit: &str,
    ) -> Result<(), WorkspaceError> {
        if self.require_clean_base {
            let status = git
                .ok(&[OsStr::new("status"), OsStr::new("--porcelain")])
                .await?;
            let lines: Vec<&str> = status.lines().filter(|l| !l.is_empty()).collect();
            if !lines.is_empty() {
                let mut listed = lines[..lines.len().min(DIRTY_LINES)].join("\n");
                if lines.len() > DIRTY_LINES {
                    listed.push_str(&format!("\n… and {} more", lines.len() - DIRTY_LINES));
                }
                return Err(WorkspaceError::DirtyBase {
                    repo: repo.to_path_buf(),
                    status: listed,
                });
            }
        }
        // A worktree registered at `dir` whose directory was deleted by hand: drop the stale
        // registration (git refuses to add over it).
        let wanted = canonical_lenient(dir).await;
        for listed in worktrees {
            if canonical_lenient(&listed.path).await == wanted {
                git.ok(&[
                    OsStr::new("worktree"),
                    OsStr::new("remove"),
                    OsStr::new("--force"),
                    listed.path.as_os_str(),
                ])
                .await?;
            }
        }
        if let Some(parent) = dir.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(io_error(parent))?;
        }
        if git.branch_exists(branch).await? {
            git.ok(&[
                OsStr::new("worktree"),
                OsStr::new("add"),
                dir.as_os_str(),
                OsStr::new(branch),
            ])
            .await?;
        } else {
            git.ok(&[
                OsStr::new("worktree"),
                OsStr::new("add"),
                OsStr::new("-b"),
                OsStr::new(branch),
                dir.as_os_str(),
                OsStr::new(base_commit),
            ])
            .await?;
        }
        Ok(())
    }

    async fn release_worktree(
        &self,
        workspace: &ResolvedWorkspace,
        run_failed: bool,
    ) -> Result<(), WorkspaceError> {
        let not_managed = || WorkspaceError::NotManaged {
            path: workspace.dir.clone(),
        };
        let (Some(state), Some(branch)) = (&workspace.worktree, &workspace.branch) else {
            return Err(not_managed());
        };
        if self.canonical_repo().await? != state.repo {
            return Err(not_managed());
        }
        if self.on_release == Release::Keep {
            return Ok(());
        }
        tracing::debug!(dir = %workspace.dir.display(), run_failed, "removing the run's worktree");
        let git = self.git(&state.repo);
        let mut registered = false;
        for listed in git.worktrees().await? {
            if canonical_lenient(&listed.path).await == workspace.dir {
                registered = true;
                break;
            }
        }
        if registered {
            git.ok(&[
                OsStr::new("worktree"),
                OsStr::new("remove"),
                OsStr::new("--force"),
                workspace.dir.as_os_str(),
            ])
            .await?;
        } else if tokio::fs::symlink_metadata(&workspace.dir).await.is_ok() {
            return Err(WorkspaceError::Occupied {
                path: workspace.dir.clone(),
                reason: format!(
                    "no longer a registered worktree of {}; left in place",
                    state.repo.display()
                ),
            });
        }
        if !git.branch_exists(branch).await? {
            return Ok(());
        }
        let range = format!("{}..refs/heads/{branch}", state.base_commit);
        let count = git
            .ok(&[
                OsStr::new("rev-list"),
                OsStr::new("--count"),
                OsStr::new(&range),
            ])
            .await?;
        if count.trim() == "0" {
            git.ok(&[OsStr::new("branch"), OsStr::new("-D"), OsStr::new(branch)])
                .await?;
        } else {
            tracing::info!(
                branch = %branch,
                commits = count.trim(),
                "kept the worktree's branch: it has commits beyond its base"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Git isolated from the user's and the system's configuration.
    fn isolation() -> Vec<(&'static str, OsString)> {
        vec![
            ("GIT_CONFIG_GLOBAL", OsString::from("/dev/null")),
            ("GIT_CONFIG_NOSYSTEM", OsString::from("1")),
            ("GIT_AUTHOR_NAME", OsString::from("Test")),
            ("GIT_AUTHOR_EMAIL", OsString::from("test@example.invalid")),
            ("GIT_COMMITTER_NAME", OsString::from("Test")),
            (
                "GIT_COMMITTER_EMAIL",
                OsString::from("test@example.invalid"),
            ),
        ]
    }

    impl GitWorktree {
        fn isolated(mut self) -> Self {
            self.git_env = isolation();
            self
        }
    }

    /// `git -C dir args…` (isolated), which must succeed; its stdout.
    async fn git(dir: &Path, args: &[&str]) -> String {
        let env = isolation();
        let git = Git {
            repo: dir,
            env: &env,
        };
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        git.ok(&args).await.unwrap()
    }

    async fn branch_exists(repo: &Path, branch: &str) -> bool {
        let env = isolation();
        Git { repo, env: &env }.branch_exists(branch).await.unwrap()
    }

    /// A repository `<tmp>/repo` with one commit holding `README`.
    async fn repo() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().canonicalize().unwrap().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]).await;
        std::fs::write(repo.join("README"), "base\n").unwrap();
        git(&repo, &["add", "README"]).await;
        git(&repo, &["commit", "-q", "-m", "base"]).await;
        (tmp, repo)
    }

    fn worktree(repo: &Path) -> GitWorktree {
        Workspace::git_worktree(repo).isolated()
    }

    #[tokio::test]
    async fn dir_resolves_to_its_canonical_path_with_a_stable_fingerprint() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspace::dir(tmp.path().join("."));
        let request = WorkspaceRequest::run("r1");
        let a = ws.resolve(&request).await.unwrap();
        let b = ws.resolve(&request).await.unwrap();
        assert_eq!(a.dir(), tmp.path().canonicalize().unwrap());
        assert!(a.fingerprint().starts_with("sha256:") && a.fingerprint().len() == 71);
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert!(!a.created() && a.branch().is_none() && a.base_commit().is_none());
        ws.release(&a, false).await.unwrap();
        assert!(tmp.path().exists());

        let missing = Workspace::dir(tmp.path().join("missing"));
        let err = missing.resolve(&request).await.unwrap_err();
        assert!(matches!(err, WorkspaceError::NotADirectory { .. }), "{err}");
        let file = tmp.path().join("file");
        std::fs::write(&file, "").unwrap();
        let err = Workspace::dir(&file).resolve(&request).await.unwrap_err();
        assert!(matches!(err, WorkspaceError::NotADirectory { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_worktree_is_created_on_the_branch_from_the_base() {
        let (tmp, repo) = repo().await;
        let base = git(&repo, &["rev-parse", "HEAD"]).await;
        let ws: Workspace = worktree(&repo).into();
        let got = ws.resolve(&WorkspaceRequest::run("r1")).await.unwrap();
        let expected = tmp
            .path()
            .canonicalize()
            .unwrap()
            .join("repo.worktrees/agent-r1");
        assert_eq!(got.dir(), expected);
        assert!(got.created());
        assert_eq!(got.branch(), Some("agent/r1"));
        assert_eq!(got.base_commit(), Some(base.trim()));
        assert!(got.fingerprint().starts_with("sha256:"));
        assert_eq!(
            std::fs::read_to_string(got.dir().join("README")).unwrap(),
            "base\n"
        );
        assert_eq!(
            git(got.dir(), &["branch", "--show-current"]).await.trim(),
            "agent/r1"
        );
        assert_eq!(git(got.dir(), &["rev-parse", "HEAD"]).await, base);
    }

    #[tokio::test]
    async fn a_thread_keeps_one_checkout_across_runs_and_keys_do_not_share() {
        let (tmp, repo) = repo().await;
        let parent = tmp.path().join("trees");
        let ws: Workspace = worktree(&repo).parent_dir(&parent).into();
        let first = ws
            .resolve(&WorkspaceRequest::on_thread("r1", "t1"))
            .await
            .unwrap();
        assert!(first.created());
        assert_eq!(first.dir(), parent.canonicalize().unwrap().join("agent-t1"));
        std::fs::write(first.dir().join("progress"), "run 1").unwrap();
        let second = ws
            .resolve(&WorkspaceRequest::on_thread("r2", "t1"))
            .await
            .unwrap();
        assert!(!second.created());
        assert_eq!(second.dir(), first.dir());
        assert_eq!(second.fingerprint(), first.fingerprint());
        assert!(second.dir().join("progress").exists());

        let other = ws
            .resolve(&WorkspaceRequest::on_thread("r3", "t2"))
            .await
            .unwrap();
        assert!(other.created());
        assert_ne!(other.dir(), first.dir());
        assert_ne!(other.fingerprint(), first.fingerprint());
        assert_eq!(other.branch(), Some("agent/t2"));
    }

    #[tokio::test]
    async fn a_dirty_base_is_refused_only_when_a_clean_one_is_required() {
        let (tmp, repo) = repo().await;
        std::fs::write(repo.join("scratch"), "uncommitted").unwrap();
        let strict = worktree(&repo).require_clean_base(true);
        let err = strict
            .resolve(&WorkspaceRequest::run("r1"))
            .await
            .unwrap_err();
        match &err {
            WorkspaceError::DirtyBase { status, .. } => {
                assert!(status.contains("scratch"), "{status}")
            }
            other => panic!("{other}"),
        }
        assert!(!branch_exists(&repo, "agent/r1").await);
        assert!(!tmp.path().join("repo.worktrees").exists());

        let lax = worktree(&repo);
        let got = lax.resolve(&WorkspaceRequest::run("r1")).await.unwrap();
        assert!(got.created() && got.dir().join("README").exists());
        assert!(!got.dir().join("scratch").exists());
    }

    #[tokio::test]
    async fn bad_templates_and_refs_are_typed_errors() {
        let (tmp, repo) = repo().await;
        let run = WorkspaceRequest::run("r1");
        for template in [
            "agent/{nope}",
            "agent/{thread}",
            "a..b",
            "agent/{key",
            "agent/}",
            "{key}.lock",
        ] {
            let err = worktree(&repo)
                .branch_template(template)
                .resolve(&run)
                .await
                .unwrap_err();
            match &err {
                WorkspaceError::BadTemplate { template: t, .. } => assert_eq!(t, template),
                other => panic!("{template}: {other}"),
            }
        }
        let on_thread = WorkspaceRequest::on_thread("r1", "t1");
        let got = worktree(&repo)
            .branch_template("{thread}/{run_id}")
            .resolve(&on_thread)
            .await
            .unwrap();
        assert_eq!(got.branch(), Some("t1/r1"));

        for reference in ["no-such-ref", "-x"] {
            let err = worktree(&repo)
                .base_ref(reference)
                .resolve(&run)
                .await
                .unwrap_err();
            assert!(matches!(err, WorkspaceError::BadRef { .. }), "{err}");
        }
        assert!(!tmp.path().join("repo.worktrees/agent-r1").exists());
    }

    #[tokio::test]
    async fn release_remove_deletes_the_worktree_and_its_unused_branch_even_after_a_failure() {
        let (_tmp, repo) = repo().await;
        let ws: Workspace = worktree(&repo).into();
        for (run, failed) in [("ok", false), ("failed", true)] {
            let got = ws.resolve(&WorkspaceRequest::run(run)).await.unwrap();
            std::fs::write(got.dir().join("uncommitted"), "x").unwrap();
            ws.release(&got, failed).await.unwrap();
            assert!(!got.dir().exists(), "{run}");
            assert!(
                !branch_exists(&repo, &format!("agent/{run}")).await,
                "{run}"
            );
        }
        assert_eq!(
            git(&repo, &["worktree", "list", "--porcelain"])
                .await
                .matches("worktree ")
                .count(),
            1
        );
    }

    #[tokio::test]
    async fn a_branch_with_commits_survives_release_and_comes_back() {
        let (_tmp, repo) = repo().await;
        let ws: Workspace = worktree(&repo).into();
        let request = WorkspaceRequest::on_thread("r1", "t1");
        let got = ws.resolve(&request).await.unwrap();
        std::fs::write(got.dir().join("work"), "done").unwrap();
        git(got.dir(), &["add", "work"]).await;
        git(got.dir(), &["commit", "-q", "-m", "work"]).await;
        ws.release(&got, false).await.unwrap();
        assert!(!got.dir().exists());
        assert!(branch_exists(&repo, "agent/t1").await);

        // The next run of the thread checks the branch out again, with the work.
        let again = ws
            .resolve(&WorkspaceRequest::on_thread("r2", "t1"))
            .await
            .unwrap();
        assert!(again.created());
        assert_eq!(again.dir(), got.dir());
        assert_eq!(
            std::fs::read_to_string(again.dir().join("work")).unwrap(),
            "done"
        );
    }

    #[tokio::test]
    async fn release_keep_keeps_the_worktree_and_the_branch() {
        let (_tmp, repo) = repo().await;
        let ws: Workspace = worktree(&repo).on_release(Release::Keep).into();
        let got = ws.resolve(&WorkspaceRequest::run("r1")).await.unwrap();
        ws.release(&got, true).await.unwrap();
        assert!(got.dir().join("README").exists());
        assert!(branch_exists(&repo, "agent/r1").await);
    }

    #[tokio::test]
    async fn something_else_in_the_worktree_directory_is_left_alone() {
        let (tmp, repo) = repo().await;
        let dir = tmp.path().join("repo.worktrees/agent-r1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("mine"), "").unwrap();
        let err = worktree(&repo)
            .resolve(&WorkspaceRequest::run("r1"))
            .await
            .unwrap_err();
        assert!(matches!(err, WorkspaceError::Occupied { .. }), "{err}");
        assert!(dir.join("mine").exists());
        assert!(!branch_exists(&repo, "agent/r1").await);

        // A worktree of the repository on another branch is in the way too.
        let ws = worktree(&repo).branch_template("agent/{run_id}");
        let a = ws.resolve(&WorkspaceRequest::run("a-b")).await.unwrap();
        let err = ws.resolve(&WorkspaceRequest::run("a/b")).await.unwrap_err();
        assert!(matches!(err, WorkspaceError::Occupied { .. }), "{err}");
        assert!(a.dir().join("README").exists());
    }

    #[tokio::test]
    async fn a_worktree_deleted_by_hand_is_created_again() {
        let (_tmp, repo) = repo().await;
        let ws = worktree(&repo);
        let request = WorkspaceRequest::run("r1");
        let got = ws.resolve(&request).await.unwrap();
        std::fs::remove_dir_all(got.dir()).unwrap();
        let again = ws.resolve(&request).await.unwrap();
        assert!(again.created());
        assert_eq!(again.dir(), got.dir());
        assert!(again.dir().join("README").exists());
    }

    #[tokio::test]
    async fn not_a_repository_is_a_typed_error() {
        let tmp = tempfile::tempdir().unwrap();
        let plain = tmp.path().join("plain");
        std::fs::create_dir(&plain).unwrap();
        let run = WorkspaceRequest::run("r1");
        for path in [plain.clone(), tmp.path().join("missing")] {
            let err = worktree(&path).resolve(&run).await.unwrap_err();
            assert!(
                matches!(err, WorkspaceError::NotARepository { .. }),
                "{err}"
            );
        }
        assert!(!tmp.path().join("plain.worktrees").exists());
    }

    #[tokio::test]
    async fn release_refuses_a_workspace_it_did_not_resolve() {
        let (tmp, repo) = repo().await;
        let foreign = ResolvedWorkspace::new(tmp.path(), "sha256:00", false);
        let err = worktree(&repo).release(&foreign, false).await.unwrap_err();
        assert!(matches!(err, WorkspaceError::NotManaged { .. }), "{err}");
    }
}
