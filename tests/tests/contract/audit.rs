//! The audit on every backend: what it finds in rows idem wrote and then others changed, read as
//! the type and with the model given at run time (as `idem audit` reads it).

use idem_core::{AuditReport, Idempotent, Outcome};
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

/// How the audit of a SQL store names a document whose one digest of the guarded fields is not
/// their stored values': by `idemFrozen`, no field.
const ONE_DIGEST: &str = "`idemFrozen`: not the digest of the guarded fields' stored values (one \
                          digest of them all, naming none), which the next write compares one by one";

/// Removes the guard digest of `field` from the stored digests of the document of `T` whose
/// `key.0` is `key.1`, behind idem's back (as a field made frozen since would be, or a MongoDB
/// store of an earlier idem left one).
async fn remove_digest<T: Idempotent>(db: &Db, key: (&str, &str), field: &str) {
    let collection = T::MODEL.collection();
    let (key_field, key_value) = key;
    let digests = db.quote("idemFrozen");
    let removed = match db {
        Db::Sqlite { .. } => format!("json_remove({digests}, '$.{field}')"),
        Db::Mysql { .. } => format!("JSON_REMOVE({digests}, '$.\"{field}\"')"),
        _ => format!("{digests} - '{field}'"),
    };
    db.run_raw(
        &format!(
            "UPDATE {} SET {digests} = {removed} WHERE {} = '{key_value}'",
            db.quote(collection),
            db.quote(key_field)
        ),
        doc! {
            "update": collection,
            "updates": [{
                "q": { key_field: key_value },
                "u": { "$unset": { format!("idemFrozen.{field}"): "" } },
            }],
        },
    )
    .await;
}

/// Both audits of `T` find every stored guard digest to be its value's.
async fn assert_no_digest_mismatch<T>(db: &Db)
where
    T: Idempotent + Serialize + serde::de::DeserializeOwned,
{
    for (reading, report) in both_audits::<T>(db).await {
        assert!(
            report.digest_mismatch.is_empty(),
            "{db}, {reading}: {report}"
        );
    }
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
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        let posts = posts_whose_digests_were_changed_behind_idems_back(&db).await;
        let id_of = |at: usize| posts[at].id().unwrap().to_string();
        // A SQL store keeps one digest of the guarded fields, which names none.
        let author = Some(match db.is_sql() {
            true => ONE_DIGEST.to_owned(),
            false => "`authorId`".to_owned(),
        });
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

        // The value changed instead, its digest and content hash left as they were. (On a SQL
        // store the digest covers the timestamp too, which another post's does not share: the
        // two posts' are cleared instead.)
        match db.is_sql() {
            true => {
                for slug in ["p010", "p070"] {
                    let sql = format!(
                        "UPDATE {} SET {} = NULL WHERE {} = '{slug}'",
                        db.quote("posts"),
                        db.quote("idemFrozen"),
                        db.quote("slug")
                    );
                    db.run_raw(&sql, doc! {}).await;
                }
            }
            false => {
                copy_own_field::<Post>(&db, "idemFrozen", "slug", "p011", "p010").await;
                copy_own_field::<Post>(&db, "idemFrozen", "slug", "p071", "p070").await;
            }
        }
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
            &format!(
                "UPDATE {} SET {} = NULL WHERE {} = 'p030'",
                db.quote("posts"),
                db.quote("idemFrozen"),
                db.quote("slug")
            ),
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
        // since the guard would let the next write set it. MongoDB's alone: a SQL store keeps
        // one digest of the guarded fields.
        if db.is_sql() {
            continue;
        }
        remove_digest::<Post>(&db, ("slug", "p050"), "authorId").await;
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

/// Where a station stands: floats a JSON column may read back as integers (`10.0`, `1e16`), and
/// tags some of which are null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Origin {
    lat: f64,
    lon: f64,
    tags: std::collections::BTreeMap<String, Option<String>>,
}

/// Frozen values of the shapes serde leaves out, nests or fills with nulls: a label and aliases
/// left out when unset, samples with nulls among them, a nested origin; beside free-form fields
/// flattened in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "stations")]
#[serde(rename_all = "camelCase")]
struct Station {
    #[idem(key)]
    code: String,
    #[idem(frozen)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    #[idem(frozen)]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    aliases: Vec<String>,
    #[idem(frozen)]
    samples: Vec<Option<i64>>,
    #[idem(frozen)]
    origin: Origin,
    reading: i64,
    #[serde(flatten)]
    extra: std::collections::BTreeMap<String, serde_json::Value>,
}

/// Station `n`, each shape varied with its place.
fn station(n: usize) -> Station {
    // 1e16 and up, serde writes with an exponent, and PostgreSQL's `jsonb` gives back as an
    // integer: a reading without the type must still find it digested.
    let coordinate = [10.0, -0.0, 0.1 + 0.2, 1e15, -45.5, 1e16][n % 6];
    Station {
        code: format!("s{n:02}"),
        label: n.is_multiple_of(2).then(|| format!("station {n}")),
        aliases: (0..n % 3).map(|a| format!("alias {a}")).collect(),
        samples: (0..n as i64).map(|s| (s % 2 == 0).then_some(s)).collect(),
        origin: Origin {
            lat: coordinate,
            lon: -coordinate,
            tags: [
                ("kind".to_owned(), Some("weather".to_owned())),
                (
                    "owner".to_owned(),
                    n.is_multiple_of(3).then(|| "city".to_owned()),
                ),
            ]
            .into(),
        },
        reading: n as i64,
        extra: match n % 2 {
            0 => [(
                "note".to_owned(),
                serde_json::json!([n, null, { "deep": null }]),
            )]
            .into(),
            _ => Default::default(),
        },
    }
}

