//! Tell's latch-free B+tree in Atoll's store: nodes in a storage node's tree region, read
//! and changed by processing nodes' one-sided verbs only (`tell::tree_store`), against a
//! `BTreeMap` under concurrent writers on two processing nodes.

use atoll_fabric::NodeId;
use atoll_protocols::tell::btree::{LlSc, Rid, Tree, TreeError, KEY_MAX};
use atoll_protocols::tell::config::{Index, TellConfig};
use atoll_protocols::tell::index::tree_layout;
use atoll_protocols::tell::tree_store::{TreeArea, VerbTree, TREE_REGION};
use atoll_storage::{Partition, Placement, TableSpec, Topology};
use atoll_txn::{Plan, Primitive};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Writers on each processing node.
const COROUTINES: u32 = 4;
const WRITERS: u64 = 2 * COROUTINES as u64;
/// Keys the writers share out (writer `w` owns those equal to `w` mod [`WRITERS`]).
const KEYS: u64 = 800;
const OPS_EACH: u64 = 300;

/// [`VerbTree`] that yields to the other co-routines before each operation: the scripted
/// cluster completes a doorbell to memory in place, so without a yield no writer's put
/// would fall between another's get and conditional put.
struct Yielding<'a>(VerbTree<'a>);

impl LlSc for Yielding<'_> {
    async fn get(&mut self, rid: Rid) -> Result<Option<(u64, Vec<u64>)>, TreeError> {
        self.0.ep.yield_now().await;
        self.0.get(rid).await
    }
    async fn put_if(&mut self, rid: Rid, value: Vec<u64>, seq: u64) -> Result<bool, TreeError> {
        self.0.ep.yield_now().await;
        self.0.put_if(rid, value, seq).await
    }
    async fn put_if_absent(&mut self, rid: Rid, value: Vec<u64>) -> Result<bool, TreeError> {
        self.0.ep.yield_now().await;
        self.0.put_if_absent(rid, value).await
    }
    async fn alloc(&mut self) -> Result<Rid, TreeError> {
        self.0.ep.yield_now().await;
        self.0.alloc().await
    }
}

/// A cluster of one storage node holding the B+tree index's region for tables of
/// `capacities` record slots (a tree each, of `fanout`), two processing nodes and Tell's
/// commit manager on a node of its own.
fn tree_cluster(capacities: &[u32], fanout: u32) -> atoll_testkit::TestCluster {
    let topology = Topology::shared_data(1, 2)
        .with_service(atoll_protocols::tell::node::CM_ROLE, Placement::Own);
    let family = TellConfig {
        index: Index::BTree { fanout },
        ..TellConfig::default()
    };
    let tables = capacities
        .iter()
        .enumerate()
        .map(|(t, &cap)| TableSpec {
            name: format!("t{t}"),
            payload_words: 1,
            capacity_per_node: cap,
            capacity_max_per_node: Some(cap),
            partition: Partition::Modulo,
            ordered: false,
            gone_keys_max_per_node: 0,
        })
        .collect();
    let mut record = atoll_testkit::RecordShape::of::<atoll_protocols::Tell>(2);
    record.family = Arc::new(family);
    atoll_testkit::TestCluster::with_topology(
        topology,
        0,
        tables,
        Plan::uniform(Primitive::OneSided),
        COROUTINES,
        record,
    )
}

/// Tree `t`'s area on the storage node.
fn area(c: &atoll_testkit::TestCluster, fanout: u32, t: u32) -> TreeArea {
    let i = c
        .catalog
        .extra_region_named(TREE_REGION)
        .expect("the tree region is registered");
    tree_layout(&c.catalog, fanout).area(NodeId(0), c.catalog.extra_region(i), t)
}

