//! A type's table: its columns and types, the DDL that creates it, the tables its checks found,
//! and the statements idem sends to it ([`super::statements`]), all built once per type from
//! the [`Model`] and the derive's [`Column`]s.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{PoisonError, RwLock};

use super::statements::StoredIds;
use super::wire::Cells;

use crate::column::{Column, ColumnShape};
use crate::model::{Model, Role, APPLIED_OPS_FIELD, ID_FIELD, WRITE_MARKER_FIELD};
use crate::sql::dialect::Statement;
pub(crate) use crate::sql::guard::{literal, quote};
use crate::sql::layout::{Content, Layout, TableColumn};

/// The session setting in which a chunk's insert of fresh rows leaves its mark where it lands
/// ([`Table::fresh_statement`]), for the chunk sent behind it on the same session.
pub(crate) const LANDED: &str = "idem.landed";

/// A column's PostgreSQL type, as `information_schema.columns.data_type` spells it.
pub(crate) fn sql_type(column: &TableColumn) -> &'static str {
    match (column.content, column.shape) {
        (Content::Extra, _) => "jsonb",
        (Content::Hash | Content::Digests, _) => "bytea",
        (Content::Id | Content::VersionKey, _) => "text",
        (_, ColumnShape::Text) => "text",
        (_, ColumnShape::Integer) => "bigint",
        (_, ColumnShape::Float) => "double precision",
        (_, ColumnShape::Boolean) => "boolean",
        (_, ColumnShape::Structured | ColumnShape::Flattened) => "jsonb",
    }
}

/// The longest name PostgreSQL keeps whole (`NAMEDATALEN` − 1): it cuts longer ones silently.
const MAX_NAME_BYTES: usize = 63;

/// The names of PostgreSQL's system columns, which every table has and no column may take.
const SYSTEM_COLUMNS: [&str; 6] = ["tableoid", "xmin", "cmin", "xmax", "cmax", "ctid"];

/// A type's table as the check found it in one schema: which table it is, and the names its
/// unique constraints have there (a migration may have named them, and PostgreSQL shortens the
/// name it makes of a long table name), by which a unique violation tells what it hit.
#[derive(Clone, Debug)]
pub(crate) struct Checked {
    /// The table's oid: what each statement's guard compares the table it resolves with.
    pub oid: u32,
    /// The table's schema, as a unique violation names it.
    pub schema: String,
    /// The unique constraints (or indexes) on exactly `_id` (on a partitioned table, `_id` and
    /// the partition columns), the primary key first, then their partitions' indexes.
    pub id_constraints: Vec<String>,
    /// The unique constraints (or indexes) on exactly the natural key, then their partitions'
    /// indexes.
    pub natural_key_constraints: Vec<String>,
}

/// A type's table and the statements idem sends to it: its [`Layout`] (which it dereferences
/// to), the statements built from it for PostgreSQL, and the tables the checks found.
#[derive(Debug)]
pub(crate) struct Table {
    layout: Layout,
    /// The writes, each as the server tells its inserted rows and the table keeps ids apart
    /// ([`Table::write_sql`]), by [`FORMS`] then [`Statement`].
    writes: [[String; 3]; 6],
    /// Whether the table has the write marker column and every write tells its inserted rows
    /// by it ([`InsertedSignal::Marker`]), whatever the server
    /// ([`with_write_marker`](super::Store#method.with_write_marker)).
    pub marker: bool,
    /// What the checks found ([`Table::found_on`]): servers that return `old`, one that does
    /// not, a partitioned table.
    servers: AtomicU8,
    /// A first ingest's chunk, inserted as fresh rows ([`Table::fresh_statement`]); by how it
    /// meets stored ids ([`STORED_IDS`]).
    insert_fresh: [String; 3],
    /// The same, among chunks in flight together: it leaves a mark in the session where it
    /// lands, and may wait for the mark of the chunk ahead ([`Table::fresh_statement`]).
    insert_fresh_marked: [String; 3],
    /// The second step over a row another tool wrote (no digests), pinned to what was read.
    pub pinned_replacement: String,
    /// The light read before a batch's upsert ([`Table::probe_statement`]), and the positions
    /// in a prepared row's values of the columns it sends, one `text[]` each.
    pub unchanged_probe: Option<String>,
    /// The tables of this type the store checked, one per schema a client's search path led it
    /// to: the only ones its statements write or read (see [`Table::checked_guard`]).
    checked: RwLock<Vec<Checked>>,
}

