//! The thread-store conformance suite (`src/store_suite.rs`) against all three stores, plus
//! the multi-process checks: 8 racing processes (`src/bin/store-racer.rs race`) and a
//! finalize loop SIGKILLed at varied moments (`store-racer finalize-loop`). The memory store
//! cannot be shared between processes, so it runs the same race on 8 threads in-process.
//!
//! PostgreSQL runs against `ADAPTOR_TEST_POSTGRES_URL` or a private cluster started once for
//! this binary (`src/pg.rs`); without PostgreSQL installed those tests fail saying how to
//! install it.

use std::path::Path;

use adaptor::store::{MemoryStore, PostgresStore, SqliteStore};
use adaptor_integration_tests::{pg, store_suite, tmp};

/// One `#[tokio::test]` per check per store, each on a fresh store.
macro_rules! suite {
    ($($check:ident),* $(,)?) => {
        mod memory {
            use super::*;
            $(
                #[tokio::test]
                async fn $check() {
                    let store = MemoryStore::new();
                    store_suite::$check(&store).await;
                }
            )*
        }

        mod sqlite {
            use super::*;
            $(
                #[tokio::test]
                async fn $check() {
                    let dir = tmp();
                    let store = SqliteStore::open(dir.path().join("threads.sqlite3"))
                        .expect("open sqlite store");
                    store_suite::$check(&store).await;
                }
            )*
        }

        mod postgres {
            use super::*;
            $(
                #[tokio::test]
                async fn $check() {
                    let db = pg::test_database().await;
                    let store = PostgresStore::connect(db.url())
                        .await
                        .expect("connect postgres store");
                    store_suite::$check(&store).await;
                }
            )*
        }
    };
}

suite!(
    resolve_missing_is_none,
    finalize_round_trips_every_field,
    keys_are_opaque,
    continuing_updates_in_place,
    fresh_record_archives_previous,
    require_key_absent_is_compare_and_set,
    archive_unbinds_and_is_idempotent,
    list_filters_and_orders,
    leases_exclude_and_rotate_tokens,
    expired_lease_is_lost_even_untaken,
    takeover_after_expiry_fences_the_old_owner,
    release_is_idempotent,
    finalize_with_one_lost_lease_writes_nothing,
);

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
    store_suite::race_processes(Path::new(RACER), &sqlite_spec(dir.path()), WORKERS, ROUNDS).await;
}

/// 8 processes race on one PostgreSQL database whose schema none of them has created yet
/// (so the first connects also race to create it).
#[tokio::test]
async fn postgres_race_between_processes() {
    let db = pg::test_database().await;
    store_suite::race_processes(
        Path::new(RACER),
        &format!("postgres:{}", db.url()),
        WORKERS,
        ROUNDS,
    )
    .await;
}

#[tokio::test]
async fn sqlite_survives_kill_during_finalize() {
    let dir = tmp();
    store_suite::kill_during_finalize(Path::new(RACER), &sqlite_spec(dir.path()), KILLS).await;
}

#[tokio::test]
async fn postgres_survives_kill_during_finalize() {
    let db = pg::test_database().await;
    store_suite::kill_during_finalize(Path::new(RACER), &format!("postgres:{}", db.url()), KILLS)
        .await;
}
