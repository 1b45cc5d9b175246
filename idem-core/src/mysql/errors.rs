//! The MySQL family's errors as idem reports them: the error number, whether a retry may help
//! (a lock wait, a deadlock, a write conflict), which refuse a row, which unique index it met.

use sqlx::mysql::MySqlDatabaseError;

use crate::document::DocumentRef;
use crate::engine::Conflict;
use crate::error::{BackendError, Error};
use crate::sql::sqlx_marker;
use crate::sql::wire::DbFailure;

use super::table::Table;

/// `ER_DUP_ENTRY`.
const DUPLICATE_KEY: &str = "1062";
/// `ER_NO_SUCH_TABLE`.
const NO_SUCH_TABLE: &str = "1146";

/// The error number of a server's error, if `source` is one.
pub(super) fn number(source: &sqlx::Error) -> Option<u16> {
    let error = source.as_database_error()?;
    Some(error.try_downcast_ref::<MySqlDatabaseError>()?.number())
}

/// A driver error as a failure of its statement, with the server's message.
pub(super) fn failure(source: sqlx::Error) -> DbFailure {
    sqlx_marker::failure(source, driver_error)
}

/// A driver error as idem reports it: kept whole, with its error number and whether a retry
/// may help.
pub fn driver_error(source: sqlx::Error) -> BackendError {
    let number = number(&source);
    // Lock wait timeout, deadlock, record changed since the snapshot (MariaDB's snapshot
    // isolation); TiDB's write conflicts and the errors it says to retry.
    let retry = matches!(number, Some(1205 | 1213 | 1020 | 9007 | 8002 | 8022 | 8028));
    // The row's values, not the call: too long, out of range, of another type, NULL, a CHECK
    // (JSON's validity too), a duplicate key, a foreign key, a trigger's SIGNAL.
    let refuses = matches!(
        number,
        Some(1062 | 1406 | 1264 | 1366 | 1265 | 1048 | 4025 | 3819 | 3140 | 1690)
            | Some(1451 | 1452 | 1644)
    );
    let code = number.map(|number| number.to_string());
    sqlx_marker::reported("MySQL", source, code, retry, refuses)
}

/// Whether `error` rolled back the transaction for a conflict with another, which may start
/// over ([`crate::sql::dialect::SqlDialect::restarts`]): a deadlock, a record changed
/// since the snapshot, TiDB's write conflicts. Not a lock wait timeout (1205), which a restart
/// would wait out again.
pub(super) fn restarts(error: &Error) -> bool {
    error
        .as_backend()
        .and_then(|backend| backend.code())
        .and_then(|code| code.parse::<u16>().ok())
        .is_some_and(|number| matches!(number, 1213 | 1020 | 9007 | 8002 | 8022 | 8028))
}

/// `source` as the error of a call concerning `document`: a table that is not there is a schema
/// problem, anything else the driver's.
pub(super) fn mysql_error(document: &DocumentRef, source: DbFailure) -> Error {
    let missing = source.code() == Some(NO_SUCH_TABLE);
    sqlx_marker::call_error(document, source, missing)
}

/// Which unique index a duplicate key of a single write met: the primary key (on the id, or on
/// the natural key where the rows are clustered on it), the natural key's or the id's
/// (`Conflict::Key`), or another, by its name.
pub(super) fn unique_conflict(error: &Error, table: &Table) -> Option<Conflict> {
    // "Duplicate entry 'hello-en' for key 'posts_idem_natural_key'"; MySQL 8 writes the key
    // as `posts.posts_idem_natural_key`.
    let message = sqlx_marker::unique_violation(error, &[DUPLICATE_KEY])?;
    let key = (message.rsplit_once(" for key '")).and_then(|(_, key)| key.strip_suffix('\''));
    let key = key.map(|key| key.rsplit_once('.').map_or(key, |(_, key)| key));
    let met = key.map(|key| {
        let is_key = [table.natural_key_constraint.as_str(), "PRIMARY"].contains(&key)
            || key == table.id_constraint();
        (key.to_owned(), is_key)
    });
    Some(sqlx_marker::conflict(message, met))
}
