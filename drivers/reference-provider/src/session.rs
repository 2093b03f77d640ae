//! Session identity and persistence: new session ids, id validation, the
//! default state directory and the `<state-dir>/<session_id>.json` files that
//! hold the prompts of each session.

use std::collections::hash_map::DefaultHasher;
use std::ffi::OsString;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Prefix of every session id.
const ID_PREFIX: &str = "ref-";

/// Longest hex part accepted in a session id (new ids use 16).
const MAX_ID_HEX: usize = 64;

/// Environment variable that fixes the id of new sessions (deterministic tests).
pub const SESSION_ID_ENV: &str = "REFERENCE_PROVIDER_SESSION_ID";

/// Creates a fresh session id: `ref-` + 16 lowercase hex chars hashed from
/// the prompt, the process id and the current time — or the value of
/// `REFERENCE_PROVIDER_SESSION_ID` when it is set to a valid session id.
pub fn new_session_id(prompt: &str) -> String {
    if let Some(fixed) = std::env::var(SESSION_ID_ENV)
        .ok()
        .filter(|id| is_valid_session_id(id))
    {
        return fixed;
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut hasher = DefaultHasher::new();
    prompt.hash(&mut hasher);
    std::process::id().hash(&mut hasher);
    nanos.hash(&mut hasher);
    format!("{ID_PREFIX}{:016x}", hasher.finish())
}

/// Whether `id` has the shape of a session id: `ref-` followed by 1–64
/// lowercase hex digits. Anything else (including path separators) is rejected.
pub fn is_valid_session_id(id: &str) -> bool {
    id.strip_prefix(ID_PREFIX).is_some_and(|hex| {
        !hex.is_empty()
            && hex.len() <= MAX_ID_HEX
            && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The state directory used when `--state-dir` is not given:
/// `$REFERENCE_PROVIDER_STATE_DIR`, else `$HOME/.local/state/reference-provider`.
pub fn default_state_dir() -> Option<PathBuf> {
    state_dir_from(
        std::env::var_os("REFERENCE_PROVIDER_STATE_DIR"),
        std::env::var_os("HOME"),
    )
}

/// [`default_state_dir`] with the environment values passed in (empty values
/// count as unset).
fn state_dir_from(explicit: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    if let Some(dir) = explicit.filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    home.filter(|h| !h.is_empty())
        .map(|home| Path::new(&home).join(".local/state/reference-provider"))
}

/// Session files in one state directory.
#[derive(Debug, Clone)]
pub struct SessionStore {
    /// The state directory.
    dir: PathBuf,
}

impl SessionStore {
    /// A store rooted at `dir` (created lazily on the first save).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The file holding session `id`.
    pub fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Loads the prompts of session `id`; `Ok(None)` if the session is unknown.
    ///
    /// The file is a JSON array of strings; an object with a `prompts` array
    /// is accepted as well.
    pub fn load(&self, id: &str) -> Result<Option<Vec<String>>, String> {
        let path = self.path(id);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(format!("cannot read {}: {err}", path.display())),
        };
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|err| format!("corrupt session file {}: {err}", path.display()))?;
        let list = match &value {
            serde_json::Value::Object(map) => map.get("prompts").cloned(),
            serde_json::Value::Array(_) => Some(value.clone()),
            _ => None,
        };
        list.and_then(|list| serde_json::from_value::<Vec<String>>(list).ok())
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "corrupt session file {}: expected a list of prompts",
                    path.display()
                )
            })
    }

    /// Writes the prompts of session `id` atomically (temp file + rename),
    /// creating the state directory if needed.
    pub fn save(&self, id: &str, prompts: &[String]) -> io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let path = self.path(id);
        let tmp = self
            .dir
            .join(format!(".{id}.json.{}.tmp", std::process::id()));
        let result = (|| {
            // One write (serde_json writes a `File` piece by piece, a syscall each).
            let mut bytes = serde_json::to_vec_pretty(prompts)?;
            bytes.push(b'\n');
            let mut file = fs::File::create(&tmp)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            fs::rename(&tmp, &path)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A unique, initially absent directory under the system temp dir.
    fn temp_dir(tag: &str) -> PathBuf {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        std::env::temp_dir().join(format!(
            "reference-provider-{tag}-{}-{nanos}",
            std::process::id()
        ))
    }

    #[test]
    fn new_ids_are_valid_and_distinct() {
        let a = new_session_id("hello");
        assert!(is_valid_session_id(&a), "{a}");
        assert_eq!(a.len(), ID_PREFIX.len() + 16);
        let b = new_session_id("other");
        assert_ne!(a, b);
    }

    #[test]
    fn id_validation() {
        assert!(is_valid_session_id("ref-0123456789abcdef"));
        assert!(is_valid_session_id("ref-a"));
        for bad in [
            "",
            "ref-",
            "ref-ABC",
            "ref-xyz",
            "abc-0123",
            "ref-../etc",
            "ref-01/23",
            "0123456789abcdef",
        ] {
            assert!(!is_valid_session_id(bad), "{bad:?} should be invalid");
        }
        assert!(!is_valid_session_id(&format!("ref-{}", "a".repeat(65))));
    }

    #[test]
    fn state_dir_resolution() {
        assert_eq!(
            state_dir_from(Some("/x".into()), Some("/home/u".into())),
            Some(PathBuf::from("/x"))
        );
        assert_eq!(
            state_dir_from(Some("".into()), Some("/home/u".into())),
            Some(PathBuf::from("/home/u/.local/state/reference-provider"))
        );
        assert_eq!(state_dir_from(None, None), None);
        assert_eq!(state_dir_from(None, Some("".into())), None);
    }

    #[test]
    fn session_file_round_trip() {
        let dir = temp_dir("roundtrip");
        let store = SessionStore::new(dir.join("nested/state"));
        let id = "ref-00000000000000aa";
        assert_eq!(store.load(id), Ok(None));

        let prompts = vec!["first".to_string(), "second ✓ \"quoted\"".to_string()];
        store.save(id, &prompts).expect("save");
        assert_eq!(store.load(id), Ok(Some(prompts.clone())));

        let more = vec![
            "first".to_string(),
            "again".to_string(),
            "third".to_string(),
        ];
        store.save(id, &more).expect("overwrite");
        assert_eq!(store.load(id), Ok(Some(more)));

        let leftovers: Vec<_> = fs::read_dir(dir.join("nested/state"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, vec![OsString::from(format!("{id}.json"))]);

        fs::write(store.path(id), r#"{"prompts":["from object"]}"#).unwrap();
        assert_eq!(store.load(id), Ok(Some(vec!["from object".to_string()])));
        fs::write(store.path(id), "not json").unwrap();
        assert!(store.load(id).is_err());

        fs::remove_dir_all(&dir).unwrap();
    }
}
