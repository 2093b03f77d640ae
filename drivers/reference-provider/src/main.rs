//! `reference-provider`: a scripted, deterministic fake coding-agent CLI that
//! speaks the reference JSON Lines protocol (see `PROTOCOL.md`). This file owns
//! the entry point: argument dispatch, reading the prompt from stdin and
//! mapping the turn's outcome to the process exit code.

mod approvals;
mod cli;
mod directives;
mod events;
mod mcp;
mod process;
mod session;
mod turn;

use std::io::{self, Read};
use std::process::ExitCode;
use std::time::Duration;

use cli::Command;
use events::Emitter;
use turn::TurnConfig;

/// Dispatches on the command line and exits with the turn's exit code.
fn main() -> ExitCode {
    let args: Result<Vec<String>, _> = std::env::args_os()
        .skip(1)
        .map(|a| a.into_string())
        .collect();
    let command = match args {
        Ok(args) => cli::parse(args),
        Err(arg) => Err(format!(
            "argument is not valid UTF-8: {}",
            arg.to_string_lossy()
        )),
    };
    match command {
        Err(message) => usage_error(&message),
        Ok(Command::Version) => {
            println!("reference-provider {}", cli::VERSION);
            ExitCode::SUCCESS
        }
        Ok(Command::Help) => {
            println!("{}", cli::USAGE);
            ExitCode::SUCCESS
        }
        Ok(Command::Grandchild) => process::run_grandchild(),
        Ok(Command::Turn(args)) => {
            let stdio = args.approvals == approvals::Mode::Stdio;
            let (mut approver, prompt) = if stdio {
                let inbox = approvals::Inbox::spawn(io::BufReader::new(io::stdin()));
                let mut approver = approvals::Approver::new(args.approvals, Some(inbox));
                let mut late = Vec::new();
                match approver.next_prompt(&mut late) {
                    Ok(Some(prompt)) => (approver, prompt),
                    Ok(None) => return usage_error("stdin ended before the prompt frame"),
                    Err(message) => return usage_error(&message),
                }
            } else {
                let mut raw = Vec::new();
                if let Err(error) = io::stdin().lock().read_to_end(&mut raw) {
                    return usage_error(&format!("cannot read the prompt from stdin: {error}"));
                }
                let Ok(prompt) = String::from_utf8(raw) else {
                    return usage_error("the prompt on stdin is not valid UTF-8");
                };
                (approvals::Approver::new(args.approvals, None), prompt)
            };
            let mut config = TurnConfig {
                model: args
                    .model
                    .unwrap_or_else(|| turn::DEFAULT_MODEL.to_string()),
                resume: args.resume,
                fork: args.fork,
                state_dir: args.state_dir.or_else(session::default_state_dir),
                sandbox: args.sandbox,
                web_search: args.web_search,
                instructions: args.instructions,
                json_schema: args.json_schema,
                mcp_config: args.mcp_config,
                plugin_dirs: args.plugin_dirs,
            };
            let mut out = Emitter::new(io::stdout().lock(), Duration::from_millis(args.delay_ms));
            let mut prompt = prompt;
            loop {
                let code = turn::run(
                    &config,
                    &prompt,
                    &mut out,
                    &mut io::stderr().lock(),
                    &mut approver,
                );
                // In `stdio` mode the process serves further turns of the same session: each
                // next `{"type":"user"}` line is a turn; end of input ends the process.
                if !stdio || code != 0 {
                    return ExitCode::from(code);
                }
                let mut late = Vec::new();
                let next = approver.next_prompt(&mut late);
                for input in late {
                    eprintln!(
                        "reference-provider: input arrived after the turn ended and was not taken: {input:?}"
                    );
                }
                prompt = match next {
                    Ok(Some(next)) => next,
                    Ok(None) => return ExitCode::from(code),
                    Err(message) => return usage_error(&message),
                };
                config.resume = out.last_session.clone();
                config.fork = false;
            }
        }
    }
}

/// Reports a usage error on stderr and returns exit code 2.
fn usage_error(message: &str) -> ExitCode {
    eprintln!("reference-provider: {message}\n{}", cli::USAGE);
    ExitCode::from(turn::EXIT_USAGE)
}
