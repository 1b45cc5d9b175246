//! The statements idem sends to a type's table, built once from its [`Table`]: the writes of
//! `unnest`ed rows with their `ON CONFLICT` clauses, the plain insert of fresh rows, the lookup
//! before a batch's write and the pinned replacement of a row another tool wrote.
//!
//! Every value travels as text in one `text[]` parameter per column and is cast to the column's
//! type in the statement (`unnest($1::text[]), …`), so a single write and a batch of any size
//! share one statement text and never approach the 65,535 bind-parameter limit.

use super::table::{literal, quote, sql_type, InsertedSignal, Table, INSERTED, LANDED, UPDATED};
use crate::model::{ID_FIELD, WRITE_MARKER_FIELD};
use crate::sql::dialect::Statement;
use crate::sql::guard::conflict_action;
use crate::sql::layout::Content;
use crate::sql::words::{compared_contents, Words};

/// How PostgreSQL writes the words of the statements' shared parts and of the guard: every
/// value it reads back is read as text.
pub(super) const WORDS: Words = Words {
    quote,
    literal,
    same: "IS NOT DISTINCT FROM",
    never_deleted: "NULL::boolean",
    text_cast: "::text",
    false_literal: "false",
    bytewise: "\"C\"",
    // As text: a `citext` compares loosely whatever its collation, and a type without one
    // refuses `COLLATE`.
    byte_order: |column| format!("{column}::text COLLATE \"C\""),
    distinct: |stored, incoming| format!("{stored} IS DISTINCT FROM {incoming}"),
    from_hex: |hex| format!("decode({hex}, 'hex')"),
    to_hex: |bytes| format!("encode({bytes}, 'hex')"),
};

/// How a first ingest's plain insert ([`Table::fresh_statement`]) meets the rows whose id is
/// stored already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StoredIds {
    /// A plain table: its primary key on `_id` refuses them, and the insert fails.
    Refused,
    /// A partitioned table (partitions chosen by the key, so an id may be in any), on
    /// PostgreSQL 15 to 17: a probe of every partition's index for each id. One read of each
    /// index for all ids ([`StoredIds::ReadAtOnce`]) costs as much there, the btree descending
    /// once per id, and a planner that takes a partition for small scans it whole, comparing
    /// each row with each id (`auto_explain` on 15, a first ingest of 10,000 rows on 16
    /// partitions: up to 58 ms a chunk, 3.7 times the plain table's time against 2.9 for the
    /// probes in the same run).
    ProbedEach,
    /// A partitioned table on PostgreSQL 18, whose btree reads the sorted ids in one pass
    /// where they share its pages, and whose planner reads the indexes from the first chunk:
    /// each partition's index read once for all ids (`auto_explain`, a first ingest of 10,000
    /// rows on 16 partitions: 0.9 ms a chunk for the read; psql's timing, 1,000 new rows into
    /// 100,000: 20.5 ms against 30 ms for the probes, 18 ms for a plain table's insert).
    /// PostgreSQL 17's btree reads such arrays so too (its release notes), but no 17 server
    /// was measured here, so 17 keeps the probes.
    ReadAtOnce,
}

impl Table {
    /// The natural-key columns, quoted and comma-separated: the conflict target.
    pub(super) fn natural_key_list(&self) -> String {
        WORDS.key_list(self, "")
    }

    /// `incoming` as a table expression: one `text[]` parameter per sent column, unnested into
    /// rows `i(c0, c1, …)` whose columns are numbered by position in `columns`; no row unless
    /// the guard of `checked` (when given) holds.
    fn incoming(&self, checked: bool) -> String {
        self.unnested("incoming", &self.sent, checked)
    }

    /// The incoming rows' ids and natural keys only, as `incoming` gives them (`incoming_keys`):
    /// what a branch that finds stored rows by id or key reads, so that the whole rows, read
    /// by the insert alone, stream into it instead of being kept for a second reader.
    fn incoming_keys(&self) -> String {
        let keys: Vec<usize> = std::iter::once(0)
            .chain(
                self.model
                    .natural_key_fields()
                    .filter_map(|field| self.column_of(field)),
            )
            .collect();
        self.unnested("incoming_keys", &keys, true)
    }

