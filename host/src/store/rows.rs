//! A kind's rows, read and written one statement at a time: what an API call does, and
//! what an apply's overlay reads before it has a table whole.

use std::rc::Rc;

use fleet_guest::kinds::{Descriptor, FieldType};
use serde_json::Value;

use super::{Object, Statement, Stored, column, columns, read_row, select, statement, table};
use crate::api::ApiError;
use crate::db::params;
use crate::db::{self, Conn, Param, Row};

/// The objects of the tenant with their idempotency keys: all of them (`AllStored`),
/// or the one whose key (`StoredByKey`) or idempotency key (`StoredByIdempotencyKey`)
/// is `value`.
pub(super) fn load_stored(
    db: &Conn,
    kind: &Descriptor,
    tenant: &str,
    which: Statement,
    value: &str,
) -> Result<Vec<Stored>, ApiError> {
    let sql = statement(kind, which, || {
        let archived = if kind.archives() { "archived" } else { "0" };
        let idempotency = if kind.upserted() { "NULL" } else { "idempotency_key" };
        let all = format!(
            "SELECT {}, {archived}, created_at, updated_at, {idempotency} FROM {} WHERE tenant = ?1",
            columns(kind).join(", "),
            table(kind)
        );
        match which {
            Statement::StoredByKey => format!("{all} AND {} = ?2", column(kind.identity_name())),
            Statement::StoredByIdempotencyKey => format!("{all} AND idempotency_key = ?2"),
            _ => all,
        }
    });
    let column = kind.fields.len() + 4;
    let read = |row: &Row| Ok(Stored { object: read_row(kind, row)?, idempotency_key: row.get(column)? });
    Ok(match which {
        Statement::AllStored => db.query(&sql, params![tenant], read)?,
        _ => db.query(&sql, params![tenant, value], read)?,
    })
}

/// Every object of the tenant, ordered by key.
pub fn load_all(db: &Conn, kind: &Descriptor, tenant: &str) -> Result<Vec<Object>, ApiError> {
    let sql = select_all(kind);
    Ok(db.query(&sql, params![tenant], |row| read_row(kind, row))?)
}

pub(super) fn select_all(kind: &Descriptor) -> Rc<str> {
    statement(kind, Statement::All, || format!("{} ORDER BY {}", select(kind), column(kind.identity_name())))
}

/// The tenant's object of `kind` with this key.
pub(super) fn load(db: &Conn, kind: &Descriptor, tenant: &str, key: &str) -> Result<Option<Object>, ApiError> {
    load_where(db, kind, tenant, Statement::ByKey, key)
}

/// Whether the tenant has a live (not archived) object of `kind` with this key: one
/// indexed lookup that reads no fields.
pub(super) fn is_live(db: &Conn, kind: &Descriptor, tenant: &str, key: &str) -> Result<bool, ApiError> {
    let sql = statement(kind, Statement::IsLive, || {
        let archived = if kind.archives() { "archived = 0" } else { "1 = 1" };
        format!(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE tenant = ?1 AND {} = ?2 AND {archived})",
            table(kind),
            column(kind.identity_name())
        )
    });
    Ok(db.query_one(&sql, params![tenant, key], |row| row.get(0))?)
}

/// The tenant's object of `kind` made with this idempotency key.
pub(super) fn load_by_idempotency_key(
    db: &Conn,
    kind: &Descriptor,
    tenant: &str,
    idempotency_key: &str,
) -> Result<Option<Object>, ApiError> {
    load_where(db, kind, tenant, Statement::ByIdempotencyKey, idempotency_key)
}

/// The tenant's object of `kind` whose key (`ByKey`) or idempotency key
/// (`ByIdempotencyKey`) is `value`.
pub(super) fn load_where(
    db: &Conn,
    kind: &Descriptor,
    tenant: &str,
    which: Statement,
    value: &str,
) -> Result<Option<Object>, ApiError> {
    let sql = statement(kind, which, || {
        let column = match which {
            Statement::ByIdempotencyKey => "idempotency_key".to_owned(),
            _ => column(kind.identity_name()),
        };
        format!("{} AND {column} = ?2", select(kind))
    });
    Ok(db.query_opt(&sql, params![tenant, value], |row| read_row(kind, row))?)
}

/// The keys of the tenant's live objects of `kind` whose field `field` is `value`,
/// sorted.
pub(super) fn live_keys_where(
    db: &Conn,
    kind: &Descriptor,
    tenant: &str,
    field: &str,
    value: &str,
) -> Result<Vec<String>, ApiError> {
    let live = if kind.archives() { " AND archived = 0" } else { "" };
    let identity = column(kind.identity_name());
    let sql = format!(
        "SELECT {identity} FROM {} WHERE tenant = ?1 AND {} = ?2{live} ORDER BY {identity}",
        table(kind),
        column(field)
    );
    Ok(db.query(&sql, params![tenant, value], |row| row.get(0))?)
}

