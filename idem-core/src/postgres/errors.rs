//! PostgreSQL's errors as idem reports them: the SQLSTATE, whether a retry may help, whether the
//! server refused a row for what it holds, and a refusal that says the table is not the one
//! checked.

use super::wire::DbFailure;
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};

/// Whether SQLSTATE `code` is the server refusing a row for what it holds: a data exception
/// (class 22: a value out of range, a bad encoding), an integrity constraint (23: another
/// unique constraint, a check, a foreign key), a program limit (54: a key too long for its
/// index) or a trigger raising (P0001). The same row fails the same way however often it is
/// sent.
pub(super) fn refuses_row(code: &str) -> bool {
    code == "P0001"
        || ["22", "23", "54"]
            .iter()
            .any(|class| code.starts_with(class))
}

/// What the server said of a failed statement, as either driver reads it.
pub(super) struct ServerSaid {
    /// Its severity, SQLSTATE, message and detail, as [`server_text`] shows them.
    pub shown: String,
    /// The constraint it names, and that constraint's table's schema.
    pub constraint: Option<(String, Option<String>)>,
}

/// A driver's error as idem reports it: kept whole, with its SQLSTATE and whether a retry may
/// help, marked as the server's refusal of the row where the SQLSTATE says so, and shown with
/// what the server said (the drivers' own text of a server error may leave it out).
pub(super) fn reported(
    source: impl std::error::Error + Send + Sync + 'static,
    code: Option<String>,
    retryable: bool,
    said: Option<ServerSaid>,
) -> crate::error::BackendError {
    let refuses_document = code.as_deref().is_some_and(refuses_row);
    let mut error = crate::error::BackendError::new("PostgreSQL", code, retryable, source);
    if refuses_document {
        error = error.refusing_document();
    }
    let Some(said) = said else {
        return error;
    };
    if let Some((name, schema)) = said.constraint {
        error = error.with_constraint(name, schema);
    }
    error.with_message(said.shown)
}

/// How a server error is shown: its severity, SQLSTATE, message and detail.
pub(super) fn server_text(
    severity: &str,
    code: &str,
    message: &str,
    detail: Option<&str>,
) -> String {
    let mut shown = format!("{severity} ({code}): {message}");
    if let Some(detail) = detail {
        shown.push_str(&format!("; {detail}"));
    }
    shown
}

/// A statement's failure as idem reports it: a refusal naming what is wrong with the table if
/// the server refused the statement for the table's shape, else the driver's error.
pub(super) fn postgres_error(document: &DocumentRef, source: DbFailure) -> Error {
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
                source: source.into_error(),
            },
        ),
    }
}

/// What the server's refusal of a statement says about the table, if it refused it for the
/// table's shape: the statement met a table other than the one the store checked (it was
/// dropped, its creating transaction rolled back, a migration changed it, or the client's search
/// path leads to another schema's table, which does not even parse).
pub(super) fn schema_problem(source: &DbFailure) -> Option<String> {
    let message = source.server_message()?;
    let found = match source.code()? {
        // undefined_table
        "42P01" => {
            return Some(format!(
                "{}: it is not in the client's search path (dropped, or made by a transaction \
                 that rolled back); create it with Store::ensure_table::<T>() or from \
                 Store::create_table_sql::<T>()",
                message
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
        message
    ))
}

/// Whether SQLSTATE `code` says the same call may succeed if made again: the connection
/// failed (class 08), the server asked for a retry (serialization failure, deadlock, shutdown,
/// too many connections), or gave up waiting (`lock_timeout`, `statement_timeout`: another
/// transaction held the row).
pub(super) fn transient_code(code: &str) -> bool {
    code.starts_with("08")
        || matches!(
            code,
            "40001" | "40P01" | "57P01" | "57P02" | "57P03" | "53300" | "55P03" | "57014"
        )
}
