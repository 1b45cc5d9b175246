//! One document ready to write as a row: the text of each sent column, its hash, digests and
//! version key; and what a statement returns of a stored row, read as the engine asks
//! (the SQL drivers').

use std::fmt::{self, Write as _};

use serde::Serialize;
use serde_json::{Map, Value};

use super::layout::{Content, Layout, TableColumn};
use crate::column::ColumnShape;
use crate::engine::batch::Ready;
use crate::engine::{check_written_names, guarded_value_digest, Prepared, StoredDigest};
use crate::error::{Error, ErrorKind};
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::{Field, Model};
use crate::short_text::ShortText;
use crate::sql::json::{self, Cell};
use crate::sql::scan;
use crate::sql::texts::ColumnTexts;
use crate::verdict::StoredVersion;

/// What a lookup sends of a document and a judgement reads of it, without its columns: the
/// engine's part ([`Prepared`], which it dereferences to), the text of each natural-key column,
/// and each guarded field's value. [`LightRow::new`] prepares only this, where the columns of a
/// row that may never be written are not worth encoding.
#[derive(Debug)]
pub(crate) struct LightRow {
    prepared: Prepared,
    /// The text of each natural-key field's column, in [`Model::natural_key_fields`] order.
    pub key_texts: Vec<Option<String>>,
    /// Each guarded field's incoming value, in `digests` order, and how a refusal shows it
    /// where that is not its JSON (a NaN, which JSON cannot hold).
    pub guarded: GuardedValues,
}

/// Guarded fields' values, each with how a refusal shows it where that is not its JSON.
type GuardedValues = Vec<(Value, Option<String>)>;

impl std::ops::Deref for LightRow {
    type Target = Prepared;

    fn deref(&self) -> &Prepared {
        &self.prepared
    }
}

/// A document as the columns of its row, and what the engine reads of it ([`Prepared`], which
/// it dereferences to).
#[derive(Debug)]
pub(crate) struct PreparedRow {
    pub light: LightRow,
    /// The text of each sent column (`None`: NULL), in [`Layout::sent`] order; `None` too for
    /// the id, the hash and the version key, which [`PreparedRow::sent_value`] reads from the
    /// prepared document instead of a copy of each per row.
    texts: ColumnTexts,
}

impl std::ops::Deref for PreparedRow {
    type Target = Prepared;

    fn deref(&self) -> &Prepared {
        &self.light.prepared
    }
}

/// What a stored row that stopped a write holds, as the statement returns it.
#[derive(Clone, Debug)]
pub(crate) struct StoredRow {
    pub id: String,
    pub tombstoned: bool,
    pub hash: Option<String>,
    /// The digests column as stored, and parsed; `None` for a row without digests (another
    /// tool wrote it).
    pub digests_text: Option<String>,
    pub digests: Option<Map<String, Value>>,
    pub version_key: Option<String>,
    /// The guarded fields' values as text, in [`Model::digested_fields`] order.
    pub guarded_values: Vec<Option<String>>,
    /// The version field's value as text, for a type with versions.
    pub version_value: Option<String>,
    /// The natural-key columns as text, for a row read by id; `None` for a row found by its
    /// natural key, which holds the incoming one.
    pub natural_key: Option<Vec<Option<String>>>,
}

impl StoredRow {
    /// A row's stored state from its texts, in the order the SQL drivers select it: id, (the
    /// deletion, given as `tombstoned`), hash, digests, version key, each guarded field, then
    /// the version field for a type with versions.
    pub fn from_texts(model: &Model, texts: &[Option<String>], tombstoned: bool) -> StoredRow {
        let text = |at: usize| texts.get(at).cloned().flatten();
        let guarded = model.digested_fields().count();
        let digests_text = text(3);
        StoredRow {
            id: text(0).unwrap_or_default(),
            tombstoned,
            hash: text(2),
            digests: digests_text
                .as_deref()
                .and_then(|text| serde_json::from_str(text).ok()),
            digests_text,
            version_key: text(4),
            guarded_values: (5..5 + guarded).map(text).collect(),
            version_value: model.version_field().and_then(|_| text(5 + guarded)),
            natural_key: None,
        }
    }

    /// The stored digest of a guarded field.
    pub fn digest(&self, field: &Field) -> StoredDigest<'_> {
        match &self.digests {
            None => StoredDigest::NoDigests,
            Some(digests) => digest_of(digests, field),
        }
    }

    /// The stored version order key.
    pub fn version(&self) -> StoredVersion<'_> {
        self.version_key
            .as_deref()
            .map_or(StoredVersion::Absent, StoredVersion::Key)
    }
}

