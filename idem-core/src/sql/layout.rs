//! A type's table as every SQL backend lays it out: one column per stored field, in declaration
//! order after the id, then idem's own (the content hash, the guarded fields' digests, the
//! version's order key, a flattened field's entries); which of them a write sends; and where
//! each field's column is. The types of the columns and the statements are each dialect's.

use crate::column::{Column, ColumnShape};
use crate::model::{
    Field, Model, Role, EXTRA_FIELDS_FIELD, FROZEN_DIGESTS_FIELD, ID_FIELD, VERSION_KEY_FIELD,
};

/// What a column of idem's table holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Content {
    /// The derived id.
    Id,
    /// A field serde writes, with its role if it has one.
    Stored(Option<&'static Field>),
    /// The content hash.
    Hash,
    /// The one digest of the guarded fields ([`crate::hash::frozen_digest`]), as bytes; sent and
    /// read back as hex.
    Digests,
    /// The version's order key.
    VersionKey,
    /// The entries of flattened fields (JSON object).
    Extra,
}

/// One column: its name (the stored name), its SQL type and what it holds.
#[derive(Clone, Debug)]
pub(crate) struct TableColumn {
    pub name: &'static str,
    pub shape: ColumnShape,
    pub content: Content,
    /// Whether a NULL here reads back as the field absent (serde may do without it), not as null.
    pub null_is_absent: bool,
}

impl TableColumn {
    pub fn role(&self) -> Option<Role> {
        match self.content {
            Content::Stored(Some(field)) => Some(field.role()),
            _ => None,
        }
    }

    /// Whether the value is sent with each write (pushed lists start empty by default).
    pub fn is_sent(&self) -> bool {
        self.role() != Some(Role::Pushed)
    }

    /// Whether an upsert that replaces the row writes it: not the id, the natural key (equal by
    /// the conflict), nor what other routes own.
    pub fn is_replaced(&self) -> bool {
        self.content != Content::Id
            && !matches!(
                self.role(),
                Some(
                    Role::Key
                        | Role::IdempotencyKey
                        | Role::Tombstone
                        | Role::Pushed
                        | Role::Effect
                )
            )
    }
}

/// A type's columns, in table order, and the ones a write sends.
#[derive(Debug)]
pub(crate) struct Layout {
    pub model: &'static Model,
    /// The type's stored fields the table was made of, to tell it from another type's table of
    /// the same name.
    stored: Vec<Column>,
    /// Every column, in table order.
    pub columns: Vec<TableColumn>,
    /// The indexes into `columns` of the values sent with each write, in parameter order.
    pub sent: Vec<usize>,
    /// The stored names of the guarded fields, then of the natural-key fields: the values a
    /// pass over a document picks ([`super::scan::walk`]), named once here rather than for
    /// every document.
    pub picked_names: Vec<&'static str>,
    /// The size of the last row prepared for the table, which the next one starts with room for.
    pub row_sizes: super::texts::RowSizes,
    /// The name of the unique constraint on the natural key that `ensure_table` creates.
    pub natural_key_constraint: String,
}

impl Layout {
    /// The layout of the type with `model` and `stored` fields.
    pub fn new(model: &'static Model, stored: &[Column]) -> Layout {
        let mut columns = vec![TableColumn {
            name: ID_FIELD,
            shape: ColumnShape::Text,
            content: Content::Id,
            null_is_absent: false,
        }];
        let mut flattened = false;
        for column in stored {
            if column.shape() == ColumnShape::Flattened {
                flattened = true;
                continue;
            }
            let field = model
                .fields()
                .iter()
                .find(|field| field.stored_name() == column.stored_name());
            columns.push(TableColumn {
                name: column.stored_name(),
                shape: column.shape(),
                content: Content::Stored(field),
                null_is_absent: column.can_be_absent(),
            });
        }
        let extra = |name, content| TableColumn {
            name,
            shape: ColumnShape::Structured,
            content,
            null_is_absent: true,
        };
        columns.push(extra(model.hash_field(), Content::Hash));
        if model.digested_fields().next().is_some() {
            columns.push(extra(FROZEN_DIGESTS_FIELD, Content::Digests));
        }
        if model.version_field().is_some() {
            columns.push(extra(VERSION_KEY_FIELD, Content::VersionKey));
        }
        if flattened {
            columns.push(extra(EXTRA_FIELDS_FIELD, Content::Extra));
        }
        let sent = (0..columns.len())
            .filter(|&index| columns[index].is_sent())
            .collect();
        Layout {
            model,
            stored: stored.to_vec(),
            columns,
            sent,
            picked_names: model
                .digested_fields()
                .chain(model.natural_key_fields())
                .map(|field| field.stored_name())
                .collect(),
            row_sizes: Default::default(),
            natural_key_constraint: format!("{}_idem_natural_key", model.collection()),
        }
    }