/// Frozen values serde leaves out, nests or fills with nulls, the same on every backend: clean
/// to both audits as idem wrote them; `Unchanged` on a re-ingest; an `Option` left out takes a
/// first value, where a list left out is a value (null, as a SQL column holds it) whose first
/// items are refused, on rows idem wrote and rows another tool wrote alike; a changed value is
/// refused naming the field, every row left as it was; a digest removed, or a digest or value
/// changed behind idem's back, is found.
#[tokio::test]
async fn frozen_values_left_out_nested_or_holding_nulls_are_guarded_and_audited() {
    for db in fresh_backends("audit_left_out").await {
        db.ensure::<Station>().await;
        let stations: Vec<Station> = (0..12).map(station).collect();
        db.upsert_many(&stations).await.unwrap();
        for (reading, report) in both_audits::<Station>(&db).await {
            assert_eq!(report.scanned, 12, "{db}, {reading}: {report}");
            assert!(
                report.digest_mismatch.is_empty() && report.hash_mismatch.is_empty(),
                "{db}, {reading}: {report}"
            );
        }
        let again = db.upsert_many(&stations).await.unwrap();
        assert_eq!(
            again.count(idem_core::Outcome::Unchanged),
            12,
            "{db}: {again}"
        );
        for station in &stations {
            assert_eq!(
                db.upsert(station).await.unwrap(),
                idem_core::Outcome::Unchanged,
                "{db}: {station:?}"
            );
        }

        // A first label where serde left it out (an `Option` never written): written, once.
        let named = Station {
            label: Some("named".into()),
            ..stations[9].clone()
        };
        assert_eq!(
            db.upsert(&named).await.unwrap(),
            idem_core::Outcome::Updated,
            "{db}"
        );
        let before = db.stored::<Station>().await;
        // Each frozen value changed, in a batch and alone: refused, naming the field. A list
        // serde leaves out while empty is a value like any other (only an `Option` left out is
        // one never written): its first items, or its items removed, are refused too.
        let changed = [
            (
                "label",
                Station {
                    label: Some("renamed".into()),
                    ..named.clone()
                },
            ),
            (
                "label",
                Station {
                    label: None,
                    ..named.clone()
                },
            ),
            (
                "aliases",
                Station {
                    aliases: vec!["first".into()],
                    ..named.clone()
                },
            ),
            (
                "aliases",
                Station {
                    aliases: Vec::new(),
                    ..stations[1].clone()
                },
            ),
            (
                "samples",
                Station {
                    samples: vec![Some(0), None, None],
                    ..stations[3].clone()
                },
            ),
            ("origin", {
                let mut moved = stations[0].clone();
                // 10.0, one unit in the last place away.
                moved.origin.lat = 10.000000000000002;
                moved
            }),
            ("origin", {
                let mut untagged = stations[6].clone();
                untagged.origin.tags.insert("owner".into(), None);
                untagged
            }),
        ];
        for (field, doc) in &changed {
            let single = match db.upsert(doc).await {
                Err(refusal) => refusal.to_string(),
                Ok(outcome) => panic!("{db}: {field} changed in {doc:?}: {outcome:?}"),
            };
            assert!(
                single.contains(&format!("`{field}`")) && single.contains(&doc.code),
                "{db}: {field}: {single}"
            );
        }
        let batch = db
            .upsert_many(
                &changed
                    .iter()
                    .map(|(_, doc)| doc.clone())
                    .collect::<Vec<_>>(),
            )
            .await
            .unwrap();
        assert_eq!(batch.refused(), changed.len(), "{db}: {batch}");
        assert_eq!(
            db.stored::<Station>().await,
            before,
            "{db}: the refused writes left every row as it was"
        );
        // The same frozen values with other free-form fields: written.
        let mut noted = stations[5].clone();
        noted
            .extra
            .insert("note".into(), serde_json::json!({ "new": [1.5, null] }));
        assert_eq!(
            db.upsert(&noted).await.unwrap(),
            idem_core::Outcome::Updated,
            "{db}"
        );
        for (reading, report) in both_audits::<Station>(&db).await {
            assert!(
                report.digest_mismatch.is_empty() && report.hash_mismatch.is_empty(),
                "{db}, {reading}: {report}"
            );
        }

        // Written by another tool (no digests), its aliases left out: an edit of another field
        // is written, and first aliases are refused as on a row idem wrote.
        let mut foreign = station(3);
        foreign.code = "f03".into();
        db.write_as_another_tool(&foreign).await;
        assert_eq!(
            db.upsert(&Station {
                reading: 99,
                ..foreign.clone()
            })
            .await
            .unwrap(),
            idem_core::Outcome::Updated,
            "{db}"
        );
        let mut foreign = station(9);
        foreign.code = "f09".into();
        db.write_as_another_tool(&foreign).await;
        let aliased = Station {
            aliases: vec!["first".into()],
            ..foreign.clone()
        };
        let refused = db.upsert(&aliased).await.unwrap_err().to_string();
        assert!(
            refused.contains("`aliases`") && refused.contains("stored (missing)"),
            "{db}: {refused}"
        );

        // A digest removed for a list left out (as a MongoDB store of an earlier idem wrote
        // it): named by the audit, since the next write may set the list; that write stores it.
        // MongoDB's alone: a SQL store keeps one digest of the guarded fields.
        if !db.is_sql() {
            remove_digest::<Station>(&db, ("code", "s03"), "aliases").await;
            let id_of_3 = stations[3].id().unwrap().to_string();
            for (reading, report) in both_audits::<Station>(&db).await {
                assert_eq!(
                samples(&report.digest_mismatch),
                [(
                    id_of_3.clone(),
                    Some(
                        "`aliases`: no digest beside its value, which the next write may change"
                            .into()
                    )
                )],
                "{db}, {reading}: {report}"
            );
            }
            let edited = Station {
                reading: 33,
                ..stations[3].clone()
            };
            assert_eq!(
                db.upsert(&edited).await.unwrap(),
                idem_core::Outcome::Updated,
                "{db}"
            );
            assert_no_digest_mismatch::<Station>(&db).await;
            let aliased = Station {
                aliases: vec!["late".into()],
                ..edited
            };
            assert!(
                db.upsert(&aliased)
                    .await
                    .unwrap_err()
                    .to_string()
                    .contains("`aliases`"),
                "{db}"
            );
        }

        // Behind idem's back: a digests column copied from another station, and a value.
        copy_own_field::<Station>(&db, "idemFrozen", "code", "s07", "s08").await;
        copy_own_field::<Station>(&db, "samples", "code", "s09", "s10").await;
        for (reading, report) in both_audits::<Station>(&db).await {
            let found: Vec<(String, Option<String>)> = samples(&report.digest_mismatch);
            let ids = [8, 10].map(|n| stations[n].id().unwrap().to_string());
            assert_eq!(
                found.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(),
                ids,
                "{db}, {reading}: {report}"
            );
            let named = match db.is_sql() {
                true => ONE_DIGEST,
                false => "`samples`",
            };
            assert!(
                found[1].1.as_deref().is_some_and(|d| d.contains(named)),
                "{db}, {reading}: {report}"
            );
        }
    }
}

