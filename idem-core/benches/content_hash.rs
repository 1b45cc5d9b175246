//! `post.content_hash()` against SHA-256 over the bytes it hashes, and against hashing BSON.
//!
//! For each document size (200 B, 2 KiB and 64 KiB of canonical bytes, the body sized to fit),
//! every figure is read as a ratio to `baseline_sha256_canonical`, measured in the same run: raw
//! SHA-256 over the document's canonical bytes, computed once outside the loop. What
//! `content_hash` adds on top is walking the `Serialize` impl and encoding as it goes.
//!
//! `hand_encoded_sha256` is what code written for `Post` alone does: the same canonical bytes
//! written field by field into a reused buffer (names, their lengths and which fields are hashed
//! fixed when compiled), then SHA-256 over them. What `content_hash` costs above it is the walk
//! of the `Serialize` impl; what it costs above raw SHA-256 but not above this, an encoding that
//! runs before its hash pays however it is written.
//!
//! The BSON rows hash what a hand-rolled helper would: the document serialized to BSON. The
//! throughput of every row is the canonical size, so the GB/s figures compare per document.
//!
//! `scripts/bench-ratios` runs this and prints the table.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use idem_core::hash::canonical_document_bytes;
use idem_core::mongodb::bson;
use idem_core::Idempotent;
use sha2::{Digest, Sha256};

mod fixtures;

use fixtures::{config, Post};

/// A post whose canonical encoding is exactly `size` bytes.
fn post_of_size(size: usize) -> Post {
    let mut post = Post {
        slug: "hello-world".into(),
        lang: "en".into(),
        published_at: 1_700_000_000_000,
        title: "Hello, world".into(),
        body: String::new(),
        fetched_at: 1_700_000_100_000,
        author_id: "ada".into(),
    };
    let overhead = canonical(&post).len();
    let filler = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. ";
    post.body = filler.chars().cycle().take(size - overhead).collect();
    assert_eq!(canonical(&post).len(), size);
    post
}

fn canonical(post: &Post) -> Vec<u8> {
    canonical_document_bytes(post, &Post::MODEL).expect("a Post always serializes")
}

/// `post`'s canonical bytes as code written for `Post` alone would make them (the tags of
/// `docs/SPEC.md`: a struct of its hashed fields in serde's order, `fetchedAt` left out), into
/// `buffer`, then their SHA-256.
fn hand_encoded_sha256(post: &Post, buffer: &mut Vec<u8>) -> [u8; 32] {
    fn text(buffer: &mut Vec<u8>, text: &str) {
        buffer.push(0x05);
        buffer.extend_from_slice(&(text.len() as u64).to_be_bytes());
        buffer.extend_from_slice(text.as_bytes());
    }
    fn integer(buffer: &mut Vec<u8>, value: i64) {
        buffer.push(0x02);
        buffer.extend_from_slice(&i128::from(value).to_be_bytes());
    }
    buffer.clear();
    buffer.push(0x0b);
    text(buffer, "slug");
    text(buffer, &post.slug);
    text(buffer, "lang");
    text(buffer, &post.lang);
    text(buffer, "publishedAt");
    integer(buffer, post.published_at);
    text(buffer, "title");
    text(buffer, &post.title);
    text(buffer, "body");
    text(buffer, &post.body);
    text(buffer, "authorId");
    text(buffer, &post.author_id);
    buffer.push(0x0c);
    Sha256::digest(buffer.as_slice()).into()
}

fn bson_sha256(post: &Post) -> [u8; 32] {
    let bytes = bson::to_vec(post).expect("a Post is a BSON document");
    Sha256::digest(&bytes).into()
}

fn bson_document_sha256(post: &Post) -> [u8; 32] {
    let document = bson::to_document(post).expect("a Post is a BSON document");
    let mut bytes = Vec::new();
    document
        .to_writer(&mut bytes)
        .expect("writing to a Vec cannot fail");
    Sha256::digest(&bytes).into()
}

/// The same post, hashed with the opt-in BLAKE3 (`#[idem(hash_algorithm = "blake3")]`).
#[cfg(feature = "blake3")]
#[derive(Clone, serde::Serialize, Idempotent)]
#[idem(collection = "posts", hash_algorithm = "blake3")]
#[serde(rename_all = "camelCase")]
struct Blake3Post {
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

#[cfg(feature = "blake3")]
fn blake3_rows(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    label: &str,
    post: &Post,
    bytes: &[u8],
) {
    let post = Blake3Post {
        slug: post.slug.clone(),
        lang: post.lang.clone(),
        published_at: post.published_at,
        title: post.title.clone(),
        body: post.body.clone(),
        fetched_at: post.fetched_at,
        author_id: post.author_id.clone(),
    };
    assert_eq!(
        post.content_hash().expect("hashable").as_bytes(),
        blake3::hash(bytes).as_bytes()
    );
    group.bench_with_input(
        BenchmarkId::new("raw_blake3_canonical", label),
        bytes,
        |b, bytes| b.iter(|| blake3::hash(black_box(bytes))),
    );
    group.bench_with_input(
        BenchmarkId::new("content_hash_blake3", label),
        &post,
        |b, post| b.iter(|| black_box(post).content_hash().ok()),
    );
}

fn content_hash(c: &mut Criterion) {
    let mut group = c.benchmark_group("content_hash");
    for (label, size) in [("200B", 200), ("2KiB", 2 << 10), ("64KiB", 64 << 10)] {
        let post = post_of_size(size);
        let bytes = canonical(&post);
        // The baseline hashes exactly what `content_hash` hashes.
        let expected: [u8; 32] = Sha256::digest(&bytes).into();
        assert_eq!(post.content_hash().expect("hashable").as_bytes(), &expected);

        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("baseline_sha256_canonical", label),
            &bytes,
            |b, bytes| b.iter(|| Sha256::digest(black_box(bytes.as_slice()))),
        );
        group.bench_with_input(BenchmarkId::new("content_hash", label), &post, |b, post| {
            b.iter(|| black_box(post).content_hash().ok())
        });
        let mut buffer = Vec::with_capacity(bytes.len());
        assert_eq!(hand_encoded_sha256(&post, &mut buffer), expected);
        group.bench_with_input(
            BenchmarkId::new("hand_encoded_sha256", label),
            &post,
            |b, post| b.iter(|| hand_encoded_sha256(black_box(post), &mut buffer)),
        );
        group.bench_with_input(
            BenchmarkId::new("bson_to_vec_sha256", label),
            &post,
            |b, post| b.iter(|| bson_sha256(black_box(post))),
        );
        group.bench_with_input(
            BenchmarkId::new("bson_to_document_sha256", label),
            &post,
            |b, post| b.iter(|| bson_document_sha256(black_box(post))),
        );
        #[cfg(feature = "blake3")]
        blake3_rows(&mut group, label, &post, &bytes);
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = content_hash
}
criterion_main!(benches);
