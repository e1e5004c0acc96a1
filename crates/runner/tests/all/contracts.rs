//! Workload contracts (issue 8): the access set a workload declares for an input is exactly
//! the read and write set its transaction builds when it runs, under every protocol.

use atoll_fabric::rng::Rng;
use atoll_fabric::NodeId;
use atoll_protocols::{Mvcc, NoWait, Occ, Sundial, WaitDie};
use atoll_testkit::params;
use atoll_testkit::TestCluster;
use atoll_txn::{Access, Plan, Primitive, Protocol, Txn};
use atoll_workloads::checkout::Checkout;
use atoll_workloads::cycle::Cycle;
use atoll_workloads::micro::Micro;
use atoll_workloads::skew::Skew;
use atoll_workloads::smallbank::SmallBank;
use atoll_workloads::tpcc::Tpcc;
use atoll_workloads::ycsb::Ycsb;
use atoll_workloads::{AccessMode, AccessSet, Workload};
use std::sync::{Arc, Mutex};

/// Transactions drawn per workload and protocol.
const TXNS: usize = 40;

/// What one drawn transaction declared and did.
struct Seen {
    input: String,
    declared: Option<AccessSet>,
    /// The read and write set it built, before it committed.
    actual: AccessSet,
    /// Of those, the keys it inserted.
    inserted: Vec<(atoll_storage::TableId, u64)>,
}

/// Runs `TXNS` drawn transactions of `w` one after another on a 2-node test cluster, each
/// alone, and returns what each declared and built.
fn run_drawn<W: Workload, P: Protocol>(w: Arc<W>, seed: u64) -> Vec<Seen> {
    let nodes = 2;
    let c = TestCluster::with_versions(
        nodes,
        w.tables(nodes),
        Plan::uniform(Primitive::OneSided),
        1,
        if P::MULTI_VERSION { 4 } else { 1 },
    );
    for s in &c.stores {
        w.load(s).expect("the test tables are sized for the load");
    }
    let out: Arc<Mutex<Vec<Seen>>> = Arc::default();
    c.run(&|core, k| {
        if core.id.node != NodeId(0) {
            return None;
        }
        let mut co = c.coordinator(core, k);
        let (w, out) = (w.clone(), out.clone());
        Some(Box::pin(async move {
            let mut rng = Rng::new(seed);
            for _ in 0..TXNS {
                let (_, input) = w.generate(&mut rng, nodes, NodeId(0));
                let mut tx = Txn::<P>::begin(&mut co);
                let ran = w.execute(&mut tx, &input).await;
                let inserted = tx
                    .accesses()
                    .into_iter()
                    .filter(|a| a.2 == Access::Insert)
                    .map(|(t, k, _)| (t, k))
                    .collect();
                let actual = AccessSet::new(tx.accesses().into_iter().map(|(t, k, a)| {
                    let mode = match a {
                        Access::Read => AccessMode::Read,
                        Access::Update | Access::Insert | Access::Delete => AccessMode::Write,
                    };
                    (t, k, mode)
                }));
                match ran {
                    Ok(_) => {
                        tx.commit().await.expect("alone in the cluster, it commits");
                    }
                    Err(a) => {
                        assert!(!a.is_retryable(), "alone in the cluster: {a:?}");
                        tx.rollback().await;
                    }
                }
                out.lock().unwrap().push(Seen {
                    input: format!("{input:?}"),
                    declared: w.access_set(&input),
                    actual,
                    inserted,
                });
            }
        }))
    });
    let seen = std::mem::take(&mut *out.lock().unwrap());
    seen
}

/// Every drawn transaction with a declared access set touched exactly that set, but for
/// keys it inserted without declaring them (their keys follow from a record it declares and
/// writes: TPC-C's orders from the district's `D_NEXT_O_ID`).
fn check_declared<W: Workload>(seen: Vec<Seen>, protocol: &str) -> (usize, usize) {
    let (mut declared, mut undeclared) = (0, 0);
    for s in seen {
        match s.declared {
            Some(d) => {
                let named = |t, k| d.accesses().iter().any(|a| (a.0, a.1) == (t, k));
                let touched = AccessSet::new(
                    s.actual
                        .accesses()
                        .iter()
                        .copied()
                        .filter(|&(t, k, _)| named(t, k) || !s.inserted.contains(&(t, k))),
                );
                assert_eq!(
                    d,
                    touched,
                    "{} under {protocol}: {} declared one access set and touched another",
                    W::NAME,
                    s.input
                );
                declared += 1;
            }
            None => undeclared += 1,
        }
    }
    (declared, undeclared)
}

