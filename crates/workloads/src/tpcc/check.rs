//! TPC-C's consistency conditions (spec 3.3.2.1–3.3.2.12) and the ledger checks, computed
//! from the final state: each node checks the conditions whose records it holds (every
//! table but HISTORY's paying side lives with its warehouse), and the driver finishes
//! conditions 8 and 9 (HISTORY rows live with the customer, whose warehouse may be another
//! node's than the paying one) from the sums the nodes report.

use super::keys::*;
use super::load::{LOAD_PAYMENT, STOCK_QUANTITY_MAX};
use super::txns::{district_index, Ledger};
use super::Tpcc;
use crate::{push_example, CheckResult};
use atoll_storage::layout::{ENGINE_PAYLOAD_WORDS, HEADER_WORDS, H_KEY, H_VERSION, VERSION_ABSENT};
use atoll_storage::{Store, TableId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

/// One condition's part: what was compared, how many failed, the first few failures.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cond {
    pub checked: u64,
    pub failed: u64,
    pub examples: Vec<String>,
}

/// One node's part of the checks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCheck {
    /// By condition name.
    pub conds: BTreeMap<String, Cond>,
    /// W_YTD of this node's warehouses, and D_YTD of their districts (by district index).
    pub w_ytd: BTreeMap<u64, u64>,
    pub d_ytd: BTreeMap<u64, u64>,
    /// Σ H_AMOUNT of the HISTORY rows this node holds, by paying district (H_W_ID, H_D_ID).
    pub paid_by_district: BTreeMap<u64, u64>,
}

/// What each condition checks, by name, in report order.
const CONDITIONS: [(&str, &str); 17] = [
    (
        "tpcc.1_w_ytd_is_sum_of_d_ytd",
        "W_YTD = Σ D_YTD per warehouse",
    ),
    (
        "tpcc.2_next_o_id_is_max_o_id",
        "D_NEXT_O_ID − 1 = max(O_ID) = max(NO_O_ID) per district",
    ),
    (
        "tpcc.3_new_orders_contiguous",
        "max(NO_O_ID) − min(NO_O_ID) + 1 = count(NEW-ORDER) per district",
    ),
    (
        "tpcc.4_ol_cnt_sum_is_order_lines",
        "Σ O_OL_CNT = count(ORDER-LINE) per district",
    ),
    (
        "tpcc.5_carrier_null_iff_new_order",
        "O_CARRIER_ID is null iff the order has a NEW-ORDER row",
    ),
    (
        "tpcc.6_ol_cnt_is_lines",
        "O_OL_CNT = the order's ORDER-LINE rows",
    ),
    (
        "tpcc.7_delivery_d_null_iff_carrier_null",
        "OL_DELIVERY_D is null iff its order's O_CARRIER_ID is",
    ),
    (
        "tpcc.8_w_ytd_is_history",
        "W_YTD = Σ H_AMOUNT paid through the warehouse",
    ),
    (
        "tpcc.9_d_ytd_is_history",
        "D_YTD = Σ H_AMOUNT paid through the district",
    ),
    (
        "tpcc.10_balance_is_delivered_minus_paid",
        "C_BALANCE = Σ delivered OL_AMOUNT − Σ H_AMOUNT per customer",
    ),
    (
        "tpcc.11_orders_minus_new_orders",
        "count(ORDER) − count(NEW-ORDER) = loaded delivered + committed deliveries per district",
    ),
    (
        "tpcc.12_balance_plus_ytd_is_delivered",
        "C_BALANCE + C_YTD_PAYMENT = Σ delivered OL_AMOUNT per customer",
    ),
    (
        "tpcc.ledger_next_o_id",
        "D_NEXT_O_ID = loaded + committed NewOrders + 1 per district",
    ),
    (
        "tpcc.ledger_ytd",
        "D_YTD and W_YTD = loaded + committed Payments",
    ),
    (
        "tpcc.stock_ytd",
        "Σ S_YTD per warehouse = Σ OL_QUANTITY of committed lines it supplied",
    ),
    (
        "tpcc.stock_order_cnt",
        "Σ S_ORDER_CNT per warehouse = committed lines it supplied (S_QUANTITY within 1..=100 too)",
    ),
    (
        "tpcc.stock_remote_cnt",
        "Σ S_REMOTE_CNT per warehouse = committed remote lines it supplied",
    ),
];

