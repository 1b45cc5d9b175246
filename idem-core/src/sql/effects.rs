//! The effects of a SQL store, written once: an operation applied once to a row's
//! `#[idem(effect)]` columns, and an item pushed once to one of its lists. Each attempt is one
//! `UPDATE` of the row, guarded by the absence of the op id or of the item's key; here are what
//! an attempt asks ([`Effect`]), the statement's frame (the changes' assignments, the id, the
//! guards, the parameters in the order its text binds them) and the answer read from what it
//! did, refusals named as on every store. Each dialect gives its expressions (JSON functions,
//! the overflow test, placeholders) and sends the statement: PostgreSQL as one statement that
//! says what it did, the others ([`guarded_once`]) in a transaction of idem's own, with a read of
//! why where it wrote nothing.

use super::change::EncodedChange;
use super::dialect::{EffectAnswer, SqlDialect};
use super::layout::TableColumn;
use super::wire::Param;
use crate::change::{self, Change};
use crate::column::ColumnShape;
use crate::document::DocumentRef;
use crate::error::Error;
use crate::id::Id;
use crate::model::{Field, OpId, APPLIED_OPS_FIELD, ID_FIELD};
use crate::push::stored_not_a_list;

/// One attempt of an effect on the row under an id ([`SqlDialect::effect`]).
pub(crate) struct Effect<'a, T> {
    /// The row's table, checked.
    pub table: &'a T,
    /// The row's id, as text.
    pub id: String,
    /// What the call's errors name.
    pub document: &'a DocumentRef,
    /// What it writes.
    pub kind: EffectKind<'a>,
}

impl<'a, T> Effect<'a, T> {
    /// `kind` on the row of `table` under `id`.
    pub(crate) fn new(
        table: &'a T,
        id: Id,
        document: &'a DocumentRef,
        kind: EffectKind<'a>,
    ) -> Self {
        Effect {
            table,
            id: id.to_string(),
            document,
            kind,
        }
    }
}

/// What an effect writes.
pub(crate) enum EffectKind<'a> {
    /// `apply_once`'s.
    Apply(Apply<'a>),
    /// `push`'s.
    Push(Push<'a>),
}

/// `changes` (checked against the model) and `op` applied to the row unless `op` is among its
/// applied ops, keeping the latest `window`.
pub(crate) struct Apply<'a> {
    pub op: &'a OpId,
    pub changes: &'a [Change],
    pub window: usize,
}

/// `item` (JSON text) appended to the list `list` of the row unless an item with the key
/// `item_key` (JSON text) is in it.
pub(crate) struct Push<'a> {
    pub list: &'static Field,
    pub item: &'a str,
    pub item_key: &'a str,
}

/// A statement's parameters, bound in the order its text names them, each named by the
/// dialect's placeholder for its position (`?2`, `?`, `$2`).
#[derive(Clone)]
pub(crate) struct Binds {
    values: Vec<(ColumnShape, Option<String>)>,
    placeholder: fn(usize) -> String,
}

impl Binds {
    /// No parameter yet; `placeholder` names the parameter at a position (from 1).
    pub(crate) fn new(placeholder: fn(usize) -> String) -> Self {
        Binds {
            values: Vec::new(),
            placeholder,
        }
    }

    /// Binds `text` next, as a column of `shape` holds it ([`Param::typed`]), and names it.
    pub(crate) fn bind(&mut self, shape: ColumnShape, text: Option<&str>) -> String {
        self.values.push((shape, text.map(str::to_owned)));
        (self.placeholder)(self.values.len())
    }

    /// Binds `text` next, as text, and names it.
    pub(crate) fn text(&mut self, text: &str) -> String {
        self.bind(ColumnShape::Text, Some(text))
    }

    /// The parameters, in their order.
    pub(crate) fn params(&self) -> Vec<Param<'_>> {
        (self.values.iter())
            .map(|(shape, text)| Param::typed(*shape, text.as_deref()))
            .collect()
    }

    /// The parameters as text, in their order (PostgreSQL's `$n::text::type` reads them so).
    #[cfg(feature = "_postgres")]
    pub(crate) fn texts(&self) -> Vec<Option<String>> {
        self.values.iter().map(|(_, text)| text.clone()).collect()
    }

    /// How many are bound.
    #[cfg(feature = "_postgres")]
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }
}