    /// The relation `base` as a table expression of the sent columns among `columns` (indexes
    /// into the table's columns): each one's `text[]` parameter (numbered by its position among
    /// the sent columns), unnested into rows `i(c…)` named by column index; no row unless the
    /// guard of `checked` (when given) holds.
    fn unnested(&self, base: &str, columns: &[usize], checked: bool) -> String {
        let arrays: Vec<(String, String)> = columns
            .iter()
            .filter_map(|&index| {
                let position = self.sent.iter().position(|&sent| sent == index)?;
                Some((format!("${}::text[]", position + 1), format!("c{index}")))
            })
            .collect();
        let guard = match checked {
            true => format!(" FROM {} c WHERE c.ok", self.relation_name("checked")),
            false => String::new(),
        };
        format!(
            "{} AS (SELECT {}{guard})",
            self.relation_name(base),
            unnest_each(&arrays)
        )
    }

    /// The incoming value of column `index`, cast to the column's type; the content hash's
    /// text as its bytes.
    fn cast(&self, index: usize) -> String {
        let column = &self.columns[index];
        if column.content == Content::Digests {
            return (WORDS.from_hex)(&format!("i.c{index}"));
        }
        match sql_type(column) {
            _ if column.content == Content::Hash => {
                WORDS.hash_bytes(self.model, &format!("i.c{index}"))
            }
            "text" => format!("i.c{index}"),
            sql_type => format!("i.c{index}::{sql_type}"),
        }
    }

    /// The columns an insert of `statement` writes ([`crate::sql::layout::Layout::inserted`]),
    /// and their values from the incoming row `i`.
    fn inserted_columns(&self, statement: Statement) -> (String, String) {
        let inserted: Vec<usize> = (self.inserted(statement).into_iter())
            .map(|position| self.sent[position])
            .collect();
        let names: Vec<String> = inserted
            .iter()
            .map(|&index| quote(self.columns[index].name))
            .collect();
        let values: Vec<String> = inserted.iter().map(|&index| self.cast(index)).collect();
        (names.join(", "), values.join(", "))
    }

