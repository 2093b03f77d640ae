//! `fake-cursor-agent`: a scripted stand-in for Cursor Agent's print mode (`agent -p
//! --output-format stream-json`), which cannot be installed on these machines. It emits the
//! frames of Cursor's documented and recorded stream-json format with their keys in the
//! recorded order, so the Cursor driver runs end to end through the real host and process
//! layer. Install it (or a symlink to it) as `agent` so the host grants it Cursor's state
//! directory (`$CURSOR_CONFIG_DIR`, else `~/.cursor`), where it keeps its sessions.
//!
//! Command line: `-p`/`--print`, `--output-format stream-json` (anything else is refused),
//! `--stream-partial-output`, `--workspace DIR` (must exist), `--resume ID` / `--resume=ID`
//! (an unknown session fails like the real CLI: a stderr line, exit 1), `--model M`,
//! `--mode ask|plan`, `--force` / `--yolo` / `-f`, `--version`. The prompt is read from stdin.
//!
//! The reply is `Cursor reply: <prompt>`, or `Turn <n> of the session: <prompt>` on a resumed
//! session. Directives in the prompt (`[[name]]`, `[[name arg]]`, removed from the reply):
//!
//! * `[[tool read PATH]]` / `[[tool write PATH]]`: a read (of a real file under the
//!   workspace; a missing one gives an `error` envelope) or write tool call;
//!   `[[tool mcp]]`, `[[tool task]]`: an MCP call and a subagent task, as recorded live;
//!   `[[tool rejected]]`: a shell call the CLI rejected;
//! * `[[fail]]`: no result, `Error: network unreachable` on stderr, exit 1;
//! * `[[error-result]]`: a result with `is_error: true`;
//! * `[[truncate]]`: half a frame without its newline, then exit 0;
//! * `[[unknown-frame]]`: a `connection/reconnected` frame (not in the documented set);
//! * `[[after-result]]`: an assistant frame after the result;
//! * `[[no-session-id]]`, `[[change-session]]`: an assistant frame without / with another
//!   session id;
//! * `[[two-variants]]`: a tool call holding two `*ToolCall` variants;
//! * `[[exit N]]`: exit `N` after a successful result;
//! * `[[sleep MS]]`: sleep after the init frame;
//! * `[[noise]]`: a non-JSON stdout line and a stderr line first.

use std::io::Read;
use std::process::ExitCode;

use fake_clis::{Directive, Sessions, arg, directives, emit, has, new_session_id};

/// What `--version` prints (Cursor's versions are build dates).
const VERSION: &str = "2026.07.23-fake";

/// A JSON string literal.
fn s(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

/// A JSON object with its members in the given order (values are JSON text).
fn obj(members: &[(&str, String)]) -> String {
    let body: Vec<String> = members
        .iter()
        .map(|(k, v)| format!("{}:{v}", s(k)))
        .collect();
    format!("{{{}}}", body.join(","))
}

struct Args {
    partial: bool,
    workspace: Option<String>,
    resume: Option<String>,
    model: Option<String>,
}

fn parse(args: Vec<String>) -> Result<Option<Args>, String> {
    let mut out = Args {
        partial: false,
        workspace: None,
        resume: None,
        model: None,
    };
    let mut format = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (a.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or(format!("option '{name}' argument missing"))
        };
        match flag.as_str() {
            "-v" | "--version" => return Ok(None),
            "-p" | "--print" | "-f" | "--force" | "--yolo" => {}
            "--stream-partial-output" => out.partial = true,
            "--output-format" => format = Some(value("--output-format <format>")?),
            "--workspace" => out.workspace = Some(value("--workspace <path>")?),
            "--resume" => out.resume = Some(value("--resume [chatId]")?),
            "-m" | "--model" => out.model = Some(value("--model <model>")?),
            "--mode" => {
                let mode = value("--mode <mode>")?;
                if mode != "ask" && mode != "plan" {
                    return Err(format!(
                        "option '--mode <mode>' argument '{mode}' is invalid"
                    ));
                }
            }
            other => return Err(format!("unknown option '{other}'")),
        }
    }
    if format.as_deref() != Some("stream-json") {
        return Err("this fake speaks only --output-format stream-json".into());
    }
    Ok(Some(out))
}

