//! Shapes of a document type that serde accepts and the derive must get right on every backend
//! (MongoDB, PostgreSQL 15, PostgreSQL 18): an internally tagged struct, whose serde writes a
//! field no Rust field declares, and a tombstone whose marker serializes as null.

use idem_core::{Idempotent, Outcome};
use idem_tests::backends::fresh_backends;
use serde::{Deserialize, Serialize};

/// An internally tagged struct: serde writes `"kind": "Invoice"` before the fields, and reads
/// it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "tagged_invoices")]
#[serde(tag = "kind")]
struct Invoice {
    #[idem(key)]
    number: String,
    total_cents: i64,
}

/// The tag names the type as serde names it: a container `rename` changes the tag's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "tagged_receipts")]
#[serde(tag = "type", rename = "receipt", rename_all = "camelCase")]
struct Receipt {
    #[idem(key)]
    receipt_id: String,
    paid_by: String,
}

fn invoice(total_cents: i64) -> Invoice {
    Invoice {
        number: "INV-1".into(),
        total_cents,
    }
}

/// The tag is stored as written, as constant content: an upsert inserts, a replay changes
/// nothing, a changed field updates, and a typed read returns the value.
#[tokio::test]
async fn an_internally_tagged_struct_is_stored_and_read_back_on_every_backend() {
    for db in fresh_backends("tagged").await {
        db.ensure::<Invoice>().await;
        let first = invoice(1_000);
        assert_eq!(db.upsert(&first).await.unwrap(), Outcome::Inserted, "{db}");
        let before = db.raw::<Invoice>().await;
        assert_eq!(db.upsert(&first).await.unwrap(), Outcome::Unchanged, "{db}");
        assert_eq!(db.raw::<Invoice>().await, before, "{db}: nothing written");
        let id = first.id().unwrap();
        assert_eq!(db.get::<Invoice>(id).await.unwrap(), Some(first), "{db}");
        let stored = db.stored::<Invoice>().await;
        assert_eq!(stored.len(), 1, "{db}");
        assert_eq!(stored[0]["kind"], "Invoice", "{db}: the tag is stored");

        let raised = invoice(1_500);
        assert_eq!(db.upsert(&raised).await.unwrap(), Outcome::Updated, "{db}");
        assert_eq!(db.get::<Invoice>(id).await.unwrap(), Some(raised), "{db}");
        let report = db.upsert_many(&[invoice(1_500)]).await.unwrap();
        assert_eq!(
            report.outcomes()[0].as_ref().ok(),
            Some(&Outcome::Unchanged),
            "{db}"
        );
    }
}

/// A renamed tagged struct: the tag's value is the container's serialize name, and
/// `rename_all` renames the fields, not the tag.
#[tokio::test]
async fn a_renamed_internally_tagged_struct_round_trips_on_every_backend() {
    for db in fresh_backends("tagged_renamed").await {
        db.ensure::<Receipt>().await;
        let receipt = Receipt {
            receipt_id: "R-1".into(),
            paid_by: "ada".into(),
        };
        assert_eq!(
            db.upsert(&receipt).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        assert_eq!(
            db.upsert(&receipt).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        let stored = db.stored::<Receipt>().await;
        assert_eq!(stored[0]["type"], "receipt", "{db}");
        assert_eq!(stored[0]["paidBy"], "ada", "{db}");
        let id = receipt.id().unwrap();
        assert_eq!(db.get::<Receipt>(id).await.unwrap(), Some(receipt), "{db}");
    }
}

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
