//! Reads `#[idem(…)]` and the `#[serde(…)]` attributes that change what is stored.
//!
//! Every value is recorded with the span of the tokens that set it, so a later rule can point at
//! the attribute it objects to. A repeated attribute is reported on its second occurrence.

use proc_macro2::Span;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, ExprLit, Lit, LitStr};

use crate::case::RenameRule;
use crate::ctxt::Ctxt;
use crate::symbol::*;

/// One attribute value and where it was written.
pub struct Attr<T> {
    name: Symbol,
    value: Option<(T, Span)>,
}

impl<T> Attr<T> {
    fn none(name: Symbol) -> Self {
        Attr { name, value: None }
    }

    fn set(&mut self, cx: &Ctxt, span: Span, value: T) {
        if self.value.is_some() {
            cx.syn_error(syn::Error::new(
                span,
                format!("duplicate `#[idem({})]` attribute", self.name),
            ));
        } else {
            self.value = Some((value, span));
        }
    }

    pub fn get(&self) -> Option<&T> {
        self.value.as_ref().map(|(value, _)| value)
    }

    pub fn span(&self) -> Option<Span> {
        self.value.as_ref().map(|(_, span)| *span)
    }
}

/// What a field does for idem: one variant per field attribute, the one list every stage reads.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Role {
    Key,
    Timestamp,
    Frozen,
    Volatile,
    Version,
    Tombstone,
    PushBy,
    IdempotencyKey,
    Effect,
}

impl Role {
    pub const ALL: [Role; 9] = [
        Role::Key,
        Role::Timestamp,
        Role::Frozen,
        Role::Volatile,
        Role::Version,
        Role::Tombstone,
        Role::PushBy,
        Role::IdempotencyKey,
        Role::Effect,
    ];

    /// The attribute that gives the role.
    pub const fn symbol(self) -> Symbol {
        match self {
            Role::Key => KEY,
            Role::Timestamp => TIMESTAMP,
            Role::Frozen => FROZEN,
            Role::Volatile => VOLATILE,
            Role::Version => VERSION,
            Role::Tombstone => TOMBSTONE,
            Role::PushBy => PUSH_BY,
            Role::IdempotencyKey => IDEMPOTENCY_KEY,
            Role::Effect => EFFECT,
        }
    }

    /// The attribute's name, as messages quote it.
    pub const fn name(self) -> &'static str {
        self.symbol().0
    }

    /// The runtime's `Role` variant for it.
    pub const fn runtime_variant(self) -> &'static str {
        match self {
            Role::Key => "Key",
            Role::Timestamp => "Timestamp",
            Role::Frozen => "Frozen",
            Role::Volatile => "Volatile",
            Role::Version => "Version",
            Role::Tombstone => "Tombstone",
            Role::PushBy => "Pushed",
            Role::IdempotencyKey => "IdempotencyKey",
            Role::Effect => "Effect",
        }
    }

    /// The field attributes, for suggestions.
    pub fn symbols() -> Vec<Symbol> {
        Role::ALL.iter().map(|role| role.symbol()).collect()
    }
}

/// The id schemes, as the derive names them.
#[derive(Copy, Clone)]
pub enum IdScheme {
    V1,
    Joined,
}

/// Attributes on the struct.
pub struct Container {
    pub collection: Attr<String>,
    pub crate_path: Attr<syn::Path>,
    pub id_scheme: Attr<IdScheme>,
    pub hash_field: Attr<String>,
    /// `hash_algorithm = "blake3"`, kept as written so a missing feature is reported on it.
    pub hash_algorithm: Attr<LitStr>,
    /// serde's `rename_all` (its serialize half).
    pub rename_all: Option<RenameRule>,
    /// serde's `#[serde(default)]` on the struct: every field may be missing when read.
    pub defaulted: bool,
    /// serde's `#[serde(tag = "…")]`, as written: serde stores the type's name under it.
    pub tag: Option<LitStr>,
    /// serde's `content = "…"` or `untagged`, which serde refuses on a struct: with either, the
    /// `tag` is not an internal tag.
    pub not_internally_tagged: bool,
}

