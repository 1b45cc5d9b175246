//! What a SQL store asks of its connection, whatever the driver: send a statement with typed
//! parameters and hand back rows whose cells read as text, open and close a transaction of
//! idem's own (a savepoint inside the caller's), send a write so that its failure leaves the
//! caller's transaction usable, and read a long result row by row. sqlx's drivers meet it once
//! over sqlx's `Database` seam ([`super::sqlx_wire`]); tokio-postgres's clients meet it in the
//! PostgreSQL store. A statement's failure comes back as a [`DbFailure`], which each dialect
//! reads by its own codes.

use std::future::Future;
use std::pin::Pin;

use crate::column::ColumnShape;
use crate::error::{BackendError, Error};

/// One bound parameter, of the few types idem's statements take.
#[derive(Clone, Copy, Debug)]
// PostgreSQL's arrays and oids are bound by its store alone.
#[cfg_attr(not(feature = "_postgres"), allow(dead_code))]
pub enum Param<'a> {
    /// Text, or NULL.
    Text(Option<&'a str>),
    /// A 64-bit integer.
    Integer(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// PostgreSQL's `text[]`: one column's values over a batch's rows.
    Texts(&'a [Option<&'a str>]),
    /// PostgreSQL's `bytea[]`: a hash of each of a batch's rows.
    Byteas(&'a [Option<&'a [u8]>]),
    /// PostgreSQL's `oid`.
    Oid(u32),
    /// PostgreSQL's `oid[]`: the tables the store checked.
    Oids(&'a [u32]),
}

impl<'a> Param<'a> {
    /// `text` (a value as idem writes it: a number's digits, `true`, JSON) bound as what a column
    /// of `shape` holds, so that the column stores what serde wrote: an integer, a float (NaN
    /// and the infinities as their text), a boolean, or text.
    pub fn typed(shape: ColumnShape, text: Option<&'a str>) -> Param<'a> {
        let Some(text) = text else {
            return Param::Text(None);
        };
        match shape {
            ColumnShape::Integer => match text.parse::<i64>() {
                Ok(number) => Param::Integer(number),
                Err(_) => Param::Text(Some(text)),
            },
            ColumnShape::Float => match text.parse::<f64>() {
                Ok(number) if number.is_finite() => Param::Float(number),
                _ => Param::Text(Some(text)),
            },
            ColumnShape::Boolean => match text {
                "true" => Param::Bool(true),
                "false" => Param::Bool(false),
                // No boolean (another tool's `'yes'` in a boolean column): as it is, so that it
                // finds its own row, never one holding false.
                _ => Param::Text(Some(text)),
            },
            _ => Param::Text(Some(text)),
        }
    }
}

/// A row the server returned, read cell by cell: each database's own reading of its types.
// PostgreSQL's typed cells are read by its store alone.
#[cfg_attr(not(feature = "_postgres"), allow(dead_code))]
pub trait Cells {
    /// How many columns the row has.
    fn len(&self) -> usize;
    /// Cell `at` as text: a float as the shortest text that reads back as the very float, an
    /// integer as its digits, a boolean as `true` or `false`; `None` for NULL.
    fn text(&self, at: usize) -> Result<Option<String>, DbFailure>;
    /// Cell `at` as a boolean (any integer: not zero); `None` for NULL.
    fn boolean(&self, at: usize) -> Result<Option<bool>, DbFailure>;
    /// Cell `at` as an integer; `None` for NULL.
    fn integer(&self, at: usize) -> Result<Option<i64>, DbFailure>;

    // The typed cells of PostgreSQL's statements, read by its store alone: a cell that is NULL,
    // or not of the type asked for, reads as `None`.

