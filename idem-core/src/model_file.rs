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

    /// Checks what the derive would refuse to compile (each rule as `idem-derive`'s `check.rs`
    /// states it, where a file can break it), and what a model given at run time cannot do: hash
    /// a flattened field's entries.
    fn check(&self) -> Result<(), String> {
        if self.format != FORMAT {
            return Err(format!(
                "`format` is {:?}: expected {FORMAT:?}",
                self.format
            ));
        }
        scheme_of(&self.id_scheme)?;
        algorithm_of(&self.hash_algorithm)?;
        check_collection_name(&self.collection)?;
        check_hash_field_name(&self.hash_field)?;
        // First: a flattened field may share a stored name with another field (the derive
        // allows it), and the reason to give is the flattening.
        self.check_not_flattened()?;
        let mut roles = Vec::with_capacity(self.fields.len());
        for (at, field) in self.fields.iter().enumerate() {
            if field.name.is_empty() {
                return Err(format!("`fields[{at}].name` is empty"));
            }
            let role = self
                .check_field(at, field)
                .map_err(|problem| format!("{}: {problem}", place(at, field)))?;
            roles.push(role);
        }
        self.check_roles(&roles)
    }

    /// The rules of one field, and its role.
    fn check_field(&self, at: usize, field: &FileField) -> Result<Option<Role>, String> {
        if self.fields[..at].iter().any(|seen| seen.name == field.name) {
            return Err("listed twice".to_owned());
        }
        if field.name == self.hash_field
            || crate::model::RESERVED_FIELDS.contains(&&*field.name)
            || field.name == crate::model::ID_FIELD
        {
            return Err("a name idem writes itself".to_owned());
        }
        let role = field.role.as_deref().map(role_of).transpose()?;
        check_item_key(role, field)?;
        if let Some(role) = role {
            check_role_field_name(role, &field.name)?;
        }
        check_optional(role, field)?;
        Ok(role)
    }

    /// The rules between fields: `roles` holds each field's role, in the file's order.
    fn check_roles(&self, roles: &[Option<Role>]) -> Result<(), String> {
        let with = |role: Role| {
            roles
                .iter()
                .zip(&self.fields)
                .enumerate()
                .filter(move |(_, (found, _))| **found == Some(role))
                .map(|(at, (_, field))| (at, field))
        };
        let keys: Vec<&str> = with(Role::Key).map(|(_, field)| &*field.name).collect();
        let event_key = with(Role::IdempotencyKey).next();
        // A type is identified either by its key fields (its id is derived from them) or, as an
        // event type, by an idempotency key (its id is random): never both.
        match (keys.is_empty(), event_key) {
            (true, None) => {
                return Err("no field has the role `key` (or `idempotency_key`)".to_owned())
            }
            (false, Some((at, field))) => {
                return Err(format!(
                    "{}: `idempotency_key` is for event types with no natural key, and the file \
                     has `key` fields (`{}`): keep the `key` fields (the id is derived from them) \
                     or the idempotency key",
                    place(at, field),
                    keys.join("`, `")
                ))
            }
            _ => {}
        }
        // At most one of each: the id has one time part, a document one version, one deletion
        // marker, one request key.
        for role in [
            Role::Timestamp,
            Role::Version,
            Role::Tombstone,
            Role::IdempotencyKey,
        ] {
            let mut fields = with(role);
            if let (Some((_, first)), Some((at, extra))) = (fields.next(), fields.next()) {
                return Err(format!(
                    "{}: only one field can have the role `{}`: `{}` already has it",
                    place(at, extra),
                    role_name(role),
                    first.name
                ));
            }
        }
        // An event's id is random, fixed by its first write: a timestamp or a version, which
        // order derived ids and replays, have nothing to act on.
        if event_key.is_some() {
            if let Some((at, field)) = with(Role::Timestamp).chain(with(Role::Version)).next() {
                return Err(format!(
                    "{}: `{}` has no use on an event type (one with an `idempotency_key`): its id \
                     is random, fixed by its first write, and a retry is recognised by its key",
                    place(at, field),
                    field.role.as_deref().unwrap_or_default()
                ));
            }
        }
        Ok(())
    }

    /// A type with a `#[serde(flatten)]` field is written as one map of its fields and the
    /// flattened entries, which its content hash encodes as a map: a model given at run time,
    /// which hashes the fields it lists in their order, cannot compute the type's hashes. Such a
    /// file is refused, saying to audit and adopt with the type.
    fn check_not_flattened(&self) -> Result<(), String> {
        let named: Vec<String> = self
            .fields
            .iter()
            .filter(|field| field.flattened)
            .map(|field| format!("`{}`", field.name))
            .collect();
        if named.is_empty() && !self.flattened {
            return Ok(());
        }
        let which = if named.is_empty() {
            "a field".to_owned()
        } else {
            named.join(", ")
        };
        Err(format!(
            "the type flattens {which} (`#[serde(flatten)]`): it is stored and hashed as one map \
             of its fields and that field's entries, which a model given at run time cannot hash \
             as the type does; audit and adopt with the type in Rust (`store.audit::<T>()`, \
             `store.adopt::<T>()`)"
        ))
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

/// How a message names `fields[at]`.
fn place(at: usize, field: &FileField) -> String {
    format!("`fields[{at}]` (`{}`)", field.name)
}

// A collection name is not empty and holds no `$` or NUL, as MongoDB requires.
fn check_collection_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains('$') || name.contains('\0') {
        return Err(format!(
            "`collection` is {name:?}: expected a non-empty name without `$` or NUL characters"
        ));
    }
    Ok(())
}

