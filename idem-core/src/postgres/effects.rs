//! The primitives that keep side effects exact on PostgreSQL: events recorded once under their
//! idempotency key, operations applied once to a row's `#[idem(effect)]` columns, derived sets
//! whose members are inserted once, and pushes that append an item once. Their rules are the
//! SQL store's ([`crate::sql::store`]) and their statements' frame [`crate::sql::effects`]'s;
//! here are their public signatures and PostgreSQL's words for `apply_once` and `push`.

use super::schema::query_checked_one;
use super::table::{quote, sql_type, Table};
use super::wire::{one, Cells, Connection, Wire};
use super::{postgres_error, Postgres, Store};
use crate::change;
use crate::column::ColumnShape;
use crate::error::Error;
use crate::model::ID_FIELD;
use crate::sql::change::EncodedChange;
use crate::sql::dialect::EffectAnswer;
use crate::sql::effects::{assignments, ops_of, settle, sum, Apply, ApplyWords, Binds, Effect};
use crate::sql::effects::{EffectKind, Guarded, Push, PushWords, Reply};

crate::sql::sqlx_api::store_methods! {
    [C: Connection] C, Connection::wire;
    /// Records an event (a type with an `#[idem(idempotency_key)]` field): the first write of a
    /// key stores it under a fresh random ULID; a retry with the same key and the same payload
    /// returns that first id with `Unchanged`; the same key with another payload is
    /// [`ErrorKind::IdempotencyKeyReused`](crate::ErrorKind::IdempotencyKeyReused). One statement (`ON CONFLICT DO NOTHING` on the key, and
    /// the stored row in the same statement when the key is taken).
    ///
    /// An empty key is refused ([`ErrorKind::EmptyKey`](crate::ErrorKind::EmptyKey)). A key stored by another tool, under an
    /// `_id` that is not a ULID, is [`ErrorKind::ForeignId`](crate::ErrorKind::ForeignId). An event colliding in another unique
    /// constraint is [`ErrorKind::UniqueIndexConflict`](crate::ErrorKind::UniqueIndexConflict), naming it.
    fn record;
    /// Applies `changes` to the row stored under `id` only if `op` has not been applied to it,
    /// recording `op` in the same statement. Returns `Applied`, or `AlreadyApplied` (nothing
    /// written); [`ErrorKind::NotFound`](crate::ErrorKind::NotFound) if no row has that id.
    ///
    /// The changes may touch only `#[idem(effect)]` columns: upserts never overwrite those, so
    /// a replayed upsert cannot undo an operation. Any other column, one the type does not have
    /// included, is refused with [`ErrorKind::NotAnEffectField`](crate::ErrorKind::NotAnEffectField) before anything is sent, and an
    /// op id holding U+0000 (which text cannot hold) with [`ErrorKind::OpIdHoldsNul`](crate::ErrorKind::OpIdHoldsNul), as on
    /// every store.
    ///
    /// Inside the caller's transaction, an operation that spans rows (debit one account, credit
    /// another) commits whole or not at all; outside one, retrying the whole operation with the
    /// same op id applies each step exactly once. A row remembers its latest
    /// [`with_op_window`](Store#method.with_op_window) op ids in the column
    /// [`APPLIED_OPS_FIELD`](crate::model::APPLIED_OPS_FIELD).
    fn apply_once;
    /// Inserts the members of a derived set (the awards a rule says a user has earned) and
    /// reports, per member in input order, whether this call inserted it, found it stored
    /// already, or refused it; [`InsertReport::inserted`](crate::InsertReport::inserted) gives
    /// exactly the members this call inserted, in input order: one statement per chunk of a
    /// round (a member sharing a natural key with an earlier one goes in a later round), and a
    /// read where a member's id holds another row.
    ///
    /// Call it with the full set every time: members already stored are skipped by the
    /// natural key (`ON CONFLICT DO NOTHING`). Callers racing with overlapping sets each get a
    /// disjoint share, so an effect run for each inserted member runs once. A member whose
    /// natural key is stored under another id (its timestamp moved) is refused with
    /// [`ErrorKind::FrozenFieldChanged`](crate::ErrorKind::FrozenFieldChanged), as `upsert` refuses it, in the report beside the members
    /// stored without conflict.
    fn insert_new;
    /// Appends `item` to the list `field` (its Rust name; marked `#[idem(push_by = "…")]`) of
    /// the row stored under `id`, unless an item with the same key is there already. One
    /// statement, guarded by the absence of an item whose key equals this one, so a retried push
    /// never appends twice: a racing push waits for the row and re-checks the guard on what the
    /// other wrote.
    fn push;
}

