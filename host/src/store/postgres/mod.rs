//! [`PostgresStore`]: thread records and leases in PostgreSQL, shared by many hosts.
//!
//! Owns the PostgreSQL schema (`adaptor_thread_schema`, `adaptor_thread_records`,
//! `adaptor_thread_leases`), its idempotent creation, and the translation of the store
//! semantics (see the [module documentation](super)) into SQL over one `tokio-postgres`
//! connection. Must not: trust any host's clock for leases (lease expiry is decided by the
//! database server's clock only), interpret keys (BYTEA, compared byte for byte), or hold a
//! transaction open across an await on anything but the database.
//!
//! Choices:
//! - **Isolation**: READ COMMITTED with explicit locks instead of SERIALIZABLE retries.
//!   A finalize locks its lease rows (`FOR UPDATE`, in target order so two finalizes cannot
//!   deadlock), then takes a transaction-scoped advisory lock derived from the record's key,
//!   so every transaction that binds a key runs after the previous one committed and its
//!   statements see that commit. Deadlock and serialization failures are retried anyway.
//! - **Lease time** is the server's `clock_timestamp()` — the server's `now()` at the moment
//!   of the statement rather than at transaction start, so a finalize that waited for a row
//!   lock still checks expiry against the time it actually runs. Acquire is one
//!   `INSERT … ON CONFLICT … DO UPDATE … WHERE` statement: it takes the row only when the
//!   owner is the same or the stored lease has expired.
//! - Record times (`created_at`, `updated_at`) are the caller's, kept in milliseconds like
//!   the other stores. Text columns other than the key (ids, driver, codec, resume id, …)
//!   are PostgreSQL `TEXT`, which cannot hold NUL: such a value is refused with a
//!   [`StoreError::Backend`] naming the server's message; the checkpoint data map is stored
//!   as JSON text, where NUL is escaped.
//! - One connection behind a tokio mutex; if it drops, operations fail with the reason and a
//!   new store must be connected.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use tokio::sync::Mutex;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls, Row, Transaction};

use super::{
    Finalize, INVALID_ROW, Lease, ListQuery, Query, RecordStatus, StoreError, StoreFuture,
    ThreadRecord, ThreadStore, data_from_json, data_to_json, from_millis, new_token, to_millis,
};
use crate::result::SessionState;

mod tx;
use tx::{RECORD_COLUMNS, archive_tx, decode_record, ensure_schema, finalize_tx};

const STORE: &str = "postgres";

/// The schema version this build writes and reads.
const SCHEMA_VERSION: i32 = 2;

/// Advisory lock serialising schema creation across concurrent first connects
/// (`adaptsch` in ASCII).
const SCHEMA_LOCK: i64 = 0x6164_6170_7473_6368;

/// How often a transaction is retried after a deadlock or serialization failure.
const RETRIES: usize = 5;

/// Thread records and leases in a PostgreSQL database; any number of hosts may connect to
/// the same database.
pub struct PostgresStore {
    client: Mutex<Client>,
    /// Why the connection ended, once it has (reported with later failures).
    connection_error: Arc<StdMutex<Option<String>>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").finish_non_exhaustive()
    }
}

/// A failed operation inside [`PostgresStore`]: a store error to return as is, or a
/// database error to retry (deadlock, serialization failure) or map.
enum Failure {
    Store(StoreError),
    Db(&'static str, tokio_postgres::Error),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::Store(e)
    }
}

/// Run `$body` (a future using the transaction `$tx`) in a transaction on `$store`'s
/// connection, retrying on deadlock / serialization failure; evaluates to
/// `Result<_, StoreError>`.
macro_rules! transaction {
    ($store:expr, |$tx:ident| $body:expr) => {{
        let store: &PostgresStore = $store;
        let mut client = store.client.lock().await;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result: Result<_, Failure> = async {
                let $tx = client
                    .transaction()
                    .await
                    .doing("beginning a transaction")?;
                let value = $body.await?;
                $tx.commit().await.doing("committing")?;
                Ok(value)
            }
            .await;
            match result {
                Err(Failure::Db(_, e)) if retryable(&e) && attempt < RETRIES => continue,
                other => break other.map_err(|f| store.error(f)),
            }
        }
    }};
}

