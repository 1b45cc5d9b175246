//! The rules between attributes and fields. One function per rule, the rule stated above it.

use proc_macro2::Span;
use syn::LitStr;

use crate::ast::{Field, Input};
use crate::ctxt::Ctxt;
use crate::symbol::ID_FIELD;

pub fn check(cx: &Ctxt, input: &Input) {
    check_has_key(cx, input);
    check_single_timestamp(cx, input);
    for field in &input.fields {
        check_role_conflicts(cx, field);
        check_role_is_stored(cx, field);
        check_reserved_names(cx, input, field);
    }
    check_collection_name(cx, input);
    check_hash_field_name(cx, input);
}

// At least one field is `key`: without one there is nothing to identify a document by, and every
// document would get the same id. Not reported while a field's `#[idem(…)]` was misread: the
// misread item (`kye`) is most likely the missing key, and one error says so.
fn check_has_key(cx: &Ctxt, input: &Input) {
    let misread = input.fields.iter().any(|field| field.attrs.misread);
    if !misread && input.key_fields().next().is_none() {
        cx.error_spanned_by(
            input.ident,
            "`Idempotent` needs at least one `#[idem(key)]` field: the fields that identify a document",
        );
    }
}

// At most one field is `timestamp`: the id has one time part.
fn check_single_timestamp(cx: &Ctxt, input: &Input) {
    let mut timestamps = input
        .fields
        .iter()
        .filter(|field| field.attrs.timestamp.is_set());
    let Some(first) = timestamps.next() else {
        return;
    };
    for extra in timestamps {
        error_at(
            cx,
            extra.attrs.timestamp.span(),
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
    let attrs = &field.attrs;
    let conflicts = [
        (attrs.key.is_set() && attrs.volatile.is_set(), "key", "volatile", "a key identifies the document, so it is never volatile"),
        (
            attrs.timestamp.is_set() && attrs.volatile.is_set(),
            "timestamp",
            "volatile",
            "the timestamp feeds the id, so it is never volatile",
        ),
        (
            attrs.frozen.is_set() && attrs.volatile.is_set(),
            "frozen",
            "volatile",
            "a frozen field is compared on every write, a volatile one is ignored",
        ),
        (
            attrs.key.is_set() && attrs.timestamp.is_set(),
            "key",
            "timestamp",
            "the timestamp gives the id its time part, the keys its hash part; mark the field one or the other",
        ),
    ];
    for (conflict, first, second, why) in conflicts {
        if conflict {
            let span = if second == "volatile" {
                attrs.volatile.span()
            } else {
                attrs.timestamp.span()
            };
            error_at(
                cx,
                span,
                format!("`{first}` and `{second}` cannot be combined on one field: {why}"),
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
    let span = field
        .attrs
        .rename
        .as_ref()
        .map_or_else(|| field.ident.span(), LitStr::span);
    let stored = &field.stored_name;
    if stored == ID_FIELD {
        error_at(
            cx,
            Some(span),
            format!(
                "this field is stored as `{stored}`, the id idem derives from the key fields: \
                 store it under another name, or remove it"
            ),
        );
    } else if stored == input.hash_field() {
        error_at(
            cx,
            Some(span),
            format!(
                "this field is stored as `{stored}`, where idem writes the content hash: store it \
                 under another name, or move the hash with `#[idem(hash_field = \"…\")]`"
            ),
        );
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

// The hash field is a plain top-level field name: not empty, no leading `$`, no `.`.
fn check_hash_field_name(cx: &Ctxt, input: &Input) {
    let name = input.hash_field();
    if name.is_empty() || name.starts_with('$') || name.contains('.') {
        error_at(
            cx,
            input.attrs.hash_field.span(),
            "`hash_field` must be a non-empty top-level field name, without a leading `$` or a `.`",
        );
    }
}

fn role_name(field: &Field) -> Option<&'static str> {
    let attrs = &field.attrs;
    [
        (attrs.key.is_set(), "key"),
        (attrs.timestamp.is_set(), "timestamp"),
        (attrs.frozen.is_set(), "frozen"),
        (attrs.volatile.is_set(), "volatile"),
    ]
    .into_iter()
    .find_map(|(set, name)| set.then_some(name))
}

fn error_at(cx: &Ctxt, span: Option<Span>, message: impl std::fmt::Display) {
    cx.syn_error(syn::Error::new(
        span.unwrap_or_else(Span::call_site),
        message,
    ));
}
