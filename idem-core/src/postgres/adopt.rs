//! Adoption: moving rows written by other tools (legacy ids) or orphaned by other code to the
//! ids idem derives from their content, while idem writers keep running.
//!
//! PostgreSQL can change a row's primary key in place, so a move is one `UPDATE` of the row's
//! `_id`, content hash, digests and version key, guarded by the row version it was read at: it
//! happens whole or not at all, and only to the row as read. Under the write marker no system
//! column is named: a row without an `_id` is found by its natural key and the version is the
//! whole row. The move, and why it is safe, is documented on
//! [`Store::adopt`](Store#method.adopt).

use super::dialect::UNIQUE_VIOLATION;
use super::statements::WORDS;
use super::table::{literal, quote, sql_type, Table};
use super::wire::{self, Cells, Connection, Param, Wire};
use super::{postgres_error, Postgres, Store};
use crate::column::ColumnShape;
use crate::document::DocumentRef;
use crate::error::Error;
use crate::model::ID_FIELD;
use crate::sql::adoption::{refused_or_failed, Move, ReadRow, Rows, PAGE_ROWS};
use crate::sql::judge::Destination;
use crate::sql::layout::Content;
use crate::sql::takeover::{key_is_whole, location_of};

crate::sql::sqlx_api::store_methods! {
    [C: Connection] C, Connection::wire;
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
    /// On a store [`with_write_marker`](Store#method.with_write_marker) (for engines without
    /// PostgreSQL's system columns) no statement names one: the rows without an `_id` are read
    /// and found by their natural key (unique, by the table check), in its order, and the row
    /// version a move is guarded by is the whole row as `to_jsonb(t.*)` writes it, which any
    /// change to the row changes; the rest is as above. A row without an `_id` whose natural
    /// key has a NULL part is then reported, where the plain store finds it by its `ctid`.
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
    ///
    /// [`ErrorKind::IdChanged`]: crate::ErrorKind::IdChanged
    /// [`ErrorKind::FrozenFieldChanged`]: crate::ErrorKind::FrozenFieldChanged
    fn adopt;
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
    ///
    /// [`ErrorKind::SchemaMismatch`]: crate::ErrorKind::SchemaMismatch
    /// [`AdoptOptions::ignore_model_check`]: super::AdoptOptions::ignore_model_check
    fn adopt_model;
    /// [`adopt_model`](Store#method.adopt_model), calling `progress` after each row it reads, with the
    /// planner's estimate of the table's size: to draw a progress bar, as
    /// [`audit_with_progress`](Store#method.audit_with_progress) does.
    fn adopt_model_with_progress;
}

/// The rows an adoption reads ([`crate::sql::dialect::SqlDialect::adoption_rows`]), each with
/// its content, its place and its row version: a page in `_id` order, then the rows without an
/// `_id` in physical order; or the row under an id again.
pub(super) async fn rows<C: Wire>(
    client: &C,
    table: &Table,
    rows: Rows<'_>,
    document: &DocumentRef,
) -> Result<Vec<ReadRow>, Error> {
    let id = quote(ID_FIELD);
    // The first page's statement and the next ones' are two: one whose bound on the cursor
    // (`$1`) may be absent would leave a generic plan (sqlx's named statements are planned so
    // after a few runs) without the index's lower bound, each page reading from the start.
    let past = |column: &str, place: &str| match &rows {
        Rows::Page { after: None, .. } => String::new(),
        _ => format!(" AND {column} > {place}"),
    };
    let (clause, after) = match rows {
        // Every row of the page's last id: on a table partitioned by its natural key, rows
        // with other keys may share an `_id`, and the next page begins after it.
        Rows::Page {
            located: false,
            after,
        } => (
            format!(
                "t.{id} IS NOT NULL{after_t} AND t.{id} <= (SELECT max(p.{id}) FROM \
                 (SELECT u.{id} FROM {table} u WHERE u.{id} IS NOT NULL{after_u} \
                 ORDER BY u.{id} LIMIT $2) p) ORDER BY t.{id}",
                table = table.name(),
                after_t = past(&format!("t.{id}"), "$1::text"),
                after_u = past(&format!("u.{id}"), "$1::text"),
            ),
            after,
        ),
        Rows::Page {
            located: true,
            after,
        } => {
            let (order, at) = located(table);
            // Under the write marker, only the rows whose key is whole have a place.
            let whole = match table.marker {
                true => format!(" AND {}", key_is_whole::<Postgres>(table, true)),
                false => String::new(),
            };
            let after_at = past(&format!("({order})"), &format!("({at})"));
            let clause = format!("t.{id} IS NULL{whole}{after_at} ORDER BY {order}");
            (clause, after)
        }
        Rows::Id(at) => (format!("t.{id} = $1"), Some(at)),
    };
    let limit = match rows {
        Rows::Page { located: false, .. } => "",
        _ => " LIMIT $2",
    };
    let sql = format!(
        "SELECT {}, t.{id}, {}, {} FROM {} t WHERE {clause}{limit}",
        table.row_json("t", |_| true),
        location(table, "t"),
        row_version(table),
        table.name()
    );
    crate::trace::round_trip("SELECT");
    let found = client
        .fetch_all(&sql, &[Param::Text(after), Param::Integer(PAGE_ROWS)])
        .await
        .map_err(|source| postgres_error(document, source))?;
    let mut read = Vec::with_capacity(found.len());
    for row in &found {
        // `to_jsonb` of a row is never NULL.
        let mut stored = row.object(0, document)?.unwrap_or_default();
        table.hash_as_text(&mut stored);
        let location = row.str(2).map(str::to_owned);
        read.push(ReadRow {
            id: row.str(1).map(str::to_owned),
            location: location_of::<Postgres>(table, &stored, location),
            stored,
            version: row.str(3).map(str::to_owned),
        });
    }
    Ok(read)
}

