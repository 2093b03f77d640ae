//! Command-line parsing for the reference provider: the turn flags, the
//! `--version` / `--help` short-circuits and the internal `--grandchild` mode.

use std::path::PathBuf;

/// The protocol version reported by `--version`.
pub const VERSION: &str = "1.0.0";

/// Usage text printed by `--help` and after a usage error.
pub const USAGE: &str = "\
usage: reference-provider [--model M] [--resume SESSION_ID [--fork-session]] [--state-dir DIR] [--delay-ms N]
                          [--sandbox read-only|workspace-write] [--web-search allow|deny]
                          [--json-schema FILE] [--approvals stdio|allow|deny]
                          [--append-system-prompt TEXT] [--mcp-config FILE] [--plugin-dir DIR]...
       reference-provider --version
The prompt is read from stdin until EOF (with --approvals stdio: the first stdin line is
{\"type\":\"user\",\"text\":PROMPT} and approval answers follow); JSON Lines events are
written to stdout.";

/// What the process was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
// Parsed once per process and matched by value in tests: boxing the turn's flags buys nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Print `reference-provider <VERSION>` and exit 0.
    Version,
    /// Print the usage text and exit 0.
    Help,
    /// Internal: behave as the `[[grandchild]]` helper (ignore SIGTERM, sleep forever).
    Grandchild,
    /// Run one scripted turn with the prompt read from stdin.
    Turn(TurnArgs),
}

/// Flags of a normal turn invocation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TurnArgs {
    /// `--model M`; `None` means the default model.
    pub model: Option<String>,
    /// `--resume SESSION_ID`.
    pub resume: Option<String>,
    /// `--fork-session`: with `--resume`, continue the history in a new session id and leave
    /// the resumed session unchanged.
    pub fork: bool,
    /// `--state-dir DIR`; `None` means the environment-derived default.
    pub state_dir: Option<PathBuf>,
    /// `--delay-ms N`: pause between output lines.
    pub delay_ms: u64,
    /// `--sandbox read-only|workspace-write`: reported back in the session line.
    pub sandbox: Option<String>,
    /// `--web-search allow|deny`: reported back in the session line.
    pub web_search: Option<String>,
    /// `--json-schema FILE`: answer with JSON matching the schema in FILE (native
    /// structured output).
    pub json_schema: Option<PathBuf>,
    /// `--approvals stdio|allow|deny` (default deny).
    pub approvals: crate::approvals::Mode,
    /// `--append-system-prompt TEXT`: instructions, echoed in the session line.
    pub instructions: Option<String>,
    /// `--mcp-config FILE`: MCP servers (`{"mcpServers": {…}}`) the `[[mcp-call]]`
    /// directive may call.
    pub mcp_config: Option<PathBuf>,
    /// `--plugin-dir DIR` (repeatable): skill bundles; `DIR/skills/<key>/SKILL.md` are read
    /// at turn start and listed in the session line.
    pub plugin_dirs: Vec<PathBuf>,
}

