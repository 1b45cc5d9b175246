//! A type's table as a marker dialect (SQLite, the MySQL family) keeps it: the [`Layout`] every
//! SQL backend shares, the name of its natural-key constraint, and the parts of its statements
//! both dialects build alike. Each dialect implements [`MarkerWords`] in its `table` module: its
//! words, its columns' declarations and the statements it builds its own way.

use std::marker::PhantomData;

use crate::column::Column;
use crate::model::{Field, Model, ID_FIELD, WRITE_MARKER_FIELD};
use crate::sql::dialect::Statement;
use crate::sql::layout::{Content, Layout, TableColumn};
use crate::sql::marker_sql::Words;

/// What a marker dialect's table writes its own way: its words, and the statements of the
/// marker strategy ([`super::marker`]) it builds.
pub(crate) trait MarkerWords: Sized + 'static {
    /// How it writes the statements' shared parts.
    const WORDS: Words;
    /// How many bound parameters one statement may give its rows: the database's limit, less
    /// room for the statement's own.
    const ROW_PARAMETERS: usize;
    /// What follows the table's name in an insert (an alias for its stored rows, or nothing).
    const INSERT_ALIAS: &'static str;
    /// The verb of the plain insert of fresh rows, which fails whole on any stored key.
    const FRESH_INSERT: &'static str;
    /// A column's type and constraints in `CREATE TABLE`.
    fn declared(table: &Table<Self>, column: &TableColumn) -> String;
    /// A column of idem's table as a read of the row selects it, for
    /// [`crate::sql::wire::Cells::text`] (where [`crate::sql::dialect::SqlDialect::read_of`]
    /// reads a column of any table).
    fn read_column(table: &Table<Self>, alias: &str, name: &str) -> String;

    /// How many rows one statement may carry.
    fn max_rows(table: &Table<Self>) -> usize {
        (Self::ROW_PARAMETERS / (table.sent.len() + 1)).max(1)
    }
    /// The write of `rows` rows for `statement`: parameters row after row, each row's inserted
    /// columns ([`Layout::inserted`]) then the insert's write marker, then (but for
    /// `InsertNew`) the update's write marker.
    fn write_sql(table: &Table<Self>, statement: Statement, rows: usize) -> String;
    /// The plain insert of `rows` rows as fresh ones
    /// ([`crate::engine::batch::BatchDriver::insert_fresh`]), which any stored id or key fails
    /// whole; parameters as [`MarkerWords::write_sql`]'s, without the update's marker.
    fn fresh_sql(table: &Table<Self>, rows: usize) -> String {
        table.insert_rows(Self::FRESH_INSERT, Statement::Upsert, rows)
    }
    /// The stored state of the rows under the ids (the first `rows` parameters) or holding the
    /// natural keys that follow (one parameter per key column and row), then their natural-key
    /// columns as text, after the write marker where the write does not return the rows it wrote
    /// ([`MarkerDialect::WRITE_RETURNS`](crate::sql::dialect::MarkerDialect::WRITE_RETURNS));
    /// read so that it sees the rows the write before it met.
    fn select_stored_sql(table: &Table<Self>, rows: usize) -> String;
    /// The lookup before a batch's write ([`crate::engine::batch::BatchDriver::look_up`]);
    /// `None` where the dialect has none. A row stored under an incoming row's id with the same
    /// natural key, content hash and version key, not deleted, is stored as it would be
    /// written: the engine settles that incoming row `Unchanged`. Each other incoming row meets
    /// the row under its id, else the one holding its natural key, else none. The statement
    /// returns, for each incoming row that meets one, its id, that row's stored state, then its
    /// natural-key columns as text; last, always, one row whose first column is NULL, then the
    /// ids of the incoming rows that meet none, comma-separated (NULL for none), then how many
    /// are stored unchanged. So neither an unchanged re-ingest nor a first ingest reads a row
    /// per document back: through sqlx each costs as much as the lookup itself. Parameters, row
    /// after row: the id, each of [`crate::sql::marker::compared_contents`], then each
    /// natural-key column's value.
    fn look_up_sql(table: &Table<Self>, rows: usize) -> Option<String>;
    /// The replacement of a row the guard cannot compare (another tool's), matched only while it
    /// is as it was read ([`Table::pinned_parts`]). Parameters: the sent columns, the update
    /// marker, the id, then the stored hash, digests, version key and version, and each guarded
    /// field's text (a float's as the float where
    /// [`MarkerDialect::PINS_FLOATS`](crate::sql::dialect::MarkerDialect::PINS_FLOATS)).
    fn pinned_sql(table: &Table<Self>) -> String;
    /// Sets the tombstone of the row under the id (parameter 1) to the marker (2) where it is
    /// not set, with the update's write marker (3).
    fn mark_deleted_sql(table: &Table<Self>, tombstone: &Field) -> String;
    /// Whether the row under the id (parameter 1) is deleted; no row if none is stored.
    fn deleted_sql(table: &Table<Self>, tombstone: &Field) -> String {
        Self::WORDS.deleted_sql(table, tombstone)
    }
}

