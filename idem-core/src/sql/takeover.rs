//! The audit of a table before idem takes it over, for any SQL dialect: what the table lacks
//! (the dialect's table check), then one pass over its rows in natural-key order that checks
//! each row's id and content hash against the row read as the type ([`crate::sql::audit`]);
//! and what an adoption reads first: the table of a model given at run time, and whether the
//! model is the one the rows were written with.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use super::dialect::SqlDialect;
use super::store::Store;
use super::wire::{Cells, DbFailure, Param, Wire};
use crate::audit::{AuditProgress, AuditReport, ModelSample, UnknownField};
use crate::column::ColumnShape;
use crate::document::DocumentRef;
use crate::error::Error;
use crate::id::Id;
use crate::idempotent::Idempotent;
use crate::model::{Model, ID_FIELD};
use crate::sql::audit::{catalog_unknowns, columns_without, diagnose, typed_unknowns, RowScan};
use crate::sql::judge::{AdoptOptions, Reading};
use crate::sql::layout::{Content, Layout};
use crate::sql::row::value_from_text;
use crate::trace::{Call, CallKind};

// The methods are the crate's own: each store's module gives them their public signatures.
#[allow(private_bounds)]
impl<D: SqlDialect> Store<D> {
    /// The audit of `T`'s table, through `wire`.
    pub(crate) async fn audit_on<T>(
        &self,
        wire: &impl Wire,
        progress: &mut (impl FnMut(&AuditProgress) + Send),
    ) -> Result<AuditReport, Error>
    where
        T: Idempotent + Serialize + DeserializeOwned,
    {
        let call = Call::new(CallKind::Audit, T::MODEL.collection(), || None::<Id>);
        let table = D::store_table(self, &T::MODEL, &T::stored_columns());
        super::store::run::<D, _>(
            call,
            scan::<D>(wire, &table, Reading::typed::<T>(), progress),
        )
        .await
    }

    /// The audit of a model given at run time, through `wire`.
    pub(crate) async fn audit_model_on(
        &self,
        wire: &impl Wire,
        model: &Model,
        field_order: &[&str],
        progress: &mut (impl FnMut(&AuditProgress) + Send),
    ) -> Result<AuditReport, Error> {
        let call = Call::new(CallKind::Audit, model.collection(), || None::<Id>);
        super::store::run::<D, _>(call, async move {
            let (table, unknown) = stored_table(self, wire, model, field_order).await?;
            let reading = Reading::Stored { field_order };
            let mut report = scan::<D>(wire, &table, reading, progress).await?;
            let found = std::mem::replace(&mut report.unknown_fields, unknown);
            for field in found {
                crate::audit::note_unknown(&mut report.unknown_fields, field);
            }
            Ok(report)
        })
        .await
    }
}

/// Where a row is, for the adoption's pages and the audit's report: the dialect's locator of a
/// row (PostgreSQL's `ctid`) as selected after the row's columns, else nothing.
pub(crate) fn located<D: SqlDialect>(table: &D::Table) -> String {
    D::row_locator(table).map_or("NULL".to_owned(), |locator| D::read_of(table, "t", locator))
}

/// Where the row `stored` is, found without its `_id`: the dialect's locator (`cell`, selected
/// as [`located`] selects it), else the texts of its natural key as a JSON array, which the
/// natural key's unique constraint keeps to one row; `None` for a key with a NULL part, which
/// no unique constraint keeps to one row.
pub(crate) fn location_of<D: SqlDialect>(
    table: &D::Table,
    stored: &Map<String, Value>,
    cell: Option<String>,
) -> Option<String> {
    if D::row_locator(table).is_some() {
        return cell;
    }
    let key: Option<Vec<String>> = (table.model.natural_key_fields())
        .map(|field| {
            let shape = table.column_of(field).map(|at| table.columns[at].shape);
            match stored.get(field.stored_name()) {
                // A column of JSON holds its text, quotes and all (a newtype's `"a"`), and may
                // hold a JSON null, which is a value: a NULL part is none of a page's rows.
                Some(value) if shape == Some(ColumnShape::Structured) => Some(value.to_string()),
                None | Some(Value::Null) => None,
                Some(Value::String(text)) => Some(text.clone()),
                Some(other) => Some(other.to_string()),
            }
        })
        .collect();
    key.map(|key| Value::from(key).to_string())
}

