//! Approvals: how the provider decides whether it may use a tool, follow its plan or get an
//! answer to a question (`--approvals stdio|allow|deny`, see PROTOCOL.md).
//!
//! In `stdio` mode it writes an `approval_request` line on stdout and reads the matching
//! `approval_response` line from stdin; `allow` and `deny` decide without asking.

use std::io::{self, BufRead, Write};

use serde_json::{Value, json};

use crate::events::Emitter;

/// The `--approvals` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Never ask; refuse (the default: a headless CLI cannot ask anyone).
    #[default]
    Deny,
    /// Never ask; allow (questions get their first option).
    Allow,
    /// Ask over stdout/stdin.
    Stdio,
}

impl Mode {
    /// Parses the flag value.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value {
            "deny" => Ok(Mode::Deny),
            "allow" => Ok(Mode::Allow),
            "stdio" => Ok(Mode::Stdio),
            other => Err(format!(
                "--approvals expects stdio, allow or deny, got {other:?}"
            )),
        }
    }
}

/// The outcome of one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Go ahead; with `stdio` optionally a replacement tool input or a question's answer.
    Allow {
        /// Replacement tool input.
        updated_input: Option<Value>,
        /// Answer to a question.
        answer: Option<String>,
    },
    /// Refused; `interrupt` ends the turn.
    Deny {
        /// The reason given.
        message: String,
        /// End the turn with an `approval_denied` error.
        interrupt: bool,
    },
    /// The controller broke the protocol (stdin closed, bad line): the turn fails.
    Broken(String),
}

/// Decides requests for one turn.
pub struct Approver<'a> {
    mode: Mode,
    input: Option<&'a mut dyn BufRead>,
    next_id: u32,
}

impl<'a> Approver<'a> {
    /// An approver in `mode`; `input` is stdin after the prompt frame (needed for `stdio`).
    pub fn new(mode: Mode, input: Option<&'a mut dyn BufRead>) -> Self {
        Self {
            mode,
            input,
            next_id: 0,
        }
    }

    /// Decide `request` (the fields of an `approval_request` line after `type` and `id`).
    /// `first_option` is what `allow` answers to a question.
    pub fn decide<W: Write>(
        &mut self,
        out: &mut Emitter<W>,
        mut request: serde_json::Map<String, Value>,
        first_option: Option<&str>,
    ) -> io::Result<Decision> {
        match self.mode {
            Mode::Allow => {
                return Ok(Decision::Allow {
                    updated_input: None,
                    answer: first_option.map(str::to_owned),
                });
            }
            Mode::Deny => {
                return Ok(Decision::Deny {
                    message: "refused: the provider runs with --approvals deny".into(),
                    interrupt: false,
                });
            }
            Mode::Stdio => {}
        }
        self.next_id += 1;
        let id = format!("approval-{}", self.next_id);
        // `type` and `id` first (the protocol's field order), then the request's fields.
        request.remove("type");
        request.remove("id");
        let fields = Value::Object(request).to_string();
        let rest = fields.trim_start_matches('{').trim_end_matches('}');
        let sep = if rest.is_empty() { "" } else { "," };
        out.line(&format!(
            "{{\"type\":\"approval_request\",\"id\":{}{sep}{rest}}}",
            json!(id)
        ))?;
        let Some(input) = self.input.as_mut() else {
            return Ok(Decision::Broken("no stdin to read approvals from".into()));
        };
        let mut text = String::new();
        if input.read_line(&mut text)? == 0 {
            return Ok(Decision::Broken(format!(
                "stdin closed while waiting for the answer to {id}"
            )));
        }
        Ok(parse_response(&id, &text))
    }

    /// `stdio` mode: the next turn's prompt frame, or `None` at end of input.
    pub fn next_prompt(&mut self) -> Result<Option<String>, String> {
        let Some(input) = self.input.as_mut() else {
            return Ok(None);
        };
        let mut line = String::new();
        match input.read_line(&mut line) {
            Ok(0) => Ok(None),
            Ok(_) => parse_prompt_frame(&line).map(Some),
            Err(e) => Err(format!("cannot read the next prompt frame from stdin: {e}")),
        }
    }
}

