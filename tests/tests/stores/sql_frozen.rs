//! `idemFrozen` on the SQL stores: one 16-byte digest of every guarded field, compared by the
//! server's guard; where it is not the incoming one (a field made frozen since, a digest
//! changed by hand, none at all), the values are compared, a changed one refused naming it, and
//! the write that may go through stores the digest again. On every SQL store under test, one
//! document at a time and in batches mixing all of these; and a table made before the digest was
//! one, refused with its fix (PostgreSQL, MariaDB) or taken as it is (SQLite).

use std::collections::BTreeMap;

use idem_core::{Error, ErrorKind, Idempotent, Outcome};
use idem_tests::backends::{fresh_backends, Db};
use serde::{Deserialize, Serialize};

/// A book as first written: its title frozen.
#[derive(Clone, Debug, Serialize, Deserialize, Idempotent)]
#[idem(collection = "frozen_books")]
struct Book {
    #[idem(key)]
    isbn: String,
    #[idem(frozen)]
    title: String,
    #[idem(frozen)]
    edition: Option<String>,
    #[idem(frozen)]
    score: f64,
    #[idem(frozen)]
    tags: BTreeMap<String, Vec<f64>>,
    pages: i64,
    note: String,
}

/// The same table, read by a later version of the type that also freezes `pages`.
#[derive(Clone, Debug, Serialize, Deserialize, Idempotent)]
#[idem(collection = "frozen_books")]
struct BookPagesFrozen {
    #[idem(key)]
    isbn: String,
    #[idem(frozen)]
    title: String,
    #[idem(frozen)]
    edition: Option<String>,
    #[idem(frozen)]
    score: f64,
    #[idem(frozen)]
    tags: BTreeMap<String, Vec<f64>>,
    #[idem(frozen)]
    pages: i64,
    note: String,
}

fn book(isbn: &str) -> Book {
    Book {
        isbn: isbn.into(),
        title: format!("Title {isbn}"),
        edition: None,
        score: 0.1 + 0.2,
        tags: BTreeMap::from([("ratings".to_owned(), vec![1.5, 1e300, -0.0])]),
        pages: 320,
        note: "first".into(),
    }
}

impl Book {
    fn later(&self) -> BookPagesFrozen {
        BookPagesFrozen {
            isbn: self.isbn.clone(),
            title: self.title.clone(),
            edition: self.edition.clone(),
            score: self.score,
            tags: self.tags.clone(),
            pages: self.pages,
            note: self.note.clone(),
        }
    }
}

/// The SQL stores under test.
async fn sql_backends(test: &str) -> Vec<Db> {
    let mut backends = fresh_backends(test).await;
    backends.retain(Db::is_sql);
    backends
}

/// The field a write was refused for, as a frozen field changed.
fn refused_field(result: Result<Outcome, Error>) -> String {
    match result {
        Err(error) => match error.kind() {
            ErrorKind::FrozenFieldChanged { stored_name, .. } => stored_name.to_string(),
            other => panic!("refused otherwise: {other:?}"),
        },
        Ok(outcome) => panic!("not refused: {outcome:?}"),
    }
}

/// `hex` as a bytes literal in `db`'s SQL.
fn bytes(db: &Db, hex: &str) -> String {
    match db.is_postgres() {
        true => format!("decode('{hex}', 'hex')"),
        false => format!("X'{hex}'"),
    }
}

/// Sets `idemFrozen` of the book `isbn` to `value` (an SQL expression), as another tool would.
async fn set_digest(db: &Db, isbn: &str, value: &str) {
    let sql = format!(
        "UPDATE {} SET {} = {value} WHERE {} = '{isbn}'",
        db.quote("frozen_books"),
        db.quote("idemFrozen"),
        db.quote("isbn"),
    );
    db.run_raw(&sql, mongodb::bson::doc! {}).await;
}

/// The byte length of each book's stored `idemFrozen` (`None`: NULL), copied into its `note`
/// by plain SQL and read back, in isbn order.
async fn digest_lengths(db: &Db) -> Vec<Option<i64>> {
    let length = match db.is_postgres() {
        true => "octet_length",
        false => "length",
    };
    let sql = format!(
        "UPDATE {t} SET {n} = COALESCE(CAST({length}({d}) AS CHAR(8)), 'null')",
        t = db.quote("frozen_books"),
        n = db.quote("note"),
        d = db.quote("idemFrozen"),
    );
    let sql = match db.is_postgres() {
        true => sql.replace("AS CHAR(8)", "AS text"),
        false => sql,
    };
    db.run_raw(&sql, mongodb::bson::doc! {}).await;
    let mut stored = db.stored::<Book>().await;
    stored.sort_by_key(|row| row["isbn"].as_str().map(str::to_owned));
    stored
        .iter()
        .map(|row| row["note"].as_str().and_then(|note| note.parse().ok()))
        .collect()
}

