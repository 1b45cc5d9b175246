//! The store's statements through tokio-postgres: a `Client` or a `Transaction`, whose
//! requests pipeline, so a write's savepoint and its release travel in the statement's own
//! round trip.

use std::future::{poll_fn, Future};
use std::pin::pin;

use futures_core::Stream;
use serde_json::Value;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row};

use super::errors::{reported, server_text, transient_code, ServerSaid};
use super::wire::{Cells, Connection, DbFailure, Param, Wire};
use crate::error::{BackendError, Error};
use crate::sql::wire::WireFuture;

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
            Param::Integer(value) => (value as &(dyn ToSql + Sync), Type::INT8),
            Param::Float(value) => (value as &(dyn ToSql + Sync), Type::FLOAT8),
            Param::Bool(value) => (value as &(dyn ToSql + Sync), Type::BOOL),
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
    crate::trace::statement_sent(sql);
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
    crate::trace::statement_sent(sql);
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
    params: &[Param<'_>],
    error: impl Fn(DbFailure) -> Error,
    mut each: impl FnMut(&Row) -> Result<(), Error>,
) -> Result<(), Error> {
    crate::trace::statement_sent(sql);
    let rows = client
        .query_typed_raw(sql, typed(params))
        .await
        .map_err(|source| error(failure(source)))?;
    let mut rows = pin!(rows);
    while let Some(row) = poll_fn(|context| rows.as_mut().poll_next(context)).await {
        each(&row.map_err(|source| error(failure(source)))?)?;
    }
    Ok(())
}

/// Sends `sql` (a statement of idem's own: a savepoint's) as one request of the simple protocol,
/// where the client stands for the caller's transaction. A plain client is shared by the tasks
/// that hold it, whose statements would join a transaction opened on it: the store opens none.
async fn own_transaction<C: TokioClient>(client: &C, sql: &str) -> Result<(), DbFailure> {
    if !C::IN_TRANSACTION {
        return Err(DbFailure::new(
            BackendError::new("PostgreSQL", None, false, NoOwnTransaction),
            None,
        ));
    }
    client.batch_execute(sql).await.map_err(failure)
}

/// A transaction of idem's own asked of a client shared by tasks.
#[derive(Debug, thiserror::Error)]
#[error("the store opens no transaction of its own on a tokio-postgres Client")]
struct NoOwnTransaction;

/// Sends `sql` with `params`; how many rows it changed.
async fn execute<C: TokioClient>(
    client: &C,
    sql: &str,
    params: &[Param<'_>],
) -> Result<u64, DbFailure> {
    crate::trace::statement_sent(sql);
    let rows = client
        .query_typed_raw(sql, typed(params))
        .await
        .map_err(failure)?;
    let mut rows = pin!(rows);
    while let Some(row) = poll_fn(|context| rows.as_mut().poll_next(context)).await {
        row.map_err(failure)?;
    }
    Ok(rows.rows_affected().unwrap_or(0))
}

/// Implements [`Wire`] for a tokio-postgres client type over the functions above.
macro_rules! tokio_wire {
    ($($client:ty),*) => {$(
        impl Wire for $client {
            type Row = Row;

            fn fetch_all<'a>(
                &'a self,
                sql: &'a str,
                params: &'a [Param<'a>],
            ) -> WireFuture<'a, Vec<Row>> {
                Box::pin(query(self, sql, params))
            }

            fn execute<'a>(
                &'a self,
                sql: &'a str,
                params: &'a [Param<'a>],
            ) -> WireFuture<'a, u64> {
                Box::pin(execute(self, sql, params))
            }

            fn begin(&self) -> WireFuture<'_, ()> {
                Box::pin(own_transaction(self, "SAVEPOINT idem"))
            }

            fn commit(&self) -> WireFuture<'_, ()> {
                Box::pin(own_transaction(self, "RELEASE SAVEPOINT idem"))
            }

            fn rollback(&self) -> WireFuture<'_, ()> {
                Box::pin(own_transaction(
                    self,
                    "ROLLBACK TO SAVEPOINT idem; RELEASE SAVEPOINT idem",
                ))
            }

            fn in_callers_transaction(&self) -> WireFuture<'_, bool> {
                Box::pin(std::future::ready(Ok(<Self as TokioClient>::IN_TRANSACTION)))
            }

            fn write<'a>(
                &'a self,
                sql: &'a str,
                params: &'a [Param<'a>],
            ) -> WireFuture<'a, Vec<Row>> {
                Box::pin(write(self, sql, params))
            }

            // Not inside a transaction: a write that fails there aborts it until its
            // savepoint is rolled back to, after its reply, and the other chunk's statements
            // already sent would fail with it.
            fn pipelines_chunks(&self) -> bool {
                !<Self as TokioClient>::IN_TRANSACTION
            }

            fn scan<'a>(
                &'a self,
                sql: &'a str,
                params: &'a [Param<'a>],
                error: impl Fn(DbFailure) -> Error + Send + 'a,
                each: impl FnMut(&Row) -> Result<(), Error> + Send + 'a,
            ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>> {
                Box::pin(scan(self, sql, params, error, each))
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
    super::wire::cells_from_types!(Row::len);

    fn oid(&self, at: usize) -> Option<u32> {
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
    // The driver's own text of a server error is only "db error": show what the server said.
    let said = source.as_db_error().map(|db| ServerSaid {
        shown: server_text(db.severity(), db.code().code(), db.message(), db.detail()),
        constraint: db
            .constraint()
            .map(|name| (name.to_owned(), db.schema().map(str::to_owned))),
    });
    reported(source, code, retryable, said)
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
