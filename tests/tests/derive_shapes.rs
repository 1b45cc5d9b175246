//! Shapes of a document type that serde accepts and the derive must get right on every backend
//! (MongoDB, PostgreSQL 15, PostgreSQL 18): a tombstone whose marker serializes as null.

use idem_core::{Idempotent, Outcome};
use idem_tests::backends::fresh_backends;
use serde::{Deserialize, Serialize};

/// A marker type with no fields: serde writes it as null, so `Some(Gone)` is stored exactly as
/// `None` is. The derive cannot see that a named type is a unit struct; `delete` sees the null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Gone;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "unit_marked_notes")]
struct Note {
    #[idem(key)]
    slug: String,
    text: String,
    #[idem(tombstone)]
    deleted: Option<Gone>,
}

/// `delete` with a marker that serializes as null is refused naming the tombstone field, on
/// every backend, and stores nothing: a null marker could never be told from "not deleted".
#[tokio::test]
async fn a_tombstone_marker_that_serializes_as_null_is_refused_by_delete() {
    for db in fresh_backends("unit_marker").await {
        db.ensure::<Note>().await;
        let note = Note {
            slug: "hello".into(),
            text: "hi".into(),
            deleted: None,
        };
        assert_eq!(db.upsert(&note).await.unwrap(), Outcome::Inserted, "{db}");
        let before = db.raw::<Note>().await;
        let marked = Note {
            deleted: Some(Gone),
            ..note.clone()
        };
        let refusal = db
            .delete(&marked)
            .await
            .expect_err("a null marker is refused");
        assert!(refusal.to_string().contains("`deleted`"), "{db}: {refusal}");
        assert_eq!(db.raw::<Note>().await, before, "{db}: nothing written");
        let fresh = Note {
            slug: "never-stored".into(),
            ..marked
        };
        let refusal = db
            .delete(&fresh)
            .await
            .expect_err("a null marker is refused");
        assert!(refusal.to_string().contains("`deleted`"), "{db}: {refusal}");
        assert_eq!(
            db.raw::<Note>().await,
            before,
            "{db}: nothing stored deleted"
        );
    }
}
