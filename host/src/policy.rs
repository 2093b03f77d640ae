//! Run policy: sandbox level, web search, browser and the approval policy per kind, with the
//! presets and the check against a driver's descriptor.
//!
//! Owns: the public policy vocabulary, its conversion to the WIT record, and
//! [`Policy::check`], which every run performs **before anything starts**: an explicit value
//! the driver cannot honour is a typed error naming the driver, the dimension and the value.
//! `Inherit` (leave the CLI's own setting alone) is always portable. A policy is replaced
//! whole between scopes, never merged field by field. Must not: prompt anyone or decide
//! approvals (`decisions.rs` applies the approval policy during a run).

use std::time::Duration;

use crate::descriptor::{DecisionModes, Descriptor};
use crate::error::Error;

/// Sandbox level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Sandbox {
    /// Leave the CLI's own setting alone.
    #[default]
    Inherit,
    /// Read files only.
    ReadOnly,
    /// Write inside the workspace only.
    WorkspaceWrite,
    /// No sandbox.
    Unrestricted,
}

/// Allow/deny switch for an optional tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Toggle {
    /// Leave the CLI's own setting alone.
    #[default]
    Inherit,
    /// Explicitly allowed.
    Allow,
    /// Explicitly denied.
    Deny,
}

/// Decision mode for permission and plan-review requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecisionMode {
    /// Leave the CLI's own setting alone.
    #[default]
    Inherit,
    /// Ask (an approval request in the event stream or the approval handler).
    Ask,
    /// Proceed without asking.
    AutoApprove,
    /// Refuse without asking.
    AutoDeny,
}

/// Decision mode for questions: there is no "auto-approve" for a question, so it cannot be
/// written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuestionMode {
    /// Leave the CLI's own setting alone.
    #[default]
    Inherit,
    /// Ask.
    Ask,
    /// Refuse to answer.
    AutoDeny,
}

/// What happens after an approval is rejected or times out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fallback {
    /// End the run with an approval failure.
    #[default]
    Abort,
    /// Tell the CLI "no" and let it carry on.
    Continue,
    /// Ask again (up to `max_retries` re-asks; the host re-asks, so every driver that can
    /// ask supports it), then abort.
    Retry,
}

/// Approval policy per kind. The default inherits every mode, waits 30 s for an answer,
/// aborts on a timeout or a rejection, and allows 3 re-asks when a fallback is `Retry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApprovalPolicy {
    /// Tool-use permission prompts.
    pub permission: DecisionMode,
    /// Plan review.
    pub plan_review: DecisionMode,
    /// Questions.
    pub question: QuestionMode,
    /// How long to wait for an answer (`None`: wait indefinitely). Default 30 s.
    pub timeout: Option<Duration>,
    /// After a timeout.
    pub on_timeout: Fallback,
    /// After a rejection.
    pub on_reject: Fallback,
    /// Re-asks allowed with [`Fallback::Retry`].
    pub max_retries: u32,
}

impl Default for ApprovalPolicy {
    fn default() -> Self {
        Self {
            permission: DecisionMode::Inherit,
            plan_review: DecisionMode::Inherit,
            question: QuestionMode::Inherit,
            timeout: Some(DEFAULT_APPROVAL_TIMEOUT),
            on_timeout: Fallback::Abort,
            on_reject: Fallback::Abort,
            max_retries: 3,
        }
    }
}

/// How long an approval request waits for an answer unless the policy says otherwise.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(30);

/// The run policy. The default inherits everything (portable to every driver).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Policy {
    /// Sandbox level.
    pub sandbox: Sandbox,
    /// Web search.
    pub web_search: Toggle,
    /// Browser tool.
    pub browser: Toggle,
    /// Approvals.
    pub approvals: ApprovalPolicy,
}

impl Policy {
    /// Read-only sandbox; everything else inherited.
    pub fn read_only() -> Self {
        Self {
            sandbox: Sandbox::ReadOnly,
            ..Self::default()
        }
    }

