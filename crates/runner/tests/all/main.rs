//! The bench crate's end-to-end tests, one module per subject, linked into one test binary:
//! the engine's generic code is compiled and linked once for all of them, not once per file.
//! `cargo test --profile ci --workspace --test all -- sim::` runs one module.

/// Epochs sized for a run of a few simulated milliseconds: a sequenced protocol (CALVIN)
/// collects an epoch of `--epoch-us` (RCC's 10 ms by default) or `--calvin-batch-max`
/// requests per lane, and a run shorter than one epoch measures no commit at all (under the
/// tests' contention an epoch's transactions on a hot record run one after another).
pub fn short_epochs(cfg: &mut atoll_runner::RunConfig) {
    uncapped(cfg);
    if cfg.protocol.sequenced() {
        cfg.set_knob("epoch_us", SHORT_EPOCH_US);
        cfg.set_knob("calvin_batch_max", SHORT_BATCH_MAX);
    }
}

/// A sequenced protocol refuses a workload knob that caps a table it inserts into (an
/// insert finding it full on one node would not on another): the tables grow instead.
pub fn uncapped(cfg: &mut atoll_runner::RunConfig) {
    if cfg.protocol.sequenced() {
        for knob in ["dyn_slots", "new_orders_max", "orders_max"] {
            cfg.params.remove(knob);
        }
    }
}

const SHORT_EPOCH_US: u64 = 20;
const SHORT_BATCH_MAX: u32 = 2;

mod broken;
mod checkout;
mod contention;
mod contracts;
mod driver;
mod failures;
mod fidelity;
mod matrix;
mod shared_data;
mod si_samples;
mod sim;
mod skew;
mod tell_recovery;
mod tpcc;
