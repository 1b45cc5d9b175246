//! The audit of a PostgreSQL table before idem takes it over: what the table lacks for idem's
//! writes (from the catalog), then one pass over its rows, ordered by the natural key, that
//! checks each row's id and content hash against the row read as the type, and finds natural
//! keys held by more than one row.
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

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::stored::stored_table;
use super::table::{quote, Table};
use super::wire::{Cells, Connection, Param, Wire};
use super::{postgres_error, survey_table, Store};
use crate::audit::{AuditProgress, AuditReport, UnknownField};
use crate::document::DocumentRef;
use crate::error::Error;
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::{Field, Model};
use crate::sql::audit::{catalog_unknowns, columns_without, typed_unknowns, RowScan};
use crate::sql::judge::Reading;
use crate::trace::{Call, CallKind};

impl Store {
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
    ///   physical location, `(no _id, at ctid (0,1))`, valid until the row is next written.
    /// - [`moves_in_progress`](AuditReport::moves_in_progress) stays empty:
    ///   [`adopt`](Store::adopt) moves a row in one statement, never half.
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
    pub async fn audit<T, C>(&self, client: C) -> Result<AuditReport, Error>
    where
        T: Idempotent + Serialize + DeserializeOwned,
        C: Connection,
    {
        self.audit_with_progress::<T, _>(client, |_| {}).await
    }

    /// [`audit`](Store::audit), calling `progress` after each row with the count so far and the
    /// planner's estimate of the total (`pg_class.reltuples`; `None` before the table was first
    /// vacuumed or analyzed).
    pub async fn audit_with_progress<T, C>(
        &self,
        client: C,
        mut progress: impl FnMut(&AuditProgress) + Send,
    ) -> Result<AuditReport, Error>
    where
        T: Idempotent + Serialize + DeserializeOwned,
        C: Connection,
    {
        let wire = client.wire();
        let client = &wire;
        let call = Call::new(CallKind::Audit, T::MODEL.collection(), || None::<Id>);
        // Only its columns are used: the statements, which depend on the signal, are never sent.
        let table = Table::of::<T>();
        call.run(scan_table(
            client,
            &table,
            Reading::typed::<T>(),
            &mut progress,
        ))
        .await
    }

    /// [`audit`](Store::audit) for a model given at run time (the `idem` command's flags), as
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
    pub async fn audit_model<C: Connection>(
        &self,
        client: C,
        model: &Model,
        field_order: &[&str],
        mut progress: impl FnMut(&AuditProgress) + Send,
    ) -> Result<AuditReport, Error> {
        let wire = client.wire();
        let client = &wire;
        let call = Call::new(CallKind::Audit, model.collection(), || None::<Id>);
        call.run(async {
            let (table, unknown) = run_time_table(client, model, field_order).await?;
            let reading = Reading::Stored { field_order };
            let mut report = scan_table(client, &table, reading, &mut progress).await?;
            let found = std::mem::replace(&mut report.unknown_fields, unknown);
            for field in found {
                crate::audit::note_unknown(&mut report.unknown_fields, field);
            }
            Ok(report)
        })
        .await
    }
}

/// The audit's catalog survey and one pass over the rows.
async fn scan_table<C>(
    client: &C,
    table: &Table,
    reading: Reading<'_>,
    progress: &mut (impl FnMut(&AuditProgress) + Send),
) -> Result<AuditReport, Error>
where
    C: Wire,
{
    let model = table.model;
    let document = DocumentRef::collection(model);
    let survey = survey_table(client, table, &document, reading.is_typed()).await?;
    let mut report = AuditReport::new(model.collection(), reading.is_typed());
    report.table_problems = survey.problems;
    if survey.present.is_empty() {
        return Ok(report);
    }
    if reading.is_typed() {
        let mut present: Vec<&str> = survey.present.keys().map(String::as_str).collect();
        present.sort_unstable();
        report.unknown_fields = typed_unknowns(table, present);
    }
    let total = estimated_rows(client, model, &document).await?;
    let key_columns: Vec<String> = model
        .natural_key_fields()
        .map(Field::stored_name)
        .filter(|name| survey.present.contains_key(*name))
        .map(|name| format!("t.{}, ", quote(name)))
        .collect();
    let sql = format!(
        "SELECT {}, t.ctid::text FROM {} t ORDER BY {}t.ctid",
        table.row_json("t", |column| survey.present.contains_key(column)),
        table.name(),
        key_columns.concat()
    );
    crate::trace::round_trip("SELECT");
    let mut scan = RowScan::new(table, reading);
    client
        .scan(
            &sql,
            &[],
            |source| super::postgres_error(&document, source),
            |row| {
                // `to_jsonb` of a row is never NULL.
                let stored = row.object(0, &document)?.unwrap_or_default();
                let location = format!("ctid {}", row.str(1).unwrap_or_default());
                scan.row(&mut report, stored, &location);
                progress(&AuditProgress::new(report.scanned, total));
                Ok(())
            },
        )
        .await?;
    scan.finish(&mut report);
    Ok(report)
}

/// The table of a model given at run time ([`stored_table`]) without its columns that are not
/// fields of the model, and those columns: the table's own key (a primary key column other
/// than `_id`, an identity, generated or serial column), and, where the model lists its fields
/// (`field_order`), each column it does not list.
pub(super) async fn run_time_table<C: Wire>(
    client: &C,
    model: &Model,
    field_order: &[&str],
) -> Result<(Table, Vec<UnknownField>), Error> {
    let table = stored_table(client, model).await?;
    let document = DocumentRef::collection(model);
    crate::trace::round_trip("SELECT");
    let keys = client
        .fetch_all(
            "SELECT a.attname::text FROM pg_attribute a \
             LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
             WHERE a.attrelid = to_regclass(quote_ident($1)) AND a.attnum > 0 \
             AND NOT a.attisdropped AND (a.attidentity <> '' OR a.attgenerated <> '' \
             OR pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%' \
             OR EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = a.attrelid \
             AND i.indisprimary AND a.attnum = ANY (i.indkey)))",
            &[Param::Text(Some(model.collection()))],
        )
        .await
        .map_err(|source| postgres_error(&document, source))?;
    let table_keys: Vec<String> = keys
        .iter()
        .filter_map(|row| row.str(0))
        .filter(|name| *name != crate::model::ID_FIELD)
        .map(str::to_owned)
        .collect();
    let unknown = catalog_unknowns(
        model,
        field_order,
        table.columns.iter().map(|column| column.name),
        &table_keys,
    );
    let table = without(table, &unknown);
    Ok((table, unknown))
}

/// `table` read without the columns `left_out`.
pub(super) fn without(table: Table, left_out: &[UnknownField]) -> Table {
    if left_out.is_empty() {
        return table;
    }
    Table::new(table.model, &columns_without(&table, left_out))
}

/// The planner's estimate of the rows of `model`'s table: cheap, and only used to draw progress.
pub(super) async fn estimated_rows<C>(
    client: &C,
    model: &Model,
    document: &DocumentRef,
) -> Result<Option<u64>, Error>
where
    C: Wire,
{
    crate::trace::round_trip("SELECT");
    let estimate = client
        .fetch_all(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(quote_ident($1))",
            &[Param::Text(Some(model.collection()))],
        )
        .await
        .map_err(|source| postgres_error(document, source))?;
    // -1: never vacuumed or analyzed.
    Ok(estimate
        .first()
        .and_then(|row| row.int8(0))
        .and_then(|rows| u64::try_from(rows).ok()))
}
