//! The parts of their statements the marker dialects (SQLite, the MySQL family) write alike,
//! over the few words where they differ ([`Words`]): the rows an insert sends, and the read of
//! whether a row is deleted. The parts PostgreSQL shares with them are in [`super::words`].

use crate::model::{Field, ID_FIELD, WRITE_MARKER_FIELD};
use crate::sql::dialect::Statement;
use crate::sql::layout::{Content, Layout};
pub(crate) use crate::sql::words::Words;

impl Words {
    /// The JSON path of the top-level entry `name`, as a literal.
    pub fn json_path(&self, name: &str) -> String {
        (self.literal)(&format!("$.\"{}\"", name.replace('"', "\\\"")))
    }

    /// `(names) VALUES (?, …), (…)`: `rows` rows for `statement`, each its inserted columns
    /// ([`Layout::inserted`]) then its write marker, bound in that order.
    pub fn inserted_values(&self, layout: &Layout, statement: Statement, rows: usize) -> String {
        let inserted = layout.inserted(statement);
        let mut names: Vec<String> = inserted
            .iter()
            .map(|&position| (self.quote)(layout.columns[layout.sent[position]].name))
            .collect();
        names.push((self.quote)(WRITE_MARKER_FIELD));
        // The content hash's text and the digest's hex as their bytes.
        let mut row: Vec<String> = (inserted.iter())
            .map(
                |&position| match layout.columns[layout.sent[position]].content {
                    Content::Hash => self.hash_bytes(layout.model, "?"),
                    Content::Digests => (self.from_hex)("?"),
                    _ => "?".to_owned(),
                },
            )
            .collect();
        row.push("?".to_owned());
        let row = format!("({})", row.join(", "));
        let values = vec![row.as_str(); rows].join(", ");
        format!("({}) VALUES {values}", names.join(", "))
    }

    /// The incoming value `value` of the `at`th of [`crate::sql::words::compared_contents`] as its
    /// column stores it: the content hash's text as its bytes.
    pub fn compared_value(&self, layout: &Layout, at: usize, value: String) -> String {
        match crate::sql::words::compared_contents(layout)[at] {
            Content::Hash => self.hash_bytes(layout.model, &value),
            _ => value,
        }
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
