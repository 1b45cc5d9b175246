//! What every SQL backend shares: the table's layout ([`layout`]), a document encoded as its
//! row and a stored row read for the engine ([`row`]), the JSON rules for structured columns
//! ([`json`]), and how an audit or an adoption judges a row ([`judge`]). Each dialect's types,
//! statements and error codes are its driver's.

pub(crate) mod audit;
pub(crate) mod change;
pub(crate) mod json;
pub(crate) mod judge;
pub(crate) mod layout;
pub(crate) mod row;
