//! The table of a model given at run time (`Store::audit_model`, the `idem` command), laid out
//! from the catalog's columns; how its rows are judged is [`crate::sql::judge`]'s.

use super::postgres_error;
use super::table::Table;
use super::wire::{self, Cells, Param, Wire};
use crate::column::ColumnShape;
use crate::document::DocumentRef;
use crate::error::Error;
use crate::model::Model;

/// The table of a model given at run time, laid out from the catalog: every column other than
/// idem's own is a stored field, in column order, of the shape its type has. A table that does
/// not exist, or lacks a column the model names, is an error naming it.
pub(super) async fn stored_table<C: Wire>(client: &C, model: &Model) -> Result<Table, Error> {
    let document = DocumentRef::collection(model);
    crate::trace::round_trip("SELECT");
    let rows = client
        .fetch_all(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
             WHERE a.attrelid = to_regclass(quote_ident($1)) AND a.attnum > 0 \
             AND NOT a.attisdropped ORDER BY a.attnum",
            &[Param::Text(Some(model.collection()))],
        )
        .await
        .map_err(|source| postgres_error(&document, source))?;
    let refuse = |problem: String| Error::schema_mismatch(model, problem);
    if rows.is_empty() {
        crate::trace::round_trip("SELECT");
        let place = client
            .fetch_all(
                "SELECT current_database()::text, current_setting('search_path')",
                &[],
            )
            .await
            .and_then(|rows| wire::one(rows, "SELECT"))
            .map_err(|source| postgres_error(&document, source))?;
        return Err(refuse(format!(
            "database `{}` has no table `{}` in the search path ({})",
            place.str(0).unwrap_or_default(),
            model.collection(),
            place.str(1).unwrap_or_default(),
        )));
    }
    let catalog: Vec<(String, ColumnShape)> = rows
        .iter()
        .map(|row| {
            let name = row.str(0).unwrap_or_default().to_owned();
            (name, shape_of(row.str(1).unwrap_or_default()))
        })
        .collect();
    let columns = crate::sql::judge::columns_of_model(model, &catalog).map_err(refuse)?;
    Ok(Table::new(crate::intern::model(model), &columns))
}

/// The shape of a column of type `sql_type` (as `format_type` spells it); a type idem never
/// makes is taken as structured, and its type is not checked (see `survey_table`).
pub(super) fn shape_of(sql_type: &str) -> ColumnShape {
    match sql_type {
        "text" => ColumnShape::Text,
        _ if sql_type.starts_with("character") => ColumnShape::Text,
        "bigint" | "integer" | "smallint" => ColumnShape::Integer,
        "double precision" | "real" => ColumnShape::Float,
        "boolean" => ColumnShape::Boolean,
        _ => ColumnShape::Structured,
    }
}
