//! Inspect (read-only): what a driver and its CLI look like on this machine — environment
//! checks from the driver's probe commands (run by the host under the same grant as a launch,
//! with a read-only workspace and read-only CLI state, bounded output, at most
//! [`MAX_PROBES`] probes of plain words and flags, each within [`MAX_PROBE_TIME`] and all
//! within [`MAX_INSPECTION_TIME`]), models, config schema, and explicit "unsupported" for
//! what the driver cannot report (quota, skills). Never fakes success.
//!
//! Must not: start sessions or write anything.

use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncReadExt;

use crate::agent::Agent;
use crate::containment::ContainmentReport;
use crate::descriptor::{ModelInfo, VersionRange};
use crate::error::Error;
use crate::grant::RunPaths;
use crate::process::{self, PrivateDir, ProcessSpec};
use crate::session::ProbeOutput;
use crate::wasm::guest::GuestInstance;

/// Bytes kept from a probe's stdout and from its stderr.
const PROBE_OUTPUT_CAP: usize = 64 * 1024;

/// The most probes a driver may ask for.
pub const MAX_PROBES: usize = 4;
/// The most arguments one probe may pass.
pub const MAX_PROBE_ARGS: usize = 8;
/// The longest probe argument, in bytes.
pub const MAX_PROBE_ARG_BYTES: usize = 64;
/// The longest one probe may run.
pub const MAX_PROBE_TIME: Duration = Duration::from_secs(30);
/// The longest all probes of one inspection may run together.
pub const MAX_INSPECTION_TIME: Duration = Duration::from_secs(60);

/// A probe must look like `--version`, `--help` or `models list`: a few plain words and
/// flags. No paths, no JSON, no spaces, no shell: whatever the driver asks, a probe cannot
/// hand the CLI a settings document, a hook, a script or a file to run (the CLI's state is
/// read-only for probes as well, so nothing it runs can leave one behind).
fn check_probe(probe: &crate::session::Probe) -> Result<(), String> {
    if probe.args.len() > MAX_PROBE_ARGS {
        return Err(format!(
            "probe `{}` has {} arguments, over the limit of {MAX_PROBE_ARGS}",
            probe.id,
            probe.args.len()
        ));
    }
    for arg in &probe.args {
        let word = arg.trim_start_matches('-');
        let plain = !word.is_empty()
            && arg.len() - word.len() <= 2
            && arg.len() <= MAX_PROBE_ARG_BYTES
            && word
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '=' | ':'));
        if !plain {
            return Err(format!(
                "probe `{}` argument {arg:?} is not a plain word or flag (at most {MAX_PROBE_ARG_BYTES} bytes of letters, digits, `-_.=:`)",
                probe.id
            ));
        }
    }
    Ok(())
}

pub use crate::session::{Check, CheckLevel};

/// The environment part of an inspection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvironmentReport {
    /// The worst level of all checks (`fail` when there are no checks at all).
    pub status: CheckLevel,
    /// Checks, in the driver's order.
    pub checks: Vec<Check>,
    /// The installed CLI version, when it could be read.
    pub cli_version: Option<String>,
    /// The versions the driver supports.
    pub supported: VersionRange,
}

/// Something the driver may or may not be able to report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Availability<T> {
    /// Reported.
    Supported {
        /// The value.
        value: T,
    },
    /// Not reported, and why.
    Unsupported {
        /// Why.
        reason: String,
    },
}

/// A full read-only inspection.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inspection {
    /// Driver name.
    pub driver: String,
    /// Driver version.
    pub version: String,
    /// Environment checks.
    pub environment: EnvironmentReport,
    /// Known models.
    pub models: Vec<ModelInfo>,
    /// Quota (no driver world function reports quota yet).
    pub quota: Availability<serde_json::Value>,
    /// The skills a run with the agent's defaults would see (resolved, checked and written
    /// to the skill cache exactly as a run does it), or why the driver takes none.
    pub skills: Availability<Vec<crate::skills::SkillInfo>>,
    /// The agent's profile: the dedicated directory asked for and what is on disk
    /// ([`Agent::profile_state`]; nothing is written). The probes run under the user's own
    /// profile.
    pub profile: crate::profile::ProfileState,
    /// The config JSON Schema.
    pub config_schema: serde_json::Value,
    /// How the CLI's processes are confined on this machine (the probes ran under it):
    /// Landlock ABI, what is enforced, the filesystem rules. An error when the containment
    /// cannot be had (no Landlock in enforce mode, the program not found, …).
    pub containment: Availability<ContainmentReport>,
}

