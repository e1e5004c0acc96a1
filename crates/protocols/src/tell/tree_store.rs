//! Where Tell's B+tree ([`super::btree`]) lives in Atoll's store: a region of node slots on
//! a storage node, each node a key-value pair a processing node reads and changes only by
//! one-sided verbs, LL/SC style, as Tell's records are ([`super::store`]).
//!
//! The region ([`TREE_REGION`]) holds `trees` areas, one per tree; an area is a rid counter
//! word and then `nodes` slots of `[LOCK | len | words...]`, the slot of rid `r` at
//! `1 + r * slot_words`. `LOCK` is `[lock bit | seq]`: 0 is an absent node, a put takes it
//! from `seq` to `seq | LOCKED` by CAS (failing on any put since the read, even of the same
//! words), writes `len` and the words, and stores `seq + 1`; a get reads the slot and then
//! `LOCK` again in one doorbell and takes the words only if both show the same unlocked
//! sequence number. Rid [`ROOT_RID`] names the root; the counter hands out rids from
//! [`FIRST_NODE_RID`] on, and an area out of slots is a typed error (never a write past it).

use super::btree::{LlSc, Rid, TreeError, ROOT_RID};
use atoll_fabric::{Endpoint, NodeId, RegionId, RemotePtr, Words};

/// The region's name.
pub const TREE_REGION: &str = "tell_btree";

/// The lock bit of a slot's `LOCK` word.
const LOCKED: u64 = 1 << 63;

/// Words of a slot before the node's: `LOCK` and the node's length.
const SLOT_HEAD_WORDS: u32 = 2;

/// The first rid the counter hands out (below it: none, and the root record).
pub const FIRST_NODE_RID: Rid = ROOT_RID + 1;

/// Reads of a node a get tries while puts hold it (a put holds a slot for one round trip
/// of its words), pausing between the later ones.
pub const GET_ATTEMPTS_MAX: u32 = 64;
const GET_SPIN_ROUNDS: u32 = 4;
const GET_PAUSE_NS: u64 = 1_000;

/// The shape of the region: how many trees, and each one's slots and fanout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeShape {
    pub trees: u32,
    /// Node slots per tree (rids `0..nodes`; the first two are not nodes).
    pub nodes: u32,
    /// Entries a node holds at most ([`super::btree::Tree::new`]).
    pub fanout: u32,
}

impl TreeShape {
    /// Words of a node of at most `fanout` keys: `[level, low, high, right, n]`, the keys
    /// and one value more than the keys (an inner node's children).
    pub fn node_words_max(&self) -> u32 {
        5 + 2 * self.fanout + 1
    }

    pub fn slot_words(&self) -> u32 {
        SLOT_HEAD_WORDS + self.node_words_max()
    }

    /// Words of one tree's area: the counter and its slots.
    pub fn area_words(&self) -> u64 {
        1 + self.nodes as u64 * self.slot_words() as u64
    }

    /// Words of the whole region.
    pub fn region_words(&self) -> u64 {
        self.trees as u64 * self.area_words()
    }
}

/// One tree's area on one storage node, as a processing node reaches it.
#[derive(Clone, Copy, Debug)]
pub struct TreeArea {
    pub node: NodeId,
    pub region: RegionId,
    pub shape: TreeShape,
    /// Which of the region's trees.
    pub tree: u32,
}

impl TreeArea {
    fn base(&self) -> u64 {
        self.tree as u64 * self.shape.area_words()
    }

    fn counter(&self) -> RemotePtr {
        RemotePtr::new(self.node, self.region, self.base() as u32)
    }

    /// The slot of `rid`, or why there is none.
    fn slot(&self, rid: Rid) -> Result<RemotePtr, TreeError> {
        if rid < ROOT_RID || rid >= self.shape.nodes as u64 {
            return Err(TreeError::Store(format!(
                "rid {rid} outside tree {}'s {} slots",
                self.tree, self.shape.nodes
            )));
        }
        let at = self.base() + 1 + rid * self.shape.slot_words() as u64;
        Ok(RemotePtr::new(self.node, self.region, at as u32))
    }
}

