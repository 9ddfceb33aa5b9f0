//! A kind's rows written straight into the planner's state encoding: the hot path of
//! every plan.

use fleet_guest::kinds::{Descriptor, FieldType};
use fleet_guest::state::{RowWriter, StateWriter};

use super::count;
use super::rows::select_all;
use crate::api::ApiError;
use crate::db::params;
use crate::db::{self, Conn, Row};

/// Writes the tenant's objects of `kind` as a table of the planner's state encoding,
/// straight from the rows: this is the hot path of every plan.
pub fn encode_table(db: &Conn, kind: &Descriptor, tenant: &str, state: &mut StateWriter) -> Result<(), ApiError> {
    let sql = select_all(kind);
    let mut table = state.kind_table(kind);
    db.for_each(&sql, params![tenant], |row| {
        let mut writer = table.row(kind.fields.len() + 2);
        writer.text(0, row.text(0)?);
        writer.flag(1, row.get(kind.fields.len() + 1)?);
        for (offset, field) in kind.fields.iter().enumerate() {
            encode_value(row, offset + 1, field.ty, offset + 2, &mut writer)?;
        }
        Ok(())
    })?;
    Ok(())
}

pub(super) fn encode_value(
    row: &Row,
    index: usize,
    ty: FieldType,
    column: usize,
    writer: &mut RowWriter,
) -> Result<(), db::Error> {
    match ty {
        FieldType::Count => writer.count(column, count(row, index)?),
        FieldType::Bool => writer.flag(column, row.get(index)?),
        FieldType::Map => {
            let map: std::collections::BTreeMap<String, String> =
                serde_json::from_str(row.text(index)?).map_err(|error| db::decode(index, error))?;
            writer.map(column, map.iter().map(|(key, value)| (key.as_str(), value.as_str())));
        }
        FieldType::String | FieldType::Name | FieldType::Ref(_) => writer.text(column, row.text(index)?),
    }
    Ok(())
}
