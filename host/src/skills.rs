//! Skills: what a run's CLI may load as `SKILL.md` directories, and the materializer that
//! turns the caller's sources into a checked, content-addressed set on disk.
//!
//! Owns: the [`Skill`] sources (a directory, inline `SKILL.md`, an archive, a key resolved by
//! the caller's [`SkillProvider`]), the limits ([`SkillLimits`]) and their typed refusals
//! ([`SkillError`], each naming the skill and the entry), merging a run's skills (keys must
//! agree on content), and writing the set under the skill cache
//! (`<cache>/sets/<fingerprint>/<key>/…`), where the provider reads it (read and execute,
//! never write, under the run's confinement).
//!
//! Every source is read into memory first and checked as a whole — paths relative and
//! inside (no `..`, no absolute paths, no backslashes), symlinks only to entries inside the
//! skill, no device files, FIFOs or hard links, sizes and entry counts within the limits, a
//! `SKILL.md` at the root — and only then written. A refusal stops the run before anything is
//! launched. A set already in the cache is verified against its fingerprint before reuse
//! and rewritten when it differs.
//!
//! Must not: decide how a CLI reads skills (the driver does, from the directories in its
//! request), or spawn anything.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use sha2::{Digest, Sha256};

/// Archives are read into memory at most up to this size, whatever the limits say.
pub const MAX_ARCHIVE_READ: u64 = 256 << 20;

/// One skill a run's CLI should be able to load: a directory holding `SKILL.md` (and any
/// files it refers to), named by its key.
///
/// Keys are 1 to 64 characters of lowercase ASCII letters, digits and `-` (the skill names
/// Claude Code and Codex accept); the key is the skill's directory name in the set.
#[derive(Clone, PartialEq, Eq)]
pub struct Skill(Source);

#[derive(Clone, PartialEq, Eq)]
enum Source {
    Dir(PathBuf),
    Inline { key: String, skill_md: String },
    Archive { key: String, bytes: Arc<[u8]> },
    Key(String),
}

impl fmt::Debug for Skill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Source::Dir(path) => f.debug_tuple("Skill::dir").field(path).finish(),
            Source::Inline { key, skill_md } => f
                .debug_struct("Skill::inline")
                .field("key", key)
                .field("skill_md_bytes", &skill_md.len())
                .finish(),
            Source::Archive { key, bytes } => f
                .debug_struct("Skill::archive")
                .field("key", key)
                .field("bytes", &bytes.len())
                .finish(),
            Source::Key(key) => f.debug_tuple("Skill::key").field(key).finish(),
        }
    }
}

impl Skill {
    /// A skill directory on disk; its key is the directory's name. It is read (and checked)
    /// when a run starts, so later edits reach later runs.
    pub fn dir(path: impl Into<PathBuf>) -> Skill {
        Skill(Source::Dir(path.into()))
    }

    /// A skill made of one `SKILL.md` with these contents.
    pub fn inline(key: impl Into<String>, skill_md: impl Into<String>) -> Skill {
        Skill(Source::Inline {
            key: key.into(),
            skill_md: skill_md.into(),
        })
    }

    /// A skill packed as a zip, tar or gzip-compressed tar archive (recognised by its
    /// contents, not a file name). `SKILL.md` sits at the archive's root or inside its one
    /// top-level directory. The archive is read now (at most [`MAX_ARCHIVE_READ`] bytes) and
    /// checked when a run uses it.
    pub fn archive(key: impl Into<String>, reader: impl Read) -> Result<Skill, SkillError> {
        let key = key.into();
        let mut bytes = Vec::new();
        reader
            .take(MAX_ARCHIVE_READ + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| SkillError::Read {
                key: key.clone(),
                path: PathBuf::from("<archive>"),
                source,
            })?;
        if bytes.len() as u64 > MAX_ARCHIVE_READ {
            return Err(SkillError::ArchiveTooLarge {
                key,
                limit: MAX_ARCHIVE_READ,
            });
        }
        Ok(Skill(Source::Archive {
            key,
            bytes: bytes.into(),
        }))
    }

    /// A skill the agent's [`SkillProvider`] resolves by key when a run starts.
    pub fn key(key: impl Into<String>) -> Skill {
        Skill(Source::Key(key.into()))
    }

    /// The skill's key (for a directory: its name; `None` when the path has none).
    pub fn key_name(&self) -> Option<&str> {
        match &self.0 {
            Source::Dir(path) => path.file_name().and_then(|n| n.to_str()),
            Source::Inline { key, .. } | Source::Archive { key, .. } | Source::Key(key) => {
                Some(key)
            }
        }
    }
}

/// Resolves [`Skill::key`] skills: the caller's catalogue (a registry, a database, a
/// directory of approved skills). Set with
/// [`AgentBuilder::skill_provider`](crate::AgentBuilder::skill_provider).
pub trait SkillProvider: Send + Sync + fmt::Debug {
    /// The skill for `key`: a directory, inline or archive skill whose key is `key`. An
    /// error stops the run before launch ([`SkillError::Provider`]).
    fn resolve<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Skill, String>>;
}

/// Bounds on what a skill may contain (per skill).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkillLimits {
    /// Largest archive, in bytes, before it is unpacked (default 16 MiB).
    pub max_archive_bytes: u64,
    /// Largest single file, in bytes (default 4 MiB).
    pub max_file_bytes: u64,
    /// Largest sum of file sizes, in bytes (default 32 MiB).
    pub max_total_bytes: u64,
    /// Most entries (files, directories, symlinks; default 1000).
    pub max_entries: usize,
}

