//! The primitives that keep side effects exact on the MySQL family: operations applied once to a
//! row's `#[idem(effect)]` columns and pushes that append an item once. Each is one `UPDATE`
//! guarded by the absence of the op id or of the item's key, and, when it updates nothing, a
//! read of why, in one transaction of idem's own.

use super::errors::mysql_error;
use super::table::{json_path, quote, type_name, Table};
use crate::change::{self, Change};
use crate::document::DocumentRef;
use crate::error::Error;
use crate::id::Id;
use crate::model::{Field, OpId, APPLIED_OPS_FIELD, ID_FIELD};
use crate::push::stored_not_a_list;
use crate::sql::dialect::EffectAnswer;
use crate::sql::store::in_transaction_with;
use crate::sql::wire::{Cells, Param, Wire};

/// `ER_DATA_OUT_OF_RANGE`: a sum beyond its column's type, which strict mode refuses.
const OUT_OF_RANGE: &str = "1690";

/// One attempt of `apply_once` ([`crate::sql::dialect::SqlDialect::apply_once`]).
pub(super) async fn apply_once(
    wire: &impl Wire,
    table: &Table,
    id: Id,
    op: &OpId,
    changes: &[Change],
    window: usize,
    document: &DocumentRef,
) -> Result<EffectAnswer, Error> {
    let encoded = crate::sql::change::encode(table, changes, document, type_name)?;
    let mut assignments = Vec::with_capacity(changes.len() + 1);
    for encoded in &encoded {
        let name = quote(encoded.column.name);
        assignments.push(match encoded.adds {
            true => format!("t.{name} = COALESCE(t.{name}, 0) + ?"),
            false => format!("t.{name} = ?"),
        });
    }
    let column = quote(APPLIED_OPS_FIELD);
    // A NULL list (a row another tool wrote) is an empty one. `JSON_CONTAINS` compares the op
    // ids as JSON strings, byte for byte (`JSON_SEARCH` would take them for patterns).
    let ops = format!("COALESCE(t.{column}, '[]')");
    // The op ids, oldest first, keeping the latest `window` (a range is always a list).
    assignments.push(format!(
        "t.{column} = JSON_EXTRACT(JSON_ARRAY_APPEND({ops}, '$', ?), '$[last-{} to last]')",
        window.max(1) - 1
    ));
    let applied = format!("JSON_CONTAINS({ops}, JSON_QUOTE(?))");
    let sql = format!(
        "UPDATE {table} t SET {assignments} WHERE t.{id} = ? AND NOT {applied}",
        table = table.name(),
        assignments = assignments.join(", "),
        id = quote(ID_FIELD),
    );
    let id_text = id.to_string();
    let mut params: Vec<Param> = encoded
        .iter()
        .map(|encoded| Param::typed(encoded.column.shape, encoded.value.as_deref()))
        .collect();
    params.extend([
        Param::Text(Some(op.as_str())),
        Param::Text(Some(&id_text)),
        Param::Text(Some(op.as_str())),
    ]);
    let answer = update_once(wire, &sql, &params, table, &id_text, "NULL", document).await;
    match answer {
        Err(Failed::OutOfRange(message)) => {
            // The message shows the sum's expression: the column it names is the field.
            let field = (changes.iter().zip(&encoded))
                .filter(|(_, encoded)| encoded.adds)
                .find(|(_, encoded)| message.contains(&quote(encoded.column.name)))
                .or_else(|| {
                    changes
                        .iter()
                        .zip(&encoded)
                        .find(|(_, encoded)| encoded.adds)
                })
                .map_or("", |(change, _)| change.field());
            Err(change::add_out_of_range(document, field))
        }
        Err(Failed::Error(error)) => Err(error),
        Ok((answer, _)) => Ok(answer),
    }
}