    /// Workspace-write sandbox; everything else inherited.
    pub fn workspace_write() -> Self {
        Self {
            sandbox: Sandbox::WorkspaceWrite,
            ..Self::default()
        }
    }

    /// No sandbox; everything else inherited.
    pub fn unrestricted() -> Self {
        Self {
            sandbox: Sandbox::Unrestricted,
            ..Self::default()
        }
    }

    /// Check every explicit value against `descriptor`.
    pub fn check(&self, descriptor: &Descriptor) -> Result<(), Error> {
        let driver = &descriptor.name;
        let unsupported = |dimension: &str, value: &str| Error::PolicyUnsupported {
            driver: driver.clone(),
            dimension: dimension.to_owned(),
            value: value.to_owned(),
        };
        let caps = &descriptor.policy;
        let sandbox_ok = match self.sandbox {
            Sandbox::Inherit => true,
            Sandbox::ReadOnly => caps.sandbox.read_only,
            Sandbox::WorkspaceWrite => caps.sandbox.workspace_write,
            Sandbox::Unrestricted => caps.sandbox.unrestricted,
        };
        if !sandbox_ok {
            return Err(unsupported("sandbox", sandbox_name(self.sandbox)));
        }
        if self.web_search != Toggle::Inherit && !caps.web_search {
            return Err(unsupported("web_search", toggle_name(self.web_search)));
        }
        if self.browser != Toggle::Inherit && !caps.browser {
            return Err(unsupported("browser", toggle_name(self.browser)));
        }
        let modes = &descriptor.approvals;
        let approval = |kind: &str, mode: &str| Error::ApprovalModeUnsupported {
            driver: driver.clone(),
            kind: kind.to_owned(),
            mode: mode.to_owned(),
        };
        let a = &self.approvals;
        check_mode(a.permission, &modes.permission).map_err(|m| approval("permission", m))?;
        check_mode(a.plan_review, &modes.plan_review).map_err(|m| approval("plan_review", m))?;
        let question_ok = match a.question {
            QuestionMode::Inherit => true,
            QuestionMode::Ask => modes.question.ask,
            QuestionMode::AutoDeny => modes.question.auto_deny,
        };
        if !question_ok {
            return Err(approval(
                "question",
                if a.question == QuestionMode::Ask {
                    "ask"
                } else {
                    "auto_deny"
                },
            ));
        }
        Ok(())
    }
}

fn check_mode(mode: DecisionMode, caps: &DecisionModes) -> Result<(), &'static str> {
    match mode {
        DecisionMode::Inherit => Ok(()),
        DecisionMode::Ask if caps.ask => Ok(()),
        DecisionMode::AutoApprove if caps.auto_approve => Ok(()),
        DecisionMode::AutoDeny if caps.auto_deny => Ok(()),
        DecisionMode::Ask => Err("ask"),
        DecisionMode::AutoApprove => Err("auto_approve"),
        DecisionMode::AutoDeny => Err("auto_deny"),
    }
}

fn sandbox_name(s: Sandbox) -> &'static str {
    match s {
        Sandbox::Inherit => "inherit",
        Sandbox::ReadOnly => "read_only",
        Sandbox::WorkspaceWrite => "workspace_write",
        Sandbox::Unrestricted => "unrestricted",
    }
}

fn toggle_name(t: Toggle) -> &'static str {
    match t {
        Toggle::Inherit => "inherit",
        Toggle::Allow => "allow",
        Toggle::Deny => "deny",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_set_only_the_sandbox() {
        assert_eq!(Policy::read_only().sandbox, Sandbox::ReadOnly);
        assert_eq!(Policy::workspace_write().sandbox, Sandbox::WorkspaceWrite);
        assert_eq!(Policy::unrestricted().sandbox, Sandbox::Unrestricted);
        for p in [
            Policy::read_only(),
            Policy::workspace_write(),
            Policy::unrestricted(),
        ] {
            assert_eq!(p.web_search, Toggle::Inherit);
            assert_eq!(p.approvals, ApprovalPolicy::default());
        }
        assert_eq!(
            Policy::default().approvals.timeout,
            Some(std::time::Duration::from_secs(30))
        );
    }
}
