use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Post(String, String);

fn main() {}
