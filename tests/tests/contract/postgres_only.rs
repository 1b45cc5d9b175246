//! Refusals PostgreSQL makes and MongoDB does not, because its storage has limits MongoDB's has
//! not: a NaN or an infinity inside a `jsonb` value (JSON has no such number), the character
//! U+0000 in a value (text and jsonb cannot hold it), and a natural key too long for an entry of
//! the natural-key index. The same input means the same on every backend, so most of these
//! cases run on each and show MongoDB storing it; U+0000 in a field name is refused on both. The
//! last case runs on PostgreSQL alone: on MongoDB its input is an ordinary key.

use std::collections::BTreeMap;

use idem_core::{Error, ErrorKind, Idempotent, Outcome};
use idem_tests::backends::{fresh_backends, Db};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::support::{
    assert_db_sent_nothing, forget_commands, scored_post, shown_non_finite, small_upload, text_key,
    ScoredPost, Upload,
};

/// Floats inside structured values: a map and a list.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "surveys")]
struct Survey {
    #[idem(key)]
    name: String,
    nested: BTreeMap<String, f64>,
    samples: Vec<f64>,
}

/// JSON, and so `jsonb`, has no NaN or infinity: PostgreSQL refuses one inside a structured value
/// before anything is sent, naming where it is. MongoDB stores the same document (BSON has them).
#[tokio::test]
async fn nan_or_an_infinity_inside_a_structured_value_is_refused_on_postgres_naming_its_path() {
    let survey = |name: &str| Survey {
        name: name.into(),
        nested: BTreeMap::from([("x".to_owned(), 1.0)]),
        samples: vec![1.0, 2.0],
    };
    let cases = [
        (
            Survey {
                nested: BTreeMap::from([("x".to_owned(), f64::NAN)]),
                ..survey("nested-nan")
            },
            "field nested.x holds NaN",
        ),
        (
            Survey {
                nested: BTreeMap::from([("a b".to_owned(), f64::INFINITY)]),
                ..survey("nested-inf")
            },
            "field nested[\"a b\"] holds Infinity",
        ),
        (
            Survey {
                samples: vec![1.0, f64::NEG_INFINITY],
                ..survey("samples")
            },
            "field samples[1] holds -Infinity",
        ),
    ];
    for db in fresh_backends("nested_non_finite").await {
        db.ensure::<Survey>().await;
        db.upsert(&survey("kept")).await.unwrap();
        let before = db.raw::<Survey>().await;
        forget_commands(&db);
        if db.is_sql() {
            for (doc, path) in &cases {
                let expect_refused = |result: Result<Outcome, Error>| match result {
                    Err(error) => match error.kind() {
                        ErrorKind::Serialize { message } => {
                            assert_eq!(
                                error.document().natural_key.parts(),
                                [text_key("name", &doc.name)],
                                "{db}"
                            );
                            assert!(
                                message.starts_with(path) && message.contains("not inside jsonb"),
                                "{db}: {message}"
                            );
                        }
                        _ => panic!("{db}: {path}: expected ErrorKind::Serialize, got {error:?}"),
                    },
                    other => panic!("{db}: {path}: expected ErrorKind::Serialize, got {other:?}"),
                };
                expect_refused(db.upsert(doc).await);
                let mut report = db
                    .upsert_many(std::slice::from_ref(doc))
                    .await
                    .unwrap()
                    .into_outcomes();
                expect_refused(report.remove(0));
            }
            assert_eq!(db.raw::<Survey>().await, before, "{db}: nothing written");
        } else {
            for (doc, path) in &cases {
                assert_eq!(
                    db.upsert(doc).await.unwrap(),
                    Outcome::Inserted,
                    "{db}: {path}"
                );
                assert_eq!(
                    db.upsert(doc).await.unwrap(),
                    Outcome::Unchanged,
                    "{db}: {path}"
                );
            }
            let stored = db.stored::<Survey>().await;
            let find = |name: &str| {
                stored
                    .iter()
                    .find(|document| document["name"] == name)
                    .unwrap_or_else(|| panic!("{db}: no survey {name}: {stored:?}"))
            };
            assert_eq!(
                find("nested-nan")["nested"]["x"],
                shown_non_finite(&db, "NaN"),
                "{db}"
            );
            assert_eq!(
                find("nested-inf")["nested"]["a b"],
                shown_non_finite(&db, "Infinity"),
                "{db}"
            );
            assert_eq!(
                find("samples")["samples"][1],
                shown_non_finite(&db, "-Infinity"),
                "{db}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The character U+0000

/// A document with a string and a map whose values and names may hold U+0000.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "labels")]
struct Label {
    #[idem(key)]
    name: String,
    text: String,
    attributes: BTreeMap<String, String>,
}

fn label(name: &str, text: &str, attribute: (&str, &str)) -> Label {
    Label {
        name: name.into(),
        text: text.into(),
        attributes: [(attribute.0.to_owned(), attribute.1.to_owned())].into(),
    }
}

/// U+0000 in a field name is refused on every backend, naming the field (a BSON name is a C
/// string); in a value, MongoDB stores it and reads it back, PostgreSQL refuses it naming where
/// it is (its text and jsonb cannot hold it). A refused document writes nothing and does not
/// stop the rest of its batch.
#[tokio::test]
async fn the_character_u0000_is_stored_where_the_backend_can_hold_it_and_refused_elsewhere() {
    for db in fresh_backends("nul").await {
        db.ensure::<Label>().await;
        let in_name = label("in-name", "ok", ("k\0z", "v"));
        let in_text = label("in-text", "x\0y", ("k", "v"));
        let in_map = label("in-map", "ok", ("k", "v\0w"));
        let fine = label("fine", "ok", ("k", "v"));
        let before = db.raw::<Label>().await;
        forget_commands(&db);
        let shown = match db.upsert(&in_name).await {
            Err(error) if matches!(error.kind(), ErrorKind::Serialize { .. }) => error.to_string(),
            other => panic!("{db}: expected a refusal, got {other:?}"),
        };
        assert!(
            shown.contains(r#"field attributes["k\0z"]"#) && shown.contains("U+0000"),
            "{db}: {shown}"
        );
        assert_db_sent_nothing(&db);
        assert_eq!(db.raw::<Label>().await, before, "{db}: nothing written");

        let batch = [
            in_name.clone(),
            fine.clone(),
            in_text.clone(),
            in_map.clone(),
        ];
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes = report.outcomes();
        assert!(
            matches!(
                outcomes[0].as_ref().map_err(Error::kind),
                Err(ErrorKind::Serialize { .. })
            ),
            "{db}"
        );
        assert_eq!(outcomes[1].as_ref().unwrap(), &Outcome::Inserted, "{db}");
        match &db {
            Db::Mongo { .. } => {
                for (outcome, doc) in outcomes[2..].iter().zip(&batch[2..]) {
                    assert_eq!(outcome.as_ref().unwrap(), &Outcome::Inserted, "{db}");
                    let read = db.get::<Label>(doc.id().unwrap()).await.unwrap();
                    assert_eq!(read.as_ref(), Some(doc), "{db}: read back whole");
                }
            }
            Db::Postgres { .. } | Db::Sqlite { .. } | Db::Mysql { .. } => {
                for (outcome, path) in outcomes[2..]
                    .iter()
                    .zip(["field text", "field attributes.k"])
                {
                    let shown = outcome.as_ref().unwrap_err().to_string();
                    assert!(
                        shown.contains(&format!("{path} holds the character U+0000")),
                        "{db}: {shown}"
                    );
                }
                assert_eq!(
                    db.stored::<Label>().await.len(),
                    1,
                    "{db}: only the fine one"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Keys PostgreSQL cannot index

/// `len` hex digits of a chain of SHA-256 digests: text that does not compress.
fn incompressible(len: usize) -> String {
    let mut text = String::with_capacity(len + 64);
    let mut digest = Sha256::digest(b"bad_input");
    while text.len() < len {
        for byte in digest.iter() {
            text.push_str(&format!("{byte:02x}"));
        }
        digest = Sha256::digest(digest);
    }
    text.truncate(len);
    text
}

/// A natural key longer than a row of the natural-key index may be (PostgreSQL's btree holds
/// about 2700 bytes after compression) is a refusal naming the document, shown short, with
/// nothing written; the rest of its batch is written. MongoDB has no such limit and stores it.
/// MariaDB refuses it the same way: its text key columns are `VARCHAR`s sized so that the
/// natural-key index stays within InnoDB's 3,072 bytes, and a longer value is too long for the
/// column.
#[tokio::test]
async fn a_natural_key_too_long_for_the_postgres_index_is_an_error_naming_the_document() {
    let long = ScoredPost {
        slug: incompressible(10_000),
        ..scored_post("long")
    };
    for db in fresh_backends("long_key").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        if !db.is_postgres() && !db.is_mysql() {
            // SQLite's indexes hold keys of any length.
            if db.is_sqlite() {
                db.ensure::<ScoredPost>().await;
            }
            assert_eq!(db.upsert(&long).await.unwrap(), Outcome::Inserted, "{db}");
            continue;
        }
        db.ensure::<ScoredPost>().await;
        db.upsert(&scored_post("kept")).await.unwrap();
        let before = db.raw::<ScoredPost>().await;
        let expect_error = |result: Result<Outcome, Error>| {
            let error = match result {
                Err(error) if matches!(error.kind(), ErrorKind::Backend { .. }) => error,
                other => panic!("{db}: expected ErrorKind::Backend, got {other:?}"),
            };
            assert_eq!(error.document().collection, "posts", "{db}");
            assert_eq!(
                error.document().natural_key.parts(),
                [text_key("slug", &long.slug), text_key("lang", "en")],
                "{db}"
            );
            let source = error.as_backend().expect("a backend error");
            let message = error.to_string();
            if db.is_mysql() {
                assert_eq!(source.backend(), "MySQL", "{db}");
                // 1406: data too long for the column.
                assert_eq!(source.code(), Some("1406"), "{db}: {error}");
                assert!(message.contains("Data too long"), "{db}: {message}");
            } else {
                assert_eq!(source.backend(), "PostgreSQL", "{db}");
                // 54000: program_limit_exceeded, the size of an index row.
                assert_eq!(source.code(), Some("54000"), "{db}: {error}");
                assert!(message.contains("index row"), "{db}: {message}");
            }
            assert!(!error.is_retryable(), "{db}: the same key fails again");
            assert!(error.is_refusal(), "{db}: the document itself is refused");
            // The key is shown by its start and length, not repeated whole.
            assert!(message.contains("(10000 bytes)"), "{db}: {message}");
            assert!(
                message.len() < 1_000,
                "{db}: {} bytes: {message}",
                message.len()
            );
        };
        expect_error(db.upsert(&long).await);
        assert_eq!(
            db.raw::<ScoredPost>().await,
            before,
            "{db}: nothing written"
        );

        let report = db
            .upsert_many(&[long.clone(), scored_post("short")])
            .await
            .unwrap();
        let mut outcomes = report.into_outcomes();
        assert!(
            matches!(outcomes[1], Ok(Outcome::Inserted)),
            "{db}: {:?}",
            outcomes[1]
        );
        expect_error(outcomes.remove(0));
        let after = db.raw::<ScoredPost>().await;
        assert_eq!(after.len(), 2, "{db}: kept and short");
        assert!(after.contains(&before[0]), "{db}: kept is untouched");
    }
}

/// Promise catalogue case 10: a natural key longer than an entry of the table's unique
/// natural-key index can hold (a btree entry holds about 2.7 kB) cannot be stored. The write fails
/// with the server's error, not retryable, and nothing is written; in a batch the document fails
/// alone, as upserting the documents one by one would, and the others are written (the statement
/// the server refused goes again one row at a time).
///
/// PostgreSQL only: MongoDB indexes keys of any length.
#[tokio::test]
async fn a_natural_key_too_long_for_the_unique_index_fails_alone_with_nothing_written() {
    for db in fresh_backends("p10_key_too_long")
        .await
        .into_iter()
        .filter(Db::is_postgres)
    {
        db.ensure::<Upload>().await;
        let oversized = small_upload(&incompressible(4_000));
        let expect_too_long = |result: &Result<Outcome, Error>| match result {
            Err(error) => {
                assert_eq!(
                    error.as_backend().and_then(|backend| backend.code()),
                    Some("54000"),
                    "{db}: program_limit_exceeded: {error}"
                );
                assert!(!error.is_retryable(), "{db}: the same row fails every time");
            }
            other => panic!("{db}: expected the server's refusal, got {other:?}"),
        };
        expect_too_long(&db.upsert(&oversized).await);
        assert!(db.raw::<Upload>().await.is_empty(), "{db}: nothing written");

        let outcomes = match db
            .upsert_many(&[small_upload("a"), oversized, small_upload("b")])
            .await
        {
            Ok(report) => report.into_outcomes(),
            Err(error) => panic!(
                "{db}: one row the table cannot hold failed the whole batch, where upserting \
                 one by one fails it alone: {error}"
            ),
        };
        assert!(
            matches!(outcomes[0], Ok(Outcome::Inserted)),
            "{db}: {outcomes:?}"
        );
        expect_too_long(&outcomes[1]);
        assert!(
            matches!(outcomes[2], Ok(Outcome::Inserted)),
            "{db}: {outcomes:?}"
        );
        assert_eq!(db.stored::<Upload>().await.len(), 2, "{db}");
    }
}
