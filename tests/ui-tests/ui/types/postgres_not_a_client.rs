use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key)]
    slug: String,
}

// Something that is neither a tokio-postgres `Client` nor a `Transaction`.
struct Pool;

async fn write(store: idem_core::postgres::Store, pool: Pool) {
    let post = Post { slug: "a".into() };
    let _ = store.upsert(&pool, &post).await;
}

fn main() {
    let _ = write;
}
