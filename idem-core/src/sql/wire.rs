//! What a SQL store built on sqlx asks of its connection: send a statement with typed parameters
//! and hand back rows whose cells read as text, open and close a transaction of idem's own (a
//! savepoint inside the caller's), and read a long result row by row. Written once over sqlx's
//! `Database` seam ([`SqlxWire`]); each database says only how its cells read as text
//! ([`Cells`]).

use sqlx::{Database, Encode, Type};

use crate::error::Error;
use std::future::Future;
use tokio::sync::Mutex;

use crate::column::ColumnShape;

/// One bound parameter, of the few types idem's statements take.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Param<'a> {
    /// Text, or NULL.
    Text(Option<&'a str>),
    /// A 64-bit integer.
    Integer(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
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
            ColumnShape::Boolean => Param::Bool(text == "true"),
            _ => Param::Text(Some(text)),
        }
    }
}

/// A row the server returned, read cell by cell: each database's own reading of its types.
pub(crate) trait Cells {
    /// How many columns the row has.
    fn len(&self) -> usize;
    /// Cell `at` as text: a float as the shortest text that reads back as the very float, an
    /// integer as its digits, a boolean as `true` or `false`; `None` for NULL.
    fn text(&self, at: usize) -> Result<Option<String>, sqlx::Error>;
    /// Cell `at` as a boolean (any integer: not zero); `None` for NULL.
    fn boolean(&self, at: usize) -> Result<Option<bool>, sqlx::Error>;
    /// Cell `at` as an integer; `None` for NULL.
    fn integer(&self, at: usize) -> Result<Option<i64>, sqlx::Error>;
}

/// What a statement sent through a [`Wire`] comes to: a `Send` future behind a pointer, whatever
/// the driver's, so that a caller's future is `Send` by its type, not by a proof through sqlx's
/// higher-ranked bounds that the compiler cannot yet make at every caller
/// (rust-lang/rust#100013).
pub(crate) type WireFuture<'a, T> =
    std::pin::Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'a>>;

/// A connection (or the caller's transaction) that statements are sent through, one at a time.
pub(crate) trait Wire: Send + Sync {
    /// A row as the driver returns it.
    type Row: Cells + Send + Sync;

    /// Sends `sql` with `params`; every row it returns.
    fn fetch_all<'a>(
        &'a self,
        sql: &'a str,
        params: &[Param<'_>],
    ) -> WireFuture<'a, Vec<Self::Row>>;

    /// Sends `sql` with `params`; its first row, if any.
    fn fetch_optional<'a>(
        &'a self,
        sql: &'a str,
        params: &[Param<'_>],
    ) -> WireFuture<'a, Option<Self::Row>>;

    /// Sends `sql` with `params`; how many rows it changed.
    fn execute<'a>(&'a self, sql: &'a str, params: &[Param<'_>]) -> WireFuture<'a, u64>;

    /// Opens a transaction of idem's own: a new one outside the caller's, a savepoint inside.
    fn begin(&self) -> WireFuture<'_, ()>;

    /// Commits what [`Wire::begin`] opened (releases the savepoint).
    fn commit(&self) -> WireFuture<'_, ()>;

    /// Rolls back what [`Wire::begin`] opened.
    fn rollback(&self) -> WireFuture<'_, ()>;

    /// Whether the caller holds a transaction open on the connection, which one of idem's own
    /// would be a savepoint in.
    fn in_callers_transaction(&self) -> WireFuture<'_, bool>;

    /// Sends `sql` with `params` and hands each row to `each` as it arrives, so that a table's
    /// rows are never all held at once; stops at the first error, of the database (as `error`
    /// reports it) or of `each`.
    fn scan<'a>(
        &'a self,
        sql: &'a str,
        params: &[Param<'_>],
        error: impl Fn(sqlx::Error) -> Error + Send + 'a,
        each: impl FnMut(&Self::Row) -> Result<(), Error> + Send + 'a,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;
}

/// A statement idem built: identifiers quoted, every value a bound parameter.
pub(crate) fn statement(sql: &str) -> sqlx::AssertSqlSafe<&str> {
    sqlx::AssertSqlSafe(sql)
}

