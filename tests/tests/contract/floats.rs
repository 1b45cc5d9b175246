//! Floats in the content hash and in storage: every NaN hashes alike and -0.0 as 0.0, so a
//! replay of either writes nothing; a frozen NaN is not a change; NaN and the infinities in a
//! float field are stored as they are, never lost to null. (Inside a structured value, where
//! PostgreSQL's `jsonb` cannot hold them: `postgres_only.rs`.) MariaDB's `DOUBLE`, where its
//! store keeps floats, holds none of them: there each is refused for its document, nothing
//! written ([`assert_non_finite_refused_on_mariadb`]), and the cases that store them stop at
//! that.

use idem_core::{Error, ErrorKind, Idempotent, Outcome};
use idem_tests::backends::{fresh_backends, Db};
use idem_tests::stored_documents;
use serde::{Deserialize, Serialize};

use crate::support::{
    assert_db_wrote_nothing, assert_non_finite_refused_on_mariadb, forget_commands, scored_post,
    shown_non_finite, ScoredPost,
};

/// A measurement whose frozen reading may be NaN (a sensor that had no value).
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "readings")]
struct Reading {
    #[idem(key)]
    sensor: String,
    #[idem(frozen)]
    calibration: f64,
    note: String,
}

/// A gauge whose readings may be NaN or infinite, in a float field and in an optional one.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "gauges")]
struct Gauge {
    #[idem(key)]
    name: String,
    value: f64,
    peak: Option<f64>,
}

/// The float stored in `field` of the document or row of `collection` whose `key_field` is
/// `key`, exactly as the server holds it: a BSON double, a `double precision` column, SQLite's
/// `REAL` (or the text of NaN or an infinity), MariaDB's text of the float (or a `DOUBLE`, read
/// in the binary protocol: every bit).
async fn stored_float(db: &Db, collection: &str, key_field: &str, key: &str, field: &str) -> f64 {
    match db {
        Db::Mongo { store, .. } => stored_documents(store.database(), collection)
            .await
            .into_iter()
            .find(|document| document.get_str(key_field) == Ok(key))
            .unwrap_or_else(|| panic!("{db}: no {collection} document with {key_field} {key}"))
            .get_f64(field)
            .unwrap_or_else(|error| panic!("{db}: {collection}.{field} of {key}: {error}")),
        Db::Postgres { client, .. } => {
            let sql =
                format!("SELECT \"{field}\" FROM \"{collection}\" WHERE \"{key_field}\" = $1");
            client
                .query_one(&sql, &[&key])
                .await
                .unwrap_or_else(|error| panic!("{db}: {collection}.{field} of {key}: {error}"))
                .get(0)
        }
        Db::Sqlite { connection, .. } => {
            // A REAL, or the text of NaN or an infinity, which idem stores as such.
            let sql = format!(
                "SELECT typeof(\"{field}\"), \"{field}\", CAST(\"{field}\" AS TEXT) \
                 FROM \"{collection}\" WHERE \"{key_field}\" = ?1"
            );
            use idem_core::sqlx::Row;
            let row = idem_core::sqlx::query(idem_core::sqlx::AssertSqlSafe(sql))
                .bind(key)
                .fetch_one(&mut *connection.lock().await)
                .await
                .unwrap_or_else(|error| panic!("{db}: {collection}.{field} of {key}: {error}"));
            match row.get::<String, _>(0).as_str() {
                "real" => row.get(1),
                _ => row.get::<String, _>(2).parse().unwrap_or_else(|error| {
                    panic!("{db}: {collection}.{field} of {key} is no float: {error}")
                }),
            }
        }
        Db::Mysql { connection, .. } => {
            let sql = format!(
                "SELECT {} FROM {} WHERE {} = ?",
                db.quote(field),
                db.quote(collection),
                db.quote(key_field)
            );
            use idem_core::sqlx::{Row, TypeInfo, ValueRef};
            let row = idem_core::sqlx::query(idem_core::sqlx::AssertSqlSafe(sql))
                .bind(key)
                .fetch_one(&mut *connection.lock().await)
                .await
                .unwrap_or_else(|error| panic!("{db}: {collection}.{field} of {key}: {error}"));
            let column = row.try_get_raw(0).expect("a column");
            match column.type_info().name() {
                "DOUBLE" | "FLOAT" => row.get(0),
                _ => row.get::<String, _>(0).parse().unwrap_or_else(|error| {
                    panic!("{db}: {collection}.{field} of {key} is no float: {error}")
                }),
            }
        }
    }
}

