//! One document ready to write as a row: the text of each sent column, its hash, digests and
//! version key; and what a statement returns of a stored row, read as the engine asks
//! (the SQL drivers').
//!
//! A document's light form, all a lookup sends and a judgement reads of it ([`light`]); its
//! whole row, straight from what serde writes ([`prepared`]) or through its JSON
//! ([`through_json`]); the stored values its pinned replacement compares with ([`pinned`]); a
//! stored row as a statement returns it ([`stored`]); the values a judgement reads of either
//! ([`reader`]); the text a column is sent for a value ([`mod@column_text`]) and a stored value
//! read back from it ([`read_back`]); and, for the tests, how the preparations compare
//! ([`test_support`]).

mod column_text;
mod light;
mod pinned;
mod prepared;
mod read_back;
mod reader;
mod stored;
mod test_support;
mod through_json;

pub(crate) use column_text::{column_text, write_column_text, Discard};
pub(crate) use light::{prepare_light, LightRow};
// Named by path only in docs: the drivers bind what `PreparedRow::pinned_parameters` returns.
#[allow(unused_imports)]
pub(crate) use pinned::Pinned;
pub(crate) use prepared::PreparedRow;
pub(crate) use read_back::{row_as, shape_of, stored_value};
// Only the sqlx stores read a column's value back by its shape alone.
#[cfg_attr(not(feature = "_marker_store"), allow(unused_imports))]
pub(crate) use read_back::value_from_text;
pub(crate) use reader::RowReader;
pub(crate) use stored::{digest_in, StoredRow};
pub use test_support::{light_row_agreement, row_encoding_agreement, RowPreparation};
