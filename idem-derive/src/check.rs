//! The rules between attributes and fields. One function per rule, the rule stated above it.

use proc_macro2::Span;
use syn::{GenericArgument, LitStr, PathArguments, Type};

use crate::ast::{Field, Input};
use crate::attr::Role;
use crate::ctxt::Ctxt;
use crate::symbol::ID_FIELD;

pub fn check(cx: &Ctxt, input: &Input) {
    check_has_key(cx, input);
    check_key_or_idempotency_key(cx, input);
    check_single_timestamp(cx, input);
    for role in [Role::Version, Role::Tombstone, Role::IdempotencyKey] {
        check_at_most_one(cx, input, role);
    }
    check_event_has_no_derived_id_parts(cx, input);
    for field in &input.fields {
        check_role_conflicts(cx, field);
        check_one_role_of_the_replay_kind(cx, field);
        check_role_types(cx, field);
        check_role_is_stored(cx, field);
        check_role_always_stored(cx, field);
        check_reserved_names(cx, input, field);
        check_role_field_name(cx, field);
    }
    check_stored_names_unique(cx, input);
    check_tag_name(cx, input);
    check_collection_name(cx, input);
    check_generic_type_names_its_collection(cx, input);
    check_hash_field_name(cx, input);
}

// At least one field is `key`: without one there is nothing to identify a document by, and every
// document would get the same id. Not reported while a field's `#[idem(…)]` was misread: the
// misread item (`kye`) is most likely the missing key, and one error says so.
fn check_has_key(cx: &Ctxt, input: &Input) {
    let misread = input.fields.iter().any(|field| field.attrs.misread);
    if !misread && input.natural_key_fields().next().is_none() {
        cx.error_spanned_by(
            input.ident,
            "`Idempotent` needs at least one `#[idem(key)]` field: the fields that identify a document \
             (or, for an event type with no natural key, one `#[idem(idempotency_key)]` field)",
        );
    }
}

// A type is identified either by its key fields (its id is derived from them) or, as an event
// type, by an idempotency key (its id is random): never both.
fn check_key_or_idempotency_key(cx: &Ctxt, input: &Input) {
    let Some(event_key) = input.idempotency_key_field() else {
        return;
    };
    if input.key_fields().next().is_some() {
        error_at(
            cx,
            event_key.attrs.span_of(Role::IdempotencyKey),
            "`idempotency_key` is for event types with no natural key, and this type has `key` \
             fields: keep the `key` fields (the id is derived from them) or the idempotency key",
        );
    }
}

// At most one field has each of `version`, `tombstone` and `idempotency_key`: a document has one
// version, one deletion marker, one request key.
fn check_at_most_one(cx: &Ctxt, input: &Input, role: Role) {
    let mut fields = input.fields.iter().filter(|field| field.has(role));
    let Some(first) = fields.next() else { return };
    for extra in fields {
        error_at(
            cx,
            extra.attrs.span_of(role),
            format!(
                "only one field can be `#[idem({})]`: `{}` already is",
                role.name(),
                first.name()
            ),
        );
    }
}

// An event's id is random, fixed by its first write: a timestamp or a version, which order
// derived ids and replays, have nothing to act on.
fn check_event_has_no_derived_id_parts(cx: &Ctxt, input: &Input) {
    if input.idempotency_key_field().is_none() || input.key_fields().next().is_some() {
        return;
    }
    for field in &input.fields {
        for &(role, span) in field.attrs.roles() {
            if matches!(role, Role::Timestamp | Role::Version) {
                error_at(
                    cx,
                    Some(span),
                    format!(
                        "`{}` has no use on an event type (one with an `idempotency_key`): its id \
                         is random, fixed by its first write, and a retry is recognised by its key",
                        role.name()
                    ),
                );
            }
        }
    }
}

// `version`, `tombstone`, `push_by`, `idempotency_key` and `effect` each give a field its whole behaviour,
// so none shares a field with another role.
fn check_one_role_of_the_replay_kind(cx: &Ctxt, field: &Field) {
    const EXCLUSIVE: &[Role] = &[
        Role::Version,
        Role::Tombstone,
        Role::PushBy,
        Role::IdempotencyKey,
        Role::Effect,
    ];
    let roles = field.attrs.roles();
    for (role, span) in roles {
        if !EXCLUSIVE.contains(role) {
            continue;
        }
        if let Some((other, _)) = roles.iter().find(|(other, _)| other != role) {
            let (role, other) = (role.name(), other.name());
            error_at(
                cx,
                Some(*span),
                format!("`{role}` cannot be combined with `{other}` on one field: a `{role}` field has one role"),
            );
            return;
        }
    }
}

