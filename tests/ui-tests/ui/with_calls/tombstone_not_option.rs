// A tombstone that is no `Option`, then code that calls what the derive generates: the
// tombstone's type is the one error.
use idem_core::postgres::Store;
use idem_core::tokio_postgres::Client;
use idem_core::Idempotent;

#[derive(serde::Serialize, serde::Deserialize, Idempotent)]
#[idem(collection = "posts")]
struct Post {
    #[idem(key)]
    slug: String,
    #[idem(tombstone)]
    deleted_at: i64,
}

async fn write(store: &Store, client: &Client, post: &Post) {
    Post::ensure_schema(&store.on(client)).await.unwrap();
    let _ = post.upsert(&store.on(client)).await.unwrap();
    let _ = post.id().unwrap();
    let _ = post.content_hash().unwrap();
    let _ = Post::derive_id("hello").unwrap();
    let _: Option<Post> = Post::find(&store.on(client), "hello").await.unwrap();
}

fn main() {
    let _ = write;
}
