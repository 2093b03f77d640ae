//! Everything resolved before a provider process starts: the workspace, a fresh driver
//! instance, the validated config, the process grant (program resolved once), the resume
//! instructions, the driver's launch checked against the grant, and the private files.
//!
//! Also the dry run ([`plan`]): the same preparation, turned into a `LaunchPlan` instead of a
//! spawn.
//!
//! Must not: spawn (see `process`), or emit events (nothing has started yet: an error here is
//! returned with no events).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;

use super::{Prepared, Run, new_run_id};
use crate::agent::{AgentInner, RunOptions};
use crate::error::Error;
use crate::grant::{LaunchAsk, RunPaths};
use crate::process::PrivateDir;
use crate::session::{Resume, SessionMode};
use crate::stream::Emitter;
use crate::structured::{self, Mechanism};
use crate::wasm::convert::{Resources, build_request};

impl Run {
    /// Prepare the run's process: on a prewarmed process of the agent when one was started
    /// for exactly this launch (see `warm`), else a new one. An empty pool is refilled.
    pub(super) async fn prepare(&mut self) -> Result<Prepared, Error> {
        if self.inner.warm.enabled() {
            match self.inner.warm.take() {
                Some(warm) => match self.prepare_on(Some(&warm)).await {
                    Ok(Some(prepared)) => {
                        super::warm::refill(&self.inner);
                        return Ok(prepared.on(warm));
                    }
                    // Not this launch: it waits for another run, unless the agent's
                    // default launch no longer matches it either (then it is replaced).
                    Ok(None) => super::warm::decline(&self.inner, warm).await,
                    Err(e) => {
                        self.inner.warm.put_back(warm);
                        return Err(e);
                    }
                },
                None => super::warm::refill(&self.inner),
            }
        }
        self.prepare_to_launch().await
    }

    /// [`prepare_cold`](Self::prepare_cold) for a process that will be launched (a run, a
    /// warm process): the spawner opens the system's rules meanwhile (a dry run launches
    /// nothing and asks for nothing).
    pub(super) async fn prepare_to_launch(&mut self) -> Result<Prepared, Error> {
        crate::grant::expect_launch();
        self.prepare_cold().await
    }

    /// Prepare a new process (never a prewarmed one): dry runs, warm processes themselves,
    /// and runs that found none.
    pub(super) async fn prepare_cold(&mut self) -> Result<Prepared, Error> {
        match self.prepare_on(None).await? {
            Some(prepared) => Ok(prepared),
            None => unreachable!("only a warm process can be declined"),
        }
    }

