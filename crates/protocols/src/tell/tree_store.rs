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

use super::btree::{LlSc, Node, Rid, TreeError, KEY_MAX, ROOT_RID};
use atoll_fabric::{Endpoint, NodeId, Region, RegionId, RemotePtr, Words};

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

/// The shape of the region: how many trees, and each one's node slots and fanout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeLayout {
    /// Entries a node holds at most ([`super::btree::Tree::new`]).
    pub fanout: u32,
    /// Node slots of each tree (rids `0..nodes`; the first two are not nodes).
    pub nodes: Vec<u32>,
}

/// Bytes of a word.
const WORD_BYTES: u64 = std::mem::size_of::<u64>() as u64;

/// Keys of the tree whose slots per key [`TreeLayout::bytes_per_key`] takes (the fixed
/// slots of a small tree spread over many keys).
const BYTES_PER_KEY_SAMPLE: u64 = 1 << 20;

/// Node slots a tree keeps beyond the bound on its live nodes, in parts of that bound
/// ([`TreeLayout::nodes_for`]): the right nodes of splits that lost their race take a
/// slot each and are never linked.
const ORPHAN_SLACK_PARTS: u64 = 8;
/// And at least this many.
const ORPHAN_SLACK_MIN: u64 = 64;

impl TreeLayout {
    /// `trees` trees of `nodes` slots each.
    pub fn uniform(trees: u32, nodes: u32, fanout: u32) -> Self {
        TreeLayout {
            fanout,
            nodes: vec![nodes; trees as usize],
        }
    }

    /// A tree per table, each with room for `records[t]` keys ([`TreeLayout::nodes_for`]).
    /// A count of slots past a u32 is held at `u32::MAX`: such a region is past a region's
    /// word limit, which the run's sizing refuses before anything is allocated.
    pub fn for_tables(records: &[u64], fanout: u32) -> Self {
        let nodes = records
            .iter()
            .map(|&r| u32::try_from(Self::nodes_for(r, fanout)).unwrap_or(u32::MAX))
            .collect();
        TreeLayout { fanout, nodes }
    }

    /// Slots a tree of up to `keys` keys needs: a node holds at least half its fanout
    /// (a split leaves each half that; the bulk build fills nodes fuller), so each level has
    /// at most `ceil(below / half) + 1` nodes; plus the two rids that are not nodes and room
    /// for orphaned split halves.
    pub fn nodes_for(keys: u64, fanout: u32) -> u64 {
        let half = (fanout as u64 / 2).max(1);
        // An inner node holds at least `half` keys, so `half + 1` children.
        let mut level = keys.div_ceil(half) + 1;
        let mut total = level;
        while level > 1 {
            // Fewer each level up (a level of two or three nodes of fanout 3 may have as many
            // parents by the bound; it has fewer).
            level = (level.div_ceil(half + 1) + 1).min(level - 1);
            total += level;
        }
        let live = total + FIRST_NODE_RID;
        live + (live / ORPHAN_SLACK_PARTS).max(ORPHAN_SLACK_MIN)
    }

    /// Words of a node of at most `fanout` keys: `[level, low, high, right, n]`, the keys
    /// and one value more than the keys (an inner node's children).
    pub fn node_words_max(&self) -> u32 {
        5 + 2 * self.fanout + 1
    }

    pub fn slot_words(&self) -> u32 {
        SLOT_HEAD_WORDS + self.node_words_max()
    }

    /// Words of tree `t`'s area: the counter and its slots.
    pub fn area_words(&self, t: u32) -> u64 {
        1 + self.nodes[t as usize] as u64 * self.slot_words() as u64
    }

    /// Word offset of tree `t`'s area in the region.
    pub fn area_base(&self, t: u32) -> u64 {
        (0..t).map(|u| self.area_words(u)).sum()
    }

    /// Words of the whole region.
    pub fn region_words(&self) -> u64 {
        (0..self.nodes.len() as u32)
            .map(|t| self.area_words(t))
            .sum()
    }

    pub fn region_bytes(&self) -> u64 {
        self.region_words() * WORD_BYTES
    }

