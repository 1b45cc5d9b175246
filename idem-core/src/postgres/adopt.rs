//! Adoption: moving rows written by other tools (legacy ids) or orphaned by other code to the
//! ids idem derives from their content, while idem writers keep running.
//!
//! PostgreSQL can change a row's primary key in place, so a move is one `UPDATE` of the row's
//! `_id`, content hash, digests and version key, guarded by the row version it was read at: it
//! happens whole or not at all, and only to the row as read. The move, and why it is safe, is
//! documented on [`Store::adopt`].

use super::Connection;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use super::audit::shown_row_id;
use super::read::row_as;
use super::table::{quote, sql_type, Table};
use super::{postgres_error, Store};
use crate::audit::AdoptReport;
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::idempotent::Idempotent;
use crate::model::ID_FIELD;
use crate::sql::layout::Content;
use crate::sql::row::PreparedRow;
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
            Place::Location(location) => shown_row_id(None, location),
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
    /// what it lacks ([`audit`](Store::audit) lists it with the duplicates that would block the
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
    pub async fn adopt<T, C>(&self, client: &C) -> Result<AdoptReport, Error>
    where
        T: Idempotent + Serialize + DeserializeOwned,
        C: Connection,
    {
        let call = Call::new(CallKind::Adopt, T::MODEL.collection(), || {
            None::<crate::id::Id>
        });
        call.run(async move {
            let model = &T::MODEL;
            let collection = DocumentRef::collection(model);
            if model.idempotency_key_field().is_some() {
                return Err(Error::new(collection, ErrorKind::NoDerivedId));
            }
            let table = self.table::<T, C>(client, &collection).await?;
            let mut report = AdoptReport::new(model.collection());
            // The rows with an `_id` in its order, then those without one in physical order: a
            // moved row has an id, and a row that could not move keeps its place behind the
            // cursor, so each pass ends.
            for pass in [Pass::ById, Pass::WithoutId] {
                let mut after: Option<String> = None;
                loop {
                    let page =
                        read_page(client, &table, pass, after.as_deref(), &collection).await?;
                    let Some(last) = page.last() else {
                        break;
                    };
                    after = Some(match &last.place {
                        Place::Id(id) | Place::Location(id) => id.clone(),
                    });
                    for row in page {
                        adopt_row::<T, C>(client, &table, row, &mut report).await?;
                    }
                }
            }
            Ok(report)
        })
        .await
    }
}

/// Moves one row, reading it again while it changes under the move.
async fn adopt_row<T, C>(
    client: &C,
    table: &Table,
    mut row: ReadRow,
    report: &mut AdoptReport,
) -> Result<(), Error>
where
    T: Idempotent + Serialize + DeserializeOwned,
    C: Connection,
{
    for _ in 0..MAX_ATTEMPTS {
        let id = row.place.shown();
        let value: T = match row_as(table, row.stored) {
            Ok(value) => value,
            Err(error) => {
                report
                    .failed
                    .record(id, Some(format!("does not read as its type: {error}")));
                return Ok(());
            }
        };
        let prepared = match PreparedRow::new(&value, table) {
            Ok(prepared) => prepared,
            Err(error) => {
                report.failed.record(id, Some(error.to_string()));
                return Ok(());
            }
        };
        match move_row(client, table, &row.place, &row.version, &prepared).await? {
            Move::InPlace => return Ok(()),
            Move::Moved => {
                report.moved.record_misplaced(id, prepared.id_text.clone());
                return Ok(());
            }
            Move::Taken => {
                let detail = format!(
                    "derived id {} is held by another row; run adopt again once that row is moved",
                    prepared.id_text
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
                match read_row(client, table, stored_id, &prepared.document).await? {
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
    C: Connection,
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
        &[(&after, Type::TEXT), (&PAGE_ROWS, Type::INT8)],
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
    C: Connection,
{
    let clause = format!("WHERE t.{} = $1", quote(ID_FIELD));
    let rows = select_rows(client, table, &clause, &[(&id, Type::TEXT)], document).await?;
    Ok(rows.into_iter().next())
}

/// The rows `clause` (a `WHERE` and what follows it) selects, each with its content, its place
/// and its row version.
async fn select_rows<C>(
    client: &C,
    table: &Table,
    clause: &str,
    parameters: &[(&(dyn ToSql + Sync), Type)],
    document: &DocumentRef,
) -> Result<Vec<ReadRow>, Error>
where
    C: Connection,
{
    let sql = format!(
        "SELECT {}, t.{}, t.ctid::text, t.xmin::text FROM {} t {clause}",
        table.row_json("t", |_| true),
        quote(ID_FIELD),
        table.name()
    );
    crate::trace::round_trip("SELECT");
    let rows = client
        .query_typed(&sql, parameters)
        .await
        .map_err(|source| postgres_error(document, source))?;
    rows.iter()
        .map(|row| read_row_from(row, document))
        .collect()
}

fn read_row_from(row: &tokio_postgres::Row, document: &DocumentRef) -> Result<ReadRow, Error> {
    let Value::Object(stored) = row.get::<_, Value>(0) else {
        return Err(Error::new(
            document.clone(),
            ErrorKind::Deserialize {
                message: "a row did not read as an object".into(),
            },
        ));
    };
    let place = match row.get::<_, Option<String>>(1) {
        Some(id) => Place::Id(id),
        None => Place::Location(row.get(2)),
    };
    Ok(ReadRow {
        stored,
        place,
        version: row.get(3),
    })
}

/// The move of the row at `place`, at row version `version`, to `prepared`'s id, with its hash,
/// digests and version key: one statement that also tells why nothing moved.
async fn move_row<C>(
    client: &C,
    table: &Table,
    place: &Place,
    version: &str,
    prepared: &PreparedRow,
) -> Result<Move, Error>
where
    C: Connection,
{
    let id_column = quote(ID_FIELD);
    let (found, at) = match place {
        Place::Id(id) if *id == prepared.id_text => return Ok(Move::InPlace),
        Place::Id(id) => (format!("t.{id_column} = $1"), id),
        Place::Location(location) => (
            format!("t.ctid = $1::tid AND t.{id_column} IS NULL"),
            location,
        ),
    };
    let mut set = vec![format!("{id_column} = $3")];
    let mut values: Vec<Option<&str>> = vec![Some(at), Some(version), Some(&prepared.id_text)];
    for content in [Content::Hash, Content::Digests, Content::VersionKey] {
        if let Some(index) = table.column_with(content) {
            values.push(prepared.value_of(table, index));
            set.push(format!(
                "{} = ${}::{}",
                quote(table.columns[index].name),
                values.len(),
                sql_type(&table.columns[index])
            ));
        }
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
    let parameters: Vec<(&(dyn ToSql + Sync), Type)> = values
        .iter()
        .map(|value| (value as &(dyn ToSql + Sync), Type::TEXT))
        .collect();
    crate::trace::round_trip("UPDATE");
    let reply =
        match super::connection::contained(client, client.query_typed_one(&sql, &parameters)).await
        {
            Ok(reply) => reply,
            // Another tool inserted a row under the derived id since the check.
            Err(source) if source.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                return Ok(Move::Taken)
            }
            Err(source) => return Err(postgres_error(&prepared.document, source)),
        };
    Ok(match (reply.get::<_, i64>(0), reply.get::<_, bool>(1)) {
        (1.., _) => Move::Moved,
        (_, true) => Move::Taken,
        _ => Move::Changed,
    })
}
