//! Transaction histories: recording format, a dependency-graph serializability checker,
//! and an export to the rw-register format of Elle-style checkers (the `adya` crate).
//!
//! Every write installs a new version of a record, and versions of a record are numbered
//! consecutively (the tuple header's version word), so the version order is known exactly.
//! From it the checker derives Adya's dependency edges between committed transactions:
//! - ww: the writer of version v precedes the writer of the next version;
//! - wr: the writer of version v precedes every reader of v;
//! - rw: a reader of version v precedes the writer of the next version.
//!
//! The history is conflict-serializable iff that graph is acyclic. The loaded state is
//! version 1 of every record, written by a virtual initial transaction. [`Mode`] leaves room
//! for snapshot isolation, which would forbid only cycles of a certain shape.

use atoll_storage::TableId;
use atoll_txn::HistOp;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

/// The version every loaded record starts at.
pub const INITIAL_VERSION: u64 = 1;

/// One attempt of a transaction, committed or aborted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnRecord {
    /// The attempt's timestamp (WAITDIE's retries keep their first one).
    pub id: u64,
    /// 1 for the first attempt of a transaction, then 2, 3, ... for its retries.
    pub attempt: u32,
    /// Cluster-wide co-routine index that ran it.
    pub coord: u32,
    /// `None` when committed, else the abort reason.
    pub aborted: Option<String>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub ops: Vec<HistOp>,
}

fn op_json(op: &HistOp) -> Value {
    match *op {
        HistOp::Read {
            table,
            key,
            version,
        } => json!(["r", table.0, key, version]),
        HistOp::Write {
            table,
            key,
            version,
        } => json!(["w", table.0, key, version]),
    }
}

impl TxnRecord {
    pub fn to_json_line(&self) -> String {
        let ops: Vec<Value> = self.ops.iter().map(op_json).collect();
        let mut v = json!({
            "id": self.id,
            "coord": self.coord,
            "attempt": self.attempt,
            "status": if self.aborted.is_some() { "aborted" } else { "committed" },
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "ops": ops,
        });
        if let Some(r) = &self.aborted {
            v["reason"] = json!(r);
        }
        v.to_string()
    }

    fn from_json(line_no: usize, v: &Value) -> Result<TxnRecord, String> {
        let bad = |what: &str| format!("history line {line_no}: {what}");
        let u = |k: &str| {
            v.get(k)
                .and_then(Value::as_u64)
                .ok_or_else(|| bad(&format!("field '{k}' missing or not a whole number")))
        };
        let aborted = match v.get("status").and_then(Value::as_str) {
            Some("committed") => None,
            Some("aborted") => Some(
                v.get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown")
                    .to_string(),
            ),
            other => {
                return Err(bad(&format!(
                    "status {other:?} is not \"committed\" or \"aborted\""
                )))
            }
        };
        let mut ops = Vec::new();
        for (i, op) in v
            .get("ops")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("field 'ops' missing or not a list"))?
            .iter()
            .enumerate()
        {
            let a = op
                .as_array()
                .filter(|a| a.len() == 4)
                .ok_or_else(|| bad(&format!("op {i} is not [kind, table, key, version]")))?;
            let n = |j: usize| {
                a[j].as_u64()
                    .ok_or_else(|| bad(&format!("op {i}: element {j} is not a whole number")))
            };
            let table = TableId(
                u16::try_from(n(1)?).map_err(|_| bad(&format!("op {i}: table id out of range")))?,
            );
            let (key, version) = (n(2)?, n(3)?);
            ops.push(match a[0].as_str() {
                Some("r") => HistOp::Read {
                    table,
                    key,
                    version,
                },
                Some("w") => HistOp::Write {
                    table,
                    key,
                    version,
                },
                other => {
                    return Err(bad(&format!(
                        "op {i}: kind {other:?} is not \"r\" or \"w\""
                    )))
                }
            });
        }
        Ok(TxnRecord {
            id: u("id")?,
            coord: u32::try_from(u("coord")?).map_err(|_| bad("coord out of range"))?,
            attempt: u32::try_from(u("attempt")?).map_err(|_| bad("attempt out of range"))?,
            aborted,
            start_ns: u("start_ns")?,
            end_ns: u("end_ns")?,
            ops,
        })
    }
}

