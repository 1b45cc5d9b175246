//! What the PostgreSQL store asks of a driver: send a statement with its parameters and hand
//! back the rows, as a write inside a savepoint when the caller holds a transaction, or read a
//! long result row by row. The store's SQL, its checks and its reading of the rows are the same
//! on every driver; tokio-postgres ([`super::tokio_wire`]) and sqlx ([`super::sqlx_wire`])
//! each implement this seam and nothing else.

use std::future::Future;

use serde_json::Value;

use crate::document::DocumentRef;
use crate::error::{BackendError, Error, ErrorKind};

/// One bound parameter of a statement, of the few types idem's statements take.
#[derive(Clone, Copy, Debug)]
pub enum Param<'a> {
    /// `text`, or NULL.
    Text(Option<&'a str>),
    /// `text[]`: one column's values over a batch's rows.
    Texts(&'a [Option<&'a str>]),
    /// `bytea[]`: a hash of each of a batch's rows.
    Byteas(&'a [Option<&'a [u8]>]),
    /// `bigint`.
    Int8(i64),
    /// `oid`.
    Oid(u32),
    /// `oid[]`: the tables the store checked.
    Oids(&'a [u32]),
}

/// The parameters of a statement over `unnest`ed columns: one text array per column, then the
/// oids of the tables its guard accepts ([`super::table::Table::checked_oids`]).
pub(super) fn unnested<'p>(
    columns: &'p [Vec<Option<&'p str>>],
    checked: &'p [u32],
) -> Vec<Param<'p>> {
    let mut parameters: Vec<Param> = columns.iter().map(|column| Param::Texts(column)).collect();
    parameters.push(Param::Oids(checked));
    parameters
}

/// Parameters of `text` type, one per value.
pub(super) fn texts<S: AsRef<str>>(values: &[Option<S>]) -> Vec<Param<'_>> {
    values
        .iter()
        .map(|value| Param::Text(value.as_ref().map(AsRef::as_ref)))
        .collect()
}

/// A row the server returned, read cell by cell. A cell that is NULL, or not of the type
/// asked for (which idem's own statements never return), reads as `None`.
pub trait Cells {
    /// How many columns the row has.
    fn len(&self) -> usize;
    /// A `text` cell.
    fn text(&self, at: usize) -> Option<&str>;
    /// A `boolean` cell.
    fn boolean(&self, at: usize) -> Option<bool>;
    /// A `bigint` cell.
    fn int8(&self, at: usize) -> Option<i64>;
    /// An `oid` cell.
    fn oid(&self, at: usize) -> Option<u32>;
    /// A `text[]` cell.
    fn texts(&self, at: usize) -> Option<Vec<String>>;
    /// A `jsonb` cell; `Err` says why it does not parse (a number beyond what a float holds,
    /// say), which a read reports rather than take the row for one not stored.
    fn json(&self, at: usize) -> Result<Option<Value>, String>;

    /// A `jsonb` cell holding a row (`to_jsonb`), as every read of rows takes it: `None` for
    /// NULL; a cell that does not parse, or holds no object, is [`ErrorKind::Deserialize`] for
    /// `document`.
    fn object(
        &self,
        at: usize,
        document: &DocumentRef,
    ) -> Result<Option<serde_json::Map<String, Value>>, Error> {
        let refused =
            |message: String| Error::new(document.clone(), ErrorKind::Deserialize { message });
        match self.json(at).map_err(refused)? {
            None => Ok(None),
            Some(Value::Object(stored)) => Ok(Some(stored)),
            Some(_) => Err(refused("a row did not read as an object".into())),
        }
    }
}

/// A statement the server or the driver refused, as idem reports it.
#[derive(Debug)]
pub struct DbFailure(Box<Failed>);

#[derive(Debug)]
struct Failed {
    /// The driver's error with its SQLSTATE, constraint and whether a retry may help.
    error: BackendError,
    /// The server's own message, without severity or detail, if the server answered.
    server_message: Option<String>,
}

impl DbFailure {
    pub(super) fn new(error: BackendError, server_message: Option<String>) -> Self {
        DbFailure(Box::new(Failed {
            error,
            server_message,
        }))
    }

    /// The SQLSTATE, if the server answered.
    pub(super) fn code(&self) -> Option<&str> {
        self.0.error.code()
    }

    /// The server's own message, without severity or detail, if the server answered.
    pub(super) fn server_message(&self) -> Option<&str> {
        self.0.server_message.as_deref()
    }

    /// The driver's error, as idem reports it.
    pub(super) fn into_error(self) -> BackendError {
        self.0.error
    }
}

/// A client of one PostgreSQL session: what the store sends its statements through. Sealed:
/// implemented for tokio-postgres's clients and sqlx's connections only.
pub trait Wire: Sync + Send {
    /// A row as the driver returns it.
    type Row: Cells + Send + Sync;

    /// Whether statements run inside a transaction block the caller holds.
    fn in_transaction(&self) -> bool;

    /// Whether two chunks of a batch may have statements in flight at once
    /// ([`crate::engine::batch::BatchDriver::chunks_in_flight`]): where requests pipeline on
    /// the session, each statement is its own transaction (so one that fails leaves the next
    /// as it would find it), and dropping a request in flight leaves the session usable.
    fn pipelines_chunks(&self) -> bool {
        false
    }

