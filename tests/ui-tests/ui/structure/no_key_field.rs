use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post {
    slug: String,
    title: String,
}

fn main() {}
