//! Heap allocations of the hot paths, counted by a global allocator.
//!
//! `derive_id` and the content hash of a document without maps stream their encoding straight
//! into SHA-256, so they must not allocate at all; a map buffers its entries to sort them, so its
//! allocations are bounded by how its buffers grow. An allocation here is a call to `alloc`,
//! `alloc_zeroed` or `realloc`: each is a trip into the allocator.
//!
//! The test harness runs tests on several threads and allocates on them (and on this one, around
//! each test), so the allocator counts only on the current thread and only inside
//! `allocations_in`.

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;

use idem_core::Idempotent;
use idem_tests::allocations::{allocations_in, CountingAllocator};
use idem_tests::fixtures::Post;
use serde::Serialize;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// The error as text, so the counted closures return a small `Result`. Formatting allocates,
/// but only on the error path, which these tests never take.
fn text<T>(result: Result<T, idem_core::Error>) -> Result<T, String> {
    result.map_err(|error| error.to_string())
}

/// The same keys under the reference helper's scheme.
#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "posts", id_scheme = "joined")]
struct JoinedPost {
    #[idem(key)]
    slug: String,
    #[idem(key)]
    lang: String,
    #[idem(timestamp)]
    published_at: i64,
}

/// Keys of every stored kind: text, char, integers, bool. `derive_id` takes any `IdKey` for a
/// key, so the tests below pass a `u128` for `serial` to encode a large unsigned too.
#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "readings")]
struct Reading {
    #[idem(key)]
    station: String,
    #[idem(key)]
    band: char,
    #[idem(key)]
    sensor: u32,
    #[idem(key)]
    offset: i64,
    #[idem(key)]
    serial: i64,
    #[idem(key)]
    calibrated: bool,
}

/// `Reading` under `joined`: its integers are formatted as decimal text for the hash.
#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "readings", id_scheme = "joined")]
struct JoinedReading {
    #[idem(key)]
    station: String,
    #[idem(key)]
    band: char,
    #[idem(key)]
    sensor: u32,
    #[idem(key)]
    offset: i64,
    #[idem(key)]
    serial: i64,
    #[idem(key)]
    calibrated: bool,
}

fn post() -> Post {
    Post {
        slug: "hello-world".into(),
        lang: "en".into(),
        published_at: 1_700_000_000_000,
        title: "Hello".into(),
        body: "First post. ".repeat(200),
        fetched_at: 1_700_000_100_000,
        author_id: "ada".into(),
    }
}

#[test]
fn derive_id_v1_allocates_nothing() {
    // `v1` streams each key's tag, length and bytes into the hasher, and `Id` is 16 bytes on
    // the stack: nothing is allocated unless the keys are refused (the error names them).
    let (slug, lang, published_at) = (
        String::from("hello-world"),
        String::from("en"),
        1_700_000_000_000,
    );
    let (id, allocations) = allocations_in(|| text(Post::derive_id(&slug, &lang, &published_at)));
    assert_eq!(id.unwrap(), post().id().unwrap());
    assert_eq!(allocations, 0, "Post::derive_id (v1) allocated");

    // `post.id()` goes through the same path with the fields as keys.
    let document = post();
    let (_, allocations) = allocations_in(|| text(black_box(&document).id()));
    assert_eq!(allocations, 0, "post.id() (v1) allocated");
}

#[test]
fn derive_id_v1_allocates_nothing_for_any_key_type() {
    let (id, allocations) = allocations_in(|| {
        text(Reading::derive_id(
            "north".to_owned(),
            'λ',
            7_u32,
            -3_i64,
            u128::MAX,
            true,
        ))
    });
    // The `to_owned` above is the one allocation: the derive itself adds none.
    assert_eq!(allocations, 1, "Reading::derive_id (v1) allocated");
    id.unwrap();

    let station = String::from("north");
    let (id, allocations) = allocations_in(|| {
        text(Reading::derive_id(
            &station,
            'λ',
            7_u32,
            -3_i64,
            u128::MAX,
            true,
        ))
    });
    assert_eq!(allocations, 0, "Reading::derive_id (v1) allocated");
    id.unwrap();
}

#[test]
fn derive_id_joined_allocates_nothing() {
    // `joined` feeds the key text and the `:` separators to the hasher one by one; it never
    // builds the joined string.
    let (slug, lang, published_at) = (
        String::from("hello-world"),
        String::from("en"),
        1_700_000_000_000,
    );
    let (id, allocations) =
        allocations_in(|| text(JoinedPost::derive_id(&slug, &lang, &published_at)));
    id.unwrap();
    assert_eq!(allocations, 0, "JoinedPost::derive_id allocated");

    // Integers and booleans are formatted into a 40-byte stack buffer (every i128 and u128 fits),
    // a char is encoded into 4 stack bytes.
    let station = String::from("north");
    let (id, allocations) = allocations_in(|| {
        text(JoinedReading::derive_id(
            &station,
            'λ',
            7_u32,
            -3_i64,
            u128::MAX,
            true,
        ))
    });
    id.unwrap();
    assert_eq!(allocations, 0, "JoinedReading::derive_id allocated");
}

