//! The table check: before its first write to a table, and whenever a statement meets a table
//! other than the one it checked, the store reads the table from the catalog and refuses one
//! that cannot keep idem's promises, naming what is wrong.

use std::collections::HashMap;

use super::wire::{self, Cells, Param, Wire};

use super::errors::postgres_error;
use super::table::{self, Table};
use crate::document::DocumentRef;
use crate::engine;
use crate::error::{Error, ErrorKind};
use crate::model::ID_FIELD;
use crate::sql::layout::Content;

/// Checks that the table `client`'s search path resolves for `table` exists with every column of
/// the model, each of its type, a primary key on `_id` and a unique constraint (or unique index
/// without a predicate) on exactly the natural key, both checked as each row is written (not
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
    match survey.checked {
        Some(checked) if survey.problems.is_empty() => {
            table.found_on(survey.signal);
            table.accept(checked);
            Ok(())
        }
        // A table the survey did not find has that problem.
        _ => Err(Error::new(
            document.clone(),
            ErrorKind::SchemaMismatch {
                collection: table.model.collection().to_owned(),
                problem: survey.problems.into_iter().next().unwrap_or_default(),
            },
        )),
    }
}

/// After a statement's [`Table::checked_guard`] failed (the statement did nothing): checks the
/// table the client's search path leads to, so that the statement may go again, once
/// (`checked_again`); a second failure means the table was made again meanwhile.
pub(super) async fn check_again<C>(
    client: &C,
    table: &Table,
    document: &DocumentRef,
    checked_again: &mut bool,
) -> Result<(), Error>
where
    C: Wire,
{
    if std::mem::replace(checked_again, true) {
        return Err(engine::contention(document));
    }
    check_table(client, table, document).await
}

/// Sends `sql`, a statement of one row whose parameters are `values` (as text) then the checked
/// tables' ids, and whose column `ok` says whether it met a table the store checked; if not,
/// checks the table the search path leads to and sends it again ([`check_again`]). `command`
/// names the round trip; any but `SELECT` is a write, contained in a savepoint inside the
/// caller's transaction ([`super::wire::Wire::write`]).
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
    let mut checked_again = false;
    loop {
        let checked = table.checked_oids();
        let mut parameters = wire::texts(values);
        parameters.push(Param::Oids(&checked));
        crate::trace::round_trip(command);
        // A write (`apply_once`) may fail for what the row holds; a read fails only with the
        // transaction, and needs no savepoint.
        let row = match command {
            "SELECT" => client.fetch_all(sql, &parameters).await,
            _ => client.write(sql, &parameters).await,
        }
        .and_then(|rows| wire::one(rows, command))
        .map_err(|source| postgres_error(document, source))?;
        if row.flag(ok).unwrap_or(false) {
            return Ok(row);
        }
        check_again(client, table, document, &mut checked_again).await?;
    }
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
}

