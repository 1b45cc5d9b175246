//! SQLite's words for the effects ([`crate::sql::effects`]): an operation applied once to a
//! row's `#[idem(effect)]` columns, refused where a sum would leave `i64`'s range or the column
//! holds no number, and an item pushed once, its key compared as PostgreSQL compares `jsonb`.

use super::table::{literal, quote, sql_type, Table};
use super::Sqlite;
use crate::change::Change;
use crate::column::ColumnShape;
use crate::error::Error;
use crate::sql::change::EncodedChange;
use crate::sql::effects::{assignments, ops_of, typed, Apply, ApplyWords, Binds, Effect};
use crate::sql::effects::{EffectWords, Guarded, Push, PushWords};
use serde_json::Value;

/// SQLite's statements of the effects ([`crate::sql::effects::guarded_once`]).
pub(super) const WORDS: EffectWords<Table> = EffectWords { apply, push };

/// SQLite's numbered placeholders, which a statement may name twice.
fn placeholder(position: usize) -> String {
    format!("?{position}")
}

/// The guarded `UPDATE … RETURNING` of one attempt of `apply_once`.
fn apply(call: &Effect<'_, Table>, apply: &Apply<'_>) -> Result<Guarded, Error> {
    let mut binds = Binds::new(placeholder);
    // SQLite turns an integer sum beyond i64 into a float: such an addition sets its column
    // NULL instead (no sum is NULL), which the statement returns, and the transaction undoes it.
    let mut out_of_range = Vec::new();
    // A column another tool left holding what is no number (a text, a blob) is not added to,
    // which the row's read says: SQLite would take the text for 0.
    let mut numeric = Vec::new();
    let mut not_numeric = Vec::new();
    let mut guarded_sum = |change: &Change, encoded: &EncodedChange, stored: &str, amount: &str| {
        let name = quote(encoded.column.name);
        let kind = format!("typeof(t.{name})");
        numeric.push(format!("{kind} IN ('integer', 'real', 'null')"));
        not_numeric.push(format!(
            "WHEN {kind} NOT IN ('integer', 'real', 'null') THEN {} || char(9) || {kind}",
            literal(change.field())
        ));
        // A float column holds any sum: only an integer one can overflow.
        match (encoded.column.shape, integer_overflow(change, stored)) {
            (ColumnShape::Integer, Some(overflows)) => {
                out_of_range.push(format!(
                    "WHEN {name} IS NULL THEN {}",
                    literal(change.field())
                ));
                format!("CASE WHEN {overflows} THEN NULL ELSE {stored} + {amount} END")
            }
            _ => format!("{stored} + {amount}"),
        }
    };
    let words = ApplyWords {
        type_name: sql_type,
        value: &typed,
        sum: &mut guarded_sum,
        // The op ids, oldest first, keeping the latest `window`.
        kept: |ops, op, window| {
            format!(
                "(SELECT json_group_array(kept.value ORDER BY kept.key) FROM \
                 (SELECT key, value FROM json_each(json_insert({ops}, '$[#]', {op})) \
                 ORDER BY key DESC LIMIT {window}) kept)"
            )
        },
    };
    let (set, added) = assignments::<Sqlite>(call, apply, &mut binds, words)?;
    let applied = |op: &str| {
        let ops = ops_of::<Sqlite>();
        format!("EXISTS (SELECT 1 FROM json_each({ops}) WHERE value = {op})")
    };
    let op = apply.op.as_str();
    let mut guarded = Guarded::new::<Sqlite>(call, &set, binds, |binds| {
        let guard = format!("NOT {}", applied(&binds.text(op)));
        [guard].into_iter().chain(numeric).collect()
    });
    if !out_of_range.is_empty() {
        guarded.returned = format!("CASE {} END", out_of_range.join(" "));
    }
    // The field that is no number, and what it holds, unless the op was applied before.
    if !not_numeric.is_empty() {
        let mut read = Binds::new(placeholder);
        let applied = applied(&read.text(op));
        let explained = format!(
            "CASE WHEN {applied} THEN NULL {} END",
            not_numeric.join(" ")
        );
        guarded.explained = (explained, read);
    }
    guarded.added = added;
    Ok(guarded)
}

