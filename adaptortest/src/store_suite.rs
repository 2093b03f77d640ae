//! The thread-store conformance suite: one set of checks every [`ThreadStore`] must pass —
//! the three built-in stores (memory, SQLite, PostgreSQL) run it in this repository's tests,
//! and a third-party store runs exactly the same checks.
//!
//! - **Single-store checks** ([`CHECKS`], or each `pub async fn` by name): each takes a
//!   fresh, empty store and panics with the store's [`ThreadStore::kind`] and what was wrong.
//!   [`run_checks`] runs them all, each on a fresh store, and reports every failure.
//! - **Races**: [`race_in_threads`] — N workers in one process contend for one key, with
//!   overlap, lost-update and fencing checks ([`assert_race`]); [`race_processes`] — the same
//!   across OS processes, for stores shared between processes. The worker is
//!   [`race_worker`]; a store author's helper binary opens the store from a spec string and
//!   calls it (this repository's is `tests/src/bin/store-racer.rs`).
//! - **Crash safety**: [`kill_during_finalize`] SIGKILLs a helper running
//!   [`finalize_loop`] at varied moments and checks the store holds one whole generation.
//!
//! ```no_run
//! # async fn demo() {
//! use adaptortest::store_suite;
//! // Each check gets a fresh, empty store from the closure (use yours).
//! let report = store_suite::run_checks(|| async { adaptor::store::MemoryStore::new() }).await;
//! for (name, outcome) in &report {
//!     assert!(outcome.is_ok(), "{name}: {outcome:?}");
//! }
//! # }
//! ```
//!
//! Owns what "implements the store semantics" means in executable form (the semantics are
//! written down in `adaptor::store`'s module documentation; `MemoryStore` is the reference).
//! Must not: know which store it checks (only [`ThreadStore`]), or assert on speed — expiry
//! checks use short TTLs and wait past them.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use adaptor::SessionState;
use adaptor::store::{
    Finalize, Lease, ListQuery, MemoryStore, Query, RecordStatus, StoreError, ThreadRecord,
    ThreadStore, lease_target_for_key, new_record_id,
};
use serde::{Deserialize, Serialize};

/// A short lease for expiry checks, and how long to wait to be sure it has lapsed.
const SHORT_TTL: Duration = Duration::from_millis(200);
const PAST_SHORT_TTL: Duration = Duration::from_millis(500);
/// A lease that cannot lapse during a check.
const LONG_TTL: Duration = Duration::from_secs(600);

/// A time with millisecond precision (what every store keeps).
pub fn at_millis(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

/// A complete active record of `key` with distinctive field values.
pub fn record(id: &str, key: &str, updated_ms: u64) -> ThreadRecord {
    let mut data = BTreeMap::new();
    data.insert("session".to_owned(), format!("s-{id}"));
    data.insert(
        "quote\"and\\slash".to_owned(),
        "line\nbreak\ttab \u{0} nul ✓".to_owned(),
    );
    data.insert(String::new(), "empty key".to_owned());
    ThreadRecord {
        id: id.to_owned(),
        key: key.to_owned(),
        status: RecordStatus::Active,
        driver: "reference".to_owned(),
        component: "cd".repeat(32),
        fingerprint: format!("sha256:{}", "ab".repeat(32)),
        state: SessionState {
            codec: "reference/v1".to_owned(),
            resume_id: format!("resume-{id}"),
            display_id: Some(format!("display {id}")),
            data,
        },
        parent_id: None,
        turns: 1,
        created_at: at_millis(1_700_000_000_123),
        updated_at: at_millis(updated_ms),
    }
}

/// A plain finalize of `record` (no archive, no CAS, no leases).
pub fn save(record: ThreadRecord) -> Finalize {
    Finalize {
        record,
        archive_previous: None,
        require_key_absent: false,
        leases: vec![],
    }
}

async fn get(store: &dyn ThreadStore, query: Query) -> Option<ThreadRecord> {
    store
        .resolve(&query)
        .await
        .unwrap_or_else(|e| panic!("{}: resolve {query:?}: {e}", store.kind()))
}

async fn by_key(store: &dyn ThreadStore, key: &str) -> Option<ThreadRecord> {
    get(store, Query::Key(key.to_owned())).await
}

async fn by_id(store: &dyn ThreadStore, id: &str) -> Option<ThreadRecord> {
    get(store, Query::Id(id.to_owned())).await
}

async fn list(store: &dyn ThreadStore, query: ListQuery) -> Vec<ThreadRecord> {
    store
        .list(&query)
        .await
        .unwrap_or_else(|e| panic!("{}: list {query:?}: {e}", store.kind()))
}

async fn finalize_ok(store: &dyn ThreadStore, request: Finalize) {
    let id = request.record.id.clone();
    store
        .finalize(request)
        .await
        .unwrap_or_else(|e| panic!("{}: finalize {id}: {e}", store.kind()));
}

async fn acquire(store: &dyn ThreadStore, target: &str, owner: &str, ttl: Duration) -> Lease {
    store
        .acquire_lease(target, owner, ttl)
        .await
        .unwrap_or_else(|e| panic!("{}: acquire {target:?} as {owner}: {e}", store.kind()))
}

fn ids(records: &[ThreadRecord]) -> Vec<&str> {
    records.iter().map(|r| r.id.as_str()).collect()
}

fn assert_lease_lost<T: std::fmt::Debug>(
    store: &dyn ThreadStore,
    what: &str,
    result: Result<T, StoreError>,
    target: &str,
) {
    match result {
        Err(StoreError::LeaseLost { target: t }) => {
            assert_eq!(t, target, "{}: {what}", store.kind())
        }
        other => panic!(
            "{}: {what}: expected LeaseLost on {target:?}, got {other:?}",
            store.kind()
        ),
    }
}

/// Resolving what was never stored finds nothing (by key and by id).
pub async fn resolve_missing_is_none(store: &dyn ThreadStore) {
    assert_eq!(by_key(store, "nobody").await, None);
    assert_eq!(by_id(store, "thr-missing").await, None);
    assert_eq!(
        list(
            store,
            ListQuery {
                include_archived: true,
                ..Default::default()
            }
        )
        .await,
        vec![]
    );
}

/// Every field survives a finalize/resolve round trip, by key and by id: times to the
/// millisecond, the data map (odd characters included), `display_id` None and Some,
/// `parent_id` None and Some, large turn counts.
pub async fn finalize_round_trips_every_field(store: &dyn ThreadStore) {
    let plain = record("thr-plain", "key-plain", 1_700_000_000_457);
    let mut odd = record("thr-odd", "key-odd", 1_700_000_001_001);
    odd.state.display_id = None;
    odd.state.data = BTreeMap::new();
    odd.parent_id = Some("thr-plain".to_owned());
    odd.turns = u64::try_from(i64::MAX).expect("fits");
    odd.created_at = at_millis(1);
    odd.driver = "claude".to_owned();
    let mut many = record("thr-many", "key-many", 1_700_000_002_999);
    many.state.data = (0..200)
        .map(|i| (format!("k{i:03}"), "v".repeat(i)))
        .collect();
    for r in [&plain, &odd, &many] {
        finalize_ok(store, save(r.clone())).await;
    }
    for r in [&plain, &odd, &many] {
        assert_eq!(
            by_key(store, &r.key).await.as_ref(),
            Some(r),
            "{}: by key",
            store.kind()
        );
        assert_eq!(
            by_id(store, &r.id).await.as_ref(),
            Some(r),
            "{}: by id",
            store.kind()
        );
    }
}

/// Keys are opaque bytes: NUL, Unicode (not normalised), case, trailing space, `a:b` vs `a`,
/// the empty key — all distinct, all round-trip, and their lease targets are distinct.
pub async fn keys_are_opaque(store: &dyn ThreadStore) {
    let keys = [
        "a",
        "A",
        "a ",
        " a",
        "a:b",
        "a\0",
        "a\0b",
        "\0",
        "",
        "é",
        "e\u{301}",
        "ключ",
        "🧵",
        "thread-key:a",
        "a/b",
        "a%00",
        "a\\0",
    ];
    for (i, key) in keys.iter().enumerate() {
        let mut r = record(&format!("thr-key-{i}"), key, 1_700_000_000_000 + i as u64);
        r.state.resume_id = format!("resume for {key:?}");
        finalize_ok(store, save(r)).await;
    }
    for (i, key) in keys.iter().enumerate() {
        let found = by_key(store, key)
            .await
            .unwrap_or_else(|| panic!("{}: key {key:?} not found", store.kind()));
        assert_eq!(
            found.id,
            format!("thr-key-{i}"),
            "{}: key {key:?}",
            store.kind()
        );
        assert_eq!(found.key, *key, "{}: key {key:?} round trip", store.kind());
        let only = list(
            store,
            ListQuery {
                key: Some((*key).to_owned()),
                ..Default::default()
            },
        )
        .await;
        assert_eq!(
            ids(&only),
            vec![found.id.as_str()],
            "{}: list by key {key:?}",
            store.kind()
        );
    }
    let all = list(store, ListQuery::default()).await;
    assert_eq!(
        all.len(),
        keys.len(),
        "{}: every key kept its own active record",
        store.kind()
    );
    // Lease targets: each key's lease is independent of every other key's.
    let mut leases = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        leases.push(
            acquire(
                store,
                &lease_target_for_key(key),
                &format!("owner-{i}"),
                LONG_TTL,
            )
            .await,
        );
    }
    for (i, key) in keys.iter().enumerate() {
        match store
            .acquire_lease(&lease_target_for_key(key), "intruder", LONG_TTL)
            .await
        {
            Err(StoreError::Busy { holder, .. }) => {
                assert_eq!(
                    holder,
                    format!("owner-{i}"),
                    "{}: key {key:?}",
                    store.kind()
                )
            }
            other => panic!(
                "{}: key {key:?}: expected Busy, got {other:?}",
                store.kind()
            ),
        }
    }
    for lease in &leases {
        store.release_lease(lease).await.expect("release");
    }
}

