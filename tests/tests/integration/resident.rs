//! Resident provider processes: a thread keeps its provider process between turns (reference
//! driver with `"transport": "stdio"`), one per thread, replaced only once stopped, evicted
//! when idle, never fed a prompt after it may be stale, and reaped by `Agent::close` and by
//! dropping the agent.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use adaptor::store::{MemoryStore, ThreadStore};
use adaptor::{Agent, AgentBuilder, Event, ProcessInfoKind, RunOptions, Spawn, ThreadStart};
use adaptor_integration_tests::*;

fn stdio_reference(state: &Path) -> adaptor::Driver {
    with_resident_reference_provider(
        adaptor::Driver::from_file(driver_path("reference")).unwrap(),
        state,
    )
}

fn builder(store: Arc<dyn ThreadStore>, state: &Path, ws: &Path) -> AgentBuilder {
    agent_builder(stdio_reference(state), ws).shared_thread_store(store)
}

fn reused_pid(events: &[Event]) -> Option<u64> {
    events.iter().find_map(|e| match e {
        Event::Notice(n) if n.notice == "process.reused" => {
            n.data.as_ref().and_then(|d| d["pid"].as_u64())
        }
        _ => None,
    })
}

/// Wait (bounded) until `pid` is gone; false if it never went.
async fn gone(pid: u32) -> bool {
    for _ in 0..500 {
        if !pid_alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_keeps_its_process_across_turns() {
    let (state, ws) = (tmp(), tmp());
    let agent = builder(Arc::new(MemoryStore::new()), state.path(), ws.path()).build();
    let t = agent.thread("resident");
    let (events, first) = collect(t.stream("hello")).await;
    let first = first.unwrap();
    assert!(first.exit.kept_alive, "the process outlives the turn");
    assert_eq!(first.raw().exited, None, "no exit to time in a kept turn");
    let pid = spawned_pid(&events).expect("a spawn");
    assert!(pid_alive(pid));
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::ProcessInfo(p) if p.process == ProcessInfoKind::Exit))
    );

    let (events, second) = collect(t.stream("again")).await;
    let second = second.unwrap();
    assert_eq!(
        second.text,
        "Reference reply (turn 2, previously: hello): again"
    );
    assert_eq!(second.thread.as_ref().unwrap().start, ThreadStart::Resumed);
    assert_eq!(spawned_pid(&events), None, "no new process");
    assert_eq!(reused_pid(&events), Some(pid as u64));
    assert_eq!(
        second.checkpoint.as_ref().map(adaptor::Checkpoint::state),
        t.session_state().await.unwrap().as_ref()
    );
    let third = t.run("third").await.unwrap();
    assert_eq!(
        third.text,
        "Reference reply (turn 3, previously: again): third"
    );

    agent.close().await;
    assert!(!pid_alive(pid), "Agent::close reaps resident processes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_plain_and_idle_runs_do_not_keep_processes() {
    let (state, ws) = (tmp(), tmp());
    let agent = builder(Arc::new(MemoryStore::new()), state.path(), ws.path())
        .resident_idle(Duration::from_millis(300))
        .build();
    // A plain run with the same transport: stdin is closed at the end of the turn.
    let plain = agent.run("plain").await.unwrap();
    assert!(!plain.exit.kept_alive);
    assert_eq!(plain.exit.code, Some(0));
    assert!(plain.raw().exited.is_some(), "its process's exit is timed");

    let t = agent.thread("idle");
    let (events, r) = collect(t.stream("hello")).await;
    assert!(r.unwrap().exit.kept_alive);
    let pid = spawned_pid(&events).unwrap();
    // Spawn::OneShot stops the resident first and runs a process of its own.
    let (events, r) = collect(t.stream_with("once", RunOptions::new().spawn(Spawn::OneShot))).await;
    let r = r.unwrap();
    assert!(!r.exit.kept_alive);
    assert_eq!(r.exit.code, Some(0));
    assert_eq!(r.text, "Reference reply (turn 2, previously: hello): once");
    assert!(
        !pid_alive(pid),
        "the resident was stopped before the one-shot run"
    );
    assert_ne!(spawned_pid(&events), Some(pid));

    // Idle eviction.
    let (events, r) = collect(t.stream("kept")).await;
    assert!(r.unwrap().exit.kept_alive);
    let pid = spawned_pid(&events).unwrap();
    assert!(
        gone(pid).await,
        "an idle resident is stopped after resident_idle"
    );
    let r = t.run("after idle").await.unwrap();
    assert_eq!(
        r.text,
        "Reference reply (turn 4, previously: kept): after idle"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_or_dead_resident_is_replaced_and_never_fed() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = builder(store.clone(), state.path(), ws.path()).build();
    let t = agent.thread("shared");
    let (events, r) = collect(t.stream("one")).await;
    r.unwrap();
    let pid = spawned_pid(&events).unwrap();

    // Another host runs the thread meanwhile: our resident process is now stale.
    let other = builder(store.clone(), state.path(), ws.path()).build();
    let o = other
        .thread("shared")
        .run_with("elsewhere", RunOptions::new().spawn(Spawn::OneShot))
        .await
        .unwrap();
    assert_eq!(
        o.text,
        "Reference reply (turn 2, previously: one): elsewhere"
    );
    let (events, r) = collect(t.stream("back")).await;
    let r = r.unwrap();
    assert_eq!(
        r.text, "Reference reply (turn 3, previously: elsewhere): back",
        "the stale process was not used"
    );
    assert!(!pid_alive(pid), "the stale process was stopped");
    let pid = spawned_pid(&events).expect("a new process");

    // The resident dies while parked: the next turn starts a new process (nothing was sent).
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    assert!(gone(pid).await);
    let (events, r) = collect(t.stream("after death")).await;
    assert_eq!(
        r.unwrap().text,
        "Reference reply (turn 4, previously: back): after death"
    );
    let pid = spawned_pid(&events).expect("a new process");

    // The resident dies during a turn: the run fails, the prompt is not re-sent anywhere,
    // and the thread keeps its last healthy checkpoint.
    let before = t.record().await.unwrap();
    let (events, r) = collect(t.stream("[[crash]] dies")).await;
    assert_eq!(reused_pid(&events), Some(pid as u64));
    let e = run_error(r);
    assert!(!e.result.exit.kept_alive);
    assert_eq!(t.record().await.unwrap(), before);
    assert!(gone(pid).await);
    let r = t.run("recovered").await.unwrap();
    assert_eq!(
        r.text,
        "Reference reply (turn 5, previously: after death): recovered"
    );
}

#[test]
fn dropping_the_agent_kills_its_resident_processes() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (state, ws) = (tmp(), tmp());
    let pid = rt.block_on(async {
        let agent: Agent = builder(Arc::new(MemoryStore::new()), state.path(), ws.path()).build();
        let (events, r) = collect(agent.thread("dropped").stream("hello")).await;
        assert!(r.unwrap().exit.kept_alive);
        spawned_pid(&events).unwrap()
    });
    // The agent is gone: its resident's process group was killed on drop.
    rt.block_on(async { assert!(gone(pid).await, "no resident outlives its agent") });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_work_on_every_turn_of_a_resident_process() {
    use adaptor::{ApprovalPolicy, DecisionMode, Policy};
    let (state, ws) = (tmp(), tmp());
    let agent = builder(Arc::new(MemoryStore::new()), state.path(), ws.path())
        .policy(Policy {
            approvals: ApprovalPolicy {
                permission: DecisionMode::Ask,
                ..ApprovalPolicy::default()
            },
            ..Policy::default()
        })
        .on_approval(|req| async move {
            req.approve().expect("first answer");
        })
        .build();
    let t = agent.thread("asking");
    let mut pid = None;
    for (turn, prompt) in ["[[ask-permission]] one", "[[ask-permission]] two"]
        .into_iter()
        .enumerate()
    {
        let (events, r) = collect(t.stream(prompt)).await;
        let r = r.unwrap_or_else(|e| panic!("turn {turn}: {e}"));
        assert!(r.exit.kept_alive, "turn {turn}");
        let asked = events
            .iter()
            .filter(|e| matches!(e, Event::ApprovalRequest(_)))
            .count();
        assert_eq!(asked, 1, "turn {turn}: one approval request");
        assert!(
            events.iter().any(|e| matches!(e, Event::ApprovalResolved(a)
                if a.resolution == adaptor::Resolution::Approved { updated_input: None })),
            "turn {turn}: approved"
        );
        match pid {
            None => pid = spawned_pid(&events),
            Some(p) => assert_eq!(reused_pid(&events), Some(u64::from(p)), "turn {turn}"),
        }
    }
    agent.close().await;
    assert!(pid.is_some_and(|p| !pid_alive(p)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_with_another_policy_or_transport_gets_a_new_process() {
    // A kept process was started for one policy and transport: a turn asking for another
    // must not be fed to it. It is stopped and the turn resumes the session in a new one.
    let (state, ws) = (tmp(), tmp());
    let agent = builder(Arc::new(MemoryStore::new()), state.path(), ws.path()).build();
    let t = agent.thread("signature");
    let (events, _) = collect(t.stream("hello")).await;
    let first = spawned_pid(&events).expect("a spawn");
    let (events, second) =
        collect(t.stream_with("again", RunOptions::new().streaming(false))).await;
    let second = second.unwrap();
    assert_eq!(
        second.text,
        "Reference reply (turn 2, previously: hello): again"
    );
    assert_eq!(reused_pid(&events), None, "not reused");
    let replacement = spawned_pid(&events).expect("a new process");
    assert_ne!(replacement, first);
    assert!(gone(first).await, "the old process was stopped");
    // The same transport again: the replacement serves it.
    let (events, _) = collect(t.stream_with("same", RunOptions::new().streaming(false))).await;
    assert_eq!(reused_pid(&events), Some(u64::from(replacement)), "reused");
    // Another policy (approvals asked instead of inherited), the same transport: a new one.
    use adaptor::{ApprovalPolicy, DecisionMode, Policy};
    let asking = Policy {
        approvals: ApprovalPolicy {
            permission: DecisionMode::Ask,
            ..ApprovalPolicy::default()
        },
        ..Policy::default()
    };
    let (events, fourth) =
        collect(t.stream_with("policy", RunOptions::new().streaming(false).policy(asking))).await;
    fourth.unwrap();
    assert_eq!(reused_pid(&events), None, "not reused under another policy");
    let third = spawned_pid(&events).expect("a new process for the new policy");
    assert_ne!(third, replacement);
    assert!(
        gone(replacement).await,
        "the process of the old policy was stopped"
    );
    agent.close().await;
}
