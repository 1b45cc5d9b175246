//! placeholder
use proc_macro::TokenStream;
#[proc_macro_derive(Idempotent, attributes(idem))]
pub fn derive_idempotent(_input: TokenStream) -> TokenStream { TokenStream::new() }
