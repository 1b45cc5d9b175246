//! Taking over data idem did not write: the audit finds every kind of problem in one pass, the
//! index check blames the collection (not an innocent document) for duplicates, and adopt moves
//! legacy documents to their derived ids, resuming after an interruption at any step and racing
//! with idem writers without losing, duplicating or forking a document.

use std::time::Duration;

use idem_core::mongo::{AdoptOptions, DuplicateRule, Store, NATURAL_KEY_INDEX};
use idem_core::{AuditProgress, ErrorKind, Idempotent, Outcome};
use idem_tests::fixtures::{ingested_post as post, IngestedPost as Post, T0};
use idem_tests::{fresh_database, stored_documents};
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{self, doc, Bson, Document};
use mongodb::{Collection, Database};

/// The stored fields of `Post` in declaration order, for a run-time model.
const FIELD_ORDER: &[&str] = &["slug", "lang", "publishedAt", "title", "fetchedAt"];

fn posts(database: &Database) -> Collection<Document> {
    database.collection("posts")
}

/// `post` as another tool stores it: the same fields under an ObjectId, without idem's fields.
fn legacy(id: ObjectId, post: &Post) -> Document {
    let mut stored = doc! { "_id": id };
    stored.extend(bson::to_document(post).unwrap());
    stored
}

async fn insert_legacy(database: &Database, documents: &[&Post]) -> Vec<ObjectId> {
    let mut ids = Vec::new();
    for post in documents {
        let id = ObjectId::new();
        posts(database).insert_one(legacy(id, post)).await.unwrap();
        ids.push(id);
    }
    ids
}

/// `original`'s document among `stored`: under its derived id, its move finished (no `idemAdopt`
/// left on it).
fn moved_whole<'s>(stored: &'s [Document], original: &Post) -> &'s Document {
    let id = original.id().unwrap().to_string();
    let found = stored
        .iter()
        .find(|doc| doc.get_str("_id") == Ok(id.as_str()))
        .unwrap_or_else(|| panic!("{} is not under its derived id", original.slug));
    assert!(!found.contains_key("idemAdopt"), "{found:?}");
    found
}

/// A duplicate rule keeping the document titled "second".
fn keep_second_title(documents: &[Document]) -> usize {
    documents
        .iter()
        .position(|document| document.get_str("title") == Ok("second"))
        .unwrap_or(usize::MAX)
}

/// Two legacy documents of one key, titled "first" and "second": their ids.
async fn insert_twice(database: &Database) -> Vec<ObjectId> {
    insert_legacy(
        database,
        &[&post("twice", "first"), &post("twice", "second")],
    )
    .await
}

/// The one document the archive holds, titled `title`, where the document titled "second" is
/// the only one left under the key `twice`.
async fn assert_one_archived_and_second_kept(database: &Database, title: &str) -> Document {
    let mut archive = stored_documents(database, "posts_idem_duplicates").await;
    assert_eq!(archive.len(), 1, "{archive:?}");
    assert_eq!(archive[0].get_str("title"), Ok(title), "{archive:?}");
    assert_eq!(
        contents(database).await,
        [("twice".into(), "second".into())]
    );
    archive.remove(0)
}

/// The rule that keeps the document titled "second" and archives the others.
fn keep_second() -> AdoptOptions {
    AdoptOptions::default().with_duplicates(DuplicateRule::Keep(keep_second_title))
}

fn sample_ids(finding: &idem_core::audit::Finding) -> Vec<String> {
    finding
        .samples
        .iter()
        .map(|sample| sample.id.clone())
        .collect()
}

