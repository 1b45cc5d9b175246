//! The audit of a table before idem takes it over, and the adoption of its rows, for any SQL
//! dialect: what the table lacks (the dialect's table check), then one pass over its rows in
//! natural-key order that checks each row's id and content hash against the row read as the
//! type ([`crate::sql::audit`]); and the move of each row not under its derived id to it, page
//! by page, each page in a transaction of its own.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use super::dialect::SqlDialect;
use super::store::{in_transaction_with, Store};
use super::wire::{Cells, DbFailure, Param, Wire};
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
use crate::sql::layout::{Content, Layout};
use crate::sql::row::value_from_text;
use crate::trace::{Call, CallKind};

/// How many rows one page of the adoption reads (and moves in one transaction).
const PAGE_ROWS: i64 = 500;

// The methods are the crate's own: each store's module gives them their public signatures.
#[allow(private_bounds)]
impl<D: SqlDialect> Store<D> {
    /// The audit of `T`'s table, through `wire`.
    pub(crate) async fn audit_on<T>(
        &self,
        wire: &impl Wire,
        progress: &mut (impl FnMut(&AuditProgress) + Send),
    ) -> Result<AuditReport, Error>
    where
        T: Idempotent + Serialize + DeserializeOwned,
    {
        let call = Call::new(CallKind::Audit, T::MODEL.collection(), || None::<Id>);
        let table = D::table(&T::MODEL, &T::stored_columns());
        call.run_detached(scan::<D>(wire, &table, Reading::typed::<T>(), progress))
            .await
    }

    /// The audit of a model given at run time, through `wire`.
    pub(crate) async fn audit_model_on(
        &self,
        wire: &impl Wire,
        model: &Model,
        field_order: &[&str],
        progress: &mut (impl FnMut(&AuditProgress) + Send),
    ) -> Result<AuditReport, Error> {
        let call = Call::new(CallKind::Audit, model.collection(), || None::<Id>);
        call.run_detached(async move {
            let (table, unknown) = stored_table::<D>(wire, model, field_order).await?;
            let reading = Reading::Stored { field_order };
            let mut report = scan::<D>(wire, &table, reading, progress).await?;
            let found = std::mem::replace(&mut report.unknown_fields, unknown);
            for field in found {
                crate::audit::note_unknown(&mut report.unknown_fields, field);
            }
            Ok(report)
        })
        .await
    }

    /// The adoption of `T`'s table, through `wire`.
    pub(crate) async fn adopt_on<T>(&self, wire: &impl Wire) -> Result<AdoptReport, Error>
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
            let table = self.table::<T>(wire, &collection).await?;
            let options = AdoptOptions::default();
            move_rows::<D>(wire, &table, &typed_destination::<T>, options, &mut |_| {}).await
        })
        .await
    }

    /// The adoption of a model given at run time, through `wire`.
    pub(crate) async fn adopt_model_on(
        &self,
        wire: &impl Wire,
        model: &Model,
        field_order: &[&str],
        options: AdoptOptions,
        progress: &mut (dyn FnMut(&AuditProgress) + Send),
    ) -> Result<AdoptReport, Error> {
        let call = Call::new(CallKind::Adopt, model.collection(), || None::<Id>);
        call.run_detached(async move {
            let collection = DocumentRef::collection(model);
            if model.idempotency_key_field().is_some() {
                return Err(Error::new(collection, ErrorKind::NoDerivedId));
            }
            let (table, mut unknown) = stored_table::<D>(wire, model, field_order).await?;
            let refuse = |problem: String| Error::schema_mismatch(model, problem);
            let problems = D::table_problems(wire, &table, &collection, false).await?;
            if let Some(problem) = problems.into_iter().next() {
                return Err(refuse(format!("{problem}; nothing was moved")));
            }
            let (mismatch, unhashed) = model_mismatch::<D>(wire, &table, field_order).await?;
            unknown.extend(unhashed);
            crate::audit::check_adoption(
                model,
                mismatch,
                &unknown,
                options.ignore_model_check,
                options.allow_unknown_fields,
            )?;
            // Read without them: the hashes stored are then the type's.
            let table = D::table(table.model, &columns_without(&table, &unknown));
            let destination = |layout: &Layout, stored: Map<String, Value>| {
                stored_destination(layout, field_order, stored)
            };
            move_rows::<D>(wire, &table, &destination, options, progress).await
        })
        .await
    }
}

