use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post;

fn main() {}
