//! [`SqliteStore`]: the embedded default store — one SQLite file, safe across processes on
//! one machine.
//!
//! Owns the SQLite schema (versioned with `PRAGMA user_version`), the connection settings
//! (WAL, `synchronous=FULL`, a busy timeout) and the translation of the store semantics (see
//! the [module documentation](super)) into SQL. Must not: block the async runtime (every
//! operation runs on tokio's blocking pool), interpret keys (they are BLOBs compared byte for
//! byte), or span hosts — SQLite file locking is only reliable on a local file system; use
//! [`PostgresStore`](super::PostgresStore) for many hosts.
//!
//! Choices:
//! - **`synchronous=FULL`**: in WAL mode `NORMAL` survives a process crash but may lose the
//!   last commits on power loss. A finalize happens once per run, so the extra fsync costs
//!   nothing noticeable, and a lost commit would silently resume an older provider session.
//! - **`BEGIN IMMEDIATE`** for every read-modify-write: the write lock is taken before
//!   anything is read, so two processes never both read a free lease and both take it (a
//!   deferred transaction would fail on upgrade instead of waiting).
//! - **Cancellation**: dropping an operation's future does not stop it once it runs on the
//!   blocking pool; it still commits or rolls back as a whole.
//! - **Lease time** is this process's wall clock in Unix milliseconds; every process sharing
//!   the file runs on the same machine, so it reads the same clock.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rusqlite::{Connection, OptionalExtension, Row, Transaction, TransactionBehavior, params};

use super::{
    Finalize, INVALID_ROW, Lease, ListQuery, Query, RecordStatus, StoreError, StoreFuture,
    ThreadRecord, ThreadStore, data_from_json, data_to_json, from_millis, new_token, to_millis,
};
use crate::result::SessionState;

const STORE: &str = "sqlite";

/// The schema version this build writes and reads (`PRAGMA user_version`).
pub(crate) const SCHEMA_VERSION: i64 = 2;

/// How long a statement waits for another process's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The environment variable overriding [`SqliteStore::default_path`].
const THREAD_DB_ENV: &str = "ADAPTOR_THREAD_DB";

const SCHEMA_V1: &str = "
CREATE TABLE thread_records (
    id          TEXT    NOT NULL PRIMARY KEY,
    key         BLOB    NOT NULL,
    status      TEXT    NOT NULL CHECK (status IN ('active', 'archived')),
    driver      TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    codec       TEXT    NOT NULL,
    resume_id   TEXT    NOT NULL,
    display_id  TEXT,
    data        TEXT    NOT NULL,
    valid       INTEGER NOT NULL CHECK (valid IN (0, 1)),
    parent_id   TEXT,
    turns       INTEGER NOT NULL CHECK (turns >= 0),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX thread_records_one_active ON thread_records (key) WHERE status = 'active';
CREATE INDEX thread_records_by_key ON thread_records (key, updated_at);
CREATE INDEX thread_records_by_update ON thread_records (updated_at);
CREATE TABLE thread_leases (
    target     BLOB    NOT NULL PRIMARY KEY,
    owner      TEXT    NOT NULL,
    token      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
";

/// Version 1 → 2: the component that wrote a record (empty for older records).
const MIGRATE_V1_TO_V2: &str =
    "ALTER TABLE thread_records ADD COLUMN component TEXT NOT NULL DEFAULT '';";

const RECORD_COLUMNS: &str = "id, key, status, driver, component, fingerprint, codec, resume_id, \
     display_id, data, valid, parent_id, turns, created_at, updated_at";

/// Thread records and leases in one SQLite file (WAL mode). Any number of processes on this
/// machine may open the same file; each operation is one transaction.
pub struct SqliteStore {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Open (creating it and its parent directories if needed) the store file at `path`, and
    /// create or check its schema. Blocks while doing so; call it before serving requests.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| StoreError::Backend {
                store: STORE,
                message: format!("creating directory {}: {e}", parent.display()),
            })?;
        }
        let mut conn = Connection::open(&path).map_err(|e| backend(&path, "opening", e))?;
        configure(&mut conn, &path)?;
        migrate(&mut conn, &path)?;
        Ok(Self {
            path,
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Open the store at [`default_path`](Self::default_path).
    pub fn open_default() -> Result<Self, StoreError> {
        Self::open(Self::default_path()?)
    }

    /// `$ADAPTOR_THREAD_DB` if set and non-empty, else `threads.sqlite3` under
    /// `<data dir>/agent-adaptor/` (e.g. `~/.local/share/agent-adaptor/` on Linux).
    pub fn default_path() -> Result<PathBuf, StoreError> {
        default_path_from(std::env::var_os(THREAD_DB_ENV), dirs::data_dir())
    }

    /// The file this store reads and writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `op` on the connection in tokio's blocking pool.
    fn run<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Connection, &Path) -> Result<T, StoreError> + Send + 'static,
    ) -> StoreFuture<'_, T> {
        let conn = Arc::clone(&self.conn);
        let path = self.path.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let mut guard = conn.lock().map_err(|_| StoreError::Backend {
                    store: STORE,
                    message: format!(
                        "{}: the connection's lock was poisoned by a panic",
                        path.display()
                    ),
                })?;
                op(&mut guard, &path)
            })
            .await
            .map_err(|e| StoreError::Backend {
                store: STORE,
                message: format!("the blocking task failed: {e}"),
            })?
        })
    }
}