/// A type's table and the parts of the statements idem sends to it.
#[derive(Debug)]
pub(crate) struct Table<D> {
    layout: Layout,
    dialect: PhantomData<fn() -> D>,
}

impl<D> std::ops::Deref for Table<D> {
    type Target = Layout;

    fn deref(&self) -> &Layout {
        &self.layout
    }
}

impl<D: MarkerWords> Table<D> {
    pub fn new(model: &'static Model, stored: &[Column]) -> Self {
        Table {
            layout: Layout::new(model, stored),
            dialect: PhantomData,
        }
    }

    /// The quoted table name.
    pub fn name(&self) -> String {
        (D::WORDS.quote)(self.model.collection())
    }

    /// The natural-key columns, quoted and comma-separated: the conflict target.
    pub fn natural_key_list(&self) -> String {
        D::WORDS.key_list(self, "")
    }

    /// `CREATE TABLE IF NOT EXISTS …` ([`Words::create_table`]), each column as the dialect
    /// declares it; `clustered`: with the unique constraint on the id ([`Table::id_constraint`])
    /// last, in place of the natural key's, which `own` makes the primary key.
    pub fn create_table(&self, own: &[String], clustered: bool, after: &str) -> String {
        let declared = |column: &TableColumn| D::declared(self, column);
        let id = (D::WORDS.quote)(ID_FIELD);
        match clustered {
            true => (D::WORDS).create_table_unique(
                self,
                declared,
                own,
                (&self.id_constraint(), &id),
                after,
            ),
            false => D::WORDS.create_table(self, declared, own, after),
        }
    }

    /// The name of the unique constraint on the id of a table whose primary key is on the
    /// natural key.
    pub fn id_constraint(&self) -> String {
        format!("{}_idem_id", self.model.collection())
    }

    /// The insert (`verb`) of `rows` rows for `statement`, each its inserted columns
    /// ([`Layout::inserted`]) then its write marker, with nothing after `VALUES`.
    pub fn insert_rows(&self, verb: &str, statement: Statement, rows: usize) -> String {
        let values = D::WORDS.inserted_values(self, statement, rows);
        format!("{verb} {}{} {values}", self.name(), D::INSERT_ALIAS)
    }

    /// A column as a read of the row selects it ([`MarkerWords::read_column`]).
    /// The content hash as the text the engine compares; the text itself where a table made by
    /// an earlier release holds it (as an audit before the table's migration reads it). The
    /// digest of the guarded fields as hex.
    pub fn read_of(&self, alias: &str, name: &str) -> String {
        let column = || format!("{alias}.{}", (D::WORDS.quote)(name));
        match self.column_named(name).map(|at| self.columns[at].content) {
            Some(Content::Hash) => {
                let column = column();
                let text = D::WORDS.hash_text(self.model, &column);
                format!("CASE WHEN length({column}) = 32 THEN {text} ELSE {column} END")
            }
            Some(Content::Digests) => (D::WORDS.to_hex)(&column()),
            _ => D::read_column(self, alias, name),
        }
    }

