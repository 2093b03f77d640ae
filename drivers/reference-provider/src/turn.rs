//! One scripted turn: resolves the session, applies the prompt's directives and
//! writes the event sequence, then persists the session and picks the exit code.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::approvals::{Approver, Decision};
use crate::directives::{self, Script};
use crate::events::{Emitter, Event, Usage};
use crate::process;
use crate::session::{self, SessionStore};

/// Exit code of a successful turn.
pub const EXIT_OK: u8 = 0;
/// Exit code of an agent failure or a crash.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code of a usage error.
pub const EXIT_USAGE: u8 = 2;
/// Exit code of a rejected `--resume`.
pub const EXIT_RESUME_REJECTED: u8 = 3;

/// Model reported when `--model` is not given.
pub const DEFAULT_MODEL: &str = "reference-1";

/// Id of the single thinking block.
const THINK_ID: &str = "think-1";
/// Id of the single tool call.
const CALL_ID: &str = "call-1";
/// Id of the single reply message.
const MSG_ID: &str = "msg-1";
/// Id of the `ask_user` tool call of `[[ask-question]]`.
const ASK_ID: &str = "call-ask";
/// The plan submitted for review by `[[ask-plan]]`.
pub const PLAN: &str = "1. Think about the prompt. 2. Echo it with the echo tool. 3. Reply.";
/// The question asked by `[[ask-question]]`.
pub const QUESTION: &str = "Which greeting style?";

/// Settings of one turn, resolved from the command line and environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnConfig {
    /// Model name to report.
    pub model: String,
    /// Session to resume, if any.
    pub resume: Option<String>,
    /// Fork the resumed session: same history, new session id, the old one unchanged.
    pub fork: bool,
    /// Where session files live; `None` if no state directory could be resolved.
    pub state_dir: Option<PathBuf>,
    /// Sandbox level from `--sandbox`, echoed in the session line.
    pub sandbox: Option<String>,
    /// Web-search switch from `--web-search`, echoed in the session line.
    pub web_search: Option<String>,
    /// Instructions from `--append-system-prompt`, echoed in the session line.
    pub instructions: Option<String>,
    /// Schema file from `--json-schema` (native structured output).
    pub json_schema: Option<PathBuf>,
    /// MCP servers from `--mcp-config`.
    pub mcp_config: Option<PathBuf>,
    /// Skill bundles from `--plugin-dir`.
    pub plugin_dirs: Vec<PathBuf>,
}

/// The `account` field of `<state dir>/auth.json`, when the file is there and has one.
fn read_account(state_dir: Option<&Path>) -> Option<String> {
    let text = std::fs::read_to_string(state_dir?.join("auth.json")).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value.get("account")?.as_str().map(str::to_owned)
}

