//! What is emitted beside the errors of a failed derive: an `Idempotent` impl that never runs,
//! so code using the type reports the derive's mistakes, not a cascade of missing impls.

use proc_macro2::TokenStream;
use quote::quote;
use syn::DeriveInput;

use crate::expand::runtime_path;

pub fn stub(input: &DeriveInput, runtime: Option<syn::Path>) -> TokenStream {
    let runtime = runtime_path(runtime);
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    quote! {
        const _: () = {
            use #runtime as __idem;

            // These bodies never run: the stub is emitted only beside the derive's compile
            // errors, so the crate never builds with it.
            #[automatically_derived]
            impl #impl_generics __idem::Idempotent for #ident #ty_generics #where_clause {
                const MODEL: __idem::Model = __idem::Model::new("", __idem::IdScheme::V1, "", &[]);

                fn id(&self) -> __idem::__private::Result<__idem::Id, __idem::Error> {
                    ::core::unreachable!("idem's stub beside its compile errors never runs")
                }

                fn natural_key(&self) -> __idem::NaturalKey {
                    ::core::unreachable!("idem's stub beside its compile errors never runs")
                }
            }
        };
    }
}
