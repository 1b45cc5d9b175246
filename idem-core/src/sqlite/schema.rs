//! The check of a SQLite table before idem's first write to it: every column with its declared
//! type, the primary key (or a unique index) on `_id` and a unique constraint on exactly the
//! natural key, read from `pragma_table_info` and `pragma_index_list`.

use sqlx::{Row, SqliteConnection};

use super::errors::sqlite_error;
use super::table::{literal, Table};
use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::model::ID_FIELD;
use crate::sql::layout::Content;

/// What `table` lacks for idem's writes, every problem at once; empty if nothing. Without
/// `stored_types` the declared types of the stored fields' columns are not checked (a model
/// given at run time does not know them); those of idem's columns are.
pub(super) async fn table_problems(
    connection: &mut SqliteConnection,
    table: &Table,
    document: &DocumentRef,
    stored_types: bool,
) -> Result<Vec<String>, Error> {
    let name = literal(table.model.collection());
    crate::trace::round_trip("SELECT");
    let sql = format!("SELECT name, upper(type), pk FROM pragma_table_info({name})");
    let columns = sqlx::query(super::statement(&sql))
        .fetch_all(&mut *connection)
        .await
        .map_err(|source| sqlite_error(document, source))?;
    if columns.is_empty() {
        return Ok(vec![format!(
            "it does not exist; create it with Store::ensure_table::<T>() or from \
             Store::create_table_sql::<T>():\n{}",
            table.create_sql()
        )]);
    }
    let present: Vec<(String, String, i64)> = columns
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    let mut problems = Vec::new();
    for (column, expected) in table.expected_columns() {
        let typed = stored_types
            || !matches!(
                table
                    .column_named(column)
                    .map(|index| table.columns[index].content),
                Some(Content::Stored(_))
            );
        match present.iter().find(|(name, _, _)| name == column) {
            None => problems.push(format!(
                "column {column:?} is missing (expected {expected}): ALTER TABLE {} ADD COLUMN \
                 {} {expected}",
                table.name(),
                super::table::quote(column),
            )),
            Some((_, found, _)) if typed && !super::table::declared_as(found, expected) => {
                problems.push(format!("column {column:?} is {found}, expected {expected}"))
            }
            Some(_) => {}
        }
    }
    crate::trace::round_trip("SELECT");
    let sql = format!(
        "SELECT l.name, l.origin, l.partial, \
         (SELECT group_concat(name, ',') FROM (SELECT i.name FROM pragma_index_info(l.name) i \
         ORDER BY i.name)) \
         FROM pragma_index_list({name}) l WHERE l.\"unique\""
    );
    let indexes = sqlx::query(super::statement(&sql))
        .fetch_all(&mut *connection)
        .await
        .map_err(|source| sqlite_error(document, source))?;
    let mut natural_key: Vec<&str> = table
        .model
        .natural_key_fields()
        .map(|field| field.stored_name())
        .collect();
    natural_key.sort_unstable();
    let natural_key = natural_key.join(",");
    let unique_on = |columns: &str| {
        indexes.iter().any(|index| {
            index.get::<i64, _>(2) == 0
                && index.get::<Option<String>, _>(3).as_deref() == Some(columns)
        })
    };
    let id_is_primary = present
        .iter()
        .any(|(name, _, pk)| name == ID_FIELD && *pk == 1)
        && present.iter().filter(|(_, _, pk)| *pk > 0).count() == 1;
    if present.iter().any(|(name, _, _)| name == ID_FIELD) && !id_is_primary && !unique_on(ID_FIELD)
    {
        problems.push(format!(
            "no primary key or unique index on {ID_FIELD:?}: CREATE UNIQUE INDEX {} ON {} ({})",
            super::table::quote(&format!("{}_idem_id", table.model.collection())),
            table.name(),
            super::table::quote(ID_FIELD),
        ));
    }
    if !unique_on(&natural_key) {
        problems.push(format!(
            "no unique constraint on exactly the natural key ({natural_key}); idem's conflict \
             target needs one: CREATE UNIQUE INDEX {} ON {} ({})",
            super::table::quote(&table.natural_key_constraint),
            table.name(),
            table.natural_key_list(),
        ));
    }
    Ok(problems)
}

/// Refuses a table idem cannot write, naming the first thing it lacks.
pub(super) async fn check_table(
    connection: &mut SqliteConnection,
    table: &Table,
    document: &DocumentRef,
) -> Result<(), Error> {
    let problems = table_problems(connection, table, document, true).await?;
    match problems.into_iter().next() {
        None => Ok(()),
        Some(problem) => Err(Error::new(
            document.clone(),
            ErrorKind::SchemaMismatch {
                collection: table.model.collection().to_owned(),
                problem,
            },
        )),
    }
}
