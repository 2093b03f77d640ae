//! The SDK control protocol's approval half: `control_request` / `can_use_tool` frames become
//! approval requests (`ExitPlanMode` → plan review, `AskUserQuestion` → question with its
//! options, every other tool → permission), and decisions become `control_response` frames.
//!
//! Must not: decide anything itself (the host applies the policy and asks people).

use std::collections::HashMap;

use adaptor_sdk::json::str_field;
use adaptor_sdk::{
    ApprovalKind, ApprovalRequest, Choice, Decision, FailureReason, Fallback, Policy,
};
use serde_json::{Value, json};

use crate::dialect::Dialect;

/// A request the CLI is waiting on.
struct Pending {
    input: Value,
    tool_use_id: Option<String>,
    /// For questions: the question texts, in order (answers are keyed by them).
    questions: Vec<String>,
}

/// Open `can_use_tool` requests of one run.
#[derive(Default)]
pub(crate) struct Controls {
    pending: HashMap<String, Pending>,
    /// The failure an interrupting refusal stands for, if one was sent.
    pub refusal: Option<FailureReason>,
    /// The plan last written to the dialect's plan directory (for an `ExitPlanMode`
    /// request that does not carry its plan).
    pub plan: Option<String>,
}

/// What to do with a `control_request` frame.
pub(crate) enum Incoming {
    /// Ask the host.
    Ask(ApprovalRequest),
    /// Answer the CLI at once (a request this driver does not handle).
    Reply(Value),
}

impl Controls {
    /// A `control_request` frame from the CLI.
    pub fn on_request<D: Dialect>(&mut self, frame: &Value) -> Result<Incoming, String> {
        let request_id = str_field(frame, "request_id")
            .filter(|id| !id.is_empty())
            .ok_or("control_request without request_id")?
            .to_owned();
        let request = frame.get("request").unwrap_or(&Value::Null);
        let subtype = str_field(request, "subtype").unwrap_or_default();
        if subtype != "can_use_tool" {
            return Ok(Incoming::Reply(json!({
                "type": "control_response",
                "response": {
                    "subtype": "error",
                    "request_id": request_id,
                    "error": format!("control request `{subtype}` is not supported by agent-adaptor"),
                }
            })));
        }
        let wrapper = str_field(request, "tool_name").unwrap_or("tool").to_owned();
        let input = request.get("input").cloned().unwrap_or_else(|| json!({}));
        // What is shown is the wrapped tool; the answer carries the wrapper's input.
        let (tool, shown) = D::unwrap_tool(&wrapper, &input).unwrap_or((wrapper, input.clone()));
        let tool_use_id = str_field(request, "tool_use_id").map(str::to_owned);
        let mut questions = Vec::new();
        let (kind, title, details, choices) = match tool.as_str() {
            "ExitPlanMode" => (
                ApprovalKind::PlanReview,
                "Approve the plan?".to_owned(),
                json!({ "plan": shown
                    .get("plan")
                    .filter(|p| !p.is_null())
                    .cloned()
                    .or_else(|| self.plan.clone().map(Value::String))
                    .unwrap_or(Value::Null) }),
                Vec::new(),
            ),
            "AskUserQuestion" => {
                let list = shown
                    .get("questions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                questions = list
                    .iter()
                    .filter_map(|q| str_field(q, "question").map(str::to_owned))
                    .collect();
                let first = list.first().cloned().unwrap_or(Value::Null);
                let choices = first
                    .get("options")
                    .and_then(Value::as_array)
                    .map(|options| {
                        options
                            .iter()
                            .filter_map(|o| {
                                let label = str_field(o, "label")?.to_owned();
                                Some(Choice {
                                    key: label.clone(),
                                    label,
                                    description: str_field(o, "description").map(str::to_owned),
                                })
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                (
                    ApprovalKind::Question,
                    questions
                        .first()
                        .cloned()
                        .unwrap_or_else(|| "Question".into()),
                    json!({ "questions": list }),
                    // Several questions at once are answered with a JSON object instead.
                    if questions.len() == 1 {
                        choices
                    } else {
                        Vec::new()
                    },
                )
            }
            _ => {
                let mut details = json!({ "input": shown });
                if let Some(d) = str_field(request, "description") {
                    details["description"] = json!(d);
                }
                if let Some(p) = str_field(request, "blocked_path") {
                    details["blocked_path"] = json!(p);
                }
                (
                    ApprovalKind::Permission,
                    format!(
                        "Allow {}?",
                        str_field(request, "display_name").unwrap_or(&tool)
                    ),
                    details,
                    Vec::new(),
                )
            }
        };
        self.pending.insert(
            request_id.clone(),
            Pending {
                input,
                tool_use_id: tool_use_id.clone(),
                questions,
            },
        );
        Ok(Incoming::Ask(ApprovalRequest {
            id: request_id,
            kind,
            title,
            tool_call_id: tool_use_id,
            tool_name: Some(tool),
            choices,
            details_json: Some(details.to_string()),
        }))
    }

    /// The `control_response` frame for the host's decision on `id` (`None` for an unknown id).
    pub fn on_decision<D: Dialect>(
        &mut self,
        id: &str,
        decision: Decision,
        policy: &Policy,
    ) -> Option<Value> {
        let pending = self.pending.remove(id)?;
        let tool_use_id = pending.tool_use_id.as_deref();
        let allow = |input: Value| D::allow(input, tool_use_id);
        let mut deny = |message: &str, interrupt: bool, reason: FailureReason| {
            if interrupt {
                self.refusal = Some(reason);
            }
            D::deny(message, interrupt, tool_use_id)
        };
        let inner = match decision {
            Decision::Approve(updated) => allow(
                updated
                    .and_then(|u| serde_json::from_str(&u).ok())
                    .unwrap_or_else(|| pending.input.clone()),
            ),
            Decision::Answer(answer) => {
                let answers = match serde_json::from_str::<Value>(&answer) {
                    Ok(Value::Object(map)) if pending.questions.len() > 1 => Value::Object(map),
                    _ => {
                        let question = pending.questions.first().cloned().unwrap_or_default();
                        json!({ question: answer })
                    }
                };
                let mut input = pending.input.clone();
                input["answers"] = answers;
                allow(input)
            }
            Decision::Deny(reason) => deny(
                &reason,
                policy.on_reject != Fallback::Continue,
                FailureReason::ApprovalDenied,
            ),
            Decision::TimedOut => deny(
                "nobody answered in time",
                policy.on_timeout != Fallback::Continue,
                FailureReason::ApprovalTimeout,
            ),
            Decision::Unanswered => deny(
                "nobody can answer this request",
                true,
                FailureReason::ApprovalUnanswered,
            ),
            Decision::Cancelled => deny("the run was cancelled", true, FailureReason::Cancelled),
        };
        Some(json!({
            "type": "control_response",
            "response": { "subtype": "success", "request_id": id, "response": inner },
        }))
    }
}
