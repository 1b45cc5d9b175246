//! MariaDB's two table layouts. `ensure_table` clusters a table's rows on the natural key (its
//! primary key, `_id` a unique constraint) where every key column may be in a primary key;
//! earlier releases made the primary key on `_id` and the unique constraint on the natural key,
//! and such a table keeps working as it is. Each case runs on both layouts where it can, and on
//! key shapes the layout has to hold: three text columns at InnoDB's 3,072 bytes, an integer, a
//! boolean and a timestamp beside text, a version key and a tombstone. Two more layouts carry
//! unique indexes idem did not name: `_id`'s named `_id` (as `ADD COLUMN … UNIQUE` names it)
//! and the natural key's named by a migration.

use idem_core::{Error, ErrorKind, Idempotent, Outcome};
use idem_tests::backends::{fresh_mysql, Db};
use idem_tests::fixtures::{entry, post, Entry, Post};
use serde::{Deserialize, Serialize};

/// The two layouts a table of `T` may have.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    /// As `ensure_table` makes it: the primary key on the natural key.
    Clustered,
    /// As earlier releases made it: the primary key on `_id`.
    Earlier,
    /// Clustered, with the unique index on `_id` named as `ALTER TABLE … ADD COLUMN _id … UNIQUE`
    /// names it (`_id`), as the table check's fix for a table without `_id` makes it.
    IdIndexNamedByServer,
    /// Earlier, with the natural key's unique index named by a migration.
    KeyIndexNamedByMigration,
}

/// Every layout a case runs on.
const LAYOUTS: [Layout; 4] = [
    Layout::Clustered,
    Layout::Earlier,
    Layout::IdIndexNamedByServer,
    Layout::KeyIndexNamedByMigration,
];

/// The statement an earlier release's `create_table_sql` printed for `T`: today's with the keys
/// the other way round (the primary key on `_id`, the unique constraint on the natural key,
/// named as it was).
fn earlier_sql<T: Idempotent>() -> String {
    let today = idem_core::mysql::Store::create_table_sql::<T>();
    let collection = T::MODEL.collection();
    let keys: Vec<String> = (T::MODEL.natural_key_fields())
        .map(|field| format!("`{}`", field.stored_name()))
        .collect();
    let keys = keys.join(", ");
    let clustered = format!(
        "    PRIMARY KEY ({keys}),\n    CONSTRAINT `{collection}_idem_id` UNIQUE (`_id`)\n"
    );
    assert!(today.contains(&clustered), "{today}");
    today.replace(
        &clustered,
        &format!(
            "    PRIMARY KEY (`_id`),\n    CONSTRAINT `{collection}_idem_natural_key` UNIQUE \
             ({keys})\n"
        ),
    )
}

/// A fresh MariaDB database with `T`'s table in `layout`, checked by `ensure_table`.
async fn with_table<T: Idempotent>(test: &str, layout: Layout) -> Db {
    let db = fresh_mysql(&format!("{test}_{layout:?}")).await;
    let collection = T::MODEL.collection();
    let made = match layout {
        Layout::Clustered => None,
        Layout::Earlier => Some(earlier_sql::<T>()),
        Layout::IdIndexNamedByServer => {
            Some(idem_core::mysql::Store::create_table_sql::<T>().replace(
                &format!("CONSTRAINT `{collection}_idem_id` UNIQUE (`_id`)"),
                "UNIQUE KEY `_id` (`_id`)",
            ))
        }
        Layout::KeyIndexNamedByMigration => Some(earlier_sql::<T>().replace(
            &format!("CONSTRAINT `{collection}_idem_natural_key` UNIQUE"),
            "UNIQUE KEY `natural_key_by_migration`",
        )),
    };
    if let Some(made) = made {
        assert_ne!(made, idem_core::mysql::Store::create_table_sql::<T>());
        db.run_raw(&made, mongodb::bson::doc! {}).await;
    }
    db.ensure::<T>().await;
    assert_eq!(
        primary_key::<T>(&db).await,
        match layout {
            Layout::Clustered | Layout::IdIndexNamedByServer => (T::MODEL.natural_key_fields())
                .map(|field| field.stored_name().to_owned())
                .collect(),
            Layout::Earlier | Layout::KeyIndexNamedByMigration => vec!["_id".to_owned()],
        },
        "{db}: ensure_table leaves a table as it finds it"
    );
    let named = match layout {
        Layout::IdIndexNamedByServer => Some("_id"),
        Layout::KeyIndexNamedByMigration => Some("natural_key_by_migration"),
        Layout::Clustered | Layout::Earlier => None,
    };
    if let Some(named) = named {
        assert!(
            index_names::<T>(&db).await.iter().any(|name| name == named),
            "{db}: {named}"
        );
    }
    db
}