impl Agent {
    /// Inspect the driver and its CLI on this machine. Read-only; a missing CLI is reported as
    /// a failed check with a hint, not as an error.
    ///
    /// The agent's default skills are materialized as a run would (into the skill cache), so
    /// a skill a run would refuse fails the inspection with the same [`Error::Skill`].
    pub async fn inspect(&self) -> Result<Inspection, Error> {
        let profile = self.profile_state()?;
        let inner = &self.inner;
        let driver = &inner.driver;
        let name = driver.name().to_owned();
        let descriptor = driver.descriptor().clone();
        let wanted = inner.defaults.skills.as_deref().unwrap_or_default();
        let skills = if descriptor.skills {
            let set = inner.materialize_skills(wanted).await?;
            Availability::Supported {
                value: set.map(|s| s.skills).unwrap_or_default(),
            }
        } else {
            Availability::Unsupported {
                reason: if wanted.is_empty() {
                    "the driver declares no skills support".into()
                } else {
                    format!(
                        "the driver declares no skills support: runs with the agent's {} skill(s) are refused",
                        wanted.len()
                    )
                },
            }
        };
        let config = driver.config.to_string();
        let mut instance = GuestInstance::new(
            driver.loaded.name.clone(),
            &driver.loaded.pre,
            inner.settings.limits,
        )
        .await?;
        let probes = instance
            .environment_probes(&config)
            .await?
            .map_err(|e| e.into_error(name.clone()))?;
        let contract = |message: String| Error::DriverContract {
            driver: name.clone(),
            call: "environment-probes",
            message,
        };
        if probes.len() > MAX_PROBES {
            return Err(contract(format!(
                "{} probes, over the limit of {MAX_PROBES}",
                probes.len()
            )));
        }
        for probe in &probes {
            check_probe(probe).map_err(contract)?;
        }
        let inspection_ends = std::time::Instant::now() + MAX_INSPECTION_TIME;
        let workspace = crate::grant::resolve_workspace(
            inner.defaults.workspace.as_ref().map(|w| w.base_dir()),
        )?;
        // The same grant as a launch: the configured command, resolved once.
        let grant = driver.process_grant(workspace.clone(), &inner.settings.grant_rules())?;
        // The probes run under a launch's confinement, with a read-only workspace and a
        // private TMPDIR of their own.
        let run_dir = PrivateDir::create(PrivateDir::root_for(&crate::run::new_run_id()), &[])
            .map_err(|source| Error::Spawn {
                driver: name.clone(),
                program: grant.configured().to_owned(),
                source,
            })?;
        let confined = grant.spec(
            Vec::new(),
            &[],
            workspace.clone(),
            RunPaths {
                files: None,
                tmp: &PrivateDir::tmp_for(run_dir.root()),
                read_only: true,
                state_read_only: true,
                mcp_programs: &[],
                skills: None,
                instructions: None,
            },
        );
        let mut outputs = Vec::new();
        for probe in probes {
            if let Err(refusal) = grant.check_program(&probe.program) {
                return Err(Error::LaunchRefused {
                    driver: name,
                    refusal,
                });
            }
            let output = match &confined {
                Err(e) => ProbeOutput {
                    id: probe.id,
                    code: None,
                    stdout: Vec::new(),
                    stderr: Vec::new(),
                    error: Some(match e {
                        Error::ProgramNotFound { .. } => format!(
                            "`{}` not found: {}",
                            grant.configured(),
                            grant.unresolved().unwrap_or("not resolved")
                        ),
                        other => other.to_string(),
                    }),
                },
                Ok((spec, _)) => {
                    tracing::info!(driver = %name, probe = %probe.id, "running environment probe");
                    let left = inspection_ends.saturating_duration_since(std::time::Instant::now());
                    let timeout = probe
                        .timeout
                        .clamp(Duration::from_millis(100), MAX_PROBE_TIME)
                        .min(left);
                    let spec = ProcessSpec {
                        args: probe.args,
                        ..spec.clone()
                    };
                    run_probe(probe.id, &spec, timeout, inner.settings.grace_period).await
                }
            };
            outputs.push(output);
        }
        drop(run_dir);
        let containment = match confined {
            Ok((_, report)) => Availability::Supported { value: report },
            Err(e) => Availability::Unsupported {
                reason: e.to_string(),
            },
        };
        let (checks, cli_version) = instance.check_environment(&config, &outputs).await?;
        let status = checks
            .iter()
            .map(|c| c.level)
            .max()
            .unwrap_or(CheckLevel::Fail);
        Ok(Inspection {
            profile,
            driver: descriptor.name.clone(),
            version: descriptor.version.clone(),
            environment: EnvironmentReport {
                status,
                checks,
                cli_version,
                supported: descriptor.cli_versions.clone(),
            },
            models: descriptor.models.clone(),
            quota: Availability::Unsupported {
                reason: "adaptor:driver@0.1.0 has no quota probe".into(),
            },
            skills,
            config_schema: descriptor.config_schema.clone(),
            containment,
        })
    }
}

