//! The catalog reads of a SQLite table's check ([`crate::sql::table_check`]): columns and their
//! declared types, unique indexes and their collations, from `pragma_table_info`,
//! `pragma_index_list`, `pragma_index_xinfo` and the `CREATE TABLE` text ([`super::collation`]);
//! and the fixes SQLite's own limits call for.

use super::collation::{declared_collations, is_bytewise};
use super::table::{declared_as, quote, Table, WORDS};
use super::Sqlite;
use crate::model::FROZEN_DIGESTS_FIELD;
use crate::sql::table_check::{self, Found, FoundColumn, FoundIndex, TableCheck};
use crate::sql::wire::{Cells, DbFailure, Param, Wire};

/// The table as the catalog describes it ([`table_check::problems`]), `None` if it does not
/// exist: its columns and its `CREATE TABLE` text, then its unique indexes.
pub(super) async fn found(wire: &impl Wire, table: &Table) -> Result<Option<Found>, DbFailure> {
    let name = table.model.collection();
    crate::trace::round_trip("SELECT");
    // The `CREATE TABLE` text once, beside the first column; a temporary table first, as
    // statements resolve the name.
    let sql = "SELECT name, upper(type), pk, CASE WHEN cid = 0 THEN (SELECT sql FROM \
               (SELECT sql, 0 AS o FROM sqlite_temp_master WHERE type = 'table' AND name = ?1 \
               COLLATE NOCASE UNION ALL SELECT sql, 1 FROM sqlite_master WHERE type = 'table' \
               AND name = ?1 COLLATE NOCASE) ORDER BY o LIMIT 1) END \
               FROM pragma_table_info(?1) ORDER BY cid";
    let rows = wire.fetch_all(sql, &[Param::Text(Some(name))]).await?;
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    // A collation only a column's definition declares: every index on the column compares so.
    let mut declared = declared_collations(&first.text(3)?.unwrap_or_default());
    let (mut columns, mut primary_key) = (Vec::with_capacity(rows.len()), Vec::new());
    for row in &rows {
        let name = row.text(0)?.unwrap_or_default();
        if row.integer(2)?.unwrap_or(0) > 0 {
            primary_key.push(name.clone());
        }
        let at = declared.iter().position(|(column, _)| *column == name);
        columns.push(FoundColumn {
            loose: (at.map(|at| declared.swap_remove(at).1)).filter(|c| !is_bytewise(c)),
            declared: row.text(1)?.unwrap_or_default(),
            name,
        });
    }
    // SQLite cannot change a column's collation in place: where a key column's must change,
    // the table made anew has both keys' constraints, and its indexes are not read.
    let remade = (columns.iter())
        .any(|column| column.loose.is_some() && table_check::is_key::<Sqlite>(table, &column.name));
    let mut indexes = None;
    if !remade {
        let mut found = unique_indexes(wire, name).await?;
        // An `INTEGER PRIMARY KEY` is the rowid, without an index of its own.
        if !primary_key.is_empty() && !found.iter().any(|index| index.primary) {
            found.push(FoundIndex {
                name: String::new(),
                primary: true,
                columns: primary_key,
                whole: true,
                deferred: false,
                loose: Vec::new(),
                fixed_in_place: true,
            });
        }
        indexes = Some(found);
    }
    let session = Vec::new();
    Ok(Some(Found {
        session,
        columns,
        indexes,
    }))
}

impl TableCheck for Sqlite {
    const ADDS_CONSTRAINTS: bool = false;

    fn expected_columns(table: &Table) -> Vec<(&'static str, &'static str)> {
        table.expected_columns().collect()
    }

    /// `idemFrozen` declared `TEXT` (before it was one digest) keeps a blob as it is; an old
    /// digests object is never 16 bytes, so its row is compared by value until its next write.
    fn uses(_table: &Table, column: &str, expected: &str, found: &str) -> bool {
        declared_as(found, expected) || (column == FROZEN_DIGESTS_FIELD && found == "TEXT")
    }