    /// A `text` cell, borrowed.
    fn str(&self, _at: usize) -> Option<&str> {
        None
    }
    /// A `boolean` cell.
    fn flag(&self, at: usize) -> Option<bool> {
        self.boolean(at).ok().flatten()
    }
    /// A `bigint` cell.
    fn int8(&self, at: usize) -> Option<i64> {
        self.integer(at).ok().flatten()
    }
    /// A `double precision` cell.
    fn float(&self, _at: usize) -> Option<f64> {
        None
    }
    /// An `oid` cell.
    fn oid(&self, _at: usize) -> Option<u32> {
        None
    }
    /// A `text[]` cell.
    fn texts(&self, _at: usize) -> Option<Vec<String>> {
        None
    }
    /// A `jsonb` cell; `Err` says why it does not parse (a number beyond what a float holds,
    /// say), which a read reports rather than take the row for one not stored.
    fn json(&self, _at: usize) -> Result<Option<serde_json::Value>, String> {
        Ok(None)
    }

    /// A `jsonb` cell holding a row (`to_jsonb`), as every read of rows takes it: `None` for
    /// NULL; a cell that does not parse, or holds no object, is a deserialization error for
    /// `document`.
    fn object(
        &self,
        at: usize,
        document: &crate::document::DocumentRef,
    ) -> Result<Option<serde_json::Map<String, serde_json::Value>>, Error> {
        let refused = |message: String| {
            Error::new(
                document.clone(),
                crate::error::ErrorKind::Deserialize { message },
            )
        };
        match self.json(at).map_err(refused)? {
            None => Ok(None),
            Some(serde_json::Value::Object(stored)) => Ok(Some(stored)),
            Some(_) => Err(refused("a row did not read as an object".into())),
        }
    }
}

/// A statement the server or the driver refused, as idem reports it.
#[derive(Debug)]
pub struct DbFailure(Box<Failed>);

#[derive(Debug)]
#[cfg_attr(not(all(feature = "sqlite", feature = "mysql")), allow(dead_code))]
struct Failed {
    /// The driver's error with its code, constraint and whether a retry may help.
    error: BackendError,
    /// The server's own message, without severity or detail, if the server answered.
    server_message: Option<String>,
}

// Each dialect reads what its codes need: SQLite its message, the MySQL family its number.
#[cfg_attr(not(all(feature = "sqlite", feature = "mysql")), allow(dead_code))]
impl DbFailure {
    /// `error`, which the server answered with `server_message` if it answered.
    pub(crate) fn new(error: BackendError, server_message: Option<String>) -> Self {
        DbFailure(Box::new(Failed {
            error,
            server_message,
        }))
    }

    /// The server's code (a SQLSTATE, an error number), if the server answered.
    pub(crate) fn code(&self) -> Option<&str> {
        self.0.error.code()
    }

    /// The server's own message, without severity or detail, if the server answered.
    pub(crate) fn server_message(&self) -> Option<&str> {
        self.0.server_message.as_deref()
    }

    /// The driver's error, as idem reports it.
    pub(crate) fn into_error(self) -> BackendError {
        self.0.error
    }
}

impl std::fmt::Display for DbFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0.error, f)
    }
}

/// What a statement sent through a [`Wire`] comes to: a `Send` future behind a pointer, whatever
/// the driver's, so that a caller's future is `Send` by its type, not by a proof through sqlx's
/// higher-ranked bounds that the compiler cannot yet make at every caller
/// (rust-lang/rust#100013).
pub type WireFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, DbFailure>> + Send + 'a>>;

/// A connection (or the caller's transaction) that statements are sent through, one at a time.
/// Not for callers: each store lends the connection a call is given as one.
// The write in a savepoint of its own and the pipelining are PostgreSQL's strategy's.
#[cfg_attr(not(feature = "_postgres"), allow(dead_code))]
pub trait Wire: Send + Sync {
    /// A row as the driver returns it.
    type Row: Cells + Send + Sync;