/// Frozen values at the edges of what a digest compares: a JSON value that may be null, an
/// optional list, a float that may be NaN, an `Option` of an `Option`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "edges")]
struct Edge {
    #[idem(key)]
    code: String,
    #[idem(frozen)]
    any: serde_json::Value,
    #[idem(frozen)]
    maybe_list: Option<Vec<i64>>,
    #[idem(frozen)]
    ratio: f64,
    #[idem(frozen)]
    nested: Option<Option<i64>>,
    n: i64,
}

/// Each edge written, written again, then followed by another document of the same key: the
/// same three answers on every backend. A JSON null, an empty list and NaN are values that stay;
/// `None` (and `Some(None)`, which serde writes as the same null) is a value never written;
/// `-0.0` is `0.0`, as the content hash has it; `1.0` and `1` in a JSON value differ.
#[tokio::test]
async fn frozen_values_at_the_edges_get_the_same_answers_on_every_backend() {
    let edge = |code: &str| Edge {
        code: code.into(),
        any: serde_json::Value::Null,
        maybe_list: Some(Vec::new()),
        ratio: f64::NAN,
        nested: Some(None),
        n: 0,
    };
    let cases = [
        (
            edge("a"),
            Edge {
                any: serde_json::json!(1),
                ..edge("a")
            },
            "any",
        ),
        (
            edge("b"),
            Edge {
                maybe_list: Some(vec![1]),
                ..edge("b")
            },
            "maybe_list",
        ),
        (
            edge("c"),
            Edge {
                maybe_list: None,
                ..edge("c")
            },
            "maybe_list",
        ),
        (
            Edge {
                maybe_list: None,
                ..edge("d")
            },
            Edge {
                maybe_list: Some(vec![1]),
                ..edge("d")
            },
            "Updated",
        ),
        (edge("e"), Edge { n: 5, ..edge("e") }, "Updated"),
        (
            edge("f"),
            Edge {
                ratio: 1.0,
                ..edge("f")
            },
            "ratio",
        ),
        (
            edge("g"),
            Edge {
                nested: Some(Some(1)),
                ..edge("g")
            },
            "Updated",
        ),
        (
            Edge {
                nested: None,
                ..edge("h")
            },
            Edge {
                nested: Some(None),
                ..edge("h")
            },
            "Unchanged",
        ),
        (
            Edge {
                ratio: -0.0,
                ..edge("i")
            },
            Edge {
                ratio: 0.0,
                ..edge("i")
            },
            "Unchanged",
        ),
        (
            Edge {
                any: serde_json::json!({}),
                ..edge("j")
            },
            Edge {
                any: serde_json::json!({ "a": null }),
                ..edge("j")
            },
            "any",
        ),
        // A value of another encoding but equal as a number: its digest differs, so the values
        // are compared, and they are equal: written, the digest of the new encoding stored.
        (
            Edge {
                any: serde_json::json!([1.0]),
                ..edge("k")
            },
            Edge {
                any: serde_json::json!([1]),
                ..edge("k")
            },
            "Updated",
        ),
    ];
    for db in fresh_backends("frozen_edges").await {
        db.ensure::<Edge>().await;
        // MariaDB's `DOUBLE` holds no NaN (the document is refused: `floats.rs`): there the
        // frozen ratio is 0.5, which leaves every answer as it is.
        let cases: Vec<(Edge, Edge, &str)> = match db.is_mysql() {
            true => cases
                .iter()
                .map(|(first, then, expected)| {
                    let finite = |edge: &Edge| Edge {
                        ratio: if edge.ratio.is_nan() { 0.5 } else { edge.ratio },
                        ..edge.clone()
                    };
                    (finite(first), finite(then), *expected)
                })
                .collect(),
            false => cases.to_vec(),
        };
        for (first, then, expected) in &cases {
            assert_eq!(
                db.upsert(first).await.unwrap(),
                idem_core::Outcome::Inserted,
                "{db}: {first:?}"
            );
            assert_eq!(
                db.upsert(first).await.unwrap(),
                idem_core::Outcome::Unchanged,
                "{db}: {first:?}"
            );
            let answer = match db.upsert(then).await {
                Ok(outcome) => format!("{outcome:?}"),
                Err(refusal) => match refusal.kind() {
                    idem_core::ErrorKind::FrozenFieldChanged { field, .. } => field.to_string(),
                    other => panic!("{db}: {then:?}: {other:?}"),
                },
            };
            assert_eq!(answer, *expected, "{db}: {first:?} then {then:?}");
        }
        // (Without the type's field order, a run-time audit hashes the fields in the order the
        // server keeps them, which the test server changes: only the typed one checks hashes.)
        assert_no_digest_mismatch::<Edge>(&db).await;
        let typed = db.audit::<Edge>().await;
        assert!(typed.hash_mismatch.is_empty(), "{db}: {typed}");
    }
}

