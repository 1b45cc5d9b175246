// A key type the derive accepts must be writable and read back.
// BSON has no 128-bit integer: every write of a `u128` key fails.
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Order {
    #[idem(key)]
    number: u128,
    note: String,
}

fn main() {}
