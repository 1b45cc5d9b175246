use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    #[idem(key)]
    slug: String,
    #[serde(rename = "slug")]
    old_slug: String,
}

fn main() {}
