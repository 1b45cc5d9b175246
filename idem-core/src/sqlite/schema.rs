//! The check of a SQLite table before idem's first write to it: every column with its declared
//! type, the primary key (or a unique index) on `_id` and a unique constraint on exactly the
//! natural key, each comparing its keys byte for byte, read from `pragma_table_info`,
//! `pragma_index_list`, `pragma_index_xinfo` and the table's `CREATE TABLE` text (the collation
//! each column declares, [`super::collation`]). Every problem comes with its fix, all of them at
//! once: applying the fixes listed makes the table pass.

use super::collation::{declared_collations, is_bytewise};
use super::errors::sqlite_error;
use super::table::{quote, Table};
use crate::document::DocumentRef;
use crate::error::Error;
use crate::model::ID_FIELD;
use crate::sql::layout::Content;
use crate::sql::wire::{Cells, Param, Wire};

/// One unique index of a table, as the check reads it.
struct UniqueIndex {
    name: String,
    /// Made by `CREATE INDEX` (`c`), not by a constraint of the table's definition.
    created: bool,
    partial: bool,
    /// Its key columns' names, sorted; `None` where one is an expression.
    columns: Option<Vec<String>>,
    /// Each key column it compares with a collation other than `BINARY`, and that collation.
    not_bytewise: Vec<(String, String)>,
}

impl UniqueIndex {
    /// Whether it holds exactly `columns` (sorted) as they are, without a predicate.
    fn is_on(&self, columns: &[&str]) -> bool {
        !self.partial && self.columns.as_deref().is_some_and(|own| own == columns)
    }
}

/// What `table` lacks for idem's writes, every problem at once, each with its fix; empty if
/// nothing. Without `stored_types` the declared types of the stored fields' columns are not
/// checked (a model given at run time does not know them); those of idem's columns are.
pub(super) async fn table_problems(
    wire: &impl Wire,
    table: &Table,
    document: &DocumentRef,
    stored_types: bool,
) -> Result<Vec<String>, Error> {
    let name = table.model.collection();
    crate::trace::round_trip("SELECT");
    // The `CREATE TABLE` text once, beside the first column; a temporary table first, as
    // statements resolve the name.
    let sql = "SELECT name, upper(type), pk, CASE WHEN cid = 0 THEN (SELECT sql FROM \
               (SELECT sql, 0 AS o FROM sqlite_temp_master WHERE type = 'table' AND name = ?1 \
               COLLATE NOCASE UNION ALL SELECT sql, 1 FROM sqlite_master WHERE type = 'table' \
               AND name = ?1 COLLATE NOCASE) ORDER BY o LIMIT 1) END \
               FROM pragma_table_info(?1) ORDER BY cid";
    let error = |source| sqlite_error(document, source);
    let columns = wire
        .fetch_all(sql, &[Param::Text(Some(name))])
        .await
        .map_err(error)?;
    if columns.is_empty() {
        return Ok(vec![format!(
            "it does not exist; create it with Store::ensure_table::<T>() or from \
             Store::create_table_sql::<T>():\n{}",
            table.create_sql()
        )]);
    }
    let mut present: Vec<(String, String, i64)> = Vec::with_capacity(columns.len());
    for row in &columns {
        present.push((
            row.text(0).map_err(error)?.unwrap_or_default(),
            row.text(1).map_err(error)?.unwrap_or_default(),
            row.integer(2).map_err(error)?.unwrap_or(0),
        ));
    }
    let create_table = columns[0].text(3).map_err(error)?;
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
                quote(column),
            )),
            Some((_, found, _)) if typed && !super::table::declared_as(found, expected) => {
                problems.push(format!("column {column:?} is {found}, expected {expected}"))
            }
            Some(_) => {}
        }
    }
    let mut natural_key: Vec<&str> = table
        .model
        .natural_key_fields()
        .map(|field| field.stored_name())
        .collect();
    natural_key.sort_unstable();
    let is_key = |column: &str| column == ID_FIELD || natural_key.contains(&column);
    // A key column declaring another collation: every index on it compares so, and SQLite
    // cannot change a column's collation in place.
    let declared: Vec<(String, String)> =
        declared_collations(create_table.as_deref().unwrap_or(""))
            .into_iter()
            .filter(|(column, collation)| is_key(column) && !is_bytewise(collation))
            .collect();
    for (column, collation) in &declared {
        problems.push(format!(
            "column {column:?} is declared COLLATE {collation}, under which different keys are \
             equal; idem tells documents apart byte for byte (a key differing only so would \
             meet another document's row, and be refused as its id change), and SQLite cannot \
             change a column's collation in place: make the table anew without it, as \
             Store::create_table_sql::<T>() does, copy the rows into it, drop this one and \
             rename the new one to {}",
            table.name(),
        ));
    }
    if !declared.is_empty() {
        // The table made anew has both unique constraints.
        return Ok(problems);
    }
    let indexes = unique_indexes(wire, name, document).await?;
    for index in &indexes {
        if !(index.is_on(&[ID_FIELD]) || index.is_on(&natural_key)) {
            continue;
        }
        for (column, collation) in &index.not_bytewise {
            let fix = match index.created {
                true => format!("drop it: DROP INDEX {}", quote(&index.name)),
                // A constraint of the table's definition cannot be dropped alone.
                false => format!(
                    "it is a constraint of the table's definition: make the table anew without \
                     it, as Store::create_table_sql::<T>() does, copy the rows into it, drop \
                     this one and rename the new one to {}",
                    table.name()
                ),
            };
            problems.push(format!(
                "the unique index {:?} compares column {column:?} with the collation \
                 {collation}, under which different keys are equal; idem tells documents apart \
                 byte for byte: {fix}",
                index.name,
            ));
        }
    }
    let unique_on = |columns: &[&str]| {
        indexes
            .iter()
            .any(|index| index.is_on(columns) && index.not_bytewise.is_empty())
    };
    let id_is_primary = present
        .iter()
        .any(|(name, _, pk)| name == ID_FIELD && *pk == 1)
        && present.iter().filter(|(_, _, pk)| *pk > 0).count() == 1;
    // Also where `_id` is missing: the column added above needs its index too, which SQLite
    // cannot add with the column.
    if !id_is_primary && !unique_on(&[ID_FIELD]) {
        problems.push(format!(
            "no primary key or unique index on {ID_FIELD:?}: CREATE UNIQUE INDEX {} ON {} ({})",
            quote(&format!("{}_idem_id", table.model.collection())),
            table.name(),
            quote(ID_FIELD),
        ));
    }
    if !unique_on(&natural_key) {
        problems.push(format!(
            "no unique constraint on exactly the natural key ({}); idem's conflict target \
             needs one: CREATE UNIQUE INDEX {} ON {} ({})",
            natural_key.join(","),
            quote(&table.natural_key_constraint),
            table.name(),
            table.natural_key_list(),
        ));
    }
    Ok(problems)
}

