//! The driver on output recorded from the real agents (`testdata/<agent>/<scenario>.jsonl`:
//! `> ` lines went to the agent, `< ` lines came from it; see `testdata/README.md`).
//!
//! The replayer plays the agent's side: each recorded process becomes a harness session
//! (a second `initialize` is a second process, restoring the recorded session), the agent's
//! lines are fed as stdout, and the client's lines say when the driver is asked to do
//! something (a next turn, a cancel, a permission answer). What the driver writes must be
//! what the recorded client wrote: the same methods in the same order, the same options.

use super::*;
use adaptor_sdk::{ItemKind, Outcome};

/// One recorded process, replayed: each turn's outcome and actions, and what the driver wrote.
struct Process {
    turns: Vec<(Outcome, Vec<Action>)>,
    /// Methods of the requests and notifications the driver wrote, in order.
    methods: Vec<String>,
    /// The option each permission answer selected (`None`: `cancelled`).
    answers: Vec<Option<String>>,
}

fn load(agent: &str, scenario: &str) -> Vec<(bool, String)> {
    let path = format!(
        "{}/testdata/{agent}/{scenario}.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            if let Some(rest) = l.strip_prefix("> ") {
                (true, rest.to_owned())
            } else if let Some(rest) = l.strip_prefix("< ") {
                (false, rest.to_owned())
            } else {
                panic!("{path}: a line without a direction: {l}")
            }
        })
        .collect()
}

fn recorded_request(
    agent: &str,
    prompt: &str,
    resume: Option<(&str, &str)>,
    mode: Option<&str>,
) -> RunRequest {
    let mut config = json!({ "agent": agent, "command": agent });
    if let Some(mode) = mode {
        config["mode"] = json!(mode);
    }
    let mut r = request(prompt);
    if let Some((method, id)) = resume {
        config["restore"] = json!(method.trim_start_matches("session/"));
        r.resume = Some(Resume {
            mode: SessionMode::ContinueOnly,
            state: SessionState {
                resume_id: id.to_owned(),
                display_id: None,
                data: Vec::new(),
            },
        });
    }
    r.config_json = config.to_string();
    r.policy.permission = DecisionMode::Ask;
    // The recording's client said "no" and let the agent carry on.
    r.policy.on_reject = Fallback::Continue;
    r
}

/// Whether a recorded agent line is history replayed by `session/load` (its user messages,
/// and the mock's answers to them, which name an earlier user-message count).
fn replayed_history(line: &str) -> bool {
    line.contains("\"user_message_chunk\"")
        || (line.contains("agent_message_chunk") && line.contains("user_msgs=1 "))
}

fn record_written(process: &mut Process, actions: &[Action]) {
    for frame in written(actions) {
        if let Some(method) = frame["method"].as_str() {
            process.methods.push(method.to_owned());
        } else if let Some(outcome) = frame["result"].get("outcome") {
            process
                .answers
                .push(outcome["optionId"].as_str().map(str::to_owned));
        }
    }
}

fn replay(agent: &str, scenario: &str) -> Vec<Process> {
    replay_checked(agent, scenario, true)
}

