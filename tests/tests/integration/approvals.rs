//! Approvals end to end: the reference provider asks over its stdin protocol, the reference
//! driver maps requests and writes decisions back, the host applies the policy and delivers
//! answers from the event stream or the handler — exactly once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use adaptor::{
    ApprovalError, ApprovalKind, ApprovalPolicy, ApprovalRequest, DecisionMode, Error, Event,
    FailureReason, Fallback, Policy, QuestionMode, Resolution, RunOptions, RunResult,
};
use adaptor_integration_tests::*;
use futures::StreamExt;

fn asking(approvals: ApprovalPolicy) -> RunOptions {
    RunOptions::new().policy(Policy {
        approvals,
        ..Policy::default()
    })
}

fn ask_all() -> ApprovalPolicy {
    ApprovalPolicy {
        permission: DecisionMode::Ask,
        plan_review: DecisionMode::Ask,
        question: QuestionMode::Ask,
        ..ApprovalPolicy::default()
    }
}

/// What the reference provider received on stdin after the prompt frame.
fn responses(r: &RunResult) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&r.raw().stdin)
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).expect("json response"))
        .collect()
}

fn tool_output(r: &RunResult, id: &str) -> (String, bool) {
    r.transcript()
        .iter()
        .find(|i| i.kind == adaptor::ItemKind::ToolResult && i.tool_call_id.as_deref() == Some(id))
        .map(|i| (i.text.clone().unwrap_or_default(), i.is_error))
        .expect("tool result")
}

fn resolutions(events: &[Event]) -> Vec<(Resolution, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ApprovalResolved(r) => Some((r.resolution.clone(), r.by_policy)),
            _ => None,
        })
        .collect()
}

