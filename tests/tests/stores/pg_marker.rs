//! The PostgreSQL store that tells inserted rows by the write marker (issue 44, item 2:
//! `Store::with_write_marker`), as CockroachDB, YugabyteDB and other engines without `xmax` need
//! it, on every PostgreSQL server under test: no statement it sends names `xmax` or `old`, nor,
//! auditing and adopting, the system columns `ctid`, `xmin` and `tableoid` (every primitive's
//! statements are captured from the `idem::sql` trace events and read word by word); its answers
//! and reports are a plain store's; its table check asks for the marker column, naming the fix;
//! and a table made with or without the option serves both stores.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::ThreadId;

use idem_core::postgres::{Connection, PartitionBy, Session, Store};
use idem_core::sqlx::PgConnection;
use idem_core::{Change, Error, ErrorKind, Idempotent, OpId, Outcome};
use idem_tests::backends::{adopt_during_an_edit, fresh_schema, postgres_servers, sqlx_connection};
use idem_tests::fixtures::{account, entry, post, Account, Entry, Payment, Playlist, Post, Track};
use idem_tests::fixtures::{ingested_post, IngestedPost};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Every statement text the store sends, in order, with the thread that sent it, for the
/// threads that asked for it: one subscriber for the whole process, of which each test reads its
/// own thread's statements (a subscriber set per thread missed statements while tests ran side by
/// side). Only those threads' statements are kept: every other test of the binary sends its own,
/// which would pile up for the whole run.
#[derive(Clone, Default)]
struct Statements(Arc<Mutex<Captured>>);

/// The threads capturing, and what they sent.
#[derive(Default)]
struct Captured {
    threads: HashSet<ThreadId>,
    sent: Vec<(ThreadId, String)>,
}

impl Statements {
    /// The process's subscriber, set on first use, capturing this thread's statements from now.
    fn capture() -> Statements {
        static CAPTURE: OnceLock<Statements> = OnceLock::new();
        let statements = CAPTURE.get_or_init(|| {
            let statements = Statements::default();
            let subscriber = tracing_subscriber::registry().with(statements.clone());
            tracing::subscriber::set_global_default(subscriber).unwrap();
            statements
        });
        (statements.0.lock().unwrap_or_else(PoisonError::into_inner))
            .threads
            .insert(std::thread::current().id());
        statements.clone()
    }

    /// The statements this thread sent since the last call.
    fn take(&self) -> Vec<String> {
        let mut captured = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (mine, others) = (std::mem::take(&mut captured.sent).into_iter())
            .partition(|(thread, _)| *thread == std::thread::current().id());
        captured.sent = others;
        mine.into_iter().map(|(_, sql)| sql).collect()
    }

    /// The statements this thread sent since the last call that name a word of
    /// [`server_signals`], with those words; more than `least` were sent, or the capture
    /// missed them.
    fn take_signals(&self, least: usize, what: &str) -> Vec<(String, Vec<String>)> {
        let sent = self.take();
        assert!(sent.len() > least, "{what}: {} statements", sent.len());
        (sent.into_iter())
            .map(|sql| {
                let words = server_signals(&sql);
                (sql, words)
            })
            .filter(|(_, words)| !words.is_empty())
            .collect()
    }
}

/// The `sql` field of an event.
struct Sql(Option<String>);

impl Visit for Sql {
    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "sql" {
            self.0 = Some(value.to_owned());
        }
    }
}

impl<S: Subscriber> Layer<S> for Statements {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() != "idem::sql" {
            return;
        }
        let thread = std::thread::current().id();
        let mut captured = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !captured.threads.contains(&thread) {
            return;
        }
        let mut sql = Sql(None);
        event.record(&mut sql);
        if let Some(sql) = sql.0 {
            captured.sent.push((thread, sql));
        }
    }
}

/// The words of `sql` that name what engines without `xmax` lack: how a server tells inserted
/// rows, `xmax` or `old` (`RETURNING old`, `old."_id"`), and the system columns an audit or an
/// adoption could place or guard a row by (`ctid`, `xmin`, `tableoid`), read as SQL words: a
/// quoted name is a name, not the word (a column named `"old"` is not `old`), and `holder` is
/// not `old`.
fn server_signals(sql: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut rest = sql;
    while let Some(at) = rest.find(|c: char| c.is_alphanumeric() || c == '_' || c == '"') {
        rest = &rest[at..];
        let end = if let Some(quoted) = rest.strip_prefix('"') {
            quoted.find('"').map_or(rest.len(), |end| end + 2)
        } else {
            rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len())
        };
        let word = &rest[..end];
        let lower = word.to_lowercase();
        let system = matches!(
            lower.as_str(),
            "xmax" | "old" | "ctid" | "xmin" | "tableoid"
        );
        if system && !word.starts_with('"') {
            words.push(word.to_owned());
        }
        rest = &rest[end..];
    }
    words
}