    /// The plain insert of the incoming rows as fresh ones
    /// ([`crate::engine::batch::BatchDriver::insert_fresh`]): without `ON CONFLICT`, so a
    /// stored row's id or natural key fails it whole, and cheaper than the upsert for it (no
    /// speculative insertion, no lookup of the rows it may stop at). Returns how many rows it
    /// inserted: none when the table the search path resolves is not one the store checked.
    /// It fails, writing nothing, if it inserted fewer rows than it was given (a trigger
    /// dropped some): what it did write would otherwise stay, and be taken for stored rows.
    /// The rows it was given are counted from the id parameter, not from `incoming`: read by
    /// the insert alone, `incoming` streams into it, where a second reader would have the
    /// server keep a copy of every row (about a sixth of its time for a chunk).
    ///
    /// `marked`, it takes two more `text` parameters, the marks of its
    /// [`crate::engine::batch::Landing`]: it inserts nothing and returns -1 unless the
    /// session's setting [`LANDED`] holds the first (where it is not NULL), and where it
    /// inserts every row it sets [`LANDED`] to the second for the session. A setting is
    /// transactional: a statement that fails leaves it as it was.
    ///
    /// On a partitioned table, where no unique index holds `_id` alone, a row whose id is
    /// stored is left out (as `stored_ids` finds them), so that the insert fails as a stored id
    /// fails it on a plain table.
    pub(super) fn fresh_statement(&self, marked: bool, stored_ids: StoredIds) -> String {
        let (names, values) = self.inserted_columns(Statement::Upsert);
        let ids = self.sent.iter().position(|&index| index == 0).unwrap_or(0) + 1;
        let checked_parameter = self.sent.len() + 1;
        let (checked, early, leaves) = match marked {
            false => (
                self.checked_cte(checked_parameter),
                String::new(),
                String::new(),
            ),
            true => {
                let (after, leaves) = (checked_parameter + 1, checked_parameter + 2);
                let prior = format!(
                    "(${after}::text IS NULL \
                     OR COALESCE(current_setting({landed}, true) = ${after}::text, false))",
                    landed = literal(LANDED),
                );
                (
                    format!(
                        "{} AS (SELECT {} AND {prior} AS ok, {prior} AS prior)",
                        self.relation_name("checked"),
                        self.checked_guard(checked_parameter),
                    ),
                    format!(
                        "WHEN NOT (SELECT c.prior FROM {} c) THEN '-1' ",
                        self.relation_name("checked")
                    ),
                    format!(
                        " || (CASE WHEN count(*) > 0 THEN left(set_config({}, ${leaves}::text, \
                         false), 0) ELSE '' END)",
                        literal(LANDED)
                    ),
                )
            }
        };
        format!(
            "WITH {checked}, {incoming}{held}, {written} AS (\
             INSERT INTO {table} ({names}) SELECT {values} FROM {incoming_name} i{stored} \
             RETURNING 1) \
             SELECT (CASE {early}WHEN count(*) = (SELECT CASE WHEN c.ok THEN \
             cardinality(${ids}::text[]) ELSE 0 END FROM {checked_name} c) \
             THEN count(*)::text{leaves} ELSE 'rows the insert was given were dropped' END)::int8 \
             FROM {written}",
            checked_name = self.relation_name("checked"),
            incoming = self.incoming(true),
            incoming_name = self.relation_name("incoming"),
            written = self.relation_name("written"),
            table = self.name(),
            held = match stored_ids {
                StoredIds::ReadAtOnce => self.held_ids(ids),
                StoredIds::Refused | StoredIds::ProbedEach => String::new(),
            },
            stored = match stored_ids {
                StoredIds::Refused => String::new(),
                // A lateral probe with `LIMIT 1`, as in [`Table::unchanged_filter`]: `NOT
                // EXISTS` became a hash anti-join over every partition, read whole for each
                // chunk (a first ingest of 100,000 rows took 3.4 to 4 times the plain table's).
                StoredIds::ProbedEach => format!(
                    " LEFT JOIN LATERAL (SELECT true AS stored FROM {} o WHERE o.{} = i.c0 \
                     LIMIT 1) stored_id ON true WHERE stored_id.stored IS NULL",
                    self.name(),
                    quote(ID_FIELD)
                ),
                StoredIds::ReadAtOnce => format!(
                    " WHERE NOT EXISTS (SELECT 1 FROM {} h WHERE h.id = i.c0)",
                    self.relation_name("held_ids")
                ),
            },
        )
    }

    /// The incoming ids (parameter `$ids`) stored in the table, as the relation `held_ids(id)`
    /// ([`StoredIds::ReadAtOnce`]): each partition's index on `_id` read once for all of them,
    /// with one `= ANY` of the ids, sorted once. The array travels in a subquery, so that the
    /// planner does not estimate each id against each partition's statistics (2 to 3 ms more
    /// planning for 1,000 ids on 16 partitions).
    fn held_ids(&self, ids: usize) -> String {
        format!(
            ", {} AS MATERIALIZED (SELECT o.{id} AS id FROM {} o WHERE o.{id} = \
             ANY((SELECT array_agg(x ORDER BY x) FROM unnest(${ids}::text[]) x)::text[]))",
            self.relation_name("held_ids"),
            self.name(),
            id = quote(ID_FIELD),
        )
    }

