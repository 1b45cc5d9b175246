//! The store's statements through tokio-postgres: a `Client` or a `Transaction`, whose
//! requests pipeline, so a write's savepoint and its release travel in the statement's own
//! round trip.

use std::future::{poll_fn, Future};
use std::pin::pin;

use futures_core::Stream;
use serde_json::Value;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row};

use super::errors::{refuses_row, transient_code};
use super::wire::{Cells, Connection, DbFailure, Param, Wire};
use crate::document::DocumentRef;
use crate::error::{BackendError, Error};

/// The savepoint around each of idem's write statements inside a transaction: opened, released
/// after a statement that succeeded, rolled back to (and released) after one that failed.
const OPEN: &str = "SAVEPOINT idem_statement";
const RELEASE: &str = "RELEASE SAVEPOINT idem_statement";
const ROLL_BACK: &str = "ROLLBACK TO SAVEPOINT idem_statement; RELEASE SAVEPOINT idem_statement";

/// A tokio-postgres client and whether it stands for a transaction.
trait TokioClient: GenericClient + Sync + Send {
    const IN_TRANSACTION: bool;
}

impl TokioClient for tokio_postgres::Client {
    const IN_TRANSACTION: bool = false;
}

impl TokioClient for tokio_postgres::Transaction<'_> {
    const IN_TRANSACTION: bool = true;
}

/// Each parameter with the type it is sent as.
fn typed<'a>(params: &'a [Param<'a>]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    params
        .iter()
        .map(|param| match param {
            Param::Text(value) => (value as &(dyn ToSql + Sync), Type::TEXT),
            Param::Texts(values) => (values as &(dyn ToSql + Sync), Type::TEXT_ARRAY),
            Param::Byteas(values) => (values as &(dyn ToSql + Sync), Type::BYTEA_ARRAY),
            Param::Int8(value) => (value as &(dyn ToSql + Sync), Type::INT8),
            Param::Oid(value) => (value as &(dyn ToSql + Sync), Type::OID),
            Param::Oids(values) => (values as &(dyn ToSql + Sync), Type::OID_ARRAY),
        })
        .collect()
}

