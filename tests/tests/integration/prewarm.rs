//! Prewarmed provider processes (`AgentBuilder::prewarm`): a run starts on a process that was
//! started before it for exactly its launch, the pool refills, other launches never take
//! one, a launch that depends on the prompt is refused with a typed error, and warm processes
//! are stopped on idle, on `close` and on drop. Processes are found by their unique state
//! directory on the command line (only this test's processes carry it).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use adaptor::{Error, Event, ProcessInfoKind, RunOptions};
use adaptor_integration_tests::*;

/// The pid the host spawned for provider process `provider`: its ancestor whose parent is
/// this test process's spawner (the provider itself, or what runs its PID namespace).
fn spawned_as(provider: u32) -> u32 {
    let parent = |pid: u32| -> u32 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_else(|e| panic!("process {pid}: {e}"));
        let fields = stat.rsplit_once(')').unwrap().1;
        fields.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let mut pid = provider;
    loop {
        let ppid = parent(pid);
        if ppid == std::process::id() || spawner_of_this_test(ppid) {
            return pid;
        }
        assert!(ppid > 1, "process {provider} is not one of this test's");
        pid = ppid;
    }
}

/// Whether `pid` is this test process's spawner.
fn spawner_of_this_test(pid: u32) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let ppid = stat
        .rsplit_once(')')
        .and_then(|(_, f)| f.split_whitespace().nth(1)?.parse::<u32>().ok());
    comm.trim_end() == "adaptor-spawner" && ppid == Some(std::process::id())
}

