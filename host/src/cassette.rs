//! Cassettes: a recorded provider run (request, every stdout/stderr/stdin chunk with its
//! timing, exit status) in a reviewable JSON file, `agent-adaptor/cassette/v1`.
//!
//! Owns the format, conversion from a [`RunResult`] (`adaptor run --record`), from a plain
//! stdout capture, and loading/saving. Chunks are stored as `text` when they are valid UTF-8
//! and as `hex` otherwise, so any byte sequence round-trips exactly. Must not: replay (the
//! conformance kit's scripted provider does) or interpret provider protocols.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::result::{RunResult, StreamKind};

/// Format identifier written into every cassette.
pub const CASSETTE_FORMAT: &str = "agent-adaptor/cassette/v1";

/// A recorded run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cassette {
    /// Always [`CASSETTE_FORMAT`].
    pub format: String,
    /// Driver name that recorded it, if known.
    #[serde(default)]
    pub driver: Option<String>,
    /// The prompt of the run.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Per-call model, if any.
    #[serde(default)]
    pub model: Option<String>,
    /// Driver config used (without secrets; `command` is removed when recording).
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    /// Program and arguments the driver launched.
    #[serde(default)]
    pub launch: Option<CassetteLaunch>,
    /// Every chunk, in order.
    pub chunks: Vec<CassetteChunk>,
    /// How the process ended.
    pub exit: CassetteExit,
}

/// The recorded launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CassetteLaunch {
    /// Program as the driver asked for it.
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
}

/// One chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CassetteChunk {
    /// Milliseconds since spawn.
    pub at_ms: f64,
    /// Stream.
    pub stream: StreamKind,
    /// The bytes, when valid UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The bytes as lowercase hex, otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hex: Option<String>,
}

/// Exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CassetteExit {
    /// Exit code.
    pub code: Option<i32>,
    /// Terminating signal.
    pub signal: Option<i32>,
}

/// A cassette could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CassetteError {
    /// I/O.
    #[error("cannot read or write cassette `{path}`: {source}")]
    Io {
        /// Path.
        path: String,
        /// OS error.
        source: std::io::Error,
    },
    /// Not a cassette.
    #[error("`{path}` is not a valid {CASSETTE_FORMAT} cassette: {reason}")]
    Invalid {
        /// Path.
        path: String,
        /// Why.
        reason: String,
    },
}

impl CassetteChunk {
    /// A chunk holding `bytes`.
    pub fn new(at_ms: f64, stream: StreamKind, bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(text) => Self {
                at_ms,
                stream,
                text: Some(text.to_owned()),
                hex: None,
            },
            Err(_) => Self {
                at_ms,
                stream,
                text: None,
                hex: Some(hex::encode(bytes)),
            },
        }
    }

    /// The chunk's bytes.
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        match (&self.text, &self.hex) {
            (Some(t), None) => Ok(t.as_bytes().to_vec()),
            (None, Some(h)) => hex::decode(h).map_err(|e| format!("bad hex chunk: {e}")),
            _ => Err("a chunk needs exactly one of `text` or `hex`".into()),
        }
    }
}

impl Cassette {
    /// Record a finished (or failed) run. `command` is dropped from the config: it names a
    /// program on the recording machine, and replays substitute their own.
    pub fn from_run(
        result: &RunResult,
        prompt: &str,
        model: Option<&str>,
        config: &serde_json::Value,
    ) -> Cassette {
        let raw = result.raw();
        let mut config = config.clone();
        if let Some(map) = config.as_object_mut() {
            map.remove("command");
        }
        Cassette {
            format: CASSETTE_FORMAT.to_owned(),
            driver: Some(result.provider.clone()),
            prompt: Some(prompt.to_owned()),
            model: model.map(str::to_owned),
            config: Some(config),
            launch: raw.launch.as_ref().map(|l| CassetteLaunch {
                program: l.program.clone(),
                args: l.args.clone(),
            }),
            chunks: raw
                .chunks
                .iter()
                .map(|c| {
                    CassetteChunk::new(c.at.as_micros() as f64 / 1e3, c.stream, raw.chunk_bytes(c))
                })
                .collect(),
            exit: CassetteExit {
                code: result.exit.code,
                signal: result.exit.signal,
            },
        }
    }

    /// A cassette from a plain stdout capture (one chunk per line, no timing), an optional
    /// stderr capture and an exit code.
    pub fn from_capture(stdout: &[u8], stderr: &[u8], exit_code: i32) -> Cassette {
        let mut chunks: Vec<CassetteChunk> = stdout
            .split_inclusive(|b| *b == b'\n')
            .map(|line| CassetteChunk::new(0.0, StreamKind::Stdout, line))
            .collect();
        chunks.extend(
            stderr
                .split_inclusive(|b| *b == b'\n')
                .map(|line| CassetteChunk::new(0.0, StreamKind::Stderr, line)),
        );
        Cassette {
            format: CASSETTE_FORMAT.to_owned(),
            driver: None,
            prompt: None,
            model: None,
            config: None,
            launch: None,
            chunks,
            exit: CassetteExit {
                code: Some(exit_code),
                signal: None,
            },
        }
    }

    /// Parse a cassette from JSON text.
    pub fn from_json(text: &str, path: &str) -> Result<Cassette, CassetteError> {
        let invalid = |reason: String| CassetteError::Invalid {
            path: path.to_owned(),
            reason,
        };
        let cassette: Cassette = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        if cassette.format != CASSETTE_FORMAT {
            return Err(invalid(format!("format is `{}`", cassette.format)));
        }
        for (i, chunk) in cassette.chunks.iter().enumerate() {
            chunk
                .bytes()
                .map_err(|e| invalid(format!("chunk {i}: {e}")))?;
            if !chunk.at_ms.is_finite() || chunk.at_ms < 0.0 {
                return Err(invalid(format!("chunk {i} has an invalid time")));
            }
        }
        Ok(cassette)
    }

    /// Load a cassette file.
    pub fn load(path: &Path) -> Result<Cassette, CassetteError> {
        let text = std::fs::read_to_string(path).map_err(|source| CassetteError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(&text, &path.display().to_string())
    }

    /// Write the cassette as pretty JSON.
    pub fn save(&self, path: &Path) -> Result<(), CassetteError> {
        let io = |source| CassetteError::Io {
            path: path.display().to_string(),
            source,
        };
        let text = serde_json::to_string_pretty(self).expect("cassettes serialise");
        std::fs::write(path, text + "\n").map_err(io)
    }

    /// All bytes of one stream, concatenated.
    pub fn bytes(&self, stream: StreamKind) -> Vec<u8> {
        self.chunks
            .iter()
            .filter(|c| c.stream == stream)
            .flat_map(|c| c.bytes().unwrap_or_default())
            .collect()
    }
}