    /// The preparation. With `warm`, the run is prepared on the warm process's private
    /// directory (nothing is written) and `None` is returned, with the differences in
    /// `warm_miss`, unless the launch is exactly the one the process was started with.
    pub(super) async fn prepare_on(
        &mut self,
        warm: Option<&super::warm::Warm>,
    ) -> Result<Option<Prepared>, Error> {
        let skills = self.skill_set().await?;
        let resources = self.resources()?;
        let skill_dirs = skills.as_ref().map(|s| s.dirs()).unwrap_or_default();
        let driver = &self.inner.driver;
        let name = self.driver_name();
        self.options
            .policy
            .unwrap_or_default()
            .check(&driver.loaded.descriptor)?;
        if self.options.instructions.is_some() && !driver.loaded.descriptor.instructions {
            return Err(Error::InstructionsUnsupported { driver: name });
        }
        if self.options.steering == Some(true) && !driver.loaded.descriptor.steering {
            return Err(Error::SteeringUnsupported { driver: name });
        }
        let workspace = self.workspace_dir()?;
        let config_json = driver.config.to_string();
        // The driver's spare instance when this is the first run to ask (see `driver`), else
        // a fresh one; either way the config is validated on the instance that serves the run.
        let (mut instance, validated) =
            match driver.take_spare(&self.inner.settings.limits, &config_json) {
                Some((mut spare, validated)) => {
                    spare.interrupt_on(Some(self.interrupt()));
                    (spare, validated)
                }
                None => (self.fresh_instance().await?, false),
            };
        if !validated && let Err(e) = instance.validate_config(&config_json).await? {
            return Err(e.into_error(name));
        }
        // The grant is decided once: program resolved, environment rules fixed.
        let mut grant =
            driver.process_grant(workspace.clone(), &self.inner.settings.grant_rules())?;
        if let Some(profile) = &resources.profile {
            grant = grant.with_profile(profile);
        }
        grant.program()?;
        let resume = self.resume_request()?;
        if self.options.schema.is_some() {
            let policy = self.options.policy.unwrap_or_default();
            let asks = [policy.approvals.permission, policy.approvals.plan_review]
                .contains(&crate::policy::DecisionMode::Ask)
                || policy.approvals.question == crate::policy::QuestionMode::Ask;
            let mechanism = structured::negotiate(
                &driver.loaded.descriptor,
                self.options.streaming.unwrap_or(true),
                asks,
            )?;
            self.mechanism = Some(mechanism);
        }
        let prompt = match (&self.options.schema, self.mechanism) {
            (Some(schema), Some(Mechanism::PromptValidate)) => {
                structured::with_instructions(&self.prompt, schema)
            }
            _ => self.prompt.clone(),
        };
        let delivery = self.delivery().await?;
        let run_root = warm.map_or_else(
            || PrivateDir::root_for(&self.run_id),
            |w| w.root().to_path_buf(),
        );
        let private_dir = PrivateDir::files_for(&run_root);
        let instructions_dir = PrivateDir::instructions_for(&run_root);
        let request = build_request(
            &self.run_id,
            &prompt,
            config_json,
            self.options.request_options(&delivery.servers, &skill_dirs),
            self.mechanism,
            &workspace,
            &private_dir,
            resume,
            Resources {
                profile_dir: resources.profile.as_ref().map(|p| p.dir.as_path()),
                shared_auth: resources.profile.as_ref().is_some_and(|p| p.shared_auth),
                instructions: resources
                    .bundle
                    .as_ref()
                    .map(|b| (instructions_dir.as_path(), b)),
            },
        );
        let mut session = instance.open_session(&request).await?;
        let launch = session.start().await?;
        let max_files = self.inner.settings.limits.private_files;
        if launch.files.len() > max_files {
            return Err(Error::LimitExceeded {
                driver: name.clone(),
                call: "session.start",
                limit: crate::error::Limit::PrivateFiles { max: max_files },
            });
        }
        let file_names: Vec<&str> = launch.files.iter().map(|(name, _)| name.as_str()).collect();
        let mcp_env = delivery.stdio_env();
        let ask = LaunchAsk {
            program: &launch.program,
            args: &launch.args,
            env: &launch.env,
            cwd: launch.cwd.as_deref(),
            file_names: &file_names,
            mcp_env: &mcp_env,
        };
        let host_set = launch
            .env
            .iter()
            .find(|(k, _)| delivery.env.iter().any(|(h, _)| h == k));
        let checked = match host_set {
            Some((k, _)) => Err(crate::error::LaunchRefusal::HostEnv(k.clone())),
            None => grant.check(&ask),
        };
        let cwd = checked.map_err(|refusal| {
            tracing::warn!(driver = %name, program = %launch.program, %refusal, "launch refused");
            Error::LaunchRefused {
                driver: name.clone(),
                refusal,
            }
        })?;
        let files: Vec<(&str, &[u8])> = launch
            .files
            .iter()
            .map(|(name, contents)| (name.as_str(), contents.as_slice()))
            .collect();
        // Created before the confinement is decided: its rules name existing paths. A warm
        // process's directory exists, with what it was started with.
        let private_dir = match warm {
            Some(_) => PrivateDir::unowned(run_root),
            None => {
                let dir = PrivateDir::create(run_root, &files).map_err(|e| Error::Spawn {
                    driver: name.clone(),
                    program: launch.program.clone(),
                    source: e,
                })?;
                if let Some(bundle) = &resources.bundle {
                    bundle.write(&instructions_dir)?;
                }
                dir
            }
        };
        let bundle = resources.bundle.as_ref().map(|b| b.fingerprint());
        let tmp = PrivateDir::tmp_for(private_dir.root());
        let files_dir = private_dir.files_dir();
        let read_only =
            self.options.policy.unwrap_or_default().sandbox == crate::policy::Sandbox::ReadOnly;
        // The host's MCP credentials come last: a driver cannot set them (refused above).
        let env: Vec<(String, String)> = launch
            .env
            .iter()
            .chain(delivery.env.iter())
            .cloned()
            .collect();
        let (spec, containment) = grant.spec(
            launch.args.clone(),
            &env,
            cwd,
            RunPaths {
                files: files_dir.as_deref(),
                tmp: &tmp,
                read_only,
                state_read_only: false,
                mcp_programs: &delivery.programs,
                skills: skills.as_ref().map(|s| s.root.as_path()),
                instructions: resources
                    .bundle
                    .as_ref()
                    .map(|_| instructions_dir.as_path()),
            },
        )?;
        if let Some(warm) = warm {
            let identity = super::warm::Identity::new(&launch, &spec, bundle.clone());
            let differences = warm.identity().differences(&identity);
            if !differences.is_empty() {
                self.warm_miss = Some(differences.join(", "));
                return Ok(None);
            }
        }
        Ok(Some(Prepared {
            session,
            launch,
            secrets: delivery.secrets.clone(),
            spec,
            private_dir,
            containment,
            bundle,
            warm: None,
        }))
    }

