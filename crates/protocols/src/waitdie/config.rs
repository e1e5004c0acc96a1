//! WAITDIE's knob: the starvation fix.

use atoll_txn::knobs::{FamilyConfig, KnobError, KnobKind, KnobSpec, Knobs};
use std::any::Any;
use std::sync::Arc;

/// `--waitdie-counter`.
pub const COUNTER: KnobSpec = KnobSpec {
    name: "waitdie_counter",
    kind: KnobKind::Flag,
    help: "the starvation fix: waiters raise a FETCH_ADD counter in the tuple header that \
           makes younger lockers die",
};

/// WAITDIE's configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitDieConfig {
    /// Waiters raise the counter ([`COUNTER`]).
    pub counter: bool,
}

impl FamilyConfig for WaitDieConfig {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

pub fn configure(knobs: &Knobs) -> Result<Arc<dyn FamilyConfig>, KnobError> {
    Ok(Arc::new(WaitDieConfig {
        counter: knobs.flag(COUNTER.name),
    }))
}