/// One recorded-shape tool call: the `started` and `completed` frames.
fn tool_frames(kind: &str, target: Option<&str>, n: usize, cwd: &str, sid: &str) -> [String; 2] {
    let id = format!("toolu_fake_{n}");
    let (variant, args, result) = match kind {
        "read" => {
            let path = target.unwrap_or("README.md");
            let result = match std::fs::read_to_string(std::path::Path::new(cwd).join(path)) {
                Ok(text) => obj(&[(
                    "success",
                    obj(&[
                        ("content", s(&text)),
                        ("isEmpty", text.is_empty().to_string()),
                        ("exceededLimit", "false".into()),
                        ("totalLines", text.lines().count().to_string()),
                        ("totalChars", text.chars().count().to_string()),
                    ]),
                )]),
                Err(e) => obj(&[("error", obj(&[("errorMessage", s(&e.to_string()))]))]),
            };
            ("readToolCall", obj(&[("path", s(path))]), result)
        }
        "write" => {
            let path = target.unwrap_or("out.txt");
            let text = "written by fake-cursor-agent\n";
            let full = std::path::Path::new(cwd).join(path);
            let result = match std::fs::write(&full, text) {
                Ok(()) => obj(&[(
                    "success",
                    obj(&[
                        ("path", s(&full.display().to_string())),
                        ("linesCreated", "1".into()),
                        ("fileSize", text.len().to_string()),
                    ]),
                )]),
                Err(e) => obj(&[("error", obj(&[("errorMessage", s(&e.to_string()))]))]),
            };
            let args = obj(&[
                ("path", s(path)),
                ("fileText", s(text)),
                ("toolCallId", s(&id)),
            ]);
            ("writeToolCall", args, result)
        }
        "mcp" => (
            "mcpToolCall",
            obj(&[
                ("name", s("docs-search")),
                ("args", obj(&[("q", s("x"))])),
                ("toolCallId", s(&id)),
                ("providerIdentifier", s("docs")),
                ("toolName", s("search")),
            ]),
            obj(&[(
                "success",
                obj(&[
                    (
                        "content",
                        format!("[{}]", obj(&[("text", obj(&[("text", s("3 hits"))]))])),
                    ),
                    ("isError", "false".into()),
                ]),
            )]),
        ),
        "task" => (
            "taskToolCall",
            obj(&[
                ("description", s("Summarize")),
                ("prompt", s("Summarize the README.")),
                ("agentId", s("fake-agent")),
            ]),
            obj(&[(
                "success",
                obj(&[
                    (
                        "conversationSteps",
                        format!(
                            "[{}]",
                            obj(&[("assistantMessage", obj(&[("text", s("SUBAGENT_DONE"))]))])
                        ),
                    ),
                    ("agentId", s("fake-child")),
                    ("isBackground", "false".into()),
                ]),
            )]),
        ),
        _ => (
            "shellToolCall",
            obj(&[("command", s("rm -rf /"))]),
            obj(&[("rejected", obj(&[("command", s("rm -rf /"))]))]),
        ),
    };
    let frame = |subtype: &str, body: String| {
        obj(&[
            ("type", s("tool_call")),
            ("subtype", s(subtype)),
            ("call_id", s(&id)),
            ("tool_call", obj(&[(variant, body)])),
            ("session_id", s(sid)),
        ])
    };
    [
        frame("started", obj(&[("args", args.clone())])),
        frame("completed", obj(&[("args", args), ("result", result)])),
    ]
}

fn assistant(text: &str, extra: &[(&str, String)], sid: Option<&str>) -> String {
    let mut members = vec![
        ("type", s("assistant")),
        (
            "message",
            obj(&[
                ("role", s("assistant")),
                (
                    "content",
                    format!("[{}]", obj(&[("type", s("text")), ("text", s(text))])),
                ),
            ]),
        ),
    ];
    if let Some(sid) = sid {
        members.push(("session_id", s(sid)));
    }
    members.extend(extra.iter().cloned());
    obj(&members)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(args) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{VERSION}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(1);
        }
    };
    let cwd = match &args.workspace {
        Some(dir) if std::path::Path::new(dir).is_dir() => dir.clone(),
        Some(dir) => {
            eprintln!("Error: workspace {dir} does not exist");
            return ExitCode::from(1);
        }
        None => std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_else(|_| ".".into()),
    };
    let mut raw = String::new();
    if std::io::stdin().read_to_string(&mut raw).is_err() {
        eprintln!("Error: the prompt on stdin is not UTF-8");
        return ExitCode::from(1);
    }
    let (script, prompt) = directives(&raw);
    let sessions = Sessions::open("CURSOR_CONFIG_DIR", ".cursor");
    let (sid, turn) = match &args.resume {
        Some(id) => match sessions.history(id) {
            Some(history) => (id.clone(), history.len() + 1),
            None => {
                eprintln!("Error: No conversation found with chat ID: {id}");
                return ExitCode::from(1);
            }
        },
        None => (new_session_id(), 1),
    };
    run(&args, &script, &prompt, &cwd, &sid, turn, &sessions)
}