/// Every kind of value that streams: nested structs, sequences, options, enums, floats, bytes.
#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "articles")]
#[serde(rename_all = "camelCase")]
struct Article {
    #[idem(key)]
    slug: String,
    #[idem(timestamp)]
    published_at: u64,
    title: String,
    tags: Vec<String>,
    author: Author,
    rating: Option<f64>,
    draft: bool,
    status: Status,
    revisions: Vec<(u32, String)>,
    #[serde(with = "serde_bytes_like")]
    thumbnail: Vec<u8>,
    #[idem(volatile)]
    views: u64,
}

#[derive(Debug, Clone, Serialize)]
struct Author {
    name: String,
    id: i64,
}

#[derive(Debug, Clone, Serialize)]
enum Status {
    Published,
    Scheduled { at: i64 },
    Hidden(String),
}

/// Serializes a `Vec<u8>` as bytes, without a dependency on `serde_bytes`.
mod serde_bytes_like {
    pub fn serialize<S: serde::Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(bytes)
    }
}

fn article(status: Status) -> Article {
    Article {
        slug: "streaming".into(),
        published_at: 1_700_000_000_000,
        title: "Hashing without a document".into(),
        tags: vec!["rust".into(), "serde".into(), "sha-256".into()],
        author: Author {
            name: "Ada".into(),
            id: 36,
        },
        rating: Some(4.5),
        draft: false,
        status,
        revisions: vec![(1, "first".into()), (2, "second".into())],
        thumbnail: vec![0x89, 0x50, 0x4e, 0x47],
        views: 1_000,
    }
}

#[test]
fn content_hash_of_plain_fields_allocates_nothing() {
    // The encoder writes into a fixed-size array in front of SHA-256 (part of `HashSink`, on the
    // stack) and hands longer text straight to the hasher: text, integers and structs need no
    // heap.
    let document = post();
    let (hash, allocations) = allocations_in(|| text(black_box(&document).content_hash()));
    hash.unwrap();
    assert_eq!(allocations, 0, "content_hash of a Post allocated");

    // The same holds for nested structs, sequences, tuples, options, floats, bytes and every
    // shape of enum: only maps are buffered.
    for status in [
        Status::Published,
        Status::Scheduled {
            at: 1_800_000_000_000,
        },
        Status::Hidden("withdrawn".into()),
    ] {
        let document = article(status);
        let (hash, allocations) = allocations_in(|| text(black_box(&document).content_hash()));
        hash.unwrap();
        assert_eq!(allocations, 0, "content_hash of {document:?} allocated");
    }
}

/// A document with a map field: its entries are buffered and sorted before they are hashed.
#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "pages")]
struct Page {
    #[idem(key)]
    path: String,
    title: String,
    headers: HashMap<String, String>,
}

fn page(entries: usize) -> Page {
    Page {
        path: "/index".into(),
        title: "Home".into(),
        headers: (0..entries)
            .map(|index| (format!("x-header-{index}"), format!("value number {index}")))
            .collect(),
    }
}

/// How many allocations a `Vec` makes growing from empty to `len` elements by doubling from
/// `first_capacity`: an upper bound, since a push that needs more than double skips steps.
fn doubling_allocations(first_capacity: usize, len: usize) -> usize {
    let (mut capacity, mut allocations) = (0, 0);
    while capacity < len {
        capacity = (capacity * 2).max(first_capacity);
        allocations += 1;
    }
    allocations
}

/// The bound on the allocations of hashing one map with `entries` entries whose encoded keys
/// and values take `encoded_bytes` bytes, from how `hash::Map` buffers it:
///
/// - the byte buffer, a `Vec<u8>` starting empty: its first capacity is 8 and it doubles;
/// - the entry index, a `Vec` of three `usize` (24 bytes) per entry: first capacity 4;
/// - `sort_by`, a stable sort: none up to 20 entries (insertion sort), then a scratch buffer that
///   lives on the stack while it fits 4 KiB, so at most one allocation; counted as one (an
///   unstable sort would need none, and the bound would still hold).
fn map_bound(entries: usize, encoded_bytes: usize) -> usize {
    doubling_allocations(8, encoded_bytes) + doubling_allocations(4, entries) + 1
}

