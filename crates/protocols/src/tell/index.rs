//! Tell's B+tree as the index its transactions find records by (`--tell-index btree`,
//! Tell §5.3): a tree per table on each storage node, in the storage node's tree region
//! ([`super::tree_store`]), mapping a key to its record slot. Built from the loaded records
//! before the run ([`build_trees`]); a processing node looks keys up by one-sided reads,
//! every lookup of a read stage sharing each round trip and its node's cache of inner nodes
//! ([`locate`]); a get by request is looked up by the storage node in its own memory
//! ([`find_local`]); an insert adds its key at the commit's index step, after the puts and
//! before the commit flag ([`add_keys`]).
//!
//! Entries are version-unaware and never leave the tree: a key keeps its slot for life
//! (Tell's slots are not reclaimed), so an entry of a deleted key, or of an insert that
//! aborted after its index step, leads to a slot whose versions say what a snapshot sees
//! (Tell's lazy deletion of index entries, which here never has to happen). The storage
//! node's hash index stays its directory of slots for inserts (`put_if_absent` by key);
//! range scans still use the engine's ordered index.

use super::btree::{Lookup, LookupStep, Tree, TreeError};
use super::config::{Index, TellConfig};
use super::tree_store::{self, parse_slot, SlotRead, TreeArea, TreeLayout, VerbTree, TREE_REGION};
use super::txn::TellEntry;
use atoll_fabric::RegionId;
use atoll_storage::layout::{H_KEY, VERSION_ABSENT};
use atoll_storage::{Catalog, Store, TableId};
use atoll_txn::msg::Loc;
use atoll_txn::{Abort, TxnCore};

/// Rounds of one lookup that find a node held by a put before the read stage gives up
/// and aborts (`Conflict`), pausing between the later ones: a put holds a node for one
/// round trip of its words.
const BUSY_ROUNDS_MAX: u32 = tree_store::GET_ATTEMPTS_MAX;
const BUSY_SPIN_ROUNDS: u32 = 4;
const BUSY_PAUSE_NS: u64 = 1_000;

/// The tree region's layout for `catalog`'s tables, as
/// [`atoll_storage::Catalog::with_table_regions`] sized it: by each table's record slots.
pub fn tree_layout(catalog: &Catalog, fanout: u32) -> TreeLayout {
    let reserved: Vec<u64> = catalog.table_slots().iter().map(|t| t.reserved).collect();
    TreeLayout::for_tables(&reserved, fanout)
}

fn region(catalog: &Catalog) -> Option<RegionId> {
    catalog
        .extra_region_named(TREE_REGION)
        .map(|i| catalog.extra_region(i))
}

/// Builds each table's tree from the records a storage node just loaded: every slot handed
/// out, by its key. Nothing to do under the hash index or on a node holding no records.
pub fn build_trees(cfg: &TellConfig, store: &Store) -> Result<(), String> {
    let Index::BTree { fanout } = cfg.index else {
        return Ok(());
    };
    let node = store.memory().node;
    if !store.catalog.topology().holds_records(node) {
        return Ok(());
    }
    let Some(region_id) = region(&store.catalog) else {
        return Err(format!(
            "tell: no {TREE_REGION} region registered for the B+tree index"
        ));
    };
    let layout = tree_layout(&store.catalog, fanout);
    let tree_region = store.memory().region(region_id);
    for t in (0..store.catalog.table_count()).map(|t| TableId(t as u16)) {
        let table = store.catalog.layout(t);
        let records = store.region(t);
        let mut entries: Vec<(u64, u64)> = (0..store.used_slots(t))
            .map(|slot| {
                let key_at = table.record_offset(slot) as usize + H_KEY as usize;
                (records.load(key_at), slot as u64)
            })
            .collect();
        entries.sort_unstable();
        let area = layout.area(node, region_id, t.0 as u32);
        tree_store::build(tree_region, &area, fanout, &entries).map_err(|e| {
            format!(
                "tell: building the B+tree of table {} ({} keys) on node {}: {e:?}",
                store.catalog.spec(t).name,
                entries.len(),
                node.0
            )
        })?;
    }
    Ok(())
}

/// The fanout when the B+tree is the index (`None`: the hash index).
pub fn fanout(tx: &TxnCore<'_, TellEntry>) -> Option<u32> {
    match tx.c.cfg.family_as::<TellConfig>().index {
        Index::Hash => None,
        Index::BTree { fanout } => Some(fanout),
    }
}