    /// Bytes of node slots a tree of `fanout` takes per key, rounded up, as
    /// [`TreeLayout::nodes_for`] counts them for a large tree: what an insert takes from the
    /// run's memory budget for its key's share of the tree's growth.
    pub fn bytes_per_key(fanout: u32) -> u64 {
        let keys = BYTES_PER_KEY_SAMPLE;
        let slot_bytes = Self::uniform(0, 0, fanout).slot_words() as u64 * WORD_BYTES;
        (Self::nodes_for(keys, fanout) * slot_bytes).div_ceil(keys)
    }

    /// Tree `t`'s area in region `region` of storage node `node`.
    pub fn area(&self, node: NodeId, region: RegionId, t: u32) -> TreeArea {
        TreeArea {
            node,
            region,
            tree: t,
            base: self.area_base(t),
            nodes: self.nodes[t as usize],
            slot_words: self.slot_words(),
            node_words_max: self.node_words_max(),
        }
    }
}

/// One tree's area on one storage node, as a processing node reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeArea {
    pub node: NodeId,
    pub region: RegionId,
    /// Which of the region's trees.
    pub tree: u32,
    /// Word offset of its counter in the region.
    pub base: u64,
    pub nodes: u32,
    pub slot_words: u32,
    pub node_words_max: u32,
}

impl TreeArea {
    fn counter(&self) -> RemotePtr {
        RemotePtr::new(self.node, self.region, self.base as u32)
    }

    /// Word offset of `rid`'s slot in the region, or why there is none.
    fn slot_at(&self, rid: Rid) -> Result<u64, TreeError> {
        if rid < ROOT_RID || rid >= self.nodes as u64 {
            return Err(TreeError::Store(format!(
                "rid {rid} outside tree {}'s {} slots",
                self.tree, self.nodes
            )));
        }
        Ok(self.base + 1 + rid * self.slot_words as u64)
    }

    /// The slot of `rid`, or why there is none.
    pub fn slot(&self, rid: Rid) -> Result<RemotePtr, TreeError> {
        let at = self.slot_at(rid)?;
        Ok(RemotePtr::new(self.node, self.region, at as u32))
    }

    fn out_of_slots(&self) -> TreeError {
        TreeError::Full {
            tree: self.tree,
            nodes: self.nodes,
        }
    }
}

/// What one read of a slot (its words, then its `LOCK` again) shows.
#[derive(Debug, PartialEq, Eq)]
pub enum SlotRead<'w> {
    /// A put held it, or one landed between the two reads: read it again.
    Busy,
    Absent,
    /// The node's words and its sequence number.
    Node(u64, &'w [u64]),
}

/// Reads `whole` (a slot's words) and `lock_again` (its `LOCK` read after them).
pub fn parse_slot(whole: &[u64], lock_again: u64) -> SlotRead<'_> {
    let lock = whole[0];
    if lock & LOCKED != 0 || lock_again != lock {
        return SlotRead::Busy;
    }
    if lock == 0 {
        return SlotRead::Absent;
    }
    let head = SLOT_HEAD_WORDS as usize;
    let n = (whole[1] as usize).min(whole.len() - head);
    SlotRead::Node(lock, &whole[head..head + n])
}

/// [`LlSc`] over one-sided verbs on one tree's area.
pub struct VerbTree<'a> {
    pub ep: &'a Endpoint,
    pub area: TreeArea,
    /// Conditional puts that found another put since the read (the CAS failed).
    pub puts_failed: u64,
    /// The verb failure behind the last [`TreeError::Store`] (a node that stopped
    /// answering), for the caller's transaction to count.
    pub failed: Option<atoll_fabric::OpError>,
}

impl<'a> VerbTree<'a> {
    pub fn new(ep: &'a Endpoint, area: TreeArea) -> Self {
        VerbTree {
            ep,
            area,
            puts_failed: 0,
            failed: None,
        }
    }

    fn op_failed(&mut self, e: atoll_fabric::OpError) -> TreeError {
        let what = TreeError::Store(format!("a verb failed: {e}"));
        self.failed = Some(e);
        what
    }
}

