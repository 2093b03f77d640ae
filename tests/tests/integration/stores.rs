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

/// The PostgreSQL schema as version 1 released it (a fixture: the store migrates it).
const POSTGRES_SCHEMA_V1: &str = "
CREATE TABLE adaptor_thread_schema (version INTEGER NOT NULL);
INSERT INTO adaptor_thread_schema (version) VALUES (1);
CREATE TABLE adaptor_thread_records (
    id TEXT NOT NULL PRIMARY KEY, key BYTEA NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('active', 'archived')),
    driver TEXT NOT NULL, fingerprint TEXT NOT NULL, codec TEXT NOT NULL,
    resume_id TEXT NOT NULL, display_id TEXT, data TEXT NOT NULL, valid BOOLEAN NOT NULL,
    parent_id TEXT, turns BIGINT NOT NULL CHECK (turns >= 0),
    created_at_ms BIGINT NOT NULL, updated_at_ms BIGINT NOT NULL
);
CREATE UNIQUE INDEX adaptor_thread_records_one_active
    ON adaptor_thread_records (key) WHERE status = 'active';
CREATE TABLE adaptor_thread_leases (
    target BYTEA NOT NULL PRIMARY KEY, owner TEXT NOT NULL, token TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
INSERT INTO adaptor_thread_records VALUES
    ('thr-old', 'k'::bytea, 'active', 'reference', 'sha256:00', 'c', 'r', NULL, '{}', true,
     NULL, 3, 0, 0);
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_postgres_schema_is_migrated_and_its_records_kept() {
    use adaptor::store::{Query, ThreadStore};
    let db = pg::test_database().await;
    let (client, conn) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(conn);
    client
        .batch_execute(POSTGRES_SCHEMA_V1)
        .await
        .expect("the v1 schema");
    let store = PostgresStore::connect(db.url())
        .await
        .expect("open and migrate");
    let old = store
        .resolve(&Query::Key("k".into()))
        .await
        .unwrap()
        .expect("the version 1 record");
    assert_eq!(
        (old.id.as_str(), old.turns, old.component.as_str()),
        ("thr-old", 3, "")
    );
    let version: i32 = client
        .query_one("SELECT version FROM adaptor_thread_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 2);
    drop(store);
    // Opening again finds version 2.
    let again = PostgresStore::connect(db.url()).await.expect("reopen");
    assert!(
        again
            .resolve(&Query::Key("k".into()))
            .await
            .unwrap()
            .is_some()
    );
    drop(client);
    let _ = task.await;
}