// A tombstone is `None` until the document is deleted, so its type is `Option<…>`, and its
// marker is a value: a `Some` that serializes as null (`Some(())`, `Some(None)`,
// `Some(PhantomData)`) is stored exactly as `None`, so `delete` could never mark the document.
// A unit struct (`Option<Gone>`) is null too, but a name does not say so: `delete` refuses its
// null marker at run time. A pushed list is a `Vec<…>` of items.
fn check_role_types(cx: &Ctxt, field: &Field) {
    if field.has(Role::Tombstone) && !field.type_is("Option") {
        cx.error_spanned_by(
            field.ty,
            "a `tombstone` field is `None` until the document is deleted: give it a type `Option<…>`",
        );
    } else if field.has(Role::Tombstone) {
        if let Some((marker, value)) = field.item_type().and_then(null_marker) {
            cx.error_spanned_by(
                field.ty,
                format!(
                    "a `tombstone` marker cannot be {marker}: serde writes `{value}` as null, \
                     stored exactly as `None`, so a deleted document could not be told from one \
                     never deleted and `delete` could never mark it; give the marker a value, \
                     like `Option<bool>` or an `Option<i64>` deletion time"
                ),
            );
        }
    }
    if field.has(Role::PushBy) && !(field.type_is("Vec") && field.item_type().is_some()) {
        cx.error_spanned_by(
            field.ty,
            "a `push_by` field is a list of items: give it a type `Vec<…>`",
        );
    }
}

/// If `Some` of `ty` serializes as null, what messages call `ty` and its `Some`. Reads through
/// parentheses and the pointers serde writes as what they point to.
fn null_marker(ty: &Type) -> Option<(&'static str, &'static str)> {
    match ty {
        Type::Paren(inner) => null_marker(&inner.elem),
        Type::Group(inner) => null_marker(&inner.elem),
        Type::Reference(inner) => null_marker(&inner.elem),
        Type::Tuple(unit) if unit.elems.is_empty() => Some(("`()`", "Some(())")),
        Type::Path(path) if path.qself.is_none() => {
            let last = path.path.segments.last()?;
            let only_argument = || match &last.arguments {
                PathArguments::AngleBracketed(arguments) if arguments.args.len() == 1 => {
                    match arguments.args.first()? {
                        GenericArgument::Type(inner) => Some(inner),
                        _ => None,
                    }
                }
                _ => None,
            };
            match last.ident.to_string().as_str() {
                "Option" => Some(("an `Option`", "Some(None)")),
                "PhantomData" => Some(("`PhantomData`", "Some(PhantomData)")),
                "Box" | "Rc" | "Arc" => null_marker(only_argument()?),
                _ => None,
            }
        }
        _ => None,
    }
}

// At most one field is `timestamp`: the id has one time part.
fn check_single_timestamp(cx: &Ctxt, input: &Input) {
    let mut timestamps = input
        .fields
        .iter()
        .filter(|field| field.has(Role::Timestamp));
    let Some(first) = timestamps.next() else {
        return;
    };
    for extra in timestamps {
        error_at(
            cx,
            extra.attrs.span_of(Role::Timestamp),
            format!(
                "only one field can be `#[idem(timestamp)]`: `{}` already gives the id its time part",
                first.name()
            ),
        );
    }
}

// Roles that contradict each other cannot share a field: a key or timestamp feeds the id, so its
// value is content and frozen, never volatile; a frozen field must be compared, so it cannot be
// volatile either; and the timestamp is not a key (it feeds the time part, not the hash part).
fn check_role_conflicts(cx: &Ctxt, field: &Field) {
    const CONFLICTS: &[(Role, Role, &str)] = &[
        (
            Role::Key,
            Role::Volatile,
            "a key identifies the document, so it is never volatile",
        ),
        (
            Role::Timestamp,
            Role::Volatile,
            "the timestamp feeds the id, so it is never volatile",
        ),
        (
            Role::Frozen,
            Role::Volatile,
            "a frozen field is compared on every write, a volatile one is ignored",
        ),
        (
            Role::Key,
            Role::Timestamp,
            "the timestamp gives the id its time part, the keys its hash part; mark the field one or the other",
        ),
    ];
    for &(first, second, why) in CONFLICTS {
        if field.has(first) && field.has(second) {
            error_at(
                cx,
                field.attrs.span_of(second),
                format!(
                    "`{}` and `{}` cannot be combined on one field: {why}",
                    first.name(),
                    second.name()
                ),
            );
        }
    }
}

