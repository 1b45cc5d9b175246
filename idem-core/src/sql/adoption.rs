//! The adoption of a table's rows, for any SQL dialect: the move of each row not under its
//! derived id to it, page by page, the rows with an `_id` in its order, then those without one
//! by the row's locator, or by the natural key where the table has none (SQLite, the MySQL
//! family, PostgreSQL under the write marker). The run (its
//! passes, cursor, limit, progress and report) is written once here; each dialect says how it
//! reads a page and moves a row
//! ([`SqlDialect::adoption_rows`], [`SqlDialect::adoption_move`]), and whether a page is read
//! with its locks and moved in a transaction of its own ([`SqlDialect::ADOPTS_IN_TRANSACTION`]:
//! SQLite, the MySQL family) or each move guarded by the row version it read (PostgreSQL,
//! which needs no transaction).

use std::collections::HashSet;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use super::dialect::SqlDialect;
use super::store::{in_transaction_with, Store};
use super::takeover::select_every_column;
use super::takeover::{adoptable_table, key_is_whole, located, location_of, place};
use super::wire::{Cells, DbFailure, Param, Wire};
use crate::audit::{AdoptReport, AuditProgress, RunLimits};
use crate::column::ColumnShape;
use crate::document::DocumentRef;
use crate::error::Error;
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::{Model, ID_FIELD, WRITE_MARKER_FIELD};
use crate::sql::audit::shown_row_id;
use crate::sql::judge::{
    stored_destination, typed_destination, AdoptOptions, Destination, Destined,
};
use crate::sql::layout::{Content, Layout};
use crate::trace::{Call, CallKind};
use crate::MAX_ATTEMPTS;

/// How many rows one page of the adoption reads.
pub(crate) const PAGE_ROWS: i64 = 500;

/// Which rows of the table an adoption reads ([`SqlDialect::adoption_rows`]).
#[derive(Clone, Copy)]
pub(crate) enum Rows<'r> {
    /// One page of a pass, after the cursor: the rows with an `_id`, in its order (`located`
    /// false), or the rows without one, by where they are ([`location_of`]).
    Page {
        located: bool,
        after: Option<&'r str>,
    },
    /// The row under this `_id` as it is now, after a move found it changed.
    Id(&'r str),
}

/// A row as an adoption read it.
pub(crate) struct ReadRow {
    /// Its columns, as the SQL stores judge rows.
    pub stored: Map<String, Value>,
    /// Its `_id`, if it has one.
    pub id: Option<String>,
    /// Where it is ([`location_of`]): the dialect's locator, else its natural key.
    pub location: Option<String>,
    /// The row version it was read at, where a move is guarded by it (PostgreSQL's `xmin`, or
    /// the whole row under the write marker).
    #[cfg_attr(not(feature = "_postgres"), allow(dead_code))]
    pub version: Option<String>,
}

/// What one move did ([`SqlDialect::adoption_move`]).
pub(crate) enum Move {
    /// The row is under its derived id now.
    Moved,
    /// Another row holds the derived id.
    Taken,
    /// The row changed or went away since it was read (where a move is guarded by the row
    /// version it read), or was not updated.
    Changed,
    /// The database refused the move for what the row or the table holds (a foreign key that
    /// restricts changes of the id, a check, a trigger raising): why. Nothing was written.
    Refused(String),
}

// The methods are the crate's own: each store's module gives them their public signatures.
#[allow(private_bounds)]
impl<D: SqlDialect> Store<D> {
    /// The adoption of `T`'s table, through `wire`.
    pub(crate) async fn adopt_on<T>(&self, wire: &impl Wire) -> Result<AdoptReport, Error>
    where
        T: Idempotent + Serialize + DeserializeOwned,
    {
        let model = &T::MODEL;
        let call = Call::new(CallKind::Adopt, model.collection(), || None::<Id>);
        super::store::run::<D, _>(call, async move {
            let collection = DocumentRef::collection(model);
            crate::audit::check_derived_ids(model)?;
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
            let table = adoptable_table(self, wire, model, field_order, &options).await?;
            let destination = |layout: &Layout, stored: Map<String, Value>| {
                stored_destination(layout, field_order, stored)
            };
            move_rows::<D>(wire, &table, &destination, options, progress).await
        })
        .await
    }
}

