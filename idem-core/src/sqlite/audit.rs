//! The audit of a SQLite table before idem takes it over, and the adoption of its rows: what
//! the table lacks (from its schema), then one pass over its rows in natural-key order that
//! checks each row's id and content hash against the row read as the type ([`crate::sql::audit`],
//! as on PostgreSQL); and the move of each row not under its derived id to it.

use std::future::poll_fn;
use std::pin::pin;

use futures_core::Stream;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};
use sqlx::{Row, SqliteConnection};

use super::driver::{finish_with, savepoint};
use super::errors::sqlite_error;
use super::table::{quote, Table};
use super::{bind_text, statement, Store};
use crate::audit::{
    AdoptReport, AuditProgress, AuditReport, HashDiagnosis, RunLimits, UnknownField,
};
use crate::column::ColumnShape;
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::{Model, ID_FIELD, WRITE_MARKER_FIELD};
use crate::model_check::ModelCheck;
use crate::sql::audit::{
    catalog_unknowns, columns_without, diagnose, shown_row_id, typed_unknowns, RowScan,
};
use crate::sql::judge::{stored_destination, typed_destination, AdoptOptions, Destined, Reading};
use crate::sql::layout::Content;
use crate::sql::layout::Layout;
use crate::sql::row::value_from_text;
use crate::trace::{Call, CallKind};

/// How many rows one page of the adoption reads (and moves under one savepoint).
const PAGE_ROWS: i64 = 500;

impl Store {
    /// Audits `T`'s table before idem takes it over, as it is, whoever created and filled it:
    /// what the table lacks for idem's writes ([`AuditReport::table_problems`]), natural keys
    /// held by more than one row, rows not under the id derived from their content, rows without
    /// a content hash or with another one, and rows that do not read as `T`. Nothing is
    /// written. The rows are read once, in natural-key order, as SQLite steps through them.
    pub async fn audit<T>(&self, connection: &mut SqliteConnection) -> Result<AuditReport, Error>
    where
        T: Idempotent + Serialize + DeserializeOwned,
    {
        self.audit_with_progress::<T>(connection, |_| {}).await
    }

    /// [`audit`](Store::audit), calling `progress` after each row with the count so far and the
    /// table's row count.
    pub async fn audit_with_progress<T>(
        &self,
        connection: &mut SqliteConnection,
        mut progress: impl FnMut(&AuditProgress),
    ) -> Result<AuditReport, Error>
    where
        T: Idempotent + Serialize + DeserializeOwned,
    {
        let call = Call::new(CallKind::Audit, T::MODEL.collection(), || None::<Id>);
        let table = Table::of::<T>();
        call.run_detached(scan(
            connection,
            &table,
            Reading::typed::<T>(),
            &mut progress,
        ))
        .await
    }

    /// [`audit`](Store::audit) for a model given at run time, as the PostgreSQL store's
    /// [`audit_model`](crate::postgres::Store::audit_model) does: the table laid out from its
    /// schema (every column but idem's own a stored field, in column order; a declared type
    /// idem does not make is read as JSON text, and types are not checked), ids derived from the
    /// stored key values and an integer timestamp, hashes from the stored values in
    /// `field_order` (the table's column order if empty). Each column reads as its declared
    /// type says: in a table made before idem declared booleans `BOOLEAN` and nested values
    /// `JSON_TEXT`, they are `INTEGER` and `TEXT` and read as integers and text, so such rows'
    /// hashes are counted as differing (their digests are compared under both readings). A table that does not exist, or lacks a column the model names, is
    /// an error ([`ErrorKind::SchemaMismatch`]).
    pub async fn audit_model(
        &self,
        connection: &mut SqliteConnection,
        model: &Model,
        field_order: &[&str],
        mut progress: impl FnMut(&AuditProgress),
    ) -> Result<AuditReport, Error> {
        let call = Call::new(CallKind::Audit, model.collection(), || None::<Id>);
        call.run_detached(async move {
            let (table, unknown) = stored_table(connection, model, field_order).await?;
            let reading = Reading::Stored { field_order };
            let mut report = scan(connection, &table, reading, &mut progress).await?;
            let found = std::mem::replace(&mut report.unknown_fields, unknown);
            for field in found {
                crate::audit::note_unknown(&mut report.unknown_fields, field);
            }
            Ok(report)
        })
        .await
    }