/// Where a row without an id is, as text: its `ctid`, then, in a partition of a partitioned
/// table, ` in ` and the partition's name, since a `ctid` tells rows apart only within one
/// partition. Under the write marker, which names no system column, nothing: the row is found
/// by its natural key ([`location_of`]).
pub(super) fn location(table: &Table, alias: &str) -> String {
    if table.marker {
        return "NULL".to_owned();
    }
    format!(
        "{alias}.ctid::text || CASE WHEN {alias}.tableoid = to_regclass({name})::oid THEN '' \
         ELSE ' in ' || {alias}.tableoid::regclass::text END",
        name = literal(&table.name()),
    )
}

/// The order of the rows without an id, `(t.tableoid, t.ctid)`, and the place in it of the
/// location `$1` ([`location`]), for a row comparison. Under the write marker: the natural key,
/// and its values in the location ([`location_of`]: a JSON array of their texts).
fn located(table: &Table) -> (String, String) {
    if !table.marker {
        let at = format!(
            "(CASE WHEN strpos($1::text, ' in ') > 0 \
             THEN to_regclass(substr($1::text, strpos($1::text, ' in ') + 4)) \
             ELSE to_regclass({}) END)::oid, split_part($1::text, ' in ', 1)::tid",
            literal(&table.name()),
        );
        return ("t.tableoid, t.ctid".to_owned(), at);
    }
    let (mut order, mut at) = (Vec::new(), Vec::new());
    for (n, name) in table.natural_key_names().into_iter().enumerate() {
        let column = table.column_named(name).map(|index| &table.columns[index]);
        match column.map(|column| column.shape) {
            // A column of JSON, or one of a type the layout does not know (a `date` or a `uuid`
            // of a table read with a model given at run time), compared as `to_jsonb` writes
            // it: as the location holds it, the JSON text of the value read.
            Some(ColumnShape::Structured | ColumnShape::Flattened) => {
                order.push(format!("to_jsonb(t.{})", quote(name)));
                at.push(format!("($1::jsonb->>{n})::jsonb"));
            }
            _ => {
                order.push(format!("t.{}", quote(name)));
                at.push(format!(
                    "($1::jsonb->>{n})::{}",
                    column.map_or("text", sql_type)
                ));
            }
        }
    }
    (order.join(", "), at.join(", "))
}

/// The row version a move is guarded by, read as text: `xmin`; under the write marker, which
/// names no system column, the whole row (`to_jsonb`), which any change to it changes.
fn row_version(table: &Table) -> &'static str {
    match table.marker {
        true => "to_jsonb(t.*)::text",
        false => "t.xmin::text",
    }
}

/// The move of `row` ([`crate::sql::dialect::SqlDialect::adoption_move`]), only if it still
/// has the row version it was read at, to `destination`'s id, with its hash, digests and version
/// key: one statement that also tells why nothing moved.
pub(super) async fn move_row<C: Wire>(
    client: &C,
    table: &Table,
    row: &ReadRow,
    destination: &Destination,
) -> Result<Move, Error> {
    let id_column = quote(ID_FIELD);
    let (found, at) = match (&row.id, &row.location, table.marker) {
        // The plain store finds a row by its place (its `ctid` in its partition), which its
        // `xmin` pins to the version read: by `_id` and `xmin` alone, rows sharing an `_id` on a
        // table partitioned by its natural key, written by one statement, would move together.
        (_, Some(location), false) => {
            let (order, at) = located(table);
            let found = format!("({order}) = ({at}) AND t.{id_column} IS NOT DISTINCT FROM $4");
            (found, location.as_str())
        }
        // The marker store's version is the whole row, its key included.
        (Some(id), _, _) => (format!("t.{id_column} = $1"), id.as_str()),
        (None, location, _) => {
            let (order, at) = located(table);
            let found = format!("({order}) = ({at}) AND t.{id_column} IS NULL");
            (found, location.as_deref().unwrap_or_default())
        }
    };
    let version = row.version.as_deref().unwrap_or_default();
    let mut set = vec![format!("{id_column} = $3")];
    let id = row.id.as_deref();
    let mut values: Vec<Option<&str>> =
        vec![Some(at), Some(version), Some(&destination.id_text), id];
    for (index, value) in &destination.contents {
        values.push(value.as_deref());
        let column = &table.columns[*index];
        let value = match column.content {
            Content::Hash => WORDS.hash_bytes(table.model, &format!("${}::text", values.len())),
            Content::Digests => {
                (super::statements::WORDS.from_hex)(&format!("${}::text", values.len()))
            }
            _ => format!("${}::{}", values.len(), sql_type(column)),
        };
        set.push(format!("{} = {value}", quote(column.name)));
    }
    let sql = format!(
        "WITH taken AS (SELECT 1 FROM {table} WHERE {id_column} = $3), \
         moved AS (UPDATE {table} t SET {set} \
         WHERE {found} AND {version} = $2 AND NOT EXISTS (SELECT 1 FROM taken) \
         RETURNING 1) \
         SELECT (SELECT count(*) FROM moved), EXISTS (SELECT 1 FROM taken)",
        table = table.name(),
        version = row_version(table),
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
        Err(source) => return refused_or_failed(postgres_error(&destination.document, source)),
    };
    Ok(
        match (reply.int8(0).unwrap_or(0), reply.flag(1).unwrap_or(false)) {
            (1.., _) => Move::Moved,
            (_, true) => Move::Taken,
            _ => Move::Changed,
        },
    )
}
