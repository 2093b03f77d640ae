//! Directive parsing: finds the `[[name]]` / `[[name arg]]` test hooks in a
//! prompt, removes them from the prompt text and collects them into a [`Script`].

/// Directive names the provider understands. A `[[...]]` token whose name is
/// not in this list is ordinary prompt text and is left untouched.
const KNOWN: &[&str] = &[
    "fail",
    "exit",
    "crash",
    "sleep",
    "hang",
    "stall",
    "grandchild",
    "ignore-term",
    "noise",
    "stderr",
    "spam",
    "malformed",
    "invalid-json",
    "ask-permission",
    "ask-plan",
    "ask-question",
    "mcp-call",
    "mcp-bench",
    "await-input",
];

/// One `[[mcp-bench S1,S2:TOOL:N]]`: `N` interleaved rounds of `TOOL` (arguments `{}`) on
/// each listed server, one session each (for the benchmark binary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpBench {
    /// The servers, in call order.
    pub servers: Vec<String>,
    /// The tool.
    pub tool: String,
    /// Rounds.
    pub rounds: u32,
}

/// One `[[mcp-call SERVER:TOOL:JSON]]`: call `TOOL` of the MCP server `SERVER` (from
/// `--mcp-config`) with the JSON object `JSON` (no whitespace) as its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpCall {
    /// The server's name in the MCP config.
    pub server: String,
    /// The tool.
    pub tool: String,
    /// The arguments (a JSON object).
    pub arguments: serde_json::Value,
}

/// The behaviour requested by the directives of one prompt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Script {
    /// `[[fail]]`: report an agent error instead of answering.
    pub fail: bool,
    /// `[[exit N]]`: exit code after a full successful output (last one wins).
    pub exit_code: u8,
    /// `[[crash]]`: stop after the first text delta with no result.
    pub crash: bool,
    /// `[[sleep MS]]`: pause after the session line (several add up).
    pub sleep_ms: u64,
    /// `[[hang]]`: sleep forever after the session line.
    pub hang: bool,
    /// `[[stall]]`: sleep forever after the reply's text (no end of message, no result): a
    /// turn that only a cancel or a timeout ends, once all its output is out.
    pub stall: bool,
    /// `[[grandchild]]`: spawn a SIGTERM-ignoring grandchild process.
    pub grandchild: bool,
    /// `[[ignore-term]]`: the provider itself ignores SIGTERM.
    pub ignore_term: bool,
    /// `[[noise]]`: a non-JSON stdout line and a stderr line before the session line.
    pub noise: bool,
    /// `[[stderr TEXT]]`: lines written to stderr, in prompt order.
    pub stderr_lines: Vec<String>,
    /// `[[spam N]]`: send the reply as N text deltas (last one wins).
    pub spam: Option<u32>,
    /// `[[malformed]]`: a truncated JSON line before the result line.
    pub malformed: bool,
    /// `[[invalid-json]]`: answer schema instructions with JSON that does not match.
    pub invalid_json: bool,
    /// `[[ask-permission]]`: ask before running the `echo` tool.
    pub ask_permission: bool,
    /// `[[ask-plan]]`: ask for a plan review before starting.
    pub ask_plan: bool,
    /// `[[ask-question]]`: ask the user a question through the `ask_user` tool.
    pub ask_question: bool,
    /// `[[mcp-call SERVER:TOOL:JSON]]`: MCP tool calls, in prompt order, made after the
    /// session line (each reported as `tool_call` / `tool_result`).
    pub mcp_calls: Vec<McpCall>,
    /// `[[mcp-bench S1,S2:TOOL:N]]`, after the calls.
    pub mcp_benches: Vec<McpBench>,
    /// `[[await-input]]` (with `--approvals stdio`): after the session line, wait until
    /// steering input (`{"type":"input",…}`) arrives on stdin, or stdin ends.
    pub await_input: bool,
}

/// A prompt with its directives separated out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The prompt text with directives removed (what is echoed and stored).
    pub prompt: String,
    /// The requested behaviour.
    pub script: Script,
}

/// Splits `raw` into the cleaned prompt and its [`Script`].
///
/// Each directive token is removed; the spaces around it collapse to a single
/// space (to none at the start or end of a line), and when at least one
/// directive was removed the whole prompt is trimmed. A prompt without
/// directives is returned unchanged. A known directive with a missing,
/// superfluous or invalid argument is an error.
pub fn parse(raw: &str) -> Result<Parsed, String> {
    let mut script = Script::default();
    let mut out = String::with_capacity(raw.len());
    let mut removed_any = false;
    let mut rest = raw;

    while let Some(start) = rest.find("[[") {
        out.push_str(&rest[..start]);
        let candidate = &rest[start..];
        match directive_at(candidate) {
            Some((name, arg, len)) => {
                apply(&mut script, name, arg)?;
                removed_any = true;
                rest = &candidate[len..];
                if out.is_empty() || out.ends_with(' ') || out.ends_with('\n') {
                    rest = rest.trim_start_matches(' ');
                }
                if rest.is_empty() || rest.starts_with('\n') || rest.starts_with("\r\n") {
                    let trimmed = out.trim_end_matches(' ').len();
                    out.truncate(trimmed);
                }
            }
            None => {
                // Not a directive: keep one `[` and look again from the next char.
                out.push('[');
                rest = &candidate[1..];
            }
        }
    }
    out.push_str(rest);

    let prompt = if removed_any {
        out.trim().to_string()
    } else {
        out
    };
    Ok(Parsed { prompt, script })
}