/// Documents another tool wrote with nested frozen floats, among them `1e16` (which PostgreSQL's
/// `jsonb` gives back as an integer), adopted without the type: an edit of each is written, a
/// change of its frozen value refused, and the audit finds no digest that is not its value's.
/// (Where a nested integer may have been such a float, adoption leaves the row's digests out:
/// it is compared by value until its next write stores them.)
#[tokio::test]
async fn documents_adopted_without_the_type_keep_nested_frozen_floats_of_any_size() {
    for db in fresh_backends("adopt_nested_floats").await {
        db.ensure::<Station>().await;
        let stations: Vec<Station> = [4, 5, 11].map(station).to_vec();
        for station in &stations {
            write_under_foreign_id(&db, station).await;
        }
        let adopted = db.adopt_model::<Station>().await;
        assert_eq!(adopted.moved.count, 3, "{db}: {adopted:?}");
        for station in &stations {
            let mut moved = station.clone();
            moved.origin.lon = 1.5;
            let refused = db.upsert(&moved).await.unwrap_err().to_string();
            assert!(refused.contains("`origin`"), "{db}: {refused}");
            let edited = Station {
                reading: station.reading + 100,
                ..station.clone()
            };
            assert_eq!(
                db.upsert(&edited).await.unwrap(),
                idem_core::Outcome::Updated,
                "{db}: {edited:?}"
            );
        }
        assert_no_digest_mismatch::<Station>(&db).await;
    }
}

/// A note, whose stored fields are `slug` and `title` only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "notes")]
struct Note {
    #[idem(key)]
    slug: String,
    title: String,
}

fn note(n: usize) -> Note {
    Note {
        slug: format!("n{n:02}"),
        title: format!("Note {n}"),
    }
}

/// The audit of `Note`'s table with its model given at run time, its fields listed
/// (`field_order`, as `--fields` or a model file give them) or not.
async fn audit_notes(db: &Db, field_order: &[&str]) -> AuditReport {
    let model = &Note::MODEL;
    match db {
        Db::Mongo { store, .. } => store.audit_model(model, field_order, |_| {}).await,
        Db::Postgres { store, client, .. } => {
            store.audit_model(client, model, field_order, |_| {}).await
        }
        Db::Sqlite {
            store, connection, ..
        } => {
            let mut connection = connection.lock().await;
            store
                .audit_model(&mut connection, model, field_order, |_| {})
                .await
        }
        Db::Mysql {
            store, connection, ..
        } => {
            let mut connection = connection.lock().await;
            store
                .audit_model(&mut connection, model, field_order, |_| {})
                .await
        }
    }
    .unwrap_or_else(|error| panic!("{db}: {error}"))
}

/// The adoption of `Note`'s table with its model given at run time; `allow` lets it leave the
/// fields the model does not have out of the hashes.
async fn adopt_notes(
    db: &Db,
    field_order: &[&str],
    allow: bool,
) -> Result<idem_core::AdoptReport, idem_core::Error> {
    let model = &Note::MODEL;
    match db {
        Db::Mongo { store, .. } => {
            let mut options = idem_core::mongo::AdoptOptions::default();
            if allow {
                options = options.allowing_unknown_fields();
            }
            store.adopt_model(model, field_order, options).await
        }
        Db::Postgres { store, client, .. } => {
            let mut options = idem_core::postgres::AdoptOptions::default();
            if allow {
                options = options.allowing_unknown_fields();
            }
            store.adopt_model(client, model, field_order, options).await
        }
        Db::Sqlite {
            store, connection, ..
        } => {
            let mut options = idem_core::sqlite::AdoptOptions::default();
            if allow {
                options = options.allowing_unknown_fields();
            }
            let mut connection = connection.lock().await;
            store
                .adopt_model(&mut connection, model, field_order, options)
                .await
        }
        Db::Mysql {
            store, connection, ..
        } => {
            let mut options = idem_core::mysql::AdoptOptions::default();
            if allow {
                options = options.allowing_unknown_fields();
            }
            let mut connection = connection.lock().await;
            store
                .adopt_model(&mut connection, model, field_order, options)
                .await
        }
    }
}

/// Asserts that upserting the notes `0..count` again changes nothing: the hashes adoption
/// stored are the type's.
async fn assert_notes_unchanged(db: &Db, count: usize) {
    for n in 0..count {
        assert_eq!(
            db.upsert(&note(n)).await.unwrap(),
            idem_core::Outcome::Unchanged,
            "{db}: note {n} after adoption"
        );
    }
}

