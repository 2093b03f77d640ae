//! The single pipeline end to end: reference driver (.wasm) + reference provider (a real
//! process), through `Agent::run` and `Agent::stream`.

use std::time::Duration;

use adaptor::{
    Agent, Error, Event, EventSource, FailureReason, LaunchRefusal, Phase, ProcessInfoKind,
    RunResult,
};
use adaptor_integration_tests::*;
use futures::StreamExt;

const FIXED_SESSION: &str = "ref-00000000feedbeef";

fn assert_lifecycle(events: &[Event]) {
    assert!(!events.is_empty(), "no events");
    for pair in events.windows(2) {
        assert!(
            pair[1].meta().sequence > pair[0].meta().sequence,
            "sequence not strictly increasing: {} then {}",
            pair[0].meta().sequence,
            pair[1].meta().sequence
        );
    }
    assert_eq!(events[0].meta().sequence, 1);
    assert!(
        matches!(events[0], Event::RunStarted(_)),
        "first is {:?}",
        events[0]
    );
    assert!(matches!(events.last(), Some(Event::RunFinished(_))));
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::RunStarted(_)))
            .count(),
        1
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::RunFinished(_)))
            .count(),
        1
    );
    let run_id = &events[0].meta().run_id;
    assert!(events.iter().all(|e| &e.meta().run_id == run_id));
    let violations = adaptortest::check_events(events);
    assert!(violations.is_empty(), "{violations:?}");
}

/// The concatenated text deltas of a run.
fn delta_text(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::TextDelta(d) if d.phase == Phase::Delta => Some(d.text.as_str()),
            _ => None,
        })
        .collect()
}

