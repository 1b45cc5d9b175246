//! `#[derive(Idempotent)]`: parse, check, expand. Use it through `idem_core`, which re-exports
//! it and documents its attributes.
//!
//! Each stage is a file: `attr` reads the `#[idem(…)]` and `#[serde(…)]` attributes, `ast`
//! builds the model of the input, `check` enforces the rules between fields, `expand` writes the
//! code. Every mistake is gathered in a `Ctxt` and reported at once, spanned on its tokens.

mod ast;
mod attr;
mod case;
mod check;
mod ctxt;
mod expand;
mod fallback;
mod symbol;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Derives `idem_core::Idempotent`; see the `idem_core` crate docs.
#[proc_macro_derive(Idempotent, attributes(idem))]
pub fn derive_idempotent(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive(&input).into()
}
