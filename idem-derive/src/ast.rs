//! The model of the input: a struct with named fields, each with its idem role and the name
//! serde stores it under. Keeps references to the syn nodes so errors can point at them.

use syn::{Data, DeriveInput, Fields, Generics, Ident, LitStr, Type, Visibility};

use crate::attr::{self, Role};
use crate::case::snake_case;
use crate::ctxt::Ctxt;

pub struct Input<'a> {
    pub ident: &'a Ident,
    pub vis: &'a Visibility,
    pub generics: &'a Generics,
    pub attrs: attr::Container,
    pub fields: Vec<Field<'a>>,
}

pub struct Field<'a> {
    pub ident: &'a Ident,
    pub ty: &'a Type,
    pub attrs: attr::Field,
    /// The name serde writes, after `rename` and `rename_all`.
    pub stored_name: String,
}

impl<'a> Input<'a> {
    /// The model of `input`, or `None` (with the error recorded) if it is not a struct with
    /// named fields.
    pub fn from_syn(cx: &Ctxt, input: &'a DeriveInput) -> Option<Self> {
        let attrs = attr::Container::from_ast(cx, &input.attrs);
        let named = match &input.data {
            Data::Struct(data) => match &data.fields {
                Fields::Named(named) => named,
                Fields::Unnamed(unnamed) => {
                    cx.error_spanned_by(
                        unnamed,
                        "`Idempotent` needs a struct with named fields: a tuple struct has no field names to store",
                    );
                    return None;
                }
                Fields::Unit => {
                    cx.error_spanned_by(
                        &input.ident,
                        "`Idempotent` needs a struct with named fields: a unit struct has no key to identify a document",
                    );
                    return None;
                }
            },
            Data::Enum(data) => {
                cx.error_spanned_by(
                    data.enum_token,
                    "`Idempotent` cannot be derived for an enum: a document type is a struct with named fields",
                );
                return None;
            }
            Data::Union(data) => {
                cx.error_spanned_by(
                    data.union_token,
                    "`Idempotent` cannot be derived for a union: a document type is a struct with named fields",
                );
                return None;
            }
        };
        let fields = named
            .named
            .iter()
            .filter_map(|field| {
                let ident = field.ident.as_ref()?;
                let field_attrs = attr::Field::from_ast(cx, &field.attrs);
                let stored_name = stored_name(ident, &field_attrs, &attrs);
                Some(Field {
                    ident,
                    ty: &field.ty,
                    attrs: field_attrs,
                    stored_name,
                })
            })
            .collect();
        Some(Input {
            ident: &input.ident,
            vis: &input.vis,
            generics: &input.generics,
            attrs,
            fields,
        })
    }

    pub fn collection(&self) -> String {
        self.attrs
            .collection
            .get()
            .cloned()
            .unwrap_or_else(|| snake_case(&self.ident.to_string()))
    }

    pub fn hash_field(&self) -> &str {
        self.attrs
            .hash_field
            .get()
            .map_or(crate::symbol::DEFAULT_HASH_FIELD, String::as_str)
    }

    /// The name serde stores the type's name under, for an internally tagged struct
    /// (`#[serde(tag = "…")]`): a stored text field no Rust field declares.
    pub fn tag(&self) -> Option<&LitStr> {
        self.attrs
            .tag
            .as_ref()
            .filter(|_| !self.attrs.not_internally_tagged)
    }

    pub fn key_fields(&self) -> impl Iterator<Item = &Field<'a>> {
        self.fields
            .iter()
            .filter(|field| field.attrs.has(Role::Key))
    }

    /// The event type's idempotency key, if this is an event type.
    pub fn idempotency_key_field(&self) -> Option<&Field<'a>> {
        self.fields
            .iter()
            .find(|field| field.attrs.has(Role::IdempotencyKey))
    }

    /// The fields that name a document in errors and the unique index: the keys, or an event
    /// type's idempotency key.
    pub fn natural_key_fields(&self) -> impl Iterator<Item = &Field<'a>> {
        self.fields
            .iter()
            .filter(|field| field.attrs.has(Role::Key) || field.attrs.has(Role::IdempotencyKey))
    }

    /// The lists owned by their push routes, with the type of their items.
    pub fn pushed_fields(&self) -> impl Iterator<Item = (&Field<'a>, &'a Type)> {
        self.fields.iter().filter_map(|field| {
            field.attrs.push_by.as_ref()?;
            Some((field, field.item_type()?))
        })
    }

    /// The version field, if any.
    pub fn version_field(&self) -> Option<&Field<'a>> {
        self.fields.iter().find(|field| field.has(Role::Version))
    }

    pub fn timestamp_field(&self) -> Option<&Field<'a>> {
        self.fields
            .iter()
            .find(|field| field.attrs.has(Role::Timestamp))
    }
}

impl<'a> Field<'a> {
    /// `T` in a field of type `Vec<T>` (or `Option<T>`), read from the type as written.
    pub fn item_type(&self) -> Option<&'a Type> {
        let Type::Path(path) = self.written_type() else {
            return None;
        };
        let last = path.path.segments.last()?;
        let syn::PathArguments::AngleBracketed(arguments) = &last.arguments else {
            return None;
        };
        match arguments.args.first()? {
            syn::GenericArgument::Type(item) if arguments.args.len() == 1 => Some(item),
            _ => None,
        }
    }

    /// Whether the field's type is written `Name<…>`, the last segment of its path.
    pub fn type_is(&self, name: &str) -> bool {
        matches!(self.written_type(), Type::Path(path) if path.path.segments.last().is_some_and(|last| last.ident == name))
    }

    /// The field's type as written, out of the invisible group a type passed on by a
    /// `macro_rules!` as `$ty:ty` arrives in.
    fn written_type(&self) -> &'a Type {
        let mut ty = self.ty;
        while let Type::Group(group) = ty {
            ty = &group.elem;
        }
        ty
    }

    /// Whether the field has `role`.
    pub fn has(&self, role: Role) -> bool {
        self.attrs.has(role)
    }

    /// The field's name in Rust, without `r#`.
    pub fn name(&self) -> String {
        let name = self.ident.to_string();
        name.strip_prefix("r#").map_or(name.clone(), str::to_owned)
    }
}

fn stored_name(ident: &Ident, field: &attr::Field, container: &attr::Container) -> String {
    let name = ident.to_string();
    let name = name.strip_prefix("r#").unwrap_or(&name);
    match (&field.rename, container.rename_all) {
        (Some(rename), _) => rename.value(),
        (None, Some(rule)) => rule.apply_to_field(name),
        (None, None) => name.to_owned(),
    }
}
