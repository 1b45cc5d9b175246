//! The store's statements through sqlx: a `PgConnection`, pooled or not, or a transaction on
//! one. sqlx sends one request at a time on a connection, so inside a transaction a write's
//! savepoint, the statement and the savepoint's release are three round trips.

use std::future::poll_fn;
use std::pin::pin;

use futures_core::Stream;
use serde_json::Value;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgArguments, PgDatabaseError, PgRow, PgSeverity};
use sqlx::{Arguments, Connection as _, Executor, PgConnection, Row as _};
use tokio::sync::Mutex;

use super::errors::{refuses_row, transient_code};
use super::wire::{Cells, Connection, DbFailure, Param, Wire};
use crate::document::DocumentRef;
use crate::error::{BackendError, Error};

/// One sqlx connection the store's statements take turns on.
#[doc(hidden)]
pub struct SqlxWire<'c> {
    connection: Mutex<&'c mut PgConnection>,
    in_transaction: bool,
}

impl std::fmt::Debug for SqlxWire<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlxWire")
            .field("in_transaction", &self.in_transaction)
            .finish_non_exhaustive()
    }
}

impl<'c> Connection for &'c mut PgConnection {
    type Wire = SqlxWire<'c>;

    fn wire(self) -> SqlxWire<'c> {
        SqlxWire {
            in_transaction: self.is_in_transaction(),
            connection: Mutex::new(self),
        }
    }
}

impl<'c> Connection for &'c mut sqlx::Transaction<'_, sqlx::Postgres> {
    type Wire = SqlxWire<'c>;

    fn wire(self) -> SqlxWire<'c> {
        (&mut **self).wire()
    }
}

impl<'c> Connection for &'c mut sqlx::pool::PoolConnection<sqlx::Postgres> {
    type Wire = SqlxWire<'c>;

    fn wire(self) -> SqlxWire<'c> {
        (&mut **self).wire()
    }
}

/// A statement idem built: identifiers quoted, every value a bound parameter.
fn statement(sql: &str) -> sqlx::AssertSqlSafe<&str> {
    sqlx::AssertSqlSafe(sql)
}

/// `params` as sqlx binds them, each with the type it is sent as.
fn arguments(params: &[Param<'_>]) -> Result<PgArguments, DbFailure> {
    let mut arguments = PgArguments::default();
    for param in params {
        // Encoded as added: the values are borrowed, not copied.
        let added = match *param {
            Param::Text(value) => arguments.add(value),
            Param::Texts(values) => arguments.add(values),
            Param::Byteas(values) => arguments.add(values),
            Param::Int8(value) => arguments.add(value),
            Param::Oid(value) => arguments.add(Oid(value)),
            Param::Oids(values) => {
                arguments.add(values.iter().map(|oid| Oid(*oid)).collect::<Vec<_>>())
            }
        };
        added.map_err(|source| failure(sqlx::Error::Encode(source)))?;
    }
    Ok(arguments)
}

impl SqlxWire<'_> {
    async fn run(
        connection: &mut PgConnection,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<PgRow>, DbFailure> {
        let arguments = arguments(params)?;
        sqlx::query_with(statement(sql), arguments)
            .fetch_all(connection)
            .await
            .map_err(failure)
    }
}

impl Wire for SqlxWire<'_> {
    type Row = PgRow;

    fn in_transaction(&self) -> bool {
        self.in_transaction
    }

    async fn query(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<PgRow>, DbFailure> {
        let mut connection = self.connection.lock().await;
        Self::run(&mut connection, sql, params).await
    }

    async fn write(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<PgRow>, DbFailure> {
        let mut connection = self.connection.lock().await;
        if !self.in_transaction {
            return Self::run(&mut connection, sql, params).await;
        }
        crate::trace::round_trip("SAVEPOINT");
        simple(&mut connection, "SAVEPOINT idem_statement").await?;
        let result = Self::run(&mut connection, sql, params).await;
        crate::trace::round_trip("RELEASE SAVEPOINT");
        let ending = match result {
            Ok(_) => "RELEASE SAVEPOINT idem_statement",
            Err(_) => "ROLLBACK TO SAVEPOINT idem_statement; RELEASE SAVEPOINT idem_statement",
        };
        match (result, simple(&mut connection, ending).await) {
            (Ok(rows), released) => released.map(|()| rows),
            // The statement's error is the one to report, whatever the rollback answers.
            (Err(error), _) => Err(error),
        }
    }

    async fn execute(&self, sql: &str) -> Result<(), DbFailure> {
        let mut connection = self.connection.lock().await;
        simple(&mut connection, sql).await
    }

    async fn scan(
        &self,
        sql: &str,
        document: &DocumentRef,
        mut each: impl FnMut(&PgRow) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let to_error = |source| super::errors::postgres_error(document, failure(source));
        let mut connection = self.connection.lock().await;
        let mut rows = pin!(sqlx::query(statement(sql)).fetch(&mut **connection));
        while let Some(row) = poll_fn(|context| rows.as_mut().poll_next(context)).await {
            each(&row.map_err(to_error)?)?;
        }
        Ok(())
    }
}

/// Sends `sql`, statements without parameters, in one simple-protocol request.
async fn simple(connection: &mut PgConnection, sql: &str) -> Result<(), DbFailure> {
    connection
        .execute(sqlx::raw_sql(statement(sql)))
        .await
        .map(drop)
        .map_err(failure)
}

impl Cells for PgRow {
    fn len(&self) -> usize {
        sqlx::Row::len(self)
    }

    fn text(&self, at: usize) -> Option<&str> {
        self.try_get(at).ok().flatten()
    }

    fn boolean(&self, at: usize) -> Option<bool> {
        self.try_get(at).ok().flatten()
    }

    fn int8(&self, at: usize) -> Option<i64> {
        self.try_get(at).ok().flatten()
    }

    fn oid(&self, at: usize) -> Option<u32> {
        self.try_get::<Option<Oid>, _>(at)
            .ok()
            .flatten()
            .map(|oid| oid.0)
    }

    fn texts(&self, at: usize) -> Option<Vec<String>> {
        self.try_get(at).ok().flatten()
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
    let shown = server.map(|db| {
        super::errors::server_text(
            severity(db.severity()),
            db.code(),
            db.message(),
            db.detail(),
        )
    });
    let constraint = server.and_then(|db| {
        db.constraint()
            .map(|name| (name.to_owned(), db.schema().map(str::to_owned)))
    });
    let code = server.map(|db| db.code().to_owned());
    let retryable = match &code {
        Some(code) => transient_code(code),
        None => matches!(
            source,
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed
        ),
    };
    let refuses_document = code.as_deref().is_some_and(refuses_row);
    let mut error = BackendError::new("PostgreSQL", code, retryable, source);
    if refuses_document {
        error = error.refusing_document();
    }
    if let Some((name, schema)) = constraint {
        error = error.with_constraint(name, schema);
    }
    if let Some(shown) = shown {
        error = error.with_message(shown);
    }
    DbFailure::new(error, server_message)
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
