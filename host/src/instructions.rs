//! Instructions bundles: an `AGENTS.md`-style set of files given to a run
//! ([`RunOptions::instructions_bundle`](crate::RunOptions::instructions_bundle)).
//!
//! Owns the bundle's sources (a directory, or files given inline), their checks (relative
//! paths only, regular files only, limits — each refusal an [`InstructionsError`] naming the
//! file), writing the checked files under the run's own directory (read-only to the provider)
//! and the bundle's fingerprint.
//!
//! Must not: follow a symlink or read past a limit, or decide how a CLI receives the bundle
//! (its driver does, from the directory, entry and entry text the request carries).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::InstructionsError;

/// Most files in a bundle.
pub const MAX_INSTRUCTION_FILES: usize = 256;
/// Most bytes in a bundle, all files together.
pub const MAX_INSTRUCTION_BYTES: u64 = 4 << 20;
/// Most bytes in the entry file (it is also sent to the driver as text).
pub const MAX_INSTRUCTION_ENTRY_BYTES: u64 = 256 << 10;

/// An instructions bundle: an entry file (`AGENTS.md` by default) and the files it refers
/// to, by paths relative to the bundle.
///
/// The host checks every file (a relative path without `..`; a regular file — symlinks,
/// FIFOs and devices are refused; at most [`MAX_INSTRUCTION_FILES`] files and
/// [`MAX_INSTRUCTION_BYTES`] bytes; the entry UTF-8 and at most
/// [`MAX_INSTRUCTION_ENTRY_BYTES`]) and writes them into the run's private directory, which
/// the provider may read but not write. The driver is told the directory, the entry file,
/// its text and the file list; the built-in drivers append the entry's text to the system
/// prompt with a line naming the directory, so the model can read the other files. A
/// directory bundle is read when each run starts (edits reach the next run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionsBundle {
    source: Source,
    entry: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    Dir(PathBuf),
    Inline(Vec<(String, Vec<u8>)>),
}

/// A bundle's checked files, ready to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckedBundle {
    /// Normalised relative path → contents, sorted.
    pub files: BTreeMap<String, Vec<u8>>,
    /// The entry's path.
    pub entry: String,
    /// The entry's text.
    pub entry_text: String,
}

impl InstructionsBundle {
    /// Every regular file under `dir` (recursively); the entry is `AGENTS.md` unless
    /// [`entry`](Self::entry) names another.
    pub fn dir(dir: impl Into<PathBuf>) -> InstructionsBundle {
        InstructionsBundle {
            source: Source::Dir(dir.into()),
            entry: "AGENTS.md".into(),
        }
    }

    /// A bundle of one file, the entry: `path` with `text`.
    pub fn inline(path: impl Into<String>, text: impl Into<String>) -> InstructionsBundle {
        let path = path.into();
        InstructionsBundle {
            entry: path.clone(),
            source: Source::Inline(vec![(path, text.into().into_bytes())]),
        }
    }

    /// A bundle of the given files (relative path, contents); the entry is `AGENTS.md`
    /// unless [`entry`](Self::entry) names another.
    pub fn files<P, C>(files: impl IntoIterator<Item = (P, C)>) -> InstructionsBundle
    where
        P: Into<String>,
        C: Into<Vec<u8>>,
    {
        InstructionsBundle {
            source: Source::Inline(
                files
                    .into_iter()
                    .map(|(p, c)| (p.into(), c.into()))
                    .collect(),
            ),
            entry: "AGENTS.md".into(),
        }
    }

    /// The entry file's path, relative to the bundle.
    pub fn entry(mut self, path: impl Into<String>) -> Self {
        self.entry = path.into();
        self
    }