impl Default for SkillLimits {
    fn default() -> Self {
        SkillLimits {
            max_archive_bytes: 16 << 20,
            max_file_bytes: 4 << 20,
            max_total_bytes: 32 << 20,
            max_entries: 1000,
        }
    }
}

/// Why a run's skills could not be resolved or materialized. Nothing was launched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SkillError {
    /// The key is not 1–64 characters of `a-z`, `0-9` and `-`.
    #[error("skill key {key:?} is not 1 to 64 characters of a-z, 0-9 and `-`")]
    BadKey {
        /// The key.
        key: String,
    },
    /// A [`Skill::key`] was used but the agent has no [`SkillProvider`].
    #[error("skill `{key}` is a key, but the agent has no skill provider to resolve it")]
    NoProvider {
        /// The key.
        key: String,
    },
    /// The provider failed or returned something else than a skill named `key`.
    #[error("the skill provider could not resolve `{key}`: {message}")]
    Provider {
        /// The key.
        key: String,
        /// What went wrong.
        message: String,
    },
    /// Two skills of the run share a key but not their contents.
    #[error(
        "two skills are named `{key}` with different contents ({first} and {second}); a key names one skill"
    )]
    Conflict {
        /// The key.
        key: String,
        /// The first one's fingerprint.
        first: String,
        /// The other one's fingerprint.
        second: String,
    },
    /// Reading the source failed (a missing directory, an unreadable file).
    #[error("skill `{key}`: cannot read {}: {source}", path.display())]
    Read {
        /// The key.
        key: String,
        /// What could not be read.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The archive is larger than [`SkillLimits::max_archive_bytes`].
    #[error("skill `{key}`: the archive is larger than {limit} bytes")]
    ArchiveTooLarge {
        /// The key.
        key: String,
        /// The limit.
        limit: u64,
    },
    /// The archive is not a zip, tar or tar.gz, or it is damaged.
    #[error("skill `{key}`: not a readable zip, tar or tar.gz archive: {reason}")]
    BadArchive {
        /// The key.
        key: String,
        /// What the reader said.
        reason: String,
    },
    /// Archives need the `skill-archives` feature.
    #[error("skill `{key}`: archives need the `skill-archives` feature of agent-adaptor")]
    ArchivesDisabled {
        /// The key.
        key: String,
    },
    /// An entry's path is absolute, has `..`, a backslash, is not UTF-8, or goes through a
    /// symlink.
    #[error("skill `{key}`: entry {entry:?} is refused: {reason}")]
    UnsafePath {
        /// The key.
        key: String,
        /// The entry as the source names it.
        entry: String,
        /// Why.
        reason: &'static str,
    },
    /// A symlink points outside the skill (or is absolute).
    #[error("skill `{key}`: symlink {entry:?} points outside the skill (to {target:?})")]
    SymlinkOut {
        /// The key.
        key: String,
        /// The symlink.
        entry: String,
        /// Its target.
        target: String,
    },
    /// A device file, FIFO, socket or hard link.
    #[error(
        "skill `{key}`: entry {entry:?} is a {kind}; only files, directories and symlinks are allowed"
    )]
    SpecialFile {
        /// The key.
        key: String,
        /// The entry.
        entry: String,
        /// What it is.
        kind: &'static str,
    },
    /// A file is larger than [`SkillLimits::max_file_bytes`].
    #[error("skill `{key}`: file {entry:?} is larger than {limit} bytes")]
    FileTooLarge {
        /// The key.
        key: String,
        /// The file.
        entry: String,
        /// The limit.
        limit: u64,
    },
    /// The files add up to more than [`SkillLimits::max_total_bytes`].
    #[error("skill `{key}`: its files add up to more than {limit} bytes (at {entry:?})")]
    TooLarge {
        /// The key.
        key: String,
        /// The entry that crossed the limit.
        entry: String,
        /// The limit.
        limit: u64,
    },
    /// More entries than [`SkillLimits::max_entries`].
    #[error("skill `{key}`: more than {limit} entries (at {entry:?})")]
    TooManyEntries {
        /// The key.
        key: String,
        /// The entry that crossed the limit.
        entry: String,
        /// The limit.
        limit: usize,
    },
    /// The same path appears twice.
    #[error("skill `{key}`: entry {entry:?} appears twice")]
    DuplicateEntry {
        /// The key.
        key: String,
        /// The entry.
        entry: String,
    },
    /// No `SKILL.md` at the skill's root.
    #[error("skill `{key}`: no SKILL.md at its root")]
    MissingSkillMd {
        /// The key.
        key: String,
    },
    /// Writing the set into the skill cache failed.
    #[error("cannot write the skill set to {}: {source}", path.display())]
    Cache {
        /// Where.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// One skill of a materialized set, as the CLI will see it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SkillInfo {
    /// The key (its directory name).
    pub key: String,
    /// `name:` from `SKILL.md`'s front matter, if it has one.
    pub name: Option<String>,
    /// `description:` from `SKILL.md`'s front matter, if it has one.
    pub description: Option<String>,
    /// `sha256:<hex>` over the skill's tree (paths, kinds, modes, contents).
    pub fingerprint: String,
    /// Where the CLI reads it.
    pub dir: PathBuf,
}

/// The set's manifest, relative to its root: the set is laid out as a plugin bundle
/// (`.claude-plugin/plugin.json` + `skills/<key>/SKILL.md`), the layout Claude Code's
/// `--plugin-dir` loads and other CLIs' plugin loaders recognise.
pub(crate) const PLUGIN_MANIFEST: &str = ".claude-plugin/plugin.json";

/// The manifest's contents: the bundle is called `adaptor` (Claude Code shows its skills as
/// `adaptor:<key>`).
const PLUGIN_MANIFEST_JSON: &[u8] =
    br#"{"name":"adaptor","description":"Skills the agent-adaptor host materialized for this run"}"#;