#[test]
fn content_hash_of_a_map_allocates_within_its_buffers_growth() {
    for entries in [0, 1, 8, 100, 1_000] {
        let document = page(entries);
        // What the map buffers: each entry's key and value encoded as text (tag, u64 length,
        // bytes), exactly as `hash::Map` writes them into its buffer.
        let encoded_bytes: usize = document
            .headers
            .iter()
            .map(|(key, value)| 9 + key.len() + 9 + value.len())
            .sum();
        let (hash, allocations) = allocations_in(|| text(black_box(&document).content_hash()));
        hash.unwrap();
        let bound = map_bound(entries, encoded_bytes);
        eprintln!(
            "content_hash with a {entries}-entry HashMap ({encoded_bytes} buffered bytes): \
             {allocations} allocations (bound {bound})"
        );
        assert!(
            allocations <= bound,
            "{entries} entries: {allocations} allocations, more than the bound {bound}"
        );
        if entries == 0 {
            // An empty map never grows its buffers.
            assert_eq!(allocations, 0);
        }
    }
}

#[test]
fn the_map_bound_is_per_map() {
    // Two map fields buffer independently: the bound is the sum of their bounds. A BTreeMap is
    // already sorted, but the encoder cannot know that and buffers it too.
    #[derive(Debug, Clone, Serialize, Idempotent)]
    #[idem(collection = "pages")]
    struct TwoMaps {
        #[idem(key)]
        path: String,
        headers: HashMap<String, String>,
        cookies: BTreeMap<String, String>,
    }
    let headers = page(50).headers;
    let cookies: BTreeMap<String, String> = headers.clone().into_iter().take(10).collect();
    let encoded = |map: &mut dyn Iterator<Item = (&String, &String)>| -> usize {
        map.map(|(key, value)| 18 + key.len() + value.len()).sum()
    };
    let bound = map_bound(headers.len(), encoded(&mut headers.iter()))
        + map_bound(cookies.len(), encoded(&mut cookies.iter()));
    let document = TwoMaps {
        path: "/".into(),
        headers,
        cookies,
    };
    let (hash, allocations) = allocations_in(|| text(black_box(&document).content_hash()));
    hash.unwrap();
    eprintln!("content_hash with two maps: {allocations} allocations (bound {bound})");
    assert!(
        allocations <= bound,
        "{allocations} allocations, bound {bound}"
    );
}

/// `Post` with eight more columns of every scalar kind, and one left NULL.
#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "wide_posts")]
struct WidePost {
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
    subtitle: String,
    summary: String,
    section: String,
    words: u32,
    score: f64,
    draft: bool,
    edited_at: i64,
    canonical_url: Option<String>,
}

fn wide_post() -> WidePost {
    let post = post();
    WidePost {
        slug: post.slug,
        lang: post.lang,
        published_at: post.published_at,
        title: post.title,
        body: post.body,
        fetched_at: post.fetched_at,
        author_id: post.author_id,
        subtitle: "A first look".into(),
        summary: "What the first post says. ".repeat(8),
        section: "news".into(),
        words: 400,
        score: 4.5,
        draft: false,
        edited_at: 1_700_000_200_000,
        canonical_url: None,
    }
}

/// The allocations of preparing `doc`'s row to write, after one of the same shape was prepared
/// (a table's rows start with room for the last one), and how many columns hold a text.
fn row_allocations<T: Idempotent + Serialize>(doc: &T) -> (usize, usize) {
    let preparation = idem_core::__private::RowPreparation::<T>::new();
    preparation.prepare(doc).unwrap();
    let (columns, allocations) = allocations_in(|| preparation.prepare(black_box(doc)));
    (columns.unwrap(), allocations)
}

#[test]
fn a_rows_allocations_do_not_grow_with_its_columns() {
    // A row's texts share one buffer: a column more is no allocation more. What a row does
    // allocate is the same for both types (same keys, same guarded field): the buffer and where
    // each text is in it; the pass's picked values (the two keys' texts and the frozen field's,
    // kept as the key texts and the guarded value) and their list; the lists of key texts,
    // digests and guarded values. The natural key that errors name the document by is held
    // inline and built only for an error (it was three allocations more: its list and each text
    // key).
    let (narrow_columns, narrow) = row_allocations(&post());
    let (wide_columns, wide) = row_allocations(&wide_post());
    assert_eq!(
        wide_columns,
        narrow_columns + 7,
        "the wide row holds seven texts more (its eighth column more is NULL)"
    );
    assert_eq!(
        wide, narrow,
        "a row of {wide_columns} texts allocates as often as one of {narrow_columns}"
    );
    assert!(narrow <= 9, "{narrow} allocations to prepare a row of Post");
}