/// A hand-written table with a surrogate key idem never writes (SQLite's `id INTEGER PRIMARY
/// KEY`, PostgreSQL's identity column, MariaDB's `AUTO_INCREMENT` one): the audit names it as
/// no field of the model, and adoption with the model given at run time refuses to hash it, so
/// that the next upsert of the same content is `Unchanged`, not a rewrite of every adopted row.
#[tokio::test]
async fn a_surrogate_key_is_named_and_never_hashed() {
    for db in fresh_backends("audit_surrogate").await {
        let (create, key) = match &db {
            Db::Sqlite { .. } => (
                "CREATE TABLE notes (id INTEGER PRIMARY KEY, \"_id\" TEXT UNIQUE, \
                 slug TEXT NOT NULL UNIQUE, title TEXT NOT NULL, \"sourceHash\" BLOB, \
                 \"idemAppliedOps\" TEXT NOT NULL DEFAULT '[]', \"idemWrite\" TEXT)",
                "id",
            ),
            Db::Postgres { .. } => (
                "CREATE TABLE notes (seq bigint GENERATED ALWAYS AS IDENTITY, \
                 \"_id\" text PRIMARY KEY, slug text NOT NULL UNIQUE, title text NOT NULL, \
                 \"sourceHash\" bytea, \"idemAppliedOps\" jsonb NOT NULL DEFAULT '[]')",
                "seq",
            ),
            Db::Mysql { .. } => (
                "CREATE TABLE notes (seq BIGINT AUTO_INCREMENT PRIMARY KEY, \
                 `_id` VARCHAR(26) COLLATE utf8mb4_nopad_bin NOT NULL UNIQUE, \
                 slug VARCHAR(255) COLLATE utf8mb4_nopad_bin NOT NULL UNIQUE, \
                 title LONGTEXT COLLATE utf8mb4_nopad_bin NOT NULL, \
                 `sourceHash` BINARY(32), \
                 `idemAppliedOps` JSON NOT NULL DEFAULT '[]', \
                 `idemWrite` VARCHAR(27) COLLATE utf8mb4_nopad_bin)",
                "seq",
            ),
            Db::Mongo { .. } => continue,
        };
        db.run_raw(create, doc! {}).await;
        // The column a store telling inserted rows by the write marker asks for.
        if db.has_write_marker() {
            db.run_raw("ALTER TABLE notes ADD COLUMN \"idemWrite\" text", doc! {})
                .await;
        }
        db.run_raw(
            &format!(
                "INSERT INTO notes ({}, slug, title) VALUES \
                 ('legacy-0', 'n00', 'Note 0'), ('legacy-1', 'n01', 'Note 1')",
                db.quote("_id")
            ),
            doc! {},
        )
        .await;
        let audited = audit_notes(&db, &[]).await;
        assert_eq!(
            audited.unknown_fields,
            [idem_core::audit::UnknownField::new(
                key,
                idem_core::audit::UnknownReason::TableKey
            )],
            "{db}: {audited}"
        );
        assert!(
            audited
                .to_string()
                .contains(&format!("`{key}`: the table's own key")),
            "{db}: {audited}"
        );
        let refused = adopt_notes(&db, &[], false).await.unwrap_err();
        assert!(
            refused.to_string().contains(&format!("`{key}`"))
                && refused.to_string().contains("--allow-unknown-fields"),
            "{db}: {refused}"
        );
        let adopted = adopt_notes(&db, &[], true).await.unwrap();
        assert_eq!(adopted.moved.count, 2, "{db}: {adopted}");
        assert_notes_unchanged(&db, 2).await;
    }
}

/// A field another tool added later (`ALTER TABLE … ADD COLUMN`, a `$set` on MongoDB) is no
/// field of the type: with the model's fields listed it is named and left out of the hashes
/// (the audit does not call idem's rows changed, adoption stores the type's hashes once
/// allowed); without them, the stored hashes show it is not hashed, and the report says the
/// model, not another tool, is the likely cause.
#[tokio::test]
async fn a_field_added_later_is_named_and_never_hashed() {
    for db in fresh_backends("audit_added_field").await {
        db.ensure::<Note>().await;
        // One at a time: a server may store a batch's fields in another order, which a model
        // without its list of fields cannot tell.
        for n in 0..4 {
            db.upsert(&note(n)).await.unwrap();
        }
        db.run_raw(
            "ALTER TABLE notes ADD COLUMN extra TEXT; UPDATE notes SET extra = 'x'",
            doc! {
                "update": "notes",
                "updates": [{ "q": {}, "u": { "$set": { "extra": "x" } }, "multi": true }],
            },
        )
        .await;
        let listed = ["slug", "title"];
        let audited = audit_notes(&db, &listed).await;
        assert!(audited.hash_mismatch.is_empty(), "{db}: {audited}");
        assert_eq!(
            audited.unknown_fields,
            [idem_core::audit::UnknownField::new(
                "extra",
                idem_core::audit::UnknownReason::NotListed
            )],
            "{db}: {audited}"
        );
        // Without the list, the hashes follow the stored order: a table's columns keep the
        // type's, which a MongoDB server's replacement of a document may not.
        if db.is_sql() {
            let unlisted = audit_notes(&db, &[]).await;
            assert_eq!(unlisted.hash_mismatch.count, 4, "{db}: {unlisted}");
            assert_eq!(
                unlisted.unknown_fields,
                [idem_core::audit::UnknownField::new(
                    "extra",
                    idem_core::audit::UnknownReason::NotInStoredHashes
                )],
                "{db}: {unlisted}"
            );
            let summary = unlisted.to_string();
            assert!(
                summary.contains("likely the model, not the data")
                    && !summary.contains("another tool"),
                "{db}: {summary}"
            );
        }

        // A row another tool wrote, with the added field: adoption would hash it.
        db.write_json_as_another_tool::<Note>(
            "legacy-9",
            serde_json::json!({ "slug": "n09", "title": "Note 9" })
                .as_object()
                .unwrap()
                .clone(),
        )
        .await;
        db.run_raw(
            "UPDATE notes SET extra = 'y' WHERE slug = 'n09'",
            doc! {
                "update": "notes",
                "updates": [{ "q": { "slug": "n09" }, "u": { "$set": { "extra": "y" } } }],
            },
        )
        .await;
        let orders: &[&[&str]] = if db.is_sql() {
            &[&listed, &[]]
        } else {
            &[&listed]
        };
        for field_order in orders {
            let refused = adopt_notes(&db, field_order, false).await.unwrap_err();
            assert!(refused.to_string().contains("`extra`"), "{db}: {refused}");
        }
        let adopted = adopt_notes(&db, &listed, true).await.unwrap();
        assert_eq!(adopted.moved.count, 1, "{db}: {adopted}");
        assert_eq!(
            db.upsert(&note(9)).await.unwrap(),
            idem_core::Outcome::Unchanged,
            "{db}: the adopted row's hash is the type's"
        );
    }
}

