//! Content hashes from the derive: stable, blind to volatile fields and to map insertion order,
//! canonical for floats.

use std::collections::{BTreeMap, HashMap};

use idem_core::{hash, Idempotent};
use serde::Serialize;

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "articles")]
#[serde(rename_all = "camelCase")]
struct Article {
    #[idem(key)]
    slug: String,
    title: String,
    tags: HashMap<String, u32>,
    score: f64,
    #[idem(volatile)]
    fetched_at: i64,
}

fn article(tags: &[(&str, u32)]) -> Article {
    Article {
        slug: "a".into(),
        title: "Title".into(),
        tags: tags
            .iter()
            .map(|(tag, count)| (tag.to_string(), *count))
            .collect(),
        score: 1.5,
        fetched_at: 1,
    }
}

#[test]
fn the_same_content_always_hashes_the_same() {
    let tags = [("rust", 3), ("db", 1)];
    assert_eq!(
        article(&tags).content_hash().unwrap(),
        article(&tags).content_hash().unwrap()
    );
}

#[test]
fn volatile_fields_are_not_hashed_and_other_fields_are() {
    let base = article(&[]);
    let refetched = Article {
        fetched_at: 99,
        ..base.clone()
    };
    let retitled = Article {
        title: "Other".into(),
        ..base.clone()
    };
    assert_eq!(
        base.content_hash().unwrap(),
        refetched.content_hash().unwrap()
    );
    assert_ne!(
        base.content_hash().unwrap(),
        retitled.content_hash().unwrap()
    );
}

#[test]
fn map_entries_hash_the_same_in_any_insertion_order() {
    let forward: Vec<(String, u32)> = (0..200).map(|i| (format!("tag{i}"), i)).collect();
    let mut first = HashMap::new();
    for (tag, count) in &forward {
        first.insert(tag.clone(), *count);
    }
    let mut second = HashMap::new();
    for (tag, count) in forward.iter().rev() {
        second.insert(tag.clone(), *count);
    }
    let ordered: BTreeMap<String, u32> = forward.iter().cloned().collect();
    let a = Article {
        tags: first,
        ..article(&[])
    };
    let b = Article {
        tags: second,
        ..article(&[])
    };
    assert_eq!(a.content_hash().unwrap(), b.content_hash().unwrap());
    // A HashMap and a BTreeMap with the same entries are the same content.
    assert_eq!(
        hash::hash_value(&a.tags).unwrap(),
        hash::hash_value(&ordered).unwrap()
    );
}

#[test]
fn negative_zero_and_every_nan_hash_canonically() {
    let zero = Article {
        score: 0.0,
        ..article(&[])
    };
    let negative_zero = Article {
        score: -0.0,
        ..article(&[])
    };
    assert_eq!(
        zero.content_hash().unwrap(),
        negative_zero.content_hash().unwrap()
    );
    let nan = Article {
        score: f64::NAN,
        ..article(&[])
    };
    let other_nan = Article {
        score: f64::from_bits(0x7ff0_0000_0000_0001),
        ..article(&[])
    };
    assert_eq!(
        nan.content_hash().unwrap(),
        other_nan.content_hash().unwrap()
    );
    assert_ne!(nan.content_hash().unwrap(), zero.content_hash().unwrap());
}

#[test]
fn integer_widths_do_not_change_the_hash() {
    assert_eq!(
        hash::hash_value(&7u8).unwrap(),
        hash::hash_value(&7i64).unwrap()
    );
    assert_ne!(
        hash::hash_value(&7i64).unwrap(),
        hash::hash_value(&7.0f64).unwrap()
    );
}

#[test]
fn the_hash_is_sha256_over_the_canonical_bytes_with_volatile_fields_left_out() {
    use sha2::{Digest, Sha256};
    let value = article(&[("rust", 3)]);
    let bytes = hash::canonical_document_bytes(&value, &Article::MODEL).unwrap();
    let expected: [u8; 32] = Sha256::digest(&bytes).into();
    assert_eq!(value.content_hash().unwrap().as_bytes(), &expected);
    let stored_names_in_bytes = String::from_utf8_lossy(&bytes);
    assert!(stored_names_in_bytes.contains("title"));
    assert!(!stored_names_in_bytes.contains("fetchedAt"));
    assert_eq!(value.content_hash().unwrap().to_hex().len(), 64);
}

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "articles", hash_algorithm = "blake3")]
#[serde(rename_all = "camelCase")]
struct LargeArticle {
    #[idem(key)]
    slug: String,
    title: String,
    tags: HashMap<String, u32>,
    score: f64,
    #[idem(volatile)]
    fetched_at: i64,
}

#[test]
fn blake3_is_recorded_in_the_stored_hash_so_algorithms_never_compare_equal() {
    let sha = article(&[("rust", 3)]);
    let large = LargeArticle {
        slug: sha.slug.clone(),
        title: sha.title.clone(),
        tags: sha.tags.clone(),
        score: sha.score,
        fetched_at: sha.fetched_at,
    };
    let hash = large.content_hash().unwrap();
    assert_eq!(hash.algorithm(), idem_core::HashAlgorithm::Blake3);
    // The same canonical bytes as the SHA-256 type, through BLAKE3.
    let bytes = hash::canonical_document_bytes(&sha, &Article::MODEL).unwrap();
    assert_eq!(hash.as_bytes(), blake3::hash(&bytes).as_bytes());
    let stored = hash.to_hex();
    assert!(
        stored.starts_with("blake3:") && stored.len() == 7 + 64,
        "{stored}"
    );
    assert_ne!(stored, sha.content_hash().unwrap().to_hex());
    assert_eq!(stored.parse::<idem_core::ContentHash>().unwrap(), hash);
}

/// Fields of every length, so that each kind of write (a tag, a length, a name, a value, an
/// integer) lands on and across every edge of the hasher's buffer at some point.
#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "spans")]
struct Spans {
    #[idem(key)]
    id: String,
    before: String,
    count: i64,
    body: String,
    after: u32,
}

#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "spans", hash_algorithm = "blake3")]
struct Blake3Spans {
    #[idem(key)]
    id: String,
    before: String,
    count: i64,
    body: String,
    after: u32,
}

#[test]
fn the_streamed_hash_equals_the_hash_of_the_whole_encoding_at_every_length() {
    use sha2::{Digest, Sha256};
    // Every length up to a few SHA-256 buffers, then around each edge of the 16 KiB BLAKE3
    // buffer and past a 64 KiB document.
    let lengths = (0..1100)
        .chain((16 << 10) - 300..(16 << 10) + 300)
        .chain([(32 << 10) + 7, (64 << 10) + 1000]);
    for length in lengths {
        let before = "b".repeat(length % 23);
        let body: String = "Lorem ipsum dolor sit amet. "
            .chars()
            .cycle()
            .take(length)
            .collect();
        let sha = Spans {
            id: "edge".into(),
            before: before.clone(),
            count: length as i64,
            body: body.clone(),
            after: 7,
        };
        let bytes = hash::canonical_document_bytes(&sha, &Spans::MODEL).unwrap();
        let expected: [u8; 32] = Sha256::digest(&bytes).into();
        assert_eq!(
            sha.content_hash().unwrap().as_bytes(),
            &expected,
            "{length}"
        );

        let large = Blake3Spans {
            id: sha.id,
            before,
            count: sha.count,
            body,
            after: sha.after,
        };
        assert_eq!(
            large.content_hash().unwrap().as_bytes(),
            blake3::hash(&bytes).as_bytes(),
            "{length}"
        );
    }
}
