//! Provider processes: spawning, signalling and reaping — the one place that spawns.
//!
//! Owns: program lookup (PATH, never through a workspace entry; `grant` calls it once per
//! run), spawning a [`ProcessSpec`] as the leader of a new process group under the
//! confinement `grant` decided (Landlock and a PID namespace on Linux, in `linux.rs`), through
//! the host's spawner — a small process of its own that forks every provider, so the host
//! never forks itself (`spawner.rs`) — signalling and reaping groups, the run's private directory (and sweeping the ones a
//! crashed host left), and the OS-specific process-group code (in `unix.rs`; macOS and
//! Windows follow behind the same functions). Must not: decide what may be spawned (that is
//! `grant`), parse output or decide run outcomes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::containment::{ContainmentMode, ContainmentReport, PathRule};

#[cfg(target_os = "linux")]
mod linux;
#[cfg(unix)]
mod spawner;
mod tool;
#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub(crate) use spawner::start_early as start_spawner;
pub(crate) use tool::run_host_tool;
#[cfg(unix)]
pub(crate) use unix::{Spawned, exit_parts, group_alive, killed_status, signal_group, spawn};

/// Fork this process's spawner now (see [`crate::fork_spawner`]); once the spawner thread has
/// taken it, it has the spawner prepare `common`'s ruleset and then probes the kernel (see
/// [`start_spawner`]).
pub(crate) fn fork_spawner(
    common: fn() -> Option<CommonRules>,
) -> Result<(), crate::error::SpawnerForkError> {
    #[cfg(target_os = "linux")]
    {
        spawner::fork_at_start().inspect_err(|e| {
            tracing::debug!(error = %e, "no spawner forked; it will be started on first use");
        })?;
        spawner::start_early(common);
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = common;
        Ok(())
    }
}

/// How a launch is confined (decided by `grant`, applied by [`spawn`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Confinement {
    /// The filesystem rules (applied with Landlock when `landlock`).
    pub rules: Vec<PathRule>,
    /// Paths hidden by mounts over them in the provider's mount namespace (only with
    /// `pid_namespace`, which brings that namespace; see `grant::confine::SystemRules`).
    pub hidden: Vec<PathBuf>,
    /// State directories to create (0700) before launch.
    pub create: Vec<PathBuf>,
    /// Apply the rules with Landlock.
    pub landlock: bool,
    /// Run in a PID namespace of its own.
    pub pid_namespace: bool,
    /// What the reaper waits between SIGTERM and SIGKILL for leftovers.
    pub grace: Duration,
    /// The rule set `rules` begins with, when it is one registered for many launches (the
    /// system's): the spawner opens those paths ahead of the launch (see [`CommonRules`]).
    /// Only with `landlock`.
    pub common: Option<CommonRules>,
}

/// Rules that begin the rules of many launches — the system directories, `/etc` and the
/// device nodes, decided once per process by `grant` — registered with the spawner, which
/// builds a Landlock ruleset holding them ahead of a launch (see `spawner.rs`, "Common
/// rules"): a launch then only adds its own rules, instead of opening some 160 paths (as
/// root, `/etc` entry by entry) between its request and its fork.
///
/// Identified by the address of its rules, which live as long as the process (a set is
/// never freed, so no other set can take its address).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CommonRules {
    rules: &'static [PathRule],
}

impl CommonRules {
    /// The set of `rules`.
    pub(crate) fn of(rules: &'static [PathRule]) -> CommonRules {
        CommonRules { rules }
    }

    /// Its identity, the same for every launch of this process that uses it.
    pub(crate) fn id(&self) -> u64 {
        self.rules.as_ptr() as usize as u64
    }

    /// The rules.
    pub(crate) fn rules(&self) -> &'static [PathRule] {
        self.rules
    }
}

impl PartialEq for CommonRules {
    fn eq(&self, other: &CommonRules) -> bool {
        self.id() == other.id()
    }
}