/// Read a pipe to its end, keeping at most [`PROBE_OUTPUT_CAP`] bytes.
async fn read_capped<R: tokio::io::AsyncRead + Unpin>(pipe: Option<&mut R>) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(p) = pipe {
        let _ = p.take(PROBE_OUTPUT_CAP as u64).read_to_end(&mut buf).await;
    }
    buf
}

/// Run one probe: no stdin, bounded output, killed (whole group) at the timeout.
async fn run_probe(
    id: String,
    spec: &ProcessSpec,
    timeout: Duration,
    grace: Duration,
) -> ProbeOutput {
    let mut spawned = match process::spawn(spec).await {
        Ok(s) => s,
        Err(e) => {
            return ProbeOutput {
                id,
                code: None,
                stdout: Vec::new(),
                stderr: Vec::new(),
                error: Some(format!("could not start {}: {e}", spec.program.display())),
            };
        }
    };
    drop(spawned.stdin.take());
    let pgid = spawned.guard.pgid();
    let mut stdout = spawned.stdout.take();
    let mut stderr = spawned.stderr.take();
    let collect = async {
        let (out, err) = tokio::join!(read_capped(stdout.as_mut()), read_capped(stderr.as_mut()));
        let status = spawned.child.wait().await;
        (out, err, status)
    };
    let result = tokio::time::timeout(timeout, collect).await;
    // Whatever the probe left behind (or a probe that timed out) goes, as after a run.
    let reaped = crate::process::end_group(&mut spawned, grace).await;
    if let Err(e) = &reaped {
        tracing::error!(pgid, error = %e, "could not confirm the probe's process group is gone")
    }
    let result = match (result, reaped) {
        (Ok((out, err, status)), Err(e)) => {
            return ProbeOutput {
                id,
                code: status.ok().and_then(|s| process::exit_parts(s).0),
                stdout: out,
                stderr: err,
                error: Some(format!("processes of the probe survived: {e}")),
            };
        }
        (result, _) => result,
    };
    match result {
        Ok((stdout, stderr, Ok(status))) => ProbeOutput {
            id,
            code: process::exit_parts(status).0,
            stdout,
            stderr,
            error: None,
        },
        Ok((stdout, stderr, Err(e))) => ProbeOutput {
            id,
            code: None,
            stdout,
            stderr,
            error: Some(format!("waiting for the probe failed: {e}")),
        },
        Err(_) => ProbeOutput {
            id,
            code: None,
            stdout: Vec::new(),
            stderr: Vec::new(),
            error: Some(format!("timed out after {} ms", timeout.as_millis())),
        },
    }
}

#[cfg(test)]
mod probe_tests {
    use super::*;

    fn probe(args: &[&str]) -> crate::session::Probe {
        crate::session::Probe {
            id: "p".into(),
            program: "cli".into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn probes_are_plain_words_and_flags() {
        for ok in [
            &["--version"][..],
            &["models", "list"],
            &["-v"],
            &["--format=json"],
            &[],
        ] {
            assert!(check_probe(&probe(ok)).is_ok(), "{ok:?}");
        }
        for bad in [
            &["-c", "touch /tmp/x"][..],
            &["--settings", r#"{"apiKeyHelper":"id"}"#],
            &["--settings=/tmp/s.json"],
            &["---x"],
            &["--"],
            &["a b"],
            &["$(id)"],
        ] {
            assert!(check_probe(&probe(bad)).is_err(), "{bad:?}");
        }
        let long = "x".repeat(MAX_PROBE_ARG_BYTES + 1);
        assert!(check_probe(&probe(&[&long])).is_err());
        let many = vec!["-v"; MAX_PROBE_ARGS + 1];
        assert!(check_probe(&probe(&many)).is_err());
    }
}