/// A run's materialized skills: `<root>/skills/<key>/…` per skill, plus the bundle's
/// manifest (see [`PLUGIN_MANIFEST`]). Every skill directory of a run shares the one
/// `<root>/skills` parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SkillSet {
    /// `<cache>/sets/<fingerprint>`.
    pub root: PathBuf,
    /// The skills, sorted by key.
    pub skills: Vec<SkillInfo>,
}

impl SkillSet {
    /// The skill directories, as the driver's request carries them.
    pub fn dirs(&self) -> Vec<String> {
        self.skills
            .iter()
            .map(|s| s.dir.display().to_string())
            .collect()
    }

    /// Thread-fingerprint entries: `key=fingerprint` per skill.
    pub fn fingerprint_entries(&self) -> Vec<String> {
        self.skills
            .iter()
            .map(|s| format!("{}={}", s.key, s.fingerprint))
            .collect()
    }
}

/// Where skill sets are written unless the agent names a directory: `$ADAPTOR_SKILL_CACHE`,
/// else `<the user's cache dir>/agent-adaptor/skills`.
pub(crate) fn default_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("ADAPTOR_SKILL_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("agent-adaptor")
        .join("skills")
}

/// Whether `key` is a valid skill key.
pub(crate) fn valid_key(key: &str) -> bool {
    (1..=64).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Resolve, check and write the run's skills. `None` when there are none.
pub(crate) async fn materialize(
    skills: &[Skill],
    provider: Option<&Arc<dyn SkillProvider>>,
    cache: &Path,
    limits: SkillLimits,
) -> Result<Option<SkillSet>, SkillError> {
    if skills.is_empty() {
        return Ok(None);
    }
    let mut concrete = Vec::with_capacity(skills.len());
    for skill in skills {
        match &skill.0 {
            Source::Key(key) => {
                if !valid_key(key) {
                    return Err(SkillError::BadKey { key: key.clone() });
                }
                let provider =
                    provider.ok_or_else(|| SkillError::NoProvider { key: key.clone() })?;
                let resolved =
                    provider
                        .resolve(key)
                        .await
                        .map_err(|message| SkillError::Provider {
                            key: key.clone(),
                            message,
                        })?;
                match (&resolved.0, resolved.key_name()) {
                    (Source::Key(_), _) => {
                        return Err(SkillError::Provider {
                            key: key.clone(),
                            message: "it returned another key, not a skill".into(),
                        });
                    }
                    (_, Some(k)) if k == key => concrete.push(resolved),
                    (_, other) => {
                        return Err(SkillError::Provider {
                            key: key.clone(),
                            message: format!("it returned a skill named {other:?}"),
                        });
                    }
                }
            }
            _ => concrete.push(skill.clone()),
        }
    }
    let cache = cache.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut trees: BTreeMap<String, Tree> = BTreeMap::new();
        for skill in &concrete {
            let tree = Tree::read(skill, limits)?;
            if let Some(existing) = trees.get(&tree.key) {
                if existing.fingerprint != tree.fingerprint {
                    return Err(SkillError::Conflict {
                        key: tree.key.clone(),
                        first: existing.fingerprint.clone(),
                        second: tree.fingerprint.clone(),
                    });
                }
                continue;
            }
            trees.insert(tree.key.clone(), tree);
        }
        write_set(&cache, trees.into_values().collect())
    })
    .await
    .map_err(|e| SkillError::Cache {
        path: PathBuf::from("<skill materializer task>"),
        source: std::io::Error::other(e.to_string()),
    })?
    .map(Some)
}

/// One entry of a skill.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir,
    File { bytes: Vec<u8>, executable: bool },
    Link(String),
}

/// A skill read into memory and checked.
#[derive(Debug)]
struct Tree {
    key: String,
    /// Relative `/`-separated paths → entries (parents present as `Dir`).
    entries: BTreeMap<String, Node>,
    fingerprint: String,
}

/// Collects entries with the limits applied.
struct Builder {
    key: String,
    limits: SkillLimits,
    entries: BTreeMap<String, Node>,
    seen: usize,
    total: u64,
}

impl Builder {
    fn new(key: &str, limits: SkillLimits) -> Result<Builder, SkillError> {
        if !valid_key(key) {
            return Err(SkillError::BadKey { key: key.into() });
        }
        Ok(Builder {
            key: key.into(),
            limits,
            entries: BTreeMap::new(),
            seen: 0,
            total: 0,
        })
    }

    fn unsafe_path(&self, entry: &str, reason: &'static str) -> SkillError {
        SkillError::UnsafePath {
            key: self.key.clone(),
            entry: entry.into(),
            reason,
        }
    }

    /// Check a raw entry name and return its normalised form (`None` for the root itself).
    fn normalise(&self, raw: &str) -> Result<Option<String>, SkillError> {
        crate::relpath::normalise(raw).map_err(|reason| self.unsafe_path(raw, reason))
    }

    /// Count an entry against the entry limit.
    fn count(&mut self, raw: &str) -> Result<(), SkillError> {
        self.seen += 1;
        if self.seen > self.limits.max_entries {
            return Err(SkillError::TooManyEntries {
                key: self.key.clone(),
                entry: raw.into(),
                limit: self.limits.max_entries,
            });
        }
        Ok(())
    }

