//! What idem's own columns hold at rest on every SQL store: the content hash as its 32 bytes
//! (`bytea`, `BLOB`, `BINARY(32)`), read and compared as the hex text the engine knows, and the
//! applied-ops list NULL until `apply_once` first records an op. A table made by an earlier
//! release (the hash as hex text, the ops `'[]'`) is refused, naming the column and the
//! statements that migrate it; once they ran, every row it held is unchanged to idem.

use idem_core::hash::{content_hash, HashAlgorithm};
use idem_core::{Idempotent, OpId, Outcome};
use idem_tests::backends::{fresh_backends, Db};
use idem_tests::fixtures::{account, numbered_post, post, Account, Post};
use serde::{Deserialize, Serialize};

/// A type hashed with BLAKE3, whose hashes carry the function's prefix as text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "blake_notes", hash_algorithm = "blake3")]
struct BlakeNote {
    #[idem(key)]
    slug: String,
    text: String,
}

/// A small type whose table the test makes as the earlier release did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "notes")]
struct Note {
    #[idem(key)]
    slug: String,
    text: String,
}

fn note(n: usize) -> Note {
    Note {
        slug: format!("note-{n}"),
        text: format!("Note {n}, as written before."),
    }
}

/// The text of each column of each row `sql` selects, on a SQL store.
async fn texts(db: &Db, sql: &str) -> Vec<Vec<Option<String>>> {
    use idem_core::sqlx::{self, Row};
    let failed = |error: &dyn std::fmt::Display| -> ! { panic!("{db}: {sql}: {error}") };
    // The same read on each sqlx connection.
    macro_rules! through_sqlx {
        ($connection:expr) => {
            (sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())))
                .fetch_all(&mut *$connection.lock().await)
                .await
                .unwrap_or_else(|error| failed(&error))
                .iter()
                .map(|row| (0..row.len()).map(|at| row.get(at)).collect())
                .collect()
        };
    }
    match db {
        Db::Postgres { client, .. } => (client.query(sql, &[]).await)
            .unwrap_or_else(|error| failed(&error))
            .iter()
            .map(|row| (0..row.len()).map(|at| row.get(at)).collect())
            .collect(),
        Db::Sqlite { connection, .. } => through_sqlx!(connection),
        Db::Mysql { connection, .. } => through_sqlx!(connection),
        Db::Mongo { .. } => unreachable!("a SQL store"),
    }
}

/// Each row of `T`'s table: how many bytes its hash column holds, and whether its applied-ops
/// column is NULL, as text.
async fn hash_and_ops<T: Idempotent>(db: &Db) -> Vec<(String, String)> {
    let (table, hash, ops) = (
        db.quote(T::MODEL.collection()),
        db.quote(T::MODEL.hash_field()),
        db.quote(idem_core::model::APPLIED_OPS_FIELD),
    );
    let sql = match db {
        Db::Postgres { .. } => format!(
            "SELECT octet_length({hash})::text, ({ops} IS NULL)::text FROM {table} ORDER BY 1"
        ),
        // A blob's `length` is its bytes; text's would be its characters.
        Db::Sqlite { .. } => format!(
            "SELECT CAST(length({hash}) AS TEXT) || typeof({hash}), \
             CASE WHEN {ops} IS NULL THEN 'true' ELSE 'false' END FROM {table}"
        ),
        _ => format!(
            "SELECT CAST(LENGTH({hash}) AS CHAR), IF({ops} IS NULL, 'true', 'false') FROM {table}"
        ),
    };
    let bytes = match db {
        Db::Sqlite { .. } => "32blob",
        _ => "32",
    };
    (texts(db, &sql).await.into_iter())
        .map(|row| {
            let length = row[0].clone().unwrap_or_default();
            assert_eq!(length, bytes, "{db}: the hash's bytes");
            (length, row[1].clone().unwrap_or_default())
        })
        .collect()
}

/// The SQL stores of [`fresh_backends`].
async fn sql_backends(test: &str) -> Vec<Db> {
    let mut backends = fresh_backends(test).await;
    backends.retain(Db::is_sql);
    let every = [Db::is_postgres, Db::is_sqlite, Db::is_mysql];
    assert!(
        every.iter().all(|is| backends.iter().any(is)),
        "every SQL store"
    );
    backends
}