/// Attach what was being done to a database error.
trait Doing<T> {
    fn doing(self, what: &'static str) -> Result<T, Failure>;
}

impl<T> Doing<T> for Result<T, tokio_postgres::Error> {
    fn doing(self, what: &'static str) -> Result<T, Failure> {
        self.map_err(|e| Failure::Db(what, e))
    }
}

/// The error's text with its whole source chain (`db error` alone says nothing).
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!("{}: {} ({})", db.severity(), db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            text.push_str(&format!("; {detail}"));
        }
        return text;
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

fn retryable(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(code) if *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
    )
}

fn ttl_millis(ttl: Duration) -> f64 {
    ttl.as_secs_f64() * 1000.0
}

/// A 64-bit advisory lock id for a thread key.
fn key_lock(key: &str) -> i64 {
    let mut hasher = Sha256::new();
    hasher.update(b"adaptor-thread-key\0");
    hasher.update(key.as_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

impl PostgresStore {
    /// Connect (without TLS) to the database at `url` — a `postgres://` URL or a
    /// `key=value` connection string — and create the schema if it is not there. Concurrent
    /// first connects are serialised by an advisory lock, so exactly one creates it.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let (client, connection) =
            tokio_postgres::connect(url, NoTls)
                .await
                .map_err(|e| StoreError::Backend {
                    store: STORE,
                    message: format!("connecting: {}", describe(&e)),
                })?;
        let connection_error = Arc::new(StdMutex::new(None));
        let slot = Arc::clone(&connection_error);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                let text = describe(&e);
                tracing::warn!(error = %text, "postgres thread store connection ended");
                if let Ok(mut slot) = slot.lock() {
                    *slot = Some(text);
                }
            }
        });
        let store = Self {
            client: Mutex::new(client),
            connection_error,
        };
        transaction!(&store, |tx| ensure_schema(&tx))?;
        Ok(store)
    }

    /// Turn a [`Failure`] into the error callers see.
    fn error(&self, failure: Failure) -> StoreError {
        match failure {
            Failure::Store(e) => e,
            Failure::Db(what, e) => {
                let mut message = format!("{what}: {}", describe(&e));
                if e.is_closed() {
                    let reason = self.connection_error.lock().ok().and_then(|s| s.clone());
                    if let Some(reason) = reason {
                        message.push_str(&format!(" ({reason})"));
                    }
                }
                StoreError::Backend {
                    store: STORE,
                    message,
                }
            }
        }
    }
}

