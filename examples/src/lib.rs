//! Runnable examples of idem; the code is in the package's `[[example]]` targets (for example
//! `blog_ingest.rs`) and their sample data under `data/`. This library holds what several
//! examples share.

pub mod bench;
pub mod cli;
pub mod offline_sync;
