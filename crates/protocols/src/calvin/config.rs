//! CALVIN's knobs: how long a lane collects an epoch, and how many requests it takes in one.

use atoll_txn::knobs::{FamilyConfig, KnobError, KnobKind, KnobSpec, Knobs};
use std::any::Any;
use std::sync::Arc;

/// `--epoch-us`: RCC's code buffers 10 ms of requests per lane for an epoch.
pub const EPOCH_US: KnobSpec = KnobSpec {
    name: "epoch_us",
    kind: KnobKind::Number {
        default: 10_000,
        min: 1,
        max: 1_000_000,
    },
    help: "microseconds a lane collects requests for an epoch before it dispatches them (RCC's \
           code: 10 ms)",
};

/// `--calvin-batch-max`: a lane dispatches early with this many requests.
pub const BATCH_MAX: KnobSpec = KnobSpec {
    name: "calvin_batch_max",
    kind: KnobKind::Number {
        default: 256,
        min: 1,
        max: 65_536,
    },
    help: "requests a lane collects in one epoch, at most (it dispatches as soon as it has them)",
};

/// CALVIN's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CalvinConfig {
    pub epoch_ns: u64,
    pub batch_max: u32,
}

impl FamilyConfig for CalvinConfig {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

pub fn configure(knobs: &Knobs) -> Result<Arc<dyn FamilyConfig>, KnobError> {
    Ok(Arc::new(CalvinConfig {
        epoch_ns: knobs.number(EPOCH_US.name) * 1_000,
        batch_max: knobs.number(BATCH_MAX.name) as u32,
    }))
}
