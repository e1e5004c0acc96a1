//! Atoll's runner: runs a workload under a protocol and plan on a fabric, reports
//! throughput, aborts, latency, verbs and stage breakdowns, and runs the invariant checks.
//! Knows no command line: the `atoll` binary builds a [`RunConfig`] and prints the [`Report`].

pub mod calibrate;
pub mod config;
pub mod driver;
pub mod env;
pub mod error;
pub mod floor;
pub mod interrupt;
pub mod node;
pub mod pulse;
pub mod repeat;
pub mod report;
pub mod run;
pub mod scripted;
pub mod sequenced;
pub mod sizing;
pub mod stats;

pub use config::{ConfigError, RunConfig};
pub use driver::SummaryWire;
pub use report::{Progress, ProgressFn, ProgressLine, Report};
pub use run::{run, run_protocol, run_protocol_via, run_via, run_workload, RunError};