#[tokio::test]
async fn every_nan_payload_hashes_alike_so_a_nan_replay_writes_nothing() {
    let nans = [
        f64::NAN,
        -f64::NAN,
        f64::from_bits(0x7ff8_0000_0000_0001), // another quiet NaN payload
        f64::from_bits(0x7ff0_0000_0000_0001), // a signalling NaN
        f64::from_bits(0xfff0_dead_beef_0000),
    ];
    let with = |score: f64| ScoredPost {
        score,
        ..scored_post("nan")
    };
    let hash = with(nans[0]).content_hash().unwrap();
    for nan in nans {
        assert!(nan.is_nan());
        assert_eq!(
            with(nan).content_hash().unwrap(),
            hash,
            "{:#x}",
            nan.to_bits()
        );
    }
    assert_ne!(with(f64::INFINITY).content_hash().unwrap(), hash);

    for db in fresh_backends("nan").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<ScoredPost>().await;
        if db.is_mysql() {
            for nan in nans {
                assert_non_finite_refused_on_mariadb(&db, &with(nan), "score").await;
            }
            continue;
        }
        assert_eq!(
            db.upsert(&with(nans[0])).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        let before = db.raw::<ScoredPost>().await;
        forget_commands(&db);
        for nan in nans {
            assert_eq!(
                db.upsert(&with(nan)).await.unwrap(),
                Outcome::Unchanged,
                "{db}: {:#x}",
                nan.to_bits()
            );
        }
        let batch: Vec<ScoredPost> = nans.into_iter().map(with).collect();
        let report = db.upsert_many(&batch).await.unwrap();
        assert_eq!(
            report.count(Outcome::Unchanged),
            nans.len(),
            "{db}: {report}"
        );
        assert_db_wrote_nothing(&db);
        assert_eq!(
            db.raw::<ScoredPost>().await,
            before,
            "{db}: nothing written"
        );
        assert!(
            stored_float(&db, "posts", "slug", "nan", "score")
                .await
                .is_nan(),
            "{db}"
        );
    }
}

#[tokio::test]
async fn negative_zero_hashes_as_zero_so_a_zero_turned_negative_writes_nothing() {
    let zero = scored_post("zero");
    let negative = ScoredPost {
        score: -0.0,
        ..zero.clone()
    };
    assert!(negative.score.is_sign_negative());
    assert_eq!(
        zero.content_hash().unwrap(),
        negative.content_hash().unwrap()
    );
    assert_ne!(
        zero.content_hash().unwrap(),
        ScoredPost {
            score: f64::MIN_POSITIVE,
            ..zero.clone()
        }
        .content_hash()
        .unwrap()
    );

    for db in fresh_backends("negative_zero").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        db.ensure::<ScoredPost>().await;
        assert_eq!(db.upsert(&zero).await.unwrap(), Outcome::Inserted, "{db}");
        let before = db.raw::<ScoredPost>().await;
        forget_commands(&db);
        assert_eq!(
            db.upsert(&negative).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        assert_db_wrote_nothing(&db);
        assert_eq!(
            db.raw::<ScoredPost>().await,
            before,
            "{db}: nothing written"
        );
        // The stored value is still +0.0, bit for bit.
        assert_eq!(
            stored_float(&db, "posts", "slug", "zero", "score")
                .await
                .to_bits(),
            0,
            "{db}"
        );
    }
}

