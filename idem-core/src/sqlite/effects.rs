//! The primitives that keep side effects exact on SQLite: operations applied once to a row's
//! `#[idem(effect)]` columns and pushes that append an item once. Each is one `UPDATE` guarded
//! by the absence of the op id or of the item's key, and, when it updates nothing, a read of
//! whether the row exists, in one savepoint.

use super::table::{literal, quote, sql_type, Table};
use crate::change::{self, Change};
use crate::column::ColumnShape;
use crate::document::DocumentRef;
use crate::error::Error;
use crate::id::Id;
use crate::model::{Field, OpId, APPLIED_OPS_FIELD, ID_FIELD};
use crate::push::stored_not_a_list;
use crate::sql::dialect::EffectAnswer;
use crate::sql::store::in_transaction_with;
use crate::sql::wire::{Cells, Param, Wire};

/// One attempt of `apply_once` ([`crate::sql::dialect::SqlDialect::apply_once`]): one guarded
/// `UPDATE … RETURNING`, and where it updates nothing, the read of why.
pub(super) async fn apply_once(
    wire: &impl Wire,
    table: &Table,
    id: Id,
    op: &OpId,
    changes: &[Change],
    window: usize,
    document: &DocumentRef,
) -> Result<EffectAnswer, Error> {
    // ?1 the id, ?2 the op id, then one value per change.
    let mut values: Vec<(ColumnShape, Option<String>)> = Vec::new();
    let mut assignments = Vec::with_capacity(changes.len() + 1);
    // SQLite turns an integer sum beyond i64 into a float: such an addition sets its column
    // NULL instead (no sum is NULL), which the statement returns, and the transaction undoes it.
    let mut out_of_range = Vec::new();
    // A column another tool left holding what is no number (a text, a blob) is not added to,
    // which the row's read says: SQLite would take the text for 0.
    let mut numeric = Vec::new();
    let mut not_numeric = Vec::new();
    let encoded = crate::sql::change::encode(table, changes, document, sql_type)?;
    for (change, encoded) in changes.iter().zip(encoded) {
        let name = quote(encoded.column.name);
        let placeholder = format!("?{}", values.len() + 3);
        let stored = format!("COALESCE(t.{name}, 0)");
        if encoded.adds {
            let kind = format!("typeof(t.{name})");
            numeric.push(format!("{kind} IN ('integer', 'real', 'null')"));
            not_numeric.push(format!(
                "WHEN {kind} NOT IN ('integer', 'real', 'null') THEN {} || char(9) || {kind}",
                literal(change.field())
            ));
        }
        // A float column holds any sum: only an integer one can overflow.
        let overflows = match encoded.column.shape {
            ColumnShape::Integer => integer_overflow(change, &stored),
            _ => None,
        };
        assignments.push(match (encoded.adds, overflows) {
            (true, Some(overflows)) => {
                out_of_range.push(format!(
                    "WHEN {name} IS NULL THEN {}",
                    literal(change.field())
                ));
                format!(
                    "{name} = CASE WHEN {overflows} THEN NULL ELSE {stored} + {placeholder} END"
                )
            }
            (true, None) => format!("{name} = {stored} + {placeholder}"),
            (false, _) => format!("{name} = {placeholder}"),
        });
        values.push((encoded.column.shape, encoded.value));
    }
    let returned = match out_of_range.is_empty() {
        true => "NULL".to_owned(),
        false => format!("CASE {} END", out_of_range.join(" ")),
    };
    let column = quote(APPLIED_OPS_FIELD);
    // A NULL list (a row another tool wrote) is an empty one.
    let ops = format!("COALESCE(t.{column}, '[]')");
    // The op ids, oldest first, keeping the latest `window`.
    assignments.push(format!(
        "{column} = (SELECT json_group_array(kept.value ORDER BY kept.key) FROM \
         (SELECT key, value FROM json_each(json_insert({ops}, '$[#]', ?2)) \
         ORDER BY key DESC LIMIT {window}) kept)",
    ));
    let applied = |op: &str| format!("EXISTS (SELECT 1 FROM json_each({ops}) WHERE value = {op})");
    let sql = format!(
        "UPDATE {table} AS t SET {assignments} WHERE t.{id} = ?1 AND NOT {applied}{numeric} \
         RETURNING {returned}",
        table = table.name(),
        assignments = assignments.join(", "),
        id = quote(ID_FIELD),
        applied = applied("?2"),
        numeric = numeric
            .iter()
            .map(|condition| format!(" AND {condition}"))
            .collect::<String>(),
    );
    // Read where the statement wrote nothing: the field that is no number, and what it holds,
    // unless the op (bound as `?2`, as in the statement) was applied before.
    let explained = match not_numeric.is_empty() {
        true => "NULL".to_owned(),
        false => format!(
            "CASE WHEN {} THEN NULL {} END",
            applied("?2"),
            not_numeric.join(" ")
        ),
    };
    let id_text = id.to_string();
    let mut params = vec![Param::Text(Some(&id_text)), Param::Text(Some(op.as_str()))];
    params.extend(
        values
            .iter()
            .map(|(shape, value)| Param::typed(*shape, value.as_deref())),
    );
    let explained = (explained.as_str(), Some(op.as_str()));
    let (answer, stored) =
        update_once(wire, &sql, &params, table, &id_text, explained, document).await?;
    if let (false, Some(stored)) = (answer.written, stored) {
        let (field, kind) = stored.split_once('\t').unwrap_or((&stored, "a value"));
        return Err(change::stored_not_a_number(document, field, kind));
    }
    Ok(answer)
}

