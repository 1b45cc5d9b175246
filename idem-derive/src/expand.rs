//! Writes the generated code: the `Idempotent` impl (backend-neutral metadata and accessors) and
//! the inherent conveniences, inside `const _: () = { … }` with one alias to the runtime.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{quote, ToTokens};
use syn::spanned::Spanned;
use syn::{DeriveInput, Generics, Type, WhereClause, WherePredicate};

use crate::ast::{Field, Input};
use crate::attr::{IdScheme, Role};
use crate::ctxt::Ctxt;
use crate::{check, fallback};

pub fn derive(input: &DeriveInput) -> TokenStream {
    let cx = Ctxt::new();
    let model = crate::ast::Input::from_syn(&cx, input);
    if let Some(model) = &model {
        check::check(&cx, model);
    }
    let runtime = model
        .as_ref()
        .and_then(|model| model.attrs.crate_path.get().cloned());
    match (cx.check(), model) {
        (Ok(()), Some(model)) => expand(&model),
        (Err(errors), model) => fallback::stub(input, model.as_ref(), runtime, errors),
        // `from_syn` records an error whenever it returns `None`.
        (Ok(()), None) => TokenStream::new(),
    }
}

/// The path to the runtime crate: `::idem_core`, or the `crate = "…"` override.
pub fn runtime_path(path: Option<syn::Path>) -> TokenStream {
    match path {
        Some(path) => quote!(#path),
        None => quote!(::idem_core),
    }
}

fn expand(input: &Input) -> TokenStream {
    let ident = input.ident;
    let vis = input.vis;
    let runtime = runtime_path(input.attrs.crate_path.get().cloned());
    let (impl_generics, ty_generics, _) = input.generics.split_for_impl();
    let where_clause = bounded_where_clause(input);

    let collection = input.collection();
    let hash_field = input.hash_field();
    let scheme = match input.attrs.id_scheme.get() {
        Some(IdScheme::Joined) => quote!(Joined),
        Some(IdScheme::V1) | None => quote!(V1),
    };
    let fields = input.fields.iter().filter_map(field_spec);

    // The parameters of `derive_id` are named after the fields they take.
    let key_params: Vec<_> = input.key_fields().map(|field| field.ident).collect();
    let key_values: Vec<_> = input.key_fields().map(key_of_self).collect();
    let natural_key_values: Vec<_> = input.natural_key_fields().map(key_of_self).collect();
    let (timestamp_self, timestamp_param) = match input.timestamp_field() {
        Some(field) => {
            let ident = field.ident;
            let ty = field.ty;
            let of_self = probe(ty, quote!(timestamp_of(&self.#ident)));
            let of_param = probe(ty, quote!(timestamp_of(#ident)));
            // Typed as the field, so a literal (`&1_700_000_000_000`) infers the field's type.
            (
                quote!(__idem::__private::Some(#of_self)),
                Some((
                    quote!(#ident: &#ty,),
                    quote!(__idem::__private::Some(#of_param)),
                )),
            )
        }
        None => (quote!(__idem::__private::None), None),
    };
    let timestamp_arg = timestamp_param.as_ref().map(|(arg, _)| arg);
    let timestamp_value = timestamp_param
        .as_ref()
        .map_or(quote!(__idem::__private::None), |(_, value)| value.clone());

    let derive_id_doc = derive_id_doc(input);
    let type_name = ident.to_string();
    let id_doc =
        format!("The deterministic id of this `{type_name}`: see [`{type_name}::derive_id`].");
    let hash_doc = format!(
        "The content hash of this `{type_name}`: every stored field except `{hash_field}` and the volatile, tombstone, pushed and effect fields."
    );
    let upsert_doc = format!(
        "Writes this `{type_name}` to `store` under its derived id: `Inserted`, `Updated`, `Unchanged`, `Stale` (an older version) or `Deleted` (a tombstoned document, never resurrected), and never a duplicate. \
         Callable when `{type_name}` is `Sync`: the write borrows it across awaits."
    );
    let find_doc = format!(
        "The `{type_name}` stored in `store` under this natural key (keys in declaration order), \
         `None` if none is: one read by the unique natural-key index. A deleted document comes \
         back with its tombstone set. Callable when `{type_name}` is `DeserializeOwned`."
    );
    let index_doc = format!(
        "Makes what writes of `{type_name}` need in `store`: the unique index on its natural key \
         (MongoDB), its table with its constraints (PostgreSQL). Idempotent."
    );
    let captures = future_captures(input.generics);
    // Spanned on the attribute's value: without idem-core's `blake3` feature the variant does not
    // exist, and the compiler's error points at what asked for it.
    let hash_algorithm = input.attrs.hash_algorithm.get().and_then(|algorithm| {
        (algorithm.value() == crate::symbol::HASH_BLAKE3).then(|| {
            quote::quote_spanned!(algorithm.span()=> .with_hash_algorithm(__idem::HashAlgorithm::Blake3))
        })
    });
    let is_event = input.idempotency_key_field().is_some();
    let trait_id_body = if is_event {
        quote! {
            __idem::__private::Result::Err(__idem::Error::new(
                <Self as __idem::Idempotent>::document_ref(self),
                __idem::ErrorKind::NoDerivedId,
            ))
        }
    } else {
        quote! {
            __idem::__private::derive_id(
                &<Self as __idem::Idempotent>::MODEL,
                &[#(#key_values),*],
                #timestamp_self,
            )
        }
    };
    // An event's id is random, fixed by its first write: there is nothing to derive.
    let derived_id_methods = (!is_event).then(|| {
        quote! {
            #[doc = #derive_id_doc]
            #[allow(clippy::too_many_arguments)]
            #vis fn derive_id(
                #(#key_params: impl __idem::IdKey,)*
                #timestamp_arg
            ) -> __idem::__private::Result<__idem::Id, __idem::Error> {
                __idem::__private::derive_id(
                    &<Self as __idem::Idempotent>::MODEL,
                    &[#(&#key_params),*],
                    #timestamp_value,
                )
            }

            #[doc = #id_doc]
            #vis fn id(&self) -> __idem::__private::Result<__idem::Id, __idem::Error> {
                <Self as __idem::Idempotent>::id(self)
            }

            #[doc = #find_doc]
            #[allow(clippy::too_many_arguments)]
            #vis fn find<'__a, __B: __idem::Backend>(
                store: &'__a __B,
                #(#key_params: impl __idem::StoredKey,)*
            ) -> __idem::Finding<'__a, Self>
            where
                __B: __idem::__private::FindWith<Self>,
                Self: '__a,
            {
                __idem::__private::FindWith::find_document(
                    store,
                    __idem::__private::natural_key(
                        &<Self as __idem::Idempotent>::MODEL,
                        &[#(&#key_params),*],
                    ),
                )
            }
        }
    });
    let version_key = input.version_field().map(|field| {
        let ident = field.ident;
        let version = probe(field.ty, quote!(version_of(&self.#ident)));
        let stored_version = probe(field.ty, quote!(read_back_version(value)));
        quote! {
            fn version_key(&self) -> __idem::__private::Option<__idem::VersionKey> {
                __idem::__private::Some(#version)
            }

            fn stored_version_key(
                value: &__idem::__private::JsonValue,
            ) -> __idem::__private::Option<__idem::VersionKey> {
                #stored_version
            }
        }
    });
    // serde writes an internally tagged struct's tag first: a text that names the type, constant
    // for it, so it is content with no role.
    let tag_column = input
        .tag()
        .map(|tag| quote!(__idem::Column::new(#tag, __idem::ColumnShape::Text)));
    let columns = tag_column.into_iter().chain(
        input
            .fields
            .iter()
            .filter_map(|field| column_spec(input, field)),
    );
    let push_methods: Vec<TokenStream> = input
        .pushed_fields()
        .map(|(field, item)| push_method(input, field, item, &captures))
        .collect();
    let field_types = field_types_impl(input);

    quote! {
        const _: () = {
            use #runtime as __idem;
            use __idem::__private::{
                KeyField as _, TimestampField as _, UnfitField as _, VersionField as _,
            };

            #field_types

            #[automatically_derived]
            impl #impl_generics __idem::Idempotent for #ident #ty_generics #where_clause {
                const MODEL: __idem::Model = __idem::Model::new(
                    #collection,
                    __idem::IdScheme::#scheme,
                    #hash_field,
                    &[#(#fields),*],
                )#hash_algorithm;

                fn id(&self) -> __idem::__private::Result<__idem::Id, __idem::Error> {
                    #trait_id_body
                }

                #version_key

                fn stored_columns() -> ::std::vec::Vec<__idem::Column> {
                    use __idem::__private::{
                        NeverNull as _, NullableValue as _, ScalarShape as _, StructuredShape as _,
                    };
                    ::std::vec![#(#columns),*]
                }

                fn natural_key(&self) -> __idem::NaturalKey {
                    __idem::__private::natural_key(
                        &<Self as __idem::Idempotent>::MODEL,
                        &[#(#natural_key_values),*],
                    )
                }

                fn with_key_values<__R>(
                    &self,
                    with: impl ::core::ops::FnOnce(&[&dyn __idem::IdKey]) -> __R,
                ) -> __R {
                    with(&[#(#natural_key_values),*])
                }
            }

            #[automatically_derived]
            impl #impl_generics #ident #ty_generics #where_clause {
                #derived_id_methods

                #[doc = #hash_doc]
                // Higher-ranked, so that the bound is checked where the method is called, not
                // here: a type whose `Serialize` derive failed shows serde's error alone.
                #vis fn content_hash(&self) -> __idem::__private::Result<__idem::ContentHash, __idem::Error>
                where
                    for<'__s> Self: __idem::__private::Serialize,
                {
                    <Self as __idem::Idempotent>::content_hash(self)
                }

                #[doc = #upsert_doc]
                #vis fn upsert<'__a, __B: __idem::Backend>(
                    &'__a self,
                    store: &'__a __B,
                ) -> impl __idem::__private::Future<
                    Output = __idem::__private::Result<__idem::Outcome, __idem::Error>,
                > + __idem::__private::Send + '__a + #captures
                where
                    __B: __idem::__private::UpsertWith<Self>,
                {
                    __idem::__private::UpsertWith::upsert_document(store, self)
                }

                #[doc = #index_doc]
                #vis fn ensure_schema<'__a, __B: __idem::Backend>(
                    store: &'__a __B,
                ) -> impl __idem::__private::Future<
                    Output = __idem::__private::Result<(), __idem::Error>,
                > + __idem::__private::Send + '__a + #captures
                where
                    Self: '__a,
                {
                    __idem::Backend::ensure_schema::<Self>(store)
                }

                #(#push_methods)*
            }
        };
    }
}

/// `Column::new("storedName", shape)` for a field serde writes; `None` for a skipped one. The
/// shape of a flattened field is `Flattened`; any other asks the field's type (auto-ref picks a
/// scalar impl if there is one). A field serde may leave out, or default without writing null,
/// is marked so.
fn column_spec(input: &Input, field: &Field) -> Option<TokenStream> {
    if field.attrs.skipped.is_some() {
        return None;
    }
    let name = &field.stored_name;
    let ty = field.ty;
    let shape = if field.attrs.flattened.is_some() {
        quote!(__idem::ColumnShape::Flattened)
    } else {
        quote!((&&__idem::__private::Probe::<#ty>::NEW).shape())
    };
    let column = quote!(__idem::Column::new(#name, #shape));
    Some(if field.attrs.skipped_if.is_some() {
        quote!(#column.may_be_absent())
    } else if field.attrs.defaulted || input.attrs.defaulted {
        // Absent only where NULL cannot be what serde wrote: see `Column::may_be_absent`.
        quote! {{
            let column = #column;
            if (&&__idem::__private::Probe::<#ty>::NEW).may_be_null() {
                column
            } else {
                column.may_be_absent()
            }
        }}
    } else {
        column
    })
}

/// The `use<…>` bound of the futures `upsert`, `ensure_schema` and `push_<field>` return: the store's borrow
/// `'__a`, every parameter of the type (the future holds `Self`), and the backend `__B`. Spelled
/// out because in an edition 2021 crate `impl Trait` captures no lifetime it does not name, so a
/// type with a lifetime parameter would not compile.
fn future_captures(generics: &Generics) -> TokenStream {
    let lifetimes = generics.lifetimes().map(|param| &param.lifetime);
    let types = generics.type_params().map(|param| &param.ident);
    let consts = generics.const_params().map(|param| &param.ident);
    quote!(use<'__a, #(#lifetimes,)* #(#types,)* #(#consts,)* __B>)
}

/// `push_<field>(&self, store, &item)`: the unique push of one item to a `push_by` list.
fn push_method(
    input: &Input,
    field: &Field,
    item: &syn::Type,
    captures: &TokenStream,
) -> TokenStream {
    let vis = input.vis;
    let name = field.name();
    let method = push_method_name(field);
    let item_key = field
        .attrs
        .push_by
        .as_ref()
        .map(syn::LitStr::value)
        .unwrap_or_default();
    let doc = format!(
        "Appends `item` to `{name}` unless an item with the same `{item_key}` is there already, in one \
         round trip: `Appended` or `AlreadyPresent`. A retried push never appends twice. Callable \
         when the item type is `Sync`: the push borrows it across awaits."
    );
    quote! {
        #[doc = #doc]
        #vis fn #method<'__a, __B: __idem::Backend>(
            &'__a self,
            store: &'__a __B,
            item: &'__a #item,
        ) -> impl __idem::__private::Future<
            Output = __idem::__private::Result<__idem::Pushed, __idem::Error>,
        > + __idem::__private::Send + '__a + #captures
        where
            __B: __idem::__private::PushWith<Self, #item>,
        {
            __idem::__private::PushWith::push_item(store, self, #name, item)
        }
    }
}

/// `push_<field>`, the method that pushes to the list `field`.
pub fn push_method_name(field: &Field) -> syn::Ident {
    syn::Ident::new(&format!("push_{}", field.name()), field.ident.span())
}

/// `Field::new("name", "storedName", Role::…)` for a field with a role.
fn field_spec(field: &Field) -> Option<TokenStream> {
    let name = field.name();
    let stored_name = &field.stored_name;
    if let Some(item_key) = &field.attrs.push_by {
        return Some(quote!(__idem::Field::pushed(#name, #stored_name, #item_key)));
    }
    // `check` allows one role per field but for `frozen` beside a key or a timestamp, which are
    // frozen anyway: the first in `Role::ALL` is the one that says most.
    let role = Role::ALL.into_iter().find(|role| field.has(*role))?;
    let variant = syn::Ident::new(role.runtime_variant(), proc_macro2::Span::call_site());
    // Only an `Option`'s null is a value never written; a `()` or `Value::Null` is a value.
    let optional = field.type_is("Option").then(|| quote!(.optional()));
    Some(quote!(__idem::Field::new(#name, #stored_name, __idem::Role::#variant)#optional))
}

/// `(&&Probe::<T>::NEW).method(…)`: a field's value as the trait its role needs when its type
/// implements it, and otherwise through `UnfitField`, whose methods never run. So the code
/// that uses a field's value bounds nothing on its type and repeats none of its errors: each
/// requirement is checked once, by `field_types_impl` or in the where clause.
fn probe(ty: &Type, method: TokenStream) -> TokenStream {
    quote!((&&__idem::__private::Probe::<#ty>::NEW).#method)
}

/// A natural key field's value, as an id key.
fn key_of_self(field: &Field) -> TokenStream {
    let ident = field.ident;
    probe(field.ty, quote!(key_of(&self.#ident)))
}

/// What each field's type must implement to play its role: a key (or an event's idempotency
/// key) `IdKey` and `StoredKey`, the version `OrderedVersion` and `ReadBackVersion`, the
/// timestamp `IdTimestamp`.
fn type_requirements<'a>(input: &'a Input) -> Vec<(&'a Type, TokenStream)> {
    let mut requirements = Vec::new();
    for field in input.natural_key_fields() {
        requirements.push((field.ty, quote!(__idem::IdKey)));
        requirements.push((field.ty, quote!(__idem::StoredKey)));
    }
    if let Some(field) = input.version_field() {
        requirements.push((field.ty, quote!(__idem::OrderedVersion)));
        requirements.push((field.ty, quote!(__idem::__private::ReadBackVersion)));
    }
    if let Some(field) = input.timestamp_field() {
        requirements.push((field.ty, quote!(__idem::IdTimestamp)));
    }
    requirements
}

/// `ty: bound`, spanned on the field's type so the compiler's message points there.
fn requirement(ty: impl ToTokens, bound: &TokenStream, span: Span) -> WherePredicate {
    let bound = spanned(bound.clone(), span);
    syn::parse_quote_spanned!(span=> #ty: #bound)
}

/// `tokens`, every one of them spanned at `span`.
fn spanned(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut inner =
                    proc_macro2::Group::new(group.delimiter(), spanned(group.stream(), span));
                inner.set_span(span);
                token = TokenTree::Group(inner);
            }
            token.set_span(span);
            token
        })
        .collect()
}

/// The input's where clause plus the requirements on the field types that name a parameter of
/// the type (`key: K`): those hold or not per instantiation, so the impls state them. The
/// others are `field_types_impl`'s.
fn bounded_where_clause(input: &Input) -> WhereClause {
    let mut where_clause = input_where_clause(input);
    for (ty, bound) in type_requirements(input) {
        if names_a_parameter(ty, input.generics) {
            where_clause
                .predicates
                .push(requirement(ty, &bound, ty.span()));
        }
    }
    where_clause
}

/// `impl FieldTypes for Type where u64: StoredKey, … {}`: the requirements on the field types
/// that name no parameter of the type. Such a requirement is checked where it is written, so a
/// type that cannot play its role is one error, on the field's type, and the rest of the
/// generated code, which does not state it, adds none. The type's lifetimes are `'static`
/// there (`&'static str: IdKey`): a requirement naming a lifetime parameter would not be
/// checked until used, and no impl of these traits depends on a lifetime.
fn field_types_impl(input: &Input) -> Option<TokenStream> {
    let lifetimes: Vec<&syn::Ident> = input
        .generics
        .lifetimes()
        .map(|param| &param.lifetime.ident)
        .collect();
    let requirements: Vec<WherePredicate> = type_requirements(input)
        .into_iter()
        .filter(|(ty, _)| !names_a_parameter(ty, input.generics))
        .map(|(ty, bound)| {
            let with_static = with_static_lifetimes(ty.to_token_stream(), &lifetimes);
            requirement(with_static, &bound, ty.span())
        })
        .collect();
    if requirements.is_empty() {
        return None;
    }
    let mut where_clause = input_where_clause(input);
    where_clause.predicates.extend(requirements);
    let ident = input.ident;
    let (impl_generics, ty_generics, _) = input.generics.split_for_impl();
    Some(quote! {
        #[automatically_derived]
        impl #impl_generics __idem::__private::FieldTypes for #ident #ty_generics #where_clause {}
    })
}

fn input_where_clause(input: &Input) -> WhereClause {
    input
        .generics
        .where_clause
        .clone()
        .unwrap_or_else(|| WhereClause {
            where_token: Default::default(),
            predicates: Default::default(),
        })
}

/// Whether `ty` names a type or const parameter of the input; a lifetime does not count.
fn names_a_parameter(ty: &Type, generics: &Generics) -> bool {
    let parameters: Vec<&syn::Ident> = generics
        .type_params()
        .map(|param| &param.ident)
        .chain(generics.const_params().map(|param| &param.ident))
        .collect();
    names_any(ty.to_token_stream(), &parameters)
}

fn names_any(tokens: TokenStream, names: &[&syn::Ident]) -> bool {
    let mut after_apostrophe = false;
    tokens.into_iter().any(|token| {
        let in_lifetime = std::mem::take(&mut after_apostrophe);
        match token {
            TokenTree::Ident(ident) => !in_lifetime && names.contains(&&ident),
            TokenTree::Group(group) => names_any(group.stream(), names),
            TokenTree::Punct(punct) => {
                after_apostrophe = punct.as_char() == '\'';
                false
            }
            TokenTree::Literal(_) => false,
        }
    })
}

/// `tokens` with each of `lifetimes` written `'static`.
fn with_static_lifetimes(tokens: TokenStream, lifetimes: &[&syn::Ident]) -> TokenStream {
    let mut after_apostrophe = false;
    tokens
        .into_iter()
        .map(|token| {
            let in_lifetime = std::mem::take(&mut after_apostrophe);
            match token {
                TokenTree::Ident(ident) if in_lifetime && lifetimes.contains(&&ident) => {
                    TokenTree::Ident(syn::Ident::new("static", ident.span()))
                }
                TokenTree::Group(group) => {
                    let stream = with_static_lifetimes(group.stream(), lifetimes);
                    let mut with_static = proc_macro2::Group::new(group.delimiter(), stream);
                    with_static.set_span(group.span());
                    TokenTree::Group(with_static)
                }
                TokenTree::Punct(punct) => {
                    after_apostrophe = punct.as_char() == '\'';
                    TokenTree::Punct(punct)
                }
                other => other,
            }
        })
        .collect()
}

fn derive_id_doc(input: &Input) -> String {
    let keys: Vec<String> = input
        .key_fields()
        .map(|field| format!("`{}`", field.name()))
        .collect();
    let time = match input.timestamp_field() {
        Some(field) => format!("its time part from `{}`", field.name()),
        None => "a zero time part (no timestamp field)".to_owned(),
    };
    format!(
        "Derives the id of a `{}` from raw values, without building one: the hash part from {} \
         in this order, {}.",
        input.ident,
        keys.join(", "),
        time
    )
}
