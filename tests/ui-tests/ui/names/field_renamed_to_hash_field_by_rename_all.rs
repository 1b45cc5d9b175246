use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[serde(rename_all = "camelCase")]
struct Post {
    #[idem(key)]
    slug: String,
    source_hash: String,
}

fn main() {}
