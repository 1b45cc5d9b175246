//! Adoption: moving rows written by other tools (legacy ids) or orphaned by other code to the
//! ids idem derives from their content, while idem writers keep running.
//!
//! PostgreSQL can change a row's primary key in place, so a move is one `UPDATE` of the row's
//! `_id`, content hash, digests and version key, guarded by the row version it was read at: it
//! happens whole or not at all, and only to the row as read. The move, and why it is safe, is
//! documented on [`Store::adopt`](Store#method.adopt).

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use super::dialect::{Postgres, UNIQUE_VIOLATION};
use super::table::{quote, sql_type, Table};
use super::wire::{self, Cells, Connection, Param, Wire};
use super::{postgres_error, Store};
use crate::audit::{AdoptReport, AuditProgress, RunLimits};
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::{Model, ID_FIELD};
use crate::sql::audit::shown_row_id;
use crate::sql::dialect::SqlDialect;
use crate::sql::judge::{
    stored_destination, typed_destination, AdoptOptions, Destination, Destined,
};
use crate::sql::layout::Layout;
use crate::sql::takeover::adoptable_table;
use crate::trace::{Call, CallKind};
use crate::MAX_ATTEMPTS;

/// How many rows one page of the scan reads.
const PAGE_ROWS: i64 = 500;

/// A row as the scan read it: its content, where it is and its row version.
struct ReadRow {
    stored: serde_json::Map<String, Value>,
    place: Place,
    version: String,
}

/// How a statement finds a row: by its `_id`, or, for a row without one (an `_id` column a
/// migration added), by its physical location, valid until the row is next written.
#[derive(Clone)]
enum Place {
    Id(String),
    Location(String),
}

impl Place {
    /// The row as a report shows it.
    fn shown(&self) -> String {
        match self {
            Place::Id(id) => id.clone(),
            Place::Location(location) => shown_row_id(None, &format!("ctid {location}")),
        }
    }
}

/// What one move did.
enum Move {
    /// The row is under its derived id now.
    Moved,
    /// The row was under its derived id already.
    InPlace,
    /// Another row holds the derived id.
    Taken,
    /// The row changed or went away since it was read.
    Changed,
}

impl Store {
    /// Moves the rows of `T`'s table that are not under the id derived from their content
    /// (legacy ids, orphans) to their derived ids, with the content hash, digests and version
    /// key idem stores; safe while idem writers run, and resumable after a crash at any point.
    /// Rows that do not read as `T`, from which no id can be derived, or whose derived id another
    /// row holds, are reported and left alone.
    ///
    /// The table must be one idem can write, natural-key constraint included: an error names
    /// what it lacks ([`audit`](Store#method.audit) lists it with the duplicates that would block the
    /// constraint). So no two rows share a natural key, and there is no duplicate to choose
    /// between, unlike [`mongo::Store::adopt`](crate::mongo::Store::adopt).
    ///
    /// # The move
    ///
    /// The rows are read in pages, in `_id` order, then the rows without an `_id` (a column a
    /// migration added) in physical order. Each row `L` that reads as `T` with a derived id `D`
    /// other than its own moves in one statement: an `UPDATE` of `L`'s `_id` to `D`, with
    /// the hash, digests and version key of `T` as read, only if `L` still has the row version
    /// (`xmin`) it was read at and no row holds `D`. The row's other columns are left as they
    /// are. If `L` changed since it was read, it is read again and the move tried again; a row
    /// without an `_id` is found by its physical location, which a write changes, so it is
    /// reported instead, for the next run.
    ///
    /// A writer upserting `L`'s natural key meets `L`, under an id other than the one it derives,
    /// and is refused ([`ErrorKind::IdChanged`], or [`ErrorKind::FrozenFieldChanged`] if its timestamp
    /// moved) as before adoption began; once `L` is
    /// moved, it meets the adopted row and is judged as any write is. The statement is atomic:
    /// no writer ever sees the key absent or held twice, and a crash leaves each row moved or
    /// not. Running `adopt` again finishes the job; a row moved is under its derived id and is
    /// left alone.
    ///
    /// Inside the caller's transaction the moves are the transaction's. A row another tool
    /// inserts under `D` between the check and the update makes the server refuse the
    /// statement, which aborts a transaction: outside one, that row is reported.
    ///
    /// ```no_run
    /// # use idem_core::Idempotent;
    /// # #[derive(serde::Serialize, serde::Deserialize, Idempotent)]
    /// # #[idem(collection = "posts")]
    /// # struct Post { #[idem(key)] slug: String }
    /// # async fn run(client: tokio_postgres::Client) -> Result<(), idem_core::Error> {
    /// let store = idem_core::postgres::Store::new();
    /// let report = store.adopt::<Post, _>(&client).await?;
    /// println!("{report}");
    /// # Ok(()) }
    /// ```
    pub async fn adopt<T, C>(&self, client: C) -> Result<AdoptReport, Error>
    where
        T: Idempotent + Serialize + DeserializeOwned,
        C: Connection,
    {
        let wire = client.wire();
        let client = &wire;
        let model = &T::MODEL;
        let call = Call::new(CallKind::Adopt, model.collection(), || None::<Id>);
        call.run(async move {
            let collection = DocumentRef::collection(model);
            if model.idempotency_key_field().is_some() {
                return Err(Error::new(collection, ErrorKind::NoDerivedId));
            }
            let table = self.table::<T>(client, &collection).await?;
            move_rows(
                client,
                &table,
                &typed_destination::<T>,
                AdoptOptions::default(),
                &mut |_| {},
            )
            .await
        })
        .await
    }

