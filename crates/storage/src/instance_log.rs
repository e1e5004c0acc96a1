//! An instance's own commit log, shared by its threads (the hardware-islands paper's
//! per-instance log): committing transactions append their records to one buffer, and
//! whoever finds records pending and no write under way writes all of them with one `write`
//! (group commit) into a ring file, so the more threads an instance has, the more records a
//! write carries.

use parking_lot::Mutex;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Bytes of the ring file an instance log writes into when the run names no size: room for
/// thousands of TPC-C NewOrder records, so a group never wraps onto records of its own.
pub const INSTANCE_LOG_RING_BYTES_DEFAULT: u64 = 4 << 20;

/// Bytes a group may gather before an appender must wait for a write to finish (back
/// pressure, not a drop: the appender polls until the write under way ends).
pub const INSTANCE_LOG_PENDING_BYTES_MAX: usize = 1 << 20;

/// What an [`InstanceLog`] counted: its records and the writes that carried them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstanceLogCounts {
    pub records: u64,
    pub writes: u64,
    pub bytes: u64,
}

/// One instance's commit log: a buffer its threads append to and a ring file that one of
/// them at a time writes the buffer into.
pub struct InstanceLog {
    file: File,
    path: PathBuf,
    ring_bytes: u64,
    pending: Mutex<Pending>,
    /// A write is under way: the others leave the buffer to its writer's successor.
    writing: AtomicBool,
    /// Log bytes (counted from the log's start, not the ring's) on the file.
    durable: AtomicU64,
    records: AtomicU64,
    writes: AtomicU64,
}

/// Records appended and not yet written, and where the log's end is.
struct Pending {
    bytes: Vec<u8>,
    /// Log offset just after the last appended record.
    end: u64,
}

/// Why an instance log could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum InstanceLogError {
    #[error("cannot create the instance log {path}: {err}")]
    Create { path: PathBuf, err: std::io::Error },
    #[error("cannot write the instance log {path}: {err}")]
    Write { path: PathBuf, err: std::io::Error },
    #[error("a {bytes}-byte log record does not fit the instance log's {ring_bytes}-byte ring")]
    TooLarge { bytes: u64, ring_bytes: u64 },
}

