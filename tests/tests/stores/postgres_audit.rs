//! The audit of a PostgreSQL table before idem takes it over, on every PostgreSQL server under
//! test: a table other code created and filled shows what it lacks and every kind of problem in
//! its rows, with exact counts and samples; a table idem wrote is clean; the audit reads the
//! caller's transaction; and tables missing idem's `_id`, hash or a key column, or missing
//! altogether, are reported rather than refused.

use idem_core::audit::Finding;
use idem_core::postgres::Store;
use idem_core::{AuditProgress, Outcome};
use idem_tests::backends::{fresh_schema, postgres_client, postgres_servers};
use idem_tests::fixtures::{ingested_post as post, IngestedPost as Post, T0};

/// The table another tool made for posts: no idem columns beside `_id` and the hash, `fetchedAt`
/// of another integer type, and no unique constraint on the natural key.
const FOREIGN_TABLE: &str = "CREATE TABLE posts (\"_id\" text PRIMARY KEY, slug text, lang text, \
     \"publishedAt\" bigint, title text, \"fetchedAt\" integer, \"sourceHash\" text)";

/// Inserts a row as another tool would: the values given, nothing computed.
async fn insert(
    client: &tokio_postgres::Client,
    id: &str,
    stored: &Post,
    slug: Option<&str>,
    title: Option<&str>,
    hash: Option<&str>,
) {
    client
        .execute(
            "INSERT INTO posts VALUES ($1, $2, $3, $4, $5, $6::bigint::integer, $7)",
            &[
                &id,
                &slug,
                &stored.lang,
                &stored.published_at,
                &title,
                &stored.fetched_at,
                &hash,
            ],
        )
        .await
        .unwrap();
}

fn hash_of(post: &Post) -> String {
    post.content_hash().unwrap().to_hex()
}

fn id_of(post: &Post) -> String {
    post.id().unwrap().to_string()
}

/// Each sample's id, with the derived id a misplaced row belongs under, or else its detail.
fn samples(finding: &Finding) -> Vec<(String, Option<String>)> {
    finding
        .samples
        .iter()
        .map(|sample| {
            let shown = sample.derived_id.clone().or_else(|| sample.detail.clone());
            (sample.id.clone(), shown)
        })
        .collect()
}

fn derived(post: &Post) -> Option<String> {
    Some(post.id().unwrap().to_string())
}