/// Whether the row `t`'s natural key is whole: no part of it NULL. The rows without an `_id`
/// that an adoption without a locator finds by their key (`whole`), or the ones it cannot
/// (`!whole`): no unique constraint keeps a key with a NULL part to one row, and a row
/// comparison with one is never true, so a page after another would never reach them.
pub(crate) fn key_is_whole<D: SqlDialect>(table: &D::Table, whole: bool) -> String {
    let parts: Vec<String> = (table.natural_key_names().into_iter())
        .map(|name| format!("t.{} IS NOT NULL", D::quote(name)))
        .collect();
    let parts = match parts.is_empty() {
        true => "1 = 1".to_owned(),
        false => parts.join(" AND "),
    };
    match whole {
        true => format!("({parts})"),
        false => format!("NOT ({parts})"),
    }
}

/// A row's place as a report names it, at `location` ([`location_of`]): `ctid (0,1)`, valid
/// until the row is next written, or `natural key ["a","en"]`.
pub(crate) fn place<D: SqlDialect>(table: &D::Table, location: &str) -> String {
    format!(
        "{} {location}",
        D::row_locator(table).unwrap_or("natural key")
    )
}

/// The table of a model given at run time as an adoption moves its rows: refused (nothing
/// moved) for a type without a derived id, a table idem cannot write, or a model the rows were
/// not written with (unless `options` say otherwise); read without the columns that are not
/// the model's fields, so that the hashes stored are the type's.
pub(crate) async fn adoptable_table<D: SqlDialect>(
    store: &Store<D>,
    wire: &impl Wire,
    model: &Model,
    field_order: &[&str],
    options: &AdoptOptions,
) -> Result<D::Table, Error> {
    crate::audit::check_derived_ids(model)?;
    let collection = DocumentRef::collection(model);
    let (table, unknown) = stored_table(store, wire, model, field_order).await?;
    let problems = D::table_problems(wire, &table, &collection, false).await?;
    if let Some(problem) = problems.into_iter().next() {
        let problem = format!("{problem}; nothing was moved");
        return Err(Error::schema_mismatch(model, problem));
    }
    let sample = model_sample::<D>(wire, &table, field_order).await?;
    let (ignore, allow) = (options.ignore_model_check, options.allow_unknown_fields);
    let unknown = sample.checked(model, unknown, ignore, allow)?;
    let columns = columns_without(&table, &unknown);
    Ok(D::store_table(store, table.model, &columns))
}

/// Every column of `table`, as the dialect selects a row ([`SqlDialect::row_select`]): the
/// read of a table idem can write, whose columns are all there.
pub(crate) fn select_every_column<D: SqlDialect>(table: &D::Table) -> (String, Vec<usize>) {
    let every: Vec<String> = (table.columns.iter())
        .map(|column| column.name.to_owned())
        .collect();
    D::row_select(table, &every)
}