/// Every kind of problem, each in its own document, found in one pass, with the progress
/// reported as it goes.
#[tokio::test]
async fn the_audit_finds_every_kind_of_problem_in_one_pass() {
    let (database, _log) = fresh_database("audit_kinds").await;
    let store = Store::new(database.clone());
    let clean = post("clean", "Clean");
    let edited = post("edited", "Edited by idem");
    let orphaned = post("orphaned", "Orphaned");
    for written in [&clean, &edited, &orphaned] {
        assert_eq!(store.upsert(written).await.unwrap(), Outcome::Inserted);
    }
    // Other code edits behind idem's back, and duplicates need the index gone.
    posts(&database)
        .drop_index(NATURAL_KEY_INDEX)
        .await
        .unwrap();
    let edited_id = edited.id().unwrap().to_string();
    posts(&database)
        .update_one(
            doc! { "_id": &edited_id },
            doc! { "$set": { "title": "Edited by hand" } },
        )
        .await
        .unwrap();
    let orphan_id = orphaned.id().unwrap().to_string();
    posts(&database)
        .update_one(
            doc! { "_id": &orphan_id },
            doc! { "$set": { "publishedAt": T0 + 1 } },
        )
        .await
        .unwrap();
    let legacy_ids = insert_legacy(
        &database,
        &[
            &post("twice", "First"),
            &post("twice", "Second"),
            &post("legacy", "Legacy"),
        ],
    )
    .await;
    let unreadable_id = ObjectId::new();
    posts(&database)
        .insert_one(doc! { "_id": unreadable_id, "slug": "unreadable", "lang": "en", "publishedAt": T0, "title": 5, "fetchedAt": T0 })
        .await
        .unwrap();
    let keyless_id = ObjectId::new();
    posts(&database)
        .insert_one(doc! { "_id": keyless_id, "lang": "en", "publishedAt": T0, "title": "No slug", "fetchedAt": T0 })
        .await
        .unwrap();

    let mut seen = Vec::new();
    let report = store
        .audit_with_progress::<Post>(|progress: &AuditProgress| seen.push(*progress))
        .await
        .unwrap();

    assert_eq!(report.scanned, 8);
    assert_eq!(seen.len(), 8, "progress after every document");
    assert_eq!(seen.last().unwrap().scanned, 8);
    assert_eq!(seen[0].total, Some(8));
    assert_eq!(report.clean, 1, "{report}");
    assert_eq!(report.duplicates.keys, 1);
    assert_eq!(report.duplicates.documents, 2);
    let duplicate = &report.duplicates.samples[0];
    assert_eq!(duplicate.key.to_string(), r#"{slug: "twice", lang: "en"}"#);
    let mut twice = vec![legacy_ids[0].to_hex(), legacy_ids[1].to_hex()];
    twice.sort();
    let mut found = duplicate.sample_ids.clone();
    found.sort();
    assert_eq!(found, twice);
    // Every legacy document but the keyless one (no id can be derived from it); the id of the
    // one that is not a `Post` is derived from its stored key values.
    assert_eq!(report.legacy_ids.count, 4, "{report}");
    assert_eq!(
        report.legacy_ids.samples[0].derived_id,
        Some(post("legacy", "").id().unwrap().to_string()),
    );
    assert_eq!(sample_ids(&report.orphans), [orphan_id.as_str()]);
    assert_eq!(
        report.orphans.samples[0].derived_id,
        Some(
            Post::derive_id("orphaned", "en", &(T0 + 1))
                .unwrap()
                .to_string()
        ),
    );
    assert_eq!(sample_ids(&report.underivable), [keyless_id.to_hex()]);
    assert_eq!(
        report.underivable.samples[0].detail.as_deref(),
        Some("`slug` is missing")
    );
    assert_eq!(
        report.missing_hash.count, 5,
        "every document another tool wrote"
    );
    // The orphan's hash still matches: only the timestamp, which the content hash covers, …
    let mut mismatched = sample_ids(&report.hash_mismatch);
    mismatched.sort();
    let mut expected = vec![edited_id.clone(), orphan_id.clone()];
    expected.sort();
    assert_eq!(mismatched, expected, "{report}");
    let undeserializable = report.undeserializable.as_ref().unwrap();
    let mut unreadable = sample_ids(undeserializable);
    unreadable.sort();
    let mut expected = vec![unreadable_id.to_hex(), keyless_id.to_hex()];
    expected.sort();
    assert_eq!(unreadable, expected);
    let reasons: Vec<&str> = undeserializable
        .samples
        .iter()
        .filter_map(|sample| sample.detail.as_deref())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|reason| reason.contains("expected a string")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|reason| reason.contains("slug")),
        "{reasons:?}"
    );

    // The model given at run time finds the same, except what needs the type.
    let runtime = store
        .audit_model(&Post::MODEL, FIELD_ORDER, |_| {})
        .await
        .unwrap();
    assert_eq!(runtime.undeserializable, None);
    assert_eq!(runtime.duplicates, report.duplicates);
    assert_eq!(runtime.legacy_ids, report.legacy_ids);
    assert_eq!(runtime.orphans, report.orphans);
    assert_eq!(runtime.underivable, report.underivable);
    assert_eq!(runtime.missing_hash, report.missing_hash);
    assert_eq!(runtime.hash_mismatch, report.hash_mismatch);
    assert_eq!(runtime.clean, 1);
}

/// A collection idem wrote entirely is clean, audited with the type or with a run-time model:
/// the hash recomputed from the stored fields is the type's.
#[tokio::test]
async fn a_collection_idem_wrote_is_clean() {
    let (database, _log) = fresh_database("audit_clean").await;
    let store = Store::new(database);
    let written: Vec<Post> = (0..30).map(|n| post(&format!("p{n}"), "T")).collect();
    store.upsert_many(&written).await.unwrap();
    let typed = store.audit::<Post>().await.unwrap();
    assert!(typed.is_clean(), "{typed}");
    assert_eq!(typed.scanned, 30);
    let runtime = store
        .audit_model(&Post::MODEL, FIELD_ORDER, |_| {})
        .await
        .unwrap();
    assert!(runtime.is_clean(), "{runtime}");
    assert!(typed.to_string().contains("no problems found"));
}

/// Duplicates make the index build fail with an error about the collection that names the
/// index and the key and points to the audit; an innocent document's write reports the same,
/// not as a refusal of that document.
#[tokio::test]
async fn duplicates_fail_the_index_naming_it_the_key_and_the_audit() {
    let (database, _log) = fresh_database("index_duplicates").await;
    let store = Store::new(database.clone());
    insert_legacy(&database, &[&post("twice", "A"), &post("twice", "B")]).await;
    let error = store.ensure_indexes::<Post>().await.unwrap_err();
    let ErrorKind::DuplicateNaturalKeys {
        index,
        duplicate_key,
        ..
    } = error.kind()
    else {
        panic!("expected DuplicateNaturalKeys, got {error:?}");
    };
    assert_eq!(index, NATURAL_KEY_INDEX);
    assert!(duplicate_key.contains("twice"), "{duplicate_key}");
    assert!(!error.is_refusal());
    assert!(!error.is_retryable());
    let message = error.to_string();
    assert!(message.starts_with("collection `posts`: the unique index `idem_natural_key`"));
    assert!(message.contains("audit"), "{message}");

    let innocent = store.upsert(&post("innocent", "I")).await.unwrap_err();
    assert!(
        matches!(innocent.kind(), ErrorKind::DuplicateNaturalKeys { .. }),
        "{innocent:?}"
    );
    assert!(!innocent.is_refusal());
    assert!(innocent.document().natural_key.parts().is_empty());
    assert_eq!(posts(&database).count_documents(doc! {}).await.unwrap(), 2);
}

/// The natural key and title of every stored post, and the ids of those not under their
/// derived id.
async fn contents(database: &Database) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = stored_documents(database, "posts")
        .await
        .iter()
        .map(|stored| {
            (
                stored.get_str("slug").unwrap_or("(set aside)").to_owned(),
                stored.get_str("title").unwrap().to_owned(),
            )
        })
        .collect();
    found.sort();
    found
}

