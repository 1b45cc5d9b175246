//! The rules a model file is checked by before it is written or read: each rule of the derive
//! that a file can break, and what a model given at run time cannot do.

use super::{algorithm_of, role_name, role_of, scheme_of, FileField, ModelFile, FORMAT};
use crate::model::Role;

impl ModelFile {
    /// Checks what the derive would refuse to compile (each rule as `idem-derive`'s `check.rs`
    /// states it, where a file can break it), and what a model given at run time cannot do: hash
    /// a flattened field's entries.
    pub(super) fn check(&self) -> Result<(), String> {
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
