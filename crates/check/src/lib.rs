//! The independent history checker: a dependency-graph checker of serializability and of
//! snapshot isolation fed by the values transactions actually read, and an export to the
//! rw-register format of Elle-style checkers (the `adya` crate). It reads histories in the
//! format of `atoll-history` and knows no protocol, workload, transaction or fabric crate.
//!
//! Every payload carries the tag of the attempt that wrote it and a check word (see
//! `atoll_storage::layout`, whose words `atoll_history` holds). A read records the version word it saw *and* the tag and check
//! of the payload it returned; a write records the version it installed. The checker takes
//! the writer of every read from the tag (not from the version word), and reports:
//! - a read whose payload failed its check: torn (words of several writes) or another
//!   record's;
//! - a read of a value written by an aborted attempt (G1a), or by no recorded attempt;
//! - a read of a value its writer did not install at the version word read beside it (a
//!   version word and a payload from different writes; an intermediate value: G1b);
//! - a version installed twice (a lost update), a gap in a record's versions (a write no
//!   committed transaction made, as an aborted write left visible), an update claiming the
//!   initial version;
//! - a dependency cycle. Edges between committed transactions, from each record's version
//!   order: ww (writer of v → writer of the next version), wr (writer of the value read →
//!   reader), rw (reader → writer of the next version). A scan reports every key it met in
//!   its range, live or deleted (deleted keys keep their index entries), with its version:
//!   each is a read of that version (absent ones of the deleter's); a key it did not meet
//!   had no record yet, so the scan precedes the insert that created it (phantoms).
//!
//! The history is conflict-serializable iff there is no anomaly and the graph is acyclic.
//!
//! # Attempts lost in flight
//!
//! A run whose coordinator crashed, or which stopped around attempts still running, records
//! each such attempt as `lost` (format version 5): its tag, coordinator and start, nothing
//! of what it did. Its writes may be visible (a commit cut off half-way); the checker takes
//! every committed read of a lost attempt's tag as that attempt's write ([`admit_lost`]),
//! and a record's gap of at most as many versions as there are lost attempts as theirs
//! (reported, not an anomaly). A value of any other unknown writer, or a longer gap, is
//! still an anomaly; only the lost attempts' own reads go unchecked.
//! The loaded state is version 1 of every loaded record, written by a virtual initial
//! transaction with tag `LOADER_TAG`.
//!
//! # Snapshot isolation ([`Mode::Snapshot`])
//!
//! A snapshot-isolation protocol records each attempt's snapshot (the timestamp it read at)
//! and commit timestamp (format version 3; a read-only attempt may commit without one). The
//! same graph is built and every anomaly above that is not a cycle is reported; then, with
//! the initial state committed at [`LOADER_COMMIT`]:
//! - every committed transaction has a snapshot, and one that wrote has a commit timestamp
//!   greater than it (else "not an SI history");
//! - each read, and each key a scan met, of a version another transaction installed saw
//!   the newest version committed at or before the reader's snapshot: its writer committed
//!   at or before the snapshot (else "a read from the future"), and no other writer of the
//!   record committed after that writer and at or before the snapshot (else "a stale read",
//!   read skew). A key in a scan's range the scan did not meet was first inserted after the
//!   snapshot (else "a missed insert");
//! - first-committer-wins: no two committed writers of a record ran concurrently, their
//!   intervals (snapshot, commit] overlapping (else "a lost update");
//! - each record's version order agrees with its writers' commit order;
//! - no cycle of ww and wr edges (G0: ww only; G1c). rw edges are what snapshot isolation
//!   allows (write skew: a cycle through two adjacent rw edges), so they are counted but
//!   take no part in the cycle search.
//!
//! These timestamp checks are stricter than a black-box SI checker (adya's
//! `snapshot-isolation`, which infers what it can from values and the version order): a
//! stale read, a read from the future or a blind lost update may leave no cycle at all.
//! Which protocol a history came from is in its header line ([`Header::isolation`]).
//!
//! A history of vector snapshots (NAM-DB's timestamp vector, format version 4: `vector`
//! and `slot` per attempt) is checked by visibility instead of by scalar order: a version
//! committed at `(slot s, timestamp t)` is in snapshot `V` iff `t <= V[s]`. The same
//! anomalies are named from each record's version order, plus "an inconsistent snapshot":
//! a reader whose vector does not cover, slot by slot, that of a transaction it read from
//! (a torn read of the vector can see a transaction without what it saw), and "a long
//! fork": two snapshots each seeing a commit the other does not (every snapshot must lie
//! on one chain of the history's commits, as one order of time would place them).
//!
//! Versions are key versions ([`atoll_history::key_version`]): a version word's bits
//! above them count the incarnations of the record slot, which a reused slot raises, so a
//! key's versions run on consecutively across the slots it lives in.

use atoll_history::{
    key_version, kind_name, HistOp, Isolation, ScanObs, TableId, WriteKind, INITIAL_VERSION,
    LOADER_TAG, VERSION_ABSENT,
};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

/// The format the checker reads, re-exported so that a caller needs this crate alone.
pub use atoll_history::{
    parse, parse_reader, parse_with_header, parse_with_header_bounded, to_text, Header, TxnRecord,
};

/// Anomalies listed in a verdict before the rest are only counted.
pub const ANOMALIES_LISTED_MAX: usize = 20;

/// Which isolation level to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Conflict serializability: no anomaly, and no cycle of ww, wr and rw edges.
    Serializable,
    /// Snapshot isolation, from each attempt's snapshot and commit timestamps: no anomaly
    /// (the serializable mode's, and the timestamp checks of the module docs), and no cycle
    /// of ww and wr edges; rw edges (write skew) are allowed.
    Snapshot,
    /// Parallel snapshot isolation (Sovran et al., SOSP 2011): [`Mode::Snapshot`]'s checks
    /// but for the long fork, which it allows: vector snapshots need not lie on one chain
    /// (Tell's several commit managers, each seeing its own commits before the others').
    ParallelSnapshot,
}

impl Mode {
    /// How a verdict names the level.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Serializable => "serializable",
            Mode::Snapshot => "snapshot isolation",
            Mode::ParallelSnapshot => "parallel snapshot isolation",
        }
    }

    /// The level a `--isolation` text names (`serializable`, `snapshot`,
    /// `parallel-snapshot`).
    pub fn parse(s: &str) -> Option<Mode> {
        Self::ALL.into_iter().find(|m| m.flag() == s)
    }

    pub const ALL: [Mode; 3] = [Mode::Serializable, Mode::Snapshot, Mode::ParallelSnapshot];

    /// The text naming it on a command line.
    pub fn flag(self) -> &'static str {
        match self {
            Mode::Serializable => "serializable",
            Mode::Snapshot => "snapshot",
            Mode::ParallelSnapshot => "parallel-snapshot",
        }
    }

    /// Whether it checks reads against snapshots (every level but serializability).
    pub fn snapshots(self) -> bool {
        self != Mode::Serializable
    }
}

impl From<Isolation> for Mode {
    /// The mode that checks what a protocol guarantees.
    fn from(i: Isolation) -> Mode {
        match i {
            Isolation::Serializable => Mode::Serializable,
            Isolation::Snapshot => Mode::Snapshot,
        }
    }
}

/// Whether any attempt recorded a snapshot timestamp: a history without one (a serializable
/// protocol's, or a version-2 file) cannot be checked as snapshot isolation.
pub fn has_snapshots(h: &[TxnRecord]) -> bool {
    h.iter()
        .any(|r| r.snapshot.is_some() || r.snapshot_vector.is_some())
}

/// The commit timestamp of the initial state: every loaded record is visible to every
/// snapshot.
pub const LOADER_COMMIT: u64 = 0;

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
    /// The version read or overwritten (or, for a phantom, the version that inserted or
    /// deleted the key).
    pub version: u64,
}

/// The checker's verdict.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// The level checked.
    pub mode: Mode,
    pub committed: usize,
    pub aborted: usize,
    /// Attempts lost in flight ([`TxnRecord::lost`]), not counted as committed or aborted.
    pub lost: usize,
    /// Those of them committed transactions read from, taken as committed ([`admit_lost`]).
    pub lost_read_from: usize,
    /// Versions missing from records' orders that lost attempts may have installed unseen.
    pub lost_gap_versions: usize,
    pub edges: BTreeMap<&'static str, usize>,
    /// A dependency cycle, as (transaction index into the history, edge to the next); under
    /// [`Mode::Snapshot`] one of ww and wr edges only (G0, G1c).
    pub cycle: Option<Vec<(usize, Edge)>>,
    /// The first anomalies found (see the module docs), at most [`ANOMALIES_LISTED_MAX`].
    pub anomalies: Vec<String>,
    /// Every anomaly found.
    pub anomalies_total: usize,
    /// Committed transactions in an order every edge checked agrees with (topological),
    /// when there is no cycle: a serial order under [`Mode::Serializable`].
    pub order: Vec<usize>,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.cycle.is_none() && self.anomalies_total == 0
    }
}

/// The dependency graph of the committed transactions (plus the initial state).
struct Graph {
    /// Node `n` is `history[n]` for committed ones; `init` is the initial state.
    adj: Vec<Vec<Edge>>,
    init: usize,
}