/// [`SqliteStore::default_path`] from its inputs (separate so it is testable without
/// touching the process environment).
fn default_path_from(
    env: Option<std::ffi::OsString>,
    data_dir: Option<PathBuf>,
) -> Result<PathBuf, StoreError> {
    if let Some(path) = env.filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    data_dir
        .map(|dir| dir.join("agent-adaptor").join("threads.sqlite3"))
        .ok_or_else(|| StoreError::Backend {
            store: STORE,
            message: format!("this system has no data directory; set {THREAD_DB_ENV}"),
        })
}

fn backend(path: &Path, what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend {
        store: STORE,
        message: format!("{}: {what}: {e}", path.display()),
    }
}

/// Per-connection settings. WAL is persistent in the file; the rest is per connection.
fn configure(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| backend(path, "setting the busy timeout", e))?;
    // Switching a new file to WAL needs an exclusive lock, and SQLite reports SQLITE_BUSY
    // at once (without the busy handler) when another process opening the same new file
    // holds a lock: retry for as long as the busy timeout would have waited.
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    let mode: String = loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)) {
            Ok(mode) => break mode,
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(
                    5 + u64::from(std::process::id() % 16),
                ));
            }
            Err(e) => return Err(backend(path, "switching to WAL mode", e)),
        }
    };
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(backend(
            path,
            "switching to WAL mode",
            format!("the journal mode stayed `{mode}` (is the file on a network file system?)"),
        ));
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| backend(path, "setting synchronous=FULL", e))
}

/// Create the schema on a new file, migrate version 1, accept the current version, refuse
/// anything else.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| backend(path, "locking to check the schema", e))?;
    let version: i64 = tx
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(|e| backend(path, "reading the schema version", e))?;
    match version {
        0 | 1 => {
            if version == 0 {
                tx.execute_batch(SCHEMA_V1)
                    .map_err(|e| backend(path, "creating the schema", e))?;
            }
            tx.execute_batch(MIGRATE_V1_TO_V2)
                .map_err(|e| backend(path, "migrating the schema to version 2", e))?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(|e| backend(path, "recording the schema version", e))?;
            tx.commit()
                .map_err(|e| backend(path, "committing the schema", e))
        }
        SCHEMA_VERSION => tx
            .commit()
            .map_err(|e| backend(path, "ending the schema check", e)),
        other => Err(StoreError::Backend {
            store: STORE,
            message: format!(
                "{}: schema version {other} is not the version {SCHEMA_VERSION} this build \
                 reads (written by a different agent-adaptor?)",
                path.display()
            ),
        }),
    }
}

fn now_millis() -> i64 {
    to_millis(SystemTime::now())
}

fn ttl_millis(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

fn immediate<'c>(conn: &'c mut Connection, path: &Path) -> Result<Transaction<'c>, StoreError> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| backend(path, "beginning a write transaction", e))
}

