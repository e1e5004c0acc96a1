//! TPC-C scenarios: each transaction alone on a 2-node test cluster (one warehouse per
//! node, a scaled population), what it leaves in the tables, and the consistency
//! conditions over the result.

use atoll_fabric::NodeId;
use atoll_protocols::{Mvcc, NoWait, Occ, Sundial, WaitDie};
use atoll_testkit::TestCluster;
use atoll_txn::{Abort, Plan, Primitive, Protocol, Txn};
use atoll_workloads::tpcc::keys::*;
use atoll_workloads::tpcc::{CustomerSel, Effect, Input, Ledger, Line, Tpcc};
use atoll_workloads::{Params, Workload};
use std::sync::{Arc, Mutex};

const NODES: u16 = 2;
const CUSTOMERS: u64 = 30;
const ITEMS: u64 = 100;
const MVCC_SLOTS: u32 = 4;

fn tpcc() -> Tpcc {
    let p: Params = [
        ("customers_per_district", CUSTOMERS.to_string()),
        ("items", ITEMS.to_string()),
        ("new_orders_max", "50".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    Tpcc::from_params(&p, NODES).unwrap()
}

/// A loaded cluster for protocol `P` under `plan`.
fn cluster<P: Protocol>(w: &Tpcc, plan: Primitive) -> TestCluster {
    let versions = if P::MULTI_VERSION { MVCC_SLOTS } else { 1 };
    let tables = Workload::tables(w, NODES);
    let c = TestCluster::with_versions(NODES, tables, Plan::uniform(plan), 1, versions);
    for s in &c.stores {
        w.load(s).unwrap();
    }
    c
}

/// Runs `inputs` one after another from node 0, committing each that runs: each one's
/// outcome (its effect, or why it aborted, after rolling back).
fn run<P: Protocol>(
    c: &TestCluster,
    w: &Arc<Tpcc>,
    inputs: Vec<Input>,
) -> Vec<Result<Effect, Abort>> {
    let out: Arc<Mutex<Vec<Result<Effect, Abort>>>> = Arc::default();
    c.run(&|core, k| {
        if core.id.node != NodeId(0) {
            return None;
        }
        let mut co = c.coordinator(core, k);
        let (w, out, inputs) = (w.clone(), out.clone(), inputs.clone());
        Some(Box::pin(async move {
            for input in &inputs {
                let mut tx = Txn::<P>::begin(&mut co);
                let r = match w.execute(&mut tx, input).await {
                    Ok(e) => tx.commit().await.map(|_| e),
                    Err(a) => {
                        tx.rollback().await;
                        Err(a)
                    }
                };
                out.lock().unwrap().push(r);
            }
        }))
    });
    let v = std::mem::take(&mut *out.lock().unwrap());
    v
}

fn ledger_of(w: &Tpcc, outcomes: &[Result<Effect, Abort>]) -> Ledger {
    let mut l = Ledger::default();
    for e in outcomes.iter().flatten() {
        w.record(&mut l, e.clone());
    }
    l
}

/// Every check's failure, named.
fn failures(w: &Tpcc, c: &TestCluster, ledger: &Ledger) -> Vec<String> {
    w.check(&c.stores, ledger)
        .into_iter()
        .filter(|r| !r.passed)
        .map(|r| format!("{}: {}", r.name, r.detail))
        .collect()
}

fn lines(items: &[(u64, u64)]) -> Vec<Line> {
    items
        .iter()
        .map(|&(i, supply_w)| Line {
            i,
            supply_w,
            qty: 3,
        })
        .collect()
}

#[test]
fn tpcc_the_loaded_database_meets_every_consistency_condition() {
    let w = tpcc();
    let c = cluster::<Occ>(&w, Primitive::OneSided);
    assert_eq!(failures(&w, &c, &Ledger::default()), Vec::<String>::new());
    // 30% of each district's orders are undelivered.
    let d = c.payload(DISTRICT, district(1, 4));
    assert_eq!(d[D_NEXT_O_ID], CUSTOMERS + 1);
    assert_eq!(d[D_NEXT_DELIVERY_O_ID], CUSTOMERS - CUSTOMERS * 3 / 10 + 1);
}

#[test]
fn tpcc_new_order_with_an_unused_item_rolls_back_and_leaves_d_next_o_id_unchanged() {
    let w = Arc::new(tpcc());
    let c = cluster::<Occ>(&w, Primitive::OneSided);
    let input = Input::NewOrder {
        w: 0,
        d: 2,
        c: 7,
        lines: lines(&[(1, 0), (2, 0), (3, 0), (4, 0), (ITEMS + 1, 0)]),
    };
    let out = run::<Occ>(&c, &w, vec![input]);
    assert_eq!(out, vec![Err(Abort::UserAbort)]);
    assert_eq!(
        c.payload(DISTRICT, district(0, 2))[D_NEXT_O_ID],
        CUSTOMERS + 1
    );
    assert!(c.stores[0]
        .lookup(ORDER, order(0, 2, CUSTOMERS + 1))
        .is_none());
    assert_eq!(c.payload(STOCK, stock(0, 1))[S_ORDER_CNT], 0);
    assert_eq!(failures(&w, &c, &ledger_of(&w, &out)), Vec::<String>::new());
}

fn new_order_inserts_and_counts_remote_stock<P: Protocol>() {
    let w = Arc::new(tpcc());
    let c = cluster::<P>(&w, Primitive::Rpc);
    let input = Input::NewOrder {
        w: 0,
        d: 2,
        c: 7,
        // Item 5 from warehouse 1 (node 1): a remote line.
        lines: lines(&[(1, 0), (2, 0), (3, 0), (4, 0), (5, 1)]),
    };
    let out = run::<P>(&c, &w, vec![input]);
    assert!(out[0].is_ok(), "{}: {:?}", P::NAME, out[0]);
    let o = CUSTOMERS + 1;
    assert_eq!(c.payload(DISTRICT, district(0, 2))[D_NEXT_O_ID], o + 1);
    let row = c.payload(ORDER, order(0, 2, o));
    assert_eq!(
        (
            row[O_C_ID],
            row[O_OL_CNT],
            row[O_ALL_LOCAL],
            row[O_CARRIER_ID]
        ),
        (7, 5, 0, 0)
    );
    assert_eq!(c.payload(NEW_ORDER, order(0, 2, o))[0], o);
    assert_eq!(
        c.payload(ORDER_BY_CUSTOMER, order_by_customer(0, 2, 7, o))[0],
        o
    );
    assert_eq!(
        c.payload(ORDER_LINE, order_line(0, 2, o, 5))[OL_SUPPLY_W_ID],
        1
    );
    let remote = c.payload(STOCK, stock(1, 5));
    assert_eq!(
        (remote[S_YTD], remote[S_ORDER_CNT], remote[S_REMOTE_CNT]),
        (3, 1, 1)
    );
    assert_eq!(
        failures(&w, &c, &ledger_of(&w, &out)),
        Vec::<String>::new(),
        "{}",
        P::NAME
    );
}

#[test]
fn tpcc_new_order_takes_d_next_o_id_inserts_its_rows_and_counts_remote_stock_under_every_protocol()
{
    new_order_inserts_and_counts_remote_stock::<NoWait>();
    new_order_inserts_and_counts_remote_stock::<WaitDie>();
    new_order_inserts_and_counts_remote_stock::<Occ>();
    new_order_inserts_and_counts_remote_stock::<Mvcc>();
    new_order_inserts_and_counts_remote_stock::<Sundial>();
}

#[test]
fn tpcc_payment_by_last_name_pays_the_middle_customer_by_first_name_of_a_remote_warehouse() {
    let w = Arc::new(tpcc());
    let c = cluster::<Occ>(&w, Primitive::OneSided);
    // Customers 1..=30 have last names 0..=29: last name 12 is customer 13 alone.
    let input = Input::Payment {
        w: 0,
        d: 1,
        c_w: 1,
        c_d: 6,
        customer: CustomerSel::Last(12),
        amount: 250,
    };
    let before = c.payload(CUSTOMER, customer(1, 6, 13));
    let out = run::<Occ>(&c, &w, vec![input]);
    assert!(out[0].is_ok(), "{:?}", out[0]);
    let after = c.payload(CUSTOMER, customer(1, 6, 13));
    assert_eq!(after[C_BALANCE] as i64, before[C_BALANCE] as i64 - 250);
    assert_eq!(after[C_PAYMENT_CNT], 2);
    let h = c.payload(HISTORY, history(1, 6, 13, 2));
    assert_eq!((h[H_W_ID], h[H_D_ID], h[H_AMOUNT]), (0, 1, 250));
    let d = c.payload(DISTRICT, district(0, 1));
    assert_eq!(d[D_YTD], CUSTOMERS * 1000 + 250);
    assert_eq!(failures(&w, &c, &ledger_of(&w, &out)), Vec::<String>::new());
}

#[test]
fn tpcc_payment_remote_warehouse_pays_another_warehouses_district_for_a_home_customer_drtm_rcc_variant(
) {
    let p: Params = [
        ("customers_per_district", CUSTOMERS.to_string()),
        ("items", ITEMS.to_string()),
        ("new_orders_max", "50".to_string()),
        ("weights", "0,100,0,0,0".to_string()),
        ("payment_remote", "warehouse".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let w = Arc::new(Tpcc::from_params(&p, NODES).unwrap());
    // The first remote Payment node 0 draws: its warehouse and district are node 1's, its
    // customer node 0's.
    let mut rng = atoll_fabric::rng::Rng::new(3);
    let input = std::iter::repeat_with(|| w.generate(&mut rng, NODES, NodeId(0)).1)
        .find(|i| matches!(i, Input::Payment { w, .. } if *w != 0))
        .expect("15% of Payments are remote");
    let Input::Payment {
        w: pw,
        d: pd,
        c_w,
        c_d,
        customer: sel,
        amount,
    } = input.clone()
    else {
        unreachable!()
    };
    assert_eq!((pw, c_w), (1, 0), "{input:?}");
    let c = cluster::<Occ>(&w, Primitive::OneSided);
    let w_ytd = c.payload(WAREHOUSE, warehouse(1))[W_YTD];
    let out = run::<Occ>(&c, &w, vec![input]);
    assert!(out[0].is_ok(), "{:?}", out[0]);
    assert_eq!(c.payload(WAREHOUSE, warehouse(1))[W_YTD], w_ytd + amount);
    assert_eq!(
        c.payload(DISTRICT, district(1, pd))[D_YTD],
        CUSTOMERS * 1000 + amount
    );
    if let CustomerSel::Id(cid) = sel {
        let h = c.payload(HISTORY, history(0, c_d, cid, 2));
        assert_eq!((h[H_W_ID], h[H_D_ID], h[H_AMOUNT]), (1, pd, amount));
    }
    assert_eq!(failures(&w, &c, &ledger_of(&w, &out)), Vec::<String>::new());
}

#[test]
fn tpcc_a_payment_missing_from_the_ledger_fails_the_conditions_naming_its_district_and_amount() {
    let w = Arc::new(tpcc());
    let c = cluster::<NoWait>(&w, Primitive::OneSided);
    let input = Input::Payment {
        w: 1,
        d: 3,
        c_w: 1,
        c_d: 3,
        customer: CustomerSel::Id(4),
        amount: 777,
    };
    let out = run::<NoWait>(&c, &w, vec![input]);
    assert!(out[0].is_ok());
    let failed = failures(&w, &c, &Ledger::default());
    assert!(
        failed.iter().any(|f| f.starts_with("tpcc.ledger_ytd")
            && f.contains("warehouse 1 district 3")
            && f.contains("difference 777")),
        "{failed:#?}"
    );
}

#[test]
fn tpcc_delivery_delivers_each_districts_oldest_new_order_and_credits_its_customer() {
    let w = Arc::new(tpcc());
    let c = cluster::<WaitDie>(&w, Primitive::OneSided);
    let oldest = CUSTOMERS - CUSTOMERS * 3 / 10 + 1;
    let ok = order(0, 5, oldest);
    let cust = c.payload(ORDER, ok)[O_C_ID];
    let n = c.payload(ORDER, ok)[O_OL_CNT];
    let amount: u64 = (1..=n)
        .map(|ol| c.payload(ORDER_LINE, order_line(0, 5, oldest, ol))[OL_AMOUNT])
        .sum();
    let before = c.payload(CUSTOMER, customer(0, 5, cust))[C_BALANCE] as i64;
    // Districts 4..=6: the test cluster's log ring holds three districts' write sets.
    let input = Input::Delivery {
        w: 0,
        carrier: 4,
        d_lo: 4,
        d_count: 3,
    };
    let out = run::<WaitDie>(&c, &w, vec![input.clone(), input]);
    assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
    assert_eq!(out[0].as_ref().unwrap().delivered.len(), 3);
    assert!(c.stores[0].lookup(NEW_ORDER, ok).is_none());
    assert!(c.stores[0]
        .lookup(NEW_ORDER, order(0, 5, oldest + 2))
        .is_some());
    assert_eq!(c.payload(ORDER, ok)[O_CARRIER_ID], 4);
    let cr = c.payload(CUSTOMER, customer(0, 5, cust));
    assert_eq!(cr[C_BALANCE] as i64, before + amount as i64);
    assert_eq!(cr[C_DELIVERY_CNT], 1);
    assert_eq!(
        c.payload(DISTRICT, district(0, 5))[D_NEXT_DELIVERY_O_ID],
        oldest + 2
    );
    assert_eq!(failures(&w, &c, &ledger_of(&w, &out)), Vec::<String>::new());
}

#[test]
fn tpcc_order_status_and_stock_level_commit_and_change_no_counted_state() {
    let w = Arc::new(tpcc());
    for plan in [Primitive::OneSided, Primitive::Rpc] {
        let c = cluster::<Mvcc>(&w, plan);
        let out = run::<Mvcc>(
            &c,
            &w,
            vec![
                Input::OrderStatus {
                    w: 1,
                    d: 0,
                    customer: CustomerSel::Last(3),
                },
                Input::OrderStatus {
                    w: 0,
                    d: 9,
                    customer: CustomerSel::Id(30),
                },
                Input::StockLevel {
                    w: 0,
                    d: 3,
                    threshold: 15,
                },
            ],
        );
        assert!(
            out.iter().all(|r| r.as_ref() == Ok(&Effect::default())),
            "{out:?}"
        );
        assert_eq!(failures(&w, &c, &Ledger::default()), Vec::<String>::new());
    }
}

#[test]
fn tpcc_a_run_of_deliveries_only_that_empties_new_order_passes_every_condition() {
    // Deliveries alone drain every district's NEW-ORDER rows: condition 3 then holds with
    // none left (it once failed as "nothing was compared").
    let cfg = atoll_runner::RunConfig {
        fabric: atoll_runner::config::Fabric::Sim {
            net: "edr-ib".into(),
            faults: atoll_runner::config::FaultConfig::parse("none").unwrap(),
        },
        workload: atoll_workloads::WorkloadKind::Tpcc,
        params: [
            ("customers_per_district", "10"),
            ("items", "100"),
            ("delivery", "per_district"),
            ("weights", "0,0,0,100,0"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        duration_s: 0.002,
        warmup_s: 0.0005,
        ..atoll_runner::RunConfig::default()
    };
    let r = atoll_runner::run(&cfg, &|_| {}).unwrap();
    let c3 = r
        .checks
        .iter()
        .find(|c| c.name == "tpcc.3_new_orders_contiguous")
        .unwrap();
    assert!(c3.passed, "{c3:?}");
    assert!(
        r.passed,
        "{:?}",
        r.checks.iter().filter(|c| !c.passed).collect::<Vec<_>>()
    );
}

#[test]
fn calvin_deliveries_that_another_delivered_before_them_are_sequenced_again_and_every_condition_holds(
) {
    // One warehouse, deliveries and new orders only: every epoch holds several deliveries
    // whose reconnaissance found the same oldest orders; the first in the order delivers
    // them, the others touch records they did not declare (keys_changed, on every node
    // alike) and are sequenced again with a new reconnaissance (Calvin's OLLP).
    for order in ["global", "lane"] {
        let mut cfg = atoll_runner::RunConfig {
            fabric: atoll_runner::config::Fabric::Sim {
                net: "edr-ib".into(),
                faults: atoll_runner::config::FaultConfig::parse("none").unwrap(),
            },
            workload: atoll_workloads::WorkloadKind::Tpcc,
            protocol: atoll_protocols::ProtocolKind::Calvin,
            plan: atoll_protocols::ProtocolKind::Calvin
                .parse_plan("rpc")
                .unwrap(),
            params: [
                ("warehouses", "1"),
                ("customers_per_district", "10"),
                ("items", "100"),
                ("weights", "50,0,0,50,0"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            nodes: 2,
            coroutines: 4,
            duration_s: 0.01,
            warmup_s: 0.001,
            record_history: true,
            ..atoll_runner::RunConfig::default()
        };
        cfg.set_knob("epoch_us", 200);
        cfg.set_knob("calvin_order", order);
        let r = atoll_runner::run(&cfg, &|_| {}).unwrap();
        let failed: Vec<_> = r.checks.iter().filter(|c| !c.passed).collect();
        assert!(failed.is_empty(), "{order}: {failed:?}");
        let seq = r.sequenced.as_ref().expect("a sequenced breakdown");
        assert!(seq.sequenced_again > 0, "{order}: {seq:?}");
        let delivered = r
            .txn_types
            .iter()
            .find(|t| t.name == "delivery")
            .map_or(0, |t| t.committed);
        assert!(delivered > 0, "{order}: no delivery committed");
        let v = atoll_check::check(&r.history, atoll_check::Mode::Serializable);
        assert!(v.ok(), "{order}: {v:?}");
    }
}
