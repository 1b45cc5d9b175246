//! What the marker dialects' sqlx drivers (SQLite's, the MySQL family's) share: how a row's
//! cells read as text, each database naming its types its own way ([`SqlxCells`]), and how a
//! driver's error is reported, each database reading its own codes.

use sqlx::{Row, TypeInfo as _, ValueRef as _};

use super::sqlx_wire::SqlxDatabase;
use super::wire::{Cells, DbFailure};
use crate::document::DocumentRef;
use crate::engine::Conflict;
use crate::error::{BackendError, Error, ErrorKind};

/// What a cell holds, by the name of its type, as [`Cells::text`] reads it.
// Each database's cells hold some of them.
#[cfg_attr(not(all(feature = "sqlite", feature = "mysql")), allow(dead_code))]
pub(crate) enum Held {
    /// A float: the shortest text that reads back as the very float.
    Float,
    /// An integer: its digits.
    Integer,
    /// A boolean, stored as an integer: `true` or `false`.
    Boolean,
    /// Text, as stored.
    Text,
    /// Text as stored, or bytes that are UTF-8 (text in a binary collation arrives as bytes).
    TextOrBytes,
}

/// A sqlx driver's row, whose cells read by the name of their type ([`Held`]).
pub(crate) trait SqlxCells: Row {
    /// What a cell of the type named `name` holds.
    fn held(name: &str) -> Held;
}

impl<R> Cells for R
where
    R: SqlxCells,
    R::Database: SqlxDatabase,
    usize: sqlx::ColumnIndex<R>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> f64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Vec<u8>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    fn len(&self) -> usize {
        Row::len(self)
    }

    fn text(&self, at: usize) -> Result<Option<String>, DbFailure> {
        let failure = <R::Database as SqlxDatabase>::failure;
        let raw = self.try_get_raw(at).map_err(failure)?;
        if raw.is_null() {
            return Ok(None);
        }
        let text = match R::held(raw.type_info().name()) {
            Held::Float => (self.try_get::<f64, _>(at)).map(|float| format!("{float:?}")),
            Held::Integer => (self.try_get::<i64, _>(at)).map(|integer| integer.to_string()),
            Held::Boolean => (self.try_get::<i64, _>(at)).map(|flag| (flag != 0).to_string()),
            Held::Text => self.try_get(at),
            Held::TextOrBytes => self.try_get(at).or_else(|_| {
                let bytes = self.try_get::<Vec<u8>, _>(at)?;
                String::from_utf8(bytes).map_err(|error| sqlx::Error::Decode(Box::new(error)))
            }),
        };
        text.map(Some).map_err(failure)
    }

    fn boolean(&self, at: usize) -> Result<Option<bool>, DbFailure> {
        Ok(self.integer(at)?.map(|flag| flag != 0))
    }

    fn integer(&self, at: usize) -> Result<Option<i64>, DbFailure> {
        (self.try_get(at)).map_err(<R::Database as SqlxDatabase>::failure)
    }
}

/// A driver error of `database` as idem reports it: kept whole, with its `code`; retryable
/// where the server's code says so (`retry`) or the connection, the pool or the driver's worker
/// failed; refusing the document where the code says the row's values, not the call, failed
/// (`refuses`), which a batch goes row by row to tell.
pub(crate) fn reported(
    database: &'static str,
    source: sqlx::Error,
    code: Option<String>,
    retry: bool,
    refuses: bool,
) -> BackendError {
    let retryable = match &source {
        sqlx::Error::Database(_) => retry,
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
        _ => false,
    };
    let error = BackendError::new(database, code, retryable, source);
    match refuses {
        true => error.refusing_document(),
        false => error,
    }
}

/// A driver error as a failure of its statement (`driver_error` reports it), with the server's
/// message.
pub(crate) fn failure(
    source: sqlx::Error,
    driver_error: fn(sqlx::Error) -> BackendError,
) -> DbFailure {
    let message = (source.as_database_error()).map(|error| error.message().to_owned());
    DbFailure::new(driver_error(source), message)
}

/// `source` as the error of a call concerning `document`: a table that is not there
/// (`missing`, as the database says it) is a schema problem, anything else the driver's.
pub(crate) fn call_error(document: &DocumentRef, source: DbFailure, missing: bool) -> Error {
    match missing {
        true => Error::new(
            document.clone(),
            ErrorKind::SchemaMismatch {
                collection: document.collection.to_owned(),
                problem: format!(
                    "{source}: the table is not there (dropped, or made by a transaction that \
                     rolled back); create it with Store::ensure_table::<T>() or from \
                     Store::create_table_sql::<T>()"
                ),
            },
        ),
        false => Error::new(
            document.clone(),
            ErrorKind::Backend {
                source: source.into_error(),
            },
        ),
    }
}

/// The driver's text of `error` where it is a unique violation: a driver's error whose code is
/// one of `codes`.
pub(crate) fn unique_violation(error: &Error, codes: &[&str]) -> Option<String> {
    let backend = error.as_backend()?;
    let code = backend.code()?;
    codes.contains(&code).then(|| backend.to_string())
}

/// Which unique index a unique violation met, from the driver's text of it (`message`): the
/// index the text names and whether it is the id's or the natural key's (`met`), or none where
/// the text has another form (which index, the read of what is stored tells).
pub(crate) fn conflict(message: String, met: Option<(String, bool)>) -> Conflict {
    match met {
        None => Conflict::Unclear { index: message },
        Some((_, true)) => Conflict::Key,
        Some((index, false)) => Conflict::Other { index },
    }
}

/// [`SqlxDatabase`] for the sqlx database `$db` of a marker dialect
/// ([`sqlx_database!`](super::sqlx_wire::sqlx_database)): its failures read by its module's
/// `errors::failure`, its parameters bound by [`bound`](super::sqlx_wire::bound), its
/// transactions its own.
macro_rules! marker_database {
    ($db:ty, savepoint_opens: $savepoint_opens:expr) => {
        $crate::sql::sqlx_wire::sqlx_database!(
            $db,
            savepoint_opens: $savepoint_opens,
            failure: super::errors::failure,
            bind: $crate::sql::sqlx_wire::bound::<$db>,
            transactions: own
        );
    };
}
pub(crate) use marker_database;