    /// The insert of the incoming rows, with the `ON CONFLICT` clause of `statement`, returning
    /// the id of each row written and whether it was inserted, as `signal` tells it. On a
    /// `partitioned` table, where no unique index is on `_id` alone, the insert leaves out a
    /// row whose id is stored under another natural key (which the primary key refuses on a
    /// plain table): the stopped rows' branch returns the row under its id, which the engine
    /// judges as it judges the row a primary-key violation met.
    pub(super) fn write_statement(
        &self,
        statement: Statement,
        signal: InsertedSignal,
        partitioned: bool,
    ) -> String {
        let (mut names, mut values) = self.inserted_columns(statement);
        let mut also = String::new();
        if signal == InsertedSignal::Marker {
            let marker = quote(WRITE_MARKER_FIELD);
            names.push_str(&format!(", {marker}"));
            values.push_str(&format!(", {INSERTED}"));
            also = format!(", {marker} = {UPDATED}");
        }
        let mut conflict = conflict_action(self, statement, &WORDS, &also);
        let before = self.relation_name("before");
        let mut before_cte = String::new();
        if signal == InsertedSignal::Before {
            // The rows the snapshot holds under each incoming row's id and natural key: the
            // only ones the update may write, so that a written row not among them was inserted.
            // A lateral probe by the key, at most one row: it reads the one partition the key
            // hashes to, where a join became a hash join over every partition read whole
            // (`auto_explain`, 100 changed rows of 10,000 on 16 partitions: 8.3 ms of the
            // write's 11 ms, then 0.4 ms).
            before_cte = format!(
                ", {before} AS (SELECT b.id FROM {keys} i JOIN LATERAL (SELECT t.{id} AS id \
                 FROM {table} t WHERE {same} AND t.{id} = i.c0 LIMIT 1) b ON true)",
                id = quote(ID_FIELD),
                keys = self.relation_name("incoming_keys"),
                table = self.name(),
                same = self.natural_key_join(),
            );
            if conflict.starts_with("DO UPDATE") {
                conflict.push_str(&format!(
                    " AND EXISTS (SELECT 1 FROM {before} b WHERE b.id = t.{})",
                    quote(ID_FIELD)
                ));
            }
        }
        // On a partitioned table, unless the key is stored (then the write updates a row, or
        // stops at it), a row whose id is stored under another key is left out. The key's
        // probe first: it reads the one partition the key hashes to, where the id's reads
        // every partition (the partitions are chosen by the key), and an update, whose key is
        // stored, then needs no other (`auto_explain`, 100 changed rows of 10,000 on 16
        // partitions: this filter's time went from 2.4 ms to 0.6 ms). An upsert reads the
        // key's row once, for both ([`Table::held_probe`]).
        let elsewhere = format!(
            "EXISTS (SELECT 1 FROM {} o WHERE o.{} = i.c0 AND NOT ({}))",
            self.name(),
            quote(ID_FIELD),
            (WORDS.same_key(self, "o", |at| self.incoming_key(at))).join(" AND "),
        );
        let skip = match (statement, partitioned) {
            (Statement::Upsert, false) => self.unchanged_filter(),
            (Statement::Upsert, true) => format!(
                "{} AND (held.id IS NOT NULL OR NOT {elsewhere})",
                self.unchanged_filter()
            ),
            (Statement::Delete | Statement::InsertNew, false) => String::new(),
            (Statement::Delete | Statement::InsertNew, true) => format!(
                " WHERE (EXISTS (SELECT 1 FROM {} k WHERE {}) OR NOT {elsewhere})",
                self.name(),
                (WORDS.same_key(self, "k", |at| self.incoming_key(at))).join(" AND "),
            ),
        };
        // The last branch is the guard's answer: one row without an id when the table the
        // search path resolves is not one the store checked (nothing was written then).
        format!(
            "WITH {checked}, {incoming}, {incoming_keys}{before_cte}, {written} AS (\
             INSERT INTO {table} AS t ({names}) SELECT {values} FROM {incoming_name} i{skip} \
             ON CONFLICT ({key}) {conflict} \
             RETURNING t.{id} AS id, {inserted} AS inserted) \
             SELECT w.id AS incoming_id, w.inserted, {nulls} FROM {written} w \
             UNION ALL \
             SELECT i.c0, NULL, {stored} FROM {incoming_keys_name} i JOIN LATERAL {met} ON true \
             WHERE NOT EXISTS (SELECT 1 FROM {written} w WHERE w.id = i.c0) \
             UNION ALL \
             SELECT NULL, NULL, {nulls} FROM {checked_name} c WHERE NOT c.ok",
            checked = self.checked_cte(self.sent.len() + 1),
            checked_name = self.relation_name("checked"),
            incoming = self.incoming(true),
            incoming_name = self.relation_name("incoming"),
            incoming_keys = self.incoming_keys(),
            incoming_keys_name = self.relation_name("incoming_keys"),
            written = self.relation_name("written"),
            table = self.name(),
            inserted = signal.expression(&before),
            key = self.natural_key_list(),
            id = quote(ID_FIELD),
            nulls = self.stored_state(None),
            stored = self.stored_state(Some("t")),
            met = self.row_met("t", None),
        )
    }

