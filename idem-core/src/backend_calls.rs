//! The routes from generated methods to a [`Backend`], public only through `__private`.

use std::future::Future;

use crate::backend::Backend;
use crate::document::NaturalKey;
use crate::error::Error;
use crate::idempotent::Idempotent;
use crate::outcome::{Outcome, Pushed};
use crate::read::Finding;

/// How the generated `upsert` reaches a backend. The requirements on the document are bounds on
/// the backend (`B: UpsertWith<Self>`) instead of `Self: Sync` on the method: a where clause
/// naming no generic parameter is checked where it is written, so a document type that is not
/// `Sync` could not derive at all; this way only a call to its `upsert` is refused.
pub trait UpsertWith<T: ?Sized> {
    /// [`Backend::upsert`].
    fn upsert_document<'a>(
        &'a self,
        doc: &'a T,
    ) -> impl Future<Output = Result<Outcome, Error>> + Send + 'a;
}

impl<B: Backend, T: Idempotent + serde::Serialize + Sync> UpsertWith<T> for B {
    fn upsert_document<'a>(
        &'a self,
        doc: &'a T,
    ) -> impl Future<Output = Result<Outcome, Error>> + Send + 'a {
        Backend::upsert(self, doc)
    }
}

/// How the generated `push_<field>` reaches a backend; a bound on the backend for the reason
/// given at [`UpsertWith`].
pub trait PushWith<T: ?Sized, I: ?Sized> {
    /// [`Backend::push`] to the document `doc`.
    fn push_item<'a>(
        &'a self,
        doc: &'a T,
        field: &'static str,
        item: &'a I,
    ) -> impl Future<Output = Result<Pushed, Error>> + Send + 'a;
}

impl<B, T, I> PushWith<T, I> for B
where
    B: Backend,
    T: Idempotent,
    I: serde::Serialize + Sync,
{
    fn push_item<'a>(
        &'a self,
        doc: &'a T,
        field: &'static str,
        item: &'a I,
    ) -> impl Future<Output = Result<Pushed, Error>> + Send + 'a {
        // The id is derived before the future, which then holds no reference to `doc`.
        let id = doc.id();
        async move { Backend::push::<T, I>(self, id?, field, item).await }
    }
}

/// How the generated `find` reaches a backend; a bound on the backend for the reason given at
/// [`UpsertWith`] (a type that is not `Deserialize` still derives).
pub trait FindWith<T> {
    /// [`Backend::find`].
    fn find_document<'a>(&'a self, key: NaturalKey) -> Finding<'a, T>
    where
        T: 'a;
}

impl<B, T> FindWith<T> for B
where
    B: Backend,
    T: Idempotent + serde::de::DeserializeOwned + Send,
{
    fn find_document<'a>(&'a self, key: NaturalKey) -> Finding<'a, T>
    where
        T: 'a,
    {
        Finding::new(Backend::find::<T>(self, key))
    }
}