impl ThreadStore for PostgresStore {
    fn kind(&self) -> &'static str {
        STORE
    }

    fn resolve<'a>(&'a self, query: &'a Query) -> StoreFuture<'a, Option<ThreadRecord>> {
        Box::pin(async move {
            let client = self.client.lock().await;
            let row =
                match query {
                    Query::Key(key) => {
                        client
                            .query_opt(
                                &format!(
                                    "SELECT {RECORD_COLUMNS} FROM adaptor_thread_records \
                                 WHERE key = $1 AND status = 'active'"
                                ),
                                &[&key.as_bytes()],
                            )
                            .await
                    }
                    Query::Id(id) => client
                        .query_opt(
                            &format!(
                                "SELECT {RECORD_COLUMNS} FROM adaptor_thread_records WHERE id = $1"
                            ),
                            &[id],
                        )
                        .await,
                };
            drop(client);
            row.doing("looking the record up")
                .and_then(|row| row.as_ref().map(decode_record).transpose())
                .map_err(|f| self.error(f))
        })
    }

    fn list<'a>(&'a self, query: &'a ListQuery) -> StoreFuture<'a, Vec<ThreadRecord>> {
        Box::pin(async move {
            let limit = query.limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
            let key = query.key.as_ref().map(|k| k.as_bytes());
            let client = self.client.lock().await;
            let rows = client
                .query(
                    &format!(
                        "SELECT {RECORD_COLUMNS} FROM adaptor_thread_records \
                         WHERE ($1 OR status = 'active') AND ($2::bytea IS NULL OR key = $2) \
                         ORDER BY updated_at_ms DESC, id COLLATE \"C\" ASC LIMIT $3"
                    ),
                    &[&query.include_archived, &key, &limit],
                )
                .await;
            drop(client);
            rows.doing("listing records")
                .and_then(|rows| rows.iter().map(decode_record).collect())
                .map_err(|f| self.error(f))
        })
    }

    fn finalize(&self, request: Finalize) -> StoreFuture<'_, ()> {
        Box::pin(async move { transaction!(self, |tx| finalize_tx(&tx, &request)) })
    }

    fn archive<'a>(&'a self, id: &'a str, leases: &'a [Lease]) -> StoreFuture<'a, ()> {
        Box::pin(async move { transaction!(self, |tx| archive_tx(&tx, id, leases)) })
    }

    fn acquire_lease<'a>(
        &'a self,
        target: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Lease> {
        Box::pin(async move {
            let client = self.client.lock().await;
            let result: Result<Lease, Failure> = async {
                // The row can vanish (released) between a refused take-over and reading its
                // holder; then try again. Each round either succeeds or sees a holder.
                for _ in 0..16 {
                    let token = new_token();
                    let taken = client
                        .query_opt(
                            "INSERT INTO adaptor_thread_leases AS l (target, owner, token, expires_at) \
                             VALUES ($1, $2, $3, clock_timestamp() + $4::float8 * interval '1 millisecond') \
                             ON CONFLICT (target) DO UPDATE SET owner = excluded.owner, \
                                 token = excluded.token, expires_at = excluded.expires_at \
                             WHERE l.owner = excluded.owner OR l.expires_at <= clock_timestamp() \
                             RETURNING expires_at",
                            &[&target.as_bytes(), &owner, &token, &ttl_millis(ttl)],
                        )
                        .await
                        .doing("taking the lease")?;
                    if let Some(row) = taken {
                        return Ok(Lease {
                            target: target.to_owned(),
                            owner: owner.to_owned(),
                            token,
                            expires_at: row.try_get(0).doing("reading the lease expiry")?,
                        });
                    }
                    let holder = client
                        .query_opt(
                            "SELECT owner FROM adaptor_thread_leases WHERE target = $1",
                            &[&target.as_bytes()],
                        )
                        .await
                        .doing("reading the lease holder")?;
                    if let Some(row) = holder {
                        return Err(Failure::Store(StoreError::Busy {
                            target: target.to_owned(),
                            holder: row.try_get(0).doing("reading the lease holder")?,
                        }));
                    }
                }
                Err(Failure::Store(StoreError::Backend {
                    store: STORE,
                    message: format!(
                        "the lease on `{target}` kept changing hands while it was being taken"
                    ),
                }))
            }
            .await;
            drop(client);
            result.map_err(|f| self.error(f))
        })
    }

    fn renew_lease<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> StoreFuture<'a, Lease> {
        Box::pin(async move {
            let client = self.client.lock().await;
            let row = client
                .query_opt(
                    "UPDATE adaptor_thread_leases \
                     SET expires_at = clock_timestamp() + $3::float8 * interval '1 millisecond' \
                     WHERE target = $1 AND token = $2 AND expires_at > clock_timestamp() \
                     RETURNING expires_at",
                    &[&lease.target.as_bytes(), &lease.token, &ttl_millis(ttl)],
                )
                .await;
            drop(client);
            let result: Result<Lease, Failure> = match row.doing("extending the lease") {
                Ok(Some(row)) => {
                    row.try_get(0)
                        .doing("reading the lease expiry")
                        .map(|expires_at| Lease {
                            expires_at,
                            ..lease.clone()
                        })
                }
                Ok(None) => Err(Failure::Store(StoreError::LeaseLost {
                    target: lease.target.clone(),
                })),
                Err(f) => Err(f),
            };
            result.map_err(|f| self.error(f))
        })
    }

    fn release_lease<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let client = self.client.lock().await;
            let done = client
                .execute(
                    "DELETE FROM adaptor_thread_leases WHERE target = $1 AND token = $2",
                    &[&lease.target.as_bytes(), &lease.token],
                )
                .await;
            drop(client);
            done.map(|_| ())
                .doing("releasing the lease")
                .map_err(|f| self.error(f))
        })
    }
}
