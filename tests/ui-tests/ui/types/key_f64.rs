use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Reading {
    #[idem(key)]
    value: f64,
}

fn main() {}