    /// Check a file's declared size before reading it.
    fn check_size(&mut self, raw: &str, size: u64) -> Result<(), SkillError> {
        if size > self.limits.max_file_bytes {
            return Err(SkillError::FileTooLarge {
                key: self.key.clone(),
                entry: raw.into(),
                limit: self.limits.max_file_bytes,
            });
        }
        self.total = self.total.saturating_add(size);
        if self.total > self.limits.max_total_bytes {
            return Err(SkillError::TooLarge {
                key: self.key.clone(),
                entry: raw.into(),
                limit: self.limits.max_total_bytes,
            });
        }
        Ok(())
    }

    /// Read a file's contents, never more than the limit allows (a declared size can lie).
    fn read_bounded(&mut self, raw: &str, reader: impl Read) -> Result<Vec<u8>, SkillError> {
        let mut bytes = Vec::new();
        reader
            .take(self.limits.max_file_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| SkillError::BadArchive {
                key: self.key.clone(),
                reason: format!("reading {raw:?}: {e}"),
            })?;
        if bytes.len() as u64 > self.limits.max_file_bytes {
            return Err(SkillError::FileTooLarge {
                key: self.key.clone(),
                entry: raw.into(),
                limit: self.limits.max_file_bytes,
            });
        }
        Ok(bytes)
    }

    /// Add an entry (parents are added as directories; nothing may sit below a symlink).
    fn add(&mut self, raw: &str, node: Node) -> Result<(), SkillError> {
        let Some(path) = self.normalise(raw)? else {
            return match node {
                Node::Dir => Ok(()),
                _ => Err(self.unsafe_path(raw, "names the skill's root")),
            };
        };
        let mut prefix = String::new();
        let parts: Vec<&str> = path.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            match self.entries.get(&prefix) {
                Some(Node::Dir) => {}
                Some(Node::Link(_)) => return Err(self.unsafe_path(raw, "goes through a symlink")),
                Some(Node::File { .. }) => {
                    return Err(self.unsafe_path(raw, "goes through a file"));
                }
                None => {
                    self.entries.insert(prefix.clone(), Node::Dir);
                }
            }
        }
        if let Node::Link(target) = &node
            && link_escapes(parts.len() - 1, target)
        {
            return Err(SkillError::SymlinkOut {
                key: self.key.clone(),
                entry: raw.into(),
                target: target.clone(),
            });
        }
        match (self.entries.get(&path), &node) {
            (Some(Node::Dir), Node::Dir) => Ok(()),
            (Some(_), _) => Err(SkillError::DuplicateEntry {
                key: self.key.clone(),
                entry: raw.into(),
            }),
            (None, _) => {
                self.entries.insert(path, node);
                Ok(())
            }
        }
    }

    /// Finish: `SKILL.md` at the root (or inside the one top-level directory, which is then
    /// the root), and the fingerprint.
    fn finish(mut self) -> Result<Tree, SkillError> {
        if !matches!(self.entries.get("SKILL.md"), Some(Node::File { .. })) {
            let tops: Vec<&String> = self.entries.keys().filter(|k| !k.contains('/')).collect();
            let single = match tops.as_slice() {
                [top] if self.entries.get(*top) == Some(&Node::Dir) => Some((*top).clone()),
                _ => None,
            };
            let Some(top) = single else {
                return Err(SkillError::MissingSkillMd { key: self.key });
            };
            let prefix = format!("{top}/");
            if !matches!(
                self.entries.get(&format!("{prefix}SKILL.md")),
                Some(Node::File { .. })
            ) {
                return Err(SkillError::MissingSkillMd { key: self.key });
            }
            self.entries = std::mem::take(&mut self.entries)
                .into_iter()
                .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|s| (s.to_owned(), v)))
                .collect();
            // One level up now: a link that stayed inside the top directory only by
            // reaching its parent would leave the skill.
            for (path, node) in &self.entries {
                if let Node::Link(target) = node
                    && link_escapes(path.matches('/').count(), target)
                {
                    return Err(SkillError::SymlinkOut {
                        key: self.key.clone(),
                        entry: format!("{prefix}{path}"),
                        target: target.clone(),
                    });
                }
            }
        }
        let mut h = Sha256::new();
        let mut put = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_be_bytes());
            h.update(bytes);
        };
        put(b"adaptor/skill/v1");
        put(self.key.as_bytes());
        for (path, node) in &self.entries {
            put(path.as_bytes());
            match node {
                Node::Dir => put(b"d"),
                Node::File { bytes, executable } => {
                    put(if *executable { b"x" } else { b"f" });
                    put(bytes);
                }
                Node::Link(target) => {
                    put(b"l");
                    put(target.as_bytes());
                }
            }
        }
        Ok(Tree {
            key: self.key,
            entries: self.entries,
            fingerprint: format!("sha256:{}", hex::encode(h.finalize())),
        })
    }
}

impl Tree {
    /// Read and check a concrete (non-key) skill.
    fn read(skill: &Skill, limits: SkillLimits) -> Result<Tree, SkillError> {
        match &skill.0 {
            Source::Key(key) => Err(SkillError::NoProvider { key: key.clone() }),
            Source::Inline { key, skill_md } => {
                let mut b = Builder::new(key, limits)?;
                b.count("SKILL.md")?;
                b.check_size("SKILL.md", skill_md.len() as u64)?;
                b.add(
                    "SKILL.md",
                    Node::File {
                        bytes: skill_md.as_bytes().to_vec(),
                        executable: false,
                    },
                )?;
                b.finish()
            }
            Source::Dir(path) => {
                let key = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default()
                    .to_owned();
                let mut b = Builder::new(&key, limits)?;
                let meta = std::fs::metadata(path).map_err(|source| SkillError::Read {
                    key: key.clone(),
                    path: path.clone(),
                    source,
                })?;
                if !meta.is_dir() {
                    return Err(SkillError::Read {
                        key,
                        path: path.clone(),
                        source: std::io::Error::new(
                            std::io::ErrorKind::NotADirectory,
                            "not a directory",
                        ),
                    });
                }
                read_dir_into(&mut b, path, "")?;
                b.finish()
            }
            Source::Archive { key, bytes } => {
                let mut b = Builder::new(key, limits)?;
                if bytes.len() as u64 > limits.max_archive_bytes {
                    return Err(SkillError::ArchiveTooLarge {
                        key: key.clone(),
                        limit: limits.max_archive_bytes,
                    });
                }
                archive::read(&mut b, bytes)?;
                b.finish()
            }
        }
    }

