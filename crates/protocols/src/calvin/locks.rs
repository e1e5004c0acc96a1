//! CALVIN's deterministic lock table (one per node): transactions ask for their records'
//! locks in the epoch's order, and each record grants them first come first served, readers
//! together. Every node asks in the same order, so no two transactions wait for each other
//! in a cycle and none ever aborts.

use atoll_storage::TableId;
use std::collections::{HashMap, VecDeque};

/// A lock request: the transaction's place in the order, and whether it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Waiter {
    id: u64,
    write: bool,
}

#[derive(Default)]
pub struct LockTable {
    queues: HashMap<(TableId, u64), VecDeque<Waiter>>,
}

impl LockTable {
    /// Queues transaction `id`'s requests for `keys` (each record once), behind every
    /// request queued before: callers enqueue transactions in the order.
    pub fn enqueue(&mut self, id: u64, keys: &[(TableId, u64, bool)]) {
        for &(t, k, write) in keys {
            let q = self.queues.entry((t, k)).or_default();
            debug_assert!(
                q.back().is_none_or(|w| w.id < id),
                "calvin: {t:?} key {k}: transaction {id} queued after a later one"
            );
            q.push_back(Waiter { id, write });
        }
    }

    /// Whether `id` holds every lock it asked for `keys`: on each record it is first, or it
    /// reads and every request before it reads too.
    pub fn granted(&self, id: u64, keys: &[(TableId, u64, bool)]) -> bool {
        keys.iter().all(|&(t, k, _)| {
            let q = self
                .queues
                .get(&(t, k))
                .unwrap_or_else(|| panic!("calvin: {t:?} key {k}: {id} never queued"));
            for w in q {
                if w.id == id {
                    return true;
                }
                if w.write || q.iter().any(|x| x.id == id && x.write) {
                    return false;
                }
            }
            panic!("calvin: {t:?} key {k}: transaction {id} is not queued")
        })
    }

    /// Releases `id`'s locks on `keys`.
    pub fn release(&mut self, id: u64, keys: &[(TableId, u64, bool)]) {
        for &(t, k, _) in keys {
            let q = self
                .queues
                .get_mut(&(t, k))
                .unwrap_or_else(|| panic!("calvin: {t:?} key {k}: release of {id}, not queued"));
            let at = q
                .iter()
                .position(|w| w.id == id)
                .unwrap_or_else(|| panic!("calvin: {t:?} key {k}: release of {id}, not queued"));
            q.remove(at);
            if q.is_empty() {
                self.queues.remove(&(t, k));
            }
        }
    }

    /// Records with requests queued.
    pub fn records(&self) -> usize {
        self.queues.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: TableId = TableId(0);

    #[test]
    fn calvin_locks_grant_in_order_readers_together_a_writer_alone() {
        let mut l = LockTable::default();
        l.enqueue(1, &[(T, 7, false)]);
        l.enqueue(2, &[(T, 7, false), (T, 8, true)]);
        l.enqueue(3, &[(T, 7, true)]);
        l.enqueue(4, &[(T, 7, false)]);
        assert!(l.granted(1, &[(T, 7, false)]));
        assert!(l.granted(2, &[(T, 7, false), (T, 8, true)]));
        assert!(!l.granted(3, &[(T, 7, true)]), "a writer waits for readers");
        assert!(
            !l.granted(4, &[(T, 7, false)]),
            "a reader waits behind a writer"
        );
        l.release(1, &[(T, 7, false)]);
        assert!(!l.granted(3, &[(T, 7, true)]));
        l.release(2, &[(T, 7, false), (T, 8, true)]);
        assert!(l.granted(3, &[(T, 7, true)]));
        assert!(!l.granted(4, &[(T, 7, false)]));
        l.release(3, &[(T, 7, true)]);
        assert!(l.granted(4, &[(T, 7, false)]));
        l.release(4, &[(T, 7, false)]);
        assert_eq!(l.records(), 0);
    }

    #[test]
    fn calvin_locks_a_later_transaction_never_passes_an_earlier_writer() {
        // Random orders of requests over few keys: at any time, granted transactions on a
        // key are either one writer or readers only, and each is the earliest not released.
        let mut rng = atoll_fabric::rng::Rng::new(5);
        for _ in 0..200 {
            let mut l = LockTable::default();
            let mut live: Vec<(u64, Vec<(TableId, u64, bool)>)> = Vec::new();
            for id in 0..20u64 {
                let mut keys: Vec<(TableId, u64, bool)> = (0..1 + rng.below(3))
                    .map(|_| (T, rng.below(4), rng.chance(0.5)))
                    .collect();
                keys.sort_by_key(|k| k.1);
                keys.dedup_by_key(|k| k.1);
                l.enqueue(id, &keys);
                live.push((id, keys));
            }
            while !live.is_empty() {
                let granted: Vec<usize> = (0..live.len())
                    .filter(|&i| l.granted(live[i].0, &live[i].1))
                    .collect();
                assert!(!granted.is_empty(), "nothing granted: a deadlock");
                assert!(granted.contains(&0), "the earliest is always granted");
                for key in 0..4 {
                    let holders: Vec<bool> = granted
                        .iter()
                        .filter_map(|&i| live[i].1.iter().find(|k| k.1 == key).map(|k| k.2))
                        .collect();
                    assert!(
                        holders.iter().all(|w| !w) || holders.len() == 1,
                        "key {key} granted to {holders:?}"
                    );
                }
                let (id, keys) = live.remove(granted[rng.below(granted.len() as u64) as usize]);
                l.release(id, &keys);
            }
        }
    }
}
