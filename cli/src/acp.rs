//! `adaptor acp`: serve the configured driver as an Agent Client Protocol agent on
//! stdin/stdout, for editors (Zed, JetBrains, Neovim clients) and any ACP client.
//!
//! Must not: map ACP itself — the protocol side is `adaptor_bridges::acp`; this file turns
//! flags and the config file into one `Agent` and its run options, as `adaptor run` does.
//! Stdout carries JSON-RPC only: logs go to stderr.

use std::process::ExitCode;

use adaptor::RunOptions;
use adaptor_bridges::acp::AcpServer;

use crate::output::sanitize;
use crate::settings::{DriverArgs, Flags, PolicyPreset};
use crate::{EXIT_USAGE, approve, errln, threads};

/// `adaptor acp` flags.
#[derive(clap::Args)]
pub struct AcpArgs {
    #[command(flatten)]
    pub(crate) driver: DriverArgs,
    /// Model override [default: `model` in the config file, else the driver's].
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Policy preset for every prompt [default: `policy` in the config file, else inherit].
    /// Approval requests are always asked of the ACP client (`session/request_permission`)
    /// where the driver can ask.
    #[arg(long, value_enum, value_name = "PRESET")]
    pub(crate) policy: Option<PolicyPreset>,
    /// Thread store holding the sessions (`session/load` and `session/resume` across
    /// processes): a SQLite file path or a `postgres://` URL [default: `store` in the config
    /// file, else the SQLite file under your data directory, or `$ADAPTOR_THREAD_DB`].
    #[arg(long, value_name = "PATH|URL")]
    pub(crate) store: Option<String>,
    /// Timeout of each prompt in seconds.
    #[arg(long)]
    pub(crate) timeout: Option<f64>,
    #[command(flatten)]
    pub(crate) provider_env: crate::ProviderEnvArgs,
    #[command(flatten)]
    pub(crate) containment: crate::confine::ContainmentArgs,
}

/// Examples shown by `adaptor acp --help`.
pub const EXAMPLES: &str = "\
Examples:
  adaptor acp                                 # the reference driver, as an ACP agent
  adaptor acp --driver claude --policy read-only
  # Zed, settings.json:
  #   \"agent_servers\": {\"Claude via adaptor\": {\"command\": \"adaptor\", \"args\": [\"acp\", \"--driver\", \"claude\"]}}";

/// `adaptor acp`: serve until the client closes stdin.
pub async fn main(args: AcpArgs) -> ExitCode {
    let flags = Flags {
        driver: args.driver.driver.as_deref(),
        config: args.driver.config.as_deref(),
        model: args.model.as_deref(),
        policy: args.policy,
        store: args.store.as_deref(),
    };
    let (settings, mut builder) =
        match crate::configured_builder(&flags, &args.containment, &args.provider_env, None) {
            Ok(configured) => configured,
            Err(code) => return code,
        };
    match threads::open_store(settings.store.value.as_deref()).await {
        Ok(store) => builder = builder.shared_thread_store(store),
        Err(code) => return code,
    }
    let agent = builder.build();
    let mut options = RunOptions::new();
    if let Some(m) = &settings.model.value {
        options = options.model(m.clone());
    }
    if let Some(secs) = args.timeout {
        if !(secs.is_finite() && secs > 0.0) {
            errln!("adaptor: --timeout must be a positive number of seconds");
            return ExitCode::from(EXIT_USAGE);
        }
        options = options.timeout(std::time::Duration::from_secs_f64(secs));
    }
    let mut policy = settings
        .policy
        .value
        .unwrap_or(PolicyPreset::Inherit)
        .policy();
    policy.approvals = approve::Approve::Ask.policy_for(&agent.driver().descriptor().approvals);
    // The client's answer may take a person's time: wait for it as long as the turn runs.
    policy.approvals.timeout = None;
    // A rejection in the editor means "not this tool": the agent carries on without it.
    policy.approvals.on_reject = adaptor::Fallback::Continue;
    options = options.policy(policy);
    let served = AcpServer::new(agent.clone())
        .run_options(options)
        .serve_stdio()
        .await;
    agent.close().await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("adaptor: {}", sanitize(&e.to_string()));
            ExitCode::from(crate::EXIT_RUN_FAILED)
        }
    }
}