/// Finds the slots of entries `idxs` not yet located, by the run's index; a key the index
/// does not hold aborts `NotFound`.
pub async fn locate(tx: &mut TxnCore<'_, TellEntry>, idxs: &[usize]) -> Result<(), Abort> {
    match fanout(tx) {
        None => atoll_txn::stages::locate(tx, idxs).await,
        Some(f) => locate_by_tree(tx, idxs, f).await,
    }
}

/// Why a tree operation ends the attempt: a tree out of node slots is a full table; one
/// whose writers kept beating it, or a busy node, a conflict. A malformed node is a broken
/// invariant of the tree, not an expected failure.
fn tree_abort(e: TreeError) -> Abort {
    match e {
        TreeError::Full { .. } => Abort::TableFull,
        TreeError::Contended { .. } | TreeError::Store(_) => Abort::Conflict,
        // No workload key is all ones; a tree cannot hold it, so it holds no such record.
        TreeError::KeyOutOfRange(_) => Abort::NotFound,
        TreeError::Malformed { rid, what } => {
            panic!("tell: a B+tree node at rid {rid} is malformed: {what}")
        }
    }
}

/// One entry's lookup under way.
struct Pending {
    entry: usize,
    tree: Tree,
    lookup: Lookup,
    area: TreeArea,
    busy: u32,
}

/// Looks every key of `idxs` up in its table's tree on its storage node: each round walks
/// every lookup down its node's cached inner nodes and reads, in one doorbell, the node
/// each needs next (a leaf, once the cache is warm), with its `LOCK` again.
async fn locate_by_tree(
    tx: &mut TxnCore<'_, TellEntry>,
    idxs: &[usize],
    fanout: u32,
) -> Result<(), Abort> {
    let state = super::txn::tell_node(tx);
    let Some(region_id) = region(&tx.c.catalog) else {
        panic!("tell: --tell-index btree without a {TREE_REGION} region");
    };
    let layout = state.tree_layout(|| tree_layout(&tx.c.catalog, fanout));
    let mut todo = Vec::new();
    for &i in idxs {
        let e = &tx.entries[i];
        if e.loc.is_some() {
            continue;
        }
        let tree = Tree::with_cache(fanout as usize, state.tree_cache(e.table, e.node));
        let lookup = tree.lookup(e.key).map_err(tree_abort)?;
        todo.push(Pending {
            entry: i,
            tree,
            lookup,
            area: layout.area(e.node, region_id, e.table.0 as u32),
            busy: 0,
        });
    }
    // Each lookup fetches at most ATTEMPTS_MAX nodes and waits on at most BUSY_ROUNDS_MAX
    // busy ones ([`Tree::lookup_take`] and below), so this loop ends.
    let mut round = 0u32;
    while !todo.is_empty() {
        round += 1;
        let mut fetch = Vec::with_capacity(todo.len());
        let mut next = Vec::with_capacity(todo.len());
        for mut p in todo {
            match p.tree.lookup_step(&mut p.lookup) {
                LookupStep::Found(Some(rid)) => {
                    tx.entries[p.entry].loc = Some(Loc(rid as u32));
                }
                LookupStep::Found(None) => return Err(Abort::NotFound),
                LookupStep::Fetch(rid) => {
                    fetch.push(rid);
                    next.push(p);
                }
            }
        }
        todo = next;
        if todo.is_empty() {
            break;
        }
        if round > BUSY_SPIN_ROUNDS && todo.iter().any(|p| p.busy > 0) {
            tx.c.ep.sleep(BUSY_PAUSE_NS).await;
        }
        let mut d = tx.c.ep.doorbell_for(2 * todo.len());
        let mut ops = Vec::with_capacity(todo.len());
        for (p, &rid) in todo.iter().zip(&fetch) {
            let slot = p.area.slot(rid).map_err(tree_abort)?;
            ops.push((d.read(slot, p.area.slot_words), d.read(slot, 1)));
        }
        let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
        for ((p, &rid), &(whole, again)) in todo.iter_mut().zip(&fetch).zip(&ops) {
            let words = match parse_slot(res.read(whole), res.read(again)[0]) {
                SlotRead::Busy => {
                    p.busy += 1;
                    if p.busy > BUSY_ROUNDS_MAX {
                        return Err(Abort::Conflict);
                    }
                    continue;
                }
                SlotRead::Absent => None,
                SlotRead::Node(_, w) => Some(w),
            };
            p.tree
                .lookup_take(&mut p.lookup, rid, words)
                .map_err(tree_abort)?;
        }
    }
    Ok(())
}

