use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key)]
    slug: String,
    #[serde(rename = "_id")]
    legacy_id: String,
}

fn main() {}