/// Parses a history written by `--history` (one JSON object per line).
pub fn parse(text: &str) -> Result<Vec<TxnRecord>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .map_err(|e| format!("history line {}: not JSON: {e}", i + 1))?;
        out.push(TxnRecord::from_json(i + 1, &v)?);
    }
    Ok(out)
}

/// Which isolation level to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Serializable,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EdgeKind {
    Ww,
    Wr,
    Rw,
}

impl EdgeKind {
    fn name(self) -> &'static str {
        match self {
            EdgeKind::Ww => "ww",
            EdgeKind::Wr => "wr",
            EdgeKind::Rw => "rw",
        }
    }
}

/// Why `from` must precede `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    pub to: usize,
    pub kind: EdgeKind,
    pub table: TableId,
    pub key: u64,
    /// The version read or overwritten, and the one written after it.
    pub version: u64,
}

/// The checker's verdict.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub committed: usize,
    pub aborted: usize,
    pub edges: BTreeMap<&'static str, usize>,
    /// A dependency cycle, as (transaction index into the history, edge to the next).
    pub cycle: Option<Vec<(usize, Edge)>>,
    /// Committed reads of versions no committed transaction installed, and duplicate
    /// installs of one version.
    pub anomalies: Vec<String>,
    /// Committed transactions in a serial order (topological), when serializable.
    pub order: Vec<usize>,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.cycle.is_none() && self.anomalies.is_empty()
    }
}

/// The dependency graph of the committed transactions (plus the initial state).
struct Graph {
    /// Node `n` is `history[n]` for committed ones; `init` is the initial state.
    adj: Vec<Vec<Edge>>,
    init: usize,
}

fn build(h: &[TxnRecord], anomalies: &mut Vec<String>) -> Graph {
    let init = h.len();
    let mut adj: Vec<Vec<Edge>> = vec![Vec::new(); h.len() + 1];
    type Key = (TableId, u64);
    let mut writers: HashMap<Key, BTreeMap<u64, usize>> = HashMap::new();
    let mut readers: HashMap<Key, BTreeMap<u64, Vec<usize>>> = HashMap::new();
    for (t, r) in h.iter().enumerate().filter(|(_, r)| r.aborted.is_none()) {
        for op in &r.ops {
            match *op {
                HistOp::Write {
                    table,
                    key,
                    version,
                } => {
                    if let Some(prev) = writers.entry((table, key)).or_default().insert(version, t)
                    {
                        anomalies.push(format!(
                            "version {version} of t{}:{key} installed twice, by T{} and T{}",
                            table.0, h[prev].id, r.id
                        ));
                    }
                }
                HistOp::Read {
                    table,
                    key,
                    version,
                } => readers
                    .entry((table, key))
                    .or_default()
                    .entry(version)
                    .or_default()
                    .push(t),
            }
        }
    }
    let keys: std::collections::BTreeSet<Key> =
        writers.keys().chain(readers.keys()).copied().collect();
    for k in keys {
        let mut ws = writers.remove(&k).unwrap_or_default();
        ws.entry(INITIAL_VERSION).or_insert(init);
        let rs = readers.remove(&k).unwrap_or_default();
        let versions: Vec<(u64, usize)> = ws.iter().map(|(v, t)| (*v, *t)).collect();
        for w in versions.windows(2) {
            let ((v0, t0), (_, t1)) = (w[0], w[1]);
            if t0 != t1 {
                adj[t0].push(Edge {
                    to: t1,
                    kind: EdgeKind::Ww,
                    table: k.0,
                    key: k.1,
                    version: v0,
                });
            }
        }
        for (v, rdrs) in rs {
            let Some(&w) = ws.get(&v) else {
                for &r in &rdrs {
                    anomalies.push(format!(
                        "T{} read version {v} of t{}:{}, which no committed transaction installed",
                        h[r].id, k.0 .0, k.1
                    ));
                }
                continue;
            };
            let next = ws.range(v + 1..).next().map(|(_, t)| *t);
            for r in rdrs {
                if w != r {
                    adj[w].push(Edge {
                        to: r,
                        kind: EdgeKind::Wr,
                        table: k.0,
                        key: k.1,
                        version: v,
                    });
                }
                if let Some(n) = next {
                    if n != r {
                        adj[r].push(Edge {
                            to: n,
                            kind: EdgeKind::Rw,
                            table: k.0,
                            key: k.1,
                            version: v,
                        });
                    }
                }
            }
        }
    }
    Graph { adj, init }
}