/// One attempt of `push` ([`crate::sql::dialect::SqlDialect::push`]): one guarded `UPDATE`, and
/// where it updates nothing, the read of why.
pub(super) async fn push(
    wire: &impl Wire,
    table: &Table,
    id: Id,
    list: &'static Field,
    item: &str,
    item_key: &str,
    document: &DocumentRef,
) -> Result<EffectAnswer, Error> {
    let scalar_key = ScalarKey::of(item_key);
    let path = literal(&format!("$.\"{}\"", list.item_key().replace('"', "\\\"")));
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
    let sql = format!(
        "UPDATE {table} AS t SET {list} = json_insert({listed}, '$[#]', json(?2)) \
         WHERE t.{id} = ?1 AND {kind} IN ('array', 'null') AND NOT EXISTS (SELECT 1 \
         FROM json_each({listed}) stored WHERE {same}) RETURNING NULL",
        table = table.name(),
        list = quote(list.stored_name()),
        id = quote(ID_FIELD),
        same = same_key(&stored_key, &scalar_key, &path),
    );
    let not_a_list = format!(
        "CASE WHEN {kind} IN ('array', 'null') THEN NULL \
         ELSE COALESCE({kind}, 'text that is no JSON') END"
    );
    let id_text = id.to_string();
    let mut params = vec![
        Param::Text(Some(&id_text)),
        Param::Text(Some(item)),
        Param::Text(Some(item_key)),
    ];
    if let Some(ScalarKey {
        value: Some(value), ..
    }) = &scalar_key
    {
        params.push(value.param());
    }
    let (answer, stored) = update_once(
        wire,
        &sql,
        &params,
        table,
        &id_text,
        (&not_a_list, None),
        document,
    )
    .await?;
    if let (false, Some(stored)) = (answer.written, stored) {
        return Err(stored_not_a_list(document, list, &stored));
    }
    Ok(answer)
}

/// A pushed item's key that is a scalar, as SQLite compares it with a stored item's: the JSON
/// types of the same value (a number's whether written as an integer or a real), and its SQL
/// value (a boolean as 1 or 0), bound as `?4`; an integer beyond `i64`, which SQLite would read
/// as the nearest double (two such keys one), by its JSON text instead.
struct ScalarKey {
    types: &'static str,
    value: Option<SqlScalar>,
}

enum SqlScalar {
    Text(String),
    Integer(i64),
    Real(f64),
}

impl SqlScalar {
    fn param(&self) -> Param<'_> {
        match self {
            SqlScalar::Text(text) => Param::Text(Some(text)),
            SqlScalar::Integer(integer) => Param::Integer(*integer),
            SqlScalar::Real(real) => Param::Float(*real),
        }
    }
}

impl ScalarKey {
    /// The key whose JSON text is `key`; `None` for a list or an object.
    fn of(key: &str) -> Option<ScalarKey> {
        let (types, value) = match serde_json::from_str(key).ok()? {
            serde_json::Value::String(text) => ("'text'", Some(SqlScalar::Text(text))),
            serde_json::Value::Bool(true) => ("'true'", Some(SqlScalar::Integer(1))),
            serde_json::Value::Bool(false) => ("'false'", Some(SqlScalar::Integer(0))),
            serde_json::Value::Number(number) => match (number.as_i64(), number.is_f64()) {
                (Some(integer), _) => ("'integer', 'real'", Some(SqlScalar::Integer(integer))),
                (None, true) => ("'integer', 'real'", Some(SqlScalar::Real(number.as_f64()?))),
                (None, false) => ("'integer'", None),
            },
            _ => return None,
        };
        Some(ScalarKey { types, value })
    }
}

