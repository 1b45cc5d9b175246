//! The key encoding: `encode_key_v1` and `derive_id` under both schemes, no panic, the same
//! output twice, `v1` injective over the two tuples drawn. See `src/lib.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| idem_fuzz::key_encoding_target(data));
