//! The table check: before its first write to a table, and whenever a statement meets a table
//! other than the one it checked, the store reads the table from the catalog and refuses one
//! that cannot keep idem's promises, naming what is wrong.

use super::wire::{self, Cells, Param, Wire};

use super::errors::postgres_error;
use super::table::{self, Table};
use super::Postgres;
use crate::document::DocumentRef;
use crate::engine;
use crate::error::Error;
use crate::model::{APPLIED_OPS_FIELD, FROZEN_DIGESTS_FIELD, ID_FIELD, WRITE_MARKER_FIELD};
use crate::sql::table_check::{self, FoundColumn, FoundIndex, TableCheck};

/// Checks that the table `client`'s search path resolves for `table` exists with every column of
/// the model, each of its type, a primary key on `_id` (on a table partitioned by natural-key
/// columns, on `_id` and them) and a unique constraint (or unique index without a predicate) on
/// exactly the natural key, both checked as each row is written (not
/// `DEFERRABLE`) and comparing byte for byte (no nondeterministic collation on a key column);
/// then lets `table`'s statements write it.
pub(super) async fn check_table<C>(
    client: &C,
    table: &Table,
    document: &DocumentRef,
) -> Result<(), Error>
where
    C: Wire,
{
    let survey = survey_table(client, table, document, true).await?;
    // A table the survey did not find has that problem.
    table_check::refuse(table.model.collection(), document, survey.problems)?;
    if let Some(checked) = survey.checked {
        table.found_on(survey.signal, survey.partitioned);
        table.accept(checked);
    }
    Ok(())
}