/// One unique index of a table, as the survey reads it.
pub(super) struct UniqueIndex {
    pub(super) name: String,
    pub(super) primary: bool,
    /// Whether its uniqueness is checked as each row is written (not `DEFERRABLE`).
    pub(super) immediate: bool,
    /// Its key columns, sorted.
    pub(super) columns: Vec<String>,
    /// Each key column it compares with a nondeterministic collation, and that collation.
    pub(super) nondeterministic: Vec<(String, String)>,
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
             current_setting('server_version_num')::int8 \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
             LEFT JOIN pg_collation coll ON coll.oid = a.attcollation \
             WHERE c.oid = to_regclass(quote_ident($1))",
            &[Param::Text(Some(name))],
        )
        .await
        .map_err(|source| postgres_error(document, source))?;
    let Some(first) = columns.first() else {
        return Ok(absent(format!(
            "it does not exist in the search path; create it with \
             Store::ensure_table::<T>() or from Store::create_table_sql::<T>():\n{}",
            table.create_sql()
        )));
    };
    let oid = first.oid(2).unwrap_or(0);
    let signal = table::InsertedSignal::for_server(first.int8(6).unwrap_or(0));
    let schema = first.str(3).unwrap_or_default().to_owned();
    let present: HashMap<String, String> = columns
        .iter()
        .map(|row| {
            let column = row.str(0).unwrap_or_default().to_owned();
            (column, row.str(1).unwrap_or_default().to_owned())
        })
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
        match present.get(column) {
            None => problems.push(format!(
                "column {column:?} is missing (expected {expected}): ALTER TABLE {} ADD COLUMN \
                 {} {expected}{}",
                table.name(),
                table::quote(column),
                // Unique, not the primary key: the rows it is added to have no id yet, and
                // `adopt` gives them theirs.
                if column == ID_FIELD { " UNIQUE" } else { "" },
            )),
            Some(found) if typed && found != expected => {
                problems.push(format!("column {column:?} is {found}, expected {expected}"))
            }
            Some(_) => {}
        }
    }
    let mut natural_key: Vec<String> = table
        .model
        .natural_key_fields()
        .map(|field| field.stored_name().to_owned())
        .collect();
    natural_key.sort();
    let is_key = |column: &str| column == ID_FIELD || natural_key.iter().any(|key| key == column);
    for row in &columns {
        let (column, collation) = (row.str(0).unwrap_or_default(), row.str(4));
        if is_key(column) && row.flag(5) == Some(false) {
            problems.push(nondeterministic(
                table,
                column,
                collation.unwrap_or_default(),
            ));
        }
    }
    crate::trace::round_trip("SELECT");
    let unique: Vec<UniqueIndex> = client
        .fetch_all(
            "SELECT i.relname::text, x.indisprimary, x.indimmediate, \
             array_agg(a.attname::text ORDER BY a.attname), \
             array_agg(a.attname::text ORDER BY a.attname) \
             FILTER (WHERE NOT coll.collisdeterministic), \
             array_agg(coll.collname::text ORDER BY a.attname) \
             FILTER (WHERE NOT coll.collisdeterministic) \
             FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid \
             CROSS JOIN LATERAL unnest(x.indkey::int2[], x.indcollation::oid[]) \
             WITH ORDINALITY AS k(attnum, collation_oid, n) \
             JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum \
             LEFT JOIN pg_collation coll ON coll.oid = k.collation_oid \
             WHERE x.indrelid = $1 AND x.indisunique AND x.indpred IS NULL \
             AND x.indexprs IS NULL AND k.n <= x.indnkeyatts \
             GROUP BY i.relname, x.indisprimary, x.indimmediate",
            &[Param::Oid(oid)],
        )
        .await
        .map_err(|source| postgres_error(document, source))?
        .iter()
        .map(|row| UniqueIndex {
            name: row.str(0).unwrap_or_default().to_owned(),
            primary: row.flag(1).unwrap_or(false),
            immediate: row.flag(2).unwrap_or(false),
            columns: row.texts(3).unwrap_or_default(),
            nondeterministic: row
                .texts(4)
                .unwrap_or_default()
                .into_iter()
                .zip(row.texts(5).unwrap_or_default())
                .collect(),
        })
        .collect();
    let mut on_id: Vec<&UniqueIndex> = unique
        .iter()
        .filter(|index| index.columns == [ID_FIELD])
        .collect();
    on_id.sort_by_key(|index| !index.primary);
    let on_natural_key: Vec<&UniqueIndex> = unique
        .iter()
        .filter(|index| index.columns == natural_key)
        .collect();
    for (column, collation) in on_id
        .iter()
        .chain(&on_natural_key)
        .flat_map(|index| &index.nondeterministic)
    {
        let problem = nondeterministic(table, column, collation);
        if !problems.contains(&problem) {
            problems.push(problem);
        }
    }
    if on_id.is_empty() && present.contains_key(ID_FIELD) {
        problems.push(format!(
            "no primary key on {id:?}: a row another tool stored under a document's id, or a \
             racing first write, would not be told apart from another unique constraint: \
             ALTER TABLE {} ADD PRIMARY KEY ({})",
            table.name(),
            table::quote(ID_FIELD),
            id = ID_FIELD,
        ));
    }
    if on_natural_key.is_empty() {
        problems.push(format!(
            "no unique constraint on exactly the natural key ({}); idem's conflict target \
             needs one: ALTER TABLE {} ADD CONSTRAINT {} UNIQUE ({})",
            natural_key.join(", "),
            table.name(),
            table::quote(&table.natural_key_constraint),
            natural_key
                .iter()
                .map(|name| table::quote(name))
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    for index in on_id.iter().chain(&on_natural_key) {
        if !index.immediate {
            problems.push(format!(
                "the unique constraint {:?} on ({}) is DEFERRABLE: ON CONFLICT cannot use it \
                 (every write fails with 55000), and a conflict it defers to the commit is one \
                 idem never sees; make it anew without DEFERRABLE: ALTER TABLE {} DROP \
                 CONSTRAINT {name}, ADD CONSTRAINT {name} {} ({})",
                index.name,
                index.columns.join(", "),
                table.name(),
                if index.primary {
                    "PRIMARY KEY"
                } else {
                    "UNIQUE"
                },
                index
                    .columns
                    .iter()
                    .map(|column| table::quote(column))
                    .collect::<Vec<_>>()
                    .join(", "),
                name = table::quote(&index.name),
            ));
        }
    }
    let checked = table::Checked {
        oid,
        schema,
        id_constraints: on_id.iter().map(|index| index.name.clone()).collect(),
        natural_key_constraints: on_natural_key
            .iter()
            .map(|index| index.name.clone())
            .collect(),
    };
    Ok(TableSurvey {
        problems,
        checked: Some(checked),
        signal,
    })
}

/// The problem of a key column compared with a nondeterministic (case- or accent-insensitive)
/// collation: keys that differ would meet as one, so one document would be refused as another's
/// id change, and a batch holding both would fail whole (21000).
pub(super) fn nondeterministic(table: &Table, column: &str, collation: &str) -> String {
    format!(
        "column {column:?} is compared with the nondeterministic collation {collation:?}, \
         under which different keys are equal; idem tells documents apart byte for byte: give \
         the column (and the indexes on it) a deterministic collation: ALTER TABLE {} ALTER \
         COLUMN {} TYPE text COLLATE \"default\"",
        table.name(),
        table::quote(column),
    )
}
