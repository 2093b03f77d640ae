//! Thread stores: where a [`Thread`](crate::Thread) keeps its provider session between runs.
//!
//! Owns the [`ThreadStore`] trait, its record and lease types, its typed errors, and the
//! lease-target encoding. Three implementations: [`MemoryStore`] (one process), [`SqliteStore`]
//! (the embedded default: one file, WAL mode, safe across processes on one machine) and
//! [`PostgresStore`] (many hosts). All three pass one conformance suite
//! (`adaptortest::store_suite`). Must not: run providers or know the pipeline; a store holds
//! resume points, fingerprints and leases only — never chat history.
//!
//! ## Semantics every store implements
//!
//! - **Records.** A [`ThreadRecord`] is one provider-session lineage: its id is stable while
//!   runs continue it; a fresh start (or a fallback after a rejected resume) makes a new
//!   record and archives the old one. At most one record per key is `active`.
//! - **Keys** are opaque strings compared byte for byte (no case folding, no Unicode
//!   normalisation, no trimming; any UTF-8 including NUL is allowed). Stores keep them as
//!   bytes (BLOB / BYTEA) so nothing is lost.
//! - **Leases** guard a target (see [`lease_target_for_key`]): acquiring fails with
//!   [`StoreError::Busy`] while another owner holds an unexpired lease; an expired lease, or
//!   one held by the same owner, is taken over with a **new token**. A lease is *current* when
//!   its token is the stored one and it has not expired: renewing or finalizing with a lease
//!   that is not current fails with [`StoreError::LeaseLost`] — also when it merely expired
//!   and nobody took it. Releasing is idempotent and only removes the caller's own token.
//! - **Finalize** is one atomic transaction: check every lease, check the key is free when
//!   asked (`require_key_absent`, for forks), save the record, archive `archive_previous`,
//!   and bind the key (archiving any other active record of that key). Either all of it
//!   happens or none of it; a crash mid-way leaves the old state.
//! - **Time** for leases is the store's clock: the process clock for memory and SQLite (one
//!   machine), the database server's `clock_timestamp()` for PostgreSQL (many hosts; not
//!   `now()`, which is frozen at the start of a transaction that may have waited for a lock).

mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

pub use crate::error::StoreError;
use crate::result::SessionState;

pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;

/// A boxed future returned by [`ThreadStore`] methods (the trait is object-safe so an
/// [`Agent`](crate::Agent) can hold any store as `Arc<dyn ThreadStore>`).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Whether a record is the one its key resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordStatus {
    /// The record its key resumes (at most one per key).
    Active,
    /// Replaced (fresh start, fallback) or archived by hand; kept for inspection.
    Archived,
}

impl RecordStatus {
    /// `active` / `archived`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordStatus::Active => "active",
            RecordStatus::Archived => "archived",
        }
    }

    /// Parse [`as_str`](Self::as_str)'s output.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "active" => Some(RecordStatus::Active),
            "archived" => Some(RecordStatus::Archived),
            _ => None,
        }
    }
}

/// One provider-session lineage of a thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadRecord {
    /// Record id (unique in the store; see [`new_record_id`]).
    pub id: String,
    /// The thread key it belongs to.
    pub key: String,
    /// Active or archived.
    pub status: RecordStatus,
    /// Driver name that wrote it.
    pub driver: String,
    /// sha256 (hex) of the driver component that wrote it: a thread resumes it only with the
    /// same component, unless the caller accepts the other one explicitly
    /// ([`AgentBuilder::accept_checkpoints_from`](crate::AgentBuilder::accept_checkpoints_from)).
    /// Empty for records written before components were recorded (accepted, and stamped by
    /// the next save).
    pub component: String,
    /// The thread fingerprint of the runs that wrote it (`sha256:<hex>`); a run with another
    /// fingerprint is refused before any process starts.
    pub fingerprint: String,
    /// The resume point (its `codec` names the encoding). A record is written only from a
    /// checkpoint the driver reported valid on a successful run.
    pub state: SessionState,
    /// The record this one was forked from.
    pub parent_id: Option<String>,
    /// Successful runs that wrote this record.
    pub turns: u64,
    /// Creation time.
    pub created_at: SystemTime,
    /// Last update.
    pub updated_at: SystemTime,
}

/// What to look up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// The active record bound to this key.
    Key(String),
    /// A record by id, whatever its status.
    Id(String),
}

/// Filter for [`ThreadStore::list`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// Include archived records (default: active only).
    pub include_archived: bool,
    /// Only records of this key.
    pub key: Option<String>,
    /// At most this many records (newest `updated_at` first); `None` = all.
    pub limit: Option<usize>,
}

/// A lease on a target (see [`lease_target_for_key`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// What is leased.
    pub target: String,
    /// Who holds it.
    pub owner: String,
    /// Changes on every acquisition; renew / finalize / release need the current one.
    pub token: String,
    /// When it lapses unless renewed (the store's clock).
    pub expires_at: SystemTime,
}

/// One atomic [`ThreadStore::finalize`] transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finalize {
    /// Insert or replace (by id) this record.
    pub record: ThreadRecord,
    /// Archive this record in the same transaction (the lineage being replaced).
    pub archive_previous: Option<String>,
    /// Fail with [`StoreError::AlreadyExists`] if `record.key` already has an active record
    /// other than `record.id` (compare-and-set, for forks).
    pub require_key_absent: bool,
    /// Leases that must all be current, or nothing is written ([`StoreError::LeaseLost`]).
    pub leases: Vec<Lease>,
}