impl InstanceLog {
    /// Creates (or truncates) the ring file at `path`, `ring_bytes` long.
    pub fn create(path: &Path, ring_bytes: u64) -> Result<Self, InstanceLogError> {
        let err = |err| InstanceLogError::Create {
            path: path.to_path_buf(),
            err,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(err)?;
        file.set_len(ring_bytes).map_err(err)?;
        Ok(InstanceLog {
            file,
            path: path.to_path_buf(),
            ring_bytes,
            pending: Mutex::new(Pending {
                bytes: Vec::new(),
                end: 0,
            }),
            writing: AtomicBool::new(false),
            durable: AtomicU64::new(0),
            records: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `record` (little-endian words) to the buffer: `Some(end)`, the log offset the
    /// file must reach for it to be durable ([`InstanceLog::durable`]), or `None` when the
    /// buffer is full (the caller writes or waits, then appends again).
    pub fn append(&self, record: &[u64]) -> Result<Option<u64>, InstanceLogError> {
        let bytes = record.len() as u64 * 8;
        if bytes > self.ring_bytes / 2 {
            return Err(InstanceLogError::TooLarge {
                bytes,
                ring_bytes: self.ring_bytes,
            });
        }
        let mut p = self.pending.lock();
        if !p.bytes.is_empty() && p.bytes.len() + bytes as usize > INSTANCE_LOG_PENDING_BYTES_MAX {
            return Ok(None);
        }
        for w in record {
            p.bytes.extend_from_slice(&w.to_le_bytes());
        }
        p.end += bytes;
        self.records.fetch_add(1, Ordering::Relaxed);
        Ok(Some(p.end))
    }

    /// Log bytes on the file: a record whose end is at most this is durable.
    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// Writes every pending record in one write, unless a write is under way or nothing is
    /// pending: whether this call wrote.
    pub fn try_write(&self) -> Result<bool, InstanceLogError> {
        if self
            .writing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Ok(false);
        }
        let (bytes, end) = {
            let mut p = self.pending.lock();
            (std::mem::take(&mut p.bytes), p.end)
        };
        let r = if bytes.is_empty() {
            Ok(false)
        } else {
            self.write_ring(end - bytes.len() as u64, &bytes).map(|()| {
                self.writes.fetch_add(1, Ordering::Relaxed);
                self.durable.store(end, Ordering::Release);
                true
            })
        };
        // The buffer's allocation goes back for the next group (none if it grew meanwhile).
        {
            let mut p = self.pending.lock();
            if p.bytes.is_empty() {
                let mut spare = bytes;
                spare.clear();
                p.bytes = spare;
            }
        }
        self.writing.store(false, Ordering::Release);
        r
    }

    /// Writes `bytes`, log offsets `start..`, where they fall in the ring (in two writes when
    /// they straddle its end).
    fn write_ring(&self, start: u64, bytes: &[u8]) -> Result<(), InstanceLogError> {
        let at = start % self.ring_bytes;
        let first = (self.ring_bytes - at).min(bytes.len() as u64) as usize;
        let err = |err| InstanceLogError::Write {
            path: self.path.clone(),
            err,
        };
        self.file.write_all_at(&bytes[..first], at).map_err(err)?;
        if first < bytes.len() {
            self.file.write_all_at(&bytes[first..], 0).map_err(err)?;
        }
        Ok(())
    }

    pub fn counts(&self) -> InstanceLogCounts {
        InstanceLogCounts {
            records: self.records.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            bytes: self.durable(),
        }
    }
}

impl Drop for InstanceLog {
    /// The log is the run's, not a store to reopen: its file goes with it.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("atoll-test-{}-{name}.log", std::process::id()))
    }

    #[test]
    fn instance_log_threads_share_writes_and_every_record_lands_in_order() {
        let path = temp("groups");
        // A whole number of 24-byte records, so records never straddle the ring's end.
        let ring_bytes = 24 * 2_730;
        let log = Arc::new(InstanceLog::create(&path, ring_bytes).unwrap());
        let threads = 4u64;
        let per_thread = 2_000u64;
        std::thread::scope(|s| {
            for t in 0..threads {
                let log = log.clone();
                s.spawn(move || {
                    for i in 0..per_thread {
                        let rec = [t, i, t ^ i];
                        let end = loop {
                            if let Some(end) = log.append(&rec).unwrap() {
                                break end;
                            }
                            log.try_write().unwrap();
                        };
                        // Bounded: each turn either writes or finds another thread writing.
                        while log.durable() < end {
                            if !log.try_write().unwrap() {
                                std::thread::yield_now();
                            }
                        }
                    }
                });
            }
        });
        let c = log.counts();
        assert_eq!(c.records, threads * per_thread, "{c:?}");
        assert_eq!(c.bytes, threads * per_thread * 24, "{c:?}");
        assert!(
            c.writes >= 1 && c.writes <= c.records,
            "a write carries one record or more: {c:?}"
        );
        // The ring holds the log's last 65,520 bytes: every record there is one a thread
        // appended (its third word checks the first two).
        let ring = std::fs::read(&path).unwrap();
        let words: Vec<u64> = ring
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let mut k = 0;
        let mut checked = 0;
        while k + 3 <= words.len() {
            let (t, i, x) = (words[k], words[k + 1], words[k + 2]);
            assert!(
                t < threads && i < per_thread && x == t ^ i,
                "word {k}: {t} {i} {x}"
            );
            checked += 1;
            k += 3;
        }
        assert!(checked > 1000, "{checked}");
        drop(log);
        assert!(!path.exists(), "the run's log file goes with it");
    }

    #[test]
    fn instance_log_refuses_a_record_larger_than_half_its_ring() {
        let path = temp("large");
        let log = InstanceLog::create(&path, 64).unwrap();
        let e = log.append(&[0; 5]).unwrap_err();
        assert!(e.to_string().contains("40-byte"), "{e}");
        assert_eq!(log.append(&[1; 4]).unwrap(), Some(32));
    }
}
