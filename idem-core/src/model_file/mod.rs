//! A type's model as a file, for the tools that audit and adopt without the Rust type (the
//! `idem` command's `--model FILE`): the collection, the id scheme, the hash field and function,
//! and every stored field in declaration order with its role. Flags can describe the roles,
//! but only the type knows every field it stores and their order, which the content hash
//! follows; a file written from the type leaves nothing to guess.
//!
//! Write it from the type (a test, a build step, a small `main`), and give it to the command:
//!
//! ```
//! use idem_core::Idempotent;
//!
//! #[derive(serde::Serialize, serde::Deserialize, Idempotent)]
//! #[idem(collection = "posts")]
//! #[serde(rename_all = "camelCase")]
//! struct Post {
//!     #[idem(key)]
//!     slug: String,
//!     #[idem(timestamp)]
//!     published_at: i64,
//!     title: String,
//!     #[idem(effect)]
//!     views: i64,
//! }
//!
//! let path = std::env::temp_dir().join("posts.idem-model.json");
//! idem_core::model_file::write::<Post>(&path)?;
//! // idem audit --uri … --model posts.idem-model.json
//! let file = idem_core::model_file::ModelFile::read(&path)?;
//! assert_eq!(file.field_order(), ["slug", "publishedAt", "title", "views"]);
//! assert_eq!(file.model().collection(), "posts");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The file is JSON:
//!
//! ```json
//! {
//!   "format": "idem-model/1",
//!   "collection": "posts",
//!   "id_scheme": "v1",
//!   "hash_field": "sourceHash",
//!   "hash_algorithm": "sha256",
//!   "fields": [
//!     { "name": "slug", "role": "key" },
//!     { "name": "publishedAt", "role": "timestamp" },
//!     { "name": "title" },
//!     { "name": "views", "role": "effect" }
//!   ]
//! }
//! ```
//!
//! Each field is named as serde stores it. `role` is one of `key`, `timestamp`, `frozen`,
//! `volatile`, `version`, `tombstone`, `push_by` (with `item_key`, the stored name of the field
//! that tells items apart), `idempotency_key` and `effect`; a field without one is hashed
//! content. `optional: true` marks an `Option` field whose null means never written (a
//! `tombstone` always, a `key`, `idempotency_key`, `timestamp`, `version` or `push_by` list
//! never, a field without a role never). `"flattened": true` on a field marks a
//! `#[serde(flatten)]` one, whose entries are stored under names the type does not declare
//! (at the top, the same without naming it). Such a type is written and hashed as one map of
//! its fields and those entries, which a model given at run time cannot hash as the type does:
//! its file is refused (by [`write()`] and [`ModelFile::read`]); audit and adopt it with the type
//! (`store.audit::<T>()`, `store.adopt::<T>()`).

mod check;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::column::ColumnShape;
use crate::id::IdScheme;
use crate::idempotent::Idempotent;
use crate::model::{Field, HashAlgorithm, Model, Role};

/// The `format` a file written here carries, and the only one read.
pub const FORMAT: &str = "idem-model/1";

/// A type's model as a file holds it: what a model given at run time needs to read stored
/// documents as the type would.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    /// Always [`FORMAT`].
    pub format: String,
    /// The collection (or table).
    pub collection: String,
    /// `v1` or `joined` ([`IdScheme::name`]).
    pub id_scheme: String,
    /// The stored field holding the content hash.
    pub hash_field: String,
    /// `sha256` or `blake3`.
    pub hash_algorithm: String,
    /// Every stored field, in the order the type declares (and serde writes) them.
    pub fields: Vec<FileField>,
    /// The type has a `#[serde(flatten)]` field, not named in `fields`. [`ModelFile::of`]
    /// names it there instead ([`FileField::flattened`]). Either way the file is refused: a
    /// model given at run time cannot hash a flattened field's entries as the type does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flattened: bool,
}

