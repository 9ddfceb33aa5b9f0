//! The module objects of one tenant as a handler reaches them: straight in the
//! database, or through an apply's [`Overlay`].

use fleet_guest::kinds::Descriptor;

use super::overlay::{Op, Overlay};
use super::rows::{
    delete, insert, is_live, live_keys_where, load, load_by_idempotency_key, release_idempotency_key, write,
};
use super::{Object, Stored};
use crate::api::ApiError;
use crate::db::Conn;

/// The module objects of one tenant as a handler reaches them: straight in the
/// database, or through an apply's [`Overlay`].
#[derive(Clone, Copy)]
pub struct Objects<'a> {
    pub db: &'a Conn,
    pub tenant: &'a str,
    pub overlay: Option<&'a Overlay>,
}

impl Objects<'_> {
    /// The object of `kind` with this key.
    pub fn load(&self, kind: &'static Descriptor, key: &str) -> Result<Option<Object>, ApiError> {
        match self.overlay {
            Some(overlay) => Ok(overlay.stored(self.db, self.tenant, kind, key)?.map(|stored| stored.object)),
            None => load(self.db, kind, self.tenant, key),
        }
    }

    /// Whether a live (not archived) object of `kind` has this key.
    pub fn is_live(&self, kind: &'static Descriptor, key: &str) -> Result<bool, ApiError> {
        match self.overlay {
            Some(overlay) => {
                Ok(overlay.stored(self.db, self.tenant, kind, key)?.is_some_and(|stored| !stored.object.archived))
            }
            None => is_live(self.db, kind, self.tenant, key),
        }
    }

    /// The object of `kind` made with this idempotency key.
    pub fn load_by_idempotency_key(
        &self,
        kind: &'static Descriptor,
        idempotency_key: &str,
    ) -> Result<Option<Object>, ApiError> {
        match self.overlay {
            Some(overlay) => overlay.by_idempotency_key(self.db, self.tenant, kind, idempotency_key),
            None => load_by_idempotency_key(self.db, kind, self.tenant, idempotency_key),
        }
    }

    /// The keys of the live objects of `kind` whose field `field` is `value`, sorted.
    pub fn live_keys_where(
        &self,
        kind: &'static Descriptor,
        field: &str,
        value: &str,
    ) -> Result<Vec<String>, ApiError> {
        match self.overlay {
            Some(overlay) => overlay.live_keys_where(self.db, self.tenant, kind, field, value),
            None => live_keys_where(self.db, kind, self.tenant, field, value),
        }
    }

    /// Writes a new object, made with `idempotency_key` if given.
    pub fn insert(
        &self,
        kind: &'static Descriptor,
        object: &Object,
        idempotency_key: Option<&str>,
    ) -> Result<(), ApiError> {
        match self.overlay {
            Some(overlay) => {
                let stored = Stored { object: object.clone(), idempotency_key: idempotency_key.map(str::to_owned) };
                overlay.write(kind, Op::Insert, stored);
                Ok(())
            }
            None => insert(self.db, kind, self.tenant, object, idempotency_key),
        }
    }

    /// Writes the whole object over the one stored with its key; the stored object
    /// keeps its idempotency key and creation time.
    pub fn write(&self, kind: &'static Descriptor, object: &Object) -> Result<(), ApiError> {
        match self.overlay {
            Some(overlay) => {
                let before = overlay.stored(self.db, self.tenant, kind, &object.key)?;
                let mut stored = Stored { object: object.clone(), idempotency_key: None };
                if let Some(before) = before {
                    stored.idempotency_key = before.idempotency_key;
                    stored.object.created_at = before.object.created_at;
                }
                overlay.write(kind, Op::Upsert, stored);
                Ok(())
            }
            None => write(self.db, kind, self.tenant, object),
        }
    }

    pub fn delete(&self, kind: &'static Descriptor, key: &str) -> Result<(), ApiError> {
        match self.overlay {
            Some(overlay) => {
                overlay.remove(kind, key);
                Ok(())
            }
            None => delete(self.db, kind, self.tenant, key),
        }
    }

    /// Frees the idempotency key an archived object holds.
    pub fn release_idempotency_key(&self, kind: &'static Descriptor, key: &str) -> Result<(), ApiError> {
        match self.overlay {
            Some(overlay) => {
                if let Some(mut stored) = overlay.stored(self.db, self.tenant, kind, key)? {
                    stored.idempotency_key = None;
                    overlay.write(kind, Op::Release, stored);
                }
                Ok(())
            }
            None => release_idempotency_key(self.db, kind, self.tenant, key),
        }
    }
}
