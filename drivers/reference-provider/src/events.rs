//! The JSON Lines output: the [`Event`] line types of the reference protocol
//! and the [`Emitter`] that writes, flushes and paces them.

use std::io::{self, Write};
use std::thread;
use std::time::Duration;

use serde::Serialize;

/// One line of protocol output. Serialized with `type` as the first field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event<'a> {
    /// First line of every turn: which session and model are in use.
    Session {
        /// The new or resumed session id.
        session_id: &'a str,
        /// The model name.
        model: &'a str,
        /// Whether this turn continues an earlier session.
        resumed: bool,
        /// The sandbox level given with `--sandbox`, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        sandbox: Option<&'a str>,
        /// The web-search switch given with `--web-search`, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        web_search: Option<&'a str>,
        /// The instructions given with `--append-system-prompt`, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        instructions: Option<&'a str>,
        /// The skills of the `--plugin-dir` bundles (`<key>: <description>`), if any.
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        skills: &'a [String],
        /// The `account` of `auth.json` in the state directory, if there is one (the login
        /// this turn runs under).
        #[serde(skip_serializing_if = "Option::is_none")]
        account: Option<&'a str>,
    },
    /// A chunk of reasoning text.
    ThinkingDelta {
        /// Id of the thinking block.
        id: &'a str,
        /// The chunk.
        text: &'a str,
    },
    /// End of a thinking block.
    ThinkingEnd {
        /// Id of the thinking block.
        id: &'a str,
    },
    /// The agent invokes a tool.
    ToolCall {
        /// Id pairing the call with its result.
        id: &'a str,
        /// Tool name.
        name: &'a str,
        /// Tool input (`{"text": …}` for `echo`).
        input: serde_json::Value,
    },
    /// The outcome of a tool call.
    ToolResult {
        /// Id of the call.
        id: &'a str,
        /// Tool output text.
        output: &'a str,
        /// Whether the tool failed.
        is_error: bool,
    },
    /// A chunk of reply text.
    TextDelta {
        /// Id of the message.
        id: &'a str,
        /// The chunk.
        text: &'a str,
    },
    /// End of a reply message.
    TextEnd {
        /// Id of the message.
        id: &'a str,
    },
    /// Steering input (`{"type":"input","text":…}` on stdin) taken into the running turn.
    InputReceived {
        /// The input, as received.
        text: &'a str,
    },
    /// Out-of-band information (`kind` says which); only `pids` exists.
    Notice {
        /// Notice kind: `pids`.
        kind: &'a str,
        /// Pid of the provider process.
        provider_pid: u32,
        /// Pid of the spawned grandchild.
        grandchild_pid: u32,
    },
    /// An error; followed by an error result unless the turn was rejected.
    Error {
        /// Machine-readable error code.
        code: &'a str,
        /// Human-readable message.
        message: &'a str,
    },
    /// Last line of a completed turn.
    Result {
        /// `success` or `error`.
        status: &'a str,
        /// The session id.
        session_id: &'a str,
        /// The model name.
        model: &'a str,
        /// The full reply text (empty on error).
        text: &'a str,
        /// One-line summary of the session, `null` on error.
        summary: Option<&'a str>,
        /// Token accounting.
        usage: Usage,
        /// With `--json-schema`: the answer as JSON (native structured output).
        #[serde(skip_serializing_if = "Option::is_none")]
        structured_output: Option<serde_json::Value>,
    },
}

/// Token usage reported in a result line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Prompt bytes + 10.
    pub input_tokens: u64,
    /// Reply bytes (0 on error).
    pub output_tokens: u64,
    /// Always 0 on success; omitted on error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
}

/// Writes output lines, flushing after each and sleeping `delay` between them.
#[derive(Debug)]
pub struct Emitter<W: Write> {
    /// Destination (stdout in the binary).
    out: W,
    /// Pause before every line but the first.
    delay: Duration,
    /// Whether a line has been written yet.
    started: bool,
    /// The session id of the last `session` line written (the next turn of a `stdio`
    /// provider continues it).
    pub last_session: Option<String>,
}

impl<W: Write> Emitter<W> {
    /// An emitter writing to `out` with `delay` between lines.
    pub fn new(out: W, delay: Duration) -> Self {
        Self {
            out,
            delay,
            started: false,
            last_session: None,
        }
    }

    /// Writes one event as a JSON line.
    pub fn event(&mut self, event: &Event<'_>) -> io::Result<()> {
        if let Event::Session { session_id, .. } = event {
            self.last_session = Some((*session_id).to_owned());
        }
        let line = serde_json::to_string(event).map_err(io::Error::other)?;
        self.line(&line)
    }

    /// Writes `text` verbatim as one line (used for deliberate non-JSON output).
    pub fn line(&mut self, text: &str) -> io::Result<()> {
        if self.started && !self.delay.is_zero() {
            thread::sleep(self.delay);
        }
        self.started = true;
        self.out.write_all(text.as_bytes())?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }

    /// The underlying writer (tests inspect what was written).
    #[cfg(test)]
    pub fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_serialize_with_type_first() {
        let mut emitter = Emitter::new(Vec::new(), Duration::ZERO);
        emitter
            .event(&Event::Session {
                session_id: "ref-1",
                model: "m",
                resumed: false,
                sandbox: None,
                web_search: None,
                instructions: None,
                skills: &[],
                account: None,
            })
            .unwrap();
        emitter
            .event(&Event::Result {
                status: "error",
                session_id: "ref-1",
                model: "m",
                text: "",
                summary: None,
                usage: Usage {
                    input_tokens: 12,
                    output_tokens: 0,
                    cache_read_tokens: None,
                },
                structured_output: None,
            })
            .unwrap();
        emitter.line("plain").unwrap();
        let out = String::from_utf8(emitter.into_inner()).unwrap();
        assert_eq!(
            out,
            concat!(
                r#"{"type":"session","session_id":"ref-1","model":"m","resumed":false}"#,
                "\n",
                r#"{"type":"result","status":"error","session_id":"ref-1","model":"m","text":"","summary":null,"usage":{"input_tokens":12,"output_tokens":0}}"#,
                "\n",
                "plain\n"
            )
        );
    }
}