/// Reads the sample an adoption of `table` (its model given at run time) checks before it
/// moves anything ([`ModelSample`]): rows stored under a ULID.
pub(crate) async fn model_sample<'t, D: SqlDialect>(
    wire: &impl Wire,
    table: &'t D::Table,
    field_order: &[&str],
) -> Result<ModelSample<'t>, Error> {
    let document = DocumentRef::collection(table.model);
    let (list, columns) = select_every_column::<D>(table);
    let sql = format!(
        "SELECT {list}, NULL FROM {} t WHERE length(t.{}) = 26 LIMIT {}",
        D::quote(table.model.collection()),
        D::quote(ID_FIELD),
        crate::model_check::DOCUMENTS_EXAMINED
    );
    let error = |source| D::error(&document, source);
    crate::trace::round_trip("SELECT");
    let rows = wire.fetch_all(&sql, &[]).await.map_err(error)?;
    let mut sample = ModelSample::new(table.model);
    for row in &rows {
        // A sample: a row that does not read is left out of it, and the scan reports it.
        let Ok((stored, _)) = D::row_read(table, &columns, row, &document) else {
            continue;
        };
        if let Some(id) = stored.get(ID_FIELD).and_then(Value::as_str) {
            sample.check.examine(id, &stored);
        }
        diagnose(&mut sample.diagnosis, table, field_order, &stored);
    }
    Ok(sample)
}

/// The audit's schema check and one pass over the rows of `table`, read as `reading` says.
async fn scan<D: SqlDialect>(
    wire: &impl Wire,
    table: &D::Table,
    reading: Reading<'_>,
    progress: &mut (impl FnMut(&AuditProgress) + Send),
) -> Result<AuditReport, Error> {
    let model = table.model;
    let document = DocumentRef::collection(model);
    let error = |source| D::error(&document, source);
    let mut report = AuditReport::new(model.collection(), reading.is_typed());
    // A model given at run time does not know the stored fields' types.
    report.table_problems = D::table_problems(wire, table, &document, reading.is_typed()).await?;
    let present: Vec<String> = catalog::<D>(wire, model, &document)
        .await?
        .into_iter()
        .map(|(name, _, _)| name)
        .collect();
    if present.is_empty() {
        return Ok(report);
    }
    if reading.is_typed() {
        report.unknown_fields = typed_unknowns(table, present.iter().map(String::as_str));
    }
    let name = D::quote(model.collection());
    let count = D::row_count_sql(table);
    crate::trace::round_trip("SELECT");
    let total = wire
        .fetch_optional(&count, &[])
        .await
        .map_err(error)?
        .map(|row| row.integer(0))
        .transpose()
        .map_err(error)?
        .flatten();
    let (list, columns) = D::row_select(table, &present);
    // The natural key, in the order of its bytes (under a collation that compares loosely,
    // rows of one key could be apart, and a duplicate missed), then, among the rows whose key
    // has a NULL part, the locator or `_id`: the columns the table has.
    let has = |name: &str| present.iter().any(|present| present == name);
    let mut order: Vec<String> = (model.natural_key_fields())
        .map(|field| field.stored_name())
        .filter(|name| has(name))
        .map(|name| (D::words().byte_order)(&format!("t.{}", D::quote(name))))
        .collect();
    match D::row_locator(table) {
        Some(locator) => order.push(format!("t.{locator}")),
        None if has(ID_FIELD) => order.push(format!("t.{}", D::quote(ID_FIELD))),
        None => {}
    }
    let order = match order.is_empty() {
        true => String::new(),
        false => format!(" ORDER BY {}", order.join(", ")),
    };
    let sql = format!(
        "SELECT {list}, {} FROM {name} t{order}",
        located::<D>(table)
    );
    crate::trace::round_trip("SELECT");
    let mut scan = RowScan::new(table, reading);
    let total = total.and_then(|total| u64::try_from(total).ok());
    wire.scan(&sql, &[], error, |row| {
        let (stored, next) = D::row_read(table, &columns, row, &document)?;
        let location = location_of::<D>(table, &stored, row.text(next).map_err(error)?);
        let location = match location {
            Some(location) => place::<D>(table, &location),
            None => format!("row {}", report.scanned + 1),
        };
        scan.row(&mut report, stored, &location);
        progress(&AuditProgress::new(report.scanned, total));
        Ok(())
    })
    .await?;
    scan.finish(&mut report);
    Ok(report)
}