/// A table other code created and filled, with every kind of problem each in its own rows: the
/// audit reports what the table lacks, then counts and samples each problem exactly, in the
/// order of the natural key, reporting progress after each row.
#[tokio::test]
async fn a_table_other_code_made_shows_every_kind_of_problem() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "pa", "kinds").await;
        client.batch_execute(FOREIGN_TABLE).await.unwrap();
        // As idem would store it: derived id, the content's hash.
        let clean = post("clean", "Clean");
        insert(
            &client,
            &id_of(&clean),
            &clean,
            Some("clean"),
            Some("Clean"),
            Some(&hash_of(&clean)),
        )
        .await;
        // Edited by other code after it was hashed.
        let edited = post("edited", "Before");
        insert(
            &client,
            &id_of(&edited),
            &edited,
            Some("edited"),
            Some("After"),
            Some(&hash_of(&edited)),
        )
        .await;
        // Legacy ids, two of them holding one natural key.
        let first = post("twice", "First");
        let second = post("twice", "Second");
        let legacy = post("legacy", "Legacy");
        insert(
            &client,
            "legacy-1",
            &first,
            Some("twice"),
            Some("First"),
            Some(&hash_of(&first)),
        )
        .await;
        insert(
            &client,
            "legacy-2",
            &second,
            Some("twice"),
            Some("Second"),
            Some(&hash_of(&second)),
        )
        .await;
        insert(
            &client,
            "legacy-3",
            &legacy,
            Some("legacy"),
            Some("Legacy"),
            Some(&hash_of(&legacy)),
        )
        .await;
        // A natural key idem wrote, stored again by other code: the first row, clean alone,
        // is no longer clean once the second shows up.
        let shared = post("shared", "Shared");
        insert(
            &client,
            &id_of(&shared),
            &shared,
            Some("shared"),
            Some("Shared"),
            Some(&hash_of(&shared)),
        )
        .await;
        insert(
            &client,
            "legacy-4",
            &shared,
            Some("shared"),
            Some("Shared"),
            Some(&hash_of(&shared)),
        )
        .await;
        // Under the id of another timestamp: other code moved it, and rehashed it.
        let orphaned = post("orphaned", "Orphaned");
        let moved = Post {
            published_at: T0 + 1,
            ..orphaned.clone()
        };
        insert(
            &client,
            &id_of(&orphaned),
            &moved,
            Some("orphaned"),
            Some("Orphaned"),
            Some(&hash_of(&moved)),
        )
        .await;
        let unhashed = post("nohash", "No hash");
        insert(
            &client,
            &id_of(&unhashed),
            &unhashed,
            Some("nohash"),
            Some("No hash"),
            None,
        )
        .await;
        // Not a `Post` (no title), under the id derived from its stored values.
        let unreadable = post("unreadable", "");
        insert(
            &client,
            &id_of(&unreadable),
            &unreadable,
            Some("unreadable"),
            None,
            Some("not a hash"),
        )
        .await;
        // No slug: no id, and no duplicate either (a unique constraint holds NULLs distinct).
        let keyless = post("", "No slug");
        insert(&client, "keyless-1", &keyless, None, Some("No slug"), None).await;
        insert(&client, "keyless-2", &keyless, None, Some("No slug"), None).await;
        client.batch_execute("ANALYZE posts").await.unwrap();

        let mut seen = Vec::new();
        let report = Store::new()
            .audit_with_progress::<Post, _>(&client, |progress: &AuditProgress| {
                seen.push(*progress)
            })
            .await
            .unwrap();

        assert_eq!(report.collection, "posts");
        assert_eq!(report.scanned, 12, "{label}: {report}");
        assert_eq!(seen.len(), 12, "{label}: progress after every row");
        assert_eq!(
            seen.iter()
                .map(|progress| progress.scanned)
                .collect::<Vec<_>>(),
            (1..=12).collect::<Vec<_>>()
        );
        assert!(
            seen.iter().all(|progress| progress.total == Some(12)),
            "{label}: {seen:?}"
        );
        assert_eq!(report.clean, 1, "{label}: {report}");
        assert!(!report.is_clean());

        assert_eq!(report.table_problems.len(), 5, "{label}: {report}");
        assert_eq!(
            report.table_problems[..4],
            [
                r#"column "fetchedAt" is integer, expected bigint: ALTER TABLE "posts" ALTER COLUMN "fetchedAt" TYPE bigint USING "fetchedAt"::bigint"#,
                r#"column "sourceHash" is text, expected bytea: ALTER TABLE "posts" ALTER COLUMN "sourceHash" TYPE bytea USING decode("sourceHash", 'hex')"#,
                r#"column "idemFrozen" is missing (expected bytea): ALTER TABLE "posts" ADD COLUMN "idemFrozen" bytea"#,
                r#"column "idemAppliedOps" is missing (expected jsonb): ALTER TABLE "posts" ADD COLUMN "idemAppliedOps" jsonb"#,
            ],
            "{label}"
        );
        assert!(
            report.table_problems[4].starts_with(
                "no unique constraint on exactly the natural key (lang, slug); idem's conflict \
                 target needs one: ALTER TABLE \"posts\" ADD CONSTRAINT"
            ),
            "{label}: {}",
            report.table_problems[4]
        );

        assert_eq!(report.duplicates.keys, 2, "{label}: {report}");
        assert_eq!(report.duplicates.documents, 4);
        let duplicates: Vec<(String, u64, Vec<String>)> = report
            .duplicates
            .samples
            .iter()
            .map(|duplicate| {
                let key = duplicate.key.to_string();
                (key, duplicate.documents, duplicate.sample_ids.clone())
            })
            .collect();
        assert_eq!(
            duplicates,
            [
                (
                    r#"{slug: "shared", lang: "en"}"#.to_owned(),
                    2,
                    vec![id_of(&shared), "legacy-4".to_owned()]
                ),
                (
                    r#"{slug: "twice", lang: "en"}"#.to_owned(),
                    2,
                    vec!["legacy-1".to_owned(), "legacy-2".to_owned()]
                ),
            ],
            "{label}"
        );

        // In the order of the natural key, each with the id it belongs under.
        assert_eq!(report.legacy_ids.count, 4, "{label}: {report}");
        assert_eq!(
            samples(&report.legacy_ids),
            [
                ("legacy-3".to_owned(), derived(&legacy)),
                ("legacy-4".to_owned(), derived(&shared)),
                ("legacy-1".to_owned(), derived(&first)),
                ("legacy-2".to_owned(), derived(&second)),
            ],
            "{label}"
        );
        assert_eq!(
            samples(&report.orphans),
            [(id_of(&orphaned), derived(&moved))],
            "{label}"
        );
        let no_slug = Some("`slug` is missing".to_owned());
        assert_eq!(
            samples(&report.underivable),
            [
                ("keyless-1".to_owned(), no_slug.clone()),
                ("keyless-2".to_owned(), no_slug),
            ],
            "{label}"
        );
        assert_eq!(
            samples(&report.missing_hash),
            [
                (id_of(&unhashed), None),
                ("keyless-1".to_owned(), None),
                ("keyless-2".to_owned(), None),
            ],
            "{label}"
        );
        assert_eq!(
            samples(&report.hash_mismatch),
            [(id_of(&edited), None)],
            "{label}"
        );
        let undeserializable = report.undeserializable.as_ref().unwrap();
        assert_eq!(undeserializable.count, 3, "{label}: {report}");
        let reasons: Vec<(&str, &str)> = undeserializable
            .samples
            .iter()
            .map(|sample| (sample.id.as_str(), sample.detail.as_deref().unwrap()))
            .collect();
        assert_eq!(reasons[0].0, id_of(&unreadable), "{label}");
        assert!(reasons[0].1.contains("title"), "{label}: {reasons:?}");
        assert_eq!(reasons[1].0, "keyless-1");
        assert_eq!(reasons[2].0, "keyless-2");
        assert!(reasons[2].1.contains("slug"), "{label}: {reasons:?}");
        assert!(
            report.moves_in_progress.is_empty(),
            "no adopt on PostgreSQL"
        );

        let summary = report.to_string();
        for expected in [
            "`posts`: 12 documents scanned, 1 clean\n",
            "  the table lacks what idem's writes need:\n    column \"fetchedAt\" is integer",
            "{slug: \"twice\", lang: \"en\"} in 2 documents: legacy-1, legacy-2",
            "without a content hash: 3\n",
        ] {
            assert!(
                summary.contains(expected),
                "{label}: {expected} in:\n{summary}"
            );
        }
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["table_problems"].as_array().unwrap().len(), 5);

        // Nothing was written, and idem still refuses the table before its first write.
        let refused = Store::new().upsert(&client, &clean).await.unwrap_err();
        assert!(
            refused.to_string().contains("fetchedAt"),
            "{label}: {refused}"
        );
    }
}

