//! Caches that cannot serve stale data (docs/decisions/0010). Every write to a tenant's
//! state or tokens bumps a generation in the same transaction (database triggers,
//! migration 0008), whoever writes. A cached value is kept with the generation it was
//! read at, and reused only while the request, in its own transaction, reads the same
//! generation with one indexed lookup. Memory is bounded: least recently used values
//! go first once the values' bytes pass the capacity.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::api::ApiError;
use crate::db::Conn;
use crate::db::params;
use crate::metrics::Metrics;

/// What a generation counts writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The tenant's module objects and name bindings: what the planner reads.
    State,
    /// The tenant's tokens.
    Tokens,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::State => "state",
            Scope::Tokens => "tokens",
        }
    }
}

/// The tenant's current generation of `scope` (0 before its first write).
pub fn generation(db: &Conn, tenant: &str, scope: Scope) -> Result<i64, ApiError> {
    let generation = db.query_opt(
        "SELECT generation FROM generations WHERE tenant = ?1 AND what = ?2",
        params![tenant, scope.as_str()],
        |row| row.get(0),
    )?;
    Ok(generation.unwrap_or(0))
}

struct Entry<V> {
    generation: i64,
    value: Arc<V>,
    bytes: usize,
    used: u64,
}

struct Entries<V> {
    by_key: HashMap<String, Entry<V>>,
    bytes: usize,
    clock: u64,
}

/// Values by key (a tenant, a token's hash), each valid for one generation.
pub struct Cache<V> {
    name: &'static str,
    capacity: usize,
    entries: Mutex<Entries<V>>,
    metrics: Metrics,
}

impl<V> Cache<V> {
    /// A cache of at most `capacity` bytes of values, reported as `name` in `/metrics`.
    pub fn new(name: &'static str, capacity: usize, metrics: Metrics) -> Cache<V> {
        let entries = Entries { by_key: HashMap::new(), bytes: 0, clock: 0 };
        Cache { name, capacity, entries: Mutex::new(entries), metrics }
    }

    /// The value kept for `key` if it was read at `generation`.
    pub fn get(&self, key: &str, generation: i64) -> Option<Arc<V>> {
        let mut entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        entries.clock += 1;
        let clock = entries.clock;
        let found = entries.by_key.get_mut(key).filter(|entry| entry.generation == generation).map(|entry| {
            entry.used = clock;
            entry.value.clone()
        });
        self.metrics.cache_lookup(self.name, found.is_some());
        found
    }

    /// The value kept for `key` if it is current: `current` reads, from the value itself
    /// (e.g. a token's tenant), the generation it must have been read at.
    pub fn get_current<E>(&self, key: &str, current: impl FnOnce(&V) -> Result<i64, E>) -> Result<Option<Arc<V>>, E> {
        let kept = {
            let entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            entries.by_key.get(key).map(|entry| (entry.generation, entry.value.clone()))
        };
        match kept {
            Some((generation, value)) if current(&value)? == generation => Ok(self.get(key, generation)),
            _ => {
                self.metrics.cache_lookup(self.name, false);
                Ok(None)
            }
        }
    }

    /// The size of the value kept for `key`, of whichever generation.
    pub fn bytes_of(&self, key: &str) -> Option<usize> {
        let entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        entries.by_key.get(key).map(|entry| entry.bytes)
    }

    /// Keeps `value` (of about `bytes` bytes) for `key`, read at `generation`, unless it
    /// alone is larger than the capacity.
    pub fn put(&self, key: &str, generation: i64, value: V, bytes: usize) -> Arc<V> {
        let value = Arc::new(value);
        if bytes > self.capacity {
            return value;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        entries.clock += 1;
        let used = entries.clock;
        if let Some(old) =
            entries.by_key.insert(key.to_owned(), Entry { generation, value: value.clone(), bytes, used })
        {
            entries.bytes -= old.bytes;
        }
        entries.bytes += bytes;
        while entries.bytes > self.capacity {
            let oldest = entries.by_key.iter().min_by_key(|(_, entry)| entry.used).map(|(key, _)| key.clone());
            let Some(oldest) = oldest.and_then(|key| entries.by_key.remove(&key)) else { break };
            entries.bytes -= oldest.bytes;
        }
        self.metrics.cache_bytes(self.name, entries.bytes);
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(capacity: usize) -> Cache<Vec<u8>> {
        Cache::new("test", capacity, Metrics::new())
    }

    #[test]
    fn a_value_is_reused_only_at_its_generation() {
        let cache = cache(100);
        assert!(cache.get("acme", 1).is_none());
        cache.put("acme", 1, vec![1], 1);
        assert_eq!(cache.get("acme", 1).as_deref(), Some(&vec![1]));
        assert!(cache.get("acme", 2).is_none(), "a later write made it stale");
        assert!(cache.get("other", 1).is_none());
    }

    #[test]
    fn the_least_recently_used_values_go_first() {
        let cache = cache(10);
        cache.put("a", 1, vec![], 4);
        cache.put("b", 1, vec![], 4);
        assert!(cache.get("a", 1).is_some());
        cache.put("c", 1, vec![], 4);
        assert!(cache.get("b", 1).is_none(), "b was the least recently used");
        assert!(cache.get("a", 1).is_some() && cache.get("c", 1).is_some());
        cache.put("huge", 1, vec![], 11);
        assert!(cache.get("huge", 1).is_none(), "a value larger than the cache is not kept");
    }

    #[test]
    fn generations_count_every_write_of_a_tenant() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::db::open_with(&dir.path().join("fleet.db"), crate::db::Options::default()).unwrap();
        let db = pool.get().unwrap();
        let now = "2026-11-30T00:00:00Z";
        crate::calls::auth::create_tenant(&db, "acme", now).unwrap();
        crate::calls::auth::create_tenant(&db, "other", now).unwrap();
        assert_eq!(generation(&db, "acme", Scope::State).unwrap(), 0);
        let site = "INSERT INTO sites (tenant, id, region, description, labels, created_at, updated_at)
                    VALUES (?1, ?2, 'r', '', '{}', 'now', 'now')";
        db.execute(site, params!["acme", "site_aaaaaaaaaaaaaaaaaaaaaaaaaa"]).unwrap();
        assert_eq!(generation(&db, "acme", Scope::State).unwrap(), 1);
        db.execute("UPDATE sites SET region = 'q' WHERE tenant = 'acme'", &[]).unwrap();
        db.execute("DELETE FROM sites WHERE tenant = 'acme'", &[]).unwrap();
        assert_eq!(generation(&db, "acme", Scope::State).unwrap(), 3);
        assert_eq!(generation(&db, "other", Scope::State).unwrap(), 0, "tenants count apart");
        assert_eq!(generation(&db, "acme", Scope::Tokens).unwrap(), 0);
        crate::calls::auth::create_token(&db, "acme", "alice", &["compute:*:* @ *".into()], now, None).unwrap();
        assert_eq!(generation(&db, "acme", Scope::Tokens).unwrap(), 1);
        assert_eq!(generation(&db, "acme", Scope::State).unwrap(), 3, "tokens are not state");
    }
}
