//! PostgreSQL's words for the SQL store ([`crate::sql::store`]): its statements
//! ([`super::table`]), its table check ([`super::schema`]), its errors ([`super::errors`]), its
//! effects ([`super::effects`]) and reads ([`super::read`]), and its write strategy: one
//! statement whose rows say what it did ([`super::driver`]).

use serde::de::DeserializeOwned;

use super::driver::PgDriver;
use super::table::{literal, quote, Table};
use crate::column::{Column, ColumnShape};
use crate::document::DocumentRef;
use crate::engine::Conflict;
use crate::error::Error;
use crate::model::Model;
use crate::sql::adoption::{Move, ReadRow, Rows};
use crate::sql::dialect::{Dialect, EffectAnswer, SqlDialect};
use crate::sql::effects::Effect;
use crate::sql::judge::Destination;
use crate::sql::wire::{Cells, DbFailure, Param, Wire};

/// SQLSTATE of a unique violation.
pub(super) const UNIQUE_VIOLATION: &str = "23505";
/// SQLSTATE `duplicate_table`.
const DUPLICATE_TABLE: &str = "42P07";
/// SQLSTATE `duplicate_object`.
const DUPLICATE_OBJECT: &str = "42710";

/// PostgreSQL, through tokio-postgres or sqlx.
#[derive(Clone, Copy, Debug)]
pub struct Postgres;

impl crate::sql::dialect::private::Sealed for Postgres {}

impl Dialect for Postgres {
    const NAME: &'static str = "PostgreSQL";
}

impl SqlDialect for Postgres {
    type Table = Table;
    type Driver<'a, W: Wire + 'a> = PgDriver<'a, W>;

    fn quote(name: &str) -> String {
        quote(name)
    }

    fn table(model: &'static Model, stored: &[Column]) -> Table {
        Table::new(model, stored)
    }

    /// With the write marker column where the store tells inserted rows by it
    /// ([`with_write_marker`](super::Store#method.with_write_marker)).
    fn store_table(
        store: &crate::sql::store::Store<Self>,
        model: &'static Model,
        stored: &[Column],
    ) -> Table {
        let mut table = Table::new(model, stored);
        table.marker = store.write_marker;
        table
    }

    fn create_sql(table: &Table) -> String {
        table.create_sql(None)
    }

    /// Partitioned where the store makes its tables so
    /// ([`with_partitions`](super::Store#method.with_partitions)): in one statement, so that the
    /// table is never left without its partitions.
    fn ensure_sql(store: &crate::sql::store::Store<Self>, table: &Table) -> String {
        let Some(partitions) = store.partitions else {
            return table.create_sql(None);
        };
        let statements = table.create_sql(Some(partitions));
        let tag = (0..)
            .map(|n| format!("$idem{n}$"))
            .find(|tag| !statements.contains(tag.as_str()))
            .unwrap_or_default();
        format!("DO {tag} BEGIN\n{statements}END {tag}")
    }

    const TABLE_EXISTS: &'static str = "SELECT 1 WHERE to_regclass(quote_ident($1)) IS NOT NULL";

    async fn table_problems<W: Wire>(
        wire: &W,
        table: &Table,
        document: &DocumentRef,
        stored_types: bool,
    ) -> Result<Vec<String>, Error> {
        let survey = super::survey_table(wire, table, document, stored_types).await?;
        Ok(survey.problems)
    }

    async fn check_table<W: Wire>(
        wire: &W,
        table: &Table,
        document: &DocumentRef,
    ) -> Result<(), Error> {
        super::schema::check_table(wire, table, document).await
    }