/// How far a run has come: its report, its limits, and the rows read against the table's size.
struct Run<'p> {
    report: AdoptReport,
    limits: RunLimits,
    scanned: u64,
    total: Option<u64>,
    progress: &'p mut (dyn FnMut(&AuditProgress) + Send),
    /// The places (digests of them) of the rows the pass under way could not move: a moved row
    /// leaves the pass, so a row read again is one of these ([`page`]).
    not_moved: HashSet<u64>,
}

/// The moves of every row of `table` not under its derived id, page by page. A moved row has
/// an id, and a row that could not move keeps its place behind the cursor, so each pass ends.
async fn move_rows<D: SqlDialect>(
    wire: &impl Wire,
    table: &D::Table,
    destination: &Destined<'_>,
    options: AdoptOptions,
    progress: &mut (dyn FnMut(&AuditProgress) + Send),
) -> Result<AdoptReport, Error> {
    let model = table.model;
    let collection = DocumentRef::collection(model);
    crate::trace::round_trip("SELECT");
    let total = wire
        .fetch_optional(&D::row_count_sql(table), &[])
        .await
        .map_err(|source| D::error(&collection, source))?
        .and_then(|row| row.integer(0).ok().flatten())
        .and_then(|rows| u64::try_from(rows).ok());
    let mut run = Run {
        report: AdoptReport::new(model.collection()),
        limits: RunLimits::new(options.max_documents, None),
        scanned: 0,
        total,
        progress,
        not_moved: HashSet::new(),
    };
    for located in [false, true] {
        run.not_moved.clear();
        let mut after: Option<String> = None;
        loop {
            let rows = Rows::Page {
                located,
                after: after.as_deref(),
            };
            let page = page::<D>(wire, table, rows, destination, &mut run);
            let last = match D::ADOPTS_IN_TRANSACTION {
                true => in_transaction_with::<D, _>(wire, &collection, page).await?,
                false => page.await?,
            };
            match last {
                Next::Stop => {
                    run.report.stopped = true;
                    return Ok(run.report);
                }
                Next::After(last) => after = Some(last),
                Next::PassDone => break,
            }
        }
    }
    if D::row_locator(table).is_none() {
        report_unplaced::<D>(wire, table, destination, &mut run).await?;
    }
    Ok(run.report)
}

/// Reports each row without an `_id` whose natural key has a NULL part, where the table has no
/// locator ([`key_is_whole`]): no move could find it again. Read in one pass after the moves,
/// as the audit reads a table, each with the reason its content gives, else that one.
async fn report_unplaced<D: SqlDialect>(
    wire: &impl Wire,
    table: &D::Table,
    destination: &Destined<'_>,
    run: &mut Run<'_>,
) -> Result<(), Error> {
    let collection = DocumentRef::collection(table.model);
    let (list, columns) = select_every_column::<D>(table);
    let sql = format!(
        "SELECT {list} FROM {} t WHERE t.{} IS NULL AND {}",
        D::quote(table.model.collection()),
        D::quote(ID_FIELD),
        key_is_whole::<D>(table, false)
    );
    crate::trace::round_trip("SELECT");
    let error = |source| D::error(&collection, source);
    wire.scan(&sql, &[], error, |row| {
        let (stored, _) = D::row_read(table, &columns, row, &collection)?;
        let why = match destination(table, stored) {
            Err(why) => why,
            Ok(_) => "its natural key has a NULL part, by which no row is found again: \
                      give it an _id"
                .to_owned(),
        };
        let shown = shown_row_id(None, "a row");
        run.report.failed.record(shown, Some(why));
        run.scanned += 1;
        (run.progress)(&AuditProgress::new(run.scanned, run.total));
        Ok(())
    })
    .await
}

/// Where a run goes after a page.
enum Next {
    /// On, after the cursor (the page's last row).
    After(String),
    /// To the next pass: the page held no row after which the next could be read.
    PassDone,
    /// Nowhere: the run's limit is reached.
    Stop,
}