// A field with a role must be stored under its own name: idem reads it back to guard writes.
fn check_role_is_stored(cx: &Ctxt, field: &Field) {
    let Some(role) = role_name(field) else { return };
    if let Some((skip, span)) = field.attrs.skipped {
        error_at(
            cx,
            Some(span),
            format!(
                "a `{role}` field must be stored: remove `#[serde({skip})]` or the `{role}` role"
            ),
        );
    }
    if let Some(span) = field.attrs.flattened {
        error_at(
            cx,
            Some(span),
            format!("a `{role}` field cannot be `#[serde(flatten)]`: idem reads it back by name"),
        );
    }
}

// `_id` is the derived id, and the hash field holds the content hash: a field stored under
// either name would be overwritten by idem. The error points at the `rename` that chose the
// name, or at the field when its own name (or `rename_all`) did.
fn check_reserved_names(cx: &Ctxt, input: &Input, field: &Field) {
    if field.attrs.skipped.is_some() {
        return;
    }
    let stored = &field.stored_name;
    if let Some(reserved) = Reserved::of(input, stored) {
        let advice = match reserved {
            Reserved::Id => ", or remove it",
            Reserved::Bookkeeping => "",
            Reserved::Hash => HASH_FIELD_ADVICE,
        };
        error_at(
            cx,
            Some(name_span(field)),
            format!(
                "this field is stored as `{stored}`, {}: store it under another name{advice}",
                reserved.holder()
            ),
        );
    }
}

// The tag of an internally tagged struct is stored as a field, so it is not a name idem writes
// itself either.
fn check_tag_name(cx: &Ctxt, input: &Input) {
    let Some(tag) = input.tag() else { return };
    let name = tag.value();
    if let Some(reserved) = Reserved::of(input, &name) {
        let advice = match reserved {
            Reserved::Hash => HASH_FIELD_ADVICE,
            Reserved::Id | Reserved::Bookkeeping => "",
        };
        cx.error_spanned_by(
            tag,
            format!(
                "`#[serde(tag = \"{name}\")]` stores the type's name as `{name}`, {}: choose \
                 another tag{advice}",
                reserved.holder()
            ),
        );
    }
}

const HASH_FIELD_ADVICE: &str = ", or move the hash with `#[idem(hash_field = \"…\")]`";

/// A stored name idem writes itself.
#[derive(Clone, Copy)]
enum Reserved {
    /// `_id`.
    Id,
    /// One of idem's own fields (`idemFrozen`, …).
    Bookkeeping,
    /// The hash field.
    Hash,
}

impl Reserved {
    fn of(input: &Input, stored: &str) -> Option<Reserved> {
        if stored == ID_FIELD {
            Some(Reserved::Id)
        } else if crate::symbol::RESERVED_FIELDS.contains(&stored) {
            Some(Reserved::Bookkeeping)
        } else if stored == input.hash_field() {
            Some(Reserved::Hash)
        } else {
            None
        }
    }

    /// What idem keeps under the name, as messages say it.
    fn holder(self) -> &'static str {
        match self {
            Reserved::Id => "the id idem derives from the key fields",
            Reserved::Bookkeeping => "a name idem writes itself",
            Reserved::Hash => "where idem writes the content hash",
        }
    }
}

// No two stored fields share a stored name: serde writes both, and a stored document keeps one
// of them, so what is stored would not be what was hashed (a key could be stored as another
// value than the id was derived from). Reported on the later field. The tag of an internally
// tagged struct is written first, under its own name.
fn check_stored_names_unique(cx: &Ctxt, input: &Input) {
    let stored: Vec<&Field> = input
        .fields
        .iter()
        .filter(|field| field.attrs.skipped.is_none() && field.attrs.flattened.is_none())
        .collect();
    let tag = input.tag().map(LitStr::value);
    for (position, field) in stored.iter().enumerate() {
        if tag.as_ref() == Some(&field.stored_name) {
            error_at(
                cx,
                Some(name_span(field)),
                format!(
                    "this field is stored as `{0}`, where `#[serde(tag = \"{0}\")]` stores the \
                     type's name: a stored document holds one value per name; store the field \
                     under another name, or choose another tag",
                    field.stored_name
                ),
            );
            continue;
        }
        let earlier = stored[..position]
            .iter()
            .find(|earlier| earlier.stored_name == field.stored_name);
        if let Some(earlier) = earlier {
            error_at(
                cx,
                Some(name_span(field)),
                format!(
                    "this field is stored as `{}`, as the field `{}` is: a stored document \
                     holds one value per name; store one of them under another name",
                    field.stored_name, earlier.ident
                ),
            );
        }
    }
}