/// The skills of the `--plugin-dir` bundles: `<key>: <description>` for every
/// `DIR/skills/<key>/SKILL.md` (sorted), read now — an unreadable bundle is an error.
fn read_skills(dirs: &[PathBuf]) -> Result<Vec<String>, String> {
    let mut skills = Vec::new();
    for dir in dirs {
        let skills_dir = dir.join("skills");
        let entries = std::fs::read_dir(&skills_dir)
            .map_err(|e| format!("cannot read skills in {}: {e}", skills_dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("{}: {e}", skills_dir.display()))?;
            let md = entry.path().join("SKILL.md");
            let text = std::fs::read_to_string(&md)
                .map_err(|e| format!("cannot read {}: {e}", md.display()))?;
            let description = text
                .lines()
                .find_map(|l| l.strip_prefix("description:"))
                .map(|d| d.trim().to_owned())
                .unwrap_or_default();
            skills.push(format!(
                "{}: {description}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    skills.sort();
    Ok(skills)
}

/// Runs one turn for the raw stdin prompt and returns the process exit code.
///
/// Protocol lines go to `out`, diagnostics to `err`. A failure to write
/// output ends the turn with exit code 1.
pub fn run<W: Write, E: Write>(
    cfg: &TurnConfig,
    raw_prompt: &str,
    out: &mut Emitter<W>,
    err: &mut E,
    approver: &mut Approver,
) -> u8 {
    match turn(cfg, raw_prompt, out, err, approver) {
        Ok(code) => code,
        Err(error) => {
            let _ = writeln!(err, "reference-provider: cannot write output: {error}");
            EXIT_FAILURE
        }
    }
}

/// Marker the host puts before the JSON Schema in prompt+validate structured output.
pub const SCHEMA_MARKER: &str = "Respond with only a JSON value that conforms to this JSON Schema:";

/// The JSON Schema following [`SCHEMA_MARKER`] in the prompt, if any.
pub fn schema_in_prompt(prompt: &str) -> Option<serde_json::Value> {
    let (_, rest) = prompt.split_once(SCHEMA_MARKER)?;
    serde_json::from_str(rest.trim()).ok()
}

/// A value that satisfies simple schemas: the first `enum`/`const` value, else a value of
/// the declared type (objects get every listed property; arrays honour `minItems`).
pub fn sample_for_schema(schema: &serde_json::Value) -> serde_json::Value {
    use serde_json::{Value, json};
    if let Some(v) = schema.get("const") {
        return v.clone();
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null")
            .to_owned(),
        _ if schema.get("properties").is_some() => "object".to_owned(),
        _ => "null".to_owned(),
    };
    match ty.as_str() {
        "object" => {
            let mut out = serde_json::Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, v) in props {
                    out.insert(k.clone(), sample_for_schema(v));
                }
            }
            Value::Object(out)
        }
        "array" => {
            let n = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = schema
                .get("items")
                .map(sample_for_schema)
                .unwrap_or(Value::Null);
            Value::Array(vec![item; n as usize])
        }
        "string" => json!("reference"),
        "integer" | "number" => json!(1),
        "boolean" => json!(true),
        _ => Value::Null,
    }
}

/// The reply text for `prompt`, given the earlier prompts of the session. A prompt of the
/// form `Reply with exactly: X` is answered with `X` alone (the conformance kit's live probe).
pub fn reply_text(prompt: &str, history: &[String]) -> String {
    if let Some(exact) = prompt.strip_prefix("Reply with exactly: ") {
        return exact.to_owned();
    }
    match history.last() {
        None => format!("Reference reply: {prompt}"),
        Some(previous) => format!(
            "Reference reply (turn {}, previously: {previous}): {prompt}",
            history.len() + 1
        ),
    }
}

/// The text deltas carrying `reply`: its two halves split at the middle char
/// boundary (one delta if it has fewer than two chars), or with `spam = Some(n)`
/// the whole reply followed by `n - 1` deltas of `.`.
pub fn reply_deltas(reply: &str, spam: Option<u32>) -> Vec<&str> {
    if let Some(n) = spam {
        let mut deltas = vec![reply];
        deltas.extend(std::iter::repeat_n(".", n.saturating_sub(1) as usize));
        return deltas;
    }
    let chars = reply.chars().count();
    if chars < 2 {
        return vec![reply];
    }
    let mid = reply
        .char_indices()
        .nth(chars / 2)
        .map_or(reply.len(), |(at, _)| at);
    vec![&reply[..mid], &reply[mid..]]
}

/// The body of [`run`]; `Err` only for output write failures.
fn turn<W: Write, E: Write>(
    cfg: &TurnConfig,
    raw_prompt: &str,
    out: &mut Emitter<W>,
    err: &mut E,
    approver: &mut Approver,
) -> io::Result<u8> {
    let parsed = match directives::parse(trim_trailing_newline(raw_prompt)) {
        Ok(parsed) => parsed,
        Err(message) => {
            writeln!(err, "reference-provider: {message}")?;
            return Ok(EXIT_USAGE);
        }
    };
    let prompt = parsed.prompt.as_str();
    let script = &parsed.script;
    if script.ignore_term {
        process::ignore_sigterm();
    }

    let store = cfg.state_dir.as_ref().map(SessionStore::new);
    let (session_id, history) = match &cfg.resume {
        None => (session::new_session_id(prompt), Vec::new()),
        Some(id) => {
            let Some(store) = &store else {
                writeln!(
                    err,
                    "reference-provider: --resume needs a state directory \
                     (--state-dir, REFERENCE_PROVIDER_STATE_DIR or HOME)"
                )?;
                return Ok(EXIT_USAGE);
            };
            let loaded = if session::is_valid_session_id(id) {
                store.load(id)
            } else {
                Ok(None)
            };
            match loaded {
                Ok(Some(history)) if cfg.fork => (session::new_session_id(prompt), history),
                Ok(Some(history)) => (id.clone(), history),
                Ok(None) => {
                    return reject_resume(out, &format!("unknown session: {id}"));
                }
                Err(message) => {
                    return reject_resume(out, &format!("unreadable session {id}: {message}"));
                }
            }
        }
    };
    let model = cfg.model.as_str();
    let input_tokens = prompt.len() as u64 + 10;

    if script.noise {
        out.line("reference-provider: plain text noise")?;
        writeln!(err, "reference-provider: warming up")?;
    }
    for line in &script.stderr_lines {
        writeln!(err, "{line}")?;
    }
    err.flush()?;

    let skills = match read_skills(&cfg.plugin_dirs) {
        Ok(skills) => skills,
        Err(problem) => {
            writeln!(err, "reference-provider: {problem}")?;
            return Ok(2);
        }
    };
    let account = read_account(cfg.state_dir.as_deref());
    out.event(&Event::Session {
        session_id: &session_id,
        skills: &skills,
        account: account.as_deref(),
        model,
        resumed: cfg.resume.is_some(),
        sandbox: cfg.sandbox.as_deref(),
        web_search: cfg.web_search.as_deref(),
        instructions: cfg.instructions.as_deref(),
    })?;

    // Steering input that arrived since the turn began (with `[[await-input]]`: wait for
    // it): acknowledged, and answered in the reply.
    let inputs = approver.take_inputs(script.await_input);
    for text in &inputs {
        out.event(&Event::InputReceived { text })?;
    }

    if script.grandchild {
        match process::spawn_grandchild() {
            Ok(grandchild_pid) => out.event(&Event::Notice {
                kind: "pids",
                provider_pid: std::process::id(),
                grandchild_pid,
            })?,
            Err(error) => {
                let message = format!("cannot spawn grandchild: {error}");
                return fail_turn(out, &session_id, model, input_tokens, AGENT_ERROR, &message);
            }
        }
    }
    if script.sleep_ms > 0 {
        std::thread::sleep(Duration::from_millis(script.sleep_ms));
    }
    if script.hang {
        process::sleep_forever();
    }
    for (n, call) in script.mcp_calls.iter().enumerate() {
        let id = format!("mcp-{}", n + 1);
        let name = format!("mcp__{}__{}", call.server, call.tool);
        out.event(&Event::ToolCall {
            id: &id,
            name: &name,
            input: call.arguments.clone(),
        })?;
        let (output, is_error) = crate::mcp::call(cfg.mcp_config.as_deref(), call);
        out.event(&Event::ToolResult {
            id: &id,
            output: &output,
            is_error,
        })?;
    }
    for (n, bench) in script.mcp_benches.iter().enumerate() {
        let id = format!("mcp-bench-{}", n + 1);
        out.event(&Event::ToolCall {
            id: &id,
            name: "mcp-bench",
            input: serde_json::json!({"servers": bench.servers, "tool": bench.tool, "rounds": bench.rounds}),
        })?;
        let (output, is_error) = crate::mcp::bench(cfg.mcp_config.as_deref(), bench);
        out.event(&Event::ToolResult {
            id: &id,
            output: &output,
            is_error,
        })?;
    }
    if script.fail {
        return fail_turn(
            out,
            &session_id,
            model,
            input_tokens,
            AGENT_ERROR,
            "reference failure requested",
        );
    }

    let native_schema = match &cfg.json_schema {
        Some(path) => match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).map_err(|e| e.to_string()))
        {
            Ok(schema) => Some(schema),
            Err(e) => {
                let _ = writeln!(
                    err,
                    "reference-provider: cannot use --json-schema {}: {e}",
                    path.display()
                );
                return Ok(EXIT_USAGE);
            }
        },
        None => None,
    };
    let structured = native_schema.as_ref().map(|schema| {
        if script.invalid_json {
            serde_json::json!({"unexpected": true})
        } else {
            sample_for_schema(schema)
        }
    });
    let reply = match (&structured, schema_in_prompt(prompt)) {
        (Some(value), _) => value.to_string(),
        (None, Some(_)) if script.invalid_json => r#"{"unexpected":true}"#.to_owned(),
        (None, Some(schema)) => sample_for_schema(&schema).to_string(),
        (None, None) => with_inputs(reply_text(prompt, &history), &inputs),
    };
    let deltas = reply_deltas(&reply, script.spam);
    if script.crash {
        out.event(&Event::TextDelta {
            id: MSG_ID,
            text: deltas[0],
        })?;
        return Ok(EXIT_FAILURE);
    }

    let ended = Ended {
        session_id: &session_id,
        model,
        input_tokens,
    };
    if let Some(code) = write_answer(out, prompt, &deltas, script, approver, &ended)? {
        return Ok(code);
    }
    if script.malformed {
        out.line(r#"{"type":"text_delta","id":"msg-1","text":"#)?;
    }

    let turns = history.len() + 1;
    if script.exit_code == EXIT_OK {
        match &store {
            Some(store) => {
                let mut prompts = history;
                prompts.push(prompt.to_string());
                if let Err(error) = store.save(&session_id, &prompts) {
                    let message = format!("cannot save session {session_id}: {error}");
                    return fail_turn(out, &session_id, model, input_tokens, AGENT_ERROR, &message);
                }
            }
            None => writeln!(
                err,
                "reference-provider: no state directory; session {session_id} was not saved"
            )?,
        }
    }

    let text = deltas.concat();
    let summary = format!("Answered in {turns} turn(s).");
    out.event(&Event::Result {
        status: "success",
        session_id: &session_id,
        model,
        text: &text,
        summary: Some(&summary),
        usage: Usage {
            input_tokens,
            output_tokens: text.len() as u64,
            cache_read_tokens: Some(0),
        },
        structured_output: structured,
    })?;
    Ok(script.exit_code)
}

/// `reply` answering the steering `inputs` too: `<reply> + <input> + …`.
pub fn with_inputs(reply: String, inputs: &[String]) -> String {
    inputs
        .iter()
        .fold(reply, |reply, input| format!("{reply} + {input}"))
}

/// Strips one trailing newline (`\n` or `\r\n`) from the stdin prompt.
pub fn trim_trailing_newline(raw: &str) -> &str {
    raw.strip_suffix('\n')
        .map_or(raw, |rest| rest.strip_suffix('\r').unwrap_or(rest))
}

/// What an early end of the turn needs to report.
struct Ended<'a> {
    session_id: &'a str,
    model: &'a str,
    input_tokens: u64,
}

