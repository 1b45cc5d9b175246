//! `upsert`: each outcome of a single write, what it leaves stored (exactly what serde writes,
//! with nothing lingering of what serde no longer writes), and a collision with another unique
//! index, which is a refusal naming it on the single and the batch path.

use std::collections::BTreeMap;

use idem_core::{Error, ErrorKind, Idempotent, Outcome};
use idem_tests::backends::fresh_backends;
use idem_tests::fixtures::{post, Post};
use serde::{Deserialize, Serialize};

use crate::support::assert_stored_as_serde;

/// Each outcome of a single upsert, and what it leaves stored.
#[tokio::test]
async fn a_single_upsert_inserts_then_settles_unchanged_updates_and_ignores_volatile_fields() {
    for db in fresh_backends("single").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<Post>().await;
        let first = post();
        assert_eq!(db.upsert(&first).await.unwrap(), Outcome::Inserted, "{db}");
        let before = db.raw::<Post>().await;
        assert_eq!(db.upsert(&first).await.unwrap(), Outcome::Unchanged, "{db}");
        let refetched = Post {
            fetched_at: first.fetched_at + 1,
            ..first.clone()
        };
        assert_eq!(
            db.upsert(&refetched).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        assert_eq!(db.raw::<Post>().await, before, "{db}: nothing written");
        let edited = Post {
            title: "Hello again".into(),
            ..first.clone()
        };
        assert_eq!(db.upsert(&edited).await.unwrap(), Outcome::Updated, "{db}");
        let stored = db.stored::<Post>().await;
        assert_eq!(stored.len(), 1, "{db}");
        assert_eq!(stored[0]["title"], "Hello again", "{db}");
        assert_eq!(stored[0]["_id"], first.id().unwrap().to_string(), "{db}");
    }
}

// ---------------------------------------------------------------------------------------------
// What serde no longer writes is removed

/// A profile whose nickname serde leaves out when unset, with free-form extra fields flattened in.
#[derive(Debug, Clone, Serialize, Idempotent)]
#[idem(collection = "profiles")]
#[serde(rename_all = "camelCase")]
struct Profile {
    #[idem(key)]
    user_id: String,
    display_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    nickname: Option<String>,
    #[serde(flatten)]
    extra: BTreeMap<String, String>,
}

fn profile(nickname: Option<&str>, extra: &[(&str, &str)]) -> Profile {
    Profile {
        user_id: "u1".into(),
        display_name: "Ada".into(),
        nickname: nickname.map(Into::into),
        extra: extra
            .iter()
            .map(|(name, value)| ((*name).into(), (*value).into()))
            .collect(),
    }
}

/// Promise catalogue case 1, lost update: a field serde leaves out must be removed from the
/// stored document. Here an `Option` going to `None`, which `skip_serializing_if` leaves out.
#[tokio::test]
async fn an_option_going_to_none_is_removed_from_the_stored_document() {
    for db in fresh_backends("p1_option_none").await {
        db.ensure::<Profile>().await;
        let with_nickname = profile(Some("countess"), &[]);
        assert_eq!(
            db.upsert(&with_nickname).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );

        let without = profile(None, &[]);
        assert_eq!(db.upsert(&without).await.unwrap(), Outcome::Updated, "{db}");
        let stored = db.stored::<Profile>().await;
        assert_eq!(
            stored[0].get("nickname"),
            None,
            "{db}: serde no longer writes the nickname, so the write removes it"
        );
        assert_stored_as_serde(&db, &without).await;
        // And the stored hash describes what is stored: a retry is a retry.
        assert_eq!(
            db.upsert(&without).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
    }
}

/// Promise catalogue case 1, lost update: a key removed from a flattened map is removed from the
/// stored document.
#[tokio::test]
async fn a_key_removed_from_a_flattened_map_is_removed_from_the_stored_document() {
    for db in fresh_backends("p1_flatten_removed").await {
        db.ensure::<Profile>().await;
        let both = profile(None, &[("color", "red"), ("size", "L")]);
        assert_eq!(db.upsert(&both).await.unwrap(), Outcome::Inserted, "{db}");

        let color_only = profile(None, &[("color", "red")]);
        assert_eq!(
            db.upsert(&color_only).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        let stored = db.stored::<Profile>().await;
        assert_eq!(
            stored[0].get("size"),
            None,
            "{db}: the entry left the map, so the write removes it"
        );
        assert_stored_as_serde(&db, &color_only).await;
        assert_eq!(
            db.upsert(&color_only).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Another unique index

#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "members")]
struct Member {
    #[idem(key)]
    handle: String,
    email: String,
}

/// A write that collides with another unique index (one the application made on `email`) is a
/// refusal naming that index, on the single and the batch path, when it inserts and when it
/// updates: never `Contention`, which says retrying helps. Nothing is written.
#[tokio::test]
async fn a_second_unique_index_is_a_refusal_naming_it_on_every_path() {
    for db in fresh_backends("second_unique").await {
        // A partitioned table's unique indexes hold its partition columns, the natural key's:
        // none can collide apart from the natural key (docs/GUIDE.md, "Partitioned tables").
        if db.is_partitioned() {
            continue;
        }
        db.ensure::<Member>().await;
        db.create_unique_index::<Member>("members_email", "email")
            .await;
        let member = |handle: &str, email: &str| Member {
            handle: handle.into(),
            email: email.into(),
        };
        db.upsert(&member("ada", "a@x")).await.unwrap();
        db.upsert(&member("bob", "b@x")).await.unwrap();
        let before = db.raw::<Member>().await;
        let colliding_update = member("bob", "a@x");
        let colliding_insert = member("cy", "a@x");
        for doc in [&colliding_update, &colliding_insert] {
            let single = db.upsert(doc).await;
            let batch = db
                .upsert_many(&[doc.clone(), member("dee", "d@x")])
                .await
                .unwrap();
            for (how, outcome) in [("single", &single), ("batch", &batch.outcomes()[0])] {
                match outcome.as_ref().map_err(Error::kind) {
                    Err(ErrorKind::UniqueIndexConflict { index, .. }) => {
                        assert!(index.contains("members_email"), "{db} {how}: {index}")
                    }
                    other => panic!(
                        "{db} {how} {}: expected a refusal naming members_email, got {other:?}",
                        doc.handle
                    ),
                }
            }
            assert_eq!(
                batch.outcomes()[1].as_ref().ok(),
                Some(&Outcome::Inserted),
                "{db}"
            );
            db.run_raw(
                &format!(
                    "DELETE FROM {} WHERE {} = 'dee'",
                    db.quote("members"),
                    db.quote("handle")
                ),
                mongodb::bson::doc! { "delete": "members", "deletes": [{ "q": { "handle": "dee" }, "limit": 0 }] },
            )
            .await;
        }
        assert_eq!(db.raw::<Member>().await, before, "{db}: nothing written");
    }
}
