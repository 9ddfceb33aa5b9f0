//! The tables of plugin kinds: made at start in the shape of the built-in ones (which
//! migrations make), and kept in step with what the plugin declares.

use fleet_guest::kinds::{Descriptor, FieldType};

use super::{column, plugin_table, table};
use crate::api::ApiError;
use crate::db::params;
use crate::db::{self, Backend, Conn, Tx};

/// The SQL type of a field's column on `backend`, and the default of its values.
pub(super) fn sql_type(backend: Backend, ty: FieldType) -> (&'static str, &'static str) {
    match (ty, backend) {
        (FieldType::Count | FieldType::Bool, Backend::Sqlite) => ("INTEGER", "0"),
        (FieldType::Count | FieldType::Bool, Backend::Postgres) => ("BIGINT", "0"),
        (FieldType::Map, _) => ("TEXT", "'{}'"),
        (FieldType::String | FieldType::Name | FieldType::Ref(_), _) => ("TEXT", "''"),
    }
}

/// The columns of a table as `(name, SQL type)`; none if it does not exist.
pub(super) fn table_columns(db: &Conn, table: &str) -> Result<Vec<(String, String)>, db::Error> {
    let sql = match db.backend() {
        Backend::Sqlite => "SELECT name, type FROM pragma_table_info(?1)",
        Backend::Postgres => {
            "SELECT column_name::text, data_type::text FROM information_schema.columns
             WHERE table_schema = current_schema() AND table_name = ?1"
        }
    };
    db.query(sql, params![table], |row| Ok((row.get(0)?, row.get(1)?)))
}

/// The statements that make a plugin kind's table on `backend`, in the shape of the
/// built-in ones.
pub(super) fn create_plugin_table(backend: Backend, kind: &Descriptor) -> Vec<String> {
    let (table, name) = (table(kind), plugin_table(kind));
    let (integer, _) = sql_type(backend, FieldType::Bool);
    let strict = if backend == Backend::Sqlite { " STRICT" } else { "" };
    let mut statements = vec![format!(
        "CREATE TABLE IF NOT EXISTS {table} (tenant TEXT NOT NULL REFERENCES tenants (name), id TEXT NOT NULL, \
         archived {integer} NOT NULL DEFAULT 0, idempotency_key TEXT, created_at TEXT NOT NULL, \
         updated_at TEXT NOT NULL, PRIMARY KEY (tenant, id), UNIQUE (tenant, idempotency_key)){strict}"
    )];
    match backend {
        Backend::Sqlite => {
            for (event, row) in [("insert", "NEW"), ("update", "NEW"), ("delete", "OLD")] {
                statements.push(format!(
                    "CREATE TRIGGER IF NOT EXISTS \"{name}_{event}_bumps_state\" AFTER {event} ON {table} BEGIN \
                     UPDATE generations SET generation = generation + 1 WHERE tenant = {row}.tenant AND what = 'state'; END"
                ));
            }
        }
        // Once per statement (migration 0011); transition tables take one event each.
        Backend::Postgres => {
            for (event, rows) in [("insert", "NEW"), ("update", "NEW"), ("delete", "OLD")] {
                statements.push(format!(
                    "CREATE TRIGGER \"{name}_bumps_state_{event}\" AFTER {event} ON {table} \
                     REFERENCING {rows} TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION fleet_bump_generations('state')"
                ));
            }
        }
    }
    statements
}

/// Makes (or completes) the table of a plugin kind, in the shape of the built-in ones,
/// with the triggers that count the tenant's state generation (migration 0008). A field
/// the plugin added since gets a column holding its default; a column of a field the
/// plugin dropped stays, unread. A field whose type changed over existing data is
/// refused. A read-only database is only checked.
///
/// Replicas that start together make it once: the check and the change are one
/// transaction under the schema lock.
pub fn prepare_plugin_table(db: &Conn, kind: &Descriptor, read_only: bool) -> anyhow::Result<()> {
    db::begin(db, if read_only { Tx::Read } else { Tx::Schema })?;
    match plugin_table_changes(db, kind, read_only) {
        Ok(()) => Ok(db::finish(db, Ok(()))?),
        Err(error) => {
            let _ = db::finish::<()>(db, Err(ApiError::internal(&error)));
            Err(error)
        }
    }
}

pub(super) fn plugin_table_changes(db: &Conn, kind: &Descriptor, read_only: bool) -> anyhow::Result<()> {
    let table = table(kind);
    let backend = db.backend();
    let existing = table_columns(db, &plugin_table(kind))?;
    let mut statements = Vec::new();
    if existing.is_empty() {
        statements = create_plugin_table(backend, kind);
    }
    for field in kind.fields {
        let name = fleet_guest::grammar::camel_words(field.name, '_');
        let (ty, default) = sql_type(backend, field.ty);
        match existing.iter().find(|(column, _)| *column == name) {
            Some((_, had)) if !had.eq_ignore_ascii_case(ty) => anyhow::bail!(
                "field {} is stored as {had} and the plugin now declares it as {ty}: a field's type cannot change \
                 over existing objects",
                field.name
            ),
            Some(_) => {}
            None => statements
                .push(format!("ALTER TABLE {table} ADD COLUMN {} {ty} NOT NULL DEFAULT {default}", column(field.name))),
        }
    }
    if statements.is_empty() {
        return Ok(());
    }
    if read_only {
        anyhow::bail!("the database has no table (or not every column) for it: serve it once without --read-only");
    }
    db.batch(&statements.join("; "))?;
    Ok(())
}
