//! The stored values the pinned replacement compares its row with, after the sent columns.

use super::{shape_of, PreparedRow, StoredRow};
use crate::column::ColumnShape;
use crate::model::Field;
use crate::sql::layout::{Content, Layout};

impl PreparedRow {
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
    #[cfg_attr(not(feature = "_marker_store"), allow(dead_code))]
    pub float: bool,
}