/// After adoption each document is under its derived id with its content hash, and idem's
/// writes converge on it.
#[tokio::test]
async fn adopt_moves_legacy_documents_and_writes_converge_on_them() {
    let (database, _log) = fresh_database("adopt_moves").await;
    let store = Store::new(database.clone());
    let originals = [post("a", "A"), post("b", "B"), post("c", "C")];
    let ids = insert_legacy(&database, &originals.iter().collect::<Vec<_>>()).await;

    let report = store.adopt::<Post>(AdoptOptions::default()).await.unwrap();
    assert!(report.is_complete(), "{report}");
    assert_eq!(report.moved.count, 3);
    assert_eq!(report.moved.samples[0].id, ids[0].to_hex());
    assert_eq!(
        report.moved.samples[0].derived_id,
        Some(originals[0].id().unwrap().to_string())
    );
    for original in &originals {
        let stored = posts(&database)
            .find_one(doc! { "_id": original.id().unwrap().to_string() })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            stored.get_str("sourceHash").unwrap(),
            original.content_hash().unwrap().to_hex()
        );
        assert!(!stored.contains_key("idemAdopt"));
    }
    assert!(store.audit::<Post>().await.unwrap().is_clean());
    assert_eq!(
        store.upsert(&originals[0]).await.unwrap(),
        Outcome::Unchanged
    );
    assert_eq!(
        store.upsert(&post("a", "A, edited")).await.unwrap(),
        Outcome::Updated
    );
    let mut moved_on = post("b", "B");
    moved_on.published_at += 1;
    assert!(matches!(
        store.upsert(&moved_on).await.unwrap_err().into_kind(),
        ErrorKind::FrozenFieldChanged { .. }
    ));
    // Adopting again finds nothing to move.
    let again = store.adopt::<Post>(AdoptOptions::default()).await.unwrap();
    assert_eq!(again.moved.count, 0);
    assert!(again.to_string().contains("nothing to move"), "{again}");
}

/// Stopped after every possible number of writes, and then re-run step by step: at every point
/// each document is stored (under its old id or its derived one), no natural key is held twice,
/// and the runs that follow finish the job.
#[tokio::test]
async fn adopt_resumes_after_an_interruption_at_any_step() {
    for first_run_steps in 0..=12 {
        let (database, _log) = fresh_database(&format!("adopt_resume_{first_run_steps}")).await;
        let store = Store::new(database.clone());
        let originals = [post("a", "A"), post("b", "B"), post("c", "C")];
        insert_legacy(&database, &originals.iter().collect::<Vec<_>>()).await;
        let expected: Vec<(String, String)> = originals
            .iter()
            .map(|post| (post.slug.clone(), post.title.clone()))
            .collect();
        let mut steps = first_run_steps;
        let mut runs = 0;
        loop {
            let report = store
                .adopt::<Post>(AdoptOptions::default().with_max_writes(steps))
                .await
                .unwrap();
            runs += 1;
            assert!(report.failed.is_empty(), "{report}");
            let stored = stored_documents(&database, "posts").await;
            // Every title is stored under its natural key, or in a reserved copy that holds the
            // key set aside (between the release and the claim); never lost, never twice under
            // its key.
            for (slug, title) in &expected {
                let holders: Vec<&Document> = stored
                    .iter()
                    .filter(|stored| stored.get_str("title") == Ok(title))
                    .collect();
                let under_key = holders
                    .iter()
                    .filter(|stored| stored.get_str("slug") == Ok(slug))
                    .count();
                let set_aside = holders
                    .iter()
                    .filter(|stored| {
                        stored
                            .get_document("idemAdopt")
                            .and_then(|adoption| adoption.get_document("key"))
                            .and_then(|key| key.get_str("slug"))
                            == Ok(slug)
                    })
                    .count();
                assert!(under_key <= 1, "run {runs}: {stored:?}");
                assert!(under_key + set_aside >= 1, "run {runs}: {stored:?}");
                assert!(
                    set_aside <= 1 && holders.len() <= 2,
                    "run {runs}: {stored:?}"
                );
            }
            if !report.stopped {
                break;
            }
            steps = 1;
            assert!(runs < 20, "adopt makes progress on every run");
        }
        assert_eq!(contents(&database).await, expected);
        assert_eq!(posts(&database).count_documents(doc! {}).await.unwrap(), 3);
        let audit = store.audit::<Post>().await.unwrap();
        assert!(
            audit.is_clean(),
            "after {first_run_steps} steps first: {audit}"
        );
    }
}

