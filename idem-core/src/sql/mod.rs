//! What every SQL backend shares: the table's layout ([`layout`]), a document encoded as its
//! row and a stored row read for the engine ([`row`]), and the JSON rules for structured columns
//! ([`json`]). Each dialect's types, statements and error codes are its driver's.

pub(crate) mod json;
pub(crate) mod layout;
pub(crate) mod row;
