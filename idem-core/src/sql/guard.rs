//! The upsert's guard in SQL, written once for every SQL store: the same rule as
//! [`crate::verdict::Stored::judge`], as far as the server can tell it, in the few words where
//! the dialects differ ([`GuardWords`], [`Words`]).

use crate::model::{FROZEN_DIGESTS_FIELD, VERSION_KEY_FIELD};
use crate::sql::layout::{Content, Layout};
use crate::sql::words::Words;

/// The words of a dialect's guard: its [`Words`], and how its upsert names the stored row and
/// the incoming one.
pub(crate) trait GuardWords {
    /// How the dialect writes its statements' words.
    fn words(&self) -> &Words;
    /// The stored row's column `column` (quoted).
    fn stored(&self, column: &str) -> String {
        format!("t.{column}")
    }
    /// The incoming row's column `column` (quoted).
    fn incoming(&self, column: &str) -> String {
        format!("excluded.{column}")
    }
}

/// A dialect whose upsert names the stored row `t` and the incoming one `excluded`
/// (PostgreSQL, SQLite).
impl GuardWords for Words {
    fn words(&self) -> &Words {
        self
    }
}

/// The condition under which an upsert replaces the stored row with the incoming one: not
/// deleted; the stored digest of the guarded fields the incoming one (a row without one only
/// where none of them is written; where another, the engine compares the values); a strictly
/// newer version key, or without versions another content hash.
pub(crate) fn upsert_guard(layout: &Layout, words: &impl GuardWords) -> String {
    let model = layout.model;
    let quote = words.words().quote;
    let stored = |name: &str| words.stored(&quote(name));
    let incoming = |name: &str| words.incoming(&quote(name));
    let mut conditions = Vec::new();
    if let Some(field) = model.tombstone_field() {
        conditions.push(format!("{} IS NULL", stored(field.stored_name())));
    }
    if layout.column_with(Content::Digests).is_some() {
        // Without a digest, a NULL is "never written" only in an `Option` field; in any other
        // the guard cannot compare it, and the engine does.
        let unwritten: Vec<String> = (model.digested_fields())
            .map(|field| match field.null_is_unwritten() {
                true => format!("{} IS NULL", stored(field.stored_name())),
                false => words.words().false_literal.to_owned(),
            })
            .collect();
        let digest = stored(FROZEN_DIGESTS_FIELD);
        conditions.push(format!(
            "(CASE WHEN {digest} IS NULL THEN {} ELSE {digest} = {} END)",
            unwritten.join(" AND "),
            incoming(FROZEN_DIGESTS_FIELD),
        ));
    }
    match layout.column_with(Content::VersionKey) {
        Some(_) => {
            let key = stored(VERSION_KEY_FIELD);
            // A version stored without its order key is compared by the engine, which writes
            // it in a second step pinned to what it read.
            let never_versioned = match model.version_field() {
                Some(field) => format!(
                    "({key} IS NULL AND {} IS NULL)",
                    stored(field.stored_name())
                ),
                None => format!("{key} IS NULL"),
            };
            // Order keys compare byte by byte, whatever collation a migration gave the column.
            let bytewise = words.words().bytewise;
            conditions.push(format!(
                "({never_versioned} OR {key} COLLATE {bytewise} < {} COLLATE {bytewise})",
                incoming(VERSION_KEY_FIELD)
            ));
        }
        None => {
            let hash = model.hash_field();
            conditions.push((words.words().distinct)(&stored(hash), &incoming(hash)));
        }
    }
    conditions.join(" AND ")
}

/// What an `ON CONFLICT` on the natural key does for `statement` where the upsert names the
/// stored row `t` and the incoming one `excluded` (PostgreSQL, SQLite): replace the stored row
/// under the same id where the guard allows it, mark it deleted where it is not, or nothing;
/// each update setting `also` (`, column = value`, or nothing) too.
#[cfg(any(feature = "_postgres", feature = "sqlite"))]
pub(crate) fn conflict_action(
    layout: &Layout,
    statement: crate::sql::dialect::Statement,
    words: &Words,
    also: &str,
) -> String {
    use crate::sql::dialect::Statement;
    let (set, condition) = match statement {
        Statement::Upsert => {
            let set: Vec<String> = (layout.columns.iter())
                .filter(|column| column.is_replaced())
                .map(|column| format!("{0} = excluded.{0}", quote(column.name)))
                .collect();
            (set.join(", "), upsert_guard(layout, words))
        }
        Statement::Delete => {
            // `NULL` for a type without a tombstone: `delete` refuses those first.
            let tombstone = (layout.model.tombstone_field())
                .map_or("NULL".to_owned(), |field| quote(field.stored_name()));
            (
                format!("{tombstone} = excluded.{tombstone}"),
                format!("t.{tombstone} IS NULL"),
            )
        }
        Statement::InsertNew => return "DO NOTHING".to_owned(),
    };
    format!(
        "DO UPDATE SET {set}{also} WHERE t.{id} = excluded.{id} AND {condition}",
        id = quote(crate::model::ID_FIELD),
    )
}

/// A quoted SQL identifier.
#[cfg(any(feature = "_postgres", feature = "sqlite"))]
pub(crate) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A quoted SQL string literal.
#[cfg(any(feature = "_postgres", feature = "sqlite"))]
pub(crate) fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}
