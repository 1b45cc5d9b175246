//! The document types several test files and the server benchmark share.

use idem_core::Idempotent;
use serde::{Deserialize, Serialize};

/// The design's blog post: two text keys, an `i64` timestamp, plain fields, one volatile, one
/// frozen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "posts")]
#[serde(rename_all = "camelCase")]
pub struct Post {
    #[idem(key)]
    pub slug: String,
    #[idem(key)]
    pub lang: String,
    #[idem(timestamp)]
    pub published_at: i64,
    pub title: String,
    pub body: String,
    #[idem(volatile)]
    pub fetched_at: i64,
    #[idem(frozen)]
    pub author_id: String,
}

/// The design's hello-world post, as a first ingest stores it.
pub fn post() -> Post {
    Post {
        slug: "hello-world".into(),
        lang: "en".into(),
        published_at: 1_700_000_000_000,
        title: "Hello".into(),
        body: "First post.".into(),
        fetched_at: 1_700_000_100_000,
        author_id: "ada".into(),
    }
}

/// [`post`] under the slug `post-{n}`: the `n`th of many.
pub fn numbered_post(n: usize) -> Post {
    Post {
        slug: format!("post-{n}"),
        ..post()
    }
}

/// An entry of an offline-first journal: edited on devices, replayed in batches; versioned and
/// deletable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "entries")]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    #[idem(key)]
    pub user_id: String,
    #[idem(key)]
    pub entry_id: String,
    #[idem(timestamp)]
    pub created_at: i64,
    #[idem(version)]
    pub revision: i64,
    pub text: String,
    #[idem(tombstone)]
    pub deleted_at: Option<i64>,
}

/// Entry `entry_id` of user u1 at `revision`, created at one fixed time, not deleted.
pub fn entry(entry_id: &str, revision: i64, text: &str) -> Entry {
    Entry {
        user_id: "u1".into(),
        entry_id: entry_id.into(),
        created_at: 1_700_000_000_000,
        revision,
        text: text.into(),
        deleted_at: None,
    }
}

/// An account whose balance only ever moves through `apply_once`.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "accounts")]
pub struct Account {
    #[idem(key)]
    pub owner: String,
    /// Written by the first upsert only; then owned by `apply_once`.
    #[idem(effect)]
    pub balance: i64,
}

/// An account of `owner` with nothing credited yet.
pub fn account(owner: &str) -> Account {
    Account {
        owner: owner.into(),
        balance: 0,
    }
}

/// A payment request: no natural key, made idempotent by the key the client sends.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "payments")]
pub struct Payment {
    #[idem(idempotency_key)]
    pub request_key: String,
    pub amount_cents: i64,
}

/// The id timestamp of [`ingested_post`]: unix milliseconds.
pub const T0: i64 = 1_700_000_000_000;

/// A post as an ingest stores it, small enough to seed by hand as other code would have stored
/// it: the audit and adoption tests write it with idem and without.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "posts")]
#[serde(rename_all = "camelCase")]
pub struct IngestedPost {
    #[idem(key)]
    pub slug: String,
    #[idem(key)]
    pub lang: String,
    #[idem(timestamp)]
    pub published_at: i64,
    pub title: String,
    #[idem(volatile)]
    pub fetched_at: i64,
}

/// The English post `slug` titled `title`, published at [`T0`].
pub fn ingested_post(slug: &str, title: &str) -> IngestedPost {
    IngestedPost {
        slug: slug.into(),
        lang: "en".into(),
        published_at: T0,
        title: title.into(),
        fetched_at: 5,
    }
}

/// A playlist whose tracks are pushed once each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "playlists")]
pub struct Playlist {
    #[idem(key)]
    pub name: String,
    #[idem(push_by = "track")]
    pub tracks: Vec<Track>,
}

/// A track of a [`Playlist`], told apart by its name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Track {
    pub track: String,
}