/// Sends `sql` with `parameters`, then the oids of the tables the store checked, until `met`
/// says its rows met one of them: where a statement's [`Table::checked_guard`] failed (it did
/// nothing), checks the table the client's search path leads to and sends it again, once; a
/// second failure means the table was made again meanwhile. `command` names the round trip;
/// any but `SELECT` is a write, contained in a savepoint inside the caller's transaction
/// ([`super::wire::Wire::write`]).
pub(super) async fn send_checked<C>(
    client: &C,
    table: &Table,
    document: &DocumentRef,
    (sql, command): (&str, &'static str),
    parameters: &[Param<'_>],
    met: impl Fn(&[C::Row]) -> bool,
) -> Result<Vec<C::Row>, Error>
where
    C: Wire,
{
    let mut checked_again = false;
    loop {
        let checked = table.checked_oids();
        let mut sent = parameters.to_vec();
        sent.push(Param::Oids(&checked));
        crate::trace::round_trip(command);
        // A write may fail for what the row holds; a read fails only with the transaction, and
        // needs no savepoint.
        let rows = match command {
            "SELECT" => client.fetch_all(sql, &sent).await,
            _ => client.write(sql, &sent).await,
        }
        .map_err(|source| postgres_error(document, source))?;
        if met(&rows) {
            return Ok(rows);
        }
        if std::mem::replace(&mut checked_again, true) {
            return Err(engine::contention(document));
        }
        check_table(client, table, document).await?;
    }
}

/// Sends `sql`, a statement of one row whose parameters are `values` (as text) then the checked
/// tables' ids, and whose column `ok` says whether it met a table the store checked
/// ([`send_checked`]).
pub(super) async fn query_checked_one<C>(
    client: &C,
    table: &Table,
    document: &DocumentRef,
    (sql, ok): (&str, usize),
    values: &[Option<String>],
    command: &'static str,
) -> Result<C::Row, Error>
where
    C: Wire,
{
    // No row at all is an error of its own.
    let met = |rows: &[C::Row]| rows.first().is_none_or(|row| row.flag(ok).unwrap_or(false));
    let parameters = wire::texts(values);
    let rows = send_checked(client, table, document, (sql, command), &parameters, met).await?;
    wire::one(rows, command).map_err(|source| postgres_error(document, source))
}

/// A table as the server holds it, against what idem needs of it.
pub(super) struct TableSurvey {
    /// What idem needs and the table lacks, in the order [`check_table`] refuses them: the table
    /// itself, then each column of the model missing or of another type, then the collations of
    /// the key columns, then the primary key and the unique constraint on the natural key, then
    /// those of them that are deferrable.
    pub(super) problems: Vec<String>,
    /// The table and the names of its unique constraints; `None` if it does not exist.
    pub(super) checked: Option<table::Checked>,
    /// How the server tells the rows a write inserted.
    pub(super) signal: table::InsertedSignal,
    /// Whether the table is partitioned (by columns of its natural key, where it passes).
    pub(super) partitioned: bool,
}

/// Reads `table`'s columns and unique constraints from the catalog: what the check before the
/// first write refuses on, and what an audit of a table other code made reports. Without
/// `stored_types` the types of the stored fields' columns are not checked (a model given at
/// run time does not know them); those of idem's columns are.
pub(super) async fn survey_table<C>(
    client: &C,
    table: &Table,
    document: &DocumentRef,
    stored_types: bool,
) -> Result<TableSurvey, Error>
where
    C: Wire,
{
    let absent = |problem| TableSurvey {
        problems: vec![problem],
        checked: None,
        signal: table::InsertedSignal::Xmax,
        partitioned: false,
    };
    if let Some(problem) = table.unstorable_name() {
        return Ok(absent(problem));
    }
    let name = table.model.collection();
    // Resolved through the search path, as the statements resolve the table.
    crate::trace::round_trip("SELECT");
    let columns = client
        .fetch_all(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), c.oid, \
             n.nspname::text, coll.collname::text, coll.collisdeterministic, \
             current_setting('server_version_num')::int8, \
             (SELECT array_agg(coalesce(pa.attname::text, '') ORDER BY k.n) \
             FROM pg_partitioned_table p \
             CROSS JOIN LATERAL unnest(p.partattrs::int2[]) WITH ORDINALITY AS k(attnum, n) \
             LEFT JOIN pg_attribute pa ON pa.attrelid = p.partrelid AND pa.attnum = k.attnum \
             WHERE p.partrelid = c.oid) \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
             LEFT JOIN pg_collation coll ON coll.oid = a.attcollation \
             WHERE c.oid = to_regclass(quote_ident($1))",
            &[Param::Text(Some(name))],
        )
        .await
        .map_err(|source| postgres_error(document, source))?;
    let Some(first) = columns.first() else {
        return Ok(absent(table_check::absent::<Postgres>(table)));
    };
    let oid = first.oid(2).unwrap_or(0);
    let signal = table::InsertedSignal::for_server(first.int8(6).unwrap_or(0));
    let schema = first.str(3).unwrap_or_default().to_owned();
    // Its partition columns, if it is partitioned (an expression's is empty).
    let partitioned_by = first.texts(7).unwrap_or_default();
    let columns: Vec<FoundColumn> = (columns.iter())
        .map(|row| FoundColumn {
            name: row.str(0).unwrap_or_default().to_owned(),
            declared: row.str(1).unwrap_or_default().to_owned(),
            loose: (row.flag(5) == Some(false)).then(|| row.str(4).unwrap_or_default().to_owned()),
        })
        .collect();
    crate::trace::round_trip("SELECT");
    let rows = client
        .fetch_all(
            "SELECT i.relname::text, x.indisprimary, x.indimmediate, \
             array_agg(a.attname::text ORDER BY a.attname) FILTER (WHERE a.attnum > 0), \
             array_agg(a.attname::text ORDER BY a.attname) \
             FILTER (WHERE a.attnum > 0 AND NOT coll.collisdeterministic), \
             array_agg(coll.collname::text ORDER BY a.attname) \
             FILTER (WHERE a.attnum > 0 AND NOT coll.collisdeterministic), \
             bool_and(x.indpred IS NULL AND x.indexprs IS NULL), \
             coalesce(bool_and(k.collation_oid = a.attcollation), true), \
             (array_agg(a.attname::text ORDER BY k.n))[1], \
             (SELECT array_agg(p.relname::text) FROM pg_partition_tree(x.indexrelid) t \
             JOIN pg_class p ON p.oid = t.relid WHERE t.relid <> x.indexrelid) \
             FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid \
             CROSS JOIN LATERAL unnest(x.indkey::int2[], x.indcollation::oid[]) \
             WITH ORDINALITY AS k(attnum, collation_oid, n) \
             LEFT JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum \
             LEFT JOIN pg_collation coll ON coll.oid = k.collation_oid \
             WHERE x.indrelid = $1 AND x.indisunique AND x.indisvalid AND k.n <= x.indnkeyatts \
             GROUP BY i.relname, x.indexrelid, x.indisprimary, x.indimmediate",
            &[Param::Oid(oid)],
        )
        .await
        .map_err(|source| postgres_error(document, source))?;
    // The indexes of a partitioned table's partitions, by the index they are partitions of: a
    // unique violation names the partition's.
    let partitions_of: Vec<(String, Vec<String>)> = (rows.iter())
        .map(|row| {
            let name = row.str(0).unwrap_or_default().to_owned();
            (name, row.texts(9).unwrap_or_default())
        })
        .collect();
    let indexes: Vec<FoundIndex> = (rows.iter())
        .map(|row| FoundIndex {
            name: row.str(0).unwrap_or_default().to_owned(),
            primary: row.flag(1).unwrap_or(false),
            columns: row.texts(3).unwrap_or_default(),
            // An index with a predicate or an expression does not count; read, its name is
            // one the fixes do not give again. An invalid one (a failed `CREATE INDEX
            // CONCURRENTLY`'s) enforces nothing, and is left out. On a partitioned table, the
            // index that stands for the primary key on `_id` serves reads by id only with
            // `_id` first.
            whole: row.flag(6).unwrap_or(false)
                && (partitioned_by.is_empty()
                    || row.str(8) == Some(ID_FIELD)
                    || !row
                        .texts(3)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c == ID_FIELD)),
            loose: (row.texts(4).unwrap_or_default().into_iter())
                .zip(row.texts(5).unwrap_or_default())
                .collect(),
            // Where its collations are its columns', the fix of theirs is its fix too.
            fixed_in_place: row.flag(7).unwrap_or(true),
            // Deferrable: its check waits for the commit.
            deferred: !row.flag(2).unwrap_or(false),
        })
        .collect();
    let verdict = table_check::judge::<Postgres>(
        table,
        &columns,
        Some(&indexes),
        stored_types,
        &partitioned_by,
    );
    let mut problems = verdict.problems;
    if let Some(problem) = partitioned_otherwise(table, &partitioned_by) {
        problems.insert(0, problem);
    }
    for index in verdict.on_id.iter().chain(&verdict.on_natural_key) {
        if index.deferred {
            problems.push(deferrable(table, index));
        }
    }
    let names = |indexes: &[&FoundIndex]| {
        let mut names = Vec::new();
        for index in indexes {
            names.push(index.name.clone());
            for (of, partitions) in &partitions_of {
                if *of == index.name {
                    names.extend(partitions.iter().cloned());
                }
            }
        }
        names
    };
    let checked = table::Checked {
        oid,
        schema,
        id_constraints: names(&verdict.on_id),
        natural_key_constraints: names(&verdict.on_natural_key),
    };
    Ok(TableSurvey {
        problems,
        checked: Some(checked),
        signal,
        partitioned: !partitioned_by.is_empty(),
    })
}

