//! `T::derive_id` against what it cannot avoid: one SHA-256 over the key encoding.
//!
//! Every figure is read as a ratio to `baseline_sha256_key_bytes`, measured in the same run:
//! SHA-256 over the exact `v1` bytes of the same keys, built once outside the loop. The rest of
//! `derive_id` (key dispatch, streaming the encoding into the hasher, the empty-key check, the
//! timestamp range check, building the ULID) is the overhead being measured.
//!
//! `scripts/bench-ratios` runs this and prints the table.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use idem_core::id::{encode_key_v1, KeyPart};
use idem_core::Idempotent;
use serde::Serialize;
use sha2::{Digest, Sha256};

mod fixtures;

use fixtures::{config, Post};

/// The same document with the reference helper's `slug:lang` scheme.
#[derive(Serialize, Idempotent)]
#[idem(collection = "posts", id_scheme = "joined")]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct JoinedPost {
    #[idem(key)]
    slug: String,
    #[idem(key)]
    lang: String,
    #[idem(timestamp)]
    published_at: i64,
    title: String,
    body: String,
    #[idem(volatile)]
    fetched_at: i64,
    #[idem(frozen)]
    author_id: String,
}

fn derive_id(c: &mut Criterion) {
    let slug = String::from("hello-world");
    let lang = String::from("en");
    let published_at: i64 = 1_700_000_000_000;

    // The exact bytes `v1` feeds SHA-256 for these keys (31 bytes: one SHA-256 block).
    let mut key_bytes = Vec::new();
    for part in [KeyPart::Text(&slug), KeyPart::Text(&lang)] {
        encode_key_v1(part, |bytes| key_bytes.extend_from_slice(bytes));
    }
    // The bytes `joined` feeds SHA-256: "hello-world:en".
    let joined_bytes = format!("{slug}:{lang}").into_bytes();

    // The baselines hash what `derive_id` hashes, or the comparison means nothing.
    let v1 = Post::derive_id(&slug, &lang, &published_at).expect("valid keys");
    assert_eq!(v1.hash_part()[..], Sha256::digest(&key_bytes)[..10]);
    let joined = JoinedPost::derive_id(&slug, &lang, &published_at).expect("valid keys");
    assert_eq!(joined.hash_part()[..], Sha256::digest(&joined_bytes)[..10]);

    // `.ok()` below: the `Err` side is never taken, and keeping `idem_core::Error` out of the
    // timed closure's return type keeps its size out of the figures.
    let mut group = c.benchmark_group("derive_id");
    group.bench_function("baseline_sha256_key_bytes", |b| {
        b.iter(|| Sha256::digest(black_box(key_bytes.as_slice())))
    });
    group.bench_function("v1", |b| {
        b.iter(|| {
            Post::derive_id(black_box(&slug), black_box(&lang), black_box(&published_at)).ok()
        })
    });
    group.bench_function("joined", |b| {
        b.iter(|| {
            JoinedPost::derive_id(black_box(&slug), black_box(&lang), black_box(&published_at)).ok()
        })
    });
    // For reading `joined`: its own bytes are shorter but also one block, so this should match
    // the baseline.
    group.bench_function("sha256_joined_bytes", |b| {
        b.iter(|| Sha256::digest(black_box(joined_bytes.as_slice())))
    });
    // A random ULID, for scale: what an id costs when it is not derived.
    group.bench_function("ulid_generate", |b| b.iter(ulid::Ulid::generate));
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = derive_id
}
criterion_main!(benches);
