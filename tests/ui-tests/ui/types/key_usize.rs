// A key type the derive accepts must be writable and read back.
// `usize` is 64 bits wide here: keys above `i64::MAX` fail every write.
use idem_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
struct Order {
    #[idem(key)]
    number: usize,
    note: String,
}

fn main() {}