/// The problem of a table partitioned by other than columns of its natural key: every unique
/// constraint of a partitioned table holds its partition columns, so none can be on exactly the
/// natural key, the writes' conflict target.
fn partitioned_otherwise(table: &Table, partitioned_by: &[String]) -> Option<String> {
    let key = table.natural_key_names();
    if partitioned_by
        .iter()
        .all(|column| key.contains(&column.as_str()))
    {
        return None;
    }
    let shown: Vec<String> = (partitioned_by.iter())
        .map(|column| match column.as_str() {
            "" => "an expression".to_owned(),
            column => table::quote(column),
        })
        .collect();
    Some(format!(
        "it is partitioned by ({}), not by columns of the natural key ({}): a partitioned \
         table's unique constraints hold its partition columns, so none can be on exactly the \
         natural key, which idem's conflict target needs; make it anew partitioned by columns \
         of the natural key, as Store::with_partitions makes it",
        shown.join(", "),
        (key.iter().map(|column| table::quote(column)))
            .collect::<Vec<_>>()
            .join(", "),
    ))
}

/// The problem of a key constraint checked only at the commit.
fn deferrable(table: &Table, index: &FoundIndex) -> String {
    format!(
        "the unique constraint {:?} on ({}) is DEFERRABLE: ON CONFLICT cannot use it (every \
         write fails with 55000), and a conflict it defers to the commit is one idem never sees; \
         make it anew without DEFERRABLE: ALTER TABLE {} DROP CONSTRAINT {name}, ADD CONSTRAINT \
         {name} {} ({})",
        index.name,
        index.columns.join(", "),
        table.name(),
        if index.primary {
            "PRIMARY KEY"
        } else {
            "UNIQUE"
        },
        (index.columns.iter().map(|column| table::quote(column)))
            .collect::<Vec<_>>()
            .join(", "),
        name = table::quote(&index.name),
    )
}

