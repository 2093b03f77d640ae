//! The SQL of the PostgreSQL store: the schema and its idempotent creation, row decoding,
//! and the transactions that check leases, finalize and archive. Must not: open
//! connections or retry (the store in `mod.rs` does both).

use super::*;

pub(super) const SCHEMA_V1: &str = "
CREATE TABLE adaptor_thread_records (
    id            TEXT    NOT NULL PRIMARY KEY,
    key           BYTEA   NOT NULL,
    status        TEXT    NOT NULL CHECK (status IN ('active', 'archived')),
    driver        TEXT    NOT NULL,
    fingerprint   TEXT    NOT NULL,
    codec         TEXT    NOT NULL,
    resume_id     TEXT    NOT NULL,
    display_id    TEXT,
    data          TEXT    NOT NULL,
    valid         BOOLEAN NOT NULL,
    parent_id     TEXT,
    turns         BIGINT  NOT NULL CHECK (turns >= 0),
    created_at_ms BIGINT  NOT NULL,
    updated_at_ms BIGINT  NOT NULL
);
CREATE UNIQUE INDEX adaptor_thread_records_one_active
    ON adaptor_thread_records (key) WHERE status = 'active';
CREATE INDEX adaptor_thread_records_by_key ON adaptor_thread_records (key, updated_at_ms);
CREATE INDEX adaptor_thread_records_by_update ON adaptor_thread_records (updated_at_ms);
CREATE TABLE adaptor_thread_leases (
    target     BYTEA       NOT NULL PRIMARY KEY,
    owner      TEXT        NOT NULL,
    token      TEXT        NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
";

/// Version 1 → 2: the component that wrote a record (empty for older records).
pub(super) const MIGRATE_V1_TO_V2: &str = "ALTER TABLE adaptor_thread_records ADD COLUMN IF NOT EXISTS component TEXT NOT NULL DEFAULT '';";

pub(super) const RECORD_COLUMNS: &str = "id, key, status, driver, component, fingerprint, codec, \
     resume_id, display_id, data, valid, parent_id, turns, created_at_ms, updated_at_ms";

pub(super) async fn ensure_schema(tx: &Transaction<'_>) -> Result<(), Failure> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .await
        .doing("locking the schema")?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS adaptor_thread_schema (version INTEGER NOT NULL)")
        .await
        .doing("creating the schema version table")?;
    let versions: Vec<i32> = tx
        .query("SELECT version FROM adaptor_thread_schema", &[])
        .await
        .doing("reading the schema version")?
        .iter()
        .map(|r| r.get(0))
        .collect();
    match versions.as_slice() {
        [] => {
            tx.batch_execute(SCHEMA_V1)
                .await
                .doing("creating the schema")?;
            tx.batch_execute(MIGRATE_V1_TO_V2)
                .await
                .doing("migrating the schema to version 2")?;
            tx.execute(
                "INSERT INTO adaptor_thread_schema (version) VALUES ($1)",
                &[&SCHEMA_VERSION],
            )
            .await
            .doing("recording the schema version")?;
            Ok(())
        }
        [1] => {
            tx.batch_execute(MIGRATE_V1_TO_V2)
                .await
                .doing("migrating the schema to version 2")?;
            tx.execute(
                "UPDATE adaptor_thread_schema SET version = $1",
                &[&SCHEMA_VERSION],
            )
            .await
            .doing("recording the schema version")?;
            Ok(())
        }
        [SCHEMA_VERSION] => Ok(()),
        other => Err(Failure::Store(StoreError::Backend {
            store: STORE,
            message: format!(
                "adaptor_thread_schema holds version(s) {other:?}, not the version \
                 {SCHEMA_VERSION} this build reads (written by a different agent-adaptor?)"
            ),
        })),
    }
}

pub(super) fn decode_record(row: &Row) -> Result<ThreadRecord, Failure> {
    let id: String = row.try_get("id").doing("reading a record row")?;
    let corrupt = |message: String| {
        Failure::Store(StoreError::Corrupt {
            store: STORE,
            id: id.clone(),
            message,
        })
    };
    let key: Vec<u8> = row.try_get("key").doing("reading a record row")?;
    let key = String::from_utf8(key).map_err(|e| corrupt(format!("key is not UTF-8: {e}")))?;
    let status: String = row.try_get("status").doing("reading a record row")?;
    let status = RecordStatus::parse(&status)
        .ok_or_else(|| corrupt(format!("unknown status `{status}`")))?;
    let data: String = row.try_get("data").doing("reading a record row")?;
    let data = data_from_json(STORE, &id, &data)?;
    let turns: i64 = row.try_get("turns").doing("reading a record row")?;
    let turns =
        u64::try_from(turns).map_err(|_| corrupt(format!("negative turn count {turns}")))?;
    let valid: bool = row.try_get("valid").doing("reading a record row")?;
    if !valid {
        return Err(corrupt(INVALID_ROW.into()));
    }
    let get = |column: &'static str| -> Result<String, Failure> {
        row.try_get(column).doing("reading a record row")
    };
    let get_opt = |column: &'static str| -> Result<Option<String>, Failure> {
        row.try_get(column).doing("reading a record row")
    };
    let millis = |column: &'static str| -> Result<SystemTime, Failure> {
        Ok(from_millis(
            row.try_get(column).doing("reading a record row")?,
        ))
    };
    Ok(ThreadRecord {
        key,
        status,
        driver: get("driver")?,
        component: get("component")?,
        fingerprint: get("fingerprint")?,
        state: SessionState {
            codec: get("codec")?,
            resume_id: get("resume_id")?,
            display_id: get_opt("display_id")?,
            data,
        },
        parent_id: get_opt("parent_id")?,
        turns,
        created_at: millis("created_at_ms")?,
        updated_at: millis("updated_at_ms")?,
        id,
    })
}