/// The names of the indexes of `T`'s table.
async fn index_names<T: Idempotent>(db: &Db) -> Vec<String> {
    index_statistics::<T>(db, "DISTINCT INDEX_NAME", "").await
}

/// The columns of the primary key of `T`'s table, in order.
async fn primary_key<T: Idempotent>(db: &Db) -> Vec<String> {
    let primary = " AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX";
    index_statistics::<T>(db, "COLUMN_NAME", primary).await
}

/// `selected` of the rows of `information_schema.STATISTICS` (a row per index column) of
/// `T`'s table, narrowed and ordered by `and_then`.
async fn index_statistics<T: Idempotent>(db: &Db, selected: &str, and_then: &str) -> Vec<String> {
    let Db::Mysql { connection, .. } = db else {
        unreachable!("{db}: a MariaDB case")
    };
    let sql = format!(
        "SELECT {selected} FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?{and_then}"
    );
    // Both parts are this file's constants.
    idem_core::sqlx::query_scalar(idem_core::sqlx::AssertSqlSafe(sql))
        .bind(T::MODEL.collection())
        .fetch_all(&mut *connection.lock().await)
        .await
        .unwrap()
}

fn kind<T>(result: &Result<T, Error>) -> Result<&T, &ErrorKind> {
    result.as_ref().map_err(Error::kind)
}

fn ok<T: std::fmt::Debug>(result: &Result<T, Error>) -> Option<&T> {
    if let Err(error) = result {
        eprintln!("refused: {error}");
    }
    result.as_ref().ok()
}