/// [`replay`]; `same_writes`: check that the driver wrote what the recorded client wrote
/// (not when the recorded client went on after a failure, as no driver of ours does).
fn replay_checked(agent: &str, scenario: &str, same_writes: bool) -> Vec<Process> {
    let lines = load(agent, scenario);
    let mut processes = Vec::new();
    let mut current: Option<(Harness<AcpSession>, Process)> = None;
    // A prompt the client sent while the agent was still replaying a loaded session's
    // history: the driver sends it once the replay has settled.
    let mut deferred = false;
    // Whether this process's first prompt went by (the driver sends that one by itself).
    let mut first_prompt_seen = false;
    for (i, (to_agent, text)) in lines.iter().enumerate() {
        let frame: Value = serde_json::from_str(text).expect("a recorded JSON frame");
        if !to_agent {
            let (h, p) = current.as_mut().expect("a process");
            if deferred && !replayed_history(text) {
                settle(h, p);
                deferred = false;
            }
            let out = h.stdout(format!("{text}\n").as_bytes());
            record_written(p, &out);
            p.turns.last_mut().expect("a turn").1.extend(out);
            continue;
        }
        match frame["method"].as_str() {
            Some("initialize") => {
                if let Some((h, mut p)) = current.take() {
                    let (actions, outcome) = h.exit(exited(0));
                    finish(&mut p, actions, outcome);
                    processes.push(p);
                }
                // This process's first prompt, and the session it restores, if any.
                let rest = &lines[i + 1..];
                let next = |method: &str| {
                    rest.iter()
                        .take_while(|(_, t)| !t.contains("\"method\":\"initialize\""))
                        .filter(|(to, _)| *to)
                        .map(|(_, t)| serde_json::from_str::<Value>(t).unwrap())
                        .find(|f| f["method"] == method)
                };
                let prompt = next("session/prompt")
                    .and_then(|f| f["params"]["prompt"][0]["text"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                let restore = next("session/load").or_else(|| next("session/resume"));
                let resume = restore.as_ref().map(|f| {
                    (
                        f["method"].as_str().unwrap(),
                        f["params"]["sessionId"].as_str().unwrap(),
                    )
                });
                let mode = next("session/set_mode");
                let mode = mode.as_ref().and_then(|f| f["params"]["modeId"].as_str());
                let (h, launch) =
                    Harness::<AcpSession>::start(recorded_request(agent, &prompt, resume, mode))
                        .expect("start");
                let mut p = Process {
                    turns: vec![(adaptor_sdk::empty_outcome(), Vec::new())],
                    methods: Vec::new(),
                    answers: Vec::new(),
                };
                record_written(&mut p, &[Action::WriteStdin(launch.stdin)]);
                current = Some((h, p));
                first_prompt_seen = false;
            }
            Some("session/prompt") => {
                let (h, p) = current.as_mut().expect("a process");
                if !std::mem::replace(&mut first_prompt_seen, true) {
                    // The process's first prompt: the driver sends it by itself, after a
                    // loaded session's replay has settled.
                    deferred = p.methods.iter().any(|m| m == "session/load");
                    continue;
                }
                let outcome = h.finish_turn();
                p.turns.last_mut().unwrap().0 = outcome;
                let prompt = frame["params"]["prompt"][0]["text"].as_str().unwrap();
                let out = h
                    .next_turn(recorded_request(agent, prompt, None, None))
                    .expect("next turn");
                record_written(p, &out);
                p.turns.push((adaptor_sdk::empty_outcome(), out));
            }
            Some("session/cancel") => {
                let (h, p) = current.as_mut().expect("a process");
                let out = h.cancel();
                record_written(p, &out);
                p.turns.last_mut().unwrap().1.extend(out);
            }
            Some(_) => {}
            None if frame.get("result").is_some() => {
                // The client's permission answer: the same decision through the host.
                let (h, p) = current.as_mut().expect("a process");
                let option = frame["result"]["outcome"]["optionId"]
                    .as_str()
                    .unwrap_or("");
                let decision = if ["proceed_once", "once", "allow"].contains(&option)
                    || option.starts_with("proceed_always")
                {
                    Decision::Approve(None)
                } else {
                    Decision::Deny("no".into())
                };
                let id = format!("permission-{}", frame["id"]);
                let out = h.decide(&id, decision);
                record_written(p, &out);
                p.turns.last_mut().unwrap().1.extend(out);
            }
            // The client's error answers to agent requests: the driver writes its own.
            None => {}
        }
    }
    let (h, mut p) = current.expect("a process");
    let (actions, outcome) = h.exit(exited(0));
    finish(&mut p, actions, outcome);
    processes.push(p);
    if !same_writes {
        return processes;
    }
    // What the driver wrote is what the recorded client wrote.
    let mut recorded = Vec::new();
    let mut process = 0;
    for (to_agent, text) in &lines {
        let frame: Value = serde_json::from_str(text).unwrap();
        if !to_agent {
            continue;
        }
        if frame["method"] == "initialize" && !recorded.is_empty() {
            assert_eq!(
                processes[process].methods, recorded,
                "{agent}/{scenario} process {process}"
            );
            recorded.clear();
            process += 1;
        }
        if let Some(method) = frame["method"].as_str() {
            recorded.push(method.to_owned());
        }
    }
    assert_eq!(
        processes[process].methods, recorded,
        "{agent}/{scenario} process {process}"
    );
    processes
}

/// Fire the settle timer until the driver sends the deferred prompt.
fn settle(h: &mut Harness<AcpSession>, p: &mut Process) {
    for _ in 0..30 {
        let out = h.timer(1);
        if out.is_empty() {
            // Not settling: the load failed.
            return;
        }
        let sent = written(&out);
        record_written(p, &out);
        p.turns.last_mut().unwrap().1.extend(out);
        if sent.iter().any(|f| f["method"] == "session/prompt") {
            return;
        }
    }
    panic!("the prompt was never sent after the load");
}

fn finish(p: &mut Process, actions: Vec<Action>, outcome: Outcome) {
    let _ = actions;
    p.turns.last_mut().unwrap().0 = outcome;
}

fn hello(agent: &str, n: usize, text: &str) -> String {
    let api = if agent == "gemini" { "gemini" } else { "chat" };
    format!("Hello from mock-{api}! user_msgs={n} you said: {text}")
}

fn ok(outcome: &Outcome, what: &str) {
    assert!(outcome.failure.is_none(), "{what}: {:?}", outcome.failure);
    assert!(
        outcome.checkpoint.as_ref().is_some_and(|c| c.valid),
        "{what}: a valid checkpoint"
    );
}

fn tool_results(outcome: &Outcome) -> Vec<bool> {
    outcome
        .transcript
        .iter()
        .filter(|i| i.kind == ItemKind::ToolResult)
        .map(|i| i.is_error)
        .collect()
}

const AGENTS: &[&str] = &["gemini", "qwen", "opencode"];

/// The usage each agent reports for `calls` model calls of the mock.
fn served(agent: &str, outcome: &Outcome, calls: u64) {
    let (input, output) = if agent == "gemini" { (17, 5) } else { (23, 7) };
    let usage = outcome.usage.expect("usage");
    assert_eq!(
        (usage.input_tokens, usage.output_tokens),
        (Some(input * calls), Some(output * calls)),
        "{agent}: {usage:?}"
    );
}

#[test]
fn plain_text_with_usage() {
    for agent in AGENTS {
        let p = replay(agent, "basic");
        let (outcome, actions) = &p[0].turns[0];
        ok(outcome, agent);
        assert_eq!(outcome.text, hello(agent, 1, "hi there"), "{agent}");
        served(agent, outcome, 1);
        assert!(outcome.model.is_some(), "{agent}: the model");
        let deltas = events_of(actions)
            .iter()
            .filter(|e| matches!(e, Event::Text(t) if t.phase == Phase::Delta))
            .count();
        assert!(deltas >= 2, "{agent}: streamed in {deltas} deltas");
    }
    for (agent, scenario) in [
        ("gemini", "basic_no_skip_trust"),
        ("qwen", "basic_no_auth_type"),
    ] {
        let p = replay(agent, scenario);
        ok(&p[0].turns[0].0, scenario);
    }
}

#[test]
fn split_chunks_give_the_same_run() {
    for agent in AGENTS {
        let lines = load(agent, "basic");
        let stdout: Vec<u8> = lines
            .iter()
            .filter(|(to, _)| !to)
            .flat_map(|(_, t)| format!("{t}\n").into_bytes())
            .collect();
        let req = recorded_request(agent, "hi there", None, None);
        let whole =
            adaptor_sdk::harness::replay::<AcpSession>(req.clone(), &stdout, 0, exited(0)).unwrap();
        let split = adaptor_sdk::harness::replay::<AcpSession>(req, &stdout, 7, exited(0)).unwrap();
        assert_eq!(whole.outcome.text, split.outcome.text, "{agent}");
        assert_eq!(whole.events(), split.events(), "{agent}");
        assert!(
            whole.outcome.failure.is_none(),
            "{agent}: {:?}",
            whole.outcome.failure
        );
    }
}

#[test]
fn two_turns_on_one_process() {
    for agent in AGENTS {
        let p = replay(agent, "two_turns");
        assert_eq!(p.len(), 1);
        let turns = &p[0].turns;
        ok(&turns[0].0, agent);
        ok(&turns[1].0, agent);
        assert_eq!(turns[0].0.text, hello(agent, 1, "first turn"));
        assert_eq!(turns[1].0.text, hello(agent, 2, "second turn"));
        assert_eq!(
            turns[0].0.checkpoint.as_ref().unwrap().state.resume_id,
            turns[1].0.checkpoint.as_ref().unwrap().state.resume_id
        );
    }
}

#[test]
fn a_tool_that_needs_no_permission() {
    for agent in AGENTS {
        let p = replay(agent, "tool_read");
        let (outcome, actions) = &p[0].turns[0];
        ok(outcome, agent);
        assert_eq!(tool_results(outcome), [false], "{agent}");
        assert!(
            outcome.text.contains("TOOL_RESULT_SEEN"),
            "{agent}: {}",
            outcome.text
        );
        assert!(
            !actions
                .iter()
                .any(|a| matches!(a, Action::RequestApproval(_))),
            "{agent}: nothing asked"
        );
    }
}

#[test]
fn a_permission_allowed_and_rejected() {
    for agent in AGENTS {
        let p = replay(agent, "permission_allow");
        let (outcome, actions) = &p[0].turns[0];
        ok(outcome, agent);
        let asked: Vec<_> = actions
            .iter()
            .filter_map(|a| match a {
                Action::RequestApproval(r) => Some(r.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(asked.len(), 1, "{agent}");
        assert!(asked[0].tool_call_id.is_some(), "{agent}");
        assert_eq!(tool_results(outcome), [false], "{agent}");
        assert!(
            outcome.text.contains("TOOL_RESULT_SEEN"),
            "{agent}: {}",
            outcome.text
        );
        let allow = p[0].answers[0].clone().expect("an option");
        assert!(
            !allow.contains("always"),
            "{agent}: {allow} (once, never always)"
        );

        let p = replay(agent, "permission_reject");
        let (outcome, _) = &p[0].turns[0];
        assert!(
            outcome.failure.is_none(),
            "{agent}: continue after no: {:?}",
            outcome.failure
        );
        assert_eq!(tool_results(outcome), [true], "{agent}: the call failed");
        let reject = p[0].answers[0].clone().expect("an option");
        assert!(
            ["cancel", "reject"].contains(&reject.as_str()),
            "{agent}: {reject}"
        );
    }
}

#[test]
fn cancel_then_another_turn() {
    for agent in AGENTS {
        let p = replay(agent, "cancel");
        let turns = &p[0].turns;
        assert_eq!(
            turns[0].0.failure.as_ref().map(|f| f.reason.clone()),
            Some(FailureReason::Cancelled),
            "{agent}"
        );
        assert!(!turns[0].0.text.is_empty(), "{agent}: partial text kept");
        ok(&turns[1].0, agent);
        assert!(p[0].methods.contains(&"session/cancel".to_owned()));
    }
}

#[test]
fn an_api_error_then_another_turn() {
    for agent in AGENTS {
        let p = replay(agent, "error_400");
        let turns = &p[0].turns;
        let failure = turns[0].0.failure.as_ref().expect("a failure");
        assert_eq!(failure.reason, FailureReason::AgentError, "{agent}");
        assert!(
            failure.message.contains("400"),
            "{agent}: {}",
            failure.message
        );
        assert!(!turns[0].0.checkpoint.as_ref().unwrap().valid);
        ok(&turns[1].0, agent);
    }
}

#[test]
fn a_session_restored_in_a_second_process() {
    for (agent, scenario) in [
        ("gemini", "load"),
        ("qwen", "load"),
        ("qwen", "resume"),
        ("opencode", "load"),
        ("opencode", "resume"),
    ] {
        let p = replay(agent, scenario);
        assert_eq!(p.len(), 2, "{agent}/{scenario}");
        let (outcome, actions) = &p[1].turns[0];
        ok(outcome, scenario);
        assert_eq!(
            outcome.text,
            hello(agent, 2, "second turn"),
            "{agent}/{scenario}: only this turn's text"
        );
        let replayed = events_of(actions)
            .iter()
            .any(|e| matches!(e, Event::Notice(n) if n.kind == "acp.history_replayed"));
        assert_eq!(replayed, scenario == "load", "{agent}/{scenario}");
        assert_eq!(
            outcome.checkpoint.as_ref().unwrap().state.resume_id,
            p[0].turns[0].0.checkpoint.as_ref().unwrap().state.resume_id
        );
    }
}

#[test]
fn gemini_cannot_load_a_session_in_the_minute_it_was_made() {
    // (The recorded client sent its prompt after the failed load; the driver does not.)
    let p = replay_checked("gemini", "load_same_minute", false);
    let failure = p[1].turns[0].0.failure.as_ref().expect("a failure");
    assert_eq!(failure.reason, FailureReason::ResumeRejected);
    assert!(
        failure.message.contains("No previous sessions"),
        "{}",
        failure.message
    );
}

#[test]
fn other_recordings_replay_cleanly() {
    for (agent, scenario) in [
        ("gemini", "shell_no_permission"),
        ("gemini", "shell_permission_allow"),
        ("qwen", "permission_auto_mode"),
        ("opencode", "shell_no_permission"),
    ] {
        for process in replay(agent, scenario) {
            for (outcome, _) in &process.turns {
                assert!(
                    !outcome
                        .failure
                        .as_ref()
                        .is_some_and(|f| f.reason == FailureReason::ProtocolError),
                    "{agent}/{scenario}: {:?}",
                    outcome.failure
                );
            }
        }
    }
}