/// Once the reference provider reported its `[[grandchild]]` (whose pids are those of its
/// own PID namespace): the host's child and the deepest of its descendants, in host pids.
fn pids(events: &[Event]) -> Option<(u32, u32)> {
    let reported = events
        .iter()
        .any(|e| matches!(e, Event::Notice(n) if n.notice == "pids"));
    let spawned = spawn_pid(events)?;
    let below = descendants(spawned);
    // Below the host's child (the reaper of the provider's PID namespace): the provider
    // and its grandchild.
    (reported && below.len() >= 2).then(|| (spawned, *below.last().expect("descendants")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_and_stream_result_give_equal_results() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .env("REFERENCE_PROVIDER_SESSION_ID", FIXED_SESSION)
        .build();
    // stdout only: the relative order of stdout and stderr chunks is up to the OS scheduler.
    let prompt = "Compare me";
    // `run` reads no events (the run stops sending them); the stream's are all read.
    let a = agent.run(prompt).await.expect("run");
    let mut stream = agent.stream(prompt);
    let mut events = 0;
    while stream.next().await.is_some() {
        events += 1;
    }
    assert!(events > 3, "the stream delivered the run's events");
    let b = stream.result().await.expect("stream");
    assert_ne!(a.run_id, b.run_id, "each run has its own id");
    // Field by field. The only things allowed to differ: the run id, the wall-clock duration
    // and the timing/chunking of the raw reads (`raw().chunks`), which the OS decides.
    assert_eq!(a.provider, b.provider);
    assert_eq!(a.model, b.model);
    assert_eq!(a.text, b.text);
    assert_eq!(a.summary, b.summary);
    assert_eq!(a.usage, b.usage);
    assert_eq!(a.metadata, b.metadata);
    assert_eq!(a.checkpoint, b.checkpoint);
    assert_eq!(a.structured_output, b.structured_output);
    assert_eq!(a.exit, b.exit);
    let (ra, rb) = (a.raw(), b.raw());
    assert_eq!(
        (&ra.stdout, &ra.stderr, &ra.stdin),
        (&rb.stdout, &rb.stderr, &rb.stdin)
    );
    // The launch is the same; the process and its run directory are each run's own.
    let launch = |r: &adaptor::RawStreams| {
        r.launch.as_deref().map(|l| {
            (
                l.program.clone(),
                l.resolved.clone(),
                l.args.clone(),
                l.cwd.clone(),
            )
        })
    };
    assert_eq!((launch(ra), &ra.terminal), (launch(rb), &rb.terminal));
    for r in [ra, rb] {
        let l = r.launch.as_ref().expect("launch");
        assert!(
            l.process
                .is_some_and(|p| p.pid > 0 && p.start_ticks.is_some())
        );
        assert!(
            l.containment
                .as_ref()
                .is_some_and(|c| c.filesystem_enforced)
        );
    }
    // Both saw their process exit: the time is each run's own, within its duration.
    for r in [&a, &b] {
        let exited = r.raw().exited.expect("the provider's exit was seen");
        assert!(exited < r.duration, "{exited:?} within {:?}", r.duration);
    }
    assert_eq!(a.text, "Reference reply: Compare me");
    assert_eq!(a.transcript(), b.transcript());
    assert_eq!(a.session_id(), Some(FIXED_SESSION));
    let usage = a.usage.as_ref().expect("usage");
    assert_eq!(usage.input_tokens, Some("Compare me".len() as u64 + 10));
    assert_eq!(usage.cache_write_tokens, None, "absent stays absent");
    assert!(a.checkpoint.as_ref().expect("checkpoint").is_valid());
    assert_eq!(a.terminal().expect("terminal").event, "result");
}

/// `RawStreams::exited` times the provider process's life from the run's attach: a provider
/// that sleeps lived at least that long, the host's own time around it is the rest of the
/// duration, and every output chunk was read within the life or the drain after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_result_times_the_provider_process_until_its_exit() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let r = agent.run("[[sleep 300]] slow").await.expect("run");
    let exited = r.raw().exited.expect("the provider's exit was seen");
    assert!(
        exited >= Duration::from_millis(300),
        "the provider slept 300 ms, so it lived at least that long: {exited:?}"
    );
    assert!(exited < r.duration, "{exited:?} within {:?}", r.duration);
    let last_read = r
        .raw()
        .chunks
        .iter()
        .filter(|c| c.stream != adaptor::StreamKind::Stdin)
        .map(|c| c.at)
        .max()
        .expect("output was read");
    assert!(
        last_read <= exited + Duration::from_secs(1),
        "output read long after the exit: {last_read:?} against {exited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_sequenced_with_one_start_and_one_finish() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let stream = agent.stream("Sequence check");
    let run_id = stream.run_id().to_owned();
    assert!(run_id.starts_with("run-"));
    let (events, result) = collect(stream).await;
    let violations = adaptortest::check_result(&events, &result);
    assert!(violations.is_empty(), "{violations:?}");
    let result = result.expect("success");
    assert_eq!(result.run_id, run_id);
    assert_lifecycle(&events);
    let text = delta_text(&events);
    assert_eq!(text, result.text);
    let kinds: Vec<&str> = events.iter().map(Event::kind).collect();
    for k in [
        "thinking",
        "tool_call",
        "tool_result",
        "item",
        "usage",
        "session",
        "process_info",
    ] {
        assert!(kinds.contains(&k), "missing {k} in {kinds:?}");
    }
    let items: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Item(i) => Some(i.item.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        items,
        result.transcript(),
        "item events mirror the transcript"
    );
    match events.last() {
        Some(Event::RunFinished(f)) => {
            assert!(!f.failed);
            assert_eq!(f.usage, result.usage);
        }
        other => panic!("last event {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_failure_is_a_run_error_with_the_partial_result() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let (events, result) = collect(agent.stream("please [[fail]]")).await;
    assert_lifecycle(&events);
    assert!(adaptortest::check_result(&events, &result).is_empty());
    let e = run_error(result);
    assert_eq!(e.reason, FailureReason::AgentError);
    assert_eq!(e.message, "reference failure requested");
    assert_eq!(e.result.exit.code, Some(1));
    assert!(!e.result.checkpoint.as_ref().expect("checkpoint").is_valid());
    assert!(!e.result.raw().stdout.is_empty());
    match events.last() {
        Some(Event::RunFinished(f)) => {
            assert!(f.failed);
            assert_eq!(f.reason, Some(FailureReason::AgentError));
        }
        other => panic!("last event {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_mid_turn_keeps_partial_text_and_no_valid_checkpoint() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let e = run_error(agent.run("abcdef [[crash]]").await);
    assert_eq!(e.reason, FailureReason::AgentError);
    assert!(
        e.message.contains("before its result frame"),
        "{}",
        e.message
    );
    // The provider printed the first half of its reply before dying.
    let reply = "Reference reply: abcdef";
    assert!(
        !e.result.text.is_empty()
            && reply.starts_with(&e.result.text)
            && e.result.text.len() < reply.len(),
        "{}",
        e.result.text
    );
    assert!(!e.result.checkpoint.as_ref().expect("checkpoint").is_valid());
}

async fn wait_for_pids(stream: &mut adaptor::Stream, events: &mut Vec<Event>) -> (u32, u32) {
    while let Some(ev) = stream.next().await {
        events.push(ev);
        if let Some(p) = pids(events) {
            return p;
        }
    }
    panic!("the provider never reported its pids: {events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_provider_and_its_sigterm_ignoring_grandchild() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let mut stream = agent.stream("[[grandchild]] [[ignore-term]] [[hang]] wait");
    let mut events = Vec::new();
    let (provider, grandchild) = wait_for_pids(&mut stream, &mut events).await;
    assert!(pid_alive(provider) && pid_alive(grandchild));
    stream.cancel();
    stream.cancel(); // idempotent
    while let Some(ev) = stream.next().await {
        events.push(ev);
    }
    let e = run_error(stream.result().await);
    assert_eq!(e.reason, FailureReason::Cancelled);
    assert!(e.result.exit.cancelled);
    assert!(!pid_alive(provider), "provider {provider} survived");
    assert!(!pid_alive(grandchild), "grandchild {grandchild} survived");
    assert!(!group_alive(provider), "process group {provider} survived");
    assert_lifecycle(&events);
    let signals: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::ProcessInfo(p) if p.process == ProcessInfoKind::Signal => Some(p.text.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        signals.iter().any(|s| s.starts_with("SIGTERM")),
        "{signals:?}"
    );
    assert!(
        signals.iter().any(|s| s.starts_with("SIGKILL")),
        "{signals:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_stops_the_provider_and_grandchild() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .timeout(Duration::from_millis(1500))
        .build();
    let mut stream = agent.stream("[[grandchild]] [[hang]] slow");
    let mut events = Vec::new();
    let (provider, grandchild) = wait_for_pids(&mut stream, &mut events).await;
    let e = run_error(stream.result().await);
    assert_eq!(e.reason, FailureReason::Timeout);
    assert!(e.result.exit.timed_out);
    assert!(!pid_alive(provider), "provider survived");
    assert!(!pid_alive(grandchild), "grandchild survived");
    assert!(!group_alive(provider));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_agent_cancels_its_runs() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let mut stream = agent.stream("[[grandchild]] [[hang]] bye");
    let mut events = Vec::new();
    let (provider, grandchild) = wait_for_pids(&mut stream, &mut events).await;
    drop(agent);
    let e = run_error(stream.result().await);
    assert_eq!(e.reason, FailureReason::Cancelled);
    assert!(!pid_alive(provider) && !pid_alive(grandchild));
    assert!(!group_alive(provider), "process group {provider} survived");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_cancels_runs_and_refuses_new_ones() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let mut stream = agent.stream("[[grandchild]] [[hang]] closing");
    let mut events = Vec::new();
    let (provider, grandchild) = wait_for_pids(&mut stream, &mut events).await;
    agent.close().await;
    assert!(
        !pid_alive(provider) && !pid_alive(grandchild) && !group_alive(provider),
        "close waits for the processes"
    );
    let e = run_error(stream.result().await);
    assert_eq!(e.reason, FailureReason::Cancelled);
    assert!(matches!(agent.run("again").await, Err(Error::AgentClosed)));
    agent.close().await; // idempotent
}

/// The first run of a loaded and configured driver is served by the instance its load made
/// (`describe`) and its config validated (`with_config`): one instance, not three. The run
/// does not validate the same config again. Every later run, a clone's first run, and a run
/// with other guest limits get a fresh instance and validate on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_run_takes_the_instance_its_driver_was_loaded_and_configured_on() {
    let (state, ws) = (tmp(), tmp());
    async fn calls(agent: &adaptor::Agent, prompt: &str) -> String {
        let (events, result) = collect(agent.stream(format!("[[instance-calls]] {prompt}"))).await;
        result.expect("the run succeeds");
        notice(&events, "testbed.instance-calls")
            .expect("the testbed reports its instance's calls")
            .message
            .clone()
    }
    let driver = testbed(state.path());
    let agent = agent_builder(driver.clone(), ws.path()).build();
    assert_eq!(calls(&agent, "first").await, "describe=1 validate=1");
    assert_eq!(calls(&agent, "second").await, "describe=0 validate=1");
    // A clone shares the spare, which the first run took.
    let clone = agent_builder(driver, ws.path()).build();
    assert_eq!(calls(&clone, "clone").await, "describe=0 validate=1");

    // Other limits than the spare was made with: a fresh instance.
    let limits = adaptor::GuestLimits {
        call_fuel: adaptor::GuestLimits::default().call_fuel / 2,
        ..adaptor::GuestLimits::default()
    };
    let agent = agent_builder(testbed(state.path()), ws.path())
        .guest_limits(limits)
        .build();
    assert_eq!(calls(&agent, "limits").await, "describe=0 validate=1");

    // Configured twice: the second config is validated on a fresh instance (a spare
    // validates one config), which the run then takes without validating again.
    let twice = with_reference_provider(testbed(state.path()), state.path());
    let agent = agent_builder(twice, ws.path()).build();
    assert_eq!(calls(&agent, "twice").await, "describe=0 validate=1");
    agent.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_names_the_driver_and_the_next_run_works() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(testbed(state.path()), ws.path()).build();
    let (events, result) = collect(agent.stream("[[driver-trap-start]]")).await;
    match result {
        Err(Error::DriverTrap {
            driver,
            call,
            message,
        }) => {
            assert_eq!(driver, "testbed");
            assert_eq!(call, "session.start");
            assert!(message.contains("trap requested in start"), "{message}");
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    assert!(
        events.is_empty(),
        "nothing started, so no events: {events:?}"
    );
    let ok = agent.run("after the trap").await.expect("next run works");
    assert_eq!(ok.text, "Reference reply: after the trap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_mid_run_stops_the_provider_and_ends_the_stream() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(testbed(state.path()), ws.path()).build();
    let (events, result) =
        collect(agent.stream("[[driver-trap-stdout]] [[grandchild]] [[hang]]")).await;
    assert!(
        matches!(&result, Err(Error::DriverTrap { driver, call, .. }) if driver == "testbed" && *call == "session.on-stdout"),
        "{result:?}"
    );
    assert_lifecycle(&events);
    let pid = events
        .iter()
        .find_map(|e| match e {
            Event::ProcessInfo(p) if p.process == ProcessInfoKind::Spawn => p.pid,
            _ => None,
        })
        .expect("spawn event");
    assert!(!pid_alive(pid) && !group_alive(pid));
    agent.run("still fine").await.expect("next run works");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launches_outside_the_grant_are_refused_before_anything_runs() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(testbed(state.path()), ws.path()).build();
    let (events, result) = collect(agent.stream("[[launch-sh]]")).await;
    assert!(events.is_empty());
    match result {
        Err(Error::LaunchRefused {
            driver,
            refusal: LaunchRefusal::Program { requested, granted },
        }) => {
            assert_eq!(driver, "testbed");
            assert_eq!(requested, "sh");
            assert_eq!(granted, provider_path().display().to_string());
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        agent.run("[[launch-cwd-escape]]").await,
        Err(Error::LaunchRefused {
            refusal: LaunchRefusal::Cwd { .. },
            ..
        })
    ));
    assert!(matches!(
        agent.run("[[bad-private-file]]").await,
        Err(Error::LaunchRefused {
            refusal: LaunchRefusal::FileName(_),
            ..
        })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_streams_hold_every_byte_even_ignored_ones() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .env("REFERENCE_PROVIDER_SESSION_ID", FIXED_SESSION)
        .build();
    let prompt = "[[noise]] [[stderr only-on-stderr]] bytes";
    let result = agent.run(prompt).await.expect("run");
    let direct_state = tmp();
    let direct = std::process::Command::new(provider_path())
        .args(["--state-dir", &direct_state.path().display().to_string()])
        .env("REFERENCE_PROVIDER_SESSION_ID", FIXED_SESSION)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(prompt.as_bytes())?;
            child.wait_with_output()
        })
        .expect("run provider directly");
    assert_eq!(result.raw().stdout, direct.stdout);
    assert_eq!(result.raw().stderr, direct.stderr);
    assert!(String::from_utf8_lossy(&result.raw().stdout).contains("plain text noise"));
    assert!(
        !result.text.contains("noise"),
        "non-protocol output never becomes text"
    );
}

/// Run `[[spam n]]` with a slow consumer. `per_event` pauses after every event (a
/// consumer that never catches up); otherwise the consumer reads nothing for a while, then
/// drains.
async fn spam(agent: &Agent, n: usize, per_event: bool) -> (Vec<Event>, RunResult) {
    let mut stream = agent.stream(format!("[[spam {n}]] x"));
    if !per_event {
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    let mut events = Vec::new();
    while let Some(ev) = stream.next().await {
        events.push(ev);
        if per_event {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    (events, stream.result().await.expect("spam run"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_consumer_drop_mode_reports_drops_and_keeps_reliable_events() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .event_buffer(16)
        .build();
    let (events, result) = spam(&agent, 3000, true).await;
    assert_lifecycle(&events);
    let dropped: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Dropped(d) => Some(d.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(dropped.len(), 1, "exactly one Dropped report");
    let d = &dropped[0];
    assert!(d.count > 0);
    assert_eq!(d.reason, adaptor::DropReason::BufferFull);
    assert_eq!(d.by_kind.values().sum::<u64>(), d.count);
    // Every sequence number is either delivered or counted as dropped.
    let last = events.last().unwrap().meta().sequence;
    assert_eq!(events.len() as u64 + d.count, last);
    assert!(d.first_sequence <= d.last_sequence && d.last_sequence < last);
    // The final events come last, in order: Dropped, then RunFinished.
    assert!(matches!(events[events.len() - 2], Event::Dropped(_)));
    // Nothing reliable was lost: every lifecycle boundary, tool event and item arrived.
    let text_starts = events
        .iter()
        .filter(|e| matches!(e, Event::TextDelta(t) if t.phase == Phase::Start))
        .count();
    let text_ends = events
        .iter()
        .filter(|e| matches!(e, Event::TextDelta(t) if t.phase == Phase::End))
        .count();
    assert_eq!((text_starts, text_ends), (1, 1));
    assert!(events.iter().any(|e| matches!(e, Event::ToolResult(_))));
    let items = events
        .iter()
        .filter(|e| matches!(e, Event::Item(_)))
        .count();
    assert_eq!(items, result.transcript().len());
    assert_eq!(result.text.len(), "Reference reply: x".len() + 2999);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_consumer_blocking_mode_drops_nothing() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .event_buffer(16)
        .blocking_events()
        .build();
    let (events, result) = spam(&agent, 3000, false).await;
    assert_lifecycle(&events);
    assert!(!events.iter().any(|e| matches!(e, Event::Dropped(_))));
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.meta().sequence, i as u64 + 1, "contiguous sequence");
    }
    let text = delta_text(&events);
    assert_eq!(text, result.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_start_errors_are_typed_and_spawn_nothing() {
    let (state, ws) = (tmp(), tmp());
    let driver = adaptor::Driver::from_file(driver_path("reference"))
        .unwrap()
        .with_config(serde_json::json!({"command": "/nonexistent/reference-provider", "state_dir": state.path()}))
        .unwrap();
    let agent = agent_builder(driver, ws.path()).build();
    let (events, result) = collect(agent.stream("hi")).await;
    assert!(events.is_empty());
    assert!(
        matches!(result, Err(Error::ProgramNotFound { ref program, .. }) if program == "/nonexistent/reference-provider"),
        "{result:?}"
    );

    let bad = adaptor::Driver::from_file(driver_path("reference"))
        .unwrap()
        .with_config(serde_json::json!({"comand": "typo"}));
    assert!(
        matches!(bad, Err(Error::InvalidConfig { ref path, .. }) if path == "/comand"),
        "{bad:?}"
    );

    let agent = agent_builder(reference(state.path()), ws.path())
        .workspace("/definitely/not/here")
        .build();
    assert!(matches!(
        agent.run("x").await,
        Err(Error::InvalidWorkspace { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_call_options_win_without_mutating_defaults() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .model("agent-default")
        .build();
    let a = agent
        .run_with("m", adaptor::RunOptions::new().model("per-call"))
        .await
        .unwrap();
    assert_eq!(a.model.as_deref(), Some("per-call"));
    let b = agent.run("m").await.unwrap();
    assert_eq!(b.model.as_deref(), Some("agent-default"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_stream_cancels_its_run() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let mut stream = agent.stream("[[grandchild]] [[hang]] dropped");
    let mut events = Vec::new();
    let (provider, grandchild) = wait_for_pids(&mut stream, &mut events).await;
    drop(stream);
    assert!(
        eventually(Duration::from_secs(5), || !pid_alive(provider)
            && !pid_alive(grandchild)
            && !group_alive(provider))
        .await,
        "processes survived a dropped stream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_resumes_the_provider_session() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let first = agent.run("first question").await.expect("first");
    let cp = first.checkpoint.clone().expect("checkpoint");
    assert!(cp.is_valid());
    let second = agent
        .run_with(
            "second question",
            adaptor::RunOptions::new().resume(cp.clone()),
        )
        .await
        .expect("resumed");
    assert_eq!(
        second.text,
        "Reference reply (turn 2, previously: first question): second question"
    );
    assert_eq!(second.session_id(), first.session_id());

    // A session from another workspace is refused by the driver before launch.
    let other_ws = tmp();
    let elsewhere = agent
        .run_with(
            "x",
            adaptor::RunOptions::new()
                .resume(cp.clone())
                .workspace(other_ws.path()),
        )
        .await;
    assert!(
        matches!(
            elsewhere,
            Err(Error::StartRefused {
                kind: adaptor::StartRefusal::ResumeRejected,
                ..
            })
        ),
        "{elsewhere:?}"
    );

    // Checkpoints of another driver's codec, or invalid ones, never reach the driver. A
    // checkpoint cannot be built by hand (its fields are private), so each comes from a run:
    // a valid one from the puppet driver (codec `puppet/v1`), an invalid one from a failed run.
    let puppet = adaptor::Driver::from_file(test_driver_path("puppet")).expect("puppet.wasm");
    let stdout = br#"["outcome","hi",null,"","p-1",true,null,null,null]"#.to_vec();
    let replayed = adaptor::replay::replay_session(
        &puppet,
        "x",
        &adaptor::RunOptions::new(),
        &[(adaptor::StreamKind::Stdout, stdout)],
        adaptor::ExitInfo {
            code: Some(0),
            ..Default::default()
        },
    )
    .await;
    let foreign = replayed.result.expect("puppet run").checkpoint.unwrap();
    assert!(foreign.is_valid() && foreign.codec() == "puppet/v1");
    let r = agent
        .run_with("x", adaptor::RunOptions::new().resume(foreign))
        .await;
    assert!(
        matches!(&r, Err(Error::InvalidCheckpoint { reason, .. }) if reason.contains("codec `puppet/v1`")),
        "{r:?}"
    );
    let failed = run_error(agent.run("please [[fail]]").await);
    let invalid = failed.result.checkpoint.clone().expect("a checkpoint");
    assert!(!invalid.is_valid());
    let r = agent
        .run_with("x", adaptor::RunOptions::new().resume(invalid))
        .await;
    assert!(
        matches!(&r, Err(Error::InvalidCheckpoint { reason, .. }) if reason.contains("not valid")),
        "{r:?}"
    );

    // The provider forgets the session: the valid checkpoint's resume is rejected, typed.
    std::fs::remove_dir_all(state.path()).unwrap();
    std::fs::create_dir(state.path()).unwrap();
    let e = run_error(
        agent
            .run_with("x", adaptor::RunOptions::new().resume(cp))
            .await,
    );
    assert_eq!(e.reason, FailureReason::ResumeRejected);
    assert!(e.message.contains("unknown session"), "{}", e.message);
}

#[test]
fn the_lifecycle_checker_catches_broken_streams() {
    // The clause checker used above must be able to fail: feed it hand-broken streams.
    let meta = |seq: u64| adaptor::EventMeta {
        run_id: "r".into(),
        thread_key: None,
        sequence: seq,
        time: std::time::SystemTime::now(),
        driver: "d".into(),
        turn: None,
        source: None,
    };
    let started = Event::RunStarted(adaptor::RunStarted {
        meta: meta(1),
        program: "p".into(),
        model: None,
    });
    let text = |seq, phase| {
        Event::TextDelta(adaptor::TextDelta {
            meta: meta(seq),
            message_id: "m".into(),
            phase,
            text: if phase == Phase::Delta {
                "x".into()
            } else {
                String::new()
            },
            parent_tool_call_id: None,
        })
    };
    let finished = |seq| {
        Event::RunFinished(adaptor::RunFinished {
            meta: meta(seq),
            usage: None,
            failed: false,
            reason: None,
            message: None,
        })
    };
    let ok = vec![
        started.clone(),
        text(2, Phase::Start),
        text(3, Phase::Delta),
        text(4, Phase::End),
        finished(5),
    ];
    assert!(adaptortest::check_events(&ok).is_empty());
    let unclosed = vec![
        started.clone(),
        text(2, Phase::Start),
        text(3, Phase::Delta),
        finished(4),
    ];
    assert_eq!(adaptortest::check_events(&unclosed)[0].clause, "EVT-11");
    let two_starts = vec![started.clone(), started.clone(), finished(3)];
    assert!(
        adaptortest::check_events(&two_starts)
            .iter()
            .any(|v| v.clause == "EVT-01")
    );
    let delta_first = vec![started.clone(), text(2, Phase::Delta), finished(3)];
    assert!(
        adaptortest::check_events(&delta_first)
            .iter()
            .any(|v| v.clause == "EVT-03")
    );
    let has = |events: &[Event], clause: &str| {
        adaptortest::check_events(events)
            .iter()
            .any(|v| v.clause == clause)
    };
    // EVT-00: sequences start at 1, increase, and name one run.
    assert!(has(
        &[
            started.clone(),
            text(2, Phase::Start),
            text(2, Phase::End),
            finished(4)
        ],
        "EVT-00"
    ));
    let late = Event::RunStarted(adaptor::RunStarted {
        meta: meta(3),
        program: "p".into(),
        model: None,
    });
    assert!(has(&[late, finished(4)], "EVT-00"));
    let other_run = Event::RunFinished(adaptor::RunFinished {
        meta: adaptor::EventMeta {
            run_id: "another".into(),
            ..meta(2)
        },
        usage: None,
        failed: false,
        reason: None,
        message: None,
    });
    assert!(has(&[started.clone(), other_run], "EVT-00"));
    // EVT-02: one RunFinished, last.
    assert!(has(
        &[started.clone(), text(2, Phase::Start), text(3, Phase::End)],
        "EVT-02"
    ));
    assert!(has(
        &[
            started.clone(),
            finished(2),
            text(3, Phase::Start),
            text(4, Phase::End)
        ],
        "EVT-02"
    ));
    // EVT-04: no empty deltas.
    let mut empty = text(3, Phase::Delta);
    if let Event::TextDelta(d) = &mut empty {
        d.text.clear();
    }
    assert!(has(
        &[
            started.clone(),
            text(2, Phase::Start),
            empty,
            text(4, Phase::End),
            finished(5)
        ],
        "EVT-04"
    ));
    // EVT-06: the thinking lifecycle.
    let thinking = |seq, phase| match text(seq, phase) {
        Event::TextDelta(d) => Event::Thinking(d),
        _ => unreachable!(),
    };
    assert!(!has(
        &[
            started.clone(),
            thinking(2, Phase::Start),
            thinking(3, Phase::End),
            finished(4)
        ],
        "EVT-06"
    ));
    assert!(has(
        &[started.clone(), thinking(2, Phase::End), finished(3)],
        "EVT-06"
    ));
    // EVT-05: a tool call starts with a name, its result follows its end.
    let tool = |seq, phase, name: &str| {
        Event::ToolCall(adaptor::ToolCall {
            meta: meta(seq),
            id: "c".into(),
            name: name.into(),
            phase,
            args: None,
            args_delta: None,
            parent_tool_call_id: None,
        })
    };
    let result = |seq, id: &str| {
        Event::ToolResult(adaptor::ToolResult {
            meta: meta(seq),
            id: id.into(),
            output: "o".into(),
            is_error: false,
            parent_tool_call_id: None,
        })
    };
    let good = [
        started.clone(),
        tool(2, Phase::Start, "echo"),
        tool(3, Phase::End, "echo"),
        result(4, "c"),
        finished(5),
    ];
    assert!(adaptortest::check_events(&good).is_empty());
    assert!(has(
        &[
            started.clone(),
            tool(2, Phase::Start, ""),
            tool(3, Phase::End, ""),
            finished(4)
        ],
        "EVT-05"
    ));
    assert!(has(
        &[started.clone(), result(2, "nobody"), finished(3)],
        "EVT-05"
    ));
    assert!(has(
        &[
            started,
            tool(2, Phase::Start, "echo"),
            result(3, "c"),
            tool(4, Phase::End, "echo"),
            finished(5)
        ],
        "EVT-05"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_policy_values_fail_before_anything_is_spawned() {
    use adaptor::{ApprovalPolicy, DecisionMode, Policy, Sandbox, Toggle};
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let cases = [
        (Policy::unrestricted(), "sandbox", "unrestricted"),
        (
            Policy {
                browser: Toggle::Allow,
                ..Policy::default()
            },
            "browser",
            "allow",
        ),
    ];
    for (policy, dim, val) in cases {
        let (events, result) =
            collect(agent.stream_with("x", adaptor::RunOptions::new().policy(policy))).await;
        assert!(events.is_empty(), "nothing may start: {events:?}");
        match result {
            Err(Error::PolicyUnsupported {
                driver,
                dimension,
                value,
            }) => {
                assert_eq!(
                    (driver.as_str(), dimension.as_str(), value.as_str()),
                    ("reference", dim, val)
                );
            }
            other => panic!("{other:?}"),
        }
    }
    let ask = Policy {
        approvals: ApprovalPolicy {
            permission: DecisionMode::Ask,
            ..ApprovalPolicy::default()
        },
        sandbox: Sandbox::Inherit,
        ..Policy::default()
    };
    let testbed = agent_builder(testbed(state.path()), ws.path()).build();
    let (events, result) =
        collect(testbed.stream_with("x", adaptor::RunOptions::new().policy(ask))).await;
    assert!(events.is_empty());
    assert!(
        matches!(&result, Err(Error::ApprovalModeUnsupported { driver, kind, mode }) if driver == "testbed" && kind == "permission" && mode == "ask"),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supported_policy_reaches_the_cli_and_is_replaced_whole() {
    use adaptor::{Policy, Toggle};
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .policy(Policy::read_only())
        .build();
    let r = agent.run("policy").await.expect("read-only is supported");
    let args = r.raw().launch.as_ref().unwrap().args.clone();
    assert!(
        args.windows(2).any(|w| w == ["--sandbox", "read-only"]),
        "{args:?}"
    );
    let init = &r.transcript()[0];
    assert_eq!(init.data.as_ref().unwrap()["sandbox"], "read-only");

    // A per-call policy replaces the agent's whole: no sandbox flag any more.
    let web = Policy {
        web_search: Toggle::Deny,
        ..Policy::default()
    };
    let r = agent
        .run_with("policy", adaptor::RunOptions::new().policy(web))
        .await
        .unwrap();
    let args = r.raw().launch.as_ref().unwrap().args.clone();
    assert!(
        args.windows(2).any(|w| w == ["--web-search", "deny"]),
        "{args:?}"
    );
    assert!(!args.contains(&"--sandbox".to_owned()), "{args:?}");
    // Inherit is portable: the default policy adds nothing.
    let r = agent
        .run_with(
            "policy",
            adaptor::RunOptions::new().policy(Policy::default()),
        )
        .await
        .unwrap();
    assert!(
        !r.raw()
            .launch
            .as_ref()
            .unwrap()
            .args
            .iter()
            .any(|a| a == "--sandbox" || a == "--web-search")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_streams_are_complete_even_when_the_driver_ignores_everything() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(testbed(state.path()), ws.path())
        .env("REFERENCE_PROVIDER_SESSION_ID", FIXED_SESSION)
        .build();
    let e = run_error(
        agent
            .run("[[driver-ignore-output]] [[noise]] [[stderr ignored]] quiet")
            .await,
    );
    // The driver saw nothing, so it reports no result frame: a failure, with every byte kept.
    assert_eq!(e.reason, FailureReason::AgentError);
    let raw = e.result.raw();
    let stdout = String::from_utf8_lossy(&raw.stdout);
    assert!(
        stdout.contains("plain text noise") && stdout.contains("\"type\":\"result\""),
        "{stdout}"
    );
    assert_eq!(
        String::from_utf8_lossy(&raw.stderr),
        "reference-provider: warming up\nignored\n"
    );
    let chunked: usize = raw
        .chunks
        .iter()
        .filter(|c| c.stream == adaptor::StreamKind::Stdout)
        .map(|c| c.len)
        .sum();
    assert_eq!(
        chunked,
        raw.stdout.len(),
        "the chunk timeline covers every byte"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_is_still_bounded_by_the_grace_period() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(testbed(state.path()), ws.path()).build();
    let mut stream = agent.stream("[[hang]] [[driver-graceful-cancel]] hi");
    let mut events = Vec::new();
    while let Some(ev) = stream.next().await {
        if matches!(ev, Event::Session(_)) {
            stream.cancel();
        }
        events.push(ev);
    }
    let e = run_error(stream.result().await);
    assert_eq!(e.reason, FailureReason::Cancelled);
    assert!(
        events
            .iter()
            .any(|ev| matches!(ev, Event::Notice(n) if n.notice == "testbed.graceful-cancel"))
    );
    assert!(
        events.iter().any(|ev| matches!(ev, Event::ProcessInfo(p)
            if p.process == ProcessInfoKind::Signal && p.text.contains("did not stop within the grace period"))),
        "{events:?}"
    );
    assert!(e.result.exit.signal.is_some(), "{:?}", e.result.exit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_writing_past_the_output_limit_is_stopped() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .max_output_bytes(64 * 1024)
        .build();
    let (events, result) = collect(agent.stream("[[spam 50000]] flood")).await;
    let e = run_error(result);
    assert_eq!(e.reason, FailureReason::OutputLimit);
    assert!(e.message.contains("65536"), "{}", e.message);
    let kept = e.result.raw().stdout.len() + e.result.raw().stderr.len();
    assert!(kept <= 64 * 1024, "kept {kept} bytes");
    assert!(
        events
            .iter()
            .any(|ev| matches!(ev, Event::Notice(n) if n.notice == "output.limit"))
    );
    assert!(!e.result.checkpoint.as_ref().is_some_and(|c| c.is_valid()));
    assert_lifecycle(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_writing_an_overlong_line_is_stopped() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .max_line_bytes(200)
        .build();
    let long = "y".repeat(300);
    let e = run_error(agent.run(format!("{long} long line")).await);
    assert_eq!(e.reason, FailureReason::OutputLimit);
    assert!(e.message.contains("max_line_bytes"), "{}", e.message);
    assert!(!e.result.checkpoint.as_ref().is_some_and(|c| c.is_valid()));
}

/// A consumer that keeps its stream but stops reading, then cancels: `cancel` + `close`
/// return within the grace period, in blocking mode and in the default drop mode (where
/// non-droppable events fill the buffer). The stream, read later, still ends with the drop
/// report and `RunFinished`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_unblocks_a_send_to_a_consumer_that_stopped_reading() {
    for blocking in [true, false] {
        let (state, ws) = (tmp(), tmp());
        let mut builder = agent_builder(reference(state.path()), ws.path()).event_buffer(2);
        if blocking {
            builder = builder.blocking_events();
        }
        let agent = builder.build();
        // The provider writes everything, then waits (`stall`): only the cancel ends the run,
        // however late this task wakes from its sleep on a loaded machine.
        let mut stream = agent.stream("[[spam 20000]] [[stall]] a chatty answer");
        // Read the first event, then stop reading while the provider keeps writing.
        assert!(matches!(stream.next().await, Some(Event::RunStarted(_))));
        tokio::time::sleep(Duration::from_millis(400)).await;
        stream.cancel();
        let closed = tokio::time::timeout(Duration::from_secs(5), agent.close()).await;
        assert!(
            closed.is_ok(),
            "blocking={blocking}: close did not return after cancel"
        );
        // The stream is still readable: whatever was delivered, then the drop report, then
        // `RunFinished` last.
        let mut events = Vec::new();
        while let Some(ev) = stream.next().await {
            events.push(ev);
        }
        assert!(
            matches!(events.last(), Some(Event::RunFinished(f)) if f.failed),
            "blocking={blocking}: {:?}",
            events.last()
        );
        let dropped = events.iter().find_map(|e| match e {
            Event::Dropped(d) => Some((d.count, d.reason)),
            _ => None,
        });
        assert!(
            dropped.is_some_and(|(n, _)| n > 0),
            "blocking={blocking}: undeliverable events are reported, not lost silently"
        );
        let reason = dropped.map(|(_, r)| r);
        if blocking {
            assert_eq!(reason, Some(adaptor::DropReason::Cancelled));
        } else {
            assert!(
                matches!(
                    reason,
                    Some(
                        adaptor::DropReason::Cancelled
                            | adaptor::DropReason::BufferFullAndCancelled
                    )
                ),
                "{reason:?}"
            );
        }
        let result = stream.result().await;
        assert!(
            matches!(&result, Err(adaptor::Error::Run(e)) if e.reason == adaptor::FailureReason::Cancelled),
            "{result:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instructions_reach_a_driver_that_declares_them_and_refuse_one_that_does_not() {
    let (state, ws) = (tmp(), tmp());
    // The puppet driver declares no `instructions`: refused before anything starts.
    let puppet = adaptor::Driver::from_file(test_driver_path("puppet")).expect("puppet.wasm");
    let agent = agent_builder(puppet, ws.path()).build();
    let (events, result) =
        collect(agent.stream_with("hi", adaptor::RunOptions::new().instructions("be terse"))).await;
    assert!(
        matches!(&result, Err(Error::InstructionsUnsupported { driver }) if driver == "puppet"),
        "{result:?}"
    );
    assert!(events.is_empty(), "{events:?}");
    // The reference driver passes them to its CLI, which echoes them in its session line.
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let r = agent
        .run_with("hi", adaptor::RunOptions::new().instructions("be terse"))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&r.raw().stdout);
    assert!(
        stdout
            .lines()
            .next()
            .is_some_and(|l| l.contains(r#""instructions":"be terse""#)),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_driver_event_names_the_provider_output_that_produced_it() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    let (events, r) = collect(agent.stream("where is it")).await;
    let r = r.unwrap();
    let raw = r.raw();
    let mut from_output = 0;
    for e in &events {
        let meta = e.meta();
        assert_eq!(meta.turn, None, "a plain run has no thread turn");
        match (e, &meta.source) {
            (Event::RunStarted(_) | Event::RunFinished(_), source) => assert_eq!(
                source, &None,
                "host lifecycle events have no provider source"
            ),
            (Event::ProcessInfo(p), source)
                if !matches!(p.process, ProcessInfoKind::Stdout | ProcessInfoKind::Stderr) =>
            {
                assert_eq!(source, &None, "the host's own process facts")
            }
            (
                _,
                Some(EventSource::Output {
                    stream,
                    chunk,
                    offset,
                    len,
                }),
            ) => {
                let record = &raw.chunks[*chunk];
                assert_eq!(
                    (record.stream, record.offset, record.len),
                    (*stream, *offset, *len),
                    "{}: the source is the chunk record",
                    e.kind()
                );
                if let Event::ProcessInfo(p) = e {
                    assert_eq!(p.text.as_bytes(), raw.chunk_bytes(record));
                }
                from_output += 1;
            }
            (_, Some(EventSource::Exit)) => {}
            (e, source) => panic!("{} has source {source:?}", e.kind()),
        }
    }
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::ToolCall(_)) && e.meta().source.is_some()),
        "the tool call is attributed"
    );
    assert!(from_output >= 3, "{from_output}");
    // The source is part of the JSON an event serialises to.
    let text = events
        .iter()
        .find(|e| matches!(e, Event::TextDelta(_)))
        .expect("a text delta");
    let json = serde_json::to_value(text).unwrap();
    assert_eq!(json["source"]["kind"], "output", "{json}");
    assert_eq!(json["source"]["stream"], "stdout", "{json}");
}
