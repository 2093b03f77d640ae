//! Approvals: how the provider decides whether it may use a tool, follow its plan or get an
//! answer to a question (`--approvals stdio|allow|deny`, see PROTOCOL.md).
//!
//! In `stdio` mode it writes an `approval_request` line on stdout and reads the matching
//! `approval_response` line from stdin; `allow` and `deny` decide without asking. Stdin is
//! read by an [`Inbox`] on a thread of its own, so steering input (`{"type":"input",…}`
//! lines) that arrives while a turn runs is collected whenever it comes.

use std::collections::VecDeque;
use std::io::{self, BufRead, Write};
use std::sync::mpsc;

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

/// Stdin in `stdio` mode, read line by line on a thread of its own: steering input
/// (`{"type":"input","text":…}`) is collected whenever it arrives; every other line
/// (approval responses, prompt frames) is handed out in order.
pub struct Inbox {
    lines: mpsc::Receiver<Result<String, String>>,
    /// What was read and not handed out yet, in stdin order.
    queue: VecDeque<Item>,
    /// Input texts of the current turn, not taken yet.
    inputs: Vec<String>,
    /// The reader thread is done (end of input, or a read error).
    done: bool,
}

/// One stdin line, sorted.
enum Item {
    Input(String),
    Line(String),
}

impl Inbox {
    /// Read `reader` on a new thread until end of input.
    pub fn spawn<R: BufRead + Send + 'static>(mut reader: R) -> Inbox {
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            loop {
                let mut line = String::new();
                match reader.read_line(&mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        if tx.send(Ok(line)).is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(format!("cannot read stdin: {e}")));
                        break;
                    }
                }
            }
        });
        Inbox {
            lines,
            queue: VecDeque::new(),
            inputs: Vec::new(),
            done: false,
        }
    }

    fn push(&mut self, line: String) {
        self.queue.push_back(match input_text(&line) {
            Some(text) => Item::Input(text),
            None => Item::Line(line),
        });
    }

    /// Move what the reader thread has read into the queue; with `wait`, wait for one line
    /// first. `Err` on a read error.
    fn pull(&mut self, wait: bool) -> Result<(), String> {
        if wait && !self.done {
            match self.lines.recv() {
                Ok(Ok(line)) => self.push(line),
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                Err(_) => self.done = true,
            }
        }
        loop {
            match self.lines.try_recv() {
                Ok(Ok(line)) => self.push(line),
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                Err(mpsc::TryRecvError::Empty) => return Ok(()),
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.done = true;
                    return Ok(());
                }
            }
        }
    }

    /// The next line that is not input (waiting for it), taking the input before it into
    /// the current turn; `Ok(None)` at end of input.
    pub fn next_line(&mut self) -> Result<Option<String>, String> {
        loop {
            while let Some(item) = self.queue.pop_front() {
                match item {
                    Item::Input(text) => self.inputs.push(text),
                    Item::Line(line) => return Ok(Some(line)),
                }
            }
            if self.done {
                return Ok(None);
            }
            self.pull(true)?;
        }
    }

    /// The current turn's input received so far, taken. With `wait`, first wait until there
    /// is some (or stdin ends).
    pub fn take_inputs(&mut self, wait: bool) -> Vec<String> {
        loop {
            let _ = self.pull(false);
            // Input up to the next turn's prompt frame is this turn's (approval answers in
            // between stay queued).
            let mut rest = VecDeque::new();
            let mut next_turn = false;
            for item in self.queue.drain(..) {
                match item {
                    Item::Input(text) if !next_turn => self.inputs.push(text),
                    Item::Line(line) if !next_turn && parse_prompt_frame(&line).is_ok() => {
                        next_turn = true;
                        rest.push_back(Item::Line(line));
                    }
                    item => rest.push_back(item),
                }
            }
            self.queue = rest;
            if !wait || !self.inputs.is_empty() || self.done {
                break;
            }
            if self.pull(true).is_err() {
                break;
            }
        }
        std::mem::take(&mut self.inputs)
    }

    /// The next prompt line; input that came before it is the previous turn's and too late
    /// for it (put in `late`), input after it is the new turn's.
    fn next_prompt_line(&mut self, late: &mut Vec<String>) -> Result<Option<String>, String> {
        late.append(&mut self.inputs);
        let line = self.next_line();
        late.append(&mut self.inputs);
        line
    }
}

/// The text of a steering input frame `{"type":"input","text":…}`, if `line` is one.
fn input_text(line: &str) -> Option<String> {
    let frame: Value = serde_json::from_str(line.trim()).ok()?;
    if frame.get("type").and_then(Value::as_str) != Some("input") {
        return None;
    }
    frame.get("text").and_then(Value::as_str).map(str::to_owned)
}