/// A field's value as its column holds it; a map's JSON text is made by the caller.
pub(super) fn sql_value<'a>(ty: FieldType, value: &'a Value, map: Option<&'a str>) -> Param<'a> {
    match ty {
        FieldType::Count => Param::Int(value.as_i64().unwrap_or_default()),
        FieldType::Bool => Param::Bool(value.as_bool().unwrap_or_default()),
        FieldType::Map => Param::Text(map.unwrap_or("{}")),
        FieldType::String | FieldType::Name | FieldType::Ref(_) => Param::Text(value.as_str().unwrap_or_default()),
    }
}

/// Writes the whole object over the one stored with its key (or as a new one); the
/// stored object keeps its idempotency key and creation time.
pub(super) fn write(db: &Conn, kind: &Descriptor, tenant: &str, object: &Object) -> Result<(), ApiError> {
    store(db, kind, tenant, object, None, true)
}

/// Writes a new object, made with `idempotency_key` if given; an object already stored
/// with its key is an error of the database (the caller made sure there is none, or
/// made the key itself).
pub(super) fn insert(
    db: &Conn,
    kind: &Descriptor,
    tenant: &str,
    object: &Object,
    idempotency_key: Option<&str>,
) -> Result<(), ApiError> {
    store(db, kind, tenant, object, idempotency_key, false)
}

pub(super) fn store(
    db: &Conn,
    kind: &Descriptor,
    tenant: &str,
    object: &Object,
    idempotency_key: Option<&str>,
    replace: bool,
) -> Result<(), ApiError> {
    let maps = map_texts(kind, object);
    let mut values = vec![Param::Text(tenant)];
    row_values(kind, object, idempotency_key, &maps, &mut values);
    let sql = match replace {
        true => statement(kind, Statement::Upsert, || insert_statement(kind, 1, true)),
        false => statement(kind, Statement::Insert, || insert_statement(kind, 1, false)),
    };
    db.execute(&sql, &values)?;
    Ok(())
}

/// The JSON text of an object's map fields, by field position (none for the others).
pub(super) fn map_texts(kind: &Descriptor, object: &Object) -> Vec<Option<String>> {
    kind.fields
        .iter()
        .map(|field| {
            (field.ty == FieldType::Map).then(|| object.fields.get(field.name).unwrap_or(&Value::Null).to_string())
        })
        .collect()
}

/// An object's values after the tenant, in the order of `stored_columns`.
pub(super) fn row_values<'a>(
    kind: &Descriptor,
    object: &'a Object,
    idempotency_key: Option<&'a str>,
    maps: &'a [Option<String>],
    values: &mut Vec<Param<'a>>,
) {
    values.push(Param::Text(&object.key));
    for (field, map) in kind.fields.iter().zip(maps) {
        let value = object.fields.get(field.name).unwrap_or(&Value::Null);
        values.push(sql_value(field.ty, value, map.as_deref()));
    }
    if kind.archives() {
        values.push(Param::Bool(object.archived));
    }
    if !kind.upserted() {
        values.push(idempotency_key.into());
    }
    values.push(Param::Text(&object.created_at));
    values.push(Param::Text(&object.updated_at));
}

/// Every column a stored object writes, in the order of `store`'s values.
pub(super) fn stored_columns(kind: &Descriptor) -> Vec<String> {
    let mut names = vec!["tenant".to_owned()];
    names.extend(columns(kind));
    if kind.archives() {
        names.push("archived".into());
    }
    if !kind.upserted() {
        names.push("idempotency_key".into());
    }
    names.extend(["created_at".to_owned(), "updated_at".to_owned()]);
    names
}

/// The insert of `rows` objects of the tenant `?1`; with `replace`, one that writes over
/// the objects stored with their keys, which keep their idempotency keys and creation
/// times.
pub(super) fn insert_statement(kind: &Descriptor, rows: usize, replace: bool) -> String {
    let names = stored_columns(kind);
    let values = db::value_rows(rows, 1, names.len() - 1);
    let mut sql = format!("INSERT INTO {} ({}) VALUES {values}", table(kind), names.join(", "));
    if replace {
        let identity = column(kind.identity_name());
        let assignments: Vec<String> = names
            .iter()
            .filter(|name| !matches!(name.as_str(), "tenant" | "created_at" | "idempotency_key") && **name != identity)
            .map(|name| format!("{name} = excluded.{name}"))
            .collect();
        sql.push_str(&format!(" ON CONFLICT (tenant, {identity}) DO UPDATE SET {}", assignments.join(", ")));
    }
    sql
}

pub(super) fn delete(db: &Conn, kind: &Descriptor, tenant: &str, key: &str) -> Result<(), ApiError> {
    let sql = statement(kind, Statement::Delete, || {
        format!("DELETE FROM {} WHERE tenant = ?1 AND {} = ?2", table(kind), column(kind.identity_name()))
    });
    db.execute(&sql, params![tenant, key])?;
    Ok(())
}

/// Frees an idempotency key held by an archived object.
pub(super) fn release_idempotency_key(db: &Conn, kind: &Descriptor, tenant: &str, key: &str) -> Result<(), ApiError> {
    let sql = statement(kind, Statement::ReleaseIdempotencyKey, || {
        format!("UPDATE {} SET idempotency_key = NULL WHERE tenant = ?1 AND id = ?2", table(kind))
    });
    db.execute(&sql, params![tenant, key])?;
    Ok(())
}
