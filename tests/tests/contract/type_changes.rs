//! Changing a type whose documents are stored (the guide's "Changing a type"): each case
//! writes rows with the type as it was, changes it (two definitions of one collection), and
//! checks that the rows written before read and write with the new type as the guide says, on
//! every store. A SQL table is brought to the new type with the statements the store's check
//! names, as an operator would run them.

use idem_core::{Error, ErrorKind, Idempotent, Outcome};
use idem_tests::backends::{fresh_backends, Db};
use serde::{Deserialize, Serialize};

/// A note as first written: every later type in this file is this one changed once.
mod before {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
    #[idem(collection = "notes")]
    pub struct Note {
        #[idem(key)]
        pub note_id: String,
        pub text: String,
        pub author: String,
        pub seen_at: i64,
        pub created_at: i64,
    }
}

/// Note `note_id` as first written.
fn note(note_id: &str) -> before::Note {
    before::Note {
        note_id: note_id.into(),
        text: "hello".into(),
        author: "ada".into(),
        seen_at: 1,
        created_at: 1_700_000_000_000,
    }
}

/// Writes `ids`' notes with the type as it was.
async fn written_before(db: &Db, ids: &[&str]) {
    db.ensure::<before::Note>().await;
    for id in ids {
        assert_eq!(
            db.upsert(&note(id)).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
    }
}

/// `ensure_indexes` (MongoDB) or `ensure_table` (SQL), its error returned.
async fn ensure<T: Idempotent>(db: &Db) -> Result<(), Error> {
    match db {
        Db::Mongo { store, .. } => store.ensure_indexes::<T>().await,
        Db::Postgres {
            store,
            client,
            sqlx,
            ..
        } => idem_tests::through_postgres!(sqlx, client, |c| store.ensure_table::<T, _>(c).await),
        Db::Sqlite {
            store, connection, ..
        } => store.ensure_table::<T>(&mut *connection.lock().await).await,
        Db::Mysql {
            store, connection, ..
        } => store.ensure_table::<T>(&mut *connection.lock().await).await,
    }
}

/// Brings `T`'s table to `T` as its check says, one statement per refusal (each names the first
/// thing the table lacks and the `ALTER TABLE` that adds it), and returns the statements run.
/// MongoDB has no schema to change: none.
async fn migrate<T: Idempotent>(db: &Db) -> Vec<String> {
    let mut statements = Vec::new();
    while let Err(error) = ensure::<T>(db).await {
        assert!(
            matches!(error.kind(), ErrorKind::SchemaMismatch { .. }) && statements.len() < 5,
            "{db}: {error}"
        );
        let message = error.to_string();
        let (_, statement) = message
            .split_once(": ALTER TABLE ")
            .unwrap_or_else(|| panic!("{db}: no ALTER TABLE in {message}"));
        let statement = format!("ALTER TABLE {}", statement.lines().next().unwrap());
        db.run_raw(&statement, mongodb::bson::doc! { "ping": 1 })
            .await;
        statements.push(statement);
    }
    statements
}

/// The outcome of upserting `doc`, or its error's kind.
async fn upserted<T: Idempotent + Serialize + Sync>(
    db: &Db,
    doc: &T,
) -> Result<Outcome, ErrorKind> {
    db.upsert(doc).await.map_err(Error::into_kind)
}

/// The outcome of upserting `doc`, which must not fail.
async fn written<T: Idempotent + Serialize + Sync>(db: &Db, doc: &T) -> Outcome {
    db.upsert(doc)
        .await
        .unwrap_or_else(|error| panic!("{db}: {error}"))
}

mod added {
    use super::*;

    /// [`before::Note`] with two fields more: a list, defaulted for the rows written before, and
    /// an `Option`.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
    #[idem(collection = "notes")]
    pub struct Note {
        #[idem(key)]
        pub note_id: String,
        pub text: String,
        pub author: String,
        pub seen_at: i64,
        pub created_at: i64,
        #[serde(default)]
        pub tags: Vec<String>,
        pub mood: Option<String>,
    }

    /// The same without `#[serde(default)]` on the list.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
    #[idem(collection = "notes")]
    pub struct WithoutDefault {
        #[idem(key)]
        pub note_id: String,
        pub text: String,
        pub author: String,
        pub seen_at: i64,
        pub created_at: i64,
        pub tags: Vec<String>,
        pub mood: Option<String>,
    }

    pub fn note(note_id: &str) -> Note {
        Note {
            note_id: note_id.into(),
            text: "hello".into(),
            author: "ada".into(),
            seen_at: 1,
            created_at: 1_700_000_000_000,
            tags: Vec::new(),
            mood: None,
        }
    }
}

/// An added field: a SQL table gets its column from the `ALTER TABLE` the check names (the
/// audit lists them all at once); the rows written before read with the field's default
/// (`#[serde(default)]`, or `None` for an `Option`), and fail to read without one. Their stored
/// content hash was made without the field, so the next write of each is `Updated`, once.
#[tokio::test]
async fn an_added_field_reads_as_its_default_and_each_old_row_is_updated_once() {
    for db in fresh_backends("type_added_field").await {
        written_before(&db, &["a", "b", "c"]).await;
        if db.is_sql() {
            let lacks = db.audit::<added::Note>().await.table_problems;
            assert_eq!(lacks.len(), 2, "{db}: {lacks:?}");
            assert!(
                lacks.iter().all(|problem| problem.contains("ADD COLUMN")),
                "{db}: {lacks:?}"
            );
        }
        let statements = migrate::<added::Note>(&db).await;
        let expected: &[&str] = match &db {
            Db::Mongo { .. } => &[],
            Db::Postgres { .. } => &[
                r#"ALTER TABLE "notes" ADD COLUMN "tags" jsonb"#,
                r#"ALTER TABLE "notes" ADD COLUMN "mood" text"#,
            ],
            Db::Sqlite { .. } => &[
                r#"ALTER TABLE "notes" ADD COLUMN "tags" JSON_TEXT"#,
                r#"ALTER TABLE "notes" ADD COLUMN "mood" TEXT"#,
            ],
            Db::Mysql { .. } => &[
                "ALTER TABLE `notes` ADD COLUMN `tags` JSON",
                "ALTER TABLE `notes` ADD COLUMN `mood` LONGTEXT CHARACTER SET utf8mb4 COLLATE \
                 utf8mb4_nopad_bin",
            ],
        };
        assert_eq!(statements, expected, "{db}");

        let id = note("a").id().unwrap();
        assert_eq!(
            id,
            added::note("a").id().unwrap(),
            "{db}: the id is the key's"
        );
        assert_eq!(
            db.get::<added::Note>(id).await.unwrap(),
            Some(added::note("a")),
            "{db}"
        );
        let found = db.find::<added::Note>(added::note("a").natural_key()).await;
        assert_eq!(found.unwrap(), Some(added::note("a")), "{db}");
        let without_default = db
            .get::<added::WithoutDefault>(id)
            .await
            .map_err(Error::into_kind);
        assert!(
            matches!(&without_default, Err(ErrorKind::Deserialize { message }) if message.contains("tags")),
            "{db}: {without_default:?}"
        );

        assert_eq!(
            written(&db, &added::note("a")).await,
            Outcome::Updated,
            "{db}"
        );
        assert_eq!(
            written(&db, &added::note("a")).await,
            Outcome::Unchanged,
            "{db}"
        );
        let batch = [added::note("a"), added::note("b")];
        let report = db.upsert_many(&batch).await.unwrap();
        assert_eq!(
            (
                report.count(Outcome::Unchanged),
                report.count(Outcome::Updated)
            ),
            (1, 1),
            "{db}"
        );
        let tagged = added::Note {
            tags: vec!["idea".into()],
            ..added::note("c")
        };
        assert_eq!(written(&db, &tagged).await, Outcome::Updated, "{db}");
        assert_eq!(
            db.get::<added::Note>(tagged.id().unwrap()).await.unwrap(),
            Some(tagged),
            "{db}"
        );
        assert_eq!(
            written(&db, &added::note("d")).await,
            Outcome::Inserted,
            "{db}"
        );
        // Writers of both versions at once: each one's write of the other's is an update.
        assert_eq!(written(&db, &note("d")).await, Outcome::Updated, "{db}");
        assert_eq!(
            written(&db, &added::note("d")).await,
            Outcome::Updated,
            "{db}"
        );
    }
}

mod removed {
    use super::*;

    /// [`before::Note`] without `seen_at`.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
    #[idem(collection = "notes")]
    pub struct Note {
        #[idem(key)]
        pub note_id: String,
        pub text: String,
        pub author: String,
        pub created_at: i64,
    }

    pub fn note(note_id: &str) -> Note {
        Note {
            note_id: note_id.into(),
            text: "hello".into(),
            author: "ada".into(),
            created_at: 1_700_000_000_000,
        }
    }
}

/// A removed field: nothing to migrate, and the rows written before read without it. Their
/// content hash covered it, so the next write of each is `Updated`, once. That write removes
/// the field from a MongoDB document (a write replaces the document); a SQL table keeps the
/// column, which the new type neither reads nor writes: old rows keep their value in it and new
/// rows hold NULL, until the column is dropped.
#[tokio::test]
async fn a_removed_field_is_ignored_and_each_old_row_is_updated_once() {
    for db in fresh_backends("type_removed_field").await {
        written_before(&db, &["a"]).await;
        assert_eq!(
            migrate::<removed::Note>(&db).await,
            Vec::<String>::new(),
            "{db}"
        );
        let id = note("a").id().unwrap();
        assert_eq!(
            db.get::<removed::Note>(id).await.unwrap(),
            Some(removed::note("a")),
            "{db}"
        );
        assert_eq!(
            written(&db, &removed::note("a")).await,
            Outcome::Updated,
            "{db}"
        );
        assert_eq!(
            written(&db, &removed::note("a")).await,
            Outcome::Unchanged,
            "{db}"
        );
        assert_eq!(
            written(&db, &removed::note("b")).await,
            Outcome::Inserted,
            "{db}"
        );
        let stored = db.stored::<removed::Note>().await;
        let seen_at = |note_id: &str| {
            let row = stored.iter().find(|row| row["note_id"] == note_id);
            row.and_then(|row| row.get("seen_at")).cloned()
        };
        let kept = db.is_sql().then(|| serde_json::Value::from(1));
        assert_eq!(
            (seen_at("a"), seen_at("b")),
            (kept, None),
            "{db}: {stored:?}"
        );

        if db.is_sql() {
            db.run_raw(
                &format!(
                    "ALTER TABLE {} DROP COLUMN {}",
                    db.quote("notes"),
                    db.quote("seen_at")
                ),
                mongodb::bson::doc! {},
            )
            .await;
            let db = db.another().await;
            db.ensure::<removed::Note>().await;
            assert_eq!(
                written(&db, &removed::note("a")).await,
                Outcome::Unchanged,
                "{db}"
            );
        }
    }
}

mod renamed {
    use super::*;

    /// [`before::Note`] with `text` renamed in Rust, stored under its old name.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
    #[idem(collection = "notes")]
    pub struct SameStoredName {
        #[idem(key)]
        pub note_id: String,
        #[serde(rename = "text")]
        pub body: String,
        pub author: String,
        pub seen_at: i64,
        pub created_at: i64,
    }

    /// [`before::Note`] with `text` renamed in Rust and in storage, reading the old name too.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
    #[idem(collection = "notes")]
    pub struct NewStoredName {
        #[idem(key)]
        pub note_id: String,
        #[serde(alias = "text")]
        pub body: String,
        pub author: String,
        pub seen_at: i64,
        pub created_at: i64,
    }

    pub fn same(note_id: &str) -> SameStoredName {
        SameStoredName {
            note_id: note_id.into(),
            body: "hello".into(),
            author: "ada".into(),
            seen_at: 1,
            created_at: 1_700_000_000_000,
        }
    }

    pub fn new(note_id: &str) -> NewStoredName {
        NewStoredName {
            note_id: note_id.into(),
            body: "hello".into(),
            author: "ada".into(),
            seen_at: 1,
            created_at: 1_700_000_000_000,
        }
    }
}

/// A renamed field. Renamed in Rust only (`#[serde(rename = "old")]`), nothing changes: the
/// stored form and the content hash are the same, and a rewrite is `Unchanged`. Renamed in
/// storage too: on MongoDB `#[serde(alias = "old")]` reads the documents written before, and the
/// next write of each (`Updated`, once) stores the new name. A SQL table reads only the new
/// name's column, which the alias cannot fill: rename the column
/// (`ALTER TABLE … RENAME COLUMN`), and the rows read; the next write of each is `Updated`,
/// once. Adding the new column instead (what the check names) leaves the rows written before
/// unreadable until they are written again, and their old column behind.
#[tokio::test]
async fn a_renamed_field_keeps_its_stored_name_or_its_column_is_renamed() {
    for db in fresh_backends("type_renamed_field").await {
        written_before(&db, &["a", "b"]).await;
        assert_eq!(
            migrate::<renamed::SameStoredName>(&db).await,
            Vec::<String>::new(),
            "{db}"
        );
        let id = note("a").id().unwrap();
        assert_eq!(db.get(id).await.unwrap(), Some(renamed::same("a")), "{db}");
        assert_eq!(
            written(&db, &renamed::same("a")).await,
            Outcome::Unchanged,
            "{db}"
        );

        if db.is_sql() {
            let before = db
                .get::<renamed::NewStoredName>(id)
                .await
                .map_err(Error::into_kind);
            assert!(
                matches!(&before, Err(ErrorKind::SchemaMismatch { .. })),
                "{db}: the table has no column `body` yet: {before:?}"
            );
            db.run_raw(
                &format!(
                    "ALTER TABLE {} RENAME COLUMN {} TO {}",
                    db.quote("notes"),
                    db.quote("text"),
                    db.quote("body")
                ),
                mongodb::bson::doc! {},
            )
            .await;
        }
        assert_eq!(
            migrate::<renamed::NewStoredName>(&db).await,
            Vec::<String>::new(),
            "{db}"
        );
        assert_eq!(db.get(id).await.unwrap(), Some(renamed::new("a")), "{db}");
        assert_eq!(
            written(&db, &renamed::new("a")).await,
            Outcome::Updated,
            "{db}"
        );
        assert_eq!(
            written(&db, &renamed::new("a")).await,
            Outcome::Unchanged,
            "{db}"
        );
        let stored = db.stored::<renamed::NewStoredName>().await;
        let a = stored.iter().find(|row| row["note_id"] == "a").unwrap();
        assert!(
            a.contains_key("body") && !a.contains_key("text"),
            "{db}: {stored:?}"
        );
        let edited = renamed::NewStoredName {
            body: "edited".into(),
            ..renamed::new("b")
        };
        assert_eq!(written(&db, &edited).await, Outcome::Updated, "{db}");
        assert_eq!(
            db.get(edited.id().unwrap()).await.unwrap(),
            Some(edited),
            "{db}"
        );
    }
}

/// An `ALTER TABLE … ADD COLUMN` for a field renamed in storage, as the check names it, does
/// not carry the values over: the rows written before do not read (the new column is NULL)
/// until each is written again, and their old column keeps the old value.
#[tokio::test]
async fn a_column_added_for_a_renamed_field_leaves_old_rows_unreadable_until_written() {
    for db in fresh_backends("type_renamed_added_column").await {
        if !db.is_sql() {
            continue;
        }
        written_before(&db, &["a"]).await;
        assert_eq!(
            migrate::<renamed::NewStoredName>(&db).await.len(),
            1,
            "{db}"
        );
        let id = note("a").id().unwrap();
        let read = db
            .get::<renamed::NewStoredName>(id)
            .await
            .map_err(Error::into_kind);
        assert!(
            matches!(&read, Err(ErrorKind::Deserialize { message }) if message.contains("body")),
            "{db}: {read:?}"
        );
        assert_eq!(
            written(&db, &renamed::new("a")).await,
            Outcome::Updated,
            "{db}"
        );
        assert_eq!(db.get(id).await.unwrap(), Some(renamed::new("a")), "{db}");
        let stored = db.stored::<renamed::NewStoredName>().await;
        assert_eq!(
            stored[0].get("text"),
            Some(&"hello".into()),
            "{db}: the old column stays"
        );
    }
}

mod roles {
    use super::*;

    /// [`before::Note`] with `author` frozen.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
    #[idem(collection = "notes")]
    pub struct Frozen {
        #[idem(key)]
        pub note_id: String,
        pub text: String,
        #[idem(frozen)]
        pub author: String,
        pub seen_at: i64,
        pub created_at: i64,
    }

    /// [`before::Note`] with `seen_at` volatile.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
    #[idem(collection = "notes")]
    pub struct Volatile {
        #[idem(key)]
        pub note_id: String,
        pub text: String,
        pub author: String,
        #[idem(volatile)]
        pub seen_at: i64,
        pub created_at: i64,
    }

    pub fn frozen(note_id: &str) -> Frozen {
        Frozen {
            note_id: note_id.into(),
            text: "hello".into(),
            author: "ada".into(),
            seen_at: 1,
            created_at: 1_700_000_000_000,
        }
    }

    pub fn volatile(note_id: &str, seen_at: i64) -> Volatile {
        Volatile {
            note_id: note_id.into(),
            text: "hello".into(),
            author: "ada".into(),
            seen_at,
            created_at: 1_700_000_000_000,
        }
    }
}

/// A field made frozen: the rows written before have no digest of it, so they are compared by
/// value: the same content is `Unchanged` (the content hash is the same), another edit is
/// `Updated` and stores the digest, and a change of the frozen field is refused from the first
/// write on, as for a row written with the frozen type. A SQL table of a type that had no frozen
/// field and no timestamp needs the digest column first.
#[tokio::test]
async fn a_field_made_frozen_is_compared_by_value_on_the_rows_written_before() {
    for db in fresh_backends("type_made_frozen").await {
        written_before(&db, &["a", "b", "c"]).await;
        let statements = migrate::<roles::Frozen>(&db).await;
        let column = match &db {
            Db::Mongo { .. } => None,
            Db::Postgres { .. } => Some(r#"ALTER TABLE "notes" ADD COLUMN "idemFrozen" bytea"#),
            Db::Sqlite { .. } => Some(r#"ALTER TABLE "notes" ADD COLUMN "idemFrozen" BLOB"#),
            Db::Mysql { .. } => Some("ALTER TABLE `notes` ADD COLUMN `idemFrozen` VARBINARY(16)"),
        };
        assert_eq!(statements, Vec::from_iter(column.map(String::from)), "{db}");
        assert_eq!(
            written(&db, &roles::frozen("a")).await,
            Outcome::Unchanged,
            "{db}"
        );
        let edited = roles::Frozen {
            text: "edited".into(),
            ..roles::frozen("a")
        };
        assert_eq!(written(&db, &edited).await, Outcome::Updated, "{db}");
        for id in ["a", "b"] {
            let moved = roles::Frozen {
                author: "grace".into(),
                ..roles::frozen(id)
            };
            let refused = upserted(&db, &moved).await;
            assert!(
                matches!(
                    &refused,
                    Err(ErrorKind::FrozenFieldChanged {
                        field: "author",
                        ..
                    })
                ),
                "{db}: {id}: {refused:?}"
            );
        }
        let moved = roles::Frozen {
            author: "grace".into(),
            ..roles::frozen("c")
        };
        let report = db.upsert_many(&[roles::frozen("b"), moved]).await.unwrap();
        assert_eq!(report.count(Outcome::Unchanged), 1, "{db}");
        assert!(
            matches!(
                report.outcomes()[1].as_ref().map_err(Error::kind),
                Err(ErrorKind::FrozenFieldChanged { .. })
            ),
            "{db}: {report}"
        );
        assert!(db.audit::<roles::Frozen>().await.is_clean(), "{db}");
    }
}

/// A field no longer frozen: its stored digests are left alone. A write of the type without it
/// replaces a MongoDB document, digests and all, and writes a SQL row's digest column only when
/// the type has one (another frozen field, or a timestamp): a table whose type now has neither
/// keeps the old digest, which the audit finds is not the values' once the field is frozen
/// again; the next write, its digest not the stored one, compares the values and stores it.
#[tokio::test]
async fn a_field_no_longer_frozen_leaves_its_digest_where_the_type_has_no_other_guard() {
    for db in fresh_backends("type_unfrozen").await {
        db.ensure::<roles::Frozen>().await;
        assert_eq!(
            written(&db, &roles::frozen("a")).await,
            Outcome::Inserted,
            "{db}"
        );
        migrate::<before::Note>(&db).await;
        let changed = before::Note {
            author: "grace".into(),
            ..note("a")
        };
        assert_eq!(written(&db, &changed).await, Outcome::Updated, "{db}");
        let again = roles::Frozen {
            author: "grace".into(),
            text: "edited".into(),
            ..roles::frozen("a")
        };
        if db.is_sql() {
            assert_eq!(
                db.audit::<roles::Frozen>().await.digest_mismatch.count,
                1,
                "{db}"
            );
        }
        let refrozen = upserted(&db, &again).await;
        assert!(
            matches!(refrozen, Ok(Outcome::Updated)),
            "{db}: {refrozen:?}"
        );
        assert!(db.audit::<roles::Frozen>().await.is_clean(), "{db}");
    }
}

/// A field made volatile: the content hash no longer covers it, so the rows written before are
/// `Updated` once by their next write (the stored hash covered it) and `Unchanged` after it,
/// whatever the volatile field holds then; its stored value is the one written with the last
/// real change.
#[tokio::test]
async fn a_field_made_volatile_updates_each_old_row_once() {
    for db in fresh_backends("type_made_volatile").await {
        written_before(&db, &["a", "b"]).await;
        assert_eq!(
            migrate::<roles::Volatile>(&db).await,
            Vec::<String>::new(),
            "{db}"
        );
        assert_eq!(
            written(&db, &roles::volatile("a", 1)).await,
            Outcome::Updated,
            "{db}"
        );
        assert_eq!(
            written(&db, &roles::volatile("a", 1)).await,
            Outcome::Unchanged,
            "{db}"
        );
        assert_eq!(
            written(&db, &roles::volatile("a", 2)).await,
            Outcome::Unchanged,
            "{db}"
        );
        let id = note("a").id().unwrap();
        assert_eq!(
            db.get(id).await.unwrap(),
            Some(roles::volatile("a", 1)),
            "{db}"
        );
        // Its first write after the change with another value is that old row's one update.
        assert_eq!(
            written(&db, &roles::volatile("b", 5)).await,
            Outcome::Updated,
            "{db}"
        );
        assert_eq!(
            written(&db, &roles::volatile("b", 6)).await,
            Outcome::Unchanged,
            "{db}"
        );
    }
}

mod ids {
    use super::*;

    /// [`before::Note`] with `created_at` the id's timestamp.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
    #[idem(collection = "notes")]
    pub struct Timestamped {
        #[idem(key)]
        pub note_id: String,
        pub text: String,
        pub author: String,
        pub seen_at: i64,
        #[idem(timestamp)]
        pub created_at: i64,
    }

    /// [`before::Note`] under the `joined` id scheme.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
    #[idem(collection = "notes", id_scheme = "joined")]
    pub struct Joined {
        #[idem(key)]
        pub note_id: String,
        pub text: String,
        pub author: String,
        pub seen_at: i64,
        pub created_at: i64,
    }

    pub fn timestamped(note_id: &str) -> Timestamped {
        Timestamped {
            note_id: note_id.into(),
            text: "hello".into(),
            author: "ada".into(),
            seen_at: 1,
            created_at: 1_700_000_000_000,
        }
    }

    pub fn joined(note_id: &str) -> Joined {
        Joined {
            note_id: note_id.into(),
            text: "hello".into(),
            author: "ada".into(),
            seen_at: 1,
            created_at: 1_700_000_000_000,
        }
    }
}

/// Asserts what a change of the ids does to the rows written before, `doc` being note "a" with
/// the new type: every write of it is refused (`IdChanged`, nothing written) while it is stored
/// under the id the old type derived, a read by key finds it and a read by the new id does not;
/// the audit counts it under the wrong id, `adopt` moves it, and it is then `Unchanged`.
async fn ids_moved_by_adopt<T>(db: &Db, doc: &T)
where
    T: Idempotent
        + Serialize
        + serde::de::DeserializeOwned
        + PartialEq
        + std::fmt::Debug
        + Sync
        + Send,
{
    let (old, new) = (note("a").id().unwrap(), doc.id().unwrap());
    assert_ne!(old, new, "{db}");
    let refused = upserted(db, doc).await;
    assert!(
        matches!(&refused, Err(ErrorKind::IdChanged { .. })),
        "{db}: {refused:?}"
    );
    assert_eq!(
        db.find::<T>(doc.natural_key()).await.unwrap().as_ref(),
        Some(doc),
        "{db}"
    );
    assert_eq!(db.get::<T>(new).await.unwrap(), None, "{db}");
    let audit = db.audit::<T>().await;
    assert_eq!(
        audit.orphans.count + audit.legacy_ids.count,
        1,
        "{db}: {audit:?}"
    );
    let adopted = db.adopt::<T>().await;
    assert_eq!(adopted.moved.count, 1, "{db}: {adopted:?}");
    assert_eq!(written(db, doc).await, Outcome::Unchanged, "{db}");
    assert_eq!(db.get::<T>(new).await.unwrap().as_ref(), Some(doc), "{db}");
    assert!(db.audit::<T>().await.is_clean(), "{db}");
}

/// A timestamp given to a type, or another id scheme, derives other ids: the rows written before
/// are refused until `adopt` moves them (the guide's "Adopting existing data").
#[tokio::test]
async fn a_changed_id_refuses_old_rows_until_adopt_moves_them() {
    for db in fresh_backends("type_changed_id").await {
        // its type's id has a time part: MongoDB without the natural-key index refuses it.
        if db.guards_by_id_alone() {
            continue;
        }
        written_before(&db, &["a"]).await;
        let statements = migrate::<ids::Timestamped>(&db).await;
        assert_eq!(
            statements.len(),
            usize::from(db.is_sql()),
            "{db}: the digest column"
        );
        ids_moved_by_adopt(&db, &ids::timestamped("a")).await;

        let db = db.reset::<before::Note>().await;
        written_before(&db, &["a"]).await;
        assert_eq!(
            migrate::<ids::Joined>(&db).await,
            Vec::<String>::new(),
            "{db}"
        );
        ids_moved_by_adopt(&db, &ids::joined("a")).await;
    }
}