impl NodeCheck {
    fn cond(&mut self, name: &str) -> &mut Cond {
        self.conds.entry(name.to_string()).or_default()
    }

    /// Records one comparison of condition `name`: `a` against `b`, naming `what` if they
    /// differ.
    fn compare(&mut self, name: &str, a: i128, b: i128, what: impl FnOnce() -> String) {
        let c = self.cond(name);
        c.checked += 1;
        if a != b {
            c.failed += 1;
            push_example(&mut c.examples, || {
                format!("{}: {a} vs {b} (difference {})", what(), a - b)
            });
        }
    }
}

/// Every live record of table `t` on `s`: its key and its workload words.
fn live(s: &Store, t: TableId) -> Vec<(u64, Vec<u64>)> {
    let layout = *s.catalog.layout(t);
    let words = s.catalog.spec(t).payload_words as usize;
    let first = (HEADER_WORDS + ENGINE_PAYLOAD_WORDS) as usize;
    let mut tuple = vec![0; layout.tuple_words as usize];
    let mut out = Vec::new();
    for idx in 0..s.used_slots(t) {
        s.read_tuple(t, idx, &mut tuple);
        if tuple[H_VERSION as usize] & VERSION_ABSENT == 0 {
            out.push((tuple[H_KEY as usize], tuple[first..first + words].to_vec()));
        }
    }
    out
}

/// What the checks need of one order.
struct OrderFacts {
    c: u64,
    carrier: u64,
    ol_cnt: u64,
}

/// Per order: its lines, those without a delivery date, and Σ OL_AMOUNT.
#[derive(Default)]
struct LineFacts {
    count: u64,
    undated: u64,
    amount: u64,
}

/// Reads the node's districts, orders, new orders, order lines and payments once (the
/// payments per district go straight into `n`).
fn gather(s: &Store, n: &mut NodeCheck) -> NodeFacts {
    let districts: HashMap<u64, Vec<u64>> = live(s, DISTRICT).into_iter().collect();
    let orders: HashMap<u64, OrderFacts> = live(s, ORDER)
        .into_iter()
        .map(|(k, r)| {
            let f = OrderFacts {
                c: r[O_C_ID],
                carrier: r[O_CARRIER_ID],
                ol_cnt: r[O_OL_CNT],
            };
            (k, f)
        })
        .collect();
    let new_orders: HashSet<u64> = live(s, NEW_ORDER).into_iter().map(|(k, _)| k).collect();
    let mut lines: HashMap<u64, LineFacts> = HashMap::new();
    let mut lines_per_district: HashMap<u64, u64> = HashMap::new();
    for (k, r) in live(s, ORDER_LINE) {
        let (o, _) = order_line_parts(k);
        let ok = order(warehouse_of(k), district_of(k), o);
        let f = lines.entry(ok).or_default();
        f.count += 1;
        f.undated += (r[OL_DELIVERY_D] == 0) as u64;
        f.amount += r[OL_AMOUNT];
        *lines_per_district
            .entry(district_index(warehouse_of(k), district_of(k)))
            .or_default() += 1;
    }
    let mut paid_by_customer: HashMap<u64, u64> = HashMap::new();
    for (k, r) in live(s, HISTORY) {
        let ck = customer(warehouse_of(k), district_of(k), r[H_C_ID]);
        *paid_by_customer.entry(ck).or_default() += r[H_AMOUNT];
        *n.paid_by_district
            .entry(district_index(r[H_W_ID], r[H_D_ID]))
            .or_default() += r[H_AMOUNT];
    }
    let mut no_per_district: HashMap<u64, Vec<u64>> = HashMap::new();
    for &k in &new_orders {
        no_per_district
            .entry(district_index(warehouse_of(k), district_of(k)))
            .or_default()
            .push(rest_of(k));
    }
    NodeFacts {
        districts,
        orders,
        new_orders,
        lines,
        lines_per_district,
        paid_by_customer,
        per_district: HashMap::new(),
        delivered_by_customer: HashMap::new(),
        no_per_district,
    }
}