    /// [`adopt`](Store#method.adopt) for a model given at run time (the `idem` command's flags), as
    /// [`audit_model`](Store#method.audit_model) reads it: each row moves to the id its stored key
    /// values (and integer timestamp) derive, with the content hash of its stored values
    /// written, or its stored hash kept where that may be the type's (nested objects). A hash
    /// that is not the type's only makes the next upsert of the row write once more.
    ///
    /// The table must be one idem can write (its primary key on `_id`, the content hash column,
    /// the unique constraint on the natural key: [`audit_model`](Store#method.audit_model) lists what
    /// it lacks), else [`ErrorKind::SchemaMismatch`] names the first thing missing and nothing
    /// moves. So is a model the stored rows were not written with ([`crate::model_check`]),
    /// unless [`AdoptOptions::ignore_model_check`].
    pub async fn adopt_model<C: Connection>(
        &self,
        client: C,
        model: &Model,
        field_order: &[&str],
        options: AdoptOptions,
    ) -> Result<AdoptReport, Error> {
        self.adopt_model_with_progress(client, model, field_order, options, |_| {})
            .await
    }

    /// [`adopt_model`](Store#method.adopt_model), calling `progress` after each row it reads, with the
    /// planner's estimate of the table's size: to draw a progress bar, as
    /// [`audit_with_progress`](Store#method.audit_with_progress) does.
    pub async fn adopt_model_with_progress<C: Connection>(
        &self,
        client: C,
        model: &Model,
        field_order: &[&str],
        options: AdoptOptions,
        mut progress: impl FnMut(&AuditProgress) + Send,
    ) -> Result<AdoptReport, Error> {
        let wire = client.wire();
        let client = &wire;
        let call = Call::new(CallKind::Adopt, model.collection(), || None::<Id>);
        call.run(async move {
            let table = adoptable_table::<Postgres>(client, model, field_order, &options).await?;
            let destination = |layout: &Layout, stored: Map<String, Value>| {
                stored_destination(layout, field_order, stored)
            };
            move_rows(client, &table, &destination, options, &mut progress).await
        })
        .await
    }
}