/// Inserted, Unchanged, Updated; a frozen field's change refused; the natural key stored under
/// another id refused (`IdChanged`); a row under the document's id holding another key refused;
/// each on the single and the batch path, nothing written by a refusal; and a clean audit.
#[tokio::test]
async fn both_layouts_keep_every_outcome_and_refusal() {
    for layout in LAYOUTS {
        let db = with_table::<Post>("layouts", layout).await;
        let first = post();
        assert_eq!(ok(&db.upsert(&first).await), Some(&Outcome::Inserted));
        assert_eq!(ok(&db.upsert(&first).await), Some(&Outcome::Unchanged));
        let edited = Post {
            title: "Edited".into(),
            ..first.clone()
        };
        assert_eq!(ok(&db.upsert(&edited).await), Some(&Outcome::Updated));
        let others: Vec<Post> = (0..5)
            .map(|n| Post {
                slug: format!("other-{n}"),
                ..post()
            })
            .collect();
        let mut batch = vec![edited.clone()];
        batch.extend(others.iter().cloned());
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes: Vec<_> = report.outcomes().iter().map(ok).collect();
        assert_eq!(outcomes[0], Some(&Outcome::Unchanged), "{layout:?}");
        assert!(outcomes[1..].iter().all(|o| *o == Some(&Outcome::Inserted)));
        let before = db.raw::<Post>().await;

        // A frozen field's change.
        let moved_author = Post {
            author_id: "bob".into(),
            ..edited.clone()
        };
        let single = db.upsert(&moved_author).await;
        let many = db
            .upsert_many(std::slice::from_ref(&moved_author))
            .await
            .unwrap();
        for outcome in [&single, &many.outcomes()[0]] {
            assert!(
                matches!(
                    kind(outcome),
                    Err(ErrorKind::FrozenFieldChanged {
                        field: "author_id",
                        ..
                    })
                ),
                "{layout:?}: {outcome:?}"
            );
        }
        assert_eq!(
            db.raw::<Post>().await,
            before,
            "{layout:?}: nothing written"
        );

        // The natural key stored under another id, written behind idem's back.
        let foreign = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
        db.run_raw(
            &format!("UPDATE posts SET `_id` = '{foreign}' WHERE slug = 'other-0'"),
            mongodb::bson::doc! {},
        )
        .await;
        let before = db.raw::<Post>().await;
        let single = db.upsert(&others[0]).await;
        let many = db.upsert_many(&others[..1]).await.unwrap();
        for outcome in [&single, &many.outcomes()[0]] {
            match kind(outcome) {
                Err(ErrorKind::IdChanged { stored_id, .. }) => assert_eq!(stored_id, foreign),
                other => panic!("{layout:?}: expected IdChanged, got {other:?}"),
            }
        }
        assert_eq!(
            db.raw::<Post>().await,
            before,
            "{layout:?}: nothing written"
        );
        db.run_raw(
            &format!(
                "UPDATE posts SET `_id` = '{}' WHERE slug = 'other-0'",
                others[0].id().unwrap()
            ),
            mongodb::bson::doc! {},
        )
        .await;

        // The row under the document's id holding another key, written behind idem's back.
        db.run_raw(
            "UPDATE posts SET slug = 'other-1-moved' WHERE slug = 'other-1'",
            mongodb::bson::doc! {},
        )
        .await;
        let before = db.raw::<Post>().await;
        let single = db.upsert(&others[1]).await;
        let many = db.upsert_many(&others[1..2]).await.unwrap();
        for outcome in [&single, &many.outcomes()[0]] {
            assert!(
                matches!(
                    kind(outcome),
                    Err(ErrorKind::FrozenFieldChanged { field: "slug", .. })
                ),
                "{layout:?}: {outcome:?}"
            );
        }
        assert_eq!(
            db.raw::<Post>().await,
            before,
            "{layout:?}: nothing written"
        );
        db.run_raw(
            "UPDATE posts SET slug = 'other-1' WHERE slug = 'other-1-moved'",
            mongodb::bson::doc! {},
        )
        .await;

        assert!(db.audit::<Post>().await.is_clean(), "{layout:?}");
        assert_eq!(db.stored::<Post>().await.len(), 6, "{layout:?}");
        if layout == Layout::Earlier {
            // The guide's statement that gives an earlier table the clustered form.
            db.run_raw(
                "ALTER TABLE `posts` DROP PRIMARY KEY, DROP INDEX `posts_idem_natural_key`, \
                 ADD PRIMARY KEY (`slug`, `lang`), ADD CONSTRAINT `posts_idem_id` UNIQUE (`_id`)",
                mongodb::bson::doc! {},
            )
            .await;
            let db = db.unlearned().await;
            assert_eq!(primary_key::<Post>(&db).await, ["slug", "lang"]);
            let report = db.upsert_many(&batch).await.unwrap();
            assert!(report
                .outcomes()
                .iter()
                .all(|o| ok(o) == Some(&Outcome::Unchanged)));
            assert!(db.audit::<Post>().await.is_clean());
        }
    }
}

/// A write meeting another document's row through a third unique index is refused naming that
/// index, on the single and the batch path, as an insert and as an update, and writes nothing.
#[tokio::test]
async fn a_third_unique_index_is_named_on_both_layouts() {
    for layout in LAYOUTS {
        let db = with_table::<Post>("third_index", layout).await;
        db.create_unique_index::<Post>("posts_title", "title").await;
        let titled = |slug: &str, title: &str| Post {
            slug: slug.into(),
            title: title.into(),
            ..post()
        };
        db.upsert(&titled("a", "A")).await.unwrap();
        db.upsert(&titled("b", "B")).await.unwrap();
        let before = db.raw::<Post>().await;
        for doc in [titled("b", "A"), titled("c", "A")] {
            let single = db.upsert(&doc).await;
            let many = db
                .upsert_many(&[doc.clone(), titled("d", "D")])
                .await
                .unwrap();
            for outcome in [&single, &many.outcomes()[0]] {
                match kind(outcome) {
                    Err(ErrorKind::UniqueIndexConflict { index }) => {
                        assert!(index.contains("posts_title"), "{layout:?}: {index}")
                    }
                    other => panic!(
                        "{layout:?} {}: expected posts_title, got {other:?}",
                        doc.slug
                    ),
                }
            }
            assert_eq!(ok(&many.outcomes()[1]), Some(&Outcome::Inserted));
            db.run_raw("DELETE FROM posts WHERE slug = 'd'", mongodb::bson::doc! {})
                .await;
            assert_eq!(
                db.raw::<Post>().await,
                before,
                "{layout:?}: nothing written"
            );
        }
    }
}

