//! Reading documents back as their type, by id or by natural key: the future the generated
//! `find` returns. Each backend leaves idem's own fields ([`Model::is_reserved`]) out of what it
//! deserializes, so a type with `#[serde(deny_unknown_fields)]` reads back what it wrote.
//!
//! [`Model::is_reserved`]: crate::model::Model::is_reserved

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::Error;

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