/// Per order: conditions 5, 6 and 7; counts each district's orders and lines and each
/// customer's delivered amounts into `f`.
fn check_orders(facts: &mut NodeFacts, n: &mut NodeCheck) {
    for (&ok, f) in &facts.orders {
        let (w, d, o) = (warehouse_of(ok), district_of(ok), rest_of(ok));
        let name = || format!("warehouse {w} district {d} order {o}");
        let e = facts.per_district.entry(district_index(w, d)).or_default();
        e.0 += 1;
        e.1 = e.1.max(o);
        e.2 += f.ol_cnt;
        let has_no = facts.new_orders.contains(&ok);
        n.compare(
            "tpcc.5_carrier_null_iff_new_order",
            (f.carrier == 0) as i128,
            has_no as i128,
            || {
                format!(
                    "{}: carrier null (1/0) vs NEW-ORDER row present (1/0)",
                    name()
                )
            },
        );
        let l = facts.lines.get(&ok);
        let (count, undated, amount) = l.map_or((0, 0, 0), |l| (l.count, l.undated, l.amount));
        n.compare(
            "tpcc.6_ol_cnt_is_lines",
            f.ol_cnt as i128,
            count as i128,
            || format!("{}: O_OL_CNT vs lines", name()),
        );
        let expect_undated = if f.carrier == 0 { count } else { 0 };
        n.compare(
            "tpcc.7_delivery_d_null_iff_carrier_null",
            undated as i128,
            expect_undated as i128,
            || {
                format!(
                    "{}: lines without OL_DELIVERY_D vs expected (carrier {})",
                    name(),
                    f.carrier
                )
            },
        );
        if f.carrier != 0 {
            *facts
                .delivered_by_customer
                .entry(customer(w, d, f.c))
                .or_default() += amount;
        }
    }
}

/// What a node's check reads of its records once, before comparing.
struct NodeFacts {
    districts: HashMap<u64, Vec<u64>>,
    orders: HashMap<u64, OrderFacts>,
    new_orders: HashSet<u64>,
    lines: HashMap<u64, LineFacts>,
    lines_per_district: HashMap<u64, u64>,
    paid_by_customer: HashMap<u64, u64>,
    /// Per district: (orders, max O_ID, Σ O_OL_CNT).
    per_district: HashMap<u64, (u64, u64, u64)>,
    delivered_by_customer: HashMap<u64, u64>,
    /// Per district: its NEW-ORDER rows' order ids.
    no_per_district: HashMap<u64, Vec<u64>>,
}

impl Tpcc {
    pub fn check_node_state(&self, s: &Store, ledger: &Ledger) -> NodeCheck {
        let mut n = NodeCheck::default();
        let mut f = gather(s, &mut n);
        // Per order: conditions 5, 6, 7, and the delivered amounts per customer.
        check_orders(&mut f, &mut n);
        for w in self.warehouses_of(s.node.0) {
            let w_row = live_one(s, WAREHOUSE, warehouse(w));
            let w_ytd = w_row.as_ref().map_or(0, |r| r[W_YTD]);
            n.w_ytd.insert(w, w_ytd);
            let (mut d_sum, mut paid_sum) = (0u64, 0u64);
            for d in 0..DISTRICTS {
                let Some((d_ytd, paid)) = self.check_district(s, ledger, &f, w, d, &mut n) else {
                    continue;
                };
                d_sum += d_ytd;
                paid_sum += paid;
            }
            let d_ytd_loaded = self.customers_per_district * LOAD_PAYMENT;
            n.compare(
                "tpcc.1_w_ytd_is_sum_of_d_ytd",
                w_ytd as i128,
                d_sum as i128,
                || format!("warehouse {w}: W_YTD vs Σ D_YTD"),
            );
            n.compare(
                "tpcc.ledger_ytd",
                w_ytd as i128,
                (DISTRICTS * d_ytd_loaded + paid_sum) as i128,
                || format!("warehouse {w}: W_YTD vs loaded + committed payments"),
            );
            self.check_stock(s, ledger, w, &mut n);
        }
        n
    }