/// Run with a stream, handing each approval request to `answer` (in the consumer's task).
async fn stream_answering(
    agent: &adaptor::Agent,
    prompt: &str,
    options: RunOptions,
    mut answer: impl FnMut(ApprovalRequest),
) -> (Vec<Event>, Result<RunResult, Error>) {
    let mut stream = agent.stream_with(prompt, options);
    let mut events = Vec::new();
    while let Some(ev) = stream.next().await {
        if let Event::ApprovalRequest(req) = &ev {
            answer(req.clone());
        }
        events.push(ev);
    }
    (events, stream.result().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_form_approval_from_another_task() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let mut held = Vec::new();
    let (events, result) =
        stream_answering(&agent, "[[ask-permission]] hi", asking(ask_all()), |req| {
            assert_eq!(req.kind, ApprovalKind::Permission);
            assert_eq!(req.title, "Allow echo?");
            assert_eq!(req.tool_call_id.as_deref(), Some("call-1"));
            assert_eq!(req.tool_name.as_deref(), Some("echo"));
            assert_eq!(
                req.details,
                Some(serde_json::json!({"input": {"text": "hi"}}))
            );
            assert_eq!(req.attempt, 1);
            assert!(req.deadline.is_some(), "the default policy has a timeout");
            assert!(
                matches!(
                    req.answer("x"),
                    Err(ApprovalError::WrongKind {
                        action: "answer",
                        ..
                    })
                ),
                "a permission request takes no answer"
            );
            held.push(req.clone());
            tokio::spawn(async move { req.approve().expect("first answer wins") });
        })
        .await;
    let r = result.expect("approved run succeeds");
    assert_eq!(tool_output(&r, "call-1"), ("hi".into(), false));
    assert_eq!(
        responses(&r),
        vec![serde_json::json!({"type":"approval_response","id":"approval-1","behavior":"allow"})]
    );
    assert_eq!(
        resolutions(&events),
        vec![(
            Resolution::Approved {
                updated_input: None
            },
            false
        )]
    );
    // The run is over: a request kept past it is detached, and answering fails at once.
    let late = held.pop().unwrap();
    assert!(matches!(
        late.deny("too late"),
        Err(ApprovalError::AlreadyResolved { .. })
    ));
    assert_eq!(
        late.resolution(),
        Some(Resolution::Approved {
            updated_input: None
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_answers_questions_plans_and_rewrites_tool_input() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .on_approval(|req: ApprovalRequest| async move {
            match req.kind {
                ApprovalKind::Question => {
                    assert_eq!(
                        req.choices
                            .iter()
                            .map(|c| c.key.as_str())
                            .collect::<Vec<_>>(),
                        ["formal", "casual"]
                    );
                    assert!(matches!(
                        req.answer("rude"),
                        Err(ApprovalError::InvalidChoice { .. })
                    ));
                    req.answer("casual").unwrap()
                }
                ApprovalKind::PlanReview => {
                    assert!(req.details.as_ref().unwrap()["plan"].is_string());
                    req.approve().unwrap()
                }
                _ => req
                    .approve_with(serde_json::json!({"text": "edited"}))
                    .unwrap(),
            }
        })
        .build();
    // `run` drains the events; the handler is the one who answers.
    let r = agent
        .run_with(
            "[[ask-plan]] [[ask-question]] [[ask-permission]] hi",
            asking(ask_all()),
        )
        .await
        .expect("answered run succeeds");
    assert_eq!(tool_output(&r, "call-ask"), ("casual".into(), false));
    assert_eq!(tool_output(&r, "call-1"), ("edited".into(), false));
    let behaviours: Vec<String> = responses(&r)
        .iter()
        .map(|v| v["behavior"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(behaviours, ["allow", "allow", "allow"]);
    assert!(r.checkpoint.as_ref().unwrap().is_valid());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_racing_answers_resolve_exactly_once() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    for round in 0..3 {
        let wins = Arc::new(AtomicUsize::new(0));
        let already = Arc::new(AtomicUsize::new(0));
        let winner: Arc<std::sync::Mutex<Option<&'static str>>> = Arc::default();
        let mut tasks = Vec::new();
        let (events, result) = stream_answering(
            &agent,
            "[[ask-permission]] race",
            asking(ask_all()),
            |req| {
                let barrier = Arc::new(tokio::sync::Barrier::new(16));
                for i in 0..16 {
                    let (req, barrier) = (req.clone(), barrier.clone());
                    let (wins, already, winner) = (wins.clone(), already.clone(), winner.clone());
                    tasks.push(tokio::spawn(async move {
                        barrier.wait().await;
                        let (what, answer) = if i % 2 == 0 {
                            ("approve", req.approve())
                        } else {
                            ("deny", req.deny(format!("task {i} says no")))
                        };
                        match answer {
                            Ok(()) => {
                                wins.fetch_add(1, Ordering::SeqCst);
                                *winner.lock().unwrap() = Some(what);
                            }
                            Err(ApprovalError::AlreadyResolved { .. }) => {
                                already.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(other) => panic!("unexpected error {other:?}"),
                        }
                    }));
                }
            },
        )
        .await;
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(wins.load(Ordering::SeqCst), 1, "round {round}: one winner");
        assert_eq!(already.load(Ordering::SeqCst), 15, "round {round}");
        assert_eq!(resolutions(&events).len(), 1, "one resolution event");
        // The run ends as the policy says for whichever answer won.
        match winner.lock().unwrap().expect("winner") {
            "approve" => {
                result.expect("approval wins → success");
            }
            _ => {
                let e = run_error(result);
                assert_eq!(e.reason, FailureReason::ApprovalDenied);
                assert!(e.message.contains("says no"), "{}", e.message);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejection_aborts_or_continues_as_the_policy_says() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let (_, result) = stream_answering(&agent, "[[ask-permission]] hi", asking(ask_all()), |req| {
        req.deny("not on my watch").unwrap()
    })
    .await;
    let e = run_error(result);
    assert_eq!(e.reason, FailureReason::ApprovalDenied);
    assert!(e.message.contains("not on my watch"), "{}", e.message);
    assert_eq!(
        responses(&e.result)[0]["interrupt"],
        serde_json::json!(true)
    );
    assert!(!e.result.checkpoint.as_ref().unwrap().is_valid());

    let (_, result) = stream_answering(
        &agent,
        "[[ask-permission]] hi",
        asking(ApprovalPolicy {
            on_reject: Fallback::Continue,
            ..ask_all()
        }),
        |req| req.deny("skip it").unwrap(),
    )
    .await;
    let r = result.expect("continue: the agent carries on without the tool");
    assert_eq!(tool_output(&r, "call-1"), ("denied: skip it".into(), true));
    assert_eq!(responses(&r)[0]["interrupt"], serde_json::json!(false));
    assert_eq!(r.text, "Reference reply: hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_abort_continue_or_retry() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let short = ApprovalPolicy {
        timeout: Some(Duration::from_millis(200)),
        ..ask_all()
    };
    // Abort: the consumer holds the request but never answers.
    let mut held = Vec::new();
    let (events, result) =
        stream_answering(&agent, "[[ask-permission]] hi", asking(short), |req| {
            held.push(req)
        })
        .await;
    let e = run_error(result);
    assert_eq!(e.reason, FailureReason::ApprovalTimeout);
    assert_eq!(resolutions(&events), vec![(Resolution::TimedOut, false)]);
    assert!(matches!(
        held[0].approve(),
        Err(ApprovalError::Expired { .. })
    ));

    // Continue: the CLI is told "no" and the run goes on.
    let (_, result) = stream_answering(
        &agent,
        "[[ask-permission]] hi",
        asking(ApprovalPolicy {
            on_timeout: Fallback::Continue,
            ..short
        }),
        |req| held.push(req),
    )
    .await;
    let r = result.expect("continue after a timeout");
    assert_eq!(
        tool_output(&r, "call-1"),
        ("denied: nobody answered in time".into(), true)
    );

    // Retry: asked again with attempt 2, which is answered.
    let (events, result) = stream_answering(
        &agent,
        "[[ask-permission]] hi",
        asking(ApprovalPolicy {
            on_timeout: Fallback::Retry,
            max_retries: 1,
            ..short
        }),
        |req| {
            if req.attempt == 2 {
                req.approve().unwrap();
            } else {
                held.push(req);
            }
        },
    )
    .await;
    result.expect("the re-ask was approved");
    let attempts: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            Event::ApprovalRequest(r) => Some(r.attempt),
            _ => None,
        })
        .collect();
    assert_eq!(attempts, [1, 2]);
    assert_eq!(
        resolutions(&events),
        vec![
            (Resolution::TimedOut, false),
            (
                Resolution::Approved {
                    updated_input: None
                },
                false
            )
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_unblocks_a_pending_approval() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let mut stream = agent.stream_with(
        "[[ask-permission]] hi",
        asking(ApprovalPolicy {
            timeout: None,
            ..ask_all()
        }),
    );
    let mut held = None;
    let mut pid = None;
    while let Some(ev) = stream.next().await {
        match ev {
            Event::ProcessInfo(p) if p.process == adaptor::ProcessInfoKind::Spawn => pid = p.pid,
            Event::ApprovalRequest(req) => {
                held = Some(req);
                break;
            }
            _ => {}
        }
    }
    let req = held.expect("asked");
    let waiter = {
        let req = req.clone();
        tokio::spawn(async move { req.settled().await })
    };
    stream.cancel();
    let e = run_error(stream.result().await);
    assert_eq!(e.reason, FailureReason::Cancelled);
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("settled() returns")
            .unwrap(),
        Resolution::Cancelled
    );
    assert!(matches!(
        req.approve(),
        Err(ApprovalError::AlreadyResolved {
            resolution: Resolution::Cancelled,
            ..
        })
    ));
    let pid = pid.expect("spawned");
    assert!(!pid_alive(pid) && !group_alive(pid), "provider stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_to_answer_is_unanswered_never_consent() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    // `run` without a handler: the drained event was the only copy.
    let e = run_error(
        agent
            .run_with("[[ask-question]] hi", asking(ask_all()))
            .await,
    );
    assert_eq!(e.reason, FailureReason::ApprovalUnanswered);
    let sent = responses(&e.result);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["behavior"], serde_json::json!("deny"));
    assert_eq!(sent[0]["interrupt"], serde_json::json!(true));
    assert!(
        sent.iter().all(|v| v["behavior"] != "allow"),
        "no invented answer"
    );
    assert!(
        tool_output(&e.result, "call-ask").1,
        "the question tool failed"
    );

    // A stream consumer that looks at each event and lets it go: the same.
    let mut stream = agent.stream_with("[[ask-permission]] hi", asking(ask_all()));
    let mut kinds = Vec::new();
    while let Some(ev) = stream.next().await {
        kinds.push(ev.kind());
    }
    let e = run_error(stream.result().await);
    assert_eq!(e.reason, FailureReason::ApprovalUnanswered);
    assert!(kinds.contains(&"approval_request"));
    assert_eq!(
        responses(&e.result)[0]["behavior"],
        serde_json::json!("deny")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_auto_modes_answer_without_asking() {
    let (state, ws) = (tmp(), tmp());
    let handler_calls = Arc::new(AtomicUsize::new(0));
    let calls = handler_calls.clone();
    let agent = agent_builder(reference(state.path()), ws.path())
        .on_approval(move |_req| {
            calls.fetch_add(1, Ordering::SeqCst);
            async {}
        })
        .build();
    let (events, result) = collect(agent.stream_with(
        "[[ask-plan]] [[ask-permission]] hi",
        asking(ApprovalPolicy {
            permission: DecisionMode::AutoApprove,
            plan_review: DecisionMode::AutoApprove,
            ..ApprovalPolicy::default()
        }),
    ))
    .await;
    let r = result.expect("auto-approved");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::ApprovalRequest(_)))
    );
    assert_eq!(resolutions(&events).len(), 2);
    assert!(resolutions(&events).iter().all(|(_, by_policy)| *by_policy));
    assert_eq!(tool_output(&r, "call-1"), ("hi".into(), false));

    let (events, result) = collect(agent.stream_with(
        "[[ask-question]] hi",
        asking(ApprovalPolicy {
            question: QuestionMode::AutoDeny,
            on_reject: Fallback::Continue,
            ..ApprovalPolicy::default()
        }),
    ))
    .await;
    let r = result.expect("auto-deny with continue");
    assert!(tool_output(&r, "call-ask").1);
    assert!(matches!(
        resolutions(&events)[0],
        (Resolution::Denied { .. }, true)
    ));
    assert_eq!(handler_calls.load(Ordering::SeqCst), 0, "nobody was asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_events_are_never_dropped_by_a_full_buffer() {
    // Drop mode with a two-event buffer and a consumer that starts late: stdout chunks and
    // thinking deltas are dropped, the approval request and its resolution are not.
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .event_buffer(2)
        .build();
    let mut stream = agent.stream_with("[[ask-permission]] hi", asking(ask_all()));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let mut events = Vec::new();
    while let Some(ev) = stream.next().await {
        if let Event::ApprovalRequest(req) = &ev {
            req.approve().expect("the request is answerable");
        }
        events.push(ev);
    }
    let r = stream.result().await.expect("approved run succeeds");
    assert_eq!(tool_output(&r, "call-1"), ("hi".into(), false));
    let requests = events
        .iter()
        .filter(|e| matches!(e, Event::ApprovalRequest(_)))
        .count();
    assert_eq!(requests, 1, "the request arrived");
    assert_eq!(resolutions(&events).len(), 1, "its resolution arrived");
    let dropped = events
        .iter()
        .find_map(|e| match e {
            Event::Dropped(d) => Some(d.count),
            _ => None,
        })
        .unwrap_or(0);
    assert!(
        dropped > 0,
        "the buffer was full (droppable events were dropped)"
    );
}