    /// The incoming rows not stored as they would be written, each with the stored state of
    /// the row it meets ([`Table::row_met`]: the row under its id, else the one holding its
    /// natural key): a row under the same id with the same natural key, content hash and version
    /// key, not deleted, is one the upsert would leave alone and the engine judges `Unchanged`
    /// ([`crate::verdict::Stored::judge`]: the hash covers the guarded values, so their digests
    /// are not read), and is not returned. Sent before a batch's upsert with each row's id,
    /// key, content hash (as bytes) and version key only, so that an unchanged re-ingest sends
    /// none of the rows' content; the rows it returns are judged before anything is written, so
    /// a refused or stale one is never locked. Guarded as every statement is (one row without
    /// an id when the table is not one the store checked). Parameters, as the driver's lookup
    /// binds them: the ids, the hashes, the version keys where the table has them
    /// ([`Table::sends_version_keys`]), then each natural-key column; `None` if a natural-key
    /// field has no column.
    pub(super) fn probe_statement(&self) -> Option<String> {
        let keys: Vec<usize> = self
            .model
            .natural_key_fields()
            .map(|field| self.column_of(field))
            .collect::<Option<_>>()?;
        self.column_with(Content::Hash)?;
        let version_key = self.column_with(Content::VersionKey);
        let mut typed = vec![("c0".to_owned(), "text"), ("hash".to_owned(), "bytea")];
        if version_key.is_some() {
            typed.push(("version_key".to_owned(), "text"));
        }
        typed.extend(keys.iter().map(|index| (format!("c{index}"), "text")));
        let arrays: Vec<(String, String)> = typed
            .iter()
            .enumerate()
            .map(|(at, (name, sql_type))| (format!("${}::{sql_type}[]", at + 1), name.clone()))
            .collect();
        // The hash's bytes, as the column stores them.
        let contents = compared_contents(self);
        let same = self.stored_unchanged(|at| match contents[at] {
            Content::Hash => "i.hash".to_owned(),
            // Byte by byte, as the guard orders keys, whatever collation the column was given.
            _ => format!("i.version_key COLLATE {}", WORDS.bytewise),
        });
        let incoming = self.relation_name("incoming");
        let checked = self.relation_name("checked");
        // For a row not stored unchanged: the row it meets, with its natural key.
        let sql = format!(
            "WITH {checked_cte}, {incoming} AS (SELECT {arrays} FROM {checked} c WHERE c.ok) \
             SELECT i.c0, {stored} FROM {incoming} i{held} \
             LEFT JOIN LATERAL {met} ON true \
             WHERE held.unchanged IS NULL \
             UNION ALL SELECT NULL, {nulls} FROM {checked} c WHERE NOT c.ok",
            checked_cte = self.checked_cte(arrays.len() + 1),
            arrays = unnest_each(&arrays),
            held = self.held_probe(same),
            stored = self.stored_state(Some("s")),
            nulls = self.stored_state(None),
            met = self.row_met("s", Some("held.id")),
        );
        Some(sql)
    }

    /// Leaves out of an upsert's insert the rows stored already with the same id, natural key,
    /// content hash and version key, not deleted (as [`Table::probe_statement`] finds them): the guard would stop them, but only
    /// after locking the row, which writes WAL and dirties its page for nothing. They come back through the
    /// stopped rows' branch and are judged `Unchanged` like any row the guard stops.
    /// The [`Table::held_probe`], and the `WHERE` clause that reads it.
    ///
    /// A lateral lookup with `LIMIT 1`, not `NOT EXISTS`: the planner turns `NOT EXISTS` into a
    /// hash anti-join that reads the whole table for every chunk (measured: half of a chunk's
    /// time at 10,000 rows, and growing with the table), where one unique-index probe per
    /// incoming row is all it takes.
    fn unchanged_filter(&self) -> String {
        // Byte by byte, as the guard compares them, whatever the column's collation.
        // The hash's bytes compare as they are.
        let compared: Vec<usize> = (compared_contents(self).into_iter())
            .filter_map(|content| self.column_with(content))
            .collect();
        let same = self.stored_unchanged(|at| match self.columns[compared[at]].content {
            Content::Hash => self.cast(compared[at]),
            _ => format!("{} COLLATE {}", self.cast(compared[at]), WORDS.bytewise),
        });
        format!("{} WHERE held.unchanged IS NULL", self.held_probe(same))
    }

