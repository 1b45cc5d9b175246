// Every role of the replay and effect work together: version, tombstone, a pushed list, and an
// event type keyed by an idempotency key.
use idem_core::{Idempotent, Role};

#[derive(serde::Serialize)]
struct Comment {
    comment_id: String,
}

#[derive(serde::Serialize, Idempotent)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[idem(key)]
    entry_id: String,
    #[idem(version)]
    revision: u32,
    #[idem(tombstone)]
    deleted_at: Option<i64>,
    #[idem(push_by = "comment_id")]
    comments: Vec<Comment>,
}

#[derive(serde::Serialize, Idempotent)]
struct Click {
    #[idem(idempotency_key)]
    request_key: String,
    #[idem(volatile)]
    seen_at: i64,
}

fn main() {
    let model = <Entry as Idempotent>::MODEL;
    assert_eq!(model.version_field().map(|field| field.stored_name()), Some("revision"));
    assert_eq!(model.tombstone_field().map(|field| field.stored_name()), Some("deletedAt"));
    let pushed: Vec<_> = model.pushed_fields().map(|field| (field.stored_name(), field.item_key())).collect();
    assert_eq!(pushed, [("comments", "comment_id")]);
    assert!(!model.is_hashed("comments") && !model.is_hashed("deletedAt") && model.is_hashed("revision"));
    let click = <Click as Idempotent>::MODEL;
    assert_eq!(click.idempotency_key_field().map(|field| field.role()), Some(Role::IdempotencyKey));
    assert!(Click { request_key: "r".into(), seen_at: 1 }.id().is_err());
}