    /// Sends `sql` with `params` and returns every row.
    fn query(
        &self,
        sql: &str,
        params: &[Param<'_>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, DbFailure>> + Send;

    /// Sends `sql`, a write with `params`, so that its failure leaves the caller's transaction
    /// as it was before it: inside a transaction, between `SAVEPOINT` and `RELEASE`, and rolled
    /// back to the savepoint if it failed. Outside a transaction the statement is its own.
    fn write(
        &self,
        sql: &str,
        params: &[Param<'_>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, DbFailure>> + Send;

    /// Sends `sql`, one or more statements without parameters.
    fn execute(&self, sql: &str) -> impl Future<Output = Result<(), DbFailure>> + Send;

    /// Sends `sql` and hands each row to `each` as it arrives, so that a table's rows are never
    /// all held at once; stops at the first error, of the server or of `each`.
    fn scan(
        &self,
        sql: &str,
        document: &DocumentRef,
        each: impl FnMut(&Self::Row) -> Result<(), Error>,
    ) -> impl Future<Output = Result<(), Error>>;
}

impl<W: Wire> Wire for &W {
    type Row = W::Row;

    fn in_transaction(&self) -> bool {
        (**self).in_transaction()
    }

    fn pipelines_chunks(&self) -> bool {
        (**self).pipelines_chunks()
    }

    fn query(
        &self,
        sql: &str,
        params: &[Param<'_>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, DbFailure>> + Send {
        (**self).query(sql, params)
    }

    fn write(
        &self,
        sql: &str,
        params: &[Param<'_>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, DbFailure>> + Send {
        (**self).write(sql, params)
    }

    fn execute(&self, sql: &str) -> impl Future<Output = Result<(), DbFailure>> + Send {
        (**self).execute(sql)
    }

    fn scan(
        &self,
        sql: &str,
        document: &DocumentRef,
        each: impl FnMut(&Self::Row) -> Result<(), Error>,
    ) -> impl Future<Output = Result<(), Error>> {
        (**self).scan(sql, document, each)
    }
}

/// The one row a statement returns, or the failure saying it returned none.
pub(super) fn one<R>(rows: Vec<R>, what: &'static str) -> Result<R, DbFailure> {
    rows.into_iter().next().ok_or_else(|| {
        DbFailure::new(
            BackendError::new("PostgreSQL", None, false, NoRow(what)),
            None,
        )
    })
}

/// A statement that returns one row by construction returned none.
#[derive(Debug, thiserror::Error)]
#[error("{0} returned no row")]
struct NoRow(&'static str);

/// What idem writes through: a client, connection or transaction of a PostgreSQL driver.
///
/// With tokio-postgres: `&Client` (a pooled client dereferences to one: `&**object` from
/// deadpool-postgres, `&*connection` from bb8) or `&Transaction`, opened with
/// `Client::transaction`. With sqlx (feature `sqlx-postgres`): `&mut PgConnection`, a pooled
/// connection (`&mut PoolConnection<Postgres>`, or `&mut *conn`) or `&mut Transaction<Postgres>`.
///
/// Inside a transaction, each write statement that may fail (a racing writer's row met on the
/// primary key, another unique constraint, a CHECK) runs in a savepoint, so that idem can retry
/// it or split a batch one row at a time, and the transaction stays usable after any refusal
/// idem reports. Each is a subtransaction, and a transaction of more than 64 of them (an
/// `upsert_many` of more than 64 chunks, say) pays PostgreSQL's cost of many subtransactions;
/// commit large ingests in several transactions. With tokio-postgres the savepoint travels in
/// the statement's own round trip; sqlx sends one request at a time, so there a write inside a
/// transaction costs three round trips instead of one.
///
/// A transaction opened with a plain `BEGIN` statement is not one idem can see: a failed
/// statement aborts it, as any statement would. Open it with the driver's transaction API.
#[diagnostic::on_unimplemented(
    message = "idem's PostgreSQL store writes through a tokio-postgres `&Client` or `&Transaction`, or a sqlx `&mut PgConnection` or `&mut Transaction<Postgres>`, not `{Self}`",
    label = "not a PostgreSQL client idem writes through",
    note = "pass a reference: `&client`, `&tx` (tokio-postgres), `&mut *conn`, `&mut tx` (sqlx); from a sqlx `PgPool`, `&mut pool.acquire().await?`, or `&mut tx` of `pool.begin()`; a pooled tokio-postgres client dereferences to a `Client` (`&**object` from deadpool-postgres)"
)]
pub trait Connection: private::Sealed {
    /// The session statements are sent through.
    #[doc(hidden)]
    type Wire: Wire;

    /// The session this client stands for.
    #[doc(hidden)]
    fn wire(self) -> Self::Wire;
}

/// A wire a [`super::Session`] holds, lent to the store's methods for one call. Not for
/// callers: a session is made with [`super::Store::on`].
#[doc(hidden)]
#[derive(Debug)]
pub struct Lent<'w, W>(pub(super) &'w W);

#[doc(hidden)]
impl<'w, W: Wire> Connection for Lent<'w, W> {
    type Wire = &'w W;

    fn wire(self) -> &'w W {
        self.0
    }
}

pub(super) mod private {
    pub trait Sealed {}
    impl<W: super::Wire> Sealed for super::Lent<'_, W> {}
    #[cfg(feature = "postgres")]
    impl Sealed for &tokio_postgres::Client {}
    #[cfg(feature = "postgres")]
    impl Sealed for &tokio_postgres::Transaction<'_> {}
    #[cfg(feature = "sqlx-postgres")]
    impl Sealed for &mut sqlx::PgConnection {}
    #[cfg(feature = "sqlx-postgres")]
    impl Sealed for &mut sqlx::Transaction<'_, sqlx::Postgres> {}
    #[cfg(feature = "sqlx-postgres")]
    impl Sealed for &mut sqlx::pool::PoolConnection<sqlx::Postgres> {}
}
