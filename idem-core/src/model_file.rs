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
//! content. `optional: true` marks an `Option` field whose null means never written.
//! `"flattened": true` says the type has a `#[serde(flatten)]` field, whose entries are stored
//! under names it does not declare.

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
    /// Whether the type has a `#[serde(flatten)]` field.
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

/// Writes `T`'s model to `path` as JSON ([`ModelFile::of`]).
pub fn write<T: Idempotent>(path: impl AsRef<Path>) -> Result<(), ModelFileError> {
    let path = path.as_ref();
    std::fs::write(path, ModelFile::of::<T>().to_json())
        .map_err(|error| ModelFileError::new(path, format!("cannot be written: {error}")))
}

impl ModelFile {
    /// `T`'s model: every field serde writes ([`Idempotent::stored_columns`]), in declaration
    /// order, each with its role.
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
            .filter(|column| column.shape() != ColumnShape::Flattened)
            .map(|column| file_field(column.stored_name(), role_of(column.stored_name())))
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
            flattened: columns
                .iter()
                .any(|column| column.shape() == ColumnShape::Flattened),
        }
    }

    /// The file's text: pretty-printed JSON.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Reads and checks the model file at `path`.
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

    /// Checks what the derive would refuse to compile: a known format, scheme and algorithm,
    /// known roles, each name once, a key (or an idempotency key), at most one timestamp,
    /// version and tombstone.
    fn check(&self) -> Result<(), String> {
        if self.format != FORMAT {
            return Err(format!(
                "`format` is {:?}: expected {FORMAT:?}",
                self.format
            ));
        }
        scheme_of(&self.id_scheme)?;
        algorithm_of(&self.hash_algorithm)?;
        if self.collection.is_empty() {
            return Err("`collection` is empty".to_owned());
        }
        let mut counts = [0usize; 9];
        for (at, field) in self.fields.iter().enumerate() {
            let place = format!("`fields[{at}]` (`{}`)", field.name);
            if field.name.is_empty() {
                return Err(format!("`fields[{at}].name` is empty"));
            }
            if self.fields[..at].iter().any(|seen| seen.name == field.name) {
                return Err(format!("{place}: listed twice"));
            }
            if field.name == self.hash_field
                || crate::model::RESERVED_FIELDS.contains(&&*field.name)
                || field.name == crate::model::ID_FIELD
            {
                return Err(format!("{place}: a name idem writes itself"));
            }
            let role = field
                .role
                .as_deref()
                .map(role_of)
                .transpose()
                .map_err(|problem| format!("{place}: {problem}"))?;
            if let Some(role) = role {
                counts[ROLES
                    .iter()
                    .position(|(_, known)| *known == role)
                    .unwrap_or(0)] += 1;
            }
            match (role, &field.item_key) {
                (Some(Role::Pushed), None) => {
                    return Err(format!("{place}: a `push_by` list needs its `item_key`"))
                }
                (Some(Role::Pushed), Some(_)) | (_, None) => {}
                (_, Some(_)) => {
                    return Err(format!("{place}: `item_key` is for a `push_by` list only"))
                }
            }
        }
        let count = |role: Role| {
            counts[ROLES
                .iter()
                .position(|(_, known)| *known == role)
                .unwrap_or(0)]
        };
        if count(Role::Key) == 0 && count(Role::IdempotencyKey) == 0 {
            return Err("no field has the role `key` (or `idempotency_key`)".to_owned());
        }
        for role in [
            Role::Timestamp,
            Role::Version,
            Role::Tombstone,
            Role::IdempotencyKey,
        ] {
            if count(role) > 1 {
                return Err(format!(
                    "{} fields have the role `{}`: at most one may",
                    count(role),
                    role_name(role)
                ));
            }
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn file(fields: &str) -> String {
        format!(
            r#"{{"format": "idem-model/1", "collection": "posts", "id_scheme": "v1",
                "hash_field": "sourceHash", "hash_algorithm": "sha256", "fields": {fields}}}"#
        )
    }

    #[test]
    fn a_file_reads_back_as_the_model_it_describes() {
        let text = file(
            r#"[{"name": "slug", "role": "key"}, {"name": "title"},
                {"name": "comments", "role": "push_by", "item_key": "id"},
                {"name": "deletedAt", "role": "tombstone", "optional": true}]"#,
        );
        let read = ModelFile::from_json(&text).unwrap();
        let model = read.model();
        assert_eq!(
            read.field_order(),
            ["slug", "title", "comments", "deletedAt"]
        );
        assert_eq!(model.fields().len(), 3, "the fields with a role");
        assert_eq!(model.pushed_fields().next().unwrap().item_key(), "id");
        assert!(model.tombstone_field().unwrap().null_is_unwritten());
        assert!(!model.is_hashed("comments") && model.is_hashed("title"));
        assert_eq!(ModelFile::from_json(&read.to_json()).unwrap(), read);
    }

    #[test]
    fn a_wrong_file_names_the_field() {
        let wrong = |fields: &str| ModelFile::from_json(&file(fields)).unwrap_err();
        assert!(
            wrong(r#"[{"name": "slug", "role": "key"}, {"name": "v", "role": "efect"}]"#)
                .contains("`fields[1]` (`v`): unknown role \"efect\""),
        );
        assert!(
            wrong(r#"[{"name": "slug", "role": "key"}, {"name": "slug"}]"#)
                .contains("`fields[1]` (`slug`): listed twice")
        );
        assert!(wrong(r#"[{"name": "title"}]"#).contains("no field has the role `key`"));
        assert!(
            wrong(r#"[{"name": "slug", "role": "key"}, {"name": "c", "role": "push_by"}]"#)
                .contains("`fields[1]` (`c`): a `push_by` list needs its `item_key`")
        );
        assert!(wrong(r#"[{"name": "slug", "role": "key", "colour": 1}]"#)
            .contains("unknown field `colour`"));
    }
}