/// Reads one page (`rows`) and moves each of its rows.
async fn page<D: SqlDialect>(
    wire: &impl Wire,
    table: &D::Table,
    rows: Rows<'_>,
    destination: &Destined<'_>,
    run: &mut Run<'_>,
) -> Result<Next, Error> {
    let collection = DocumentRef::collection(table.model);
    let mut page = D::adoption_rows(wire, table, rows, &collection).await?;
    // The cursor: the last row that has a place in the pass's order (every row of a page has
    // one: a row without `_id` whose natural key has a NULL part is none of a page's, but
    // reported after the passes where no locator places it).
    let located = matches!(rows, Rows::Page { located: true, .. });
    let place = |row: &ReadRow| match located {
        true => row.location.clone(),
        false => row.id.clone(),
    };
    // Rows read again, which could not move before: a key that, bound as read, sorts before
    // the row as stored (SQLite's `'t'` in a boolean column, read as true, bound as 1) makes
    // the page after it begin before it. Not moved or counted twice; a page of nothing else
    // ends the pass, which would otherwise read the same rows forever.
    let digest = |place: &str| {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(place, &mut hasher);
        std::hash::Hasher::finish(&hasher)
    };
    page.retain(|row| place(row).is_none_or(|at| !run.not_moved.contains(&digest(&at))));
    let last = page.iter().rev().find_map(place);
    for row in page {
        let limit_reached = run.limits.documents_left(&run.report, 0) == Some(0);
        let (at, failed) = (place(&row), run.report.failed.count);
        let row_end = adopt_row::<D>(
            wire,
            table,
            destination,
            (row, limit_reached),
            &mut run.report,
        );
        if let RowEnd::LimitReached = row_end.await? {
            return Ok(Next::Stop);
        }
        if run.report.failed.count > failed {
            run.not_moved.extend(at.as_deref().map(digest));
        }
        run.scanned += 1;
        (run.progress)(&AuditProgress::new(run.scanned, run.total));
    }
    Ok(last.map_or(Next::PassDone, Next::After))
}

/// What became of a row an adoption read.
enum RowEnd {
    /// Moved, in place already, deleted meanwhile, or reported as not moved.
    Settled,
    /// Left as it was: it would move, and the run's limit is reached.
    LimitReached,
}

/// Moves one row, reading it again while it changes under the move. Once the run's limit is
/// reached (`limit_reached`), a row that would move is left for the next run; one that cannot
/// move is still reported, which writes nothing, so that a run stops only where a move is left.
async fn adopt_row<D: SqlDialect>(
    wire: &impl Wire,
    table: &D::Table,
    destination: &Destined<'_>,
    (mut row, limit_reached): (ReadRow, bool),
    report: &mut AdoptReport,
) -> Result<RowEnd, Error> {
    let place = (row.location.as_deref()).map_or("a row".to_owned(), |at| place::<D>(table, at));
    let shown = shown_row_id(row.stored.get(ID_FIELD), &place);
    let mut attempts = 0;
    let why = loop {
        attempts += 1;
        if attempts > MAX_ATTEMPTS {
            break "changed by another writer at every attempt to move it".to_owned();
        }
        let destination = match destination(table, std::mem::take(&mut row.stored)) {
            Err(why) => break why,
            Ok(moved) if row.id.as_deref() == Some(moved.id_text.as_str()) => {
                return Ok(RowEnd::Settled)
            }
            Ok(moved) => moved,
        };
        if row.id.is_none() && row.location.is_none() {
            break "the row has neither an _id nor a locator".to_owned();
        }
        if limit_reached {
            return Ok(RowEnd::LimitReached);
        }
        match D::adoption_move(wire, table, &row, &destination).await? {
            Move::Moved => {
                report.moved.record_misplaced(shown, destination.id_text);
                return Ok(RowEnd::Settled);
            }
            Move::Taken => {
                break format!(
                    "derived id {} is held by another row; run adopt again once that row is moved",
                    destination.id_text
                )
            }
            Move::Refused(why) => break format!("the database refused its move: {why}"),
            Move::Changed => {
                let Some(id) = &row.id else {
                    // Written since it was read, so no longer where it was; or, read and
                    // locked in idem's transaction, not found again by the key it read (a key
                    // value stored otherwise than it reads, as SQLite's `'t'` for true).
                    break match D::ADOPTS_IN_TRANSACTION {
                        true => "not found again by the natural key it reads as (a key value \
                                 stored otherwise than it reads): give it an _id"
                            .to_owned(),
                        false => "changed by another writer; run adopt again".to_owned(),
                    };
                };
                let again = D::adoption_rows(wire, table, Rows::Id(id), &destination.document);
                match again.await?.into_iter().next() {
                    Some(again) => {
                        crate::trace::retry("another writer changed the row being moved");
                        row = again;
                    }
                    // Deleted since it was read: nothing to move.
                    None => return Ok(RowEnd::Settled),
                }
            }
        }
    };
    report.failed.record(shown, Some(why));
    Ok(RowEnd::Settled)
}