/// An effect's guarded `UPDATE` of the row `t`, in a dialect's words.
pub(crate) struct Guarded {
    /// `UPDATE … AS t SET … WHERE t._id = … AND …`, without what it returns.
    pub sql: String,
    /// Its parameters.
    pub binds: Binds,
    /// The id's placeholder in `sql`.
    #[cfg_attr(not(feature = "_postgres"), allow(dead_code))]
    pub id: String,
    /// What the statement returns where the dialect's `UPDATE` returns the row it wrote
    /// ([`super::dialect::MarkerDialect::WRITE_RETURNS`]): NULL, or the field whose integer
    /// addition would have left `i64`'s range.
    #[cfg_attr(not(feature = "_marker_store"), allow(dead_code))]
    pub returned: String,
    /// Where it wrote nothing, what says why: an expression over the row `t`, NULL where the
    /// guard alone stopped it; for `apply_once`, a field that holds no number and what it holds
    /// (`field`, a tab, the kind), for `push`, what the list's column holds that is no list. Its
    /// parameters come before the id's in the read of the row.
    pub explained: (String, Binds),
    /// The fields an `apply_once` adds to: a sum out of its column's range names one
    /// ([`guarded_once`]).
    #[cfg_attr(not(feature = "_marker_store"), allow(dead_code))]
    pub added: Added,
}

/// The fields an `apply_once` adds to, with their quoted columns, in the order of its changes.
pub(crate) type Added = Vec<(&'static str, String)>;

impl Guarded {
    /// `UPDATE {table} AS t SET {set} WHERE t._id = {id} AND {guards}`: `set` bound first, then
    /// the id, then the guards `guards` makes.
    pub(crate) fn new<D: SqlDialect>(
        call: &Effect<'_, D::Table>,
        set: &[String],
        mut binds: Binds,
        guards: impl FnOnce(&mut Binds) -> Vec<String>,
    ) -> Guarded {
        let id = binds.text(&call.id);
        let guards: String = (guards(&mut binds).iter())
            .map(|guard| format!(" AND {guard}"))
            .collect();
        let sql = format!(
            "UPDATE {table} AS t SET {set} WHERE t.{id_column} = {id}{guards}",
            table = D::quote(call.table.model.collection()),
            set = set.join(", "),
            id_column = D::quote(ID_FIELD),
        );
        Guarded {
            sql,
            explained: ("NULL".to_owned(), Binds::new(binds.placeholder)),
            binds,
            id,
            returned: "NULL".to_owned(),
            added: Vec::new(),
        }
    }
}

impl Guarded {
    /// `push`'s guarded `UPDATE`, in `words`: the item appended to the list where the column
    /// holds a list or nothing (NULL, JSON null: an empty list) and no item of its key; where it
    /// holds anything else, what it holds says why nothing was written.
    pub(crate) fn push<D: SqlDialect>(
        call: &Effect<'_, D::Table>,
        push: &Push<'_>,
        mut binds: Binds,
        words: PushWords<'_>,
    ) -> Guarded {
        let item = binds.text(push.item);
        let set = format!(
            "{} = {}",
            D::quote(push.list.stored_name()),
            (words.appended)(&item)
        );
        let is_list = words.is_list;
        let mut guarded = Guarded::new::<D>(call, &[set], binds, |binds| {
            let same = (words.same)(binds);
            let absent = format!("NOT EXISTS (SELECT 1 FROM {} WHERE {same})", words.items);
            vec![is_list.clone(), absent]
        });
        guarded.explained.0 = format!("CASE WHEN {is_list} THEN NULL ELSE {} END", words.kind);
        guarded
    }
}

/// How a dialect writes a `push` ([`Guarded::push`]), over the list's column of the row `t`.
pub(crate) struct PushWords<'w> {
    /// Whether the column holds a list, or nothing.
    pub is_list: String,
    /// What it holds where it holds no list, as the refusal names it.
    pub kind: String,
    /// The items of the list (an empty one for nothing), as the relation `stored`.
    pub items: String,
    /// The list with the item (its placeholder) appended.
    pub appended: &'w dyn Fn(&str) -> String,
    /// Whether the item `stored` has the pushed key, bound as it needs.
    pub same: &'w mut dyn FnMut(&mut Binds) -> String,
}

