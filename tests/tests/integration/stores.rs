//! The thread-store conformance suite (`adaptortest::store_suite`) against all three stores, plus
//! the multi-process checks: 8 racing processes (`src/bin/store-racer.rs race`) and a
//! finalize loop SIGKILLed at varied moments (`store-racer finalize-loop`). The memory store
//! cannot be shared between processes, so it runs the same race on 8 threads in-process.
//!
//! PostgreSQL runs against `ADAPTOR_TEST_POSTGRES_URL` or a private cluster started once for
//! this binary (`src/pg.rs`); without PostgreSQL installed those tests fail saying how to
//! install it.

use std::path::Path;

use adaptor::store::{MemoryStore, PostgresStore, SqliteStore};
use adaptor_integration_tests::{open_store, pg, tmp};
use adaptortest::store_suite;

/// Every check of the suite (`store_suite::CHECKS`), each on a fresh store; a failure lists
/// each failing check with its message.
fn assert_all_pass(store: &str, report: &[(&str, Result<(), String>)]) {
    assert_eq!(report.len(), store_suite::CHECKS.len());
    let failed: Vec<String> = report
        .iter()
        .filter_map(|(name, outcome)| outcome.as_ref().err().map(|e| format!("{name}: {e}")))
        .collect();
    assert!(failed.is_empty(), "{store} store:\n{}", failed.join("\n"));
}

#[tokio::test]
async fn memory_store_passes_the_suite() {
    let report = store_suite::run_checks(|| async { MemoryStore::new() }).await;
    assert_all_pass("memory", &report);
}

#[tokio::test]
async fn sqlite_store_passes_the_suite() {
    let dirs = std::sync::Mutex::new(Vec::new());
    let report = store_suite::run_checks(|| async {
        let dir = tmp();
        let store = SqliteStore::open(dir.path().join("threads.sqlite3")).expect("open sqlite");
        dirs.lock().unwrap().push(dir);
        store
    })
    .await;
    assert_all_pass("sqlite", &report);
}

#[tokio::test]
async fn postgres_store_passes_the_suite() {
    let databases = std::sync::Mutex::new(Vec::new());
    let report = store_suite::run_checks(|| async {
        let db = pg::test_database().await;
        let store = PostgresStore::connect(db.url())
            .await
            .expect("connect postgres store");
        databases.lock().unwrap().push(db);
        store
    })
    .await;
    assert_all_pass("postgres", &report);
}

const RACER: &str = env!("CARGO_BIN_EXE_store-racer");
const WORKERS: usize = 8;
const ROUNDS: u32 = 5;
const KILLS: u32 = 10;

fn sqlite_spec(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("threads.sqlite3").display())
}

/// The memory store cannot be shared between processes: the same race on 8 threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_race_in_threads() {
    store_suite::race_in_threads(store_suite::shared_memory_store(), WORKERS, ROUNDS).await;
}

/// 8 processes race on one SQLite file that none of them has created yet.
#[tokio::test]
async fn sqlite_race_between_processes() {
    let dir = tmp();
    let spec = sqlite_spec(dir.path());
    store_suite::race_processes(
        Path::new(RACER),
        &spec,
        || open_store(&spec),
        WORKERS,
        ROUNDS,
    )
    .await;
}

/// 8 processes race on one PostgreSQL database whose schema none of them has created yet
/// (so the first connects also race to create it).
#[tokio::test]
async fn postgres_race_between_processes() {
    let db = pg::test_database().await;
    let spec = format!("postgres:{}", db.url());
    store_suite::race_processes(
        Path::new(RACER),
        &spec,
        || open_store(&spec),
        WORKERS,
        ROUNDS,
    )
    .await;
}

#[tokio::test]
async fn sqlite_survives_kill_during_finalize() {
    let dir = tmp();
    let spec = sqlite_spec(dir.path());
    store_suite::kill_during_finalize(Path::new(RACER), &spec, || open_store(&spec), KILLS).await;
}

#[tokio::test]
async fn postgres_survives_kill_during_finalize() {
    let db = pg::test_database().await;
    let spec = format!("postgres:{}", db.url());
    store_suite::kill_during_finalize(Path::new(RACER), &spec, || open_store(&spec), KILLS).await;
}

/// A store that forgets archived records' status: archiving does nothing. The suite must
/// catch it through its public entry point, as it would a third party's bug.
#[derive(Debug, Default)]
struct ForgetfulArchive(MemoryStore);

impl adaptor::store::ThreadStore for ForgetfulArchive {
    fn kind(&self) -> &'static str {
        "forgetful-archive"
    }
    fn resolve<'a>(
        &'a self,
        query: &'a adaptor::store::Query,
    ) -> adaptor::store::StoreFuture<'a, Option<adaptor::store::ThreadRecord>> {
        self.0.resolve(query)
    }
    fn list<'a>(
        &'a self,
        query: &'a adaptor::store::ListQuery,
    ) -> adaptor::store::StoreFuture<'a, Vec<adaptor::store::ThreadRecord>> {
        self.0.list(query)
    }
    fn finalize(&self, request: adaptor::store::Finalize) -> adaptor::store::StoreFuture<'_, ()> {
        self.0.finalize(request)
    }
    fn archive<'a>(
        &'a self,
        _id: &'a str,
        _leases: &'a [adaptor::store::Lease],
    ) -> adaptor::store::StoreFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    fn acquire_lease<'a>(
        &'a self,
        target: &'a str,
        owner: &'a str,
        ttl: std::time::Duration,
    ) -> adaptor::store::StoreFuture<'a, adaptor::store::Lease> {
        self.0.acquire_lease(target, owner, ttl)
    }
    fn renew_lease<'a>(
        &'a self,
        lease: &'a adaptor::store::Lease,
        ttl: std::time::Duration,
    ) -> adaptor::store::StoreFuture<'a, adaptor::store::Lease> {
        self.0.renew_lease(lease, ttl)
    }
    fn release_lease<'a>(
        &'a self,
        lease: &'a adaptor::store::Lease,
    ) -> adaptor::store::StoreFuture<'a, ()> {
        self.0.release_lease(lease)
    }
}

#[tokio::test]
async fn the_public_suite_catches_a_broken_store() {
    let report = store_suite::run_checks(|| async { ForgetfulArchive::default() }).await;
    let failed: Vec<&str> = report
        .iter()
        .filter(|(_, o)| o.is_err())
        .map(|(n, _)| *n)
        .collect();
    assert!(
        failed.contains(&"archive_unbinds_and_is_idempotent"),
        "{report:?}"
    );
    assert!(
        failed.len() < report.len(),
        "only the archive checks fail: {failed:?}"
    );
}