/// The rows of an adoption where a page is read with its locks inside a transaction of idem's
/// own (SQLite, the MySQL family): a row changed between its read and its move would be moved
/// with the hash of what was read. These databases have no locator every table has (a SQLite
/// table `WITHOUT ROWID` has no `rowid`): a row without `_id` is found by its natural key, which
/// the table check wants unique, and the pass over such rows goes in its order.
// Where only PostgreSQL is built, the marker dialects' reads and moves go unused.
#[cfg_attr(not(feature = "_marker_store"), allow(dead_code))]
pub(crate) async fn locked_rows<D: SqlDialect>(
    wire: &impl Wire,
    table: &D::Table,
    rows: Rows<'_>,
    document: &DocumentRef,
) -> Result<Vec<ReadRow>, Error> {
    let error = |source| D::error(document, source);
    let id = D::quote(ID_FIELD);
    let (list, columns) = select_every_column::<D>(table);
    let (condition, after) = match rows {
        Rows::Page {
            located: false,
            after,
        } => (
            format!("t.{id} IS NOT NULL AND (? IS NULL OR t.{id} > ?) ORDER BY t.{id}"),
            after,
        ),
        Rows::Page {
            located: true,
            after,
        } => {
            let key: Vec<String> = (table.natural_key_names().iter())
                .map(|name| format!("t.{}", D::quote(name)))
                .collect();
            let (key, marks) = (key.join(", "), vec!["?"; key.len()].join(", "));
            let condition = format!(
                "t.{id} IS NULL AND {} AND (? IS NULL OR ({key}) > ({marks})) ORDER BY {key}",
                key_is_whole::<D>(table, true)
            );
            (condition, after)
        }
        Rows::Id(at) => (format!("(? IS NULL OR t.{id} = ?)"), Some(at)),
    };
    let sql = format!(
        "SELECT {list}, {} FROM {} t WHERE {condition} LIMIT {PAGE_ROWS}{}",
        located::<D>(table),
        D::quote(table.model.collection()),
        D::LOCKING_READ
    );
    crate::trace::round_trip("SELECT");
    let key = natural_key(after);
    let mut params = vec![Param::Text(after)];
    match rows {
        Rows::Page { located: true, .. } => params.extend(key_params(table, key.as_deref())),
        _ => params.push(Param::Text(after)),
    }
    let found = wire.fetch_all(&sql, &params).await.map_err(error)?;
    let mut read = Vec::with_capacity(found.len());
    for row in &found {
        let (stored, next) = D::row_read(table, &columns, row, document)?;
        let location = match D::row_locator(table) {
            Some(_) => location_of::<D>(table, &stored, row.text(next).map_err(error)?),
            None => key_as_stored(table, &columns, row).map_err(error)?,
        };
        read.push(ReadRow {
            id: stored
                .get(ID_FIELD)
                .and_then(Value::as_str)
                .map(str::to_owned),
            location,
            stored,
            version: None,
        });
    }
    Ok(read)
}

/// Where a row is without a locator: its natural key's cells as the read selected them (a
/// column of JSON as its text, quotes and all; a `DATE` SQLite reads as JSON as its text), a
/// JSON array of them, which bound back finds the row; `None` for a key with a NULL part.
/// Not the values read from them, which may be written otherwise (a text that is no JSON,
/// read as a string, would come back quoted).
fn key_as_stored<R: Cells>(
    table: &Layout,
    columns: &[usize],
    row: &R,
) -> Result<Option<String>, DbFailure> {
    let mut key = Vec::new();
    for field in table.model.natural_key_fields() {
        let cell = (table.column_of(field))
            .and_then(|index| columns.iter().position(|&column| column == index));
        match cell.map(|at| row.text(at)).transpose()?.flatten() {
            Some(text) => key.push(text),
            None => return Ok(None),
        }
    }
    Ok(Some(Value::from(key).to_string()))
}

