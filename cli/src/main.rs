//! `adaptor`: run a prompt through a `.wasm` driver from the command line, inspect drivers,
//! manage threads, show the effective settings, print shell completions.
//!
//! This file owns the command tree, `--color`, the shared helpers (loading the driver the
//! settings name, the agent builder) and the exit codes. Modules: `run` (`adaptor run`),
//! `view` (what a run prints), `status` (the live status line), `output` (stdout/stderr
//! manners, colour, sanitising), `settings` (config file + flags), `info` (`inspect`,
//! `drivers` lists, installs, verifies), `threads`, `approve` (`--approve`), `interrupt` (Ctrl-C for a run whose output is blocked), `acp` (`adaptor acp`, on `adaptor_bridges`), `serve` (`adaptor serve`, and `adaptor run` handing its run to it), `deferred` (subcommand arguments built only when clap needs them). Everything else is the library's single
//! pipeline; the CLI uses only the public `adaptor` API.
//!
//! Exit codes: 0 success · 1 the run failed · 2 usage, config or setup error · 3 driver fault
//! (trap or contract violation) · 130 cancelled with Ctrl-C · 141 stdout was closed by its
//! reader (`| head`).

mod acp;
mod approve;
mod confine;
mod deferred;
mod drivers;
mod info;
mod interrupt;
mod output;
mod run;
mod scaffold;
mod serve;
mod settings;
mod status;
mod threads;
mod view;

use std::path::PathBuf;
use std::process::ExitCode;

use adaptor::{Agent, Driver, Error};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use deferred::Deferred;
use output::{ColorChoice, sanitize};
use settings::Settings;

#[derive(Parser)]
#[command(
    name = "adaptor",
    version,
    about = "Drive coding-agent CLIs through sandboxed WASM drivers",
    after_help = "Examples:
  adaptor run \"Say hello\"                      # a prompt through the reference driver
  adaptor run --driver claude \"Fix the tests\"  # through Claude Code
  adaptor drivers                              # which drivers this machine has
  adaptor config show                          # the effective defaults and their origin
  adaptor completions bash > ~/.local/share/bash-completion/completions/adaptor"
)]
struct Cli {
    /// When to use colour on stdout: auto (a terminal, and NO_COLOR unset), always, never.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
    #[command(subcommand)]
    command: Command,
}

