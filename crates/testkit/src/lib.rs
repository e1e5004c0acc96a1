//! Test support, used only as a dev-dependency: the scripted one-thread cluster (the
//! runner's, re-exported), scenario steps co-routines wait on, the simulator faults run-level
//! tests inject, and workload parameters from pairs.

use atoll_fabric::Endpoint;
pub use atoll_runner::scripted::{RecordShape, TestCluster};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Yields before giving up on a scenario step that never comes.
const WAIT_YIELDS_MAX: u32 = 100_000;

/// Shared scenario progress: steps are numbered, co-routines wait for each other's steps.
#[derive(Clone, Default)]
pub struct Steps(Arc<AtomicU32>);

impl Steps {
    pub fn reach(&self, step: u32) {
        let at = self.0.swap(step, Ordering::SeqCst);
        assert!(
            at < step,
            "step {step} reached twice or out of order (at {at})"
        );
    }

    pub async fn wait(&self, ep: &Endpoint, step: u32) {
        for _ in 0..WAIT_YIELDS_MAX {
            if self.0.load(Ordering::SeqCst) >= step {
                return;
            }
            ep.yield_now().await;
        }
        panic!(
            "scenario stuck waiting for step {step} (at {})",
            self.0.load(Ordering::SeqCst)
        );
    }
}

/// The simulator faults most run-level tests inject: latency spikes, pauses, torn
/// multi-word WRITEs and stalled ops, each a few times in a short run.
pub const FAULTS_MIXED: &str =
    "spikes=2,spike_us=50,spike_len_us=300,pauses=1,pause_us=200,tear_words=2,tear_ns=1000,stall_permille=50,stall_us=50";

/// Workload parameters from `key, value` pairs.
pub fn params(kv: &[(&str, &str)]) -> atoll_workloads::Params {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
