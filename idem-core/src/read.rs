//! Reading documents back as their type, by id or by natural key: the future the generated
//! `find` returns. Each backend leaves idem's own fields ([`Model::is_reserved`]) out of what it
//! deserializes, so a type with `#[serde(deny_unknown_fields)]` reads back what it wrote.
//!
//! [`Model::is_reserved`]: crate::model::Model::is_reserved

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::Error;

/// Deserializes `T` from a stored document, naming where a value did not fit: `title: invalid
/// type: null, expected a string`, or `address.city: …` inside a nested value. Both backends read
/// through it, so a document that does not read as its type is reported alike.
#[cfg(any(feature = "mongodb", feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) fn read_as<'de, T, D>(stored: D) -> Result<T, String>
where
    T: serde::Deserialize<'de>,
    D: serde::Deserializer<'de>,
    D::Error: std::fmt::Display,
{
    serde_path_to_error::deserialize(stored).map_err(|error| {
        let path = error.path().to_string();
        match path.as_str() {
            // The document itself: its own message says what (`missing field `title``).
            "." => error.into_inner().to_string(),
            _ => format!("{path}: {}", error.into_inner()),
        }
    })
}

/// The future of a generated `find`: a read of the document stored under a natural key, as its
/// type, `None` if none is.
///
/// A named type, where the other generated methods return `impl Future`: `find` takes its key
/// values as `impl StoredKey`, and a returned `impl Future` would have to name those parameters
/// to capture them, which argument-position `impl Trait` cannot.
#[must_use = "a read does nothing until it is awaited"]
pub struct Finding<'a, T> {
    read: Pin<Box<dyn Future<Output = Result<Option<T>, Error>> + Send + 'a>>,
}

impl<'a, T> Finding<'a, T> {
    /// The future of `read`.
    pub(crate) fn new(read: impl Future<Output = Result<Option<T>, Error>> + Send + 'a) -> Self {
        Finding {
            read: Box::pin(read),
        }
    }
}

impl<T> Future for Finding<'_, T> {
    type Output = Result<Option<T>, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.read.as_mut().poll(cx)
    }
}

impl<T> std::fmt::Debug for Finding<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Finding")
    }
}