/// What the engine asks of a row, incoming or stored, on a table of `layout`: every SQL
/// driver's answers, from the texts both carry.
pub(crate) struct RowReader<'a> {
    layout: &'a Layout,
}

impl<'a> RowReader<'a> {
    pub fn new(layout: &'a Layout) -> Self {
        RowReader { layout }
    }

    /// Where `field` is among the guarded fields, whose values stored rows carry.
    fn guarded_position(&self, field: &Field) -> Option<usize> {
        self.layout
            .model
            .digested_fields()
            .position(|guarded| guarded.stored_name() == field.stored_name())
    }

    /// Where `field` is among the natural-key fields.
    fn key_position(&self, field: &Field) -> Option<usize> {
        self.layout
            .model
            .natural_key_fields()
            .position(|key| key.stored_name() == field.stored_name())
    }

    /// The stored text of `field`, if the row read carries it.
    fn stored_text<'s>(&self, stored: &'s StoredRow, field: &Field) -> Option<&'s str> {
        if field.role() == crate::Role::Version {
            return stored.version_value.as_deref();
        }
        match self.guarded_position(field) {
            Some(at) => stored.guarded_values.get(at)?.as_deref(),
            None => stored
                .natural_key
                .as_ref()?
                .get(self.key_position(field)?)?
                .as_deref(),
        }
    }

    /// The incoming text of a natural-key field's column.
    fn incoming_key_text<'d>(&self, doc: &'d LightRow, field: &Field) -> Option<&'d str> {
        doc.key_texts.get(self.key_position(field)?)?.as_deref()
    }

    /// The incoming value of a guarded field, in the neutral form.
    pub fn incoming_value(&self, doc: &LightRow, field: &Field) -> Value {
        match self.guarded_position(field) {
            Some(at) => doc.guarded[at].0.clone(),
            None => self
                .incoming_key_text(doc, field)
                .map_or(Value::Null, |text| stored_value(self.layout, field, text)),
        }
    }

    /// The incoming value of `field`, as a refusal shows it.
    pub fn incoming_shown(&self, doc: &LightRow, field: &Field) -> String {
        match self.guarded_position(field) {
            Some(at) => {
                let (value, shown) = &doc.guarded[at];
                shown.clone().unwrap_or_else(|| value.to_string())
            }
            None => self.incoming_value(doc, field).to_string(),
        }
    }

    /// The stored value of `field` in the neutral form.
    pub fn stored_value(&self, stored: &StoredRow, field: &Field) -> Option<Value> {
        // A column holds a value or NULL: never "missing", but for a key the row read lacks.
        let carried = field.role() == crate::Role::Version
            || self.guarded_position(field).is_some()
            || stored.natural_key.is_some();
        match self.stored_text(stored, field) {
            Some(text) => Some(stored_value(self.layout, field, text)),
            None => carried.then_some(Value::Null),
        }
    }

    /// The stored value of `field`, as a refusal shows it.
    pub fn stored_shown(&self, stored: &StoredRow, field: &Field) -> Option<String> {
        let text = self.stored_text(stored, field)?;
        Some(match stored_value(self.layout, field, text) {
            // NaN or an infinity, shown as the database writes it, like the incoming one.
            Value::String(_) if shape_of(self.layout, field) == ColumnShape::Float => {
                text.to_owned()
            }
            value => value.to_string(),
        })
    }

    /// The first natural-key field whose stored text is not `doc`'s.
    pub fn key_differs(&self, doc: &LightRow, stored: &StoredRow) -> Option<&'static Field> {
        let keys = stored.natural_key.as_ref()?;
        self.layout
            .model
            .natural_key_fields()
            .zip(keys)
            .find(|(field, stored)| stored.as_deref() != self.incoming_key_text(doc, field))
            .map(|(field, _)| field)
    }
}

/// `doc` prepared for a lookup on `table` ([`crate::engine::batch::BatchDriver::prepare_light`]):
/// light where [`LightRow::new`] vouches for it, else whole.
pub(crate) fn prepare_light<T: Idempotent + Serialize>(
    doc: &T,
    table: &Layout,
) -> Result<Ready<LightRow, PreparedRow>, Error> {
    match LightRow::new(doc, table)? {
        Some(light) => Ok(Ready::Light(light)),
        None => PreparedRow::new(doc, table).map(Ready::Whole),
    }
}