fn run(
    args: &Args,
    script: &[Directive],
    prompt: &str,
    cwd: &str,
    sid: &str,
    turn: usize,
    sessions: &Sessions,
) -> ExitCode {
    if has(script, "noise") {
        emit("Cursor Agent (fake) starting");
        eprintln!("warning: telemetry disabled");
    }
    let model = args.model.clone().unwrap_or_else(|| "Auto".into());
    emit(&obj(&[
        ("type", s("system")),
        ("subtype", s("init")),
        ("apiKeySource", s("login")),
        ("cwd", s(cwd)),
        ("session_id", s(sid)),
        ("model", s(&model)),
        ("permissionMode", s("default")),
    ]));
    if let Some(ms) = arg(script, "sleep").and_then(|m| m.parse().ok()) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    emit(&obj(&[
        ("type", s("user")),
        (
            "message",
            obj(&[
                ("role", s("user")),
                (
                    "content",
                    format!("[{}]", obj(&[("type", s("text")), ("text", s(prompt))])),
                ),
            ]),
        ),
        ("session_id", s(sid)),
    ]));
    if has(script, "fail") {
        eprintln!("Error: network unreachable");
        return ExitCode::from(1);
    }
    if has(script, "unknown-frame") {
        emit(&obj(&[
            ("type", s("connection")),
            ("subtype", s("reconnected")),
            ("attempt", "2".into()),
            ("session_id", s(sid)),
        ]));
    }
    if has(script, "no-session-id") {
        emit(&assistant("no id", &[], None));
    }
    if has(script, "change-session") {
        emit(&assistant("other", &[], Some("another-session")));
    }
    let mut text = String::new();
    let tools: Vec<&Directive> = script.iter().filter(|d| d.name == "tool").collect();
    if !tools.is_empty() {
        let lead = "I'll use the tools. ";
        emit(&assistant(lead, &[], Some(sid)));
        text.push_str(lead);
    }
    for (n, d) in tools.iter().enumerate() {
        let spec = d.arg.as_deref().unwrap_or("read");
        let (kind, target) = spec
            .split_once(' ')
            .map_or((spec, None), |(k, t)| (k, Some(t)));
        for frame in tool_frames(kind, target, n + 1, cwd, sid) {
            emit(&frame);
        }
    }
    if has(script, "two-variants") {
        emit(&obj(&[
            ("type", s("tool_call")),
            ("subtype", s("started")),
            ("call_id", s("toolu_two")),
            (
                "tool_call",
                obj(&[
                    ("readToolCall", obj(&[("args", "{}".into())])),
                    ("writeToolCall", obj(&[("args", "{}".into())])),
                ]),
            ),
            ("session_id", s(sid)),
        ]));
    }
    let reply = if turn > 1 {
        format!("Turn {turn} of the session: {prompt}")
    } else {
        format!("Cursor reply: {prompt}")
    };
    if has(script, "truncate") {
        let frame = assistant(&reply, &[], Some(sid));
        print!("{}", &frame[..frame.len() / 2]);
        return ExitCode::SUCCESS;
    }
    if args.partial {
        // The forms Cursor interleaves with --stream-partial-output: deltas (timestamp_ms),
        // the model call's text again (model_call_id), the whole response (neither).
        let chars: Vec<char> = reply.chars().collect();
        let third = chars.len().div_ceil(3).max(1);
        for (i, piece) in chars.chunks(third).enumerate() {
            let piece: String = piece.iter().collect();
            let ts = (1_785_000_000_000u64 + i as u64).to_string();
            emit(&assistant(&piece, &[("timestamp_ms", ts)], Some(sid)));
        }
        emit(&assistant(
            &reply,
            &[
                ("model_call_id", s("fake-model-call-1")),
                ("timestamp_ms", "1785000000009".into()),
            ],
            Some(sid),
        ));
        text.push_str(&reply);
        emit(&assistant(&text, &[], Some(sid)));
    } else {
        emit(&assistant(&reply, &[], Some(sid)));
        text.push_str(&reply);
    }
    let error = has(script, "error-result");
    if !error && let Err(e) = sessions.append(sid, prompt) {
        eprintln!("Error: cannot save the session: {e}");
        return ExitCode::from(1);
    }
    emit(&obj(&[
        ("type", s("result")),
        ("subtype", s(if error { "error" } else { "success" })),
        ("duration_ms", "1234".into()),
        ("duration_api_ms", "1234".into()),
        ("is_error", error.to_string()),
        (
            "result",
            s(if error {
                "The model refused the request."
            } else {
                &text
            }),
        ),
        ("session_id", s(sid)),
        ("request_id", s("10e11780-df2f-45dc-a1ff-4540af32e9c0")),
    ]));
    if has(script, "after-result") {
        emit(&assistant("late", &[], Some(sid)));
    }
    let code = arg(script, "exit")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    ExitCode::from(code)
}