    /// Moves the rows of `T`'s table that are not under the id derived from their content
    /// (legacy ids, orphans, rows without an `_id`) to their derived ids, with the content
    /// hash, digests and version key idem stores; rows that do not read as `T`, or whose
    /// derived id another row holds, are reported and left alone. The table must be one idem
    /// can write (its natural key unique: so no duplicates to choose between).
    ///
    /// Each page of rows is read and moved under one savepoint, which holds SQLite's write
    /// lock: no writer changes a row between its read and its move, and a move is one `UPDATE`
    /// of the row's id and idem's columns, whole or not at all. Running it again after an
    /// interruption finishes the job.
    pub async fn adopt<T>(&self, connection: &mut SqliteConnection) -> Result<AdoptReport, Error>
    where
        T: Idempotent + Serialize + DeserializeOwned,
    {
        let model = &T::MODEL;
        let call = Call::new(CallKind::Adopt, model.collection(), || None::<Id>);
        call.run_detached(async move {
            let collection = DocumentRef::collection(model);
            if model.idempotency_key_field().is_some() {
                return Err(Error::new(collection, ErrorKind::NoDerivedId));
            }
            let table = self.table::<T>(connection, &collection).await?;
            move_rows(
                connection,
                &table,
                &typed_destination::<T>,
                AdoptOptions::default(),
                &mut |_| {},
            )
            .await
        })
        .await
    }

    /// [`adopt`](Store::adopt) for a model given at run time, as
    /// [`audit_model`](Store::audit_model) reads it: each row moves to the id its stored values
    /// derive, with the hash of its stored values (or its stored hash where that may be the
    /// type's). The table must be one idem can write, and the model the one the stored rows were
    /// written with ([`crate::model_check`], unless [`AdoptOptions::ignore_model_check`]); else
    /// [`ErrorKind::SchemaMismatch`] says why, and nothing moves.
    pub async fn adopt_model(
        &self,
        connection: &mut SqliteConnection,
        model: &Model,
        field_order: &[&str],
        options: AdoptOptions,
    ) -> Result<AdoptReport, Error> {
        self.adopt_model_with_progress(connection, model, field_order, options, |_| {})
            .await
    }

    /// [`adopt_model`](Store::adopt_model), calling `progress` after each row it reads.
    pub async fn adopt_model_with_progress(
        &self,
        connection: &mut SqliteConnection,
        model: &Model,
        field_order: &[&str],
        options: AdoptOptions,
        mut progress: impl FnMut(&AuditProgress) + Send,
    ) -> Result<AdoptReport, Error> {
        let call = Call::new(CallKind::Adopt, model.collection(), || None::<Id>);
        call.run_detached(async move {
            let collection = DocumentRef::collection(model);
            if model.idempotency_key_field().is_some() {
                return Err(Error::new(collection, ErrorKind::NoDerivedId));
            }
            let (table, mut unknown) = stored_table(connection, model, field_order).await?;
            let refuse = |problem: String| Error::schema_mismatch(model, problem);
            let problems =
                super::schema::table_problems(connection, &table, &collection, false).await?;
            if let Some(problem) = problems.into_iter().next() {
                return Err(refuse(format!("{problem}; nothing was moved")));
            }
            let (mismatch, unhashed) = model_mismatch(connection, &table, field_order).await?;
            unknown.extend(unhashed);
            crate::audit::check_adoption(
                model,
                mismatch,
                &unknown,
                options.ignore_model_check,
                options.allow_unknown_fields,
            )?;
            // Read without them: the hashes stored are then the type's.
            let table = Table::new(table.model, &columns_without(&table, &unknown));
            let destination = |layout: &Layout, stored: Map<String, Value>| {
                stored_destination(layout, field_order, stored)
            };
            move_rows(connection, &table, &destination, options, &mut progress).await
        })
        .await
    }
}