impl Container {
    pub fn from_ast(cx: &Ctxt, attrs: &[Attribute]) -> Self {
        let mut container = Container {
            collection: Attr::none(COLLECTION),
            crate_path: Attr::none(CRATE),
            id_scheme: Attr::none(ID_SCHEME),
            hash_field: Attr::none(HASH_FIELD),
            hash_algorithm: Attr::none(HASH_ALGORITHM),
            rename_all: None,
            defaulted: false,
            tag: None,
            not_internally_tagged: false,
        };
        for attr in attrs {
            if attr.path() == IDEM {
                parse_each(cx, attr, |meta| container.read_idem(cx, meta));
            } else if attr.path() == SERDE {
                read_serde(attr, |meta| {
                    if meta.path == RENAME_ALL {
                        if let Some(rule) = serialize_name(meta)?
                            .and_then(|name| RenameRule::from_name(&name.value()))
                        {
                            container.rename_all = Some(rule);
                        }
                        return Ok(());
                    }
                    if meta.path == TAG {
                        if meta.input.peek(syn::Token![=]) {
                            container.tag = string_literal(meta.value()?.parse::<Expr>()?);
                        }
                        return Ok(());
                    }
                    if meta.path == DEFAULT {
                        container.defaulted = true;
                    }
                    if meta.path == CONTENT || meta.path == UNTAGGED {
                        container.not_internally_tagged = true;
                    }
                    skip_meta(meta)
                });
            }
        }
        container
    }

    fn read_idem(&mut self, cx: &Ctxt, meta: &ParseNestedMeta) -> syn::Result<()> {
        let span = meta.path.span();
        if meta.path == COLLECTION {
            if let Some(name) = string_value(cx, meta, COLLECTION, "collection = \"posts\"")? {
                self.collection.set(cx, span, name.value());
            }
        } else if meta.path == CRATE {
            if let Some(path) = string_value(cx, meta, CRATE, "crate = \"::idem_core\"")? {
                match path.parse::<syn::Path>() {
                    Ok(path) => self.crate_path.set(cx, span, path),
                    Err(_) => cx.error_spanned_by(
                        &path,
                        "`crate` expects a path, like `crate = \"::idem_core\"`",
                    ),
                }
            }
        } else if meta.path == ID_SCHEME {
            if let Some(scheme) = string_value(cx, meta, ID_SCHEME, "id_scheme = \"v1\"")? {
                match scheme.value().as_str() {
                    SCHEME_V1 => self.id_scheme.set(cx, span, IdScheme::V1),
                    SCHEME_JOINED => self.id_scheme.set(cx, span, IdScheme::Joined),
                    other => cx.error_spanned_by(
                        &scheme,
                        format!("unknown `id_scheme` {other:?}: expected \"{SCHEME_V1}\" or \"{SCHEME_JOINED}\""),
                    ),
                }
            }
        } else if meta.path == HASH_ALGORITHM {
            let example = "hash_algorithm = \"blake3\"";
            if let Some(algorithm) = string_value(cx, meta, HASH_ALGORITHM, example)? {
                match algorithm.value().as_str() {
                    HASH_SHA256 | HASH_BLAKE3 => self.hash_algorithm.set(cx, span, algorithm),
                    other => cx.error_spanned_by(
                        &algorithm,
                        format!(
                            "unknown `hash_algorithm` {other:?}: expected \"{HASH_SHA256}\" or \"{HASH_BLAKE3}\""
                        ),
                    ),
                }
            }
        } else if meta.path == HASH_FIELD {
            if let Some(name) = string_value(cx, meta, HASH_FIELD, "hash_field = \"sourceHash\"")? {
                self.hash_field.set(cx, span, name.value());
            }
        } else if Role::ALL.iter().any(|role| meta.path == role.symbol()) {
            cx.error_spanned_by(
                &meta.path,
                format!(
                    "`{}` is a field attribute: put `#[idem({})]` on a field",
                    path_name(meta),
                    path_name(meta)
                ),
            );
            skip_meta(meta)?;
        } else {
            unknown(cx, meta, CONTAINER_ATTRIBUTES, "container")?;
        }
        Ok(())
    }
}