/// Parses one `approval_response` line for request `id`.
pub fn parse_response(id: &str, line: &str) -> Decision {
    let bad = |why: &str| Decision::Broken(format!("invalid approval response: {why}"));
    let Ok(Value::Object(frame)) = serde_json::from_str::<Value>(line.trim()) else {
        return bad("not a JSON object");
    };
    if frame.get("type").and_then(Value::as_str) != Some("approval_response") {
        return bad("`type` is not approval_response");
    }
    if frame.get("id").and_then(Value::as_str) != Some(id) {
        return bad(&format!("expected id {id}"));
    }
    match frame.get("behavior").and_then(Value::as_str) {
        Some("allow") => Decision::Allow {
            updated_input: frame.get("updated_input").cloned(),
            answer: frame
                .get("answer")
                .and_then(Value::as_str)
                .map(str::to_owned),
        },
        Some("deny") => Decision::Deny {
            message: frame
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("denied")
                .to_owned(),
            interrupt: frame
                .get("interrupt")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        },
        _ => bad("`behavior` must be allow or deny"),
    }
}

/// Reads the `{"type":"user","text":…}` frame that carries the prompt in `stdio` mode.
pub fn read_prompt_frame(input: &mut dyn BufRead) -> Result<String, String> {
    let mut line = String::new();
    input
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the prompt frame from stdin: {e}"))?;
    parse_prompt_frame(&line)
}

/// Parses one `{"type":"user","text":…}` line.
fn parse_prompt_frame(line: &str) -> Result<String, String> {
    let frame: Value = serde_json::from_str(line.trim())
        .map_err(|e| format!("the first stdin line is not a JSON prompt frame: {e}"))?;
    match (
        frame.get("type").and_then(Value::as_str),
        frame.get("text").and_then(Value::as_str),
    ) {
        (Some("user"), Some(text)) => Ok(text.to_owned()),
        _ => Err("a prompt line must be {\"type\":\"user\",\"text\":…}".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn responses_parse() {
        assert_eq!(
            parse_response(
                "approval-1",
                r#"{"type":"approval_response","id":"approval-1","behavior":"allow","answer":"casual"}"#
            ),
            Decision::Allow {
                updated_input: None,
                answer: Some("casual".into())
            }
        );
        assert_eq!(
            parse_response(
                "approval-1",
                r#"{"type":"approval_response","id":"approval-1","behavior":"deny","message":"no","interrupt":true}"#
            ),
            Decision::Deny {
                message: "no".into(),
                interrupt: true
            }
        );
        assert!(matches!(
            parse_response(
                "approval-2",
                r#"{"type":"approval_response","id":"approval-1","behavior":"allow"}"#
            ),
            Decision::Broken(_)
        ));
        assert!(matches!(
            parse_response("approval-1", "nope"),
            Decision::Broken(_)
        ));
    }

    #[test]
    fn stdio_asks_and_reads_the_answer() {
        let mut input: &[u8] =
            b"{\"type\":\"approval_response\",\"id\":\"approval-1\",\"behavior\":\"allow\"}\n";
        let mut out = Emitter::new(Vec::new(), Duration::ZERO);
        let mut approver = Approver::new(Mode::Stdio, Some(&mut input));
        let mut req = serde_json::Map::new();
        req.insert("kind".into(), json!("plan"));
        let d = approver.decide(&mut out, req, None).unwrap();
        assert_eq!(
            d,
            Decision::Allow {
                updated_input: None,
                answer: None
            }
        );
        let written = String::from_utf8(out.into_inner()).unwrap();
        assert_eq!(
            written,
            "{\"type\":\"approval_request\",\"id\":\"approval-1\",\"kind\":\"plan\"}\n"
        );
        let d = approver
            .decide(
                &mut Emitter::new(Vec::new(), Duration::ZERO),
                serde_json::Map::new(),
                None,
            )
            .unwrap();
        assert!(matches!(d, Decision::Broken(m) if m.contains("stdin closed")));
    }

    #[test]
    fn prompt_frame() {
        let mut input: &[u8] = b"{\"type\":\"user\",\"text\":\"hi\"}\nrest";
        assert_eq!(read_prompt_frame(&mut input).unwrap(), "hi");
        let mut bad: &[u8] = b"hi\n";
        assert!(read_prompt_frame(&mut bad).is_err());
    }
}