/// The table's columns as the dialect's catalog lists them, in their order: each one's name,
/// declared type and whether it is (part of) the table's primary key. Empty if the table does
/// not exist.
async fn catalog<D: SqlDialect>(
    wire: &impl Wire,
    model: &Model,
    document: &DocumentRef,
) -> Result<Vec<(String, String, bool)>, Error> {
    let error = |source| D::error(document, source);
    crate::trace::round_trip("SELECT");
    let rows = wire
        .fetch_all(D::COLUMNS, &[Param::Text(Some(model.collection()))])
        .await
        .map_err(error)?;
    let mut columns = Vec::with_capacity(rows.len());
    for row in &rows {
        columns.push((
            row.text(0).map_err(error)?.unwrap_or_default(),
            row.text(1).map_err(error)?.unwrap_or_default(),
            row.integer(2).map_err(error)?.unwrap_or(0) > 0,
        ));
    }
    Ok(columns)
}

/// The table of a model given at run time, laid out from its schema, as `store` writes it.
///
/// Its columns that are not fields of the model are left out of the layout, and returned: the
/// table's own key (a primary key other than `_id`, which the database fills itself), and,
/// where the model lists its fields (`field_order`), each column it does not list.
pub(crate) async fn stored_table<D: SqlDialect>(
    store: &Store<D>,
    wire: &impl Wire,
    model: &Model,
    field_order: &[&str],
) -> Result<(D::Table, Vec<UnknownField>), Error> {
    let document = DocumentRef::collection(model);
    let rows = catalog::<D>(wire, model, &document).await?;
    let refuse = |problem: String| Error::schema_mismatch(model, problem);
    if rows.is_empty() {
        let place = match D::MISSING_TABLE {
            Some(sql) => {
                crate::trace::round_trip("SELECT");
                wire.fetch_optional(sql, &[Param::Text(Some(model.collection()))])
                    .await
                    .map_err(|source| D::error(&document, source))?
                    .map(|row| row.text(0))
                    .transpose()
                    .map_err(|source| D::error(&document, source))?
                    .flatten()
            }
            None => None,
        };
        return Err(refuse(place.unwrap_or_else(|| {
            format!("the database has no table `{}`", model.collection())
        })));
    }
    let catalog: Vec<(String, ColumnShape)> = rows
        .iter()
        .map(|(name, declared, _)| (name.clone(), D::shape_of(declared)))
        .collect();
    let table_keys: Vec<String> = rows
        .iter()
        .filter(|(name, _, key)| *key && name != ID_FIELD)
        .map(|(name, _, _)| name.clone())
        .collect();
    let unknown = catalog_unknowns(
        model,
        field_order,
        catalog.iter().map(|(name, _)| name.as_str()),
        &table_keys,
    );
    let catalog: Vec<(String, ColumnShape)> = catalog
        .into_iter()
        .filter(|(name, _)| !unknown.iter().any(|field| field.name == *name))
        .collect();
    let columns = crate::sql::judge::columns_of_model(model, &catalog).map_err(refuse)?;
    let model = crate::intern::model(model);
    Ok((D::store_table(store, model, &columns), unknown))
}

/// A selected row as the JSON the SQL stores judge rows in: each column by its shape, a NULL
/// where serde may do without the field left out.
pub(crate) fn row_json<R: Cells>(
    table: &Layout,
    columns: &[usize],
    row: &R,
) -> Result<Map<String, Value>, DbFailure> {
    let mut stored = Map::new();
    for (at, &index) in columns.iter().enumerate() {
        let column = &table.columns[index];
        let text = row.text(at)?;
        let value = match (column.content, text) {
            (Content::Stored(_), None) if column.null_is_absent => continue,
            (_, None) => Value::Null,
            (Content::Stored(_), Some(text)) => value_from_text(column.shape, &text),
            (Content::Extra, Some(text)) => {
                serde_json::from_str(&text).unwrap_or(Value::String(text))
            }
            (_, Some(text)) => Value::String(text),
        };
        stored.insert(column.name.to_owned(), value);
    }
    Ok(stored)
}
