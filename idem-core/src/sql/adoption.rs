//! The adoption of a table's rows where a transaction of idem's own can lock what it reads
//! (SQLite, the MySQL family): the move of each row not under its derived id to it, page by
//! page, each page read with its locks and moved in a transaction of its own.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use super::dialect::MarkerDialect;
use super::store::{in_transaction_with, Store};
use super::takeover::{adoptable_table, located};
use super::wire::{Cells, Param, Wire};
use crate::audit::{AdoptReport, AuditProgress, RunLimits};
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::{Model, ID_FIELD, WRITE_MARKER_FIELD};
use crate::sql::audit::shown_row_id;
use crate::sql::judge::{stored_destination, typed_destination, AdoptOptions, Destined};
use crate::sql::layout::Layout;
use crate::trace::{Call, CallKind};

/// How many rows one page of the adoption reads (and moves in one transaction).
const PAGE_ROWS: i64 = 500;

// The methods are the crate's own: each store's module gives them their public signatures.
#[allow(private_bounds)]
impl<D: MarkerDialect> Store<D> {
    /// The adoption of `T`'s table, through `wire`.
    pub(crate) async fn adopt_on<T>(&self, wire: &impl Wire) -> Result<AdoptReport, Error>
    where
        T: Idempotent + Serialize + DeserializeOwned,
    {
        let model = &T::MODEL;
        let call = Call::new(CallKind::Adopt, model.collection(), || None::<Id>);
        super::store::run::<D, _>(call, async move {
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
        super::store::run::<D, _>(call, async move {
            let table = adoptable_table::<D>(wire, model, field_order, &options).await?;
            let destination = |layout: &Layout, stored: Map<String, Value>| {
                stored_destination(layout, field_order, stored)
            };
            move_rows::<D>(wire, &table, &destination, options, progress).await
        })
        .await
    }
}

/// The moves of every row of `table` not under its derived id, page by page.
async fn move_rows<D: MarkerDialect>(
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
    let (list, columns) = D::row_select(table, &present);
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
            located::<D>(table),
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
                        _ => last_location.unwrap_or_default(),
                    })
                }
                None => break,
            }
        }
    }
    Ok(report)
}

/// What one page did: how many rows it read, and the last one's id and location (`None`: the
/// page was empty).
struct Page {
    read: u64,
    last: Option<(String, Option<String>)>,
}

/// Reads one page (`sql` after the cursor) and moves each of its rows, at most `limit` of them.
async fn move_page<D: MarkerDialect>(
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
        let (stored, next) = D::row_read(table, columns, row, &collection)?;
        let location = row.text(next).map_err(error)?;
        let stored_id = stored
            .get(ID_FIELD)
            .and_then(Value::as_str)
            .map(str::to_owned);
        let place = match (D::ROW_LOCATOR, &location) {
            (Some(locator), Some(location)) => format!("{locator} {location}"),
            _ => "a row".to_owned(),
        };
        let shown = shown_row_id(stored.get(ID_FIELD), &place);
        page.last = Some((stored_id.clone().unwrap_or_default(), location.clone()));
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
        let location_number = location.as_deref().and_then(|at| at.parse::<i64>().ok());
        let (condition, at) = match (&stored_id, D::ROW_LOCATOR, location_number) {
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