/// A sqlx connection as a [`Wire`]: the caller's `&mut` connection (or transaction, which
/// dereferences to one) behind a lock, as a session's calls take turns on it.
#[derive(Debug)]
pub(crate) struct SqlxWire<'c, DB: Database> {
    connection: Mutex<&'c mut DB::Connection>,
    /// What each [`Wire::begin`] not yet committed or rolled back opened, the latest last.
    opened: std::sync::Mutex<Vec<Opened>>,
}

/// What a transaction of idem's own is on the connection.
#[derive(Clone, Copy, Debug)]
enum Opened {
    /// A transaction sqlx opened (`BEGIN`), where none was open.
    Transaction,
    /// `SAVEPOINT idem`, inside the caller's transaction (or opening one, on SQLite): sqlx's
    /// count of the caller's transactions is left as it is, so a rollback that fails (after
    /// InnoDB rolled the caller's whole transaction back for a deadlock) leaves it right.
    Savepoint,
}

impl<'c, DB: Database> SqlxWire<'c, DB> {
    /// What [`Wire::begin`] opened and no commit or rollback closed yet.
    fn opened_mut(&self) -> std::sync::MutexGuard<'_, Vec<Opened>> {
        self.opened
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Statements sent through `connection`.
    pub fn new(connection: &'c mut DB::Connection) -> Self {
        SqlxWire {
            connection: Mutex::new(connection),
            opened: std::sync::Mutex::default(),
        }
    }

    /// The connection back.
    pub fn into_connection(self) -> &'c mut DB::Connection {
        self.connection.into_inner()
    }
}

/// A sqlx driver's database as a [`SqlxWire`] sends to it: its connection's statements and
/// transactions, each written once per driver by [`sqlx_database!`], without the
/// higher-ranked bounds a generic body over sqlx's `Database` would need.
pub(crate) trait SqlxDatabase: Database {
    /// A row, as the store reads it.
    type Cells: Cells + Send + Sync;

    /// `sql` with `params` bound.
    fn prepare<'a>(sql: &'a str, params: &[Param<'_>]) -> Result<Query<'a, Self>, sqlx::Error>;
    /// Sends `query`; every row it returns.
    fn fetch_all<'a>(
        connection: &'a mut Self::Connection,
        query: Query<'a, Self>,
    ) -> WireFuture<'a, Vec<Self::Cells>>;
    /// Sends `query`; its first row, if any.
    fn fetch_optional<'a>(
        connection: &'a mut Self::Connection,
        query: Query<'a, Self>,
    ) -> WireFuture<'a, Option<Self::Cells>>;
    /// Sends `query`; how many rows it changed.
    fn execute<'a>(
        connection: &'a mut Self::Connection,
        query: Query<'a, Self>,
    ) -> WireFuture<'a, u64>;
    /// Opens a transaction, or a savepoint inside the one open.
    fn begin(connection: &mut Self::Connection) -> WireFuture<'_, ()>;
    /// Commits the transaction, or releases the savepoint, [`SqlxDatabase::begin`] opened.
    fn commit(connection: &mut Self::Connection) -> WireFuture<'_, ()>;
    /// Rolls back what [`SqlxDatabase::begin`] opened.
    fn rollback(connection: &mut Self::Connection) -> WireFuture<'_, ()>;
    /// How many transactions and savepoints sqlx opened on `connection`.
    fn depth(connection: &Self::Connection) -> usize;
    /// Whether a savepoint opens a transaction where none is open (SQLite's), so that idem's
    /// own is one whatever the caller holds, a transaction opened by a plain `BEGIN` too.
    const SAVEPOINT_OPENS: bool;
    /// Sends `query`; its rows as they arrive.
    fn stream<'a>(
        connection: &'a mut Self::Connection,
        query: Query<'a, Self>,
    ) -> futures_core::stream::BoxStream<'a, Result<Self::Cells, sqlx::Error>>;
}

/// A statement of `DB` with its arguments bound.
pub(crate) type Query<'a, DB> = sqlx::query::Query<'a, DB, <DB as Database>::Arguments>;

