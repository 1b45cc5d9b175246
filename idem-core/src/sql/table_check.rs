//! The table check, judged once for every SQL dialect: before its first write to a table, the
//! store reads the table from the catalog ([`FoundColumn`], [`FoundIndex`]: each dialect's
//! reads) and refuses one that cannot keep idem's promises. Every column of the model must be
//! there with a type idem's writes can use; `_id` must be the primary key or have a unique
//! index on exactly it (on a PostgreSQL table partitioned by natural-key columns, on it and
//! them), and the natural key a unique constraint on exactly its columns; both
//! keys must compare byte for byte; an index on a prefix, on an expression or with a predicate
//! does not count. Every problem is named with its fix ([`TableCheck`]: the dialect's
//! words), all of them at once: applying the fixes listed makes the table pass.

use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::model::ID_FIELD;
use crate::sql::dialect::SqlDialect;
use crate::sql::layout::Content;

/// One column of the table, as the catalog describes it.
pub(crate) struct FoundColumn {
    pub name: String,
    /// Its type, as the dialect's [`TableCheck::expected_columns`] spell types.
    pub declared: String,
    /// The collation it compares text with, where that is not byte for byte.
    pub loose: Option<String>,
}

/// One unique index (or unique constraint, or primary key) of the table, as the catalog
/// describes it.
pub(crate) struct FoundIndex {
    pub name: String,
    pub primary: bool,
    /// Its key columns.
    pub columns: Vec<String>,
    /// Whether it holds each row's whole values of them: no prefix, no expression, no predicate.
    pub whole: bool,
    /// Whether its uniqueness is checked only at the commit (PostgreSQL's `DEFERRABLE`), not
    /// as each row is written.
    #[cfg_attr(not(feature = "_postgres"), allow(dead_code))]
    pub deferred: bool,
    /// Each key column it compares with a collation that is not byte for byte, and that
    /// collation.
    pub loose: Vec<(String, String)>,
    /// Whether the fix of those collations keeps a unique index on its columns (the database
    /// changes the collation in place, or the table is made anew with idem's constraints), so
    /// that it counts as the key's index; not where the fix drops it.
    pub fixed_in_place: bool,
}

impl FoundIndex {
    fn columns(&self) -> impl Iterator<Item = &str> {
        self.columns.iter().map(String::as_str)
    }
}

/// What a dialect says in a table check: its names, types and fixes.
pub(crate) trait TableCheck: SqlDialect {
    /// Where the database looked for the table, in the problem of its absence (` in the search
    /// path`).
    const LOOKED_IN: &'static str = "";
    /// Whether the database compares column names without case.
    const NAMES_IGNORE_CASE: bool = false;
    /// Whether `_id`, when missing, is added with its unique index (`ADD COLUMN … UNIQUE`), so
    /// that no index needs to be asked for apart from it.
    const ID_ADDED_UNIQUE: bool = false;
    /// Whether `ALTER TABLE` adds a unique constraint to a table; otherwise the keys' fixes are
    /// `CREATE UNIQUE INDEX`.
    const ADDS_CONSTRAINTS: bool = true;

    /// Every column the table must have, with the type messages name it by.
    fn expected_columns(table: &Self::Table) -> Vec<(&'static str, &'static str)>;
    /// Whether a column declared `found` serves idem's writes where it expects `expected`.
    fn uses(_table: &Self::Table, _column: &str, expected: &str, found: &str) -> bool {
        found == expected
    }
    /// What `ALTER TABLE … ADD COLUMN` declares `column` with, of type `expected`.
    fn definition(_table: &Self::Table, _column: &str, expected: &str) -> String {
        expected.to_owned()
    }
    /// The fix of `column` of another type than `expected`.
    fn retype(_table: &Self::Table, _column: &str, _expected: &str) -> Option<String> {
        None
    }
    /// The problem of the key column `column`, compared with `collation`.
    fn loose_column(table: &Self::Table, column: &str, collation: &str) -> String;
    /// The problem of `index`, on a key, comparing `column` with `collation`: by default the
    /// column's, whose fix the index follows.
    fn loose_index(
        table: &Self::Table,
        _index: &FoundIndex,
        column: &str,
        collation: &str,
    ) -> String {
        Self::loose_column(table, column, collation)
    }
}

/// What the check found: the problems, and the indexes that count as the keys' (which
/// PostgreSQL's statements tell a unique violation by).
#[cfg_attr(not(feature = "_postgres"), allow(dead_code))]
pub(crate) struct Verdict<'c> {
    /// What idem needs and the table lacks, in order: each column of the model missing or of
    /// another type, the collations of the key columns, then of the keys' indexes, then the
    /// keys' missing indexes.
    pub problems: Vec<String>,
    /// The unique indexes on exactly `_id` (and the partition columns, [`judge`]), the primary
    /// key first.
    pub on_id: Vec<&'c FoundIndex>,
    /// The unique indexes on exactly the natural key.
    pub on_natural_key: Vec<&'c FoundIndex>,
}