impl Eq for CommonRules {}

/// Have the spawner build the Landlock ruleset of `common` now, ahead of a launch expected
/// soon (a run being prepared, or a process started to run one), so that launch finds it
/// ready. A hint: nothing waits for it, and a launch that comes first, or later than the
/// ruleset stays fresh for, builds its own.
pub(crate) fn expect_launch(common: CommonRules) {
    #[cfg(target_os = "linux")]
    spawner::expect_launch(common);
    #[cfg(not(target_os = "linux"))]
    let _ = common;
}

impl Confinement {
    /// Whether a process confined by `self` is confined exactly as `other` asks: the same
    /// rules, kernel mechanisms and grace. `create` is left out: it lists the state
    /// directories that did not exist yet when the launch was decided, so it shrinks once a
    /// first launch has created them, while the rules granting them stay the same.
    pub(crate) fn confines_as(&self, other: &Confinement) -> bool {
        self.rules == other.rules
            && self.hidden == other.hidden
            && self.landlock == other.landlock
            && self.pid_namespace == other.pid_namespace
            && self.grace == other.grace
    }
}

/// What the running kernel offers for confinement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KernelSupport {
    /// Landlock ABI version.
    pub landlock_abi: Option<u32>,
    /// PID (and mount) namespaces can be created.
    pub pid_namespace: bool,
    /// Secrets can be hidden by mounts (see `grant::confine::SystemRules`): a launch gets
    /// the namespaces of [`pid_namespace`](Self::pid_namespace), its reaper can mount in its
    /// mount namespace, and the provider runs with no capability
    /// that reaches past a mount — the host is not root, so the provider is an unprivileged
    /// user in a user namespace of its own. A root provider could open a hidden file by
    /// handle (`open_by_handle_at`, with `CAP_DAC_READ_SEARCH`) or clone the mount tree
    /// without the masks (`open_tree`, with `CAP_SYS_ADMIN`), and Landlock, which follows
    /// paths, would let it read what the whole `/etc` rule covers.
    pub hide_by_mounts: bool,
}