impl std::ops::Deref for Table {
    type Target = Layout;

    fn deref(&self) -> &Layout {
        &self.layout
    }
}

/// How a statement tells the rows it inserted from the rows it updated, in its own `RETURNING`
/// (never in a later read: a row lock sets `xmax` too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InsertedSignal {
    /// PostgreSQL 15 to 17: a row this statement inserted has no deleting or locking
    /// transaction, so its `xmax` is 0; a row it updated has the statement's own transaction.
    Xmax = 0,
    /// PostgreSQL 18 and later: `RETURNING old` is the row before the statement, null if it
    /// inserted the row.
    OldRow = 1,
    /// A partitioned table before PostgreSQL 18, where `xmax` cannot be returned: the rows the
    /// statement's snapshot holds under each incoming row's id and natural key, read in the
    /// statement (`before`); the update is guarded to them, so a row committed after the
    /// snapshot stops the write, which goes again, rather than be updated and told inserted.
    Before = 2,
    /// Under [`with_write_marker`](super::Store#method.with_write_marker), on any server: the
    /// insert writes [`INSERTED`] in the write marker column, the update [`UPDATED`], and
    /// `RETURNING` reads the row this statement wrote, so constants are enough: one statement
    /// writes a row once at most (`ON CONFLICT DO UPDATE` refuses to affect a row twice, and
    /// the engine's rounds never hold one natural key twice), and a row stored before holds
    /// whatever marker, or none, until this statement's update sets [`UPDATED`].
    Marker = 3,
}

/// The write marker an insert writes under [`InsertedSignal::Marker`].
pub(crate) const INSERTED: &str = "'i:'";
/// The write marker an update writes under [`InsertedSignal::Marker`].
pub(crate) const UPDATED: &str = "'u:'";

/// The forms of a first ingest's plain insert, by [`StoredIds`] in its order (an index into
/// them is the variant's discriminant).
const STORED_IDS: [StoredIds; 3] = [
    StoredIds::Refused,
    StoredIds::ProbedEach,
    StoredIds::ReadAtOnce,
];

/// The forms of a write ([`Table::write_sql`]): how it tells inserted rows, and whether the
/// table is partitioned, where no unique index is on `_id` alone and the insert itself leaves
/// out a row whose id is stored under another natural key.
const FORMS: [(InsertedSignal, bool); 6] = [
    (InsertedSignal::Xmax, false),
    (InsertedSignal::OldRow, false),
    (InsertedSignal::OldRow, true),
    (InsertedSignal::Before, true),
    (InsertedSignal::Marker, false),
    (InsertedSignal::Marker, true),
];

impl InsertedSignal {
    /// The signal of a server of version `server_version_num`.
    pub fn for_server(server_version_num: i64) -> Self {
        if server_version_num >= 180_000 {
            InsertedSignal::OldRow
        } else {
            InsertedSignal::Xmax
        }
    }

    /// Qualified, so that no column of the user's can stand in for the signal: an unqualified
    /// `old` would read a column named `old`. `before`: the relation of
    /// [`InsertedSignal::Before`].
    pub(super) fn expression(self, before: &str) -> String {
        match self {
            InsertedSignal::OldRow => format!("(old.{} IS NULL)", quote(ID_FIELD)),
            InsertedSignal::Xmax => "(t.xmax = 0)".to_owned(),
            InsertedSignal::Before => format!(
                "(NOT EXISTS (SELECT 1 FROM {before} b WHERE b.id = t.{}))",
                quote(ID_FIELD)
            ),
            InsertedSignal::Marker => {
                format!("(t.{} = {INSERTED})", quote(WRITE_MARKER_FIELD))
            }
        }
    }
}

