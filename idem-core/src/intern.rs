//! Names, field lists and models with the `'static` lifetime a [`Model`] holds (the derive writes
//! them as literals), for models made at run time: the `idem` command's flags, the candidates a
//! model check tries, the columns a table's catalog lists. Each distinct value is allocated once
//! for the process, so auditing a collection again allocates nothing more.
//!
//! [`Model`]: crate::model::Model

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::model::Field;

/// `name`, allocated once for the process.
pub(crate) fn name(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = names.get(name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}

/// `fields`, each distinct list allocated once for the process.
pub(crate) fn fields(fields: Vec<Field>) -> &'static [Field] {
    static LISTS: OnceLock<Mutex<Vec<&'static [Field]>>> = OnceLock::new();
    let mut lists = LISTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = lists.iter().find(|known| ***known == fields[..]) {
        return known;
    }
    let leaked: &'static [Field] = Box::leak(fields.into_boxed_slice());
    lists.push(leaked);
    leaked
}

/// `model`, each distinct one allocated once for the process.
#[cfg(any(feature = "_postgres", feature = "_sqlx_store"))]
pub(crate) fn model(model: &crate::model::Model) -> &'static crate::model::Model {
    use crate::model::Model;
    static MODELS: OnceLock<Mutex<Vec<&'static Model>>> = OnceLock::new();
    let mut models = MODELS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = models.iter().find(|known| ***known == *model) {
        return known;
    }
    let leaked: &'static Model = Box::leak(Box::new(*model));
    models.push(leaked);
    leaked
}