// The hash field is a plain top-level field name: not empty, no leading `$`, no `.`, and not a
// name idem writes for something else (`_id`, the reserved `idem…` fields).
fn check_hash_field_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.starts_with('$') || name.contains('.') {
        return Err(format!(
            "`hash_field` is {name:?}: expected a non-empty top-level field name, without a \
             leading `$` or a `.`"
        ));
    }
    if name == crate::model::ID_FIELD || crate::model::RESERVED_FIELDS.contains(&name) {
        return Err(format!(
            "`hash_field` is {name:?}: idem stores the id or its own bookkeeping there"
        ));
    }
    Ok(())
}

// A `push_by` list names the item field that tells items apart; no other field has one.
fn check_item_key(role: Option<Role>, field: &FileField) -> Result<(), String> {
    match (role, &field.item_key) {
        (Some(Role::Pushed), None) => Err("a `push_by` list needs its `item_key`".to_owned()),
        (Some(Role::Pushed), Some(_)) | (_, None) => Ok(()),
        (_, Some(_)) => Err("`item_key` is for a `push_by` list only".to_owned()),
    }
}

// A role field's stored name is a plain top-level name: idem's guards read it back by a path,
// where a `.` would descend into a subdocument and a leading `$` would read as an operator.
fn check_role_field_name(role: Role, name: &str) -> Result<(), String> {
    if name.contains('.') || name.starts_with('$') {
        return Err(format!(
            "the name of a `{}` field cannot hold a `.` or start with `$`: idem's guards read it \
             back by that name",
            role_name(role)
        ));
    }
    Ok(())
}

