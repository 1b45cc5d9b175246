//! Op ids (`Idempotent::op_id`): two different (document, purpose) pairs never share one, so
//! `apply_once` never skips an effect as applied because another one was. An event's key and
//! purpose are free text, and so is its collection name: the format of docs/SPEC.md section 4
//! keeps them apart.

use idem_core::{Applied, Idempotent, OpId, Outcome};
use idem_tests::backends::fresh_backends;
use idem_tests::fixtures::{account, Account as Wallet};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

/// A request with no natural key, made idempotent by the key its client sends.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "requests")]
struct Request {
    #[idem(idempotency_key)]
    key: String,
}

/// Another event type, whose collection name holds `:`.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "requests:b")]
struct NestedRequest {
    #[idem(idempotency_key)]
    key: String,
}

/// A document with a derived id.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "accounts")]
struct Account {
    #[idem(key)]
    owner: String,
}

fn request_op(key: &str, purpose: &str) -> OpId {
    Request { key: key.into() }.op_id(purpose).unwrap()
}

/// `(collection, key, purpose)` read back from an event's op id, as the format documented on
/// `Idempotent::op_id` (and in docs/SPEC.md) says to: each of the collection and the key is
/// written as is, or as `:` + its length in bytes + `:` + itself; a `:` ends each.
fn decode_event_op_id(op: &OpId) -> Option<(String, String, String)> {
    fn part(text: &str) -> Option<(&str, &str)> {
        let (part, rest) = match text.strip_prefix(':') {
            Some(prefixed) => {
                let (length, rest) = prefixed.split_once(':')?;
                let length: usize = length.parse().ok()?;
                (rest.get(..length)?, rest.get(length..)?)
            }
            None => text.split_at(text.find(':')?),
        };
        Some((part, rest.strip_prefix(':')?))
    }
    let (collection, rest) = part(op.as_str())?;
    let (key, purpose) = part(rest)?;
    Some((collection.into(), key.into(), purpose.into()))
}

/// The key `"r:bonus"` with the purpose `"credit"` and the key `"r"` with the purpose
/// `"bonus:credit"` are two operations: joined with `:`, both read `requests:r:bonus:credit`,
/// and the second would be skipped as already applied.
#[test]
fn event_op_ids_tell_apart_keys_and_purposes_that_join_to_the_same_text() {
    assert_ne!(
        request_op("r:bonus", "credit"),
        request_op("r", "bonus:credit")
    );
    assert_ne!(request_op("r:", "credit"), request_op("r", ":credit"));
    // Two event types, where the collection of one is the other's collection and a key.
    assert_ne!(
        Request { key: "b".into() }.op_id("c:d").unwrap(),
        NestedRequest { key: "c".into() }.op_id("d").unwrap()
    );
}

/// Both requests credit the account, on every backend: neither op id is mistaken for the
/// other's, and each still applies once.
#[tokio::test]
async fn two_requests_whose_keys_and_purposes_join_alike_both_apply() {
    for db in fresh_backends("op_id_collision").await {
        db.ensure::<Wallet>().await;
        let ada = account("ada");
        assert_eq!(db.upsert(&ada).await.unwrap(), Outcome::Inserted, "{db}");
        let id = ada.id().unwrap();
        for op in [
            request_op("r:bonus", "credit"),
            request_op("r", "bonus:credit"),
        ] {
            for expected in [Applied::Applied, Applied::AlreadyApplied] {
                let applied = db.credit_once::<Wallet>(id, &op, "balance", 10).await;
                assert_eq!(applied.unwrap(), expected, "{db}: {op}");
            }
        }
        let stored = db.get::<Wallet>(id).await.unwrap().expect("stored");
        assert_eq!(stored.balance, 20, "{db}: two credits");
    }
}

/// The op ids stored before keys were length-prefixed stay what they were wherever they were
/// unambiguous (a key and a collection without `:`), so an event replayed after an upgrade is
/// still recognised as applied; non-event op ids are the fixed-width id and the purpose.
#[test]
fn op_ids_without_colons_in_the_key_keep_their_format() {
    assert_eq!(
        request_op("req-1", "credit").as_str(),
        "requests:req-1:credit"
    );
    assert_eq!(request_op("req-1", "a:b").as_str(), "requests:req-1:a:b");
    assert_eq!(
        request_op("r:bonus", "credit").as_str(),
        "requests::7:r:bonus:credit"
    );
    assert_eq!(
        NestedRequest { key: "c".into() }
            .op_id("d")
            .unwrap()
            .as_str(),
        ":10:requests:b:c:d"
    );
    let account = Account {
        owner: "ada".into(),
    };
    assert_eq!(
        account.op_id("points:bonus").unwrap().as_str(),
        format!("{}:points:bonus", account.id().unwrap())
    );
}

/// A collection named like an id is length-prefixed, so an event's op id never reads as a
/// document's (`{id}:{purpose}`).
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "01ARZ3NDEKTSV4RRFFQ69G5FAV")]
struct IdNamedRequest {
    #[idem(idempotency_key)]
    key: String,
}

#[test]
fn an_event_op_id_never_reads_as_a_documents_op_id() {
    let op = IdNamedRequest { key: "k".into() }.op_id("p").unwrap();
    assert_eq!(op.as_str(), ":26:01ARZ3NDEKTSV4RRFFQ69G5FAV:k:p");
    assert!(op
        .as_str()
        .get(..26)
        .and_then(|id| id.parse::<idem_core::Id>().ok())
        .is_none());
}

proptest! {
    /// Distinct `(key, purpose)` pairs give distinct op ids: every way of reading one text as
    /// `key:purpose` (the pairs an op id joined with `:` confuses), and another pair, over an
    /// alphabet of `:`, a digit (what a length prefix is made of) and a letter.
    #[test]
    fn distinct_keys_and_purposes_give_distinct_event_op_ids(
        joined in "[:1a]{1,10}",
        other in ("[:1a]{1,5}", "[:1a]{0,5}"),
    ) {
        let mut pairs: Vec<(String, String)> = joined
            .match_indices(':')
            .filter(|(at, _)| *at > 0)
            .map(|(at, _)| (joined[..at].to_owned(), joined[at + 1..].to_owned()))
            .collect();
        pairs.push(other);
        for (index, pair) in pairs.iter().enumerate() {
            for earlier in &pairs[..index] {
                let (op, earlier_op) = (request_op(&pair.0, &pair.1), request_op(&earlier.0, &earlier.1));
                prop_assert_eq!(pair == earlier, op == earlier_op, "{:?} {:?}", op, earlier_op);
            }
        }
    }

    /// Every event op id reads back as its collection, key and purpose: the encoding is
    /// injective, across event types too.
    #[test]
    fn an_event_op_id_reads_back_as_its_collection_key_and_purpose(
        key in "[:1a-z]{1,8}",
        purpose in "[:1a-z]{0,8}",
    ) {
        let op = request_op(&key, &purpose);
        prop_assert_eq!(
            decode_event_op_id(&op),
            Some(("requests".to_owned(), key.clone(), purpose.clone()))
        );
        let op = NestedRequest { key: key.clone() }.op_id(&purpose).unwrap();
        prop_assert_eq!(decode_event_op_id(&op), Some(("requests:b".to_owned(), key, purpose)));
    }
}