/// Attributes on one field.
pub struct Field {
    /// The roles given, each with the span of its attribute, in the order written.
    roles: Vec<(Role, Span)>,
    /// `push_by = "…"`: the stored name of the field that tells the list's items apart.
    pub push_by: Option<LitStr>,
    /// serde's `rename` (its serialize half), as written, so an error can point at it.
    pub rename: Option<LitStr>,
    /// `#[serde(skip)]` or `#[serde(skip_serializing)]`, whichever was written: the field is
    /// never stored.
    pub skipped: Option<(Symbol, Span)>,
    /// `#[serde(flatten)]`: the field's own fields are stored in its place.
    pub flattened: Option<Span>,
    /// `#[serde(skip_serializing_if = "…")]`: the field may be left out of what is stored.
    pub skipped_if: Option<Span>,
    /// `#[serde(default)]` or `#[serde(default = "…")]`: the field may be missing when read.
    pub defaulted: bool,
    /// Some `#[idem(…)]` item on the field was not understood (an unknown word, bad syntax), so
    /// the field may lack a role its author meant to give it.
    pub misread: bool,
}

impl Field {
    pub fn from_ast(cx: &Ctxt, attrs: &[Attribute]) -> Self {
        let mut field = Field {
            roles: Vec::new(),
            push_by: None,
            rename: None,
            skipped: None,
            flattened: None,
            skipped_if: None,
            defaulted: false,
            misread: false,
        };
        for attr in attrs {
            if attr.path() == IDEM {
                field.misread |= !parse_each(cx, attr, |meta| field.read_idem(cx, meta));
            } else if attr.path() == SERDE {
                read_serde(attr, |meta| field.read_serde(meta));
            }
        }
        field
    }

    /// Whether the field has `role`.
    pub fn has(&self, role: Role) -> bool {
        self.roles.iter().any(|(given, _)| *given == role)
    }

    /// Where `role` was given, if it was.
    pub fn span_of(&self, role: Role) -> Option<Span> {
        self.roles
            .iter()
            .find(|(given, _)| *given == role)
            .map(|(_, span)| *span)
    }

    /// The roles given, in the order written.
    pub fn roles(&self) -> &[(Role, Span)] {
        &self.roles
    }

    /// Records `role`, reporting a repeat on its second occurrence.
    fn give(&mut self, cx: &Ctxt, role: Role, span: Span) {
        if self.has(role) {
            cx.syn_error(syn::Error::new(
                span,
                format!("duplicate `#[idem({})]` attribute", role.name()),
            ));
        } else {
            self.roles.push((role, span));
        }
    }

    fn read_idem(&mut self, cx: &Ctxt, meta: &ParseNestedMeta) -> syn::Result<()> {
        let span = meta.path.span();
        let Some(role) = Role::ALL
            .into_iter()
            .find(|role| meta.path == role.symbol())
        else {
            if CONTAINER_ATTRIBUTES.iter().any(|word| meta.path == *word) {
                cx.error_spanned_by(
                    &meta.path,
                    format!(
                        "`{}` is a container attribute: put it in `#[idem(…)]` on the struct",
                        path_name(meta)
                    ),
                );
                return skip_meta(meta);
            }
            self.misread = true;
            return unknown(cx, meta, &Role::symbols(), "field");
        };
        if role == Role::PushBy {
            let example = "push_by = \"comment_id\"";
            if let Some(item_key) = string_value(cx, meta, PUSH_BY, example)? {
                if !self.has(Role::PushBy) {
                    self.push_by = Some(item_key);
                }
                self.give(cx, role, span);
            }
            return Ok(());
        }
        if !meta.input.is_empty() && !meta.input.peek(syn::Token![,]) {
            cx.error_spanned_by(
                &meta.path,
                format!(
                    "`{}` takes no value: write `#[idem({})]`",
                    role.name(),
                    role.name()
                ),
            );
            skip_meta(meta)?;
        }
        self.give(cx, role, span);
        Ok(())
    }

    fn read_serde(&mut self, meta: &ParseNestedMeta) -> syn::Result<()> {
        if meta.path == RENAME {
            if let Some(name) = serialize_name(meta)? {
                self.rename = Some(name);
            }
        } else if meta.path == SKIP {
            self.skipped = Some((SKIP, meta.path.span()));
        } else if meta.path == SKIP_SERIALIZING {
            self.skipped = Some((SKIP_SERIALIZING, meta.path.span()));
        } else if meta.path == FLATTEN {
            self.flattened = Some(meta.path.span());
        } else if meta.path == SKIP_SERIALIZING_IF {
            self.skipped_if = Some(meta.path.span());
            skip_meta(meta)?;
        } else if meta.path == DEFAULT {
            self.defaulted = true;
            skip_meta(meta)?;
        } else {
            skip_meta(meta)?;
        }
        Ok(())
    }
}