/// Parses the arguments (without the program name).
///
/// Flags take their value either as the next argument or after `=`
/// (`--model m` or `--model=m`); a repeated flag keeps its last value.
/// Returns a human-readable message for any usage error.
pub fn parse<I>(args: I) -> Result<Command, String>
where
    I: IntoIterator<Item = String>,
{
    let args: Vec<String> = args.into_iter().collect();
    if args.iter().any(|a| a == "--grandchild") {
        return if args.len() == 1 {
            Ok(Command::Grandchild)
        } else {
            Err("--grandchild must be the only argument".to_string())
        };
    }

    let mut turn = TurnArgs::default();
    let mut iter = args.into_iter();
    while let Some(arg) = iter.next() {
        let (flag, inline_value) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_string(), Some(value.to_string()))
            }
            _ => (arg.clone(), None),
        };
        match flag.as_str() {
            "--version" | "-V" if inline_value.is_none() => return Ok(Command::Version),
            "--fork-session" if inline_value.is_none() => turn.fork = true,
            "--help" | "-h" if inline_value.is_none() => return Ok(Command::Help),
            "--model"
            | "--resume"
            | "--state-dir"
            | "--delay-ms"
            | "--sandbox"
            | "--web-search"
            | "--json-schema"
            | "--mcp-config"
            | "--plugin-dir"
            | "--approvals"
            | "--append-system-prompt" => {
                let value = match inline_value {
                    Some(value) => value,
                    None => iter
                        .next()
                        .ok_or_else(|| format!("{flag} requires a value"))?,
                };
                match flag.as_str() {
                    "--model" => turn.model = Some(value),
                    "--json-schema" => turn.json_schema = Some(PathBuf::from(value)),
                    "--mcp-config" => turn.mcp_config = Some(PathBuf::from(value)),
                    "--plugin-dir" => turn.plugin_dirs.push(PathBuf::from(value)),
                    "--approvals" => turn.approvals = crate::approvals::Mode::parse(&value)?,
                    "--sandbox" => {
                        if !matches!(value.as_str(), "read-only" | "workspace-write") {
                            return Err(format!(
                                "--sandbox expects read-only or workspace-write, got {value:?}"
                            ));
                        }
                        turn.sandbox = Some(value);
                    }
                    "--web-search" => {
                        if !matches!(value.as_str(), "allow" | "deny") {
                            return Err(format!(
                                "--web-search expects allow or deny, got {value:?}"
                            ));
                        }
                        turn.web_search = Some(value);
                    }
                    "--resume" => turn.resume = Some(value),
                    "--append-system-prompt" => turn.instructions = Some(value),
                    "--state-dir" => {
                        if value.is_empty() {
                            return Err("--state-dir must not be empty".to_string());
                        }
                        turn.state_dir = Some(PathBuf::from(value));
                    }
                    _ => {
                        turn.delay_ms = value.parse().map_err(|_| {
                            format!("--delay-ms expects a non-negative integer, got {value:?}")
                        })?;
                    }
                }
            }
            _ if arg.starts_with('-') && arg != "-" => {
                return Err(format!("unknown flag: {arg}"));
            }
            _ => {
                return Err(format!(
                    "unexpected argument: {arg} (the prompt is read from stdin)"
                ));
            }
        }
    }
    if turn.fork && turn.resume.is_none() {
        return Err("--fork-session needs --resume SESSION_ID".to_string());
    }
    Ok(Command::Turn(turn))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Command, String> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn fork_session_needs_resume() {
        assert!(parse_strs(&["--fork-session"]).is_err());
        assert!(matches!(
            parse_strs(&["--resume", "ref-00", "--fork-session"]),
            Ok(Command::Turn(TurnArgs { fork: true, .. }))
        ));
    }

    #[test]
    fn no_flags_is_a_default_turn() {
        assert_eq!(parse_strs(&[]), Ok(Command::Turn(TurnArgs::default())));
    }

    #[test]
    fn all_flags_in_both_spellings() {
        let expected = Command::Turn(TurnArgs {
            model: Some("m".into()),
            resume: Some("ref-00".into()),
            fork: false,
            state_dir: Some(PathBuf::from("/tmp/x")),
            delay_ms: 5,
            sandbox: None,
            web_search: None,
            json_schema: None,
            mcp_config: None,
            plugin_dirs: Vec::new(),
            approvals: crate::approvals::Mode::Stdio,
            instructions: Some("be brief".into()),
        });
        let spaced = [
            "--append-system-prompt",
            "be brief",
            "--model",
            "m",
            "--resume",
            "ref-00",
            "--state-dir",
            "/tmp/x",
            "--delay-ms",
            "5",
            "--approvals",
            "stdio",
        ];
        assert_eq!(parse_strs(&spaced), Ok(expected.clone()));
        let inline = [
            "--append-system-prompt=be brief",
            "--model=m",
            "--resume=ref-00",
            "--state-dir=/tmp/x",
            "--delay-ms=5",
            "--approvals=stdio",
        ];
        assert_eq!(parse_strs(&inline), Ok(expected));
    }

    #[test]
    fn version_help_and_grandchild() {
        assert_eq!(parse_strs(&["--version"]), Ok(Command::Version));
        assert_eq!(parse_strs(&["--model", "m", "--help"]), Ok(Command::Help));
        assert_eq!(parse_strs(&["--grandchild"]), Ok(Command::Grandchild));
        assert!(parse_strs(&["--grandchild", "--model", "m"]).is_err());
    }

    #[test]
    fn usage_errors() {
        assert!(parse_strs(&["--bogus"]).is_err());
        assert!(parse_strs(&["--model"]).is_err());
        assert!(parse_strs(&["--delay-ms", "soon"]).is_err());
        assert!(parse_strs(&["--sandbox", "unrestricted"]).is_err());
        assert!(parse_strs(&["--web-search", "maybe"]).is_err());
        assert!(parse_strs(&["--approvals", "ask"]).is_err());
        assert!(matches!(
            parse_strs(&["--sandbox", "read-only", "--web-search=deny"]),
            Ok(Command::Turn(TurnArgs { sandbox: Some(s), web_search: Some(w), .. })) if s == "read-only" && w == "deny"
        ));
        assert!(parse_strs(&["--state-dir="]).is_err());
        assert!(parse_strs(&["hello"]).is_err());
        assert!(parse_strs(&["--version=2"]).is_err());
    }
}