/// Where a row is, for the adoption's pages and the audit's report: the dialect's locator of a
/// row (SQLite's `rowid`) as selected after the row's columns, else nothing.
fn located<D: SqlDialect>() -> String {
    D::ROW_LOCATOR.map_or("NULL".to_owned(), |locator| format!("t.{locator}"))
}

/// The moves of every row of `table` not under its derived id, page by page.
async fn move_rows<D: SqlDialect>(
    wire: &impl Wire,
    table: &D::Table,
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
    let (list, columns) = selected::<D>(table, &present);
    let mut report = AdoptReport::new(model.collection());
    let limits = RunLimits::new(options.max_documents, None);
    let mut scanned = 0;
    let id = D::quote(ID_FIELD);
    let name = D::quote(model.collection());
    // The rows with an `_id` in its order, then those without one by the row's locator: a
    // moved row has an id, and a row that could not move keeps its place behind the cursor.
    let mut passes = vec![format!(
        "t.{id} IS NOT NULL AND (? IS NULL OR t.{id} > ?) ORDER BY t.{id}"
    )];
    if let Some(locator) = D::ROW_LOCATOR {
        passes.push(format!(
            "t.{id} IS NULL AND (? IS NULL OR t.{locator} > ?) ORDER BY t.{locator}"
        ));
    }
    for (pass, condition) in passes.iter().enumerate() {
        let sql = format!(
            "SELECT {list}, {} FROM {name} t WHERE {condition} LIMIT {PAGE_ROWS}{}",
            located::<D>(),
            // A row changed between its read and its move would be moved with the hash of
            // what was read.
            D::LOCKING_READ
        );
        let mut after: Option<String> = None;
        loop {
            let limit = limits.documents_left(&report, 0);
            if limit == Some(0) {
                report.stopped = true;
                return Ok(report);
            }
            let page = in_transaction_with::<D, _>(
                wire,
                &collection,
                move_page::<D>(
                    wire,
                    table,
                    (&sql, after.as_deref()),
                    &columns,
                    destination,
                    limit,
                    &mut report,
                ),
            )
            .await?;
            scanned += page.read;
            progress(&AuditProgress::new(scanned, None));
            match page.last {
                Some((last_id, last_location)) => {
                    after = Some(match pass {
                        0 => last_id,
                        _ => last_location.unwrap_or_default().to_string(),
                    })
                }
                None => break,
            }
        }
    }
    Ok(report)
}

/// Checks the model of `table` (given at run time) against rows stored under a ULID.
async fn model_mismatch<D: SqlDialect>(
    wire: &impl Wire,
    table: &D::Table,
    field_order: &[&str],
) -> Result<(Option<crate::model_check::ModelMismatch>, Vec<UnknownField>), Error> {
    let document = DocumentRef::collection(table.model);
    let present: Vec<String> = table
        .columns
        .iter()
        .map(|column| column.name.to_owned())
        .collect();
    let (list, columns) = selected::<D>(table, &present);
    let sql = format!(
        "SELECT {list}, NULL FROM {} t WHERE length(t.{}) = 26 LIMIT {}",
        D::quote(table.model.collection()),
        D::quote(ID_FIELD),
        crate::model_check::DOCUMENTS_EXAMINED
    );
    let error = |source| D::error(&document, source);
    let rows = wire.fetch_all(&sql, &[]).await.map_err(error)?;
    let mut check = ModelCheck::new(table.model);
    let mut diagnosis = HashDiagnosis::default();
    for row in &rows {
        let (stored, _) = row_json(table, &columns, row).map_err(error)?;
        if let Some(id) = stored.get(ID_FIELD).and_then(Value::as_str) {
            check.examine(id, &stored);
        }
        diagnose(&mut diagnosis, table, field_order, &stored);
    }
    Ok((check.finding(), diagnosis.finding()))
}