/// A table as a dialect's catalog reads describe it ([`problems`]).
#[cfg(feature = "_marker_store")]
pub(crate) struct Found {
    /// What the session lacks for idem's writes, whatever the table (MySQL's `sql_mode`).
    pub session: Vec<String>,
    pub columns: Vec<FoundColumn>,
    /// Its unique indexes; `None`: not read, where the key columns' collations already ask for
    /// the table to be made anew.
    pub indexes: Option<Vec<FoundIndex>>,
}

/// [`SqlDialect::table_problems`] from the table the dialect's catalog reads found (`None`: it
/// does not exist): what the session lacks, then the table's problems.
#[cfg(feature = "_marker_store")]
pub(crate) async fn problems<D: TableCheck>(
    table: &D::Table,
    document: &DocumentRef,
    stored_types: bool,
    found: impl std::future::Future<Output = Result<Option<Found>, crate::sql::wire::DbFailure>>,
) -> Result<Vec<String>, Error> {
    let Some(found) = found.await.map_err(|source| D::error(document, source))? else {
        return Ok(vec![absent::<D>(table)]);
    };
    let mut problems = found.session;
    let indexes = found.indexes.as_deref();
    problems.extend(judge::<D>(table, &found.columns, indexes, stored_types, &[]).problems);
    Ok(problems)
}

/// The problem of a table the catalog does not hold, with the statements that make it.
pub(crate) fn absent<D: TableCheck>(table: &D::Table) -> String {
    format!(
        "it does not exist{}; create it with Store::ensure_table::<T>() or from \
         Store::create_table_sql::<T>():\n{}",
        D::LOOKED_IN,
        D::create_sql(table)
    )
}

/// Refuses the table of `collection` for the first of `problems`, if any, in the name of
/// `document`, the call's.
pub(crate) fn refuse(
    collection: &str,
    document: &DocumentRef,
    problems: Vec<String>,
) -> Result<(), Error> {
    match problems.into_iter().next() {
        None => Ok(()),
        Some(problem) => Err(Error::new(
            document.clone(),
            ErrorKind::SchemaMismatch {
                collection: collection.to_owned(),
                problem,
            },
        )),
    }
}

/// Whether the column `name` holds `_id` or a part of the natural key.
pub(crate) fn is_key<D: TableCheck>(table: &D::Table, name: &str) -> bool {
    (std::iter::once(ID_FIELD))
        .chain(table.model.natural_key_fields().map(|f| f.stored_name()))
        .any(|key| same_name::<D>(key, name))
}

fn same_name<D: TableCheck>(a: &str, b: &str) -> bool {
    fold::<D>(a) == fold::<D>(b)
}

/// A name as the database compares it.
fn fold<D: TableCheck>(name: &str) -> String {
    match D::NAMES_IGNORE_CASE {
        true => name.to_lowercase(),
        false => name.to_owned(),
    }
}

/// A set of column names, to compare with another: as the database compares them, sorted.
fn column_set<'a, D: TableCheck>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut names: Vec<String> = names.map(|name| fold::<D>(name.trim())).collect();
    names.sort_unstable();
    names
}

/// The name of the one of `indexes` on exactly `columns` (comma-separated, as an error lists
/// them), if there is one.
#[cfg(feature = "_marker_store")]
pub(crate) fn index_on<D: TableCheck>(indexes: &[FoundIndex], columns: &str) -> Option<String> {
    let wanted = column_set::<D>(columns.split(','));
    (indexes.iter())
        .find(|index| column_set::<D>(index.columns()) == wanted)
        .map(|index| index.name.clone())
}

