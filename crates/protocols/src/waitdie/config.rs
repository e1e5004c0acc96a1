//! WAITDIE's knob: the starvation fix.

use atoll_storage::layout::H_AUX;
use atoll_storage::TableId;
use atoll_txn::knobs::{
    ClusterShape, FamilyConfig, KnobError, KnobKind, KnobSpec, Knobs, StateCheck,
};
use std::any::Any;
use std::sync::Arc;

/// `--waitdie-counter`.
pub const COUNTER: KnobSpec = KnobSpec {
    name: "waitdie_counter",
    kind: KnobKind::Flag,
    help: "the starvation fix: waiters raise a FETCH_ADD counter in the tuple header that \
           makes younger lockers die; each compute node counts in a field of 64 / nodes bits, \
           and a crash run whose nodes' co-routines do not fit their fields is refused",
};

/// The waiter counter (the AUX word) as one field per compute node: node `i`'s waiters
/// count in bits `[i * bits, (i + 1) * bits)`, so a recovery takes back a dead node's
/// raises alone ([`WaitDieConfig::settle_dead_node`]) while the other nodes' waiters keep
/// theirs. A node's count is at most its co-routines (a waiting transaction raises a record
/// once), and a field holds it: no carry reaches the next field, and no field goes below 0
/// (a waiter lowers only what it raised). When the nodes' fields do not fit in the word,
/// every node counts in one field (`bits == 0`), and a crash is refused up front.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterFields {
    bits: u32,
}

impl CounterFields {
    pub fn new(compute_nodes: u32, coordinators_per_node: u32) -> Self {
        let room = u64::BITS / compute_nodes.max(1);
        CounterFields {
            bits: if room >= Self::bits_needed(coordinators_per_node) {
                room
            } else {
                0
            },
        }
    }

    /// Bits that count a node's waiters: each of its co-routines waits on a record once.
    pub fn bits_needed(coordinators_per_node: u32) -> u32 {
        u32::BITS - coordinators_per_node.leading_zeros()
    }

    /// Whether each node counts in a field of its own.
    pub fn per_node(&self) -> bool {
        self.bits > 0
    }

    /// Whether one field is the whole word: nodes share it, or a node is alone.
    fn whole_word(&self) -> bool {
        self.bits == 0 || self.bits >= u64::BITS
    }

    /// What a waiter of compute node `node` raises the word by (and lowers it by again).
    pub fn unit(&self, node: u32) -> u64 {
        if self.whole_word() {
            1
        } else {
            1u64 << (node * self.bits)
        }
    }

    /// Node `node`'s count in `word` (the whole word when nodes share one field).
    pub fn count_of(&self, word: u64, node: u32) -> u64 {
        if self.whole_word() {
            word
        } else {
            (word >> (node * self.bits)) & ((1u64 << self.bits) - 1)
        }
    }
}

/// WAITDIE's configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitDieConfig {
    /// Waiters raise the counter ([`COUNTER`]).
    pub counter: bool,
}

/// Failed items a check names.
const CHECK_EXAMPLES_MAX: usize = 5;

impl FamilyConfig for WaitDieConfig {
    fn as_any(&self) -> &dyn Any {
        self
    }

    /// With the counter, every waiter lowers what it raised once it holds the lock or dies
    /// (and recovery clears a dead node's raises), so after the run no record slot's
    /// counter is raised: one left raised makes every locker of the record but an older
    /// waiter die, for good.
    fn crash_refusal(&self, shape: &ClusterShape) -> Option<String> {
        let fields = CounterFields::new(shape.compute_nodes, shape.coordinators_per_node);
        (self.counter && !fields.per_node()).then(|| {
            format!(
                "--waitdie-counter with a crash keeps each compute node's waiters in a field of \
                 a record's 64-bit counter, so that recovery takes back a dead node's raises \
                 alone: {} nodes of {} co-routines each need {} x {} bits (expected at most 64: \
                 fewer nodes or co-routines per node, or no --waitdie-counter)",
                shape.compute_nodes,
                shape.coordinators_per_node,
                shape.compute_nodes,
                CounterFields::bits_needed(shape.coordinators_per_node)
            )
        })
    }