/// What a call answered, as text that two stores' answers compare by.
fn shown<T: std::fmt::Display>(answer: &Result<T, Error>) -> String {
    match answer {
        Ok(answer) => answer.to_string(),
        Err(error) => format!("{:?}", error.kind()),
    }
}

/// Every primitive but the audit, the adoption and a caller's transaction, through `session`
/// (of either driver), each answer shown in order.
async fn every_write<C: Connection>(session: &Session<'_, C>) -> Vec<String> {
    let mut answers = Vec::new();
    session.ensure_schema::<Post>().await.unwrap();
    session.ensure_schema::<Entry>().await.unwrap();
    session.ensure_schema::<Account>().await.unwrap();
    session.ensure_schema::<Payment>().await.unwrap();
    session.ensure_schema::<Playlist>().await.unwrap();
    let first = post();
    let changed = Post {
        title: "Hello again".into(),
        ..post()
    };
    let frozen = Post {
        author_id: "bob".into(),
        ..changed.clone()
    };
    for doc in [&first, &first, &changed, &frozen] {
        answers.push(shown(&session.upsert(doc).await));
    }
    // A batch of fresh rows (the plain insert), then the same rows again and changed (the
    // lookup, then the write), then one document three times in one call (rounds).
    let fresh: Vec<Post> = (0..80)
        .map(|n| Post {
            slug: format!("p{n}"),
            ..post()
        })
        .collect();
    let mut again = fresh.clone();
    for doc in again.iter_mut().step_by(7) {
        doc.body = "edited".into();
    }
    let copies = vec![
        Post {
            slug: "copies".into(),
            ..post()
        },
        Post {
            slug: "copies".into(),
            body: "second".into(),
            ..post()
        },
        Post {
            slug: "copies".into(),
            body: "third".into(),
            ..post()
        },
    ];
    for batch in [&fresh, &again, &copies, &copies] {
        let report = session.upsert_many(batch).await.unwrap();
        answers.extend(report.outcomes().iter().map(shown));
    }
    // `insert_new`, `delete`, `delete_by_id`.
    let new = [entry("e1", 1, "one"), entry("e2", 1, "two")];
    let report = session.insert_new(&new).await.unwrap();
    answers.push(report.to_string());
    let report = session.insert_new(&new).await.unwrap();
    answers.push(report.to_string());
    let gone = Entry {
        deleted_at: Some(5),
        ..entry("e3", 1, "three")
    };
    for _ in 0..2 {
        answers.push(shown(&session.delete(&gone).await));
    }
    let id = new[0].id().unwrap();
    for _ in 0..2 {
        answers.push(shown(&session.delete_by_id::<Entry, _>(id, &7).await));
    }
    // `apply_once`, `record`, `push`, the reads.
    let ada = account("ada");
    answers.push(shown(&session.upsert(&ada).await));
    let op = OpId::new("credit-1");
    for _ in 0..2 {
        let changes = [Change::add("balance", 5)];
        let applied = session
            .apply_once::<Account>(ada.id().unwrap(), &op, &changes)
            .await;
        answers.push(shown(&applied));
    }
    let payment = Payment {
        request_key: "req-1".into(),
        amount_cents: 100,
    };
    for _ in 0..2 {
        // Without the event's id, which is random.
        let recorded = shown(&session.record(&payment).await);
        answers.push(recorded.split(' ').next().unwrap_or_default().to_owned());
    }
    let playlist = Playlist {
        name: "road".into(),
        tracks: Vec::new(),
    };
    answers.push(shown(&session.upsert(&playlist).await));
    let track = Track {
        track: "intro".into(),
    };
    for _ in 0..2 {
        answers.push(shown(&playlist.push_tracks(session, &track).await));
    }
    let read = session.get::<Post>(first.id().unwrap()).await.unwrap();
    answers.push(format!("{:?}", read.map(|post| post.title)));
    let found = session.find::<Post>(&first.natural_key()).await.unwrap();
    answers.push(format!("{:?}", found.map(|post| post.title)));
    answers
}

/// A post written inside the caller's transaction, where each write is in a savepoint.
fn post_in_a_transaction() -> Post {
    Post {
        slug: "in-tx".into(),
        ..post()
    }
}

/// Every primitive through a tokio-postgres `client` ([`every_write`]), then the audit, the
/// adoption and two writes inside a transaction of it.
async fn every_primitive(store: &Store, client: &mut tokio_postgres::Client) -> Vec<String> {
    let mut answers = every_write(&store.on(&*client)).await;
    let audit = store.audit::<Post, _>(&*client).await.unwrap();
    answers.push(format!("{:?}", audit.is_clean()));
    let adopted = store.adopt::<Post, _>(&*client).await.unwrap();
    answers.push(adopted.to_string());
    let tx = client.transaction().await.unwrap();
    for _ in 0..2 {
        answers.push(shown(&store.upsert(&tx, &post_in_a_transaction()).await));
    }
    tx.commit().await.unwrap();
    answers
}