/// [`Table::found_on`]'s marks (none yet: writes say `xmax`, as PostgreSQL 15 does): a check
/// found a server that returns `old`.
const WITH_OLD: u8 = 1;
/// A check found a server without `old`.
const WITHOUT_OLD: u8 = 2;
/// A check found the table partitioned.
const PARTITIONED: u8 = 4;

/// Whether the checks `found` ([`Table::found_on`]'s marks) met servers that return `old`
/// (PostgreSQL 18 and later) and none that does not.
fn returns_old(found: u8) -> bool {
    found & WITH_OLD != 0 && found & WITHOUT_OLD == 0
}

impl Table {
    /// The write of `statement`, with the signal it tells inserted rows by: the one of the
    /// servers the table was checked on (as PostgreSQL 15 does, before any check).
    /// Once a check found the table partitioned (in any schema), every write is in the form of
    /// a partitioned table, which a plain one takes too. Under the write [`marker`](Table::marker),
    /// the marker's, whatever the server.
    pub fn write_sql(&self, statement: Statement) -> (InsertedSignal, &str) {
        let found = self.servers.load(Ordering::Relaxed);
        let form = match (found & PARTITIONED != 0, returns_old(found), self.marker) {
            (false, false, false) => 0,
            (false, true, false) => 1,
            (true, true, false) => 2,
            (true, false, false) => 3,
            (partitioned, _, true) => 4 + usize::from(partitioned),
        };
        let index = match statement {
            Statement::Upsert => 0,
            Statement::Delete => 1,
            Statement::InsertNew => 2,
        };
        (FORMS[form].0, &self.writes[form][index])
    }

    /// A first ingest's plain insert, `marked` or not ([`Table::fresh_statement`]), in the form
    /// of a partitioned table once a check found one, as [`Table::write_sql`]'s; reading the
    /// stored ids at once where every check found a server that returns `old` (18 and later).
    pub fn fresh_sql(&self, marked: bool) -> &str {
        let found = self.servers.load(Ordering::Relaxed);
        let stored_ids = match (found & PARTITIONED != 0, returns_old(found)) {
            (false, _) => StoredIds::Refused,
            (true, false) => StoredIds::ProbedEach,
            (true, true) => StoredIds::ReadAtOnce,
        };
        match marked {
            false => &self.insert_fresh[stored_ids as usize],
            true => &self.insert_fresh_marked[stored_ids as usize],
        }
    }

    /// A check found the table on a server that tells its inserted rows with `signal`. One
    /// store may write to servers of both signals (an upgrade, two databases): once it has met
    /// one without `old`, every write says `xmax`, which every version has, rather than follow
    /// the latest check and send `old` to a server that lacks it. Likewise a `partitioned`
    /// table met stays met.
    pub fn found_on(&self, signal: InsertedSignal, partitioned: bool) {
        let server = match signal {
            InsertedSignal::OldRow => WITH_OLD,
            InsertedSignal::Xmax | InsertedSignal::Before | InsertedSignal::Marker => WITHOUT_OLD,
        };
        let table = if partitioned { PARTITIONED } else { 0 };
        self.servers.fetch_or(server | table, Ordering::Relaxed);
    }

    /// A name of the table or of a column that PostgreSQL cannot keep as it is, as a problem to
    /// report: one longer than it keeps (it would cut it silently, and the table would never
    /// match the model), or a column named like a system column (it refuses to create it).
    pub fn unstorable_name(&self) -> Option<String> {
        let too_long = |name: &str| name.len() > MAX_NAME_BYTES;
        let collection = self.model.collection();
        if too_long(collection) {
            return Some(format!(
                "the table name {collection:?} is {} bytes, and PostgreSQL keeps \
                 {MAX_NAME_BYTES} bytes of a name: give the type a shorter `collection`",
                collection.len()
            ));
        }
        self.columns.iter().find_map(|column| {
            if too_long(column.name) {
                Some(format!(
                    "column {:?} is {} bytes, and PostgreSQL keeps {MAX_NAME_BYTES} bytes of a \
                     name: store the field under a shorter name (`#[serde(rename = \"…\")]`)",
                    column.name,
                    column.name.len()
                ))
            } else if SYSTEM_COLUMNS.contains(&column.name) {
                Some(format!(
                    "column {:?} is the name of a PostgreSQL system column, which no column of \
                     a table may take: store the field under another name \
                     (`#[serde(rename = \"…\")]`)",
                    column.name
                ))
            } else {
                None
            }
        })
    }