    /// Read and check the bundle (the files, the entry, the limits).
    pub(crate) fn check(&self) -> Result<CheckedBundle, InstructionsError> {
        let mut checked = Checker::default();
        match &self.source {
            Source::Dir(dir) => read_dir_into(&mut checked, dir, dir)?,
            Source::Inline(files) => {
                for (path, contents) in files {
                    checked.add(path, contents.clone())?;
                }
            }
        }
        let entry = normalise(&self.entry)?;
        let Some(bytes) = checked.files.get(&entry) else {
            return Err(InstructionsError::NoEntry { entry });
        };
        if bytes.len() as u64 > MAX_INSTRUCTION_ENTRY_BYTES {
            return Err(InstructionsError::TooLarge {
                what: "entry bytes",
                limit: MAX_INSTRUCTION_ENTRY_BYTES,
                path: entry,
            });
        }
        let entry_text =
            String::from_utf8(bytes.clone()).map_err(|_| InstructionsError::EntryNotText {
                entry: entry.clone(),
            })?;
        Ok(CheckedBundle {
            files: checked.files,
            entry,
            entry_text,
        })
    }
}

fn normalise(raw: &str) -> Result<String, InstructionsError> {
    match crate::relpath::normalise(raw) {
        Ok(Some(path)) => Ok(path),
        Ok(None) => Err(InstructionsError::UnsafePath {
            path: raw.to_owned(),
            reason: "empty path",
        }),
        Err(reason) => Err(InstructionsError::UnsafePath {
            path: raw.to_owned(),
            reason,
        }),
    }
}

#[derive(Default)]
struct Checker {
    files: BTreeMap<String, Vec<u8>>,
    total: u64,
}

impl Checker {
    fn add(&mut self, raw: &str, contents: Vec<u8>) -> Result<(), InstructionsError> {
        let path = normalise(raw)?;
        if self.files.len() >= MAX_INSTRUCTION_FILES {
            return Err(InstructionsError::TooLarge {
                what: "files",
                limit: MAX_INSTRUCTION_FILES as u64,
                path,
            });
        }
        self.total += contents.len() as u64;
        if self.total > MAX_INSTRUCTION_BYTES {
            return Err(InstructionsError::TooLarge {
                what: "bytes",
                limit: MAX_INSTRUCTION_BYTES,
                path,
            });
        }
        // A file and a directory of one name cannot both be written.
        let clash = self.files.keys().any(|k| {
            k.strip_prefix(path.as_str())
                .is_some_and(|r| r.starts_with('/'))
                || path
                    .strip_prefix(k.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        });
        if clash || self.files.insert(path.clone(), contents).is_some() {
            return Err(InstructionsError::Duplicate { path });
        }
        Ok(())
    }
}

/// Every regular file under `dir`, by its path relative to `root`; anything else is refused.
fn read_dir_into(checked: &mut Checker, root: &Path, dir: &Path) -> Result<(), InstructionsError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| InstructionsError::Io { path, source }
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .collect::<Result<_, _>>()
        .map_err(io(dir))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .to_string_lossy()
            .into_owned();
        let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        let kind = meta.file_type();
        if kind.is_dir() {
            read_dir_into(checked, root, &path)?;
        } else if kind.is_file() {
            let limit = MAX_INSTRUCTION_BYTES.saturating_sub(checked.total) + 1;
            let mut contents = Vec::new();
            std::fs::File::open(&path)
                .and_then(|f| f.take(limit).read_to_end(&mut contents))
                .map_err(io(&path))?;
            checked.add(&rel, contents)?;
        } else {
            return Err(InstructionsError::NotAFile {
                path: rel,
                kind: if kind.is_symlink() {
                    "a symbolic link"
                } else {
                    "a special file"
                },
            });
        }
    }
    Ok(())
}

