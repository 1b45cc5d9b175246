//! The [`Wire`] of every sqlx driver, written once over sqlx's `Database` seam: the caller's
//! connection behind a lock, its statements, and a transaction of idem's own (sqlx's `BEGIN`
//! where none is open, `SAVEPOINT idem` inside one). Each database says how its parameters bind
//! and how its errors read ([`sqlx_database!`]); its rows read as [`Cells`].

use std::future::Future;

use sqlx::Database;
use tokio::sync::Mutex;

use super::wire::{Cells, DbFailure, Param, Wire, WireFuture};
use crate::error::Error;

/// A statement idem built (identifiers quoted, every value a bound parameter), as it leaves
/// ([`crate::trace::statement_sent`]).
pub(crate) fn statement(sql: &str) -> sqlx::AssertSqlSafe<&str> {
    crate::trace::statement_sent(sql);
    sqlx::AssertSqlSafe(sql)
}

/// A sqlx connection as a [`Wire`]: the caller's `&mut` connection (or transaction, which
/// dereferences to one) behind a lock, as a session's calls take turns on it.
#[derive(Debug)]
#[doc(hidden)]
pub struct SqlxWire<'c, DB: Database> {
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
#[doc(hidden)]
pub trait SqlxDatabase: Database {
    /// A row, as the store reads it.
    type Cells: Cells + Send + Sync;

    /// `source` as idem reports it: its code, whether a retry may help, the server's message.
    fn failure(source: sqlx::Error) -> DbFailure;
    /// `sql` with `params` bound.
    fn bind<'a>(sql: &'a str, params: &[Param<'_>]) -> Result<Query<'a, Self>, sqlx::Error>;
    /// Sends `query`; every row it returns.
    fn fetch_all<'a>(
        connection: &'a mut Self::Connection,
        query: Query<'a, Self>,
    ) -> SqlxFuture<'a, Vec<Self::Cells>>;
    /// Sends `query`; its first row, if any.
    fn fetch_optional<'a>(
        connection: &'a mut Self::Connection,
        query: Query<'a, Self>,
    ) -> SqlxFuture<'a, Option<Self::Cells>>;
    /// Sends `query`; how many rows it changed.
    fn execute<'a>(
        connection: &'a mut Self::Connection,
        query: Query<'a, Self>,
    ) -> SqlxFuture<'a, u64>;
    /// Opens a transaction, or a savepoint inside the one open.
    fn begin(connection: &mut Self::Connection) -> SqlxFuture<'_, ()>;
    /// Commits the transaction, or releases the savepoint, [`SqlxDatabase::begin`] opened.
    fn commit(connection: &mut Self::Connection) -> SqlxFuture<'_, ()>;
    /// Rolls back what [`SqlxDatabase::begin`] opened.
    fn rollback(connection: &mut Self::Connection) -> SqlxFuture<'_, ()>;
    /// Whether sqlx holds a transaction open on `connection` (the caller's).
    fn in_transaction(connection: &Self::Connection) -> bool;
    /// Sends `sql`, statements without parameters, in one request of the simple protocol: not
    /// prepared, nor kept in the connection's cache of prepared statements.
    fn simple<'a>(connection: &'a mut Self::Connection, sql: &'a str) -> SqlxFuture<'a, ()>;
    /// Whether a savepoint opens a transaction where none is open (SQLite's), so that idem's
    /// own is one whatever the caller holds, a transaction opened by a plain `BEGIN` too.
    const SAVEPOINT_OPENS: bool;
    /// Sends `query`; its rows as they arrive.
    fn stream<'a>(
        connection: &'a mut Self::Connection,
        query: Query<'a, Self>,
    ) -> futures_core::stream::BoxStream<'a, Result<Self::Cells, sqlx::Error>>;
}

/// What a statement of a sqlx driver comes to, before its error is read as a [`DbFailure`].
pub type SqlxFuture<'a, T> =
    std::pin::Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'a>>;