/// Lock every lease row (in target order) and fail with [`StoreError::LeaseLost`] unless each
/// holds the caller's token and has not expired by the server's clock.
async fn check_leases(tx: &Transaction<'_>, leases: &[Lease]) -> Result<(), Failure> {
    let mut sorted: Vec<&Lease> = leases.iter().collect();
    sorted.sort_by(|a, b| a.target.as_bytes().cmp(b.target.as_bytes()));
    for lease in sorted {
        let current: Option<bool> = tx
            .query_opt(
                "SELECT token = $2 AND expires_at > clock_timestamp() \
                 FROM adaptor_thread_leases WHERE target = $1 FOR UPDATE",
                &[&lease.target.as_bytes(), &lease.token],
            )
            .await
            .doing("checking a lease")?
            .map(|row| row.get(0));
        if current != Some(true) {
            return Err(Failure::Store(StoreError::LeaseLost {
                target: lease.target.clone(),
            }));
        }
    }
    Ok(())
}

pub(super) async fn finalize_tx(tx: &Transaction<'_>, request: &Finalize) -> Result<(), Failure> {
    let record = &request.record;
    let turns = i64::try_from(record.turns).map_err(|_| {
        Failure::Store(StoreError::Backend {
            store: STORE,
            message: format!(
                "record `{}`: turn count {} does not fit a 64-bit signed integer",
                record.id, record.turns
            ),
        })
    })?;
    let updated_at = to_millis(record.updated_at);
    let key = record.key.as_bytes();
    check_leases(tx, &request.leases).await?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&key_lock(&record.key)],
    )
    .await
    .doing("locking the thread key")?;
    if request.require_key_absent {
        let other = tx
            .query_opt(
                "SELECT id FROM adaptor_thread_records \
                 WHERE key = $1 AND status = 'active' AND id <> $2",
                &[&key, &record.id],
            )
            .await
            .doing("checking the key is free")?;
        if other.is_some() {
            return Err(Failure::Store(StoreError::AlreadyExists {
                key: record.key.clone(),
            }));
        }
    }
    if let Some(prev) = &request.archive_previous {
        let changed = tx
            .execute(
                "UPDATE adaptor_thread_records SET status = 'archived', updated_at_ms = $2 \
                 WHERE id = $1",
                &[prev, &updated_at],
            )
            .await
            .doing("archiving the previous record")?;
        if changed == 0 {
            return Err(Failure::Store(StoreError::NotFound { id: prev.clone() }));
        }
    }
    if record.status == RecordStatus::Active {
        tx.execute(
            "UPDATE adaptor_thread_records SET status = 'archived', updated_at_ms = $3 \
             WHERE key = $1 AND status = 'active' AND id <> $2",
            &[&key, &record.id, &updated_at],
        )
        .await
        .doing("unbinding the key's other record")?;
    }
    tx.execute(
        "INSERT INTO adaptor_thread_records (id, key, status, driver, fingerprint, codec, \
             resume_id, display_id, data, valid, parent_id, turns, created_at_ms, updated_at_ms, \
             component) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
         ON CONFLICT (id) DO UPDATE SET key = excluded.key, status = excluded.status, \
             driver = excluded.driver, component = excluded.component, \
             fingerprint = excluded.fingerprint, \
             codec = excluded.codec, resume_id = excluded.resume_id, \
             display_id = excluded.display_id, data = excluded.data, valid = excluded.valid, \
             parent_id = excluded.parent_id, turns = excluded.turns, \
             created_at_ms = excluded.created_at_ms, updated_at_ms = excluded.updated_at_ms",
        &[
            &record.id,
            &key,
            &record.status.as_str(),
            &record.driver,
            &record.fingerprint,
            &record.state.codec,
            &record.state.resume_id,
            &record.state.display_id,
            &data_to_json(&record.state),
            &true,
            &record.parent_id,
            &turns,
            &to_millis(record.created_at),
            &updated_at,
            &record.component,
        ],
    )
    .await
    .doing("saving the record")?;
    Ok(())
}

pub(super) async fn archive_tx(
    tx: &Transaction<'_>,
    id: &str,
    leases: &[Lease],
) -> Result<(), Failure> {
    check_leases(tx, leases).await?;
    let status: Option<String> = tx
        .query_opt(
            "SELECT status FROM adaptor_thread_records WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .await
        .doing("reading the record")?
        .map(|row| row.get(0));
    match status.as_deref() {
        None => Err(Failure::Store(StoreError::NotFound { id: id.to_owned() })),
        Some("active") => {
            tx.execute(
                "UPDATE adaptor_thread_records SET status = 'archived', updated_at_ms = $2 \
                 WHERE id = $1",
                &[&id, &to_millis(SystemTime::now())],
            )
            .await
            .doing("archiving the record")?;
            Ok(())
        }
        Some(_) => Ok(()),
    }
}
