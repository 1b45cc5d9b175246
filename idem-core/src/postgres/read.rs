//! Typed reads: a row by id or by natural key, as its type.

use serde::de::DeserializeOwned;

use super::schema::query_checked_one;
use super::table::{quote, sql_type, Table};
use super::wire::{Connection, PgCells, PgWire};
use super::Store;
use crate::document::{DocumentRef, NaturalKey};
use crate::error::{Error, ErrorKind};
use crate::id::{Id, KeyValue};
use crate::idempotent::Idempotent;
use crate::model::ID_FIELD;
use crate::sql::row::row_as;
use crate::trace::{Call, CallKind};

impl Store {
    /// The row stored under `id`, as `T`; `None` if none is. A deleted row is returned with
    /// its tombstone set. A row that does not read as `T` is [`ErrorKind::Deserialize`]. One
    /// statement (and the table check before the first statement to a table).
    pub async fn get<T, C>(&self, client: C, id: Id) -> Result<Option<T>, Error>
    where
        T: Idempotent + DeserializeOwned,
        C: Connection,
    {
        let wire = client.wire();
        let client = &wire;
        let call = Call::new(CallKind::Get, T::MODEL.collection(), || Some(id));
        call.run(async move {
            let document = DocumentRef::by_id(&T::MODEL, id);
            let table = self.table::<T, _>(client, &document).await?;
            let condition = format!("t.{} = $1", quote(ID_FIELD));
            read_one(
                client,
                &table,
                &condition,
                &[Some(id.to_string())],
                document,
            )
            .await
        })
        .await
    }

    /// The row stored under the natural key `key`, as `T`; `None` if none is. The generated
    /// `find` builds the key from its values: `Post::find(&store.on(&client), "hello", "en")`.
    /// One statement, through the unique natural-key constraint.
    pub async fn find<T, C>(&self, client: C, key: &NaturalKey) -> Result<Option<T>, Error>
    where
        T: Idempotent + DeserializeOwned,
        C: Connection,
    {
        let wire = client.wire();
        let client = &wire;
        let call = Call::find(T::MODEL.collection(), key);
        call.run(async move {
            let model = &T::MODEL;
            let document = DocumentRef::new(model, key.clone());
            if !key.fits(model, &T::stored_columns(), &document)? {
                return Ok(None);
            }
            let table = self.table::<T, _>(client, &document).await?;
            let mut conditions = Vec::new();
            let mut values = Vec::new();
            for (field, (_, value)) in model.natural_key_fields().zip(key.parts()) {
                let Some(index) = table.column_of(field) else {
                    return Ok(None);
                };
                let text = match value {
                    // PostgreSQL text cannot hold U+0000, so no stored key does.
                    KeyValue::Text(text) if text.contains('\0') => return Ok(None),
                    KeyValue::Text(text) => text.clone(),
                    KeyValue::Integer(number) => number.to_string(),
                    KeyValue::Bool(flag) => flag.to_string(),
                    // No stored key holds it: keys are text, bool or integers up to 64 bits.
                    _ => return Ok(None),
                };
                values.push(Some(text));
                conditions.push(format!(
                    "t.{} = ${}::{}",
                    quote(field.stored_name()),
                    values.len(),
                    sql_type(&table.columns[index])
                ));
            }
            read_one(client, &table, &conditions.join(" AND "), &values, document).await
        })
        .await
    }
}

/// Reads the row of `table` meeting `condition` (over `$n::text` parameters `values`) as `T`.
/// Guarded as every write is ([`Table::checked_guard`]): a table the store has not checked is
/// checked first.
async fn read_one<T, C>(
    client: &C,
    table: &Table,
    condition: &str,
    values: &[Option<String>],
    document: DocumentRef,
) -> Result<Option<T>, Error>
where
    T: DeserializeOwned,
    C: PgWire,
{
    // One row: whether the guard holds, and the row read if there is one. A plain `SELECT`
    // (no `WITH`), as a read is told from a write by its first word.
    let sql = format!(
        "SELECT c.ok, {} FROM (SELECT {} AS ok) c LEFT JOIN {} t ON c.ok AND {condition}",
        table.row_json("t", |_| true),
        table.checked_guard(values.len() + 1),
        table.name()
    );
    let row = query_checked_one(client, table, &document, (&sql, 0), values, "SELECT").await?;
    let Some(stored) = row.object(1, &document)? else {
        return Ok(None);
    };
    row_as(table, stored)
        .map(Some)
        .map_err(|message| Error::new(document, ErrorKind::Deserialize { message }))
}