/// What the running kernel offers (probed once per process).
pub(crate) fn kernel_support() -> KernelSupport {
    #[cfg(target_os = "linux")]
    {
        KernelSupport {
            landlock_abi: linux::landlock_abi(),
            pid_namespace: linux::pid_namespace_available(),
            hide_by_mounts: hide_by_mounts(),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        KernelSupport {
            landlock_abi: None,
            pid_namespace: false,
            hide_by_mounts: false,
        }
    }
}

/// [`KernelSupport::hide_by_mounts`], with the namespace probe only when the answer depends
/// on it: a root host never hides, whatever its namespaces can do.
#[cfg(target_os = "linux")]
fn hide_by_mounts() -> bool {
    // SAFETY: geteuid(2) cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    !root && linux::namespace_mounts_available()
}

/// The form of the system's rules launches here start from (see
/// `grant::confine::SystemRules::common`): whether they hide `/etc`'s secrets by mounts, or
/// `None` without Landlock (no ruleset to build ahead). As [`kernel_support`] decides it, but
/// a root host knows it without the namespace probe (it never hides), so its spawner can
/// start on the launches' ruleset while the probe runs (see `spawner::start_early`).
pub(crate) fn common_form() -> Option<bool> {
    #[cfg(target_os = "linux")]
    {
        linux::landlock_abi().map(|_| hide_by_mounts())
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

impl KernelSupport {
    /// The confinement `mode` asks for, given `rules`, the paths to hide and the state
    /// directories to create: an error naming what is missing in
    /// [`ContainmentMode::Enforce`], else what can be had. Hiding paths needs
    /// [`hide_by_mounts`](Self::hide_by_mounts) (the plan hides only then).
    pub(crate) fn confine(
        self,
        mode: ContainmentMode,
        rules: Vec<PathRule>,
        hidden: Vec<PathBuf>,
        create: Vec<PathBuf>,
        grace: Duration,
    ) -> Result<(Confinement, ContainmentReport), String> {
        if !hidden.is_empty() && !self.hide_by_mounts {
            return Err(
                "the plan hides paths by mounts, which this launch cannot make (no mount \
                 namespace, or a provider with the capabilities to see past them)"
                    .to_owned(),
            );
        }
        let mut notes = Vec::new();
        if self.landlock_abi.is_none() {
            notes.push(
                "the kernel has no Landlock (Linux 5.13+ with `landlock` in the LSM list): filesystem rules are not enforced".to_owned(),
            );
        }
        if !self.pid_namespace {
            notes.push(
                "PID namespaces are not available (not root and no unprivileged user namespaces): descendants that leave the process group can survive the run".to_owned(),
            );
        }
        if mode == ContainmentMode::Enforce && !notes.is_empty() {
            return Err(format!(
                "{}; Containment::best_effort() runs anyway",
                notes.join("; ")
            ));
        }
        let landlock = self.landlock_abi.is_some();
        let report = ContainmentReport {
            mode,
            landlock_abi: self.landlock_abi,
            filesystem_enforced: landlock,
            signals_scoped: self.landlock_abi.is_some_and(|v| v >= 6),
            pid_namespace: self.pid_namespace,
            rules: rules.clone(),
            hidden: hidden.clone(),
            notes,
        };
        Ok((
            Confinement {
                rules,
                hidden,
                create,
                landlock,
                pid_namespace: self.pid_namespace,
                grace,
                common: None,
            },
            report,
        ))
    }
}

/// What to spawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcessSpec {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: PathBuf,
    /// Linux: have the kernel SIGKILL the provider if its parent (the spawner, which dies
    /// with the host) dies (`PR_SET_PDEATHSIG`).
    pub parent_death_signal: bool,
    /// How the process and its descendants are confined.
    pub confinement: Confinement,
}

/// Signals the host sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sig {
    Interrupt,
    Terminate,
    Kill,
}

impl Sig {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Sig::Interrupt => "SIGINT",
            Sig::Terminate => "SIGTERM",
            Sig::Kill => "SIGKILL",
        }
    }
}