/// One stored field of a [`ModelFile`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileField {
    /// The name serde stores it under.
    pub name: String,
    /// Its role (see the [module](self)'s list); none for hashed content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// For a `push_by` list: the stored name of the item field that tells items apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_key: Option<String>,
    /// An `Option` field, whose null is a value never written.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// A `#[serde(flatten)]` field, whose entries are stored beside the fields under names the
    /// type does not declare. A file holding one is refused ([`ModelFile::read`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flattened: bool,
}

/// Why a model file could not be read or written: the file, and what is wrong in it (the
/// field, with what was expected).
#[derive(Debug)]
pub struct ModelFileError {
    path: PathBuf,
    problem: String,
}

impl ModelFileError {
    fn new(path: &Path, problem: impl Into<String>) -> Self {
        ModelFileError {
            path: path.to_owned(),
            problem: problem.into(),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What is wrong, naming the field.
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

impl fmt::Display for ModelFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "model file {}: {}", self.path.display(), self.problem)
    }
}

impl std::error::Error for ModelFileError {}

/// The roles as a file names them.
const ROLES: [(&str, Role); 9] = [
    ("key", Role::Key),
    ("timestamp", Role::Timestamp),
    ("frozen", Role::Frozen),
    ("volatile", Role::Volatile),
    ("version", Role::Version),
    ("tombstone", Role::Tombstone),
    ("push_by", Role::Pushed),
    ("idempotency_key", Role::IdempotencyKey),
    ("effect", Role::Effect),
];

/// The name a file gives `role`.
pub fn role_name(role: Role) -> &'static str {
    ROLES
        .iter()
        .find(|(_, known)| *known == role)
        .map_or("", |(name, _)| name)
}

/// Writes `T`'s model to `path` as JSON ([`ModelFile::of`]). A model [`ModelFile::read`] would
/// refuse is not written: that of a type with a `#[serde(flatten)]` field, whose hashes only
/// the type computes (audit and adopt it with the type: `store.audit::<T>()`).
pub fn write<T: Idempotent>(path: impl AsRef<Path>) -> Result<(), ModelFileError> {
    let path = path.as_ref();
    let file = ModelFile::of::<T>();
    file.check()
        .map_err(|problem| ModelFileError::new(path, problem))?;
    std::fs::write(path, file.to_json())
        .map_err(|error| ModelFileError::new(path, format!("cannot be written: {error}")))
}

impl ModelFile {
    /// `T`'s model: every field serde writes ([`Idempotent::stored_columns`]), in declaration
    /// order, each with its role, a `#[serde(flatten)]` field marked [`FileField::flattened`].
    pub fn of<T: Idempotent>() -> Self {
        let model = &T::MODEL;
        let columns = T::stored_columns();
        let role_of = |name: &str| {
            model
                .fields()
                .iter()
                .find(|field| field.stored_name() == name)
        };
        let mut fields: Vec<FileField> = columns
            .iter()
            .map(|column| FileField {
                flattened: column.shape() == ColumnShape::Flattened,
                ..file_field(column.stored_name(), role_of(column.stored_name()))
            })
            .collect();
        // A role field the type does not list among its stored columns (none the derive makes).
        for field in model.fields() {
            if !fields.iter().any(|known| known.name == field.stored_name()) {
                fields.push(file_field(field.stored_name(), Some(field)));
            }
        }
        ModelFile {
            format: FORMAT.to_owned(),
            collection: model.collection().to_owned(),
            id_scheme: model.id_scheme().name().to_owned(),
            hash_field: model.hash_field().to_owned(),
            hash_algorithm: algorithm_name(model.hash_algorithm()).to_owned(),
            fields,
            flattened: false,
        }
    }

