//! Tell's knobs: the versions a record slot keeps.

use atoll_txn::knobs::{FamilyConfig, KnobError, KnobKind, KnobSpec, Knobs};
use std::any::Any;
use std::sync::Arc;

/// Versions a slot holds at least: the newest may be a writer's in flight, and a reader
/// needs the one before it ([`super::record::fits`]).
pub const VERSIONS_MIN: u64 = 2;

/// `--tell-versions`.
pub const VERSIONS: KnobSpec = KnobSpec {
    name: "tell_versions",
    kind: KnobKind::Number {
        default: 4,
        min: VERSIONS_MIN,
        max: crate::mvcc::config::VERSIONS_MAX,
    },
    help: "versions a Tell record's slot holds (Tell §5.1 serializes every version of a \
           record; an update that finds no room after garbage collection by lav aborts)",
};

/// Tell's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TellConfig {
    /// Versions per record slot ([`VERSIONS`]).
    pub versions: u32,
}

impl FamilyConfig for TellConfig {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn version_slots(&self) -> u32 {
        self.versions
    }
}

pub fn configure(knobs: &Knobs) -> Result<Arc<dyn FamilyConfig>, KnobError> {
    Ok(Arc::new(TellConfig {
        versions: knobs.number(VERSIONS.name) as u32,
    }))
}