/// The moves of every row of `table` not under its derived id, page by page.
async fn move_rows(
    connection: &mut SqliteConnection,
    table: &Table,
    destination: &Destined<'_>,
    options: AdoptOptions,
    progress: &mut (dyn FnMut(&AuditProgress) + Send),
) -> Result<AdoptReport, Error> {
    let model = table.model;
    let collection = DocumentRef::collection(model);
    let present: Vec<String> = table
        .columns
        .iter()
        .map(|column| column.name.to_owned())
        .collect();
    let (list, columns) = selected(table, &present);
    let mut report = AdoptReport::new(model.collection());
    let limits = RunLimits::new(options.max_documents, None);
    let mut scanned = 0;
    let id = quote(ID_FIELD);
    // The rows with an `_id` in its order, then those without one by rowid: a moved row has an
    // id, and a row that could not move keeps its place behind the cursor.
    for by_id in [true, false] {
        let condition = match by_id {
            true => format!("t.{id} IS NOT NULL AND (?1 IS NULL OR t.{id} > ?1) ORDER BY t.{id}"),
            false => format!("t.{id} IS NULL AND (?1 IS NULL OR t.rowid > ?1) ORDER BY t.rowid"),
        };
        let sql = format!(
            "SELECT {list}, t.rowid FROM {} t WHERE {condition} LIMIT {PAGE_ROWS}",
            table.name()
        );
        let mut after: Option<String> = None;
        loop {
            let limit = limits.documents_left(&report, 0);
            if limit == Some(0) {
                report.stopped = true;
                return Ok(report);
            }
            savepoint(connection, &collection).await?;
            let page = move_page(
                connection,
                table,
                (&sql, after.as_deref()),
                &columns,
                destination,
                limit,
                &mut report,
            )
            .await;
            let page = finish_with(connection, page, &collection).await?;
            scanned += page.read;
            progress(&AuditProgress::new(scanned, None));
            match page.last {
                Some((last_id, last_rowid)) => {
                    after = Some(if by_id {
                        last_id
                    } else {
                        last_rowid.to_string()
                    })
                }
                None => break,
            }
        }
    }
    Ok(report)
}

/// Checks the model of `table` (given at run time) against rows stored under a ULID.
async fn model_mismatch(
    connection: &mut SqliteConnection,
    table: &Table,
    field_order: &[&str],
) -> Result<(Option<crate::model_check::ModelMismatch>, Vec<UnknownField>), Error> {
    let document = DocumentRef::collection(table.model);
    let present: Vec<String> = table
        .columns
        .iter()
        .map(|column| column.name.to_owned())
        .collect();
    let (list, columns) = selected(table, &present);
    let sql = format!(
        "SELECT {list}, t.rowid FROM {} t WHERE length(t.{}) = 26 LIMIT {}",
        table.name(),
        quote(ID_FIELD),
        crate::model_check::DOCUMENTS_EXAMINED
    );
    let rows = sqlx::query(statement(&sql))
        .fetch_all(&mut *connection)
        .await
        .map_err(|source| sqlite_error(&document, source))?;
    let mut check = ModelCheck::new(table.model);
    let mut diagnosis = HashDiagnosis::default();
    for row in &rows {
        let (stored, _) =
            row_json(table, &columns, row).map_err(|source| sqlite_error(&document, source))?;
        if let Some(id) = stored.get(ID_FIELD).and_then(Value::as_str) {
            check.examine(id, &stored);
        }
        diagnose(&mut diagnosis, table, field_order, &stored);
    }
    Ok((check.finding(), diagnosis.finding()))
}