/// Finalizing the same record id again updates it in place (one record, new contents).
pub async fn continuing_updates_in_place(store: &dyn ThreadStore) {
    let first = record("thr-cont", "key-cont", 1_700_000_000_100);
    finalize_ok(store, save(first.clone())).await;
    let mut second = first.clone();
    second.turns = 2;
    second.updated_at = at_millis(1_700_000_000_200);
    second.state.resume_id = "resume-2".to_owned();
    second.state.display_id = None;
    second.state.data = BTreeMap::from([("only".to_owned(), "this".to_owned())]);
    finalize_ok(store, save(second.clone())).await;
    assert_eq!(by_key(store, "key-cont").await, Some(second.clone()));
    let all = list(
        store,
        ListQuery {
            include_archived: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(all, vec![second], "{}: one record, updated", store.kind());
}

/// A fresh record with `archive_previous` replaces the old one; binding a key without
/// `archive_previous` also archives its other active record: never two active per key. A
/// missing `archive_previous` fails with NotFound and writes nothing.
pub async fn fresh_record_archives_previous(store: &dyn ThreadStore) {
    let old = record("thr-old", "key-fresh", 1_700_000_000_100);
    finalize_ok(store, save(old.clone())).await;
    let new = record("thr-new", "key-fresh", 1_700_000_000_200);
    finalize_ok(
        store,
        Finalize {
            archive_previous: Some("thr-old".to_owned()),
            ..save(new.clone())
        },
    )
    .await;
    assert_eq!(by_key(store, "key-fresh").await, Some(new.clone()));
    let archived = by_id(store, "thr-old").await.expect("old record kept");
    assert_eq!(archived.status, RecordStatus::Archived);
    assert_eq!(archived.state, old.state, "archiving keeps the contents");
    // Without archive_previous: the key's active record is archived all the same.
    let newer = record("thr-newer", "key-fresh", 1_700_000_000_300);
    finalize_ok(store, save(newer.clone())).await;
    assert_eq!(by_key(store, "key-fresh").await, Some(newer.clone()));
    assert_eq!(
        by_id(store, "thr-new").await.map(|r| r.status),
        Some(RecordStatus::Archived)
    );
    let active = list(
        store,
        ListQuery {
            key: Some("key-fresh".into()),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        ids(&active),
        vec!["thr-newer"],
        "{}: one active record per key",
        store.kind()
    );
    let every = list(
        store,
        ListQuery {
            key: Some("key-fresh".into()),
            include_archived: true,
            ..Default::default()
        },
    )
    .await;
    // Archiving stamps the binding record's updated_at; equal times are ordered by id.
    assert_eq!(ids(&every), vec!["thr-new", "thr-newer", "thr-old"]);
    // A missing archive_previous: NotFound, and nothing is written.
    let ghost = record("thr-ghost", "key-fresh", 1_700_000_000_400);
    match store
        .finalize(Finalize {
            archive_previous: Some("thr-nope".to_owned()),
            ..save(ghost)
        })
        .await
    {
        Err(StoreError::NotFound { id }) => assert_eq!(id, "thr-nope"),
        other => panic!("{}: expected NotFound, got {other:?}", store.kind()),
    }
    assert_eq!(
        by_id(store, "thr-ghost").await,
        None,
        "{}: nothing written",
        store.kind()
    );
    assert_eq!(by_key(store, "key-fresh").await, Some(newer));
}

/// `require_key_absent`: fine on a free key and when continuing the key's own record;
/// AlreadyExists (writing nothing) when another record holds the key.
pub async fn require_key_absent_is_compare_and_set(store: &dyn ThreadStore) {
    let base = record("thr-base", "key-cas", 1_700_000_000_100);
    finalize_ok(
        store,
        Finalize {
            require_key_absent: true,
            ..save(base.clone())
        },
    )
    .await;
    let mut fork = record("thr-fork", "key-cas", 1_700_000_000_200);
    fork.parent_id = Some("thr-base".to_owned());
    match store
        .finalize(Finalize {
            require_key_absent: true,
            ..save(fork.clone())
        })
        .await
    {
        Err(StoreError::AlreadyExists { key }) => assert_eq!(key, "key-cas"),
        other => panic!("{}: expected AlreadyExists, got {other:?}", store.kind()),
    }
    assert_eq!(
        by_id(store, "thr-fork").await,
        None,
        "{}: nothing written",
        store.kind()
    );
    assert_eq!(by_key(store, "key-cas").await, Some(base.clone()));
    // Continuing the key's own record is not a conflict.
    let mut again = base.clone();
    again.turns = 2;
    finalize_ok(
        store,
        Finalize {
            require_key_absent: true,
            ..save(again.clone())
        },
    )
    .await;
    assert_eq!(by_key(store, "key-cas").await, Some(again));
    // The fork onto a free key succeeds.
    fork.key = "key-cas-fork".to_owned();
    finalize_ok(
        store,
        Finalize {
            require_key_absent: true,
            ..save(fork.clone())
        },
    )
    .await;
    assert_eq!(by_key(store, "key-cas-fork").await, Some(fork));
    // Once the key's record is archived, the key is free again.
    store.archive("thr-base", &[]).await.expect("archive");
    let mut late = record("thr-late", "key-cas", 1_700_000_000_300);
    late.parent_id = Some("thr-base".to_owned());
    finalize_ok(
        store,
        Finalize {
            require_key_absent: true,
            ..save(late.clone())
        },
    )
    .await;
    assert_eq!(by_key(store, "key-cas").await, Some(late));
}

/// `archive`: unbinds the key, keeps the record (archived), is idempotent, NotFound for a
/// missing id.
pub async fn archive_unbinds_and_is_idempotent(store: &dyn ThreadStore) {
    let r = record("thr-arch", "key-arch", 1_700_000_000_100);
    finalize_ok(store, save(r.clone())).await;
    store.archive("thr-arch", &[]).await.expect("archive");
    assert_eq!(
        by_key(store, "key-arch").await,
        None,
        "{}: key unbound",
        store.kind()
    );
    let kept = by_id(store, "thr-arch").await.expect("record kept");
    assert_eq!(kept.status, RecordStatus::Archived);
    assert_eq!(kept.state, r.state);
    store
        .archive("thr-arch", &[])
        .await
        .expect("archiving again is a no-op");
    assert_eq!(
        by_id(store, "thr-arch").await.map(|r| r.status),
        Some(RecordStatus::Archived)
    );
    match store.archive("thr-never", &[]).await {
        Err(StoreError::NotFound { id }) => assert_eq!(id, "thr-never"),
        other => panic!("{}: expected NotFound, got {other:?}", store.kind()),
    }
    assert_eq!(list(store, ListQuery::default()).await, vec![]);
    assert_eq!(
        list(
            store,
            ListQuery {
                include_archived: true,
                ..Default::default()
            }
        )
        .await
        .len(),
        1
    );
}

/// `list`: active only by default, archived on request, by key, limited, newest first.
pub async fn list_filters_and_orders(store: &dyn ThreadStore) {
    // updated_at: a1 < b1 < a2 < c1; a1 archived by a2.
    finalize_ok(store, save(record("thr-a1", "key-a", 1_700_000_000_100))).await;
    finalize_ok(store, save(record("thr-b1", "key-b", 1_700_000_000_200))).await;
    finalize_ok(
        store,
        Finalize {
            archive_previous: Some("thr-a1".into()),
            ..save(record("thr-a2", "key-a", 1_700_000_000_300))
        },
    )
    .await;
    finalize_ok(store, save(record("thr-c1", "key-c", 1_700_000_000_400))).await;
    let active = list(store, ListQuery::default()).await;
    assert_eq!(
        ids(&active),
        vec!["thr-c1", "thr-a2", "thr-b1"],
        "{}",
        store.kind()
    );
    let every = list(
        store,
        ListQuery {
            include_archived: true,
            ..Default::default()
        },
    )
    .await;
    // thr-a1 was archived with thr-a2's updated_at; equal times are ordered by id.
    assert_eq!(
        ids(&every),
        vec!["thr-c1", "thr-a1", "thr-a2", "thr-b1"],
        "{}",
        store.kind()
    );
    let key_a = list(
        store,
        ListQuery {
            key: Some("key-a".into()),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(ids(&key_a), vec!["thr-a2"]);
    let key_a_all = list(
        store,
        ListQuery {
            key: Some("key-a".into()),
            include_archived: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(ids(&key_a_all), vec!["thr-a1", "thr-a2"]);
    let two = list(
        store,
        ListQuery {
            limit: Some(2),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(ids(&two), vec!["thr-c1", "thr-a2"]);
    let none = list(
        store,
        ListQuery {
            limit: Some(0),
            include_archived: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(none, vec![]);
    let missing = list(
        store,
        ListQuery {
            key: Some("key-z".into()),
            include_archived: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(missing, vec![]);
}

/// Leases: acquire; Busy (naming the holder) for another owner; the same owner re-acquires
/// with a new token and the old token stops being current (renew, finalize, release);
/// renew extends past the original expiry.
pub async fn leases_exclude_and_rotate_tokens(store: &dyn ThreadStore) {
    let target = lease_target_for_key("key-lease");
    let first = acquire(store, &target, "alice", LONG_TTL).await;
    assert_eq!(
        (first.target.as_str(), first.owner.as_str()),
        (target.as_str(), "alice")
    );
    assert!(!first.token.is_empty());
    match store.acquire_lease(&target, "bob", LONG_TTL).await {
        Err(StoreError::Busy { target: t, holder }) => {
            assert_eq!((t.as_str(), holder.as_str()), (target.as_str(), "alice"))
        }
        other => panic!("{}: expected Busy, got {other:?}", store.kind()),
    }
    // Same owner: taken over with a new token; the old one is no longer current.
    let second = acquire(store, &target, "alice", LONG_TTL).await;
    assert_ne!(second.token, first.token, "{}: a new token", store.kind());
    assert_lease_lost(
        store,
        "renew with the old token",
        store.renew_lease(&first, LONG_TTL).await,
        &target,
    );
    let r = record("thr-lease", "key-lease", 1_700_000_000_100);
    assert_lease_lost(
        store,
        "finalize with the old token",
        store
            .finalize(Finalize {
                leases: vec![first.clone()],
                ..save(r.clone())
            })
            .await,
        &target,
    );
    assert_eq!(
        by_id(store, "thr-lease").await,
        None,
        "{}: nothing written",
        store.kind()
    );
    // Releasing the old token leaves the new lease alone.
    store.release_lease(&first).await.expect("release old");
    assert!(matches!(
        store.acquire_lease(&target, "bob", LONG_TTL).await,
        Err(StoreError::Busy { .. })
    ));
    // The current lease works.
    finalize_ok(
        store,
        Finalize {
            leases: vec![second.clone()],
            ..save(r.clone())
        },
    )
    .await;
    assert_eq!(by_key(store, "key-lease").await, Some(r));
    // Renew extends: a short lease renewed for long outlives its original expiry.
    let short_target = lease_target_for_key("key-renew");
    let short = acquire(store, &short_target, "carol", SHORT_TTL).await;
    let renewed = store.renew_lease(&short, LONG_TTL).await.expect("renew");
    assert_eq!(
        renewed.token,
        short.token,
        "{}: renew keeps the token",
        store.kind()
    );
    assert_eq!(renewed.owner, "carol");
    assert!(
        renewed.expires_at > short.expires_at,
        "{}: later expiry",
        store.kind()
    );
    tokio::time::sleep(PAST_SHORT_TTL).await;
    match store.acquire_lease(&short_target, "dave", LONG_TTL).await {
        Err(StoreError::Busy { holder, .. }) => assert_eq!(holder, "carol"),
        other => panic!("{}: the renewed lease lapsed: {other:?}", store.kind()),
    }
    store
        .renew_lease(&renewed, LONG_TTL)
        .await
        .expect("renew again");
    store.release_lease(&renewed).await.expect("release");
    store.release_lease(&second).await.expect("release");
}

/// An expired lease is lost even when nobody took it: renew, finalize and archive fail with
/// LeaseLost and write nothing; the same owner can take it again.
pub async fn expired_lease_is_lost_even_untaken(store: &dyn ThreadStore) {
    let existing = record("thr-exp-old", "key-exp", 1_700_000_000_100);
    finalize_ok(store, save(existing.clone())).await;
    let target = lease_target_for_key("key-exp");
    let lease = acquire(store, &target, "alice", SHORT_TTL).await;
    tokio::time::sleep(PAST_SHORT_TTL).await;
    assert_lease_lost(
        store,
        "renew after expiry",
        store.renew_lease(&lease, LONG_TTL).await,
        &target,
    );
    let fresh = record("thr-exp-new", "key-exp", 1_700_000_000_200);
    assert_lease_lost(
        store,
        "finalize after expiry",
        store
            .finalize(Finalize {
                archive_previous: Some("thr-exp-old".into()),
                leases: vec![lease.clone()],
                ..save(fresh)
            })
            .await,
        &target,
    );
    assert_lease_lost(
        store,
        "archive after expiry",
        store
            .archive("thr-exp-old", std::slice::from_ref(&lease))
            .await,
        &target,
    );
    assert_eq!(
        by_id(store, "thr-exp-new").await,
        None,
        "{}: nothing written",
        store.kind()
    );
    assert_eq!(
        by_key(store, "key-exp").await,
        Some(existing),
        "{}: old state kept",
        store.kind()
    );
    let again = acquire(store, &target, "alice", LONG_TTL).await;
    assert_ne!(again.token, lease.token);
    store.release_lease(&again).await.expect("release");
}

/// Another owner takes an expired lease over; the first owner's renew / finalize / archive
/// then fail with LeaseLost and write nothing, and its release leaves the new lease alone.
pub async fn takeover_after_expiry_fences_the_old_owner(store: &dyn ThreadStore) {
    let existing = record("thr-take", "key-take", 1_700_000_000_100);
    finalize_ok(store, save(existing.clone())).await;
    let target = lease_target_for_key("key-take");
    let old = acquire(store, &target, "alice", SHORT_TTL).await;
    tokio::time::sleep(PAST_SHORT_TTL).await;
    let new = acquire(store, &target, "bob", LONG_TTL).await;
    assert_eq!(new.owner, "bob");
    assert_ne!(new.token, old.token);
    assert_lease_lost(
        store,
        "renew by the old owner",
        store.renew_lease(&old, LONG_TTL).await,
        &target,
    );
    let mut stale = existing.clone();
    stale.turns = 99;
    assert_lease_lost(
        store,
        "finalize by the old owner",
        store
            .finalize(Finalize {
                leases: vec![old.clone()],
                ..save(stale)
            })
            .await,
        &target,
    );
    assert_lease_lost(
        store,
        "archive by the old owner",
        store.archive("thr-take", std::slice::from_ref(&old)).await,
        &target,
    );
    assert_eq!(
        by_key(store, "key-take").await,
        Some(existing.clone()),
        "{}: nothing written",
        store.kind()
    );
    store
        .release_lease(&old)
        .await
        .expect("releasing a lost lease is fine");
    match store.acquire_lease(&target, "carol", LONG_TTL).await {
        Err(StoreError::Busy { holder, .. }) => assert_eq!(holder, "bob", "{}", store.kind()),
        other => panic!(
            "{}: the old owner's release removed the new lease: {other:?}",
            store.kind()
        ),
    }
    // The new owner's lease is current.
    let mut next = existing;
    next.turns = 2;
    finalize_ok(
        store,
        Finalize {
            leases: vec![new.clone()],
            ..save(next.clone())
        },
    )
    .await;
    store
        .archive("thr-take", std::slice::from_ref(&new))
        .await
        .expect("archive under the lease");
    assert_eq!(by_key(store, "key-take").await, None);
    store.release_lease(&new).await.expect("release");
}

/// Releasing is idempotent, and a released target is free for anyone at once.
pub async fn release_is_idempotent(store: &dyn ThreadStore) {
    let target = lease_target_for_key("key-rel");
    let lease = acquire(store, &target, "alice", LONG_TTL).await;
    store.release_lease(&lease).await.expect("release");
    store.release_lease(&lease).await.expect("release again");
    assert_lease_lost(
        store,
        "renew after release",
        store.renew_lease(&lease, LONG_TTL).await,
        &target,
    );
    let bob = acquire(store, &target, "bob", LONG_TTL).await;
    store
        .release_lease(&lease)
        .await
        .expect("alice's stale release");
    match store.acquire_lease(&target, "carol", LONG_TTL).await {
        Err(StoreError::Busy { holder, .. }) => assert_eq!(holder, "bob"),
        other => panic!("{}: expected Busy, got {other:?}", store.kind()),
    }
    store.release_lease(&bob).await.expect("release");
}

/// A finalize under several leases writes nothing when any one of them is lost (and names
/// that one).
pub async fn finalize_with_one_lost_lease_writes_nothing(store: &dyn ThreadStore) {
    let old = record("thr-multi-old", "key-multi", 1_700_000_000_100);
    finalize_ok(store, save(old.clone())).await;
    let good_target = lease_target_for_key("key-multi");
    let lost_target = lease_target_for_key("key-multi-parent");
    let good = acquire(store, &good_target, "alice", LONG_TTL).await;
    let lost = acquire(store, &lost_target, "alice", LONG_TTL).await;
    store.release_lease(&lost).await.expect("release");
    let new = record("thr-multi-new", "key-multi", 1_700_000_000_200);
    assert_lease_lost(
        store,
        "finalize with one released lease",
        store
            .finalize(Finalize {
                archive_previous: Some("thr-multi-old".into()),
                leases: vec![good.clone(), lost],
                ..save(new.clone())
            })
            .await,
        &lost_target,
    );
    assert_eq!(by_id(store, "thr-multi-new").await, None);
    assert_eq!(
        by_key(store, "key-multi").await,
        Some(old),
        "{}: old state kept",
        store.kind()
    );
    finalize_ok(
        store,
        Finalize {
            archive_previous: Some("thr-multi-old".into()),
            leases: vec![good.clone()],
            ..save(new.clone())
        },
    )
    .await;
    assert_eq!(by_key(store, "key-multi").await, Some(new));
    store.release_lease(&good).await.expect("release");
}

/// A single-store check: give it a fresh, empty store; it panics naming what is wrong.
pub type StoreCheck = for<'a> fn(&'a dyn ThreadStore) -> Pin<Box<dyn Future<Output = ()> + 'a>>;

macro_rules! checks {
    ($($name:ident),* $(,)?) => {
        /// Every single-store check, by name, in a stable order.
        pub const CHECKS: &[(&str, StoreCheck)] = &[
            $((stringify!($name), |store: &dyn ThreadStore| -> Pin<Box<dyn Future<Output = ()> + '_>> {
                Box::pin($name(store))
            })),*
        ];
    };
}

checks!(
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

/// Run every check of [`CHECKS`], each on a fresh store from `fresh`, and report each one:
/// `Ok(())`, or `Err` with its panic message. Nothing stops at the first failure.
pub async fn run_checks<S, F, Fut>(mut fresh: F) -> Vec<(&'static str, Result<(), String>)>
where
    S: ThreadStore,
    F: FnMut() -> Fut,
    Fut: Future<Output = S>,
{
    use futures::FutureExt;
    let mut report = Vec::new();
    for (name, check) in CHECKS {
        let store = fresh().await;
        let outcome = std::panic::AssertUnwindSafe(check(&store))
            .catch_unwind()
            .await
            .map_err(|panic| {
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "the check panicked".to_owned())
            });
        report.push((*name, outcome));
    }
    report
}

// ---------------------------------------------------------------------------------------
// Multi-process checks.

/// One racer's settings.
#[derive(Debug, Clone)]
pub struct RaceConfig {
    /// Racer number (for the owner name).
    pub worker: usize,
    /// The contended thread key.
    pub key: String,
    /// The record every section increments.
    pub record_id: String,
    /// Shared directory for the exclusivity marker.
    pub dir: PathBuf,
    /// Clean critical sections to complete.
    pub rounds: u32,
    /// Lease TTL.
    pub ttl: Duration,
    /// First hold a lease past its expiry and report how renew/finalize/archive fail.
    pub stale_hold: bool,
}

/// One critical section: the lease token, whether its finalize landed, and whether the lease
/// was still current (renewed) after the section ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Section {
    /// The lease token of the section.
    pub token: String,
    /// When the lease expires as granted (store clock, microseconds since the epoch).
    pub expires_us: u64,
    /// The counter finalize succeeded.
    pub finalized: bool,
    /// The lease was current after the marker was removed: nobody else held the target at any
    /// point of the section.
    pub current_after: bool,
}

/// A racer found another's marker while holding the lease.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Overlap {
    /// The observer's lease token.
    pub token: String,
    /// The marker's content: the holder's token.
    pub holder: String,
    /// When the observer's lease was granted (store clock: its expiry minus the TTL,
    /// microseconds since the epoch).
    pub acquired_us: u64,
    /// The observer's lease was still current after it looked.
    pub current_after: bool,
}

/// What holding a lease past its expiry gave: the outcome names (`lease-lost`, `ok`, …).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StaleHold {
    /// Renew after expiry.
    pub renew: String,
    /// Finalize (a bogus counter) after expiry.
    pub finalize: String,
    /// Archive of the counter record after expiry.
    pub archive: String,
}

/// One racer's report (one JSON line on the racer's stdout).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RaceReport {
    /// Racer number.
    pub worker: usize,
    /// Every section it ran.
    pub sections: Vec<Section>,
    /// Markers it found.
    pub overlaps: Vec<Overlap>,
    /// The stale-hold outcome, if asked.
    pub stale: Option<StaleHold>,
    /// Acquisitions refused with Busy.
    pub busy: u64,
}

/// The contended key of the races (no NUL: it travels as a command-line argument).
pub const RACE_KEY: &str = "race key ✓";

/// The counter value written by a stale (expired) lease: it must never land.
pub const STALE_COUNTER: u64 = 1_000_000_000;

fn outcome<T>(result: &Result<T, StoreError>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(StoreError::LeaseLost { .. }) => "lease-lost".into(),
        Err(e) => format!("error: {e}"),
    }
}

fn counter_record(config: &RaceConfig, value: u64, writer: &str) -> ThreadRecord {
    let mut r = record(&config.record_id, &config.key, 1_700_000_000_000 + value);
    r.turns = value;
    r.state.data = BTreeMap::from([
        ("counter".to_owned(), value.to_string()),
        ("writer".to_owned(), writer.to_owned()),
    ]);
    r
}

/// Tiny pseudo-random pause (0..=max ms) so sections interleave differently each round.
async fn jitter(seed: &mut u64, max_ms: u64) {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    let ms = *seed % (max_ms + 1);
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

async fn acquire_retrying(
    store: &dyn ThreadStore,
    target: &str,
    owner: &str,
    ttl: Duration,
    busy: &mut u64,
    seed: &mut u64,
) -> Result<Lease, String> {
    loop {
        match store.acquire_lease(target, owner, ttl).await {
            Ok(lease) => return Ok(lease),
            Err(StoreError::Busy { .. }) => {
                *busy += 1;
                jitter(seed, 3).await;
            }
            Err(e) => return Err(format!("acquire: {e}")),
        }
    }
}

/// A racer: `rounds` clean critical sections on `key`. A section holds the lease, publishes
/// an exclusivity marker (`link(2)`, exclusive like `O_EXCL` but with its content — the
/// holder's token — in place atomically), increments the counter record under the lease,
/// removes the marker, then renews to learn whether the lease stayed current throughout.
pub async fn race_worker(
    store: &dyn ThreadStore,
    config: &RaceConfig,
) -> Result<RaceReport, String> {
    let owner = format!("racer-{}-{}", config.worker, std::process::id());
    let target = lease_target_for_key(&config.key);
    let marker = config.dir.join("holder");
    let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ ((config.worker as u64 + 1) * 0x1000_0001);
    let mut report = RaceReport {
        worker: config.worker,
        sections: vec![],
        overlaps: vec![],
        stale: None,
        busy: 0,
    };
    if config.stale_hold {
        let lease = acquire_retrying(
            store,
            &target,
            &owner,
            config.ttl,
            &mut report.busy,
            &mut seed,
        )
        .await?;
        // Wait past the expiry (others may take the lease meanwhile; either way it is lost).
        tokio::time::sleep(config.ttl * 2 + Duration::from_millis(200)).await;
        let finalize = store
            .finalize(Finalize {
                leases: vec![lease.clone()],
                ..save(counter_record(config, STALE_COUNTER, &owner))
            })
            .await;
        let renew = store.renew_lease(&lease, config.ttl).await;
        let archive = store
            .archive(&config.record_id, std::slice::from_ref(&lease))
            .await;
        report.stale = Some(StaleHold {
            renew: outcome(&renew),
            finalize: outcome(&finalize),
            archive: outcome(&archive),
        });
        store
            .release_lease(&lease)
            .await
            .map_err(|e| format!("release: {e}"))?;
    }
    let mut clean = 0;
    while clean < config.rounds {
        let lease = acquire_retrying(
            store,
            &target,
            &owner,
            config.ttl,
            &mut report.busy,
            &mut seed,
        )
        .await?;
        let staged = config.dir.join(format!("staged-{}", lease.token));
        std::fs::write(&staged, &lease.token)
            .map_err(|e| format!("write {}: {e}", staged.display()))?;
        let linked = std::fs::hard_link(&staged, &marker);
        std::fs::remove_file(&staged).map_err(|e| format!("remove {}: {e}", staged.display()))?;
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let holder = std::fs::read_to_string(&marker).unwrap_or_else(|_| "<gone>".into());
                let current_after = current(store, &lease, config.ttl).await?;
                report.overlaps.push(Overlap {
                    token: lease.token.clone(),
                    holder,
                    acquired_us: micros(lease.expires_at) - micros_of(config.ttl),
                    current_after,
                });
                store
                    .release_lease(&lease)
                    .await
                    .map_err(|e| format!("release: {e}"))?;
                continue;
            }
            Err(e) => return Err(format!("link {}: {e}", marker.display())),
        }
        let value = match store.resolve(&Query::Key(config.key.clone())).await {
            Ok(Some(r)) => r.turns,
            Ok(None) => 0,
            Err(e) => return Err(format!("resolve: {e}")),
        };
        jitter(&mut seed, 2).await;
        let finalized = match store
            .finalize(Finalize {
                leases: vec![lease.clone()],
                ..save(counter_record(config, value + 1, &owner))
            })
            .await
        {
            Ok(()) => true,
            Err(StoreError::LeaseLost { .. }) => false,
            Err(e) => return Err(format!("finalize: {e}")),
        };
        std::fs::remove_file(&marker).map_err(|e| format!("remove {}: {e}", marker.display()))?;
        let current_after = current(store, &lease, config.ttl).await?;
        store
            .release_lease(&lease)
            .await
            .map_err(|e| format!("release: {e}"))?;
        if finalized && current_after {
            clean += 1;
        }
        report.sections.push(Section {
            expires_us: micros(lease.expires_at),
            token: lease.token,
            finalized,
            current_after,
        });
    }
    Ok(report)
}

fn micros_of(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).expect("duration fits")
}

fn micros(t: SystemTime) -> u64 {
    micros_of(
        t.duration_since(SystemTime::UNIX_EPOCH)
            .expect("after the epoch"),
    )
}

/// Whether `lease` is still current (renewing it).
async fn current(store: &dyn ThreadStore, lease: &Lease, ttl: Duration) -> Result<bool, String> {
    match store.renew_lease(lease, ttl).await {
        Ok(_) => Ok(true),
        Err(StoreError::LeaseLost { .. }) => Ok(false),
        Err(e) => Err(format!("renew: {e}")),
    }
}

/// Judge a finished race: mutual exclusion, every finalize landed, everyone won, the stale
/// holder was fenced off.
pub async fn assert_race(
    store: &dyn ThreadStore,
    config: &RaceConfig,
    workers: usize,
    reports: &[RaceReport],
) {
    assert_eq!(
        reports.len(),
        workers,
        "{}: every racer reported",
        store.kind()
    );
    let sections: BTreeMap<&str, &Section> = reports
        .iter()
        .flat_map(|r| &r.sections)
        .map(|s| (s.token.as_str(), s))
        .collect();
    // Mutual exclusion, judged without trusting any timing of this machine. Finding another's
    // marker is only legitimate when that holder's lease had expired (a stalled holder):
    // - by the store's own clock, the observer's lease was granted no earlier than the
    //   holder's lease expired (a store that hands out a held lease fails here);
    // - and the two leases were not both current throughout (a holder whose lease was still
    //   current after its section saw nobody else take it).
    let mut excused = 0;
    for r in reports {
        for o in &r.overlaps {
            if let Some(holder) = sections.get(o.holder.as_str()) {
                assert!(
                    o.acquired_us >= holder.expires_us,
                    "{}: racer {} was granted the lease at {} µs while {} held it until {} µs",
                    store.kind(),
                    r.worker,
                    o.acquired_us,
                    o.holder,
                    holder.expires_us
                );
                assert!(
                    !(o.current_after && holder.current_after),
                    "{}: racer {} entered while {} held a current lease: {o:?}",
                    store.kind(),
                    r.worker,
                    o.holder
                );
            }
            excused += 1;
        }
    }
    let landed: u64 = reports
        .iter()
        .flat_map(|r| &r.sections)
        .filter(|s| s.finalized)
        .count() as u64;
    let busy: u64 = reports.iter().map(|r| r.busy).sum();
    eprintln!(
        "{}: race: {} sections ({landed} finalized), {busy} acquisitions refused as Busy, \
         {excused} excused overlaps",
        store.kind(),
        sections.len()
    );
    let final_record = by_key(store, &config.key)
        .await
        .expect("the counter record");
    assert_eq!(
        final_record.turns,
        landed,
        "{}: every successful finalize landed and only those (excused overlaps: {excused})",
        store.kind()
    );
    assert_eq!(
        final_record.state.data.get("counter"),
        Some(&landed.to_string())
    );
    for r in reports {
        let wins = r
            .sections
            .iter()
            .filter(|s| s.finalized && s.current_after)
            .count();
        assert!(wins >= 1, "{}: racer {} never won", store.kind(), r.worker);
        assert_eq!(
            wins,
            config.rounds as usize,
            "{}: racer {} wins",
            store.kind(),
            r.worker
        );
    }
    let stale: Vec<&StaleHold> = reports.iter().filter_map(|r| r.stale.as_ref()).collect();
    assert_eq!(
        stale.len(),
        1,
        "{}: one racer held past expiry",
        store.kind()
    );
    let stale = stale[0];
    assert_eq!(
        (
            stale.renew.as_str(),
            stale.finalize.as_str(),
            stale.archive.as_str()
        ),
        ("lease-lost", "lease-lost", "lease-lost"),
        "{}: a lease held past expiry is lost",
        store.kind()
    );
}

/// The in-process race for stores that cannot be shared between processes
/// ([`MemoryStore`]): the same workers on `workers` OS threads, each with its own runtime.
pub async fn race_in_threads(store: Arc<dyn ThreadStore>, workers: usize, rounds: u32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = RaceConfig {
        worker: 0,
        key: RACE_KEY.into(),
        record_id: new_record_id(),
        dir: dir.path().to_path_buf(),
        rounds,
        ttl: Duration::from_millis(1000),
        stale_hold: false,
    };
    let handles: Vec<_> = (0..workers)
        .map(|worker| {
            let store = Arc::clone(&store);
            let config = RaceConfig {
                worker,
                stale_hold: worker == 0,
                ..base.clone()
            };
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(race_worker(store.as_ref(), &config))
            })
        })
        .collect();
    let mut reports = Vec::new();
    for h in handles {
        reports.push(h.join().expect("racer thread").expect("racer"));
    }
    assert_race(store.as_ref(), &base, workers, &reports).await;
    assert_marker_dir_empty(dir.path());
}

fn assert_marker_dir_empty(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .expect("read marker dir")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "markers left behind: {left:?}");
}

/// The multi-process race: `workers` racer processes (`racer race …`) on the store `spec`,
/// judged by [`assert_race`] through a store opened from the same spec.
pub async fn race_processes<F, Fut>(racer: &Path, spec: &str, open: F, workers: usize, rounds: u32)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Box<dyn ThreadStore>, String>>,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let base = RaceConfig {
        worker: 0,
        key: RACE_KEY.into(),
        record_id: new_record_id(),
        dir: dir.path().to_path_buf(),
        rounds,
        ttl: Duration::from_millis(1000),
        stale_hold: false,
    };
    let mut children = Vec::new();
    for worker in 0..workers {
        let mut command = tokio::process::Command::new(racer);
        command
            .arg("race")
            .arg(spec)
            .arg(&base.key)
            .arg(&base.record_id)
            .arg(dir.path())
            .arg(worker.to_string())
            .arg(rounds.to_string())
            .arg(base.ttl.as_millis().to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        if worker == 0 {
            command.arg("--stale-hold");
        }
        children.push(command.spawn().expect("spawn racer"));
    }
    // A hang guard, not a speed assertion: a racer that never finishes fails the test.
    let outputs = tokio::time::timeout(
        Duration::from_secs(600),
        futures::future::join_all(children.into_iter().map(|c| c.wait_with_output())),
    )
    .await
    .expect("the racers finished");
    let mut reports = Vec::new();
    for (worker, out) in outputs.into_iter().enumerate() {
        let out = out.expect("racer output");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "racer {worker} failed ({}): {}{stdout}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        reports.push(
            serde_json::from_str::<RaceReport>(stdout.trim())
                .unwrap_or_else(|e| panic!("racer {worker}: bad report {stdout:?}: {e}")),
        );
    }
    let store = open().await.expect("open store");
    assert_race(store.as_ref(), &base, workers, &reports).await;
    assert_marker_dir_empty(dir.path());
}

/// Entries in each generation of the finalize-loop record.
pub const LOOP_ENTRIES: usize = 500;

/// The finalize loop (`racer finalize-loop …`): forever, finalize the next generation of the
/// key's record — usually continuing the same id, every third time a fresh record that
/// archives the previous one — each with [`LOOP_ENTRIES`] data entries all naming the
/// generation. Prints `ready` after the first commit.
pub async fn finalize_loop(store: &dyn ThreadStore, key: &str) -> Result<(), String> {
    use std::io::Write;
    let mut id = new_record_id();
    let mut previous: Option<String> = None;
    for generation in 0u64.. {
        if generation % 3 == 2 {
            previous = Some(std::mem::replace(&mut id, new_record_id()));
        }
        let mut r = record(&id, key, 1_700_000_000_000 + generation);
        r.turns = generation;
        r.state.resume_id = format!("gen-{generation}");
        r.state.data = (0..LOOP_ENTRIES)
            .map(|i| (format!("entry-{i:04}"), generation.to_string()))
            .collect();
        store
            .finalize(Finalize {
                archive_previous: previous.take(),
                ..save(r)
            })
            .await
            .map_err(|e| format!("finalize generation {generation}: {e}"))?;
        if generation == 0 {
            let mut stdout = std::io::stdout();
            writeln!(stdout, "ready")
                .and_then(|()| stdout.flush())
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Check a record written by [`finalize_loop`]: decodable, one generation throughout.
fn assert_one_generation(kind: &str, r: &ThreadRecord) {
    assert_eq!(
        r.state.data.len(),
        LOOP_ENTRIES,
        "{kind}: record {} entries",
        r.id
    );
    let generation = r.turns.to_string();
    assert_eq!(
        r.state.resume_id,
        format!("gen-{generation}"),
        "{kind}: {}",
        r.id
    );
    let mixed: Vec<_> = r
        .state
        .data
        .values()
        .filter(|v| **v != generation)
        .collect();
    assert!(
        mixed.is_empty(),
        "{kind}: record {} mixes generations: {} of {} entries differ",
        r.id,
        mixed.len(),
        LOOP_ENTRIES
    );
}

/// SIGKILL a finalize loop at varied moments, `kills` times; after each kill the key has
/// exactly one active record, every record is one whole generation, and the store still
/// accepts a finalize.
pub async fn kill_during_finalize<F, Fut>(racer: &Path, spec: &str, open: F, kills: u32)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Box<dyn ThreadStore>, String>>,
{
    let key = "killed loop ✓";
    let delays_ms = [0u64, 1, 3, 7, 15, 30, 55, 90, 140, 220];
    for round in 0..kills {
        let mut child = tokio::process::Command::new(racer)
            .arg("finalize-loop")
            .arg(spec)
            .arg(key)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn finalize loop");
        let mut stdout = child.stdout.take().expect("stdout");
        let mut line = [0u8; 6];
        let ready = tokio::time::timeout(Duration::from_secs(120), {
            use tokio::io::AsyncReadExt;
            stdout.read_exact(&mut line)
        })
        .await;
        if !matches!(ready, Ok(Ok(_))) || &line != b"ready\n" {
            let out = child.wait_with_output().await.expect("output");
            panic!(
                "round {round}: the finalize loop did not start ({ready:?}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(
            delays_ms[round as usize % delays_ms.len()],
        ))
        .await;
        let pid = child.id().expect("running") as libc::pid_t;
        // SAFETY: SIGKILL to our own child by pid.
        assert_eq!(
            unsafe { libc::kill(pid, libc::SIGKILL) },
            0,
            "kill -9 {pid}"
        );
        let status = child.wait().await.expect("wait");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL),
            "round {round}: the loop died of the kill, not of its own error"
        );
        let store = open().await.expect("reopen after the kill");
        let kind = store.kind();
        // A server-side store may still commit the killed client's last transaction (its
        // COMMIT was sent; the server finishes it before it notices the client is gone): the
        // key must have exactly one active record at every read, and the two reads agree
        // once that last commit has landed.
        let settle = std::time::Instant::now();
        let current = loop {
            let active = list(
                store.as_ref(),
                ListQuery {
                    key: Some(key.into()),
                    ..Default::default()
                },
            )
            .await;
            assert_eq!(
                active.len(),
                1,
                "{kind}: round {round}: one active record, got {}",
                active.len()
            );
            let current = by_key(store.as_ref(), key).await.expect("resolves");
            if current == active[0] {
                break current;
            }
            assert!(
                settle.elapsed() < Duration::from_secs(5),
                "{kind}: round {round}: the key's record and the active list still disagree 5 s after the kill ({} vs {})",
                current.state.resume_id,
                active[0].state.resume_id
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        for r in list(
            store.as_ref(),
            ListQuery {
                key: Some(key.into()),
                include_archived: true,
                ..Default::default()
            },
        )
        .await
        {
            assert_one_generation(kind, &r);
        }
        // The store still takes a finalize.
        let mut next = current.clone();
        next.turns = current.turns + 1;
        next.state.resume_id = format!("gen-{}", next.turns);
        next.state.data = (0..LOOP_ENTRIES)
            .map(|i| (format!("entry-{i:04}"), next.turns.to_string()))
            .collect();
        finalize_ok(store.as_ref(), save(next.clone())).await;
        assert_eq!(by_key(store.as_ref(), key).await, Some(next));
    }
}

/// A fresh in-memory store, shared (for the in-process race).
pub fn shared_memory_store() -> Arc<dyn ThreadStore> {
    Arc::new(MemoryStore::new())
}
