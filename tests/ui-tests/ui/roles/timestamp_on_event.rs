use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Click {
    #[idem(idempotency_key)]
    request_key: String,
    #[idem(timestamp)]
    at: i64,
}

fn main() {}
