use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
union Post {
    id: u64,
    bits: f64,
}

fn main() {}