    /// The content hash as hex text (an earlier release's) is copied as its bytes.
    fn retype(table: &Table, column: &str, _expected: &str) -> Option<String> {
        let mut how = "with the column's type".to_owned();
        if column == table.model.hash_field() {
            let bytes = WORDS.hash_bytes(table.model, &quote(column));
            how += &format!(", the hash copied as {bytes}");
        }
        let anew = made_anew(table, &how);
        Some(format!(
            "SQLite cannot change a column's type in place: {anew}"
        ))
    }

    fn loose_column(table: &Table, column: &str, collation: &str) -> String {
        format!(
            "column {column:?} is declared COLLATE {collation}, under which different keys are \
             equal; idem tells documents apart byte for byte (a key differing only so would \
             meet another document's row, and be refused as its id change), and SQLite cannot \
             change a column's collation in place: {}",
            made_anew(table, "without it")
        )
    }

    fn loose_index(table: &Table, index: &FoundIndex, column: &str, collation: &str) -> String {
        let fix = match index.fixed_in_place {
            false => format!("drop it: DROP INDEX {}", quote(&index.name)),
            // A constraint of the table's definition cannot be dropped alone.
            true => format!(
                "it is a constraint of the table's definition: {}",
                made_anew(table, "without it")
            ),
        };
        format!(
            "the unique index {:?} compares column {column:?} with the collation {collation}, \
             under which different keys are equal; idem tells documents apart byte for byte: \
             {fix}",
            index.name,
        )
    }
}

/// The fix of what only a table made anew changes.
fn made_anew(table: &Table, how: &str) -> String {
    format!(
        "make the table anew {how}, as Store::create_table_sql::<T>() does, copy the rows into \
         it, drop this one and rename the new one to {}",
        table.name()
    )
}
/// The unique indexes of the table `name`, with their key columns and collations.
async fn unique_indexes(wire: &impl Wire, name: &str) -> Result<Vec<FoundIndex>, DbFailure> {
    crate::trace::round_trip("SELECT");
    let rows = wire
        .fetch_all(
            "SELECT l.name, l.origin, l.partial, i.name, i.coll FROM pragma_index_list(?1) l \
             JOIN pragma_index_xinfo(l.name) i WHERE l.\"unique\" AND i.key \
             ORDER BY l.seq, i.seqno",
            &[Param::Text(Some(name))],
        )
        .await?;
    let mut indexes: Vec<FoundIndex> = Vec::new();
    for row in &rows {
        let index = row.text(0)?.unwrap_or_default();
        if indexes.last().is_none_or(|last| last.name != index) {
            let origin = row.text(1)?;
            indexes.push(FoundIndex {
                name: index,
                primary: origin.as_deref() == Some("pk"),
                columns: Vec::new(),
                whole: row.integer(2)?.unwrap_or(0) == 0,
                deferred: false,
                loose: Vec::new(),
                // Made by `CREATE INDEX`, not by a constraint of the table's definition: its
                // fix drops it.
                fixed_in_place: origin.as_deref() != Some("c"),
            });
        }
        let Some(last) = indexes.last_mut() else {
            continue;
        };
        // An expression has no name.
        let Some(column) = row.text(3)? else {
            last.whole = false;
            continue;
        };
        if let Some(collation) = row.text(4)?.filter(|c| !is_bytewise(c)) {
            last.loose.push((column.clone(), collation));
        }
        last.columns.push(column);
    }
    Ok(indexes)
}

/// The name of the unique index of `table` on exactly `columns` (as a violation lists them,
/// comma-separated), if there is one.
pub(super) async fn index_on(wire: &impl Wire, table: &Table, columns: &str) -> Option<String> {
    let indexes = unique_indexes(wire, table.model.collection()).await.ok()?;
    table_check::index_on::<Sqlite>(&indexes, columns)
}
