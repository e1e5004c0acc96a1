//! RSI's knob (the versions in a record block) and region (the timestamp service's).

use atoll_storage::ExtraRegion;
use atoll_txn::knobs::{ClusterShape, FamilyConfig, KnobError, KnobKind, KnobSpec, Knobs};
use atoll_txn::tsvc::{TsService, TS_SERVICE_REGION};
use std::any::Any;
use std::sync::Arc;

/// `--rsi-versions`, which NAM-DB declares too.
pub const VERSIONS: KnobSpec = KnobSpec {
    name: "rsi_versions",
    kind: KnobKind::Number {
        default: 1,
        min: 1,
        max: crate::mvcc::config::VERSIONS_MAX,
    },
    help: "versions in a record block, the newest a snapshot sees read (1, as RSI's paper's \
           implementation)",
};

/// The timestamp service's region, on the timestamp node, for `shape`'s coordinators.
pub fn ts_service_region(shape: &ClusterShape) -> ExtraRegion {
    ExtraRegion {
        name: TS_SERVICE_REGION,
        words: TsService::region_words_for(shape.coordinators_total),
    }
}

/// RSI's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RsiConfig {
    /// Versions per record block ([`VERSIONS`]).
    pub versions: u32,
}

impl FamilyConfig for RsiConfig {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn version_slots(&self) -> u32 {
        self.versions
    }

    fn regions(&self, shape: &ClusterShape) -> Vec<ExtraRegion> {
        vec![ts_service_region(shape)]
    }
}

pub fn configure(knobs: &Knobs) -> Result<Arc<dyn FamilyConfig>, KnobError> {
    Ok(Arc::new(RsiConfig {
        versions: knobs.number(VERSIONS.name) as u32,
    }))
}