/// The subcommands. Each one's arguments are built only when clap needs them (the one
/// invoked, or all of them for completions and checks; see [`Deferred`]), so a command
/// does not build the others' arguments before it runs.
#[derive(Subcommand)]
enum Command {
    /// Run one prompt and stream the result.
    #[command(after_help = run::EXAMPLES)]
    Run(Deferred<Box<run::RunArgs>>),
    /// Serve the driver as an Agent Client Protocol agent on stdin/stdout (for editors).
    #[command(after_help = acp::EXAMPLES)]
    Acp(Deferred<Box<acp::AcpArgs>>),
    /// Inspect a driver and its CLI on this machine (read-only).
    #[command(after_help = info::INSPECT_EXAMPLES)]
    Inspect(Deferred<InspectArgs>),
    /// Inspect and manage stored threads (`run --thread KEY` creates and continues them).
    #[command(subcommand, after_help = threads::EXAMPLES)]
    Threads(Deferred<threads::ThreadsCommand>),
    /// List, install, verify and remove drivers (without a subcommand: list them).
    #[command(after_help = drivers::EXAMPLES, args_conflicts_with_subcommands = true)]
    Drivers(Deferred<DriversArgs>),
    /// The config file: defaults for driver, driver config, model, policy and store.
    #[command(subcommand)]
    Config(Deferred<ConfigCommand>),
    /// Serve `adaptor run` from this process: runs started in this environment are handed
    /// to it and skip loading the runtime and the driver (see `adaptor run` in the README).
    #[command(after_help = serve::EXAMPLES)]
    Serve,
    /// Print a shell completion script to stdout.
    #[command(after_help = "Examples:
  adaptor completions bash > ~/.local/share/bash-completion/completions/adaptor
  adaptor completions zsh > ~/.zfunc/_adaptor       # with fpath+=(~/.zfunc) in ~/.zshrc
  adaptor completions fish > ~/.config/fish/completions/adaptor.fish")]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `adaptor inspect` flags.
#[derive(clap::Args)]
struct InspectArgs {
    #[command(flatten)]
    driver: settings::DriverArgs,
    #[command(flatten)]
    containment: confine::ContainmentArgs,
    /// Print the inspection as JSON.
    #[arg(long)]
    json: bool,
}

/// `adaptor drivers` flags and subcommands.
#[derive(clap::Args)]
struct DriversArgs {
    #[command(subcommand)]
    command: Option<drivers::DriversCommand>,
    /// Print the list as JSON Lines.
    #[arg(long)]
    json: bool,
}

/// The command tree with every subcommand's arguments in place, as completion scripts need
/// it (see [`Deferred`]).
fn full_command() -> clap::Command {
    deferred::expanded(Cli::command)
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the effective settings and where each came from (flag, config file, default).
    #[command(after_help = settings::SHOW_EXAMPLES)]
    Show {
        #[command(flatten)]
        driver: settings::DriverArgs,
        /// As with `run --model`.
        #[arg(long)]
        model: Option<String>,
        /// As with `run --policy`.
        #[arg(long, value_enum, value_name = "PRESET")]
        policy: Option<settings::PolicyPreset>,
        /// As with `run --store`.
        #[arg(long, value_name = "PATH|URL")]
        store: Option<String>,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the config file's path.
    Path,
}

pub(crate) use adaptor_cli::{EXIT_DRIVER_FAULT, EXIT_INTERRUPTED, EXIT_RUN_FAILED, EXIT_USAGE};

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // The launcher (`adaptor`) asked a resident host first; why it did not serve this run,
    // if one was asked, is logged once logging is set up. No run sees the variable.
    let not_served =
        std::env::var_os(adaptor_cli::NOT_SERVED_ENV).map(|why| why.to_string_lossy().into_owned());
    if not_served.is_some() {
        // SAFETY: this process has one thread so far: nothing reads the environment
        // concurrently.
        unsafe { std::env::remove_var(adaptor_cli::NOT_SERVED_ENV) };
    }
    // Commands that start providers fork their spawner first thing, while this process is
    // small and has one thread: every page it has touched by then is shared with the
    // spawner, and its first write here after the fork copies it (the host's heap after
    // clap has parsed made that measurable). The command is read from the raw arguments;
    // a wrong guess only costs a spawner that idles, or one started on first use. A
    // refusal changes nothing and is logged once logging is set up.
    let starts = starts_providers(args.iter().cloned());
    let refused = starts.then(adaptor::fork_spawner).and_then(Result::err);
    // The same commands load a driver and build an agent: their once-per-process work (the
    // engine, whose compiler settings detect the CPU's features, each `cpuid` a trap to the
    // hypervisor on a virtual machine; the sweep of crashed hosts' run directories) runs
    // on a thread of its own while this one sets up logging, parses and resolves the
    // settings. The load and the build wait for what they need if they come first; a
    // thread that cannot be started leaves the work to them.
    let preparing = starts
        .then(|| {
            std::thread::Builder::new()
                .name("adaptor-prepare".into())
                .spawn(adaptor::prepare_process)
                .ok()
        })
        .flatten();
    let code = command(args, refused, not_served);
    // The thread may still be removing a crashed host's run directory (a command that
    // ended early): ending the process under it could leave one half removed, without the
    // `lock` by which a later sweep knows it is dead. Long done after any run; a panic
    // there was reported by the panic hook, and the command's own load did the work.
    if let Some(thread) = preparing {
        let _ = thread.join();
    }
    code
}

/// Everything after the start-up of `main`: logging, parsing, the command. `not_served`:
/// why a resident host did not serve this `adaptor run`, if one was asked.
fn command(
    args: Vec<std::ffi::OsString>,
    refused: Option<adaptor::SpawnerForkError>,
    not_served: Option<String>,
) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ADAPTOR_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        // Colour only on a terminal that allows it; either way no control character of a
        // driver's reaches the terminal (see `output::log_writer`).
        .with_writer(output::log_writer())
        .with_ansi(output::stderr_styled())
        .init();
    if let Some(why) = not_served {
        tracing::debug!("not served by `adaptor serve`: {why}");
    }
    let cli = match parse_args(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout (exit 0), usage errors to stderr (exit 2); a
            // closed stdout is not worth a panic.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    if let Some(e) = refused {
        tracing::debug!(error = %e, "no spawner forked; it will be started on first use");
    }
    let color = cli.color;
    // `adaptor acp` serves an editor whose sessions may run side by side: worker threads.
    // Every other command runs one thing at a time, on this thread (a current-thread
    // runtime): `adaptor run` measured 0.46–0.76 ms faster than with worker threads, whose
    // every hand-over wakes another core. The runtime starts on a thread of its own while
    // `adaptor run` resolves its settings and loads its driver, which need no runtime.
    let serves = matches!(cli.command, Command::Acp(_));
    let starting = std::thread::Builder::new()
        .name("adaptor-runtime-start".into())
        .spawn(move || {
            if serves {
                tokio::runtime::Runtime::new()
            } else {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
            }
        });
    let configured = match &cli.command {
        Command::Run(Deferred(args)) => Some(run::configure(args, None)),
        _ => None,
    };
    let started = starting.and_then(|thread| {
        thread
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the thread starting it panicked")))
    });
    let runtime = match started {
        Ok(rt) => rt,
        Err(e) => {
            errln!("adaptor: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_DRIVER_FAULT);
        }
    };
    let code = match cli.command {
        Command::Drivers(Deferred(DriversArgs { command, json })) => drivers::main(command, json),
        Command::Run(Deferred(args)) => {
            return run_command(
                args,
                configured,
                None,
                &runtime,
                color,
                interrupt::Source::Signal,
            );
        }
        Command::Serve => serve::serve(&runtime),
        Command::Acp(Deferred(args)) => runtime.block_on(acp::main(*args)),
        Command::Threads(Deferred(cmd)) => runtime.block_on(threads::main(cmd, color)),
        Command::Inspect(Deferred(InspectArgs {
            driver,
            containment,
            json,
        })) => runtime.block_on(info::inspect(&driver, &containment, json)),
        Command::Config(Deferred(ConfigCommand::Show {
            driver,
            model,
            policy,
            store,
            json,
        })) => settings::show(
            &settings::Flags {
                driver: driver.driver.as_deref(),
                config: driver.config.as_deref(),
                model: model.as_deref(),
                policy,
                store: store.as_deref(),
            },
            json,
        ),
        Command::Config(Deferred(ConfigCommand::Path)) => match settings::config_path().0 {
            Some(path) => {
                outln!("{}", path.display());
                ExitCode::SUCCESS
            }
            None => {
                errln!("adaptor: no config location (set HOME or XDG_CONFIG_HOME)");
                ExitCode::from(EXIT_USAGE)
            }
        },
        Command::Completions { shell } => {
            let mut buffer = Vec::new();
            clap_complete::generate(shell, &mut full_command(), "adaptor", &mut buffer);
            out!("{}", String::from_utf8_lossy(&buffer));
            ExitCode::SUCCESS
        }
    };
    match output::stdout_closed() {
        Some(lost) => ExitCode::from(lost.exit_code()),
        None => code,
    }
}

/// `adaptor run` on its parsed arguments (and its settings and driver if `configured`
/// already), on `runtime`, with Ctrl-C from `ctrl_c`: here, or served by `adaptor serve`
/// (whose loads share what it loaded before: `shared`).
fn run_command(
    args: Box<run::RunArgs>,
    configured: Option<Result<(Settings, adaptor::AgentBuilder), ExitCode>>,
    shared: Option<&adaptor::LoadedDrivers>,
    runtime: &tokio::runtime::Runtime,
    color: ColorChoice,
    ctrl_c: interrupt::Source,
) -> ExitCode {
    let code = match configured.unwrap_or_else(|| run::configure(&args, shared)) {
        Ok(configured) => runtime.block_on(run::run(*args, configured, None, color, ctrl_c)),
        Err(code) => code,
    };
    match output::stdout_closed() {
        Some(lost) => ExitCode::from(lost.exit_code()),
        None => code,
    }
}

/// Whether `args` (the program's name first) name a command that starts providers: `run`,
/// `acp` or `threads fork`. Read before clap parses: the first two words that are not
/// options, skipping `--color`'s value (the only global option that takes one).
fn starts_providers(args: impl IntoIterator<Item = std::ffi::OsString>) -> bool {
    let mut words = Vec::with_capacity(2);
    let mut args = args.into_iter().skip(1);
    while words.len() < 2 {
        let Some(arg) = args.next() else { break };
        if arg == "--color" {
            args.next();
        } else if !arg.as_encoded_bytes().starts_with(b"-") {
            words.push(arg);
        }
    }
    match words.as_slice() {
        [first, ..] if first == "run" || first == "acp" || first == "serve" => true,
        [first, second] => first == "threads" && second == "fork",
        _ => false,
    }
}

/// Parse the arguments (the program's name first), with clap's own colours following
/// `--color` and `NO_COLOR`.
fn parse_args(args: Vec<std::ffi::OsString>) -> Result<Cli, clap::Error> {
    let mut color = ColorChoice::Auto;
    for (i, arg) in args.iter().enumerate() {
        let value = match arg.to_str() {
            Some("--color") => args.get(i + 1).and_then(|v| v.to_str()),
            Some(a) => a.strip_prefix("--color="),
            None => None,
        };
        match value {
            Some("always") => color = ColorChoice::Always,
            Some("never") => color = ColorChoice::Never,
            _ => {}
        }
    }
    let matches = Cli::command()
        .color(color.clap())
        .try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

/// Load the driver the settings name (sharing earlier loads through `shared`, if given) and
/// apply its config.
pub(crate) fn load_driver(
    settings: &Settings,
    shared: Option<&adaptor::LoadedDrivers>,
) -> Result<Driver, ExitCode> {
    let driver = match shared {
        Some(shared) => shared.open(&settings.driver.value),
        None => Driver::open(&settings.driver.value),
    }
    .map_err(|e| report(&e))?;
    match &settings.driver_config.value {
        Some(config) => driver.with_config(config.clone()).map_err(|e| report(&e)),
        None => Ok(driver),
    }
}

/// An agent whose programs may also be found beside the `adaptor` binary (so an install
/// puts `reference-provider` next to `adaptor`, and `./target/debug/adaptor` finds
/// `./target/debug/reference-provider`, whatever the workspace).
pub(crate) fn agent_builder(driver: Driver) -> adaptor::AgentBuilder {
    let builder = Agent::builder(driver);
    match std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(PathBuf::from))
    {
        Some(dir) => builder.program_dir(dir),
        None => builder,
    }
}

/// `--pass-env` and `--env`: the provider's environment beyond the default allowlist
/// (`adaptor run` and `adaptor acp`).
#[derive(clap::Args)]
pub(crate) struct ProviderEnvArgs {
    /// Pass this variable of your environment to the provider (repeatable). By default the
    /// provider only sees an allowlist (PATH, HOME, locale, XDG dirs…), never your secrets.
    #[arg(long, value_name = "NAME")]
    pub(crate) pass_env: Vec<String>,
    /// Set a variable in the provider's environment (repeatable).
    #[arg(long, value_name = "NAME=VALUE")]
    pub(crate) env: Vec<String>,
}

/// The settings `flags` resolve to and a builder for the driver they name (loaded sharing
/// `shared`'s loads, if given), with the containment flags and the provider environment
/// (`--pass-env`, `--env NAME=VALUE`) applied: the common start of `adaptor run` and
/// `adaptor acp`.
pub(crate) fn configured_builder(
    flags: &settings::Flags,
    containment: &confine::ContainmentArgs,
    provider_env: &ProviderEnvArgs,
    shared: Option<&adaptor::LoadedDrivers>,
) -> Result<(Settings, adaptor::AgentBuilder), ExitCode> {
    let settings = settings::resolve(flags).map_err(|e| {
        errln!("adaptor: {}", sanitize(&e.0));
        ExitCode::from(EXIT_USAGE)
    })?;
    let driver = load_driver(&settings, shared)?;
    let mut builder = containment.apply(agent_builder(driver));
    for name in &provider_env.pass_env {
        builder = builder.pass_env(name.clone());
    }
    for pair in &provider_env.env {
        match pair.split_once('=') {
            Some((name, value)) if !name.is_empty() => builder = builder.env(name, value),
            _ => {
                errln!(
                    "adaptor: --env expects NAME=VALUE, not `{}`",
                    sanitize(pair)
                );
                return Err(ExitCode::from(EXIT_USAGE));
            }
        }
    }
    Ok((settings, builder))
}

/// Print an error on stderr and map it to the exit code.
pub(crate) fn report(e: &Error) -> ExitCode {
    errln!("adaptor: {}", sanitize(&e.to_string()));
    ExitCode::from(match e {
        Error::Run(_) => EXIT_RUN_FAILED,
        // The thread could not be run or saved now (someone else holds it, the lease or the
        // store failed, no checkpoint came back): the run failed. Other thread errors
        // (missing, incompatible, unsupported…) are setup errors.
        Error::Thread(
            adaptor::ThreadError::Busy { .. }
            | adaptor::ThreadError::LeaseLost { .. }
            | adaptor::ThreadError::CheckpointMissing { .. }
            | adaptor::ThreadError::Store { .. },
        ) => EXIT_RUN_FAILED,
        Error::DriverTrap { .. }
        | Error::LimitExceeded { .. }
        | Error::DriverContract { .. }
        | Error::Spawn { .. }
        | Error::Lost(_) => EXIT_DRIVER_FAULT,
        _ => EXIT_USAGE,
    })
}

#[cfg(test)]
mod tests {
    use super::{Cli, full_command, starts_providers};
    use clap::CommandFactory;