/// Implements [`SqlxDatabase`] for the sqlx driver whose database is `$db`.
macro_rules! sqlx_database {
    ($db:ty, savepoint_opens: $savepoint_opens:expr) => {
        impl $crate::sql::wire::SqlxDatabase for $db {
            type Cells = <$db as ::sqlx::Database>::Row;

            const SAVEPOINT_OPENS: bool = $savepoint_opens;

            fn depth(connection: &<$db as ::sqlx::Database>::Connection) -> usize {
                use ::sqlx_core::transaction::TransactionManager as _;
                <$db as ::sqlx::Database>::TransactionManager::get_transaction_depth(connection)
            }

            fn prepare<'a>(
                sql: &'a str,
                params: &[$crate::sql::wire::Param<'_>],
            ) -> Result<$crate::sql::wire::Query<'a, Self>, ::sqlx::Error> {
                $crate::sql::wire::bound::<$db>(sql, params)
            }

            fn fetch_all<'a>(
                connection: &'a mut <$db as ::sqlx::Database>::Connection,
                query: $crate::sql::wire::Query<'a, Self>,
            ) -> $crate::sql::wire::WireFuture<'a, Vec<Self::Cells>> {
                Box::pin(query.fetch_all(connection))
            }

            fn fetch_optional<'a>(
                connection: &'a mut <$db as ::sqlx::Database>::Connection,
                query: $crate::sql::wire::Query<'a, Self>,
            ) -> $crate::sql::wire::WireFuture<'a, Option<Self::Cells>> {
                Box::pin(query.fetch_optional(connection))
            }

            fn execute<'a>(
                connection: &'a mut <$db as ::sqlx::Database>::Connection,
                query: $crate::sql::wire::Query<'a, Self>,
            ) -> $crate::sql::wire::WireFuture<'a, u64> {
                Box::pin(async move {
                    query
                        .execute(connection)
                        .await
                        .map(|done| done.rows_affected())
                })
            }

            fn begin(
                connection: &mut <$db as ::sqlx::Database>::Connection,
            ) -> $crate::sql::wire::WireFuture<'_, ()> {
                use ::sqlx_core::transaction::TransactionManager as _;
                Box::pin(<$db as ::sqlx::Database>::TransactionManager::begin(
                    connection, None,
                ))
            }

            fn commit(
                connection: &mut <$db as ::sqlx::Database>::Connection,
            ) -> $crate::sql::wire::WireFuture<'_, ()> {
                use ::sqlx_core::transaction::TransactionManager as _;
                Box::pin(<$db as ::sqlx::Database>::TransactionManager::commit(
                    connection,
                ))
            }

            fn stream<'a>(
                connection: &'a mut <$db as ::sqlx::Database>::Connection,
                query: $crate::sql::wire::Query<'a, Self>,
            ) -> ::futures_core::stream::BoxStream<'a, Result<Self::Cells, ::sqlx::Error>> {
                query.fetch(connection)
            }

            fn rollback(
                connection: &mut <$db as ::sqlx::Database>::Connection,
            ) -> $crate::sql::wire::WireFuture<'_, ()> {
                use ::sqlx_core::transaction::TransactionManager as _;
                Box::pin(<$db as ::sqlx::Database>::TransactionManager::rollback(
                    connection,
                ))
            }
        }
    };
}
pub(crate) use sqlx_database;

/// `sql` with `params` bound, as a query of `DB`.
pub(crate) fn bound<'a, DB>(
    sql: &'a str,
    params: &[Param<'_>],
) -> Result<Query<'a, DB>, sqlx::Error>
where
    DB: Database,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> f64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
{
    use sqlx::Arguments as _;
    let mut arguments = DB::Arguments::default();
    for param in params {
        let added = match *param {
            Param::Text(text) => arguments.add(text.map(str::to_owned)),
            Param::Integer(number) => arguments.add(number),
            Param::Float(number) => arguments.add(number),
            Param::Bool(flag) => arguments.add(flag),
        };
        added.map_err(sqlx::Error::Encode)?;
    }
    Ok(sqlx::query_with(statement(sql), arguments))
}

