//! YCSB (Cooper et al., SoCC 2010) as transactions, with RCC's knobs.
//!
//! One table, `usertable`, of `records` records per node (or `records_per_thread` times the
//! worker threads per node, as RCC sizes it: §6.1), each `record_bytes` bytes of
//! payload, of which the engine's tag and check word take 16. The workload's word 0 counts
//! the writes the record received; the rest is filler that each write rewrites, a function
//! of the key, the word and the count, so the final state can be verified word by word. A transaction does `ops_per_txn` operations on distinct keys drawn
//! across the whole cluster; each is a write (read-modify-write that increments the
//! counter) with probability `write_fraction`, else a read. All records are fetched in one
//! batch, then the transaction computes for `compute_us` (RCC's execution phase), then
//! writes.
//!
//! Key distributions: `uniform`; `zipfian` with `zipf_theta` (Gray et al.'s generator,
//! scrambled by a hash as YCSB does so hot keys spread over nodes); `hotspot`, where a
//! fraction `hot_prob` of accesses go to the first `hot_fraction` of each node's keys.
//! Defaults are RCC's (§6.1): 64-byte records, 10 operations, 20% writes, hotspot with 0.1%
//! hot records taking 10% of accesses, 5 µs execution phase.
//!
//! Invariants, from the final state: every record's counter equals the committed writes of
//! that key (no lost update, no write applied to another record), and every filler word is
//! the one its count implies.

use crate::params::{Knobs, ParamError, Params};
use crate::{AccessMode, AccessSet, CheckResult, InputDecodeError, TxnInput, Workload};
use atoll_fabric::rng::Rng;
use atoll_fabric::NodeId;
use atoll_storage::layout::{hash_key, ENGINE_PAYLOAD_WORDS};
use atoll_storage::{Partition, Store, TableId, TableSpec};
use atoll_txn::{Abort, Protocol, Txn};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const USERTABLE: TableId = TableId(0);
const OPS_PER_TXN_MAX: u64 = 64;
/// Records per node by default (RCC's YCSB table is sized per thread: `records_per_thread`).
const RECORDS_DEFAULT: u64 = 100_000;
/// Most records per node, however the table is sized.
const RECORDS_MAX: u64 = 100_000_000;
/// The engine's two words and the write counter.
const RECORD_BYTES_MIN: u64 = 8 * (ENGINE_PAYLOAD_WORDS as u64 + 1);

/// Filler word `i` of `key` after `count` writes.
fn filler(key: u64, i: usize, count: u64) -> u64 {
    hash_key(key ^ (i as u64).rotate_left(32) ^ count.wrapping_mul(0x2545_F491_4F6C_DD1D))
}

/// The payload of `key` after `count` writes: word 0 the count, then filler words that are
/// a function of the key, the word and the count, so a record's final state can be checked
/// word by word (YCSB's and the microbenchmark's records).
pub(crate) fn counted_payload(key: u64, count: u64, out: &mut [u64]) {
    out[0] = count;
    for (i, w) in out.iter_mut().enumerate().skip(1) {
        *w = filler(key, i, count);
    }
}

/// Checks the records `keys` of `table` on `s`, each written by [`counted_payload`]: its
/// count equals its committed writes in `ledger`, and its words are that write's.
pub(crate) fn check_counted_records(
    s: &Store,
    table: TableId,
    keys: std::ops::Range<u64>,
    ledger: &Ledger,
) -> NodeCheck {
    let mut c = NodeCheck::default();
    // The table's own words (the engine's two are not among them).
    let words = s.catalog.spec(table).payload_words as usize;
    let (mut payload, mut want) = (Vec::new(), vec![0u64; words]);
    for k in keys {
        let Some(idx) = s.lookup(table, k) else {
            c.missing += 1;
            continue;
        };
        s.read_payload(table, idx, &mut payload);
        let user = &payload[ENGINE_PAYLOAD_WORDS as usize..];
        let committed = ledger.writes.get(&k).copied().unwrap_or(0);
        c.counted += user[0];
        counted_payload(k, user[0], &mut want);
        if user[0] != committed {
            c.wrong_count += 1;
            crate::push_example(&mut c.examples, || {
                format!("key {k}: count {}, committed writes {committed}", user[0])
            });
        } else if user != want.as_slice() {
            c.wrong_filler += 1;
            crate::push_example(&mut c.examples, || {
                format!("key {k}: filler words differ from write {}'s", user[0])
            });
        }
    }
    c
}

