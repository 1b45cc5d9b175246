use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Payment {
    #[idem(key)]
    account: String,
    #[idem(idempotency_key)]
    request_key: String,
}

fn main() {}
