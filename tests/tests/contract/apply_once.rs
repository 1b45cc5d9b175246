//! `apply_once` and effect fields: an operation applies once however often it is retried or
//! raced, within the op window; its fields are owned by operations, so no upsert undoes or
//! writes back an effect, and an update of any other field is refused with nothing written.
//! Op ids derive from the triggering document.

use idem_core::{Applied, Change, Error, ErrorKind, Id, Idempotent, OpId, Outcome};
use idem_tests::backends::{fresh_backends, Db};
use idem_tests::fixtures::{account, Account, Payment};
use mongodb::bson::doc;
use serde::{Deserialize, Serialize};

use crate::support::{assert_db_wrote_nothing, forget_commands, ledger, stored_balance, Ledger};

/// An account whose balance only operations move; the holder's name is the upsert's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Idempotent)]
#[idem(collection = "wallets")]
#[serde(rename_all = "camelCase")]
struct Wallet {
    #[idem(key)]
    owner: String,
    holder_name: String,
    #[idem(effect)]
    balance: i64,
}

fn wallet(owner: &str, holder_name: &str) -> Wallet {
    Wallet {
        owner: owner.into(),
        holder_name: holder_name.into(),
        balance: 0,
    }
}

async fn balance(db: &Db, owner: &str) -> i64 {
    let stored = db.stored::<Wallet>().await;
    let wallet = stored
        .iter()
        .find(|doc| doc["owner"] == owner)
        .unwrap_or_else(|| panic!("{db}: no wallet of {owner}"));
    wallet["balance"]
        .as_i64()
        .unwrap_or_else(|| panic!("{db}: {wallet:?}"))
}