/// idem writers upsert the keys being moved: each is refused while its key is on the move
/// (as before adoption began) and converges once it is done, on the adopted document.
#[tokio::test]
async fn adopt_races_with_idem_writers_without_losing_or_forking() {
    let (database, _log) = fresh_database("adopt_race").await;
    let store = Store::new(database.clone());
    let originals: Vec<Post> = (0..40)
        .map(|n| post(&format!("p{n:02}"), "legacy"))
        .collect();
    insert_legacy(&database, &originals.iter().collect::<Vec<_>>()).await;
    store.ensure_indexes::<Post>().await.unwrap();

    let mut writers = Vec::new();
    for writer in 0..4 {
        let store = store.clone();
        let originals = originals.clone();
        writers.push(tokio::spawn(async move {
            let mut refusals = 0;
            for original in originals.iter().skip(writer).step_by(4) {
                let edited = Post {
                    title: format!("edited by writer {writer}"),
                    ..original.clone()
                };
                loop {
                    match store.upsert(&edited).await {
                        Ok(outcome) => {
                            assert_eq!(outcome, Outcome::Updated, "judged against the adopted");
                            break;
                        }
                        // Stored under another tool's id until adopt moves it, then held by
                        // adopt's claim on the derived id while it moves.
                        Err(error)
                            if matches!(
                                error.kind(),
                                ErrorKind::IdChanged { .. } | ErrorKind::FrozenFieldChanged { .. }
                            ) =>
                        {
                            refusals += 1;
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        Err(other) => panic!("{other}"),
                    }
                }
            }
            refusals
        }));
    }
    let adopting = {
        let store = store.clone();
        tokio::spawn(async move { store.adopt::<Post>(AdoptOptions::default()).await })
    };
    let report = adopting.await.unwrap().unwrap();
    let mut refusals = 0;
    for writer in writers {
        refusals += writer.await.unwrap();
    }
    assert!(report.is_complete(), "{report}");
    assert_eq!(report.moved.count, 40);
    assert!(refusals > 0, "the writers met legacy documents");
    let stored = stored_documents(&database, "posts").await;
    assert_eq!(stored.len(), 40, "no document lost or doubled");
    for (n, original) in originals.iter().enumerate() {
        let adopted = stored
            .iter()
            .find(|stored| stored.get_str("_id") == Ok(&original.id().unwrap().to_string()))
            .unwrap();
        assert_eq!(
            adopted.get_str("title").unwrap(),
            format!("edited by writer {}", n % 4)
        );
    }
    assert!(store.audit::<Post>().await.unwrap().is_clean());
}

/// A writer with another timestamp can store the key in the one gap of a move (after the
/// release, before the claim); the claim then reports the conflict with both ids and keeps the
/// moved content set aside: nothing forks silently, nothing is lost.
#[tokio::test]
async fn a_writer_in_the_gap_of_a_move_is_reported_with_both_ids() {
    let (database, _log) = fresh_database("adopt_gap").await;
    let store = Store::new(database.clone());
    insert_legacy(&database, &[&post("a", "legacy A")]).await;
    // The reserve, the mark and the release.
    let stopped = store
        .adopt::<Post>(AdoptOptions::default().with_max_writes(3))
        .await
        .unwrap();
    assert!(stopped.stopped);
    let mut later = post("a", "new A");
    later.published_at = T0 + 1;
    assert_eq!(store.upsert(&later).await.unwrap(), Outcome::Inserted);

    let report = store.adopt::<Post>(AdoptOptions::default()).await.unwrap();
    assert!(!report.is_complete());
    assert_eq!(report.failed.count, 1, "{report}");
    let reason = report.failed.samples[0].detail.clone().unwrap();
    let derived = post("a", "").id().unwrap().to_string();
    assert!(
        reason.contains(&later.id().unwrap().to_string()),
        "{reason}"
    );
    assert!(reason.contains(&derived), "{reason}");
    let reserved = posts(&database)
        .find_one(doc! { "_id": &derived })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reserved.get_str("title").unwrap(), "legacy A");
    assert!(reserved.contains_key("idemAdopt"));
    let audit = store.audit::<Post>().await.unwrap();
    assert_eq!(audit.moves_in_progress.count, 1, "{audit}");
}

/// Duplicates are reported with every id by default, and resolved by a rule when one is given:
/// the others are archived whole, the kept one moved, and the index built.
#[tokio::test]
async fn duplicates_are_reported_or_resolved_by_the_rule_never_silently() {
    let (database, _log) = fresh_database("adopt_duplicates").await;
    let store = Store::new(database.clone());
    let ids = insert_legacy(
        &database,
        &[
            &post("twice", "first"),
            &post("twice", "second"),
            &post("once", "only"),
        ],
    )
    .await;
    let report = store.adopt::<Post>(AdoptOptions::default()).await.unwrap();
    assert_eq!(report.duplicates.keys, 1);
    let mut both = report.duplicates.samples[0].sample_ids.clone();
    both.sort();
    let mut expected = vec![ids[0].to_hex(), ids[1].to_hex()];
    expected.sort();
    assert_eq!(both, expected);
    assert_eq!(report.moved.count, 1);
    assert_eq!(posts(&database).count_documents(doc! {}).await.unwrap(), 3);

    let resolved = store.adopt::<Post>(keep_second()).await.unwrap();
    assert!(resolved.is_complete(), "{resolved}");
    assert_eq!(resolved.archived.count, 1);
    assert_eq!(resolved.archived.samples[0].id, ids[0].to_hex());
    let archive = stored_documents(&database, "posts_idem_duplicates").await;
    assert_eq!(archive.len(), 1);
    assert_eq!(archive[0].get("_id"), Some(&Bson::ObjectId(ids[0])));
    assert_eq!(archive[0].get_str("title").unwrap(), "first");
    assert_eq!(
        contents(&database).await,
        [
            ("once".into(), "only".into()),
            ("twice".into(), "second".into())
        ]
    );
    let indexes = posts(&database).list_index_names().await.unwrap();
    assert!(
        indexes.contains(&NATURAL_KEY_INDEX.to_owned()),
        "{indexes:?}"
    );
    assert!(store.audit::<Post>().await.unwrap().is_clean());
}

/// `with_max_documents(n)` moves n documents whole, then stops; each run after it moves the next
/// n, until none is left.
#[tokio::test]
async fn max_documents_counts_documents_moved() {
    let (database, _log) = fresh_database("adopt_max_documents").await;
    let store = Store::new(database.clone());
    let originals: Vec<Post> = (0..5)
        .map(|n| post(&format!("p{n}"), &format!("P{n}")))
        .collect();
    insert_legacy(&database, &originals.iter().collect::<Vec<_>>()).await;
    let mut moved = Vec::new();
    for expected in [2, 2, 1] {
        let report = store
            .adopt::<Post>(AdoptOptions::default().with_max_documents(2))
            .await
            .unwrap();
        assert_eq!(report.moved.count, expected, "{report}");
        assert_eq!(report.stopped, expected == 2, "{report}");
        assert!(
            report.finished.is_empty(),
            "no move left half done: {report}"
        );
        moved.extend(report.moved.samples.iter().map(|sample| sample.id.clone()));
    }
    moved.sort();
    moved.dedup();
    assert_eq!(moved.len(), 5, "each moved once: {moved:?}");
    assert!(store.audit::<Post>().await.unwrap().is_clean());
}

