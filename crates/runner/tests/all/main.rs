//! The bench crate's end-to-end tests, one module per subject, linked into one test binary:
//! the engine's generic code is compiled and linked once for all of them, not once per file.
//! `cargo test --profile ci --workspace --test all -- sim::` runs one module.

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
mod tpcc;
