//! What a failed derive emits: its errors, an `Idempotent` impl that never runs, and the
//! inherent items the derive generates, so that code using the type reports the derive's
//! mistakes and nothing after them (no missing impls, no `Post::find` read as `Iterator::find`).

use proc_macro2::TokenStream;
use quote::quote;
use syn::DeriveInput;

use crate::ast::Input;
use crate::expand::{push_method_name, runtime_path};

/// The inherent items take and return `__Unknown`, an array whose length is the derive's first
/// error: a type the compiler knows to be in error, so it checks no call to them, whatever the
/// arguments. `derive_id` and `find` are constants of that type rather than functions, since
/// their parameters are the key fields, which the mistake may be about (a misspelt `key`, none
/// at all): a call of any arity then reports nothing.
pub fn stub(
    input: &DeriveInput,
    model: Option<&Input>,
    runtime: Option<syn::Path>,
    errors: syn::Error,
) -> TokenStream {
    let runtime = runtime_path(runtime);
    let ident = &input.ident;
    let vis = &input.vis;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let mut errors = errors.into_iter().map(|error| error.to_compile_error());
    let first_error = errors.next();
    let other_errors: TokenStream = errors.collect();
    let push_methods = model
        .into_iter()
        .flat_map(Input::pushed_fields)
        .map(|(field, _)| push_method_name(field));
    // The stub is emitted only beside the derive's compile errors, so the crate never builds
    // with it and its bodies never run.
    let never_runs = quote!(::core::unreachable!(
        "idem's stub beside its compile errors never runs"
    ));
    quote! {
        const _: () = {
            use #runtime as __idem;

            type __Unknown = [(); #first_error];

            #[automatically_derived]
            impl #impl_generics __idem::Idempotent for #ident #ty_generics #where_clause {
                const MODEL: __idem::Model = __idem::Model::new("", __idem::IdScheme::V1, "", &[]);

                fn id(&self) -> __idem::__private::Result<__idem::Id, __idem::Error> {
                    #never_runs
                }

                fn natural_key(&self) -> __idem::NaturalKey {
                    #never_runs
                }
            }

            #[automatically_derived]
            #[allow(non_upper_case_globals)]
            impl #impl_generics #ident #ty_generics #where_clause {
                #vis const derive_id: __Unknown = #never_runs;
                #vis const find: __Unknown = #never_runs;

                #vis fn id(&self) -> __Unknown {
                    #never_runs
                }

                #vis fn content_hash(&self) -> __Unknown {
                    #never_runs
                }

                #vis fn upsert<__B>(&self, _store: __B) -> __Unknown {
                    #never_runs
                }

                #vis fn ensure_schema<__B>(_store: __B) -> __Unknown {
                    #never_runs
                }

                #(
                    #vis fn #push_methods<__B, __I>(&self, _store: __B, _item: __I) -> __Unknown {
                        #never_runs
                    }
                )*
            }
        };

        #other_errors
    }
}