impl<DB: SqlxDatabase> Wire for SqlxWire<'_, DB> {
    type Row = DB::Cells;

    fn fetch_all<'a>(
        &'a self,
        sql: &'a str,
        params: &[Param<'_>],
    ) -> WireFuture<'a, Vec<DB::Cells>> {
        let query = DB::prepare(sql, params);
        Box::pin(async move { DB::fetch_all(*self.connection.lock().await, query?).await })
    }

    fn fetch_optional<'a>(
        &'a self,
        sql: &'a str,
        params: &[Param<'_>],
    ) -> WireFuture<'a, Option<DB::Cells>> {
        let query = DB::prepare(sql, params);
        Box::pin(async move { DB::fetch_optional(*self.connection.lock().await, query?).await })
    }

    fn execute<'a>(&'a self, sql: &'a str, params: &[Param<'_>]) -> WireFuture<'a, u64> {
        let query = DB::prepare(sql, params);
        Box::pin(async move { DB::execute(*self.connection.lock().await, query?).await })
    }

    fn begin(&self) -> WireFuture<'_, ()> {
        Box::pin(async move {
            let mut connection = self.connection.lock().await;
            let opened = match DB::SAVEPOINT_OPENS || DB::depth(&connection) > 0 {
                true => {
                    let savepoint = DB::prepare("SAVEPOINT idem", &[])?;
                    DB::execute(*connection, savepoint).await?;
                    Opened::Savepoint
                }
                false => {
                    DB::begin(*connection).await?;
                    Opened::Transaction
                }
            };
            self.opened_mut().push(opened);
            Ok(())
        })
    }

    fn commit(&self) -> WireFuture<'_, ()> {
        Box::pin(async move {
            let mut connection = self.connection.lock().await;
            let opened = self.opened_mut().last().copied();
            match opened {
                Some(Opened::Transaction) => DB::commit(*connection).await?,
                Some(Opened::Savepoint) => {
                    let release = DB::prepare("RELEASE SAVEPOINT idem", &[])?;
                    DB::execute(*connection, release).await?;
                }
                None => return Ok(()),
            }
            // Not committed, it stays open for the rollback that follows a failed commit.
            self.opened_mut().pop();
            Ok(())
        })
    }

    fn rollback(&self) -> WireFuture<'_, ()> {
        Box::pin(async move {
            let mut connection = self.connection.lock().await;
            let opened = self.opened_mut().pop();
            match opened {
                Some(Opened::Transaction) => DB::rollback(*connection).await,
                Some(Opened::Savepoint) => {
                    // Rolled back to, the savepoint is still there (and on SQLite, the
                    // transaction it opened): released, whatever the rollback did.
                    let undo = DB::prepare("ROLLBACK TO SAVEPOINT idem", &[])?;
                    let undone = DB::execute(*connection, undo).await;
                    let release = DB::prepare("RELEASE SAVEPOINT idem", &[])?;
                    let released = DB::execute(*connection, release).await;
                    undone.and(released).map(drop)
                }
                None => Ok(()),
            }
        })
    }

    fn in_callers_transaction(&self) -> WireFuture<'_, bool> {
        use sqlx_core::transaction::TransactionManager as _;
        Box::pin(async move {
            let connection = self.connection.lock().await;
            Ok(DB::TransactionManager::get_transaction_depth(&**connection) > 0)
        })
    }

    fn scan<'a>(
        &'a self,
        sql: &'a str,
        params: &[Param<'_>],
        error: impl Fn(sqlx::Error) -> Error + Send + 'a,
        mut each: impl FnMut(&DB::Cells) -> Result<(), Error> + Send + 'a,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>> {
        let query = DB::prepare(sql, params);
        Box::pin(async move {
            let query = query.map_err(&error)?;
            let mut connection = self.connection.lock().await;
            let mut rows = DB::stream(*connection, query);
            while let Some(row) =
                std::future::poll_fn(|context| rows.as_mut().poll_next(context)).await
            {
                each(&row.map_err(&error)?)?;
            }
            Ok(())
        })
    }
}