    /// `name:` and `description:` from `SKILL.md`'s front matter.
    fn front_matter(&self) -> (Option<String>, Option<String>) {
        let Some(Node::File { bytes, .. }) = self.entries.get("SKILL.md") else {
            return (None, None);
        };
        let text = String::from_utf8_lossy(bytes);
        let mut lines = text.lines();
        if lines.next().map(str::trim_end) != Some("---") {
            return (None, None);
        }
        let (mut name, mut description) = (None, None);
        for line in lines {
            if line.trim_end() == "---" {
                break;
            }
            let unquote = |v: &str| v.trim().trim_matches('"').trim_matches('\'').to_owned();
            if let Some(v) = line.strip_prefix("name:") {
                name = Some(unquote(v));
            } else if let Some(v) = line.strip_prefix("description:") {
                description = Some(unquote(v));
            }
        }
        (name, description)
    }
}

/// Whether a symlink `depth` directories below the skill's root, pointing at `target`,
/// resolves (lexically) outside the skill. Absolute targets always do.
fn link_escapes(depth: usize, target: &str) -> bool {
    if target.starts_with('/') || target.contains('\\') || target.is_empty() {
        return true;
    }
    let mut depth = depth as i64;
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => depth -= 1,
            _ => depth += 1,
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

/// Walk a skill directory (symlinks are read, never followed).
fn read_dir_into(b: &mut Builder, dir: &Path, prefix: &str) -> Result<(), SkillError> {
    let key = b.key.clone();
    let read_err = |path: &Path, source| SkillError::Read {
        key: key.clone(),
        path: path.to_path_buf(),
        source,
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| read_err(dir, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| read_err(dir, e))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            return Err(b.unsafe_path(&path.display().to_string(), "name is not UTF-8"));
        };
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        b.count(&rel)?;
        let meta = std::fs::symlink_metadata(&path).map_err(|e| read_err(&path, e))?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            let target = std::fs::read_link(&path).map_err(|e| read_err(&path, e))?;
            let Some(target) = target.to_str() else {
                return Err(b.unsafe_path(&rel, "symlink target is not UTF-8"));
            };
            b.add(&rel, Node::Link(target.to_owned()))?;
        } else if kind.is_dir() {
            b.add(&rel, Node::Dir)?;
            read_dir_into(b, &path, &rel)?;
        } else if kind.is_file() {
            b.check_size(&rel, meta.len())?;
            let file = std::fs::File::open(&path).map_err(|e| read_err(&path, e))?;
            let bytes = b.read_bounded(&rel, file)?;
            b.add(
                &rel,
                Node::File {
                    bytes,
                    executable: executable(&meta),
                },
            )?;
        } else {
            return Err(SkillError::SpecialFile {
                key: b.key.clone(),
                entry: rel,
                kind: special_kind(&meta),
            });
        }
    }
    Ok(())
}

#[cfg(unix)]
fn executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn executable(_meta: &std::fs::Metadata) -> bool {
    false
}

#[cfg(unix)]
fn special_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_block_device() {
        "block device"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

#[cfg(not(unix))]
fn special_kind(_meta: &std::fs::Metadata) -> &'static str {
    "special file"
}

/// Archive readers (zip, tar, tar.gz), behind the `skill-archives` feature.
#[cfg(feature = "skill-archives")]
mod archive {
    use super::{Builder, Node, SkillError};
    use std::io::{Cursor, Read};

    pub(super) fn read(b: &mut Builder, bytes: &[u8]) -> Result<(), SkillError> {
        if bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(b"PK\x05\x06") {
            zip(b, bytes)
        } else if bytes.starts_with(&[0x1f, 0x8b]) {
            tar(b, flate2::read::GzDecoder::new(bytes))
        } else if bytes.len() >= 262 && &bytes[257..262] == b"ustar" {
            tar(b, bytes)
        } else {
            Err(SkillError::BadArchive {
                key: b.key.clone(),
                reason: "not a zip, tar or gzip file (checked by its first bytes)".into(),
            })
        }
    }

    fn bad(b: &Builder, e: impl std::fmt::Display) -> SkillError {
        SkillError::BadArchive {
            key: b.key.clone(),
            reason: e.to_string(),
        }
    }