/// A table idem created and wrote entirely is clean: no problem with the table or any row.
#[tokio::test]
async fn a_table_idem_wrote_is_clean() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "pa", "clean").await;
        let store = Store::new();
        store.ensure_table::<Post, _>(&client).await.unwrap();
        let written: Vec<Post> = (0..30).map(|n| post(&format!("p{n}"), "T")).collect();
        store.upsert_many(&client, &written).await.unwrap();
        let report = store.audit::<Post, _>(&client).await.unwrap();
        assert!(report.is_clean(), "{label}: {report}");
        assert_eq!(report.scanned, 30, "{label}");
        assert_eq!(report.clean, 30, "{label}");
        assert!(report.table_problems.is_empty(), "{label}: {report}");
        assert!(report.to_string().contains("no problems found"), "{label}");
        let json = serde_json::to_value(&report).unwrap();
        assert!(json.get("table_problems").is_none(), "{label}: {json}");
    }
}

/// Given the caller's transaction, the audit reads what it wrote and has not committed, leaves
/// it usable, and other sessions see none of it.
#[tokio::test]
async fn the_audit_reads_the_callers_transaction() {
    for (label, uri) in postgres_servers() {
        let (schema, mut client) = fresh_schema(&uri, "pa", "tx").await;
        let other = postgres_client(&uri, &schema).await;
        let store = Store::new();
        let tx = client.transaction().await.unwrap();
        store.ensure_table::<Post, _>(&tx).await.unwrap();
        let written: Vec<Post> = (0..3).map(|n| post(&format!("p{n}"), "T")).collect();
        store.upsert_many(&tx, &written).await.unwrap();
        tx.execute("UPDATE posts SET title = 'By hand' WHERE slug = 'p1'", &[])
            .await
            .unwrap();

        let inside = store.audit::<Post, _>(&tx).await.unwrap();
        assert_eq!(inside.scanned, 3, "{label}: {inside}");
        assert!(inside.table_problems.is_empty(), "{label}: {inside}");
        assert_eq!(
            samples(&inside.hash_mismatch),
            [(id_of(&written[1]), None)],
            "{label}"
        );

        // Another session: the table is not there yet.
        let outside = store.audit::<Post, _>(&other).await.unwrap();
        assert_eq!(outside.scanned, 0, "{label}");
        assert!(!outside.is_clean(), "{label}");
        assert!(
            outside.table_problems[0].starts_with("it does not exist in the search path"),
            "{label}: {outside}"
        );

        // The transaction goes on.
        let rewritten = post("p1", "New");
        assert_eq!(
            store.upsert(&tx, &rewritten).await.unwrap(),
            Outcome::Updated,
            "{label}"
        );
        assert!(store.audit::<Post, _>(&tx).await.unwrap().is_clean());
        tx.rollback().await.unwrap();
        let rolled_back = store.audit::<Post, _>(&client).await.unwrap();
        assert_eq!(rolled_back.scanned, 0, "{label}");
        assert_eq!(rolled_back.table_problems.len(), 1, "{label}");
    }
}

