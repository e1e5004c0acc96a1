//! Criterion benchmarks of the hot paths, so a regression shows: a local READ, a remote
//! READ and CAS, an RPC round trip, and whole SmallBank and YCSB transactions (OCC,
//! one-sided and rpc), on a small in-process cluster carried by one OS thread.
//!
//! Each sample runs a fresh cluster whose co-routine times `iters` operations itself
//! (criterion's `iter_custom`), so building and loading the cluster is never measured.
//! Run with `cargo bench -p atoll-runner --bench hot_paths`.

use atoll_fabric::rng::Rng;
use atoll_fabric::{Coroutine, NodeId, WorkerCore};
use atoll_protocols::Occ;
use atoll_storage::{TableId, TableSpec};
use atoll_testkit::TestCluster;
use atoll_txn::msg::{Item, Request};
use atoll_txn::{Plan, Primitive, Txn};
use atoll_workloads::smallbank::SmallBank;
use atoll_workloads::ycsb::Ycsb;
use atoll_workloads::{Params, Workload};
use criterion::{criterion_group, criterion_main, Criterion};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Records of the verb benchmarks' table per node, and their payload words.
const VERB_RECORDS: u64 = 1024;
const VERB_PAYLOAD_WORDS: u32 = 8;
/// Seed of the workload benchmarks' generators.
const SEED: u64 = 7;

fn verb_table() -> Vec<TableSpec> {
    vec![TableSpec {
        name: "t".into(),
        payload_words: VERB_PAYLOAD_WORDS,
        capacity_per_node: VERB_RECORDS as u32,
        capacity_max_per_node: Some(VERB_RECORDS as u32),
        partition: atoll_storage::Partition::Range {
            keys_per_node: VERB_RECORDS,
        },
        ordered: false,
        gone_keys_max_per_node: 0,
    }]
}

/// A cluster of `nodes` nodes whose node-0 co-routine runs `body(core, iters)` and returns
/// the time it measured; the other nodes only serve.
fn timed(
    cluster: &TestCluster,
    iters: u64,
    body: impl Fn(Rc<WorkerCore>, u64, Arc<Mutex<Duration>>) -> Coroutine + Sync,
) -> Duration {
    let took = Arc::new(Mutex::new(Duration::ZERO));
    cluster.run(&|core, k| {
        (core.node() == NodeId(0) && k == 0).then(|| body(core.clone(), iters, took.clone()))
    });
    let d = *took.lock().unwrap();
    d
}

fn verbs(c: &mut Criterion) {
    let mut g = c.benchmark_group("verbs");
    let cluster = |nodes| {
        let cl = TestCluster::new(nodes, verb_table(), Plan::uniform(Primitive::OneSided), 1);
        for s in &cl.stores {
            let base = s.node.0 as u64 * VERB_RECORDS;
            for k in base..base + VERB_RECORDS {
                s.insert(TableId(0), k, &[0; VERB_PAYLOAD_WORDS as usize])
                    .expect("sized for the records");
            }
        }
        cl
    };
    let words = atoll_storage::layout::HEADER_WORDS + VERB_PAYLOAD_WORDS;
    for (name, nodes, target) in [("local_read", 1, 0u64), ("remote_read", 2, VERB_RECORDS)] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let cl = cluster(nodes);
                let ptr = cl.record_ptr(TableId(0), target);
                timed(&cl, iters, move |core, iters, took| {
                    Box::pin(async move {
                        let ep = atoll_fabric::Endpoint::new(core, atoll_fabric::TaskId(0));
                        let t0 = Instant::now();
                        for _ in 0..iters {
                            std::hint::black_box(ep.read(ptr, words).await.unwrap());
                        }
                        *took.lock().unwrap() = t0.elapsed();
                    })
                })
            })
        });
    }
    g.bench_function("remote_cas", |b| {
        b.iter_custom(|iters| {
            let cl = cluster(2);
            let ptr = cl.record_ptr(TableId(0), VERB_RECORDS);
            timed(&cl, iters, move |core, iters, took| {
                Box::pin(async move {
                    let ep = atoll_fabric::Endpoint::new(core, atoll_fabric::TaskId(0));
                    let t0 = Instant::now();
                    for i in 0..iters {
                        std::hint::black_box(ep.cas(ptr, i, i + 1).await.unwrap());
                    }
                    *took.lock().unwrap() = t0.elapsed();
                })
            })
        })
    });
    g.bench_function("rpc_read", |b| {
        b.iter_custom(|iters| {
            let cl = cluster(2);
            let mut req = Vec::new();
            Request::Read {
                items: vec![Item {
                    table: TableId(0),
                    key: VERB_RECORDS,
                    loc: None,
                }],
            }
            .encode(&mut req);
            timed(&cl, iters, move |core, iters, took| {
                let req = req.clone();
                Box::pin(async move {
                    let ep = atoll_fabric::Endpoint::new(core, atoll_fabric::TaskId(0));
                    let t0 = Instant::now();
                    for _ in 0..iters {
                        std::hint::black_box(ep.rpc(NodeId(1), req.clone()).await.unwrap());
                    }
                    *took.lock().unwrap() = t0.elapsed();
                })
            })
        })
    });
    g.finish();
}

/// Runs `iters` transactions of `w` (retrying aborted ones) from node 0's co-routine.
fn transactions<W: Workload + Clone>(
    c: &mut Criterion,
    name: &str,
    w: W,
    nodes: u16,
    primitive: Primitive,
) {
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let cl = TestCluster::new(nodes, w.tables(nodes), Plan::uniform(primitive), 1);
            for s in &cl.stores {
                w.load(s).expect("sized for the load");
            }
            let w = w.clone();
            let cl = &cl;
            timed(cl, iters, move |core, iters, took| {
                let (w, mut c) = (w.clone(), cl.coordinator(&core, 0));
                Box::pin(async move {
                    let mut rng = Rng::new(SEED);
                    let t0 = Instant::now();
                    for _ in 0..iters {
                        let (_, input) = w.generate(&mut rng, nodes, NodeId(0));
                        // Bounded by the workload: a lone coordinator's attempt aborts only
                        // on its own logic (a user abort ends the transaction).
                        let mut tx = Txn::<Occ>::begin(&mut c);
                        match w.execute(&mut tx, &input).await {
                            Ok(_) => {
                                let _ = tx.commit().await;
                            }
                            Err(_) => tx.rollback().await,
                        }
                    }
                    *took.lock().unwrap() = t0.elapsed();
                })
            })
        })
    });
}

fn workloads(c: &mut Criterion) {
    let nodes = 2;
    let smallbank = SmallBank::from_params(&Params::default()).expect("defaults are valid");
    // YCSB's engine work alone: no think time (RCC's default spins 5 µs per transaction).
    let ycsb_params: Params = [("compute_us".to_string(), "0".to_string())]
        .into_iter()
        .collect();
    let ycsb = Ycsb::from_params(&ycsb_params, nodes, 1).expect("valid knobs");
    for (plan, primitive) in [("one_sided", Primitive::OneSided), ("rpc", Primitive::Rpc)] {
        transactions(
            c,
            &format!("txn/smallbank_occ_{plan}"),
            smallbank.clone(),
            nodes,
            primitive,
        );
        transactions(
            c,
            &format!("txn/ycsb_occ_{plan}"),
            ycsb.clone(),
            nodes,
            primitive,
        );
    }
}

criterion_group!(benches, verbs, workloads);
criterion_main!(benches);
