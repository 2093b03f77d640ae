//! Runs one of the scripted model-API mocks on its own, for driving a real agent CLI by hand
//! or from a script (how the ACP transcripts under `drivers/acp/testdata/` were recorded).
//!
//! ```text
//! mock-serve gemini|chat|anthropic|openai [--home <dir>] [--log <file>]
//! ```
//!
//! Prints the mock's base URL (as its `base_url()` gives it) on one line of stdout, then
//! serves until stdin is closed. With `--home`, it first prepares a home for each CLI the mock
//! serves, `<dir>/<cli>`, with the mock module's helpers (`gemini_home`, `qwen_home`,
//! `opencode_config`, `codex_home` trusting the current directory), and prints a second line:
//! a JSON object `{"<cli>": {"<VAR>": "<value>", …}, …}` with the environment each CLI needs
//! (`gemini_env`, `qwen_env`, `opencode_env`, `claude_env`, `codex_env`). With `--log`, once
//! stdin is closed it writes every request it received to `<file>`, one JSON object per
//! line: `{method, path, query, headers, body, status}`. Bad usage exits 2. The mocks live
//! in `adaptor_integration_tests::mock_*`; this file only picks one and waits.

use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;

use adaptor_integration_tests::mock_anthropic::{MockAnthropic, claude_env};
use adaptor_integration_tests::mock_chat::{
    MockChat, opencode_config, opencode_env, qwen_env, qwen_home,
};
use adaptor_integration_tests::mock_gemini::{MockGemini, gemini_env, gemini_home};
use adaptor_integration_tests::mock_http::RecordedRequest;
use adaptor_integration_tests::mock_openai::{MockOpenAi, codex_env, codex_home};
use serde_json::{Map, Value, json};

const USAGE: &str = "usage: mock-serve gemini|chat|anthropic|openai [--home <dir>] [--log <file>]";

/// The environment of each CLI a mock serves: `(cli, [(variable, value)])`.
type Homes = Vec<(&'static str, Vec<(String, String)>)>;

/// The mock being served.
enum Mock {
    Gemini(MockGemini),
    Chat(MockChat),
    Anthropic(MockAnthropic),
    OpenAi(MockOpenAi),
}

impl Mock {
    async fn start(kind: &str) -> Option<Mock> {
        Some(match kind {
            "gemini" => Mock::Gemini(MockGemini::start().await),
            "chat" => Mock::Chat(MockChat::start().await),
            "anthropic" => Mock::Anthropic(MockAnthropic::start().await),
            "openai" => Mock::OpenAi(MockOpenAi::start().await),
            _ => return None,
        })
    }

    fn base_url(&self) -> String {
        match self {
            Mock::Gemini(m) => m.base_url(),
            Mock::Chat(m) => m.base_url(),
            Mock::Anthropic(m) => m.base_url(),
            Mock::OpenAi(m) => m.base_url(),
        }
    }

    /// Prepares `<root>/<cli>` for each CLI this mock serves; returns each one's environment.
    fn homes(&self, root: &Path) -> std::io::Result<Homes> {
        let base = self.base_url();
        Ok(match self {
            Mock::Gemini(_) => {
                let home = root.join("gemini");
                gemini_home(&home)?;
                vec![("gemini", gemini_env(&home, &base))]
            }
            Mock::Chat(_) => {
                let qwen = root.join("qwen");
                qwen_home(&qwen)?;
                let opencode = root.join("opencode");
                let config = opencode_config(&opencode, &base)?;
                vec![
                    ("qwen", qwen_env(&qwen, &base)),
                    ("opencode", opencode_env(&opencode, &config)),
                ]
            }
            Mock::Anthropic(_) => {
                let home = root.join("claude");
                std::fs::create_dir_all(&home)?;
                vec![("claude", claude_env(&home, &base))]
            }
            Mock::OpenAi(_) => {
                let home = root.join("codex");
                let codex = home.join(".codex");
                codex_home(&codex, &base, &std::env::current_dir()?)?;
                vec![("codex", codex_env(&codex, &home))]
            }
        })
    }

    fn all_requests(&self) -> Vec<RecordedRequest> {
        match self {
            Mock::Gemini(m) => m.all_requests(),
            Mock::Chat(m) => m.all_requests(),
            Mock::Anthropic(m) => m.all_requests(),
            Mock::OpenAi(m) => m.all_requests(),
        }
    }
}

fn write_log(path: &str, requests: &[RecordedRequest]) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for r in requests {
        let line = json!({
            "method": r.method,
            "path": r.path,
            "query": r.query,
            "headers": r.headers,
            "body": r.body,
            "status": r.status,
        });
        writeln!(out, "{line}")?;
    }
    out.flush()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut home, mut log) = (None, None);
    for pair in args.get(1..).unwrap_or_default().chunks(2) {
        match pair {
            [flag, value] if flag == "--home" => home = Some(value.clone()),
            [flag, value] if flag == "--log" => log = Some(value.clone()),
            _ => {
                eprintln!("mock-serve: bad arguments {args:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("mock-serve: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let kind = args.first().map(String::as_str).unwrap_or_default();
    let Some(mock) = runtime.block_on(Mock::start(kind)) else {
        eprintln!("mock-serve: unknown mock {kind:?}\n{USAGE}");
        return ExitCode::from(2);
    };
    println!("{}", mock.base_url());
    if let Some(root) = home {
        match mock.homes(Path::new(&root)) {
            Ok(homes) => {
                let envs: Map<String, Value> = homes
                    .into_iter()
                    .map(|(cli, env)| {
                        let vars: Map<String, Value> = env
                            .into_iter()
                            .map(|(k, v)| (k, Value::String(v)))
                            .collect();
                        (cli.to_string(), Value::Object(vars))
                    })
                    .collect();
                println!("{}", Value::Object(envs));
            }
            Err(e) => {
                eprintln!("mock-serve: preparing {root}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let _ = std::io::stdout().flush();
    // Serve (on the mock's own thread) until stdin is closed.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    if let Some(path) = log
        && let Err(e) = write_log(&path, &mock.all_requests())
    {
        eprintln!("mock-serve: writing {path}: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
