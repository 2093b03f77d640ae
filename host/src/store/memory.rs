//! [`MemoryStore`]: the reference implementation of the store semantics, in one process.
//!
//! Owns an in-process map of records and leases behind one mutex (so every method is
//! atomic), and an index of each key's active record, so a turn's lookups and its save cost
//! the same however many records the store holds. Must not: outlive the process or be shared
//! between processes — use [`SqliteStore`](super::SqliteStore) or
//! [`PostgresStore`](super::PostgresStore) for that.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::{
    Finalize, Lease, ListQuery, Query, RecordStatus, StoreError, StoreFuture, ThreadRecord,
    ThreadStore, new_token,
};

#[derive(Debug, Default)]
struct State {
    records: HashMap<String, ThreadRecord>,
    /// Key → id of its active record (at most one per key: a save archives the one before).
    active: HashMap<String, String>,
    leases: HashMap<String, Lease>,
}

impl State {
    fn active_for(&self, key: &str) -> Option<&ThreadRecord> {
        self.active.get(key).and_then(|id| self.records.get(id))
    }

    /// Mark record `id` archived as of `at` (whatever its status, as the SQL stores' `UPDATE`
    /// does) and drop it from the index of active records.
    fn set_archived(&mut self, id: &str, at: SystemTime) {
        if let Some(r) = self.records.get_mut(id) {
            r.status = RecordStatus::Archived;
            r.updated_at = at;
            if self.active.get(&r.key).is_some_and(|active| active == id) {
                self.active.remove(&r.key);
            }
        }
    }

    fn check_leases(&self, leases: &[Lease], now: SystemTime) -> Result<(), StoreError> {
        for lease in leases {
            match self.leases.get(&lease.target) {
                Some(held) if held.token == lease.token && held.expires_at > now => {}
                _ => {
                    return Err(StoreError::LeaseLost {
                        target: lease.target.clone(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Records and leases in memory: for tests and single-process hosts that do not need threads
/// to survive a restart. Cloning is not provided; share it as `Arc<MemoryStore>`.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut State) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut state = self.state.lock().map_err(|_| StoreError::Backend {
            store: "memory",
            message: "the store's lock was poisoned by a panic".into(),
        })?;
        f(&mut state)
    }
}

impl ThreadStore for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn resolve<'a>(&'a self, query: &'a Query) -> StoreFuture<'a, Option<ThreadRecord>> {
        let out = self.with(|s| {
            Ok(match query {
                Query::Key(key) => s.active_for(key).cloned(),
                Query::Id(id) => s.records.get(id).cloned(),
            })
        });
        Box::pin(async move { out })
    }

    fn list<'a>(&'a self, query: &'a ListQuery) -> StoreFuture<'a, Vec<ThreadRecord>> {
        let out = self.with(|s| {
            let mut rows: Vec<ThreadRecord> = s
                .records
                .values()
                .filter(|r| query.include_archived || r.status == RecordStatus::Active)
                .filter(|r| query.key.as_ref().is_none_or(|k| &r.key == k))
                .cloned()
                .collect();
            rows.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.id.cmp(&b.id)));
            if let Some(limit) = query.limit {
                rows.truncate(limit);
            }
            Ok(rows)
        });
        Box::pin(async move { out })
    }

    fn finalize(&self, request: Finalize) -> StoreFuture<'_, ()> {
        let out = self.with(|s| {
            s.check_leases(&request.leases, SystemTime::now())?;
            let record = request.record;
            if request.require_key_absent
                && s.active_for(&record.key).is_some_and(|r| r.id != record.id)
            {
                return Err(StoreError::AlreadyExists { key: record.key });
            }
            if let Some(prev) = &request.archive_previous
                && !s.records.contains_key(prev)
            {
                return Err(StoreError::NotFound { id: prev.clone() });
            }
            if let Some(prev) = &request.archive_previous {
                s.set_archived(prev, record.updated_at);
            }
            if let Some(active) = s.active.get(&record.key).cloned()
                && active != record.id
                && record.status == RecordStatus::Active
            {
                s.set_archived(&active, record.updated_at);
            }
            if record.status == RecordStatus::Active {
                s.active.insert(record.key.clone(), record.id.clone());
            } else if s.active.get(&record.key) == Some(&record.id) {
                s.active.remove(&record.key);
            }
            s.records.insert(record.id.clone(), record);
            Ok(())
        });
        Box::pin(async move { out })
    }

    fn archive<'a>(&'a self, id: &'a str, leases: &'a [Lease]) -> StoreFuture<'a, ()> {
        let out = self.with(|s| {
            s.check_leases(leases, SystemTime::now())?;
            if !s.records.contains_key(id) {
                return Err(StoreError::NotFound { id: id.to_owned() });
            }
            if s.records[id].status == RecordStatus::Active {
                s.set_archived(id, SystemTime::now());
            }
            Ok(())
        });
        Box::pin(async move { out })
    }

    fn acquire_lease<'a>(
        &'a self,
        target: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Lease> {
        let out = self.with(|s| {
            let now = SystemTime::now();
            if let Some(held) = s.leases.get(target)
                && held.owner != owner
                && held.expires_at > now
            {
                return Err(StoreError::Busy {
                    target: target.to_owned(),
                    holder: held.owner.clone(),
                });
            }
            let lease = Lease {
                target: target.to_owned(),
                owner: owner.to_owned(),
                token: new_token(),
                expires_at: now + ttl,
            };
            s.leases.insert(target.to_owned(), lease.clone());
            Ok(lease)
        });
        Box::pin(async move { out })
    }

    fn renew_lease<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> StoreFuture<'a, Lease> {
        let out = self.with(|s| {
            let now = SystemTime::now();
            s.check_leases(std::slice::from_ref(lease), now)?;
            let held = s.leases.get_mut(&lease.target).expect("checked above");
            held.expires_at = now + ttl;
            Ok(held.clone())
        });
        Box::pin(async move { out })
    }

    fn release_lease<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        let out = self.with(|s| {
            if s.leases
                .get(&lease.target)
                .is_some_and(|held| held.token == lease.token)
            {
                s.leases.remove(&lease.target);
            }
            Ok(())
        });
        Box::pin(async move { out })
    }
}
