//! What the SQL dialects write differently in the parts of their statements they share
//! ([`Words`]), and those parts, written once: the natural-key columns, a row holding the
//! incoming natural key, the conditions that pin a row as it was read, and a lookup's test of a
//! row stored as it would be written. The marker dialects' own shared parts are in
//! [`super::marker_sql`].

use std::fmt::Write as _;

use crate::model::{Model, FROZEN_DIGESTS_FIELD, ID_FIELD, VERSION_KEY_FIELD};
use crate::sql::layout::{Content, Layout, TableColumn};

/// What a dialect writes differently in the statements' shared parts.
pub(crate) struct Words {
    /// A quoted identifier.
    pub quote: fn(&str) -> String,
    /// A quoted string literal.
    #[cfg_attr(not(feature = "_marker_store"), allow(dead_code))]
    pub literal: fn(&str) -> String,
    /// Null-safe equality (SQLite's `IS`, MySQL's `<=>`, PostgreSQL's `IS NOT DISTINCT FROM`).
    pub same: &'static str,
    /// Whether a row of a type without a tombstone is deleted, as the stored state reads it.
    pub never_deleted: &'static str,
    /// What a column expression takes to read as text where the statement says so (PostgreSQL's
    /// `::text`); nothing where its cells are read as text whatever their type.
    pub text_cast: &'static str,
    /// `false`, as the guard writes it.
    pub false_literal: &'static str,
    /// The collation that compares text byte by byte, as version order keys compare.
    pub bytewise: &'static str,
    /// A column expression of any type in an order where values equal byte for byte come
    /// together, whatever the column's collation (under one that compares loosely, "Foo" and
    /// "foo" tie, and a second "Foo" could sort after "foo").
    pub byte_order: fn(&str) -> String,
    /// Whether `stored` and `incoming` differ, a NULL differing from any value but NULL.
    pub distinct: fn(stored: &str, incoming: &str) -> String,
    /// The bytes a column expression of lowercase hex text spells (`decode(x, 'hex')`).
    pub from_hex: fn(&str) -> String,
    /// A bytes column expression as lowercase hex text (`encode(x, 'hex')`).
    pub to_hex: fn(&str) -> String,
}

impl Words {
    /// The content hash the text expression `text` holds (the hash function's prefix, then 64
    /// hex digits, as [`crate::ContentHash`] writes it) as the column stores it: its 32 bytes.
    /// The prefix is the table's model's, so the column need not keep it.
    pub fn hash_bytes(&self, model: &Model, text: &str) -> String {
        match model.hash_algorithm().prefix() {
            "" => (self.from_hex)(text),
            prefix => (self.from_hex)(&format!("substr({text}, {})", prefix.len() + 1)),
        }
    }

    /// The stored content hash in the column expression `column` (its bytes) as the text the
    /// engine compares: the model's hash function's prefix, then the bytes in lowercase hex;
    /// NULL where the column is (SQLite's `hex` of NULL is empty, PostgreSQL's and SQLite's
    /// `concat` leave a NULL out, MySQL's is NULL).
    pub fn hash_text(&self, model: &Model, column: &str) -> String {
        match model.hash_algorithm().prefix() {
            "" => format!("nullif({}, '')", (self.to_hex)(column)),
            prefix => format!(
                "nullif(concat({literal}, {hex}), {literal})",
                literal = (self.literal)(prefix),
                hex = (self.to_hex)(column)
            ),
        }
    }

    /// `CREATE TABLE IF NOT EXISTS …`: each column with the type and constraints `declared`
    /// gives it, then `own` (idem's own columns and constraints), the unique constraint on the
    /// natural key, and `after` the closing parenthesis.
    pub fn create_table(
        &self,
        layout: &Layout,
        declared: impl Fn(&TableColumn) -> String,
        own: &[String],
        after: &str,
    ) -> String {
        let (name, keys) = (&layout.natural_key_constraint, self.key_list(layout, ""));
        self.create_table_unique(layout, declared, own, (name, &keys), after)
    }