/// Decides requests for one turn.
pub struct Approver {
    mode: Mode,
    input: Option<Inbox>,
    next_id: u32,
}

impl Approver {
    /// An approver in `mode`; `input` is stdin after the prompt frame (needed for `stdio`).
    pub fn new(mode: Mode, input: Option<Inbox>) -> Self {
        Self {
            mode,
            input,
            next_id: 0,
        }
    }

    /// Steering input received so far (see [`Inbox::take_inputs`]); none without stdin.
    pub fn take_inputs(&mut self, wait: bool) -> Vec<String> {
        self.input
            .as_mut()
            .map(|i| i.take_inputs(wait))
            .unwrap_or_default()
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
        // Exactly one brace off each end: the last field may itself end in `}`.
        let rest = fields
            .strip_prefix('{')
            .and_then(|f| f.strip_suffix('}'))
            .unwrap_or_default();
        let sep = if rest.is_empty() { "" } else { "," };
        out.line(&format!(
            "{{\"type\":\"approval_request\",\"id\":{}{sep}{rest}}}",
            json!(id)
        ))?;
        let Some(input) = self.input.as_mut() else {
            return Ok(Decision::Broken("no stdin to read approvals from".into()));
        };
        match input.next_line() {
            Ok(Some(text)) => Ok(parse_response(&id, &text)),
            Ok(None) => Ok(Decision::Broken(format!(
                "stdin closed while waiting for the answer to {id}"
            ))),
            Err(e) => Err(io::Error::other(e)),
        }
    }

    /// `stdio` mode: the first (or next) turn's prompt frame, or `None` at end of input.
    /// Input that arrived after the previous turn ended is too late for it: each is noted in
    /// `late` (the caller reports it on stderr) and not taken into the next turn.
    pub fn next_prompt(&mut self, late: &mut Vec<String>) -> Result<Option<String>, String> {
        let Some(input) = self.input.as_mut() else {
            return Ok(None);
        };
        match input.next_prompt_line(late) {
            Ok(None) => Ok(None),
            Ok(Some(line)) => parse_prompt_frame(&line).map(Some),
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
        let input =
            b"{\"type\":\"approval_response\",\"id\":\"approval-1\",\"behavior\":\"allow\"}\n";
        let mut out = Emitter::new(Vec::new(), Duration::ZERO);
        let inbox = Inbox::spawn(std::io::Cursor::new(input.to_vec()));
        let mut approver = Approver::new(Mode::Stdio, Some(inbox));
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
        assert_eq!(
            parse_prompt_frame("{\"type\":\"user\",\"text\":\"hi\"}\n").unwrap(),
            "hi"
        );
        assert!(parse_prompt_frame("hi\n").is_err());
    }

    #[test]
    fn input_is_set_aside_wherever_it_arrives() {
        let lines = concat!(
            "{\"type\":\"user\",\"text\":\"first\"}\n",
            "{\"type\":\"input\",\"text\":\"steer one\"}\n",
            "{\"type\":\"approval_response\",\"id\":\"approval-1\",\"behavior\":\"allow\"}\n",
            "{\"type\":\"input\",\"text\":\"steer two\"}\n",
            "{\"type\":\"user\",\"text\":\"second\"}\n",
            "{\"type\":\"input\",\"text\":\"never taken\"}\n",
            "{\"type\":\"user\",\"text\":\"third\"}\n",
        );
        let inbox = Inbox::spawn(std::io::Cursor::new(lines.as_bytes().to_vec()));
        let mut approver = Approver::new(Mode::Stdio, Some(inbox));
        let mut late = Vec::new();
        assert_eq!(
            approver.next_prompt(&mut late).unwrap().as_deref(),
            Some("first")
        );
        // The approval answer comes through although input was sent before it.
        let mut out = Emitter::new(Vec::new(), Duration::ZERO);
        let d = approver
            .decide(&mut out, serde_json::Map::new(), None)
            .unwrap();
        assert!(matches!(d, Decision::Allow { .. }), "{d:?}");
        // The reader thread may not have read the line after the answer yet: collect what
        // has arrived until both inputs are there (bounded), never more.
        let mut inputs = Vec::new();
        for _ in 0..200 {
            inputs.extend(approver.take_inputs(true));
            if inputs.len() >= 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(inputs, ["steer one", "steer two"]);
        assert_eq!(
            approver.next_prompt(&mut late).unwrap().as_deref(),
            Some("second")
        );
        assert!(late.is_empty());
        // Input the turn never took is too late for it, and not the next turn's.
        assert_eq!(
            approver.next_prompt(&mut late).unwrap().as_deref(),
            Some("third")
        );
        assert_eq!(late, ["never taken"]);
        assert_eq!(approver.next_prompt(&mut late).unwrap(), None);
        // Waiting for input at end of input returns at once.
        assert!(approver.take_inputs(true).is_empty());
    }
}