/// The audit's schema check and one pass over the rows of `table`, read as `reading` says.
async fn scan(
    connection: &mut SqliteConnection,
    table: &Table,
    reading: Reading<'_>,
    progress: &mut impl FnMut(&AuditProgress),
) -> Result<AuditReport, Error> {
    let model = table.model;
    let document = DocumentRef::collection(model);
    let mut report = AuditReport::new(model.collection(), reading.is_typed());
    // A model given at run time does not know the stored fields' types.
    report.table_problems =
        super::schema::table_problems(connection, table, &document, reading.is_typed()).await?;
    let present = present_columns(connection, table, &document).await?;
    if present.is_empty() {
        return Ok(report);
    }
    if reading.is_typed() {
        report.unknown_fields = typed_unknowns(table, present.iter().map(String::as_str));
    }
    let count = format!("SELECT count(*) FROM {}", table.name());
    let total: i64 = sqlx::query_scalar(statement(&count))
        .fetch_one(&mut *connection)
        .await
        .map_err(|source| sqlite_error(&document, source))?;
    let (list, columns) = selected(table, &present);
    let order: Vec<String> = model
        .natural_key_fields()
        .map(|field| field.stored_name())
        .filter(|name| present.iter().any(|present| present == name))
        .map(|name| format!("t.{}, ", quote(name)))
        .collect();
    let sql = format!(
        "SELECT {list}, t.rowid FROM {} t ORDER BY {}t.rowid",
        table.name(),
        order.concat()
    );
    crate::trace::round_trip("SELECT");
    let mut scan = RowScan::new(table, reading);
    let mut rows = pin!(sqlx::query(statement(&sql)).fetch(&mut *connection));
    while let Some(row) = poll_fn(|context| rows.as_mut().poll_next(context)).await {
        let row = row.map_err(|source| sqlite_error(&document, source))?;
        let (stored, rowid) =
            row_json(table, &columns, &row).map_err(|source| sqlite_error(&document, source))?;
        scan.row(&mut report, stored, &format!("rowid {rowid}"));
        progress(&AuditProgress::new(
            report.scanned,
            u64::try_from(total).ok(),
        ));
    }
    scan.finish(&mut report);
    Ok(report)
}

/// The table of a model given at run time, laid out from its schema.
///
/// Its columns that are not fields of the model are left out of the layout, and returned: the
/// table's own key (an `INTEGER PRIMARY KEY` other than `_id`, which SQLite fills itself), and,
/// where the model lists its fields (`field_order`), each column it does not list.
async fn stored_table(
    connection: &mut SqliteConnection,
    model: &Model,
    field_order: &[&str],
) -> Result<(Table, Vec<UnknownField>), Error> {
    let document = DocumentRef::collection(model);
    crate::trace::round_trip("SELECT");
    let rows = sqlx::query("SELECT name, upper(type), pk FROM pragma_table_info(?1) ORDER BY cid")
        .bind(model.collection())
        .fetch_all(&mut *connection)
        .await
        .map_err(|source| sqlite_error(&document, source))?;
    let refuse = |problem: String| Error::schema_mismatch(model, problem);
    if rows.is_empty() {
        return Err(refuse(format!(
            "the database has no table `{}`",
            model.collection()
        )));
    }
    let catalog: Vec<(String, ColumnShape)> = rows
        .iter()
        .map(|row| {
            let declared: String = row.get(1);
            (row.get(0), super::table::shape_of(&declared))
        })
        .collect();
    let table_keys: Vec<String> = rows
        .iter()
        .filter(|row| row.get::<i64, _>(2) > 0)
        .map(|row| row.get::<String, _>(0))
        .filter(|name| name != ID_FIELD)
        .collect();
    let unknown = catalog_unknowns(
        model,
        field_order,
        catalog.iter().map(|(name, _)| name.as_str()),
        &table_keys,
    );
    let catalog: Vec<(String, ColumnShape)> = catalog
        .into_iter()
        .filter(|(name, _)| !unknown.iter().any(|field| field.name == *name))
        .collect();
    let columns = crate::sql::judge::columns_of_model(model, &catalog).map_err(refuse)?;
    Ok((Table::new(crate::intern::model(model), &columns), unknown))
}

/// What one page did: how many rows it read, and the last one's id and rowid (`None`: the
/// page was empty).
struct Page {
    read: u64,
    last: Option<(String, i64)>,
}