impl LightRow {
    /// `doc`'s light form under its derived id, or `None` where [`scan`] cannot vouch that its
    /// whole row would encode ([`PreparedRow::new`], which says what is wrong).
    pub fn new<T: Idempotent + Serialize>(
        doc: &T,
        table: &Layout,
    ) -> Result<Option<LightRow>, Error> {
        match scan::walk(doc, table, false) {
            Some(walked) => LightRow::from_picked(doc, doc.id()?, table, walked.picked),
            None => Ok(None),
        }
    }

    /// The light form of `doc` under `id`, from the values [`scan::walk`] picked (each as its
    /// column takes it), which the guarded values are moved out of; `None` where the key is
    /// missing or null, or a digest cannot be made.
    fn from_picked<T: Idempotent + Serialize>(
        doc: &T,
        id: Id,
        table: &Layout,
        mut picked: Vec<(&'static str, Value)>,
    ) -> Result<Option<LightRow>, Error> {
        let model: &'static Model = &T::MODEL;
        let picked_value = |name: &str| {
            picked
                .iter()
                .find(|(picked, _)| *picked == name)
                .map(|(_, value)| value)
        };
        let holds_key = |name: &str| picked_value(name).is_some_and(|value| !value.is_null());
        // The refusal itself is the JSON encoding's (`None` sends the document there), so the
        // document it would name is never built here.
        let unnamed = || crate::DocumentRef::collection(model);
        if check_written_names(model, unnamed, std::iter::empty(), holds_key).is_err() {
            return Ok(None);
        }
        let (key_texts, guarded) = picked_parts(model, table, &mut picked);
        let hash = doc.content_hash()?;
        let mut digests = Vec::with_capacity(guarded.len());
        for (field, (value, _)) in model.digested_fields().zip(&guarded) {
            let Ok(digest) = guarded_value_digest(field, value, value.is_null()) else {
                return Ok(None);
            };
            digests.push((field, digest));
        }
        Ok(Some(LightRow {
            prepared: Prepared::new(doc, id, hash, digests),
            key_texts,
            guarded,
        }))
    }
}

/// The text of each natural-key column and each guarded field's value, moved out of the values
/// [`scan::walk`] picked (each as its column takes it): a field has one role in the model (a
/// key is never also a guarded field), so each value is taken once.
fn picked_parts(
    model: &'static Model,
    table: &Layout,
    picked: &mut [(&'static str, Value)],
) -> (Vec<Option<String>>, GuardedValues) {
    fn take<'p>(picked: &'p mut [(&'static str, Value)], name: &str) -> Option<&'p mut Value> {
        picked
            .iter_mut()
            .find(|(picked, _)| *picked == name)
            .map(|(_, value)| value)
    }
    let key_texts = model
        .natural_key_fields()
        .map(|field| {
            let column = &table.columns[table.column_of(field)?];
            match (column.shape, take(picked, field.stored_name())) {
                // The picked text itself, moved, not copied.
                (ColumnShape::Text, Some(Value::String(text))) => Some(std::mem::take(text)),
                (_, value) => column_text(column, value.as_deref()).ok().flatten(),
            }
        })
        .collect();
    let guarded = model
        .digested_fields()
        .map(|field| {
            let value = take(picked, field.stored_name()).map_or(Value::Null, std::mem::take);
            (value, None)
        })
        .collect();
    (key_texts, guarded)
}

/// The digest of `field` in a digests column read as JSON, as the audit reads it: no digests
/// where there is no such column, or it holds no object (as [`StoredRow::from_texts`] reads
/// it for the engine, and the MongoDB store a field that is no document).
pub(crate) fn digest_in<'s>(digests: Option<&'s Value>, field: &Field) -> StoredDigest<'s> {
    match digests {
        Some(Value::Object(digests)) => digest_of(digests, field),
        _ => StoredDigest::NoDigests,
    }
}

/// The digest of `field` in a digests object.
fn digest_of<'s>(digests: &'s Map<String, Value>, field: &Field) -> StoredDigest<'s> {
    StoredDigest::of_entry(digests.get(field.stored_name()))
}

/// Writes the digests column's text to `out`: each written digest by the field's stored name,
/// a JSON object as `serde_json` writes one, without building it.
fn write_digests_text(digests: &[(&'static Field, Option<ShortText>)], out: &mut String) {
    out.push('{');
    let mut first = true;
    for (field, digest) in digests {
        let Some(digest) = digest else {
            continue;
        };
        if !std::mem::take(&mut first) {
            out.push(',');
        }
        json::push_string(out, field.stored_name());
        out.push(':');
        json::push_string(out, digest);
    }
    out.push('}');
}

impl PreparedRow {
    /// Prepares `doc` under its derived id.
    pub fn new<T: Idempotent + Serialize>(doc: &T, table: &Layout) -> Result<Self, Error> {
        PreparedRow::with_id(doc, doc.id()?, table)
    }

    /// Prepares `doc` under `id` (an event's id is not derived): straight from what serde
    /// writes where [`scan::walk`] vouches for it, else through JSON.
    pub fn with_id<T: Idempotent + Serialize>(
        doc: &T,
        id: Id,
        table: &Layout,
    ) -> Result<Self, Error> {
        match PreparedRow::walked(doc, id, table)? {
            Some(row) => Ok(row),
            None => PreparedRow::through_json(doc, id, table),
        }
    }

    /// `doc`'s whole row from its light form ([`LightRow::new`]): its columns encoded, its id,
    /// content hash and digests taken as the light form has them (the tests of
    /// `light_row_agreement` hold the two preparations to the same parts).
    pub fn completed<T: Idempotent + Serialize>(
        light: &LightRow,
        doc: &T,
        table: &Layout,
    ) -> Result<Self, Error> {
        match scan::walk(doc, table, true) {
            Some(mut walked) => {
                let (key_texts, guarded) = picked_parts(light.model, table, &mut walked.picked);
                let light = LightRow {
                    prepared: light.prepared.clone(),
                    key_texts,
                    guarded,
                };
                Ok(PreparedRow::of_walked(light, walked, table))
            }
            None => PreparedRow::with_id(doc, light.id, table),
        }
    }

    /// `doc`'s row under `id` from [`scan::walk`]'s texts, or `None` where it could not vouch
    /// for the document.
    fn walked<T: Idempotent + Serialize>(
        doc: &T,
        id: Id,
        table: &Layout,
    ) -> Result<Option<Self>, Error> {
        let Some(mut walked) = scan::walk(doc, table, true) else {
            return Ok(None);
        };
        let picked = std::mem::take(&mut walked.picked);
        let Some(light) = LightRow::from_picked(doc, id, table, picked)? else {
            return Ok(None);
        };
        Ok(Some(PreparedRow::of_walked(light, walked, table)))
    }

    /// The row of `light`'s document from the texts [`scan::walk`] wrote of it: its digests
    /// and the entries no column holds written into theirs.
    fn of_walked(light: LightRow, walked: scan::Walked, table: &Layout) -> Self {
        let mut texts = walked.columns;
        let mut extra = Some(walked.extra).filter(|extra| !extra.is_empty());
        for (position, &index) in table.sent.iter().enumerate() {
            match table.columns[index].content {
                // Read from the light row itself ([`PreparedRow::sent_value`]).
                Content::Id | Content::Hash | Content::VersionKey | Content::Stored(_) => {}
                Content::Digests => texts.write_text(position, |out| {
                    write_digests_text(&light.digests, out);
                }),
                Content::Extra => {
                    if let Some(extra) = extra.take() {
                        texts.write_text(position, |out| {
                            // Writing to a `String` cannot fail.
                            let _ = write!(out, "{}", Value::Object(extra));
                        });
                    }
                }
            }
        }
        table.row_sizes.saw(&mut texts);
        PreparedRow { light, texts }
    }

    /// `doc`'s row under `id` through its JSON ([`json::to_document`]): every refusal of a
    /// document's content is this encoding's.
    fn through_json<T: Idempotent + Serialize>(
        doc: &T,
        id: Id,
        table: &Layout,
    ) -> Result<Self, Error> {
        let model: &'static Model = &T::MODEL;
        let document = || doc.document_ref().with_derived_id(model, id);
        let serialize_error =
            |message: String| Error::new(document(), ErrorKind::Serialize { message });
        let hash = doc
            .content_hash()
            .map_err(|error| Error::new(document(), error.into_kind()))?;
        let (document_value, non_finite) =
            json::to_document(doc).map_err(|error| serialize_error(error.message()))?;
        let mut entries = match document_value {
            Value::Object(entries) => entries,
            other => {
                return Err(serialize_error(format!(
                    "serde wrote {other} where a row needs a struct's fields"
                )))
            }
        };
        let non_finite_of = |name: &str| {
            non_finite
                .iter()
                .find(|(kept, _)| kept == name)
                .map(|&(_, value)| value)
        };
        // A key column cannot hold a null: JSON's null is no key here.
        check_written_names(model, document, entries.keys(), |name| {
            entries.get(name).is_some_and(|value| !value.is_null())
        })?;
        let guarded = model
            .digested_fields()
            .map(|field| {
                if let Some(float) = non_finite_of(field.stored_name()) {
                    let digest = float_digest(float).map_err(&serialize_error)?;
                    let shown = json::show_float(float);
                    return Ok(((field, digest), (Value::from(shown.as_str()), Some(shown))));
                }
                let value = entries.get(field.stored_name()).unwrap_or(&Value::Null);
                let digest = guarded_value_digest(field, value, value.is_null())
                    .map_err(&serialize_error)?;
                Ok(((field, digest), (value.clone(), None)))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let (digests, guarded): (Vec<_>, Vec<_>) = guarded.into_iter().unzip();
        let prepared = Prepared::new(doc, id, hash, digests);
        let mut texts = ColumnTexts::new(table.sent.len(), &table.row_sizes);
        for (position, &index) in table.sent.iter().enumerate() {
            let column = &table.columns[index];
            match column.content {
                // Read from the prepared document itself ([`PreparedRow::sent_value`]).
                Content::Id | Content::Hash | Content::VersionKey => {}
                Content::Digests => texts.write_text(position, |out| {
                    write_digests_text(&prepared.digests, out);
                }),
                // Filled last, from what no column took.
                Content::Extra => {}
                Content::Stored(_) => {
                    let value = entries.remove(column.name);
                    if let Some(float) = non_finite_of(column.name) {
                        if column.shape != ColumnShape::Float {
                            return Err(serialize_error(non_finite_outside_float(
                                column.name,
                                float,
                            )));
                        }
                        texts.set(position, Some(&json::show_float(float)));
                        continue;
                    }
                    texts
                        .write(position, |out| {
                            write_column_text(column, value.as_ref(), out)
                        })
                        .map_err(|expected| {
                            serialize_error(format!(
                                "field {:?} holds {}, where its column holds {expected}",
                                column.name,
                                value.as_ref().unwrap_or(&Value::Null)
                            ))
                        })?;
                }
            }
        }
        // A flattened entry holding NaN or an infinity has no column of its own to keep it.
        if let Some((name, float)) = non_finite
            .iter()
            .find(|(name, _)| table.column_named(name).is_none())
        {
            return Err(serialize_error(non_finite_outside_float(name, *float)));
        }
        // Pushed lists are not written by an upsert: a new row starts with an empty one.
        for field in model.pushed_fields() {
            entries.remove(field.stored_name());
        }
        match table.column_with(Content::Extra) {
            Some(extra) => {
                let position = table.sent.iter().position(|&index| index == extra);
                if let (Some(position), false) = (position, entries.is_empty()) {
                    texts.write_text(position, |out| {
                        // Writing to a `String` cannot fail.
                        let _ = write!(out, "{}", Value::Object(entries));
                    });
                }
            }
            None => {
                if let Some(name) = entries.keys().next() {
                    return Err(serialize_error(format!(
                        "serde wrote a field {name:?} that the type does not declare (a \
                         custom Serialize?); a row has a column for each declared field only"
                    )));
                }
            }
        }
        let key_texts = model
            .natural_key_fields()
            .map(|field| {
                let column = table.column_of(field)?;
                let position = table.sent.iter().position(|&sent| sent == column)?;
                texts.get(position).map(str::to_owned)
            })
            .collect();
        table.row_sizes.saw(&mut texts);
        Ok(PreparedRow {
            light: LightRow {
                prepared,
                key_texts,
                guarded,
            },
            texts,
        })
    }

    /// The row's value of sent column `index` of `table`.
    pub fn value_of(&self, table: &Layout, index: usize) -> Option<&str> {
        let position = table.sent.iter().position(|&sent| sent == index)?;
        self.sent_value(table, position)
    }

    /// The text of the sent column at `position` (in [`Layout::sent`] order) of `table`, the
    /// table the row was prepared for.
    pub fn sent_value<'r>(&'r self, table: &Layout, position: usize) -> Option<&'r str> {
        match table.columns[table.sent[position]].content {
            Content::Id => Some(&self.id_text),
            Content::Hash => Some(&self.hash),
            Content::VersionKey => self.version_key.as_deref(),
            Content::Stored(_) | Content::Digests | Content::Extra => self.texts.get(position),
        }
    }

    /// How many sent columns the row holds a value for: as many as `table` sends, for the table
    /// it was prepared for.
    // Only PostgreSQL's column arrays check it (a short one would be padded with NULLs).
    #[cfg_attr(not(feature = "_postgres"), allow(dead_code))]
    pub fn sent_len(&self) -> usize {
        self.texts.len()
    }

    /// The parameters of the pinned replacement after the sent columns: the stored hash,
    /// digests, version key and version, and guarded values, as read.
    /// The statement's conditions follow the table's columns, and so do these.
    pub fn pinned_parameters(&self, table: &Layout, stored: &StoredRow) -> Vec<Pinned> {
        let text = |text: &Option<String>| Pinned {
            text: text.clone(),
            float: false,
        };
        let value = |field: &Field, text: &Option<String>| Pinned {
            text: text.clone(),
            float: shape_of(table, field) == ColumnShape::Float,
        };
        let mut parameters = vec![text(&stored.hash)];
        if table.column_with(Content::Digests).is_some() {
            parameters.push(text(&stored.digests_text));
        }
        if table.column_with(Content::VersionKey).is_some() {
            parameters.push(text(&stored.version_key));
            if let Some(field) = self.model.version_field() {
                parameters.push(value(field, &stored.version_value));
            }
        }
        parameters.extend(
            self.model
                .digested_fields()
                .zip(&stored.guarded_values)
                .map(|(field, text)| value(field, text)),
        );
        parameters
    }
}

/// A stored value the pinned replacement compares its row with
/// ([`PreparedRow::pinned_parameters`]): its text as read, and whether its column holds a float,
/// which a driver whose text of a float loses digits binds as the float itself.
pub(crate) struct Pinned {
    pub text: Option<String>,
    // Only SQLite binds a float as one: PostgreSQL's text of it gives it back.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub float: bool,
}

/// The text sent for `value` (`None`: serde left the field out) in `column`, or what the column
/// expects if `value` is of another kind. Absent values are NULL, and so are nulls, but in a
/// `jsonb` column where NULL reads back as absent: there a null is JSON `null`, so that it reads
/// back as the null serde wrote, not as the field's default.
pub(crate) fn column_text(
    column: &TableColumn,
    value: Option<&Value>,
) -> Result<Option<String>, &'static str> {
    let mut text = String::new();
    Ok(write_column_text(column, value, &mut text)?.then_some(text))
}

/// Writes the text [`column_text`] sends for `value` to `out`, and says whether there is one
/// (`false`: NULL, and nothing written), or what the column expects.
pub(crate) fn write_column_text(
    column: &TableColumn,
    value: Option<&Value>,
    out: &mut impl fmt::Write,
) -> Result<bool, &'static str> {
    let Some(value) = value else {
        return Ok(false);
    };
    // Writing to a `String` or to nothing cannot fail.
    let _ = match (column.shape, value) {
        (ColumnShape::Structured, Value::Null) if column.null_is_absent => out.write_str("null"),
        (_, Value::Null) => return Ok(false),
        (ColumnShape::Text, Value::String(text)) => out.write_str(text),
        (ColumnShape::Text, _) => return Err("text"),
        (ColumnShape::Integer, Value::Number(number)) => {
            let number = number.as_i64().ok_or("an integer in i64's range")?;
            write!(out, "{number}")
        }
        (ColumnShape::Integer, _) => return Err("an integer"),
        (ColumnShape::Float, Value::Number(number)) => write!(out, "{number}"),
        (ColumnShape::Float, _) => return Err("a number"),
        (ColumnShape::Boolean, Value::Bool(flag)) => write!(out, "{flag}"),
        (ColumnShape::Boolean, _) => return Err("a boolean"),
        _ => write!(out, "{value}"),
    };
    Ok(true)
}

/// A text written nowhere: where only whether a value has a column's text matters.
pub(crate) struct Discard;

impl fmt::Write for Discard {
    fn write_str(&mut self, _text: &str) -> fmt::Result {
        Ok(())
    }
}

/// The refusal of a non-finite float that only a `double precision` column could hold.
fn non_finite_outside_float(name: &str, float: f64) -> String {
    json::JsonError::NonFinite {
        path: crate::push::path_step(name),
        value: float,
    }
    .message()
}

/// The shape of `field`'s column.
pub(crate) fn shape_of(table: &Layout, field: &Field) -> ColumnShape {
    table
        .column_of(field)
        .map_or(ColumnShape::Structured, |index| table.columns[index].shape)
}

/// A stored value, read back as text from its column, as the JSON value serde wrote (a
/// non-finite float, which JSON cannot hold, as the text PostgreSQL wrote).
pub(crate) fn stored_value(table: &Layout, field: &Field, text: &str) -> Value {
    value_from_text(shape_of(table, field), text)
}

/// A column's value of `shape`, read back as text, as the JSON value serde wrote (a
/// non-finite float, which JSON cannot hold, as its text).
pub(crate) fn value_from_text(shape: ColumnShape, text: &str) -> Value {
    let parsed = match shape {
        ColumnShape::Text => return Value::from(text),
        ColumnShape::Integer => text.parse::<i64>().ok().map(Value::from),
        ColumnShape::Float => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        ColumnShape::Boolean => Some(Value::Bool(text == "true")),
        _ => serde_json::from_str(text).ok(),
    };
    parsed.unwrap_or_else(|| Value::from(text))
}

/// The digest of a float JSON cannot hold, as the content hash encodes it.
fn float_digest(float: f64) -> Result<Option<ShortText>, String> {
    crate::hash::guard_digest(&float, false)
}

/// A row of `table`, its columns as JSON (PostgreSQL's `to_jsonb` of the row, SQLite's values by
/// their shapes), read as `T`: the one reading of `get`, `find`, the audit and the adoption.
pub(crate) fn row_as<T: serde::de::DeserializeOwned>(
    table: &Layout,
    stored: serde_json::Map<String, Value>,
) -> Result<T, String> {
    json::from_cells(row_cells(table, stored))
}

/// The stored fields of a row as serde reads them: idem's own columns left out, the entries of
/// flattened fields back beside the others, a column the row left out (NULL where
/// serde may do without the field, [`Column::may_be_absent`](crate::Column::may_be_absent)) as
/// absent, any other NULL as null, and NaN and the infinities as floats (held as their text).
fn row_cells(table: &Layout, stored: serde_json::Map<String, Value>) -> Vec<(String, Cell)> {
    let mut cells = Vec::with_capacity(stored.len());
    for (name, value) in stored {
        let Some(column) = table.column_named(&name).map(|index| &table.columns[index]) else {
            // A column the model does not know (added by a migration): not the type's.
            continue;
        };
        match (column.content, column.shape, value) {
            (Content::Extra, _, Value::Object(extra)) => {
                cells.extend(
                    extra
                        .into_iter()
                        .map(|(name, value)| (name, Cell::Json(value))),
                );
            }
            (Content::Stored(_), ColumnShape::Float, Value::String(text)) => {
                match text.parse::<f64>() {
                    Ok(float) => cells.push((name, Cell::Float(float))),
                    Err(_) => cells.push((name, Cell::Json(Value::String(text)))),
                }
            }
            (Content::Stored(_), _, value) => cells.push((name, Cell::Json(value))),
            // The id, the hash, the digests, the version key and the op ids are idem's.
            _ => {}
        }
    }
    cells
}

/// How `doc`'s light preparation (`LightRow::new`) compares with its whole one
/// (`PreparedRow::new`) on the table of `T`, for the tests that hold the first to the
/// second: `Ok(true)` where the light one vouched for the document, both agree on all a
/// lookup sends and a judgement reads, and the row completed from the light one
/// (`PreparedRow::completed`) sends what the whole one sends; `Ok(false)` where it did not
/// vouch (the whole one then decides, refusal included); `Err` says how they disagree.
pub fn light_row_agreement<T: Idempotent + Serialize>(doc: &T) -> Result<bool, String> {
    let table = Layout::new(&T::MODEL, &T::stored_columns());
    let light = LightRow::new(doc, &table);
    let whole = PreparedRow::new(doc, &table);
    let (light, whole) = match (light, whole) {
        (Ok(None), _) => return Ok(false),
        (Ok(Some(light)), Ok(whole)) => {
            let completed =
                PreparedRow::completed(&light, doc, &table).map_err(|error| error.to_string())?;
            for position in 0..table.sent.len() {
                let (sent, expected) = (
                    completed.sent_value(&table, position),
                    whole.sent_value(&table, position),
                );
                if sent != expected {
                    return Err(format!(
                        "completed column {:?}: {sent:?}, whole {expected:?}",
                        table.columns[table.sent[position]].name
                    ));
                }
            }
            (light, whole.light)
        }
        (Ok(Some(_)), Err(refusal)) => {
            return Err(format!("vouched for a document the row refuses: {refusal}"))
        }
        (Err(light), Err(whole)) if light.to_string() == whole.to_string() => return Ok(false),
        (Err(light), whole) => {
            return Err(format!(
                "refused with {light}, where the row gives {whole:?}"
            ))
        }
    };
    match light_parts(&light) == light_parts(&whole) {
        true => Ok(true),
        false => Err(format!(
            "light: {}\nwhole: {}",
            light_parts(&light),
            light_parts(&whole)
        )),
    }
}

/// How `doc`'s row straight from what serde writes (`scan::walk`) compares with its row
/// through JSON, on the table of `T`, for the tests that hold the first to the second:
/// `Ok(true)` where the walk vouched for the document and both rows are the same (the extra
/// column's entries compared as JSON, whatever their order), `Ok(false)` where it did not;
/// `Err` says how they differ.
pub fn row_encoding_agreement<T: Idempotent + Serialize>(doc: &T) -> Result<bool, String> {
    let table = Layout::new(&T::MODEL, &T::stored_columns());
    let id = doc.id().map_err(|error| error.to_string())?;
    let (walked, json) = match (
        PreparedRow::walked(doc, id, &table),
        PreparedRow::through_json(doc, id, &table),
    ) {
        (Ok(None), _) => return Ok(false),
        (Ok(Some(walked)), Ok(json)) => (walked, json),
        (Ok(Some(_)), Err(refusal)) => {
            return Err(format!(
                "walked a document the JSON encoding refuses: {refusal}"
            ))
        }
        (Err(walked), Err(json)) if walked.to_string() == json.to_string() => return Ok(false),
        (Err(walked), json) => {
            return Err(format!(
                "refused with {walked}, where the JSON encoding gives {json:?}"
            ))
        }
    };
    if light_parts(&walked.light) != light_parts(&json.light) {
        return Err(format!(
            "walked: {}\njson:   {}",
            light_parts(&walked.light),
            light_parts(&json.light)
        ));
    }
    for (position, &index) in table.sent.iter().enumerate() {
        let (walked, json) = (
            walked.sent_value(&table, position),
            json.sent_value(&table, position),
        );
        let column = &table.columns[index];
        let same = match (column.content, walked, json) {
            (Content::Extra, Some(walked), Some(json)) => {
                serde_json::from_str::<Value>(walked).ok() == serde_json::from_str(json).ok()
            }
            _ => walked == json,
        };
        if !same {
            return Err(format!(
                "column {:?}: walked {walked:?}, json {json:?}",
                column.name
            ));
        }
    }
    Ok(true)
}

/// Documents of `T` prepared as rows of its table, as the SQL stores prepare each row they
/// write, for the tests that count what preparing a row costs.
pub struct RowPreparation<T> {
    table: Layout,
    of: std::marker::PhantomData<fn(&T)>,
}

impl<T: Idempotent + Serialize> RowPreparation<T> {
    /// The preparation of rows of `T`'s table.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        RowPreparation {
            table: Layout::new(&T::MODEL, &T::stored_columns()),
            of: std::marker::PhantomData,
        }
    }

    /// Prepares `doc`'s whole row, then drops it: how many of its sent columns hold a text.
    pub fn prepare(&self, doc: &T) -> Result<usize, String> {
        let row = PreparedRow::new(doc, &self.table).map_err(|error| error.to_string())?;
        Ok((0..self.table.sent.len())
            .filter(|&position| row.sent_value(&self.table, position).is_some())
            .count())
    }
}

/// All a lookup sends and a judgement reads of `row`, as text to compare.
fn light_parts(row: &LightRow) -> String {
    let digests: Vec<(&'static str, Option<&str>)> = row
        .digests
        .iter()
        .map(|(field, digest)| (field.stored_name(), digest.as_deref()))
        .collect();
    format!(
        "id {} hash {} version key {:?} document {:?} digests {:?} keys {:?} guarded {:?}",
        row.id_text,
        row.hash,
        row.version_key,
        row.document(),
        digests,
        row.key_texts,
        row.guarded
    )
}
