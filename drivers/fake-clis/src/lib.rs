//! Shared pieces of the scripted fake CLIs (today `fake-cursor-agent`; CodeBuddy Code's tests
//! run the real CLI): prompt directives (`[[name]]` / `[[name arg]]`), a session store on
//! disk (so `--resume` can be checked and refused like the real CLIs do), and NDJSON output
//! that is flushed frame by frame.
//!
//! The fakes stand in for CLIs that cannot be installed on these machines. Each emits the
//! frames its real CLI was recorded emitting — same keys, same key order — so a driver runs
//! end to end through the real host and process layer. Must not: know anything about the
//! drivers that read them (they are written from the recordings, not from the drivers).

use std::io::Write;
use std::path::{Path, PathBuf};

/// One `[[name]]` or `[[name arg]]` directive of a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    /// The name (`tool`, `fail`, …).
    pub name: String,
    /// The argument after the first space, if any.
    pub arg: Option<String>,
}

/// The directives of `prompt`, in order, and the prompt with them removed (trimmed).
pub fn directives(prompt: &str) -> (Vec<Directive>, String) {
    let mut found = Vec::new();
    let mut rest = String::new();
    let mut text = prompt;
    while let Some(start) = text.find("[[") {
        let Some(len) = text[start..].find("]]") else {
            break;
        };
        let inner = &text[start + 2..start + len];
        rest.push_str(&text[..start]);
        let (name, arg) = match inner.split_once(' ') {
            Some((n, a)) => (n.to_owned(), Some(a.to_owned())),
            None => (inner.to_owned(), None),
        };
        found.push(Directive { name, arg });
        text = &text[start + len + 2..];
    }
    rest.push_str(text);
    (found, rest.trim().to_owned())
}

/// Whether `list` has the directive `name`.
pub fn has(list: &[Directive], name: &str) -> bool {
    list.iter().any(|d| d.name == name)
}

/// The argument of the last directive `name`.
pub fn arg<'a>(list: &'a [Directive], name: &str) -> Option<&'a str> {
    list.iter()
        .rev()
        .find(|d| d.name == name)
        .and_then(|d| d.arg.as_deref())
}

/// Sessions of one fake CLI: `<dir>/<session id>` holds the prompts of its turns, one per
/// line. The directory is `$<env_var>` when set, else `$HOME/<home_relative>`.
pub struct Sessions {
    dir: PathBuf,
}

impl Sessions {
    /// The store named by `env_var` or under `$HOME`.
    pub fn open(env_var: &str, home_relative: &str) -> Sessions {
        let dir = std::env::var_os(env_var)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|h| !h.is_empty())
                    .map(|h| Path::new(&h).join(home_relative))
            })
            .unwrap_or_else(|| std::env::temp_dir().join(home_relative));
        Sessions { dir }
    }

    /// The earlier prompts of `id`, or `None` when there is no such session.
    pub fn history(&self, id: &str) -> Option<Vec<String>> {
        if id.is_empty() || id.contains(['/', '\\']) || id.starts_with('.') {
            return None;
        }
        let text = std::fs::read_to_string(self.dir.join(id)).ok()?;
        Some(text.lines().map(str::to_owned).collect())
    }

    /// Record one more turn of `id`.
    pub fn append(&self, id: &str, prompt: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(id))?;
        writeln!(file, "{}", prompt.replace('\n', " "))
    }
}

/// A new session id in the UUID shape both CLIs use, unique per process and call.
pub fn new_session_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let a = nanos ^ (u64::from(std::process::id()) << 32);
    let b = nanos.rotate_left(17) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        (a >> 32) as u32,
        (a >> 16) as u16,
        (a as u16) & 0x0fff,
        0x8000 | ((b >> 48) as u16 & 0x3fff),
        b & 0xffff_ffff_ffff
    )
}

/// Write one NDJSON line (the exact bytes given, plus `\n`) and flush.
pub fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    // A closed pipe ends the fake like it ends the real CLIs: quietly.
    if out.write_all(line.as_bytes()).is_err() || out.write_all(b"\n").is_err() {
        std::process::exit(141);
    }
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_are_found_and_removed() {
        let (d, rest) = directives("hello [[tool read]] world [[fail]]");
        assert_eq!(rest, "hello  world");
        assert_eq!(d.len(), 2);
        assert_eq!(arg(&d, "tool"), Some("read"));
        assert!(has(&d, "fail"));
        assert!(!has(&d, "exit"));
    }

    #[test]
    fn session_ids_are_uuid_shaped_and_distinct() {
        let a = new_session_id();
        let b = new_session_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(a.matches('-').count(), 4);
    }
}
