//! Values across both backends: the parameters a statement binds and the columns a row
//! gives. Counts and flags are integers in both schemas (PostgreSQL `BIGINT`), text is
//! text; PostgreSQL's own `bool` (from `EXISTS`) reads as a flag too.

use ::postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use bytes::BytesMut;
use rusqlite::types::{ToSqlOutput, ValueRef};

use super::Error;

/// A statement parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Param<'a> {
    Null,
    Int(i64),
    Bool(bool),
    Text(&'a str),
}

impl From<i64> for Param<'_> {
    fn from(value: i64) -> Self {
        Param::Int(value)
    }
}

impl From<bool> for Param<'_> {
    fn from(value: bool) -> Self {
        Param::Bool(value)
    }
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(value: &'a str) -> Self {
        Param::Text(value)
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(value: &'a String) -> Self {
        Param::Text(value)
    }
}

impl<'a, T: Into<Param<'a>>> From<Option<T>> for Param<'a> {
    fn from(value: Option<T>) -> Self {
        value.map_or(Param::Null, Into::into)
    }
}

/// The parameters of a statement: `params![tenant, limit as i64]`.
macro_rules! params {
    ($($value:expr),* $(,)?) => {
        &[$($crate::db::Param::from($value)),*]
    };
}
pub(crate) use params;

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            Param::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Param::Int(value) => ToSqlOutput::Borrowed(ValueRef::Integer(value)),
            Param::Bool(value) => ToSqlOutput::Borrowed(ValueRef::Integer(i64::from(value))),
            Param::Text(value) => ToSqlOutput::Borrowed(ValueRef::Text(value.as_bytes())),
        })
    }
}

impl ToSql for Param<'_> {
    /// Binds as the column's type says: a flag into an integer column is 0 or 1.
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match *self {
            Param::Null => Ok(IsNull::Yes),
            Param::Int(value) if *ty == Type::INT4 => i32::try_from(value)?.to_sql(ty, out),
            Param::Int(value) => value.to_sql(ty, out),
            Param::Bool(value) if *ty == Type::BOOL => value.to_sql(ty, out),
            Param::Bool(value) => Param::Int(i64::from(value)).to_sql(ty, out),
            Param::Text(value) => value.to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// One row of a result.
pub enum Row<'a> {
    Sqlite(&'a rusqlite::Row<'a>),
    Postgres(&'a ::postgres::Row),
}

impl Row<'_> {
    pub fn get<T: Column>(&self, column: usize) -> Result<T, Error> {
        match self {
            Row::Sqlite(row) => T::sqlite(row, column),
            Row::Postgres(row) => T::postgres(row, column),
        }
    }

    /// A text column, borrowed from the row.
    pub fn text(&self, column: usize) -> Result<&str, Error> {
        match self {
            Row::Sqlite(row) => match row.get_ref(column)? {
                ValueRef::Text(text) => std::str::from_utf8(text).map_err(|error| decode(column, error)),
                other => Err(decode(column, format_args!("{:?} is not text", other.data_type()))),
            },
            Row::Postgres(row) => Ok(row.try_get::<_, &str>(column)?),
        }
    }
}

/// A value that the column holds but cannot be read as what it stands for.
pub fn decode(column: usize, message: impl std::fmt::Display) -> Error {
    Error::Decode { column, message: message.to_string() }
}

/// A Rust type a column reads as, on both backends.
pub trait Column: Sized {
    fn sqlite(row: &rusqlite::Row, column: usize) -> Result<Self, Error>;
    fn postgres(row: &::postgres::Row, column: usize) -> Result<Self, Error>;
}

impl Column for i64 {
    fn sqlite(row: &rusqlite::Row, column: usize) -> Result<Self, Error> {
        Ok(row.get(column)?)
    }

    fn postgres(row: &::postgres::Row, column: usize) -> Result<Self, Error> {
        Option::<i64>::postgres(row, column)?.ok_or_else(|| decode(column, "is null"))
    }
}

impl Column for Option<i64> {
    fn sqlite(row: &rusqlite::Row, column: usize) -> Result<Self, Error> {
        Ok(row.get(column)?)
    }

    fn postgres(row: &::postgres::Row, column: usize) -> Result<Self, Error> {
        let ty = row.columns()[column].type_();
        Ok(if *ty == Type::INT4 {
            row.try_get::<_, Option<i32>>(column)?.map(i64::from)
        } else if *ty == Type::BOOL {
            row.try_get::<_, Option<bool>>(column)?.map(i64::from)
        } else {
            row.try_get(column)?
        })
    }
}

impl Column for bool {
    fn sqlite(row: &rusqlite::Row, column: usize) -> Result<Self, Error> {
        Ok(row.get(column)?)
    }

    fn postgres(row: &::postgres::Row, column: usize) -> Result<Self, Error> {
        Ok(i64::postgres(row, column)? != 0)
    }
}

impl Column for String {
    fn sqlite(row: &rusqlite::Row, column: usize) -> Result<Self, Error> {
        Ok(row.get(column)?)
    }

    fn postgres(row: &::postgres::Row, column: usize) -> Result<Self, Error> {
        Ok(row.try_get(column)?)
    }
}

impl Column for Option<String> {
    fn sqlite(row: &rusqlite::Row, column: usize) -> Result<Self, Error> {
        Ok(row.get(column)?)
    }

    fn postgres(row: &::postgres::Row, column: usize) -> Result<Self, Error> {
        Ok(row.try_get(column)?)
    }
}