    fn zip(b: &mut Builder, bytes: &[u8]) -> Result<(), SkillError> {
        let mut archive = ::zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| bad(b, e))?;
        for i in 0..archive.len() {
            let mut file = archive.by_index(i).map_err(|e| bad(b, e))?;
            let raw = String::from_utf8(file.name_raw().to_vec()).map_err(|e| {
                b.unsafe_path(&String::from_utf8_lossy(e.as_bytes()), "name is not UTF-8")
            })?;
            b.count(&raw)?;
            let mode = file.unix_mode().unwrap_or(0);
            let kind = mode & 0o170000;
            if file.is_dir() {
                b.add(&raw, Node::Dir)?;
            } else if kind == 0o120000 {
                let mut target = String::new();
                (&mut file)
                    .take(4096)
                    .read_to_string(&mut target)
                    .map_err(|_| b.unsafe_path(&raw, "symlink target is not UTF-8"))?;
                b.add(&raw, Node::Link(target))?;
            } else if kind == 0 || kind == 0o100000 {
                b.check_size(&raw, file.size())?;
                let bytes = b.read_bounded(&raw, &mut file)?;
                b.add(
                    &raw,
                    Node::File {
                        bytes,
                        executable: mode & 0o111 != 0,
                    },
                )?;
            } else {
                return Err(SkillError::SpecialFile {
                    key: b.key.clone(),
                    entry: raw,
                    kind: match kind {
                        0o060000 => "block device",
                        0o020000 => "character device",
                        0o010000 => "FIFO",
                        0o140000 => "socket",
                        _ => "special file",
                    },
                });
            }
        }
        Ok(())
    }

    fn tar(b: &mut Builder, reader: impl Read) -> Result<(), SkillError> {
        use ::tar::EntryType;
        let mut archive = ::tar::Archive::new(reader);
        for entry in archive.entries().map_err(|e| bad(b, e))? {
            let mut entry = entry.map_err(|e| bad(b, e))?;
            let raw = String::from_utf8(entry.path_bytes().to_vec()).map_err(|_| {
                b.unsafe_path(
                    &String::from_utf8_lossy(&entry.path_bytes()),
                    "name is not UTF-8",
                )
            })?;
            let kind = entry.header().entry_type();
            if matches!(kind, EntryType::XGlobalHeader | EntryType::XHeader) {
                continue;
            }
            b.count(&raw)?;
            match kind {
                EntryType::Directory => b.add(&raw, Node::Dir)?,
                EntryType::Regular | EntryType::Continuous => {
                    b.check_size(&raw, entry.header().size().map_err(|e| bad(b, e))?)?;
                    let mode = entry.header().mode().unwrap_or(0o644);
                    let bytes = b.read_bounded(&raw, &mut entry)?;
                    b.add(
                        &raw,
                        Node::File {
                            bytes,
                            executable: mode & 0o111 != 0,
                        },
                    )?;
                }
                EntryType::Symlink => {
                    let target = entry
                        .link_name_bytes()
                        .map(|t| String::from_utf8(t.to_vec()))
                        .transpose()
                        .map_err(|_| b.unsafe_path(&raw, "symlink target is not UTF-8"))?
                        .unwrap_or_default();
                    b.add(&raw, Node::Link(target))?;
                }
                other => {
                    return Err(SkillError::SpecialFile {
                        key: b.key.clone(),
                        entry: raw,
                        kind: match other {
                            EntryType::Link => "hard link",
                            EntryType::Char => "character device",
                            EntryType::Block => "block device",
                            EntryType::Fifo => "FIFO",
                            _ => "special entry",
                        },
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(not(feature = "skill-archives"))]
mod archive {
    use super::{Builder, SkillError};

    pub(super) fn read(b: &mut Builder, _bytes: &[u8]) -> Result<(), SkillError> {
        Err(SkillError::ArchivesDisabled { key: b.key.clone() })
    }
}

/// Write the set (or reuse it when an identical one is there).
fn write_set(cache: &Path, trees: Vec<Tree>) -> Result<SkillSet, SkillError> {
    let mut h = Sha256::new();
    h.update(b"adaptor/skill-set/v1\n");
    for tree in &trees {
        h.update(tree.key.as_bytes());
        h.update(b"=");
        h.update(tree.fingerprint.as_bytes());
        h.update(b"\n");
    }
    let set_id = hex::encode(h.finalize());
    let sets = cache.join("sets");
    let cache_err = |path: &Path, source| SkillError::Cache {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(&sets).map_err(|e| cache_err(&sets, e))?;
    let root = sets.join(&set_id[..32]);
    let set = |root: &Path| SkillSet {
        root: root.to_path_buf(),
        skills: trees
            .iter()
            .map(|t| {
                let (name, description) = t.front_matter();
                SkillInfo {
                    key: t.key.clone(),
                    name,
                    description,
                    fingerprint: t.fingerprint.clone(),
                    dir: root.join("skills").join(&t.key),
                }
            })
            .collect(),
    };
    if root.is_dir() {
        if matches_on_disk(&root, &trees) {
            return Ok(set(&root));
        }
        tracing::warn!(set = %root.display(), "a cached skill set differs from its fingerprint; rewriting it");
        std::fs::remove_dir_all(&root).map_err(|e| cache_err(&root, e))?;
    }
    let staging = sets.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        hex::encode(Sha256::digest(
            format!("{:?}", std::time::SystemTime::now()).as_bytes()
        ))[..12]
            .to_owned()
    ));
    let written = (|| -> std::io::Result<()> {
        std::fs::create_dir(&staging)?;
        std::fs::create_dir(staging.join(".claude-plugin"))?;
        std::fs::write(staging.join(PLUGIN_MANIFEST), PLUGIN_MANIFEST_JSON)?;
        std::fs::create_dir(staging.join("skills"))?;
        for tree in &trees {
            let base = staging.join("skills").join(&tree.key);
            std::fs::create_dir(&base)?;
            for (path, node) in &tree.entries {
                let target = base.join(path);
                match node {
                    Node::Dir => std::fs::create_dir_all(&target)?,
                    Node::File { bytes, executable } => {
                        std::fs::write(&target, bytes)?;
                        set_mode(&target, if *executable { 0o755 } else { 0o644 })?;
                    }
                    Node::Link(to) => symlink(to, &target)?,
                }
            }
        }
        std::fs::rename(&staging, &root)
    })();
    match written {
        Ok(()) => Ok(set(&root)),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            // Another host process wrote the same set first.
            if root.is_dir() && matches_on_disk(&root, &trees) {
                Ok(set(&root))
            } else {
                Err(cache_err(&root, e))
            }
        }
    }
}

/// Whether the set on disk holds exactly these trees (re-read and fingerprinted).
fn matches_on_disk(root: &Path, trees: &[Tree]) -> bool {
    let limits = SkillLimits {
        max_archive_bytes: u64::MAX,
        max_file_bytes: u64::MAX,
        max_total_bytes: u64::MAX,
        max_entries: usize::MAX,
    };
    if std::fs::read(root.join(PLUGIN_MANIFEST)).ok().as_deref() != Some(PLUGIN_MANIFEST_JSON) {
        return false;
    }
    let Ok(listed) = std::fs::read_dir(root.join("skills")) else {
        return false;
    };
    if listed.count() != trees.len() {
        return false;
    }
    trees.iter().all(|t| {
        Tree::read(&Skill::dir(root.join("skills").join(&t.key)), limits)
            .is_ok_and(|on_disk| on_disk.fingerprint == t.fingerprint)
    })
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_path: &Path, _mode: u32) -> std::io::Result<()> {
    Ok(())
}

#[cfg(unix)]
fn symlink(to: &str, at: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(to, at)
}

#[cfg(not(unix))]
fn symlink(_to: &str, at: &Path) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!(
            "symlinks in skills are not supported here ({})",
            at.display()
        ),
    ))
}