/// [`every_primitive`] through a sqlx `connection`.
async fn every_primitive_through_sqlx(store: &Store, connection: &mut PgConnection) -> Vec<String> {
    let mut answers = every_write(&store.on(&mut *connection)).await;
    let audit = store.audit::<Post, _>(&mut *connection).await.unwrap();
    answers.push(format!("{:?}", audit.is_clean()));
    let adopted = store.adopt::<Post, _>(&mut *connection).await.unwrap();
    answers.push(adopted.to_string());
    let mut tx = idem_core::sqlx::Connection::begin(&mut *connection)
        .await
        .unwrap();
    for _ in 0..2 {
        answers.push(shown(
            &store.upsert(&mut *tx, &post_in_a_transaction()).await,
        ));
    }
    tx.commit().await.unwrap();
    answers
}

/// The stores each server is written by here: plain and partitioned, with and without the
/// marker.
fn stores() -> [(&'static str, Store); 4] {
    let by = PartitionBy::Hash { partitions: 4 };
    // Every batch of two rows or more takes the lookup and the plain insert.
    let base = || Store::new().with_shortcuts_from(2);
    [
        ("plain", base()),
        ("marker", base().with_write_marker(true)),
        ("partitioned", base().with_partitions(by)),
        (
            "partitioned-marker",
            base().with_partitions(by).with_write_marker(true),
        ),
    ]
}

/// Every statement a store `with_write_marker` sends, over a run of every primitive (plain and
/// partitioned tables, inside a transaction and out; the audit and the adoption among them),
/// through tokio-postgres and through sqlx, is free of `xmax`, `old` and the system columns,
/// and its answers are the store's without the option. The same run without the option does
/// name them: the test reads the statements it means to.
#[tokio::test]
async fn no_statement_of_the_marker_store_names_xmax_or_old() {
    let statements = Statements::capture();
    for (label, uri) in postgres_servers() {
        let mut plain_answers = None;
        for ((variant, store), driver) in (stores().into_iter())
            .flat_map(|store| [(store.clone(), "tokio-postgres"), (store, "sqlx")])
        {
            let test = format!(
                "marker_words_{}_{}",
                variant.replace('-', "_"),
                &driver[..4]
            );
            let (schema, mut client) = fresh_schema(&uri, "mw", &test).await;
            statements.take();
            let answers = match driver {
                "sqlx" => {
                    let mut connection = sqlx_connection(&uri, &schema).await;
                    every_primitive_through_sqlx(&store, &mut connection).await
                }
                _ => every_primitive(&store, &mut client).await,
            };
            let variant = format!("{variant} through {driver}");
            let signals = statements.take_signals(40, &format!("{label} {variant}"));
            match variant.contains("marker") {
                true => assert!(
                    signals.is_empty(),
                    "{label} {variant}: statements naming xmax or old: {signals:#?}"
                ),
                // The partitioned table before 18 tells inserted rows by its snapshot instead.
                false if variant.starts_with("partitioned ") && label == "pg15" => {}
                false => assert!(!signals.is_empty(), "{label} {variant}: no xmax, no old"),
            }
            let plain = plain_answers.get_or_insert_with(|| answers.clone());
            assert_eq!(&answers, plain, "{label} {variant}");
        }
        let plain = plain_answers.unwrap();
        assert_eq!(plain[..3], ["Inserted", "Unchanged", "Updated"], "{label}");
        assert!(
            plain[3].starts_with("FrozenFieldChanged"),
            "{label}: {}",
            plain[3]
        );
    }
}

#[test]
fn the_words_read_are_sql_words() {
    assert_eq!(server_signals("RETURNING (t.xmax = 0)"), ["xmax"]);
    assert_eq!(server_signals("RETURNING (old.\"_id\" IS NULL)"), ["old"]);
    assert_eq!(
        server_signals("SELECT t.\"old\", t.\"xmax\", holder FROM told"),
        [""; 0]
    );
    assert_eq!(server_signals("RETURNING OLD.*, Xmax"), ["OLD", "Xmax"]);
    assert!(server_signals("SELECT \"idemWrite\" = 'i:' FROM t").is_empty());
    assert_eq!(
        server_signals("ORDER BY t.tableoid, t.ctid WHERE t.xmin::text = $2"),
        ["tableoid", "ctid", "xmin"]
    );
}

/// The number of rows of `table`.
async fn count(client: &tokio_postgres::Client, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {table}");
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

/// The stored write marker of the row holding `slug`.
async fn marker_of(client: &tokio_postgres::Client, slug: &str) -> Option<String> {
    let sql = "SELECT \"idemWrite\" FROM posts WHERE slug = $1";
    client.query_one(sql, &[&slug]).await.unwrap().get(0)
}

/// A table made without the option is refused by a store with it, naming the column and its
/// fix, with nothing written; fixed, it is written; and it stays the plain store's too (the
/// column ignored, written or not by either in any order), answers told right whichever store
/// wrote the row last. A table made with the option serves a plain store.
#[tokio::test]
async fn the_table_check_asks_for_the_marker_column() {
    for (label, uri) in postgres_servers() {
        let (_schema, client) = fresh_schema(&uri, "mc", "marker_check").await;
        let plain = Store::new();
        let marker = Store::new().with_write_marker(true);
        plain.ensure_table::<Post, _>(&client).await.unwrap();
        let first = post();
        for store in [&marker, &marker.unlearned()] {
            let refused = store.upsert(&client, &first).await.unwrap_err();
            let ErrorKind::SchemaMismatch { problem, .. } = refused.kind() else {
                panic!("{label}: {refused:?}");
            };
            assert!(
                problem.contains(
                    "column \"idemWrite\" is missing (expected text): \
                     ALTER TABLE \"posts\" ADD COLUMN \"idemWrite\" text"
                ),
                "{label}: {problem}"
            );
            assert_eq!(count(&client, "posts").await, 0, "{label}");
        }
        let refused = marker.ensure_table::<Post, _>(&client).await.unwrap_err();
        assert!(
            matches!(refused.kind(), ErrorKind::SchemaMismatch { .. }),
            "{label}"
        );
        // The plain store writes on, marker or not.
        assert_eq!(
            plain.upsert(&client, &first).await.unwrap(),
            Outcome::Inserted
        );
        client
            .batch_execute("ALTER TABLE \"posts\" ADD COLUMN \"idemWrite\" text")
            .await
            .unwrap();
        let marker = marker.unlearned();
        let changed = |body: &str| Post {
            body: body.into(),
            ..post()
        };
        // A row the plain store inserted (no marker), updated by the marker store.
        assert_eq!(
            marker.upsert(&client, &first).await.unwrap(),
            Outcome::Unchanged
        );
        assert_eq!(
            marker.upsert(&client, &changed("a")).await.unwrap(),
            Outcome::Updated
        );
        assert_eq!(
            marker_of(&client, "hello-world").await.as_deref(),
            Some("u:")
        );
        // A row the marker store inserted, updated by the plain store (the marker left as
        // the insert wrote it), then by the marker store: updated each time.
        let other = Post {
            slug: "other".into(),
            ..post()
        };
        assert_eq!(
            marker.upsert(&client, &other).await.unwrap(),
            Outcome::Inserted
        );
        assert_eq!(marker_of(&client, "other").await.as_deref(), Some("i:"));
        let edited = Post {
            body: "edited".into(),
            ..other.clone()
        };
        assert_eq!(
            plain.upsert(&client, &edited).await.unwrap(),
            Outcome::Updated
        );
        assert_eq!(marker_of(&client, "other").await.as_deref(), Some("i:"));
        assert_eq!(
            marker.upsert(&client, &other).await.unwrap(),
            Outcome::Updated
        );
        assert_eq!(
            plain.upsert(&client, &edited).await.unwrap(),
            Outcome::Updated
        );
        let report = marker
            .upsert_many(&client, &[other.clone(), edited.clone()])
            .await;
        let outcomes: Vec<String> = report.unwrap().outcomes().iter().map(shown).collect();
        assert_eq!(outcomes, ["Updated", "Updated"], "{label}");
        // Read back as the type: the column is none of its fields.
        let read = marker.get::<Post, _>(&client, other.id().unwrap()).await;
        assert_eq!(read.unwrap(), Some(edited), "{label}");
        assert!(
            marker.audit::<Post, _>(&client).await.unwrap().is_clean(),
            "{label}"
        );

        // A table the marker store made: the plain store writes it as its own.
        let (_schema, client) = fresh_schema(&uri, "mm", "marker_made").await;
        marker.ensure_table::<Post, _>(&client).await.unwrap();
        assert_eq!(
            marker_of_column(&client).await.as_deref(),
            Some("text"),
            "{label}"
        );
        plain.ensure_table::<Post, _>(&client).await.unwrap();
        assert_eq!(
            plain.upsert(&client, &first).await.unwrap(),
            Outcome::Inserted
        );
        assert_eq!(
            marker.upsert(&client, &first).await.unwrap(),
            Outcome::Unchanged
        );
        assert_eq!(
            marker.upsert(&client, &changed("b")).await.unwrap(),
            Outcome::Updated
        );
        assert_eq!(
            plain.upsert(&client, &changed("c")).await.unwrap(),
            Outcome::Updated
        );
        assert_eq!(count(&client, "posts").await, 1, "{label}");
    }
}

/// The type of `posts."idemWrite"`, if the column exists.
async fn marker_of_column(client: &tokio_postgres::Client) -> Option<String> {
    let sql = "SELECT data_type::text FROM information_schema.columns \
               WHERE table_schema = current_schema() AND table_name = 'posts' \
               AND column_name = 'idemWrite'";
    client
        .query_opt(sql, &[])
        .await
        .unwrap()
        .map(|row| row.get(0))
}

/// The migration's statement holds the column, and the check of the table it makes passes;
/// `create_table_sql` is unchanged by the option.
#[tokio::test]
async fn the_migration_holds_the_marker_column() {
    let plain = Store::create_table_sql::<Post>();
    let marked = Store::create_write_marker_table_sql::<Post>();
    assert!(!plain.contains("idemWrite"), "{plain}");
    assert!(marked.contains("\"idemWrite\" text"), "{marked}");
    for (label, uri) in postgres_servers() {
        let (_schema, client) = fresh_schema(&uri, "mg", "marker_migration").await;
        client.batch_execute(&marked).await.unwrap();
        let store = Store::new().with_write_marker(true);
        store.ensure_table::<Post, _>(&client).await.unwrap();
        assert_eq!(
            store.upsert(&client, &post()).await.unwrap(),
            Outcome::Inserted,
            "{label}"
        );
    }
}

/// Through sqlx, the same statements: a store with the option tells inserts and updates apart
/// there too, one write at a time, in batches (one document three times in one call) and inside
/// a transaction, and stores the marker of the last write.
#[tokio::test]
async fn the_marker_store_answers_through_sqlx() {
    for (label, uri) in postgres_servers() {
        let (schema, client) = fresh_schema(&uri, "mx", "marker_sqlx").await;
        let mut connection = sqlx_connection(&uri, &schema).await;
        let store = Store::new().with_write_marker(true);
        store
            .ensure_table::<Post, _>(&mut connection)
            .await
            .unwrap();
        let first = post();
        let changed = Post {
            body: "changed".into(),
            ..post()
        };
        let mut answers = Vec::new();
        for doc in [&first, &first, &changed] {
            answers.push(shown(&store.upsert(&mut connection, doc).await));
        }
        let copies: Vec<Post> = ["a", "b", "b", "c"]
            .into_iter()
            .map(|body| Post {
                slug: "copies".into(),
                body: body.into(),
                ..post()
            })
            .collect();
        let report = store.upsert_many(&mut connection, &copies).await.unwrap();
        answers.extend(report.outcomes().iter().map(shown));
        let mut tx = idem_core::sqlx::Connection::begin(&mut connection)
            .await
            .unwrap();
        let later = Post {
            slug: "in-tx".into(),
            ..post()
        };
        answers.push(shown(&store.upsert(&mut tx, &later).await));
        answers.push(shown(&store.upsert(&mut tx, &changed).await));
        tx.commit().await.unwrap();
        assert_eq!(
            answers,
            [
                "Inserted",
                "Unchanged",
                "Updated",
                "Inserted",
                "Updated",
                "Unchanged",
                "Updated",
                "Inserted",
                "Unchanged"
            ],
            "{label}"
        );
        assert_eq!(
            marker_of(&client, "hello-world").await.as_deref(),
            Some("u:")
        );
        assert_eq!(marker_of(&client, "in-tx").await.as_deref(), Some("i:"));
    }
}

/// Inserts a post as another tool would: under `id` (`None`: NULL), without idem's hash or
/// digests; a `None` title is a NULL the type cannot read.
async fn insert_as_another_tool(
    client: &tokio_postgres::Client,
    id: Option<&str>,
    slug: &str,
    title: Option<&str>,
) {
    let stored = ingested_post(slug, "");
    let sql = r#"INSERT INTO posts ("_id", slug, lang, "publishedAt", title, "fetchedAt")
                 VALUES ($1, $2, $3, $4, $5, $6)"#;
    let values: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
        &id,
        &stored.slug,
        &stored.lang,
        &stored.published_at,
        &title,
        &stored.fetched_at,
    ];
    client.execute(sql, &values).await.unwrap();
}

fn derived(slug: &str) -> String {
    ingested_post(slug, "").id().unwrap().to_string()
}

/// Every post's id, slug and title, in slug order.
async fn posts(client: &tokio_postgres::Client) -> Vec<(Option<String>, String, Option<String>)> {
    let sql = r#"SELECT "_id", slug, title FROM posts ORDER BY slug"#;
    let rows = client.query(sql, &[]).await.unwrap();
    rows.iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect()
}

/// `text` with each row's place, which a plain store reports as its `ctid` (and partition) and a
/// marker store as its natural key, written `<place>`.
fn placeless(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest
        .find("at ctid (")
        .or_else(|| rest.find("at natural key ["))
    {
        let close = if rest[at..].starts_with("at ctid") {
            ')'
        } else {
            ']'
        };
        let mut end = at + rest[at..].find(close).unwrap() + 1;
        // In a partition of a partitioned table, the partition's name.
        if rest[end..].starts_with(" in ") {
            end += rest[end..].find(')').unwrap();
        }
        out.push_str(&rest[..at]);
        out.push_str("at <place>");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Makes `table`'s `_id` nullable, as a migration that added it to a table with an id of its
/// own may leave it: no primary key, a unique constraint on `unique` (`_id`, and the partition
/// columns on a partitioned table).
async fn nullable_id(client: &tokio_postgres::Client, table: &str, unique: &str) {
    let sql = format!(
        r#"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey;
           ALTER TABLE {table} ALTER COLUMN "_id" DROP NOT NULL;
           ALTER TABLE {table} ADD CONSTRAINT {table}_id_unique UNIQUE ({unique})"#
    );
    client.batch_execute(&sql).await.unwrap();
}

/// A table another tool filled, as a migration left it (`_id` nullable and unique, the write
/// marker column added): rows under legacy ids, an orphan, a row that does not read as a post
/// holding the id another row derives, and rows without an `_id`, one of them unreadable and
/// one whose derived id an unreadable row holds.
async fn taken_over_table(uri: &str, test: &str) -> (String, tokio_postgres::Client) {
    let (schema, client) = fresh_schema(uri, "mk", test).await;
    let marker = Store::new().with_write_marker(true);
    marker
        .ensure_table::<IngestedPost, _>(&client)
        .await
        .unwrap();
    nullable_id(&client, "posts", r#""_id""#).await;
    let rows: [(Option<String>, &str, Option<&str>); 11] = [
        (Some("legacy-1".into()), "legacy", Some("Legacy")),
        (Some("legacy-2".into()), "other", Some("Other")),
        (Some(derived("old-slug")), "renamed", Some("Renamed")),
        (Some(derived("blocked")), "unreadable", None),
        (Some("legacy-3".into()), "blocked", Some("Blocked")),
        (Some(derived("held-no-id")), "unreadable-holder", None),
        // In natural-key order, which is also where they are (`ctid`): the order in which the
        // plain store reads them, and the marker store by their natural key.
        (None, "first", Some("First")),
        (None, "held-no-id", Some("Held")),
        (None, "second", Some("Second")),
        (None, "unreadable-no-id", None),
        (Some(derived("already")), "already", Some("Already")),
    ];
    for (id, slug, title) in &rows {
        insert_as_another_tool(&client, id.as_deref(), slug, *title).await;
    }
    (schema, client)
}

/// The audit and the adoption of a table another tool filled, by a store `with_write_marker`,
/// name no system column (every statement captured and read word by word), and their reports
/// are a plain store's on the same rows, but for where a row without an `_id` is: its natural
/// key, where the plain store reads its `ctid`. Rows stay as the plain store leaves them.
#[tokio::test]
async fn audit_and_adopt_name_no_system_column_and_report_as_the_plain_store() {
    let statements = Statements::capture();
    let model = &IngestedPost::MODEL;
    for (label, uri) in postgres_servers() {
        let mut runs = Vec::new();
        for (variant, store) in [
            ("plain", Store::new()),
            ("marker", Store::new().with_write_marker(true)),
        ] {
            let (_schema, client) = taken_over_table(&uri, &format!("takeover_{variant}")).await;
            statements.take();
            let mut run = Vec::new();
            let audit = store.audit::<IngestedPost, _>(&client).await.unwrap();
            // legacy-1, legacy-2, legacy-3 and the four rows without an `_id`.
            assert_eq!(audit.legacy_ids.count, 7, "{label} {variant}: {audit}");
            let place = match variant {
                "plain" => "(no _id, at ctid (",
                _ => "(no _id, at natural key [\"first\",\"en\"])",
            };
            assert!(
                audit.to_string().contains(place),
                "{label} {variant}: {audit}"
            );
            run.push(format!("{audit:?}"));
            let audit = store
                .audit_model(&client, model, &[], |_| {})
                .await
                .unwrap();
            run.push(format!("{audit:?}"));
            let adopted = store.adopt::<IngestedPost, _>(&client).await.unwrap();
            // legacy-1, legacy-2, renamed, first, second.
            assert_eq!(adopted.moved.count, 5, "{label} {variant}: {adopted}");
            assert_eq!(adopted.failed.count, 5, "{label} {variant}: {adopted}");
            run.push(format!("{adopted:?}"));
            run.push(format!("{:?}", posts(&client).await));
            let audit = store.audit::<IngestedPost, _>(&client).await.unwrap();
            run.push(format!("{audit:?}"));
            let again = store.adopt::<IngestedPost, _>(&client).await.unwrap();
            assert_eq!(again.moved.count, 0, "{label} {variant}: {again}");
            run.push(format!("{again:?}"));
            // Readable now: the unreadable rows move, then the rows whose ids they held.
            let readable = "UPDATE posts SET title = 'Readable' WHERE title IS NULL";
            client.execute(readable, &[]).await.unwrap();
            let options = Default::default();
            let last = store
                .adopt_model(&client, model, &[], options)
                .await
                .unwrap();
            run.push(format!("{last:?}"));
            let last = store.adopt::<IngestedPost, _>(&client).await.unwrap();
            assert!(last.is_complete(), "{label} {variant}: {last}");
            run.push(format!("{last:?}"));
            let audit = store.audit::<IngestedPost, _>(&client).await.unwrap();
            assert_eq!(
                audit.legacy_ids.count + audit.orphans.count,
                0,
                "{label} {variant}: {audit}"
            );
            run.push(format!("{:?}", posts(&client).await));
            let named = statements.take_signals(30, &format!("{label} {variant}"));
            match variant {
                "marker" => assert!(named.is_empty(), "{label}: {named:#?}"),
                _ => assert!(!named.is_empty(), "{label}: the plain store reads ctid"),
            }
            runs.push(run);
        }
        for (plain, marker) in runs[0].iter().zip(&runs[1]) {
            assert_eq!(placeless(plain), placeless(marker), "{label}");
        }
    }
}

/// A store `with_write_marker` adopting a table while writers upsert every key, half of its rows
/// under legacy ids and half without an `_id`: each writer is refused while its row is not
/// moved, as before adoption, and judged as usual once it is; each key ends held by one row,
/// under its derived id, with a title a writer stored last (or the legacy one). Run twice, the
/// adoption moves nothing the second time.
#[tokio::test]
async fn writers_racing_the_marker_stores_adoption_never_fork_or_lose_a_document() {
    const KEYS: usize = 40;
    const WRITERS: usize = 3;
    let store = Store::new().with_write_marker(true);
    for (label, uri) in postgres_servers() {
        let (schema, client) = taken_over_table(&uri, "race").await;
        client.execute("DELETE FROM posts", &[]).await.unwrap();
        for n in 0..KEYS {
            let id = (n % 2 == 0).then(|| format!("legacy-{n:02}"));
            let slug = format!("p{n:02}");
            insert_as_another_tool(&client, id.as_deref(), &slug, Some("Legacy")).await;
        }
        let (barrier, writers) =
            crate::postgres_adopt::racing_writers(&uri, &schema, &store, KEYS, WRITERS).await;
        barrier.wait().await;
        let report = store.adopt::<IngestedPost, _>(&client).await.unwrap();
        assert!(report.is_complete(), "{label}: {report}");
        assert_eq!(report.moved.count, KEYS as u64, "{label}: {report}");
        let mut written = Vec::new();
        for writer in writers {
            written.push(writer.await.unwrap());
        }
        let after = posts(&client).await;
        assert_eq!(after.len(), KEYS, "{label}: one row per key");
        for (n, (id, slug, title)) in after.iter().enumerate() {
            assert_eq!(
                id.as_deref(),
                Some(derived(slug).as_str()),
                "{label}: {slug}"
            );
            let last: Vec<&String> = written.iter().filter_map(|w| w[n].as_ref()).collect();
            let title = title.clone().unwrap_or_default();
            assert!(
                (last.is_empty() && title == "Legacy") || last.contains(&&title),
                "{label}: {slug} holds {title:?}, writers stored last {last:?}"
            );
        }
        let again = store.adopt::<IngestedPost, _>(&client).await.unwrap();
        assert_eq!(
            again.moved.count + again.failed.count,
            0,
            "{label}: {again}"
        );
    }
}

/// Another tool edits a row between the marker store's read and its move: the move, waiting on
/// the edit's row lock, then finds the row other than it read (its whole row is its version),
/// moves nothing, reads it again and moves it with the hash of the edited content.
#[tokio::test]
async fn a_row_edited_while_the_marker_store_moves_it_is_moved_as_edited() {
    let store = Store::new().with_write_marker(true);
    for (label, uri) in postgres_servers() {
        let (schema, client) = taken_over_table(&uri, "edited").await;
        client.execute("DELETE FROM posts", &[]).await.unwrap();
        insert_as_another_tool(&client, Some("legacy-1"), "legacy", Some("Legacy")).await;
        let edit = r#"UPDATE posts SET title = 'Edited' WHERE "_id" = 'legacy-1'"#;
        let report =
            adopt_during_an_edit::<IngestedPost>(&store, &client, &uri, &schema, edit).await;
        assert_eq!(report.moved.count, 1, "{label}: {report}");
        let edited = ingested_post("legacy", "Edited");
        assert_eq!(
            store.upsert(&client, &edited).await.unwrap(),
            Outcome::Unchanged,
            "{label}: the stored hash is the edited content's"
        );
    }
}

/// Inside the caller's transaction the marker store's moves are the transaction's: rolled back,
/// nothing moved; committed, every row that can move is under its derived id, and the
/// transaction stays usable after the row whose derived id another row holds. Through sqlx,
/// the same adoption. A table partitioned by the natural key, written by a store with both
/// options, with rows without an `_id` in its partitions, is adopted as a plain partitioned
/// store adopts it.
#[tokio::test]
async fn the_marker_stores_adoption_in_a_transaction_and_on_a_partitioned_table() {
    let store = Store::new().with_write_marker(true);
    for (label, uri) in postgres_servers() {
        let (_schema, mut client) = taken_over_table(&uri, "in_tx").await;
        let before = posts(&client).await;
        let tx = client.transaction().await.unwrap();
        let report = store.adopt::<IngestedPost, _>(&tx).await.unwrap();
        assert_eq!(report.moved.count, 5, "{label}: {report}");
        tx.rollback().await.unwrap();
        assert_eq!(posts(&client).await, before, "{label}: rolled back");
        let tx = client.transaction().await.unwrap();
        let report = store.adopt::<IngestedPost, _>(&tx).await.unwrap();
        assert_eq!(report.moved.count, 5, "{label}: {report}");
        let doc = ingested_post("legacy", "Legacy");
        assert_eq!(store.upsert(&tx, &doc).await.unwrap(), Outcome::Unchanged);
        tx.commit().await.unwrap();
        let audit = store.audit::<IngestedPost, _>(&client).await.unwrap();
        // legacy-3 and `held-no-id`, whose derived ids unreadable rows hold, and the unreadable
        // row without an `_id`.
        assert_eq!(audit.legacy_ids.count, 3, "{label}: {audit}");

        // Through sqlx, the same statements.
        let (schema, _client) = taken_over_table(&uri, "sqlx_adopt").await;
        let mut connection = sqlx_connection(&uri, &schema).await;
        let audit = store.audit::<IngestedPost, _>(&mut connection).await;
        assert_eq!(audit.unwrap().legacy_ids.count, 7, "{label}");
        let report = store.adopt::<IngestedPost, _>(&mut connection).await;
        let report = report.unwrap();
        assert_eq!((report.moved.count, report.failed.count), (5, 5), "{label}");

        let by = PartitionBy::Hash { partitions: 4 };
        let mut reports = Vec::new();
        for store in [
            Store::new().with_partitions(by),
            Store::new().with_partitions(by).with_write_marker(true),
        ] {
            let (_schema, client) = fresh_schema(&uri, "mk", "partitioned_adopt").await;
            store
                .ensure_table::<IngestedPost, _>(&client)
                .await
                .unwrap();
            // As a migration may key it: a unique index on `_id` and the partition columns,
            // `_id` nullable, so that rows without one are in every partition.
            nullable_id(&client, "posts", r#""_id", slug, lang"#).await;
            for n in 0..12 {
                let id = (n % 3 != 0).then(|| format!("legacy-{n:02}"));
                let slug = format!("p{n:02}");
                insert_as_another_tool(&client, id.as_deref(), &slug, Some("T")).await;
            }
            let adopted = store.adopt::<IngestedPost, _>(&client).await.unwrap();
            assert_eq!(adopted.moved.count, 12, "{label}: {adopted}");
            let audit = store.audit::<IngestedPost, _>(&client).await.unwrap();
            assert!(audit.is_clean(), "{label}: {audit}");
            reports.push((placeless(&format!("{adopted:?}")), posts(&client).await));
        }
        assert_eq!(reports[0], reports[1], "{label}");
    }
}

/// A reading keyed by a number, a flag and a name: a natural key of three column types.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, Idempotent)]
#[idem(collection = "readings")]
struct Reading {
    #[idem(key)]
    station: i64,
    #[idem(key)]
    indoor: bool,
    #[idem(key)]
    name: String,
    value: f64,
}

/// Rows without an `_id` over several pages of the adoption, found by a natural key of a
/// `bigint`, a `boolean` and a `text` column: the marker store moves each once, as the plain
/// store does, and a second run has nothing left to move.
#[tokio::test]
async fn rows_without_an_id_over_pages_move_by_a_natural_key_of_several_types() {
    for (label, uri) in postgres_servers() {
        let mut reports = Vec::new();
        for (variant, store) in [
            ("plain", Store::new()),
            ("marker", Store::new().with_write_marker(true)),
        ] {
            let (_schema, client) = fresh_schema(&uri, "mk", &format!("pages_{variant}")).await;
            let marker = Store::new().with_write_marker(true);
            marker.ensure_table::<Reading, _>(&client).await.unwrap();
            nullable_id(&client, "readings", r#""_id""#).await;
            let sql = "INSERT INTO readings (station, indoor, name, value) \
                       SELECT g / 4 - 100, g % 2 = 0, 'n' || (g % 3), g * 0.5 \
                       FROM generate_series(1, 1200) g";
            client.execute(sql, &[]).await.unwrap();
            let adopted = store.adopt::<Reading, _>(&client).await.unwrap();
            assert!(adopted.is_complete(), "{label} {variant}: {adopted}");
            assert_eq!(adopted.moved.count, 1200, "{label} {variant}: {adopted}");
            let again = store.adopt::<Reading, _>(&client).await.unwrap();
            assert_eq!(
                again.moved.count + again.failed.count,
                0,
                "{label} {variant}"
            );
            let audit = store.audit::<Reading, _>(&client).await.unwrap();
            assert!(audit.is_clean(), "{label} {variant}: {audit}");
            // The rows, not the report, whose samples come in the order of each pass.
            let sql = r#"SELECT "_id", station, indoor, name FROM readings ORDER BY "_id""#;
            let rows = client.query(sql, &[]).await.unwrap();
            let rows: Vec<(String, i64, bool, String)> = (rows.iter())
                .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
                .collect();
            reports.push(rows);
        }
        assert_eq!(reports[0], reports[1], "{label}");
    }
}