    /// The row holding the incoming row `i`'s natural key, as a lateral subquery `held` (one
    /// probe of the natural key's unique index, which on a partitioned table reads the one
    /// partition the key hashes to): `held.unchanged`, true where it is stored as the write
    /// would store it (`same`, [`Table::stored_unchanged`]: under the same id too), else null,
    /// and `held.id`, its id, null where no row holds the key. One row holds a key at most,
    /// so this is the row under the id that `same` asks for, if any.
    ///
    /// True or null, not false: the planner takes `unchanged IS NULL` to keep few rows, as it
    /// took the probe this replaced (`SELECT true … WHERE` all of `same`), where it takes
    /// `unchanged IS NOT TRUE` to keep half, which priced the lookup's probes of those rows
    /// over `jit_above_cost` (JIT compiled each lookup: 150 to 350 ms, where it runs in 3 ms).
    fn held_probe(&self, same: String) -> String {
        format!(
            " LEFT JOIN LATERAL (SELECT CASE WHEN {same} THEN true END AS unchanged, \
             u.{id} AS id FROM {table} u \
             WHERE {key} LIMIT 1) held ON true",
            id = quote(ID_FIELD),
            table = self.name(),
            key = (WORDS.same_key(self, "u", |at| self.incoming_key(at))).join(" AND "),
        )
    }

    /// Whether the row `u` under the incoming row `i`'s id is stored as the write would store
    /// it ([`Words::stored_unchanged`]): the same natural key, `content(at)` for each compared
    /// content ([`compared_contents`]: its content hash and version key, where it has them),
    /// not deleted. The same natural key too: a row under this id whose key was edited behind
    /// idem's back is not stored as this write would store it, so it is not skipped as
    /// unchanged: written, it meets the primary key and is refused for its key.
    fn stored_unchanged(&self, content: impl Fn(usize) -> String) -> String {
        let mut same = vec![format!("u.{} = i.c0", quote(ID_FIELD))];
        same.extend(WORDS.stored_unchanged(self, |at| self.incoming_key(at), content));
        same.join(" AND ")
    }

    /// What a row that stopped a write holds, as text columns: its id, whether it is deleted,
    /// its hash, digests and version key, the guarded fields' values (for a row without
    /// digests), the version field's (for a row without an order key), then its natural key's
    /// (the row met may be the one under the id, keyed otherwise). `None`: the same columns,
    /// null, for the rows written.
    fn stored_state(&self, table: Option<&str>) -> String {
        let t = table.unwrap_or("t");
        let text = |alias: &str, name: &str| format!("{alias}.{}::text", quote(name));
        let mut state = self.stored_state_columns(t, &WORDS, text);
        state.extend(
            self.natural_key_names()
                .into_iter()
                .map(|name| text(t, name)),
        );
        if table.is_none() {
            for (at, column) in state.iter_mut().enumerate() {
                *column = ["NULL::text", "NULL::boolean"][usize::from(at == 1)].to_owned();
            }
        }
        state.join(", ")
    }

    /// The stored state of the row under the id `$1`: what a write that collided with the
    /// primary key met.
    pub(crate) fn select_stored_by_id(&self) -> String {
        format!(
            "SELECT {} FROM {} t WHERE t.{} = $1",
            self.stored_state(Some("t")),
            self.name(),
            quote(ID_FIELD)
        )
    }