#[cfg(all(test, feature = "skill-archives"))]
mod tests {
    use super::*;
    use std::io::Write;

    const MD: &str = "---\nname: probe\ndescription: Probe things\n---\nbody\n";

    fn read(skill: &Skill) -> Result<Tree, SkillError> {
        Tree::read(skill, SkillLimits::default())
    }

    enum Entry<'a> {
        File(&'a str, &'a [u8], u32),
        Dir(&'a str),
        Link(&'a str, &'a str),
        Fifo(&'a str),
        Hard(&'a str, &'a str),
    }

    fn tar_bytes(entries: &[Entry<'_>]) -> Vec<u8> {
        let mut b = ::tar::Builder::new(Vec::new());
        for e in entries {
            let mut h = ::tar::Header::new_gnu();
            let (path, data): (&str, &[u8]) = match e {
                Entry::File(p, d, mode) => {
                    h.set_entry_type(::tar::EntryType::Regular);
                    h.set_mode(*mode);
                    (p, d)
                }
                Entry::Dir(p) => {
                    h.set_entry_type(::tar::EntryType::Directory);
                    h.set_mode(0o755);
                    (p, b"")
                }
                Entry::Link(p, to) | Entry::Hard(p, to) => {
                    h.set_entry_type(if matches!(e, Entry::Link(..)) {
                        ::tar::EntryType::Symlink
                    } else {
                        ::tar::EntryType::Link
                    });
                    h.set_link_name_literal(to).unwrap();
                    (p, b"")
                }
                Entry::Fifo(p) => {
                    h.set_entry_type(::tar::EntryType::Fifo);
                    (p, b"")
                }
            };
            h.set_size(data.len() as u64);
            // Raw names: `set_path` would refuse `..` itself, and the reader must too.
            let name = &mut h.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_cksum();
            b.append(&h, data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn zip_bytes(entries: &[Entry<'_>]) -> Vec<u8> {
        use ::zip::write::SimpleFileOptions;
        let mut z = ::zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let stored =
            SimpleFileOptions::default().compression_method(::zip::CompressionMethod::Deflated);
        for e in entries {
            match e {
                Entry::File(p, d, mode) => {
                    z.start_file(*p, stored.unix_permissions(*mode)).unwrap();
                    z.write_all(d).unwrap();
                }
                Entry::Dir(p) => z.add_directory(*p, stored).unwrap(),
                Entry::Link(p, to) => z.add_symlink(*p, *to, stored).unwrap(),
                Entry::Fifo(_) | Entry::Hard(..) => unreachable!(),
            }
        }
        z.finish().unwrap().into_inner()
    }

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    fn archive(bytes: Vec<u8>) -> Skill {
        Skill::archive("probe", bytes.as_slice()).unwrap()
    }

    #[test]
    fn zip_tar_and_tgz_of_one_skill_have_one_fingerprint() {
        let entries = [
            Entry::Dir("probe/"),
            Entry::File("probe/SKILL.md", MD.as_bytes(), 0o644),
            Entry::File("probe/run.sh", b"#!/bin/sh\n", 0o755),
            Entry::Link("probe/again.md", "SKILL.md"),
        ];
        let from_tar = read(&archive(tar_bytes(&entries))).unwrap();
        let from_tgz = read(&archive(gz(&tar_bytes(&entries)))).unwrap();
        let from_zip = read(&archive(zip_bytes(&entries))).unwrap();
        assert_eq!(from_tar.fingerprint, from_tgz.fingerprint);
        assert_eq!(from_tar.fingerprint, from_zip.fingerprint);
        assert_eq!(
            from_tar.entries.get("run.sh"),
            Some(&Node::File {
                bytes: b"#!/bin/sh\n".to_vec(),
                executable: true
            })
        );
        assert_eq!(
            from_tar.front_matter(),
            (Some("probe".into()), Some("Probe things".into()))
        );
        // Inline with the same SKILL.md alone is another tree.
        assert_ne!(
            read(&Skill::inline("probe", MD)).unwrap().fingerprint,
            from_tar.fingerprint
        );
    }

    #[test]
    fn every_unsafe_entry_is_refused_naming_it() {
        let md = Entry::File("SKILL.md", MD.as_bytes(), 0o644);
        let check = |entries: &[Entry<'_>], want: &dyn Fn(&SkillError) -> bool| {
            for bytes in [tar_bytes(entries), gz(&tar_bytes(entries))] {
                let e = read(&archive(bytes)).unwrap_err();
                assert!(want(&e), "{e}");
            }
        };
        check(
            &[Entry::File("../evil", b"x", 0o644)],
            &|e| matches!(e, SkillError::UnsafePath { entry, .. } if entry == "../evil"),
        );
        check(
            &[Entry::File("/etc/evil", b"x", 0o644)],
            &|e| matches!(e, SkillError::UnsafePath { entry, reason, .. } if entry == "/etc/evil" && reason.contains("absolute")),
        );
        check(&[Entry::File("a\\b", b"x", 0o644)], &|e| {
            matches!(e, SkillError::UnsafePath { .. })
        });
        check(
            &[Entry::Link("out", "../../etc/passwd")],
            &|e| matches!(e, SkillError::SymlinkOut { entry, .. } if entry == "out"),
        );
        check(&[Entry::Link("abs", "/etc/passwd")], &|e| {
            matches!(e, SkillError::SymlinkOut { .. })
        });
        check(
            &[Entry::Link("dir", "sub"), Entry::File("dir/x", b"x", 0o644)],
            &|e| matches!(e, SkillError::UnsafePath { reason, .. } if reason.contains("symlink")),
        );
        check(
            &[Entry::Fifo("pipe")],
            &|e| matches!(e, SkillError::SpecialFile { entry, kind: "FIFO", .. } if entry == "pipe"),
        );
        check(&[Entry::Hard("hard", "SKILL.md")], &|e| {
            matches!(
                e,
                SkillError::SpecialFile {
                    kind: "hard link",
                    ..
                }
            )
        });
        check(
            &[md, Entry::File("SKILL.md", b"again", 0o644)],
            &|e| matches!(e, SkillError::DuplicateEntry { entry, .. } if entry == "SKILL.md"),
        );
        check(&[Entry::File("README.md", b"x", 0o644)], &|e| {
            matches!(e, SkillError::MissingSkillMd { .. })
        });
        // A link that stays inside the top directory only by reaching its parent leaves the
        // skill once that directory becomes the root.
        check(
            &[
                Entry::File("top/SKILL.md", MD.as_bytes(), 0o644),
                Entry::Link("top/up", "../top/SKILL.md"),
            ],
            &|e| matches!(e, SkillError::SymlinkOut { entry, .. } if entry == "top/up"),
        );
        let e = read(&archive(zip_bytes(&[Entry::File(
            "../zip-evil",
            b"x",
            0o644,
        )])))
        .unwrap_err();
        assert!(matches!(e, SkillError::UnsafePath { entry, .. } if entry == "../zip-evil"));
    }

    #[test]
    fn limits_hold_whatever_the_archive_claims() {
        let limits = SkillLimits {
            max_archive_bytes: 1 << 20,
            max_file_bytes: 1000,
            max_total_bytes: 1500,
            max_entries: 3,
        };
        let big = vec![b'a'; 1001];
        let deflated = zip_bytes(&[
            Entry::File("SKILL.md", MD.as_bytes(), 0o644),
            Entry::File("big", &big, 0o644),
        ]);
        let e = Tree::read(&archive(deflated), limits).unwrap_err();
        assert!(matches!(e, SkillError::FileTooLarge { entry, limit: 1000, .. } if entry == "big"));
        let gzipped = gz(&tar_bytes(&[
            Entry::File("SKILL.md", MD.as_bytes(), 0o644),
            Entry::File("a", &big[..900], 0o644),
            Entry::File("b", &big[..900], 0o644),
        ]));
        let e = Tree::read(&archive(gzipped), limits).unwrap_err();
        assert!(matches!(e, SkillError::TooLarge { entry, .. } if entry == "b"));
        let many: Vec<Entry<'_>> = ["SKILL.md", "1", "2", "3"]
            .iter()
            .map(|p| Entry::File(p, b"x", 0o644))
            .collect();
        let e = Tree::read(&archive(tar_bytes(&many)), limits).unwrap_err();
        assert!(matches!(e, SkillError::TooManyEntries { entry, limit: 3, .. } if entry == "3"));
        let small = SkillLimits {
            max_archive_bytes: 10,
            ..limits
        };
        let e = Tree::read(&archive(tar_bytes(&many)), small).unwrap_err();
        assert!(matches!(e, SkillError::ArchiveTooLarge { limit: 10, .. }));
        let e = Tree::read(&archive(b"plain text, no archive".to_vec()), limits).unwrap_err();
        assert!(matches!(e, SkillError::BadArchive { .. }));
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_with_a_link_out_or_a_fifo_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let skill = dir.path().join("probe");
        std::fs::create_dir(&skill).unwrap();
        std::fs::write(skill.join("SKILL.md"), MD).unwrap();
        std::os::unix::fs::symlink("../../secret", skill.join("leak")).unwrap();
        let e = read(&Skill::dir(&skill)).unwrap_err();
        assert!(matches!(e, SkillError::SymlinkOut { entry, .. } if entry == "leak"));
        std::fs::remove_file(skill.join("leak")).unwrap();
        let fifo = std::ffi::CString::new(skill.join("pipe").to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let e = read(&Skill::dir(&skill)).unwrap_err();
        assert!(
            matches!(e, SkillError::SpecialFile { entry, kind: "FIFO", .. } if entry == "pipe")
        );
        std::fs::remove_file(skill.join("pipe")).unwrap();
        assert!(read(&Skill::dir(&skill)).is_ok());
    }
}