/// One attempt of `apply_once` or `push` ([`crate::sql::dialect::SqlDialect::effect`]): one
/// statement, its guarded `UPDATE` and what it did. An operation is guarded as every write is
/// ([`Table::checked_guard`]), so that nothing is applied to a table the store has not checked,
/// whose check comes first.
pub(super) async fn effect<W: Wire>(
    wire: &W,
    call: &Effect<'_, Table>,
) -> Result<EffectAnswer, Error> {
    let (table, document) = (call.table, call.document);
    let checked = table.relation_name("checked");
    let (guarded, guard) = match &call.kind {
        EffectKind::Apply(apply) => {
            let guarded = apply_sql(call, apply, &checked)?;
            let guard = format!("{}, ", table.checked_cte(guarded.binds.len() + 1));
            (guarded, guard)
        }
        EffectKind::Push(push) => (push_sql(call, push), String::new()),
    };
    let written = table.relation_name("written");
    let row = format!(
        "FROM {} t WHERE t.{} = {}",
        table.name(),
        quote(ID_FIELD),
        guarded.id
    );
    let sql = format!(
        "WITH {guard}{written} AS ({update} RETURNING 1) \
         SELECT (SELECT count(*) FROM {written}), EXISTS (SELECT 1 {row}), \
         (SELECT {explained} {row}){ok}",
        update = guarded.sql,
        explained = guarded.explained.0,
        ok = match guard.is_empty() {
            true => String::new(),
            false => format!(", (SELECT c.ok FROM {checked} c)"),
        },
    );
    let reply = match &call.kind {
        EffectKind::Apply(apply) => {
            let values = guarded.binds.texts();
            query_checked_one(wire, table, document, (&sql, 3), &values, "UPDATE")
                .await
                // numeric_value_out_of_range, of an integer column (a float one says "value
                // out of range: overflow").
                .map_err(|error| {
                    change::out_of_range_or(error, apply.changes, |backend| {
                        backend.code() == Some("22003")
                            && backend.to_string().contains("bigint out of range")
                    })
                })?
        }
        EffectKind::Push(_) => {
            crate::trace::round_trip("UPDATE");
            (wire.write(&sql, &guarded.binds.params()).await)
                .and_then(|rows| one(rows, "UPDATE"))
                .map_err(|source| postgres_error(document, source))?
        }
    };
    let explained = reply.str(2).map(str::to_owned);
    settle(
        call,
        Reply {
            written: reply.int8(0).unwrap_or(0) > 0,
            exists: reply.flag(1).unwrap_or(false),
            explained,
        },
    )
}

/// The guarded `UPDATE` of `apply_once`: only where the table is one the store checked
/// (`checked`, the statement's relation saying so).
fn apply_sql(call: &Effect<'_, Table>, apply: &Apply<'_>, checked: &str) -> Result<Guarded, Error> {
    let mut binds = Binds::new(placeholder);
    let value = |binds: &mut Binds, encoded: &EncodedChange| {
        let value = binds.bind(ColumnShape::Text, encoded.value.as_deref());
        format!("{value}::text::{}", sql_type(encoded.column))
    };
    let words = ApplyWords {
        type_name: sql_type,
        value: &value,
        sum: &mut sum,
        // The op ids, oldest first, keeping the latest `window`.
        kept: |ops, op, window| {
            format!(
                "(SELECT COALESCE(jsonb_agg(recorded.op ORDER BY recorded.n), '[]') \
                 FROM jsonb_array_elements({ops} || to_jsonb({op}::text)) WITH ORDINALITY \
                 AS recorded(op, n) WHERE recorded.n > jsonb_array_length({ops}) + 1 - {window})"
            )
        },
    };
    let (set, _) = assignments::<Postgres>(call, apply, &mut binds, words)?;
    Ok(Guarded::new::<Postgres>(call, &set, binds, |binds| {
        let op = binds.text(apply.op.as_str());
        let ops = ops_of::<Postgres>();
        vec![
            format!("NOT ({ops} @> to_jsonb(ARRAY[{op}::text]))"),
            format!("(SELECT c.ok FROM {checked} c)"),
        ]
    }))
}

/// The guarded `UPDATE` of `push`: by the absence of an item whose key equals this one, so a
/// retried push never appends twice: a racing push waits for the row and re-checks the guard
/// on what the other wrote.
fn push_sql(call: &Effect<'_, Table>, push: &Push<'_>) -> Guarded {
    // Keys compare whole, as jsonb values (`=`), not by containment (`@>`), under which a
    // composite key holding a part of another's fields or list entries would pass for it. A
    // NULL or JSON null list (a row another tool wrote) is an empty one; anything else but a
    // list is no list to push to, which the statement's explanation says.
    let column = quote(push.list.stored_name());
    let kind = format!("COALESCE(jsonb_typeof({column}), 'null')");
    let listed = format!("(CASE WHEN {kind} = 'array' THEN {column} ELSE '[]'::jsonb END)");
    let words = PushWords {
        is_list: format!("{kind} IN ('array', 'null')"),
        items: format!("jsonb_array_elements({listed}) AS stored(item)"),
        appended: &|item| format!("{listed} || jsonb_build_array({item}::text::jsonb)"),
        same: &mut |binds| {
            let key = binds.text(push.item_key);
            let key_field = binds.text(push.list.item_key());
            format!("stored.item -> {key_field}::text = {key}::text::jsonb")
        },
        kind,
    };
    Guarded::push::<Postgres>(call, push, Binds::new(placeholder), words)
}

/// PostgreSQL's numbered placeholders.
fn placeholder(position: usize) -> String {
    format!("${position}")
}
