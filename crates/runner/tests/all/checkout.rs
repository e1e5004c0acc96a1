//! TPC-W's checkout end to end: under every protocol and plan, with faults, every order has
//! its three lines and every product's stock decrease is the quantity committed lines
//! ordered of it (restocks counted), and the history is serializable; the paper's size
//! (a million 1 KiB products) is sized before anything is allocated.

use atoll_check::{self as history, Mode};
use atoll_protocols::ProtocolKind;
use atoll_runner::config::{Fabric, FaultConfig};
use atoll_runner::{run, Report, RunConfig};
use atoll_testkit::{params, FAULTS_MIXED};
use atoll_workloads::WorkloadKind;

const SEEDS: u64 = 3;
const PLANS: [&str; 2] = ["one-sided", "rpc"];
fn config(protocol: ProtocolKind, plan: &str, seed: u64) -> RunConfig {
    let mut cfg = RunConfig {
        fabric: Fabric::Sim {
            net: "edr-ib".into(),
            faults: FaultConfig::parse(FAULTS_MIXED).unwrap(),
        },
        workload: WorkloadKind::Checkout,
        // 12 products over 3 nodes: checkouts meet on products; up to 100 units a line (the
        // most, a whole restock), so products run out of their 100 units and are restocked
        // within the run.
        params: params(&[
            ("products", "12"),
            ("product_bytes", "128"),
            ("quantity_max", "100"),
            ("orders_max", "2000"),
        ]),
        protocol,
        plan: protocol.parse_plan(plan).unwrap(),
        nodes: 3,
        threads: 2,
        coroutines: 4,
        duration_s: 0.004,
        warmup_s: 0.0005,
        seed,
        record_history: true,
        ..RunConfig::default()
    };
    // CALVIN: epochs short enough for a run of a few simulated milliseconds.
    crate::short_epochs(&mut cfg);
    cfg
}

fn check<'r>(r: &'r Report, name: &str) -> &'r atoll_runner::report::CheckReport {
    r.checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}: {:?}", r.checks))
}

#[test]
fn checkout_orders_have_three_lines_and_stock_decrease_equals_quantity_ordered_under_every_protocol_and_plan(
) {
    // A protocol that refuses the workload is not a cell.
    for protocol in ProtocolKind::ALL
        .into_iter()
        .filter(|&p| atoll_runner::config::runs_workload(p, WorkloadKind::Checkout).is_ok())
    {
        for plan in PLANS {
            // What the protocol refuses (RSI: RPC stages) it skips.
            if protocol
                .check_plan(&protocol.parse_plan(plan).unwrap())
                .is_err()
            {
                continue;
            }
            for seed in 0..SEEDS {
                let what = format!("{} / {plan} / seed {seed}", protocol.name());
                let r = run(&config(protocol, plan, seed), &|_| {})
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(r.passed, "{what}: {:?}", r.checks);
                assert!(r.summary.committed > 0, "{what}: nothing committed");
                // A deterministic protocol orders conflicts instead of aborting them.
                assert!(
                    r.summary.aborted > 0 || protocol.sequenced(),
                    "{what}: no checkout met another"
                );
                for name in [
                    "checkout.stock_decrease_equals_quantity_ordered",
                    "checkout.orders_have_three_lines",
                    "checkout.orders_match_committed_checkouts",
                    "checkout.order_lines_match_products",
                ] {
                    assert!(check(&r, name).passed, "{what}: {:?}", check(&r, name));
                }
                let stock = &check(&r, "checkout.stock_decrease_equals_quantity_ordered").detail;
                assert!(
                    stock.contains(" restocks)") && !stock.contains(", 0 restocks)"),
                    "{what}: no product was restocked: {stock}"
                );
                // Checked at the level the protocol guarantees.
                let v = history::check(&r.history, Mode::from(protocol.isolation()));
                assert!(v.ok(), "{what}: {}", history::render(&r.history, &v));
            }
        }
    }
}

#[test]
fn checkout_at_the_papers_size_a_million_1kib_products_is_sized_and_a_hundred_million_is_refused() {
    let cfg = RunConfig {
        workload: WorkloadKind::Checkout,
        ..RunConfig::default()
    };
    let s = atoll_runner::sizing::sizing(&cfg).unwrap();
    let product = s
        .table_region_words
        .iter()
        .find(|(name, _)| name == "product")
        .unwrap()
        .1;
    // Half a million products per node, each a 6-word header and 128 payload words.
    let bytes_per_node = product * 8;
    assert!(
        (500_000 * 134 * 8..600_000 * 134 * 8).contains(&bytes_per_node),
        "{bytes_per_node} bytes of products per node"
    );
    let e = atoll_runner::sizing::sizing(&RunConfig {
        nodes: 8,
        params: params(&[("products", "100000000")]),
        ..cfg
    })
    .unwrap_err();
    assert!(
        e.0.contains("the configuration needs") && e.0.contains("products=100000000"),
        "{e}"
    );
}
