use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Payment {
    #[idem(idempotency_key)]
    request_key: f64,
}

fn main() {}