#[tokio::test]
async fn a_nan_in_a_frozen_field_is_not_a_change() {
    // Every deviation on every backend is collected, then reported.
    let mut problems = Vec::new();
    for db in fresh_backends("frozen_nan").await {
        db.ensure::<Reading>().await;
        let reading = Reading {
            sensor: "s1".into(),
            calibration: f64::NAN,
            note: "no calibration yet".into(),
        };
        if db.is_mysql() {
            assert_non_finite_refused_on_mariadb(&db, &reading, "calibration").await;
            continue;
        }
        assert_eq!(
            db.upsert(&reading).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        let before = db.raw::<Reading>().await;
        forget_commands(&db);

        // MongoDB's own filter treats NaN as equal to NaN; idem's judgement of a stored document
        // must agree with it, alone and in a batch, on every backend.
        let retry = db.upsert(&reading).await;
        if !matches!(retry, Ok(Outcome::Unchanged)) {
            problems.push(format!(
                "{db}: a plain retry: expected Unchanged, got {retry:?}"
            ));
        }
        let batch = db
            .upsert_many(std::slice::from_ref(&reading))
            .await
            .unwrap();
        if !matches!(batch.outcomes(), [Ok(Outcome::Unchanged)]) {
            problems.push(format!(
                "{db}: a retry in a batch: expected Unchanged, got {:?}",
                batch.outcomes()
            ));
        }
        if let Some(log) = db.command_log() {
            let written = log.take().documents_written;
            if written != 0 {
                problems.push(format!("{db}: the retries wrote {written} documents"));
            }
        }
        if db.raw::<Reading>().await != before {
            problems.push(format!("{db}: the retries changed the stored document"));
        }

        // An edit that keeps the frozen NaN is an edit, not a frozen change.
        let edited = Reading {
            note: "still none".into(),
            ..reading.clone()
        };
        let edit = db.upsert_many(std::slice::from_ref(&edited)).await.unwrap();
        if !matches!(edit.outcomes(), [Ok(Outcome::Updated)]) {
            problems.push(format!(
                "{db}: an edit beside the frozen NaN in a batch: expected Updated, got {:?}",
                edit.outcomes()
            ));
        }
        let edited = Reading {
            note: "none at all".into(),
            ..reading.clone()
        };
        let edit = db.upsert(&edited).await;
        if !matches!(edit, Ok(Outcome::Updated)) {
            problems.push(format!(
                "{db}: an edit beside the frozen NaN: expected Updated, got {edit:?}"
            ));
        }
        let stored = stored_float(&db, "readings", "sensor", "s1", "calibration").await;
        if !stored.is_nan() {
            problems.push(format!("{db}: the frozen NaN is stored as {stored}"));
        }

        // A frozen NaN that became a number is a real change, and refused, alone and in a batch.
        let before = db.raw::<Reading>().await;
        forget_commands(&db);
        let calibrated = Reading {
            calibration: 1.5,
            ..edited.clone()
        };
        match db.upsert(&calibrated).await.map_err(Error::into_kind) {
            Err(ErrorKind::FrozenFieldChanged {
                field: "calibration",
                stored,
                incoming,
                ..
            }) if stored.contains("NaN") && incoming == "1.5" => {}
            refused => problems.push(format!(
                "{db}: NaN changed to 1.5: expected FrozenFieldChanged from NaN to 1.5, got \
                 {refused:?}"
            )),
        }
        let refused = db
            .upsert_many(std::slice::from_ref(&calibrated))
            .await
            .unwrap();
        if !matches!(
            refused.outcomes(),
            [outcome] if matches!(
                outcome.as_ref().map_err(Error::kind),
                Err(ErrorKind::FrozenFieldChanged {
                    field: "calibration",
                    ..
                })
            )
        ) {
            problems.push(format!(
                "{db}: NaN changed to 1.5 in a batch: expected FrozenFieldChanged, got {:?}",
                refused.outcomes()
            ));
        }
        if let Some(log) = db.command_log() {
            let written = log.take().documents_written;
            if written != 0 {
                problems.push(format!("{db}: the refusals wrote {written} documents"));
            }
        }
        if db.raw::<Reading>().await != before {
            problems.push(format!("{db}: the refusals changed the stored document"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[tokio::test]
async fn nan_and_the_infinities_in_a_float_field_are_stored_and_a_replay_writes_nothing() {
    let values = [
        ("nan", f64::NAN, "NaN"),
        ("inf", f64::INFINITY, "Infinity"),
        ("-inf", f64::NEG_INFINITY, "-Infinity"),
    ];
    let gauge = |name: &str, value: f64| Gauge {
        name: name.into(),
        value,
        peak: Some(value),
    };
    for db in fresh_backends("non_finite").await {
        db.ensure::<Gauge>().await;
        if db.is_mysql() {
            for (name, value, _) in values {
                assert_non_finite_refused_on_mariadb(&db, &gauge(name, value), "value").await;
                // In the optional field alone as well.
                let peak = Gauge {
                    peak: Some(value),
                    ..gauge(name, 1.0)
                };
                assert_non_finite_refused_on_mariadb(&db, &peak, "peak").await;
            }
            continue;
        }
        for (name, value, _) in values {
            assert_eq!(
                db.upsert(&gauge(name, value)).await.unwrap(),
                Outcome::Inserted,
                "{db}: {name}"
            );
        }
        let stored = db.stored::<Gauge>().await;
        assert_eq!(stored.len(), values.len(), "{db}: {stored:?}");
        for (name, value, text) in values {
            let document = stored
                .iter()
                .find(|document| document["name"] == name)
                .unwrap_or_else(|| panic!("{db}: no gauge {name}: {stored:?}"));
            // Neither field is lost to null (which `stored` would leave out).
            assert_eq!(
                document["value"],
                shown_non_finite(&db, text),
                "{db}: {name}"
            );
            assert_eq!(
                document["peak"],
                shown_non_finite(&db, text),
                "{db}: {name}"
            );
            for field in ["value", "peak"] {
                let read = stored_float(&db, "gauges", "name", name, field).await;
                assert!(
                    read.to_bits() == value.to_bits() || (read.is_nan() && value.is_nan()),
                    "{db}: {name}.{field} stored as {read}"
                );
            }
        }
        let before = db.raw::<Gauge>().await;
        if db.is_postgres() {
            for text in ["NaN", "Infinity", "-Infinity"] {
                assert!(
                    before
                        .iter()
                        .any(|row| row.contains(&format!(",{text},{text},"))),
                    "{db}: no row holds {text}: {before:?}"
                );
            }
        }

        // A replay, alone and in a batch, writes nothing.
        forget_commands(&db);
        for (name, value, _) in values {
            assert_eq!(
                db.upsert(&gauge(name, value)).await.unwrap(),
                Outcome::Unchanged,
                "{db}: {name}"
            );
        }
        let batch: Vec<Gauge> = values
            .iter()
            .map(|&(name, value, _)| gauge(name, value))
            .collect();
        let report = db.upsert_many(&batch).await.unwrap();
        assert_eq!(
            report.count(Outcome::Unchanged),
            values.len(),
            "{db}: {report}"
        );
        assert_db_wrote_nothing(&db);
        assert_eq!(db.raw::<Gauge>().await, before, "{db}: nothing written");

        // NaN becomes a number and a number NaN again: each an update, none lost.
        assert_eq!(
            db.upsert(&gauge("nan", 2.0)).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        assert_eq!(
            stored_float(&db, "gauges", "name", "nan", "value").await,
            2.0,
            "{db}"
        );
        assert_eq!(
            db.upsert(&gauge("nan", f64::NAN)).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        assert!(
            stored_float(&db, "gauges", "name", "nan", "value")
                .await
                .is_nan(),
            "{db}"
        );
    }
}

/// Floats that need all 17 significant digits, the extremes and an `f32`'s widened value: what
/// `get` reads back is what was written, bit for bit, a replay of them writes nothing, and the
/// audit finds a frozen one as digested (SQLite prints a `REAL` as text with 15 digits).
#[tokio::test]
async fn every_float_reads_back_as_it_was_written() {
    let floats = [
        1.0 / 3.0,
        0.1 + 0.2,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        -123_456_789.012_345_68,
        f64::from(0.1_f32),
        1e16,
    ];
    for db in fresh_backends("float_fidelity").await {
        db.ensure::<Reading>().await;
        db.ensure::<Gauge>().await;
        for (at, &float) in floats.iter().enumerate() {
            let gauge = Gauge {
                name: format!("g{at}"),
                value: float,
                peak: Some(-float),
            };
            let reading = Reading {
                sensor: format!("s{at}"),
                calibration: float,
                note: "n".into(),
            };
            assert_eq!(db.upsert(&gauge).await.unwrap(), Outcome::Inserted, "{db}");
            assert_eq!(
                db.upsert(&reading).await.unwrap(),
                Outcome::Inserted,
                "{db}"
            );
            let read: Gauge = db
                .get(gauge.id().unwrap())
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{db}: {gauge:?} is stored"));
            assert_eq!(
                (read.value.to_bits(), read.peak.map(f64::to_bits)),
                (float.to_bits(), Some((-float).to_bits())),
                "{db}: {float:e} read back as {:e}",
                read.value
            );
            assert_eq!(db.upsert(&gauge).await.unwrap(), Outcome::Unchanged, "{db}");
            assert_eq!(
                db.upsert(&reading).await.unwrap(),
                Outcome::Unchanged,
                "{db}"
            );
        }
        for report in [
            db.audit::<Reading>().await,
            db.audit_model::<Reading>().await,
        ] {
            assert!(report.digest_mismatch.is_empty(), "{db}: {report}");
        }
        let typed = db.audit::<Gauge>().await;
        assert!(typed.is_clean(), "{db}: {typed}");
    }
}

/// A frozen float another tool stored (no digests, so compared by value) is compared to the
/// last bit on every backend: one that differs only past SQLite's 15 significant digits of a
/// `REAL`'s text is a change, refused naming the field; an edit keeping it is written (pinned to
/// the float as read), and the row holds the float it held.
#[tokio::test]
async fn a_frozen_float_another_tool_stored_is_compared_to_the_last_bit() {
    let pairs = [
        (0.1 + 0.2, 0.3),
        (1.0 / 3.0, 0.333333333333333),
        (1e16 + 2.0, 1e16),
        (123456789.12345678, 123456789.12345679),
        (f64::MAX, f64::from_bits(f64::MAX.to_bits() - 1)),
    ];
    for db in fresh_backends("foreign_frozen_floats").await {
        db.ensure::<Reading>().await;
        for (n, (stored, incoming)) in pairs.into_iter().enumerate() {
            assert_ne!(stored, incoming, "a pair of different floats");
            let reading = Reading {
                sensor: format!("s{n}"),
                calibration: stored,
                note: "as another tool wrote it".into(),
            };
            db.write_as_another_tool(&reading).await;
            let moved = Reading {
                calibration: incoming,
                note: "edited".into(),
                ..reading.clone()
            };
            let refused = db.upsert(&moved).await.unwrap_err();
            assert!(
                matches!(refused.kind(), ErrorKind::FrozenFieldChanged { field, .. } if *field == "calibration"),
                "{db}: {stored:?} then {incoming:?}: {refused}"
            );
            let kept = Reading {
                note: "edited".into(),
                ..reading.clone()
            };
            assert_eq!(
                db.upsert(&kept).await.unwrap(),
                Outcome::Updated,
                "{db}: {stored:?}"
            );
            assert_eq!(
                stored_float(&db, "readings", "sensor", &reading.sensor, "calibration")
                    .await
                    .to_bits(),
                stored.to_bits(),
                "{db}: {stored:?}"
            );
        }
    }
}
