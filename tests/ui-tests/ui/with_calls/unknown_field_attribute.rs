// A misspelt field attribute, then code that calls what the derive generates: the misspelling
// is the one error.
use idem_core::postgres::Store;
use idem_core::tokio_postgres::Client;
use idem_core::Idempotent;

#[derive(serde::Serialize, serde::Deserialize, Idempotent)]
#[idem(collection = "posts")]
struct Post {
    #[idem(key)]
    slug: String,
    #[idem(volitile)]
    fetched_at: i64,
    #[idem(push_by = "id")]
    comments: Vec<Comment>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Comment {
    id: String,
}

async fn write(store: &Store, client: &Client, post: &Post, comment: &Comment) {
    Post::ensure_schema(&store.on(client)).await.unwrap();
    let _ = post.upsert(&store.on(client)).await.unwrap();
    let _ = post.id().unwrap();
    let _ = post.content_hash().unwrap();
    let _ = Post::derive_id("hello").unwrap();
    let _: Option<Post> = Post::find(&store.on(client), "hello").await.unwrap();
    let _ = post
        .push_comments(&store.on(client), comment)
        .await
        .unwrap();
}

fn main() {
    let _ = write;
}
