//! The parts of their statements the marker dialects (SQLite, the MySQL family) write alike,
//! over the few words where they differ ([`Words`]): the rows an insert sends, the lookup's test
//! of a row stored as it would be written, the conditions that pin a row as it was read, and the
//! read of whether a row is deleted.

use crate::column::ColumnShape;
use crate::model::{Field, FROZEN_DIGESTS_FIELD, ID_FIELD, VERSION_KEY_FIELD, WRITE_MARKER_FIELD};
use crate::sql::dialect::Statement;
use crate::sql::layout::{Content, Layout};

impl Layout {
    /// The natural-key columns' names, in [`crate::model::Model::natural_key_fields`] order.
    pub fn natural_key_names(&self) -> Vec<&'static str> {
        self.model
            .natural_key_fields()
            .map(|field| field.stored_name())
            .collect()
    }

    /// The shape of the column named `name`, if the table has one.
    pub fn shape_named(&self, name: &str) -> Option<ColumnShape> {
        self.column_named(name)
            .map(|index| self.columns[index].shape)
    }
}

/// What a marker dialect writes differently in the statements' shared parts.
pub(crate) struct Words {
    /// A quoted identifier.
    pub quote: fn(&str) -> String,
    /// A quoted string literal.
    pub literal: fn(&str) -> String,
    /// Null-safe equality (SQLite's `IS`, MySQL's `<=>`).
    pub same: &'static str,
}

impl Words {
    /// The JSON path of the top-level entry `name`, as a literal.
    pub fn json_path(&self, name: &str) -> String {
        (self.literal)(&format!("$.\"{}\"", name.replace('"', "\\\"")))
    }

    /// `(names) VALUES (?, …), (…)`: `rows` rows for `statement`, each its inserted columns
    /// ([`crate::sql::marker::inserted`]) then its write marker, bound in that order.
    pub fn inserted_values(&self, layout: &Layout, statement: Statement, rows: usize) -> String {
        let inserted = crate::sql::marker::inserted(layout, statement);
        let mut names: Vec<String> = inserted
            .iter()
            .map(|&position| (self.quote)(layout.columns[layout.sent[position]].name))
            .collect();
        names.push((self.quote)(WRITE_MARKER_FIELD));
        let values = parameter_rows(inserted.len() + 1, rows);
        format!("({}) VALUES {values}", names.join(", "))
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

    /// Whether the row `alias` holds the incoming natural key ([`Words::same_key`]); never for
    /// a type without one.
    pub fn holds_key(
        &self,
        layout: &Layout,
        alias: &str,
        incoming: impl Fn(usize) -> String,
    ) -> String {
        match self.same_key(layout, alias, incoming) {
            none if none.is_empty() => "0".to_owned(),
            key => key.join(" AND "),
        }
    }

    /// What the lookup asks of the row `u` under an incoming row's id for it to be stored as it
    /// would be written: the same natural key (`key(at)`), the same compared contents
    /// ([`crate::sql::marker::compared_contents`], `content(at)`), not deleted.
    pub fn stored_unchanged(
        &self,
        layout: &Layout,
        key: impl Fn(usize) -> String,
        content: impl Fn(usize) -> String,
    ) -> Vec<String> {
        let mut same = self.same_key(layout, "u", key);
        let contents = crate::sql::marker::compared_contents(layout);
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

    /// The conditions under which the pinned replacement finds the row `t` as it was read:
    /// under the id, not deleted, and each of its hash, digests, version key and version, and
    /// each guarded field, as read (`pinned(name, placeholder)`). `placeholder` gives each
    /// parameter's, in the order they are bound: SQLite's statement numbers them, as its `SET`
    /// skips the sent columns it does not replace.
    pub fn pinned_conditions(
        &self,
        layout: &Layout,
        mut placeholder: impl FnMut() -> String,
        pinned: impl Fn(&str, String) -> String,
    ) -> Vec<String> {
        let model = layout.model;
        let mut conditions = vec![format!("t.{} = {}", (self.quote)(ID_FIELD), placeholder())];
        if let Some(field) = model.tombstone_field() {
            conditions.push(format!("t.{} IS NULL", (self.quote)(field.stored_name())));
        }
        let mut names = vec![model.hash_field()];
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

    /// Whether the row under the id (the one parameter) is deleted; no row if none is stored.
    pub fn deleted_sql(&self, layout: &Layout, tombstone: &Field) -> String {
        format!(
            "SELECT {} IS NOT NULL FROM {} WHERE {} = ?",
            (self.quote)(tombstone.stored_name()),
            (self.quote)(layout.model.collection()),
            (self.quote)(ID_FIELD)
        )
    }
}

/// `rows` rows of `width` anonymous parameters each: `(?, ?), (?, ?)`.
pub(crate) fn parameter_rows(width: usize, rows: usize) -> String {
    let row = format!("({})", vec!["?"; width].join(", "));
    vec![row.as_str(); rows].join(", ")
}

/// The boolean column expression `column` as `true` or `false`, as a column of any type reads.
pub(crate) fn boolean_text(column: &str) -> String {
    format!("(CASE WHEN {column} IS NULL THEN NULL WHEN {column} THEN 'true' ELSE 'false' END)")
}