/// Moves go in batches: 300 legacy documents take one insert, one delete and two updates (the
/// mark, the claim) per 100 documents, not four commands per document, and all of them land under
/// their derived ids with nothing left reserved.
#[tokio::test]
async fn adopt_moves_documents_in_batches_of_commands() {
    let (database, log) = fresh_database("adopt_batches").await;
    let store = Store::new(database.clone());
    let originals: Vec<Post> = (0..300)
        .map(|n| post(&format!("p{n:03}"), &format!("P{n}")))
        .collect();
    insert_legacy(&database, &originals.iter().collect::<Vec<_>>()).await;
    let _ = log.take();
    let started = std::time::Instant::now();
    let report = store.adopt::<Post>(AdoptOptions::default()).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(report.moved.count, 300, "{report}");
    assert!(report.is_complete(), "{report}");
    let names = log.take().names;
    let count = |name: &str| names.iter().filter(|sent| *sent == name).count();
    assert_eq!(
        (count("insert"), count("delete"), count("update")),
        (3, 3, 6),
        "one command per step and batch of 100: {names:?}"
    );
    eprintln!(
        "adopted 300 legacy documents in {elapsed:?} ({:.0} a second)",
        300.0 / elapsed.as_secs_f64()
    );
    let stored = stored_documents(&database, "posts").await;
    assert_eq!(stored.len(), 300);
    for original in &originals {
        let found = moved_whole(&stored, original);
        assert_eq!(found.get_str("title"), Ok(original.title.as_str()));
    }
    assert!(store.audit::<Post>().await.unwrap().is_clean());
}

/// `adopt_model_with_progress` tells its progress after each document it reads, with the
/// collection's estimated size, as the audit does: what `idem adopt` draws its bar with.
#[tokio::test]
async fn adopt_reports_its_progress_per_document() {
    let (database, _log) = fresh_database("adopt_progress").await;
    let store = Store::new(database.clone());
    let originals: Vec<Post> = (0..12)
        .map(|n| post(&format!("p{n:02}"), &format!("P{n}")))
        .collect();
    insert_legacy(&database, &originals.iter().collect::<Vec<_>>()).await;
    let mut seen = Vec::new();
    let report = store
        .adopt_model_with_progress(&Post::MODEL, &[], AdoptOptions::default(), |progress| {
            seen.push(*progress)
        })
        .await
        .unwrap();
    assert_eq!(report.moved.count, 12, "{report}");
    let scanned: Vec<u64> = seen.iter().map(|progress| progress.scanned).collect();
    assert_eq!(scanned, (1..=12).collect::<Vec<u64>>());
    assert!(
        seen.iter().all(|progress| progress.total == Some(12)),
        "{seen:?}"
    );
}