/// If `text` starts with a token `[[name...]]` whose name is known, returns
/// the name, the raw argument part (if any) and the token's byte length.
fn directive_at(text: &str) -> Option<(&str, Option<&str>, usize)> {
    let inner_and_rest = text.strip_prefix("[[")?;
    let close = inner_and_rest.find("]]")?;
    let inner = &inner_and_rest[..close];
    let (name, arg) = match inner.find(char::is_whitespace) {
        Some(at) => {
            let sep_len = inner[at..].chars().next().map_or(1, char::len_utf8);
            (&inner[..at], Some(&inner[at + sep_len..]))
        }
        None => (inner, None),
    };
    if !KNOWN.contains(&name) {
        return None;
    }
    Some((name, arg, 2 + close + 2))
}

/// Records directive `name` with argument `arg` in `script`.
fn apply(script: &mut Script, name: &str, arg: Option<&str>) -> Result<(), String> {
    let token = match arg {
        Some(arg) => format!("[[{name} {arg}]]"),
        None => format!("[[{name}]]"),
    };
    if let Some(arg) = arg
        && (arg.is_empty() || arg.contains(char::is_whitespace))
    {
        return Err(format!(
            "invalid directive {token}: the argument must be a single whitespace-free word"
        ));
    }
    let no_arg = |flag: &mut bool| -> Result<(), String> {
        match arg {
            None => {
                *flag = true;
                Ok(())
            }
            Some(_) => Err(format!("invalid directive {token}: takes no argument")),
        }
    };
    let number = |what: &str| -> Result<u64, String> {
        arg.ok_or_else(|| format!("invalid directive {token}: expects {what}"))?
            .parse::<u64>()
            .map_err(|_| format!("invalid directive {token}: expects {what}"))
    };
    match name {
        "fail" => no_arg(&mut script.fail),
        "crash" => no_arg(&mut script.crash),
        "hang" => no_arg(&mut script.hang),
        "stall" => no_arg(&mut script.stall),
        "grandchild" => no_arg(&mut script.grandchild),
        "ignore-term" => no_arg(&mut script.ignore_term),
        "noise" => no_arg(&mut script.noise),
        "malformed" => no_arg(&mut script.malformed),
        "invalid-json" => no_arg(&mut script.invalid_json),
        "ask-permission" => no_arg(&mut script.ask_permission),
        "ask-plan" => no_arg(&mut script.ask_plan),
        "ask-question" => no_arg(&mut script.ask_question),
        "await-input" => no_arg(&mut script.await_input),
        "exit" => {
            let code = number("an exit code 0-255")?;
            script.exit_code = u8::try_from(code)
                .map_err(|_| format!("invalid directive {token}: expects an exit code 0-255"))?;
            Ok(())
        }
        "sleep" => {
            let ms = number("a duration in milliseconds")?;
            script.sleep_ms = script.sleep_ms.saturating_add(ms);
            Ok(())
        }
        "spam" => {
            let n = number("a delta count of at least 1")?;
            match u32::try_from(n) {
                Ok(n) if n >= 1 => {
                    script.spam = Some(n);
                    Ok(())
                }
                _ => Err(format!(
                    "invalid directive {token}: expects a delta count of at least 1"
                )),
            }
        }
        "mcp-call" => {
            let parsed = arg.and_then(|a| {
                let (server, rest) = a.split_once(':')?;
                let (tool, json) = rest.split_once(':')?;
                let arguments: serde_json::Value = serde_json::from_str(json).ok()?;
                (!server.is_empty() && !tool.is_empty() && arguments.is_object()).then(|| McpCall {
                    server: server.to_owned(),
                    tool: tool.to_owned(),
                    arguments,
                })
            });
            match parsed {
                Some(call) => {
                    script.mcp_calls.push(call);
                    Ok(())
                }
                None => Err(format!(
                    "invalid directive {token}: expects SERVER:TOOL:JSON-OBJECT"
                )),
            }
        }
        "mcp-bench" => {
            let parsed = arg.and_then(|a| {
                let mut parts = a.splitn(3, ':');
                let servers: Vec<String> = parts.next()?.split(',').map(str::to_owned).collect();
                let tool = parts.next()?.to_owned();
                let rounds: u32 = parts.next()?.parse().ok()?;
                (servers.iter().all(|s| !s.is_empty()) && !tool.is_empty() && rounds > 0).then_some(
                    McpBench {
                        servers,
                        tool,
                        rounds,
                    },
                )
            });
            match parsed {
                Some(bench) => {
                    script.mcp_benches.push(bench);
                    Ok(())
                }
                None => Err(format!(
                    "invalid directive {token}: expects SERVER[,SERVER…]:TOOL:ROUNDS"
                )),
            }
        }
        "stderr" => match arg {
            Some(text) => {
                script.stderr_lines.push(text.to_string());
                Ok(())
            }
            None => Err(format!(
                "invalid directive {token}: expects a word to print"
            )),
        },
        other => unreachable!("directive {other} is in KNOWN but not handled"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt_of(raw: &str) -> String {
        parse(raw).expect("valid prompt").prompt
    }

    #[test]
    fn prompt_without_directives_is_unchanged() {
        let parsed = parse("  hello  world ").unwrap();
        assert_eq!(parsed.prompt, "  hello  world ");
        assert_eq!(parsed.script, Script::default());
    }

    #[test]
    fn directives_are_removed_and_spaces_collapsed() {
        assert_eq!(prompt_of("[[fail]] hello"), "hello");
        assert_eq!(prompt_of("hello [[fail]]"), "hello");
        assert_eq!(prompt_of("hello [[fail]] world"), "hello world");
        assert_eq!(
            prompt_of("hello [[noise]] [[sleep 5]] world"),
            "hello world"
        );
        assert_eq!(prompt_of("a[[fail]]b"), "ab");
        assert_eq!(
            prompt_of("line one [[crash]]\nline two"),
            "line one\nline two"
        );
        assert_eq!(prompt_of("[[fail]]"), "");
    }

    #[test]
    fn unknown_and_unclosed_tokens_are_text() {
        assert_eq!(
            prompt_of("keep [[this]] and [[fail"),
            "keep [[this]] and [[fail"
        );
        assert_eq!(prompt_of("[[[fail]]]"), "[]");
        assert_eq!(prompt_of("[[ fail]]"), "[[ fail]]");
    }

    #[test]
    fn all_directives_combine() {
        let raw = "[[fail]] [[exit 7]] [[crash]] [[sleep 10]] [[sleep 5]] [[hang]] [[stall]] [[grandchild]] \
                   [[ignore-term]] [[noise]] [[stderr one]] [[stderr two]] [[spam 3]] [[malformed]] \
                   [[ask-permission]] [[ask-plan]] [[ask-question]] \
                   [[mcp-call srv:tool:{\"a\":1}]] [[mcp-bench a,b:echo:5]] [[await-input]] hi";
        let parsed = parse(raw).unwrap();
        assert_eq!(parsed.prompt, "hi");
        assert_eq!(
            parsed.script,
            Script {
                fail: true,
                exit_code: 7,
                crash: true,
                sleep_ms: 15,
                hang: true,
                stall: true,
                grandchild: true,
                ignore_term: true,
                noise: true,
                stderr_lines: vec!["one".into(), "two".into()],
                spam: Some(3),
                malformed: true,
                invalid_json: false,
                ask_permission: true,
                ask_plan: true,
                ask_question: true,
                mcp_calls: vec![McpCall {
                    server: "srv".into(),
                    tool: "tool".into(),
                    arguments: serde_json::json!({"a": 1}),
                }],
                mcp_benches: vec![McpBench {
                    servers: vec!["a".into(), "b".into()],
                    tool: "echo".into(),
                    rounds: 5,
                }],
                await_input: true,
            }
        );
    }

    #[test]
    fn last_exit_and_spam_win() {
        let script = parse("[[exit 3]] [[exit 4]] [[spam 2]] [[spam 9]]")
            .unwrap()
            .script;
        assert_eq!(script.exit_code, 4);
        assert_eq!(script.spam, Some(9));
    }

    #[test]
    fn invalid_arguments_are_errors() {
        for raw in [
            "[[fail now]]",
            "[[exit]]",
            "[[exit 256]]",
            "[[exit -1]]",
            "[[sleep soon]]",
            "[[spam 0]]",
            "[[spam]]",
            "[[stderr]]",
            "[[stderr two words]]",
            "[[exit  3]]",
            "[[mcp-call]]",
            "[[mcp-call srv:tool]]",
            "[[mcp-call srv:tool:[1]]]",
            "[[mcp-call :tool:{}]]",
            "[[mcp-bench a:echo:0]]",
            "[[mcp-bench a,:echo:3]]",
            "[[mcp-bench a:echo]]",
        ] {
            assert!(parse(raw).is_err(), "{raw} should be rejected");
        }
    }

    #[test]
    fn non_ascii_text_survives() {
        assert_eq!(prompt_of("héllo [[noise]] wörld ✓"), "héllo wörld ✓");
    }
}