/// [`LlSc`] over one-sided verbs on one tree's area.
pub struct VerbTree<'a> {
    pub ep: &'a Endpoint,
    pub area: TreeArea,
    /// Conditional puts that found another put since the read (the CAS failed).
    pub puts_failed: u64,
}

impl<'a> VerbTree<'a> {
    pub fn new(ep: &'a Endpoint, area: TreeArea) -> Self {
        VerbTree {
            ep,
            area,
            puts_failed: 0,
        }
    }
}

fn op_failed(e: atoll_fabric::OpError) -> TreeError {
    TreeError::Store(format!("a verb failed: {e}"))
}

impl VerbTree<'_> {
    /// CAS of `LOCK` from `seq` to locked, then the node's words and `seq + 1`.
    async fn put_at(&mut self, rid: Rid, value: &[u64], seq: u64) -> Result<bool, TreeError> {
        let slot = self.area.slot(rid)?;
        if value.len() > self.area.shape.node_words_max() as usize || seq & LOCKED != 0 {
            return Err(TreeError::Store(format!(
                "a put of {} words at sequence number {seq:#x} into a slot of {}",
                value.len(),
                self.area.shape.node_words_max()
            )));
        }
        let mut d = self.ep.doorbell_for(1);
        let cas = d.cas(slot, seq, seq | LOCKED);
        if d.submit().await.map_err(op_failed)?.cas(cas) != seq {
            self.puts_failed += 1;
            return Ok(false);
        }
        let mut words = Vec::with_capacity(1 + value.len());
        words.push(value.len() as u64);
        words.extend_from_slice(value);
        // Ops to one node run in order: the unlock lands after the words.
        let mut d = self.ep.doorbell_for(2);
        d.write(slot.add(1), Words::from_slice(&words));
        d.write(slot, Words::from_slice(&[seq + 1]));
        d.submit().await.map_err(op_failed)?;
        Ok(true)
    }
}

impl LlSc for VerbTree<'_> {
    async fn get(&mut self, rid: Rid) -> Result<Option<(u64, Vec<u64>)>, TreeError> {
        let slot = self.area.slot(rid)?;
        let len = self.area.shape.slot_words();
        for round in 0..GET_ATTEMPTS_MAX {
            if round >= GET_SPIN_ROUNDS {
                self.ep.sleep(GET_PAUSE_NS).await;
            }
            let mut d = self.ep.doorbell_for(2);
            let whole = d.read(slot, len);
            let again = d.read(slot, 1);
            let res = d.submit().await.map_err(op_failed)?;
            let w = res.read(whole);
            let lock = w[0];
            if lock & LOCKED != 0 || res.read(again)[0] != lock {
                continue;
            }
            if lock == 0 {
                return Ok(None);
            }
            let n = (w[1] as usize).min(w.len() - SLOT_HEAD_WORDS as usize);
            let head = SLOT_HEAD_WORDS as usize;
            return Ok(Some((lock, w[head..head + n].to_vec())));
        }
        Err(TreeError::Store(format!(
            "node {rid} held by puts through {GET_ATTEMPTS_MAX} reads"
        )))
    }

    async fn put_if(&mut self, rid: Rid, value: Vec<u64>, seq: u64) -> Result<bool, TreeError> {
        if seq == 0 {
            // Sequence number 0 is an absent node: a put over it is `put_if_absent`.
            return Ok(false);
        }
        self.put_at(rid, &value, seq).await
    }

    async fn put_if_absent(&mut self, rid: Rid, value: Vec<u64>) -> Result<bool, TreeError> {
        self.put_at(rid, &value, 0).await
    }

    async fn alloc(&mut self) -> Result<Rid, TreeError> {
        let mut d = self.ep.doorbell_for(1);
        let f = d.fetch_add(self.area.counter(), 1);
        let taken = d.submit().await.map_err(op_failed)?.fetch_add(f);
        let rid = FIRST_NODE_RID + taken;
        if rid >= self.area.shape.nodes as u64 {
            return Err(TreeError::Store(format!(
                "tree {} is out of its {} node slots",
                self.area.tree, self.area.shape.nodes
            )));
        }
        Ok(rid)
    }
}