/// Another tool keeps editing the legacy documents while they move in batches: an original
/// changed between the read and its batch's release stays, and goes on alone from its new
/// content. At the end every document is under its derived id exactly once, holding the last
/// edit the tool made to it before it moved (an edit after the move matches nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_documents_edited_while_they_move_in_batches_keep_the_last_edit() {
    let (database, _log) = fresh_database("adopt_batch_edits").await;
    let store = Store::new(database.clone());
    let originals: Vec<Post> = (0..300)
        .map(|n| post(&format!("p{n:03}"), "original"))
        .collect();
    let ids = insert_legacy(&database, &originals.iter().collect::<Vec<_>>()).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let editor = {
        let (collection, ids, stop) = (posts(&database), ids.clone(), stop.clone());
        tokio::spawn(async move {
            // The last edit that matched, per document, in the order they were made.
            let mut last = std::collections::HashMap::new();
            let mut round = 0_u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for (n, id) in ids.iter().enumerate().skip((round % 7) as usize).step_by(7) {
                    let title = format!("edit {round}");
                    let edited = collection
                        .update_one(doc! { "_id": id }, doc! { "$set": { "title": &title } })
                        .await
                        .unwrap();
                    if edited.matched_count == 1 {
                        last.insert(n, title);
                    }
                }
                round += 1;
            }
            last
        })
    };
    let mut runs = 0;
    loop {
        runs += 1;
        let report = store.adopt::<Post>(AdoptOptions::default()).await.unwrap();
        assert!(report.failed.is_empty(), "run {runs}: {report}");
        let left = stored_documents(&database, "posts")
            .await
            .iter()
            .filter(|doc| doc.get("_id").is_some_and(|id| id.as_object_id().is_some()))
            .count();
        if left == 0 || runs == 5 {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let last = editor.await.unwrap();
    let stored = stored_documents(&database, "posts").await;
    assert_eq!(stored.len(), 300, "nothing lost, nothing twice");
    for (n, original) in originals.iter().enumerate() {
        let found = moved_whole(&stored, original);
        let expected = last.get(&n).map_or("original", String::as_str);
        assert_eq!(found.get_str("title"), Ok(expected), "{}", original.slug);
    }
}

/// A duplicate set aside by the rule and edited by another tool between its copy to the archive
/// and its deletion (a run stopped there, at its write limit): the next run archives it as it
/// is then, so the archive holds the edit, where it kept the first copy and deleted the edit.
#[tokio::test]
async fn a_duplicate_edited_between_its_copy_and_its_deletion_is_archived_as_edited() {
    let (database, _log) = fresh_database("adopt_archive_edit").await;
    let store = Store::new(database.clone());
    let ids = insert_twice(&database).await;
    // One write: the copy of the duplicate, not its deletion.
    let stopped = store
        .adopt::<Post>(keep_second().with_max_writes(1))
        .await
        .unwrap();
    assert!(stopped.stopped, "{stopped}");
    let archive = stored_documents(&database, "posts_idem_duplicates").await;
    assert_eq!(archive.len(), 1, "{archive:?}");
    posts(&database)
        .update_one(
            doc! { "_id": ids[0] },
            doc! { "$set": { "title": "edited" } },
        )
        .await
        .unwrap();
    let resolved = store.adopt::<Post>(keep_second()).await.unwrap();
    assert!(resolved.is_complete(), "{resolved}");
    assert_eq!(resolved.archived.count, 1, "{resolved}");
    assert_one_archived_and_second_kept(&database, "edited").await;
}

/// A rule that keeps a document which cannot move (it does not read as the type): the others
/// stay where they are, reported with it, where they were archived first and the key was left
/// with only the document that cannot move.
#[tokio::test]
async fn a_kept_document_that_cannot_move_leaves_its_duplicates_in_place() {
    let (database, _log) = fresh_database("adopt_kept_unreadable").await;
    let store = Store::new(database.clone());
    let readable = post("twice", "readable");
    insert_legacy(&database, &[&readable]).await;
    let mut unreadable = legacy(ObjectId::new(), &readable);
    unreadable.insert("title", 5);
    unreadable.insert("fetchedAt", readable.fetched_at + 1);
    posts(&database).insert_one(unreadable).await.unwrap();
    let report = store
        .adopt::<Post>(
            AdoptOptions::default().with_duplicates(DuplicateRule::KeepGreatest("fetchedAt")),
        )
        .await
        .unwrap();
    assert_eq!(report.archived.count, 0, "{report}");
    assert_eq!(report.failed.count, 1, "{report}");
    assert_eq!(report.duplicates.keys, 1, "{report}");
    assert_eq!(posts(&database).count_documents(doc! {}).await.unwrap(), 2);
    let archive = stored_documents(&database, "posts_idem_duplicates").await;
    assert!(archive.is_empty(), "{archive:?}");
}

/// A move interrupted after its reserve, whose original another tool then changed so that it
/// derives another id: the next run gives the stale reservation up and moves the original as it
/// is, where the reservation's placeholder key stopped every later move of it.
#[tokio::test]
async fn an_interrupted_move_whose_original_changed_its_id_is_started_again() {
    let (database, _log) = fresh_database("adopt_resume_changed").await;
    let store = Store::new(database.clone());
    let first = post("moving", "first");
    let ids = insert_legacy(&database, &[&first]).await;
    let stopped = store
        .adopt::<Post>(AdoptOptions::default().with_max_writes(1))
        .await
        .unwrap();
    assert!(stopped.stopped, "{stopped}");
    let reserved = posts(&database)
        .count_documents(doc! { "idemAdopt": { "$exists": true } })
        .await
        .unwrap();
    assert_eq!(reserved, 1);
    posts(&database)
        .update_one(
            doc! { "_id": ids[0] },
            doc! { "$set": { "publishedAt": T0 + 1 } },
        )
        .await
        .unwrap();
    let resumed = store.adopt::<Post>(AdoptOptions::default()).await.unwrap();
    assert!(resumed.is_complete(), "{resumed}");
    assert_eq!(resumed.moved.count, 1, "{resumed}");
    let stored = stored_documents(&database, "posts").await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    let changed = Post {
        published_at: T0 + 1,
        ..first
    };
    moved_whole(&stored, &changed);
    assert!(store.audit::<Post>().await.unwrap().is_clean());
}

/// A counter keyed by a number.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, Idempotent)]
#[idem(collection = "counters")]
struct Counter {
    #[idem(key)]
    n: i64,
    label: String,
}

/// 1 as an int32 and as a Decimal128 (the coefficient 1, the exponent 0, biased 6176).
fn decimal_one() -> Bson {
    let mut one = [0u8; 16];
    one[0] = 1;
    one[14] = 0x40;
    one[15] = 0x30;
    Bson::Decimal128(bson::Decimal128::from_bytes(one))
}

/// Keys the unique index holds equal though their types differ (`1` and `NumberDecimal("1")`)
/// are one key's duplicates to the audit and the adoption, as to the index: found before any
/// move, not met as an index that cannot be built.
#[tokio::test]
async fn keys_equal_by_value_across_number_types_are_duplicates() {
    let (database, _log) = fresh_database("adopt_number_types").await;
    let store = Store::new(database.clone());
    let counters: Collection<Document> = database.collection("counters");
    counters
        .insert_many([
            doc! { "_id": ObjectId::new(), "n": 1, "label": "int" },
            doc! { "_id": ObjectId::new(), "n": 1.0, "label": "double" },
            doc! { "_id": ObjectId::new(), "n": decimal_one(), "label": "decimal" },
        ])
        .await
        .unwrap();
    let audit = store.audit::<Counter>().await.unwrap();
    assert_eq!(
        (audit.duplicates.keys, audit.duplicates.documents),
        (1, 3),
        "{audit}"
    );
    let report = store
        .adopt::<Counter>(AdoptOptions::default())
        .await
        .unwrap();
    assert_eq!(report.duplicates.keys, 1, "{report}");
    assert_eq!(report.moved.count, 0, "{report}");
    assert!(report.index_blocked.is_none(), "{report}");
}

/// Two documents whose keys the unique index holds equal but idem's grouping does not (an
/// array key, each of whose items the index holds: `[1, 2]` and `1`), so the run does not find
/// them together: the index cannot be built after the moves, and the report says so, with the
/// moves made, where the run failed and its report was lost.
#[tokio::test]
async fn an_index_the_moves_leave_blocked_is_in_the_report() {
    let (database, _log) = fresh_database("adopt_index_blocked").await;
    let store = Store::new(database.clone());
    let counters: Collection<Document> = database.collection("counters");
    counters
        .insert_many([
            doc! { "_id": ObjectId::new(), "n": 1, "label": "int" },
            doc! { "_id": ObjectId::new(), "n": [1, 2], "label": "array" },
        ])
        .await
        .unwrap();
    let report = store
        .adopt::<Counter>(AdoptOptions::default())
        .await
        .unwrap_or_else(|error| panic!("the report is not lost: {error}"));
    assert!(report.index_blocked.is_some(), "{report}");
    assert!(!report.is_complete(), "{report}");
    assert_eq!(report.moved.count, 1, "{report}");
    assert!(
        report
            .to_string()
            .contains("could not be built after the moves"),
        "{report}"
    );
}

/// A collection whose validator refuses a document's copy (a validator added after the document
/// was written, which an insert must pass; or a rule on the natural key's type, which the key
/// set aside during the move breaks): that document is reported with the validator's reason and
/// stays where it is, and the others move; the run does not end in an error.
#[tokio::test]
async fn a_copy_the_validator_refuses_is_reported_and_the_others_move() {
    let (database, _log) = fresh_database("adopt_validator").await;
    let store = Store::new(database.clone());
    let ids = insert_legacy(
        &database,
        &[
            &post("a", "legacy A"),
            &post("b", "B"),
            &post("c", "legacy C"),
        ],
    )
    .await;
    let validate = |schema: Document| {
        let database = database.clone();
        async move {
            database
                .run_command(doc! {
                    "collMod": "posts",
                    "validator": { "$jsonSchema": schema },
                    "validationLevel": "moderate",
                    "validationAction": "error",
                })
                .await
                .unwrap();
        }
    };
    validate(doc! { "properties": { "title": { "bsonType": "string", "minLength": 3 } } }).await;
    let report = store.adopt::<Post>(AdoptOptions::default()).await.unwrap();
    assert_eq!(report.moved.count, 2, "{report}");
    assert_eq!(sample_ids(&report.failed), [ids[1].to_hex()], "{report}");
    let reason = report.failed.samples[0].detail.clone().unwrap();
    assert!(reason.contains("validator"), "{reason}");
    let stored = stored_documents(&database, "posts").await;
    moved_whole(&stored, &post("a", "legacy A"));
    moved_whole(&stored, &post("c", "legacy C"));
    let left: Vec<&Document> = stored
        .iter()
        .filter(|stored| stored.get_str("slug") == Ok("b"))
        .collect();
    assert_eq!(left.len(), 1, "{stored:?}");
    assert_eq!(left[0].get_object_id("_id").unwrap(), ids[1], "{stored:?}");

    // A rule on the key's type refuses every copy: each is reported, none moves.
    validate(doc! { "properties": { "slug": { "bsonType": "string" } } }).await;
    insert_legacy(&database, &[&post("d", "legacy D")]).await;
    let report = store.adopt::<Post>(AdoptOptions::default()).await.unwrap();
    assert_eq!(
        (report.moved.count, report.failed.count),
        (0, 2),
        "{report}"
    );
    assert_eq!(stored_documents(&database, "posts").await.len(), 4);
}

/// A run stopped after its reserve, then the original deleted by another tool (a user's
/// deletion, a retention job): the next run gives the reserved copy up instead of claiming it, so
/// the deleted document does not come back under its derived id. A run stopped after the release
/// (which it marks first) is finished by the next one.
#[tokio::test]
async fn an_original_deleted_while_its_move_was_interrupted_does_not_come_back() {
    let (database, _log) = fresh_database("adopt_deleted_original").await;
    let store = Store::new(database.clone());
    let ids = insert_legacy(&database, &[&post("gone", "Deleted by its owner")]).await;
    let reserved = store
        .adopt::<Post>(AdoptOptions::default().with_max_writes(1))
        .await
        .unwrap();
    assert!(reserved.stopped, "{reserved}");
    assert_eq!(stored_documents(&database, "posts").await.len(), 2);
    posts(&database)
        .delete_one(doc! { "_id": ids[0] })
        .await
        .unwrap();
    let report = store.adopt::<Post>(AdoptOptions::default()).await.unwrap();
    assert_eq!(report.moved.count, 0, "{report}");
    assert!(report.is_complete(), "{report}");
    assert_eq!(
        stored_documents(&database, "posts").await,
        Vec::<Document>::new()
    );

    // Stopped after the release: the copy is all that is left of the document, and is claimed.
    let kept = post("kept", "Kept");
    insert_legacy(&database, &[&kept]).await;
    let released = store
        .adopt::<Post>(AdoptOptions::default().with_max_writes(3))
        .await
        .unwrap();
    assert!(released.stopped, "{released}");
    let finished = store.adopt::<Post>(AdoptOptions::default()).await.unwrap();
    assert_eq!(finished.finished.count, 1, "{finished}");
    moved_whole(&stored_documents(&database, "posts").await, &kept);
}

/// Collections whose documents cannot move by copy and delete are refused before any write,
/// naming why: a capped collection (a copy inserted may push out an original not moved yet) and
/// a view (no writes). (A time-series collection is refused the same way; the test server does
/// not report one as such.)
#[tokio::test]
async fn a_capped_collection_or_a_view_is_refused_before_any_write() {
    let (database, _log) = fresh_database("adopt_capped").await;
    let store = Store::new(database.clone());
    database
        .create_collection("posts")
        .capped(true)
        .size(1_000_000)
        .await
        .unwrap();
    insert_legacy(&database, &[&post("a", "legacy A")]).await;
    let before = stored_documents(&database, "posts").await;
    let refused = store
        .adopt::<Post>(AdoptOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(refused.kind(), ErrorKind::SchemaMismatch { .. }),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("capped"), "{refused}");
    assert_eq!(stored_documents(&database, "posts").await, before);

    let (database, _log) = fresh_database("adopt_view").await;
    let store = Store::new(database.clone());
    insert_legacy(&database, &[&post("a", "legacy A")]).await;
    database
        .create_collection("legacy_posts")
        .view_on("posts".to_owned())
        .pipeline(vec![doc! { "$match": {} }])
        .await
        .unwrap();
    let model = idem_core::Model::new(
        "legacy_posts",
        Post::MODEL.id_scheme(),
        Post::MODEL.hash_field(),
        Post::MODEL.fields(),
    );
    let refused = store
        .adopt_model(&model, FIELD_ORDER, AdoptOptions::default())
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("view"), "{refused}");
    assert!(refused.to_string().contains("`posts`"), "{refused}");
}