/// How a dialect writes an `apply_once`'s assignments ([`assignments`]).
pub(crate) struct ApplyWords<'w> {
    /// The dialect's name of a column's type, for refusals.
    pub type_name: fn(&TableColumn) -> &'static str,
    /// A change's value (text as written) for its column, bound.
    pub value: &'w dyn Fn(&mut Binds, &EncodedChange) -> String,
    /// The sum of the stored value (`COALESCE(t.column, 0)`: a NULL is none) and the bound
    /// amount, for a change: `stored + amount` unless the dialect guards it.
    pub sum: &'w mut dyn FnMut(&Change, &EncodedChange, &str, &str) -> String,
    /// The applied ops (an expression over the row `t`, a NULL list being an empty one) with
    /// the op (bound) appended, keeping the latest `window`.
    pub kept: fn(&str, &str, usize) -> String,
}

/// A change's value bound as its column holds it ([`Param::typed`]).
#[cfg(feature = "_marker_store")]
pub(crate) fn typed(binds: &mut Binds, encoded: &EncodedChange) -> String {
    binds.bind(encoded.column.shape, encoded.value.as_deref())
}

/// The plain sum of the stored value and the amount.
#[cfg_attr(not(any(feature = "_postgres", feature = "mysql")), allow(dead_code))]
pub(crate) fn sum(_: &Change, _: &EncodedChange, stored: &str, amount: &str) -> String {
    format!("{stored} + {amount}")
}

/// The assignments of an `apply_once` (each change's column set to its value or added to,
/// then the applied ops), bound in that order, and the fields it adds to.
pub(crate) fn assignments<D: SqlDialect>(
    call: &Effect<'_, D::Table>,
    apply: &Apply<'_>,
    binds: &mut Binds,
    words: ApplyWords<'_>,
) -> Result<(Vec<String>, Added), Error> {
    let encoded = super::change::encode(call.table, apply.changes, call.document, words.type_name)?;
    let mut set = Vec::with_capacity(encoded.len() + 1);
    let mut added = Vec::new();
    for (change, encoded) in apply.changes.iter().zip(&encoded) {
        let name = D::quote(encoded.column.name);
        let value = (words.value)(binds, encoded);
        set.push(match encoded.adds {
            true => {
                added.push((change.field(), name.clone()));
                let stored = format!("COALESCE(t.{name}, 0)");
                format!("{name} = {}", (words.sum)(change, encoded, &stored, &value))
            }
            false => format!("{name} = {value}"),
        });
    }
    let column = D::quote(APPLIED_OPS_FIELD);
    let op = binds.text(apply.op.as_str());
    let kept = (words.kept)(&ops_of::<D>(), &op, apply.window);
    set.push(format!("{column} = {kept}"));
    Ok((set, added))
}

/// The row's applied ops, a NULL list (a row another tool wrote) being an empty one.
pub(crate) fn ops_of<D: SqlDialect>() -> String {
    format!("COALESCE(t.{}, '[]')", D::quote(APPLIED_OPS_FIELD))
}

/// What a guarded `UPDATE` did: whether it wrote, whether the row is there, and where it wrote
/// nothing, what the read of why found ([`Guarded::explained`]).
pub(crate) struct Reply {
    pub written: bool,
    pub exists: bool,
    pub explained: Option<String>,
}

/// The answer of an effect's attempt from what its statement did, or the refusal it is: an
/// addition to a field that holds no number, a push to a column that holds no list.
pub(crate) fn settle<T>(call: &Effect<'_, T>, reply: Reply) -> Result<EffectAnswer, Error> {
    match (reply.explained, &call.kind) {
        (Some(stored), EffectKind::Apply(_)) if !reply.written => {
            let (field, kind) = stored.split_once('\t').unwrap_or((&stored, "a value"));
            Err(change::stored_not_a_number(call.document, field, kind))
        }
        (Some(stored), EffectKind::Push(push)) if !reply.written => {
            Err(stored_not_a_list(call.document, push.list, &stored))
        }
        _ => Ok(EffectAnswer {
            written: reply.written,
            exists: reply.exists,
        }),
    }
}