/// The verdict `name` over every node's [`check_counted_records`] part.
pub(crate) fn counted_records_verdict(
    name: &str,
    parts: Vec<NodeCheck>,
    ledger: &Ledger,
) -> Vec<CheckResult> {
    let mut all = NodeCheck::default();
    for p in parts {
        all.missing += p.missing;
        all.wrong_count += p.wrong_count;
        all.wrong_filler += p.wrong_filler;
        all.counted += p.counted;
        for e in p.examples {
            crate::push_example(&mut all.examples, || e);
        }
    }
    let committed: u64 = ledger.writes.values().sum();
    let passed = all.missing == 0 && all.wrong_count == 0 && all.wrong_filler == 0;
    vec![CheckResult {
        name: name.into(),
        binds: crate::Binds::Always,
        passed,
        detail: if passed {
            format!(
                "every record's count equals its committed writes ({committed} in all) and its words are that write's"
            )
        } else {
            format!(
                "{} records' counts differ from their committed writes, {} have foreign words, {} missing (counts sum to {}, committed writes {committed}): {}",
                all.wrong_count,
                all.wrong_filler,
                all.missing,
                all.counted,
                all.examples.join("; ")
            )
        },
    }]
}

/// Operations per transaction kept on the stack (YCSB's default is 16; more spill).
const OPS_INLINE: usize = 16;

/// What a committed transaction did that the check counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effect {
    /// The keys it wrote (each write increments the key's counter by one).
    pub written_keys: smallvec::SmallVec<[u64; 16]>,
}

/// Committed writes per key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    pub writes: crate::KeyMap<u64, u64>,
}

/// One node's part of the record check.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCheck {
    pub missing: u64,
    /// Records whose count differs from their committed writes.
    pub wrong_count: u64,
    /// Records whose other words are not their last write's.
    pub wrong_filler: u64,
    pub examples: Vec<String>,
    /// The sum of this node's records' counts.
    pub counted: u64,
}
/// Draws per operation before a transaction's remaining keys are taken in order: enough for
/// any key space with several times more keys than operations, short for tiny ones.
const DRAWS_PER_OP_MAX: u64 = 64;

/// Keys and write flags of one transaction (at most `OPS_PER_TXN_MAX`).
pub type Keys = Vec<(u64, bool)>;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    Uniform,
    Zipfian,
    Hotspot,
}

#[derive(Clone, Debug)]
pub struct Ycsb {
    /// Records per node.
    pub records: u64,
    /// Set when the table was sized per worker thread (`records` = this × threads).
    pub records_per_thread: Option<u64>,
    /// Nodes of the cluster (the table holds `records` on each).
    pub nodes: u16,
    pub record_bytes: u64,
    pub ops_per_txn: u64,
    pub write_fraction: f64,
    pub distribution: Distribution,
    pub zipf_theta: f64,
    pub hot_fraction: f64,
    pub hot_prob: f64,
    pub compute_us: f64,
    zipf: Option<Zipf>,
}

/// Gray et al.'s Zipfian generator ("Quickly generating billion-record synthetic
/// databases", SIGMOD 1994), as YCSB implements it: items 0..n, item 0 most popular.
#[derive(Clone, Debug)]
struct Zipf {
    n: u64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    /// `1 + 0.5^theta`: below it (times `zetan`) a draw is item 1. Computed once, not per
    /// draw (a `powf` per key was ~5% of a YCSB transaction's instructions).
    item1_bound: f64,
    /// `2 * alpha` when it is a whole number up to [`HALF_POWERS_MAX`] (theta 0.5, 0.6, 0.75,
    /// 0.8, 0.9, 0.95): `x^alpha` is then `sqrt(x)` raised to it, a square root and a few
    /// multiplications instead of a `powf` (~125 instructions a draw, a quarter of a YCSB
    /// transaction's input generation).
    half_powers: Option<i32>,
}

/// Largest `2 * alpha` taken by multiplication (theta up to 0.96875); above it `powf`.
const HALF_POWERS_MAX: f64 = 64.0;

impl Zipf {
    fn zeta(n: u64, theta: f64) -> f64 {
        (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
    }

    fn new(n: u64, theta: f64) -> Self {
        let zetan = Self::zeta(n, theta);
        let zeta2 = Self::zeta(2, theta);
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf {
            n,
            alpha,
            zetan,
            eta,
            item1_bound: 1.0 + 0.5f64.powf(theta),
            // 1 / (1 - 0.8) is 5.000000000000001 in floating point: whole within rounding.
            half_powers: Some((2.0 * alpha).round())
                .filter(|h| (2.0 * alpha - h).abs() < 1e-9 && (1.0..=HALF_POWERS_MAX).contains(h))
                .map(|h| h as i32),
        }
    }

    /// `x^alpha` for `x` in [0, 1].
    fn pow_alpha(&self, x: f64) -> f64 {
        match self.half_powers {
            Some(h) => x.sqrt().powi(h),
            None => x.powf(self.alpha),
        }
    }

    fn next(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < self.item1_bound {
            return 1;
        }
        let v = (self.n as f64 * self.pow_alpha(self.eta * u - self.eta + 1.0)) as u64;
        v.min(self.n - 1)
    }
}

/// One transaction: keys with a write flag each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Input {
    pub ops: Keys,
}

