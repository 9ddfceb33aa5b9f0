//! An apply's write-behind: the writes of its calls kept in memory and written, many
//! rows to a statement, when the apply records itself (docs/decisions/0014).

use std::cell::RefCell;
use std::collections::HashMap;

use fleet_guest::kinds::Descriptor;

use super::rows::{insert_statement, live_keys_where, load_stored, map_texts, row_values, stored_columns};
use super::{Object, Statement, Stored, column, table};
use crate::api::ApiError;
use crate::db::{Conn, Param};

/// Lookups of a kind an overlay sends to the database before it reads the tenant's
/// whole table of that kind once and answers the rest from memory: a small apply costs
/// a few indexed lookups, a large one a few reads of whole tables.
pub(super) const LOOKUPS_BEFORE_LOADING: usize = 16;

/// The most rows one statement of a flush writes, and the most parameters.
pub(super) const FLUSH_ROWS: usize = 500;
pub(super) const FLUSH_PARAMETERS: usize = 30_000;

/// The writes of an apply's calls, in memory until [`Overlay::flush`] writes them in
/// the apply's transaction, in the order they were made and as few statements as
/// that order allows. Reads through it see them. It lives inside one transaction
/// that holds the tenant's write lock, so nobody else changes what it has read.
#[derive(Default)]
pub struct Overlay(RefCell<OverlayState>);

#[derive(Default)]
pub(super) struct OverlayState {
    /// By kind name.
    kinds: HashMap<&'static str, KindState>,
    /// What to write, in order.
    log: Vec<(&'static Descriptor, Op, Change)>,
}

#[derive(Default)]
pub(super) struct KindState {
    /// Objects the apply wrote, by key; `None` once it deleted one.
    written: HashMap<String, Option<Stored>>,
    /// The keys of written objects by their idempotency keys.
    written_by_idempotency_key: HashMap<String, String>,
    /// The tenant's objects of the kind as the apply found them, once read whole.
    loaded: Option<Table>,
    /// Lookups sent to the database so far.
    lookups: usize,
}

#[derive(Default)]
pub(super) struct Table {
    objects: HashMap<String, Stored>,
    by_idempotency_key: HashMap<String, String>,
}

/// What a write is, for the statement that makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Insert,
    Upsert,
    Delete,
    Release,
}

pub(super) enum Change {
    Row(Stored),
    Key(String),
}

impl KindState {
    /// What the apply knows of the object with this key: `Some(answer)` when it wrote
    /// it or read the whole table, `None` when only the database can tell.
    fn known(&self, key: &str) -> Option<Option<Stored>> {
        if let Some(written) = self.written.get(key) {
            return Some(written.clone());
        }
        self.loaded.as_ref().map(|table| table.objects.get(key).cloned())
    }

    /// Counts a lookup of the database; says whether the table should be read whole
    /// first instead.
    fn should_load(&mut self) -> bool {
        self.lookups += 1;
        self.loaded.is_none() && self.lookups > LOOKUPS_BEFORE_LOADING
    }
}

impl Overlay {
    fn ensure_loaded(&self, db: &Conn, tenant: &str, kind: &'static Descriptor) -> Result<bool, ApiError> {
        let load = self.0.borrow_mut().kinds.entry(kind.kind).or_default().should_load();
        if load {
            let rows = load_stored(db, kind, tenant, Statement::AllStored, "")?;
            let mut table = Table::default();
            for stored in rows {
                if let Some(idempotency_key) = &stored.idempotency_key {
                    table.by_idempotency_key.insert(idempotency_key.clone(), stored.object.key.clone());
                }
                table.objects.insert(stored.object.key.clone(), stored);
            }
            self.0.borrow_mut().kinds.entry(kind.kind).or_default().loaded = Some(table);
        }
        Ok(self.0.borrow().kinds.get(kind.kind).is_some_and(|state| state.loaded.is_some()))
    }