/// One attempt of `push` ([`crate::sql::dialect::SqlDialect::push`]): keys compare as JSON values
/// (`JSON_EQUALS`: `1` is `1.0`, objects whatever their entries' order), as on the other stores.
pub(super) async fn push(
    wire: &impl Wire,
    table: &Table,
    id: Id,
    list: &'static Field,
    item: &str,
    item_key: &str,
    document: &DocumentRef,
) -> Result<EffectAnswer, Error> {
    let column = format!("t.{}", quote(list.stored_name()));
    // A NULL or JSON null list (a row another tool wrote) is an empty one; anything else but a
    // list is no list to push to, which the row's read says.
    let listed = format!("IF(JSON_TYPE({column}) = 'ARRAY', {column}, '[]')");
    let sql = format!(
        "UPDATE {table} t SET {column} = JSON_ARRAY_APPEND({listed}, '$', JSON_EXTRACT(?, '$')) \
         WHERE t.{id} = ? AND ({column} IS NULL OR JSON_TYPE({column}) IN ('ARRAY', 'NULL')) \
         AND NOT EXISTS (SELECT 1 FROM JSON_TABLE({listed}, '$[*]' COLUMNS (k JSON PATH {path})) \
         stored WHERE JSON_EQUALS(stored.k, ?))",
        table = table.name(),
        id = quote(ID_FIELD),
        path = json_path(list.item_key()),
    );
    let not_a_list = format!(
        "CASE WHEN {column} IS NULL OR JSON_TYPE({column}) IN ('ARRAY', 'NULL') THEN NULL \
         ELSE LOWER(JSON_TYPE({column})) END"
    );
    let id_text = id.to_string();
    let params = [
        Param::Text(Some(item)),
        Param::Text(Some(&id_text)),
        Param::Text(Some(item_key)),
    ];
    match update_once(wire, &sql, &params, table, &id_text, &not_a_list, document).await {
        Ok((answer, Some(stored))) if !answer.written => {
            Err(stored_not_a_list(document, list, &stored))
        }
        Ok((answer, _)) => Ok(answer),
        Err(Failed::OutOfRange(message)) => Err(Error::new(
            document.clone(),
            crate::error::ErrorKind::Serialize { message },
        )),
        Err(Failed::Error(error)) => Err(error),
    }
}

/// Why a guarded `UPDATE` failed: a sum out of its column's range (the server's message), or
/// another error.
enum Failed {
    OutOfRange(String),
    Error(Error),
}

/// Runs a guarded `UPDATE` (`sql` with `params`) of the row under `id` and, if it matched
/// nothing, reads whether that row exists and the value of `explained` (an expression over the
/// row `t`, which says why the guard may have stopped the write), in one transaction of idem's
/// own. Found rows (which sqlx asks for) count the rows the guard let through.
async fn update_once(
    wire: &impl Wire,
    sql: &str,
    params: &[Param<'_>],
    table: &Table,
    id: &str,
    explained: &str,
    document: &DocumentRef,
) -> Result<(EffectAnswer, Option<String>), Failed> {
    let mut out_of_range = None;
    let answer = in_transaction_with::<super::MySql, _>(wire, document, async {
        crate::trace::round_trip("UPDATE");
        match wire.execute(sql, params).await {
            Ok(0) => {}
            Ok(_) => {
                let written = EffectAnswer {
                    written: true,
                    exists: true,
                };
                return Ok((written, None));
            }
            Err(source) if source.code() == Some(OUT_OF_RANGE) => {
                out_of_range = Some(source.to_string());
                return Err(mysql_error(document, source));
            }
            Err(source) => return Err(mysql_error(document, source)),
        }
        crate::trace::round_trip("SELECT");
        let look = format!(
            // Locking: the row as the latest committed write left it, not the snapshot's.
            "SELECT {explained} FROM {} t WHERE t.{} = ? FOR UPDATE",
            table.name(),
            quote(ID_FIELD)
        );
        let error = |source| mysql_error(document, source);
        let found = wire
            .fetch_optional(&look, &[Param::Text(Some(id))])
            .await
            .map_err(error)?;
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
    .await;
    match (answer, out_of_range) {
        (Err(_), Some(message)) => Err(Failed::OutOfRange(message)),
        (answer, _) => answer.map_err(Failed::Error),
    }
}