    pub fn new(model: &'static Model, stored: &[Column]) -> Table {
        let mut table = Table {
            layout: Layout::new(model, stored),
            writes: Default::default(),
            marker: false,
            servers: AtomicU8::new(0),
            insert_fresh: Default::default(),
            insert_fresh_marked: Default::default(),
            pinned_replacement: String::new(),
            unchanged_probe: None,
            checked: RwLock::default(),
        };
        for (form, (signal, partitioned)) in FORMS.into_iter().enumerate() {
            table.writes[form] = [Statement::Upsert, Statement::Delete, Statement::InsertNew]
                .map(|statement| table.write_statement(statement, signal, partitioned));
        }
        table.insert_fresh = STORED_IDS.map(|stored_ids| table.fresh_statement(false, stored_ids));
        table.insert_fresh_marked =
            STORED_IDS.map(|stored_ids| table.fresh_statement(true, stored_ids));
        table.pinned_replacement = table.pinned_statement();
        table.unchanged_probe = table.probe_statement();
        table
    }

    /// The quoted table name.
    pub fn name(&self) -> String {
        quote(self.model.collection())
    }

    /// The quoted name of one of a statement's own relations (a `WITH` query), `base` unless
    /// the table has that name: a `WITH` query named like the table would stand for it in the
    /// statement's `FROM` clauses.
    pub fn relation_name(&self, base: &str) -> String {
        if base == self.model.collection() {
            quote(&format!("{base}_"))
        } else {
            quote(base)
        }
    }

    /// Adds a table the check found for this type: statements accept it from now on.
    pub fn accept(&self, checked: Checked) {
        let mut tables = self.checked.write().unwrap_or_else(PoisonError::into_inner);
        tables.retain(|known| known.schema != checked.schema);
        tables.push(checked);
    }

    /// The oids of the tables the store checked for this type: the parameter of
    /// [`Table::checked_guard`].
    pub fn checked_oids(&self) -> Vec<u32> {
        let tables = self.checked.read().unwrap_or_else(PoisonError::into_inner);
        tables.iter().map(|checked| checked.oid).collect()
    }

    /// The table this type was checked as in `schema`, if it was.
    pub fn checked_in(&self, schema: &str) -> Option<Checked> {
        let tables = self.checked.read().unwrap_or_else(PoisonError::into_inner);
        tables
            .iter()
            .find(|checked| checked.schema == schema)
            .cloned()
    }

    /// Whether the table the statement's search path resolves is one the store checked (their
    /// oids are parameter `parameter`, an `oid[]`). A store shared by clients of several schemas,
    /// or one whose table was dropped, made again or rolled back with the transaction that made
    /// it, would otherwise write a table it never checked: every statement sent without a check
    /// first carries this guard and does nothing when it fails, so the store checks that table
    /// and sends the statement again.
    pub fn checked_guard(&self, parameter: usize) -> String {
        format!(
            "COALESCE(to_regclass({})::oid = ANY(${parameter}::oid[]), false)",
            literal(&self.name()),
        )
    }

    /// `checked AS (SELECT … AS ok)`: the [`checked_guard`](Table::checked_guard) as a `WITH`
    /// query.
    pub fn checked_cte(&self, parameter: usize) -> String {
        format!(
            "{} AS (SELECT {} AS ok)",
            self.relation_name("checked"),
            self.checked_guard(parameter)
        )
    }