    /// Every command path of the tree (`["threads", "list"]`, …), from the full tree.
    fn command_paths(cmd: &clap::Command, above: &[String], paths: &mut Vec<Vec<String>>) {
        for sub in cmd.get_subcommands() {
            let mut path = above.to_vec();
            path.push(sub.get_name().to_string());
            command_paths(sub, &path, paths);
            paths.push(path);
        }
    }

    /// What clap prints for `adaptor ARGS`: its help, usage or error text.
    fn rendered(cmd: clap::Command, args: &[&str]) -> String {
        match cmd.try_get_matches_from(std::iter::once("adaptor").chain(args.iter().copied())) {
            Ok(_) => "(parsed)".to_string(),
            Err(e) => e.render().to_string(),
        }
    }

    #[test]
    fn the_command_tree_is_valid() {
        Cli::command().debug_assert();
        full_command().debug_assert();
    }

    /// Deferred arguments change nothing a user sees: every command's help, and the errors
    /// of a wrong or missing argument, read as from the tree built at once.
    #[test]
    fn deferred_arguments_print_as_the_full_tree() {
        let mut paths = Vec::new();
        command_paths(&full_command(), &[], &mut paths);
        assert!(paths.len() >= 20, "{paths:?}");
        paths.push(Vec::new());
        for path in &paths {
            let words: Vec<&str> = path.iter().map(String::as_str).collect();
            for tail in [&["--help"][..], &["-h"], &["--no-such-flag"], &[]] {
                let args: Vec<&str> = words.iter().chain(tail).copied().collect();
                assert_eq!(
                    rendered(Cli::command(), &args),
                    rendered(full_command(), &args),
                    "adaptor {}",
                    args.join(" ")
                );
            }
        }
        for args in [
            &["help", "threads", "list"][..],
            &["thread"],
            &["run", "hi", "--mode"],
        ] {
            assert_eq!(
                rendered(Cli::command(), args),
                rendered(full_command(), args)
            );
        }
    }