/// A chunk sent as a plain insert (the chunk before it was inserted whole) meeting a row under
/// one document's id that holds another key (the id's unique constraint, not the primary key, on
/// the clustered layout): that document is judged from the row under its id (its key may not
/// change), not refused as meeting another index, and every other one is inserted.
#[tokio::test]
async fn a_plain_insert_meeting_the_id_constraint_is_judged_as_the_ids() {
    for layout in LAYOUTS {
        let db = with_table::<Post>("plain_insert", layout).await;
        let held = Post {
            slug: "held".into(),
            ..post()
        };
        db.upsert(&held).await.unwrap();
        db.run_raw(
            "UPDATE posts SET slug = 'held-moved' WHERE slug = 'held'",
            mongodb::bson::doc! {},
        )
        .await;
        let mut docs: Vec<Post> = (0..127)
            .map(|n| Post {
                slug: format!("n-{n:03}"),
                ..post()
            })
            .collect();
        docs.insert(100, held);
        let report = db
            .with_batch_chunk(64)
            .await
            .upsert_many(&docs)
            .await
            .unwrap();
        for (at, outcome) in report.outcomes().iter().enumerate() {
            match at {
                100 => assert!(
                    matches!(
                        kind(outcome),
                        Err(ErrorKind::FrozenFieldChanged { field: "slug", .. })
                    ),
                    "{layout:?}: {outcome:?}"
                ),
                _ => assert_eq!(ok(outcome), Some(&Outcome::Inserted), "{layout:?} {at}"),
            }
        }
        assert_eq!(db.stored::<Post>().await.len(), 128, "{layout:?}");
    }
}

/// Racing first writes of one key, each on its own connection, converge on one row: one is
/// `Inserted`, each other `Unchanged` or `Updated`, never an error.
#[tokio::test]
async fn racing_first_writes_of_one_key_converge_on_one_row() {
    for layout in LAYOUTS {
        let db = with_table::<Post>("racing", layout).await;
        for round in 0..5 {
            let mut writers = Vec::new();
            for n in 0..6 {
                let other = db.another().await;
                let doc = Post {
                    slug: format!("race-{round}"),
                    title: format!("writer {}", n % 2),
                    ..post()
                };
                let batch = n % 3 == 0;
                writers.push(tokio::spawn(async move {
                    match batch {
                        true => other.upsert_many(&[doc]).await.unwrap().outcomes()[0]
                            .as_ref()
                            .copied()
                            .map_err(ToString::to_string),
                        false => other.upsert(&doc).await.map_err(|e| e.to_string()),
                    }
                }));
            }
            let mut outcomes = Vec::new();
            for writer in writers {
                outcomes.push(writer.await.unwrap());
            }
            let inserted = outcomes
                .iter()
                .filter(|o| **o == Ok(Outcome::Inserted))
                .count();
            assert_eq!(inserted, 1, "{layout:?}: {outcomes:?}");
            assert!(
                outcomes.iter().all(|o| matches!(
                    o,
                    Ok(Outcome::Inserted | Outcome::Unchanged | Outcome::Updated)
                )),
                "{layout:?}: {outcomes:?}"
            );
        }
        assert_eq!(db.stored::<Post>().await.len(), 5, "{layout:?}");
        assert!(db.audit::<Post>().await.is_clean(), "{layout:?}");
    }
}