/// The audit's schema check and one pass over the rows of `table`, read as `reading` says.
async fn scan<D: SqlDialect>(
    wire: &impl Wire,
    table: &D::Table,
    reading: Reading<'_>,
    progress: &mut (impl FnMut(&AuditProgress) + Send),
) -> Result<AuditReport, Error> {
    let model = table.model;
    let document = DocumentRef::collection(model);
    let error = |source| D::error(&document, source);
    let mut report = AuditReport::new(model.collection(), reading.is_typed());
    // A model given at run time does not know the stored fields' types.
    report.table_problems = D::table_problems(wire, table, &document, reading.is_typed()).await?;
    let present: Vec<String> = catalog::<D>(wire, model, &document)
        .await?
        .into_iter()
        .map(|(name, _, _)| name)
        .collect();
    if present.is_empty() {
        return Ok(report);
    }
    if reading.is_typed() {
        report.unknown_fields = typed_unknowns(table, present.iter().map(String::as_str));
    }
    let name = D::quote(model.collection());
    let count = format!("SELECT count(*) FROM {name}");
    let total = wire
        .fetch_optional(&count, &[])
        .await
        .map_err(error)?
        .map(|row| row.integer(0))
        .transpose()
        .map_err(error)?
        .flatten();
    let (list, columns) = selected::<D>(table, &present);
    let mut order: Vec<String> = model
        .natural_key_fields()
        .map(|field| field.stored_name())
        .filter(|name| present.iter().any(|present| present == name))
        .map(|name| format!("t.{}", D::quote(name)))
        .collect();
    order.push(
        D::ROW_LOCATOR.map_or(format!("t.{}", D::quote(ID_FIELD)), |locator| {
            format!("t.{locator}")
        }),
    );
    let sql = format!(
        "SELECT {list}, {} FROM {name} t ORDER BY {}",
        located::<D>(),
        order.join(", ")
    );
    crate::trace::round_trip("SELECT");
    let mut scan = RowScan::new(table, reading);
    let total = total.and_then(|total| u64::try_from(total).ok());
    wire.scan(&sql, &[], error, |row| {
        let (stored, location) = row_json(table, &columns, row).map_err(error)?;
        let location = match location {
            Some(location) => format!("{} {location}", D::ROW_LOCATOR.unwrap_or("row")),
            None => format!("row {}", report.scanned + 1),
        };
        scan.row(&mut report, stored, &location);
        progress(&AuditProgress::new(report.scanned, total));
        Ok(())
    })
    .await?;
    scan.finish(&mut report);
    Ok(report)
}

/// The table's columns as the dialect's catalog lists them, in their order: each one's name,
/// declared type and whether it is (part of) the table's primary key. Empty if the table does
/// not exist.
async fn catalog<D: SqlDialect>(
    wire: &impl Wire,
    model: &Model,
    document: &DocumentRef,
) -> Result<Vec<(String, String, bool)>, Error> {
    let error = |source| D::error(document, source);
    crate::trace::round_trip("SELECT");
    let rows = wire
        .fetch_all(D::COLUMNS, &[Param::Text(Some(model.collection()))])
        .await
        .map_err(error)?;
    let mut columns = Vec::with_capacity(rows.len());
    for row in &rows {
        columns.push((
            row.text(0).map_err(error)?.unwrap_or_default(),
            row.text(1).map_err(error)?.unwrap_or_default(),
            row.integer(2).map_err(error)?.unwrap_or(0) > 0,
        ));
    }
    Ok(columns)
}

/// The table of a model given at run time, laid out from its schema.
///
/// Its columns that are not fields of the model are left out of the layout, and returned: the
/// table's own key (a primary key other than `_id`, which the database fills itself), and,
/// where the model lists its fields (`field_order`), each column it does not list.
async fn stored_table<D: SqlDialect>(
    wire: &impl Wire,
    model: &Model,
    field_order: &[&str],
) -> Result<(D::Table, Vec<UnknownField>), Error> {
    let document = DocumentRef::collection(model);
    let rows = catalog::<D>(wire, model, &document).await?;
    let refuse = |problem: String| Error::schema_mismatch(model, problem);
    if rows.is_empty() {
        return Err(refuse(format!(
            "the database has no table `{}`",
            model.collection()
        )));
    }
    let catalog: Vec<(String, ColumnShape)> = rows
        .iter()
        .map(|(name, declared, _)| (name.clone(), D::shape_of(declared)))
        .collect();
    let table_keys: Vec<String> = rows
        .iter()
        .filter(|(name, _, key)| *key && name != ID_FIELD)
        .map(|(name, _, _)| name.clone())
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
    Ok((D::table(crate::intern::model(model), &columns), unknown))
}

/// What one page did: how many rows it read, and the last one's id and location (`None`: the
/// page was empty).
struct Page {
    read: u64,
    last: Option<(String, Option<i64>)>,
}

