//! The content-hash serializer: JSON and structured values hash the same twice, equal SHA-256
//! over their canonical bytes, and do not depend on map order. See `src/lib.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| idem_fuzz::content_hash_target(data));