#[test]
fn tell_btree_in_the_store_agrees_with_a_btreemap_under_writers_on_two_processing_nodes() {
    const FANOUT: u32 = 6;
    let c = tree_cluster(&[16, 4_096], FANOUT);
    // The second tree of the region, so an area's offset is exercised.
    let at = area(&c, FANOUT, 1);
    // Made once, by one co-routine.
    c.run(&|core, k| {
        (core.id.node == NodeId(1) && k == 0).then(|| {
            let co = c.coordinator(core, k);
            Box::pin(async move {
                let mut store = VerbTree::new(&co.ep, at);
                Tree::create(&mut store).await.unwrap();
            }) as atoll_fabric::Coroutine
        })
    });
    let model: Arc<Mutex<BTreeMap<u64, u64>>> = Arc::default();
    let model_ref = &model;
    let raced = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let raced_ref = &raced;
    c.run(&|core, k| {
        let pn = core.id.node.0.checked_sub(1).filter(|&p| p < 2)?;
        let co = c.coordinator(core, k);
        let w = pn as u64 * COROUTINES as u64 + k as u64;
        let (model, raced) = (model_ref.clone(), raced_ref.clone());
        Some(Box::pin(async move {
            let mut store = Yielding(VerbTree::new(&co.ep, at));
            let mut tree = Tree::new(FANOUT as usize);
            let mut rng = atoll_fabric::rng::Rng::derive(11, w);
            for i in 0..OPS_EACH {
                let key = rng.below(KEYS / WRITERS) * WRITERS + w;
                if rng.below(4) == 0 {
                    let had = tree.remove(&mut store, key).await.unwrap();
                    assert_eq!(
                        had,
                        model.lock().unwrap().remove(&key).is_some(),
                        "key {key}"
                    );
                } else {
                    let new = tree.insert(&mut store, key, i + 1).await.unwrap();
                    let mut m = model.lock().unwrap();
                    assert_eq!(new, !m.contains_key(&key), "key {key}");
                    m.entry(key).or_insert(i + 1);
                }
                // Every key this writer owns reads back as the model has it.
                let probe = rng.below(KEYS / WRITERS) * WRITERS + w;
                let got = tree.get(&mut store, probe).await.unwrap();
                assert_eq!(
                    got,
                    model.lock().unwrap().get(&probe).copied(),
                    "key {probe}"
                );
            }
            raced.fetch_add(store.0.puts_failed, std::sync::atomic::Ordering::Relaxed);
        }) as atoll_fabric::Coroutine)
    });
    let all = Arc::new(Mutex::new(Vec::new()));
    let all_ref = &all;
    c.run(&|core, k| {
        (core.id.node == NodeId(2) && k == 0).then(|| {
            let co = c.coordinator(core, k);
            let all = all_ref.clone();
            Box::pin(async move {
                let mut store = VerbTree::new(&co.ep, at);
                let found = Tree::new(FANOUT as usize)
                    .scan(&mut store, 0, KEY_MAX)
                    .await
                    .unwrap();
                *all.lock().unwrap() = found;
            }) as atoll_fabric::Coroutine
        })
    });
    let expect: Vec<(u64, u64)> = model
        .lock()
        .unwrap()
        .iter()
        .map(|(&k, &v)| (k, v))
        .collect();
    assert!(expect.len() > 100, "{} keys left", expect.len());
    assert_eq!(*all.lock().unwrap(), expect);
    // The writers' conditional puts met each other's.
    assert!(
        raced.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the writers never raced"
    );
}

#[test]
fn tell_btree_in_the_store_out_of_node_slots_is_a_typed_error_not_a_write_past_its_area() {
    const FANOUT: u32 = 3;
    let c = tree_cluster(&[1, 1], FANOUT);
    let slots = tree_layout(&c.catalog, FANOUT).nodes[0];
    let failed: Arc<Mutex<Option<TreeError>>> = Arc::default();
    let failed_ref = &failed;
    c.run(&|core, k| {
        (core.id.node == NodeId(1) && k == 0).then(|| {
            let co = c.coordinator(core, k);
            let failed = failed_ref.clone();
            let first = area(&c, FANOUT, 0);
            Box::pin(async move {
                let mut store = VerbTree::new(&co.ep, first);
                Tree::create(&mut store).await.unwrap();
                let mut tree = Tree::new(FANOUT as usize);
                for key in 0..1_000 {
                    if let Err(e) = tree.insert(&mut store, key, key + 1).await {
                        *failed.lock().unwrap() = Some(e);
                        return;
                    }
                }
            }) as atoll_fabric::Coroutine
        })
    });
    let e = failed
        .lock()
        .unwrap()
        .clone()
        .expect("a tree sized for one key cannot hold 1,000");
    assert_eq!(
        e,
        TreeError::Full {
            tree: 0,
            nodes: slots
        }
    );
    // The next tree's area is untouched: its counter and first slots still zero.
    let second = c.catalog.extra_region(
        c.catalog
            .extra_region_named(TREE_REGION)
            .expect("registered"),
    );
    let mem = c.stores[0].memory().region(second);
    let layout = tree_layout(&c.catalog, FANOUT);
    let from = layout.area_base(1) as usize;
    assert!((from..from + 3 * layout.slot_words() as usize).all(|w| mem.load(w) == 0));
}
