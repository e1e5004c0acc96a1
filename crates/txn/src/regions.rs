//! The catalog's extra regions (after the tables') every node registers, by index: the
//! coordinators' log rings first; the timestamp service's follow (`crate::tsvc`).

/// The catalog's extra region holding coordinators' log rings.
pub const LOG_EXTRA_REGION: usize = 0;