/// Resolve `program` to an absolute path.
///
/// A name with a `/` must be absolute. A bare name is looked up in the `PATH` entries that are
/// absolute and not inside `workspace` (so a checked-out repository cannot plant a fake CLI
/// through a relative or in-repository `PATH` entry such as `node_modules/.bin`), then in
/// `extra_dirs` — the directories the embedding host named itself
/// (`AgentBuilder::program_dir`, e.g. the directory of the `adaptor` binary). Those are the
/// host's own choice, not the environment's or the repository's, so they are trusted wherever
/// they are: a build tree inside the workspace (`./target/debug` when running from a clone) or
/// `~/.local/bin` under a workspace of `~` must not hide the host's own programs.
pub(crate) fn resolve_program(
    program: &str,
    path_var: Option<&std::ffi::OsStr>,
    workspace: &Path,
    extra_dirs: &[PathBuf],
) -> Result<PathBuf, String> {
    if program.is_empty() {
        return Err("the program name is empty".into());
    }
    if program.contains('/') {
        let p = Path::new(program);
        if !p.is_absolute() {
            return Err("a program path must be absolute".into());
        }
        return if is_executable(p) {
            Ok(p.to_path_buf())
        } else {
            Err(format!("{program} is not an executable file"))
        };
    }
    let path_dirs = path_var
        .map(|p| std::env::split_paths(p).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut skipped = 0;
    let mut searched = 0;
    for dir in &path_dirs {
        if !dir.is_absolute() {
            skipped += 1;
            continue;
        }
        let canonical = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        if canonical.starts_with(workspace) {
            skipped += 1;
            continue;
        }
        searched += 1;
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    for dir in extra_dirs.iter().filter(|d| d.is_absolute()) {
        searched += 1;
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    let skipped = match skipped {
        0 => String::new(),
        n => format!(
            "; skipped {n} PATH entr{} that {} relative or inside the workspace",
            if n == 1 { "y" } else { "ies" },
            if n == 1 { "is" } else { "are" }
        ),
    };
    Err(format!(
        "not on PATH (searched {searched} directories{skipped}); put it on PATH or set the driver config's `command` to its absolute path"
    ))
}

/// After a provider's run: make sure no process of its group survives, then disarm its
/// guard. When its reaper reported the exit once its PID namespace was empty, the group
/// holds nothing but that reaper, which is exiting: this waits for the spawner to report it
/// reaped (a group check would find it alive during its teardown and poll). Otherwise, or
/// if the spawner ended first, [`reap_group`].
pub(crate) async fn end_group(spawned: &mut Spawned, grace: Duration) -> Result<(), String> {
    let reaped = spawned.child.only_the_reaper_is_left() && spawned.child.reaper_reaped().await;
    if !reaped {
        reap_group(spawned.guard.pgid(), grace).await?;
    }
    spawned.guard.disarm();
    Ok(())
}

/// Make sure no process of the group survives: SIGTERM, grace, SIGKILL.
async fn reap_group(pgid: i32, grace: Duration) -> Result<(), String> {
    if !group_alive(pgid) {
        return Ok(());
    }
    tracing::info!(
        pgid,
        "terminating leftover processes of the provider's group"
    );
    signal_group(pgid, Sig::Terminate).map_err(|e| e.to_string())?;
    let until = Instant::now() + grace;
    while Instant::now() < until && group_alive(pgid) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if group_alive(pgid) {
        signal_group(pgid, Sig::Kill).map_err(|e| e.to_string())?;
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until && group_alive(pgid) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    if group_alive(pgid) {
        Err(format!("process group {pgid} still exists after SIGKILL"))
    } else {
        Ok(())
    }
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

/// A run's private 0700 directory, removed with its contents on drop:
///
/// - `files/`: the private files a launch asked for (schemas, prompt files, MCP configs),
///   each 0600 and never executable (the provider may only read them); made only when the
///   launch asked for some;
/// - `tmp/`: the provider's `TMPDIR`.
///
/// The directory itself is held locked (`flock` on a descriptor of it) while the run lives,
/// so [`sweep_stale_run_dirs`] can tell the directories of a crashed host from those of
/// live runs. Each entry made and removed is a journalled inode on a disk file system, on
/// every run's path (ext4, by hand on this project's 2-vCPU machines: the four entries of
/// the layout before this one, with a `lock` file and an empty `files/`, took about 70 µs
/// to make and 340 µs to remove; tmpfs 15 and 11 µs).
pub(crate) struct PrivateDir {
    root: PathBuf,
    created: bool,
    /// Whether `files/` was made (by this owner, or, for an unowned directory, found).
    has_files: bool,
    _lock: Option<std::fs::File>,
}

/// Prefix of run directories in the system temporary directory.
const RUN_DIR_PREFIX: &str = "adaptor-run-";

/// A run directory younger than this is never swept: it may be one another host has just
/// made and not yet locked (the lock is taken right after `mkdir`, microseconds later).
const SWEEP_YOUNGER_THAN: std::time::Duration = std::time::Duration::from_secs(60);

impl PrivateDir {
    /// The root of run `run_id`'s directory.
    pub(crate) fn root_for(run_id: &str) -> PathBuf {
        std::env::temp_dir().join(format!("{RUN_DIR_PREFIX}{run_id}"))
    }

    /// Where the private files go (the request's `private-dir`).
    pub(crate) fn files_for(root: &Path) -> PathBuf {
        root.join("files")
    }

    /// Where the run's instructions bundle is written (read-only to the provider).
    pub(crate) fn instructions_for(root: &Path) -> PathBuf {
        root.join("instructions")
    }

    /// The provider's `TMPDIR`.
    pub(crate) fn tmp_for(root: &Path) -> PathBuf {
        root.join("tmp")
    }

    /// A handle on a directory another owner created and removes (a warm process's, while
    /// a run is prepared on it): dropping it removes nothing.
    pub(crate) fn unowned(root: PathBuf) -> PrivateDir {
        PrivateDir {
            has_files: Self::files_for(&root).is_dir(),
            root,
            created: false,
            _lock: None,
        }
    }

    /// The root.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The files directory, if the launch had private files (else there is none).
    pub(crate) fn files_dir(&self) -> Option<PathBuf> {
        self.has_files.then(|| Self::files_for(&self.root))
    }

    /// Create it (0700, with `tmp/`, locked) and, if there are `files` (name, contents;
    /// names already checked by the grant), `files/` with each written 0600.
    pub(crate) fn create(root: PathBuf, files: &[(&str, &[u8])]) -> std::io::Result<PrivateDir> {
        unix::create_private_dir(&root)?;
        let mut dir = PrivateDir {
            root,
            created: true,
            has_files: false,
            _lock: None,
        };
        dir._lock = Some(unix::lock_dir(&dir.root)?);
        unix::create_private_dir(&Self::tmp_for(&dir.root))?;
        if !files.is_empty() {
            let files_dir = Self::files_for(&dir.root);
            unix::create_private_dir(&files_dir)?;
            dir.has_files = true;
            for (name, contents) in files {
                unix::create_private_file(&files_dir.join(name), contents)?;
            }
        }
        Ok(dir)
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        if !self.created {
            return;
        }
        // The usual shape first, one system call per entry: `tmp/` if it was left empty,
        // then the directory (still locked: its lock goes with the descriptor, after it).
        // Whatever else is there (the provider's temporary files, private files, an
        // instructions bundle) is left to `remove_dir_all`, which lists and inspects every
        // directory it removes.
        let _ = std::fs::remove_dir(Self::tmp_for(&self.root));
        if std::fs::remove_dir(&self.root).is_ok() {
            return;
        }
        match std::fs::remove_dir_all(&self.root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %self.root.display(), error = %e, "could not remove the run's private directory")
            }
        }
    }
}

/// Whether run directory `root` is one a crashed host left: a minute old at least, and its
/// lock free — the directory's own, or, as hosts before this layout kept it, a `lock` file
/// in it (one such host may still be running).
fn stale(root: &Path) -> bool {
    let old_enough = std::fs::symlink_metadata(root)
        .and_then(|m| m.modified())
        .is_ok_and(|made| made.elapsed().is_ok_and(|age| age >= SWEEP_YOUNGER_THAN));
    if !old_enough {
        return false;
    }
    let lock_file = root.join("lock");
    if lock_file.exists() {
        unix::lock_is_free(&lock_file)
    } else {
        unix::lock_is_free(root)
    }
}

/// Remove the run directories that hosts which crashed left in the system temporary
/// directory (their lock is no longer held). Runs once per process, when the first Agent
/// is built. Returns how many were removed; a directory that cannot be removed is logged.
pub(crate) fn sweep_stale_run_dirs() -> usize {
    static SWEPT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SWEPT.get_or_init(|| {
        let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            if !name.to_string_lossy().starts_with(RUN_DIR_PREFIX) {
                continue;
            }
            let root = entry.path();
            if !stale(&root) {
                continue;
            }
            match std::fs::remove_dir_all(&root) {
                Ok(()) => removed += 1,
                Err(e) => {
                    tracing::warn!(path = %root.display(), error = %e, "could not remove a stale run directory")
                }
            }
        }
        if removed > 0 {
            tracing::info!(removed, "removed run directories left by a crashed host");
        }
        removed
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's directory goes whole, in its usual shape (an empty `tmp/`, no `files/`
    /// without files) and with whatever was left in it; while it lives, it is locked.
    #[test]
    fn a_run_directory_is_removed_with_whatever_was_left_in_it() {
        let base = tempfile::tempdir().unwrap();
        let empty = base.path().join("adaptor-run-empty");
        let dir = PrivateDir::create(empty.clone(), &[]).unwrap();
        assert!(PrivateDir::tmp_for(&empty).is_dir());
        assert!(!PrivateDir::files_for(&empty).exists());
        assert_eq!(dir.files_dir(), None);
        assert!(
            !unix::lock_is_free(&empty),
            "a live run's directory is locked"
        );
        drop(dir);
        assert!(!empty.exists());

        let full = base.path().join("adaptor-run-full");
        let dir = PrivateDir::create(full.clone(), &[("schema.json", b"{}")]).unwrap();
        assert_eq!(
            std::fs::read(full.join("files/schema.json")).unwrap(),
            b"{}"
        );
        assert_eq!(dir.files_dir(), Some(full.join("files")));
        let nested = PrivateDir::tmp_for(&full).join("cli/cache");
        std::fs::create_dir_all(&nested).unwrap();
        std::fs::write(nested.join("entry"), b"x").unwrap();
        std::fs::create_dir(PrivateDir::instructions_for(&full)).unwrap();
        std::fs::write(PrivateDir::instructions_for(&full).join("AGENTS.md"), b"x").unwrap();
        drop(dir);
        assert!(!full.exists());
    }

    /// The form the spawner is asked to prepare ahead is the one launches take: what
    /// [`kernel_support`] decides (a launch's plan hides exactly when it says so), reached
    /// without the probe only where the probe cannot change it.
    #[test]
    fn the_common_form_prepared_ahead_is_the_launches_form() {
        let kernel = kernel_support();
        assert_eq!(
            common_form(),
            kernel.landlock_abi.map(|_| kernel.hide_by_mounts)
        );
        // SAFETY: geteuid(2) cannot fail.
        #[cfg(target_os = "linux")]
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(
                common_form(),
                kernel.landlock_abi.map(|_| false),
                "root never hides"
            );
        }
    }

    /// A group whose reaper reported the exit is ended only once the spawner reports the
    /// reaper reaped, with no group check in between (it would find the reaper alive).
    #[cfg(unix)]
    #[tokio::test]
    async fn a_group_left_to_its_exiting_reaper_ends_when_the_reaper_is_reaped() {
        use spawner::Exit;
        let (report, exit) = tokio::sync::watch::channel(Some(Exit {
            status: 3 << 8,
            reaper_exiting: true,
        }));
        // Above any pid the kernel hands out: no group by this id can exist.
        let pgid = 0x7fff_fff0;
        let mut spawned = Spawned {
            child: unix::ProviderChild::reported_through(exit),
            pid: pgid as u32,
            stdin: None,
            stdout: None,
            stderr: None,
            guard: unix::GroupGuard::armed(pgid),
            started: std::time::Instant::now(),
        };
        assert!(spawned.child.only_the_reaper_is_left());
        let grace = Duration::from_secs(5);
        {
            let ending = end_group(&mut spawned, grace);
            tokio::pin!(ending);
            tokio::select! {
                ended = &mut ending => panic!("ended before the reaper was reaped: {ended:?}"),
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
            report
                .send(Some(Exit {
                    status: 3 << 8,
                    reaper_exiting: false,
                }))
                .unwrap();
            assert_eq!(ending.await, Ok(()));
        }
        assert!(!spawned.guard.is_armed());
        assert!(!spawned.child.only_the_reaper_is_left());
        assert_eq!(spawned.child.wait().await.unwrap().code(), Some(3));
    }

    #[test]
    fn enforce_refuses_a_kernel_that_cannot_confine_and_best_effort_says_what_is_missing() {
        let bare = KernelSupport {
            landlock_abi: None,
            pid_namespace: false,
            hide_by_mounts: false,
        };
        let grace = Duration::from_millis(10);
        let confine = |kernel: KernelSupport, mode, hidden| {
            kernel.confine(mode, Vec::new(), hidden, Vec::new(), grace)
        };
        let err = confine(bare, ContainmentMode::Enforce, Vec::new()).unwrap_err();
        assert!(
            err.contains("no Landlock") && err.contains("PID namespaces"),
            "{err}"
        );
        let (confinement, report) = confine(bare, ContainmentMode::BestEffort, Vec::new()).unwrap();
        assert!(!confinement.landlock && !confinement.pid_namespace);
        assert!(!report.filesystem_enforced && !report.pid_namespace);
        assert_eq!(report.notes.len(), 2, "{report:?}");
        // Nothing can be hidden without the mount namespace, nor from a root provider.
        let hide = vec![PathBuf::from("/etc/shadow")];
        let root = KernelSupport {
            landlock_abi: Some(5),
            pid_namespace: true,
            hide_by_mounts: false,
        };
        for kernel in [bare, root] {
            let err = confine(kernel, ContainmentMode::BestEffort, hide.clone()).unwrap_err();
            assert!(err.contains("hides paths"), "{err}");
        }
        let full = KernelSupport {
            hide_by_mounts: true,
            ..root
        };
        let (confinement, report) = confine(full, ContainmentMode::Enforce, hide.clone()).unwrap();
        assert_eq!((&confinement.hidden, &report.hidden), (&hide, &hide));
        assert!(confinement.landlock && confinement.pid_namespace);
        assert!(report.notes.is_empty());
        assert!(!report.signals_scoped, "signal scoping needs ABI 6");
    }

    #[test]
    fn path_entries_inside_the_workspace_are_skipped() {
        let ws = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        let bin = ws_path.join("bin");
        std::fs::create_dir(&bin).unwrap();
        let fake = bin.join("sh");
        std::fs::write(&fake, "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = std::env::join_paths([
            bin.clone(),
            PathBuf::from("/bin"),
            PathBuf::from("/usr/bin"),
        ])
        .unwrap();
        let got = resolve_program("sh", Some(&path), &ws_path, &[]).unwrap();
        assert!(!got.starts_with(&ws_path), "{got:?}");
    }

    /// The first-five-minutes failure: `./x.sh run` from a fresh clone runs
    /// `./target/debug/adaptor` with the clone as workspace, so the host's own program
    /// directory lies inside the workspace. The host named it itself: it is searched.
    #[test]
    fn host_program_dirs_inside_the_workspace_are_searched() {
        let ws = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        let bin = ws_path.join("target").join("debug");
        std::fs::create_dir_all(&bin).unwrap();
        let provider = bin.join("reference-provider");
        std::fs::write(&provider, "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&provider, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = std::env::join_paths([bin.clone(), PathBuf::from("/usr/bin")]).unwrap();
        // On PATH only, inside the workspace: refused, and the error says why.
        let err = resolve_program("reference-provider", Some(&path), &ws_path, &[]).unwrap_err();
        assert!(err.contains("skipped 1 PATH entry"), "{err}");
        // Named by the host: found.
        let got = resolve_program(
            "reference-provider",
            Some(&path),
            &ws_path,
            std::slice::from_ref(&bin),
        )
        .unwrap();
        assert_eq!(got, provider);
    }

    #[test]
    fn relative_paths_and_missing_programs_are_errors() {
        let ws = Path::new("/nonexistent-ws");
        assert!(resolve_program("./x", None, ws, &[]).is_err());
        assert!(
            resolve_program(
                "definitely-not-a-program-xyz",
                Some(std::ffi::OsStr::new("/bin")),
                ws,
                &[]
            )
            .is_err()
        );
        assert!(resolve_program("", None, ws, &[]).is_err());
    }
}