    /// Takes back what the dead node's waiters raised on this node's records: one-sided
    /// waiters lower theirs when they lock or die, a dead one never does, and a participant
    /// drops a dead node's held requests without lowering (this takes the field whole).
    /// No op of the dead node lands any more (it is fenced), so its field is final.
    fn settle_dead_node(
        &self,
        store: &atoll_storage::Store,
        dead: atoll_fabric::NodeId,
        coordinators_per_node: u32,
    ) -> u64 {
        if !self.counter {
            return 0;
        }
        let compute_nodes = store.catalog.topology().compute_nodes() as u32;
        let fields = CounterFields::new(compute_nodes, coordinators_per_node);
        assert!(
            fields.per_node(),
            "waitdie: a crash of {compute_nodes} nodes x {coordinators_per_node} co-routines was to be refused up front"
        );
        let node = dead.0 as u32;
        let mut cleared = 0;
        for_each_counter(store, |region, at, _| {
            let count = fields.count_of(region.load(at), node);
            if count > 0 {
                // Live nodes' waiters add to and take from their own fields only.
                region.fetch_add(at, count.wrapping_mul(fields.unit(node)).wrapping_neg());
                cleared += 1;
            }
        });
        cleared
    }

    fn check_node(&self, store: &atoll_storage::Store) -> Vec<StateCheck> {
        if !self.counter {
            return Vec::new();
        }
        let mut c = StateCheck {
            name: "waitdie.no_counter_left_raised",
            what: "a record slot's waiter counter (AUX word) is back to 0 after the run",
            ..Default::default()
        };
        for_each_counter(store, |region, at, (t, slot)| {
            let aux = region.load(at);
            c.checked += 1;
            if aux != 0 {
                c.failed += 1;
                if c.examples.len() < CHECK_EXAMPLES_MAX {
                    c.examples.push(format!(
                        "{} slot {slot} on node {}: counter {aux:#x}",
                        store.catalog.spec(t).name,
                        store.node.0
                    ));
                }
            }
        });
        vec![c]
    }
}

/// Calls `f` with the region, word offset and (table, slot) of every used record slot's
/// waiter counter (AUX word) this node holds: partitioned tables only, a replicated table's
/// copies take no waiter.
fn for_each_counter(
    store: &atoll_storage::Store,
    mut f: impl FnMut(&atoll_fabric::memory::Region, usize, (TableId, u32)),
) {
    for t in (0..store.catalog.table_count()).map(|t| TableId(t as u16)) {
        let region = store.region(t);
        if region.len_words() == 0 || store.catalog.is_replicated(t) {
            continue;
        }
        let layout = store.catalog.layout(t);
        for slot in 0..store.used_slots(t) {
            f(
                region,
                layout.record_offset(slot) as usize + H_AUX as usize,
                (t, slot),
            );
        }
    }
}

pub fn configure(knobs: &Knobs) -> Result<Arc<dyn FamilyConfig>, KnobError> {
    Ok(Arc::new(WaitDieConfig {
        counter: knobs.flag(COUNTER.name),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waitdie_counter_fields_of_3_nodes_hold_each_nodes_waiters_apart() {
        let f = CounterFields::new(3, 8);
        assert!(f.per_node());
        // Every waiter of every node raised the word: each node reads back its own count.
        let mut word = 0u64;
        for node in 0..3 {
            for _ in 0..8 {
                word = word.wrapping_add(f.unit(node));
            }
        }
        for node in 0..3 {
            assert_eq!(f.count_of(word, node), 8, "node {node} in {word:#x}");
        }
        // Taking node 1's field back whole leaves the others' counts.
        let after = word.wrapping_add((8 * f.unit(1)).wrapping_neg());
        assert_eq!(
            (0..3).map(|n| f.count_of(after, n)).collect::<Vec<_>>(),
            [8, 0, 8]
        );
    }

    #[test]
    fn waitdie_counter_of_one_node_is_the_whole_word() {
        let f = CounterFields::new(1, 1_000);
        assert!(f.per_node());
        assert_eq!((f.unit(0), f.count_of(1_000, 0)), (1, 1_000));
    }

    #[test]
    fn waitdie_counter_fields_that_do_not_fit_share_one_and_refuse_a_crash() {
        // 16 nodes leave 4 bits each; 32 co-routines need 6.
        let f = CounterFields::new(16, 32);
        assert!(!f.per_node());
        assert_eq!((f.unit(5), f.count_of(77, 5)), (1, 77));
        let shape = ClusterShape {
            coordinators_total: 16 * 32,
            coordinators_per_node: 32,
            compute_nodes: 16,
            plan: atoll_txn::Plan::parse("rpc").unwrap(),
        };
        let on = WaitDieConfig { counter: true };
        let e = on.crash_refusal(&shape).expect("refused");
        assert!(
            e.contains("16 nodes of 32 co-routines each need 16 x 6 bits"),
            "{e}"
        );
        assert_eq!(WaitDieConfig { counter: false }.crash_refusal(&shape), None);
        let fits = ClusterShape {
            coordinators_per_node: 15,
            coordinators_total: 16 * 15,
            ..shape
        };
        assert_eq!(on.crash_refusal(&fits), None);
    }
}
