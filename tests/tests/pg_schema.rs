//! What the PostgreSQL store reads of the table it writes, on every PostgreSQL server under
//! test: the errors a caller may retry.

use idem_core::postgres::Store;
use idem_core::{Idempotent, Outcome};
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
// Errors (issue 16, case 14)

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
