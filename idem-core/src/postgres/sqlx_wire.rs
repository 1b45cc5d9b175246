//! The store's statements through sqlx: a `PgConnection`, pooled or not, or a transaction on
//! one, sent through the SQL stores' sqlx wire ([`crate::sql::sqlx_wire::SqlxWire`]). sqlx sends
//! one request at a time on a connection, so inside a transaction a write's savepoint, the
//! statement and the savepoint's release are three round trips.

use serde_json::Value;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgArguments, PgDatabaseError, PgRow, PgSeverity};
use sqlx::{Arguments, PgConnection, Postgres, Row as _};

use super::errors::{reported, server_text, transient_code, ServerSaid};
use super::wire::{Cells, Connection, DbFailure, Param};
use crate::sql::sqlx_wire::{statement, Query, SqlxWire};

crate::sql::sqlx_wire::sqlx_database!(
    Postgres,
    savepoint_opens: false,
    failure: failure,
    bind: bound,
    transactions: savepoints
);

impl<'c> Connection for &'c mut PgConnection {
    type Wire = SqlxWire<'c, Postgres>;

    fn wire(self) -> SqlxWire<'c, Postgres> {
        SqlxWire::new(self)
    }
}

impl<'c> Connection for &'c mut sqlx::Transaction<'_, Postgres> {
    type Wire = SqlxWire<'c, Postgres>;

    fn wire(self) -> SqlxWire<'c, Postgres> {
        SqlxWire::new(&mut **self)
    }
}

impl<'c> Connection for &'c mut sqlx::pool::PoolConnection<Postgres> {
    type Wire = SqlxWire<'c, Postgres>;

    fn wire(self) -> SqlxWire<'c, Postgres> {
        SqlxWire::new(&mut **self)
    }
}

/// `sql` with `params` bound, each as the type it is sent as: encoded as added, so the values
/// are borrowed, not copied.
fn bound<'a>(sql: &'a str, params: &[Param<'_>]) -> Result<Query<'a, Postgres>, sqlx::Error> {
    let mut arguments = PgArguments::default();
    for param in params {
        let added = match *param {
            Param::Text(value) => arguments.add(value),
            Param::Texts(values) => arguments.add(values),
            Param::Byteas(values) => arguments.add(values),
            Param::Integer(value) => arguments.add(value),
            Param::Float(value) => arguments.add(value),
            Param::Bool(value) => arguments.add(value),
            Param::Oid(value) => arguments.add(Oid(value)),
            Param::Oids(values) => {
                arguments.add(values.iter().map(|oid| Oid(*oid)).collect::<Vec<_>>())
            }
        };
        added.map_err(sqlx::Error::Encode)?;
    }
    Ok(sqlx::query_with(statement(sql), arguments))
}

impl Cells for PgRow {
    super::wire::cells_from_types!(sqlx::Row::len);

    fn oid(&self, at: usize) -> Option<u32> {
        self.try_get::<Option<Oid>, _>(at)
            .ok()
            .flatten()
            .map(|oid| oid.0)
    }

    fn json(&self, at: usize) -> Result<Option<Value>, String> {
        self.try_get::<Option<sqlx::types::Json<Value>>, _>(at)
            .map(|json| json.map(|json| json.0))
            .map_err(|error| error.to_string())
    }
}

/// A sqlx error as idem reports it.
fn failure(source: sqlx::Error) -> DbFailure {
    let server = source
        .as_database_error()
        .and_then(|db| db.try_downcast_ref::<PgDatabaseError>());
    let server_message = server.map(|db| db.message().to_owned());
    let said = server.map(|db| ServerSaid {
        shown: server_text(
            severity(db.severity()),
            db.code(),
            db.message(),
            db.detail(),
        ),
        constraint: db
            .constraint()
            .map(|name| (name.to_owned(), db.schema().map(str::to_owned))),
    });
    let code = server.map(|db| db.code().to_owned());
    let retryable = match &code {
        Some(code) => transient_code(code),
        None => matches!(
            source,
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed
        ),
    };
    DbFailure::new(reported(source, code, retryable, said), server_message)
}

/// A severity as the server writes it.
fn severity(severity: PgSeverity) -> &'static str {
    match severity {
        PgSeverity::Panic => "PANIC",
        PgSeverity::Fatal => "FATAL",
        PgSeverity::Error => "ERROR",
        PgSeverity::Warning => "WARNING",
        PgSeverity::Notice => "NOTICE",
        PgSeverity::Debug => "DEBUG",
        PgSeverity::Info => "INFO",
        PgSeverity::Log => "LOG",
    }
}
