//! The run's memory budget: every structure that grows while a run goes (a table's record
//! slabs, its index groups, its ordered index and deleted keys; the run's fixed parts at
//! start) takes its bytes from one counter before it uses them, and the first structure
//! refused is kept, so the run stops naming it instead of being killed by the kernel.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A structure's growth the budget refused: what, where, how large it was, and the budget.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{structure} on node {node} needed {asked_bytes} more bytes at {structure_bytes} bytes, over the memory budget of {limit_bytes} bytes ({used_bytes} in use)"
)]
pub struct Refusal {
    /// What grew: `table order_line`, `the ordered index of new_order`.
    pub structure: String,
    pub node: u16,
    /// Bytes the structure held on that node before it asked.
    pub structure_bytes: u64,
    pub asked_bytes: u64,
    /// Bytes the whole run held when it asked.
    pub used_bytes: u64,
    pub limit_bytes: u64,
}

/// A byte budget shared by every node of one process (each process of `atoll cluster`
/// holds its node's share).
#[derive(Debug)]
pub struct MemoryBudget {
    limit_bytes: u64,
    used_bytes: AtomicU64,
    /// Set with the first refusal: read on every transaction, so a plain flag.
    refused: AtomicBool,
    refusal: Mutex<Option<Refusal>>,
}

impl MemoryBudget {
    pub fn new(limit_bytes: u64) -> Self {
        MemoryBudget {
            limit_bytes,
            used_bytes: AtomicU64::new(0),
            refused: AtomicBool::new(false),
            refusal: Mutex::new(None),
        }
    }

    /// A budget nothing exceeds (tests, tools that build a store by hand).
    pub fn unlimited() -> Self {
        Self::new(u64::MAX)
    }

    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Relaxed)
    }

    /// Takes `bytes` for `structure` on `node` (holding `structure_bytes` so far), or
    /// refuses them: the first refusal is kept for [`MemoryBudget::refusal`].
    pub fn take(
        &self,
        structure: impl FnOnce() -> String,
        node: u16,
        structure_bytes: u64,
        bytes: u64,
    ) -> Result<(), Refusal> {
        let mut used = self.used_bytes.load(Ordering::Relaxed);
        loop {
            let after = used.saturating_add(bytes);
            if after > self.limit_bytes {
                let r = Refusal {
                    structure: structure(),
                    node,
                    structure_bytes,
                    asked_bytes: bytes,
                    used_bytes: used,
                    limit_bytes: self.limit_bytes,
                };
                self.refusal.lock().get_or_insert_with(|| r.clone());
                self.refused.store(true, Ordering::Release);
                return Err(r);
            }
            match self.used_bytes.compare_exchange_weak(
                used,
                after,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(now) => used = now,
            }
        }
    }

    /// Whether a growth was refused (cheap: one load).
    #[inline]
    pub fn refused(&self) -> bool {
        self.refused.load(Ordering::Acquire)
    }

    /// The first growth refused, if any.
    pub fn refusal(&self) -> Option<Refusal> {
        self.refusal.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_takes_up_to_its_limit_and_keeps_the_first_refusal() {
        let b = MemoryBudget::new(100);
        assert!(b.take(|| "table a".into(), 0, 0, 60).is_ok());
        assert!(b.take(|| "table a".into(), 0, 60, 40).is_ok());
        let r = b.take(|| "table b".into(), 1, 0, 1).unwrap_err();
        assert_eq!(
            (r.structure.as_str(), r.used_bytes, r.limit_bytes),
            ("table b", 100, 100)
        );
        b.take(|| "table c".into(), 1, 0, 5).unwrap_err();
        assert_eq!(
            b.refusal().unwrap().structure,
            "table b",
            "the first is kept"
        );
        assert_eq!(b.used_bytes(), 100, "a refusal takes nothing");
    }
}