    /// District `d` of warehouse `w`: conditions 2, 3, 4 and 11, the ledger's next order id
    /// and year-to-date, and its customers (10, 12); its D_YTD and the payments the ledger
    /// committed there, or `None` without a DISTRICT row.
    fn check_district(
        &self,
        s: &Store,
        ledger: &Ledger,
        f: &NodeFacts,
        w: u64,
        d: u64,
        n: &mut NodeCheck,
    ) -> Option<(u64, u64)> {
        let cpd = self.customers_per_district;
        let loaded_delivered = cpd - self.undelivered_loaded();
        let d_ytd_loaded = cpd * LOAD_PAYMENT;
        let di = district_index(w, d);
        let name = || format!("warehouse {w} district {d}");
        let Some(dr) = f.districts.get(&district(w, d)) else {
            n.compare("tpcc.2_next_o_id_is_max_o_id", 0, 1, || {
                format!("{}: no DISTRICT row", name())
            });
            return None;
        };
        let led = ledger.districts.get(&di).cloned().unwrap_or_default();
        n.d_ytd.insert(di, dr[D_YTD]);
        let (count, o_newest, ol_sum) = f.per_district.get(&di).copied().unwrap_or_default();
        let next = dr[D_NEXT_O_ID] as i128;
        n.compare(
            "tpcc.2_next_o_id_is_max_o_id",
            next - 1,
            o_newest as i128,
            || format!("{}: D_NEXT_O_ID − 1 vs max(O_ID)", name()),
        );
        let nos = f.no_per_district.get(&di).cloned().unwrap_or_default();
        if let (Some(&lo), Some(&hi)) = (nos.iter().min(), nos.iter().max()) {
            n.compare("tpcc.2_next_o_id_is_max_o_id", next - 1, hi as i128, || {
                format!("{}: D_NEXT_O_ID − 1 vs max(NO_O_ID)", name())
            });
            n.compare(
                "tpcc.3_new_orders_contiguous",
                (hi - lo + 1) as i128,
                nos.len() as i128,
                || format!("{}: max − min + 1 of NO_O_ID vs count(NEW-ORDER)", name()),
            );
        } else {
            // Every order delivered: no NEW-ORDER row, and the condition holds with
            // none (a district with rows left is compared above).
            n.compare("tpcc.3_new_orders_contiguous", 0, nos.len() as i128, || {
                format!("{}: count(NEW-ORDER) of a fully delivered district", name())
            });
        }
        n.compare(
            "tpcc.4_ol_cnt_sum_is_order_lines",
            ol_sum as i128,
            f.lines_per_district.get(&di).copied().unwrap_or(0) as i128,
            || format!("{}: Σ O_OL_CNT vs count(ORDER-LINE)", name()),
        );
        n.compare(
            "tpcc.11_orders_minus_new_orders",
            count as i128 - nos.len() as i128,
            (loaded_delivered + led.delivered) as i128,
            || format!("{}: count(ORDER) − count(NEW-ORDER) vs loaded delivered + committed deliveries", name()),
        );
        n.compare(
            "tpcc.ledger_next_o_id",
            next,
            (cpd + 1 + led.new_orders) as i128,
            || {
                format!(
                    "{}: D_NEXT_O_ID vs loaded + committed NewOrders + 1",
                    name()
                )
            },
        );
        n.compare(
            "tpcc.ledger_ytd",
            dr[D_YTD] as i128,
            (d_ytd_loaded + led.paid) as i128,
            || format!("{}: D_YTD vs loaded + committed payments", name()),
        );
        for c in 1..=cpd {
            self.check_customer(s, f, w, d, c, n);
        }
        Some((dr[D_YTD], led.paid))
    }

    /// Customer `c` of district `d` of warehouse `w`: conditions 10 and 12.
    fn check_customer(&self, s: &Store, f: &NodeFacts, w: u64, d: u64, c: u64, n: &mut NodeCheck) {
        let name = || format!("warehouse {w} district {d}");
        let ck = customer(w, d, c);
        let Some(cr) = live_one(s, CUSTOMER, ck) else {
            n.compare("tpcc.10_balance_is_delivered_minus_paid", 0, 1, || {
                format!("{} customer {c}: no CUSTOMER row", name())
            });
            return;
        };
        let balance = cr[C_BALANCE] as i64 as i128;
        let delivered = f.delivered_by_customer.get(&ck).copied().unwrap_or(0) as i128;
        let paid = f.paid_by_customer.get(&ck).copied().unwrap_or(0) as i128;
        n.compare(
            "tpcc.10_balance_is_delivered_minus_paid",
            balance,
            delivered - paid,
            || {
                format!(
                    "{} customer {c}: C_BALANCE vs Σ delivered OL_AMOUNT − Σ H_AMOUNT",
                    name()
                )
            },
        );
        n.compare(
            "tpcc.12_balance_plus_ytd_is_delivered",
            balance + cr[C_YTD_PAYMENT] as i128,
            delivered,
            || {
                format!(
                    "{} customer {c}: C_BALANCE + C_YTD_PAYMENT vs Σ delivered OL_AMOUNT",
                    name()
                )
            },
        );
    }

