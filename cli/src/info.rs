//! `adaptor inspect`: what a driver and its CLI look like on this machine, read-only.
//!
//! Must not: run prompts (inspect runs only the driver's probe commands, under the grant).

use std::process::ExitCode;

use crate::output::sanitize;
use crate::settings::{self, DriverArgs, Flags};
use crate::{EXIT_RUN_FAILED, EXIT_USAGE, agent_builder, errln, load_driver, outln, report};

/// Examples shown by `adaptor inspect --help`.
pub const INSPECT_EXAMPLES: &str = "\
Examples:
  adaptor inspect                         # the reference driver and its provider
  adaptor inspect --driver claude         # Claude Code: version, supported range, checks
  adaptor inspect --driver codex --json";

/// `adaptor inspect`.
pub async fn inspect(
    args: &DriverArgs,
    containment: &crate::confine::ContainmentArgs,
    json: bool,
) -> ExitCode {
    let settings = match settings::resolve(&Flags {
        driver: args.driver.as_deref(),
        config: args.config.as_deref(),
        ..Flags::default()
    }) {
        Ok(s) => s,
        Err(e) => {
            errln!("adaptor: {}", sanitize(&e.0));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let driver = match load_driver(&settings, None) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let inspection = match containment
        .apply(agent_builder(driver))
        .build()
        .inspect()
        .await
    {
        Ok(i) => i,
        Err(e) => return report(&e),
    };
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&inspection).expect("inspection serialises")
        );
    } else {
        let env = &inspection.environment;
        outln!(
            "{} {} — environment: {}",
            sanitize(&inspection.driver),
            sanitize(&inspection.version),
            level_name(env.status)
        );
        for c in &env.checks {
            outln!(
                "  {:<5} {:<14} {}",
                level_name(c.level),
                sanitize(&c.code),
                sanitize(&c.message)
            );
            if let Some(h) = &c.hint {
                outln!("        hint: {}", sanitize(h));
            }
        }
        let range = &env.supported;
        outln!(
            "  installed CLI: {} · supported {} ..< {} · verified {}",
            env.cli_version
                .as_deref()
                .map(sanitize)
                .unwrap_or_else(|| "unknown".into()),
            range.min.as_deref().unwrap_or("any"),
            range.max_exclusive.as_deref().unwrap_or("any"),
            if range.verified.is_empty() {
                "none".into()
            } else {
                range.verified.join(", ")
            }
        );
        let models: Vec<String> = inspection
            .models
            .iter()
            .map(|m| format!("{} ({})", m.id, m.label))
            .collect();
        outln!(
            "models: {}",
            if models.is_empty() {
                "none listed".into()
            } else {
                sanitize(&models.join(", "))
            }
        );
        for (what, a) in [
            ("quota", availability(&inspection.quota)),
            ("skills", availability(&inspection.skills)),
        ] {
            outln!("{what}: {a}");
        }
        let profile = &inspection.profile;
        match (&profile.dir, &profile.variable) {
            (Some(dir), Some(var)) => outln!(
                "profile: {} (the host sets {}; {})",
                sanitize(&dir.display().to_string()),
                sanitize(var),
                if profile.in_sync() {
                    "in sync"
                } else {
                    "not made yet or out of sync: the next run makes it"
                }
            ),
            _ => outln!("profile: the user's own"),
        }
        let fields: Vec<&str> = inspection
            .config_schema
            .get("properties")
            .and_then(|p| p.as_object())
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        outln!("config fields: {}", sanitize(&fields.join(", ")));
        match &inspection.containment {
            adaptor::Availability::Supported { value } => {
                for line in crate::confine::report_lines(value) {
                    outln!("{line}");
                }
            }
            adaptor::Availability::Unsupported { reason } => {
                outln!("containment: unavailable — {}", sanitize(reason));
            }
        }
    }
    if inspection.environment.status == adaptor::CheckLevel::Fail {
        ExitCode::from(EXIT_RUN_FAILED)
    } else {
        ExitCode::SUCCESS
    }
}

fn level_name(level: adaptor::CheckLevel) -> &'static str {
    match level {
        adaptor::CheckLevel::Pass => "pass",
        adaptor::CheckLevel::Warn => "warn",
        adaptor::CheckLevel::Fail => "FAIL",
    }
}

fn availability<T: std::fmt::Debug>(a: &adaptor::Availability<T>) -> String {
    match a {
        adaptor::Availability::Supported { value } => format!("supported ({value:?})"),
        adaptor::Availability::Unsupported { reason } => {
            format!("unsupported — {}", sanitize(reason))
        }
    }
}