/// Persistence of thread records and leases. Implementations must give every method the
/// semantics in this module's documentation; `adaptortest::store_suite` checks them (and any
/// third-party store can run the same checks).
pub trait ThreadStore: Send + Sync + std::fmt::Debug {
    /// Store kind, for messages (`memory`, `sqlite`, `postgres`).
    fn kind(&self) -> &'static str;

    /// Look a record up; `Ok(None)` when there is none.
    fn resolve<'a>(&'a self, query: &'a Query) -> StoreFuture<'a, Option<ThreadRecord>>;

    /// Records matching `query`, newest `updated_at` first.
    fn list<'a>(&'a self, query: &'a ListQuery) -> StoreFuture<'a, Vec<ThreadRecord>>;

    /// Save atomically (see [`Finalize`]).
    fn finalize(&self, request: Finalize) -> StoreFuture<'_, ()>;

    /// Archive the record `id` (and so unbind its key), provided every lease is current.
    /// Archiving an archived record is a no-op; a missing one is [`StoreError::NotFound`].
    fn archive<'a>(&'a self, id: &'a str, leases: &'a [Lease]) -> StoreFuture<'a, ()>;

    /// Take the lease on `target` for `ttl`.
    fn acquire_lease<'a>(
        &'a self,
        target: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Lease>;

    /// Extend a current lease by `ttl` from now.
    fn renew_lease<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> StoreFuture<'a, Lease>;

    /// Give a lease up (idempotent; a lease taken over by someone else is left alone).
    fn release_lease<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()>;
}

/// The lease target guarding a thread key. Targets are `<kind>:<rest>` with kinds that are
/// not prefixes of one another, so a key can never collide with another kind of target
/// whatever bytes it holds.
pub fn lease_target_for_key(key: &str) -> String {
    format!("thread-key:{key}")
}

/// A fresh, unique record id (`thr-` + 32 hex digits).
pub fn new_record_id() -> String {
    format!("thr-{}", unique_hex())
}

/// A fresh lease token.
pub(crate) fn new_token() -> String {
    unique_hex()
}

/// 128 unpredictable bits, as 32 hex digits (record ids, lease tokens, owner names).
fn unique_hex() -> String {
    format!("{:032x}", unique_bits())
}

/// 128 bits from the thread's cryptographic generator (ChaCha12, seeded by the OS), mixed
/// with the process id: the generator is not reseeded when a process forks, so an embedder
/// that forks after a first id would otherwise give both processes the same ids to come.
/// (It used to be the SHA-256 of time, pid, a counter and a stack address: a formatted
/// string and a hash on every turn's path, four times per thread turn.)
pub(crate) fn unique_bits() -> u128 {
    use rand::RngExt;
    rand::rng().random::<u128>() ^ u128::from(std::process::id())
}

/// A lease owner name unique to this process and call: `<host>:<pid>:<hex>`.
pub fn new_owner() -> String {
    // Read once per process: every thread run names an owner.
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let host = HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "host".into())
    });
    format!("{host}:{}:{}", std::process::id(), &unique_hex()[..12])
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// Milliseconds since the Unix epoch (stores keep times as integers).
pub(crate) fn to_millis(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// Inverse of [`to_millis`].
pub(crate) fn from_millis(ms: i64) -> SystemTime {
    if ms >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// Why a row whose `valid` column is false is refused: only valid checkpoints are written, so
/// such a row was edited outside the runtime and is not a resume point.
pub(crate) const INVALID_ROW: &str =
    "the row is marked not valid; records are written only from valid checkpoints";

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// The checkpoint's driver-private data as stored (JSON object text).
pub(crate) fn data_to_json(state: &SessionState) -> String {
    serde_json::to_string(&state.data).unwrap_or_else(|_| "{}".into())
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// Inverse of [`data_to_json`].
pub(crate) fn data_from_json(
    store: &'static str,
    id: &str,
    text: &str,
) -> Result<std::collections::BTreeMap<String, String>, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        store,
        id: id.to_owned(),
        message: format!("checkpoint data: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_lower_hex(s: &str) -> bool {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }

    #[test]
    fn ids_have_their_documented_shape_and_do_not_repeat() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let id = new_record_id();
            let hex = id.strip_prefix("thr-").expect("`thr-` prefix");
            assert_eq!(hex.len(), 32, "{id}");
            assert!(is_lower_hex(hex), "{id}");
            assert!(seen.insert(id), "a record id repeated");
            let token = new_token();
            assert_eq!(token.len(), 32, "{token}");
            assert!(seen.insert(token), "a lease token repeated");
        }
        let owner = new_owner();
        let parts: Vec<&str> = owner.rsplitn(3, ':').collect();
        assert_eq!(parts.len(), 3, "{owner}");
        assert_eq!(parts[0].len(), 12, "{owner}");
        assert_eq!(parts[1], std::process::id().to_string(), "{owner}");
        assert_ne!(new_owner(), owner, "owners differ per call");
        let run = crate::run::new_run_id();
        let hex = run.strip_prefix("run-").expect("`run-` prefix");
        assert!(hex.len() == 16 && is_lower_hex(hex), "{run}");
        assert_ne!(crate::run::new_run_id(), run);
    }
}