/// The run directory of process `pid` (the parent of its `TMPDIR`).
fn private_root(pid: u32) -> std::path::PathBuf {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let tmpdir = environ
        .split(|b| *b == 0)
        .find_map(|v| v.strip_prefix(b"TMPDIR="))
        .expect("TMPDIR");
    Path::new(std::str::from_utf8(tmpdir).unwrap())
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The one warm process waiting (after a refill).
async fn second_warm(state: &tempfile::TempDir) -> u32 {
    assert!(
        eventually(Duration::from_secs(10), || processes_with(state.path())
            .len()
            == 1)
        .await
    );
    processes_with(state.path())[0]
}

fn spawn_pid_of(events: &[Event]) -> u32 {
    events
        .iter()
        .find_map(|e| match e {
            Event::ProcessInfo(p) if p.process == ProcessInfoKind::Spawn => p.pid,
            _ => None,
        })
        .expect("a spawn event")
}

async fn all_gone(state: &Path) -> bool {
    eventually(Duration::from_secs(10), || processes_with(state).is_empty()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_starts_on_the_prewarmed_process_and_the_pool_refills() {
    let (state, ws) = (tmp(), tmp());
    // A state directory the warm launch creates: the run's launch, decided once it exists,
    // is still the same launch.
    let state_dir = state.path().join("created-by-the-warm-launch");
    let agent = agent_builder(reference(&state_dir), ws.path())
        .prewarm(1)
        .build();
    assert_eq!(agent.warm_up().await.unwrap(), 1);
    let warm = processes_with(state.path());
    assert_eq!(warm.len(), 1, "one warm process: {warm:?}");
    let warm_spawn = spawned_as(warm[0]);

    let (events, result) = collect(agent.stream("hello")).await;
    let result = result.unwrap();
    assert!(result.text.contains("hello"), "{}", result.text);
    let taken = notice(&events, "process.prewarmed").expect("a prewarmed notice");
    assert_eq!(
        taken.data.as_ref().unwrap()["pid"].as_u64(),
        Some(warm_spawn as u64)
    );
    // The reference provider's one-shot launch reads the prompt as its stdin: nothing was
    // written to the warm process before the run took it.
    assert_eq!(taken.data.as_ref().unwrap()["input_written"], 0);
    assert!(result.raw().chunks.iter().all(|c| !c.at.is_zero()));
    assert_eq!(
        spawn_pid_of(&events),
        warm_spawn,
        "the run's process is the warm one"
    );
    assert!(notice(&events, "process.prewarm_mismatch").is_none());

    // Refilled in the background with a new process; the used one is gone.
    assert!(
        eventually(Duration::from_secs(10), || {
            let now = processes_with(state.path());
            now.len() == 1 && now[0] != warm[0]
        })
        .await,
        "a new warm process replaces the taken one"
    );
    assert_eq!(agent.warm_up().await.unwrap(), 1);
    let second = spawned_as(processes_with(state.path())[0]);
    let (events, result) = collect(agent.stream("again")).await;
    result.unwrap();
    assert_eq!(spawn_pid_of(&events), second);

    let root = private_root(second_warm(&state).await);
    assert!(root.exists(), "{}", root.display());
    agent.close().await;
    assert!(
        all_gone(state.path()).await,
        "close stops the warm processes"
    );
    assert!(!root.exists(), "close removes their private directories");
    assert!(matches!(agent.warm_up().await, Err(Error::AgentClosed)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_another_launch_starts_its_own_and_says_why() {
    let (state, ws, other) = (tmp(), tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .prewarm(1)
        .build();
    agent.warm_up().await.unwrap();
    let warm = processes_with(state.path());
    assert_eq!(warm.len(), 1);
    let warm_spawn = spawned_as(warm[0]);

    let (events, result) =
        collect(agent.stream_with("elsewhere", RunOptions::new().workspace(other.path()))).await;
    result.unwrap();
    let miss = notice(&events, "process.prewarm_mismatch").expect("a mismatch notice");
    assert!(
        miss.message.contains("working directory"),
        "{}",
        miss.message
    );
    assert_ne!(spawn_pid_of(&events), warm_spawn);
    assert!(
        pid_alive(warm[0]),
        "the warm process waits for a run it serves"
    );

    let (events, result) = collect(agent.stream("here")).await;
    result.unwrap();
    assert_eq!(spawn_pid_of(&events), warm_spawn);
    agent.close().await;
    assert!(all_gone(state.path()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_that_depends_on_the_prompt_cannot_be_prewarmed() {
    let (state, ws) = (tmp(), tmp());
    let metadata = BTreeMap::from([("testbed".to_owned(), "prompt-in-args".to_owned())]);
    let agent = agent_builder(testbed(state.path()), ws.path())
        .metadata(metadata)
        .prewarm(1)
        .build();
    match agent.warm_up().await {
        Err(Error::PrewarmUnsupported { driver, reason }) => {
            assert_eq!(driver, "testbed");
            assert!(reason.contains("arguments"), "{reason}");
        }
        other => panic!("expected PrewarmUnsupported, got {other:?}"),
    }
    assert!(all_gone(state.path()).await, "nothing is left running");
    // Runs start their own processes (this one fails: the reference provider takes no
    // prompt argument); a failed background fill is reported in a notice, never dropped.
    let mut reported = false;
    for _ in 0..10 {
        let (events, _) = collect(agent.stream("hello")).await;
        assert!(notice(&events, "process.prewarmed").is_none());
        if let Some(n) = notice(&events, "process.prewarm_failed") {
            assert!(n.message.contains("depends on the prompt"), "{}", n.message);
            reported = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reported, "a run reports the failed fill");
    agent.close().await;
    assert!(all_gone(state.path()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_warm_processes_are_stopped_and_dropping_the_agent_stops_them() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .prewarm(2)
        .prewarm_idle(Duration::from_millis(300))
        .build();
    assert_eq!(agent.warm_up().await.unwrap(), 2);
    assert_eq!(processes_with(state.path()).len(), 2);
    assert!(
        all_gone(state.path()).await,
        "idle warm processes are stopped"
    );

    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .prewarm(1)
        .build();
    agent.warm_up().await.unwrap();
    assert_eq!(processes_with(state.path()).len(), 1);
    drop(agent);
    assert!(
        all_gone(state.path()).await,
        "dropping the agent stops them"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_process_that_died_is_not_used() {
    let (state, ws) = (tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .prewarm(1)
        .build();
    agent.warm_up().await.unwrap();
    let warm = processes_with(state.path());
    let warm_spawn = spawned_as(warm[0]);
    // SAFETY: kill(2) on a process this test's agent started (found by its unique state dir).
    unsafe { libc::kill(warm[0] as libc::pid_t, libc::SIGKILL) };
    // The pool checks the process it spawned (the confinement's outer process), which exits
    // once the provider inside it has died; wait for that, as a crash long before use would.
    assert!(
        eventually(Duration::from_secs(5), || !pid_alive(warm[0])
            && !pid_alive(warm_spawn))
        .await
    );
    let (events, result) = collect(agent.stream("hello")).await;
    result.unwrap();
    assert!(notice(&events, "process.prewarmed").is_none());
    assert_ne!(spawn_pid_of(&events), warm_spawn);
    // A warm process that ended soon after its start says so, and the pool stops refilling
    // (a CLI that does not wait for its input would otherwise be started over and over).
    let failed = notice(&events, "process.prewarm_failed").expect("a prewarm_failed notice");
    assert!(
        failed.message.contains("exited") && failed.message.contains("warm_up"),
        "{}",
        failed.message
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(processes_with(state.path()).is_empty(), "no refill");
    // An explicit warm_up starts again.
    assert_eq!(agent.warm_up().await.unwrap(), 1);
    let (events, result) = collect(agent.stream("again")).await;
    result.unwrap();
    assert!(notice(&events, "process.prewarmed").is_some());
    agent.close().await;
    assert!(all_gone(state.path()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_process_the_default_launch_no_longer_matches_is_replaced() {
    let (state, ws, home) = (tmp(), tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .env("HOME", home.path().display().to_string())
        .prewarm(1)
        .build();
    agent.warm_up().await.unwrap();
    let stale = processes_with(state.path());
    assert_eq!(stale.len(), 1);
    // The confinement grants ~/.gitconfig only once it exists (as a CLI's own state file
    // appears after its first start): the warm process was confined without it.
    std::fs::write(home.path().join(".gitconfig"), "[user]\n\tname = t\n").unwrap();
    let (events, result) = collect(agent.stream("hello")).await;
    result.unwrap();
    let miss = notice(&events, "process.prewarm_mismatch").expect("a mismatch notice");
    assert!(miss.message.contains("confinement"), "{}", miss.message);
    assert!(
        eventually(Duration::from_secs(10), || {
            let now = processes_with(state.path());
            now.len() == 1 && now[0] != stale[0]
        })
        .await,
        "the stale process is replaced by one started for today's launch"
    );
    assert!(!pid_alive(stale[0]));
    assert_eq!(agent.warm_up().await.unwrap(), 1);
    let (events, result) = collect(agent.stream("again")).await;
    result.unwrap();
    assert!(notice(&events, "process.prewarmed").is_some());

    // `warm_up` checks what waits before counting it.
    let waiting = second_warm(&state).await;
    std::fs::create_dir_all(home.path().join(".config/git")).unwrap();
    assert_eq!(agent.warm_up().await.unwrap(), 1);
    let now = processes_with(state.path());
    assert_eq!(now.len(), 1);
    assert_ne!(now[0], waiting, "warm_up replaced the stale process");
    let (events, result) = collect(agent.stream("third")).await;
    result.unwrap();
    assert!(notice(&events, "process.prewarmed").is_some());
    assert!(notice(&events, "process.prewarm_mismatch").is_none());
    agent.close().await;
    assert!(all_gone(state.path()).await);
}