/// Three text keys at their longest, four bytes a character: 3 × 255 × 4 = 3,060 of the 3,072
/// bytes InnoDB's primary key may hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "wide")]
struct Wide {
    #[idem(key)]
    a: String,
    #[idem(key)]
    b: String,
    #[idem(key)]
    c: String,
    body: String,
}

/// A key of an integer, a boolean and text, with a timestamp.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "mixed")]
struct Mixed {
    #[idem(key)]
    site: i64,
    #[idem(key)]
    live: bool,
    #[idem(key)]
    slug: String,
    #[idem(timestamp)]
    at: i64,
    body: String,
}

/// Writes `docs`, then each again (unchanged), then `edited` (updated), one by one and as a
/// batch, and checks the audit.
async fn round_trip<T>(db: &Db, docs: &[T], edited: &T)
where
    T: Idempotent + Serialize + serde::de::DeserializeOwned + Sync + Clone + std::fmt::Debug,
{
    for doc in docs {
        assert_eq!(
            ok(&db.upsert(doc).await),
            Some(&Outcome::Inserted),
            "{doc:?}"
        );
    }
    let report = db.upsert_many(docs).await.unwrap();
    for outcome in report.outcomes() {
        assert_eq!(ok(outcome), Some(&Outcome::Unchanged), "{docs:?}");
    }
    assert_eq!(ok(&db.upsert(edited).await), Some(&Outcome::Updated));
    let report = db.upsert_many(std::slice::from_ref(edited)).await.unwrap();
    assert_eq!(ok(&report.outcomes()[0]), Some(&Outcome::Unchanged));
    assert!(
        db.audit::<T>().await.is_clean(),
        "{}",
        T::MODEL.collection()
    );
}

/// Shapes of key the layout has to hold, on both layouts.
#[tokio::test]
async fn key_shapes_hold_on_both_layouts() {
    for layout in LAYOUTS {
        let long = "😀".repeat(255);
        let wide = |n: usize| Wide {
            a: format!("{}{n}", &long[..long.len() - 4]),
            b: long.clone(),
            c: long.clone(),
            body: "x".into(),
        };
        let db = with_table::<Wide>("shapes_wide", layout).await;
        let edited = Wide {
            body: "y".into(),
            ..wide(1)
        };
        round_trip(&db, &[wide(1), wide(2)], &edited).await;
        // One character more than the column holds: refused for its document, nothing written.
        let before = db.raw::<Wide>().await;
        let longer = Wide {
            b: format!("{long}a"),
            ..wide(3)
        };
        assert!(db.upsert(&longer).await.is_err());
        assert_eq!(db.raw::<Wide>().await, before);

        let mixed = |site: i64, live: bool| Mixed {
            site,
            live,
            slug: "s".into(),
            at: 1_700_000_000_000,
            body: "x".into(),
        };
        let db = with_table::<Mixed>("shapes_mixed", layout).await;
        let edited = Mixed {
            body: "y".into(),
            ..mixed(-1, true)
        };
        round_trip(
            &db,
            &[mixed(-1, true), mixed(-1, false), mixed(2, true)],
            &edited,
        )
        .await;
        // The timestamp moved: the key is stored under the id of another time.
        let moved = Mixed {
            at: 1_700_000_000_001,
            ..mixed(2, true)
        };
        assert!(db.upsert(&moved).await.is_err());

        // A version key and a tombstone.
        let db = with_table::<Entry>("shapes_entry", layout).await;
        round_trip(
            &db,
            &[entry("e1", 1, "one"), entry("e2", 1, "two")],
            &entry("e1", 2, "one, again"),
        )
        .await;
        assert_eq!(
            ok(&db.upsert(&entry("e1", 1, "stale")).await),
            Some(&Outcome::Stale)
        );
        assert_eq!(
            ok(&db
                .delete(&Entry {
                    deleted_at: Some(1_700_000_000_500),
                    ..entry("e2", 2, "two")
                })
                .await),
            Some(&idem_core::Deletion::Deleted)
        );
        assert!(db.audit::<Entry>().await.is_clean());
    }
}
