// `Post::find(&store, …)` is the MongoDB form: a SQL store reads through a connection,
// `store.on(&mut conn)`, and the error says so.
use idem_core::postgres::Store;
use idem_core::Idempotent;

#[derive(serde::Serialize, serde::Deserialize, Idempotent)]
#[idem(collection = "posts")]
struct Post {
    #[idem(key)]
    slug: String,
}

async fn read() {
    let store = Store::new();
    let _: Option<Post> = Post::find(&store, "hello").await.unwrap();
}

fn main() {
    let _ = read;
}
