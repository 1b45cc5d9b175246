//! A crate that denies warnings and strict lints, and still derives `Idempotent`: the
//! generated public items are documented, its paths are absolute, no result is ignored.
//! trybuild compiles with rustc, so `clippy::all` is inert here; `tests/renamed-crate`, which
//! `cargo clippy -- -D warnings` covers, proves the generated code clippy-clean.

#![deny(
    warnings,
    missing_docs,
    unused_qualifications,
    unused_results,
    unused_lifetimes,
    single_use_lifetimes,
    rust_2018_idioms,
    trivial_casts,
    clippy::all
)]

use idem_core::Idempotent;

/// A blog post.
#[derive(serde::Serialize, Idempotent)]
#[idem(collection = "posts")]
pub struct Post {
    /// The post's slug.
    #[idem(key)]
    pub slug: String,
    /// When it was published, in unix milliseconds.
    #[idem(timestamp)]
    pub published_at: i64,
    /// Who wrote it.
    #[idem(frozen)]
    pub author: String,
    /// When it was last fetched.
    #[idem(volatile)]
    pub fetched_at: i64,
}

/// A generic envelope.
#[derive(serde::Serialize, Idempotent)]
#[idem(collection = "envelopes")]
pub struct Envelope<'a, K, T> {
    /// Its key.
    #[idem(key)]
    pub key: K,
    /// What it carries.
    pub payload: &'a T,
}

fn main() {
    let post = Post {
        slug: "a".to_owned(),
        published_at: 1,
        author: "ada".to_owned(),
        fetched_at: 2,
    };
    let _ = post.id().unwrap();
    let _ = post.content_hash().unwrap();
    let envelope = Envelope {
        key: 1_u8,
        payload: &post,
    };
    let _ = envelope.id().unwrap();
}