impl CheckedBundle {
    /// Write the files under `dir` (created 0700; files 0400, directories 0500 once
    /// written), which must not exist yet.
    pub(crate) fn write(&self, dir: &Path) -> Result<(), InstructionsError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| InstructionsError::Io { path, source }
        };
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir).map_err(io(dir))?;
        for (rel, contents) in &self.files {
            let path = dir.join(rel);
            if let Some(parent) = path.parent() {
                builder.create(parent).map_err(io(parent))?;
            }
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o400);
            options
                .open(&path)
                .and_then(|mut f| std::io::Write::write_all(&mut f, contents))
                .map_err(io(&path))?;
        }
        Ok(())
    }

    /// The sorted relative paths.
    pub(crate) fn paths(&self) -> Vec<String> {
        self.files.keys().cloned().collect()
    }

    /// `sha256` over the paths and contents (what a thread's fingerprint and a resident
    /// process's signature record).
    pub(crate) fn fingerprint(&self) -> String {
        let mut text = format!("entry={}\n", self.entry);
        for (path, contents) in &self.files {
            text.push_str(&format!("{path}={}\n", sha256_hex(contents)));
        }
        sha256_hex(text.as_bytes())
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_bundle_is_read_checked_and_written_read_only() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("bundle");
        std::fs::create_dir_all(src.join("docs")).unwrap();
        std::fs::write(src.join("AGENTS.md"), "Read docs/style.md first.").unwrap();
        std::fs::write(src.join("docs/style.md"), "Use tabs.").unwrap();
        let checked = InstructionsBundle::dir(&src).check().unwrap();
        assert_eq!(checked.entry, "AGENTS.md");
        assert_eq!(checked.entry_text, "Read docs/style.md first.");
        assert_eq!(checked.paths(), ["AGENTS.md", "docs/style.md"]);
        let out = tmp.path().join("out/instructions");
        checked.write(&out).unwrap();
        assert_eq!(
            std::fs::read_to_string(out.join("docs/style.md")).unwrap(),
            "Use tabs."
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(out.join("AGENTS.md"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o400);
        }
        // Same files, same fingerprint; other contents, another.
        let inline = InstructionsBundle::files([
            ("docs/style.md", "Use tabs."),
            ("AGENTS.md", "Read docs/style.md first."),
        ])
        .check()
        .unwrap();
        assert_eq!(inline.fingerprint(), checked.fingerprint());
        let other = InstructionsBundle::inline("AGENTS.md", "Other.")
            .check()
            .unwrap();
        assert_ne!(other.fingerprint(), checked.fingerprint());
    }

    #[test]
    fn every_refusal_names_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let err = |b: InstructionsBundle| b.check().unwrap_err();
        assert!(matches!(
            err(InstructionsBundle::inline("../AGENTS.md", "x")),
            InstructionsError::UnsafePath { path, .. } if path == "../AGENTS.md"
        ));
        assert!(matches!(
            err(InstructionsBundle::inline("/etc/AGENTS.md", "x")),
            InstructionsError::UnsafePath { .. }
        ));
        assert!(matches!(
            err(InstructionsBundle::files([("a.md", "x"), ("./a.md", "y")])),
            InstructionsError::Duplicate { path } if path == "a.md"
        ));
        assert!(matches!(
            err(InstructionsBundle::files([("a", "x"), ("a/b", "y")])),
            InstructionsError::Duplicate { .. }
        ));
        assert!(matches!(
            err(InstructionsBundle::inline("a.md", "x").entry("b.md")),
            InstructionsError::NoEntry { entry } if entry == "b.md"
        ));
        assert!(matches!(
            err(InstructionsBundle::files([("b.bin", vec![0xffu8])]).entry("b.bin")),
            InstructionsError::EntryNotText { .. }
        ));
        let big = "x".repeat(MAX_INSTRUCTION_ENTRY_BYTES as usize + 1);
        assert!(matches!(
            err(InstructionsBundle::inline("a.md", big)),
            InstructionsError::TooLarge {
                what: "entry bytes",
                ..
            }
        ));
        let many = (0..=MAX_INSTRUCTION_FILES).map(|i| (format!("f{i}"), Vec::new()));
        assert!(matches!(
            err(InstructionsBundle::files(many)),
            InstructionsError::TooLarge { what: "files", .. }
        ));
        // A symlink (even to a file inside) and a FIFO are refused by name.
        let dir = tmp.path().join("links");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("AGENTS.md"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("passwd")).unwrap();
        assert!(matches!(
            err(InstructionsBundle::dir(&dir)),
            InstructionsError::NotAFile { path, kind: "a symbolic link" } if path == "passwd"
        ));
        let fifo_dir = tmp.path().join("fifo");
        std::fs::create_dir_all(&fifo_dir).unwrap();
        let fifo = fifo_dir.join("pipe");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            err(InstructionsBundle::dir(&fifo_dir)),
            InstructionsError::NotAFile {
                kind: "a special file",
                ..
            }
        ));
        assert!(matches!(
            err(InstructionsBundle::dir(tmp.path().join("missing"))),
            InstructionsError::Io { .. }
        ));
    }
}