/// An operation applies once however often it is retried or raced, an upsert never undoes it,
/// and an update of another field is refused with nothing written.
#[tokio::test]
async fn an_operation_applies_once_and_no_upsert_undoes_it() {
    for db in fresh_backends("apply_once").await {
        db.ensure::<Wallet>().await;
        let ada = wallet("ada", "Ada");
        let id = ada.id().unwrap();
        let credit = OpId::new("webhook-1");
        assert!(
            matches!(
                db.credit_once::<Wallet>(id, &credit, "balance", 100)
                    .await
                    .map_err(Error::into_kind),
                Err(ErrorKind::NotFound)
            ),
            "{db}"
        );
        assert_eq!(db.upsert(&ada).await.unwrap(), Outcome::Inserted, "{db}");
        assert_eq!(
            db.credit_once::<Wallet>(id, &credit, "balance", 100)
                .await
                .unwrap(),
            Applied::Applied,
            "{db}"
        );
        assert_eq!(
            db.credit_once::<Wallet>(id, &credit, "balance", 100)
                .await
                .unwrap(),
            Applied::AlreadyApplied,
            "{db}"
        );
        // The owner's name changes: the upsert writes it and leaves the balance alone.
        assert_eq!(
            db.upsert(&wallet("ada", "Ada L.")).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        assert_eq!(db.upsert(&ada).await.unwrap(), Outcome::Updated, "{db}");
        assert_eq!(balance(&db, "ada").await, 100, "{db}");
        let before = db.raw::<Wallet>().await;
        match db
            .credit_once::<Wallet>(id, &OpId::new("typo"), "balanse", 1)
            .await
            .map_err(Error::into_kind)
        {
            Err(ErrorKind::NotAnEffectField { path, .. }) => assert_eq!(path, "balanse", "{db}"),
            other => panic!("{db}: expected a refusal, got {other:?}"),
        }
        assert!(
            matches!(
                db.credit_once::<Wallet>(id, &OpId::new("x"), "holderName", 1)
                    .await
                    .map_err(Error::into_kind),
                Err(ErrorKind::NotAnEffectField { .. })
            ),
            "{db}"
        );
        assert_eq!(db.raw::<Wallet>().await, before, "{db}: nothing written");

        // 8 racers retry the same 10 operations: each applies once.
        let mut racers = Vec::new();
        for _ in 0..8 {
            let racer = db.another().await;
            racers.push(tokio::spawn(async move {
                let mut applied = 0;
                for n in 0..10 {
                    let op = OpId::new(format!("op-{n}"));
                    if racer
                        .credit_once::<Wallet>(id, &op, "balance", 10)
                        .await
                        .unwrap()
                        == Applied::Applied
                    {
                        applied += 1;
                    }
                }
                applied
            }));
        }
        let mut applied = 0;
        for racer in racers {
            applied += racer.await.unwrap();
        }
        assert_eq!(applied, 10, "{db}");
        assert_eq!(balance(&db, "ada").await, 200, "{db}");
    }
}

/// A transfer: the same op id debits one wallet and credits another; retried after a failure
/// between the steps, each step applies exactly once.
#[tokio::test]
async fn a_transfer_retried_whole_moves_the_money_exactly_once() {
    for db in fresh_backends("transfer").await {
        db.ensure::<Wallet>().await;
        let (from, to) = (wallet("ada", "Ada"), wallet("bob", "Bob"));
        db.upsert_many(&[from.clone(), to.clone()]).await.unwrap();
        let transfer = OpId::new("transfer-1");
        // The first attempt stops after the debit.
        db.credit_once::<Wallet>(from.id().unwrap(), &transfer, "balance", -30)
            .await
            .unwrap();
        for _ in 0..2 {
            db.credit_once::<Wallet>(from.id().unwrap(), &transfer, "balance", -30)
                .await
                .unwrap();
            db.credit_once::<Wallet>(to.id().unwrap(), &transfer, "balance", 30)
                .await
                .unwrap();
        }
        assert_eq!(balance(&db, "ada").await, -30, "{db}");
        assert_eq!(balance(&db, "bob").await, 30, "{db}");
    }
}

/// A store remembers the latest `with_op_window` op ids of a document: a retry within the
/// window is recognised; one past it applies again (the documented limit).
#[tokio::test]
async fn a_document_remembers_only_its_latest_op_window() {
    for db in fresh_backends("op_window").await {
        db.ensure::<Wallet>().await;
        let db = db.with_op_window(3).await;
        let ada = wallet("ada", "Ada");
        db.upsert(&ada).await.unwrap();
        let id = ada.id().unwrap();
        let credit = |n: usize| {
            let db = &db;
            async move {
                db.credit_once::<Wallet>(id, &OpId::new(format!("op-{n}")), "balance", 1)
                    .await
                    .unwrap()
            }
        };
        for n in 0..5 {
            assert_eq!(credit(n).await, Applied::Applied, "{db}: op-{n}");
        }
        for n in 2..5 {
            assert_eq!(credit(n).await, Applied::AlreadyApplied, "{db}: op-{n}");
        }
        assert_eq!(balance(&db, "ada").await, 5, "{db}");
        assert_eq!(
            credit(1).await,
            Applied::Applied,
            "{db}: op-1 is past the window of 3"
        );
        assert_eq!(balance(&db, "ada").await, 6, "{db}");
    }
}

#[tokio::test]
async fn apply_once_on_a_missing_document_is_not_found() {
    for db in fresh_backends("apply_missing").await {
        db.ensure::<Account>().await;
        forget_commands(&db);
        let ghost = account("ghost");
        let id = ghost.id().unwrap();
        match db
            .credit_once::<Account>(id, &"op-1".into(), "balance", 100)
            .await
        {
            Err(error) if matches!(error.kind(), ErrorKind::NotFound) => {
                assert_eq!(error.document().collection, "accounts", "{db}");
                assert_eq!(error.document().id, Some(id), "{db}");
            }
            other => panic!("{db}: expected NotFound, got {other:?}"),
        }
        assert_db_wrote_nothing(&db);
        assert!(
            db.raw::<Account>().await.is_empty(),
            "{db}: nothing written"
        );
    }
}

/// An op id holding U+0000 is refused on every store alike, naming it, before anything is sent:
/// the SQL stores cannot keep it in text. (SQLite recorded it, answered `Applied`, then failed
/// every retry with a syntax error, and answered a missing document so too; PostgreSQL refused
/// it only once sent, with its own error; MongoDB recorded it.) On a stored document and on a
/// missing one, every retry alike: a refusal, not retryable, nothing written.
#[tokio::test]
async fn an_op_id_holding_nul_is_refused_on_every_store_naming_it() {
    for db in fresh_backends("op_id_nul").await {
        db.ensure::<Wallet>().await;
        let ada = wallet("ada", "Ada");
        db.upsert(&ada).await.unwrap();
        let id = ada.id().unwrap();
        let credit = OpId::new("webhook-1");
        db.credit_once::<Wallet>(id, &credit, "balance", 5)
            .await
            .unwrap();
        let ghost = wallet("ghost", "Nobody").id().unwrap();
        let nul = OpId::new("op-a\u{0}b");
        let before = db.raw::<Wallet>().await;
        forget_commands(&db);
        for target in [id, ghost] {
            for attempt in 0..2 {
                let refused = db
                    .credit_once::<Wallet>(target, &nul, "balance", 100)
                    .await
                    .unwrap_err();
                match refused.kind() {
                    ErrorKind::OpIdHoldsNul { op_id } => assert_eq!(op_id, nul.as_str(), "{db}"),
                    other => panic!("{db}: attempt {attempt}: expected OpIdHoldsNul: {other:?}"),
                }
                assert!(
                    refused.is_refusal() && !refused.is_retryable(),
                    "{db}: {refused}"
                );
                assert_eq!(refused.document().id, Some(target), "{db}");
                assert!(refused.to_string().contains("op-a\\0b"), "{db}: {refused}");
            }
        }
        assert_db_wrote_nothing(&db);
        assert_eq!(db.raw::<Wallet>().await, before, "{db}: nothing written");
        assert_eq!(balance(&db, "ada").await, 5, "{db}");
        assert_eq!(
            db.credit_once::<Wallet>(id, &credit, "balance", 5)
                .await
                .unwrap(),
            Applied::AlreadyApplied,
            "{db}: the op ids recorded are intact"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Effect fields

/// Promise catalogue case 14: fields that operations change are owned by `apply_once`; an
/// upsert never undoes an effect.
#[tokio::test]
async fn an_upsert_never_undoes_an_apply_once_effect() {
    for db in fresh_backends("p14_effect_kept").await {
        db.ensure::<Ledger>().await;
        assert_eq!(
            db.upsert(&ledger("Ada")).await.unwrap(),
            Outcome::Inserted,
            "{db}"
        );
        let id = ledger("Ada").id().unwrap();
        let credit = OpId::from("payment-1:credit");
        assert_eq!(
            db.credit_once::<Ledger>(id, &credit, "balance", 500)
                .await
                .unwrap(),
            Applied::Applied,
            "{db}"
        );

        // The owner is renamed; the document in hand still says balance 0.
        let renamed = ledger("Ada Lovelace");
        assert_eq!(db.upsert(&renamed).await.unwrap(), Outcome::Updated, "{db}");
        let stored = db.stored::<Ledger>().await;
        assert_eq!(stored[0]["owner"], "Ada Lovelace", "{db}");
        assert_eq!(stored_balance(&db).await, 500, "{db}: the credit stands");
        // The balance is not content: the renamed account with any balance is a retry.
        let with_other_balance = Ledger {
            balance: 7,
            ..renamed.clone()
        };
        assert_eq!(
            db.upsert(&with_other_balance).await.unwrap(),
            Outcome::Unchanged,
            "{db}"
        );
        assert_eq!(
            db.credit_once::<Ledger>(id, &credit, "balance", 500)
                .await
                .unwrap(),
            Applied::AlreadyApplied,
            "{db}"
        );
        assert_eq!(stored_balance(&db).await, 500, "{db}");
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "purses")]
struct Purse {
    #[idem(key)]
    owner: String,
    label: String,
    #[idem(effect)]
    points: Option<i64>,
}

/// An effect field is written when its document is inserted and never again: once another
/// route removed it, no upsert brings it back, whatever the stored document holds.
#[tokio::test]
async fn an_upsert_never_writes_back_an_effect_field_that_was_removed() {
    for db in fresh_backends("effect_removed").await {
        db.ensure::<Purse>().await;
        let wallet = Purse {
            owner: "ada".into(),
            label: "first".into(),
            points: Some(10),
        };
        assert_eq!(db.upsert(&wallet).await.unwrap(), Outcome::Inserted, "{db}");
        assert_eq!(db.stored::<Purse>().await[0]["points"], 10, "{db}");
        db.clear_field::<Purse>("points").await;
        let relabelled = Purse {
            label: "second".into(),
            ..wallet.clone()
        };
        assert_eq!(
            db.upsert(&relabelled).await.unwrap(),
            Outcome::Updated,
            "{db}"
        );
        let stored = db.stored::<Purse>().await;
        assert_eq!(stored[0]["label"], "second", "{db}");
        assert!(
            !stored[0].contains_key("points"),
            "{db}: the removed effect field came back: {stored:?}"
        );
    }
}

/// An update `apply_once` is asked to make: a numeric credit, or a field set to a text.
enum Update {
    Add(&'static str, i64),
    Set(&'static str, &'static str),
}

/// Applies `update` to the ledger `id` once per `op`: `Change::add` or `Change::set`, the same
/// on every backend.
async fn apply(db: &Db, id: Id, op: &OpId, update: Update) -> Result<Applied, Error> {
    match update {
        Update::Add(field, amount) => db.credit_once::<Ledger>(id, op, field, amount).await,
        Update::Set(field, value) => {
            db.apply_once::<Ledger>(id, op, &[Change::set(field, &value)])
                .await
        }
    }
}

/// Applies `update` under a fresh op id: refused as touching `path`, nothing written (the op id
/// is not recorded either, so the same op id applies a correct update afterwards).
async fn assert_not_an_effect_field(test: &str, update: fn() -> Update, path: &str) {
    for db in fresh_backends(test).await {
        db.ensure::<Ledger>().await;
        db.upsert(&ledger("Ada")).await.unwrap();
        let id = ledger("Ada").id().unwrap();
        let before = db.raw::<Ledger>().await;
        let op = OpId::from("op-1");
        match apply(&db, id, &op, update())
            .await
            .map_err(Error::into_kind)
        {
            Err(ErrorKind::NotAnEffectField { path: refused, .. }) => {
                assert_eq!(refused, path, "{db}")
            }
            other => panic!("{db}: expected NotAnEffectField {path:?}, got {other:?}"),
        }
        assert_eq!(db.raw::<Ledger>().await, before, "{db}: nothing written");
        assert_eq!(
            db.credit_once::<Ledger>(id, &op, "balance", 5)
                .await
                .unwrap(),
            Applied::Applied,
            "{db}"
        );
        assert_eq!(stored_balance(&db).await, 5, "{db}");
    }
}

/// Promise catalogue case 14: `apply_once` refuses a field the type does not have.
#[tokio::test]
async fn apply_once_refuses_a_field_the_type_does_not_have() {
    // A typo would otherwise create a new field and leave the balance as it was.
    assert_not_an_effect_field("p14_typo", || Update::Add("balnce", 5), "balnce").await;
}

/// Promise catalogue case 14: `apply_once` refuses a field that upserts own.
#[tokio::test]
async fn apply_once_refuses_a_field_that_upserts_own() {
    // The next upsert would overwrite it: only effect fields belong to operations.
    assert_not_an_effect_field("p14_upserted_field", || Update::Set("owner", "x"), "owner").await;
}

// ---------------------------------------------------------------------------------------------
// Op ids

/// Op ids derive from the triggering document and the operation's purpose.
#[test]
fn op_ids_derive_from_the_triggering_document() {
    let ada = account("ada");
    assert_eq!(ada.op_id("points").unwrap(), ada.op_id("points").unwrap());
    assert_ne!(ada.op_id("points").unwrap(), ada.op_id("streak").unwrap());
    assert_ne!(
        ada.op_id("points").unwrap(),
        account("bob").op_id("points").unwrap()
    );
}

/// Promise catalogue case 16: an event's op ids derive from its idempotency key and the
/// operation's purpose.
#[test]
fn an_event_op_id_derives_from_its_idempotency_key_and_purpose() {
    let payment = |key: &str, amount_cents| Payment {
        request_key: key.into(),
        amount_cents,
    };
    let credit = payment("req-1", 1_000)
        .op_id("credit")
        .expect("an event has op ids: the README's webhook-credits-an-account flow");
    assert_eq!(credit, payment("req-1", 1_000).op_id("credit").unwrap());
    // The key names the request: the same key is the same request, whatever its payload says.
    assert_eq!(credit, payment("req-1", 2_000).op_id("credit").unwrap());
    assert_ne!(credit, payment("req-1", 1_000).op_id("refund").unwrap());
    assert_ne!(credit, payment("req-2", 1_000).op_id("credit").unwrap());
}

/// A tab: an integer and a float total, and the last note, all moved by operations only.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "tabs")]
#[serde(rename_all = "camelCase")]
struct Tab {
    #[idem(key)]
    name: String,
    #[idem(effect)]
    visits: i64,
    #[idem(effect)]
    total: f64,
    #[idem(effect)]
    last_note: Option<String>,
}

/// The typed changes mean the same on every backend: integer and float additions (a missing
/// field counts as 0), a set value read back as set; a field changed twice in one operation, a
/// non-finite amount and a float added to an integer field are refused before anything is sent,
/// and the op id stays unused.
#[tokio::test]
async fn typed_changes_add_and_set_the_same_on_every_backend() {
    for db in fresh_backends("typed_changes").await {
        db.ensure::<Tab>().await;
        let tab = Tab {
            name: "corner".into(),
            visits: 0,
            total: 0.0,
            last_note: None,
        };
        db.upsert(&tab).await.unwrap();
        let id = tab.id().unwrap();
        let first = OpId::new("visit-1");
        let changes = [
            Change::add("visits", 2),
            Change::add_float("total", 2.5),
            Change::set("lastNote", &"paid in cash"),
        ];
        assert_eq!(
            db.apply_once::<Tab>(id, &first, &changes).await.unwrap(),
            Applied::Applied,
            "{db}"
        );
        assert_eq!(
            db.apply_once::<Tab>(id, &first, &changes).await.unwrap(),
            Applied::AlreadyApplied,
            "{db}"
        );
        let before = db.raw::<Tab>().await;
        let second = OpId::new("visit-2");
        let twice = [Change::add("visits", 1), Change::add("visits", 1)];
        match db
            .apply_once::<Tab>(id, &second, &twice)
            .await
            .map_err(Error::into_kind)
        {
            Err(ErrorKind::Serialize { message, .. }) => {
                assert!(message.contains("`visits` twice"), "{db}: {message}")
            }
            other => panic!("{db}: a field changed twice is refused: {other:?}"),
        }
        match db
            .apply_once::<Tab>(id, &second, &[Change::add_float("total", f64::NAN)])
            .await
            .map_err(Error::into_kind)
        {
            Err(ErrorKind::Serialize { message, .. }) => {
                assert!(message.contains("not a finite amount"), "{db}: {message}")
            }
            other => panic!("{db}: a NaN amount is refused: {other:?}"),
        }
        // One store would refuse it, another turn the integer into a float: both refuse it.
        match db
            .apply_once::<Tab>(id, &second, &[Change::add_float("visits", 0.5)])
            .await
            .map_err(Error::into_kind)
        {
            Err(ErrorKind::Serialize { message, .. }) => {
                assert!(
                    message.contains("cannot add 0.5 to `visits`"),
                    "{db}: {message}"
                )
            }
            other => panic!("{db}: a float added to an integer is refused: {other:?}"),
        }
        assert_eq!(db.raw::<Tab>().await, before, "{db}: nothing written");
        let more = [Change::add("visits", 1), Change::add_float("total", 0.25)];
        assert_eq!(
            db.apply_once::<Tab>(id, &second, &more).await.unwrap(),
            Applied::Applied,
            "{db}: the refused op id was not recorded"
        );
        let read: Tab = db.get::<Tab>(id).await.unwrap().expect("stored");
        assert_eq!(read.visits, 3, "{db}");
        assert_eq!(read.total, 2.75, "{db}");
        assert_eq!(read.last_note.as_deref(), Some("paid in cash"), "{db}");
    }
}

/// A float effect field and one an upsert may leave null.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "gauges")]
struct Gauge {
    #[idem(key)]
    name: String,
    #[idem(effect)]
    level: f64,
    #[idem(effect)]
    ticks: Option<i64>,
}

/// An integer added to a float field past `i64`'s range is applied (only an integer field can
/// overflow), and a field stored null counts as 0, on every store (MongoDB's `$inc` refuses a
/// null, which the SQL stores add to as 0).
#[tokio::test]
async fn a_float_field_takes_any_sum_and_a_null_field_counts_as_zero() {
    for db in fresh_backends("gauge_sums").await {
        db.ensure::<Gauge>().await;
        let gauge = Gauge {
            name: "g".into(),
            level: 1e19,
            ticks: None,
        };
        db.upsert(&gauge).await.unwrap();
        let id = gauge.id().unwrap();
        let changes = [Change::add("level", 1), Change::add("ticks", 5)];
        assert_eq!(
            db.apply_once::<Gauge>(id, &OpId::new("tick"), &changes)
                .await
                .unwrap(),
            Applied::Applied,
            "{db}"
        );
        assert_eq!(
            db.apply_once::<Gauge>(id, &OpId::new("tick"), &changes)
                .await
                .unwrap(),
            Applied::AlreadyApplied,
            "{db}"
        );
        let stored = db.get::<Gauge>(id).await.unwrap().unwrap();
        assert_eq!((stored.level, stored.ticks), (1e19 + 1.0, Some(5)), "{db}");
    }
}

/// A wallet whose balance lives at the edges of a 64-bit integer.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[idem(collection = "edge_wallets")]
struct EdgeWallet {
    #[idem(key)]
    owner: String,
    #[idem(effect)]
    balance: i64,
}

/// An addition past `i64`'s range is refused on every backend, naming the field, with nothing
/// written and the op not recorded (SQLite alone made the sum a float, and recorded the op): the
/// same op with an amount that fits is then applied, to the last unit. A value the field cannot
/// hold is refused alike (MongoDB, which would store it, included).
#[tokio::test]
async fn an_addition_past_the_integer_range_is_refused_naming_the_field() {
    for db in fresh_backends("add_out_of_range").await {
        db.ensure::<EdgeWallet>().await;
        for (owner, start, too_far, to_the_edge, edge) in [
            ("rich", i64::MAX - 5, 10, 5, i64::MAX),
            ("owing", i64::MIN + 5, -10, -5, i64::MIN),
        ] {
            let wallet = EdgeWallet {
                owner: owner.into(),
                balance: start,
            };
            db.upsert(&wallet).await.unwrap();
            let id = wallet.id().unwrap();
            let op = OpId::new(format!("{owner}-1"));
            match db
                .credit_once::<EdgeWallet>(id, &op, "balance", too_far)
                .await
                .map_err(Error::into_kind)
            {
                Err(ErrorKind::AddOutOfRange { field }) if field == "balance" => {}
                other => panic!("{db}: {owner}: {other:?}"),
            }
            let balance = |stored: Vec<serde_json::Map<String, serde_json::Value>>| {
                let found = stored.iter().find(|row| row["owner"] == owner);
                found.map(|row| row["balance"].clone())
            };
            assert_eq!(
                balance(db.stored::<EdgeWallet>().await),
                Some(serde_json::json!(start)),
                "{db}: {owner}: nothing written"
            );
            assert_eq!(
                db.credit_once::<EdgeWallet>(id, &op, "balance", to_the_edge)
                    .await
                    .unwrap(),
                Applied::Applied,
                "{db}: {owner}: the op was not recorded"
            );
            assert_eq!(
                balance(db.stored::<EdgeWallet>().await),
                Some(serde_json::json!(edge)),
                "{db}: {owner}"
            );
            let text = [Change::set("balance", "a lot")];
            let refused = db
                .apply_once::<EdgeWallet>(id, &OpId::new(format!("{owner}-2")), &text)
                .await
                .unwrap_err();
            assert!(
                matches!(refused.kind(), ErrorKind::Serialize { .. })
                    && refused.to_string().contains("\"balance\""),
                "{db}: {owner}: {refused}"
            );
            assert_eq!(
                balance(db.stored::<EdgeWallet>().await),
                Some(serde_json::json!(edge)),
                "{db}: {owner}"
            );
        }
    }
}

/// An addition to an effect field another tool left holding what is no number (a text) is
/// refused the same way where the backend can hold such a value (MongoDB and SQLite; a
/// PostgreSQL or MariaDB `BIGINT` column cannot), naming the field, nothing written (SQLite took the text for 0,
/// MongoDB failed with the server's error); an op applied before is still `AlreadyApplied`.
#[tokio::test]
async fn an_addition_to_a_field_holding_no_number_is_refused_naming_it() {
    for db in fresh_backends("add_to_text").await {
        // MariaDB's strict mode (its default) refuses the text as well.
        if db.is_postgres() || db.is_mysql() {
            continue;
        }
        db.ensure::<EdgeWallet>().await;
        let wallet = EdgeWallet {
            owner: "texted".into(),
            balance: 0,
        };
        db.upsert(&wallet).await.unwrap();
        let id = wallet.id().unwrap();
        let first = OpId::new("first");
        assert_eq!(
            db.credit_once::<EdgeWallet>(id, &first, "balance", 5)
                .await
                .unwrap(),
            Applied::Applied,
            "{db}"
        );
        db.run_raw(
            "UPDATE edge_wallets SET balance = 'five'",
            doc! { "update": "edge_wallets", "updates": [
                { "q": {}, "u": { "$set": { "balance": "five" } } }
            ] },
        )
        .await;
        let refused = db
            .credit_once::<EdgeWallet>(id, &OpId::new("second"), "balance", 5)
            .await
            .unwrap_err();
        let shown = refused.to_string();
        assert!(
            matches!(refused.kind(), ErrorKind::Deserialize { .. })
                && shown.contains("`balance` is stored as")
                && shown.contains("not a number, so nothing can be added to it"),
            "{db}: {shown}"
        );
        assert_eq!(
            db.stored::<EdgeWallet>().await[0]["balance"],
            "five",
            "{db}: nothing written"
        );
        assert_eq!(
            db.credit_once::<EdgeWallet>(id, &first, "balance", 5)
                .await
                .unwrap(),
            Applied::AlreadyApplied,
            "{db}"
        );
    }
}
