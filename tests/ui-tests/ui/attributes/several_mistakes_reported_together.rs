use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[idem(id_scheme = "v2")]
struct Post {
    #[idem(kye)]
    slug: String,
    #[idem(timestamp)]
    published_at: i64,
    #[idem(timestamp)]
    updated_at: i64,
}

fn main() {}