/// The unique indexes of the table `name`, with their key columns and collations.
async fn unique_indexes(
    wire: &impl Wire,
    name: &str,
    document: &DocumentRef,
) -> Result<Vec<UniqueIndex>, Error> {
    crate::trace::round_trip("SELECT");
    let error = |source| sqlite_error(document, source);
    let rows = wire
        .fetch_all(
            "SELECT l.name, l.origin, l.partial, i.name, i.coll FROM pragma_index_list(?1) l \
             JOIN pragma_index_xinfo(l.name) i WHERE l.\"unique\" AND i.key \
             ORDER BY l.seq, i.seqno",
            &[Param::Text(Some(name))],
        )
        .await
        .map_err(error)?;
    let mut indexes: Vec<UniqueIndex> = Vec::new();
    for row in &rows {
        let index = row.text(0).map_err(error)?.unwrap_or_default();
        if indexes.last().is_none_or(|last| last.name != index) {
            indexes.push(UniqueIndex {
                name: index,
                created: row.text(1).map_err(error)?.as_deref() == Some("c"),
                partial: row.integer(2).map_err(error)?.unwrap_or(0) != 0,
                columns: Some(Vec::new()),
                not_bytewise: Vec::new(),
            });
        }
        let Some(last) = indexes.last_mut() else {
            continue;
        };
        // An expression has no name.
        let column = row.text(3).map_err(error)?;
        let collation = row.text(4).map_err(error)?;
        match (&mut last.columns, column) {
            (Some(columns), Some(column)) => {
                if let Some(collation) = collation.filter(|collation| !is_bytewise(collation)) {
                    last.not_bytewise.push((column.clone(), collation));
                }
                columns.push(column);
            }
            (columns, _) => *columns = None,
        }
    }
    for index in &mut indexes {
        if let Some(columns) = &mut index.columns {
            columns.sort_unstable();
        }
    }
    Ok(indexes)
}

/// The name of the unique index of `table` on exactly `columns` (as a violation lists them,
/// comma-separated), if there is one.
pub(super) async fn index_on(wire: &impl Wire, table: &Table, columns: &str) -> Option<String> {
    let mut wanted: Vec<&str> = columns.split(", ").collect();
    wanted.sort_unstable();
    let sql = "SELECT l.name FROM pragma_index_list(?1) l WHERE l.\"unique\" AND \
               (SELECT group_concat(name, ',') FROM (SELECT i.name FROM pragma_index_info(l.name) \
               i ORDER BY i.name)) = ?2";
    crate::trace::round_trip("SELECT");
    let wanted = wanted.join(",");
    let params = [
        Param::Text(Some(table.model.collection())),
        Param::Text(Some(&wanted)),
    ];
    let row = wire.fetch_optional(sql, &params).await.ok().flatten()?;
    row.text(0).ok().flatten()
}