impl TableCheck for Postgres {
    const LOOKED_IN: &'static str = " in the search path";
    const ID_ADDED_UNIQUE: bool = true;

    /// The write marker's only where the store tells inserted rows by it.
    fn expected_columns(table: &Table) -> Vec<(&'static str, &'static str)> {
        (table.columns.iter())
            .map(|column| (column.name, table::sql_type(column)))
            .chain([(APPLIED_OPS_FIELD, "jsonb")])
            .chain(table.marker.then_some((WRITE_MARKER_FIELD, "text")))
            .collect()
    }

    /// `varchar` without a length stores and compares as `text` does.
    fn uses(_table: &Table, _column: &str, expected: &str, found: &str) -> bool {
        found == expected || (expected == "text" && found == "character varying")
    }

    /// The content hash, text in a table an earlier release made, as the bytes its hex
    /// digits write. The digest of the guarded fields as another type (a table made before it
    /// was one digest, as `jsonb`) is made NULL: its rows are compared by value until their
    /// next write stores the digest.
    fn retype(table: &Table, name: &str, expected: &str) -> Option<String> {
        let column = table::quote(name);
        let using = if name == table.model.hash_field() {
            super::statements::WORDS.hash_bytes(table.model, &column)
        } else if name == FROZEN_DIGESTS_FIELD {
            "NULL".to_owned()
        } else {
            format!("{column}::{expected}")
        };
        Some(format!(
            "ALTER TABLE {} ALTER COLUMN {column} TYPE {expected} USING {using}",
            table.name()
        ))
    }

    /// An index whose own collation is not its column's keeps it through the column's fix:
    /// it is dropped, and the key's constraint asked for apart.
    fn loose_index(table: &Table, index: &FoundIndex, column: &str, collation: &str) -> String {
        match index.fixed_in_place {
            true => Self::loose_column(table, column, collation),
            false => format!(
                "the unique index {:?} compares column {column:?} with the nondeterministic \
                 collation {collation:?}, under which different keys are equal; idem tells \
                 documents apart byte for byte: drop it: DROP INDEX {}",
                index.name,
                table::quote(&index.name),
            ),
        }
    }

    /// A nondeterministic (case- or accent-insensitive) collation: keys that differ would meet
    /// as one, so one document would be refused as another's id change, and a batch holding
    /// both would fail whole (21000).
    fn loose_column(table: &Table, column: &str, collation: &str) -> String {
        format!(
            "column {column:?} is compared with the nondeterministic collation {collation:?}, \
             under which different keys are equal; idem tells documents apart byte for byte: \
             give the column (and the indexes on it) a deterministic collation: ALTER TABLE {} \
             ALTER COLUMN {} TYPE text COLLATE \"default\"",
            table.name(),
            table::quote(column),
        )
    }
}