/// Runs `read` on each item of `#[idem(…)]`, recording a syntax error instead of stopping.
/// Returns whether the whole attribute was read.
fn parse_each(
    cx: &Ctxt,
    attr: &Attribute,
    mut read: impl FnMut(&ParseNestedMeta) -> syn::Result<()>,
) -> bool {
    match attr.parse_nested_meta(|meta| read(&meta)) {
        Ok(()) => true,
        Err(error) => {
            cx.syn_error(error);
            false
        }
    }
}

/// Reads `#[serde(…)]` leniently: serde reports its own syntax errors, so ours would be noise.
fn read_serde(attr: &Attribute, mut read: impl FnMut(&ParseNestedMeta) -> syn::Result<()>) {
    let _ = attr.parse_nested_meta(|meta| read(&meta));
}

/// The string value of `name = "…"`, or an error if the value is not a string literal.
fn string_value(
    cx: &Ctxt,
    meta: &ParseNestedMeta,
    name: Symbol,
    example: &str,
) -> syn::Result<Option<LitStr>> {
    if !meta.input.peek(syn::Token![=]) {
        cx.error_spanned_by(
            &meta.path,
            format!("`{name}` expects a string literal, like `{example}`"),
        );
        skip_meta(meta)?;
        return Ok(None);
    }
    let value = meta.value()?.parse::<Expr>()?;
    match string_literal(value.clone()) {
        Some(text) => Ok(Some(text)),
        None => {
            cx.error_spanned_by(
                value,
                format!("`{name}` expects a string literal, like `{example}`"),
            );
            Ok(None)
        }
    }
}

/// serde's `name = "…"` or `name(serialize = "…", deserialize = "…")`: the name serde writes.
fn serialize_name(meta: &ParseNestedMeta) -> syn::Result<Option<LitStr>> {
    if meta.input.peek(syn::Token![=]) {
        return Ok(string_literal(meta.value()?.parse::<Expr>()?));
    }
    let mut name = None;
    if meta.input.peek(syn::token::Paren) {
        meta.parse_nested_meta(|inner| {
            if inner.path == SERIALIZE {
                name = string_literal(inner.value()?.parse::<Expr>()?);
                Ok(())
            } else {
                skip_meta(&inner)
            }
        })?;
    }
    Ok(name)
}

/// The string literal `expr` is, also where a `macro_rules!` macro passed it on as a
/// `$value:literal` or `$value:expr` (which wraps it in invisible delimiters), as serde reads
/// its own attributes.
fn string_literal(expr: Expr) -> Option<LitStr> {
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => Some(text),
        Expr::Group(group) => string_literal(*group.expr),
        _ => None,
    }
}

/// Consumes the value of an attribute we do not read: `= expr` or `(…)`.
fn skip_meta(meta: &ParseNestedMeta) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.parse_nested_meta(|inner| skip_meta(&inner))?;
    }
    Ok(())
}

fn path_name(meta: &ParseNestedMeta) -> String {
    meta.path
        .get_ident()
        .map_or_else(|| "?".to_owned(), ToString::to_string)
}

/// Reports an unknown attribute, suggesting the closest known one.
fn unknown(cx: &Ctxt, meta: &ParseNestedMeta, known: &[Symbol], place: &str) -> syn::Result<()> {
    let name = path_name(meta);
    let suggestion = known
        .iter()
        .map(|word| (edit_distance(&name, word.0), word))
        .filter(|(distance, _)| *distance <= 2)
        .min_by_key(|(distance, _)| *distance);
    let expected = known
        .iter()
        .map(|word| format!("`{word}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let message = match suggestion {
        Some((_, word)) => format!("unknown {place} attribute `{name}`; did you mean `{word}`?"),
        None => format!("unknown {place} attribute `{name}`; expected one of {expected}"),
    };
    cx.error_spanned_by(&meta.path, message);
    skip_meta(meta)
}

/// Levenshtein distance, for "did you mean".
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}