    pub(super) fn stored(
        &self,
        db: &Conn,
        tenant: &str,
        kind: &'static Descriptor,
        key: &str,
    ) -> Result<Option<Stored>, ApiError> {
        if let Some(known) = self.0.borrow().kinds.get(kind.kind).and_then(|state| state.known(key)) {
            return Ok(known);
        }
        if self.ensure_loaded(db, tenant, kind)? {
            return Ok(self.0.borrow().kinds[kind.kind].known(key).flatten());
        }
        Ok(load_stored(db, kind, tenant, Statement::StoredByKey, key)?.pop())
    }

    pub(super) fn by_idempotency_key(
        &self,
        db: &Conn,
        tenant: &str,
        kind: &'static Descriptor,
        idempotency_key: &str,
    ) -> Result<Option<Object>, ApiError> {
        let holder = |stored: &Option<Stored>| {
            stored.as_ref().filter(|stored| stored.idempotency_key.as_deref() == Some(idempotency_key)).cloned()
        };
        // A written object that holds the key; else the one the database had, unless
        // the apply has since written it (and so knows whether it still holds it).
        let candidate = {
            let state = self.0.borrow();
            let written = state.kinds.get(kind.kind).and_then(|state| {
                let key = state.written_by_idempotency_key.get(idempotency_key)?;
                holder(state.written.get(key)?)
            });
            if let Some(written) = written {
                return Ok(Some(written.object));
            }
            state.kinds.get(kind.kind).and_then(|state| {
                let table = state.loaded.as_ref()?;
                Some(table.by_idempotency_key.get(idempotency_key).cloned())
            })
        };
        let key = match candidate {
            Some(key) => key,
            None if self.ensure_loaded(db, tenant, kind)? => self.0.borrow().kinds[kind.kind]
                .loaded
                .as_ref()
                .and_then(|table| table.by_idempotency_key.get(idempotency_key).cloned()),
            None => {
                let found = load_stored(db, kind, tenant, Statement::StoredByIdempotencyKey, idempotency_key)?;
                found.into_iter().next().map(|stored| stored.object.key)
            }
        };
        let Some(key) = key else { return Ok(None) };
        Ok(holder(&self.stored(db, tenant, kind, &key)?).map(|stored| stored.object))
    }

    pub(super) fn live_keys_where(
        &self,
        db: &Conn,
        tenant: &str,
        kind: &'static Descriptor,
        field: &str,
        value: &str,
    ) -> Result<Vec<String>, ApiError> {
        let matches = |stored: &Stored| !stored.object.archived && stored.object.text(field) == value;
        let mut keys: Vec<String> = if self.ensure_loaded(db, tenant, kind)? {
            let state = self.0.borrow();
            let table = state.kinds[kind.kind].loaded.as_ref().map(|table| &table.objects);
            table.into_iter().flatten().filter(|(_, stored)| matches(stored)).map(|(key, _)| key.clone()).collect()
        } else {
            live_keys_where(db, kind, tenant, field, value)?
        };
        // What the apply wrote decides for the objects it wrote.
        let state = self.0.borrow();
        if let Some(state) = state.kinds.get(kind.kind) {
            keys.retain(|key| !state.written.contains_key(key));
            keys.extend(
                state
                    .written
                    .iter()
                    .filter(|(_, stored)| stored.as_ref().is_some_and(matches))
                    .map(|(key, _)| key.clone()),
            );
        }
        keys.sort_unstable();
        Ok(keys)
    }

    pub(super) fn write(&self, kind: &'static Descriptor, op: Op, stored: Stored) {
        let mut state = self.0.borrow_mut();
        let kind_state = state.kinds.entry(kind.kind).or_default();
        if let Some(idempotency_key) = &stored.idempotency_key {
            kind_state.written_by_idempotency_key.insert(idempotency_key.clone(), stored.object.key.clone());
        }
        kind_state.written.insert(stored.object.key.clone(), Some(stored.clone()));
        state.log.push((kind, op, Change::Row(stored)));
    }

