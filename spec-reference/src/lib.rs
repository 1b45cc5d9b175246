//! The encodings of `docs/SPEC.md`, written out again from the spec alone, to check idem-core
//! against: the property tests (`tests/tests/stores/properties.rs`) and the fuzz targets
//! (`fuzz/`) both compare what idem-core computes with what this crate computes.
//!
//! It does not depend on idem-core, so a mistake in idem-core's encoders cannot reach it. Each
//! function names the section of the spec it follows; the unit tests pin it to the spec's worked
//! examples and vectors.
//!
//! ```
//! use idem_spec_reference::id::{hash_part, joined_input, v1_input, KeyValue};
//!
//! let keys = [KeyValue::from("hello-world"), KeyValue::from("en")];
//! assert_eq!(hash_part(&v1_input(&keys))[..3], [0x8f, 0x67, 0x36]); // vector `v1-ascii`
//! assert_eq!(joined_input(&keys), "hello-world:en"); // vector `joined-post`
//! ```

pub mod content;
pub mod id;
