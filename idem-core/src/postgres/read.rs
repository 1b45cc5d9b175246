//! Typed reads: a row by id or by natural key, as its type.

use serde::de::DeserializeOwned;

use super::schema::query_checked_one;
use super::table::{quote, Table};
use super::wire::{param_text, Cells, Connection, Param};
use super::Store;
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::sql::row::row_as;
use crate::sql::wire::Wire;

crate::sql::sqlx_api::store_methods! {
    [C: Connection] C, Connection::wire;
    /// The row stored under `id`, as `T`; `None` if none is. A deleted row is returned with
    /// its tombstone set. A row that does not read as `T` is
    /// [`ErrorKind::Deserialize`]. One statement (and the table check before the first
    /// statement to a table).
    fn get;
    /// The row stored under the natural key `key`, as `T`; `None` if none is. The generated
    /// `find` builds the key from its values: `Post::find(&store.on(&client), "hello", "en")`.
    /// One statement, through the unique natural-key constraint.
    fn find;
}

/// Reads the row of `table` whose columns at the indexes of `equal` hold its values, as `T`
/// ([`crate::sql::dialect::SqlDialect::read_one`]). Guarded as every write is
/// ([`Table::checked_guard`]): a table the store has not checked is checked first.
pub(super) async fn read_one<W: Wire, T: DeserializeOwned>(
    wire: &W,
    table: &Table,
    equal: &[(usize, Param<'_>)],
    document: DocumentRef,
) -> Result<Option<T>, Error> {
    let mut values = Vec::with_capacity(equal.len());
    let mut conditions = Vec::with_capacity(equal.len());
    for (index, value) in equal {
        // A key holding U+0000, which no SQL store keeps, is found nowhere before this
        // (`Store::find_on`); an id is a ULID's text.
        let text = match param_text(*value) {
            Some(text) => text,
            // No key is bound as an array.
            None => return Ok(None),
        };
        values.push(text);
        let column = &table.columns[*index];
        conditions.push(format!(
            "t.{} = ${}::{}",
            quote(column.name),
            values.len(),
            super::table::sql_type(column)
        ));
    }
    // One row: whether the guard holds, and the row read if there is one. A plain `SELECT`
    // (no `WITH`), as a read is told from a write by its first word.
    let sql = format!(
        "SELECT c.ok, {} FROM (SELECT {} AS ok) c LEFT JOIN {} t ON c.ok AND {}",
        table.row_json("t", |_| true),
        table.checked_guard(values.len() + 1),
        table.name(),
        conditions.join(" AND "),
    );
    let row = query_checked_one(wire, table, &document, (&sql, 0), &values, "SELECT").await?;
    let Some(stored) = row.object(1, &document)? else {
        return Ok(None);
    };
    row_as(table, stored)
        .map(Some)
        .map_err(|message| Error::new(document, ErrorKind::Deserialize { message }))
}
