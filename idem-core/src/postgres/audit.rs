//! The audit of a PostgreSQL table before idem takes it over: what the table lacks for idem's
//! writes (from the catalog), then one pass over its rows, ordered by the natural key, that
//! checks each row's id and content hash against the row read as the type, and finds natural
//! keys held by more than one row. The pass is every SQL store's ([`crate::sql::takeover`]),
//! each row read as `to_jsonb` writes it.
//!
//! # Bounded memory
//!
//! The rows come from one `SELECT` read as a stream (tokio-postgres's `query_typed_raw`, sqlx's
//! `fetch`): the driver hands each batch of rows over only when the previous one is taken, and
//! stops reading the socket until then, so the server waits on its send rather than the client buffering the table. That is one
//! statement and one snapshot, on a plain client as inside the caller's transaction. The
//! alternatives cost more: a `DECLARE … CURSOR` needs a transaction the caller may not have
//! opened (and one round trip per `FETCH`); keyset pages by natural key need a unique order a
//! table with duplicates lacks, read a different snapshot per page outside a transaction, and
//! without an index on the key make the server sort the whole table again for every page.
//!
//! Ordered by the natural key, the rows sharing a key arrive one after the other: finding
//! duplicates needs only the current key and its first few ids. The server sorts with its own
//! bounded memory (spilling to disk past `work_mem`) or walks an index on the key. The report
//! keeps counts and at most [`crate::audit::SAMPLES_PER_KIND`] samples of each kind.

use super::wire::Connection;
use super::Store;

crate::sql::sqlx_api::store_methods! {
    [C: Connection] C, Connection::wire;
    /// Audits `T`'s table before idem takes it over, as it is, whoever created and filled it:
    /// what the table lacks for idem's writes (columns missing or of another type, no unique
    /// constraint on the natural key: [`AuditReport::table_problems`]), natural keys held by
    /// more than one row, rows not under the id derived from their content (legacy ids, which
    /// are not ULIDs or not text, and orphans), rows without a content hash or whose stored hash
    /// is not the hash of their content read as `T`, and rows that do not read as `T`. Nothing
    /// is written, and the table is not checked as before a write: a table idem would refuse is
    /// what an audit is for.
    ///
    /// The rows are read once, by one `SELECT` in order of the natural key whose rows the
    /// driver takes as the server sends them, so memory stays bounded whatever the size of the
    /// table; the rows sharing a key arrive one after the other. Given a transaction, the audit
    /// reads its snapshot, its own uncommitted writes included; an error from the server aborts
    /// it, as any failed statement does.
    ///
    /// What differs from [`mongo::Store::audit`](crate::mongo::Store::audit):
    /// - A natural key with a NULL part is never a duplicate: a PostgreSQL unique constraint
    ///   holds NULLs distinct. Such a row is counted where no id can be derived.
    /// - Natural keys are compared as stored values, byte for byte: under a nondeterministic
    ///   collation the constraint may hold two keys equal that the audit tells apart.
    /// - A row without an `_id` (a table with an id column of its own) is shown by its
    ///   physical location, `(no _id, at ctid (0,1))`, valid until the row is next written; on
    ///   a store [`with_write_marker`](Store#method.with_write_marker), which names no system
    ///   column, by its natural key, `(no _id, at natural key ["a","en"])`.
    /// - [`moves_in_progress`] stays empty:
    ///   [`adopt`](Store#method.adopt) moves a row in one statement, never half.
    ///
    /// A row that does not read as `T` has its id derived from its stored key values and an
    /// integer timestamp, as the MongoDB audit does without the type; other timestamp types
    /// need the row to read as `T`.
    ///
    /// ```no_run
    /// # use idem_core::Idempotent;
    /// # #[derive(serde::Serialize, serde::Deserialize, Idempotent)]
    /// # #[idem(collection = "posts")]
    /// # struct Post { #[idem(key)] slug: String }
    /// # async fn run(client: tokio_postgres::Client) -> Result<(), idem_core::Error> {
    /// let store = idem_core::postgres::Store::new();
    /// let report = store.audit::<Post, _>(&client).await?;
    /// println!("{report}");
    /// # Ok(()) }
    /// ```
    ///
    /// [`AuditReport::table_problems`]: crate::AuditReport::table_problems
    /// [`moves_in_progress`]: crate::AuditReport::moves_in_progress
    fn audit;
    /// [`audit`](Store#method.audit), calling `progress` after each row with the count so far and the
    /// planner's estimate of the total (`pg_class.reltuples`; `None` before the table was first
    /// vacuumed or analyzed).
    fn audit_with_progress;
    /// [`audit`](Store#method.audit) for a model given at run time (the `idem` command's flags), as
    /// [`mongo::Store::audit_model`](crate::mongo::Store::audit_model) does: the table is laid
    /// out from its catalog (every column other than idem's own is a stored field, in column
    /// order), ids are derived from the stored key values and an integer timestamp, and content
    /// hashes computed from the stored values in `field_order` (the type's order; the table's
    /// column order if empty, which is the type's in a table idem made). A hash that differs
    /// but may be the type's (nested objects in `jsonb`, whose key order only the type knows)
    /// is counted in [`AuditReport::hash_unchecked`], not as changed. Column types are not
    /// checked: only the type knows them.
    ///
    /// It also checks that the model is the one the rows were written with
    /// ([`crate::model_check`]): [`AuditReport::model_mismatch`] names the flag that is likely
    /// wrong. A table that does not exist, or lacks a column the model names, is an error
    /// ([`ErrorKind::SchemaMismatch`](crate::error::ErrorKind::SchemaMismatch)).
    ///
    /// [`AuditReport::hash_unchecked`]: crate::AuditReport::hash_unchecked
    /// [`AuditReport::model_mismatch`]: crate::AuditReport::model_mismatch
    fn audit_model;
}
