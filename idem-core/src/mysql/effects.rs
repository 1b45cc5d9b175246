//! The MySQL family's words for the effects ([`crate::sql::effects`]): an operation applied
//! once to a row's `#[idem(effect)]` columns, and an item pushed once, its key compared as a
//! JSON value (`JSON_EQUALS`: `1` is `1.0`, objects whatever their entries' order), as on the
//! other stores.

use super::table::{json_path, quote, type_name, Table};
use super::MySql;
use crate::error::Error;
use crate::sql::effects::{assignments, ops_of, sum, typed, Apply, ApplyWords, Binds, Effect};
use crate::sql::effects::{EffectWords, Guarded, Push, PushWords};

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
    let column = format!("t.{}", quote(push.list.stored_name()));
    // A NULL or JSON null list (a row another tool wrote) is an empty one.
    let listed = format!("IF(JSON_TYPE({column}) = 'ARRAY', {column}, '[]')");
    let path = json_path(push.list.item_key());
    let words = PushWords {
        is_list: format!("({column} IS NULL OR JSON_TYPE({column}) IN ('ARRAY', 'NULL'))"),
        kind: format!("LOWER(JSON_TYPE({column}))"),
        items: format!("JSON_TABLE({listed}, '$[*]' COLUMNS (k JSON PATH {path})) stored"),
        appended: &|item| format!("JSON_ARRAY_APPEND({listed}, '$', JSON_EXTRACT({item}, '$'))"),
        same: &mut |binds| format!("JSON_EQUALS(stored.k, {})", binds.text(push.item_key)),
    };
    Guarded::push::<MySql>(call, push, Binds::new(placeholder), words)
}