/// A table with an id column of its own, no `_id`, no hash and no `lang`: every row is shown by
/// where it is, none can be placed, none is a duplicate (their keys hold a NULL), and what the
/// table lacks is listed column by column.
#[tokio::test]
async fn a_table_without_idem_id_hash_or_a_key_column_is_reported_row_by_row() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "pa", "bare").await;
        client
            .batch_execute(
                "CREATE TABLE posts (id bigserial PRIMARY KEY, slug text, \
                 \"publishedAt\" bigint, title text, \"fetchedAt\" bigint); \
                 INSERT INTO posts (slug, \"publishedAt\", title, \"fetchedAt\") \
                 VALUES ('a', 1, 'A', 1), ('a', 1, 'A', 1)",
            )
            .await
            .unwrap();
        let report = Store::new().audit::<Post, _>(&client).await.unwrap();
        assert_eq!(report.scanned, 2, "{label}: {report}");
        assert_eq!(report.clean, 0);
        assert_eq!(report.duplicates.keys, 0, "{label}: {report}");
        let missing: Vec<&str> = report
            .table_problems
            .iter()
            .filter_map(|problem| problem.strip_prefix("column "))
            .collect();
        assert_eq!(
            missing,
            [
                r#""_id" is missing (expected text): ALTER TABLE "posts" ADD COLUMN "_id" text UNIQUE"#,
                r#""lang" is missing (expected text): ALTER TABLE "posts" ADD COLUMN "lang" text"#,
                r#""sourceHash" is missing (expected bytea): ALTER TABLE "posts" ADD COLUMN "sourceHash" bytea"#,
                r#""idemFrozen" is missing (expected bytea): ALTER TABLE "posts" ADD COLUMN "idemFrozen" bytea"#,
                r#""idemAppliedOps" is missing (expected jsonb): ALTER TABLE "posts" ADD COLUMN "idemAppliedOps" jsonb"#,
            ],
            "{label}"
        );
        let rows = ["(no _id, at ctid (0,1))", "(no _id, at ctid (0,2))"];
        let no_lang = Some("`lang` is missing".to_owned());
        assert_eq!(
            samples(&report.underivable),
            rows.map(|row| (row.to_owned(), no_lang.clone())),
            "{label}"
        );
        assert_eq!(
            samples(&report.missing_hash),
            rows.map(|row| (row.to_owned(), None)),
            "{label}"
        );
        assert_eq!(report.undeserializable.as_ref().unwrap().count, 2);
        assert!(report.legacy_ids.is_empty(), "{label}: {report}");
    }
}

/// Many rows, each natural key held twice, all under legacy ids: every key is counted, in one
/// pass with adjacent duplicates, and samples stop at their limit.
#[tokio::test]
async fn every_duplicate_of_a_large_table_is_counted_and_samples_are_capped() {
    const ROWS: u64 = 20_000;
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "pa", "large").await;
        client.batch_execute(FOREIGN_TABLE).await.unwrap();
        client
            .batch_execute(&format!(
                "INSERT INTO posts SELECT 'legacy-' || n, 'k' || (n % {}), 'en', {T0}, 'T', 0, \
                 NULL FROM generate_series(1, {ROWS}) n",
                ROWS / 2
            ))
            .await
            .unwrap();
        let mut calls = 0;
        let report = Store::new()
            .audit_with_progress::<Post, _>(&client, |_| calls += 1)
            .await
            .unwrap();
        assert_eq!(report.scanned, ROWS, "{label}");
        assert_eq!(calls, ROWS, "{label}");
        assert_eq!(report.duplicates.keys, ROWS / 2, "{label}");
        assert_eq!(report.duplicates.documents, ROWS, "{label}");
        assert_eq!(
            report.duplicates.samples.len(),
            idem_core::audit::SAMPLES_PER_KIND
        );
        assert_eq!(report.legacy_ids.count, ROWS, "{label}");
        assert_eq!(report.missing_hash.count, ROWS, "{label}");
        assert_eq!(
            report.legacy_ids.samples.len(),
            idem_core::audit::SAMPLES_PER_KIND
        );
        assert_eq!(report.clean, 0, "{label}");
    }
}