/// Finds a cycle with an iterative depth-first search, or returns a topological order.
fn find_cycle(g: &Graph) -> Result<Vec<usize>, Vec<(usize, Edge)>> {
    const WHITE: u8 = 0;
    const GREY: u8 = 1;
    const BLACK: u8 = 2;
    let n = g.adj.len();
    let mut color = vec![WHITE; n];
    let mut post = Vec::with_capacity(n);
    // Stack of (node, next edge index); the path is the grey nodes on it.
    let mut stack: Vec<(usize, usize)> = Vec::new();
    for root in std::iter::once(g.init).chain(0..n) {
        if color[root] != WHITE {
            continue;
        }
        color[root] = GREY;
        stack.push((root, 0));
        while let Some(&mut (u, ref mut i)) = stack.last_mut() {
            if *i < g.adj[u].len() {
                let e = g.adj[u][*i];
                *i += 1;
                match color[e.to] {
                    WHITE => {
                        color[e.to] = GREY;
                        stack.push((e.to, 0));
                    }
                    GREY => {
                        // Back edge: the cycle is the stack from e.to up to u, then e.
                        let start = stack
                            .iter()
                            .position(|(x, _)| *x == e.to)
                            .expect("grey nodes are on the stack");
                        let mut cycle = Vec::new();
                        for w in stack[start..].windows(2) {
                            let (a, ai) = w[0];
                            cycle.push((a, g.adj[a][ai - 1]));
                        }
                        cycle.push((u, e));
                        return Err(cycle);
                    }
                    _ => {}
                }
            } else {
                color[u] = BLACK;
                post.push(u);
                stack.pop();
            }
        }
    }
    post.reverse();
    Ok(post)
}

/// Checks a history.
pub fn check(h: &[TxnRecord], mode: Mode) -> Verdict {
    let Mode::Serializable = mode;
    let mut anomalies = Vec::new();
    let g = build(h, &mut anomalies);
    let mut edges = BTreeMap::new();
    for e in g.adj.iter().flatten() {
        *edges.entry(e.kind.name()).or_insert(0) += 1;
    }
    let (cycle, order) = match find_cycle(&g) {
        Ok(order) => (None, order.into_iter().filter(|&t| t != g.init).collect()),
        Err(c) => (Some(c), Vec::new()),
    };
    Verdict {
        committed: h.iter().filter(|r| r.aborted.is_none()).count(),
        aborted: h.iter().filter(|r| r.aborted.is_some()).count(),
        edges,
        cycle,
        anomalies,
        order,
    }
}