    /// Warehouse `w`'s stock against the committed order lines.
    fn check_stock(&self, s: &Store, ledger: &Ledger, w: u64, n: &mut NodeCheck) {
        let (mut ytd, mut cnt, mut remote, mut out_of_range) = (0u64, 0u64, 0u64, 0u64);
        for i in 1..=self.items {
            if let Some(r) = live_one(s, STOCK, stock(w, i)) {
                ytd += r[S_YTD];
                cnt += r[S_ORDER_CNT];
                remote += r[S_REMOTE_CNT];
                out_of_range += !(1..=STOCK_QUANTITY_MAX).contains(&r[S_QUANTITY]) as u64;
            } else {
                out_of_range += 1;
            }
        }
        let sl = ledger.stock.get(&w).cloned().unwrap_or_default();
        n.compare("tpcc.stock_ytd", ytd as i128, sl.quantity as i128, || {
            format!("warehouse {w}: Σ S_YTD vs committed OL_QUANTITY")
        });
        n.compare(
            "tpcc.stock_order_cnt",
            cnt as i128,
            sl.lines as i128,
            || format!("warehouse {w}: Σ S_ORDER_CNT vs committed lines"),
        );
        n.compare("tpcc.stock_order_cnt", out_of_range as i128, 0, || {
            format!("warehouse {w}: stock rows missing or with S_QUANTITY outside 1..={STOCK_QUANTITY_MAX}")
        });
        n.compare(
            "tpcc.stock_remote_cnt",
            remote as i128,
            sl.remote as i128,
            || format!("warehouse {w}: Σ S_REMOTE_CNT vs committed remote lines"),
        );
    }

    pub fn check_cluster_parts(&self, parts: Vec<NodeCheck>) -> Vec<CheckResult> {
        let mut all = NodeCheck::default();
        for p in parts {
            for (name, c) in p.conds {
                let a = all.cond(&name);
                a.checked += c.checked;
                a.failed += c.failed;
                for e in c.examples {
                    push_example(&mut a.examples, || e);
                }
            }
            all.w_ytd.extend(p.w_ytd);
            all.d_ytd.extend(p.d_ytd);
            for (k, v) in p.paid_by_district {
                *all.paid_by_district.entry(k).or_default() += v;
            }
        }
        let by_district = std::mem::take(&mut all.paid_by_district);
        let paid = |di: u64| by_district.get(&di).copied().unwrap_or(0) as i128;
        let (w_ytd, d_ytd) = (all.w_ytd.clone(), all.d_ytd.clone());
        for (&w, &ytd) in &w_ytd {
            let sum: i128 = (0..DISTRICTS).map(|d| paid(district_index(w, d))).sum();
            all.compare("tpcc.8_w_ytd_is_history", ytd as i128, sum, || {
                format!("warehouse {w}: W_YTD vs Σ H_AMOUNT")
            });
        }
        for (&di, &ytd) in &d_ytd {
            all.compare("tpcc.9_d_ytd_is_history", ytd as i128, paid(di), || {
                format!(
                    "warehouse {} district {}: D_YTD vs Σ H_AMOUNT",
                    di / DISTRICTS,
                    di % DISTRICTS
                )
            });
        }
        CONDITIONS
            .iter()
            .map(|&(name, what)| {
                let c = all.conds.remove(name).unwrap_or_default();
                CheckResult {
                    name: name.into(),
                    binds: crate::Binds::Always,
                    passed: c.failed == 0 && c.checked > 0,
                    detail: if c.checked == 0 {
                        format!("{what}: nothing was compared")
                    } else if c.failed == 0 {
                        format!("{what}: all {} comparisons hold", c.checked)
                    } else {
                        format!(
                            "{what}: {} of {} comparisons fail: {}",
                            c.failed,
                            c.checked,
                            c.examples.join("; ")
                        )
                    },
                }
            })
            .collect()
    }
}

/// The workload words of record `key` of table `t`, if live on `s`.
fn live_one(s: &Store, t: TableId, key: u64) -> Option<Vec<u64>> {
    let idx = s.lookup(t, key)?;
    let mut p = Vec::new();
    s.read_payload(t, idx, &mut p);
    Some(p[ENGINE_PAYLOAD_WORDS as usize..].to_vec())
}