impl VerbTree<'_> {
    /// CAS of `LOCK` from `seq` to locked, then the node's words and `seq + 1`.
    async fn put_at(&mut self, rid: Rid, value: &[u64], seq: u64) -> Result<bool, TreeError> {
        let slot = self.area.slot(rid)?;
        if value.len() > self.area.node_words_max as usize || seq & LOCKED != 0 {
            return Err(TreeError::Store(format!(
                "a put of {} words at sequence number {seq:#x} into a slot of {}",
                value.len(),
                self.area.node_words_max
            )));
        }
        let mut d = self.ep.doorbell_for(1);
        let cas = d.cas(slot, seq, seq | LOCKED);
        let done = d.submit().await.map_err(|e| self.op_failed(e))?;
        if done.cas(cas) != seq {
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
        d.submit().await.map_err(|e| self.op_failed(e))?;
        Ok(true)
    }
}

impl LlSc for VerbTree<'_> {
    async fn get(&mut self, rid: Rid) -> Result<Option<(u64, Vec<u64>)>, TreeError> {
        let slot = self.area.slot(rid)?;
        let len = self.area.slot_words;
        for round in 0..GET_ATTEMPTS_MAX {
            if round >= GET_SPIN_ROUNDS {
                self.ep.sleep(GET_PAUSE_NS).await;
            }
            let mut d = self.ep.doorbell_for(2);
            let whole = d.read(slot, len);
            let again = d.read(slot, 1);
            let res = d.submit().await.map_err(|e| self.op_failed(e))?;
            match parse_slot(res.read(whole), res.read(again)[0]) {
                SlotRead::Busy => continue,
                SlotRead::Absent => return Ok(None),
                SlotRead::Node(seq, w) => return Ok(Some((seq, w.to_vec()))),
            }
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
        let taken = d
            .submit()
            .await
            .map_err(|e| self.op_failed(e))?
            .fetch_add(f);
        let rid = FIRST_NODE_RID + taken;
        if rid >= self.area.nodes as u64 {
            return Err(self.area.out_of_slots());
        }
        Ok(rid)
    }
}

/// [`LlSc`] over a tree's area in this node's own memory: the storage node's side (a get
/// by key a request asks for, the build after the load). Its puts follow the verbs' slot
/// protocol, so they interleave safely with processing nodes' one-sided ones; each
/// operation completes without waiting ([`now`]).
pub struct LocalTree<'a> {
    pub region: &'a Region,
    pub area: TreeArea,
}

impl LocalTree<'_> {
    fn put_at(&mut self, rid: Rid, value: &[u64], seq: u64) -> Result<bool, TreeError> {
        let at = self.area.slot_at(rid)? as usize;
        if value.len() > self.area.node_words_max as usize || seq & LOCKED != 0 {
            return Err(TreeError::Store(format!(
                "a put of {} words at sequence number {seq:#x} into a slot of {}",
                value.len(),
                self.area.node_words_max
            )));
        }
        if self.region.cas(at, seq, seq | LOCKED) != seq {
            return Ok(false);
        }
        self.region.store(at + 1, value.len() as u64);
        self.region.write_from(at + SLOT_HEAD_WORDS as usize, value);
        self.region.store(at, seq + 1);
        Ok(true)
    }
}

impl LlSc for LocalTree<'_> {
    async fn get(&mut self, rid: Rid) -> Result<Option<(u64, Vec<u64>)>, TreeError> {
        let at = self.area.slot_at(rid)? as usize;
        let mut words = vec![0; self.area.node_words_max as usize];
        for _ in 0..GET_ATTEMPTS_MAX * GET_SPIN_ROUNDS {
            let lock = self.region.load(at);
            if lock & LOCKED != 0 {
                std::hint::spin_loop();
                continue;
            }
            let n = (self.region.load(at + 1) as usize).min(words.len());
            self.region
                .read_into(at + SLOT_HEAD_WORDS as usize, &mut words[..n]);
            if self.region.load(at) != lock {
                continue;
            }
            if lock == 0 {
                return Ok(None);
            }
            words.truncate(n);
            return Ok(Some((lock, words)));
        }
        Err(TreeError::Store(format!(
            "node {rid} held by puts through {} reads",
            GET_ATTEMPTS_MAX * GET_SPIN_ROUNDS
        )))
    }

    async fn put_if(&mut self, rid: Rid, value: Vec<u64>, seq: u64) -> Result<bool, TreeError> {
        if seq == 0 {
            return Ok(false);
        }
        self.put_at(rid, &value, seq)
    }

    async fn put_if_absent(&mut self, rid: Rid, value: Vec<u64>) -> Result<bool, TreeError> {
        self.put_at(rid, &value, 0)
    }

    async fn alloc(&mut self) -> Result<Rid, TreeError> {
        let rid = FIRST_NODE_RID + self.region.fetch_add(self.area.base as usize, 1);
        if rid >= self.area.nodes as u64 {
            return Err(self.area.out_of_slots());
        }
        Ok(rid)
    }
}