/// The commit's index step: puts each inserted key of `ins` (placed, so located) into its
/// table's tree, by conditional puts over one-sided verbs. An inserted key already there
/// (a deleted record's slot taken again) keeps its entry.
pub async fn add_keys(tx: &mut TxnCore<'_, TellEntry>, ins: &[usize]) -> Result<(), Abort> {
    let Some(fanout) = fanout(tx) else {
        return Ok(());
    };
    let state = super::txn::tell_node(tx);
    let Some(region_id) = region(&tx.c.catalog) else {
        panic!("tell: --tell-index btree without a {TREE_REGION} region");
    };
    let layout = state.tree_layout(|| tree_layout(&tx.c.catalog, fanout));
    // Each tree's keys in one sorted batch: consecutive keys share a leaf's put.
    let mut by_tree: std::collections::BTreeMap<(TableId, atoll_fabric::NodeId), Vec<(u64, u64)>> =
        std::collections::BTreeMap::new();
    for &i in ins {
        let e = &tx.entries[i];
        let loc = e.loc.expect("an insert is placed before the index step").0;
        by_tree
            .entry((e.table, e.node))
            .or_default()
            .push((e.key, loc as u64));
    }
    for ((table, node), mut keys) in by_tree {
        keys.sort_unstable();
        let area = layout.area(node, region_id, table.0 as u32);
        let mut tree = Tree::with_cache(fanout as usize, state.tree_cache(table, node));
        let mut store = VerbTree::new(&tx.c.ep, area);
        let r = tree.insert_sorted(&mut store, &keys).await;
        let failed = store.failed.take();
        match (r, failed) {
            (Ok(_), _) => {}
            (Err(_), Some(op)) => return Err(tx.op_failed(op)),
            (Err(e), None) => return Err(tree_abort(e)),
        }
    }
    Ok(())
}

/// A storage node's lookup of `key` in its own tree of `t` (a get by request), with the
/// region's `layout`: the slot, or `None`; `Err` when puts held a node through every read.
pub fn find_local(
    store: &Store,
    layout: &TreeLayout,
    t: TableId,
    key: u64,
) -> Result<Option<u32>, TreeError> {
    let Some(region_id) = region(&store.catalog) else {
        panic!("tell: --tell-index btree without a {TREE_REGION} region");
    };
    let mut local = tree_store::LocalTree {
        region: store.memory().region(region_id),
        area: layout.area(store.memory().node, region_id, t.0 as u32),
    };
    let mut tree = Tree::new(layout.fanout as usize);
    match tree_store::now(tree.get(&mut local, key)) {
        Ok(rid) => Ok(rid.map(|r| r as u32)),
        Err(TreeError::KeyOutOfRange(_)) => Ok(None),
        Err(TreeError::Malformed { rid, what }) => {
            panic!("tell: a B+tree node at rid {rid} is malformed: {what}")
        }
        Err(e) => Err(e),
    }
}

/// Checks, on a storage node after a run, that each live record is found by its key in its
/// table's B+tree, at its own slot (an insert whose key missed the index step would be
/// committed but out of every lookup's reach).
pub fn check_trees(cfg: &TellConfig, store: &Store) -> Vec<atoll_txn::knobs::StateCheck> {
    let Index::BTree { fanout } = cfg.index else {
        return Vec::new();
    };
    let mut c = atoll_txn::knobs::StateCheck {
        name: "tell.index_reaches_every_record",
        what: "a live record is found by its key in its table's B+tree, at its slot",
        ..Default::default()
    };
    let layout = tree_layout(&store.catalog, fanout);
    let mut tuple = Vec::new();
    for t in (0..store.catalog.table_count()).map(|t| TableId(t as u16)) {
        tuple.resize(store.catalog.layout(t).tuple_words as usize, 0);
        for slot in 0..store.used_slots(t) {
            store.read_tuple(t, slot, &mut tuple);
            if tuple[VERSION_AT] & VERSION_ABSENT != 0 {
                continue;
            }
            c.checked += 1;
            let key = tuple[H_KEY as usize];
            let found = find_local(store, &layout, t, key);
            if found != Ok(Some(slot)) {
                c.failed += 1;
                if c.examples.len() < CHECK_EXAMPLES_MAX {
                    c.examples.push(format!(
                        "{}:{key} at slot {slot} on node {} (the tree: {found:?})",
                        store.catalog.spec(t).name,
                        store.memory().node.0
                    ));
                }
            }
        }
    }
    vec![c]
}

/// Failed items a check names.
const CHECK_EXAMPLES_MAX: usize = 5;
const VERSION_AT: usize = atoll_storage::layout::H_VERSION as usize;
