//! The upsert's guard in SQL, written once for every SQL store: the same rule as
//! [`crate::verdict::Stored::judge`], as far as the server can tell it, in the few words where
//! the dialects differ ([`Dialect`]).

use crate::model::{FROZEN_DIGESTS_FIELD, VERSION_KEY_FIELD};
use crate::sql::layout::{Content, Layout};

/// What a dialect writes differently in the guard.
pub(crate) struct Dialect {
    /// `false`.
    pub false_literal: &'static str,
    /// The collation that compares text byte by byte, as version order keys compare.
    pub bytewise: &'static str,
    /// Null-safe inequality (`IS DISTINCT FROM`, SQLite's `IS NOT`).
    pub distinct: &'static str,
    /// The text under key `name` of the JSON object in the column expression `column`.
    pub json_text: fn(column: &str, name: &str) -> String,
}

/// The condition under which an upsert replaces the stored row `t` with `excluded`: not
/// deleted; each guarded field never written or holding the incoming digest (a row without
/// digests only where none of them is written); a strictly newer version key, or without
/// versions another content hash.
pub(crate) fn upsert_guard(layout: &Layout, dialect: &Dialect) -> String {
    let model = layout.model;
    let mut conditions = Vec::new();
    if let Some(field) = model.tombstone_field() {
        conditions.push(format!("t.{} IS NULL", quote(field.stored_name())));
    }
    let digests = quote(FROZEN_DIGESTS_FIELD);
    for field in model.digested_fields() {
        let stored = (dialect.json_text)(&format!("t.{digests}"), field.stored_name());
        let incoming = (dialect.json_text)(&format!("excluded.{digests}"), field.stored_name());
        // Without digests, a NULL is "never written" only in an `Option` field; in any other
        // the guard cannot compare it, and the engine does.
        let unwritten = match field.null_is_unwritten() {
            true => format!("t.{} IS NULL", quote(field.stored_name())),
            false => dialect.false_literal.to_owned(),
        };
        conditions.push(format!(
            "(CASE WHEN t.{digests} IS NULL THEN {unwritten} \
             ELSE {stored} IS NULL OR {stored} = {incoming} END)",
        ));
    }
    match layout.column_with(Content::VersionKey) {
        Some(_) => {
            let key = quote(VERSION_KEY_FIELD);
            // A version stored without its order key is compared by the engine, which writes
            // it in a second step pinned to what it read.
            let never_versioned = match model.version_field() {
                Some(field) => format!(
                    "(t.{key} IS NULL AND t.{} IS NULL)",
                    quote(field.stored_name())
                ),
                None => format!("t.{key} IS NULL"),
            };
            // Order keys compare byte by byte, whatever collation a migration gave the column.
            let bytewise = dialect.bytewise;
            conditions.push(format!(
                "({never_versioned} OR t.{key} COLLATE {bytewise} < excluded.{key} COLLATE {bytewise})"
            ));
        }
        None => {
            let hash = quote(model.hash_field());
            conditions.push(format!("t.{hash} {} excluded.{hash}", dialect.distinct));
        }
    }
    conditions.join(" AND ")
}

/// The quoted tombstone column (`NULL` for a type without one: `delete` refuses those first).
pub(crate) fn tombstone_column(layout: &Layout) -> String {
    layout
        .model
        .tombstone_field()
        .map_or("NULL".to_owned(), |field| quote(field.stored_name()))
}

/// A quoted SQL identifier.
pub(crate) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A quoted SQL string literal.
pub(crate) fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}
