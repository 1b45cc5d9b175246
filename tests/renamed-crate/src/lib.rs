//! `#[idem(crate = "…")]` with a renamed dependency: this crate depends on idem-core only as
//! `renamed_idem`, so it compiles only if the generated code reaches the runtime through the
//! override and never names `::idem_core`. Its lints are strict, up to `clippy::pedantic`, and
//! `cargo clippy -- -D warnings` runs over it, so it also proves the generated code clippy-clean
//! (the UI test `pass/lints.rs` cannot: trybuild compiles with rustc).

#![deny(
    missing_docs,
    unused_qualifications,
    unused_results,
    clippy::all,
    clippy::pedantic
)]

use renamed_idem::Idempotent;

/// A post, identified by its slug and language.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Idempotent)]
#[idem(crate = "renamed_idem", collection = "posts")]
#[serde(rename_all = "camelCase")]
pub struct Post {
    /// The post's slug.
    #[idem(key)]
    pub slug: String,
    /// Its language.
    #[idem(key)]
    pub lang: String,
    /// When it was published, in unix milliseconds.
    #[idem(timestamp)]
    pub published_at: i64,
    /// Its title.
    pub title: String,
    /// When it was last fetched; not part of the content hash.
    #[idem(volatile)]
    pub fetched_at: i64,
}

/// A generic document, also through the renamed crate.
#[derive(Debug, serde::Serialize, Idempotent)]
#[idem(crate = "renamed_idem", collection = "envelopes")]
pub struct Envelope<K, T> {
    /// Its key.
    #[idem(key)]
    pub key: K,
    /// What it carries.
    pub payload: T,
}

#[cfg(test)]
mod tests {
    use renamed_idem::{IdScheme, Role};

    use super::*;

    fn post() -> Post {
        Post {
            slug: "hello-world".to_owned(),
            lang: "en".to_owned(),
            published_at: 1_700_000_000_000,
            title: "Hello".to_owned(),
            fetched_at: 1_700_000_100_000,
        }
    }

    #[test]
    fn generated_code_reaches_the_runtime_through_the_override(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let post = post();
        let id = post.id()?;
        assert_eq!(
            id,
            Post::derive_id(&post.slug, &post.lang, &post.published_at)?
        );
        assert_eq!(id.timestamp_ms(), 1_700_000_000_000);

        let refetched = Post {
            fetched_at: 1_800_000_000_000,
            ..post.clone()
        };
        assert_eq!(post.content_hash()?, refetched.content_hash()?);
        let retitled = Post {
            title: "Hello again".to_owned(),
            ..post.clone()
        };
        assert_ne!(post.content_hash()?, retitled.content_hash()?);

        let envelope = Envelope {
            key: 7_u32,
            payload: vec!["a"],
        };
        assert_eq!(envelope.id()?, Envelope::<u32, Vec<&str>>::derive_id(7)?);
        Ok(())
    }

    #[test]
    fn model_is_generated() {
        let model = <Post as Idempotent>::MODEL;
        assert_eq!(model.collection(), "posts");
        assert_eq!(model.id_scheme(), IdScheme::V1);
        assert_eq!(model.hash_field(), "sourceHash");
        let fields: Vec<_> = model
            .fields()
            .iter()
            .map(|field| (field.name(), field.stored_name(), field.role()))
            .collect();
        assert_eq!(
            fields,
            [
                ("slug", "slug", Role::Key),
                ("lang", "lang", Role::Key),
                ("published_at", "publishedAt", Role::Timestamp),
                ("fetched_at", "fetchedAt", Role::Volatile),
            ]
        );
        assert_eq!(
            <Envelope<u32, ()> as Idempotent>::MODEL.collection(),
            "envelopes"
        );
    }
}