/// Encoded as the operation count, then per operation its key and 1 for a write, 0 for a
/// read.
impl TxnInput for Input {
    fn encode(&self, out: &mut Vec<u64>) {
        out.push(self.ops.len() as u64);
        for &(k, w) in &self.ops {
            out.extend([k, w as u64]);
        }
    }

    fn decode(words: &[u64]) -> Result<Self, InputDecodeError> {
        let mut w = crate::Words::new(Ycsb::NAME, words);
        let n = w.next()?;
        if n > OPS_PER_TXN_MAX {
            return Err(w.error(format!("{n} operations, at most {OPS_PER_TXN_MAX} allowed")));
        }
        let mut ops = Keys::with_capacity(n as usize);
        for _ in 0..n {
            let key = w.next()?;
            let write = match w.next()? {
                0 => false,
                1 => true,
                f => return Err(w.error(format!("write flag {f} of key {key}, expected 0 or 1"))),
            };
            ops.push((key, write));
        }
        w.end()?;
        Ok(Input { ops })
    }
}

/// YCSB's own property names, as its users give them (`-p recordcount=...`): each with the
/// knob it sets. `recordcount` is the cluster's records (split evenly over the nodes).
const STANDARD_PROPERTIES: &[&str] = &[
    "workload",
    "recordcount",
    "readproportion",
    "updateproportion",
    "readmodifywriteproportion",
    "insertproportion",
    "scanproportion",
    "requestdistribution",
    "zipfianconstant",
    "fieldcount",
    "fieldlength",
    "operationcount",
];

/// YCSB's core workloads this engine runs as presets (`-p workload=a`): the share of
/// operations that write and the request distribution (YCSB's defaults: zipfian, 0.99).
/// D (read latest, inserts) and E (short scans, inserts) need inserts and scans, which these
/// transactions do not do.
const CORE_WORKLOADS: [(&str, f64); 4] = [("a", 0.5), ("b", 0.05), ("c", 0.0), ("f", 0.5)];

/// YCSB's default record: 10 fields of 100 bytes.
const YCSB_RECORD_BYTES: u64 = 1000;

/// A YCSB property's value as a number of 0 or more (`None`: not given).
fn property_num(p: &Params, k: &str) -> Result<Option<f64>, ParamError> {
    p.get(k)
        .map(|v| {
            v.trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| {
                    ParamError(format!(
                        "ycsb {k}={v} is not a number: expected one of 0 or more"
                    ))
                })
        })
        .transpose()
}

/// YCSB core workload `w` (`a`, or `workloada`) as this workload's knobs, beside those
/// given by their own names in `out` (which win).
fn core_workload(w: &str, out: &mut Params) -> Result<(), ParamError> {
    let w = w.trim().to_ascii_lowercase();
    let w = w.trim_start_matches("workload");
    let Some(&(_, writes)) = CORE_WORKLOADS.iter().find(|(n, _)| *n == w) else {
        return Err(ParamError(format!("ycsb workload={w} is not accepted: expected a, b, c or f (d and e insert and scan, which these transactions do not)")));
    };
    out.entry("write_fraction".into())
        .or_insert(writes.to_string());
    // YCSB's transactions are one operation on a record of 10 fields of 100 bytes.
    out.entry("ops_per_txn".into()).or_insert("1".into());
    out.entry("record_bytes".into())
        .or_insert((YCSB_RECORD_BYTES + 8 * ENGINE_PAYLOAD_WORDS as u64).to_string());
    out.entry("distribution".into()).or_insert("zipfian".into());
    Ok(())
}