/// A legacy id used again after its first document was archived (integer ids of a second
/// import): the archive keeps the first document, and the second stays where it is, reported;
/// the copy of an archiving in flight is still replaced (see the test of an edit between the
/// copy and the deletion).
#[tokio::test]
async fn an_id_archived_before_is_not_archived_over() {
    let (database, _log) = fresh_database("adopt_archive_reused_id").await;
    let store = Store::new(database.clone());
    let raw = |id: i32, slug: &str, title: &str| {
        let mut stored = doc! { "_id": id };
        stored.extend(bson::to_document(&post(slug, title)).unwrap());
        stored
    };
    posts(&database)
        .insert_many([raw(7, "a", "first"), raw(8, "a", "second")])
        .await
        .unwrap();
    let first = store.adopt::<Post>(keep_second()).await.unwrap();
    assert_eq!(first.archived.count, 1, "{first}");
    posts(&database)
        .drop_index(NATURAL_KEY_INDEX)
        .await
        .unwrap();
    posts(&database)
        .insert_many([raw(7, "b", "third"), raw(9, "b", "second")])
        .await
        .unwrap();
    let second = store.adopt::<Post>(keep_second()).await.unwrap();
    assert_eq!(second.archived.count, 0, "{second}");
    assert_eq!(sample_ids(&second.failed), ["7"], "{second}");
    let archive = stored_documents(&database, "posts_idem_duplicates").await;
    assert_eq!(
        archive,
        [raw(7, "a", "first")],
        "the first stays archived, unmarked"
    );
    let still = posts(&database)
        .find_one(doc! { "_id": 7 })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(still.get_str("title"), Ok("third"));
}