async fn query<C: TokioClient>(
    client: &C,
    sql: &str,
    params: &[Param<'_>],
) -> Result<Vec<Row>, DbFailure> {
    client
        .query_typed(sql, &typed(params))
        .await
        .map_err(failure)
}

async fn write<C: TokioClient>(
    client: &C,
    sql: &str,
    params: &[Param<'_>],
) -> Result<Vec<Row>, DbFailure> {
    let params = typed(params);
    let statement = client.query_typed(sql, &params);
    if !C::IN_TRANSACTION {
        return statement.await.map_err(failure);
    }
    // Polled in this order, the three requests leave in this order, before any reply.
    let (opened, result, released) = futures_util::future::join3(
        client.batch_execute(OPEN),
        statement,
        client.batch_execute(RELEASE),
    )
    .await;
    match (opened, result, released) {
        (Ok(()), Ok(written), released) => released.map(|()| written).map_err(failure),
        // The server ran the statement and released the savepoint; the client refused its
        // reply: nothing to roll back, and the transaction is as the statement left it.
        (Ok(()), Err(error), Ok(())) => Err(failure(error)),
        (Ok(()), Err(error), Err(_)) => {
            crate::trace::round_trip("ROLLBACK TO SAVEPOINT");
            // The statement's error is the one to report, whatever the rollback answers.
            let _ = client.batch_execute(ROLL_BACK).await;
            Err(failure(error))
        }
        // The transaction was aborted before this call: the statement's error says so.
        (Err(_), result, _) => result.map_err(failure),
    }
}

async fn scan<C: TokioClient>(
    client: &C,
    sql: &str,
    document: &DocumentRef,
    mut each: impl FnMut(&Row) -> Result<(), Error>,
) -> Result<(), Error> {
    let to_error = |source| super::errors::postgres_error(document, failure(source));
    let rows = client
        .query_typed_raw(sql, std::iter::empty::<(&(dyn ToSql + Sync), Type)>())
        .await
        .map_err(to_error)?;
    let mut rows = pin!(rows);
    while let Some(row) = poll_fn(|context| rows.as_mut().poll_next(context)).await {
        each(&row.map_err(to_error)?)?;
    }
    Ok(())
}

/// Implements [`Wire`] for a tokio-postgres client type over the functions above.
macro_rules! tokio_wire {
    ($($client:ty),*) => {$(
        impl Wire for $client {
            type Row = Row;

            fn in_transaction(&self) -> bool {
                <Self as TokioClient>::IN_TRANSACTION
            }

            // Not inside a transaction: a write that fails there aborts it until its
            // savepoint is rolled back to, after its reply, and the other chunk's statements
            // already sent would fail with it.
            fn pipelines_chunks(&self) -> bool {
                !<Self as TokioClient>::IN_TRANSACTION
            }

            fn query(
                &self,
                sql: &str,
                params: &[Param<'_>],
            ) -> impl Future<Output = Result<Vec<Row>, DbFailure>> + Send {
                query(self, sql, params)
            }

            fn write(
                &self,
                sql: &str,
                params: &[Param<'_>],
            ) -> impl Future<Output = Result<Vec<Row>, DbFailure>> + Send {
                write(self, sql, params)
            }

            async fn execute(&self, sql: &str) -> Result<(), DbFailure> {
                self.batch_execute(sql).await.map_err(failure)
            }

            fn scan(
                &self,
                sql: &str,
                document: &DocumentRef,
                each: impl FnMut(&Row) -> Result<(), Error>,
            ) -> impl Future<Output = Result<(), Error>> {
                scan(self, sql, document, each)
            }
        }
    )*};
}

tokio_wire!(tokio_postgres::Client, tokio_postgres::Transaction<'_>);

impl<'c> Connection for &'c tokio_postgres::Client {
    type Wire = &'c tokio_postgres::Client;

    fn wire(self) -> Self::Wire {
        self
    }
}

impl<'c, 't> Connection for &'c tokio_postgres::Transaction<'t> {
    type Wire = &'c tokio_postgres::Transaction<'t>;

    fn wire(self) -> Self::Wire {
        self
    }
}

impl Cells for Row {
    fn len(&self) -> usize {
        Row::len(self)
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
        self.try_get(at).ok().flatten()
    }

    fn texts(&self, at: usize) -> Option<Vec<String>> {
        self.try_get(at).ok().flatten()
    }

    fn json(&self, at: usize) -> Result<Option<Value>, String> {
        self.try_get(at)
            .map_err(|error| match std::error::Error::source(&error) {
                Some(cause) => format!("{error}: {cause}"),
                None => error.to_string(),
            })
    }
}

/// A tokio-postgres error as idem reports it.
fn failure(source: tokio_postgres::Error) -> DbFailure {
    let server_message = source.as_db_error().map(|db| db.message().to_owned());
    DbFailure::new(driver_error(source), server_message)
}

/// A tokio-postgres error as idem reports it: kept whole, with its SQLSTATE, the constraint it
/// names and whether a retry may help.
pub fn driver_error(source: tokio_postgres::Error) -> BackendError {
    let code = source.code().map(|state| state.code().to_owned());
    let retryable = is_transient(&source);
    let refuses_document = code.as_deref().is_some_and(refuses_row);
    // The driver's own text of a server error is only "db error": show what the server said.
    let shown = source.as_db_error().map(|db| {
        super::errors::server_text(db.severity(), db.code().code(), db.message(), db.detail())
    });
    let constraint = source.as_db_error().and_then(|db| {
        db.constraint()
            .map(|name| (name.to_owned(), db.schema().map(str::to_owned)))
    });
    let mut error = BackendError::new("PostgreSQL", code, retryable, source);
    if refuses_document {
        error = error.refusing_document();
    }
    if let Some((name, schema)) = constraint {
        error = error.with_constraint(name, schema);
    }
    match shown {
        Some(message) => error.with_message(message),
        None => error,
    }
}

/// Whether the same call may succeed if made again: the connection failed or closed, or the
/// server's SQLSTATE says so ([`transient_code`]).
fn is_transient(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    match error.code() {
        Some(state) => transient_code(state.code()),
        // No SQLSTATE: the connection or the protocol failed, not the statement.
        None => std::error::Error::source(error)
            .is_some_and(|source| source.downcast_ref::<std::io::Error>().is_some()),
    }
}
