//! A node's own commit log (`--instance-log`: the hardware-islands paper's per-instance
//! log, which its threads share): a committing writer's record goes to it before the
//! backups' logs, group-committed, modelled by the backend (the simulator) or written to a
//! file ([`atoll_storage::InstanceLog`]).

use crate::Abort;
use atoll_fabric::Endpoint;
use atoll_storage::InstanceLog;
use std::sync::atomic::{AtomicU64, Ordering};

/// Pause between two looks at the log's durable end while another thread's write carries
/// this record: about one write of a small group, so the waiter neither spins on the lock
/// nor oversleeps the write.
const DURABLE_POLL_NS: u64 = 1_000;

/// Looks at the durable end before an append gives up (the write under way stuck for about
/// ten seconds of polls: the log's file stopped taking writes).
const DURABLE_POLLS_MAX: u32 = 10_000_000;

/// One node's own log, shared by its coordinators: the file it writes (none where the
/// backend models the log), and what its coordinators counted.
#[derive(Default)]
pub struct OwnLog {
    file: Option<InstanceLog>,
    records: AtomicU64,
    writes: AtomicU64,
    /// The first error its file gave, for the report.
    failure: parking_lot::Mutex<Option<String>>,
}

/// A node's own log's counts, whole run: records appended and the writes that carried
/// them (so records per write is the group commit's group size).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnLogCounts {
    pub records: u64,
    pub writes: u64,
}

impl OwnLog {
    /// The log of a node that writes `file`.
    pub fn with_file(file: InstanceLog) -> Self {
        OwnLog {
            file: Some(file),
            ..Default::default()
        }
    }

    /// The log of a node whose backend models it ([`Endpoint::instance_log_model`]).
    pub fn modelled() -> Self {
        OwnLog::default()
    }

    /// The first error the log's file gave, if any.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().clone()
    }

    fn failed(&self, e: atoll_storage::InstanceLogError) -> Abort {
        self.failure.lock().get_or_insert_with(|| e.to_string());
        Abort::NodeFailed
    }

    pub fn counts(&self) -> OwnLogCounts {
        OwnLogCounts {
            records: self.records.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
        }
    }

    /// Makes `record` durable in this log: returns once the write that carries it has ended.
    /// A file that stops taking writes is the node's failure (`NodeFailed`): the attempt has
    /// made nothing visible yet and gives back its locks.
    pub async fn append(&self, ep: &Endpoint, record: &[u64]) -> Result<(), Abort> {
        self.records.fetch_add(1, Ordering::Relaxed);
        if let Some(w) = ep.instance_log_model(record.len() as u64 * 8) {
            if w.led {
                self.writes.fetch_add(1, Ordering::Relaxed);
            }
            if w.wait_ns > 0 {
                ep.sleep(w.wait_ns).await;
            }
            return Ok(());
        }
        let file = self.file.as_ref().unwrap_or_else(|| {
            panic!(
                "node {}: its backend models no log and the run gave it no log file",
                ep.node().0
            )
        });
        let mut end = None;
        for _ in 0..DURABLE_POLLS_MAX {
            if end.is_none() {
                end = file.append(record).map_err(|e| self.failed(e))?;
            }
            if end.is_some_and(|e| file.durable() >= e) {
                return Ok(());
            }
            if file.try_write().map_err(|e| self.failed(e))? {
                self.writes.fetch_add(1, Ordering::Relaxed);
            } else {
                ep.sleep(DURABLE_POLL_NS).await;
            }
        }
        Err(Abort::NodeFailed)
    }
}