/// The value of a future that never waits ([`LocalTree`]'s operations).
pub fn now<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => unreachable!("tell: a local tree operation waited"),
    }
}

/// Entries of a bulk-built node, in parts of the fanout: room for a few inserts before a
/// split, and at least half the fanout (what [`TreeLayout::nodes_for`] counts on).
const BUILD_FILL_NUM: u32 = 3;
const BUILD_FILL_DEN: u32 = 4;

/// Builds a tree of `entries` (`(key, rid)` in ascending key order, no key twice, none
/// [`KEY_MAX`]) into an empty area of this node's memory, bottom up: leaves filled to
/// three quarters of the fanout, each level's nodes linked right, the root record last.
/// What [`super::btree::Tree::create`] and inserts would make, without their round trips.
pub fn build(
    region: &Region,
    area: &TreeArea,
    fanout: u32,
    entries: &[(u64, Rid)],
) -> Result<(), TreeError> {
    if let Some(w) = entries.windows(2).find(|w| w[0].0 >= w[1].0) {
        return Err(TreeError::Malformed {
            rid: ROOT_RID,
            what: format!("a build of keys out of order ({} then {})", w[0].0, w[1].0),
        });
    }
    if entries.last().is_some_and(|&(k, _)| k == KEY_MAX) {
        return Err(TreeError::KeyOutOfRange(KEY_MAX));
    }
    let mut store = LocalTree {
        region,
        area: *area,
    };
    let fill = ((fanout * BUILD_FILL_NUM / BUILD_FILL_DEN).max(fanout / 2)).max(1) as usize;
    // Each level as `(low, rid)` of its nodes, left to right.
    let mut level_nodes: Vec<(u64, Rid)> = Vec::new();
    let mut chunks: Vec<&[(u64, Rid)]> = entries.chunks(fill).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let rids = alloc_run(&mut store, chunks.len())?;
    for (j, c) in chunks.iter().enumerate() {
        let low = if j == 0 { 0 } else { c[0].0 };
        let high = chunks.get(j + 1).map_or(KEY_MAX, |n| n[0].0);
        let node = Node {
            level: 0,
            low,
            high,
            right: rids.get(j + 1).copied().unwrap_or(0),
            keys: c.iter().map(|e| e.0).collect(),
            values: c.iter().map(|e| e.1).collect(),
        };
        put_new(&mut store, rids[j], &node)?;
        level_nodes.push((low, rids[j]));
    }
    let mut level = 0;
    while level_nodes.len() > 1 {
        level += 1;
        // An inner node of `fill` keys has `fill + 1` children.
        let groups: Vec<&[(u64, Rid)]> = level_nodes.chunks(fill + 1).collect();
        let rids = alloc_run(&mut store, groups.len())?;
        let mut up = Vec::with_capacity(groups.len());
        for (j, g) in groups.iter().enumerate() {
            let low = g[0].0;
            let high = groups.get(j + 1).map_or(KEY_MAX, |n| n[0].0);
            let node = Node {
                level,
                low,
                high,
                right: rids.get(j + 1).copied().unwrap_or(0),
                keys: g[1..].iter().map(|c| c.0).collect(),
                values: g.iter().map(|c| c.1).collect(),
            };
            put_new(&mut store, rids[j], &node)?;
            up.push((low, rids[j]));
        }
        level_nodes = up;
    }
    if !now(store.put_if_absent(ROOT_RID, vec![level_nodes[0].1, level]))? {
        return Err(TreeError::Malformed {
            rid: ROOT_RID,
            what: "a tree exists here already".into(),
        });
    }
    Ok(())
}