    /// The row of the table aliased `alias` as JSON for [`crate::sql::row::row_as`], without the
    /// columns that may be absent and are NULL: in such a column NULL is a field serde left
    /// out, told apart from a null serde wrote (which a `jsonb` column holds as JSON `null`,
    /// see [`crate::sql::row::column_text`]). `present` says which columns the table has (all
    /// of them but for an audit of a table idem would refuse).
    pub fn row_json(&self, alias: &str, present: impl Fn(&str) -> bool) -> String {
        let absent: Vec<String> = self
            .columns
            .iter()
            .filter(|column| {
                matches!(column.content, Content::Stored(_))
                    && column.null_is_absent
                    && present(column.name)
            })
            .map(|column| {
                format!(
                    "CASE WHEN {alias}.{} IS NULL THEN {} END",
                    quote(column.name),
                    literal(column.name)
                )
            })
            .collect();
        // `t.*`, not `t`: a column named `t` would be taken for the row.
        match absent.is_empty() {
            true => format!("to_jsonb({alias}.*)"),
            false => format!(
                "(to_jsonb({alias}.*) - array_remove(ARRAY[{}]::text[], NULL))",
                absent.join(", ")
            ),
        }
    }

    /// A row as [`Table::row_json`] selects it, its content hash as the text the engine
    /// compares: `to_jsonb` writes a `bytea` as `\x` and its hex digits, where a table made by
    /// an earlier release holds the text itself.
    pub fn hash_as_text(&self, row: &mut serde_json::Map<String, serde_json::Value>) {
        let hash = row.get_mut(self.model.hash_field());
        if let Some(serde_json::Value::String(text)) = hash {
            if let Some(hex) = text.strip_prefix("\\x") {
                *text = format!("{}{hex}", self.model.hash_algorithm().prefix());
            }
        }
    }

    /// `CREATE TABLE IF NOT EXISTS …` with the unique constraint on the natural key; with
    /// `partitions`, partitioned by hash of the natural key into that many partitions
    /// (`{table}_p0`, …), with a primary key on `_id` and the natural key in place of the one
    /// on `_id` alone, which a partitioned table cannot have: one statement per table.
    pub fn create_sql(&self, partitions: Option<u32>) -> String {
        let declared = |column: &TableColumn| {
            let constraint = match (column.content, column.role()) {
                (Content::Id, _) if partitions.is_some() => "",
                (Content::Id, _) => " PRIMARY KEY",
                (Content::VersionKey, _) => " COLLATE \"C\"",
                (_, Some(Role::Key | Role::IdempotencyKey)) => " NOT NULL",
                (_, Some(Role::Pushed)) => " NOT NULL DEFAULT '[]'",
                _ => "",
            };
            format!("{}{constraint}", sql_type(column))
        };
        // NULL until `apply_once` first records an op: an empty list would cost each row.
        let mut own = vec![format!("{} jsonb", quote(APPLIED_OPS_FIELD))];
        if self.marker {
            own.push(format!("{} text", quote(WRITE_MARKER_FIELD)));
        }
        let Some(partitions) = partitions else {
            return super::statements::WORDS.create_table(self, declared, &own, "");
        };
        let key = self.natural_key_list();
        own.push(format!("PRIMARY KEY ({}, {key})", quote(ID_FIELD)));
        let after = format!(" PARTITION BY HASH ({key});\n");
        let mut sql = super::statements::WORDS.create_table(self, declared, &own, &after);
        for remainder in 0..partitions {
            let suffix = format!("_p{remainder}");
            // Within the length PostgreSQL keeps, told apart by the suffix.
            let mut name = self.model.collection().to_owned();
            while name.len() + suffix.len() > MAX_NAME_BYTES {
                name.pop();
            }
            sql.push_str(&format!(
                "CREATE TABLE {} PARTITION OF {} FOR VALUES WITH (MODULUS {partitions}, \
                 REMAINDER {remainder});\n",
                quote(&format!("{name}{suffix}")),
                self.name(),
            ));
        }
        sql
    }

    /// Whether a lookup sends each row's version key: where the table has the column.
    pub fn sends_version_keys(&self) -> bool {
        self.column_with(Content::VersionKey).is_some()
    }
}

/// Whether the guard of a write statement ([`Table::checked_guard`]) stopped it: its answer
/// holds a row without an id.
pub(crate) fn missed_guard<R: Cells>(replies: &[R]) -> bool {
    replies.iter().any(|reply| reply.str(0).is_none())
}
