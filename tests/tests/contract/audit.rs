//! The audit on every backend: what it finds in rows idem wrote and then others changed, read as
//! the type and with the model given at run time (as `idem audit` reads it).

use idem_core::{AuditReport, Idempotent};
use idem_tests::backends::{fresh_backends, Db};
use idem_tests::fixtures::Post;
use mongodb::bson::doc;
use serde::{Deserialize, Serialize};

use crate::batch::{copy_own_field, posts_whose_digests_were_changed_behind_idems_back};
use crate::foreign::write_under_foreign_id;

/// Each sample of `finding` as its id and detail.
fn samples(finding: &idem_core::audit::Finding) -> Vec<(String, Option<String>)> {
    finding
        .samples
        .iter()
        .map(|sample| (sample.id.clone(), sample.detail.clone()))
        .collect()
}

/// Both audits of `T`: read as the type, and with the model given at run time.
async fn both_audits<T>(db: &Db) -> [(&'static str, AuditReport); 2]
where
    T: Idempotent + Serialize + serde::de::DeserializeOwned,
{
    [
        ("typed", db.audit::<T>().await),
        ("run-time model", db.audit_model::<T>().await),
    ]
}

/// A guard digest changed behind idem's back, and a frozen value changed behind idem's back,
/// are each found: the document named with the field (and, read as the type, nothing else said
/// of it but the changed value's content hash). A re-ingest of the same content leaves such a document
/// `Unchanged` (the content hash settles it), so the audit is where it shows before a write
/// changing it is refused.
#[tokio::test]
async fn the_audit_finds_guard_digests_that_are_not_their_values() {
    for db in fresh_backends("audit_digests").await {
        let posts = posts_whose_digests_were_changed_behind_idems_back(&db).await;
        let id_of = |at: usize| posts[at].id().unwrap().to_string();
        let author = Some("`authorId`".to_owned());
        for (reading, report) in both_audits::<Post>(&db).await {
            assert_eq!(report.scanned, 128, "{db}, {reading}: {report}");
            assert_eq!(
                samples(&report.digest_mismatch),
                [(id_of(10), author.clone()), (id_of(70), author.clone())],
                "{db}, {reading}: {report}"
            );
            assert!(
                report
                    .to_string()
                    .contains("a stored guard digest differs from its value"),
                "{db}, {reading}: {report}"
            );
        }

        // The value changed instead, its digest and content hash left as they were.
        copy_own_field::<Post>(&db, "idemFrozen", "slug", "p011", "p010").await;
        copy_own_field::<Post>(&db, "idemFrozen", "slug", "p071", "p070").await;
        copy_own_field::<Post>(&db, "authorId", "slug", "p100", "p030").await;
        for (reading, report) in both_audits::<Post>(&db).await {
            assert_eq!(
                samples(&report.digest_mismatch),
                [(id_of(30), author.clone())],
                "{db}, {reading}: {report}"
            );
        }
        // Read as the type, nothing else is said of them but the changed value's hash.
        let typed = db.audit::<Post>().await;
        assert_eq!(
            samples(&typed.hash_mismatch),
            [(id_of(30), None)],
            "{db}: {typed}"
        );
        assert_eq!(typed.clean, 127, "{db}: {typed}");

        // As the finding advises where the stored value is the right one: `idemFrozen` cleared,
        // the value is compared as a value, so the edit keeping it is written (with its digests
        // again) and the one changing it refused.
        db.run_raw(
            "UPDATE \"posts\" SET \"idemFrozen\" = NULL WHERE \"slug\" = 'p030'",
            doc! {
                "update": "posts",
                "updates": [{ "q": { "slug": "p030" }, "u": { "$unset": { "idemFrozen": "" } } }],
            },
        )
        .await;
        assert!(
            db.audit::<Post>().await.digest_mismatch.is_empty(),
            "{db}: a document without digests is compared by its values"
        );
        let edited = |author: &str| Post {
            author_id: author.into(),
            body: "edited".into(),
            ..posts[30].clone()
        };
        let refused = db.upsert(&edited("ada")).await.unwrap_err();
        assert!(
            refused.to_string().contains("may not change"),
            "{db}: {refused}"
        );
        assert_eq!(
            db.upsert(&edited("grace")).await.unwrap(),
            idem_core::Outcome::Updated,
            "{db}"
        );
        let after = db.audit::<Post>().await;
        assert!(after.digest_mismatch.is_empty(), "{db}: {after}");
        assert!(after.hash_mismatch.is_empty(), "{db}: {after}");
        assert_eq!(
            db.upsert(&edited("ada")).await.unwrap_err().to_string(),
            refused.to_string(),
            "{db}: refused by its digest now as by its value before"
        );

        // A digest removed beside its value (or a field made frozen since): named as such,
        // since the guard would let the next write set it.
        let removed = match db {
            Db::Sqlite { .. } => "json_remove(\"idemFrozen\", '$.authorId')",
            _ => "\"idemFrozen\" - 'authorId'",
        };
        db.run_raw(
            &format!("UPDATE \"posts\" SET \"idemFrozen\" = {removed} WHERE \"slug\" = 'p050'"),
            doc! {
                "update": "posts",
                "updates": [{
                    "q": { "slug": "p050" },
                    "u": { "$unset": { "idemFrozen.authorId": "" } },
                }],
            },
        )
        .await;
        for (reading, report) in both_audits::<Post>(&db).await {
            assert_eq!(
                samples(&report.digest_mismatch),
                [(
                    id_of(50),
                    Some(
                        "`authorId`: no digest beside its value, which the next write may change"
                            .into()
                    )
                )],
                "{db}, {reading}: {report}"
            );
        }
    }
}

/// Frozen values of each shape a column holds, among them an integral float (which PostgreSQL's
/// `jsonb` reads back as an integer), an `Option` left `None`, a boolean and a list (which SQLite
/// stores as an `INTEGER` and as JSON in a `TEXT`, which a model given at run time cannot tell
/// from an integer and a text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "gauges")]
struct Gauge {
    #[idem(key)]
    name: String,
    #[idem(frozen)]
    scale: f64,
    #[idem(frozen)]
    unit: Option<String>,
    #[idem(frozen)]
    calibrated: bool,
    #[idem(frozen)]
    limits: Vec<i64>,
    reading: i64,
}

/// A gauge for each of `scales`, its other frozen values varied with its place.
fn gauges(scales: &[f64]) -> Vec<Gauge> {
    scales
        .iter()
        .enumerate()
        .map(|(n, &scale)| Gauge {
            name: format!("g{n}"),
            scale,
            unit: (n % 2 == 0).then(|| "m".to_owned()),
            calibrated: n % 3 == 0,
            limits: (0..n as i64).collect(),
            reading: n as i64,
        })
        .collect()
}

/// What idem wrote is clean to the audit, whatever shape its frozen values have: each stored
/// value's digest is the one idem stored for it, read as the type and as stored.
#[tokio::test]
async fn the_audit_finds_frozen_values_of_each_shape_as_digested() {
    for db in fresh_backends("audit_digest_shapes").await {
        db.ensure::<Gauge>().await;
        let gauges = gauges(&[1.0, 2.5, -0.0, 1e300, 1.0, 2.5, -0.0, 1e300]);
        db.upsert_many(&gauges).await.unwrap();
        for (reading, report) in both_audits::<Gauge>(&db).await {
            assert_eq!(report.scanned, 8, "{db}, {reading}: {report}");
            assert!(
                report.digest_mismatch.is_empty(),
                "{db}, {reading}: {report}"
            );
        }
        // And each of them changed behind idem's back is found.
        copy_own_field::<Gauge>(&db, "idemFrozen", "name", "g1", "g2").await;
        for (reading, report) in both_audits::<Gauge>(&db).await {
            let id = gauges[2].id().unwrap().to_string();
            assert_eq!(
                report.digest_mismatch.samples.len(),
                1,
                "{db}, {reading}: {report}"
            );
            assert_eq!(
                report.digest_mismatch.samples[0].id, id,
                "{db}, {reading}: {report}"
            );
        }
    }
}

/// Documents another tool wrote, adopted with the model given at run time, are stored with the
/// digests idem's writes compare: an edit of each is written, its frozen values as they were,
/// and the audit finds their digests as their values'. (A float column's value is digested as a
/// float: PostgreSQL's `jsonb` reads an integral one back as an integer.)
#[tokio::test]
async fn documents_adopted_without_the_type_are_digested_as_idem_writes_them() {
    for db in fresh_backends("adopt_digests").await {
        db.ensure::<Gauge>().await;
        let gauges = gauges(&[1.0, 2.5, -0.0, 3.0]);
        for gauge in &gauges {
            write_under_foreign_id(&db, gauge).await;
        }
        let adopted = db.adopt_model::<Gauge>().await;
        assert_eq!(adopted.moved.count, 4, "{db}: {adopted:?}");
        for (reading, report) in both_audits::<Gauge>(&db).await {
            assert!(report.missing_hash.is_empty(), "{db}, {reading}: {report}");
            assert!(
                report.digest_mismatch.is_empty(),
                "{db}, {reading}: {report}"
            );
        }
        for gauge in &gauges {
            let edited = Gauge {
                reading: gauge.reading + 100,
                ..gauge.clone()
            };
            assert_eq!(
                db.upsert(&edited).await.unwrap(),
                idem_core::Outcome::Updated,
                "{db}: {edited:?}"
            );
        }
    }
}