fn every_protocol<W: Workload>(w: W) -> (usize, usize) {
    let w = Arc::new(w);
    let mut n = (0, 0);
    for (name, seen) in [
        ("nowait", run_drawn::<W, NoWait>(w.clone(), 11)),
        ("waitdie", run_drawn::<W, WaitDie>(w.clone(), 12)),
        ("occ", run_drawn::<W, Occ>(w.clone(), 13)),
        ("mvcc", run_drawn::<W, Mvcc>(w.clone(), 14)),
        ("sundial", run_drawn::<W, Sundial>(w.clone(), 15)),
    ] {
        let (d, u) = check_declared::<W>(seen, name);
        n = (n.0 + d, n.1 + u);
    }
    n
}

#[test]
fn smallbank_and_ycsb_declare_exactly_the_records_their_transactions_touch() {
    let sb = SmallBank::from_params(&params(&[("accounts", "30"), ("hot_accounts", "3")])).unwrap();
    assert_eq!(every_protocol(sb), (5 * TXNS, 0));
    let ycsb = Ycsb::from_params(
        &params(&[
            ("records", "50"),
            ("ops_per_txn", "4"),
            ("write_fraction", "0.5"),
            ("compute_us", "1"),
        ]),
        2,
        1,
    )
    .unwrap();
    assert_eq!(every_protocol(ycsb), (5 * TXNS, 0));
}

#[test]
fn micro_declares_exactly_the_rows_its_local_multisite_and_sensitivity_transactions_touch() {
    for kv in [
        [
            ("kind", "update"),
            ("multisite_fraction", "0.5"),
            ("variant", "standard"),
        ],
        [
            ("kind", "read"),
            ("multisite_fraction", "0.5"),
            ("variant", "standard"),
        ],
        [
            ("kind", "update"),
            ("multisite_fraction", "0.5"),
            ("variant", "sensitivity"),
        ],
    ] {
        let mut p = params(&kv);
        p.insert("rows_per_node".into(), "30".into());
        if kv[2].1 == "standard" {
            p.insert("rows".into(), "6".into());
        }
        let micro = Micro::from_params(&p, 2).unwrap();
        assert_eq!(every_protocol(micro), (5 * TXNS, 0), "{kv:?}");
    }
}

#[test]
fn cycle_declares_its_pair_transactions_and_not_its_range_ones() {
    let cycle = Cycle::from_params(&params(&[("pairs", "4"), ("ranges", "2")]), 2).unwrap();
    let (declared, undeclared) = every_protocol(cycle);
    assert_eq!(declared + undeclared, 5 * TXNS);
    assert!(
        declared > 0 && undeclared > 0,
        "{declared} declared, {undeclared} not"
    );
}

#[test]
fn tpcc_declares_neworder_and_payment_by_customer_id_and_not_the_transactions_whose_keys_come_from_scans(
) {
    let tpcc = Tpcc::from_params(
        &params(&[
            ("customers_per_district", "30"),
            ("items", "100"),
            ("new_orders_max", "50"),
            // The test cluster's log ring is smaller than a ten-district Delivery's record.
            ("delivery", "per_district"),
        ]),
        2,
    )
    .unwrap();
    let (declared, undeclared) = every_protocol(tpcc);
    assert_eq!(declared + undeclared, 5 * TXNS);
    // The standard mix: 45 % NewOrder, 43 % Payment (40 % of them by customer id).
    assert!(
        declared > 0 && undeclared > 0,
        "{declared} declared, {undeclared} not"
    );
}

#[test]
fn skew_declares_exactly_the_pair_its_withdraws_read_and_the_record_every_transaction_writes() {
    // Two pairs per node, half of the transactions deposits: withdraws both take a unit and
    // decline (write their record back unchanged), and every one touches its declared set.
    let skew =
        Skew::from_params(&params(&[("pairs", "2"), ("withdraw_fraction", "0.5")]), 2).unwrap();
    assert_eq!(every_protocol(skew), (5 * TXNS, 0));
}

#[test]
fn checkout_declares_its_three_products_its_order_and_its_three_lines_as_writes() {
    let checkout = Checkout::from_params(
        &params(&[
            ("products", "12"),
            ("product_bytes", "64"),
            ("orders_max", "1000"),
        ]),
        2,
    )
    .unwrap();
    assert_eq!(every_protocol(checkout), (5 * TXNS, 0));
}