/// Single writes and batches (fresh inserts, updates, unchanged rows) store the hash as its 32
/// bytes and no applied-ops list; the hash read back is the one computed, and `apply_once`
/// records its op where the list was NULL.
#[tokio::test]
async fn the_hash_is_stored_as_its_bytes_and_ops_stay_null_until_used() {
    for db in sql_backends("hash_bytes").await {
        db.ensure::<Post>().await;
        assert_eq!(db.upsert(&post()).await.unwrap(), Outcome::Inserted, "{db}");
        let posts: Vec<Post> = (1..=3).map(numbered_post).collect();
        let report = db.upsert_many(&posts).await.unwrap();
        assert_eq!(report.count(Outcome::Inserted), 3, "{db}: {report}");
        let mut changed = posts.clone();
        changed[0].title = "Changed".into();
        let report = db.upsert_many(&changed).await.unwrap();
        assert_eq!(report.count(Outcome::Updated), 1, "{db}: {report}");
        assert_eq!(report.count(Outcome::Unchanged), 2, "{db}: {report}");
        assert_eq!(
            db.upsert(&changed[0]).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        let rows = hash_and_ops::<Post>(&db).await;
        assert_eq!(rows.len(), 4, "{db}");
        assert!(
            rows.iter().all(|(_, null)| null == "true"),
            "{db}: {rows:?}"
        );
        for doc in changed.iter().chain([&post()]) {
            let stored = db.stored_content_hash::<Post>(doc.id().unwrap()).await;
            let computed = content_hash(doc, &Post::MODEL).unwrap().to_string();
            assert_eq!(stored.as_deref(), Some(computed.as_str()), "{db}");
        }
        assert!(db.audit::<Post>().await.is_clean(), "{db}");

        // The applied-ops list appears with the first op, on that row only.
        db.ensure::<Account>().await;
        for owner in ["ada", "bob"] {
            db.upsert(&account(owner)).await.unwrap();
        }
        let id = account("ada").id().unwrap();
        let op = OpId::new("first-credit");
        db.credit_once::<Account>(id, &op, "balance", 5)
            .await
            .unwrap();
        let mut nulls: Vec<String> = (hash_and_ops::<Account>(&db).await.into_iter())
            .map(|(_, null)| null)
            .collect();
        nulls.sort();
        assert_eq!(nulls, ["false", "true"], "{db}");
        assert_eq!(
            db.upsert(&account("ada")).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
    }
}

/// A type hashed with BLAKE3 stores the digest's 32 bytes too, and reads its hash back with the
/// function's prefix: re-ingests are unchanged, the audit clean.
#[tokio::test]
async fn a_blake3_hash_keeps_its_prefix_as_text_and_its_bytes_at_rest() {
    assert_eq!(BlakeNote::MODEL.hash_algorithm(), HashAlgorithm::Blake3);
    for db in sql_backends("hash_blake3").await {
        db.ensure::<BlakeNote>().await;
        let notes: Vec<BlakeNote> = (0..3)
            .map(|n| BlakeNote {
                slug: format!("b-{n}"),
                text: format!("text {n}"),
            })
            .collect();
        db.upsert(&notes[0]).await.unwrap();
        let report = db.upsert_many(&notes).await.unwrap();
        assert_eq!(report.count(Outcome::Unchanged), 1, "{db}: {report}");
        assert_eq!(report.count(Outcome::Inserted), 2, "{db}: {report}");
        let again = db.upsert_many(&notes).await.unwrap();
        assert_eq!(again.count(Outcome::Unchanged), 3, "{db}: {again}");
        hash_and_ops::<BlakeNote>(&db).await;
        let stored = db
            .stored_content_hash::<BlakeNote>(notes[1].id().unwrap())
            .await
            .unwrap();
        let computed = content_hash(&notes[1], &BlakeNote::MODEL).unwrap();
        assert_eq!(format!("blake3:{stored}"), computed.to_string(), "{db}");
        assert!(db.audit::<BlakeNote>().await.is_clean(), "{db}");
    }
}

/// `notes` as the earlier release made it: the hash as hex text, the ops `'[]'` by default.
fn earlier_table(db: &Db) -> String {
    match db {
        Db::Postgres { .. } => format!(
            "CREATE TABLE notes (\"_id\" text PRIMARY KEY, slug text NOT NULL, text text, \
             \"sourceHash\" text, \"idemAppliedOps\" jsonb NOT NULL DEFAULT '[]'{}, \
             CONSTRAINT notes_idem_natural_key UNIQUE (slug))",
            if db.has_write_marker() {
                ", \"idemWrite\" text"
            } else {
                ""
            }
        ),
        Db::Sqlite { .. } => "CREATE TABLE notes (\"_id\" TEXT PRIMARY KEY NOT NULL, \
             slug TEXT NOT NULL, text TEXT, \"sourceHash\" TEXT, \
             \"idemAppliedOps\" TEXT NOT NULL DEFAULT '[]', \"idemWrite\" TEXT, \
             CONSTRAINT notes_idem_natural_key UNIQUE (slug))"
            .to_owned(),
        _ => {
            let text = "CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin";
            format!(
                "CREATE TABLE notes (`_id` VARCHAR(26) {text} NOT NULL, \
                 slug VARCHAR(255) {text} NOT NULL, text LONGTEXT {text}, \
                 sourceHash VARCHAR(71) {text}, idemAppliedOps JSON NOT NULL DEFAULT '[]', \
                 idemWrite VARCHAR(27) {text}, PRIMARY KEY (`_id`), \
                 CONSTRAINT notes_idem_natural_key UNIQUE (slug)) \
                 ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin"
            )
        }
    }
}

/// A table made by the earlier release, its rows written as it wrote them: the first write is
/// refused, naming the table, the column and the statements that migrate it, and writes
/// nothing; once they ran, the same documents are unchanged (the migrated hash is the computed
/// one), the audit finds nothing, and new rows are stored in the new form.
#[tokio::test]
async fn a_table_of_the_earlier_release_is_refused_with_the_statements_that_migrate_it() {
    for db in sql_backends("hash_upgrade").await {
        // The earlier table is a plain one: a partitioned table's migration is the same
        // `ALTER TABLE` on its parent, and its partitions would need a `CREATE TABLE` of their own.
        if db.is_partitioned() {
            continue;
        }
        db.run_raw(&earlier_table(&db), mongodb::bson::doc! {})
            .await;
        let notes: Vec<Note> = (0..3).map(note).collect();
        for doc in &notes {
            let hash = content_hash(doc, &Note::MODEL).unwrap();
            let insert = format!(
                "INSERT INTO notes ({}, slug, text, {}) VALUES ('{}', '{}', '{}', '{hash}')",
                db.quote("_id"),
                db.quote("sourceHash"),
                doc.id().unwrap(),
                doc.slug,
                doc.text,
            );
            db.run_raw(&insert, mongodb::bson::doc! {}).await;
        }
        let before = db.raw::<Note>().await;

        let refused = db.upsert(&notes[0]).await.unwrap_err().to_string();
        assert!(refused.contains("`notes`"), "{db}: {refused}");
        assert!(refused.contains("column \"sourceHash\""), "{db}: {refused}");
        let named = match &db {
            Db::Postgres { .. } => "TYPE bytea USING decode(\"sourceHash\", 'hex')",
            Db::Sqlite { .. } => {
                "make the table anew with the column's type, the hash copied as \
                 unhex(\"sourceHash\")"
            }
            _ => "UNHEX(`sourceHash`)",
        };
        assert!(refused.contains(named), "{db}: {refused}");
        // SQLite's fix is named in words: made anew as its user writes it.
        let fix = match &db {
            Db::Sqlite { .. } => format!(
                "ALTER TABLE notes RENAME TO notes_text_hash; {}; INSERT INTO notes SELECT \
                 \"_id\", slug, text, unhex(\"sourceHash\"), NULLIF(\"idemAppliedOps\", '[]'), \
                 \"idemWrite\" FROM notes_text_hash; DROP TABLE notes_text_hash",
                idem_core::sqlite::Store::create_table_sql::<Note>()
            ),
            _ => refused[refused
                .find("ALTER TABLE")
                .unwrap_or_else(|| panic!("{refused}"))..]
                .to_owned(),
        };
        let batch = db.upsert_many(&notes).await.unwrap_err().to_string();
        assert!(batch.contains("sourceHash"), "{db}: {batch}");
        assert_eq!(
            db.raw::<Note>().await,
            before,
            "{db}: the refusals wrote nothing"
        );

        for statement in fix.split("; ") {
            db.run_raw(statement, mongodb::bson::doc! {}).await;
        }
        for doc in &notes {
            assert_eq!(db.upsert(doc).await.unwrap(), Outcome::Unchanged, "{db}");
        }
        let report = db.upsert_many(&notes).await.unwrap();
        assert_eq!(report.count(Outcome::Unchanged), 3, "{db}: {report}");
        let audit = db.audit::<Note>().await;
        assert!(audit.is_clean(), "{db}: {audit}");
        let added = note(3);
        assert_eq!(db.upsert(&added).await.unwrap(), Outcome::Inserted, "{db}");
        let rows = hash_and_ops::<Note>(&db).await;
        assert_eq!(rows.len(), 4, "{db}");
    }
}