    /// Whether this is the table of the type with `model` and `stored` fields.
    pub fn is_of(&self, model: &Model, stored: &[Column]) -> bool {
        *self.model == *model && self.stored == stored
    }

    /// The column index of a stored field.
    pub fn column_of(&self, field: &Field) -> Option<usize> {
        self.column_named(field.stored_name())
    }

    /// The column index of the stored name `name`.
    pub fn column_named(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|column| column.name == name)
    }

    /// The column that holds `content`.
    pub fn column_with(&self, content: Content) -> Option<usize> {
        self.columns
            .iter()
            .position(|column| column.content == content)
    }

    /// The columns an insert of `statement` writes, as positions in `sent` order: all sent
    /// columns, the tombstone only for a delete (a row starts live).
    #[cfg(feature = "_sql_store")]
    pub fn inserted(&self, statement: super::dialect::Statement) -> Vec<usize> {
        (0..self.sent.len())
            .filter(|&position| {
                statement == super::dialect::Statement::Delete
                    || self.columns[self.sent[position]].role() != Some(Role::Tombstone)
            })
            .collect()
    }

    /// The natural-key columns' names, in [`crate::model::Model::natural_key_fields`] order.
    #[cfg(any(feature = "_postgres", feature = "_marker_store"))]
    pub fn natural_key_names(&self) -> Vec<&'static str> {
        self.model
            .natural_key_fields()
            .map(|field| field.stored_name())
            .collect()
    }

    /// The shape of the column named `name`, if the table has one.
    #[cfg(feature = "_marker_store")]
    pub fn shape_named(&self, name: &str) -> Option<ColumnShape> {
        self.column_named(name)
            .map(|index| self.columns[index].shape)
    }

    /// What a row that stopped a write holds, in the order every SQL driver reads it back
    /// ([`crate::sql::row::StoredRow::from_texts`]): its id, whether it is deleted, its hash,
    /// digests and version key, the guarded fields' values and the version field's; each an
    /// expression over the row `t`, in the dialect's `words`, with its `read_of` a column
    /// (`read_of(alias, name)`).
    #[cfg(any(feature = "_postgres", feature = "_marker_store"))]
    pub fn stored_state_columns(
        &self,
        t: &str,
        words: &super::words::Words,
        read_of: impl Fn(&str, &str) -> String,
    ) -> Vec<String> {
        let quote = words.quote;
        let of = |content: Content| {
            let column = self
                .column_with(content)
                .map_or("NULL".to_owned(), |index| {
                    format!("{t}.{}", quote(self.columns[index].name))
                });
            let column = match content {
                Content::Digests => (words.to_hex)(&column),
                _ => column,
            };
            format!("{column}{}", words.text_cast)
        };
        let tombstoned = match self.model.tombstone_field() {
            Some(field) => format!("{t}.{} IS NOT NULL", quote(field.stored_name())),
            None => words.never_deleted.to_owned(),
        };
        let hash = format!("{t}.{}", quote(self.model.hash_field()));
        let mut state = vec![
            format!("{t}.{}", quote(ID_FIELD)),
            tombstoned,
            words.hash_text(self.model, &hash),
            of(Content::Digests),
            of(Content::VersionKey),
        ];
        for field in self
            .model
            .digested_fields()
            .chain(self.model.version_field())
        {
            state.push(read_of(t, field.stored_name()));
        }
        state
    }
}