    /// Check a caller-supplied checkpoint against the driver and turn it into the request's
    /// resume instructions.
    pub(super) fn resume_request(&self) -> Result<Option<Resume>, Error> {
        if let Some(c) = &self.coordinator {
            return Ok(c.resume());
        }
        let Some(cp) = &self.options.resume else {
            return Ok(None);
        };
        let sessions = &self.inner.driver.loaded.descriptor.sessions;
        let refuse = |reason: String| Error::InvalidCheckpoint {
            driver: self.driver_name(),
            reason,
        };
        if !sessions.resume {
            return Err(refuse(
                "the driver does not support resuming sessions".into(),
            ));
        }
        if cp.codec() != sessions.codec {
            return Err(refuse(format!(
                "the checkpoint was written with codec `{}`, the driver uses `{}`",
                cp.codec(),
                sessions.codec
            )));
        }
        if !cp.is_valid() {
            return Err(refuse(
                "the checkpoint is not valid (it comes from a run that did not finish cleanly)"
                    .into(),
            ));
        }
        if cp.resume_id().is_empty() {
            return Err(refuse("the checkpoint has an empty resume id".into()));
        }
        Ok(Some(Resume {
            mode: SessionMode::ContinueOnly,
            state: cp.state().clone(),
        }))
    }
}

impl Run {
    /// A run that only prepares (a dry run, a warm process): it emits nowhere and is never
    /// executed.
    pub(super) fn detached(inner: &Arc<AgentInner>, prompt: String, options: RunOptions) -> Run {
        let run_id = new_run_id();
        let (tx, _rx) = mpsc::channel(2);
        let cancel = inner.cancel.child_token();
        let emitter = Emitter::new(
            tx,
            run_id.clone(),
            inner.driver.name().to_owned(),
            false,
            cancel.clone(),
        );
        Run::new(inner, run_id, prompt, options, emitter, cancel, None)
    }
}

/// Decide what a plain run would launch — the same preparation as a run — and spawn
/// nothing. The private files are written and removed again; no event is emitted. A git
/// worktree workspace is created and released again, so the plan shows its directory.
pub(crate) async fn plan(
    inner: &Arc<AgentInner>,
    prompt: String,
    options: RunOptions,
) -> Result<crate::result::LaunchPlan, Error> {
    if inner.closed.load(Ordering::SeqCst) {
        return Err(Error::AgentClosed);
    }
    let mut run = Run::detached(inner, prompt, options);
    // A git worktree is created for the plan (its directory is the launch's) and released
    // again: git runs, the provider does not.
    run.resolve_managed_workspace().await?;
    let prepared = run.prepare_cold().await;
    let released = run
        .release_managed_workspace(prepared.is_err(), false)
        .await;
    let prepared = prepared?;
    released?;
    let Prepared {
        launch,
        spec,
        containment,
        secrets,
        ..
    } = prepared;
    // MCP credentials (header values, tokens, stdio server variables) are masked wherever
    // they appear, whatever the variable is called.
    let mask = |text: &str| -> String {
        let mut out = text.to_owned();
        for secret in &secrets {
            out = out.replace(secret.as_str(), "<masked>");
        }
        out
    };
    let mut env: Vec<(String, String)> = spec
        .env
        .iter()
        .map(|(k, v)| {
            let (k, v) = (k.to_string_lossy(), v.to_string_lossy());
            (k.to_string(), mask(&crate::result::mask_secret(&k, &v)))
        })
        .collect();
    env.sort();
    Ok(crate::result::LaunchPlan {
        driver: inner.driver.name().to_owned(),
        program: launch.program,
        resolved: spec.program,
        args: spec.args.iter().map(|a| mask(a)).collect(),
        cwd: spec.cwd,
        env,
        driver_env: launch.env.into_iter().map(|(k, _)| k).collect(),
        files: launch
            .files
            .iter()
            .map(|(name, contents)| (name.clone(), contents.len()))
            .collect(),
        stdin_bytes: launch.stdin.len(),
        keep_stdin_open: launch.keep_stdin_open,
        containment,
    })
}
