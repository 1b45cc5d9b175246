//! Writes the generated code: the `Idempotent` impl (backend-neutral metadata and accessors) and
//! the inherent conveniences, inside `const _: () = { … }` with one alias to the runtime.

use proc_macro2::TokenStream;
use quote::quote;
use syn::spanned::Spanned;
use syn::{DeriveInput, Generics, WhereClause};

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
        (Err(errors), _) => {
            let mut output = errors.to_compile_error();
            output.extend(fallback::stub(input, runtime));
            output
        }
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

    let key_idents: Vec<_> = input.key_fields().map(|field| field.ident).collect();
    let natural_key_idents: Vec<_> = input
        .natural_key_fields()
        .map(|field| field.ident)
        .collect();
    // The parameters of `derive_id` are named after the fields they take.
    let key_params = &key_idents;
    let (timestamp_self, timestamp_param) = match input.timestamp_field() {
        Some(field) => {
            let ident = field.ident;
            let ty = field.ty;
            // Typed as the field, so a literal (`&1_700_000_000_000`) infers the field's type.
            (
                quote!(__idem::__private::Some(&self.#ident)),
                Some((
                    quote!(#ident: &#ty,),
                    quote!(__idem::__private::Some(#ident)),
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
                &[#(&self.#key_idents),*],
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
        let ty = field.ty;
        quote! {
            fn version_key(&self) -> __idem::__private::Option<__idem::VersionKey> {
                __idem::__private::Some(__idem::OrderedVersion::version_key(&self.#ident))
            }

            fn stored_version_key(
                value: &__idem::__private::JsonValue,
            ) -> __idem::__private::Option<__idem::VersionKey> {
                __idem::__private::stored_version_key::<#ty>(value)
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

    quote! {
        const _: () = {
            use #runtime as __idem;

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
                        &[#(&self.#natural_key_idents),*],
                    )
                }

                fn with_key_values<__R>(
                    &self,
                    with: impl ::core::ops::FnOnce(&[&dyn __idem::IdKey]) -> __R,
                ) -> __R {
                    with(&[#(&self.#natural_key_idents),*])
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
    let method = syn::Ident::new(&format!("push_{name}"), field.ident.span());
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

/// The input's where clause plus the type requirements of the key and timestamp fields, each
/// spanned on the field's type so the compiler's message points there.
fn bounded_where_clause(input: &Input) -> WhereClause {
    let mut where_clause = input
        .generics
        .where_clause
        .clone()
        .unwrap_or_else(|| WhereClause {
            where_token: Default::default(),
            predicates: Default::default(),
        });
    for field in input.natural_key_fields() {
        let ty = field.ty;
        where_clause
            .predicates
            .push(syn::parse_quote_spanned!(ty.span()=> #ty: __idem::IdKey));
        where_clause
            .predicates
            .push(syn::parse_quote_spanned!(ty.span()=> #ty: __idem::StoredKey));
    }
    if let Some(field) = input.version_field() {
        let ty = field.ty;
        where_clause
            .predicates
            .push(syn::parse_quote_spanned!(ty.span()=> #ty: __idem::OrderedVersion));
        where_clause
            .predicates
            .push(syn::parse_quote_spanned!(ty.span()=> #ty: __idem::__private::ReadBackVersion));
    }
    if let Some(field) = input.timestamp_field() {
        let ty = field.ty;
        where_clause
            .predicates
            .push(syn::parse_quote_spanned!(ty.span()=> #ty: __idem::IdTimestamp));
    }
    where_clause
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
