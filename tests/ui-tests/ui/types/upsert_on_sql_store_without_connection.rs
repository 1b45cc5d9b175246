// `post.upsert(&store)` is the MongoDB form: a SQL store writes through a connection,
// `store.on(&mut conn)`, and the error says so.
use idem_core::postgres::Store;
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[idem(collection = "posts")]
struct Post {
    #[idem(key)]
    slug: String,
}

async fn write(post: &Post) {
    let store = Store::new();
    let _ = post.upsert(&store).await.unwrap();
}

fn main() {
    let _ = write;
}