    /// The `SET` and the conditions of the replacement of a row the guard cannot compare
    /// ([`MarkerWords::pinned_sql`]): each sent column (quoted) as `set(column, placeholder,
    /// replaced)` assigns it, if at all, then the write marker; then
    /// [`Words::pinned_conditions`], each guarded value compared as `pinned(name, placeholder)`.
    /// `next` gives the placeholders, in the order the values are bound.
    pub fn pinned_parts(
        &self,
        mut next: impl FnMut() -> String,
        set: impl Fn(&str, String, bool) -> Option<String>,
        pinned: impl Fn(&str, String) -> String,
    ) -> (String, String) {
        let quote = D::WORDS.quote;
        let sent = self.sent.iter().map(|&index| &self.columns[index]);
        // The content hash's text as its bytes.
        let mut assigned: Vec<String> = sent
            .filter_map(|column| {
                let value = match column.content {
                    Content::Hash => D::WORDS.hash_bytes(self.model, &next()),
                    Content::Digests => (D::WORDS.from_hex)(&next()),
                    _ => next(),
                };
                set(&quote(column.name), value, column.is_replaced())
            })
            .collect();
        assigned.extend(set(&quote(WRITE_MARKER_FIELD), next(), true));
        let id = next();
        let conditions = D::WORDS.pinned_conditions(self, id, next, pinned);
        (assigned.join(", "), conditions.join(" AND "))
    }

    /// A stored row as the marker driver reads it back over the row `t`: its stored state's
    /// columns ([`Table::stored_state_columns`]), then its natural-key columns as text.
    pub fn stored_row_columns(&self, t: &str) -> Vec<String> {
        let mut columns = self.stored_state_columns(t);
        let keys = self.natural_key_names().into_iter();
        columns.extend(keys.map(|name| self.read_of(t, name)));
        columns
    }

    /// The stored state's columns over the row `t` ([`Layout::stored_state_columns`]).
    pub fn stored_state_columns(&self, t: &str) -> Vec<String> {
        (self.layout).stored_state_columns(t, &D::WORDS, |alias, name| self.read_of(alias, name))
    }
}

/// The [`SqlDialect`](crate::sql::dialect::SqlDialect) items a marker dialect says as every
/// marker dialect does, each its own module's: its table ([`Table`]) and driver
/// ([`super::marker::MarkerDriver`]), and the pieces of the same names of its `table` (`quote`,
/// `shape_of`), `schema` (`table_problems`), `errors` (`unique_conflict`; its `$error` for
/// [`SqlDialect::error`](crate::sql::dialect::SqlDialect::error)) and `effects` (`WORDS`, for
/// [`super::effects::guarded_once`]); with `marker`, the
/// [`MarkerDialect`](crate::sql::dialect::MarkerDialect) items: `schema::index_on`.
macro_rules! marker_dialect_items {
    (marker) => {
        async fn index_on<W: $crate::sql::wire::Wire>(
            wire: &W,
            table: &Self::Table,
            columns: &str,
        ) -> Option<String> {
            super::schema::index_on(wire, table, columns).await
        }
    };
    (error: $error:ident) => {
        fn error(
            document: &$crate::document::DocumentRef,
            source: $crate::sql::wire::DbFailure,
        ) -> $crate::error::Error {
            super::errors::$error(document, source)
        }

        type Table = $crate::sql::marker_table::Table<Self>;
        type Driver<'a, W: $crate::sql::wire::Wire + 'a> =
            $crate::sql::marker::MarkerDriver<'a, Self, W>;

        fn quote(name: &str) -> String {
            super::table::quote(name)
        }

        fn table(
            model: &'static $crate::model::Model,
            stored: &[$crate::column::Column],
        ) -> Self::Table {
            $crate::sql::marker_table::Table::new(model, stored)
        }

        fn create_sql(table: &Self::Table) -> String {
            table.create_sql()
        }

        fn words() -> &'static $crate::sql::words::Words {
            &super::table::WORDS
        }

        async fn table_problems<W: $crate::sql::wire::Wire>(
            wire: &W,
            table: &Self::Table,
            document: &$crate::document::DocumentRef,
            stored_types: bool,
        ) -> Result<Vec<String>, $crate::error::Error> {
            let found = super::schema::found(wire, table);
            $crate::sql::table_check::problems::<Self>(table, document, stored_types, found).await
        }

        fn shape_of(declared: &str) -> $crate::column::ColumnShape {
            super::table::shape_of(declared)
        }

        fn unique_conflict(
            error: &$crate::error::Error,
            table: &Self::Table,
        ) -> Option<$crate::engine::Conflict> {
            super::errors::unique_conflict(error, table)
        }

        async fn effect<W: $crate::sql::wire::Wire>(
            wire: &W,
            call: &$crate::sql::effects::Effect<'_, Self::Table>,
        ) -> Result<$crate::sql::dialect::EffectAnswer, $crate::error::Error> {
            $crate::sql::effects::guarded_once::<Self, W>(wire, call, &super::effects::WORDS).await
        }
    };
}
pub(crate) use marker_dialect_items;