/// The statements that make `table`'s `_id` nullable on PostgreSQL, as a migration that added
/// it leaves it: no primary key, a unique constraint on `_id` (and, on a partitioned table, the
/// partition columns, `key`).
fn postgres_id_made_nullable(db: &Db, table: &str, key: &str) -> String {
    let unique = match db.is_partitioned() {
        true => format!(r#""_id", {key}"#),
        false => r#""_id""#.to_owned(),
    };
    format!(
        r#"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey;
           ALTER TABLE {table} ALTER COLUMN "_id" DROP NOT NULL;
           ALTER TABLE {table} ADD CONSTRAINT {table}_id UNIQUE ({unique});"#
    )
}

/// A reading of a table another tool made, whose natural key's columns may hold NULL.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "null_key_readings")]
struct NullKeyReading {
    #[idem(key)]
    station: i64,
    #[idem(key)]
    indoor: bool,
    #[idem(key)]
    name: String,
    value: f64,
}

/// The statements that make `NullKeyReading`'s table on `db` with nullable key columns and an
/// `_id` that may be NULL, then run `insert` (PostgreSQL's, SQLite's or MariaDB's own); `None`
/// on MongoDB.
async fn nullable_key_table(db: &Db, insert: impl Fn(&Db) -> String) -> Option<String> {
    let table = NullKeyReading::MODEL.collection();
    let without_constraint = |sql: String| sql.trim_end().trim_end_matches(';').to_owned();
    Some(match db {
        Db::Mongo { .. } => return None,
        Db::Postgres { .. } => {
            db.ensure::<NullKeyReading>().await;
            format!(
                "{} ALTER TABLE {table} ALTER COLUMN station DROP NOT NULL, \
                 ALTER COLUMN indoor DROP NOT NULL, ALTER COLUMN name DROP NOT NULL; {}",
                postgres_id_made_nullable(db, table, "station, indoor, name"),
                insert(db)
            )
        }
        Db::Sqlite { .. } => format!(
            "{};\n{}",
            without_constraint(
                idem_core::sqlite::Store::create_table_sql::<NullKeyReading>()
                    .replace(" PRIMARY KEY NOT NULL", " UNIQUE")
                    .replace(" NOT NULL", "")
            ),
            insert(db)
        ),
        Db::Mysql { .. } => format!(
            "{};\n{}",
            without_constraint(
                idem_core::mysql::Store::create_table_sql::<NullKeyReading>()
                    .replace("PRIMARY KEY (", "UNIQUE KEY (")
                    .replace(" NOT NULL", "")
            ),
            insert(db)
        ),
    })
}

/// Rows without an `_id` whose natural key has a NULL part (no unique constraint keeps such a
/// key to one row, so no move can be found again by it) are more than a page of the adoption,
/// and sort before the rows with a whole key on SQLite and MariaDB, after them on PostgreSQL
/// (where the stores placing a row by its natural key, not its `ctid`, read it so under the
/// write marker): each is reported once, as not moved, and every row with a whole key moves.
#[tokio::test]
async fn rows_without_an_id_whose_key_has_a_null_part_are_reported_once_and_the_rest_move() {
    const NULL_STATION: i64 = 520;
    const NULL_NAME: i64 = 10;
    const WHOLE: i64 = 100;
    const ROWS: i64 = NULL_STATION + NULL_NAME + WHOLE;
    for db in fresh_backends("null_key_pages").await {
        let table = NullKeyReading::MODEL.collection();
        // The rows: `station` NULL for the first ones, `name` NULL for the next; the others
        // share stations four by four, told apart by the flag and the name, so that the pages'
        // order goes through each column of the key.
        let insert = |series: &str| {
            let (quarter, named) = match db.is_mysql() {
                true => ("g DIV 4", "CONCAT('n', g % 3)"),
                false => ("g / 4", "'n' || (g % 3)"),
            };
            format!(
                "INSERT INTO {table} (station, indoor, name, value) \
                 SELECT CASE WHEN g <= {NULL_STATION} THEN NULL ELSE {quarter} END, g % 2 = 0, \
                 CASE WHEN g > {NULL_STATION} AND g <= {} THEN NULL ELSE {named} END, g * 0.5 \
                 FROM {series}",
                NULL_STATION + NULL_NAME
            )
        };
        let counted = format!("(SELECT 1 AS g UNION ALL SELECT g + 1 FROM s WHERE g < {ROWS})");
        let sql = nullable_key_table(&db, |db| match db {
            Db::Sqlite { .. } => format!("WITH RECURSIVE s(g) AS {counted} {}", insert("s")),
            Db::Mysql { .. } => insert(&format!("(SELECT seq AS g FROM seq_1_to_{ROWS}) AS s")),
            _ => insert(&format!("generate_series(1, {ROWS}) g")),
        })
        .await;
        let Some(sql) = sql else {
            continue;
        };
        db.run_raw(&sql, doc! {}).await;
        let adopted = db.adopt_model::<NullKeyReading>().await;
        let summary = adopted.to_string();
        assert_eq!(adopted.moved.count, WHOLE as u64, "{db}: {summary}");
        assert_eq!(
            adopted.failed.count,
            (NULL_STATION + NULL_NAME) as u64,
            "{db}: each row whose key has a NULL part, once: {summary}"
        );
        assert!(!adopted.stopped, "{db}: {summary}");
        // Each row with a whole key under the id its key derives, the others without one.
        let stored = db.stored::<NullKeyReading>().await;
        assert_eq!(stored.len(), ROWS as usize, "{db}");
        let mut ids = Vec::new();
        for mut row in stored {
            let Some(id) = row.remove("_id") else {
                continue;
            };
            let reading: NullKeyReading = serde_json::from_value(row.clone().into())
                .unwrap_or_else(|error| panic!("{db}: {row:?}: {error}"));
            assert_eq!(id, reading.id().unwrap().to_string(), "{db}: {row:?}");
            ids.push(id);
        }
        assert_eq!(ids.len(), WHOLE as usize, "{db}");
        let again = db.adopt_model::<NullKeyReading>().await;
        assert_eq!(again.moved.count, 0, "{db}: {again}");
        assert_eq!(
            again.failed.count,
            (NULL_STATION + NULL_NAME) as u64,
            "{db}: {again}"
        );
    }
}

/// A run whose limit is reached by its last move still reports each row whose key has a NULL
/// part (reading them writes nothing), and is not stopped: nothing is left for a next run to
/// move. A limit reached before the last move stops the run, which the next one finishes.
#[tokio::test]
async fn a_limit_reached_by_the_last_move_still_reports_the_rows_no_move_can_find() {
    for db in fresh_backends("null_key_limit").await {
        let table = NullKeyReading::MODEL.collection();
        let rows = "(1, TRUE, 'a', 0.5), (2, TRUE, 'b', 1.5), (3, FALSE, 'c', 2.5), \
                    (NULL, TRUE, 'd', 3.5), (4, NULL, 'e', 4.5)";
        let insert = format!("INSERT INTO {table} (station, indoor, name, value) VALUES {rows}");
        let Some(sql) = nullable_key_table(&db, |_| insert.clone()).await else {
            continue;
        };
        db.run_raw(&sql, doc! {}).await;
        let first = db.adopt_model_at_most::<NullKeyReading>(Some(2)).await;
        assert_eq!(
            (first.moved.count, first.stopped),
            (2, true),
            "{db}: {first}"
        );
        let last = db.adopt_model_at_most::<NullKeyReading>(Some(1)).await;
        assert_eq!(last.moved.count, 1, "{db}: {last}");
        assert_eq!(
            last.failed.count, 2,
            "{db}: the two rows no move finds: {last}"
        );
        assert!(!last.stopped, "{db}: nothing is left to move: {last}");
    }
}

/// A translated note: one legacy id may hold several languages on a table partitioned by its
/// natural key, whose unique constraint on `_id` holds the key's columns too.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "translated_notes")]
struct TranslatedNote {
    #[idem(key)]
    slug: String,
    #[idem(key)]
    lang: String,
    title: String,
}

/// On a table partitioned by its natural key, rows another tool wrote under one legacy id with
/// different keys (an article's translations, written by one statement, so with one `xmin`):
/// each moves to the id its own key derives, with its own hash, once, even where a page of the
/// adoption ends between them; the next run moves nothing.
#[tokio::test]
async fn rows_sharing_a_legacy_id_on_a_partitioned_table_each_move_to_their_own() {
    for db in fresh_backends("twin_ids").await {
        if !db.is_partitioned() {
            continue;
        }
        db.ensure::<TranslatedNote>().await;
        let table = TranslatedNote::MODEL.collection();
        // 499 rows before the twins in `_id` order, so that the first page (500 rows) ends
        // between them.
        let mut rows: Vec<String> = (0..499)
            .map(|n| format!("('a{n:03}', 's{n:03}', 'en', 'note {n}')"))
            .collect();
        rows.push("('legacy-7', 'twin', 'en', 'in English')".to_owned());
        rows.push("('legacy-7', 'twin', 'fr', 'en français')".to_owned());
        db.run_raw(
            &format!(
                "INSERT INTO {table} (\"_id\", slug, lang, title) VALUES {}",
                rows.join(", ")
            ),
            doc! {},
        )
        .await;
        let report = db.adopt::<TranslatedNote>().await;
        assert_eq!(report.moved.count, 501, "{db}: {report}");
        assert!(report.failed.is_empty(), "{db}: {report}");
        for (lang, title) in [("en", "in English"), ("fr", "en français")] {
            let note = TranslatedNote {
                slug: "twin".into(),
                lang: lang.into(),
                title: title.into(),
            };
            assert_eq!(
                db.upsert(&note).await.unwrap(),
                Outcome::Unchanged,
                "{db}: {lang}"
            );
        }
        let again = db.adopt::<TranslatedNote>().await;
        assert_eq!(again.moved.count, 0, "{db}: {again}");
    }
}

/// A row of a table other tables refer to by its `_id`.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "fk_parents")]
struct FkParent {
    #[idem(key)]
    slug: String,
    title: String,
}

/// A row whose move the database refuses (another table's foreign key restricts changes of its
/// `_id`) is reported with the database's reason, and the other rows move: the run does not end
/// in an error, nor does every later run stop at that row.
#[tokio::test]
async fn a_move_the_database_refuses_is_reported_and_the_others_move() {
    for db in fresh_backends("fk_refused").await {
        if matches!(db, Db::Mongo { .. }) || db.is_partitioned() {
            continue;
        }
        db.ensure::<FkParent>().await;
        let child = match &db {
            Db::Mysql { .. } => {
                "CREATE TABLE fk_children (parent VARCHAR(26) CHARACTER SET utf8mb4 COLLATE \
                 utf8mb4_nopad_bin, FOREIGN KEY (parent) REFERENCES fk_parents (`_id`))"
            }
            _ => "CREATE TABLE fk_children (parent TEXT REFERENCES fk_parents (\"_id\"))",
        };
        db.run_raw(
            &format!(
                "{child}; INSERT INTO fk_parents (\"_id\", slug, title) VALUES \
                 ('legacy-1', 'one', 'One'), ('legacy-2', 'two', 'Two'); \
                 INSERT INTO fk_children (parent) VALUES ('legacy-1')"
            )
            .replace('"', if db.is_mysql() { "`" } else { "\"" }),
            doc! {},
        )
        .await;
        for run in 0..2 {
            let report = db.adopt::<FkParent>().await;
            assert_eq!(report.moved.count, 1 - run, "{db}: {report}");
            assert_eq!(report.failed.count, 1, "{db}: {report}");
            let why = report.failed.samples[0].detail.clone().unwrap_or_default();
            assert!(why.contains("refused"), "{db}: {why}");
        }
        let two = FkParent {
            slug: "two".into(),
            title: "Two".into(),
        };
        assert_eq!(db.upsert(&two).await.unwrap(), Outcome::Unchanged, "{db}");
    }
}

/// A note of a table another tool made, whose key column compares text loosely.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "loose_notes")]
struct LooseNote {
    #[idem(key)]
    slug: String,
    title: String,
}

/// The audit of a table whose key column compares text loosely (SQLite's `NOCASE`, a MariaDB
/// `_ci` collation, PostgreSQL's `citext`), so that "Foo" and "foo" sort as one: two rows
/// holding "Foo" are a duplicate, found even when a row holding "foo" sorts between them, and
/// "foo" is not one of it (idem compares keys byte for byte).
#[tokio::test]
async fn duplicates_are_found_under_a_key_column_that_compares_loosely() {
    for db in fresh_backends("loose_duplicates").await {
        let table = LooseNote::MODEL.collection();
        let loose = match &db {
            Db::Mongo { .. } => continue,
            Db::Sqlite { .. } => "TEXT COLLATE NOCASE",
            Db::Mysql { .. } => "VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
            Db::Postgres { .. } => {
                db.run_raw(
                    "CREATE EXTENSION IF NOT EXISTS citext SCHEMA public",
                    doc! {},
                )
                .await;
                "public.citext"
            }
        };
        let id = db.quote("_id");
        db.run_raw(
            &format!(
                "CREATE TABLE {table} ({id} VARCHAR(40), slug {loose}, title TEXT); \
                 INSERT INTO {table} ({id}, slug, title) VALUES \
                 ('a-1', 'Foo', 'one'), ('a-2', 'foo', 'two'), ('a-3', 'Foo', 'three')"
            ),
            doc! {},
        )
        .await;
        let audited = db.audit::<LooseNote>().await;
        assert_eq!(audited.scanned, 3, "{db}: {audited}");
        assert_eq!(
            (audited.duplicates.keys, audited.duplicates.documents),
            (1, 2),
            "{db}: {audited}"
        );
        let sample = &audited.duplicates.samples[0];
        assert_eq!(sample.sample_ids, ["a-1", "a-3"], "{db}: {audited}");
    }
}

/// A code: a newtype key, stored as the JSON it serializes to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Code(String);

impl idem_core::IdKey for Code {
    fn key_part(&self) -> idem_core::KeyPart<'_> {
        self.0.key_part()
    }
}