/// The guarded `UPDATE` of one attempt of `push`.
fn push(call: &Effect<'_, Table>, push: &Push<'_>) -> Guarded {
    let list = push.list;
    let path = super::table::WORDS.json_path(list.item_key());
    // `->` gives the key's JSON text as stored: `json_extract` would give a float as an SQL
    // value, which `json_quote` writes with 15 digits (0.30000000000000004 as 0.3).
    let stored_key = format!("(stored.value -> {path})");
    let column = format!("t.{}", quote(list.stored_name()));
    // What the column holds, as JSON: NULL where it holds no JSON (`json_type` would fail on
    // it). A NULL or JSON null list (a row another tool wrote) is an empty one; anything else
    // but a list is no list to push to, which the row's read says.
    let kind = format!(
        "(CASE WHEN {column} IS NULL THEN 'null' WHEN json_valid({column}) \
         THEN json_type({column}) END)"
    );
    let listed = format!("(CASE WHEN {kind} = 'array' THEN {column} ELSE '[]' END)");
    let words = PushWords {
        is_list: format!("{kind} IN ('array', 'null')"),
        kind: format!("COALESCE({kind}, 'text that is no JSON')"),
        items: format!("json_each({listed}) stored"),
        appended: &|item| format!("json_insert({listed}, '$[#]', json({item}))"),
        same: &mut |binds| same_key(&stored_key, &path, push.item_key, binds),
    };
    Guarded::push::<Sqlite>(call, push, Binds::new(placeholder), words)
}

/// Whether the key stored under `path` in `stored.value` (its JSON text `stored_key`) is the
/// pushed item's key (`key`, its JSON text, bound in `binds`), as `jsonb` and MongoDB compare
/// keys: numbers by value whatever their form (`1`, `1.0`, `1e0`; `-0.0` is `0`), never equal
/// to a string or a boolean; objects by entries in any order, arrays item by item. A scalar is
/// a stored key of its JSON types (a number's integer or real) with the same SQL value (`IS`;
/// a boolean as 1 or 0); an integer beyond `i64`, which SQLite reads as the nearest double, by
/// its JSON text. A list or an object: its tree (`json_tree`) holds the same nodes, so compared.
fn same_key(stored_key: &str, path: &str, key: &str, binds: &mut Binds) -> String {
    let typed = |types: &str, same: String| {
        format!("json_type(stored.value, {path}) IN ({types}) AND {same}")
    };
    let mut scalar = |types: &str, shape: ColumnShape, value: String| {
        let value = binds.bind(shape, Some(&value));
        typed(types, format!("(stored.value ->> {path}) IS {value}"))
    };
    let same = match serde_json::from_str(key) {
        Ok(Value::String(text)) => scalar("'text'", ColumnShape::Text, text),
        Ok(Value::Bool(true)) => scalar("'true'", ColumnShape::Integer, "1".into()),
        Ok(Value::Bool(false)) => scalar("'false'", ColumnShape::Integer, "0".into()),
        Ok(Value::Number(number)) => match (number.as_i64(), number.as_f64()) {
            (Some(integer), _) => scalar(
                "'integer', 'real'",
                ColumnShape::Integer,
                integer.to_string(),
            ),
            (None, Some(real)) if number.is_f64() => {
                scalar("'integer', 'real'", ColumnShape::Float, format!("{real:?}"))
            }
            _ => typed("'integer'", format!("{stored_key} = {}", binds.text(key))),
        },
        _ => same_tree(stored_key, &binds.text(key)),
    };
    // Only an object holds a key: another item's value is no JSON to read a path in.
    format!("(CASE WHEN stored.type = 'object' THEN ({same}) END)")
}

/// Whether the list or object stored as `stored_key` is the pushed key (`key`): both trees
/// (`json_tree`) hold the same nodes, each of the same kind (a number whether integer or real)
/// with the same SQL value.
fn same_tree(stored_key: &str, key: &str) -> String {
    let kind = |node: &str| {
        format!("(CASE WHEN {node}.type IN ('integer', 'real') THEN 'number' ELSE {node}.type END)")
    };
    format!(
        "({stored_key} = json({key}) OR ((SELECT count(*) FROM json_tree({stored_key})) = \
         (SELECT count(*) FROM json_tree({key})) AND NOT EXISTS (SELECT 1 FROM \
         json_tree({stored_key}) l WHERE NOT EXISTS (SELECT 1 FROM json_tree({key}) r WHERE \
         r.fullkey = l.fullkey AND {right_kind} = {left_kind} AND r.atom IS l.atom))))",
        left_kind = kind("l"),
        right_kind = kind("r"),
    )
}

/// The condition under which adding `change`'s integer amount to `stored` (an SQL expression)
/// leaves `i64`'s range, compared before the sum is made; `None` where it cannot.
fn integer_overflow(change: &Change, stored: &str) -> Option<String> {
    match change.integer_amount()? {
        amount if amount > 0 => Some(format!("{stored} > {}", i64::MAX - amount)),
        amount if amount < 0 => Some(format!("{stored} < {}", i64::MIN - amount)),
        _ => None,
    }
}
