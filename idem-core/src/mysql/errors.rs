//! The MySQL family's errors as idem reports them: the error number, whether a retry may help
//! (a lock wait timeout, a deadlock, a write conflict), which refuse one document's values, and
//! which unique index a refused write met.

use sqlx::mysql::MySqlDatabaseError;

use crate::document::DocumentRef;
use crate::engine::Conflict;
use crate::error::{BackendError, Error, ErrorKind};
use crate::sql::wire::DbFailure;

use super::table::Table;

/// `ER_DUP_ENTRY`.
const DUPLICATE_KEY: u16 = 1062;
/// `ER_NO_SUCH_TABLE`.
const NO_SUCH_TABLE: u16 = 1146;

/// The error number of a server's error, if `source` is one.
pub(super) fn number(source: &sqlx::Error) -> Option<u16> {
    let error = source.as_database_error()?;
    Some(error.try_downcast_ref::<MySqlDatabaseError>()?.number())
}

/// A driver error as a failure of its statement, with the server's message.
pub(super) fn failure(source: sqlx::Error) -> DbFailure {
    let message = source
        .as_database_error()
        .map(|error| error.message().to_owned());
    DbFailure::new(driver_error(source), message)
}

/// A driver error as idem reports it: kept whole, with its error number and whether a retry
/// may help.
pub fn driver_error(source: sqlx::Error) -> BackendError {
    let number = number(&source);
    let retryable = match &source {
        // Lock wait timeout, deadlock, record changed since the snapshot (MariaDB's snapshot
        // isolation); TiDB's write conflicts and the errors it says to retry.
        sqlx::Error::Database(_) => {
            matches!(number, Some(1205 | 1213 | 1020 | 9007 | 8002 | 8022 | 8028))
        }
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
        _ => false,
    };
    // The row's values, not the call: too long, out of range, not of the column's type, NULL
    // in a NOT NULL column, a CHECK (MariaDB's JSON validity among them), a duplicate key; a
    // batch goes row by row to tell which.
    let refuses_document = matches!(
        number,
        Some(1062 | 1406 | 1264 | 1366 | 1265 | 1048 | 4025 | 3819 | 3140 | 1690)
    );
    let error = BackendError::new("MySQL", number.map(|n| n.to_string()), retryable, source);
    match refuses_document {
        true => error.refusing_document(),
        false => error,
    }
}

/// Whether `error` rolled back the transaction for a conflict with another, which may start
/// over at once ([`crate::sql::dialect::MarkerDialect::restarts`]): a deadlock, a record changed
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
    match source.code().and_then(|code| code.parse::<u16>().ok()) {
        Some(NO_SUCH_TABLE) => Error::new(
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
        _ => Error::new(
            document.clone(),
            ErrorKind::Backend {
                source: source.into_error(),
            },
        ),
    }
}

/// Which unique index a duplicate key of a single write met: the primary key or the natural
/// key's (`Conflict::Key`), or another, by its name.
pub(super) fn unique_conflict(error: &Error, table: &Table) -> Option<Conflict> {
    let backend = error.as_backend()?;
    if backend.code() != Some(&*DUPLICATE_KEY.to_string()) {
        return None;
    }
    // "Duplicate entry 'hello-en' for key 'posts_idem_natural_key'"; MySQL 8 writes the key
    // as `posts.posts_idem_natural_key`.
    let message = backend.to_string();
    let Some(key) = message
        .rsplit_once(" for key '")
        .and_then(|(_, key)| key.strip_suffix('\''))
    else {
        return Some(Conflict::Unclear { index: message });
    };
    let key = key.rsplit_once('.').map_or(key, |(_, key)| key);
    Some(match key {
        "PRIMARY" => Conflict::Key,
        key if key == table.natural_key_constraint => Conflict::Key,
        key => Conflict::Other {
            index: key.to_owned(),
        },
    })
}
