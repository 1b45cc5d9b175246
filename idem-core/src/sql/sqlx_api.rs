//! The public signatures of a SQL store ([`store_methods!`]): each takes the caller's connection
//! (PostgreSQL's any [`Connection`](crate::postgres::Connection); a sqlx driver's connection,
//! which a transaction or a pooled connection dereferences to) and calls the store's method,
//! written once in [`super::store`], through it. Written once for every SQL store, each
//! method's docs its store's own.

/// The methods of `Store` (a [`super::store::Store`] of the module's dialect) named in the
/// list, each with its docs: `[generics of the connection] connection type, its wire;` then
/// `/// docs fn name;` for each. The connection's generics follow each method's own, so that a
/// turbofish names the type's parameters first.
macro_rules! store_methods {
    ($g:tt $conn:ty, $wire:path; $($(#[$doc:meta])* fn $name:ident;)*) => {
        impl Store {
            $($crate::sql::sqlx_api::store_methods!(@$name $g $conn, $wire, [$(#[$doc])*]);)*
        }
    };
    (@create_table_sql [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub fn create_table_sql<T: $crate::Idempotent>() -> String {
            Self::create_sql_of::<T>()
        }
    };
    (@ensure_table [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn ensure_table<T: $crate::Idempotent, $($g)*>(
            &self,
            connection: $conn,
        ) -> Result<(), $crate::Error>
        {
            self.ensure_table_on::<T>(&$wire(connection)).await
        }
    };
    (@upsert [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn upsert<T, $($g)*>(
            &self,
            connection: $conn,
            doc: &T,
        ) -> Result<$crate::Outcome, $crate::Error>
        where
            T: $crate::Idempotent + ::serde::Serialize + Sync,
        {
            self.upsert_on(&$wire(connection), doc).await
        }
    };
    (@upsert_many [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn upsert_many<T, $($g)*>(
            &self,
            connection: $conn,
            docs: &[T],
        ) -> Result<$crate::BatchReport, $crate::Error>
        where
            T: $crate::Idempotent + ::serde::Serialize + Sync,
        {
            self.upsert_many_on(&$wire(connection), docs).await
        }
    };
    (@delete [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn delete<T, $($g)*>(
            &self,
            connection: $conn,
            doc: &T,
        ) -> Result<$crate::Deletion, $crate::Error>
        where
            T: $crate::Idempotent + ::serde::Serialize + Sync,
        {
            self.delete_on(&$wire(connection), doc).await
        }
    };
    (@delete_by_id [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn delete_by_id<T, M, $($g)*>(
            &self,
            connection: $conn,
            id: $crate::Id,
            marker: &M,
        ) -> Result<$crate::Deletion, $crate::Error>
        where
            T: $crate::Idempotent,
            M: ::serde::Serialize + Sync,
        {
            self.delete_by_id_on::<T, M>(&$wire(connection), id, marker).await
        }
    };
    (@insert_new [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn insert_new<T, $($g)*>(
            &self,
            connection: $conn,
            members: &[T],
        ) -> Result<$crate::InsertReport<T>, $crate::Error>
        where
            T: $crate::Idempotent + ::serde::Serialize + Sync + Clone,
        {
            self.insert_new_on(&$wire(connection), members).await
        }
    };
    (@record [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn record<T, $($g)*>(
            &self,
            connection: $conn,
            event: &T,
        ) -> Result<$crate::Recorded, $crate::Error>
        where
            T: $crate::Idempotent + ::serde::Serialize + Sync,
        {
            self.record_on(&$wire(connection), event).await
        }
    };
    (@apply_once [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn apply_once<T, $($g)*>(
            &self,
            connection: $conn,
            id: $crate::Id,
            op: &$crate::OpId,
            changes: &[$crate::Change],
        ) -> Result<$crate::Applied, $crate::Error>
        where
            T: $crate::Idempotent,
        {
            self.apply_once_on::<T>(&$wire(connection), id, op, changes).await
        }
    };
    (@push [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn push<T, I, $($g)*>(
            &self,
            connection: $conn,
            id: $crate::Id,
            field: &'static str,
            item: &I,
        ) -> Result<$crate::Pushed, $crate::Error>
        where
            T: $crate::Idempotent,
            I: ::serde::Serialize + Sync,
        {
            self.push_on::<T, I>(&$wire(connection), id, field, item).await
        }
    };
    (@get [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn get<T, $($g)*>(
            &self,
            connection: $conn,
            id: $crate::Id,
        ) -> Result<Option<T>, $crate::Error>
        where
            T: $crate::Idempotent + ::serde::de::DeserializeOwned,
        {
            self.get_on::<T>(&$wire(connection), id).await
        }
    };
    (@find [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn find<T, $($g)*>(
            &self,
            connection: $conn,
            key: &$crate::NaturalKey,
        ) -> Result<Option<T>, $crate::Error>
        where
            T: $crate::Idempotent + ::serde::de::DeserializeOwned,
        {
            self.find_on::<T>(&$wire(connection), key).await
        }
    };
    (@audit [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn audit<T, $($g)*>(
            &self,
            connection: $conn,
        ) -> Result<$crate::AuditReport, $crate::Error>
        where
            T: $crate::Idempotent + ::serde::Serialize + ::serde::de::DeserializeOwned,
        {
            self.audit_on::<T>(&$wire(connection), &mut |_| {}).await
        }
    };
    (@audit_with_progress [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn audit_with_progress<T, $($g)*>(
            &self,
            connection: $conn,
            mut progress: impl FnMut(&$crate::AuditProgress) + Send,
        ) -> Result<$crate::AuditReport, $crate::Error>
        where
            T: $crate::Idempotent + ::serde::Serialize + ::serde::de::DeserializeOwned,
        {
            self.audit_on::<T>(&$wire(connection), &mut progress).await
        }
    };
    (@audit_model [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn audit_model<$($g)*>(
            &self,
            connection: $conn,
            model: &$crate::Model,
            field_order: &[&str],
            mut progress: impl FnMut(&$crate::AuditProgress) + Send,
        ) -> Result<$crate::AuditReport, $crate::Error>
        {
            self.audit_model_on(&$wire(connection), model, field_order, &mut progress).await
        }
    };
    (@adopt [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn adopt<T, $($g)*>(
            &self,
            connection: $conn,
        ) -> Result<$crate::AdoptReport, $crate::Error>
        where
            T: $crate::Idempotent + ::serde::Serialize + ::serde::de::DeserializeOwned,
        {
            self.adopt_on::<T>(&$wire(connection)).await
        }
    };
    (@adopt_model [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn adopt_model<$($g)*>(
            &self,
            connection: $conn,
            model: &$crate::Model,
            field_order: &[&str],
            options: $crate::sql::judge::AdoptOptions,
        ) -> Result<$crate::AdoptReport, $crate::Error>
        {
            self.adopt_model_on(&$wire(connection), model, field_order, options, &mut |_| {}).await
        }
    };
    (@adopt_model_with_progress [$($g:tt)*] $conn:ty, $wire:path, [$($doc:tt)*]) => {
        $($doc)*
        pub async fn adopt_model_with_progress<$($g)*>(
            &self,
            connection: $conn,
            model: &$crate::Model,
            field_order: &[&str],
            options: $crate::sql::judge::AdoptOptions,
            mut progress: impl FnMut(&$crate::AuditProgress) + Send,
        ) -> Result<$crate::AdoptReport, $crate::Error>
        {
            self.adopt_model_on(
                &$wire(connection),
                model, field_order, options, &mut progress
            )
            .await
        }
    };
}
pub(crate) use store_methods;

#[cfg(feature = "_marker_store")]
/// `Store` (a [`super::store::Store`] of `$dialect`) and `Session`, their methods and the
/// module's re-exports, for `$dialect`, whose sqlx driver's connection is `sqlx::$connection`
/// and database `$db`: its tables named `$tables` in the docs, the databases it serves `$on`.
macro_rules! sqlx_store_methods {
    ($dialect:ty, $connection:ident, $db:ty, tables: $tables:literal, on: $on:literal) => {
        pub use $crate::sql::judge::AdoptOptions;
        pub use $crate::sql::store::{DEFAULT_BATCH_CHUNK, DEFAULT_OP_WINDOW};

        #[doc = concat!("Writes documents to ", $tables, " tables, one per type; holds no connection.")]
        /// Clones share what the store learned (the tables it checked).
        pub type Store = $crate::sql::store::Store<$dialect>;

        /// A [`Store`] and the connection (or transaction: `&mut *tx`) it writes through: idem's
        #[doc = concat!("API on ", $on, ", method for method the API of every other store")]
        /// ([`Backend`](crate::Backend)). A connection serves one statement at a time, so the
        /// session's calls take turns on it.
        ///
        /// ```no_run
        /// # use idem_core::Idempotent;
        /// # #[derive(serde::Serialize, Idempotent)]
        /// # struct Post { #[idem(key)] slug: String, title: String }
        #[doc = concat!("# async fn run(mut connection: idem_core::sqlx::", stringify!($connection), ", post: Post) -> Result<(), idem_core::Error> {")]
        #[doc = concat!("let store = ", module_path!(), "::Store::new();")]
        /// let idem = store.on(&mut connection);
        /// idem.ensure_schema::<Post>().await?;
        /// let outcome = idem.upsert(&post).await?;
        /// # Ok(()) }
        /// ```
        pub type Session<'a> = $crate::sql::session::Session<'a, $dialect>;

        /// `connection` as the wire a store's call sends through.
        fn wire(connection: &mut ::sqlx::$connection) -> $crate::sql::sqlx_wire::SqlxWire<'_, $db> {
            $crate::sql::sqlx_wire::SqlxWire::new(connection)
        }

        /// A session over a connection of `$dialect`'s writes through it, one call at a time:
        /// a call's statements (its transaction of its own among them) are never interleaved
        /// with another's.
        impl $crate::sql::session::Lends for $dialect {
            type Dialect = $dialect;
            type Wire<'a> = $crate::sql::sqlx_wire::SqlxWire<'a, $db>;
            type Turns = ::tokio::sync::Mutex<()>;
        }

        impl<'a> Session<'a> {
            /// The connection back, for the caller's own statements.
            pub fn into_connection(self) -> &'a mut ::sqlx::$connection {
                self.into_wire().into_connection()
            }
        }

        impl Store {
            /// This store writing through `connection`: what the derive's generated methods take
            /// (`post.upsert(&store.on(&mut connection))`), and the API every store shares
            /// ([`Session`]).
            pub fn on<'a>(&'a self, connection: &'a mut ::sqlx::$connection) -> Session<'a> {
                Session::new(self, wire(connection))
            }
        }

        $crate::sql::sqlx_api::store_methods! {
            [] &mut ::sqlx::$connection, wire;
            /// The `CREATE TABLE` statement of `T`'s table, for a migration.
            fn create_table_sql;
            /// Creates `T`'s table if it does not exist, then checks it as before a first write.
            fn ensure_table;
            /// Writes `doc` under its derived id, converging under retries, replays and races, with the
            /// outcomes and refusals of every other store.
            fn upsert;
            /// Upserts a batch: each document gets the outcome that upserting the documents one by one,
            /// in input order, would give it; one statement per chunk of rows. A chunk of 64 rows or
            /// more is first read (while the last one was mostly stored as it came), so the rows stored
            /// unchanged settle with no write statement and no write lock.
            fn upsert_many;
            /// Marks `doc` deleted by storing its tombstone field (which must be `Some`); stores it
            /// deleted if it is not stored. `Deleted`, or `AlreadyDeleted` (the first marker stays).
            fn delete;
            /// Marks the row stored under `id` deleted with `marker`. `Deleted`, or `AlreadyDeleted`;
            /// [`ErrorKind::NotFound`](crate::ErrorKind::NotFound) if no row has that id.
            fn delete_by_id;
            /// Inserts the members of a derived set that are not stored, reporting each member.
            fn insert_new;
            /// Records an event (a type with an `#[idem(idempotency_key)]`) once under its key.
            fn record;
            /// Applies `changes` to the row stored under `id` only if `op` has not been applied to it,
            /// recording `op` in the same statement. `Applied`, or `AlreadyApplied` (nothing written);
            /// [`NotFound`](crate::ErrorKind::NotFound) if no row has that id. The changes may touch
            /// only `#[idem(effect)]` columns ([`NotAnEffectField`](crate::ErrorKind::NotAnEffectField)
            /// otherwise, before anything is sent). The latest [`with_op_window`](Store::with_op_window)
            /// op ids are kept. An op id holding U+0000 is refused
            /// ([`OpIdHoldsNul`](crate::ErrorKind::OpIdHoldsNul)) before anything is sent, as on every
            /// store.
            fn apply_once;
            /// Appends `item` to the list `field` (its Rust name; marked `#[idem(push_by = "…")]`) of
            /// the row stored under `id`, unless an item with the same key is there already.
            fn push;
            /// The row stored under `id`, as `T`; `None` if none is. A deleted row is returned with its
            /// tombstone set; one that does not read as `T` is
            /// [`ErrorKind::Deserialize`](crate::ErrorKind::Deserialize).
            fn get;
            /// The row stored under the natural key `key`, as `T`; `None` if none is.
            fn find;
            /// Audits `T`'s table before idem takes it over, as it is, whoever created and filled
            /// it: what the table lacks for idem's writes
            /// ([`AuditReport::table_problems`](crate::AuditReport::table_problems)), natural keys
            /// held by more than one row, rows not under the id derived from their content, rows
            /// without a content hash or with another one, and rows that do not read as `T`.
            /// Nothing is written. The rows are read once, in natural-key order, as the database
            /// sends them.
            fn audit;
            /// [`audit`](Store::audit), calling `progress` after each row with the count so far
            /// and the table's row count.
            fn audit_with_progress;
            /// [`audit`](Store::audit) for a model given at run time: the table laid out from its
            /// schema (every column but idem's own a stored field, in column order; a declared
            /// type idem does not make is read as JSON text, and types are not checked), ids
            /// derived from the stored key values and an integer timestamp, hashes from the
            /// stored values in `field_order` (the table's column order if empty). Each column
            /// reads as its declared type says. A table that does not exist, or lacks a column
            /// the model names, is an error
            /// ([`ErrorKind::SchemaMismatch`](crate::ErrorKind::SchemaMismatch)).
            fn audit_model;
            /// Moves the rows of `T`'s table that are not under the id derived from their
            /// content (legacy ids, orphans, rows without an `_id`) to their derived ids, with
            /// the content hash, digests and version key idem stores; rows that do not read as
            /// `T`, or whose derived id another row holds, are reported and left alone. The table
            /// must be one idem can write (its natural key unique: so no duplicates to choose
            /// between). A row without an `_id` is found by its natural key; one whose key has
            /// a NULL part (which no unique constraint keeps to one row) is reported, not
            /// moved, once each run, after the moves.
            ///
            /// Each page of rows is read and moved in one transaction of its own (a savepoint
            /// inside the caller's), and a move is one `UPDATE` of the row's id and idem's
            /// columns, whole or not at all. Running it again after an interruption finishes the
            /// job.
            fn adopt;
            /// [`adopt`](Store::adopt) for a model given at run time, as
            /// [`audit_model`](Store::audit_model) reads it: each row moves to the id its stored
            /// values derive, with the hash of its stored values (or its stored hash where that
            /// may be the type's). The table must be one idem can write, and the model the one
            /// the stored rows were written with ([`crate::model_check`], unless
            /// [`AdoptOptions::ignore_model_check`]); else
            /// [`ErrorKind::SchemaMismatch`](crate::ErrorKind::SchemaMismatch) says why, and
            /// nothing moves.
            fn adopt_model;
            /// [`adopt_model`](Store::adopt_model), calling `progress` after each row it reads.
            fn adopt_model_with_progress;
        }
    };
}
#[cfg(feature = "_marker_store")]
pub(crate) use sqlx_store_methods;