#[tokio::test]
async fn a_field_made_frozen_since_converges_and_is_guarded_from_then_on() {
    for db in sql_backends("frozen_added").await {
        db.ensure::<Book>().await;
        let first = book("1");
        assert_eq!(db.upsert(&first).await.unwrap(), Outcome::Inserted, "{db}");
        let later = first.later();
        // The same content: nothing to write, whatever the digest.
        assert_eq!(db.upsert(&later).await.unwrap(), Outcome::Unchanged, "{db}");
        // The first change the values allow stores the later type's digest.
        let mut edited = later.clone();
        edited.note = "second".into();
        assert_eq!(db.upsert(&edited).await.unwrap(), Outcome::Updated, "{db}");
        let mut again = edited.clone();
        again.note = "third".into();
        assert_eq!(db.upsert(&again).await.unwrap(), Outcome::Updated, "{db}");
        let before = db.raw::<Book>().await;
        let mut paged = again.clone();
        paged.pages = 321;
        assert_eq!(refused_field(db.upsert(&paged).await), "pages", "{db}");
        let mut retitled = again.clone();
        retitled.title = "Another".into();
        assert_eq!(refused_field(db.upsert(&retitled).await), "title", "{db}");
        let report = db.upsert_many(&[paged, retitled]).await.unwrap();
        assert_eq!(report.refused(), 2, "{db}: {report}");
        assert_eq!(
            db.raw::<Book>().await,
            before,
            "{db}: the refusals wrote nothing"
        );
        // The earlier type, whose digest is not the stored one, still compares values.
        let mut earlier = first.clone();
        earlier.note = "fourth".into();
        assert_eq!(db.upsert(&earlier).await.unwrap(), Outcome::Updated, "{db}");
        let mut earlier_paged = earlier.clone();
        earlier_paged.pages = 1;
        earlier_paged.note = "fifth".into();
        // `pages` is not frozen for the earlier type.
        assert_eq!(
            db.upsert(&earlier_paged).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        assert_eq!(digest_lengths(&db).await, [Some(16)], "{db}");
    }
}

#[tokio::test]
async fn an_optional_frozen_field_is_set_once_then_refused() {
    for db in sql_backends("frozen_option").await {
        db.ensure::<Book>().await;
        let mut doc = book("2");
        assert_eq!(db.upsert(&doc).await.unwrap(), Outcome::Inserted, "{db}");
        doc.edition = Some("first".into());
        assert_eq!(db.upsert(&doc).await.unwrap(), Outcome::Updated, "{db}");
        assert_eq!(db.upsert(&doc).await.unwrap(), Outcome::Unchanged, "{db}");
        let mut other = doc.clone();
        other.edition = Some("second".into());
        assert_eq!(refused_field(db.upsert(&other).await), "edition", "{db}");
        let mut unset = doc.clone();
        unset.edition = None;
        assert_eq!(refused_field(db.upsert(&unset).await), "edition", "{db}");
        doc.note = "second".into();
        assert_eq!(db.upsert(&doc).await.unwrap(), Outcome::Updated, "{db}");
        assert_eq!(digest_lengths(&db).await, [Some(16)], "{db}");
    }
}

#[tokio::test]
async fn a_digest_changed_or_cleared_by_hand_compares_values() {
    for db in sql_backends("frozen_tampered").await {
        db.ensure::<Book>().await;
        let docs = [book("3"), book("4"), book("5")];
        for doc in &docs {
            assert_eq!(db.upsert(doc).await.unwrap(), Outcome::Inserted, "{db}");
        }
        set_digest(&db, "3", &bytes(&db, "00112233445566778899aabbccddeeff")).await;
        set_digest(&db, "4", "NULL").await;
        // Short, as no digest idem writes is.
        set_digest(&db, "5", &bytes(&db, "00")).await;
        let report = db.audit::<Book>().await;
        assert_eq!(report.digest_mismatch.count, 2, "{db}: {report:?}");
        for doc in &docs {
            assert_eq!(db.upsert(doc).await.unwrap(), Outcome::Unchanged, "{db}");
            let mut floats = doc.clone();
            floats.score = 0.3;
            assert_eq!(refused_field(db.upsert(&floats).await), "score", "{db}");
            let mut json = doc.clone();
            json.tags.insert("more".into(), vec![]);
            assert_eq!(refused_field(db.upsert(&json).await), "tags", "{db}");
            let mut edited = doc.clone();
            edited.note = "second".into();
            assert_eq!(db.upsert(&edited).await.unwrap(), Outcome::Updated, "{db}");
        }
        assert_eq!(digest_lengths(&db).await, [Some(16); 3], "{db}");
        let report = db.audit::<Book>().await;
        assert_eq!(report.digest_mismatch.count, 0, "{db}: {report:?}");
    }
}

#[tokio::test]
async fn a_batch_mixing_every_case_gives_what_single_writes_give() {
    for db in sql_backends("frozen_batch").await {
        db.ensure::<Book>().await;
        let stored: Vec<Book> = (10..16).map(|n| book(&n.to_string())).collect();
        db.upsert_many(&stored).await.unwrap();
        set_digest(&db, "11", &bytes(&db, "ffeeddccbbaa99887766554433221100")).await;
        set_digest(&db, "12", "NULL").await;
        let mut batch = stored.clone();
        // 10: unchanged. 11: tampered digest, note changed. 12: no digest, note changed.
        batch[1].note = "second".into();
        batch[2].note = "second".into();
        // 13: an optional frozen field set once. 14: a frozen float changed. 15: frozen JSON.
        batch[3].edition = Some("first".into());
        batch[4].score = 1.0;
        batch[5].tags.clear();
        // 16: new.
        batch.push(book("16"));
        let report = db.upsert_many(&batch).await.unwrap();
        let outcomes: Vec<String> = (report.outcomes().iter())
            .map(|result| match result {
                Ok(outcome) => format!("{outcome:?}"),
                Err(error) => match error.kind() {
                    ErrorKind::FrozenFieldChanged { stored_name, .. } => {
                        format!("refused {stored_name}")
                    }
                    other => format!("{other:?}"),
                },
            })
            .collect();
        assert_eq!(
            outcomes,
            [
                "Unchanged",
                "Updated",
                "Updated",
                "Updated",
                "refused score",
                "refused tags",
                "Inserted"
            ],
            "{db}"
        );
        // The later type over the same rows, in one batch: its digest is none of theirs.
        let later: Vec<BookPagesFrozen> = batch.iter().map(Book::later).collect();
        let report = db.upsert_many(&later).await.unwrap();
        assert_eq!(report.refused(), 2, "{db}: {:?}", report.outcomes());
        let lengths = digest_lengths(&db).await;
        assert!(
            lengths.iter().all(|length| *length == Some(16)),
            "{db}: {lengths:?}"
        );
    }
}

/// A table of `Book` as an earlier release made it: `idemFrozen` a JSON column of digests by
/// field name (SQLite: `TEXT`), its rows' digests in that form.
async fn old_form(db: &Db) {
    let table = db.quote("frozen_books");
    let column = db.quote("idemFrozen");
    let old = r#"{"title":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}"#;
    let sql = match db {
        Db::Postgres { .. } => {
            format!("ALTER TABLE {table} ALTER COLUMN {column} TYPE jsonb USING '{old}'::jsonb")
        }
        Db::Mysql { .. } => format!(
            "UPDATE {table} SET {column} = NULL; ALTER TABLE {table} MODIFY {column} JSON; \
             UPDATE {table} SET {column} = '{old}'"
        ),
        _ => format!(
            "ALTER TABLE {table} DROP COLUMN {column}; ALTER TABLE {table} ADD COLUMN {column} \
             TEXT; UPDATE {table} SET {column} = '{old}'"
        ),
    };
    db.run_raw(&sql, mongodb::bson::doc! {}).await;
}

#[tokio::test]
async fn a_table_made_before_names_its_fix_and_converges_after_it() {
    for db in sql_backends("frozen_old_table").await {
        // The layouts' variants share the plain table's column types.
        if db.is_partitioned() || db.has_write_marker() {
            continue;
        }
        db.ensure::<Book>().await;
        let docs = [book("20"), book("21")];
        db.upsert_many(&docs).await.unwrap();
        old_form(&db).await;
        let db = db.unlearned().await;
        if !db.is_sqlite() {
            let error = db.upsert(&docs[0]).await.unwrap_err();
            let ErrorKind::SchemaMismatch { problem, .. } = error.kind() else {
                panic!("{db}: {error}");
            };
            assert!(problem.contains("\"idemFrozen\""), "{db}: {problem}");
            let (_, fix) = problem.split_once("expected ").unwrap();
            let (_, fix) = fix.split_once(": ").unwrap();
            assert!(fix.contains("NULL"), "{db}: {fix}");
            db.run_raw(fix, mongodb::bson::doc! {}).await;
        }
        let db = db.unlearned().await;
        for doc in &docs {
            assert_eq!(db.upsert(doc).await.unwrap(), Outcome::Unchanged, "{db}");
        }
        let mut retitled = docs[0].clone();
        retitled.title = "Another".into();
        assert_eq!(refused_field(db.upsert(&retitled).await), "title", "{db}");
        let mut edited = docs[1].clone();
        edited.note = "second".into();
        assert_eq!(db.upsert(&edited).await.unwrap(), Outcome::Updated, "{db}");
        let lengths = digest_lengths(&db).await;
        let old = match db.is_sqlite() {
            // The old text, in bytes.
            true => lengths[0],
            false => None,
        };
        assert_eq!(lengths, [old, Some(16)], "{db}");
    }
}
