//! The MySQL family's words for the effects ([`crate::sql::effects`]): an operation applied
//! once to a row's `#[idem(effect)]` columns, and an item pushed once, its key compared as a
//! JSON value (`JSON_EQUALS`: `1` is `1.0`, objects whatever their entries' order), as on the
//! other stores.

use super::table::{json_path, quote, type_name, Table};
use super::MySql;
use crate::error::Error;
use crate::sql::effects::{assignments, ops_of, sum, typed, Apply, ApplyWords, Binds, Effect};
use crate::sql::effects::{EffectWords, Guarded, Push};

/// `ER_DATA_OUT_OF_RANGE`: a sum beyond its column's type, which strict mode refuses.
pub(super) const OUT_OF_RANGE: &str = "1690";

/// The MySQL family's statements of the effects ([`crate::sql::effects::guarded_once`]).
pub(super) const WORDS: EffectWords<Table> = EffectWords { apply, push };

/// Its placeholders, which name the parameters in their order.
fn placeholder(_: usize) -> String {
    "?".to_owned()
}

/// The guarded `UPDATE` of one attempt of `apply_once`.
fn apply(call: &Effect<'_, Table>, apply: &Apply<'_>) -> Result<Guarded, Error> {
    let mut binds = Binds::new(placeholder);
    let words = ApplyWords {
        type_name,
        value: &typed,
        sum: &mut sum,
        // The op ids, oldest first, keeping the latest `window` (a range is always a list).
        kept: |ops, op, window| {
            let first = window.max(1) - 1;
            format!("JSON_EXTRACT(JSON_ARRAY_APPEND({ops}, '$', {op}), '$[last-{first} to last]')")
        },
    };
    let (set, added) = assignments::<MySql>(call, apply, &mut binds, words)?;
    // `JSON_CONTAINS` compares the op ids as JSON strings, byte for byte (`JSON_SEARCH` would
    // take them for patterns).
    let mut guarded = Guarded::new::<MySql>(call, &set, binds, |binds| {
        let op = binds.text(apply.op.as_str());
        vec![format!(
            "NOT JSON_CONTAINS({}, JSON_QUOTE({op}))",
            ops_of::<MySql>()
        )]
    });
    guarded.added = added;
    Ok(guarded)
}

/// The guarded `UPDATE` of one attempt of `push`.
fn push(call: &Effect<'_, Table>, push: &Push<'_>) -> Guarded {
    let name = quote(push.list.stored_name());
    let column = format!("t.{name}");
    // A NULL or JSON null list (a row another tool wrote) is an empty one; anything else but a
    // list is no list to push to, which the row's read says.
    let listed = format!("IF(JSON_TYPE({column}) = 'ARRAY', {column}, '[]')");
    let is_list = format!("({column} IS NULL OR JSON_TYPE({column}) IN ('ARRAY', 'NULL'))");
    let mut binds = Binds::new(placeholder);
    let item = binds.text(push.item);
    let set = format!("{name} = JSON_ARRAY_APPEND({listed}, '$', JSON_EXTRACT({item}, '$'))");
    let mut guarded = Guarded::new::<MySql>(call, &[set], binds, |binds| {
        let absent = format!(
            "NOT EXISTS (SELECT 1 FROM JSON_TABLE({listed}, '$[*]' COLUMNS (k JSON PATH {path})) \
             stored WHERE JSON_EQUALS(stored.k, {key}))",
            path = json_path(push.list.item_key()),
            key = binds.text(push.item_key),
        );
        vec![is_list.clone(), absent]
    });
    guarded.explained.0 =
        format!("CASE WHEN {is_list} THEN NULL ELSE LOWER(JSON_TYPE({column})) END");
    guarded
}
