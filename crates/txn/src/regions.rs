//! The catalog's extra regions (after the tables') every node registers: the coordinators'
//! log rings first, at a fixed index; a protocol family's own follow, found by name
//! ([`crate::knobs::FamilyConfig::regions`]).

/// The catalog's extra region holding coordinators' log rings.
pub const LOG_EXTRA_REGION: usize = 0;
/// Its name.
pub const LOG_REGION: &str = "log";