/// Reads one page (`sql` after the cursor) and moves each of its rows, at most `limit` of them.
async fn move_page(
    connection: &mut SqliteConnection,
    table: &Table,
    (sql, after): (&str, Option<&str>),
    columns: &[usize],
    destination: &Destined<'_>,
    limit: Option<u64>,
    report: &mut AdoptReport,
) -> Result<Page, Error> {
    let collection = DocumentRef::collection(table.model);
    crate::trace::round_trip("SELECT");
    let rows = sqlx::query(statement(sql))
        .bind(after)
        .fetch_all(&mut *connection)
        .await
        .map_err(|source| sqlite_error(&collection, source))?;
    let mut page = Page {
        read: 0,
        last: None,
    };
    let moved_before = report.moved.count;
    for row in &rows {
        if limit.is_some_and(|limit| report.moved.count - moved_before >= limit) {
            break;
        }
        page.read += 1;
        let (stored, rowid) =
            row_json(table, columns, row).map_err(|source| sqlite_error(&collection, source))?;
        let stored_id = stored
            .get(ID_FIELD)
            .and_then(Value::as_str)
            .map(str::to_owned);
        let shown = shown_row_id(stored.get(ID_FIELD), &format!("rowid {rowid}"));
        page.last = Some((stored_id.clone().unwrap_or_default(), rowid));
        let moved = match destination(table, stored) {
            Err(why) => {
                report.failed.record(shown, Some(why));
                continue;
            }
            Ok(moved) if stored_id.as_deref() == Some(moved.id_text.as_str()) => continue,
            Ok(moved) => moved,
        };
        let mut set = vec![
            format!("{} = ?", quote(ID_FIELD)),
            format!("{} = ?", quote(WRITE_MARKER_FIELD)),
        ];
        for (index, _) in &moved.contents {
            set.push(format!("{} = ?", quote(table.columns[*index].name)));
        }
        let update = format!(
            "UPDATE {table} SET {set} WHERE rowid = ? AND NOT EXISTS \
             (SELECT 1 FROM {table} WHERE {id} = ?) RETURNING 1",
            table = table.name(),
            set = set.join(", "),
            id = quote(ID_FIELD),
        );
        let mut query = sqlx::query(statement(&update))
            .bind(&moved.id_text)
            .bind(format!("u{}", ulid::Ulid::generate()));
        for (_, value) in &moved.contents {
            query = bind_text(query, ColumnShape::Text, value.as_deref());
        }
        crate::trace::round_trip("UPDATE");
        let done = query
            .bind(rowid)
            .bind(&moved.id_text)
            .fetch_optional(&mut *connection)
            .await
            .map_err(|source| sqlite_error(&moved.document, source))?;
        match done {
            Some(_) => report.moved.record_misplaced(shown, moved.id_text),
            None => report.failed.record(
                shown,
                Some(format!(
                    "derived id {} is held by another row; run adopt again once that row is moved",
                    moved.id_text
                )),
            ),
        }
    }
    Ok(page)
}

/// The columns of `table` the schema has (`present`), selected as text, and which they are.
fn selected(table: &Table, present: &[String]) -> (String, Vec<usize>) {
    let columns: Vec<usize> = (0..table.columns.len())
        .filter(|&index| present.iter().any(|name| name == table.columns[index].name))
        .collect();
    let list: Vec<String> = columns
        .iter()
        .map(|&index| table.read_of("t", table.columns[index].name))
        .collect();
    (list.join(", "), columns)
}

/// A selected row as the JSON the SQL stores judge rows in: each column by its shape, a NULL
/// where serde may do without the field left out; and its rowid.
fn row_json(
    table: &Table,
    columns: &[usize],
    row: &sqlx::sqlite::SqliteRow,
) -> Result<(Map<String, Value>, i64), sqlx::Error> {
    let mut stored = Map::new();
    for (at, &index) in columns.iter().enumerate() {
        let column = &table.columns[index];
        let text = super::table::cell_text(row, at)?;
        let value = match (column.content, text) {
            (Content::Stored(_), None) if column.null_is_absent => continue,
            (_, None) => Value::Null,
            (Content::Stored(_), Some(text)) => value_from_text(column.shape, &text),
            (Content::Digests | Content::Extra, Some(text)) => {
                serde_json::from_str(&text).unwrap_or(Value::String(text))
            }
            (_, Some(text)) => Value::String(text),
        };
        stored.insert(column.name.to_owned(), value);
    }
    let rowid: i64 = row.try_get(columns.len())?;
    Ok((stored, rowid))
}

/// The columns `table` has in the database; empty if it does not exist.
async fn present_columns(
    connection: &mut SqliteConnection,
    table: &Table,
    document: &DocumentRef,
) -> Result<Vec<String>, Error> {
    sqlx::query_scalar("SELECT name FROM pragma_table_info(?1)")
        .bind(table.model.collection())
        .fetch_all(&mut *connection)
        .await
        .map_err(|source| sqlite_error(document, source))
}
