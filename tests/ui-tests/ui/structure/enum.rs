use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
enum Post {
    Draft { slug: String },
    Published { slug: String },
}

fn main() {}
