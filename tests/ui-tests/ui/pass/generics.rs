// Generic document types: a generic payload, a generic key and timestamp with a where clause of
// the user's own, a lifetime parameter (which needs no collection name), and a const parameter.

use std::future::Future;

use idem_core::{Backend, IdKey, IdTimestamp, Idempotent, StoredKey};

#[derive(serde::Serialize, Idempotent)]
#[idem(collection = "docs")]
struct Doc<T> {
    #[idem(key)]
    id: String,
    payload: T,
}

#[derive(serde::Serialize, Idempotent)]
#[idem(collection = "keyed")]
struct Keyed<K, Ts>
where
    K: Clone,
{
    #[idem(key)]
    key: K,
    #[idem(timestamp)]
    at: Ts,
}

#[derive(serde::Serialize, Idempotent)]
#[idem(collection = "borrowed")]
struct Borrowed<'a, T: ?Sized + serde::Serialize> {
    #[idem(key)]
    slug: &'a str,
    body: &'a T,
}

#[derive(serde::Serialize, Idempotent)]
#[idem(collection = "fixed")]
struct Fixed<const N: usize> {
    #[idem(key)]
    id: i64,
}

fn id_of<T: Idempotent>(doc: &T) -> idem_core::Id {
    doc.id().unwrap()
}

fn generic_id<K: IdKey + StoredKey + Clone, Ts: IdTimestamp>(key: &K, at: &Ts) -> idem_core::Id {
    Keyed::<K, Ts>::derive_id(key, at).unwrap()
}

// The futures of the generated `upsert` and `ensure_schema` compile for a document with a
// lifetime parameter, and are `Send`.
fn writes<'a, B: Backend>(
    store: &'a B,
    doc: &'a Borrowed<'a, str>,
) -> impl Future<Output = ()> + Send + 'a {
    async move {
        let _ = Borrowed::<str>::ensure_schema(store).await;
        let _ = doc.upsert(store).await;
    }
}

fn main() {
    let _ = writes::<idem_core::postgres::Session<'static, &'static idem_core::tokio_postgres::Client>>;
    let doc = Doc {
        id: "a".to_owned(),
        payload: vec![1, 2, 3],
    };
    assert_eq!(
        doc.id().unwrap(),
        Doc::<Vec<i32>>::derive_id(&"a".to_owned()).unwrap()
    );
    assert_eq!(id_of(&doc), doc.id().unwrap());
    doc.content_hash().unwrap();

    let keyed = Keyed {
        key: 7_u32,
        at: 1_700_000_000_000_i64,
    };
    assert_eq!(
        keyed.id().unwrap(),
        generic_id(&7_u32, &1_700_000_000_000_i64)
    );
    assert_eq!(keyed.id().unwrap().timestamp_ms(), 1_700_000_000_000);

    let borrowed = Borrowed {
        slug: "a",
        body: "text",
    };
    assert_eq!(borrowed.id().unwrap(), doc.id().unwrap());
    assert_eq!(
        Fixed::<3> { id: 1 }.id().unwrap(),
        Fixed::<3>::derive_id(&1).unwrap()
    );
    let _ = <Doc<()> as Idempotent>::MODEL;
}