/// Whether the key stored under `path` in `stored.value` (its JSON text `stored_key`) is the
/// pushed item's key (`?3`, its JSON text), as PostgreSQL's `jsonb` and MongoDB compare keys:
/// numbers by value whatever their form (`1`, `1.0` and `1e0` are one number, `-0.0` is `0`),
/// a number never equal to a string or a boolean, objects by their entries whatever their
/// order, arrays item by item. A scalar key (`scalar`) is a stored key of one of its JSON types
/// with the same SQL value (`IS`, which compares an integer with a real by value); a list or an
/// object, one whose tree (`json_tree`) holds the same nodes, each compared so.
fn same_key(stored_key: &str, scalar: &Option<ScalarKey>, path: &str) -> String {
    // Only an object holds a key: another item's value is no JSON to read a path in.
    let same = match scalar {
        Some(ScalarKey {
            types,
            value: Some(_),
        }) => format!(
            "json_type(stored.value, {path}) IN ({types}) AND (stored.value ->> {path}) IS ?4"
        ),
        Some(ScalarKey { types, value: None }) => {
            format!("json_type(stored.value, {path}) IN ({types}) AND {stored_key} = ?3")
        }
        None => same_tree(stored_key),
    };
    format!("(CASE WHEN stored.type = 'object' THEN ({same}) END)")
}

/// Whether the list or object stored as `stored_key` is the pushed key (`?3`): both trees
/// (`json_tree`) hold the same nodes, each of the same kind (a number whether integer or real)
/// with the same SQL value.
fn same_tree(stored_key: &str) -> String {
    let kind = |node: &str| {
        format!("(CASE WHEN {node}.type IN ('integer', 'real') THEN 'number' ELSE {node}.type END)")
    };
    format!(
        "({stored_key} = json(?3) OR ((SELECT count(*) FROM json_tree({stored_key})) = \
         (SELECT count(*) FROM json_tree(?3)) AND NOT EXISTS (SELECT 1 FROM \
         json_tree({stored_key}) l WHERE NOT EXISTS (SELECT 1 FROM json_tree(?3) r WHERE \
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

/// Runs a guarded `UPDATE … RETURNING` (`sql` with `params`) of the row under `id` and, if it
/// updated nothing, reads whether that row exists, in one transaction of idem's own: whether it
/// wrote, whether the row is there, and the value the read found of `explained` (an expression
/// over the row `t`, with the value beside it bound as `?2`, as it was in the write), which says
/// why the guard may have stopped the write. The statement returns one value, NULL unless it
/// names a field whose integer addition would have left `i64`'s range
/// ([`AddOutOfRange`](crate::ErrorKind::AddOutOfRange), the write undone).
async fn update_once(
    wire: &impl Wire,
    sql: &str,
    params: &[Param<'_>],
    table: &Table,
    id: &str,
    (explained, bound): (&str, Option<&str>),
    document: &DocumentRef,
) -> Result<(EffectAnswer, Option<String>), Error> {
    let error = |source| super::errors::sqlite_error(document, source);
    in_transaction_with::<super::Sqlite, _>(wire, document, async {
        crate::trace::round_trip("UPDATE");
        if let Some(row) = wire.fetch_optional(sql, params).await.map_err(error)? {
            // Out of range: refused naming the field, and undone with the transaction.
            let field = row.text(0).map_err(error)?;
            if let Some(field) = field {
                return Err(change::add_out_of_range(document, &field));
            }
            return Ok((
                EffectAnswer {
                    written: true,
                    exists: true,
                },
                None,
            ));
        }
        crate::trace::round_trip("SELECT");
        let look = format!(
            "SELECT {explained} FROM {} AS t WHERE t.{} = ?1",
            table.name(),
            quote(ID_FIELD)
        );
        let mut read = vec![Param::Text(Some(id))];
        if let Some(bound) = bound {
            read.push(Param::Text(Some(bound)));
        }
        let found = wire.fetch_optional(&look, &read).await.map_err(error)?;
        let exists = found.is_some();
        let explained = match found {
            Some(row) => row.text(0).map_err(error)?,
            None => None,
        };
        Ok((
            EffectAnswer {
                written: false,
                exists,
            },
            explained,
        ))
    })
    .await
}
