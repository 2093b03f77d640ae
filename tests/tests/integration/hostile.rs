//! The hostile-driver suite: one attack per run from `tests/drivers/hostile`, each stopped
//! within its limit with the right typed error, the host healthy, and the next run of a good
//! driver session on the same Agent successful.

use std::time::Duration;

use adaptor::{Agent, Error, Event, GuestLimits, LaunchRefusal, Limit};
use adaptor_integration_tests::*;

/// A run timeout backs the limits up: an attack that a limit failed to stop ends as
/// `Timeout`, which fails the assertions below, instead of hanging the suite.
fn hostile_agent(state: &std::path::Path, ws: &std::path::Path, limits: GuestLimits) -> Agent {
    agent_builder(configured(&test_driver_path("hostile"), state), ws)
        .guest_limits(limits)
        .timeout(Duration::from_secs(60))
        .build()
}

/// Guest limits under which a call may compute for minutes (this much fuel ran out after
/// 390 s here): only an interruption ends a long call early.
fn minutes_of_cpu() -> GuestLimits {
    GuestLimits {
        call_fuel: 10_000_000_000_000,
        run_fuel: 10_000_000_000_000,
        call_wall: Duration::from_secs(3600),
        ..GuestLimits::default()
    }
}

async fn good_run_after(agent: &Agent, attack: &str) {
    let r = agent
        .run("a good prompt")
        .await
        .unwrap_or_else(|e| panic!("after {attack}, a good run must succeed: {e}"));
    assert_eq!(r.text, "Reference reply: a good prompt", "after {attack}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_attack_is_stopped_by_its_limit_and_the_agent_stays_healthy() {
    let (state, ws) = (tmp(), tmp());
    let limits = GuestLimits::default();
    let agent = hostile_agent(state.path(), ws.path(), limits);
    let cases: [(&str, &str, Limit); 7] = [
        (
            "endless-loop",
            "session.on-stdout",
            Limit::CpuPerCall {
                fuel: limits.call_fuel,
            },
        ),
        (
            "never-finish",
            "session.finish",
            Limit::CpuPerCall {
                fuel: limits.call_fuel,
            },
        ),
        (
            "memory-bomb",
            "session.on-stdout",
            Limit::Memory { bytes: 64 << 20 },
        ),
        ("stack-overflow", "session.on-stdout", Limit::Stack),
        (
            "event-flood",
            "session.on-stdout",
            Limit::ActionsPerCall { max: 10_000 },
        ),
        (
            "log-flood",
            "session.on-stdout",
            Limit::LogsPerCall { max: 1_000 },
        ),
        (
            "huge-result",
            "session.finish",
            Limit::HostcallBytes { bytes: 8 << 20 },
        ),
    ];
    for (attack, expected_call, expected) in cases {
        let result = agent.run(format!("[[{attack}]] hi")).await;
        match result {
            Err(Error::LimitExceeded {
                driver,
                call,
                limit,
            }) => {
                assert_eq!(driver, "hostile", "{attack}");
                assert_eq!(call, expected_call, "{attack}");
                assert_eq!(limit, expected, "{attack}");
            }
            other => panic!("{attack}: expected LimitExceeded, got {other:?}"),
        }
        good_run_after(&agent, attack).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_run_cpu_budget_stops_a_driver_that_burns_a_little_on_every_call() {
    let (state, ws) = (tmp(), tmp());
    // The default per-call budget, which one chunk's work (about 2·10⁸ fuel) stays under, so
    // only the per-turn one (10⁹ fuel, a few chunks' worth) can stop it.
    let limits = GuestLimits {
        run_fuel: 1_000_000_000,
        ..GuestLimits::default()
    };
    // With a delay between lines, each of the many `[[spam]]` lines arrives in its own chunk,
    // so the driver burns a little guest time on each of many calls.
    let driver = adaptor::Driver::from_file(test_driver_path("hostile"))
        .unwrap()
        .with_config(serde_json::json!({
            "command": provider_path().display().to_string(),
            "state_dir": state.path().display().to_string(),
            "delay_ms": 20,
        }))
        .unwrap();
    let agent = agent_builder(driver, ws.path())
        .guest_limits(limits)
        .build();
    match agent.run("[[burn-cpu]] [[spam 20]] hi").await {
        Err(Error::LimitExceeded { limit, .. }) => {
            assert_eq!(
                limit,
                Limit::CpuPerRun {
                    fuel: 1_000_000_000
                }
            )
        }
        other => panic!("expected CpuPerRun, got {other:?}"),
    }
    good_run_after(&agent, "burn-cpu").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_and_forbidden_launches_are_typed_and_spawn_nothing() {
    let (state, ws) = (tmp(), tmp());
    let agent = hostile_agent(state.path(), ws.path(), GuestLimits::default());
    match agent.run("[[panic]] hi").await {
        Err(Error::DriverTrap {
            driver,
            call,
            message,
        }) => {
            assert_eq!((driver.as_str(), call), ("hostile", "session.on-stdout"));
            assert!(message.contains("hostile: panic on stdout"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    good_run_after(&agent, "panic").await;
    for attack in ["spawn-ungranted", "spawn-sh", "cwd-parent", "cwd-absolute"] {
        let (events, result) = collect(agent.stream(format!("[[{attack}]] hi"))).await;
        assert!(events.is_empty(), "{attack}: nothing starts");
        match result {
            Err(Error::LaunchRefused { driver, refusal }) => {
                assert_eq!(driver, "hostile");
                match attack {
                    "spawn-ungranted" | "spawn-sh" => assert!(
                        matches!(refusal, LaunchRefusal::Program { .. }),
                        "{attack}: {refusal:?}"
                    ),
                    _ => assert!(
                        matches!(refusal, LaunchRefusal::Cwd { .. }),
                        "{attack}: {refusal:?}"
                    ),
                }
            }
            other => panic!("{attack}: {other:?}"),
        }
        good_run_after(&agent, attack).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_grants_no_files_environment_arguments_or_network() {
    let (state, ws) = (tmp(), tmp());
    let agent = hostile_agent(state.path(), ws.path(), GuestLimits::default());
    let (events, result) = collect(agent.stream("[[probe-world]] hi")).await;
    result.expect("the probing run itself succeeds");
    let probe = events
        .iter()
        .find_map(|e| match e {
            Event::Notice(n) if n.notice == "hostile.probe" => n.data.clone(),
            _ => None,
        })
        .expect("probe notice");
    let probe: serde_json::Value = match probe {
        serde_json::Value::String(s) => serde_json::from_str(&s).unwrap(),
        other => other,
    };
    assert!(probe["file"]["Err"].is_string(), "no file access: {probe}");
    assert_eq!(probe["env"], 0, "no environment: {probe}");
    assert_eq!(probe["args"], 0, "no arguments: {probe}");
    assert!(probe["socket"]["Err"].is_string(), "no network: {probe}");
    assert!(probe["dir"]["Err"].is_string(), "no directory: {probe}");
    // Clocks are stopped: the wall clock reads the Unix epoch and no time passes.
    assert_eq!(probe["wall_clock_ns"]["Ok"], 0, "wall clock fixed: {probe}");
    assert_eq!(
        probe["monotonic_elapsed_ns"], 0,
        "monotonic clock fixed: {probe}"
    );
    // A second instance sees the same clocks and the same random values (the seed is fixed).
    let (events, result) = collect(agent.stream("[[probe-world]] again")).await;
    result.expect("the second probing run succeeds");
    let again = events
        .iter()
        .find_map(|e| match e {
            Event::Notice(n) if n.notice == "hostile.probe" => n.data.clone(),
            _ => None,
        })
        .expect("probe notice");
    let again: serde_json::Value = match again {
        serde_json::Value::String(s) => serde_json::from_str(&s).unwrap(),
        other => other,
    };
    assert_eq!(probe, again, "two instances see the same world");
    assert!(probe["hash_seeded_by_random"].is_u64(), "{probe}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_waits_on_a_clock_blocks_no_call() {
    // The hostile driver sleeps an hour (a WASI monotonic-clock wait) in `describe`,
    // `validate-config`, `config-fingerprint` and its probe calls — so loading it at all is
    // the first check — and with `[[block]]` in `start`, on every stdout chunk, in a timer,
    // in `on-exit` and in `finish`. Every wait returns at once: the run is
    // the reference run. (The run timeout only stops a hang from stalling the suite.)
    let (state, ws) = (tmp(), tmp());
    let state_path = state.path().to_owned();
    let load =
        tokio::task::spawn_blocking(move || configured(&test_driver_path("hostile"), &state_path));
    let driver = tokio::time::timeout(Duration::from_secs(60), load)
        .await
        .expect("loading a driver whose describe waits must not hang")
        .unwrap();
    let agent = agent_builder(driver, ws.path())
        .timeout(Duration::from_secs(120))
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let r = agent
        .run("[[block]] wake up")
        .await
        .expect("the waits return at once");
    assert_eq!(r.text, "Reference reply: [[block]] wake up");
    // A thread run asks for the config fingerprint; Inspect for probes and their report.
    let r = agent
        .thread("waits")
        .run("[[block]] wake up")
        .await
        .expect("the waits return at once");
    assert!(r.thread.is_some());
    // An approval's decision reaches `on-decision`, which waits too.
    let asking = adaptor::RunOptions::new().policy(adaptor::Policy {
        approvals: adaptor::ApprovalPolicy {
            permission: adaptor::DecisionMode::Ask,
            ..adaptor::ApprovalPolicy::default()
        },
        ..adaptor::Policy::default()
    });
    let mut stream = agent.stream_with("[[block]] [[ask-permission]] decide", asking);
    while let Some(ev) = futures::StreamExt::next(&mut stream).await {
        if let Event::ApprovalRequest(req) = ev {
            req.approve().unwrap();
        }
    }
    stream
        .result()
        .await
        .expect("the decision's wait returns at once");
    let inspection = agent.inspect().await.expect("inspect does not wait either");
    assert!(!inspection.environment.checks.is_empty());

    // The CLI lists it too (a wait in `describe` once made `adaptor drivers` panic).
    let dir = tmp();
    std::fs::copy(test_driver_path("hostile"), dir.path().join("hostile.wasm")).unwrap();
    let out = adaptor_cli()
        .env("ADAPTOR_DRIVER_PATH", dir.path())
        .args(["drivers", "--json"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("\"name\":\"hostile\""), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lies_are_not_forwarded_and_fail_the_run_naming_the_rule() {
    let (state, ws) = (tmp(), tmp());
    let agent = hostile_agent(state.path(), ws.path(), GuestLimits::default());
    for (lie, rule) in [
        ("lie-double-start", "text-lifecycle"),
        ("lie-orphan-result", "tool-result"),
        ("lie-huge-usage", "usage"),
        ("lie-nan-cost", "usage"),
        ("lie-after-exit", "after-end-turn"),
    ] {
        let (events, result) = collect(agent.stream(format!("[[{lie}]] hello"))).await;
        let e = run_error(result);
        assert_eq!(e.reason, adaptor::FailureReason::ContractViolation, "{lie}");
        assert!(
            e.message.contains(&format!("rule `{rule}`")),
            "{lie}: {}",
            e.message
        );
        let notice = events
            .iter()
            .find_map(|ev| match ev {
                Event::Notice(n) if n.notice == adaptor::CONTRACT_VIOLATION => Some(n),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{lie}: a violation notice"));
        assert_eq!(notice.data.as_ref().unwrap()["rule"], rule, "{lie}");
        // The lie itself never reached the caller.
        let forwarded_lie = events.iter().any(|ev| match ev {
            Event::ToolResult(r) => r.id == "ghost",
            Event::ToolCall(c) => c.id == "late",
            Event::Usage(u) => {
                u.usage.input_tokens == Some(u64::MAX) || u.usage.cost_usd.is_some_and(f64::is_nan)
            }
            Event::TextDelta(t) => {
                t.message_id == "lie" && t.meta.sequence > 0 && {
                    // The first start is fine; the second must not be forwarded.
                    events
                        .iter()
                        .filter(|x| matches!(x, Event::TextDelta(d) if d.message_id == "lie"))
                        .count()
                        > 1
                }
            }
            _ => false,
        });
        assert!(!forwarded_lie, "{lie}: forwarded");
        assert!(
            !e.result.checkpoint.as_ref().is_some_and(|c| c.is_valid()),
            "{lie}"
        );
        good_run_after(&agent, lie).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_resources_held_across_calls_are_bounded_and_named() {
    let (state, ws) = (tmp(), tmp());
    let limits = GuestLimits {
        timer_fires_per_turn: 1_000,
        events_per_turn: 500,
        ..GuestLimits::default()
    };
    // No run timeout backs these up: each limit alone must end its attack.
    let agent = agent_builder(
        configured(&test_driver_path("hostile"), state.path()),
        ws.path(),
    )
    .guest_limits(limits)
    .build();
    let d = GuestLimits::default();
    for (attack, call, limit) in [
        (
            "timer-herd",
            "session.on-timer",
            Limit::TimerFiresPerTurn { max: 1_000 },
        ),
        (
            "timer-flood",
            "set-timer",
            Limit::TimersLive { max: d.timers_live },
        ),
        (
            "stdin-flood",
            "write-stdin",
            Limit::StdinPerTurn {
                bytes: d.stdin_bytes_per_turn,
            },
        ),
        (
            "approval-flood",
            "request-approval",
            Limit::ApprovalsPending {
                max: d.approvals_pending,
            },
        ),
        ("notice-flood", "emit", Limit::EventsPerTurn { max: 500 }),
        (
            "approval-chain",
            "request-approval",
            Limit::ApprovalsPerTurn {
                max: d.approvals_per_turn,
            },
        ),
        (
            "many-files",
            "session.start",
            Limit::PrivateFiles {
                max: d.private_files,
            },
        ),
    ] {
        // The provider hangs after its first line: only the limit can end the herd.
        let hang = if attack == "timer-herd" || attack == "stdin-flood" {
            " [[hang]]"
        } else {
            ""
        };
        // Decisions come back at once (auto-approve), so the chain grows as fast as it can.
        let options = if attack == "approval-chain" {
            adaptor::RunOptions::new().policy(adaptor::Policy {
                approvals: adaptor::ApprovalPolicy {
                    permission: adaptor::DecisionMode::AutoApprove,
                    ..adaptor::ApprovalPolicy::default()
                },
                ..adaptor::Policy::default()
            })
        } else {
            adaptor::RunOptions::new()
        };
        let (events, result) =
            collect(agent.stream_with(format!("[[{attack}]]{hang} hello"), options)).await;
        match result.map(|r| r.text) {
            Err(Error::LimitExceeded {
                driver,
                call: c,
                limit: l,
            }) => {
                assert_eq!(
                    (driver.as_str(), c, &l),
                    ("hostile", call, &limit),
                    "{attack}"
                );
                assert!(l.to_string().starts_with("limit of"), "{attack}: {l}");
            }
            other => panic!("{attack}: expected {limit}, got {other:?}"),
        }
        if attack == "many-files" {
            assert!(events.is_empty(), "refused before anything started");
        } else {
            assert!(
                matches!(events.last(), Some(Event::RunFinished(f)) if f.failed),
                "{attack}"
            );
        }
        good_run_after(&agent, attack).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_interrupts_a_driver_call_that_runs_long() {
    // A driver spins on the first stdout chunk under a per-call CPU budget of minutes (this
    // much fuel ran out after 390 s here): only the interruption ends the call promptly once
    // the run is cancelled.
    let (state, ws) = (tmp(), tmp());
    let limits = minutes_of_cpu();
    let agent = hostile_agent(state.path(), ws.path(), limits);
    let (events, e) = cancelled_soon(&agent, "[[endless-loop]] spin").await;
    assert_eq!(e.reason, adaptor::FailureReason::Cancelled, "{}", e.message);
    assert!(e.result.exit.cancelled);
    assert!(
        events
            .iter()
            .any(|ev| matches!(ev, Event::Notice(n) if n.notice == "driver.interrupted")),
        "the lost outcome is announced"
    );
    good_run_after(&agent, "an interrupted call").await;

    // The run timeout interrupts it the same way.
    let (events, result) = tokio::time::timeout(
        Duration::from_secs(60),
        collect(
            timing_out_in_a_second(state.path(), ws.path(), limits).stream("[[endless-loop]] spin"),
        ),
    )
    .await
    .expect("the run ends at its timeout");
    let e = run_error(result);
    assert_eq!(e.reason, adaptor::FailureReason::Timeout, "{}", e.message);
    assert!(e.result.exit.timed_out);
    assert!(
        events
            .iter()
            .any(|ev| matches!(ev, Event::Notice(n) if n.notice == "driver.interrupted"))
    );
}

/// `prompt` on `runner`, cancelled half a second in: its events and its error. The run must
/// end within a minute although its driver call would compute for minutes.
async fn cancelled_soon(
    runner: &impl adaptor::Runner,
    prompt: &str,
) -> (Vec<Event>, adaptor::RunError) {
    let mut stream = runner.stream(prompt.to_owned(), adaptor::RunOptions::default());
    let canceller = stream.canceller();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        canceller.cancel();
    });
    let (events, result) = tokio::time::timeout(Duration::from_secs(60), async {
        let mut events = Vec::new();
        while let Some(e) = futures::StreamExt::next(&mut stream).await {
            events.push(e);
        }
        (events, stream.result().await)
    })
    .await
    .unwrap_or_else(|_| panic!("`{prompt}`: the cancelled run ends, its long call interrupted"));
    (events, *run_error(result))
}

/// The hostile driver with a run timeout of one second.
fn timing_out_in_a_second(
    state: &std::path::Path,
    ws: &std::path::Path,
    limits: GuestLimits,
) -> Agent {
    agent_builder(configured(&test_driver_path("hostile"), state), ws)
        .guest_limits(limits)
        .timeout(Duration::from_secs(1))
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_or_timeout_interrupts_start_and_next_turn_before_the_provider_runs() {
    // `start` (before the launch) and `next-turn` (before a resident process is handed the
    // turn) spin under a CPU budget of minutes: the run's own cancel and timeout must
    // interrupt them, and the run ends as cancelled or timed out, not as a driver fault.
    let (state, ws) = (tmp(), tmp());
    let limits = minutes_of_cpu();
    let agent = hostile_agent(state.path(), ws.path(), limits);
    let (events, e) = cancelled_soon(&agent, "[[endless-start]] spin").await;
    assert!(
        events.is_empty(),
        "cut before the launch, the run emits nothing: {events:?}"
    );
    assert_eq!(e.reason, adaptor::FailureReason::Cancelled, "{}", e.message);
    assert!(e.result.exit.cancelled, "{:?}", e.result.exit);
    assert!(
        e.message.contains("before its provider started"),
        "{}",
        e.message
    );
    good_run_after(&agent, "an interrupted start").await;

    let timed = timing_out_in_a_second(state.path(), ws.path(), limits);
    let e = tokio::time::timeout(Duration::from_secs(60), timed.run("[[endless-start]] spin"))
        .await
        .expect("the run ends at its timeout");
    let e = run_error(e);
    assert_eq!(e.reason, adaptor::FailureReason::Timeout, "{}", e.message);
    assert!(e.result.exit.timed_out, "{:?}", e.result.exit);

    // A thread's resident process: the second turn's `next-turn` spins.
    let driver = with_resident_reference_provider(
        adaptor::Driver::from_file(test_driver_path("hostile")).unwrap(),
        state.path(),
    );
    let threads = agent_builder(driver, ws.path())
        .guest_limits(limits)
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let thread = threads.thread("next-turn-that-spins");
    let first = thread.run("first").await.expect("the first turn");
    assert!(
        first.exit.kept_alive,
        "the process is parked for the thread"
    );
    let (events, e) = cancelled_soon(&thread, "[[endless-next-turn]] second").await;
    assert!(
        events.is_empty(),
        "cut before the turn was handed over: {events:?}"
    );
    assert_eq!(e.reason, adaptor::FailureReason::Cancelled, "{}", e.message);
    assert!(e.message.contains("next-turn"), "{}", e.message);
    let third = thread
        .run("third")
        .await
        .expect("the thread goes on after the interrupted turn, on a new process");
    assert!(third.text.ends_with("third"), "{}", third.text);
    threads.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resident_turn_answers_to_its_own_deadline_not_an_earlier_turns() {
    // The first turn's timeout passes while its process is parked for the thread. The next
    // turn has no timeout and nobody cancels it: its long `next-turn` call must run to the end
    // on the resident process, not be interrupted by the earlier run's deadline.
    let (state, ws) = (tmp(), tmp());
    let limits = minutes_of_cpu();
    let driver = with_resident_reference_provider(
        adaptor::Driver::from_file(test_driver_path("hostile")).unwrap(),
        state.path(),
    );
    let agent = agent_builder(driver, ws.path())
        .guest_limits(limits)
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let thread = agent.thread("deadline-of-an-earlier-turn");
    let first = thread
        .run_with(
            "first",
            adaptor::RunOptions::default().timeout(Duration::from_millis(1500)),
        )
        .await
        .expect("the first turn ends well within its timeout");
    assert!(
        first.exit.kept_alive,
        "the process is parked for the thread"
    );
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let second = thread
        .run("[[slow-next-turn]] second")
        .await
        .expect("a long next-turn call of a run nobody cancelled finishes");
    assert!(second.exit.kept_alive, "it ran on the resident process");
    assert_eq!(
        second.text,
        "Reference reply (turn 2, previously: first): [[slow-next-turn]] second"
    );
    agent.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_waits_in_stderr_cancel_and_next_turn_return_at_once_too() {
    let (state, ws) = (tmp(), tmp());
    let driver = adaptor::Driver::from_file(test_driver_path("hostile"))
        .unwrap()
        .with_config(serde_json::json!({
            "command": provider_path().display().to_string(),
            "state_dir": state.path().display().to_string(),
            "transport": "stdio",
        }))
        .unwrap();
    let agent = agent_builder(driver, ws.path())
        .timeout(Duration::from_secs(120))
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    // `on-stderr` (the provider writes a stderr line) and the session constructor.
    let r = agent.run("[[block]] [[stderr noise]] one").await.unwrap();
    assert!(r.text.ends_with("one"), "{}", r.text);
    // `next-turn`: the thread's second turn goes to its kept process.
    let t = agent.thread("resident");
    t.run("[[block]] first").await.unwrap();
    let (events, second) = collect(t.stream("[[block]] second")).await;
    assert!(second.unwrap().text.ends_with("second"));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Notice(n) if n.notice == "process.reused")),
        "the second turn was a next-turn on the kept process"
    );
    // `on-cancel`: a cancelled run asks the driver to stop the turn.
    let mut stream = agent.stream("[[block]] [[hang]] stop me");
    while let Some(e) = futures::StreamExt::next(&mut stream).await {
        if matches!(&e, Event::ProcessInfo(p) if p.process == adaptor::ProcessInfoKind::Spawn) {
            stream.cancel();
        }
    }
    let e = run_error(stream.result().await);
    assert_eq!(e.reason, adaptor::FailureReason::Cancelled);
    agent.close().await;
}
