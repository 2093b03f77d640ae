//! Provider profiles: which per-user state directory an agent's CLI runs with.
//!
//! Owns the caller's choice ([`Profile`]: the user's own profile, a dedicated one, or a
//! dedicated one carrying the user's login, settings or MCP configuration), observing a
//! dedicated profile against that choice ([`ProfileState`]), making it (create the directory
//! 0700, link or copy what the driver's [`ProfileSpec`] declares), and what a run needs from
//! it ([`ResolvedProfile`]: the variables the host sets, the paths the provider may write,
//! the fingerprint).
//!
//! Must not: spawn, decide the confinement (it lists paths; `grant` decides), or trust the
//! driver's spec beyond what [`ProfileSpec::check`] accepted at load. It never replaces a
//! regular file: where a link to the user's login should be, a file may hold a newer token.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::descriptor::{Carry, ProfilePart, ProfileSpec};
use crate::error::ProfileError;

/// Which per-user state directory (profile) an agent's CLI runs with
/// ([`AgentBuilder::profile`](crate::AgentBuilder::profile)).
///
/// - [`Profile::native`] (the default): the user's own (`~/.claude`, `~/.codex`, or what the
///   caller's environment sets `CLAUDE_CONFIG_DIR` / `CODEX_HOME` to).
/// - [`Profile::dedicated`]: a directory of the agent's own, created by the host (0700) and
///   handed to the CLI through the variable its driver declares (the host sets it; a driver
///   never does), so concurrent hosts and tenants never rewrite one profile.
/// - [`Profile::clone_native`]: a dedicated profile that carries parts of the user's own,
///   as the driver declares them: [`link_auth`](ClonedProfile::link_auth) shares the login
///   (a link, or the CLI's credential-store variable — refresh tokens rotate, so they are
///   never copied), [`copy_settings`](ClonedProfile::copy_settings) and
///   [`copy_mcp`](ClonedProfile::copy_mcp) copy once (afterwards the copy is the profile's).
///
/// Under enforced containment the provider may write the dedicated directory (not the
/// user's profile), plus the user's login when it is shared.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Profile(Kind);

#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum Kind {
    #[default]
    Native,
    Dedicated(ClonedProfile),
}

/// A dedicated profile that carries parts of the user's own ([`Profile::clone_native`]);
/// converts into a [`Profile`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClonedProfile {
    dir: PathBuf,
    link_auth: bool,
    copy_settings: bool,
    copy_mcp: bool,
}

impl ClonedProfile {
    /// Share the user's login: the driver's `auth` files are linked to the user's (or the
    /// CLI's credential store is pointed at the user's profile), so a token refresh in either
    /// profile is seen by both. The provider may then write the user's login files.
    pub fn link_auth(mut self) -> Self {
        self.link_auth = true;
        self
    }

    /// Copy the user's settings files into the profile when it lacks them.
    pub fn copy_settings(mut self) -> Self {
        self.copy_settings = true;
        self
    }

    /// Copy the user's MCP configuration into the profile when it lacks it.
    pub fn copy_mcp(mut self) -> Self {
        self.copy_mcp = true;
        self
    }

    /// The parts asked for, with the builder call that asked.
    fn parts(&self) -> Vec<(ProfilePart, &'static str)> {
        [
            (self.link_auth, ProfilePart::Auth, "link_auth"),
            (self.copy_settings, ProfilePart::Settings, "copy_settings"),
            (self.copy_mcp, ProfilePart::Mcp, "copy_mcp"),
        ]
        .into_iter()
        .filter(|(asked, ..)| *asked)
        .map(|(_, part, call)| (part, call))
        .collect()
    }
}

impl From<ClonedProfile> for Profile {
    fn from(c: ClonedProfile) -> Profile {
        Profile(Kind::Dedicated(c))
    }
}

impl Profile {
    /// The user's own profile (today's behaviour, the default).
    pub fn native() -> Profile {
        Profile(Kind::Native)
    }

    /// An empty profile of the agent's own in `dir` (absolute; created 0700 when missing).
    pub fn dedicated(dir: impl Into<PathBuf>) -> Profile {
        Profile(Kind::Dedicated(ClonedProfile {
            dir: dir.into(),
            ..ClonedProfile::default()
        }))
    }

