//! Collects every error of one derive so they are reported together.

use std::cell::RefCell;
use std::fmt::Display;

use quote::ToTokens;

/// No `Default`: every `Ctxt` starts collecting, so none can drop errors unchecked.
pub struct Ctxt {
    // `None` once checked: the derive must never drop errors on the floor.
    errors: RefCell<Option<Vec<syn::Error>>>,
}

impl Ctxt {
    pub fn new() -> Self {
        Ctxt {
            errors: RefCell::new(Some(Vec::new())),
        }
    }

    /// Records an error spanned on `tokens`.
    pub fn error_spanned_by<T: ToTokens, M: Display>(&self, tokens: T, message: M) {
        self.push(syn::Error::new_spanned(tokens.into_token_stream(), message));
    }

    /// Records an error from syn.
    pub fn syn_error(&self, error: syn::Error) {
        self.push(error);
    }

    fn push(&self, error: syn::Error) {
        if let Some(errors) = self.errors.borrow_mut().as_mut() {
            errors.push(error);
        }
    }

    /// All recorded errors, combined into one, or `Ok` if there were none.
    pub fn check(self) -> Result<(), syn::Error> {
        let errors = self.errors.borrow_mut().take().unwrap_or_default();
        let mut errors = errors.into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for error in errors {
            combined.combine(error);
        }
        Err(combined)
    }
}

impl Drop for Ctxt {
    fn drop(&mut self) {
        // Only a bug in the derive itself reaches this (every path calls `check`), never a
        // user mistake; panicking is the one way a proc macro can say so instead of silently
        // dropping the errors it gathered.
        if !std::thread::panicking() && self.errors.borrow().is_some() {
            panic!("idem-derive: Ctxt dropped without check()");
        }
    }
}