    /// The stored row an incoming row `i` meets, as a lateral subquery named `alias`: the row
    /// under its id, else the one holding its natural key (the engine's rule, which a write's
    /// stopped rows and the probe before it both follow). Two probes, each through its unique
    /// index. Of two rows under the id (a partitioned table, where no unique index holds `_id`
    /// alone), the one holding the key.
    ///
    /// Given `held`, the id of the row holding the key, read before (the lookup's
    /// [`Table::held_probe`]), the probe by id only where that row is not under the id (a new
    /// row, or one keyed otherwise): where it is, it is the row met, as a changed row's is. On
    /// a partitioned table the probe by id reads every partition's index (the partitions are
    /// chosen by the key), the one by key a single partition (`auto_explain`, the lookup of
    /// 1,000 rows, 100 changed, on 16 partitions: 6,600 buffers read, then 3,300).
    fn row_met(&self, alias: &str, held: Option<&str>) -> String {
        let same = WORDS.same_key(self, "found", |at| self.incoming_key(at));
        let elsewhere = held.map_or(String::new(), |held| {
            format!(" AND {held} IS DISTINCT FROM i.c0")
        });
        format!(
            "(SELECT * FROM (SELECT t.* FROM {table} t WHERE t.{id} = i.c0{elsewhere} \
             UNION ALL SELECT t.* FROM {table} t WHERE {by_key}) found \
             ORDER BY found.{id} <> i.c0, NOT ({same}) LIMIT 1) {alias}",
            table = self.name(),
            id = quote(ID_FIELD),
            by_key = self.natural_key_join(),
            same = same.join(" AND "),
        )
    }

    /// The join of incoming rows to stored rows by natural key.
    fn natural_key_join(&self) -> String {
        let incoming = |at: usize| self.incoming_key(at);
        WORDS.same_key(self, "t", incoming).join(" AND ")
    }

    /// The incoming row `i`'s value of the natural key's `at`th column, cast to its type.
    fn incoming_key(&self, at: usize) -> String {
        match self.column_named(self.natural_key_names()[at]) {
            Some(index) => self.cast(index),
            None => "NULL".to_owned(),
        }
    }

    /// The replacement of a row another tool wrote (no digests, or no version order key),
    /// matched only while it is as it was read: not deleted, the same hash, digests, version key
    /// and version, and the same guarded values (as text). Parameters after the sent columns:
    /// the stored hash, digests, version key and version, and each guarded field's text.
    pub(super) fn pinned_statement(&self) -> String {
        let set: Vec<String> = self
            .sent
            .iter()
            .copied()
            .filter(|&index| self.columns[index].is_replaced())
            .map(|index| format!("{} = {}", quote(self.columns[index].name), self.cast(index)))
            .collect();
        let mut parameter = self.sent.len();
        let next = || {
            parameter += 1;
            format!("${parameter}::text")
        };
        // The version key is text already.
        let conditions = WORDS.pinned_conditions(self, "i.c0".into(), next, |name, placeholder| {
            let column = format!("t.{}", quote(name));
            let column = match self
                .column_named(name)
                .map(|index| self.columns[index].content)
            {
                Some(Content::VersionKey) => column,
                Some(Content::Digests) => (WORDS.to_hex)(&column),
                _ => format!("{column}::text"),
            };
            format!("{column} {} {placeholder}", WORDS.same)
        });
        // Unguarded: it follows, in the same call, the guarded statement that read the row.
        format!(
            "WITH {} UPDATE {} AS t SET {} FROM {} i WHERE {} RETURNING t.{}",
            self.incoming(false),
            self.name(),
            set.join(", "),
            self.relation_name("incoming"),
            conditions.join(" AND "),
            quote(ID_FIELD),
        )
    }
}

/// `unnest(array) AS name, …` for each `(array, name)`: the rows of the arrays taken together,
/// as a select list. Set-returning functions in a select list go row by row in step (a shorter
/// array giving NULLs, as `unnest(a, b, …)` in `FROM` would), where `unnest` in `FROM` first
/// keeps every row it returns in a store of its own and reads them back: measured in psql, an
/// insert of 10,000 rows of ten columns took 81–86 ms this way against 101–110 ms that way.
fn unnest_each(arrays: &[(String, String)]) -> String {
    let columns: Vec<String> = arrays
        .iter()
        .map(|(array, name)| format!("unnest({array}) AS {name}"))
        .collect();
    columns.join(", ")
}