/// A run stopped between a duplicate's deletion and the removal of its archived copy's mark:
/// the next run finishes it (the copy unmarked, counted archived), so that a later document
/// under the same id cannot replace it.
#[tokio::test]
async fn an_archiving_stopped_after_the_deletion_is_finished_by_the_next_run() {
    let (database, _log) = fresh_database("adopt_archive_finish").await;
    let store = Store::new(database.clone());
    insert_twice(&database).await;
    // The copy and the deletion: not the mark's removal.
    let stopped = store
        .adopt::<Post>(keep_second().with_max_writes(2))
        .await
        .unwrap();
    assert!(stopped.stopped, "{stopped}");
    let archive = stored_documents(&database, "posts_idem_duplicates").await;
    assert_eq!(archive.len(), 1, "{archive:?}");
    assert_eq!(
        archive[0].get_bool("idemArchiving"),
        Ok(true),
        "{archive:?}"
    );
    let finished = store.adopt::<Post>(keep_second()).await.unwrap();
    assert_eq!(finished.archived.count, 1, "{finished}");
    assert!(finished.is_complete(), "{finished}");
    let archive = assert_one_archived_and_second_kept(&database, "first").await;
    assert!(!archive.contains_key("idemArchiving"), "{archive:?}");
}

/// A run whose write limit falls between a reservation's mark and its original's deletion stops
/// before the mark: a mark left without its deletion would make a later deletion of the
/// original by another tool look like a release, and the next run bring the document back.
#[tokio::test]
async fn a_run_stops_before_the_mark_where_it_could_not_also_delete() {
    let (database, _log) = fresh_database("adopt_mark_with_delete").await;
    let store = Store::new(database.clone());
    let ids = insert_legacy(&database, &[&post("gone", "Deleted by its owner")]).await;
    // The reserve, then no room for the mark and the deletion together.
    let stopped = store
        .adopt::<Post>(AdoptOptions::default().with_max_writes(2))
        .await
        .unwrap();
    assert!(stopped.stopped, "{stopped}");
    let stored = stored_documents(&database, "posts").await;
    let reserved = stored
        .iter()
        .find(|stored| stored.contains_key("idemAdopt"))
        .expect("the reservation");
    assert!(
        !reserved
            .get_document("idemAdopt")
            .unwrap()
            .contains_key("releasing"),
        "{reserved:?}"
    );
    posts(&database)
        .delete_one(doc! { "_id": ids[0] })
        .await
        .unwrap();
    store.adopt::<Post>(AdoptOptions::default()).await.unwrap();
    assert_eq!(
        stored_documents(&database, "posts").await,
        Vec::<Document>::new()
    );
}

/// Runs of one write each finish the archive of a duplicate (its copy made once, not again by
/// every run) and the move of the one kept. (A document holding a NaN is compared with its
/// reservation by its bytes, where NaN is not equal to itself as a value; its deletion, pinned
/// to it by `$expr`, is not found on the test server, which compares NaN unequal there.)
#[tokio::test]
async fn runs_of_one_write_each_finish_moves_and_archives() {
    let (database, _log) = fresh_database("adopt_one_write_runs").await;
    let store = Store::new(database.clone());
    insert_twice(&database).await;
    let options = || keep_second().with_max_writes(1);
    let mut runs = 0;
    loop {
        runs += 1;
        assert!(runs <= 30, "every run of one write makes progress");
        let report = store.adopt::<Post>(options()).await.unwrap();
        if !report.stopped {
            break;
        }
    }
    let archive = stored_documents(&database, "posts_idem_duplicates").await;
    assert_eq!(archive.len(), 1, "{archive:?}");
    assert!(!archive[0].contains_key("idemArchiving"), "{archive:?}");
    assert_eq!(archive[0].get_str("title"), Ok("first"));
    let audit = store.audit::<Post>().await.unwrap();
    assert_eq!(
        (audit.legacy_ids.count, audit.duplicates.keys),
        (0, 0),
        "{audit}"
    );
}

/// A duplicate whose archiving stopped after its copy, then moved by a later run (the kept one
/// deleted meanwhile, so it was alone under its key): its marked copy is not taken for an
/// archived document, but removed, and the document is only under its derived id.
#[tokio::test]
async fn a_copy_whose_original_was_moved_meanwhile_is_not_called_archived() {
    let (database, _log) = fresh_database("adopt_archive_moved").await;
    let store = Store::new(database.clone());
    let ids = insert_twice(&database).await;
    let stopped = store
        .adopt::<Post>(keep_second().with_max_writes(1))
        .await
        .unwrap();
    assert!(stopped.stopped, "{stopped}");
    assert_eq!(
        stored_documents(&database, "posts_idem_duplicates")
            .await
            .len(),
        1
    );
    posts(&database)
        .delete_one(doc! { "_id": ids[1] })
        .await
        .unwrap();
    let moved = store.adopt::<Post>(keep_second()).await.unwrap();
    assert_eq!(moved.moved.count, 1, "{moved}");
    let again = store.adopt::<Post>(keep_second()).await.unwrap();
    assert_eq!(again.archived.count, 0, "{again}");
    assert_eq!(
        stored_documents(&database, "posts_idem_duplicates").await,
        Vec::<Document>::new()
    );
    moved_whole(
        &stored_documents(&database, "posts").await,
        &post("twice", "first"),
    );
}