/// A statement of `DB` with its arguments bound.
pub type Query<'a, DB> = sqlx::query::Query<'a, DB, <DB as Database>::Arguments>;

/// Implements [`SqlxDatabase`] for the sqlx driver whose database is `$db`.
///
/// `transactions: own` where the store opens transactions of its own outside the caller's (its
/// sqlx driver's `BEGIN`, through sqlx's transaction manager, so that sqlx counts them);
/// `transactions: savepoints` where it opens none but savepoints inside the caller's
/// (PostgreSQL's writes): there a transaction of its own is refused, never opened behind sqlx.
macro_rules! sqlx_database {
    (
        $db:ty,
        savepoint_opens: $savepoint_opens:expr,
        failure: $failure:path,
        bind: $bind:path,
        transactions: $transactions:ident
    ) => {
        impl $crate::sql::sqlx_wire::SqlxDatabase for $db {
            type Cells = <$db as ::sqlx::Database>::Row;

            const SAVEPOINT_OPENS: bool = $savepoint_opens;

            fn failure(source: ::sqlx::Error) -> $crate::sql::wire::DbFailure {
                $failure(source)
            }

            fn in_transaction(connection: &<$db as ::sqlx::Database>::Connection) -> bool {
                ::sqlx::Connection::is_in_transaction(connection)
            }

            fn simple<'a>(
                connection: &'a mut <$db as ::sqlx::Database>::Connection,
                sql: &'a str,
            ) -> $crate::sql::sqlx_wire::SqlxFuture<'a, ()> {
                Box::pin(async move {
                    ::sqlx::Executor::execute(
                        connection,
                        ::sqlx::raw_sql($crate::sql::sqlx_wire::statement(sql)),
                    )
                    .await
                    .map(drop)
                })
            }

            $crate::sql::sqlx_wire::sqlx_database!(@$transactions $db);

            fn bind<'a>(
                sql: &'a str,
                params: &[$crate::sql::wire::Param<'_>],
            ) -> Result<$crate::sql::sqlx_wire::Query<'a, Self>, ::sqlx::Error> {
                $bind(sql, params)
            }

            fn fetch_all<'a>(
                connection: &'a mut <$db as ::sqlx::Database>::Connection,
                query: $crate::sql::sqlx_wire::Query<'a, Self>,
            ) -> $crate::sql::sqlx_wire::SqlxFuture<'a, Vec<Self::Cells>> {
                Box::pin(query.fetch_all(connection))
            }

            fn fetch_optional<'a>(
                connection: &'a mut <$db as ::sqlx::Database>::Connection,
                query: $crate::sql::sqlx_wire::Query<'a, Self>,
            ) -> $crate::sql::sqlx_wire::SqlxFuture<'a, Option<Self::Cells>> {
                Box::pin(query.fetch_optional(connection))
            }

            fn execute<'a>(
                connection: &'a mut <$db as ::sqlx::Database>::Connection,
                query: $crate::sql::sqlx_wire::Query<'a, Self>,
            ) -> $crate::sql::sqlx_wire::SqlxFuture<'a, u64> {
                Box::pin(async move {
                    query
                        .execute(connection)
                        .await
                        .map(|done| done.rows_affected())
                })
            }

            fn stream<'a>(
                connection: &'a mut <$db as ::sqlx::Database>::Connection,
                query: $crate::sql::sqlx_wire::Query<'a, Self>,
            ) -> ::futures_core::stream::BoxStream<'a, Result<Self::Cells, ::sqlx::Error>> {
                query.fetch(connection)
            }

        }
    };
    (@own $db:ty) => {
            fn begin(
                connection: &mut <$db as ::sqlx::Database>::Connection,
            ) -> $crate::sql::sqlx_wire::SqlxFuture<'_, ()> {
                use ::sqlx_core::transaction::TransactionManager as _;
                Box::pin(<$db as ::sqlx::Database>::TransactionManager::begin(
                    connection, None,
                ))
            }

            fn commit(
                connection: &mut <$db as ::sqlx::Database>::Connection,
            ) -> $crate::sql::sqlx_wire::SqlxFuture<'_, ()> {
                use ::sqlx_core::transaction::TransactionManager as _;
                Box::pin(<$db as ::sqlx::Database>::TransactionManager::commit(
                    connection,
                ))
            }

            fn rollback(
                connection: &mut <$db as ::sqlx::Database>::Connection,
            ) -> $crate::sql::sqlx_wire::SqlxFuture<'_, ()> {
                use ::sqlx_core::transaction::TransactionManager as _;
                Box::pin(<$db as ::sqlx::Database>::TransactionManager::rollback(
                    connection,
                ))
            }
    };
    (@savepoints $db:ty) => {
        fn begin(
            _connection: &mut <$db as ::sqlx::Database>::Connection,
        ) -> $crate::sql::sqlx_wire::SqlxFuture<'_, ()> {
            Box::pin(std::future::ready(Err($crate::sql::sqlx_wire::no_own_transaction())))
        }

        fn commit(
            _connection: &mut <$db as ::sqlx::Database>::Connection,
        ) -> $crate::sql::sqlx_wire::SqlxFuture<'_, ()> {
            Box::pin(std::future::ready(Err($crate::sql::sqlx_wire::no_own_transaction())))
        }

        fn rollback(
            _connection: &mut <$db as ::sqlx::Database>::Connection,
        ) -> $crate::sql::sqlx_wire::SqlxFuture<'_, ()> {
            Box::pin(std::future::ready(Err($crate::sql::sqlx_wire::no_own_transaction())))
        }
    };
}
pub(crate) use sqlx_database;