// A collection name is not empty and holds no `$` or NUL, as MongoDB requires.
fn check_collection_name(cx: &Ctxt, input: &Input) {
    let name = input.collection();
    if name.is_empty() || name.contains('$') || name.contains('\0') {
        error_at(
            cx,
            input.attrs.collection.span(),
            "`collection` must be a non-empty name without `$` or NUL characters",
        );
    }
}

// A type with type or const parameters names its collection: the default name comes from the
// type's name alone, so `Wrapper<String>` and `Wrapper<u32>` would share one collection, and a
// document of one would overwrite the other's under the same key. Naming it makes the sharing a
// choice. Lifetime parameters do not count: they never change what is stored.
fn check_generic_type_names_its_collection(cx: &Ctxt, input: &Input) {
    if input.attrs.collection.get().is_some() {
        return;
    }
    let parameter = input.generics.params.iter().find(|param| {
        matches!(
            param,
            syn::GenericParam::Type(_) | syn::GenericParam::Const(_)
        )
    });
    if let Some(parameter) = parameter {
        cx.error_spanned_by(
            parameter,
            format!(
                "a generic type needs `#[idem(collection = \"…\")]`: every instantiation of `{0}` \
                 would otherwise be stored in the one collection `{1}`, where `{0}<A>` and `{0}<B>` \
                 with the same key overwrite each other; name the collection (the same name \
                 shares it on purpose), or wrap each instantiation in a type of its own",
                input.ident,
                input.collection(),
            ),
        );
    }
}

// The hash field is a plain top-level field name: not empty, no leading `$`, no `.`, and not a
// name idem writes for something else (`_id`, the reserved `idem…` fields).
fn check_hash_field_name(cx: &Ctxt, input: &Input) {
    let name = input.hash_field();
    if name.is_empty() || name.starts_with('$') || name.contains('.') {
        error_at(
            cx,
            input.attrs.hash_field.span(),
            "`hash_field` must be a non-empty top-level field name, without a leading `$` or a `.`",
        );
    } else if name == ID_FIELD || crate::symbol::RESERVED_FIELDS.contains(&name) {
        error_at(
            cx,
            input.attrs.hash_field.span(),
            format!(
                "`hash_field` cannot be `{name}`: idem stores the id or its own bookkeeping there; \
                 choose another name"
            ),
        );
    }
}

// A role field's stored name is a plain top-level name: idem's guards read it back by a path,
// where a `.` would descend into a subdocument and a leading `$` would read as an operator.
fn check_role_field_name(cx: &Ctxt, field: &Field) {
    let Some(role) = role_name(field) else { return };
    let stored = &field.stored_name;
    if stored.contains('.') || stored.starts_with('$') {
        error_at(
            cx,
            Some(name_span(field)),
            format!(
                "a `{role}` field is stored as `{stored}`: a name with a `.` or a leading `$` \
                 cannot be read back by idem's guards; rename it"
            ),
        );
    }
}

// A key, timestamp, version or idempotency key is always written: the id, the guards and the
// replay order read it, so serde may not leave it out.
fn check_role_always_stored(cx: &Ctxt, field: &Field) {
    let Some(span) = field.attrs.skipped_if else {
        return;
    };
    let always = [
        Role::Key,
        Role::Timestamp,
        Role::Version,
        Role::IdempotencyKey,
    ];
    if let Some(role) = always.into_iter().find(|role| field.has(*role)) {
        let role = role.name();
        error_at(
            cx,
            Some(span),
            format!(
                "a `{role}` field is always stored: remove `skip_serializing_if` or the `{role}` role"
            ),
        );
    }
}

/// The first role written on the field, as messages name it.
fn role_name(field: &Field) -> Option<&'static str> {
    field.attrs.roles().first().map(|(role, _)| role.name())
}

/// Where a field's stored name was chosen: its `rename`, or the field itself when its own name
/// (or `rename_all`) did.
fn name_span(field: &Field) -> Span {
    field
        .attrs
        .rename
        .as_ref()
        .map_or_else(|| field.ident.span(), LitStr::span)
}

fn error_at(cx: &Ctxt, span: Option<Span>, message: impl std::fmt::Display) {
    cx.syn_error(syn::Error::new(
        span.unwrap_or_else(Span::call_site),
        message,
    ));
}