/// The moves of every row of `table` not under its derived id, as [`Store::adopt`](Store#method.adopt) describes.
async fn move_rows<C: Wire>(
    client: &C,
    table: &Table,
    destination: &Destined<'_>,
    options: AdoptOptions,
    progress: &mut (dyn FnMut(&AuditProgress) + Send),
) -> Result<AdoptReport, Error> {
    let model = table.model;
    let collection = DocumentRef::collection(model);
    crate::trace::round_trip("SELECT");
    let total = client
        .fetch_optional(&Postgres::row_count_sql(table), &[])
        .await
        .map_err(|source| postgres_error(&collection, source))?
        .and_then(|row| row.int8(0))
        .and_then(|rows| u64::try_from(rows).ok());
    let mut report = AdoptReport::new(model.collection());
    let limits = RunLimits::new(options.max_documents, None);
    let mut scanned = 0;
    // The rows with an `_id` in its order, then those without one in physical order: a moved
    // row has an id, and a row that could not move keeps its place behind the cursor, so each
    // pass ends.
    for pass in [Pass::ById, Pass::WithoutId] {
        let mut after: Option<String> = None;
        loop {
            let page = read_page(client, table, pass, after.as_deref(), &collection).await?;
            let Some(last) = page.last() else {
                break;
            };
            after = Some(match &last.place {
                Place::Id(id) | Place::Location(id) => id.clone(),
            });
            for row in page {
                if limits.documents_left(&report, 0) == Some(0) {
                    report.stopped = true;
                    return Ok(report);
                }
                adopt_row(client, table, destination, row, &mut report).await?;
                scanned += 1;
                progress(&AuditProgress::new(scanned, total));
            }
        }
    }
    Ok(report)
}

/// Moves one row, reading it again while it changes under the move.
async fn adopt_row<C>(
    client: &C,
    table: &Table,
    destination: &Destined<'_>,
    mut row: ReadRow,
    report: &mut AdoptReport,
) -> Result<(), Error>
where
    C: Wire,
{
    for _ in 0..MAX_ATTEMPTS {
        let id = row.place.shown();
        let destination = destination(table, row.stored);
        let destination = match destination {
            Ok(destination) => destination,
            Err(why) => {
                report.failed.record(id, Some(why));
                return Ok(());
            }
        };
        match move_row(client, table, &row.place, &row.version, &destination).await? {
            Move::InPlace => return Ok(()),
            Move::Moved => {
                report
                    .moved
                    .record_misplaced(id, destination.id_text.clone());
                return Ok(());
            }
            Move::Taken => {
                let detail = format!(
                    "derived id {} is held by another row; run adopt again once that row is moved",
                    destination.id_text
                );
                report.failed.record(id, Some(detail));
                return Ok(());
            }
            Move::Changed => {
                let Place::Id(stored_id) = &row.place else {
                    // Written since it was read, so no longer where it was.
                    report.failed.record(
                        id,
                        Some("changed by another writer; run adopt again".to_owned()),
                    );
                    return Ok(());
                };
                match read_row(client, table, stored_id, &destination.document).await? {
                    Some(again) => {
                        crate::trace::retry("another writer changed the row being moved");
                        row = again;
                    }
                    // Deleted since it was read: nothing to move.
                    None => return Ok(()),
                }
            }
        }
    }
    report.failed.record(
        row.place.shown(),
        Some("changed by another writer at every attempt to move it".to_owned()),
    );
    Ok(())
}

/// Which rows a pass of the scan reads.
#[derive(Clone, Copy)]
enum Pass {
    /// The rows with an `_id`, in its order.
    ById,
    /// The rows without one, in physical order.
    WithoutId,
}

/// One page of a pass's rows, after the cursor `after`.
async fn read_page<C>(
    client: &C,
    table: &Table,
    pass: Pass,
    after: Option<&str>,
    document: &DocumentRef,
) -> Result<Vec<ReadRow>, Error>
where
    C: Wire,
{
    let id = quote(ID_FIELD);
    let (condition, order) = match pass {
        Pass::ById => (
            format!("t.{id} IS NOT NULL AND ($1::text IS NULL OR t.{id} > $1)"),
            format!("t.{id}"),
        ),
        Pass::WithoutId => (
            format!("t.{id} IS NULL AND ($1::text IS NULL OR t.ctid > $1::tid)"),
            "t.ctid".to_owned(),
        ),
    };
    let clause = format!("WHERE {condition} ORDER BY {order} LIMIT $2");
    select_rows(
        client,
        table,
        &clause,
        &[Param::Text(after), Param::Integer(PAGE_ROWS)],
        document,
    )
    .await
}