/// What a store that opens no transaction of its own answers a call that would open one.
#[cfg(feature = "sqlx-postgres")]
pub(crate) fn no_own_transaction() -> sqlx::Error {
    sqlx::Error::InvalidArgument(
        "this store opens no transaction of its own outside the caller's".to_owned(),
    )
}

/// `sql` with `params` bound, as a query of `DB`.
#[cfg(feature = "_marker_store")]
pub(crate) fn bound<'a, DB>(
    sql: &'a str,
    params: &[Param<'_>],
) -> Result<Query<'a, DB>, sqlx::Error>
where
    DB: Database,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> Option<String>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> f64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> bool: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    use sqlx::Arguments as _;
    let mut arguments = DB::Arguments::default();
    for param in params {
        let added = match *param {
            Param::Text(text) => arguments.add(text.map(str::to_owned)),
            Param::Integer(number) => arguments.add(number),
            Param::Float(number) => arguments.add(number),
            Param::Bool(flag) => arguments.add(flag),
            Param::Texts(_) | Param::Byteas(_) | Param::Oid(_) | Param::Oids(_) => {
                return Err(sqlx::Error::Encode(
                    format!("{param:?} is bound by PostgreSQL's store alone").into(),
                ))
            }
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
        params: &'a [Param<'a>],
    ) -> WireFuture<'a, Vec<DB::Cells>> {
        let query = DB::bind(sql, params);
        Box::pin(async move {
            DB::fetch_all(*self.connection.lock().await, query.map_err(DB::failure)?)
                .await
                .map_err(DB::failure)
        })
    }

    fn fetch_optional<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Param<'a>],
    ) -> WireFuture<'a, Option<DB::Cells>> {
        let query = DB::bind(sql, params);
        Box::pin(async move {
            DB::fetch_optional(*self.connection.lock().await, query.map_err(DB::failure)?)
                .await
                .map_err(DB::failure)
        })
    }

    fn execute<'a>(&'a self, sql: &'a str, params: &'a [Param<'a>]) -> WireFuture<'a, u64> {
        let query = DB::bind(sql, params);
        Box::pin(async move {
            DB::execute(*self.connection.lock().await, query.map_err(DB::failure)?)
                .await
                .map_err(DB::failure)
        })
    }

    fn begin(&self) -> WireFuture<'_, ()> {
        Box::pin(read_failure::<DB, _>(async move {
            let mut connection = self.connection.lock().await;
            let opened = match DB::SAVEPOINT_OPENS || DB::in_transaction(&connection) {
                true => {
                    let savepoint = DB::bind("SAVEPOINT idem", &[])?;
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
        }))
    }

    fn commit(&self) -> WireFuture<'_, ()> {
        Box::pin(read_failure::<DB, _>(async move {
            let mut connection = self.connection.lock().await;
            let opened = self.opened_mut().last().copied();
            match opened {
                Some(Opened::Transaction) => DB::commit(*connection).await?,
                Some(Opened::Savepoint) => {
                    let release = DB::bind("RELEASE SAVEPOINT idem", &[])?;
                    DB::execute(*connection, release).await?;
                }
                None => return Ok(()),
            }
            // Not committed, it stays open for the rollback that follows a failed commit.
            self.opened_mut().pop();
            Ok(())
        }))
    }

    fn rollback(&self) -> WireFuture<'_, ()> {
        Box::pin(read_failure::<DB, _>(async move {
            let mut connection = self.connection.lock().await;
            let opened = self.opened_mut().pop();
            match opened {
                Some(Opened::Transaction) => DB::rollback(*connection).await,
                Some(Opened::Savepoint) => {
                    // Rolled back to, the savepoint is still there (and on SQLite, the
                    // transaction it opened): released, whatever the rollback did.
                    let undo = DB::bind("ROLLBACK TO SAVEPOINT idem", &[])?;
                    let undone = DB::execute(*connection, undo).await;
                    let release = DB::bind("RELEASE SAVEPOINT idem", &[])?;
                    let released = DB::execute(*connection, release).await;
                    undone.and(released).map(drop)
                }
                None => Ok(()),
            }
        }))
    }

    fn in_callers_transaction(&self) -> WireFuture<'_, bool> {
        Box::pin(async move {
            let connection = self.connection.lock().await;
            Ok(DB::in_transaction(&connection))
        })
    }

    /// The savepoint, the statement and the savepoint's end under one hold of the connection,
    /// so that no other call on a session shared by tasks sends a statement into them.
    fn write<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Param<'a>],
    ) -> WireFuture<'a, Vec<DB::Cells>> {
        let query = DB::bind(sql, params);
        Box::pin(read_failure::<DB, _>(async move {
            let query = query?;
            let mut connection = self.connection.lock().await;
            if !DB::in_transaction(&connection) {
                return DB::fetch_all(*connection, query).await;
            }
            crate::trace::round_trip("SAVEPOINT");
            DB::simple(*connection, "SAVEPOINT idem_statement").await?;
            let written = DB::fetch_all(*connection, query).await;
            crate::trace::round_trip("RELEASE SAVEPOINT");
            let ending = match written {
                Ok(_) => "RELEASE SAVEPOINT idem_statement",
                Err(_) => "ROLLBACK TO SAVEPOINT idem_statement; RELEASE SAVEPOINT idem_statement",
            };
            let ended = DB::simple(*connection, ending).await;
            match written {
                Ok(rows) => ended.map(|()| rows),
                // The statement's failure is the one to report, whatever the rollback says.
                Err(failure) => Err(failure),
            }
        }))
    }

    fn scan<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Param<'a>],
        error: impl Fn(DbFailure) -> Error + Send + 'a,
        mut each: impl FnMut(&DB::Cells) -> Result<(), Error> + Send + 'a,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>> {
        let query = DB::bind(sql, params);
        Box::pin(async move {
            let query = query.map_err(|source| error(DB::failure(source)))?;
            let mut connection = self.connection.lock().await;
            let mut rows = DB::stream(*connection, query);
            while let Some(row) =
                std::future::poll_fn(|context| rows.as_mut().poll_next(context)).await
            {
                each(&row.map_err(|source| error(DB::failure(source)))?)?;
            }
            Ok(())
        })
    }
}

/// `work`, its sqlx error read as `DB` reads it.
async fn read_failure<DB: SqlxDatabase, T>(
    work: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, DbFailure> {
    work.await.map_err(DB::failure)
}