impl idem_core::StoredKey for Code {}

/// A note keyed by a [`Code`].
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "coded_notes")]
struct CodedNote {
    #[idem(key)]
    code: Code,
    title: String,
}

/// Rows without an `_id` keyed by a newtype (a column of JSON: `jsonb`, MariaDB's `JSON`,
/// SQLite's text of JSON), over more than a page: each moves once to the id its key derives,
/// found again by the key as stored (its JSON text, quotes and all).
#[tokio::test]
async fn rows_without_an_id_keyed_by_a_newtype_move() {
    const ROWS: usize = 520;
    for db in fresh_backends("newtype_key_pages").await {
        let table = CodedNote::MODEL.collection();
        let values: Vec<String> = (0..ROWS)
            .map(|n| format!("('\"c{n:03}\"', 'note {n}')"))
            .collect();
        let insert = format!(
            "INSERT INTO {table} (code, title) VALUES {}",
            values.join(", ")
        );
        let sql = match &db {
            Db::Mongo { .. } => continue,
            Db::Postgres { .. } => {
                db.ensure::<CodedNote>().await;
                format!("{} {insert}", postgres_id_made_nullable(&db, table, "code"))
            }
            Db::Sqlite { .. } => format!(
                "{}; {insert}",
                idem_core::sqlite::Store::create_table_sql::<CodedNote>()
                    .replace(" PRIMARY KEY NOT NULL", " UNIQUE")
                    .trim_end()
                    .trim_end_matches(';'),
            ),
            Db::Mysql { .. } => format!(
                "{}; ALTER TABLE {table} DROP PRIMARY KEY, MODIFY `_id` VARCHAR(26) \
                 CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NULL, ADD UNIQUE (`_id`); \
                 {insert}",
                idem_core::mysql::Store::create_table_sql::<CodedNote>()
                    .trim_end()
                    .trim_end_matches(';'),
            ),
        };
        db.run_raw(&sql, doc! {}).await;
        let adopted = db.adopt::<CodedNote>().await;
        assert_eq!(adopted.moved.count, ROWS as u64, "{db}: {adopted}");
        assert!(adopted.is_complete(), "{db}: {adopted}");
        let again = db.adopt::<CodedNote>().await;
        assert_eq!(again.moved.count + again.failed.count, 0, "{db}: {again}");
        let note = CodedNote {
            code: Code("c007".into()),
            title: "note 7".into(),
        };
        assert_eq!(
            db.upsert(&note).await.unwrap(),
            idem_core::Outcome::Unchanged,
            "{db}"
        );
    }
}