    // The table's own key: a primary-key column, or an identity, generated or serial one, which
    // the database fills itself.
    const COLUMNS: &'static str = "SELECT a.attname::text, \
         upper(format_type(a.atttypid, a.atttypmod)), \
         (a.attidentity <> '' OR a.attgenerated <> '' \
         OR COALESCE(pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%', false) \
         OR EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = a.attrelid \
         AND x.indisprimary AND a.attnum = ANY(x.indkey)))::int::int8 \
         FROM pg_attribute a \
         LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
         WHERE a.attrelid = to_regclass(quote_ident($1)) \
         AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum";

    /// By the type `format_type` spells (upper case here); a type idem never makes is taken as
    /// structured, and its type is not checked (see `survey_table`).
    fn shape_of(declared: &str) -> ColumnShape {
        match declared {
            "TEXT" => ColumnShape::Text,
            _ if declared.starts_with("CHARACTER") => ColumnShape::Text,
            "BIGINT" | "INTEGER" | "SMALLINT" => ColumnShape::Integer,
            "DOUBLE PRECISION" | "REAL" => ColumnShape::Float,
            "BOOLEAN" => ColumnShape::Boolean,
            _ => ColumnShape::Structured,
        }
    }

    const LOCKING_READ: &'static str = " FOR UPDATE";

    fn words() -> &'static crate::sql::words::Words {
        &super::statements::WORDS
    }

    /// The locator ([`Self::row_locator`]) as the adoption reads it: a `ctid`, and in a
    /// partition the partition's name, since a `ctid` tells rows apart only within one.
    fn read_of(table: &Table, alias: &str, name: &str) -> String {
        match name {
            "ctid" => super::adopt::location(table, alias),
            _ => format!("{alias}.{}::text", quote(name)),
        }
    }

    /// `ctid`, valid until the row is next written; none under the write marker, whose store
    /// names no system column (CockroachDB and YugabyteDB have no `ctid`).
    fn row_locator(table: &Table) -> Option<&'static str> {
        (!table.marker).then_some("ctid")
    }

    /// A serialization failure or a deadlock: under `REPEATABLE READ` or `SERIALIZABLE` as the
    /// session's default, a write that met a row committed after its snapshot.
    fn restarts(error: &Error) -> bool {
        (error.as_backend().and_then(|backend| backend.code()))
            .is_some_and(|code| matches!(code, "40001" | "40P01"))
    }

    /// The planner's estimate: cheap, and only used to draw progress (`None` before the table
    /// was first vacuumed or analyzed).
    fn row_count_sql(table: &Table) -> String {
        format!(
            "SELECT NULLIF(reltuples::bigint, -1) FROM pg_class WHERE oid = to_regclass({})",
            literal(&table.name())
        )
    }

    /// Where the database looked, and what the name may have meant: a schema-qualified name
    /// is one table name here, and a name in another case another table.
    const MISSING_TABLE: Option<&'static str> = Some(
        "SELECT format('database `%s` has no table `%s` in the search path (%s)', \
         current_database(), $1::text, current_setting('search_path')) \
         || CASE WHEN strpos($1::text, '.') > 0 THEN '; a name with a dot is one table''s \
         name: put its schema in the search path instead (`options=-csearch_path%3D<schema>` \
         in the URI)' ELSE '' END \
         || CASE WHEN $1::text <> lower($1::text) \
         AND to_regclass(quote_ident(lower($1::text))) IS NOT NULL \
         THEN format('; table names are exact: there is `%s`', lower($1::text)) ELSE '' END",
    );

    /// The row as `to_jsonb` makes it, every type as PostgreSQL writes it in JSON.
    fn row_select(table: &Table, present: &[String]) -> (String, Vec<usize>) {
        let list = table.row_json("t", |column| present.iter().any(|name| name == column));
        (list, Vec::new())
    }

    fn row_read<R: Cells>(
        table: &Table,
        _columns: &[usize],
        row: &R,
        document: &DocumentRef,
    ) -> Result<(serde_json::Map<String, serde_json::Value>, usize), Error> {
        // `to_jsonb` of a row is never NULL.
        let mut stored = row.object(0, document)?.unwrap_or_default();
        table.hash_as_text(&mut stored);
        Ok((stored, 1))
    }

    fn error(document: &DocumentRef, source: DbFailure) -> Error {
        super::postgres_error(document, source)
    }

    /// Which unique constraint a unique violation raised by a single write names: the primary key
    /// or the natural key's (this id is stored with another natural key, or a racing writer stored
    /// the document after the statement's snapshot), another one (a refusal naming it), or none.
    fn unique_conflict(error: &Error, table: &Table) -> Option<Conflict> {
        let violation = error.as_backend()?;
        if violation.code() != Some(UNIQUE_VIOLATION) {
            return None;
        }
        let Some(name) = violation.constraint() else {
            return Some(Conflict::Unclear {
                index: "(unnamed)".to_owned(),
            });
        };
        // By the names the check read in the violated table's schema: a migration may have named
        // the primary key, and PostgreSQL shortens the name it makes for a long table name.
        let ours = violation
            .constraint_schema()
            .and_then(|schema| table.checked_in(schema))
            .is_some_and(|checked| {
                checked
                    .id_constraints
                    .iter()
                    .chain(&checked.natural_key_constraints)
                    .any(|constraint| constraint == name)
            });
        Some(match ours {
            true => Conflict::Key,
            false => Conflict::Other {
                index: name.to_owned(),
            },
        })
    }

    async fn effect<W: Wire>(wire: &W, call: &Effect<'_, Table>) -> Result<EffectAnswer, Error> {
        super::effects::effect(wire, call).await
    }

    fn unstorable(table: &Table) -> Option<String> {
        table.unstorable_name()
    }

    /// The catalog's unique index refused this table (a unique violation), or the table or its
    /// row type appeared between the check for it and the creation (a duplicate table or
    /// object). A duplicate object is also what an enum type of the table's name gives (the
    /// table's row type would take its name), which the check then finds no table for.
    fn created_by_another_session(failure: &DbFailure) -> bool {
        matches!(
            failure.code(),
            Some(UNIQUE_VIOLATION | DUPLICATE_TABLE | DUPLICATE_OBJECT)
        )
    }

    const ADOPTS_IN_TRANSACTION: bool = false;

    async fn adoption_rows<W: Wire>(
        wire: &W,
        table: &Table,
        rows: Rows<'_>,
        document: &DocumentRef,
    ) -> Result<Vec<ReadRow>, Error> {
        super::adopt::rows(wire, table, rows, document).await
    }

    async fn adoption_move<W: Wire>(
        wire: &W,
        table: &Table,
        row: &ReadRow,
        destination: &Destination,
    ) -> Result<Move, Error> {
        super::adopt::move_row(wire, table, row, destination).await
    }

    async fn read_one<W: Wire, T: DeserializeOwned>(
        wire: &W,
        table: &Table,
        equal: &[(usize, Param<'_>)],
        document: DocumentRef,
    ) -> Result<Option<T>, Error> {
        super::read::read_one(wire, table, equal, document).await
    }
}