    /// The file's text: pretty-printed JSON.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Reads and checks the model file at `path`: a file the derive would refuse as a type, or
    /// of a type with a `#[serde(flatten)]` field, is an error naming the field.
    pub fn read(path: impl AsRef<Path>) -> Result<Self, ModelFileError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|error| ModelFileError::new(path, format!("cannot be read: {error}")))?;
        Self::from_json(&text).map_err(|problem| ModelFileError::new(path, problem))
    }

    /// Parses and checks a model file's text; `Err` names the field that is wrong.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let file: ModelFile = serde_json::from_str(text).map_err(|error| error.to_string())?;
        file.check()?;
        Ok(file)
    }

    /// The model the file describes. It lives as long as the process (a [`Model`] holds
    /// `'static` names, which the derive writes as literals), so it is built once and leaked:
    /// for a command line, not a server that reads many.
    pub fn model(&self) -> &'static Model {
        let fields: Vec<Field> = self
            .fields
            .iter()
            .filter_map(|field| {
                let role = role_of(field.role.as_deref()?).ok()?;
                let name = leak(&field.name);
                let built = match (role, &field.item_key) {
                    (Role::Pushed, Some(item_key)) => Field::pushed(name, name, leak(item_key)),
                    _ => Field::new(name, name, role),
                };
                Some(if field.optional {
                    built.optional()
                } else {
                    built
                })
            })
            .collect();
        let model = Model::new(
            leak(&self.collection),
            scheme_of(&self.id_scheme).unwrap_or_default(),
            leak(&self.hash_field),
            Box::leak(fields.into_boxed_slice()),
        )
        .with_hash_algorithm(algorithm_of(&self.hash_algorithm).unwrap_or_default());
        Box::leak(Box::new(model))
    }

    /// Every stored field in the type's order: the `field_order` of
    /// [`audit_model`](crate::mongo::Store::audit_model) and `adopt_model`.
    pub fn field_order(&self) -> Vec<&str> {
        self.fields
            .iter()
            .filter(|field| !field.flattened)
            .map(|field| field.name.as_str())
            .collect()
    }
}

fn file_field(name: &str, field: Option<&Field>) -> FileField {
    FileField {
        name: name.to_owned(),
        role: field.map(|field| role_name(field.role()).to_owned()),
        item_key: field
            .filter(|field| field.role() == Role::Pushed)
            .map(|field| field.item_key().to_owned()),
        optional: field.is_some_and(Field::null_is_unwritten),
        flattened: false,
    }
}

fn leak(text: &str) -> &'static str {
    Box::leak(text.to_owned().into_boxed_str())
}

fn role_of(name: &str) -> Result<Role, String> {
    ROLES
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, role)| *role)
        .ok_or_else(|| {
            let known: Vec<&str> = ROLES.iter().map(|(name, _)| *name).collect();
            format!(
                "unknown role {name:?}: expected one of {}",
                known.join(", ")
            )
        })
}

fn scheme_of(name: &str) -> Result<IdScheme, String> {
    [IdScheme::V1, IdScheme::Joined]
        .into_iter()
        .find(|scheme| scheme.name() == name)
        .ok_or_else(|| format!("`id_scheme` is {name:?}: expected \"v1\" or \"joined\""))
}

fn algorithm_name(algorithm: HashAlgorithm) -> &'static str {
    match algorithm {
        HashAlgorithm::Sha256 => "sha256",
        #[cfg(feature = "blake3")]
        HashAlgorithm::Blake3 => "blake3",
    }
}

fn algorithm_of(name: &str) -> Result<HashAlgorithm, String> {
    match name {
        "sha256" => Ok(HashAlgorithm::Sha256),
        #[cfg(feature = "blake3")]
        "blake3" => Ok(HashAlgorithm::Blake3),
        _ => Err(format!(
            "`hash_algorithm` is {name:?}: expected \"sha256\"{}",
            if cfg!(feature = "blake3") {
                " or \"blake3\""
            } else {
                " (\"blake3\" needs the feature `blake3`)"
            }
        )),
    }
}
