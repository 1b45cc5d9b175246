//! What every store checks before a push: the list named, and the item's key.

use crate::document::DocumentRef;
use crate::error::{Error, ErrorKind};
use crate::model::{Field, Model, Role};

/// The step to the field or map key `key` in a path a message shows: `.name`, or `["odd key"]`
/// for a key that is not a plain name.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) fn path_step(key: &str) -> String {
    if !key.is_empty() && key.chars().all(|c| c.is_alphanumeric() || c == '_') {
        format!(".{key}")
    } else {
        format!("[{key:?}]")
    }
}

/// The `push_by` list of `model` whose Rust name is `field`, or the refusal naming it: what both
/// backends check before a push.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) fn pushed_list(
    model: &'static Model,
    field: &'static str,
    document: &DocumentRef,
) -> Result<&'static Field, Error> {
    model
        .fields()
        .iter()
        .find(|f| f.name() == field && f.role() == Role::Pushed)
        .ok_or_else(|| Error::new(document.clone(), ErrorKind::NotAPushedField { field }))
}

/// The refusal of an item pushed to `list` whose key is a list: keys compare whole, and MongoDB
/// would match a list against each of its elements, so two items could pass for one.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) fn item_key_is_a_list(document: DocumentRef, list: &Field) -> Error {
    Error::new(
        document,
        ErrorKind::Serialize {
            message: format!(
                "the item pushed to `{}` has a list under its key `{}`; a key is compared whole, \
             so it is a scalar or a struct, not a list",
                list.name(),
                list.item_key()
            ),
        },
    )
}

/// The refusal of a push to `list` where the stored document holds `stored` there (a string,
/// a number, an object: another tool's value), to which nothing can be appended. A stored null
/// (or no value) is an empty list.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) fn stored_not_a_list(document: &DocumentRef, list: &Field, stored: &str) -> Error {
    Error::new(
        document.clone(),
        ErrorKind::Deserialize {
            message: format!(
                "`{}` is stored as {stored}, not a list, so nothing can be pushed to it; store a \
                 list (or null) there",
                list.name(),
            ),
        },
    )
}

/// `item`, pushed to `list`, as the JSON texts a SQL store binds: the item, and the value under
/// its key; refused where it has no value there, or a list.
#[cfg(any(feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) fn item_and_key_texts<I: serde::Serialize + ?Sized>(
    document: &DocumentRef,
    list: &Field,
    item: &I,
) -> Result<(String, String), Error> {
    let item = crate::sql::json::to_json(item).map_err(|error| {
        Error::new(
            document.clone(),
            ErrorKind::Serialize {
                message: error.message(),
            },
        )
    })?;
    let item_key = item_key(document, list, &item)?;
    Ok((item.to_string(), item_key.to_string()))
}

/// The value under the key of `item` (as JSON), pushed to `list`: refused where it has none
/// (absent, or null), or a list. Every store's rule.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) fn item_key<'i>(
    document: &DocumentRef,
    list: &Field,
    item: &'i serde_json::Value,
) -> Result<&'i serde_json::Value, Error> {
    let Some(item_key) = item.get(list.item_key()).filter(|key| !key.is_null()) else {
        let written = item.as_object().into_iter().flat_map(|entries| {
            entries
                .iter()
                .filter(|(_, value)| !value.is_null())
                .map(|(name, _)| name)
        });
        return Err(item_without_key(document.clone(), list, written));
    };
    if item_key.is_array() {
        return Err(item_key_is_a_list(document.clone(), list));
    }
    Ok(item_key)
}

/// The refusal of an item pushed to `list` with no value under its key: absent, or null, since
/// items without a key would all fold into the first one pushed. `written` lists the stored
/// names the item writes a value under, in its order.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) fn item_without_key<'a>(
    document: DocumentRef,
    list: &Field,
    written: impl IntoIterator<Item = &'a String>,
) -> Error {
    Error::new(
        document,
        ErrorKind::ItemWithoutKey {
            field: list.name(),
            item_key: list.item_key(),
            written: written.into_iter().cloned().collect(),
        },
    )
}