/// The texts of the natural key at `location` ([`location_of`]).
fn natural_key(location: Option<&str>) -> Option<Vec<String>> {
    serde_json::from_str(location?).ok()
}

/// The natural key's texts `key` (NULLs if none) bound as its columns hold them.
fn key_params<'k>(table: &Layout, key: Option<&'k [String]>) -> Vec<Param<'k>> {
    (table.model.natural_key_fields().enumerate())
        .map(|(at, field)| {
            let shape =
                (table.column_of(field)).map_or(ColumnShape::Text, |at| table.columns[at].shape);
            Param::typed(shape, key.and_then(|key| key.get(at)).map(String::as_str))
        })
        .collect()
}

/// The move of a row [`locked_rows`] read and locked: one `UPDATE` of its id, its write marker
/// and idem's columns, by its id, else by its natural key. The derived id held by another row
/// fails on the id's unique index, which undoes the statement alone; a move that updated no
/// row is not one.
#[cfg_attr(not(feature = "_marker_store"), allow(dead_code))]
pub(crate) async fn locked_move<D: SqlDialect>(
    wire: &impl Wire,
    table: &D::Table,
    row: &ReadRow,
    destination: &Destination,
) -> Result<Move, Error> {
    let mut set = vec![
        format!("{} = ?", D::quote(ID_FIELD)),
        format!("{} = ?", D::quote(WRITE_MARKER_FIELD)),
    ];
    for (index, _) in &destination.contents {
        let column = &table.columns[*index];
        let value = match column.content {
            Content::Hash => D::words().hash_bytes(table.model, "?"),
            Content::Digests => (D::words().from_hex)("?"),
            _ => "?".to_owned(),
        };
        set.push(format!("{} = {value}", D::quote(column.name)));
    }
    // Every other column of the model assigned itself ([`SqlDialect::MOVE_KEEPS_COLUMNS`]): it
    // keeps the value the hash just written covers.
    let moved: Vec<usize> = destination
        .contents
        .iter()
        .map(|(index, _)| *index)
        .collect();
    for (index, column) in table.columns.iter().enumerate() {
        let own = [ID_FIELD, WRITE_MARKER_FIELD].contains(&column.name);
        if D::MOVE_KEEPS_COLUMNS && !moved.contains(&index) && !own {
            let name = D::quote(column.name);
            set.push(format!("{name} = {name}"));
        }
    }
    let key = natural_key(row.location.as_deref());
    let condition: Vec<String> = match &row.id {
        Some(_) => vec![format!("{} = ?", D::quote(ID_FIELD))],
        None => std::iter::once(format!("{} IS NULL", D::quote(ID_FIELD)))
            .chain((table.natural_key_names().iter()).map(|name| format!("{} = ?", D::quote(name))))
            .collect(),
    };
    let update = format!(
        "{} {} SET {} WHERE {}",
        D::MOVE_UPDATE,
        D::quote(table.model.collection()),
        set.join(", "),
        condition.join(" AND "),
    );
    let update_marker = format!("u{}", ulid::Ulid::generate());
    let mut params = vec![
        Param::Text(Some(&destination.id_text)),
        Param::Text(Some(&update_marker)),
    ];
    params.extend(
        destination
            .contents
            .iter()
            .map(|(_, value)| Param::Text(value.as_deref())),
    );
    match &row.id {
        Some(id) => params.push(Param::Text(Some(id))),
        None => params.extend(key_params(table, key.as_deref())),
    }
    crate::trace::round_trip("UPDATE");
    match wire.execute(&update, &params).await {
        Ok(1..) => Ok(Move::Moved),
        // Read and locked, yet not updated (a trigger, a key read back otherwise than stored):
        // not moved, and read again.
        Ok(0) => Ok(Move::Changed),
        Err(source) => {
            let failure = D::error(&destination.document, source);
            match D::unique_conflict(&failure, table) {
                Some(_) => Ok(Move::Taken),
                None => refused_or_failed(failure),
            }
        }
    }
}

/// A move's failure as the row's end where the database refused it for what the row or the
/// table holds (the statement alone undone: the run goes on to the next row), else the run's.
pub(crate) fn refused_or_failed(failure: Error) -> Result<Move, Error> {
    match failure.is_refusal() {
        true => Ok(Move::Refused(failure.to_string())),
        false => Err(failure),
    }
}
