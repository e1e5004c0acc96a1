//! MVCC's knob: the versions each record keeps.

use atoll_txn::knobs::{FamilyConfig, KnobError, KnobKind, KnobSpec, Knobs};
use std::any::Any;
use std::sync::Arc;

/// Most versions a multi-version protocol keeps per record.
pub const VERSIONS_MAX: u64 = 64;

/// `--mvcc-slots`.
pub const SLOTS: KnobSpec = KnobSpec {
    name: "mvcc_slots",
    kind: KnobKind::Number {
        default: 4,
        min: 1,
        max: VERSIONS_MAX,
    },
    help: "versions kept per record",
};

/// MVCC's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MvccConfig {
    /// Versions per record ([`SLOTS`]).
    pub slots: u32,
}

impl FamilyConfig for MvccConfig {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn version_slots(&self) -> u32 {
        self.slots
    }

    fn check_node(&self, store: &atoll_storage::Store) -> Vec<atoll_txn::knobs::StateCheck> {
        vec![super::version::check_kept(store)]
    }
}

pub fn configure(knobs: &Knobs) -> Result<Arc<dyn FamilyConfig>, KnobError> {
    Ok(Arc::new(MvccConfig {
        slots: knobs.number(SLOTS.name) as u32,
    }))
}