/// Reads one page (`sql` after the cursor) and moves each of its rows, at most `limit` of them.
async fn move_page<D: SqlDialect>(
    wire: &impl Wire,
    table: &D::Table,
    (sql, after): (&str, Option<&str>),
    columns: &[usize],
    destination: &Destined<'_>,
    limit: Option<u64>,
    report: &mut AdoptReport,
) -> Result<Page, Error> {
    let collection = DocumentRef::collection(table.model);
    let error = |source| D::error(&collection, source);
    crate::trace::round_trip("SELECT");
    let rows = wire
        .fetch_all(sql, &[Param::Text(after), Param::Text(after)])
        .await
        .map_err(error)?;
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
        let (stored, location) = row_json(table, columns, row).map_err(error)?;
        let stored_id = stored
            .get(ID_FIELD)
            .and_then(Value::as_str)
            .map(str::to_owned);
        let place = match (D::ROW_LOCATOR, location) {
            (Some(locator), Some(location)) => format!("{locator} {location}"),
            _ => "a row".to_owned(),
        };
        let shown = shown_row_id(stored.get(ID_FIELD), &place);
        page.last = Some((stored_id.clone().unwrap_or_default(), location));
        let moved = match destination(table, stored) {
            Err(why) => {
                report.failed.record(shown, Some(why));
                continue;
            }
            Ok(moved) if stored_id.as_deref() == Some(moved.id_text.as_str()) => continue,
            Ok(moved) => moved,
        };
        let mut set = vec![
            format!("{} = ?", D::quote(ID_FIELD)),
            format!("{} = ?", D::quote(WRITE_MARKER_FIELD)),
        ];
        for (index, _) in &moved.contents {
            set.push(format!("{} = ?", D::quote(table.columns[*index].name)));
        }
        // The row by its id, else by its locator: a row without either cannot be named.
        let (condition, at) = match (&stored_id, D::ROW_LOCATOR, location) {
            (Some(id), _, _) => (D::quote(ID_FIELD), Param::Text(Some(id.as_str()))),
            (None, Some(locator), Some(location)) => (locator.to_owned(), Param::Integer(location)),
            _ => {
                report.failed.record(
                    shown,
                    Some("the row has neither an _id nor a locator".into()),
                );
                continue;
            }
        };
        let update = format!(
            "UPDATE {} SET {} WHERE {condition} = ?",
            D::quote(table.model.collection()),
            set.join(", "),
        );
        let update_marker = format!("u{}", ulid::Ulid::generate());
        let mut params = vec![
            Param::Text(Some(&moved.id_text)),
            Param::Text(Some(&update_marker)),
        ];
        params.extend(
            moved
                .contents
                .iter()
                .map(|(_, value)| Param::Text(value.as_deref())),
        );
        params.push(at);
        crate::trace::round_trip("UPDATE");
        // The derived id held by another row fails on the id's unique index, which undoes the
        // statement alone.
        match wire.execute(&update, &params).await {
            Ok(_) => report.moved.record_misplaced(shown, moved.id_text),
            Err(source) => {
                let failure = D::error(&moved.document, source);
                if D::unique_conflict(&failure, table).is_none() {
                    return Err(failure);
                }
                report.failed.record(
                    shown,
                    Some(format!(
                        "derived id {} is held by another row; run adopt again once that row is \
                         moved",
                        moved.id_text
                    )),
                );
            }
        }
    }
    Ok(page)
}

/// The columns of `table` the schema has (`present`), selected as the dialect reads them, and
/// which they are.
fn selected<D: SqlDialect>(table: &D::Table, present: &[String]) -> (String, Vec<usize>) {
    let columns: Vec<usize> = (0..table.columns.len())
        .filter(|&index| present.iter().any(|name| name == table.columns[index].name))
        .collect();
    let list: Vec<String> = columns
        .iter()
        .map(|&index| D::read_of(table, "t", table.columns[index].name))
        .collect();
    (list.join(", "), columns)
}

/// A selected row as the JSON the SQL stores judge rows in: each column by its shape, a NULL
/// where serde may do without the field left out; and its location, selected after it.
fn row_json<R: Cells>(
    table: &Layout,
    columns: &[usize],
    row: &R,
) -> Result<(Map<String, Value>, Option<i64>), DbFailure> {
    let mut stored = Map::new();
    for (at, &index) in columns.iter().enumerate() {
        let column = &table.columns[index];
        let text = row.text(at)?;
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
    Ok((stored, row.integer(columns.len())?))
}