// `optional` says the field's type is an `Option`. A key, idempotency key, timestamp or version
// never is (the derive asks `IdKey`, `IdTimestamp` or `OrderedVersion` of its type), nor is a
// pushed list (a `Vec`); a tombstone always is (it is `None` until the document is deleted);
// and a field with no role is hashed content, whose null is a value whatever its type.
fn check_optional(role: Option<Role>, field: &FileField) -> Result<(), String> {
    match (role, field.optional) {
        (None, true) => Err(
            "`optional` is for a field with a role (`frozen`, `volatile`, `effect` or \
             `tombstone`): a field with none is hashed content, whose null is a value"
                .to_owned(),
        ),
        (Some(Role::Tombstone), false) => Err(
            "a `tombstone` field is `None` until the document is deleted: it is `optional: true`"
                .to_owned(),
        ),
        (
            Some(
                role @ (Role::Key
                | Role::IdempotencyKey
                | Role::Timestamp
                | Role::Version
                | Role::Pushed),
            ),
            true,
        ) => Err(format!(
            "the role `{}` is never `optional`: its type cannot be an `Option`",
            role_name(role)
        )),
        _ => Ok(()),
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

    /// Each rule of the derive a file can break is checked, naming the field.
    #[test]
    fn a_file_the_derive_would_refuse_is_refused_naming_the_field() {
        let wrong = |fields: &str| ModelFile::from_json(&file(fields)).unwrap_err();
        let cases = [
            (
                r#"[{"name": "slug", "role": "key"}, {"name": "rid", "role": "idempotency_key"}]"#,
                "`fields[1]` (`rid`): `idempotency_key` is for event types with no natural key, \
                 and the file has `key` fields (`slug`)",
            ),
            (
                r#"[{"name": "slug", "role": "key", "optional": true}]"#,
                "`fields[0]` (`slug`): the role `key` is never `optional`",
            ),
            (
                r#"[{"name": "rid", "role": "idempotency_key", "optional": true}]"#,
                "`fields[0]` (`rid`): the role `idempotency_key` is never `optional`",
            ),
            (
                r#"[{"name": "slug", "role": "key"}, {"name": "at", "role": "timestamp", "optional": true}]"#,
                "`fields[1]` (`at`): the role `timestamp` is never `optional`",
            ),
            (
                r#"[{"name": "slug", "role": "key"}, {"name": "title", "optional": true}]"#,
                "`fields[1]` (`title`): `optional` is for a field with a role",
            ),
            (
                r#"[{"name": "slug", "role": "key"}, {"name": "gone", "role": "tombstone"}]"#,
                "`fields[1]` (`gone`): a `tombstone` field is `None` until the document is deleted",
            ),
            (
                r#"[{"name": "rid", "role": "idempotency_key"}, {"name": "at", "role": "timestamp"}]"#,
                "`fields[1]` (`at`): `timestamp` has no use on an event type",
            ),
            (
                r#"[{"name": "slug", "role": "key"}, {"name": "a", "role": "version"}, {"name": "b", "role": "version"}]"#,
                "`fields[2]` (`b`): only one field can have the role `version`: `a` already has it",
            ),
            (
                r#"[{"name": "slug", "role": "key"}, {"name": "meta.at", "role": "frozen"}]"#,
                "`fields[1]` (`meta.at`): the name of a `frozen` field cannot hold a `.`",
            ),
        ];
        for (fields, expected) in cases {
            let problem = wrong(fields);
            assert!(problem.contains(expected), "{fields}: {problem}");
        }
        let header = |collection: &str, hash_field: &str| {
            let text = file(r#"[{"name": "slug", "role": "key"}]"#)
                .replace("\"posts\"", &format!("{collection:?}"))
                .replace("\"sourceHash\"", &format!("{hash_field:?}"));
            ModelFile::from_json(&text).unwrap_err()
        };
        assert!(header("po$ts", "sourceHash").contains("`collection` is \"po$ts\""));
        assert!(header("posts", "meta.hash").contains("`hash_field` is \"meta.hash\""));
        assert!(header("posts", "_id").contains("`hash_field` is \"_id\""));
    }

    /// A flattened field's entries are hashed with the fields as one map, which a model given at
    /// run time cannot redo: the file is refused, naming the field when it is known.
    #[test]
    fn a_file_of_a_type_that_flattens_is_refused() {
        let named = ModelFile::from_json(&file(
            r#"[{"name": "slug", "role": "key"}, {"name": "extra", "flattened": true}]"#,
        ))
        .unwrap_err();
        assert!(
            named.contains("the type flattens `extra` (`#[serde(flatten)]`)")
                && named.contains("`store.audit::<T>()`, `store.adopt::<T>()`"),
            "{named}"
        );
        let mut unnamed = file(r#"[{"name": "slug", "role": "key"}]"#);
        unnamed.pop();
        unnamed.push_str(r#", "flattened": true}"#);
        let unnamed = ModelFile::from_json(&unnamed).unwrap_err();
        assert!(unnamed.contains("the type flattens a field"), "{unnamed}");
    }
}