impl Ended<'_> {
    fn fail<W: Write>(&self, out: &mut Emitter<W>, code: &str, message: &str) -> io::Result<u8> {
        fail_turn(
            out,
            self.session_id,
            self.model,
            self.input_tokens,
            code,
            message,
        )
    }
}

/// A request's fields as an ordered list (kept in this order on the line).
fn request(fields: &[(&str, Value)]) -> Map<String, Value> {
    fields
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// The optional plan review and question, thinking, the echo tool round trip (with the
/// optional permission request) and the reply deltas. `Some(code)` when an approval ended
/// the turn early (its error lines are written).
fn write_answer<W: Write>(
    out: &mut Emitter<W>,
    prompt: &str,
    deltas: &[&str],
    script: &Script,
    approver: &mut Approver,
    ended: &Ended<'_>,
) -> io::Result<Option<u8>> {
    if script.ask_plan {
        let req = request(&[("kind", json!("plan")), ("plan", json!(PLAN))]);
        match approver.decide(out, req, None)? {
            Decision::Allow { .. }
            | Decision::Deny {
                interrupt: false, ..
            } => {}
            Decision::Deny { message, .. } => {
                return ended.fail(out, APPROVAL_DENIED, &message).map(Some);
            }
            Decision::Broken(message) => return ended.fail(out, AGENT_ERROR, &message).map(Some),
        }
    }
    for text in ["Planning ", "the reply."] {
        out.event(&Event::ThinkingDelta { id: THINK_ID, text })?;
    }
    out.event(&Event::ThinkingEnd { id: THINK_ID })?;
    if script.ask_question {
        let options = json!([
            {"key": "formal", "label": "Formal", "description": "Good day."},
            {"key": "casual", "label": "Casual"}
        ]);
        out.event(&Event::ToolCall {
            id: ASK_ID,
            name: "ask_user",
            input: json!({"question": QUESTION, "options": options}),
        })?;
        let req = request(&[
            ("kind", json!("question")),
            ("tool_call_id", json!(ASK_ID)),
            ("question", json!(QUESTION)),
            ("options", options),
        ]);
        match approver.decide(out, req, Some("formal"))? {
            Decision::Allow { answer, .. } => {
                let answer = answer.unwrap_or_default();
                out.event(&Event::ToolResult {
                    id: ASK_ID,
                    output: &answer,
                    is_error: false,
                })?;
            }
            Decision::Deny { message, interrupt } => {
                out.event(&Event::ToolResult {
                    id: ASK_ID,
                    output: &format!("no answer: {message}"),
                    is_error: true,
                })?;
                if interrupt {
                    return ended.fail(out, APPROVAL_DENIED, &message).map(Some);
                }
            }
            Decision::Broken(message) => return ended.fail(out, AGENT_ERROR, &message).map(Some),
        }
    }
    let input = json!({ "text": prompt });
    out.event(&Event::ToolCall {
        id: CALL_ID,
        name: "echo",
        input: input.clone(),
    })?;
    let (output, is_error) = if script.ask_permission {
        let req = request(&[
            ("kind", json!("permission")),
            ("tool_call_id", json!(CALL_ID)),
            ("tool", json!("echo")),
            ("input", input),
        ]);
        match approver.decide(out, req, None)? {
            Decision::Allow { updated_input, .. } => {
                let text = updated_input
                    .as_ref()
                    .and_then(|i| i.get("text"))
                    .and_then(Value::as_str)
                    .unwrap_or(prompt);
                (text.to_owned(), false)
            }
            Decision::Deny { message, interrupt } => {
                if interrupt {
                    out.event(&Event::ToolResult {
                        id: CALL_ID,
                        output: &format!("denied: {message}"),
                        is_error: true,
                    })?;
                    return ended.fail(out, APPROVAL_DENIED, &message).map(Some);
                }
                (format!("denied: {message}"), true)
            }
            Decision::Broken(message) => return ended.fail(out, AGENT_ERROR, &message).map(Some),
        }
    } else {
        (prompt.to_owned(), false)
    };
    out.event(&Event::ToolResult {
        id: CALL_ID,
        output: &output,
        is_error,
    })?;
    for text in deltas {
        out.event(&Event::TextDelta { id: MSG_ID, text })?;
    }
    if script.stall {
        process::sleep_forever();
    }
    out.event(&Event::TextEnd { id: MSG_ID })?;
    Ok(None)
}

/// Error code of a failed turn.
const AGENT_ERROR: &str = "agent_error";
/// Error code of a turn ended by a refused approval.
const APPROVAL_DENIED: &str = "approval_denied";

/// Writes the `resume_rejected` error line and returns exit code 3.
fn reject_resume<W: Write>(out: &mut Emitter<W>, message: &str) -> io::Result<u8> {
    out.event(&Event::Error {
        code: "resume_rejected",
        message,
    })?;
    Ok(EXIT_RESUME_REJECTED)
}

/// Writes an error line with `code` and an error result, and returns exit code 1.
fn fail_turn<W: Write>(
    out: &mut Emitter<W>,
    session_id: &str,
    model: &str,
    input_tokens: u64,
    code: &str,
    message: &str,
) -> io::Result<u8> {
    out.event(&Event::Error { code, message })?;
    out.event(&Event::Result {
        status: "error",
        session_id,
        model,
        text: "",
        summary: None,
        usage: Usage {
            input_tokens,
            output_tokens: 0,
            cache_read_tokens: None,
        },
        structured_output: None,
    })?;
    Ok(EXIT_FAILURE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use std::fs;

    /// A unique, initially absent directory under the system temp dir.
    fn temp_dir(tag: &str) -> PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        std::env::temp_dir().join(format!(
            "reference-provider-turn-{tag}-{}-{nanos}",
            std::process::id()
        ))
    }

    /// Runs a turn in-process; returns (exit code, stdout lines, stderr).
    fn run_in(cfg: &TurnConfig, prompt: &str) -> (u8, Vec<String>, String) {
        run_with(cfg, prompt, crate::approvals::Mode::Deny, b"")
    }

    /// Like `run_in`, with an approvals mode and the stdin lines answering requests.
    fn run_with(
        cfg: &TurnConfig,
        prompt: &str,
        mode: crate::approvals::Mode,
        answers: &[u8],
    ) -> (u8, Vec<String>, String) {
        let mut out = Emitter::new(Vec::new(), Duration::ZERO);
        let mut err = Vec::new();
        let inbox = crate::approvals::Inbox::spawn(std::io::Cursor::new(answers.to_vec()));
        let mut approver = Approver::new(mode, Some(inbox));
        let code = run(cfg, prompt, &mut out, &mut err, &mut approver);
        let stdout = String::from_utf8(out.into_inner()).unwrap();
        let lines = stdout.lines().map(str::to_string).collect();
        (code, lines, String::from_utf8(err).unwrap())
    }

    fn json_lines(lines: &[String]) -> Vec<Value> {
        lines
            .iter()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect()
    }

    fn config(state_dir: Option<PathBuf>, resume: Option<&str>) -> TurnConfig {
        TurnConfig {
            model: DEFAULT_MODEL.to_string(),
            resume: resume.map(str::to_string),
            fork: false,
            state_dir,
            sandbox: None,
            web_search: None,
            instructions: None,
            json_schema: None,
            mcp_config: None,
            plugin_dirs: Vec::new(),
        }
    }

    #[test]
    fn schema_instructions_get_a_matching_value() {
        let prompt = format!(
            "review {SCHEMA_MARKER}\n{{\"type\":\"object\",\"properties\":{{\"verdict\":{{\"type\":\"string\",\"enum\":[\"ok\",\"bad\"]}},\"issues\":{{\"type\":\"array\",\"items\":{{\"type\":\"string\"}}}}}}}}"
        );
        let schema = schema_in_prompt(&prompt).expect("schema found");
        assert_eq!(
            sample_for_schema(&schema),
            serde_json::json!({"verdict": "ok", "issues": []})
        );
    }

    #[test]
    fn reply_text_for_new_and_resumed_sessions() {
        assert_eq!(reply_text("Reply with exactly: OK", &[]), "OK");
        assert_eq!(reply_text("hi", &[]), "Reference reply: hi");
        assert_eq!(
            reply_text("again", &["hi".to_string()]),
            "Reference reply (turn 2, previously: hi): again"
        );
        assert_eq!(
            reply_text("c", &["a".to_string(), "b".to_string()]),
            "Reference reply (turn 3, previously: b): c"
        );
    }

    #[test]
    fn one_trailing_newline_is_trimmed() {
        assert_eq!(trim_trailing_newline("hi\n"), "hi");
        assert_eq!(trim_trailing_newline("hi\r\n"), "hi");
        assert_eq!(trim_trailing_newline("hi\n\n"), "hi\n");
        assert_eq!(trim_trailing_newline("hi"), "hi");
    }

    #[test]
    fn reply_deltas_split_at_char_boundaries() {
        assert_eq!(reply_deltas("abcd", None), vec!["ab", "cd"]);
        assert_eq!(reply_deltas("abcde", None), vec!["ab", "cde"]);
        assert_eq!(reply_deltas("é✓", None), vec!["é", "✓"]);
        assert_eq!(reply_deltas("x", None), vec!["x"]);
        assert_eq!(reply_deltas("", None), vec![""]);
        assert_eq!(reply_deltas("ab", Some(1)), vec!["ab"]);
        assert_eq!(reply_deltas("ab", Some(3)), vec!["ab", ".", "."]);
    }

    #[test]
    fn full_turn_then_resume() {
        let dir = temp_dir("resume");
        let (code, lines, _) = run_in(&config(Some(dir.clone()), None), "hello\n");
        assert_eq!(code, 0);
        let events = json_lines(&lines);
        let id = events[0]["session_id"].as_str().unwrap().to_string();
        assert!(session::is_valid_session_id(&id));
        let reply = "Reference reply: hello";
        let (first, second) = reply.split_at(reply.chars().count() / 2);
        assert_eq!(
            events,
            vec![
                json!({"type":"session","session_id":id,"model":"reference-1","resumed":false}),
                json!({"type":"thinking_delta","id":"think-1","text":"Planning "}),
                json!({"type":"thinking_delta","id":"think-1","text":"the reply."}),
                json!({"type":"thinking_end","id":"think-1"}),
                json!({"type":"tool_call","id":"call-1","name":"echo","input":{"text":"hello"}}),
                json!({"type":"tool_result","id":"call-1","output":"hello","is_error":false}),
                json!({"type":"text_delta","id":"msg-1","text":first}),
                json!({"type":"text_delta","id":"msg-1","text":second}),
                json!({"type":"text_end","id":"msg-1"}),
                json!({"type":"result","status":"success","session_id":id,"model":"reference-1",
                       "text":reply,"summary":"Answered in 1 turn(s).",
                       "usage":{"input_tokens":15,"output_tokens":reply.len(),"cache_read_tokens":0}}),
            ]
        );

        let (code, lines, _) = run_in(&config(Some(dir.clone()), Some(&id)), "again");
        assert_eq!(code, 0);
        let events = json_lines(&lines);
        assert_eq!(events[0]["resumed"], json!(true));
        assert_eq!(events[0]["session_id"], json!(id));
        let last = events.last().unwrap();
        assert_eq!(
            last["text"],
            json!("Reference reply (turn 2, previously: hello): again")
        );
        assert_eq!(last["summary"], json!("Answered in 2 turn(s)."));
        assert_eq!(
            SessionStore::new(&dir).load(&id),
            Ok(Some(vec!["hello".to_string(), "again".to_string()]))
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn fork_continues_the_history_in_a_new_session_and_keeps_the_parent() {
        let dir = temp_dir("fork");
        let (_, lines, _) = run_in(&config(Some(dir.clone()), None), "hello");
        let parent = json_lines(&lines)[0]["session_id"]
            .as_str()
            .unwrap()
            .to_string();
        let mut cfg = config(Some(dir.clone()), Some(&parent));
        cfg.fork = true;
        let (code, lines, _) = run_in(&cfg, "branch");
        assert_eq!(code, 0);
        let events = json_lines(&lines);
        let child = events[0]["session_id"].as_str().unwrap().to_string();
        assert_ne!(child, parent);
        assert_eq!(events[0]["resumed"], json!(true));
        assert_eq!(
            events.last().unwrap()["text"],
            json!("Reference reply (turn 2, previously: hello): branch")
        );
        let store = SessionStore::new(&dir);
        assert_eq!(store.load(&parent), Ok(Some(vec!["hello".to_string()])));
        assert_eq!(
            store.load(&child),
            Ok(Some(vec!["hello".to_string(), "branch".to_string()]))
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_and_invalid_resume_ids_are_rejected() {
        let dir = temp_dir("reject");
        for id in ["ref-0123456789abcdef", "../etc/passwd"] {
            let (code, lines, _) = run_in(&config(Some(dir.clone()), Some(id)), "[[noise]] hi");
            assert_eq!(code, 3);
            assert_eq!(
                json_lines(&lines),
                vec![json!({"type":"error","code":"resume_rejected",
                            "message":format!("unknown session: {id}")})]
            );
        }
        assert!(!dir.exists());
    }

    #[test]
    fn resume_without_state_dir_is_a_usage_error() {
        let (code, lines, err) = run_in(&config(None, Some("ref-00")), "hi");
        assert_eq!(code, 2);
        assert!(lines.is_empty());
        assert!(err.contains("state directory"), "{err}");
    }

    #[test]
    fn fail_directive() {
        let dir = temp_dir("fail");
        let (code, lines, _) = run_in(&config(Some(dir.clone()), None), "[[fail]] hi");
        assert_eq!(code, 1);
        let events = json_lines(&lines);
        let id = events[0]["session_id"].as_str().unwrap();
        assert_eq!(events.len(), 3);
        assert_eq!(
            events[1],
            json!({"type":"error","code":"agent_error","message":"reference failure requested"})
        );
        assert_eq!(
            events[2],
            json!({"type":"result","status":"error","session_id":id,"model":"reference-1",
                   "text":"","summary":null,"usage":{"input_tokens":12,"output_tokens":0}})
        );
        assert!(!dir.exists(), "no session file on failure");
    }

    #[test]
    fn exit_directive_keeps_output_but_skips_saving() {
        let dir = temp_dir("exit");
        let (code, lines, _) = run_in(&config(Some(dir.clone()), None), "hi [[exit 5]]");
        assert_eq!(code, 5);
        let events = json_lines(&lines);
        assert_eq!(events.len(), 10);
        assert_eq!(events[9]["status"], json!("success"));
        assert_eq!(events[9]["text"], json!("Reference reply: hi"));
        assert!(!dir.exists());

        let (code, _, _) = run_in(&config(Some(dir.clone()), None), "hi [[exit 0]]");
        assert_eq!(code, 0);
        assert!(dir.exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn crash_directive() {
        let (code, lines, _) = run_in(&config(None, None), "[[crash]] hi");
        assert_eq!(code, 1);
        let events = json_lines(&lines);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0]["type"], json!("session"));
        assert_eq!(
            events[1],
            json!({"type":"text_delta","id":"msg-1","text":"Reference"})
        );
    }

    #[test]
    fn noise_stderr_spam_and_malformed() {
        let (code, lines, err) = run_in(
            &config(None, None),
            "[[noise]] [[stderr alpha]] [[stderr beta]] [[spam 4]] [[malformed]] hi",
        );
        assert_eq!(code, 0);
        assert_eq!(lines[0], "reference-provider: plain text noise");
        assert!(lines[1].starts_with(r#"{"type":"session""#));
        assert_eq!(
            err.lines().take(3).collect::<Vec<_>>(),
            vec!["reference-provider: warming up", "alpha", "beta"]
        );
        let deltas: Vec<Value> = json_lines(&lines[1..lines.len() - 2])
            .into_iter()
            .filter(|e| e["type"] == "text_delta")
            .map(|e| e["text"].clone())
            .collect();
        assert_eq!(
            deltas,
            vec![
                json!("Reference reply: hi"),
                json!("."),
                json!("."),
                json!(".")
            ]
        );
        assert_eq!(
            lines[lines.len() - 2],
            r#"{"type":"text_delta","id":"msg-1","text":"#
        );
        let result: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
        assert_eq!(result["text"], json!("Reference reply: hi..."));
        assert_eq!(result["usage"]["output_tokens"], json!(22));
        assert_eq!(result["usage"]["input_tokens"], json!(12));
    }

    fn answer(id: u32, fields: &str) -> String {
        format!("{{\"type\":\"approval_response\",\"id\":\"approval-{id}\",{fields}}}\n")
    }

    #[test]
    fn stdio_approvals_ask_and_follow_the_answers() {
        use crate::approvals::Mode;
        let answers = [
            answer(1, r#""behavior":"allow""#),
            answer(2, r#""behavior":"allow","answer":"casual""#),
            answer(3, r#""behavior":"allow","updated_input":{"text":"edited"}"#),
        ]
        .concat();
        let (code, lines, _) = run_with(
            &config(None, None),
            "[[ask-plan]] [[ask-question]] [[ask-permission]] hi",
            Mode::Stdio,
            answers.as_bytes(),
        );
        assert_eq!(code, 0);
        let events = json_lines(&lines);
        let asks: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "approval_request")
            .collect();
        assert_eq!(asks.len(), 3);
        assert_eq!(
            asks[0],
            &json!({"type":"approval_request","id":"approval-1","kind":"plan","plan":PLAN})
        );
        assert_eq!(asks[1]["kind"], json!("question"));
        assert_eq!(asks[1]["options"][1]["key"], json!("casual"));
        assert_eq!(
            asks[2],
            &json!({"type":"approval_request","id":"approval-3","kind":"permission",
                    "tool_call_id":"call-1","tool":"echo","input":{"text":"hi"}})
        );
        let results: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "tool_result")
            .collect();
        assert_eq!(results[0]["output"], json!("casual"));
        assert_eq!(results[1]["output"], json!("edited"));
        assert_eq!(events.last().unwrap()["status"], json!("success"));
    }

    #[test]
    fn denials_continue_or_end_the_turn() {
        use crate::approvals::Mode;
        let (code, lines, _) = run_with(
            &config(None, None),
            "[[ask-permission]] hi",
            Mode::Stdio,
            answer(1, r#""behavior":"deny","message":"not now""#).as_bytes(),
        );
        assert_eq!(code, 0);
        let events = json_lines(&lines);
        let result = events.iter().find(|e| e["type"] == "tool_result").unwrap();
        assert_eq!(
            (result["output"].clone(), result["is_error"].clone()),
            (json!("denied: not now"), json!(true))
        );

        let (code, lines, _) = run_with(
            &config(None, None),
            "[[ask-permission]] hi",
            Mode::Stdio,
            answer(1, r#""behavior":"deny","message":"stop","interrupt":true"#).as_bytes(),
        );
        assert_eq!(code, 1);
        let events = json_lines(&lines);
        let n = events.len();
        assert_eq!(
            events[n - 2],
            json!({"type":"error","code":"approval_denied","message":"stop"})
        );
        assert_eq!(events[n - 1]["status"], json!("error"));

        // stdin closed while waiting: the turn fails, nothing is assumed.
        let (code, lines, _) = run_with(&config(None, None), "[[ask-plan]] hi", Mode::Stdio, b"");
        assert_eq!(code, 1);
        let events = json_lines(&lines);
        assert_eq!(events[events.len() - 2]["code"], json!("agent_error"));

        // Without stdio the CLI's own setting decides: deny by default, allow when told.
        let (code, lines, _) = run_in(
            &config(None, None),
            "[[ask-permission]] [[ask-question]] hi",
        );
        assert_eq!(code, 0);
        assert!(lines.iter().all(|l| !l.contains("approval_request")));
        assert!(
            lines
                .iter()
                .any(|l| l.contains("refused: the provider runs with --approvals deny"))
        );
        let (_, lines, _) = run_with(&config(None, None), "[[ask-question]] hi", Mode::Allow, b"");
        let events = json_lines(&lines);
        let result = events.iter().find(|e| e["type"] == "tool_result").unwrap();
        assert_eq!(result["output"], json!("formal"));
    }

    #[test]
    fn invalid_directive_is_a_usage_error() {
        let (code, lines, err) = run_in(&config(None, None), "[[exit nope]]");
        assert_eq!(code, 2);
        assert!(lines.is_empty());
        assert!(err.contains("[[exit nope]]"), "{err}");
    }
}