fn commit(tx: Transaction<'_>, path: &Path) -> Result<(), StoreError> {
    tx.commit().map_err(|e| backend(path, "committing", e))
}

fn decode_record(row: &Row<'_>) -> rusqlite::Result<Result<ThreadRecord, StoreError>> {
    let id: String = row.get("id")?;
    let key: Vec<u8> = row.get("key")?;
    let status: String = row.get("status")?;
    let data: String = row.get("data")?;
    let turns: i64 = row.get("turns")?;
    let corrupt = |message: String| StoreError::Corrupt {
        store: STORE,
        id: id.clone(),
        message,
    };
    let key = match String::from_utf8(key) {
        Ok(key) => key,
        Err(e) => return Ok(Err(corrupt(format!("key is not UTF-8: {e}")))),
    };
    let Some(status) = RecordStatus::parse(&status) else {
        return Ok(Err(corrupt(format!("unknown status `{status}`"))));
    };
    let data = match data_from_json(STORE, &id, &data) {
        Ok(data) => data,
        Err(e) => return Ok(Err(e)),
    };
    let Ok(turns) = u64::try_from(turns) else {
        return Ok(Err(corrupt(format!("negative turn count {turns}"))));
    };
    let valid: bool = row.get("valid")?;
    if !valid {
        return Ok(Err(corrupt(INVALID_ROW.into())));
    }
    Ok(Ok(ThreadRecord {
        key,
        status,
        driver: row.get("driver")?,
        component: row.get("component")?,
        fingerprint: row.get("fingerprint")?,
        state: SessionState {
            codec: row.get("codec")?,
            resume_id: row.get("resume_id")?,
            display_id: row.get("display_id")?,
            data,
        },
        parent_id: row.get("parent_id")?,
        turns,
        created_at: from_millis(row.get("created_at")?),
        updated_at: from_millis(row.get("updated_at")?),
        id,
    }))
}

/// Run a record query and decode every row.
fn query_records(
    conn: &Connection,
    path: &Path,
    sql: &str,
    params: &[&dyn rusqlite::ToSql],
) -> Result<Vec<ThreadRecord>, StoreError> {
    let mut stmt = conn
        .prepare_cached(sql)
        .map_err(|e| backend(path, "preparing a record query", e))?;
    let rows = stmt
        .query_map(params, decode_record)
        .map_err(|e| backend(path, "querying records", e))?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row.map_err(|e| backend(path, "reading a record row", e))??);
    }
    Ok(out)
}