    pub(super) fn remove(&self, kind: &'static Descriptor, key: &str) {
        let mut state = self.0.borrow_mut();
        state.kinds.entry(kind.kind).or_default().written.insert(key.to_owned(), None);
        state.log.push((kind, Op::Delete, Change::Key(key.to_owned())));
    }

    /// Writes everything the apply's calls wrote, in their order, in the caller's
    /// transaction: consecutive writes of one kind and one sort share a statement, up
    /// to [`FLUSH_ROWS`] rows (an upsert run breaks where a key comes again, as one
    /// statement cannot change a row twice).
    pub fn flush(&self, db: &Conn, tenant: &str) -> Result<(), ApiError> {
        let log = std::mem::take(&mut self.0.borrow_mut().log);
        let mut start = 0;
        while start < log.len() {
            let (kind, op, _) = &log[start];
            // A run of inserts is one `insert_rows`, which makes its own statements.
            let row_limit = match op {
                Op::Insert => usize::MAX,
                _ => rows_per_statement(kind),
            };
            let mut keys = std::collections::HashSet::new();
            let mut end = start;
            while end < log.len() && end - start < row_limit {
                let (next_kind, next_op, change) = &log[end];
                if !std::ptr::eq(*next_kind, *kind) || next_op != op {
                    break;
                }
                let key = match change {
                    Change::Row(stored) => &stored.object.key,
                    Change::Key(key) => key,
                };
                if !keys.insert(key.as_str()) {
                    break;
                }
                end += 1;
            }
            flush_run(db, kind, *op, tenant, &log[start..end])?;
            start = end;
        }
        Ok(())
    }
}

/// The rows of one statement that writes objects of `kind`: as many as its parameters
/// allow, at most [`FLUSH_ROWS`].
pub(super) fn rows_per_statement(kind: &Descriptor) -> usize {
    (FLUSH_PARAMETERS / (stored_columns(kind).len() + 1)).clamp(1, FLUSH_ROWS)
}

/// One statement for a run of writes of one kind and one sort (a run of inserts may
/// take several on SQLite).
pub(super) fn flush_run(
    db: &Conn,
    kind: &Descriptor,
    op: Op,
    tenant: &str,
    run: &[(&'static Descriptor, Op, Change)],
) -> Result<(), ApiError> {
    let rows = || {
        run.iter().filter_map(|(_, _, change)| match change {
            Change::Row(stored) => Some(stored),
            Change::Key(_) => None,
        })
    };
    let keys = || {
        run.iter().map(|(_, _, change)| match change {
            Change::Row(stored) => stored.object.key.as_str(),
            Change::Key(key) => key.as_str(),
        })
    };
    match op {
        Op::Insert | Op::Upsert => {
            let maps: Vec<Vec<Option<String>>> = rows().map(|stored| map_texts(kind, &stored.object)).collect();
            let mut values = vec![Param::Text(tenant)];
            for (stored, maps) in rows().zip(&maps) {
                row_values(kind, &stored.object, stored.idempotency_key.as_deref(), maps, &mut values);
            }
            if op == Op::Insert {
                let columns = stored_columns(kind);
                let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
                let (shared, own) = values.split_at(1);
                db.insert_rows(&table(kind), &columns, shared, own, rows_per_statement(kind))?;
            } else {
                db.execute(&insert_statement(kind, run.len(), true), &values)?;
            }
        }
        Op::Delete | Op::Release => {
            let listed = (2..run.len() + 2).map(|n| format!("?{n}")).collect::<Vec<_>>().join(", ");
            let condition = format!("tenant = ?1 AND {} IN ({listed})", column(kind.identity_name()));
            let sql = match op {
                Op::Delete => format!("DELETE FROM {} WHERE {condition}", table(kind)),
                _ => format!("UPDATE {} SET idempotency_key = NULL WHERE {condition}", table(kind)),
            };
            let mut values = vec![Param::Text(tenant)];
            values.extend(keys().map(Param::Text));
            db.execute(&sql, &values)?;
        }
    }
    Ok(())
}
