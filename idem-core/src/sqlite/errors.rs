//! SQLite's errors as idem reports them: the extended result code, whether a retry may help
//! (`SQLITE_BUSY` and `SQLITE_LOCKED` that outlived the busy timeout), and which unique
//! constraint a refused write met.

use crate::document::DocumentRef;
use crate::engine::Conflict;
use crate::error::{BackendError, Error};
use crate::model::ID_FIELD;
use crate::sql::sqlx_marker;
use crate::sql::wire::DbFailure;

use super::table::Table;

/// `SQLITE_CONSTRAINT_PRIMARYKEY` and `SQLITE_CONSTRAINT_UNIQUE`.
const UNIQUE_CODES: [&str; 2] = ["1555", "2067"];

/// A driver error as idem reports it: kept whole, with its code and whether a retry may help.
pub fn driver_error(source: sqlx::Error) -> BackendError {
    let code = source
        .as_database_error()
        .and_then(|error| error.code())
        .map(|code| code.into_owned());
    // The primary result code is the low byte of the extended one.
    let primary = code
        .as_deref()
        .and_then(|code| code.parse::<i32>().ok())
        .map(|code| code & 0xff);
    // BUSY, LOCKED: another connection held the lock past the busy timeout. CONSTRAINT (a
    // CHECK, NOT NULL, a foreign key, a unique index), TOOBIG, MISMATCH: the row's values.
    let (retry, refuses) = (
        matches!(primary, Some(5 | 6)),
        matches!(primary, Some(18..=20)),
    );
    sqlx_marker::reported("SQLite", source, code, retry, refuses)
}

/// A driver error as a failure of its statement, with SQLite's message.
pub(super) fn failure(source: sqlx::Error) -> DbFailure {
    sqlx_marker::failure(source, driver_error)
}

/// `source` as the error of a call concerning `document`: a table that is not there is a schema
/// problem, anything else the driver's.
pub(super) fn sqlite_error(document: &DocumentRef, source: DbFailure) -> Error {
    let missing = (source.server_message()).is_some_and(|text| text.starts_with("no such table"));
    sqlx_marker::call_error(document, source, missing)
}

/// Which unique constraint a unique violation of a single write met: the id's or the natural
/// key's (`Conflict::Key`), or another, named by its columns.
pub(super) fn unique_conflict(error: &Error, table: &Table) -> Option<Conflict> {
    // "UNIQUE constraint failed: posts.slug, posts.lang"
    let message = sqlx_marker::unique_violation(error, &UNIQUE_CODES)?;
    let mut columns: Vec<&str> = message
        .rsplit_once("failed: ")
        .map(|(_, columns)| columns)
        .unwrap_or_default()
        .split(", ")
        .filter_map(|column| column.rsplit_once('.').map(|(_, name)| name))
        .collect();
    let index = columns.join(", ");
    columns.sort_unstable();
    let mut natural_key = table.natural_key_names();
    natural_key.sort_unstable();
    let is_key = columns == [ID_FIELD] || columns == natural_key;
    let met = (!columns.is_empty()).then_some((index, is_key));
    Some(sqlx_marker::conflict(message, met))
}