/// The row under `id` as it is now, `None` if there is none.
async fn read_row<C>(
    client: &C,
    table: &Table,
    id: &str,
    document: &DocumentRef,
) -> Result<Option<ReadRow>, Error>
where
    C: Wire,
{
    let clause = format!("WHERE t.{} = $1", quote(ID_FIELD));
    let rows = select_rows(client, table, &clause, &[Param::Text(Some(id))], document).await?;
    Ok(rows.into_iter().next())
}

/// The rows `clause` (a `WHERE` and what follows it) selects, each with its content, its place
/// and its row version.
async fn select_rows<C>(
    client: &C,
    table: &Table,
    clause: &str,
    parameters: &[Param<'_>],
    document: &DocumentRef,
) -> Result<Vec<ReadRow>, Error>
where
    C: Wire,
{
    let sql = format!(
        "SELECT {}, t.{}, t.ctid::text, t.xmin::text FROM {} t {clause}",
        table.row_json("t", |_| true),
        quote(ID_FIELD),
        table.name()
    );
    crate::trace::round_trip("SELECT");
    let rows = client
        .fetch_all(&sql, parameters)
        .await
        .map_err(|source| postgres_error(document, source))?;
    rows.iter()
        .map(|row| read_row_from(row, document))
        .collect()
}

fn read_row_from<R: Cells>(row: &R, document: &DocumentRef) -> Result<ReadRow, Error> {
    // `to_jsonb` of a row is never NULL.
    let stored = row.object(0, document)?.unwrap_or_default();
    let place = match row.str(1) {
        Some(id) => Place::Id(id.to_owned()),
        None => Place::Location(row.str(2).unwrap_or_default().to_owned()),
    };
    Ok(ReadRow {
        stored,
        place,
        version: row.str(3).unwrap_or_default().to_owned(),
    })
}

/// The move of the row at `place`, at row version `version`, to `destination`'s id, with its
/// hash, digests and version key: one statement that also tells why nothing moved.
async fn move_row<C>(
    client: &C,
    table: &Table,
    place: &Place,
    version: &str,
    destination: &Destination,
) -> Result<Move, Error>
where
    C: Wire,
{
    let id_column = quote(ID_FIELD);
    let (found, at) = match place {
        Place::Id(id) if *id == destination.id_text => return Ok(Move::InPlace),
        Place::Id(id) => (format!("t.{id_column} = $1"), id),
        Place::Location(location) => (
            format!("t.ctid = $1::tid AND t.{id_column} IS NULL"),
            location,
        ),
    };
    let mut set = vec![format!("{id_column} = $3")];
    let mut values: Vec<Option<&str>> = vec![Some(at), Some(version), Some(&destination.id_text)];
    for (index, value) in &destination.contents {
        values.push(value.as_deref());
        set.push(format!(
            "{} = ${}::{}",
            quote(table.columns[*index].name),
            values.len(),
            sql_type(&table.columns[*index])
        ));
    }
    let sql = format!(
        "WITH taken AS (SELECT 1 FROM {table} WHERE {id_column} = $3), \
         moved AS (UPDATE {table} t SET {set} \
         WHERE {found} AND t.xmin::text = $2 AND NOT EXISTS (SELECT 1 FROM taken) \
         RETURNING 1) \
         SELECT (SELECT count(*) FROM moved), EXISTS (SELECT 1 FROM taken)",
        table = table.name(),
        set = set.join(", "),
    );
    let parameters: Vec<Param> = values.iter().map(|value| Param::Text(*value)).collect();
    crate::trace::round_trip("UPDATE");
    let reply = match client
        .write(&sql, &parameters)
        .await
        .and_then(|rows| wire::one(rows, "UPDATE"))
    {
        Ok(reply) => reply,
        // Another tool inserted a row under the derived id since the check.
        Err(source) if source.code() == Some(UNIQUE_VIOLATION) => return Ok(Move::Taken),
        Err(source) => return Err(postgres_error(&destination.document, source)),
    };
    Ok(
        match (reply.int8(0).unwrap_or(0), reply.flag(1).unwrap_or(false)) {
            (1.., _) => Move::Moved,
            (_, true) => Move::Taken,
            _ => Move::Changed,
        },
    )
}