/// `n` fresh rids from the counter, in order.
fn alloc_run(store: &mut LocalTree<'_>, n: usize) -> Result<Vec<Rid>, TreeError> {
    (0..n).map(|_| now(store.alloc())).collect()
}

fn put_new(store: &mut LocalTree<'_>, rid: Rid, node: &Node) -> Result<(), TreeError> {
    if now(store.put_if_absent(rid, node.to_words()))? {
        Ok(())
    } else {
        Err(TreeError::Malformed {
            rid,
            what: "a bulk build met a node there already".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tell::btree::Tree;
    use atoll_fabric::NodeMemory;
    use std::collections::BTreeMap;

    fn local_area(keys: u64, fanout: u32) -> (NodeMemory, TreeLayout) {
        let layout = TreeLayout::for_tables(&[7, keys], fanout);
        let mem = NodeMemory::new(NodeId(0), &[layout.region_words() as usize]);
        (mem, layout)
    }

    #[test]
    fn tell_btree_bulk_build_finds_every_key_and_then_takes_inserts_within_its_sized_slots() {
        for fanout in [3, 5, 32] {
            let keys = 5_000u64;
            let (mem, layout) = local_area(3 * keys, fanout);
            let region = mem.region(RegionId(0));
            // The second tree, so its area's offset is exercised; even keys at first.
            let area = layout.area(NodeId(0), RegionId(0), 1);
            let loaded: Vec<(u64, Rid)> = (0..keys).map(|k| (2 * k, k + 10)).collect();
            build(region, &area, fanout, &loaded).unwrap();
            let mut model: BTreeMap<u64, Rid> = loaded.iter().copied().collect();
            let mut store = LocalTree { region, area };
            let mut tree = Tree::new(fanout as usize);
            for k in 0..2 * keys + 2 {
                assert_eq!(
                    now(tree.get(&mut store, k)).unwrap(),
                    model.get(&k).copied(),
                    "fanout {fanout} key {k}"
                );
            }
            // Twice as many keys again, the odd ones and beyond: within the slots sized
            // for three times the loaded keys, at the least fill a split leaves.
            for k in 0..2 * keys {
                let key = if k < keys {
                    2 * k + 1
                } else {
                    2 * k + 5 * keys
                };
                now(tree.insert(&mut store, key, key)).unwrap();
                model.insert(key, key);
            }
            let all = now(tree.scan(&mut store, 0, KEY_MAX)).unwrap();
            assert_eq!(
                all,
                model.into_iter().collect::<Vec<_>>(),
                "fanout {fanout}"
            );
            // The first tree's area is untouched.
            let first = layout.area_words(0) as usize;
            assert!((0..first).all(|w| region.load(w) == 0), "fanout {fanout}");
        }
    }

    #[test]
    fn tell_btree_bulk_build_refuses_keys_out_of_order_and_an_area_in_use() {
        let (mem, layout) = local_area(100, 4);
        let region = mem.region(RegionId(0));
        let area = layout.area(NodeId(0), RegionId(0), 1);
        assert!(matches!(
            build(region, &area, 4, &[(5, 1), (3, 2)]),
            Err(TreeError::Malformed { .. })
        ));
        build(region, &area, 4, &[(3, 1), (5, 2)]).unwrap();
        assert!(build(region, &area, 4, &[(3, 1)]).is_err());
        // An empty table's tree is one empty leaf.
        let empty = layout.area(NodeId(0), RegionId(0), 0);
        build(region, &empty, 4, &[]).unwrap();
        let mut store = LocalTree {
            region,
            area: empty,
        };
        assert_eq!(now(Tree::new(4).get(&mut store, 3)).unwrap(), None);
    }

    #[test]
    fn tell_btree_slots_per_key_stay_a_small_share_of_a_record() {
        // 32 keys a node: a 72-word slot per 16 keys at worst, about 40 bytes a key.
        let per_key = TreeLayout::bytes_per_key(32);
        assert!((30..=50).contains(&per_key), "{per_key} bytes a key");
        assert!(TreeLayout::nodes_for(0, 32) > FIRST_NODE_RID);
    }
}
