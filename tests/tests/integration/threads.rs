//! Threads on the reference driver (and the testbed for a missing checkpoint): resume, fork,
//! resume-only, incompatible fingerprints, resume rejected → one explicit fresh fallback,
//! failed runs keep the healthy checkpoint, leases (busy, lost during a run), and the
//! errors that must come before any process starts.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use adaptor::store::{
    Finalize, Lease, ListQuery, MemoryStore, Query, RecordStatus, StoreError, StoreFuture,
    ThreadRecord, ThreadStore, lease_target_for_key,
};
use adaptor::{Agent, Error, Event, FailureReason, RunOptions, ThreadError, ThreadStart};
use adaptor_integration_tests::{
    agent_builder, collect, reference, rewrite_record, rewrite_state, testbed, tmp,
};

fn agent(store: Arc<dyn ThreadStore>, state: &Path, workspace: &Path) -> Agent {
    agent_builder(reference(state), workspace)
        .shared_thread_store(store)
        .build()
}

fn thread_error(r: Result<adaptor::RunResult, Error>) -> ThreadError {
    match r {
        Err(Error::Thread(e)) => e,
        other => panic!("expected a thread error, got {other:?}"),
    }
}

/// No event at all: the run was refused before `RunStarted` (so before any spawn).
fn assert_refused_before_start(events: &[Event]) {
    assert!(
        events.is_empty(),
        "expected no events (nothing started), got {:?}",
        events.iter().map(Event::kind).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_run_resumes_the_first_session() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    let thread = agent.thread("ticket-42");
    assert_eq!(thread.session_state().await.unwrap(), None);

    let (events, first) = collect(thread.stream("hello")).await;
    let first = first.unwrap();
    assert_eq!(first.text, "Reference reply: hello");
    let info = first.thread.clone().expect("thread info");
    assert_eq!(info.key, "ticket-42");
    assert_eq!(info.start, ThreadStart::New);
    assert!(
        events
            .iter()
            .all(|e| e.meta().thread_key.as_deref() == Some("ticket-42")),
        "every event carries the thread key"
    );
    assert!(
        events.iter().all(|e| e.meta().turn == Some(1)),
        "every event of the first turn says turn 1"
    );
    let stored = thread.session_state().await.unwrap().expect("saved");
    assert_eq!(
        Some(&stored),
        first.checkpoint.as_ref().map(adaptor::Checkpoint::state)
    );

    let (events, second) = collect(thread.stream("again")).await;
    let second = second.unwrap();
    assert_eq!(
        second.text,
        "Reference reply (turn 2, previously: hello): again"
    );
    assert!(events.iter().all(|e| e.meta().turn == Some(2)));
    let info2 = second.thread.unwrap();
    assert_eq!(info2.start, ThreadStart::Resumed);
    assert_eq!(info2.record_id, info.record_id, "same session lineage");
    let record = thread.record().await.unwrap().unwrap();
    assert_eq!(record.turns, 2);
    assert_eq!(record.driver, "reference");
    assert!(record.fingerprint.starts_with("sha256:"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_starts_from_the_parent_checkpoint_and_leaves_the_parent_alone() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    let parent = agent.thread("chat");
    parent.run("hello").await.unwrap();
    let parent_before = parent.record().await.unwrap().unwrap();

    let child = parent.fork("chat-regenerated");
    let forked = child.run("branch").await.unwrap();
    assert_eq!(
        forked.text,
        "Reference reply (turn 2, previously: hello): branch"
    );
    let info = forked.thread.unwrap();
    assert_eq!(
        info.start,
        ThreadStart::Forked {
            parent_key: "chat".into(),
            parent_record_id: parent_before.id.clone()
        }
    );
    let child_record = child.record().await.unwrap().unwrap();
    assert_eq!(child_record.parent_id.as_deref(), Some(&*parent_before.id));
    assert_ne!(
        child_record.state.resume_id, parent_before.state.resume_id,
        "a fork is a new provider session"
    );
    assert_eq!(
        parent.record().await.unwrap().unwrap(),
        parent_before,
        "the parent is unchanged"
    );

    // Each continues its own session.
    let p2 = parent.run("p2").await.unwrap();
    assert_eq!(p2.text, "Reference reply (turn 2, previously: hello): p2");
    let c2 = child.run("c2").await.unwrap();
    assert_eq!(c2.text, "Reference reply (turn 3, previously: branch): c2");
    assert_eq!(c2.thread.unwrap().start, ThreadStart::Resumed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_onto_a_used_key_is_refused_before_anything_starts() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    agent.thread("a").run("one").await.unwrap();
    agent.thread("b").run("two").await.unwrap();
    let b_before = agent.thread("b").record().await.unwrap();
    let (events, r) = collect(agent.thread("a").fork("b").stream("x")).await;
    assert_refused_before_start(&events);
    assert!(matches!(thread_error(r), ThreadError::AlreadyExists { key } if key == "b"));
    assert_eq!(agent.thread("b").record().await.unwrap(), b_before);

    // Forking a thread that has no checkpoint names the parent.
    let (events, r) = collect(agent.thread("nothing").fork("c").stream("x")).await;
    assert_refused_before_start(&events);
    assert!(matches!(thread_error(r), ThreadError::NotFound { key } if key == "nothing"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_only_on_a_missing_key_fails_before_anything_starts() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    let (events, r) = collect(agent.thread("ghost").resume_only().stream("hi")).await;
    assert_refused_before_start(&events);
    assert!(matches!(thread_error(r), ThreadError::NotFound { key } if key == "ghost"));
    // Nothing was created, and no lease is left behind.
    assert!(
        store
            .list(&ListQuery {
                include_archived: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .is_empty()
    );
    store
        .acquire_lease(
            &lease_target_for_key("ghost"),
            "someone-else",
            Duration::from_secs(5),
        )
        .await
        .expect("the lease was released");

    // With a checkpoint, resume-only resumes.
    agent.thread("real").run("one").await.unwrap();
    let r = agent.thread("real").resume_only().run("two").await.unwrap();
    assert_eq!(r.thread.unwrap().start, ThreadStart::Resumed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incompatible_thread_is_refused_before_any_process() {
    let (state, ws, other_ws) = (tmp(), tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    agent
        .thread("t")
        .run_with("one", RunOptions::new().model("model-a"))
        .await
        .unwrap();
    let before = agent.thread("t").record().await.unwrap();
    for options in [
        RunOptions::new().model("model-b"),
        RunOptions::new()
            .model("model-a")
            .workspace(other_ws.path()),
        RunOptions::new().model("model-a").instructions("be terse"),
        RunOptions::new().model("model-a").identity("tenant-2"),
    ] {
        let (events, r) = collect(agent.thread("t").stream_with("two", options)).await;
        assert_refused_before_start(&events);
        assert!(matches!(thread_error(r), ThreadError::Incompatible { key, .. } if key == "t"));
    }
    assert_eq!(agent.thread("t").record().await.unwrap(), before);
    // The same configuration still resumes.
    let r = agent
        .thread("t")
        .run_with("two", RunOptions::new().model("model-a"))
        .await
        .unwrap();
    assert_eq!(r.thread.unwrap().start, ThreadStart::Resumed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_resume_falls_back_once_to_a_fresh_session_explicitly() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    let thread = agent.thread("lost");
    thread.run("hello").await.unwrap();
    let old = thread.record().await.unwrap().unwrap();
    // The provider forgets the session: its next resume is rejected ("unknown session").
    std::fs::remove_dir_all(state.path()).unwrap();
    std::fs::create_dir(state.path()).unwrap();

    let (events, r) = collect(thread.stream("again")).await;
    let r = r.unwrap();
    assert_eq!(r.text, "Reference reply: again", "a fresh session");
    let fallbacks: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ThreadFallback(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(fallbacks.len(), 1, "exactly one explicit fallback");
    assert_eq!(fallbacks[0].previous_record_id, old.id);
    // The rejected attempt was the record's turn 2; from the fallback on, turn 1 of the new
    // session.
    let at = events
        .iter()
        .position(|e| matches!(e, Event::ThreadFallback(_)))
        .unwrap();
    assert!(events[..at].iter().all(|e| e.meta().turn == Some(2)));
    assert!(events[at..].iter().all(|e| e.meta().turn == Some(1)));
    assert!(
        fallbacks[0].reason.contains("unknown session"),
        "{:?}",
        fallbacks[0].reason
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::RunStarted(_)))
            .count(),
        1
    );
    assert!(matches!(events.last(), Some(Event::RunFinished(f)) if !f.failed));
    let info = r.thread.unwrap();
    assert!(matches!(
        &info.start,
        ThreadStart::FreshAfterRejection { previous_record_id, .. } if *previous_record_id == old.id
    ));
    assert_ne!(info.record_id, old.id);
    let archived = store
        .resolve(&Query::Id(old.id.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(archived.status, RecordStatus::Archived);
    assert_eq!(thread.record().await.unwrap().unwrap().id, info.record_id);
    // And the new session continues normally.
    let next = thread.run("more").await.unwrap();
    assert_eq!(
        next.text,
        "Reference reply (turn 2, previously: again): more"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_side_rejection_before_launch_also_falls_back() {
    // The reference driver refuses, before launch, a session whose recorded cwd differs.
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    let thread = agent.thread("moved");
    thread.run("hello").await.unwrap();
    rewrite_state(&*store, "moved", |s| {
        s.data.insert("cwd".into(), "/somewhere/else".into());
    })
    .await;

    let (events, r) = collect(thread.stream("again")).await;
    let r = r.unwrap();
    assert_eq!(r.text, "Reference reply: again");
    let fallback = events.iter().find_map(|e| match e {
        Event::ThreadFallback(f) => Some(f),
        _ => None,
    });
    assert!(
        fallback.is_some_and(|f| f.reason.contains("belongs to workspace /somewhere/else")),
        "{fallback:?}"
    );
    // Resume-only does not fall back: it is a typed rejection, and the record stays.
    let thread2 = agent.thread("moved2");
    thread2.run("hello").await.unwrap();
    let record = rewrite_state(&*store, "moved2", |s| {
        s.data.insert("cwd".into(), "/elsewhere".into());
    })
    .await;
    let (events, r) = collect(thread2.clone().resume_only().stream("again")).await;
    assert_refused_before_start(&events);
    assert!(matches!(thread_error(r), ThreadError::ResumeRejected { key, .. } if key == "moved2"));
    assert_eq!(thread2.record().await.unwrap().unwrap(), record);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_only_does_not_fall_back_when_the_provider_rejects() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    let thread = agent.thread("strict");
    thread.run("hello").await.unwrap();
    let before = thread.record().await.unwrap();
    std::fs::remove_dir_all(state.path()).unwrap();
    std::fs::create_dir(state.path()).unwrap();
    let (events, r) = collect(thread.clone().resume_only().stream("again")).await;
    assert!(!events.iter().any(|e| matches!(e, Event::ThreadFallback(_))));
    let e = adaptor_integration_tests::run_error(r);
    assert_eq!(e.reason, FailureReason::ResumeRejected);
    assert_eq!(thread.record().await.unwrap(), before, "the record stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_whose_parent_session_is_rejected_does_not_fall_back() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    let parent = agent.thread("parent");
    parent.run("hello").await.unwrap();
    let before = parent.record().await.unwrap();
    std::fs::remove_dir_all(state.path()).unwrap();
    std::fs::create_dir(state.path()).unwrap();
    let (events, r) = collect(parent.fork("child").stream("branch")).await;
    assert!(!events.iter().any(|e| matches!(e, Event::ThreadFallback(_))));
    let e = adaptor_integration_tests::run_error(r);
    assert_eq!(e.reason, FailureReason::ResumeRejected);
    assert_eq!(
        agent.thread("child").record().await.unwrap(),
        None,
        "no child"
    );
    assert_eq!(parent.record().await.unwrap(), before, "the parent stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_keeps_the_last_healthy_checkpoint() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    let thread = agent.thread("healthy");
    thread.run("hello").await.unwrap();
    let before = thread.record().await.unwrap();
    for prompt in ["[[fail]] broken", "[[crash]] dies", "[[exit 3]] bad exit"] {
        let r = thread.run(prompt).await;
        assert!(matches!(r, Err(Error::Run(_))), "{prompt}: {r:?}");
        assert_eq!(thread.record().await.unwrap(), before, "{prompt}");
    }
    let ok = thread.run("fine").await.unwrap();
    assert_eq!(ok.text, "Reference reply (turn 2, previously: hello): fine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_thread_is_busy_and_errors_come_before_any_process() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    let lease = store
        .acquire_lease(
            &lease_target_for_key("held"),
            "other-host:1:x",
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    let (events, r) = collect(agent.thread("held").stream("hi")).await;
    assert_refused_before_start(&events);
    assert!(matches!(
        thread_error(r),
        ThreadError::Busy { key, holder } if key == "held" && holder == "other-host:1:x"
    ));
    store.release_lease(&lease).await.unwrap();
    let held = agent.thread("held").run("hi").await.unwrap();

    // No store configured.
    let bare = agent_builder(reference(state.path()), ws.path()).build();
    let (events, r) = collect(bare.thread("k").stream("hi")).await;
    assert_refused_before_start(&events);
    assert!(matches!(thread_error(r), ThreadError::StoreRequired { .. }));

    // A per-call checkpoint conflicts with the thread's own.
    let cp = held.checkpoint.clone().unwrap();
    let (events, r) = collect(
        agent
            .thread("held")
            .stream_with("x", RunOptions::new().resume(cp)),
    )
    .await;
    assert_refused_before_start(&events);
    assert!(matches!(r, Err(Error::InvalidCheckpoint { .. })));
}

#[test]
#[should_panic(expected = "a thread key must not be empty")]
fn an_empty_key_is_a_programming_error() {
    let state = tmp();
    let agent = Agent::builder(reference(state.path())).build();
    let _ = agent.thread("");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_opaque_and_compared_byte_for_byte() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    for key in ["Key", "key", "key ", "ke\u{0}y", "é", "e\u{301}"] {
        let r = agent.thread(key).run(key).await.unwrap();
        assert_eq!(
            r.thread.unwrap().start,
            ThreadStart::New,
            "{key:?} is its own thread"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_run_without_a_checkpoint_is_reported_not_saved() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent_builder(testbed(state.path()), ws.path())
        .shared_thread_store(store.clone())
        .build();
    let r = agent
        .thread("nocp")
        .run("hi [[driver-no-checkpoint]]")
        .await;
    match thread_error(r) {
        ThreadError::CheckpointMissing { key, result } => {
            assert_eq!(key, "nocp");
            assert_eq!(result.text, "Reference reply: hi [[driver-no-checkpoint]]");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(agent.thread("nocp").record().await.unwrap(), None);
}

/// A memory store whose lease renewals fail after the first `allowed` ones: a host that
/// lost its database connection or had its lease taken over. With `intrude` set, the first
/// compare-and-set finalize (a fork's) finds its key bound just before it commits: another
/// writer won the race.
#[derive(Debug)]
struct LosingStore {
    inner: MemoryStore,
    allowed: usize,
    renewals: AtomicUsize,
    intrude: std::sync::atomic::AtomicBool,
}

impl LosingStore {
    fn new(allowed: usize) -> Self {
        Self {
            inner: MemoryStore::new(),
            allowed,
            renewals: AtomicUsize::new(0),
            intrude: false.into(),
        }
    }
}

impl ThreadStore for LosingStore {
    fn kind(&self) -> &'static str {
        "losing"
    }
    fn resolve<'a>(&'a self, query: &'a Query) -> StoreFuture<'a, Option<ThreadRecord>> {
        self.inner.resolve(query)
    }
    fn list<'a>(&'a self, query: &'a ListQuery) -> StoreFuture<'a, Vec<ThreadRecord>> {
        self.inner.list(query)
    }
    fn finalize(&self, request: Finalize) -> StoreFuture<'_, ()> {
        if request.require_key_absent && self.intrude.swap(false, Ordering::SeqCst) {
            return Box::pin(async move {
                let mut intruder = request.record.clone();
                intruder.id = adaptor::store::new_record_id();
                self.inner
                    .finalize(Finalize {
                        record: intruder,
                        archive_previous: None,
                        require_key_absent: true,
                        leases: request.leases.clone(),
                    })
                    .await?;
                self.inner.finalize(request).await
            });
        }
        self.inner.finalize(request)
    }
    fn archive<'a>(&'a self, id: &'a str, leases: &'a [Lease]) -> StoreFuture<'a, ()> {
        self.inner.archive(id, leases)
    }
    fn acquire_lease<'a>(
        &'a self,
        target: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Lease> {
        self.inner.acquire_lease(target, owner, ttl)
    }
    fn renew_lease<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> StoreFuture<'a, Lease> {
        if self.renewals.fetch_add(1, Ordering::SeqCst) >= self.allowed {
            let target = lease.target.clone();
            return Box::pin(async move { Err(StoreError::LeaseLost { target }) });
        }
        self.inner.renew_lease(lease, ttl)
    }
    fn release_lease<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        self.inner.release_lease(lease)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_cancels_the_run_and_persists_nothing() {
    let (state, ws) = (tmp(), tmp());
    let losing = Arc::new(LosingStore::new(1));
    let agent = agent_builder(reference(state.path()), ws.path())
        .shared_thread_store(losing.clone())
        .lease_ttl(Duration::from_millis(300))
        .build();
    let thread = agent.thread("fragile");
    // Long enough for the second renewal (at ~200 ms) to fail; the run would take 30 s.
    let (events, r) = collect(thread.stream("[[sleep 30000]] slow")).await;
    match thread_error(r) {
        ThreadError::LeaseLost { key, result } => {
            assert_eq!(key, "fragile");
            let partial = result.expect("the stopped run's partial result");
            assert!(partial.exit.cancelled);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(events.last(), Some(Event::RunFinished(f)) if f.failed));
    assert_eq!(thread.record().await.unwrap(), None, "nothing persisted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_a_run_longer_than_its_lease_alive_and_saved() {
    let (state, ws) = (tmp(), tmp());
    let store = Arc::new(LosingStore::new(usize::MAX));
    let agent = agent_builder(reference(state.path()), ws.path())
        .shared_thread_store(store.clone())
        .lease_ttl(Duration::from_millis(300))
        .build();
    // Five lease lifetimes long: without renewal the lease would lapse mid-run.
    let r = agent
        .thread("long")
        .run("[[sleep 1500]] slow")
        .await
        .unwrap();
    assert_eq!(r.thread.unwrap().start, ThreadStart::New);
    let renewed = store.renewals.load(Ordering::SeqCst);
    assert!(renewed >= 3, "renewed {renewed} times");
    assert!(
        agent.thread("long").record().await.unwrap().is_some(),
        "saved"
    );
    // A fork renews both its own lease and its parent's.
    let r = agent
        .thread("long")
        .fork("long/alt")
        .run("[[sleep 1500]] branch")
        .await
        .unwrap();
    assert!(matches!(
        r.thread.unwrap().start,
        ThreadStart::Forked { .. }
    ));
    let fork_renewals = store.renewals.load(Ordering::SeqCst) - renewed;
    assert!(
        fork_renewals >= 6,
        "renewed {fork_renewals} times for two leases"
    );
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Verdict {
    verdict: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_works_on_a_thread_too() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    let thread = agent.thread("typed");
    thread.run("hello").await.unwrap();
    let (_verdict, result) = adaptor::run_as::<Verdict>(&thread, "judge").await.unwrap();
    assert!(result.structured.as_ref().is_some_and(|s| s.valid));
    assert_eq!(result.thread.unwrap().start, ThreadStart::Resumed);
    assert_eq!(thread.record().await.unwrap().unwrap().turns, 2);
}

/// The pipeline's thread stage over the persistent stores: resume, fork, the explicit
/// fallback, and a second agent on the same store (another host) refused while a run holds
/// the key.
async fn thread_lifecycle_on(store: Arc<dyn ThreadStore>) {
    let kind = store.kind();
    let (state, ws) = (tmp(), tmp());
    let agent = agent(store.clone(), state.path(), ws.path());
    let t = agent.thread("persisted");
    assert_eq!(
        t.run("hello").await.unwrap().thread.unwrap().start,
        ThreadStart::New
    );
    let second = t.run("again").await.unwrap();
    assert_eq!(
        second.text, "Reference reply (turn 2, previously: hello): again",
        "{kind}"
    );
    let forked = t.fork("persisted-fork").run("branch").await.unwrap();
    assert!(
        matches!(forked.thread.unwrap().start, ThreadStart::Forked { .. }),
        "{kind}"
    );

    // Another agent (as another host would) on the same store while a run holds the key.
    let other = agent_builder(reference(state.path()), ws.path())
        .shared_thread_store(store.clone())
        .build();
    // A run that holds the key until it is cancelled (no timing involved).
    let mut slow = t.stream("[[sleep 60000]] slow");
    // Wait for RunStarted: the lease is held from before it.
    loop {
        match futures::StreamExt::next(&mut slow).await {
            Some(Event::RunStarted(_)) => break,
            Some(_) => {}
            None => panic!("{kind}: the slow run ended early"),
        }
    }
    let busy = other.thread("persisted").run("meanwhile").await;
    assert!(
        matches!(thread_error(busy), ThreadError::Busy { .. }),
        "{kind}"
    );
    slow.cancel();
    let cancelled = adaptor_integration_tests::run_error(slow.result().await);
    assert_eq!(cancelled.reason, FailureReason::Cancelled, "{kind}");

    // The provider forgets the session: one explicit fresh fallback, old record archived.
    let old = t.record().await.unwrap().unwrap();
    std::fs::remove_dir_all(state.path()).unwrap();
    std::fs::create_dir(state.path()).unwrap();
    let fresh = other.thread("persisted").run("after").await.unwrap();
    assert!(
        matches!(&fresh.thread.as_ref().unwrap().start, ThreadStart::FreshAfterRejection { previous_record_id, .. } if *previous_record_id == old.id),
        "{kind}"
    );
    let archived = store.resolve(&Query::Id(old.id)).await.unwrap().unwrap();
    assert_eq!(archived.status, RecordStatus::Archived, "{kind}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_on_the_sqlite_store() {
    let dir = tmp();
    let store = adaptor::store::SqliteStore::open(dir.path().join("t.sqlite3")).unwrap();
    thread_lifecycle_on(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_on_the_postgres_store() {
    let db = adaptor_integration_tests::pg::test_database().await;
    let store = adaptor::store::PostgresStore::connect(db.url())
        .await
        .unwrap();
    thread_lifecycle_on(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_on_the_memory_store() {
    thread_lifecycle_on(Arc::new(MemoryStore::new())).await;
}

/// A fork is checked like a resume of its parent: an agent of another identity (or model,
/// config, workspace…) that would be refused resuming the parent cannot fork it either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_is_refused_when_a_resume_of_the_parent_would_be() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    agent
        .thread("parent")
        .run_with("one", RunOptions::new().identity("tenant-1"))
        .await
        .unwrap();
    for options in [
        RunOptions::new().identity("tenant-2"),
        RunOptions::new()
            .identity("tenant-1")
            .model("another-model"),
    ] {
        let (events, r) = collect(
            agent
                .thread("parent")
                .fork("child")
                .stream_with("x", options),
        )
        .await;
        assert_refused_before_start(&events);
        assert!(
            matches!(thread_error(r), ThreadError::Incompatible { ref reason, .. } if reason.contains("parent `parent`")),
        );
    }
    assert_eq!(agent.thread("child").record().await.unwrap(), None);
    // The same identity forks.
    let r = agent
        .thread("parent")
        .fork("child")
        .run_with("x", RunOptions::new().identity("tenant-1"))
        .await
        .unwrap();
    assert!(matches!(
        r.thread.unwrap().start,
        ThreadStart::Forked { .. }
    ));
}

/// A fork holds its parent's lease while it runs: the parent cannot move under it, and a
/// fork of a parent that is running elsewhere is busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_holds_the_parents_lease_while_it_runs() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    agent.thread("p").run("one").await.unwrap();
    let mut fork = agent.thread("p").fork("f").stream("[[sleep 1500]] branch");
    // Wait until the fork's process runs (its leases are held by then).
    loop {
        match futures::StreamExt::next(&mut fork).await {
            Some(Event::RunStarted(_)) => break,
            Some(_) => continue,
            None => panic!("the fork ended early"),
        }
    }
    let (events, r) = collect(agent.thread("p").stream("meanwhile")).await;
    assert_refused_before_start(&events);
    assert!(matches!(thread_error(r), ThreadError::Busy { key, .. } if key == "p"));
    let forked = fork.result().await.unwrap();
    assert!(matches!(
        forked.thread.unwrap().start,
        ThreadStart::Forked { .. }
    ));
    // Released afterwards: the parent runs again, and a fork of a busy parent is busy.
    agent.thread("p").run("after").await.unwrap();
    let mut busy_parent = agent.thread("p").stream("[[sleep 1500]] long");
    loop {
        match futures::StreamExt::next(&mut busy_parent).await {
            Some(Event::RunStarted(_)) => break,
            Some(_) => continue,
            None => panic!("the parent run ended early"),
        }
    }
    let (events, r) = collect(agent.thread("p").fork("g").stream("x")).await;
    assert_refused_before_start(&events);
    assert!(matches!(thread_error(r), ThreadError::Busy { key, .. } if key == "p"));
    busy_parent.result().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_state_of_another_codec_or_without_a_resume_id_is_incompatible() {
    // The fingerprint matches (same agent), so these reach the record's own checks.
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    for (key, change, why) in [
        (
            "codec",
            (|s: &mut adaptor::SessionState| s.codec = "other/v1".into())
                as fn(&mut adaptor::SessionState),
            "codec `other/v1`",
        ),
        ("empty", |s| s.resume_id.clear(), "empty resume id"),
    ] {
        agent.thread(key).run("hello").await.unwrap();
        let before = rewrite_state(&*store, key, change).await;
        let (events, r) = collect(agent.thread(key).stream("again")).await;
        assert_refused_before_start(&events);
        assert!(
            matches!(thread_error(r), ThreadError::Incompatible { reason, .. } if reason.contains(why)),
            "{key}"
        );
        let after = agent.thread(key).record().await.unwrap().unwrap();
        assert_eq!(after, before, "{key}: the record is left alone");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_on_a_driver_that_cannot_fork_is_refused_before_anything_starts() {
    // The puppet driver resumes but declares no fork.
    let ws = tmp();
    let puppet = adaptor::Driver::from_file(adaptor_integration_tests::test_driver_path("puppet"))
        .expect("puppet.wasm");
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent_builder(puppet, ws.path())
        .shared_thread_store(store.clone())
        .build();
    let (events, r) = collect(agent.thread("parent").fork("child").stream("x")).await;
    assert_refused_before_start(&events);
    assert!(matches!(
        thread_error(r),
        ThreadError::Unsupported { driver, what: "forking sessions", .. } if driver == "puppet"
    ));
    assert!(
        store
            .list(&adaptor::store::ListQuery::default())
            .await
            .unwrap()
            .is_empty(),
        "nothing written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_that_loses_the_race_for_its_key_saves_nothing() {
    // Between the fork's check (the key is free) and its commit, another writer binds the
    // key: the commit is a compare-and-set, so the fork fails `AlreadyExists` and the
    // winner's record stays.
    let (state, ws) = (tmp(), tmp());
    let store = Arc::new(LosingStore::new(usize::MAX));
    let agent = agent_builder(reference(state.path()), ws.path())
        .shared_thread_store(store.clone())
        .build();
    agent.thread("origin").run("hello").await.unwrap();
    let parent_before = agent.thread("origin").record().await.unwrap();
    store.intrude.store(true, Ordering::SeqCst);
    let r = agent.thread("origin").fork("contested").run("branch").await;
    assert!(matches!(thread_error(r), ThreadError::AlreadyExists { key } if key == "contested"));
    let winner = agent
        .thread("contested")
        .record()
        .await
        .unwrap()
        .expect("the winner");
    assert_eq!(winner.turns, 1);
    assert_eq!(
        agent.thread("origin").record().await.unwrap(),
        parent_before
    );
    let all = store.list(&ListQuery::default()).await.unwrap();
    assert_eq!(
        all.len(),
        2,
        "the parent and the winner, nothing of the fork: {all:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_another_component_resumes_only_when_the_caller_accepts_it() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), state.path(), ws.path());
    let first = agent.thread("bound").run("hello").await.unwrap();
    let ours = agent.driver().sha256().to_owned();
    let record = agent.thread("bound").record().await.unwrap().unwrap();
    assert_eq!(record.component, ours, "a saved record names the component");
    // Another component called `reference` (same name, codec and fingerprint) wrote it.
    let theirs = "ee".repeat(32);
    let forged = rewrite_record(&*store, "bound", |r| r.component = theirs.clone()).await;
    let (events, r) = collect(agent.thread("bound").stream("again")).await;
    assert_refused_before_start(&events);
    assert!(matches!(
        thread_error(r),
        ThreadError::Incompatible { reason, .. } if reason.contains(&theirs) && reason.contains("accept_checkpoints_from")
    ));
    assert_eq!(
        agent.thread("bound").record().await.unwrap().unwrap(),
        forged
    );
    // The caller migrates explicitly: it resumes, and the record is stamped with ours.
    let migrating = agent_builder(reference(state.path()), ws.path())
        .shared_thread_store(store.clone())
        .accept_checkpoints_from(theirs.clone())
        .build();
    let r = migrating.thread("bound").run("again").await.unwrap();
    assert_eq!(r.thread.as_ref().unwrap().start, ThreadStart::Resumed);
    assert_eq!(r.session_id(), first.session_id());
    let record = migrating.thread("bound").record().await.unwrap().unwrap();
    assert_eq!(record.component, ours);
    // A record from before components were recorded (empty) is accepted and stamped.
    rewrite_record(&*store, "bound", |r| r.component.clear()).await;
    let r = agent.thread("bound").run("once more").await.unwrap();
    assert_eq!(r.thread.unwrap().start, ThreadStart::Resumed);
    assert_eq!(
        agent
            .thread("bound")
            .record()
            .await
            .unwrap()
            .unwrap()
            .component,
        ours
    );
}

/// `run` drives its pipeline in the caller's task; a caller that stops waiting (a timeout
/// around `run`) hands the rest of the run to a task of its own, where it ends as an
/// abandoned spawned run does: not cancelled, its session saved, its lease released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_dropped_before_its_end_still_ends_and_releases_its_thread() {
    let (state, ws) = (tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent(store, state.path(), ws.path());
    let thread = agent.thread("abandoned");
    let waited = tokio::time::timeout(
        Duration::from_millis(300),
        thread.run("[[sleep 1500]] slow"),
    )
    .await;
    assert!(waited.is_err(), "the caller stopped waiting before the end");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let saved = loop {
        if let Some(record) = thread.record().await.expect("record") {
            break record;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the abandoned run never saved its session"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(saved.turns, 1, "the abandoned run ran to its end");
    // Its lease is released: the next turn runs (a held lease would refuse it as busy).
    let next = thread.run("next").await.expect("the next turn");
    assert_eq!(next.thread.expect("thread info").record_id, saved.id);
    assert_eq!(thread.record().await.unwrap().unwrap().turns, 2);
}
