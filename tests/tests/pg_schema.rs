//! What the PostgreSQL store reads of the table it writes, on every PostgreSQL server under
//! test: the errors a caller may retry, and the values a read must give back as they were
//! written.

use idem_core::postgres::{Change, Store};
use idem_core::{Applied, Error, Idempotent, OpId, Outcome};
use idem_tests::backends::{fresh_schema, postgres_client, postgres_servers};
use serde::{Deserialize, Serialize};

/// A document type of one key, for the tests of the table it is stored in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "keyed")]
struct Keyed {
    #[idem(key)]
    key: String,
    title: String,
}

fn keyed(key: &str) -> Keyed {
    Keyed {
        key: key.into(),
        title: "T".into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Errors and non-finite effects (issue 16, case 14)

/// A write that gave up waiting for a row another transaction holds (`lock_timeout`, or
/// `statement_timeout` cancelling it) may succeed if made again.
#[tokio::test]
async fn a_write_that_timed_out_waiting_for_a_lock_is_retryable() {
    for (label, uri) in postgres_servers() {
        let (schema, client) = fresh_schema(&uri, "ps", "timeouts").await;
        let store = Store::new();
        store.ensure_table::<Keyed, _>(&client).await.unwrap();
        store.upsert(&client, &keyed("k")).await.unwrap();
        let mut holder = postgres_client(&uri, &schema).await;
        let holding = holder.transaction().await.unwrap();
        holding
            .execute("SELECT 1 FROM keyed FOR UPDATE", &[])
            .await
            .unwrap();
        let edited = Keyed {
            title: "Edited".into(),
            ..keyed("k")
        };
        for (setting, code) in [("lock_timeout", "55P03"), ("statement_timeout", "57014")] {
            client
                .batch_execute(&format!("SET {setting} = '100ms'"))
                .await
                .unwrap();
            let error = store.upsert(&client, &edited).await.unwrap_err();
            assert_eq!(
                error.as_backend().and_then(|backend| backend.code()),
                Some(code),
                "{label}: {error:?}"
            );
            assert!(error.is_retryable(), "{label}, {setting}: {error:?}");
            assert!(!error.is_refusal(), "{label}, {setting}");
            client
                .batch_execute(&format!("RESET {setting}"))
                .await
                .unwrap();
        }
        holding.rollback().await.unwrap();
        assert_eq!(
            store.upsert(&client, &edited).await.unwrap(),
            Outcome::Updated,
            "{label}"
        );
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "readings")]
struct Reading {
    #[idem(key)]
    sensor: String,
    #[idem(effect)]
    #[serde(default)]
    score: f64,
    #[idem(effect)]
    #[serde(default)]
    count: i64,
}

/// `Change::set` of NaN or an infinity into a `double precision` effect column stores it as an
/// upsert stores such a field, and it reads back; into a `bigint` one it is refused naming it.
#[tokio::test]
async fn apply_once_sets_a_float_effect_to_nan_or_an_infinity() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "ps", "non_finite").await;
        let store = Store::new();
        let reading = Reading {
            sensor: "s".into(),
            score: 1.5,
            count: 0,
        };
        store.ensure_table::<Reading, _>(&client).await.unwrap();
        store.upsert(&client, &reading).await.unwrap();
        let id = reading.id().unwrap();
        for (number, value) in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY]
            .into_iter()
            .enumerate()
        {
            let applied = store
                .apply_once::<Reading, _>(
                    &client,
                    id,
                    &OpId::new(format!("set {number}")),
                    &[Change::set("score", &value)],
                )
                .await
                .unwrap();
            assert_eq!(applied, Applied::Applied, "{label}, {value}");
            let read = store.get::<Reading, _>(&client, id).await.unwrap().unwrap();
            assert!(
                read.score.to_bits() == value.to_bits() || (value.is_nan() && read.score.is_nan()),
                "{label}: {} for {value}",
                read.score
            );
        }
        let error = store
            .apply_once::<Reading, _>(
                &client,
                id,
                &OpId::new("count"),
                &[Change::set("count", &f64::NAN)],
            )
            .await
            .unwrap_err();
        assert!(
            matches!(
                &error,
                Error::Serialize { message, .. }
                    if message.contains("\"count\"") && message.contains("NaN")
            ),
            "{label}: {error:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Typed reads of nulls (issue 16, case 8)

/// A limit whose default is a value, so that a null written is not its default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Limit(Option<i64>);

impl Default for Limit {
    fn default() -> Self {
        Limit(Some(10))
    }
}

/// `None`: untouched, left out; `Some(None)`: cleared, a null; `Some(Some(_))`: set. As
/// `serde_with::rust::double_option` reads and writes it.
mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(
        value: &Option<Option<T>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            None => serializer.serialize_unit(),
            Some(None) => serializer.serialize_none(),
            Some(Some(value)) => serializer.serialize_some(value),
        }
    }

    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(deserializer).map(Some)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "settings")]
struct Settings {
    #[idem(key)]
    name: String,
    #[serde(default)]
    limit: Limit,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "double_option"
    )]
    tags: Option<Option<Vec<String>>>,
}

/// What serde wrote reads back, null included, by id, by key and in an audit: a null is not
/// taken for a field serde left out, so the default does not replace it, and the copy read
/// written back is unchanged.
#[tokio::test]
async fn a_null_serde_wrote_reads_back_as_null_not_as_the_default() {
    for (label, uri) in postgres_servers() {
        let (_, client) = fresh_schema(&uri, "ps", "nulls").await;
        let store = Store::new();
        store.ensure_table::<Settings, _>(&client).await.unwrap();
        let written = [
            ("none", Limit(None), Some(None)),
            ("some", Limit(Some(3)), Some(Some(vec!["a".to_owned()]))),
            ("absent", Limit::default(), None),
        ];
        for (name, limit, tags) in written {
            let doc = Settings {
                name: name.into(),
                limit,
                tags,
            };
            assert_eq!(
                store.upsert(&client, &doc).await.unwrap(),
                Outcome::Inserted,
                "{label}"
            );
            let read = store
                .get::<Settings, _>(&client, doc.id().unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(read, doc, "{label}");
            let found = store
                .find::<Settings, _>(&client, &doc.natural_key())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(found, doc, "{label}");
            assert_eq!(
                store.upsert(&client, &read).await.unwrap(),
                Outcome::Unchanged,
                "{label}, {name}"
            );
        }
        let audit = store.audit::<Settings, _>(&client).await.unwrap();
        assert!(audit.is_clean(), "{label}: {audit}");

        // A row from before the column held anything (a migration added it): the default.
        client
            .batch_execute("UPDATE settings SET \"limit\" = NULL, tags = NULL")
            .await
            .unwrap();
        let read = store
            .find::<Settings, _>(
                &client,
                &Settings {
                    name: "none".into(),
                    limit: Limit(None),
                    tags: None,
                }
                .natural_key(),
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!((read.limit, read.tags), (Limit::default(), None), "{label}");
    }
}