#[derive(Default)]
struct Anomalies {
    listed: Vec<String>,
    total: usize,
    /// Versions missing from a record's order that attempts lost in flight may have
    /// installed (no committed reader saw them): not anomalies in a history with lost
    /// attempts, as long as a record's gap is no longer than the lost attempts are many.
    lost_gap_versions: std::collections::HashSet<(Key, u64)>,
}

impl Anomalies {
    fn push(&mut self, f: impl FnOnce() -> String) {
        self.total += 1;
        if self.listed.len() < ANOMALIES_LISTED_MAX {
            self.listed.push(f());
        }
    }
}

type Key = (TableId, u64);

/// Who installed each version of a record, and how.
type Versions = BTreeMap<u64, (usize, WriteKind)>;

/// How a committed transaction observed a version of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    Read,
    /// A scan met the record (live, or deleted at that version).
    Scanned,
    /// A scan's range held the key but the scan did not meet it: the version is the key's
    /// first, which the scan must not have seen yet.
    ScannedPast,
}

/// One observation of a committed transaction whose writer the checker established, kept
/// for the snapshot checks (which need the reader's snapshot and the writer's commit).
#[derive(Clone, Copy, Debug)]
struct Seen {
    reader: usize,
    key: Key,
    /// The transaction that installed `version` (`init` for the loaded state).
    writer: usize,
    version: u64,
    how: How,
}

fn name_of(h: &[TxnRecord], t: usize) -> String {
    if t == h.len() {
        "T(initial state)".to_string()
    } else if h[t].attempt > 1 {
        format!("T{}#{}", h[t].id, h[t].attempt)
    } else {
        format!("T{}", h[t].id)
    }
}

impl Seen {
    fn of(reader: usize, key: Key, writer: usize, version: u64, how: How) -> Seen {
        Seen {
            reader,
            key,
            writer,
            version,
            how,
        }
    }
}