/// A marker dialect's statements of the effects ([`guarded_once`]).
#[cfg(feature = "_marker_store")]
pub(crate) struct EffectWords<T> {
    pub apply: fn(&Effect<'_, T>, &Apply<'_>) -> Result<Guarded, Error>,
    pub push: fn(&Effect<'_, T>, &Push<'_>) -> Guarded,
}

/// One attempt of an effect on a marker dialect's store, its statement in `words`: the guarded
/// `UPDATE` and, if it updated nothing, the read of whether the row exists and of why, in one
/// transaction of idem's own. A sum out of its column's range is refused naming the field, and
/// undone with the transaction.
#[cfg(feature = "_marker_store")]
pub(crate) async fn guarded_once<D: super::dialect::MarkerDialect, W: super::wire::Wire>(
    wire: &W,
    call: &Effect<'_, D::Table>,
    words: &EffectWords<D::Table>,
) -> Result<EffectAnswer, Error> {
    use super::wire::Cells;
    let guarded = match &call.kind {
        EffectKind::Apply(apply) => (words.apply)(call, apply)?,
        EffectKind::Push(push) => (words.push)(call, push),
    };
    let document = call.document;
    let error = |source| D::error(document, source);
    let mut out_of_range = None;
    let reply = super::store::in_transaction_with::<D, _>(wire, document, async {
        crate::trace::round_trip("UPDATE");
        let params = guarded.binds.params();
        // Whether it wrote, and what it returned.
        let wrote = match D::WRITE_RETURNS {
            true => {
                let sql = format!("{} RETURNING {}", guarded.sql, guarded.returned);
                match wire.fetch_optional(&sql, &params).await {
                    Ok(Some(row)) => Ok(Some(row.text(0).map_err(error)?)),
                    Ok(None) => Ok(None),
                    Err(source) => Err(source),
                }
            }
            false => {
                (wire.execute(&guarded.sql, &params).await).map(|rows| (rows > 0).then_some(None))
            }
        };
        match wrote {
            Ok(Some(None)) => {
                let written = Reply {
                    written: true,
                    exists: true,
                    explained: None,
                };
                return Ok(written);
            }
            Ok(Some(Some(field))) => {
                let refused = change::add_out_of_range(document, &field);
                out_of_range = Some(field);
                return Err(refused);
            }
            Ok(None) => {}
            Err(source) if D::sum_out_of_range(&source) => {
                out_of_range = Some(source.to_string());
                return Err(error(source));
            }
            Err(source) => return Err(error(source)),
        }
        crate::trace::round_trip("SELECT");
        let (explained, mut read) = guarded.explained.clone();
        let look = format!(
            "SELECT {explained} FROM {} AS t WHERE t.{} = {}{}",
            D::quote(call.table.model.collection()),
            D::quote(ID_FIELD),
            read.text(&call.id),
            D::LOCKING_READ,
        );
        let found = (wire.fetch_optional(&look, &read.params()).await).map_err(error)?;
        Ok(Reply {
            exists: found.is_some(),
            explained: match found {
                Some(row) => row.text(0).map_err(error)?,
                None => None,
            },
            written: false,
        })
    })
    .await;
    match (reply, out_of_range, &call.kind) {
        // The field itself, or the column the server's message names (it shows the sum).
        (Err(_), Some(message), EffectKind::Apply(_)) => {
            let added = &guarded.added;
            let field = (added.iter())
                .find(|(field, column)| message == *field || message.contains(column.as_str()))
                .or(added.first())
                .map_or("", |(field, _)| field);
            Err(change::add_out_of_range(document, field))
        }
        (Err(_), Some(message), EffectKind::Push(_)) => {
            let message = crate::error::ErrorKind::Serialize { message };
            Err(Error::new(document.clone(), message))
        }
        (reply, _, _) => settle(call, reply?),
    }
}