    /// A profile of the agent's own in `dir` that carries parts of the user's own; choose
    /// them with [`ClonedProfile::link_auth`], [`copy_settings`](ClonedProfile::copy_settings)
    /// and [`copy_mcp`](ClonedProfile::copy_mcp).
    pub fn clone_native(dir: impl Into<PathBuf>) -> ClonedProfile {
        ClonedProfile {
            dir: dir.into(),
            ..ClonedProfile::default()
        }
    }

    /// The dedicated directory (`None` for the user's own profile).
    pub fn dir(&self) -> Option<&Path> {
        match &self.0 {
            Kind::Native => None,
            Kind::Dedicated(c) => Some(&c.dir),
        }
    }

    /// Whether this is the user's own profile.
    pub fn is_native(&self) -> bool {
        matches!(self.0, Kind::Native)
    }

    /// Whether the user's login is shared ([`ClonedProfile::link_auth`]).
    pub fn links_auth(&self) -> bool {
        matches!(&self.0, Kind::Dedicated(c) if c.link_auth)
    }
}

/// What a file of a dedicated profile is, compared with what was asked
/// ([`ProfileFileState::observed`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
#[non_exhaustive]
pub enum Observed {
    /// Nothing there yet ([`Agent::sync_profile`](crate::Agent::sync_profile) or the next run
    /// makes it).
    Missing,
    /// A link to the user's file, as asked.
    Linked,
    /// A link to somewhere else (the next sync points it at the user's file).
    LinkedElsewhere {
        /// Where it points.
        to: PathBuf,
    },
    /// A regular file where the link belongs: the CLI replaced the link (its contents may be
    /// newer than the user's). Syncing refuses to replace it.
    Replaced,
    /// The copy is there (the profile's own from now on).
    Present,
    /// The user's file to carry does not exist.
    SourceMissing,
}

/// One file a dedicated profile carries, observed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProfileFileState {
    /// What it holds.
    pub part: ProfilePart,
    /// How it is carried.
    pub carry: Carry,
    /// The user's file.
    pub source: PathBuf,
    /// Its place in the dedicated profile.
    pub target: PathBuf,
    /// What is there.
    pub observed: Observed,
}

/// An agent's profile: what was asked and what is on disk
/// ([`Agent::profile_state`](crate::Agent::profile_state)).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProfileState {
    /// The dedicated directory (`None`: the user's own profile, nothing to observe).
    pub dir: Option<PathBuf>,
    /// The dedicated directory exists.
    pub dir_exists: bool,
    /// The variable the host sets to the directory (the driver's config-dir variable).
    pub variable: Option<String>,
    /// The user's own profile directory.
    pub native_dir: Option<PathBuf>,
    /// The files the profile carries, each observed.
    pub files: Vec<ProfileFileState>,
    /// The user's login is shared through the CLI's credential-store variable, which the
    /// host sets to this directory (the user's profile).
    pub shared_auth_store: Option<(String, PathBuf)>,
}

impl ProfileState {
    /// Everything asked for is on disk as asked (always true for the user's own profile).
    pub fn in_sync(&self) -> bool {
        self.dir.is_none()
            || (self.dir_exists
                && self
                    .files
                    .iter()
                    .all(|f| matches!(f.observed, Observed::Linked | Observed::Present)))
    }
}

/// What a run needs from a dedicated profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResolvedProfile {
    /// The canonical profile directory.
    pub dir: PathBuf,
    /// Variables the host sets (the config-dir variable; the credential-store variable when
    /// the login is shared through it).
    pub env: Vec<(String, String)>,
    /// Paths the provider may read and write besides its workspace: the profile directory,
    /// linked user files, the user's profile directory for a shared credential store.
    pub read_write: Vec<PathBuf>,
    /// The login is shared through the credential-store variable.
    pub shared_auth: bool,
    /// What a thread's fingerprint records (the directory and the variable).
    pub fingerprint: String,
}

/// Where things are for one profile and spec (no file system writes).
struct Layout<'a> {
    spec: &'a ProfileSpec,
    wanted: &'a ClonedProfile,
    native: PathBuf,
    /// The caller's environment set the config-dir variable (the CLI's non-default layout).
    native_from_env: bool,
    home: Option<PathBuf>,
}