    /// Sends `sql` with `params`; every row it returns.
    fn fetch_all<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Param<'a>],
    ) -> WireFuture<'a, Vec<Self::Row>>;

    /// Sends `sql` with `params`; its first row, if any (by default the first that
    /// [`Wire::fetch_all`] returns).
    fn fetch_optional<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Param<'a>],
    ) -> WireFuture<'a, Option<Self::Row>> {
        Box::pin(async move { Ok(self.fetch_all(sql, params).await?.into_iter().next()) })
    }

    /// Sends `sql` with `params`; how many rows it changed.
    fn execute<'a>(&'a self, sql: &'a str, params: &'a [Param<'a>]) -> WireFuture<'a, u64>;

    /// Opens a transaction of idem's own: a new one outside the caller's, a savepoint inside.
    fn begin(&self) -> WireFuture<'_, ()>;

    /// Commits what [`Wire::begin`] opened (releases the savepoint).
    fn commit(&self) -> WireFuture<'_, ()>;

    /// Rolls back what [`Wire::begin`] opened.
    fn rollback(&self) -> WireFuture<'_, ()>;

    /// Whether the caller holds a transaction open on the connection, which one of idem's own
    /// would be a savepoint in.
    fn in_callers_transaction(&self) -> WireFuture<'_, bool>;

    /// Sends `sql`, a write with `params` that returns rows, so that its failure leaves the
    /// caller's transaction as it was before it: inside one, in a savepoint of its own, rolled
    /// back to if it failed; outside, the statement is its own transaction. sqlx's connection
    /// is held from the savepoint to its end; tokio-postgres sends the three in one round trip,
    /// between which another task writing through the same transaction at that moment may send
    /// its own. A write dropped before its answer (a timeout) leaves its savepoint open, or the
    /// caller's transaction aborted, as any statement dropped mid-way would.
    fn write<'a>(&'a self, sql: &'a str, params: &'a [Param<'a>])
        -> WireFuture<'a, Vec<Self::Row>>;

    /// Whether two chunks of a batch may have statements in flight at once
    /// ([`crate::engine::batch::BatchDriver::chunks_in_flight`]): where requests pipeline on
    /// the session, each statement is its own transaction (so one that fails leaves the next
    /// as it would find it), and dropping a request in flight leaves the session usable.
    fn pipelines_chunks(&self) -> bool {
        false
    }

    /// Sends `sql` with `params` and hands each row to `each` as it arrives, so that a table's
    /// rows are never all held at once; stops at the first error, of the database (as `error`
    /// reports it) or of `each`.
    fn scan<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Param<'a>],
        error: impl Fn(DbFailure) -> Error + Send + 'a,
        each: impl FnMut(&Self::Row) -> Result<(), Error> + Send + 'a,
    ) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;
}

/// A wire lent by reference is the wire.
impl<W: Wire + ?Sized> Wire for &W {
    type Row = W::Row;

    fn fetch_all<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Param<'a>],
    ) -> WireFuture<'a, Vec<Self::Row>> {
        (**self).fetch_all(sql, params)
    }

    fn fetch_optional<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Param<'a>],
    ) -> WireFuture<'a, Option<Self::Row>> {
        (**self).fetch_optional(sql, params)
    }

    fn execute<'a>(&'a self, sql: &'a str, params: &'a [Param<'a>]) -> WireFuture<'a, u64> {
        (**self).execute(sql, params)
    }

    fn begin(&self) -> WireFuture<'_, ()> {
        (**self).begin()
    }

    fn commit(&self) -> WireFuture<'_, ()> {
        (**self).commit()
    }

    fn rollback(&self) -> WireFuture<'_, ()> {
        (**self).rollback()
    }

    fn in_callers_transaction(&self) -> WireFuture<'_, bool> {
        (**self).in_callers_transaction()
    }

    fn write<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Param<'a>],
    ) -> WireFuture<'a, Vec<Self::Row>> {
        (**self).write(sql, params)
    }

    fn pipelines_chunks(&self) -> bool {
        (**self).pipelines_chunks()
    }

    fn scan<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Param<'a>],
        error: impl Fn(DbFailure) -> Error + Send + 'a,
        each: impl FnMut(&Self::Row) -> Result<(), Error> + Send + 'a,
    ) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>> {
        (**self).scan(sql, params, error, each)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_that_is_no_boolean_is_bound_as_text_not_as_false() {
        let bound = |text| match Param::typed(ColumnShape::Boolean, Some(text)) {
            Param::Bool(flag) => Some(flag.to_string()),
            Param::Text(text) => text.map(|text| format!("text {text}")),
            _ => None,
        };
        assert_eq!(bound("true").as_deref(), Some("true"));
        assert_eq!(bound("false").as_deref(), Some("false"));
        assert_eq!(bound("yes").as_deref(), Some("text yes"));
    }
}
