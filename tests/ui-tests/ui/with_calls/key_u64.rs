// A key type that cannot be stored, then code that calls what the derive generates: the key's
// type is the one error, said once.
use idem_core::postgres::Store;
use idem_core::tokio_postgres::Client;
use idem_core::Idempotent;

#[derive(serde::Serialize, serde::Deserialize, Idempotent)]
#[idem(collection = "orders")]
struct Order {
    #[idem(key)]
    number: u64,
    note: String,
}

async fn write(store: &Store, client: &Client, order: &Order) {
    Order::ensure_schema(&store.on(client)).await.unwrap();
    let _ = order.upsert(&store.on(client)).await.unwrap();
    let _ = order.id().unwrap();
    let _ = order.content_hash().unwrap();
    let _ = Order::derive_id(7).unwrap();
    let _: Option<Order> = Order::find(&store.on(client), 7).await.unwrap();
}

fn main() {
    let _ = write;
}