/// The verdict as people read it: the cycle transaction by transaction.
pub fn render(h: &[TxnRecord], v: &Verdict) -> String {
    let mut o = String::new();
    let edges: Vec<String> = v.edges.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let _ = writeln!(
        o,
        "{} committed and {} aborted transactions; dependency edges: {}",
        v.committed,
        v.aborted,
        if edges.is_empty() {
            "none".into()
        } else {
            edges.join(", ")
        }
    );
    for a in &v.anomalies {
        let _ = writeln!(o, "anomaly: {a}");
    }
    let name = |t: usize| {
        if t == h.len() {
            "T(initial state)".to_string()
        } else if h[t].attempt > 1 {
            format!("T{}#{}", h[t].id, h[t].attempt)
        } else {
            format!("T{}", h[t].id)
        }
    };
    if let Some(c) = &v.cycle {
        let _ = writeln!(
            o,
            "NOT serializable: a dependency cycle of {} transactions:",
            c.len()
        );
        for (t, e) in c {
            let ops = if *t == h.len() {
                "loaded every record at version 1".to_string()
            } else {
                h[*t]
                    .ops
                    .iter()
                    .map(|op| match op {
                        HistOp::Read {
                            table,
                            key,
                            version,
                        } => format!("r t{}:{key}@{version}", table.0),
                        HistOp::Write {
                            table,
                            key,
                            version,
                        } => format!("w t{}:{key}@{version}", table.0),
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let why = match e.kind {
                EdgeKind::Ww => format!(
                    "installed t{}:{} v{} that {} overwrote",
                    e.table.0,
                    e.key,
                    e.version,
                    name(e.to)
                ),
                EdgeKind::Wr => format!(
                    "installed t{}:{} v{} that {} read",
                    e.table.0,
                    e.key,
                    e.version,
                    name(e.to)
                ),
                EdgeKind::Rw => format!(
                    "read t{}:{} v{} that {} overwrote",
                    e.table.0,
                    e.key,
                    e.version,
                    name(e.to)
                ),
            };
            let _ = writeln!(
                o,
                "  {} [{}]\n    -{}-> because it {}",
                name(*t),
                ops,
                e.kind.name(),
                why
            );
        }
    } else if v.anomalies.is_empty() {
        let _ = writeln!(o, "serializable");
    } else {
        let _ = writeln!(o, "NOT serializable: anomalies above");
    }
    o
}

/// The history as an Elle/adya rw-register history (JSON lines) and the engine's order
/// file (`--transaction-order`). Keys are `table << 40 | key`; a value is the version
/// installed; reads of the loaded version 1 are the initial `nil`. Each attempt is an
/// `invoke` at its start and an `ok`/`fail` at its end on its co-routine's process. The
/// order lists committed transactions in an order consistent with every record's version
/// order (a topological order of the ww edges).
pub fn to_adya(h: &[TxnRecord]) -> (String, String) {
    let key = |t: TableId, k: u64| ((t.0 as u64) << 40) | k;
    let value = |v: u64| {
        if v == INITIAL_VERSION {
            Value::Null
        } else {
            json!(v)
        }
    };
    let mops = |r: &TxnRecord, completed: bool| -> Value {
        Value::Array(
            r.ops
                .iter()
                .map(|op| match *op {
                    HistOp::Read {
                        table,
                        key: k,
                        version,
                    } => {
                        json!([
                            "r",
                            key(table, k),
                            if completed {
                                value(version)
                            } else {
                                Value::Null
                            }
                        ])
                    }
                    HistOp::Write {
                        table,
                        key: k,
                        version,
                    } => json!(["w", key(table, k), version]),
                })
                .collect(),
        )
    };
    // Events in time order: invocations before completions at equal times.
    let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(h.len() * 2);
    for (i, r) in h.iter().enumerate() {
        events.push((r.start_ns, 0, i));
        events.push((r.end_ns, 1, i));
    }
    events.sort_unstable();
    let mut lines = String::new();
    let mut ok_index: HashMap<usize, usize> = HashMap::new();
    for (index, (_, phase, i)) in events.into_iter().enumerate() {
        let r = &h[i];
        let kind = match (phase, &r.aborted) {
            (0, _) => "invoke",
            (_, None) => "ok",
            (_, Some(_)) => "fail",
        };
        if kind == "ok" {
            ok_index.insert(i, index);
        }
        let v = json!({"index": index, "type": kind, "process": r.coord, "f": "txn", "value": mops(r, phase == 1)});
        lines.push_str(&v.to_string());
        lines.push('\n');
    }
    // Committed transactions ordered by the ww edges (Kahn's algorithm, ties by end time).
    let mut anomalies = Vec::new();
    let g = build(h, &mut anomalies);
    let n = h.len();
    let mut indeg = vec![0usize; n + 1];
    let ww = |u: usize| {
        g.adj[u]
            .iter()
            .filter(|e| e.kind == EdgeKind::Ww)
            .map(|e| e.to)
    };
    for u in 0..=n {
        for t in ww(u) {
            indeg[t] += 1;
        }
    }
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize)>> = (0..n)
        .filter(|&t| h[t].aborted.is_none() && indeg[t] == 0)
        .map(|t| std::cmp::Reverse((h[t].end_ns, t)))
        .collect();
    for t in ww(g.init) {
        indeg[t] -= 1;
        if indeg[t] == 0 {
            ready.push(std::cmp::Reverse((h[t].end_ns, t)));
        }
    }
    let mut order = serde_json::Map::new();
    let mut pos = 0i64;
    let mut placed = vec![false; n];
    while let Some(std::cmp::Reverse((_, t))) = ready.pop() {
        if std::mem::replace(&mut placed[t], true) {
            continue;
        }
        order.insert(ok_index[&t].to_string(), json!(pos));
        pos += 1;
        for u in ww(t) {
            indeg[u] -= 1;
            if indeg[u] == 0 {
                ready.push(std::cmp::Reverse((h[u].end_ns, u)));
            }
        }
    }
    // A ww cycle (a broken engine) leaves some unplaced: append them by end time.
    let mut rest: Vec<usize> = (0..n)
        .filter(|&t| h[t].aborted.is_none() && !placed[t])
        .collect();
    rest.sort_by_key(|&t| (h[t].end_ns, t));
    for t in rest {
        order.insert(ok_index[&t].to_string(), json!(pos));
        pos += 1;
    }
    (lines, Value::Object(order).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64, ops: &[HistOp]) -> TxnRecord {
        TxnRecord {
            id,
            coord: id as u32,
            attempt: 1,
            aborted: None,
            start_ns: id * 10,
            end_ns: id * 10 + 5,
            ops: ops.to_vec(),
        }
    }
    const T: TableId = TableId(0);
    fn r(key: u64, version: u64) -> HistOp {
        HistOp::Read {
            table: T,
            key,
            version,
        }
    }
    fn w(key: u64, version: u64) -> HistOp {
        HistOp::Write {
            table: T,
            key,
            version,
        }
    }

    #[test]
    fn checker_accepts_a_serial_history_and_orders_it() {
        let h = vec![
            rec(1, &[r(1, 1), w(1, 2)]),
            rec(2, &[r(1, 2), w(1, 3), r(2, 1)]),
            rec(3, &[r(2, 1)]),
        ];
        let v = check(&h, Mode::Serializable);
        assert!(v.ok(), "{}", render(&h, &v));
        assert_eq!(
            v.order.iter().position(|&t| t == 0) < v.order.iter().position(|&t| t == 1),
            true
        );
        assert!(render(&h, &v).contains("serializable"));
    }

    #[test]
    fn checker_finds_write_skew_and_prints_the_cycle() {
        // Each reads both keys at version 1 and writes a different one: rw edges both ways.
        let h = vec![
            rec(1, &[r(1, 1), r(2, 1), w(1, 2)]),
            rec(2, &[r(1, 1), r(2, 1), w(2, 2)]),
        ];
        let v = check(&h, Mode::Serializable);
        let c = v.cycle.as_ref().expect("write skew is a cycle");
        assert_eq!(c.len(), 2);
        assert!(c.iter().all(|(_, e)| e.kind == EdgeKind::Rw));
        let text = render(&h, &v);
        assert!(
            text.contains("NOT serializable")
                && text.contains("-rw->")
                && text.contains("T1")
                && text.contains("T2"),
            "{text}"
        );
    }

    #[test]
    fn checker_finds_a_lost_update_and_reads_of_uninstalled_versions() {
        let lost = vec![rec(1, &[r(5, 1), w(5, 2)]), rec(2, &[r(5, 1), w(5, 3)])];
        assert!(check(&lost, Mode::Serializable).cycle.is_some());
        let dirty = vec![rec(1, &[r(5, 4)])];
        let v = check(&dirty, Mode::Serializable);
        assert!(!v.ok() && v.anomalies[0].contains("no committed transaction installed"));
        let twice = vec![rec(1, &[w(5, 2)]), rec(2, &[w(5, 2)])];
        assert!(check(&twice, Mode::Serializable).anomalies[0].contains("installed twice"));
    }

    #[test]
    fn aborted_transactions_add_no_edges_and_history_lines_round_trip() {
        let mut a = rec(3, &[r(1, 1), w(1, 2)]);
        a.aborted = Some("lock_busy".into());
        let h = vec![rec(1, &[r(1, 1), w(1, 2)]), a];
        let v = check(&h, Mode::Serializable);
        assert!(v.ok(), "{}", render(&h, &v));
        let text: String = h.iter().map(|r| r.to_json_line() + "\n").collect();
        assert_eq!(parse(&text).unwrap(), h);
        let e = parse("{\"id\":1}\n").unwrap_err();
        assert!(e.contains("line 1") && e.contains("status"), "{e}");
        assert!(parse("not json").unwrap_err().contains("line 1: not JSON"));
    }

    #[test]
    fn adya_export_pairs_invocations_and_orders_writes_by_version() {
        let h = vec![rec(1, &[r(1, 1), w(1, 2)]), rec(2, &[r(1, 2), w(1, 3)])];
        let (lines, order) = to_adya(&h);
        let ops: Vec<Value> = lines
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(ops.len(), 4);
        assert_eq!(ops[0]["type"], "invoke");
        assert_eq!(ops[1]["type"], "ok");
        assert_eq!(ops[1]["value"][0], json!(["r", 1, null]));
        assert_eq!(ops[3]["value"][0], json!(["r", 1, 2]));
        let order: Value = serde_json::from_str(&order).unwrap();
        assert_eq!(order["1"], 0);
        assert_eq!(order["3"], 1);
    }
}