/// Fail with [`StoreError::LeaseLost`] unless every lease is the stored, unexpired one.
fn check_leases(tx: &Transaction<'_>, path: &Path, leases: &[Lease]) -> Result<(), StoreError> {
    let now = now_millis();
    for lease in leases {
        let held: Option<(String, i64)> = tx
            .query_row(
                "SELECT token, expires_at FROM thread_leases WHERE target = ?1",
                [lease.target.as_bytes()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| backend(path, "reading a lease", e))?;
        match held {
            Some((token, expires)) if token == lease.token && expires > now => {}
            _ => {
                return Err(StoreError::LeaseLost {
                    target: lease.target.clone(),
                });
            }
        }
    }
    Ok(())
}

fn finalize_in(conn: &mut Connection, path: &Path, request: Finalize) -> Result<(), StoreError> {
    let record = request.record;
    let turns = i64::try_from(record.turns).map_err(|_| StoreError::Backend {
        store: STORE,
        message: format!(
            "record `{}`: turn count {} does not fit a 64-bit signed integer",
            record.id, record.turns
        ),
    })?;
    let updated_at = to_millis(record.updated_at);
    let tx = immediate(conn, path)?;
    check_leases(&tx, path, &request.leases)?;
    if request.require_key_absent {
        let other: Option<String> = tx
            .query_row(
                "SELECT id FROM thread_records WHERE key = ?1 AND status = 'active' AND id <> ?2",
                params![record.key.as_bytes(), record.id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| backend(path, "checking the key is free", e))?;
        if other.is_some() {
            return Err(StoreError::AlreadyExists { key: record.key });
        }
    }
    if let Some(prev) = &request.archive_previous {
        let changed = tx
            .execute(
                "UPDATE thread_records SET status = 'archived', updated_at = ?2 WHERE id = ?1",
                params![prev, updated_at],
            )
            .map_err(|e| backend(path, "archiving the previous record", e))?;
        if changed == 0 {
            return Err(StoreError::NotFound { id: prev.clone() });
        }
    }
    if record.status == RecordStatus::Active {
        tx.execute(
            "UPDATE thread_records SET status = 'archived', updated_at = ?3 \
             WHERE key = ?1 AND status = 'active' AND id <> ?2",
            params![record.key.as_bytes(), record.id, updated_at],
        )
        .map_err(|e| backend(path, "unbinding the key's other record", e))?;
    }
    tx.execute(
        "INSERT INTO thread_records (id, key, status, driver, fingerprint, codec, resume_id, \
             display_id, data, valid, parent_id, turns, created_at, updated_at, component) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15) \
         ON CONFLICT (id) DO UPDATE SET key = excluded.key, status = excluded.status, \
             driver = excluded.driver, component = excluded.component, \
             fingerprint = excluded.fingerprint, \
             codec = excluded.codec, resume_id = excluded.resume_id, \
             display_id = excluded.display_id, data = excluded.data, valid = excluded.valid, \
             parent_id = excluded.parent_id, turns = excluded.turns, \
             created_at = excluded.created_at, updated_at = excluded.updated_at",
        params![
            record.id,
            record.key.as_bytes(),
            record.status.as_str(),
            record.driver,
            record.fingerprint,
            record.state.codec,
            record.state.resume_id,
            record.state.display_id,
            data_to_json(&record.state),
            true,
            record.parent_id,
            turns,
            to_millis(record.created_at),
            updated_at,
            record.component,
        ],
    )
    .map_err(|e| backend(path, &format!("saving record `{}`", record.id), e))?;
    commit(tx, path)
}

impl ThreadStore for SqliteStore {
    fn kind(&self) -> &'static str {
        STORE
    }

    fn resolve<'a>(&'a self, query: &'a Query) -> StoreFuture<'a, Option<ThreadRecord>> {
        let query = query.clone();
        self.run(move |conn, path| {
            let rows = match &query {
                Query::Key(key) => query_records(
                    conn,
                    path,
                    &format!(
                        "SELECT {RECORD_COLUMNS} FROM thread_records \
                         WHERE key = ?1 AND status = 'active'"
                    ),
                    &[&key.as_bytes()],
                )?,
                Query::Id(id) => query_records(
                    conn,
                    path,
                    &format!("SELECT {RECORD_COLUMNS} FROM thread_records WHERE id = ?1"),
                    &[id],
                )?,
            };
            Ok(rows.into_iter().next())
        })
    }

    fn list<'a>(&'a self, query: &'a ListQuery) -> StoreFuture<'a, Vec<ThreadRecord>> {
        let query = query.clone();
        self.run(move |conn, path| {
            // -1 is SQLite's "no limit".
            let limit = query
                .limit
                .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
            let key = query.key.as_ref().map(|k| k.as_bytes().to_vec());
            query_records(
                conn,
                path,
                &format!(
                    "SELECT {RECORD_COLUMNS} FROM thread_records \
                     WHERE (?1 OR status = 'active') AND (?2 IS NULL OR key = ?2) \
                     ORDER BY updated_at DESC, id ASC LIMIT ?3"
                ),
                &[&query.include_archived, &key, &limit],
            )
        })
    }

    fn finalize(&self, request: Finalize) -> StoreFuture<'_, ()> {
        self.run(move |conn, path| finalize_in(conn, path, request))
    }

    fn archive<'a>(&'a self, id: &'a str, leases: &'a [Lease]) -> StoreFuture<'a, ()> {
        let id = id.to_owned();
        let leases = leases.to_vec();
        self.run(move |conn, path| {
            let tx = immediate(conn, path)?;
            check_leases(&tx, path, &leases)?;
            let status: Option<String> = tx
                .query_row(
                    "SELECT status FROM thread_records WHERE id = ?1",
                    [&id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| backend(path, "reading the record", e))?;
            match status.as_deref() {
                None => return Err(StoreError::NotFound { id }),
                Some("active") => {
                    tx.execute(
                        "UPDATE thread_records SET status = 'archived', updated_at = ?2 \
                         WHERE id = ?1",
                        params![id, now_millis()],
                    )
                    .map_err(|e| backend(path, &format!("archiving `{id}`"), e))?;
                }
                Some(_) => {}
            }
            commit(tx, path)
        })
    }

    fn acquire_lease<'a>(
        &'a self,
        target: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Lease> {
        let target = target.to_owned();
        let owner = owner.to_owned();
        self.run(move |conn, path| {
            let tx = immediate(conn, path)?;
            let now = now_millis();
            let held: Option<(String, i64)> = tx
                .query_row(
                    "SELECT owner, expires_at FROM thread_leases WHERE target = ?1",
                    [target.as_bytes()],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(|e| backend(path, "reading the lease", e))?;
            if let Some((holder, expires)) = held
                && holder != owner
                && expires > now
            {
                return Err(StoreError::Busy { target, holder });
            }
            let expires = now.saturating_add(ttl_millis(ttl));
            let token = new_token();
            tx.execute(
                "INSERT INTO thread_leases (target, owner, token, expires_at) \
                 VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (target) DO UPDATE SET owner = excluded.owner, \
                     token = excluded.token, expires_at = excluded.expires_at",
                params![target.as_bytes(), owner, token, expires],
            )
            .map_err(|e| backend(path, "writing the lease", e))?;
            commit(tx, path)?;
            Ok(Lease {
                target,
                owner,
                token,
                expires_at: from_millis(expires),
            })
        })
    }

    fn renew_lease<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> StoreFuture<'a, Lease> {
        let lease = lease.clone();
        self.run(move |conn, path| {
            let tx = immediate(conn, path)?;
            check_leases(&tx, path, std::slice::from_ref(&lease))?;
            let expires = now_millis().saturating_add(ttl_millis(ttl));
            tx.execute(
                "UPDATE thread_leases SET expires_at = ?3 WHERE target = ?1 AND token = ?2",
                params![lease.target.as_bytes(), lease.token, expires],
            )
            .map_err(|e| backend(path, "extending the lease", e))?;
            commit(tx, path)?;
            Ok(Lease {
                expires_at: from_millis(expires),
                ..lease
            })
        })
    }

    fn release_lease<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        let lease = lease.clone();
        self.run(move |conn, path| {
            conn.execute(
                "DELETE FROM thread_leases WHERE target = ?1 AND token = ?2",
                params![lease.target.as_bytes(), lease.token],
            )
            .map_err(|e| backend(path, "releasing the lease", e))?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pragma(store: &SqliteStore, name: &str) -> String {
        let conn = store.conn.lock().unwrap();
        conn.pragma_query_value(None, name, |r| {
            Ok(match r.get_ref(0)? {
                rusqlite::types::ValueRef::Integer(n) => n.to_string(),
                rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                other => format!("{other:?}"),
            })
        })
        .unwrap()
    }

    #[test]
    fn new_file_gets_the_schema_version_wal_and_full_sync() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested").join("deeper").join("t.sqlite3");
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.path(), path);
        assert!(path.is_file(), "open creates the file and its parents");
        assert_eq!(pragma(&store, "user_version"), SCHEMA_VERSION.to_string());
        assert_eq!(pragma(&store, "journal_mode"), "wal");
        // 2 = FULL.
        assert_eq!(pragma(&store, "synchronous"), "2");
        drop(store);
        // Reopening an existing file keeps it (no second schema creation).
        let again = SqliteStore::open(&path).unwrap();
        assert_eq!(pragma(&again, "user_version"), SCHEMA_VERSION.to_string());
    }

    #[tokio::test]
    async fn a_version_1_file_is_migrated_and_its_records_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.sqlite3");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA_V1).unwrap();
            conn.execute(
                "INSERT INTO thread_records (id, key, status, driver, fingerprint, codec, \
                 resume_id, display_id, data, valid, parent_id, turns, created_at, updated_at) \
                 VALUES ('thr-old', X'6B', 'active', 'reference', 'sha256:00', 'c', 'r', NULL, \
                 '{}', 1, NULL, 3, 0, 0)",
                [],
            )
            .unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(pragma(&store, "user_version"), SCHEMA_VERSION.to_string());
        let old = store
            .resolve(&Query::Key("k".into()))
            .await
            .unwrap()
            .expect("the version 1 record");
        assert_eq!(
            (old.id.as_str(), old.turns, old.component.as_str()),
            ("thr-old", 3, "")
        );
        drop(store);
        // Opening again finds version 2 and changes nothing.
        let again = SqliteStore::open(&path).unwrap();
        assert!(
            again
                .resolve(&Query::Key("k".into()))
                .await
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn a_file_of_another_schema_version_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sqlite3");
        {
            let conn = Connection::open(&path).unwrap();
            conn.pragma_update(None, "user_version", 7).unwrap();
        }
        let err = SqliteStore::open(&path).unwrap_err();
        match err {
            StoreError::Backend { store, message } => {
                assert_eq!(store, "sqlite");
                assert!(message.contains("schema version 7"), "{message}");
                assert!(message.contains("t.sqlite3"), "{message}");
            }
            other => panic!("expected a backend error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn keys_are_stored_as_blobs() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("t.sqlite3")).unwrap();
        let now = from_millis(to_millis(SystemTime::now()));
        let key = "k\0ey".to_owned();
        store
            .finalize(Finalize {
                record: ThreadRecord {
                    id: "thr-1".into(),
                    key: key.clone(),
                    status: RecordStatus::Active,
                    driver: "reference".into(),
                    component: "ab".repeat(32),
                    fingerprint: "sha256:00".into(),
                    state: SessionState {
                        codec: "c".into(),
                        resume_id: "r".into(),
                        display_id: None,
                        data: Default::default(),
                    },
                    parent_id: None,
                    turns: 1,
                    created_at: now,
                    updated_at: now,
                },
                archive_previous: None,
                require_key_absent: false,
                leases: vec![],
            })
            .await
            .unwrap();
        let lease = store
            .acquire_lease("thread-key:k\0ey", "o", Duration::from_secs(5))
            .await
            .unwrap();
        {
            let conn = store.conn.lock().unwrap();
            let (kind, bytes): (String, Vec<u8>) = conn
                .query_row("SELECT typeof(key), key FROM thread_records", [], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .unwrap();
            assert_eq!((kind.as_str(), bytes.as_slice()), ("blob", key.as_bytes()));
            let target_kind: String = conn
                .query_row("SELECT typeof(target) FROM thread_leases", [], |r| r.get(0))
                .unwrap();
            assert_eq!(target_kind, "blob");
        }
        store.release_lease(&lease).await.unwrap();
        // A row marked not valid was edited outside the runtime: refused as corrupt, never
        // resumed.
        store
            .conn
            .lock()
            .unwrap()
            .execute("UPDATE thread_records SET valid = 0", [])
            .unwrap();
        let e = store.resolve(&Query::Key(key)).await.unwrap_err();
        assert!(
            matches!(&e, StoreError::Corrupt { message, .. } if message == INVALID_ROW),
            "{e:?}"
        );
    }

    #[test]
    fn default_path_honours_the_environment_override() {
        let data = PathBuf::from("/data");
        assert_eq!(
            default_path_from(Some("/tmp/x.db".into()), Some(data.clone())).unwrap(),
            PathBuf::from("/tmp/x.db")
        );
        assert_eq!(
            default_path_from(Some("".into()), Some(data.clone())).unwrap(),
            PathBuf::from("/data/agent-adaptor/threads.sqlite3")
        );
        assert_eq!(
            default_path_from(None, Some(data)).unwrap(),
            PathBuf::from("/data/agent-adaptor/threads.sqlite3")
        );
        let err = default_path_from(None, None).unwrap_err();
        assert!(err.to_string().contains(THREAD_DB_ENV), "{err}");
    }
}