/// `p` with YCSB's standard property names and core-workload presets turned into this
/// workload's knobs (a knob given by its own name wins over a preset); a property this
/// engine cannot honour is refused naming why.
fn standard_properties(p: &Params, nodes: u16) -> Result<Params, ParamError> {
    if !p.keys().any(|k| STANDARD_PROPERTIES.contains(&k.as_str())) {
        return Ok(p.clone());
    }
    let err = |m: String| Err(ParamError(format!("ycsb {m}")));
    let mut out: Params = p
        .iter()
        .filter(|(k, _)| !STANDARD_PROPERTIES.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let set = |out: &mut Params, knob: &str, v: String, from: &str| -> Result<(), ParamError> {
        if p.contains_key(knob) {
            return Err(ParamError(format!(
                "ycsb {from} and {knob} are not accepted together: they set the same knob"
            )));
        }
        out.insert(knob.into(), v);
        Ok(())
    };
    let num = |k: &str| property_num(p, k);
    if let Some(v) = p.get("operationcount") {
        return err(format!("operationcount={v} is not accepted: runs here are timed, not counted (give --duration)"));
    }
    for k in ["insertproportion", "scanproportion"] {
        if num(k)?.is_some_and(|x| x > 0.0) {
            return err(format!("{k}={} is not accepted: these transactions neither insert nor scan (accepted: readproportion, updateproportion, readmodifywriteproportion)", p[k]));
        }
    }
    if let Some(w) = p.get("workload") {
        core_workload(w, &mut out)?;
    }
    let read = num("readproportion")?;
    let update =
        num("updateproportion")?.unwrap_or(0.0) + num("readmodifywriteproportion")?.unwrap_or(0.0);
    if read.is_some()
        || p.contains_key("updateproportion")
        || p.contains_key("readmodifywriteproportion")
    {
        let read = read.unwrap_or(1.0 - update);
        if (read + update - 1.0).abs() > 1e-9 {
            return err(format!("readproportion={read} and updateproportion + readmodifywriteproportion={update} do not sum to 1"));
        }
        set(
            &mut out,
            "write_fraction",
            update.to_string(),
            "updateproportion",
        )?;
    }
    if let Some(d) = p.get("requestdistribution") {
        match d.trim() {
            "uniform" | "zipfian" | "hotspot" => set(
                &mut out,
                "distribution",
                d.trim().into(),
                "requestdistribution",
            )?,
            other => {
                return err(format!(
                "requestdistribution={other} is not accepted: expected uniform, zipfian or hotspot"
            ))
            }
        }
    }
    if let Some(z) = p.get("zipfianconstant") {
        set(&mut out, "zipf_theta", z.clone(), "zipfianconstant")?;
    }
    if let Some(n) = num("recordcount")? {
        let n = n as u64;
        if n % nodes as u64 != 0 || n == 0 {
            return err(format!("recordcount={n} is not accepted on {nodes} nodes: expected a multiple of the node count (records are split evenly)"));
        }
        set(
            &mut out,
            "records",
            (n / nodes as u64).to_string(),
            "recordcount",
        )?;
    }
    if p.contains_key("fieldcount") || p.contains_key("fieldlength") {
        // YCSB's defaults: 10 fields of 100 bytes; the engine's own words ride beside them.
        let bytes =
            num("fieldcount")?.unwrap_or(10.0) as u64 * num("fieldlength")?.unwrap_or(100.0) as u64;
        set(
            &mut out,
            "record_bytes",
            (bytes.div_ceil(8) * 8 + 8 * ENGINE_PAYLOAD_WORDS as u64).to_string(),
            "fieldcount/fieldlength",
        )?;
    }
    Ok(out)
}

impl Ycsb {
    pub const KNOBS: &'static [&'static str] = &[
        "records",
        "records_per_thread",
        "record_bytes",
        "ops_per_txn",
        "write_fraction",
        "distribution",
        "zipf_theta",
        "hot_fraction",
        "hot_prob",
        "compute_us",
    ];

    /// `nodes` sizes the zipfian generator, whose key space is the whole cluster's;
    /// `threads` (worker threads per node) sizes the table when `records_per_thread` is set.
    pub fn from_params(p: &Params, nodes: u16, threads: u16) -> Result<Self, ParamError> {
        let p = &standard_properties(p, nodes)?;
        let k = Knobs::new("ycsb", p, Self::KNOBS)?;
        let per_thread = if p.contains_key("records_per_thread") {
            if p.contains_key("records") {
                return Err(ParamError(
                    "ycsb records and records_per_thread are not accepted together: expected one of them (records per node, or per worker thread of each node)".into(),
                ));
            }
            Some(k.u64("records_per_thread", 0, 1, RECORDS_MAX)?)
        } else {
            None
        };
        let records = match per_thread {
            Some(n) => {
                let records = n * threads as u64;
                if records > RECORDS_MAX {
                    return Err(ParamError(format!(
                        "ycsb records_per_thread={n} is out of range with {threads} threads: expected records_per_thread x threads at most {RECORDS_MAX} records per node"
                    )));
                }
                records
            }
            None => k.u64("records", RECORDS_DEFAULT, 1, RECORDS_MAX)?,
        };
        let record_bytes = k.u64("record_bytes", 64, RECORD_BYTES_MIN, 4096)?;
        if record_bytes % 8 != 0 {
            return Err(ParamError(format!("ycsb record_bytes={record_bytes} is not accepted: expected a multiple of 8 in {RECORD_BYTES_MIN}..=4096")));
        }
        let ops_per_txn = k.u64("ops_per_txn", 10, 1, OPS_PER_TXN_MAX)?;
        if ops_per_txn > records * nodes as u64 {
            return Err(ParamError(format!(
                "ycsb ops_per_txn={ops_per_txn} is out of range: expected at most the {} records of the cluster",
                records * nodes as u64
            )));
        }
        let write_fraction = k.f64("write_fraction", 0.2, 0.0, 1.0)?;
        let distribution = match k.choice(
            "distribution",
            "hotspot",
            &["uniform", "zipfian", "hotspot"],
        )? {
            "uniform" => Distribution::Uniform,
            "zipfian" => Distribution::Zipfian,
            _ => Distribution::Hotspot,
        };
        let zipf_theta = k.f64("zipf_theta", 0.99, 0.0, 0.9999)?;
        let hot_fraction = k.f64("hot_fraction", 0.001, 0.0, 1.0)?;
        let hot_prob = k.f64("hot_prob", 0.1, 0.0, 1.0)?;
        let compute_us = k.f64("compute_us", 5.0, 0.0, 1_000_000.0)?;
        let zipf = (distribution == Distribution::Zipfian)
            .then(|| Zipf::new(records * nodes as u64, zipf_theta));
        let y = Ycsb {
            records,
            records_per_thread: per_thread,
            nodes,
            record_bytes,
            ops_per_txn,
            write_fraction,
            distribution,
            zipf_theta,
            hot_fraction,
            hot_prob,
            compute_us,
            zipf,
        };
        // With every access going to the hot set, a transaction's distinct keys come from it
        // alone; more operations than that could never be drawn.
        if distribution == Distribution::Hotspot && hot_prob >= 1.0 {
            let hot_keys = y.hot_records() * nodes as u64;
            if ops_per_txn > hot_keys {
                return Err(ParamError(format!(
                    "ycsb ops_per_txn={ops_per_txn} needs {ops_per_txn} distinct keys, but hot_prob={hot_prob} sends every access to the {hot_keys} hot records (hot_fraction={hot_fraction} of records={records}, at least 1, on each of {nodes} nodes): expected ops_per_txn at most {hot_keys}, a lower hot_prob or a higher hot_fraction"
                )));
            }
        }
        Ok(y)
    }

    /// The workload's words: the record's bytes less the engine's tag and check word.
    fn payload_words(&self) -> usize {
        (self.record_bytes / 8) as usize - ENGINE_PAYLOAD_WORDS as usize
    }

    /// The payload of `key` after `count` writes.
    fn payload(&self, key: u64, count: u64, out: &mut [u64]) {
        counted_payload(key, count, out)
    }

    fn hot_records(&self) -> u64 {
        ((self.records as f64 * self.hot_fraction).round() as u64).clamp(1, self.records)
    }

    fn key(&self, rng: &mut Rng, nodes: u16) -> u64 {
        let total = self.records * nodes as u64;
        match self.distribution {
            Distribution::Uniform => rng.below(total),
            Distribution::Zipfian => {
                let z = self
                    .zipf
                    .as_ref()
                    .expect("zipfian generator built with the knobs");
                hash_key(z.next(rng)) % total
            }
            Distribution::Hotspot => {
                let node = rng.below(nodes as u64);
                let idx = if rng.chance(self.hot_prob) {
                    rng.below(self.hot_records())
                } else {
                    rng.below(self.records)
                };
                node * self.records + idx
            }
        }
    }
}