/// The dependency graph, and each record's versions with their writers. With `seen`, also
/// every observation whose writer it established (the snapshot checks need them; the
/// serializable check does not keep them).
fn build(
    h: &[TxnRecord],
    anomalies: &mut Anomalies,
    mut seen: Option<&mut Vec<Seen>>,
) -> (Graph, BTreeMap<Key, Versions>) {
    let init = h.len();
    let mut adj: Vec<Vec<Edge>> = vec![Vec::new(); h.len() + 1];
    let committed = |r: &TxnRecord| r.aborted.is_none();
    let by_tag: HashMap<u64, usize> = h.iter().enumerate().map(|(i, r)| (r.tag, i)).collect();
    // Versions installed per record, ordered by key so scans can find their ranges, and
    // what each committed attempt installed per record.
    let (mut writers, installed) = installed_versions(h, anomalies);
    version_order(h, &mut writers, &mut adj, anomalies);
    let next_writer = |k: Key, v: u64| -> Option<usize> {
        writers
            .get(&k)
            .and_then(|vs| vs.range(v + 1..).next().map(|(_, (t, _))| *t))
    };
    // wr and rw edges of a committed read of version `v` of `k`, written by `w`.
    let read_edges = |adj: &mut Vec<Vec<Edge>>, r: usize, w: usize, k: Key, v: u64| {
        if w != r {
            adj[w].push(Edge {
                to: r,
                kind: EdgeKind::Wr,
                table: k.0,
                key: k.1,
                version: v,
            });
        }
        if let Some(n) = next_writer(k, v) {
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
    };
    for (t, rec) in h.iter().enumerate().filter(|(_, r)| committed(r)) {
        for op in &rec.ops {
            match op {
                HistOp::Read {
                    table,
                    key,
                    version,
                    tag,
                    intact,
                } => {
                    let version = &key_version(*version);
                    let k = (*table, *key);
                    if !intact {
                        let (who, r) = (name_of(h, t), format!("t{}:{key}", table.0));
                        anomalies.push(|| {
                            format!("{who} read {r} at version {version}: a torn payload, or another record's (its check word does not match; tag {tag})")
                        });
                        continue;
                    }
                    let Some((w, wv)) =
                        read_writer(h, &by_tag, &installed, t, k, *version, *tag, anomalies)
                    else {
                        continue;
                    };
                    if let Some(seen) = seen.as_deref_mut() {
                        seen.push(Seen::of(t, k, w, wv, How::Read));
                    }
                    read_edges(&mut adj, t, w, k, wv);
                }
                HistOp::Scan(s) => {
                    // Every key the scan met, live or deleted, is a read of that version.
                    for &(key, word) in &s.seen {
                        let (k, v) = ((s.table, key), key_version(word));
                        let absent = word & VERSION_ABSENT != 0;
                        match writers.get(&k).and_then(|vs| vs.get(&v)) {
                            Some(&(w, kind)) if absent == (kind == WriteKind::Delete) => {
                                if let Some(seen) = seen.as_deref_mut() {
                                    seen.push(Seen::of(t, k, w, v, How::Scanned));
                                }
                                read_edges(&mut adj, t, w, k, v)
                            }
                            // Installed by an attempt lost in flight, unseen otherwise.
                            _ if anomalies.lost_gap_versions.contains(&(k, v)) => {}
                            _ => anomalies.push(|| {
                                format!(
                                    "{} scanned t{}:{key} {} at version {v}, which no committed transaction {}",
                                    name_of(h, t),
                                    s.table.0,
                                    if absent { "absent" } else { "present" },
                                    if absent { "deleted" } else { "installed" },
                                )
                            }),
                        }
                    }
                    phantom_edges(
                        &mut adj,
                        &writers,
                        (h, t),
                        s,
                        anomalies,
                        seen.as_deref_mut(),
                    );
                }
                HistOp::Write { .. } => {}
            }
        }
    }
    (Graph { adj, init }, writers)
}

/// The versions committed attempts installed, per record, with their writers; and what
/// each committed attempt installed per record. A version installed twice is a lost update.
fn installed_versions(
    h: &[TxnRecord],
    anomalies: &mut Anomalies,
) -> (BTreeMap<Key, Versions>, HashMap<(usize, Key), u64>) {
    let committed = |r: &TxnRecord| r.aborted.is_none();
    let mut writers: BTreeMap<Key, Versions> = BTreeMap::new();
    // What each committed attempt installed per record: tag + record -> version.
    let mut installed: HashMap<(usize, Key), u64> = HashMap::new();
    for (t, r) in h.iter().enumerate().filter(|(_, r)| committed(r)) {
        for op in &r.ops {
            let HistOp::Write {
                table,
                key,
                version,
                kind,
            } = *op
            else {
                continue;
            };
            let version = key_version(version);
            if kind != WriteKind::Insert && version <= INITIAL_VERSION {
                anomalies.push(|| {
                    format!(
                        "{} committed a write of t{}:{key} at version {version}, which only a load or an insert installs",
                        name_of(h, t),
                        table.0
                    )
                });
            }
            installed.insert((t, (table, key)), version);
            if let Some((prev, _)) = writers
                .entry((table, key))
                .or_default()
                .insert(version, (t, kind))
            {
                anomalies.push(|| {
                    format!(
                        "version {version} of t{}:{key} installed twice, by {} and {} (a lost update)",
                        table.0,
                        name_of(h, prev),
                        name_of(h, t)
                    )
                });
            }
        }
    }
    (writers, installed)
}

/// Completes each record's version order (every record read or scanned is in it; a loaded
/// record's first version is the initial state's unless an insert installed it), reports
/// gaps, and adds the ww edges.
fn version_order(
    h: &[TxnRecord],
    writers: &mut BTreeMap<Key, Versions>,
    adj: &mut [Vec<Edge>],
    anomalies: &mut Anomalies,
) {
    let init = h.len();
    let committed = |r: &TxnRecord| r.aborted.is_none();
    let lost_total = h.iter().filter(|r| r.lost).count() as u64;
    // Every record read, written or scanned exists in the map; a loaded record's first
    // version belongs to the initial state unless an insert installed it.
    let touch = |k: Key, writers: &mut BTreeMap<Key, Versions>| {
        writers.entry(k).or_default();
    };
    for r in h.iter().filter(|r| committed(r)) {
        for op in &r.ops {
            match op {
                HistOp::Read { table, key, .. } => touch((*table, *key), writers),
                HistOp::Scan(s) => {
                    for &(k, _) in &s.seen {
                        touch((s.table, k), writers);
                    }
                }
                HistOp::Write { .. } => {}
            }
        }
    }
    for (k, vs) in writers.iter_mut() {
        match vs.first_key_value() {
            Some((&v, &(_, WriteKind::Insert))) if v == INITIAL_VERSION => {}
            _ => {
                vs.entry(INITIAL_VERSION)
                    .or_insert((init, WriteKind::Insert));
            }
        }
        // Versions are consecutive: a missing one was installed by no committed
        // transaction (an aborted attempt's write left visible, or a lost install).
        let vv: Vec<(u64, usize)> = vs.iter().map(|(v, (t, _))| (*v, *t)).collect();
        for w in vv.windows(2) {
            let ((v0, t0), (v1, t1)) = (w[0], w[1]);
            // An attempt writes a record once, so a gap of `n` versions needs `n` distinct
            // lost attempts.
            if v1 != v0 + 1 && v1 - v0 - 1 <= lost_total {
                anomalies
                    .lost_gap_versions
                    .extend((v0 + 1..v1).map(|v| (*k, v)));
            } else if v1 != v0 + 1 {
                anomalies.push(|| {
                    format!(
                        "versions {}..={} of t{}:{} were installed by no committed transaction (between {} and {})",
                        v0 + 1,
                        v1 - 1,
                        k.0 .0,
                        k.1,
                        name_of(h, t0),
                        name_of(h, t1)
                    )
                });
            }
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
    }
}

/// The writer of what committed attempt `t` read of `k` (tag `tag`, version word
/// `version`) and the version it installed there; `None`, with the anomaly, when the
/// value's writer aborted, is unknown, never wrote `k`, or installed another version.
#[allow(clippy::too_many_arguments)]
fn read_writer(
    h: &[TxnRecord],
    by_tag: &HashMap<u64, usize>,
    installed: &HashMap<(usize, Key), u64>,
    t: usize,
    k: Key,
    version: u64,
    tag: u64,
    anomalies: &mut Anomalies,
) -> Option<(usize, u64)> {
    let init = h.len();
    let (table, key) = k;
    let (who, r) = (name_of(h, t), format!("t{}:{key}", table.0));
    let version = &version;
    let tag = &tag;
    let (w, wv) = if *tag == LOADER_TAG {
        (init, INITIAL_VERSION)
    } else {
        let Some(&w) = by_tag.get(tag) else {
            anomalies.push(|| {
                format!("{who} read {r} holding tag {tag}, which no recorded attempt had")
            });
            return None;
        };
        if let Some(reason) = &h[w].aborted {
            anomalies.push(|| {
                format!(
                    "{who} read {r} written by {}, an attempt that aborted ({reason}): an aborted read (G1a)",
                    name_of(h, w)
                )
            });
            return None;
        }
        let Some(&wv) = installed.get(&(w, k)) else {
            anomalies.push(|| {
                format!(
                    "{who} read {r} holding {}'s tag, but {} never wrote {r}: another record's payload",
                    name_of(h, w),
                    name_of(h, w)
                )
            });
            return None;
        };
        (w, wv)
    };
    if wv != *version {
        anomalies.push(|| {
            format!(
                "{who} read {r} with version word {version} beside a payload {} installed as version {wv}: a version and a value from different writes (G1b)",
                name_of(h, w)
            )
        });
        return None;
    }
    Some((w, wv))
}

/// Edges for keys in a scan's range that it did not meet at all: the key had no record
/// there yet, so the scan precedes the insert that first created it (a phantom it must
/// not see). A loaded key it did not meet is an anomaly: deleted keys stay in the index.
fn phantom_edges(
    adj: &mut [Vec<Edge>],
    writers: &BTreeMap<Key, Versions>,
    (h, t): (&[TxnRecord], usize),
    s: &ScanObs,
    anomalies: &mut Anomalies,
    mut seen: Option<&mut Vec<Seen>>,
) {
    let init = adj.len() - 1;
    // The keys the scan met, sorted once: each key written in its range is then looked up
    // in log time (a scan of millions of keys stays n log n).
    let mut met: Vec<u64> = s.seen.iter().map(|&(k, _)| k).collect();
    met.sort_unstable();
    for (&(table, key), vs) in writers.range((s.table, s.lo)..=(s.table, s.hi)) {
        if met.binary_search(&key).is_ok() {
            continue;
        }
        match vs.first_key_value() {
            Some((&v, &(i, WriteKind::Insert))) if i != init => {
                if let Some(seen) = seen.as_deref_mut() {
                    seen.push(Seen {
                        reader: t,
                        key: (table, key),
                        writer: i,
                        version: v,
                        how: How::ScannedPast,
                    });
                }
                if i != t {
                    adj[t].push(Edge {
                        to: i,
                        kind: EdgeKind::Rw,
                        table,
                        key,
                        version: v,
                    });
                }
            }
            _ => anomalies.push(|| {
                format!(
                    "{} scanned t{}:[{}..={}] and did not meet t{}:{key}, which existed from the start",
                    name_of(h, t),
                    s.table.0,
                    s.lo,
                    s.hi,
                    s.table.0
                )
            }),
        }
    }
}

/// The snapshot-isolation checks that need timestamps (see the module docs): each committed
/// transaction's own timestamps, each record's writers (commit order against version order,
/// first-committer-wins) and each observation (the newest version committed at or before
/// the reader's snapshot).
fn snapshot_checks(
    h: &[TxnRecord],
    writers: &BTreeMap<Key, Versions>,
    seen: &[Seen],
    anomalies: &mut Anomalies,
) {
    let init = h.len();
    let rec = |t: Key| format!("t{}:{}", t.0 .0, t.1);
    snapshot_timestamps(h, anomalies);
    let commit_of = |t: usize| {
        if t == init {
            Some(LOADER_COMMIT)
        } else {
            h[t].commit
        }
    };
    // Each record's versions whose writer has a commit timestamp, in commit order (ties by
    // version): (commit, version, writer).
    let mut by_commit: HashMap<Key, Vec<(u64, u64, usize)>> = HashMap::new();
    for (&k, vs) in writers {
        let mut list: Vec<(u64, u64, usize)> = vs
            .iter()
            .filter_map(|(&v, &(t, _))| commit_of(t).map(|c| (c, v, t)))
            .collect();
        // Version order agrees with commit order: a later version committed later (equal
        // commits are two concurrent writers, which first-committer-wins reports).
        for w in list.windows(2) {
            let ((c0, v0, t0), (c1, v1, t1)) = (w[0], w[1]);
            if c0 > c1 {
                anomalies.push(|| {
                    format!(
                        "{} v{v0} of {} committed at {c0}, after v{v1} by {} at {c1}: version order disagrees with commit order",
                        name_of(h, t0),
                        rec(k),
                        name_of(h, t1)
                    )
                });
            }
        }
        list.sort_unstable();
        // First committer wins: in commit order, each writer took its snapshot at or after
        // the previous writer's commit (their intervals (snapshot, commit] do not overlap).
        // Checking neighbours suffices: a writer overlapping an earlier one overlaps the
        // one just before it too.
        let mut prev: Option<(u64, u64, u64, usize)> = None;
        for &(c1, v1, t1) in &list {
            let Some(s1) = (t1 != init).then(|| h[t1].snapshot).flatten() else {
                continue;
            };
            if let Some((s0, c0, v0, t0)) = prev {
                if s0 < c1 && s1 < c0 {
                    anomalies.push(|| {
                        format!(
                            "{} (snapshot {s0}, commit {c0}) and {} (snapshot {s1}, commit {c1}) both wrote {} (v{v0}, v{v1}) concurrently: a lost update (first-committer-wins broken)",
                            name_of(h, t0),
                            name_of(h, t1),
                            rec(k)
                        )
                    });
                }
            }
            prev = Some((s1, c1, v1, t1));
        }
        by_commit.insert(k, list);
    }
    // Each observation is of the newest version committed at or before the snapshot.
    for o in seen {
        let (r, w) = (o.reader, o.writer);
        if r == w {
            continue; // its own write
        }
        // Missing timestamps were reported above.
        let (Some(s), Some(cw)) = (h[r].snapshot, commit_of(w)) else {
            continue;
        };
        let (who, k, v) = (name_of(h, r), rec(o.key), o.version);
        let by = name_of(h, w);
        match o.how {
            How::ScannedPast => {
                if cw <= s {
                    anomalies.push(|| {
                        format!(
                            "{who} (snapshot {s}) scanned past {k}, which {by} inserted at commit {cw}, at or before the snapshot: a missed insert (phantom)"
                        )
                    });
                }
                continue;
            }
            How::Read | How::Scanned => {}
        }
        let did = if o.how == How::Read {
            "read"
        } else {
            "scanned"
        };
        if cw > s {
            anomalies.push(|| {
                format!(
                    "{who} (snapshot {s}) {did} {k} v{v}, which {by} committed at {cw}, after the snapshot: a read from the future"
                )
            });
            continue;
        }
        let list = by_commit.get(&o.key).map(Vec::as_slice).unwrap_or(&[]);
        let next = list.partition_point(|&(c, _, _)| c <= cw);
        if let Some(&(c, nv, nt)) = list.get(next).filter(|&&(c, _, _)| c <= s) {
            anomalies.push(|| {
                format!(
                    "{who} (snapshot {s}) {did} {k} v{v} ({by}, commit {cw}), but {} installed v{nv} at commit {c}, at or before the snapshot: a stale read (read skew)",
                    name_of(h, nt)
                )
            });
        }
    }
}

/// Every committed attempt of a scalar-snapshot history has a snapshot, and one that wrote a
/// commit timestamp after it.
fn snapshot_timestamps(h: &[TxnRecord], anomalies: &mut Anomalies) {
    // A lost attempt's timestamps are unknown: what it wrote is judged by the graph only.
    for (t, r) in h
        .iter()
        .enumerate()
        .filter(|(_, r)| r.aborted.is_none() && !r.lost)
    {
        let writes = r.ops.iter().any(|op| matches!(op, HistOp::Write { .. }));
        match (r.snapshot, r.commit) {
            (None, _) => anomalies.push(|| {
                format!(
                    "{} committed without a snapshot timestamp: not an SI history",
                    name_of(h, t)
                )
            }),
            (Some(s), None) if writes => anomalies.push(|| {
                format!(
                    "{} (snapshot {s}) committed writes without a commit timestamp: not an SI history",
                    name_of(h, t)
                )
            }),
            (Some(s), Some(c)) if writes && c <= s => anomalies.push(|| {
                format!(
                    "{} committed writes at {c}, not after its snapshot {s}: not an SI history",
                    name_of(h, t)
                )
            }),
            _ => {}
        }
    }
}

/// Every committed attempt of a vector-snapshot history has a snapshot vector, and one that
/// wrote committed in a slot of it at a timestamp after its snapshot's for that slot.
fn vector_commits(h: &[TxnRecord], anomalies: &mut Anomalies) {
    let writes = |r: &TxnRecord| r.ops.iter().any(|op| matches!(op, HistOp::Write { .. }));
    for (t, r) in h
        .iter()
        .enumerate()
        .filter(|(_, r)| r.aborted.is_none() && !r.lost)
    {
        let Some(v) = &r.snapshot_vector else {
            anomalies.push(|| {
                format!(
                    "{} committed without a snapshot vector in a history of vector snapshots",
                    name_of(h, t)
                )
            });
            continue;
        };
        if !writes(r) {
            continue;
        }
        match (r.commit_slot, r.commit) {
            (Some(s), Some(c)) => match v.get(s as usize) {
                None => anomalies.push(|| {
                    format!(
                        "{} committed in slot {s}, outside its snapshot vector of {} slots",
                        name_of(h, t),
                        v.len()
                    )
                }),
                Some(&seen) if c <= seen => anomalies.push(|| {
                    format!(
                        "{} committed writes at {s}:{c}, not after its snapshot's {seen} for slot {s}: not an SI history",
                        name_of(h, t)
                    )
                }),
                Some(_) => {}
            },
            _ => anomalies.push(|| {
                format!(
                    "{} committed writes without a commit slot and timestamp: not an SI history",
                    name_of(h, t)
                )
            }),
        }
    }
}

/// [`snapshot_checks`] for vector snapshots (NAM-DB): a version `(slot s, timestamp t)` is
/// in snapshot `V` iff `t <= V[s]`, so snapshots are ordered only partly and each check is
/// phrased by visibility along each record's version order instead of by commit order:
/// - every committed transaction has a vector; one that wrote has a slot within it and a
///   commit timestamp above the vector's entry for its own slot;
/// - first-committer-wins: each writer of a record saw the previous version's commit in its
///   snapshot (else its write overlapped it: "a lost update");
/// - each observation's writer is in the reader's snapshot ("a read from the future") and
///   no later writer of the record is ("a stale read"); a scan passed no key whose inserter
///   it sees ("a missed insert");
/// - a reader's vector covers, slot by slot, the vector of each transaction it read from
///   ("an inconsistent snapshot"): a snapshot that sees a transaction sees what that one
///   saw. NAM-DB guarantees this by reading the vector at one instant after the writer
///   published; it is stricter than SI needs, which asks it only of the versions read.
fn vector_snapshot_checks(
    h: &[TxnRecord],
    writers: &BTreeMap<Key, Versions>,
    seen: &[Seen],
    anomalies: &mut Anomalies,
) {
    let init = h.len();
    let rec = |t: Key| format!("t{}:{}", t.0 .0, t.1);
    vector_commits(h, anomalies);
    // Whether `w`'s commit is in `r`'s snapshot; `None` when a timestamp is missing
    // (reported above).
    let visible = |w: usize, r: usize| -> Option<bool> {
        if w == init {
            return Some(true);
        }
        let (s, c) = (h[w].commit_slot?, h[w].commit?);
        let v = h[r].snapshot_vector.as_ref()?;
        Some(v.get(s as usize).is_some_and(|&seen| c <= seen))
    };
    let commit = |w: usize| {
        if w == init {
            return "the initial state".to_string();
        }
        match (h[w].commit_slot, h[w].commit) {
            (Some(s), Some(c)) => format!("{}, commit {s}:{c}", name_of(h, w)),
            _ => name_of(h, w),
        }
    };
    let entry = |r: usize, w: usize| {
        let s = if w == init { None } else { h[w].commit_slot };
        match (s, h[r].snapshot_vector.as_ref()) {
            (Some(s), Some(v)) => format!(
                "snapshot[{s}] = {}",
                v.get(s as usize)
                    .map_or("none".to_string(), |x| x.to_string())
            ),
            _ => "snapshot".to_string(),
        }
    };
    for (&k, vs) in writers {
        let list: Vec<(u64, usize)> = vs.iter().map(|(&v, &(t, _))| (v, t)).collect();
        for w in list.windows(2) {
            let ((v0, t0), (v1, t1)) = (w[0], w[1]);
            if t1 != init && visible(t0, t1) == Some(false) {
                anomalies.push(|| {
                    format!(
                        "{} ({}) wrote {} v{v1} over v{v0} ({}), which its snapshot does not include: a lost update (first-committer-wins broken)",
                        name_of(h, t1),
                        entry(t1, t0),
                        rec(k),
                        commit(t0)
                    )
                });
            }
        }
    }
    for o in seen {
        let (r, w) = (o.reader, o.writer);
        if r == w {
            continue; // its own write
        }
        let Some(sees) = visible(w, r) else { continue };
        let (who, k, v) = (name_of(h, r), rec(o.key), o.version);
        if o.how == How::ScannedPast {
            if sees {
                anomalies.push(|| {
                    format!(
                        "{who} ({}) scanned past {k}, which {} inserted: a missed insert (phantom)",
                        entry(r, w),
                        commit(w)
                    )
                });
            }
            continue;
        }
        let did = if o.how == How::Read {
            "read"
        } else {
            "scanned"
        };
        if !sees {
            anomalies.push(|| {
                format!(
                    "{who} ({}) {did} {k} v{v} ({}), which its snapshot does not include: a read from the future",
                    entry(r, w),
                    commit(w)
                )
            });
            continue;
        }
        let later = writers
            .get(&o.key)
            .into_iter()
            .flat_map(|vs| vs.range(v + 1..))
            .find(|(_, &(t, _))| t != r && visible(t, r) == Some(true));
        if let Some((&nv, &(nt, _))) = later {
            anomalies.push(|| {
                format!(
                    "{who} ({}) {did} {k} v{v} ({}), but its snapshot includes v{nv} ({}): a stale read (read skew)",
                    entry(r, nt),
                    commit(w),
                    commit(nt)
                )
            });
        }
        if w != init {
            let (vr, vw) = (&h[r].snapshot_vector, &h[w].snapshot_vector);
            if let (Some(vr), Some(vw)) = (vr, vw) {
                let behind = (0..vr.len().max(vw.len()))
                    .find(|&i| vr.get(i).copied().unwrap_or(0) < vw.get(i).copied().unwrap_or(0));
                if let Some(i) = behind {
                    anomalies.push(|| {
                        format!(
                            "{who} (snapshot[{i}] = {}) {did} {k} v{v} from {} (snapshot[{i}] = {}): an inconsistent snapshot, which sees a transaction but not all it saw",
                            vr.get(i).copied().unwrap_or(0),
                            name_of(h, w),
                            vw.get(i).copied().unwrap_or(0)
                        )
                    });
                }
            }
        }
    }
}

/// Snapshot isolation places every snapshot at one instant of a single order of time
/// (Adya's start points), so of any two committed transactions' snapshots one sees every
/// commit the other sees. Vector snapshots are ordered only partly, so this is checked: a
/// snapshot is taken as the set of the history's commits it sees (per slot, how many of
/// that slot's commits), and these sets, sorted by size, must each contain the one before.
/// Two that do not are "a long fork": each sees a commit the other does not, which no
/// single order of time allows (and which the per-read checks cannot see when neither
/// reads from the other's writers).
fn vector_snapshot_chain(h: &[TxnRecord], anomalies: &mut Anomalies) {
    let committed = |r: &TxnRecord| r.aborted.is_none() && !r.lost;
    let mut by_slot: BTreeMap<u32, Vec<(u64, usize)>> = BTreeMap::new();
    for (t, r) in h.iter().enumerate().filter(|(_, r)| committed(r)) {
        if let (Some(s), Some(c)) = (r.commit_slot, r.commit) {
            by_slot.entry(s).or_default().push((c, t));
        }
    }
    let slots: Vec<(u32, Vec<(u64, usize)>)> = by_slot
        .into_iter()
        .map(|(s, mut cs)| {
            cs.sort_unstable();
            (s, cs)
        })
        .collect();
    // How many of the i-th slot's commits snapshot `v` sees.
    let seen_in = |v: &[u64], i: usize| -> usize {
        let (s, cs) = &slots[i];
        let upto = v.get(*s as usize).copied().unwrap_or(0);
        cs.partition_point(|&(c, _)| c <= upto)
    };
    let mut order: Vec<(usize, usize)> = h
        .iter()
        .enumerate()
        .filter(|(_, r)| committed(r))
        .filter_map(|(t, r)| {
            let v = r.snapshot_vector.as_deref()?;
            Some(((0..slots.len()).map(|i| seen_in(v, i)).sum(), t))
        })
        .collect();
    order.sort_unstable();
    let vector = |t: usize| h[t].snapshot_vector.as_deref().unwrap_or(&[]);
    for pair in order.windows(2) {
        let (a, b) = (pair[0].1, pair[1].1);
        let counts = |i: usize| (seen_in(vector(a), i), seen_in(vector(b), i));
        // `a` sees no more commits than `b`: any it sees that `b` does not is a fork.
        let Some(i) = (0..slots.len()).find(|&i| counts(i).0 > counts(i).1) else {
            continue;
        };
        let j = (0..slots.len())
            .find(|&j| counts(j).1 > counts(j).0)
            .expect("a snapshot no larger than another that misses one of its commits sees one the other does not");
        let commit = |k: usize, n: usize| {
            let (s, cs) = &slots[k];
            let (c, w) = cs[n];
            format!("{} (commit {s}:{c})", name_of(h, w))
        };
        let (only_a, only_b) = (commit(i, counts(i).1), commit(j, counts(j).0));
        anomalies.push(|| {
            format!(
                "{} sees {only_a} but not {only_b}, and {} sees {only_b} but not {only_a}: a long fork, snapshots that no single order of time holds",
                name_of(h, a),
                name_of(h, b)
            )
        });
    }
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

/// A history with its lost attempts ([`TxnRecord::lost`]) given the writes committed
/// transactions read of them: each read of a value whose tag is a lost attempt's becomes
/// that attempt's write of the record at the version read (the first such read per record;
/// another version read of the same record stays an anomaly, G1b). A lost attempt some
/// committed transaction read from is thereby taken as committed (a crashed coordinator's
/// half-done commit left its writes visible, which recovery would have to settle); its reads
/// stay unknown, so it has no rw edges. One never read from has no ops and no effect.
/// Idempotent; a history without lost attempts comes back unchanged.
pub fn admit_lost(h: &[TxnRecord]) -> std::borrow::Cow<'_, [TxnRecord]> {
    if !h.iter().any(|r| r.lost) {
        return std::borrow::Cow::Borrowed(h);
    }
    // A lost line can only excuse its own tag: one that repeats another attempt's excuses
    // nothing (tags are unique in a run; a forged file must not hide that attempt's reads).
    let recorded: std::collections::HashSet<u64> =
        h.iter().filter(|r| !r.lost).map(|r| r.tag).collect();
    let lost_by_tag: HashMap<u64, usize> = h
        .iter()
        .enumerate()
        .filter(|(_, r)| r.lost && !recorded.contains(&r.tag))
        .map(|(i, r)| (r.tag, i))
        .collect();
    let mut out = h.to_vec();
    let mut written: std::collections::HashSet<(usize, Key)> = std::collections::HashSet::new();
    for (i, r) in h.iter().enumerate() {
        if r.lost {
            for op in &r.ops {
                if let HistOp::Write { table, key, .. } = op {
                    written.insert((i, (*table, *key)));
                }
            }
        }
    }
    for r in h.iter().filter(|r| r.aborted.is_none() && !r.lost) {
        for op in &r.ops {
            let HistOp::Read {
                table,
                key,
                version,
                tag,
                intact: true,
            } = *op
            else {
                continue;
            };
            let Some(&l) = lost_by_tag.get(&tag) else {
                continue;
            };
            if written.insert((l, (table, key))) {
                let kind = if key_version(version) == INITIAL_VERSION {
                    WriteKind::Insert
                } else {
                    WriteKind::Update
                };
                out[l].ops.push(HistOp::Write {
                    table,
                    key,
                    version,
                    kind,
                });
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Checks a history; lost attempts are first admitted ([`admit_lost`]).
pub fn check(h: &[TxnRecord], mode: Mode) -> Verdict {
    let admitted = admit_lost(h);
    let h = &admitted[..];
    let mut anomalies = Anomalies::default();
    let mut g = match mode {
        Mode::Serializable => build(h, &mut anomalies, None).0,
        Mode::Snapshot | Mode::ParallelSnapshot => {
            let mut seen = Vec::new();
            let (g, writers) = build(h, &mut anomalies, Some(&mut seen));
            if h.iter().any(|r| r.snapshot_vector.is_some()) {
                vector_snapshot_checks(h, &writers, &seen, &mut anomalies);
                if mode == Mode::Snapshot {
                    vector_snapshot_chain(h, &mut anomalies);
                }
            } else {
                snapshot_checks(h, &writers, &seen, &mut anomalies);
            }
            g
        }
    };
    let mut edges = BTreeMap::new();
    for e in g.adj.iter().flatten() {
        *edges.entry(e.kind.name()).or_insert(0) += 1;
    }
    if mode.snapshots() {
        // Snapshot isolation forbids only cycles of ww and wr edges (G0, G1c); rw edges
        // are what it allows (write skew), so they take no part in the search.
        for out in &mut g.adj {
            out.retain(|e| e.kind != EdgeKind::Rw);
        }
    }
    let (cycle, order) = match find_cycle(&g) {
        Ok(order) => (None, order.into_iter().filter(|&t| t != g.init).collect()),
        Err(c) => (Some(c), Vec::new()),
    };
    Verdict {
        mode,
        committed: h.iter().filter(|r| r.aborted.is_none() && !r.lost).count(),
        aborted: h.iter().filter(|r| r.aborted.is_some()).count(),
        lost: h.iter().filter(|r| r.lost).count(),
        lost_read_from: h.iter().filter(|r| r.lost && !r.ops.is_empty()).count(),
        lost_gap_versions: anomalies.lost_gap_versions.len(),
        edges,
        cycle,
        anomalies: anomalies.listed,
        anomalies_total: anomalies.total,
        order,
    }
}

fn op_text(op: &HistOp) -> String {
    match op {
        HistOp::Read {
            table,
            key,
            version,
            tag,
            intact,
        } => format!(
            "r t{}:{key}@{version}={tag:#x}{}",
            table.0,
            if *intact { "" } else { "(torn)" }
        ),
        HistOp::Write {
            table,
            key,
            version,
            kind,
        } => format!("{} t{}:{key}@{version}", kind_name(*kind), table.0),
        HistOp::Scan(s) => format!(
            "s t{}:[{}..={}] {} keys",
            s.table.0,
            s.lo,
            s.hi,
            s.seen.len()
        ),
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
    if v.lost > 0 {
        let _ = writeln!(
            o,
            "{} attempts lost in flight (a crashed coordinator, or the run's stop): {} of them read from by committed transactions, taken as committed with the writes read (their reads unknown); {} versions missing from records' orders taken as theirs",
            v.lost, v.lost_read_from, v.lost_gap_versions
        );
    }
    for a in &v.anomalies {
        let _ = writeln!(o, "anomaly: {a}");
    }
    if v.anomalies_total > v.anomalies.len() {
        let _ = writeln!(
            o,
            "... and {} more anomalies",
            v.anomalies_total - v.anomalies.len()
        );
    }
    if let Some(c) = &v.cycle {
        let _ = match v.mode {
            Mode::Serializable => writeln!(
                o,
                "NOT serializable: a dependency cycle of {} transactions:",
                c.len()
            ),
            Mode::Snapshot | Mode::ParallelSnapshot => writeln!(
                o,
                "NOT {}: a cycle of ww and wr edges ({}) of {} transactions:",
                v.mode.name(),
                if c.iter().all(|(_, e)| e.kind == EdgeKind::Ww) {
                    "G0, dirty writes"
                } else {
                    "G1c, circular information flow"
                },
                c.len()
            ),
        };
        for (t, e) in c {
            let ops = if *t == h.len() {
                "loaded every record at version 1".to_string()
            } else {
                h[*t].ops.iter().map(op_text).collect::<Vec<_>>().join(" ")
            };
            let why = match e.kind {
                EdgeKind::Ww => "installed {} v{} that {} overwrote",
                EdgeKind::Wr => "installed {} v{} that {} read",
                EdgeKind::Rw => "read {} v{} that {} overwrote",
            }
            .replacen("{}", &format!("t{}:{}", e.table.0, e.key), 1)
            .replacen("{}", &e.version.to_string(), 1)
            .replacen("{}", &name_of(h, e.to), 1);
            let _ = writeln!(
                o,
                "  {} [{}]\n    -{}-> because it {}",
                name_of(h, *t),
                ops,
                e.kind.name(),
                why
            );
        }
    } else if v.anomalies_total == 0 {
        let _ = match v.mode {
            Mode::Serializable => writeln!(o, "serializable"),
            Mode::Snapshot => writeln!(
                o,
                "snapshot isolation: every read saw its snapshot, no two concurrent writers of a record committed, no ww/wr cycle (rw edges allowed)"
            ),
            Mode::ParallelSnapshot => writeln!(
                o,
                "parallel snapshot isolation: every read saw its snapshot, no two concurrent writers of a record committed, no ww/wr cycle (rw edges and long forks allowed)"
            ),
        };
    } else {
        let _ = writeln!(o, "NOT {}: anomalies above", v.mode.name());
    }
    o
}

/// What an attempt's event of `phase` (0 its start, 1 its end) is to Elle; a lost attempt's
/// outcome is unknown: "info" (it may have committed).
fn adya_event(phase: u8, r: &TxnRecord) -> &'static str {
    match (phase, &r.aborted) {
        (0, _) => "invoke",
        (_, None) if r.lost => "info",
        (_, None) => "ok",
        (_, Some(_)) => "fail",
    }
}

/// The history as an Elle/adya rw-register history (JSON lines) and the engine's order
/// file (`--transaction-order`). Keys are `table << 40 | key`; a value is the tag of the
/// attempt that wrote it (what readers actually found); reads of loaded values are the
/// initial `nil`. The rw-register model covers reads and writes only: deletes and scans
/// (and phantoms) are checked by ours alone. Each attempt is an `invoke` at its start and
/// an `ok`/`fail` at its end on its co-routine's process (`info` for one lost in flight,
/// with the writes [`admit_lost`] gives it). The order lists committed
/// transactions in an order consistent with every record's version order (a topological
/// order of the ww edges).
pub fn to_adya(h: &[TxnRecord]) -> (String, String) {
    let admitted = admit_lost(h);
    let h = &admitted[..];
    let key = |t: TableId, k: u64| ((t.0 as u64) << 40) | k;
    let value = |tag: u64| {
        if tag == LOADER_TAG {
            Value::Null
        } else {
            json!(tag)
        }
    };
    let mops = |r: &TxnRecord, completed: bool| -> Value {
        Value::Array(
            r.ops
                .iter()
                .filter_map(|op| match *op {
                    HistOp::Read {
                        table, key: k, tag, ..
                    } => Some(json!([
                        "r",
                        key(table, k),
                        if completed { value(tag) } else { Value::Null }
                    ])),
                    HistOp::Write {
                        table,
                        key: k,
                        kind: WriteKind::Update | WriteKind::Insert,
                        ..
                    } => Some(json!(["w", key(table, k), r.tag])),
                    _ => None,
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
        let kind = adya_event(phase, r);
        if kind == "ok" {
            ok_index.insert(i, index);
        }
        let v = json!({"index": index, "type": kind, "process": r.coord, "f": "txn", "value": mops(r, phase == 1)});
        lines.push_str(&v.to_string());
        lines.push('\n');
    }
    // Committed transactions ordered by the ww edges (Kahn's algorithm, ties by end time).
    let mut anomalies = Anomalies::default();
    let (g, _) = build(h, &mut anomalies, None);
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
    use atoll_history::*;

    fn record(tag: u64) -> TxnRecord {
        TxnRecord {
            id: tag,
            tag,
            attempt: 1,
            coord: 0,
            aborted: None,
            start_ns: tag,
            end_ns: tag + 1,
            snapshot: None,
            commit: None,
            snapshot_vector: None,
            commit_slot: None,
            lost: false,
            ops: vec![HistOp::Write {
                table: TableId(0),
                key: tag,
                version: 2,
                kind: WriteKind::Update,
            }],
        }
    }

    #[test]
    fn history_writer_streams_batches_that_parse_back_in_order() {
        let path = std::env::temp_dir().join(format!("atoll-hw-{}.jsonl", std::process::id()));
        let w = HistoryWriter::create(&path, Isolation::Serializable).unwrap();
        let mut batch: Vec<TxnRecord> = (1..=3).map(record).collect();
        w.append(&mut batch);
        assert!(batch.is_empty(), "a batch handed over is emptied");
        let mut batch = vec![record(4)];
        w.append(&mut batch);
        assert_eq!(w.finish(), Ok(4));
        let file = std::fs::File::open(&path).unwrap();
        let back = parse_reader(std::io::BufReader::new(file)).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            back.iter().map(|r| r.tag).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
    }

    /// Committed attempt `tag` reading `reads` (record, version, writer's tag) and writing
    /// `writes` (record, version).
    fn txn(tag: u64, reads: &[(u64, u64, u64)], writes: &[(u64, u64)]) -> TxnRecord {
        let mut ops: Vec<HistOp> = reads
            .iter()
            .map(|&(key, version, writer)| HistOp::Read {
                table: TableId(0),
                key,
                version,
                tag: writer,
                intact: true,
            })
            .collect();
        ops.extend(writes.iter().map(|&(key, version)| HistOp::Write {
            table: TableId(0),
            key,
            version,
            kind: WriteKind::Update,
        }));
        TxnRecord { ops, ..record(tag) }
    }

    fn lost(tag: u64) -> TxnRecord {
        TxnRecord {
            lost: true,
            ops: Vec::new(),
            ..record(tag)
        }
    }

    #[test]
    fn history_a_lost_attempt_read_from_is_taken_as_committed_with_the_writes_read() {
        // T2 was cut off in flight after installing record 1's version 2; T3 read it and
        // wrote version 3. Without the mark, the value is of no recorded attempt.
        let h = vec![lost(2), txn(3, &[(1, 2, 2)], &[(1, 3)])];
        let v = check(&h, Mode::Serializable);
        assert!(v.ok(), "{}", render(&h, &v));
        assert_eq!((v.committed, v.lost, v.lost_read_from), (1, 1, 1));
        let unmarked = vec![txn(3, &[(1, 2, 2)], &[(1, 3)])];
        let v = check(&unmarked, Mode::Serializable);
        assert!(!v.ok(), "a value of no recorded attempt stays an anomaly");
        // The file form round-trips the status.
        let text = to_text(&h, Isolation::Serializable);
        assert!(text.contains("\"status\":\"lost\""), "{text}");
        assert_eq!(parse(&text).unwrap(), h);
    }

    #[test]
    fn history_a_lost_attempt_excuses_only_its_own_values_and_gaps_no_longer_than_the_lost_are_many(
    ) {
        // A read of tag 9 (no attempt, lost or not) stays an anomaly beside a lost one.
        let h = vec![lost(2), txn(3, &[(1, 1, 9)], &[])];
        assert!(!check(&h, Mode::Serializable).ok());
        // One lost attempt explains a gap of one version (record 1's v2), not of two.
        let one = vec![lost(2), txn(3, &[(1, 3, 4)], &[]), txn(4, &[], &[(1, 3)])];
        let v = check(&one, Mode::Serializable);
        assert!(v.ok(), "{}", render(&one, &v));
        assert_eq!(v.lost_gap_versions, 1);
        let two = vec![lost(2), txn(3, &[(1, 4, 4)], &[]), txn(4, &[], &[(1, 4)])];
        assert!(!check(&two, Mode::Serializable).ok());
        // Two readers of one lost write at different versions: version and value disagree.
        let h = vec![
            lost(2),
            txn(3, &[(1, 2, 2)], &[(1, 3)]),
            txn(5, &[(1, 3, 2)], &[]),
        ];
        let v = check(&h, Mode::Serializable);
        assert!(!v.ok(), "{}", render(&h, &v));
        assert!(
            v.anomalies.iter().any(|a| a.contains("G1b")),
            "{:?}",
            v.anomalies
        );
    }

    #[test]
    fn history_a_lost_line_with_ops_is_refused() {
        let text = format!(
            "{}\n{{\"id\":1,\"tag\":11,\"coord\":0,\"attempt\":1,\"status\":\"lost\",\"start_ns\":0,\"end_ns\":0,\"ops\":[[\"w\",0,1,2,\"u\"]]}}\n",
            header_line(Isolation::Serializable)
        );
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("records no ops"), "{e}");
    }

    /// A version-2 file's first line and one committed attempt, as atoll wrote them before
    /// timestamps were recorded.
    const VERSION_2_FILE: &str = "{\"format\":\"atoll-history\",\"version\":2}\n\
        {\"id\":1,\"tag\":11,\"coord\":0,\"attempt\":1,\"status\":\"committed\",\"start_ns\":0,\"end_ns\":5,\"ops\":[[\"r\",0,1,1,0,1],[\"w\",0,1,2,\"u\"]]}\n";

    #[test]
    fn history_a_version_2_file_still_parses_without_timestamps_as_serializable() {
        let (header, h) = parse_with_header(VERSION_2_FILE.as_bytes()).unwrap();
        assert_eq!(header.version, 2);
        assert_eq!(header.isolation, Isolation::Serializable);
        assert_eq!(h.len(), 1);
        assert_eq!((h[0].snapshot, h[0].commit), (None, None));
        assert_eq!(h[0].ops.len(), 2);
    }

    #[test]
    fn history_timestamps_and_isolation_round_trip_and_absent_timestamps_are_omitted() {
        let mut si = record(7);
        (si.snapshot, si.commit) = (Some(40), Some(52));
        let mut read_only = record(8);
        (read_only.snapshot, read_only.commit) = (Some(41), None);
        let h = vec![si, read_only, record(9)];
        let text = to_text(&h, Isolation::Snapshot);
        let (header, back) = parse_with_header(text.as_bytes()).unwrap();
        assert_eq!(header.version, FORMAT_VERSION);
        assert_eq!(header.isolation, Isolation::Snapshot);
        assert_eq!(back, h);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].contains("\"isolation\":\"snapshot\""),
            "{}",
            lines[0]
        );
        assert!(lines[1].contains("\"snapshot\":40") && lines[1].contains("\"commit\":52"));
        assert!(
            !lines[2].contains("\"commit\""),
            "None is omitted: {}",
            lines[2]
        );
        assert!(!lines[3].contains("\"snapshot\"") && !lines[3].contains("\"commit\""));
    }

    #[test]
    fn history_a_malformed_timestamp_or_isolation_is_an_error_naming_line_field_and_value() {
        let header = header_line(Isolation::Snapshot);
        let line = r#"{"id":1,"tag":11,"coord":0,"attempt":1,"status":"committed","start_ns":0,"end_ns":5,"snapshot":"soon","ops":[]}"#;
        let e = parse(&format!("{header}\n{line}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("history line 2") && e.contains("'snapshot'") && e.contains("soon"),
            "{e}"
        );
        let e = parse("{\"format\":\"atoll-history\",\"version\":3,\"isolation\":\"si\"}\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("history line 1")
                && e.contains("\"si\"")
                && e.contains("\"serializable\", \"snapshot\""),
            "{e}"
        );
    }

    // Snapshot isolation, hand-built histories: one table, keys loaded at version 1 unless
    // a test inserts them.

    const T0: TableId = TableId(0);

    /// A committed attempt with its snapshot and commit timestamps; its id is its tag.
    fn si(tag: u64, snapshot: u64, commit: Option<u64>, ops: Vec<HistOp>) -> TxnRecord {
        TxnRecord {
            id: tag,
            tag,
            attempt: 1,
            coord: tag as u32,
            aborted: None,
            start_ns: snapshot,
            end_ns: commit.unwrap_or(snapshot) + 1,
            snapshot: Some(snapshot),
            commit,
            snapshot_vector: None,
            commit_slot: None,
            lost: false,
            ops,
        }
    }

    /// A read of `key` at `version`, whose payload carries `tag` (`LOADER_TAG`: loaded).
    fn r(key: u64, version: u64, tag: u64) -> HistOp {
        HistOp::Read {
            table: T0,
            key,
            version,
            tag,
            intact: true,
        }
    }

    fn w(key: u64, version: u64) -> HistOp {
        HistOp::Write {
            table: T0,
            key,
            version,
            kind: WriteKind::Update,
        }
    }

    fn scan(lo: u64, hi: u64, seen: Vec<(u64, u64)>) -> HistOp {
        HistOp::Scan(ScanObs {
            table: T0,
            lo,
            hi,
            seen,
        })
    }

    /// The verdict, with its rendering on failure of an assertion.
    fn verdict(h: &[TxnRecord], mode: Mode) -> (Verdict, String) {
        let v = check(h, mode);
        let text = render(h, &v);
        (v, text)
    }

    const X: u64 = 1;
    const Y: u64 = 2;
    const L: u64 = LOADER_TAG;

    #[test]
    fn si_a_clean_si_history_passes() {
        let h = vec![
            // T1 updates x; T4 ran beside it (snapshot 5, before T1's commit) and so read the
            // loaded x, then updated a key T1 did not touch.
            si(1, 0, Some(10), vec![r(X, 1, L), w(X, 2)]),
            si(2, 10, Some(20), vec![r(X, 2, 1), r(Y, 1, L), w(Y, 2)]),
            si(3, 20, None, vec![r(X, 2, 1), r(Y, 2, 2)]),
            si(4, 5, Some(15), vec![r(X, 1, L), w(3, 2)]),
            TxnRecord {
                aborted: Some("lock_busy".into()),
                commit: None,
                snapshot_vector: None,
                commit_slot: None,
                lost: false,
                ..si(5, 12, None, vec![r(X, 2, 1)])
            },
        ];
        let (v, text) = verdict(&h, Mode::Snapshot);
        assert!(v.ok(), "{text}");
        assert_eq!((v.committed, v.aborted), (4, 1));
        assert!(
            text.contains("snapshot isolation: every read saw its snapshot"),
            "{text}"
        );
    }

    #[test]
    fn si_write_skew_passes_snapshot_and_fails_serializable_with_an_rw_cycle() {
        // Both read x and y from the same snapshot; each overwrites a different one.
        let h = vec![
            si(1, 0, Some(10), vec![r(X, 1, L), r(Y, 1, L), w(X, 2)]),
            si(2, 0, Some(11), vec![r(X, 1, L), r(Y, 1, L), w(Y, 2)]),
        ];
        let (v, text) = verdict(&h, Mode::Snapshot);
        assert!(v.ok(), "{text}");
        assert_eq!(v.edges.get("rw"), Some(&2), "{text}");
        let (v, text) = verdict(&h, Mode::Serializable);
        let cycle = v.cycle.as_ref().expect(&text);
        assert!(cycle.iter().all(|(_, e)| e.kind == EdgeKind::Rw), "{text}");
        assert_eq!(v.anomalies_total, 0, "{text}");
        assert!(
            text.contains("NOT serializable: a dependency cycle of 2") && text.contains("-rw->"),
            "{text}"
        );
    }

    #[test]
    fn si_lost_update_two_concurrent_writers_commit_is_caught() {
        // T2's snapshot (5) precedes T1's commit (10): both read the loaded x and both
        // overwrote it. With reads, and blind.
        for ops in [
            [vec![r(X, 1, L), w(X, 2)], vec![r(X, 1, L), w(X, 3)]],
            [vec![w(X, 2)], vec![w(X, 3)]],
        ] {
            let [o1, o2] = ops;
            let h = vec![si(1, 0, Some(10), o1), si(2, 5, Some(20), o2)];
            let (v, text) = verdict(&h, Mode::Snapshot);
            assert_eq!(v.anomalies_total, 1, "{text}");
            assert!(
                v.anomalies[0].contains("T1 (snapshot 0, commit 10) and T2 (snapshot 5, commit 20) both wrote t0:1 (v2, v3) concurrently: a lost update"),
                "{text}"
            );
            assert!(
                text.contains("NOT snapshot isolation: anomalies above"),
                "{text}"
            );
        }
    }

    #[test]
    fn si_a_read_older_than_the_newest_version_before_the_snapshot_is_caught_stale_read() {
        // T1 committed x v2 at 10; T2's snapshot is 15, yet it read the loaded v1.
        let h = vec![
            si(1, 0, Some(10), vec![r(X, 1, L), w(X, 2)]),
            si(2, 15, None, vec![r(X, 1, L)]),
        ];
        let (v, text) = verdict(&h, Mode::Snapshot);
        assert_eq!(v.anomalies_total, 1, "{text}");
        assert!(
            v.anomalies[0].contains("T2 (snapshot 15) read t0:1 v1 (T(initial state), commit 0), but T1 installed v2 at commit 10, at or before the snapshot: a stale read"),
            "{text}"
        );
        // Without timestamps nothing is wrong: T2 simply serializes before T1.
        assert!(check(&h, Mode::Serializable).ok());
    }

    #[test]
    fn si_a_read_of_a_version_committed_after_the_snapshot_is_caught() {
        let h = vec![
            si(1, 0, Some(20), vec![r(X, 1, L), w(X, 2)]),
            si(2, 15, None, vec![r(X, 2, 1)]),
        ];
        let (v, text) = verdict(&h, Mode::Snapshot);
        assert_eq!(v.anomalies_total, 1, "{text}");
        assert!(
            v.anomalies[0].contains("T2 (snapshot 15) read t0:1 v2, which T1 committed at 20, after the snapshot: a read from the future"),
            "{text}"
        );
        assert!(check(&h, Mode::Serializable).ok());
    }

    #[test]
    fn si_g1a_under_snapshot() {
        // T1 aborted after its write of x became visible; T2 read it.
        let h = vec![
            TxnRecord {
                aborted: Some("validation_failed".into()),
                commit: None,
                snapshot_vector: None,
                commit_slot: None,
                lost: false,
                ..si(1, 0, None, vec![r(X, 1, L), w(X, 2)])
            },
            si(2, 15, None, vec![r(X, 2, 1)]),
        ];
        let (v, text) = verdict(&h, Mode::Snapshot);
        assert!(!v.ok(), "{text}");
        assert!(
            v.anomalies[0].contains("T2 read t0:1 written by T1, an attempt that aborted (validation_failed): an aborted read (G1a)"),
            "{text}"
        );
    }

    #[test]
    fn si_version_order_disagreeing_with_commit_order_is_caught() {
        // T1 installed v2 at commit 40, T2 the later v3 at commit 35; neither ran beside
        // the other (T1's snapshot 36 follows T2's commit), so only the order is wrong.
        let h = vec![
            si(1, 36, Some(40), vec![w(X, 2)]),
            si(2, 20, Some(35), vec![w(X, 3)]),
        ];
        let (v, text) = verdict(&h, Mode::Snapshot);
        assert_eq!(v.anomalies_total, 1, "{text}");
        assert!(
            v.anomalies[0].contains("T1 v2 of t0:1 committed at 40, after v3 by T2 at 35: version order disagrees with commit order"),
            "{text}"
        );
    }

    #[test]
    fn si_a_cycle_of_ww_and_wr_edges_is_caught_as_g0_or_g1c() {
        // Dirty writes: each overwrote the other's version of one key.
        let g0 = vec![
            si(1, 0, Some(10), vec![w(X, 2), w(Y, 3)]),
            si(2, 10, Some(20), vec![w(X, 3), w(Y, 2)]),
        ];
        let (v, text) = verdict(&g0, Mode::Snapshot);
        assert!(v.cycle.is_some(), "{text}");
        assert!(
            text.contains("NOT snapshot isolation: a cycle of ww and wr edges (G0"),
            "{text}"
        );
        // Circular information flow: each read the other's write.
        let g1c = vec![
            si(1, 0, Some(10), vec![r(Y, 2, 2), w(X, 2)]),
            si(2, 10, Some(20), vec![r(X, 2, 1), w(Y, 2)]),
        ];
        let (v, text) = verdict(&g1c, Mode::Snapshot);
        let cycle = v.cycle.as_ref().expect(&text);
        assert!(cycle.iter().all(|(_, e)| e.kind == EdgeKind::Wr), "{text}");
        assert!(text.contains("(G1c"), "{text}");
    }

    #[test]
    fn si_a_committed_transaction_without_its_timestamps_is_not_an_si_history() {
        let h = vec![
            TxnRecord {
                snapshot: None,
                ..si(1, 0, None, vec![r(X, 1, L)])
            },
            si(2, 5, None, vec![w(X, 2)]),
            si(3, 30, Some(30), vec![w(Y, 2)]),
            // Read-only: a snapshot and no commit timestamp is an SI commit.
            si(4, 40, None, vec![r(Y, 2, 3)]),
        ];
        let (v, text) = verdict(&h, Mode::Snapshot);
        assert_eq!(v.anomalies_total, 3, "{text}");
        for (a, expect) in v.anomalies.iter().zip([
            "T1 committed without a snapshot timestamp",
            "T2 (snapshot 5) committed writes without a commit timestamp",
            "T3 committed writes at 30, not after its snapshot 30",
        ]) {
            assert!(
                a.contains(expect) && a.contains("not an SI history"),
                "{text}"
            );
        }
        assert!(has_snapshots(&h));
        assert!(!has_snapshots(&[record(1)]));
    }

    #[test]
    fn si_scans_see_the_newest_versions_and_the_inserts_committed_by_their_snapshot() {
        const NEW: u64 = 5;
        const OLD: u64 = 7;
        let insert = HistOp::Write {
            table: T0,
            key: NEW,
            version: INITIAL_VERSION,
            kind: WriteKind::Insert,
        };
        let h = vec![
            // T1 inserted key 5 and updated the loaded key 7, at commit 10.
            si(1, 0, Some(10), vec![insert, r(OLD, 1, L), w(OLD, 2)]),
            // Snapshot 5: neither change is visible, and the scan saw neither. Correct.
            si(2, 5, None, vec![scan(0, 9, vec![(OLD, 1)])]),
            // Snapshot 20: it must meet key 5 and key 7 at v2; it met neither.
            si(3, 20, None, vec![scan(0, 9, vec![(OLD, 1)])]),
        ];
        let (v, text) = verdict(&h, Mode::Snapshot);
        assert_eq!(v.anomalies_total, 2, "{text}");
        assert!(
            text.contains("T3 (snapshot 20) scanned t0:7 v1 (T(initial state), commit 0), but T1 installed v2 at commit 10, at or before the snapshot: a stale read"),
            "{text}"
        );
        assert!(
            text.contains("T3 (snapshot 20) scanned past t0:5, which T1 inserted at commit 10, at or before the snapshot: a missed insert (phantom)"),
            "{text}"
        );
    }

    /// A committed attempt with a vector snapshot; `commit` is `(slot, timestamp)`.
    fn nam(tag: u64, vector: &[u64], commit: Option<(u32, u64)>, ops: Vec<HistOp>) -> TxnRecord {
        TxnRecord {
            snapshot: None,
            commit: commit.map(|c| c.1),
            snapshot_vector: Some(vector.to_vec()),
            commit_slot: commit.map(|c| c.0),
            lost: false,
            ..si(tag, 0, None, ops)
        }
    }

    #[test]
    fn vector_snapshots_a_clean_history_passes_and_round_trips_through_the_file_format() {
        let h = vec![
            // Slot 0 commits x v2 at 0:1; slot 1 sees it and commits y v2 at 1:1.
            nam(1, &[0, 0], Some((0, 1)), vec![r(X, 1, L), w(X, 2)]),
            nam(
                2,
                &[1, 0],
                Some((1, 1)),
                vec![r(X, 2, 1), r(Y, 1, L), w(Y, 2)],
            ),
            // A reader that sees only slot 0 reads x v2 and the loaded y: its own instant.
            nam(3, &[1, 0], None, vec![r(X, 2, 1), r(Y, 1, L)]),
            // One that sees both.
            nam(4, &[1, 1], None, vec![r(X, 2, 1), r(Y, 2, 2)]),
        ];
        let (v, text) = verdict(&h, Mode::Snapshot);
        assert_eq!(v.anomalies_total, 0, "{text}");
        assert!(v.cycle.is_none(), "{text}");
        let back = parse(&to_text(&h, Isolation::Snapshot)).unwrap();
        assert_eq!(back, h, "vector and slot survive the file");
    }

    #[test]
    fn vector_snapshots_that_differ_only_where_nothing_committed_lie_on_one_chain() {
        // Slots 1 and 2 committed nothing in this history, so [1, 5, 0] and [1, 0, 7] see
        // the same commits: no fork, though the vectors are incomparable.
        let h = vec![
            nam(1, &[0, 0, 0], Some((0, 1)), vec![w(X, 2)]),
            nam(2, &[1, 5, 0], None, vec![r(X, 2, 1)]),
            nam(3, &[1, 0, 7], None, vec![r(X, 2, 1)]),
            nam(4, &[0, 9, 9], None, vec![r(X, 1, L)]),
        ];
        let (v, text) = verdict(&h, Mode::Snapshot);
        assert_eq!(v.anomalies_total, 0, "{text}");
    }

    #[test]
    fn vector_snapshots_each_anomaly_is_named() {
        let cases: Vec<(&str, Vec<TxnRecord>)> = vec![
            (
                "T2 (snapshot[0] = 0) read t0:1 v2 (T1, commit 0:1), which its snapshot does not include: a read from the future",
                vec![
                    nam(1, &[0, 0], Some((0, 1)), vec![w(X, 2)]),
                    nam(2, &[0, 0], None, vec![r(X, 2, 1)]),
                ],
            ),
            (
                "T2 (snapshot[0] = 1) read t0:1 v1 (the initial state), but its snapshot includes v2 (T1, commit 0:1): a stale read",
                vec![
                    nam(1, &[0, 0], Some((0, 1)), vec![w(X, 2)]),
                    nam(2, &[1, 0], None, vec![r(X, 1, L)]),
                ],
            ),
            (
                "T2 (snapshot[0] = 0) wrote t0:1 v3 over v2 (T1, commit 0:1), which its snapshot does not include: a lost update",
                vec![
                    nam(1, &[0, 0], Some((0, 1)), vec![r(X, 1, L), w(X, 2)]),
                    nam(2, &[0, 0], Some((1, 1)), vec![w(X, 3)]),
                ],
            ),
            (
                // T3 sees T2, which read T1's x, but not T1 itself.
                "T3 (snapshot[0] = 0) read t0:2 v2 from T2 (snapshot[0] = 1): an inconsistent snapshot",
                vec![
                    nam(1, &[0, 0], Some((0, 1)), vec![w(X, 2)]),
                    nam(2, &[1, 0], Some((1, 1)), vec![r(X, 2, 1), w(Y, 2)]),
                    nam(3, &[0, 1], None, vec![r(Y, 2, 2), r(X, 1, L)]),
                ],
            ),
            (
                // Two writers of disjoint keys; each reader sees one of them and not the
                // other, and reads nothing of the other's: only the chain sees it.
                "T3 sees T1 (commit 0:1) but not T2 (commit 1:1), and T4 sees T2 (commit 1:1) but not T1 (commit 0:1): a long fork",
                vec![
                    nam(1, &[0, 0], Some((0, 1)), vec![w(X, 2)]),
                    nam(2, &[0, 0], Some((1, 1)), vec![w(Y, 2)]),
                    nam(3, &[1, 0], None, vec![r(X, 2, 1), r(Y, 1, L)]),
                    nam(4, &[0, 1], None, vec![r(X, 1, L), r(Y, 2, 2)]),
                ],
            ),
            (
                "T1 committed writes at 0:3, not after its snapshot's 3 for slot 0",
                vec![nam(1, &[3, 0], Some((0, 3)), vec![w(X, 2)])],
            ),
            (
                "T1 committed in slot 2, outside its snapshot vector of 2 slots",
                vec![nam(1, &[0, 0], Some((2, 1)), vec![w(X, 2)])],
            ),
            (
                "T2 committed without a snapshot vector",
                vec![
                    nam(1, &[0, 0], None, vec![r(X, 1, L)]),
                    si(2, 0, None, vec![r(X, 1, L)]),
                ],
            ),
        ];
        for (expect, h) in cases {
            let (v, text) = verdict(&h, Mode::Snapshot);
            assert!(v.anomalies_total >= 1, "{expect}: {text}");
            assert!(
                v.anomalies.iter().any(|a| a.contains(expect)),
                "expected '{expect}' in:\n{text}"
            );
            // Parallel snapshot isolation allows the long fork and nothing else.
            let (p, text) = verdict(&h, Mode::ParallelSnapshot);
            assert_eq!(
                p.ok(),
                expect.ends_with("a long fork"),
                "{expect} under parallel SI:\n{text}"
            );
        }
    }

    #[test]
    fn history_writer_names_a_file_it_cannot_create() {
        let e = HistoryWriter::create(
            std::path::Path::new("/nonexistent-dir/h.jsonl"),
            Isolation::Serializable,
        )
        .err()
        .unwrap();
        assert!(e.contains("/nonexistent-dir/h.jsonl"), "{e}");
    }
}
