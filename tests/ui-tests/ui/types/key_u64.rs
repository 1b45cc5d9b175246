// A key type the derive accepts must be writable and read back.
// BSON has no unsigned 64-bit integer: keys above `i64::MAX` fail every write.
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Order {
    #[idem(key)]
    number: u64,
    note: String,
}

fn main() {}