/// Judges a table that exists, of `columns` and `indexes` (`None`: not read, where the key
/// columns' collations already ask for the table to be made anew). Without `stored_types` the
/// types of the stored fields' columns are not checked (a model given at run time does not know
/// them); those of idem's columns are. `partitioned_by`: the partition columns of a table
/// partitioned by columns of its natural key (PostgreSQL), where no unique index can be on `_id`
/// alone: the index on `_id` and them stands for it.
pub(crate) fn judge<'c, D: TableCheck>(
    table: &D::Table,
    columns: &[FoundColumn],
    indexes: Option<&'c [FoundIndex]>,
    stored_types: bool,
    partitioned_by: &[String],
) -> Verdict<'c> {
    let name = D::quote(table.model.collection());
    let found = |column: &str| {
        columns
            .iter()
            .find(|found| same_name::<D>(&found.name, column))
    };
    let mut problems = Vec::new();
    for (column, expected) in D::expected_columns(table) {
        let typed = stored_types
            || !matches!(
                table
                    .column_named(column)
                    .map(|at| table.columns[at].content),
                Some(Content::Stored(_))
            );
        match found(column) {
            None => problems.push(format!(
                "column {column:?} is missing (expected {expected}): ALTER TABLE {name} ADD \
                 COLUMN {} {}{}",
                D::quote(column),
                D::definition(table, column, expected),
                // Unique, not the primary key: the rows it is added to have no id yet, and
                // `adopt` gives them theirs.
                if column == ID_FIELD && D::ID_ADDED_UNIQUE {
                    " UNIQUE"
                } else {
                    ""
                },
            )),
            Some(found) if typed && !D::uses(table, column, expected, &found.declared) => {
                let fix = D::retype(table, column, expected).map(|fix| format!(": {fix}"));
                problems.push(format!(
                    "column {column:?} is {}, expected {expected}{}",
                    found.declared,
                    fix.unwrap_or_default()
                ))
            }
            Some(_) => {}
        }
    }
    for column in columns
        .iter()
        .filter(|column| is_key::<D>(table, &column.name))
    {
        if let Some(collation) = &column.loose {
            problems.push(D::loose_column(table, &column.name, collation));
        }
    }
    let Some(indexes) = indexes else {
        return Verdict {
            problems,
            on_id: Vec::new(),
            on_natural_key: Vec::new(),
        };
    };
    let keys: Vec<&str> = (table.model.natural_key_fields())
        .map(|field| field.stored_name())
        .collect();
    let mut natural_key = keys.clone();
    natural_key.sort_unstable();
    let on = |wanted: &[&str]| -> Vec<&'c FoundIndex> {
        let wanted = column_set::<D>(wanted.iter().copied());
        (indexes.iter())
            .filter(|index| index.whole && column_set::<D>(index.columns()) == wanted)
            .collect()
    };
    let id_key: Vec<&str> = (std::iter::once(ID_FIELD))
        .chain(partitioned_by.iter().map(String::as_str))
        .collect();
    let mut on_id = on(&id_key);
    on_id.sort_by_key(|index| !index.primary);
    let mut on_natural_key = on(&natural_key);
    for index in on_id.iter().chain(&on_natural_key) {
        for (column, collation) in &index.loose {
            let problem = D::loose_index(table, index, column, collation);
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        }
    }
    let counts = |index: &&FoundIndex| index.loose.is_empty() || index.fixed_in_place;
    on_id.retain(counts);
    on_natural_key.retain(counts);
    // The statement that adds the unique index `{collection}_{index}` on `columns`, under a
    // name no index of the table holds (one that does not count may hold idem's). Not a primary
    // key: the table may have one, and rows without an `_id` that `adopt` has not reached yet
    // (NULL) break a primary key, not a unique constraint.
    let add_unique = |index: &str, columns: &[&str]| {
        let base = format!("{}_{index}", table.model.collection());
        let taken =
            |name: &str| (indexes.iter()).any(|index| index.name.eq_ignore_ascii_case(name));
        let free = (std::iter::once(base.clone()))
            .chain((2..).map(|n| format!("{base}{n}")))
            .find(|name| !taken(name));
        let index = D::quote(free.as_deref().unwrap_or(&base));
        let list: Vec<String> = columns.iter().map(|column| D::quote(column)).collect();
        let list = list.join(", ");
        match D::ADDS_CONSTRAINTS {
            true => format!("ALTER TABLE {name} ADD CONSTRAINT {index} UNIQUE ({list})"),
            false => format!("CREATE UNIQUE INDEX {index} ON {name} ({list})"),
        }
    };
    if on_id.is_empty() && !partitioned_by.is_empty() {
        let list: Vec<String> = id_key.iter().map(|column| D::quote(column)).collect();
        problems.push(format!(
            "no primary key or unique index on ({}), {ID_FIELD:?} first: on a table \
             partitioned by ({}) it stands for the primary key on {ID_FIELD:?}, which a \
             partitioned table cannot have, and reads by id go through it: {}",
            list.join(", "),
            partitioned_by.join(", "),
            add_unique("idem_id", &id_key)
        ));
    } else if on_id.is_empty() && (found(ID_FIELD).is_some() || !D::ID_ADDED_UNIQUE) {
        problems.push(format!(
            "no primary key or unique index on {ID_FIELD:?}: a row another tool stored under a \
             document's id, or a racing first write, would not be told apart from another \
             unique constraint: {}",
            add_unique("idem_id", &[ID_FIELD])
        ));
    }
    if on_natural_key.is_empty() {
        problems.push(format!(
            "no unique constraint on exactly the natural key ({}); idem's conflict target \
             needs one: {}",
            natural_key.join(", "),
            // In the model's order, as `ensure_table` makes it.
            add_unique("idem_natural_key", &keys),
        ));
    }
    Verdict {
        problems,
        on_id,
        on_natural_key,
    }
}
