//! PostgreSQL's errors as idem reports them: the SQLSTATE, whether a retry may help, whether the
//! server refused a row for what it holds, and a refusal that says the table is not the one
//! checked.

use crate::document::DocumentRef;
use crate::error::{BackendError, Error, ErrorKind};

/// Whether SQLSTATE `code` is the server refusing a row for what it holds: a data exception
/// (class 22: a value out of range, a bad encoding), an integrity constraint (23: another
/// unique constraint, a check) or a program limit (54: a key too long for its index). The same
/// row fails the same way however often it is sent.
pub(super) fn refuses_row(code: &str) -> bool {
    ["22", "23", "54"]
        .iter()
        .any(|class| code.starts_with(class))
}

/// A driver error as idem reports it: kept whole, with its SQLSTATE and whether a retry may
/// help.
pub fn driver_error(source: tokio_postgres::Error) -> BackendError {
    let code = source.code().map(|state| state.code().to_owned());
    let retryable = is_transient(&source);
    // The driver's own text of a server error is only "db error": show what the server said.
    let message = source.as_db_error().map(|db| {
        let mut message = format!("{} ({}): {}", db.severity(), db.code().code(), db.message());
        if let Some(detail) = db.detail() {
            message.push_str(&format!("; {detail}"));
        }
        message
    });
    let refuses_document = source.code().is_some_and(|state| refuses_row(state.code()));
    let mut error = BackendError::new("PostgreSQL", code, retryable, source);
    if refuses_document {
        error = error.refusing_document();
    }
    match message {
        Some(message) => error.with_message(message),
        None => error,
    }
}

pub(super) fn postgres_error(document: &DocumentRef, source: tokio_postgres::Error) -> Error {
    match schema_problem(&source) {
        Some(problem) => Error::new(
            document.clone(),
            ErrorKind::SchemaMismatch {
                collection: document.collection.to_owned(),
                problem,
            },
        ),
        None => Error::new(
            document.clone(),
            ErrorKind::Backend {
                source: driver_error(source),
            },
        ),
    }
}

/// What the server's refusal of a statement says about the table, if it refused it for the
/// table's shape: the statement met a table other than the one the store checked (it was
/// dropped, its creating transaction rolled back, a migration changed it, or the client's search
/// path leads to another schema's table, which does not even parse).
pub(super) fn schema_problem(source: &tokio_postgres::Error) -> Option<String> {
    let refusal = source.as_db_error()?;
    let found = match refusal.code().code() {
        // undefined_table
        "42P01" => {
            return Some(format!(
                "{}: it is not in the client's search path (dropped, or made by a transaction \
                 that rolled back); create it with Store::ensure_table::<T>() or from \
                 Store::create_table_sql::<T>()",
                refusal.message()
            ))
        }
        // invalid_column_reference: ON CONFLICT found no unique constraint for its target
        "42P10" => "it has no unique constraint on exactly the natural key",
        // object_not_in_prerequisite_state: the only one idem's statements meet
        "55000" => {
            "a unique constraint on the natural key is DEFERRABLE, which ON CONFLICT cannot use"
        }
        // undefined_column, datatype_mismatch, undefined_function (an operator of another type)
        "42703" | "42804" | "42883" => "a column of the model is missing or of another type",
        _ => return None,
    };
    Some(format!(
        "{}: {found}; the store checked another table (this one changed since, or the client's \
         search path leads to another schema): make it as Store::create_table_sql::<T>() prints it",
        refusal.message()
    ))
}

/// Whether the same call may succeed if made again: the connection failed or closed, or the
/// server asked for a retry (serialization failure, deadlock, shutdown, too many connections),
/// or gave up waiting (`lock_timeout`, `statement_timeout`: another transaction held the row).
pub(super) fn is_transient(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    match error.code() {
        Some(state) => {
            let code = state.code();
            code.starts_with("08")
                || matches!(
                    code,
                    "40001" | "40P01" | "57P01" | "57P02" | "57P03" | "53300" | "55P03" | "57014"
                )
        }
        // No SQLSTATE: the connection or the protocol failed, not the statement.
        None => std::error::Error::source(error)
            .is_some_and(|source| source.downcast_ref::<std::io::Error>().is_some()),
    }
}
