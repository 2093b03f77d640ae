//! The containment flags (`--allow-read`, `--allow-write`, `--state-dir`,
//! `--allow-driver-env`, `--best-effort-containment`) shared by `run` and `inspect`, and the
//! readable views of a containment report and of a dry run's launch plan.
//!
//! Must not: decide or apply any confinement (the library does).

use std::path::PathBuf;

use adaptor::{AgentBuilder, Containment, ContainmentReport, LaunchPlan, PathAccess};

use crate::output::sanitize;

/// How the provider is confined, beyond the defaults (see the README's security section).
#[derive(Debug, Default, Clone, clap::Args)]
pub struct ContainmentArgs {
    /// Let the provider read (and execute) files under PATH too (repeatable).
    #[arg(long, value_name = "PATH")]
    pub allow_read: Vec<PathBuf>,
    /// Let the provider write files under PATH too (repeatable).
    #[arg(long, value_name = "PATH")]
    pub allow_write: Vec<PathBuf>,
    /// The CLI keeps its state in PATH (read-write, created when missing); replaces the
    /// host's defaults for known CLIs (repeatable).
    #[arg(long, value_name = "PATH")]
    pub state_dir: Vec<PathBuf>,
    /// Let the driver set the variable NAME although the host's denylist covers it
    /// (repeatable).
    #[arg(long, value_name = "NAME")]
    pub allow_driver_env: Vec<String>,
    /// Run even where the kernel cannot confine the provider (no Landlock, no PID
    /// namespaces); the report says what is not enforced.
    #[arg(long)]
    pub best_effort_containment: bool,
}

impl ContainmentArgs {
    /// The library value.
    pub fn containment(&self) -> Containment {
        let mut c = Containment::new();
        if self.best_effort_containment {
            c = c.best_effort();
        }
        for p in &self.allow_read {
            c = c.allow_read(p);
        }
        for p in &self.allow_write {
            c = c.allow_write(p);
        }
        for p in &self.state_dir {
            c = c.state_dir(p);
        }
        for n in &self.allow_driver_env {
            c = c.allow_driver_env(n);
        }
        c
    }

    /// `builder` with this containment.
    pub fn apply(&self, builder: AgentBuilder) -> AgentBuilder {
        builder.containment(self.containment())
    }
}

fn access_name(access: PathAccess) -> &'static str {
    match access {
        PathAccess::Read => "read",
        PathAccess::ReadExecute => "read+exec",
        PathAccess::ReadWrite => "read+write",
        PathAccess::Device => "device",
    }
}

/// The report, a line per fact and per rule (system `/etc` entries folded into one line).
pub fn report_lines(report: &ContainmentReport) -> Vec<String> {
    let mut lines = vec![format!(
        "containment: {} · Landlock {} · filesystem {} · signals {} · PID namespace {}",
        match report.mode {
            adaptor::ContainmentMode::Enforce => "enforce",
            adaptor::ContainmentMode::BestEffort => "best-effort",
        },
        report
            .landlock_abi
            .map(|v| format!("ABI {v}"))
            .unwrap_or_else(|| "absent".into()),
        if report.filesystem_enforced {
            "enforced"
        } else {
            "NOT enforced"
        },
        if report.signals_scoped {
            "scoped"
        } else {
            "not scoped"
        },
        if report.pid_namespace { "yes" } else { "NO" },
    )];
    // `/etc` granted entry by entry (no mount namespace to hide its secrets in) is folded
    // into one line; granted whole, it is a rule like any other, and its secrets are listed.
    let entry_by_entry = report.hidden.is_empty();
    let in_etc = |rule: &&adaptor::PathRule| rule.why == "system" && rule.path.starts_with("/etc");
    let mut etc = 0;
    for rule in &report.rules {
        if entry_by_entry && in_etc(&rule) {
            etc += 1;
            continue;
        }
        lines.push(format!(
            "  {:<10} {}  ({})",
            access_name(rule.access),
            sanitize(&rule.path.display().to_string()),
            sanitize(&rule.why)
        ));
    }
    if etc > 0 {
        lines.push(format!(
            "  {:<10} /etc: {etc} entries, without shadow, sudoers, ssh, TLS private keys  (system)",
            "read"
        ));
    }
    if !report.hidden.is_empty() {
        let hidden: Vec<String> = report
            .hidden
            .iter()
            .map(|p| sanitize(&p.display().to_string()))
            .collect();
        lines.push(format!(
            "  {:<10} {}  (secrets, masked in the provider's mount namespace)",
            "hidden",
            hidden.join(", ")
        ));
    }
    for note in &report.notes {
        lines.push(format!("  note: {}", sanitize(note)));
    }
    lines
}

/// The readable dry run: the exact launch, then the containment.
pub fn plan_lines(plan: &LaunchPlan) -> Vec<String> {
    let mut lines = vec![
        format!(
            "driver {} would launch (nothing was started):",
            sanitize(&plan.driver)
        ),
        format!(
            "  program: {} → {}",
            sanitize(&plan.program),
            sanitize(&plan.resolved.display().to_string())
        ),
    ];
    for (i, arg) in plan.args.iter().enumerate() {
        lines.push(format!("  arg[{i}]: {}", sanitize(arg)));
    }
    lines.push(format!(
        "  cwd: {}",
        sanitize(&plan.cwd.display().to_string())
    ));
    for (name, value) in &plan.env {
        let by = if plan.driver_env.contains(name) {
            "  (set by the driver)"
        } else {
            ""
        };
        lines.push(format!("  env {}={}{by}", sanitize(name), sanitize(value)));
    }
    for (name, size) in &plan.files {
        lines.push(format!("  private file: {} ({size} bytes)", sanitize(name)));
    }
    lines.push(format!(
        "  stdin: {} bytes, then {}",
        plan.stdin_bytes,
        if plan.keep_stdin_open {
            "kept open"
        } else {
            "closed"
        }
    ));
    lines.extend(report_lines(&plan.containment));
    lines
}