    /// [`Words::create_table`] with `unique` (a constraint's name and its quoted columns) last,
    /// in place of the natural key's.
    pub fn create_table_unique(
        &self,
        layout: &Layout,
        declared: impl Fn(&TableColumn) -> String,
        own: &[String],
        (name, columns): (&str, &str),
        after: &str,
    ) -> String {
        let quote = self.quote;
        let mut sql = format!(
            "CREATE TABLE IF NOT EXISTS {} (\n",
            quote(layout.model.collection())
        );
        for column in &layout.columns {
            let _ = writeln!(sql, "    {} {},", quote(column.name), declared(column));
        }
        for line in own {
            let _ = writeln!(sql, "    {line},");
        }
        let _ = write!(
            sql,
            "    CONSTRAINT {} UNIQUE ({columns})\n){after}",
            quote(name)
        );
        sql
    }

    /// The natural-key columns of `alias` (`t.`, or none), quoted and comma-separated.
    pub fn key_list(&self, layout: &Layout, alias: &str) -> String {
        let names = layout.natural_key_names().into_iter();
        let quoted: Vec<String> = names
            .map(|name| format!("{alias}{}", (self.quote)(name)))
            .collect();
        quoted.join(", ")
    }

    /// Each natural-key column of the row `alias` equal to its incoming value, `incoming(at)`
    /// for the key's `at`th column.
    pub fn same_key(
        &self,
        layout: &Layout,
        alias: &str,
        incoming: impl Fn(usize) -> String,
    ) -> Vec<String> {
        let keys = layout.natural_key_names().into_iter().enumerate();
        keys.map(|(at, name)| format!("{alias}.{} = {}", (self.quote)(name), incoming(at)))
            .collect()
    }

    /// The conditions under which the pinned replacement finds the row `t` as it was read:
    /// under the id (`id`), not deleted, its hash as read (compared on its bytes), and each of
    /// its digests, version key and version, and each guarded field, as read (`pinned(name,
    /// placeholder)`). `placeholder` gives each
    /// parameter's, in the order they are bound: SQLite's statement numbers them, as its `SET`
    /// skips the sent columns it does not replace.
    pub fn pinned_conditions(
        &self,
        layout: &Layout,
        id: String,
        mut placeholder: impl FnMut() -> String,
        pinned: impl Fn(&str, String) -> String,
    ) -> Vec<String> {
        let model = layout.model;
        let mut conditions = vec![format!("t.{} = {id}", (self.quote)(ID_FIELD))];
        if let Some(field) = model.tombstone_field() {
            conditions.push(format!("t.{} IS NULL", (self.quote)(field.stored_name())));
        }
        // The hash on its bytes at rest.
        let hash = format!("t.{}", (self.quote)(model.hash_field()));
        let stored = self.hash_bytes(model, &placeholder());
        conditions.push(format!("{hash} {} {stored}", self.same));
        let mut names = Vec::new();
        if layout.column_with(Content::Digests).is_some() {
            names.push(FROZEN_DIGESTS_FIELD);
        }
        if layout.column_with(Content::VersionKey).is_some() {
            names.push(VERSION_KEY_FIELD);
            names.extend(model.version_field().map(|field| field.stored_name()));
        }
        names.extend(model.digested_fields().map(|field| field.stored_name()));
        conditions.extend(names.into_iter().map(|name| pinned(name, placeholder())));
        conditions
    }

    /// What a lookup asks of the row `u` under an incoming row's id for it to be stored as it
    /// would be written: the same natural key (`key(at)`), the same compared contents
    /// ([`compared_contents`], `content(at)`), not deleted.
    pub fn stored_unchanged(
        &self,
        layout: &Layout,
        key: impl Fn(usize) -> String,
        content: impl Fn(usize) -> String,
    ) -> Vec<String> {
        let mut same = self.same_key(layout, "u", key);
        let contents = compared_contents(layout);
        for (at, &compared) in contents.iter().enumerate() {
            if let Some(index) = layout.column_with(compared) {
                let name = (self.quote)(layout.columns[index].name);
                same.push(format!("u.{name} {} {}", self.same, content(at)));
            }
        }
        if let Some(field) = layout.model.tombstone_field() {
            same.push(format!("u.{} IS NULL", (self.quote)(field.stored_name())));
        }
        same
    }
}

/// The columns of idem's own that a batch's lookup compares with each incoming row's: the
/// content hash, and the version key where the model has one, in that order. Not the digests:
/// the hash covers the guarded values ([`crate::verdict::Stored::judge`]).
pub(crate) fn compared_contents(table: &Layout) -> Vec<Content> {
    [Content::Hash, Content::VersionKey]
        .into_iter()
        .filter(|&content| table.column_with(content).is_some())
        .collect()
}