    /// Completion scripts describe `adaptor help …` too, whose tree clap copies from the
    /// command's as it stands: the full tree has every nested command there.
    #[test]
    fn completions_see_the_nested_commands_under_help() {
        let mut cmd = full_command();
        cmd.build();
        let help = cmd.find_subcommand("help").expect("clap's help subcommand");
        let threads = help.find_subcommand("threads").expect("help threads");
        assert!(threads.find_subcommand("list").is_some());
    }

    fn args(words: &[&str]) -> Vec<std::ffi::OsString> {
        std::iter::once("adaptor")
            .chain(words.iter().copied())
            .map(Into::into)
            .collect()
    }

    #[test]
    fn the_commands_that_start_providers_are_told_from_the_raw_arguments() {
        for starting in [
            &["run", "Say hello"][..],
            &["--color", "never", "run", "--driver", "claude", "hi"],
            &["--color=always", "acp"],
            &["threads", "fork", "ticket-42", "--thread", "alt", "hi"],
            &["threads", "--color", "never", "fork", "ticket-42", "hi"],
        ] {
            assert!(starts_providers(args(starting)), "{starting:?}");
        }
        for other in [
            &[][..],
            &["--version"],
            &["drivers", "--json"],
            &["threads", "list"],
            &["threads", "show", "fork"],
            &["--color", "run", "drivers"],
            &["config", "show", "--driver", "run"],
        ] {
            assert!(!starts_providers(args(other)), "{other:?}");
        }
    }
}