impl Workload for Ycsb {
    type Input = Input;
    type Effect = Effect;
    type Ledger = Ledger;
    type NodeCheck = NodeCheck;
    const NAME: &'static str = "ycsb";
    const DECLARES_KEYS: bool = true;
    const ABOUT: &'static str = "key-value reads and updates, zipfian or hot-set skew";
    const SMALL_PARAMS: &'static [(&'static str, &'static str)] =
        &[("records", "60"), ("ops_per_txn", "4")];

    fn think_ns_max(&self) -> u64 {
        (self.compute_us * 1000.0) as u64
    }

    fn configure(p: &Params, shape: &crate::WorkloadShape) -> Result<Self, ParamError> {
        Ycsb::from_params(p, shape.nodes, shape.threads)
    }

    fn largest_write_set(&self) -> Vec<TableId> {
        // Every operation may be a write (read for update) unless none ever is.
        let writes = if self.write_fraction > 0.0 {
            self.ops_per_txn
        } else {
            0
        };
        vec![USERTABLE; writes as usize]
    }

    fn txn_types(&self) -> &'static [&'static str] {
        &["ycsb"]
    }

    fn tables(&self, _nodes: u16) -> Vec<TableSpec> {
        vec![TableSpec {
            // YCSB never deletes.
            gone_keys_max_per_node: 0,
            name: "usertable".into(),
            payload_words: self.payload_words() as u32,
            capacity_per_node: self.records as u32,
            capacity_max_per_node: Some(self.records as u32),
            partition: Partition::Range {
                keys_per_node: self.records,
            },
            ordered: false,
        }]
    }

    fn load(&self, store: &Store) -> Result<(), atoll_storage::StoreError> {
        let base = store.node.0 as u64 * self.records;
        let mut payload = vec![0u64; self.payload_words()];
        for k in base..base + self.records {
            self.payload(k, 0, &mut payload);
            store.insert(USERTABLE, k, &payload)?;
        }
        Ok(())
    }

    fn generate(&self, rng: &mut Rng, nodes: u16, _home: NodeId) -> (usize, Input) {
        let mut keys: Keys = Vec::with_capacity(self.ops_per_txn as usize);
        let want = self.ops_per_txn as usize;
        // Distinct keys; the bound keeps a tiny or very skewed key space from looping long.
        let mut attempts = 0;
        while keys.len() < want && attempts < self.ops_per_txn * DRAWS_PER_OP_MAX {
            attempts += 1;
            let k = self.key(rng, nodes);
            if keys.iter().all(|(x, _)| *x != k) {
                keys.push((k, rng.chance(self.write_fraction)));
            }
        }
        // Then (rarely) the next free keys from a random one on, so a transaction always has
        // its ops_per_txn operations: `from_params` refused key spaces with fewer distinct
        // keys, and the whole cluster holds at least ops_per_txn.
        let total = self.records * nodes as u64;
        let mut k = rng.below(total);
        while keys.len() < want {
            if keys.iter().all(|(x, _)| *x != k) {
                keys.push((k, rng.chance(self.write_fraction)));
            }
            k = (k + 1) % total;
        }
        (0, Input { ops: keys })
    }

    fn access_set(&self, input: &Input) -> Option<AccessSet> {
        Some(AccessSet::new(input.ops.iter().map(|&(k, w)| {
            let mode = if w {
                AccessMode::Write
            } else {
                AccessMode::Read
            };
            (USERTABLE, k, mode)
        })))
    }

    async fn execute<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        input: &Input,
    ) -> Result<Effect, Abort> {
        let accesses: smallvec::SmallVec<[_; OPS_INLINE]> =
            input.ops.iter().map(|&(k, w)| (USERTABLE, k, w)).collect();
        tx.fetch(&accesses).await?;
        if self.compute_us > 0.0 {
            tx.compute((self.compute_us * 1000.0) as u64).await;
        }
        let mut written = Effect::default();
        for &(k, w) in &input.ops {
            if !w {
                continue;
            }
            tx.update(USERTABLE, k, |p| {
                let count = p[0] + 1;
                self.payload(k, count, p);
            })
            .await?;
            written.written_keys.push(k);
        }
        Ok(written)
    }

    fn record(&self, ledger: &mut Ledger, effect: Effect) {
        for k in effect.written_keys {
            *ledger.writes.entry(k).or_insert(0) += 1;
        }
    }

    fn merge(&self, into: &mut Ledger, from: Ledger) {
        for (k, n) in from.writes {
            *into.writes.entry(k).or_insert(0) += n;
        }
    }

    fn check_node(&self, s: &Store, ledger: &Ledger) -> NodeCheck {
        let base = s.node.0 as u64 * self.records;
        check_counted_records(s, USERTABLE, base..base + self.records, ledger)
    }

    fn check_cluster(&self, parts: Vec<NodeCheck>, ledger: &Ledger) -> Vec<CheckResult> {
        counted_records_verdict("ycsb.records_match_committed_writes", parts, ledger)
    }

    fn knobs(&self) -> BTreeMap<String, String> {
        let d = match self.distribution {
            Distribution::Uniform => "uniform",
            Distribution::Zipfian => "zipfian",
            Distribution::Hotspot => "hotspot",
        };
        let mut knobs = BTreeMap::from([
            ("records".into(), self.records.to_string()),
            // The table's size apart: RCC's tables grow with nodes and threads, ours per node
            // unless records_per_thread is set, so figures compare only beside this.
            (
                "table_records".into(),
                (self.records * self.nodes as u64).to_string(),
            ),
            ("record_bytes".into(), self.record_bytes.to_string()),
            ("ops_per_txn".into(), self.ops_per_txn.to_string()),
            ("write_fraction".into(), self.write_fraction.to_string()),
            ("distribution".into(), d.into()),
            ("zipf_theta".into(), self.zipf_theta.to_string()),
            ("hot_fraction".into(), self.hot_fraction.to_string()),
            ("hot_prob".into(), self.hot_prob.to_string()),
            ("compute_us".into(), self.compute_us.to_string()),
        ]);
        if let Some(n) = self.records_per_thread {
            knobs.insert("records_per_thread".into(), n.to_string());
        }
        knobs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ycsb_standard_property_names_and_core_workloads_set_the_knobs_or_are_refused_naming_why() {
        let p = |kv: &[(&str, &str)]| -> Params {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let a = Ycsb::from_params(&p(&[("workload", "a"), ("recordcount", "2000")]), 2, 1).unwrap();
        assert_eq!((a.write_fraction, a.ops_per_txn, a.records), (0.5, 1, 1000));
        assert_eq!(a.distribution, Distribution::Zipfian);
        let own = Ycsb::from_params(&p(&[("workload", "b"), ("ops_per_txn", "4")]), 1, 1).unwrap();
        assert_eq!(
            (own.write_fraction, own.ops_per_txn),
            (0.05, 4),
            "its own knob wins"
        );
        let rw = p(&[("readproportion", "0.7"), ("updateproportion", "0.3")]);
        assert_eq!(Ycsb::from_params(&rw, 1, 1).unwrap().write_fraction, 0.3);
        for (bad, says) in [
            (p(&[("workload", "e")]), "d and e insert and scan"),
            (p(&[("operationcount", "10")]), "timed, not counted"),
            (p(&[("recordcount", "3")]), "multiple of the node count"),
            (
                p(&[("readproportion", "0.5"), ("updateproportion", "0.4")]),
                "do not sum to 1",
            ),
            (
                p(&[("requestdistribution", "latest")]),
                "uniform, zipfian or hotspot",
            ),
            (
                p(&[("recordcount", "4"), ("records", "2")]),
                "not accepted together",
            ),
        ] {
            let e = Ycsb::from_params(&bad, 2, 1).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn ycsb_inputs_encode_and_decode_back_and_bad_words_are_refused() {
        let y = ycsb(&[("distribution", "zipfian"), ("write_fraction", "0.5")], 3);
        let mut rng = Rng::new(8);
        let mut words = Vec::new();
        for _ in 0..2_000 {
            let (_, input) = y.generate(&mut rng, 3, NodeId(2));
            words.clear();
            input.encode(&mut words);
            assert_eq!(words.len(), 1 + 2 * input.ops.len());
            assert_eq!(Input::decode(&words), Ok(input));
        }
        assert_eq!(Input::decode(&[0]), Ok(Input::default()));
        assert!(Input::decode(&[1, 5]).is_err(), "a key without its flag");
        assert!(Input::decode(&[1, 5, 2]).is_err(), "flag 2");
        assert!(Input::decode(&[OPS_PER_TXN_MAX + 1]).is_err());
        assert!(Input::decode(&[1, 5, 1, 0]).is_err(), "a word left over");
    }

    fn ycsb(kv: &[(&str, &str)], nodes: u16) -> Ycsb {
        Ycsb::from_params(
            &kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            nodes,
            1,
        )
        .unwrap()
    }

    #[test]
    fn ycsb_hotspot_sends_hot_prob_of_accesses_to_the_hot_area() {
        let y = ycsb(
            &[
                ("records", "10000"),
                ("hot_fraction", "0.01"),
                ("hot_prob", "0.5"),
            ],
            2,
        );
        let mut rng = Rng::new(9);
        let (mut hot, mut all) = (0, 0);
        for _ in 0..20_000 {
            for (k, _) in y.generate(&mut rng, 2, NodeId(0)).1.ops {
                all += 1;
                hot += ((k % y.records) < 100) as u64;
            }
        }
        // Half go to the hot area by choice, and 1% of the others land there by chance.
        let frac = hot as f64 / all as f64;
        assert!((frac - 0.505).abs() < 0.02, "hot fraction {frac}");
    }

    #[test]
    fn ycsb_zipfian_is_skewed_and_write_fraction_holds() {
        let y = ycsb(
            &[
                ("records", "5000"),
                ("distribution", "zipfian"),
                ("zipf_theta", "0.99"),
                ("write_fraction", "0.2"),
            ],
            2,
        );
        let mut rng = Rng::new(5);
        let mut freq = std::collections::HashMap::new();
        let (mut writes, mut ops) = (0, 0);
        for _ in 0..20_000 {
            let keys = y.generate(&mut rng, 2, NodeId(0)).1.ops;
            assert_eq!(keys.len(), 10);
            for (k, w) in keys {
                *freq.entry(k).or_insert(0u64) += 1;
                writes += w as u64;
                ops += 1;
            }
        }
        let mut top: Vec<u64> = freq.values().copied().collect();
        top.sort_unstable_by(|a, b| b.cmp(a));
        // Under theta 0.99 the 10 hottest of 10,000 keys take well over 10% of accesses
        // (uniform would give 0.1%).
        let top10: u64 = top.iter().take(10).sum();
        assert!(
            top10 as f64 / ops as f64 > 0.10,
            "top-10 share {}",
            top10 as f64 / ops as f64
        );
        let wf = writes as f64 / ops as f64;
        assert!((wf - 0.2).abs() < 0.01, "write fraction {wf}");
    }

    #[test]
    fn zipf_half_power_fast_path_draws_what_powf_draws() {
        for (theta, fast) in [
            (0.5, true),
            (0.6, true),
            (0.8, true),
            (0.9, true),
            (0.7, false),
            (0.99, false),
        ] {
            let z = Zipf::new(100_000, theta);
            assert_eq!(z.half_powers.is_some(), fast, "theta {theta}");
            let mut rng = Rng::new(9);
            let mut differ = 0;
            for _ in 0..100_000 {
                let u = rng.unit_f64();
                let x = z.eta * u - z.eta + 1.0;
                let (fast, slow) = (z.pow_alpha(x), x.powf(z.alpha));
                assert!(
                    (fast - slow).abs() <= 1e-12 * slow.max(1e-300),
                    "theta {theta}: {x}^{} is {slow}, fast path {fast}",
                    z.alpha
                );
                differ += ((z.n as f64 * fast) as u64 != (z.n as f64 * slow) as u64) as u32;
            }
            // Rounding may move a draw across an item boundary, rarely.
            assert!(
                differ < 10,
                "theta {theta}: {differ} of 100,000 draws moved"
            );
        }
    }

    #[test]
    fn ycsb_rejects_bad_knobs_naming_them() {
        let e = Ycsb::from_params(&Params::from([("record_bytes".into(), "28".into())]), 1, 1)
            .unwrap_err();
        assert!(
            e.0.contains("record_bytes=28") && e.0.contains("multiple of 8"),
            "{e}"
        );
        let e = Ycsb::from_params(&Params::from([("record_bytes".into(), "16".into())]), 1, 1)
            .unwrap_err();
        assert!(
            e.0.contains("record_bytes=16") && e.0.contains("24..=4096"),
            "{e}"
        );
        let e = Ycsb::from_params(&Params::from([("ops_per_txn".into(), "1000".into())]), 1, 1)
            .unwrap_err();
        assert!(e.0.contains("ops_per_txn=1000 is out of range"), "{e}");
    }

    #[test]
    fn ycsb_records_per_thread_sizes_the_table_by_threads_and_the_report_shows_its_size() {
        let p = |kv: &[(&str, &str)]| -> Params {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let y = Ycsb::from_params(&p(&[("records_per_thread", "1000")]), 4, 10).unwrap();
        assert_eq!(y.records, 10_000);
        let k = y.knobs();
        assert_eq!(k["records"], "10000");
        assert_eq!(k["records_per_thread"], "1000");
        assert_eq!(k["table_records"], "40000");
        // The default stays per node, whatever the threads.
        let d = Ycsb::from_params(&Params::new(), 4, 10).unwrap();
        assert_eq!(d.records, RECORDS_DEFAULT);
        assert_eq!(
            d.knobs()["table_records"],
            (4 * RECORDS_DEFAULT).to_string()
        );
        assert!(!d.knobs().contains_key("records_per_thread"));
        let both = Ycsb::from_params(&p(&[("records", "5"), ("records_per_thread", "5")]), 1, 1);
        assert!(both.unwrap_err().0.contains("not accepted together"));
        let big = Ycsb::from_params(&p(&[("records_per_thread", "100000000")]), 1, 2);
        assert!(big.unwrap_err().0.contains("records_per_thread=100000000"));
        assert!(Ycsb::from_params(&p(&[("records_per_thread", "0")]), 1, 1).is_err());
    }

    #[test]
    fn ycsb_refuses_more_ops_than_the_hot_set_holds_when_every_access_is_hot() {
        let p = |ops: &str| {
            Params::from([
                ("hot_prob".into(), "1".into()),
                ("hot_fraction".into(), "0".into()),
                ("ops_per_txn".into(), ops.into()),
            ])
        };
        let e = Ycsb::from_params(&p("10"), 2, 1).unwrap_err();
        assert!(
            e.0.contains("ops_per_txn=10")
                && e.0.contains("hot_prob=1")
                && e.0.contains("hot_fraction=0")
                && e.0.contains("2 hot records"),
            "{e}"
        );
        assert!(Ycsb::from_params(&p("2"), 2, 1).is_ok());
    }

    #[test]
    fn ycsb_transactions_always_have_ops_per_txn_distinct_keys() {
        for kv in [
            vec![
                ("hot_prob", "1"),
                ("hot_fraction", "0"),
                ("ops_per_txn", "2"),
            ],
            vec![
                ("hot_prob", "0.999"),
                ("hot_fraction", "0"),
                ("ops_per_txn", "10"),
            ],
            vec![
                ("records", "10"),
                ("distribution", "uniform"),
                ("ops_per_txn", "20"),
            ],
            vec![
                ("distribution", "zipfian"),
                ("zipf_theta", "0.9999"),
                ("ops_per_txn", "64"),
            ],
        ] {
            let y = ycsb(&kv, 2);
            let mut rng = Rng::new(3);
            for _ in 0..200 {
                let keys = y.generate(&mut rng, 2, NodeId(0)).1.ops;
                let mut ks: Vec<u64> = keys.iter().map(|(k, _)| *k).collect();
                ks.sort_unstable();
                ks.dedup();
                assert_eq!(ks.len(), y.ops_per_txn as usize, "{kv:?}");
            }
        }
    }
}