/// One file to carry: its part, the call that asked, the user's file, its place, how.
struct Planned {
    part: ProfilePart,
    asked: &'static str,
    source: PathBuf,
    /// `source` is a default-layout file beside the profile (under HOME), not inside it.
    beside: bool,
    target: PathBuf,
    carry: Carry,
}

impl<'a> Layout<'a> {
    fn new(
        driver: &str,
        wanted: &'a ClonedProfile,
        spec: Option<&'a ProfileSpec>,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> Result<Layout<'a>, ProfileError> {
        let spec = spec.ok_or_else(|| ProfileError::Unsupported {
            driver: driver.to_owned(),
        })?;
        if !wanted.dir.is_absolute() {
            return Err(ProfileError::RelativeDir {
                path: wanted.dir.clone(),
            });
        }
        let absolute = |name: &str| {
            env(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        let home = absolute("HOME");
        let (native, native_from_env) = match absolute(&spec.config_dir_variable) {
            Some(dir) => (dir, true),
            None => (
                home.as_ref()
                    .ok_or_else(|| ProfileError::NoNativeProfile {
                        reason: format!(
                            "neither {} nor HOME is set to an absolute path",
                            spec.config_dir_variable
                        ),
                    })?
                    .join(&spec.native_dir),
                false,
            ),
        };
        Ok(Layout {
            spec,
            wanted,
            native,
            native_from_env,
            home,
        })
    }

    /// The files to carry, in the spec's order; a part asked for with nothing to carry it
    /// is an error.
    fn planned(&self, driver: &str) -> Result<Vec<Planned>, ProfileError> {
        let mut out = Vec::new();
        for (part, asked) in self.wanted.parts() {
            if part == ProfilePart::Auth && self.spec.auth_store_variable.is_some() {
                continue;
            }
            let files: Vec<_> = self.spec.files.iter().filter(|f| f.part == part).collect();
            if files.is_empty() {
                return Err(ProfileError::PartNotDeclared {
                    driver: driver.to_owned(),
                    part,
                    asked,
                });
            }
            for file in files {
                let (source, beside) =
                    match (&file.default_source, &self.home, self.native_from_env) {
                        (Some(rel), Some(home), false) => (home.join(rel), true),
                        _ => (self.native.join(&file.source), false),
                    };
                out.push(Planned {
                    part,
                    asked,
                    source,
                    beside,
                    target: self.wanted.dir.join(&file.target),
                    carry: file.carry,
                });
            }
        }
        Ok(out)
    }

    /// The credential-store variable and the user's profile, when the login is shared
    /// through it.
    fn auth_store(&self) -> Option<(String, PathBuf)> {
        match &self.spec.auth_store_variable {
            Some(var) if self.wanted.link_auth => Some((var.clone(), self.native.clone())),
            _ => None,
        }
    }
}

/// What is at `target` for a file carried as `carry` from `source`.
fn observe_file(source: &Path, target: &Path, carry: Carry) -> Observed {
    let source_exists = source.exists();
    match (std::fs::symlink_metadata(target), carry) {
        (Err(_), _) if !source_exists => Observed::SourceMissing,
        (Err(_), _) => Observed::Missing,
        (Ok(meta), Carry::Link) if meta.file_type().is_symlink() => {
            match std::fs::read_link(target) {
                Ok(to) if to == source => Observed::Linked,
                Ok(to) => Observed::LinkedElsewhere { to },
                Err(_) => Observed::LinkedElsewhere { to: PathBuf::new() },
            }
        }
        (Ok(_), Carry::Link) => Observed::Replaced,
        (Ok(_), Carry::Copy) => Observed::Present,
    }
}

/// Observe `profile` against the driver's spec; writes nothing.
pub(crate) fn observe(
    driver: &str,
    profile: &Profile,
    spec: Option<&ProfileSpec>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<ProfileState, ProfileError> {
    let Kind::Dedicated(wanted) = &profile.0 else {
        return Ok(ProfileState {
            dir: None,
            dir_exists: false,
            variable: None,
            native_dir: None,
            files: Vec::new(),
            shared_auth_store: None,
        });
    };
    let layout = Layout::new(driver, wanted, spec, env)?;
    let files = layout
        .planned(driver)?
        .into_iter()
        .map(|p| ProfileFileState {
            observed: observe_file(&p.source, &p.target, p.carry),
            part: p.part,
            carry: p.carry,
            source: p.source,
            target: p.target,
        })
        .collect();
    Ok(ProfileState {
        dir: Some(wanted.dir.clone()),
        dir_exists: wanted.dir.is_dir(),
        variable: Some(layout.spec.config_dir_variable.clone()),
        native_dir: Some(layout.native.clone()),
        files,
        shared_auth_store: layout.auth_store(),
    })
}

/// Make `profile` as asked (idempotent; safe against concurrent makers of the same profile)
/// and return what a run needs; `None` for the user's own profile.
pub(crate) fn materialize(
    driver: &str,
    profile: &Profile,
    spec: Option<&ProfileSpec>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Option<ResolvedProfile>, ProfileError> {
    let Kind::Dedicated(wanted) = &profile.0 else {
        return Ok(None);
    };
    let layout = Layout::new(driver, wanted, spec, env)?;
    let planned = layout.planned(driver)?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ProfileError::Io { path, source }
    };
    create_private_dirs(&wanted.dir)?;
    let dir = wanted.dir.canonicalize().map_err(io(&wanted.dir))?;
    if layout
        .native
        .canonicalize()
        .is_ok_and(|native| native == dir)
    {
        return Err(ProfileError::SameAsNative { path: dir });
    }
    let mut read_write = vec![dir.clone()];
    let native_real = layout.native.canonicalize().ok();
    for p in &planned {
        if !p.source.exists() {
            return Err(ProfileError::SourceMissing {
                part: p.part,
                path: p.source.clone(),
                asked: p.asked,
            });
        }
        // What is linked, copied and granted is the file itself: a symlink in the user's
        // profile (which a CLI run with that profile could have planted) must not make the
        // host copy or grant a file elsewhere, such as a key under `~/.ssh`.
        let real = p.source.canonicalize().map_err(io(&p.source))?;
        let inside = native_real.as_ref().is_some_and(|n| real.starts_with(n))
            || (p.beside
                && std::fs::symlink_metadata(&p.source).is_ok_and(|m| !m.file_type().is_symlink()));
        if !inside {
            return Err(ProfileError::SourceOutside {
                path: p.source.clone(),
                resolved: real,
            });
        }
        if let Some(parent) = p.target.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        match p.carry {
            Carry::Link => {
                match observe_file(&p.source, &p.target, Carry::Link) {
                    Observed::Linked => {}
                    Observed::Replaced => {
                        return Err(ProfileError::Occupied {
                            path: p.target.clone(),
                            reason: format!(
                                "a regular file where the link to the user's {} file {} belongs \
                                 (the CLI may have replaced the link, and the file may hold a newer \
                                 login than the user's); move it away to link again",
                                p.part,
                                p.source.display()
                            ),
                        });
                    }
                    _ => replace_with_link(&p.source, &p.target)?,
                }
                read_write.push(real);
            }
            Carry::Copy => {
                if std::fs::symlink_metadata(&p.target).is_err() {
                    copy_new(&p.source, &p.target)?;
                }
            }
        }
    }
    let mut env_out = vec![(
        layout.spec.config_dir_variable.clone(),
        dir.display().to_string(),
    )];
    let shared = layout.auth_store();
    if let Some((var, native)) = &shared {
        if !native.is_dir() {
            return Err(ProfileError::SourceMissing {
                part: ProfilePart::Auth,
                path: native.clone(),
                asked: "link_auth",
            });
        }
        env_out.push((var.clone(), native.display().to_string()));
        read_write.push(native.clone());
    }
    let fingerprint = format!(
        "{}={}{}",
        layout.spec.config_dir_variable,
        dir.display(),
        if wanted.link_auth { " +auth" } else { "" }
    );
    Ok(Some(ResolvedProfile {
        dir,
        env: env_out,
        read_write,
        shared_auth: shared.is_some(),
        fingerprint,
    }))
}

/// Create `dir` and its missing parents; the directories made here are 0700.
fn create_private_dirs(dir: &Path) -> Result<(), ProfileError> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(ProfileError::Occupied {
                path: dir.to_path_buf(),
                reason: "not a directory".into(),
            });
        }
        Err(_) => {}
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|source| ProfileError::Io {
        path: dir.to_path_buf(),
        source,
    })
}

/// A temporary sibling name for `target`, unique to this process and call.
fn staging_name(target: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(
        ".{name}.adaptor-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Point `target` at `source` with a symbolic link, atomically (a link made beside it, then
/// renamed over what was there: nothing, or another link).
fn replace_with_link(source: &Path, target: &Path) -> Result<(), ProfileError> {
    let staging = staging_name(target);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ProfileError::Io { path, source }
    };
    #[cfg(unix)]
    std::os::unix::fs::symlink(source, &staging).map_err(io(&staging))?;
    #[cfg(not(unix))]
    return Err(ProfileError::Io {
        path: staging,
        source: std::io::Error::other("links need a Unix host"),
    });
    #[cfg(unix)]
    std::fs::rename(&staging, target).map_err(|e| {
        let _ = std::fs::remove_file(&staging);
        ProfileError::Io {
            path: target.to_path_buf(),
            source: e,
        }
    })
}

/// Copy `source` to `target` (0600) unless something appeared there meanwhile: a copy made
/// beside it, then linked into place without replacing (`hard_link` fails on an existing
/// name), so a racing maker's or the CLI's file is never overwritten.
fn copy_new(source: &Path, target: &Path) -> Result<(), ProfileError> {
    let staging = staging_name(target);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ProfileError::Io { path, source }
    };
    let bytes = std::fs::read(source).map_err(io(source))?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options
        .open(&staging)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &bytes));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&staging);
        return Err(ProfileError::Io {
            path: staging,
            source: e,
        });
    }
    let linked = std::fs::hard_link(&staging, target);
    let removed = std::fs::remove_file(&staging);
    match linked {
        Ok(()) => removed.map_err(io(&staging)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => removed.map_err(io(&staging)),
        Err(e) => Err(ProfileError::Io {
            path: target.to_path_buf(),
            source: e,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::ProfileFile;

    fn spec(auth_store: bool) -> ProfileSpec {
        let file = |part, source: &str, default_source: Option<&str>, carry| ProfileFile {
            part,
            source: source.into(),
            default_source: default_source.map(str::to_owned),
            target: source.into(),
            carry,
        };
        ProfileSpec {
            config_dir_variable: "CODEX_HOME".into(),
            native_dir: ".codex".into(),
            files: vec![
                file(ProfilePart::Auth, "auth.json", None, Carry::Link),
                file(
                    ProfilePart::Settings,
                    "state.json",
                    Some(".state.json"),
                    Carry::Copy,
                ),
                file(ProfilePart::Settings, "config.toml", None, Carry::Copy),
            ],
            auth_store_variable: auth_store.then(|| "CLAUDE_SECURESTORAGE_CONFIG_DIR".into()),
        }
    }

    struct Home {
        _tmp: tempfile::TempDir,
        home: PathBuf,
    }

    fn home() -> Home {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(home.join(".codex")).unwrap();
        std::fs::write(home.join(".codex/auth.json"), "{\"token\":1}").unwrap();
        std::fs::write(home.join(".codex/config.toml"), "model = \"m\"\n").unwrap();
        std::fs::write(home.join(".state.json"), "{}").unwrap();
        Home { _tmp: tmp, home }
    }

    fn env_of(home: &Path) -> impl Fn(&str) -> Option<OsString> + '_ {
        move |name| (name == "HOME").then(|| home.as_os_str().to_owned())
    }

    #[test]
    fn native_is_nothing_to_make() {
        let h = home();
        let env = env_of(&h.home);
        assert_eq!(
            materialize("d", &Profile::native(), None, &env).unwrap(),
            None
        );
        assert!(
            observe("d", &Profile::native(), None, &env)
                .unwrap()
                .in_sync()
        );
    }

    #[test]
    fn a_clone_links_auth_copies_settings_and_reports_its_state() {
        let h = home();
        let env = env_of(&h.home);
        let dir = h.home.join("profiles/a");
        let profile: Profile = Profile::clone_native(&dir)
            .link_auth()
            .copy_settings()
            .into();
        let s = spec(false);
        let before = observe("d", &profile, Some(&s), &env).unwrap();
        assert!(!before.in_sync() && !before.dir_exists);
        assert!(before.files.iter().all(|f| f.observed == Observed::Missing));
        let resolved = materialize("d", &profile, Some(&s), &env).unwrap().unwrap();
        assert_eq!(resolved.dir, dir);
        assert_eq!(
            resolved.env,
            vec![("CODEX_HOME".into(), dir.display().to_string())]
        );
        assert!(
            resolved
                .read_write
                .contains(&h.home.join(".codex/auth.json"))
        );
        assert_eq!(
            std::fs::read_link(dir.join("auth.json")).unwrap(),
            h.home.join(".codex/auth.json")
        );
        // The default layout's file outside the profile dir is read from HOME.
        assert_eq!(
            std::fs::read_to_string(dir.join("state.json")).unwrap(),
            "{}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&dir), 0o700);
            assert_eq!(mode(&dir.join("config.toml")), 0o600);
        }
        let after = observe("d", &profile, Some(&s), &env).unwrap();
        assert!(after.in_sync(), "{after:?}");
        // The copy is the profile's own: a second sync leaves the CLI's changes alone.
        std::fs::write(dir.join("config.toml"), "model = \"changed\"\n").unwrap();
        materialize("d", &profile, Some(&s), &env).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("config.toml")).unwrap(),
            "model = \"changed\"\n"
        );
        // No staging files are left behind.
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.contains(".adaptor-")), "{names:?}");
    }

    #[test]
    fn a_replaced_link_is_reported_and_never_overwritten() {
        let h = home();
        let env = env_of(&h.home);
        let dir = h.home.join("p");
        let profile: Profile = Profile::clone_native(&dir).link_auth().into();
        let s = spec(false);
        materialize("d", &profile, Some(&s), &env).unwrap();
        std::fs::remove_file(dir.join("auth.json")).unwrap();
        std::fs::write(dir.join("auth.json"), "{\"token\":2}").unwrap();
        let state = observe("d", &profile, Some(&s), &env).unwrap();
        assert_eq!(state.files[0].observed, Observed::Replaced);
        let e = materialize("d", &profile, Some(&s), &env).unwrap_err();
        assert!(matches!(e, ProfileError::Occupied { .. }), "{e}");
        assert_eq!(
            std::fs::read_to_string(dir.join("auth.json")).unwrap(),
            "{\"token\":2}"
        );
        // A link pointing elsewhere is repaired.
        std::fs::remove_file(dir.join("auth.json")).unwrap();
        std::os::unix::fs::symlink("/nowhere", dir.join("auth.json")).unwrap();
        assert!(matches!(
            observe("d", &profile, Some(&s), &env).unwrap().files[0].observed,
            Observed::LinkedElsewhere { .. }
        ));
        materialize("d", &profile, Some(&s), &env).unwrap();
        assert!(observe("d", &profile, Some(&s), &env).unwrap().in_sync());
    }

    #[test]
    fn refusals_are_typed() {
        let h = home();
        let env = env_of(&h.home);
        let s = spec(false);
        let e = materialize("d", &Profile::dedicated("rel/dir"), Some(&s), &env).unwrap_err();
        assert!(matches!(e, ProfileError::RelativeDir { .. }), "{e}");
        let e = materialize("d", &Profile::dedicated(h.home.join("x")), None, &env).unwrap_err();
        assert!(matches!(e, ProfileError::Unsupported { .. }), "{e}");
        let mcp: Profile = Profile::clone_native(h.home.join("x")).copy_mcp().into();
        let e = materialize("d", &mcp, Some(&s), &env).unwrap_err();
        assert!(
            matches!(
                e,
                ProfileError::PartNotDeclared {
                    part: ProfilePart::Mcp,
                    asked: "copy_mcp",
                    ..
                }
            ),
            "{e}"
        );
        let native = Profile::dedicated(h.home.join(".codex"));
        let e = materialize("d", &native, Some(&s), &env).unwrap_err();
        assert!(matches!(e, ProfileError::SameAsNative { .. }), "{e}");
        std::fs::remove_file(h.home.join(".codex/auth.json")).unwrap();
        let auth: Profile = Profile::clone_native(h.home.join("y")).link_auth().into();
        let e = materialize("d", &auth, Some(&s), &env).unwrap_err();
        assert!(
            matches!(
                e,
                ProfileError::SourceMissing {
                    part: ProfilePart::Auth,
                    ..
                }
            ),
            "{e}"
        );
        let none = |_: &str| None;
        let e =
            materialize("d", &Profile::dedicated(h.home.join("z")), Some(&s), &none).unwrap_err();
        assert!(matches!(e, ProfileError::NoNativeProfile { .. }), "{e}");
        std::fs::write(h.home.join("file"), "").unwrap();
        let e = materialize(
            "d",
            &Profile::dedicated(h.home.join("file")),
            Some(&s),
            &env,
        )
        .unwrap_err();
        assert!(matches!(e, ProfileError::Occupied { .. }), "{e}");
    }

    #[test]
    fn a_symlink_out_of_the_users_profile_is_neither_copied_nor_granted() {
        let h = home();
        let env = env_of(&h.home);
        let secret = h.home.join(".ssh/id_ed25519");
        std::fs::create_dir_all(secret.parent().unwrap()).unwrap();
        std::fs::write(&secret, "PRIVATE KEY").unwrap();
        for (name, profile) in [
            (
                "auth.json",
                Profile::clone_native(h.home.join("l")).link_auth(),
            ),
            (
                "config.toml",
                Profile::clone_native(h.home.join("c")).copy_settings(),
            ),
        ] {
            let planted = h.home.join(".codex").join(name);
            std::fs::remove_file(&planted).unwrap();
            std::os::unix::fs::symlink(&secret, &planted).unwrap();
            let profile: Profile = profile.into();
            let e = materialize("d", &profile, Some(&spec(false)), &env).unwrap_err();
            assert!(
                matches!(&e, ProfileError::SourceOutside { resolved, .. } if *resolved == secret),
                "{name}: {e}"
            );
            std::fs::remove_file(&planted).unwrap();
            std::fs::write(&planted, "{}").unwrap();
        }
        assert!(!h.home.join("c/config.toml").exists(), "nothing was copied");
        // A link to a file inside the profile is the file itself: fine.
        std::fs::write(h.home.join(".codex/real.json"), "{}").unwrap();
        std::fs::remove_file(h.home.join(".codex/auth.json")).unwrap();
        std::os::unix::fs::symlink("real.json", h.home.join(".codex/auth.json")).unwrap();
        let ok: Profile = Profile::clone_native(h.home.join("ok")).link_auth().into();
        let resolved = materialize("d", &ok, Some(&spec(false)), &env)
            .unwrap()
            .unwrap();
        assert!(
            resolved
                .read_write
                .contains(&h.home.join(".codex/real.json"))
        );
    }

    #[test]
    fn a_shared_credential_store_is_a_variable_and_a_grant() {
        let h = home();
        let env = env_of(&h.home);
        let dir = h.home.join("shared");
        let profile: Profile = Profile::clone_native(&dir).link_auth().into();
        let resolved = materialize("d", &profile, Some(&spec(true)), &env)
            .unwrap()
            .unwrap();
        assert!(resolved.shared_auth);
        assert!(resolved.env.contains(&(
            "CLAUDE_SECURESTORAGE_CONFIG_DIR".into(),
            h.home.join(".codex").display().to_string()
        )));
        assert!(resolved.read_write.contains(&h.home.join(".codex")));
        assert!(!dir.join("auth.json").exists(), "nothing is linked");
        // The caller's own variable moves the user's profile.
        let custom = h.home.join("custom");
        std::fs::create_dir_all(&custom).unwrap();
        let env2 = |name: &str| match name {
            "HOME" => Some(h.home.as_os_str().to_owned()),
            "CODEX_HOME" => Some(custom.as_os_str().to_owned()),
            _ => None,
        };
        let state = observe("d", &profile, Some(&spec(true)), &env2).unwrap();
        assert_eq!(state.native_dir.as_deref(), Some(custom.as_path()));
    }

    #[test]
    fn concurrent_makers_of_one_profile_agree() {
        let h = home();
        let dir = h.home.join("race");
        let profile: Profile = Profile::clone_native(&dir)
            .link_auth()
            .copy_settings()
            .into();
        let s = spec(false);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    let env = env_of(&h.home);
                    materialize("d", &profile, Some(&s), &env).unwrap();
                });
            }
        });
        let env = env_of(&h.home);
        assert!(observe("d", &profile, Some(&s), &env).unwrap().in_sync());
    }
}