/// A type keyed by a newtype is written on every store, its key column made and checked by
/// idem (on MariaDB a `JSON` column, whose `utf8mb4_bin` the table check took for a key
/// compared loosely, and refused the table `ensure_table` had just made).
#[tokio::test]
async fn a_type_keyed_by_a_newtype_is_written_on_every_store() {
    for db in fresh_backends("newtype_key_writes").await {
        db.ensure::<CodedNote>().await;
        let note = CodedNote {
            code: Code("x-1".into()),
            title: "first".into(),
        };
        let edited = CodedNote {
            title: "second".into(),
            ..note.clone()
        };
        let outcomes = [
            db.upsert(&note).await,
            db.upsert(&note).await,
            db.upsert(&edited).await,
        ];
        let outcomes: Vec<_> = outcomes.into_iter().map(Result::unwrap).collect();
        use idem_core::Outcome::{Inserted, Unchanged, Updated};
        assert_eq!(outcomes, [Inserted, Unchanged, Updated], "{db}");
        let found = db.find::<CodedNote>(note.natural_key()).await.unwrap();
        assert_eq!(found.map(|note| note.title), Some("second".into()), "{db}");
        // A key no store keeps (U+0000 is refused on the SQL stores): found nowhere.
        let nowhere = CodedNote {
            code: Code("a\0b".into()),
            ..note.clone()
        };
        let found = db.find::<CodedNote>(nowhere.natural_key()).await;
        assert!(matches!(found, Ok(None)), "{db}: {found:?}");
    }
}
