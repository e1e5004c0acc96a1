//! The history format: what a transaction attempt read and installed, as both the engine
//! (which records it) and the independent checker (which reads it) understand it.
//!
//! A crate of its own so that the checker (`atoll-check`) depends on no protocol, workload,
//! transaction or fabric crate: the words a history is written in live here, and the
//! storage and transaction crates re-export them. It holds the table id, the parts of a
//! version word a history records ([`key_version`]), the loader's tag, the isolation levels,
//! the observed operations ([`HistOp`]), one attempt ([`TxnRecord`]) and the file format
//! (a header line, then one JSON object per attempt).

use serde_json::{json, Value};

/// A table's identifier; also its region id on every node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableId(pub u16);

/// The tag of records written by a workload's loader (the initial state).
pub const LOADER_TAG: u64 = 0;

/// The version of every record a loader or an insert into a fresh slot creates.
pub const INITIAL_VERSION: u64 = 1;

/// Set in the version word of a record slot that holds no live record.
pub const VERSION_ABSENT: u64 = 1 << 63;

/// Low bits of a version word holding the key's version (its commit count); the bits
/// above, up to [`VERSION_ABSENT`], hold the slot's incarnation: how often the slot was
/// reclaimed for another key. A key's version continues across the slots it lives in, so
/// histories compare key versions; a slot's whole word only ever grows across its keys, so
/// a coordinator comparing a word it read with the slot's current one (validation) never
/// takes another key's record, or another incarnation of its own, for the one it read.
/// 2^40 commits of one key need over 64 million a second for the longest run allowed.
pub const VERSION_KEY_BITS: u32 = 40;
pub const VERSION_KEY_MASK: u64 = (1 << VERSION_KEY_BITS) - 1;

/// The key's version in a version word (what histories record), without incarnation or
/// `ABSENT`.
#[inline]
pub fn key_version(word: u64) -> u64 {
    word & VERSION_KEY_MASK
}

/// The isolation level a protocol guarantees, which decides how its histories are checked
/// and which workload invariants must hold (write skew is allowed under snapshot isolation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isolation {
    /// Conflict-serializable: the dependency graph of committed transactions is acyclic.
    Serializable,
    /// Snapshot isolation: each transaction reads the newest versions committed before its
    /// snapshot timestamp, and of two concurrent writers of a record only the first to commit
    /// does (first-committer-wins).
    Snapshot,
}

impl Isolation {
    pub const ALL: [Isolation; 2] = [Isolation::Serializable, Isolation::Snapshot];

    pub fn name(self) -> &'static str {
        match self {
            Isolation::Serializable => "serializable",
            Isolation::Snapshot => "snapshot",
        }
    }

    pub fn parse(s: &str) -> Option<Isolation> {
        Self::ALL.into_iter().find(|i| i.name() == s)
    }
}

/// A range scan as it ran: the range and the `(key, version)` pairs it returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanObs {
    pub table: TableId,
    pub lo: u64,
    /// The end of the range the scan covered: its `hi`, or the last key returned when the
    /// scan stopped at its limit.
    pub hi: u64,
    /// `(key, version word)` of every key the scan met; a deleted key's version has
    /// `VERSION_ABSENT` (it was absent, at that version).
    pub seen: Vec<(u64, u64)>,
}

/// How a write changed a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    Update,
    Insert,
    Delete,
}

/// One operation of a recorded transaction, as observed: reads carry the version word and
/// the tag and check of the payload actually returned; writes the version installed and
/// the attempt's tag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HistOp {
    Read {
        table: TableId,
        key: u64,
        version: u64,
        tag: u64,
        intact: bool,
    },
    Write {
        table: TableId,
        key: u64,
        version: u64,
        kind: WriteKind,
    },
    Scan(ScanObs),
}

pub const FORMAT: &str = "atoll-history";
/// Version 3 added each attempt's snapshot and commit timestamps (snapshot isolation) and
/// the run's isolation level in the header line; version 4 vector snapshots (`vector`,
/// `slot`: NAM-DB's timestamp vector); version 5 attempts lost in flight (status `lost`,
/// [`TxnRecord::lost`]).
pub const FORMAT_VERSION: u64 = 5;
/// The oldest version this reader still reads: version 2 is version 3 without timestamps
/// (both absent) and without an isolation level (every protocol then was serializable).
pub const FORMAT_VERSION_OLDEST_READ: u64 = 2;

/// One attempt of a transaction, committed or aborted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnRecord {
    /// The attempt's timestamp (WAITDIE's retries keep their first one).
    pub id: u64,
    /// The attempt's tag: unique in the run, written into every payload it installs.
    pub tag: u64,
    /// 1 for the first attempt of a transaction, then 2, 3, ... for its retries.
    pub attempt: u32,
    /// Cluster-wide co-routine index that ran it.
    pub coord: u32,
    /// `None` when committed (or lost), else the abort reason.
    pub aborted: Option<String>,
    /// An attempt cut off in flight (format 5, status `lost`): its coordinator crashed, or
    /// the run stopped, between its start and its end, so its outcome and what it read and
    /// wrote are unknown (`ops` is empty, `aborted` is `None`). The checker takes what
    /// committed transactions read of its writes as its writes ([`TxnRecord::lost`] in
    /// `atoll_check`'s docs); every other unknown writer stays an anomaly.
    pub lost: bool,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The snapshot a snapshot-isolation attempt read at (`Txn::snapshot_ts` in `atoll_txn`);
    /// `None` for serializable protocols.
    pub snapshot: Option<u64>,
    /// Its commit timestamp (`Txn::commit_ts` in `atoll_txn`); `None` for serializable
    /// protocols, and for a snapshot-isolation attempt that aborted before taking one or
    /// committed read-only without one. With a vector snapshot, the timestamp within
    /// `commit_slot`.
    pub commit: Option<u64>,
    /// A vector snapshot (NAM-DB's timestamp vector, format 4): per slot, the newest commit
    /// timestamp of that slot the attempt sees. `snapshot` is then unused.
    pub snapshot_vector: Option<Vec<u64>>,
    /// With a vector snapshot: the slot whose timestamps `commit` counts in.
    pub commit_slot: Option<u32>,
    pub ops: Vec<HistOp>,
}

/// How a history line names a write's kind (`u`, `i`, `d`).
pub fn kind_name(k: WriteKind) -> &'static str {
    match k {
        WriteKind::Update => "u",
        WriteKind::Insert => "i",
        WriteKind::Delete => "d",
    }
}

fn op_json(op: &HistOp) -> Value {
    match op {
        HistOp::Read {
            table,
            key,
            version,
            tag,
            intact,
        } => json!(["r", table.0, key, version, tag, *intact as u8]),
        HistOp::Write {
            table,
            key,
            version,
            kind,
        } => json!(["w", table.0, key, version, kind_name(*kind)]),
        HistOp::Scan(s) => json!(["s", s.table.0, s.lo, s.hi, s.seen]),
    }
}

/// A history file written while the run goes: workers hand over batches of records, which
/// are appended as JSON lines behind the header. The first write error is kept and reported
/// at the end; the records after it are dropped (the run itself goes on).
pub struct HistoryWriter {
    path: std::path::PathBuf,
    out: std::sync::Mutex<HistoryOut>,
}

struct HistoryOut {
    file: std::io::BufWriter<std::fs::File>,
    records: u64,
    error: Option<String>,
}

impl HistoryWriter {
    /// Creates (or truncates) `path` and writes the header line, which names the isolation
    /// level the run's protocol guarantees.
    pub fn create(path: &std::path::Path, isolation: Isolation) -> Result<Self, String> {
        use std::io::Write as _;
        let f = std::fs::File::create(path)
            .map_err(|e| format!("cannot create history file {}: {e}", path.display()))?;
        let mut file = std::io::BufWriter::new(f);
        writeln!(file, "{}", header_line(isolation))
            .map_err(|e| format!("cannot write history file {}: {e}", path.display()))?;
        Ok(HistoryWriter {
            path: path.to_path_buf(),
            out: std::sync::Mutex::new(HistoryOut {
                file,
                records: 0,
                error: None,
            }),
        })
    }

    /// Appends `batch` (emptied) to the file.
    pub fn append(&self, batch: &mut Vec<TxnRecord>) {
        use std::io::Write as _;
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        if out.error.is_none() {
            for r in batch.iter() {
                if let Err(e) = writeln!(out.file, "{}", r.to_json_line()) {
                    out.error = Some(format!("writing history {}: {e}", self.path.display()));
                    break;
                }
                out.records += 1;
            }
        }
        batch.clear();
    }

    /// Flushes the file: the records written, or the first error met.
    pub fn finish(&self) -> Result<u64, String> {
        use std::io::Write as _;
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = &out.error {
            return Err(e.clone());
        }
        out.file
            .flush()
            .map_err(|e| format!("writing history {}: {e}", self.path.display()))?;
        Ok(out.records)
    }
}

/// The first line of a history file: the format, its version, and the isolation level the
/// run's protocol guarantees (what `atoll check-history` is asked to check, and which model
/// `.ci/adya-crosscheck` gives adya).
pub fn header_line(isolation: Isolation) -> String {
    json!({"format": FORMAT, "version": FORMAT_VERSION, "isolation": isolation.name()}).to_string()
}

/// What a history file's header line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub version: u64,
    /// The isolation level the run's protocol guarantees (version 2: serializable).
    pub isolation: Isolation,
}

impl TxnRecord {
    pub fn to_json_line(&self) -> String {
        self.to_json_value().to_string()
    }

    fn to_json_value(&self) -> Value {
        let ops: Vec<Value> = self.ops.iter().map(op_json).collect();
        let mut v = json!({
            "id": self.id,
            "tag": self.tag,
            "coord": self.coord,
            "attempt": self.attempt,
            "status": match (&self.aborted, self.lost) {
                (Some(_), _) => "aborted",
                (None, true) => "lost",
                (None, false) => "committed",
            },
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "ops": ops,
        });
        if let Some(r) = &self.aborted {
            v["reason"] = json!(r);
        }
        if let Some(s) = self.snapshot {
            v["snapshot"] = json!(s);
        }
        if let Some(c) = self.commit {
            v["commit"] = json!(c);
        }
        if let Some(vector) = &self.snapshot_vector {
            v["vector"] = json!(vector);
        }
        if let Some(slot) = self.commit_slot {
            v["slot"] = json!(slot);
        }
        v
    }

    fn from_json(line_no: usize, v: &Value) -> Result<TxnRecord, HistoryParseError> {
        let bad = |what: &str| HistoryParseError::new(line_no, what);
        let u = |k: &str| {
            v.get(k)
                .and_then(Value::as_u64)
                .ok_or_else(|| bad(&format!("field '{k}' missing or not a whole number")))
        };
        // Timestamps are absent for serializable protocols (and in version-2 files).
        let optional = |k: &str| match v.get(k) {
            None => Ok(None),
            Some(x) => x
                .as_u64()
                .map(Some)
                .ok_or_else(|| bad(&format!("field '{k}' is not a whole number: {x}"))),
        };
        let (aborted, lost) = status_of(v).map_err(|e| bad(&e))?;
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
                .filter(|a| !a.is_empty())
                .ok_or_else(|| bad(&format!("op {i} is not a non-empty list")))?;
            let shape = |n: usize, what: &str| {
                if a.len() == n {
                    Ok(())
                } else {
                    Err(bad(&format!("op {i} is not {what}")))
                }
            };
            let n = |j: usize| {
                a[j].as_u64()
                    .ok_or_else(|| bad(&format!("op {i}: element {j} is not a whole number")))
            };
            let table = |j: usize| -> Result<TableId, HistoryParseError> {
                Ok(TableId(u16::try_from(n(j)?).map_err(|_| {
                    bad(&format!("op {i}: table id out of range"))
                })?))
            };
            ops.push(match a[0].as_str() {
                Some("r") => {
                    shape(6, "[\"r\", table, key, version, tag, intact]")?;
                    HistOp::Read {
                        table: table(1)?,
                        key: n(2)?,
                        version: n(3)?,
                        tag: n(4)?,
                        intact: n(5)? != 0,
                    }
                }
                Some("w") => {
                    shape(5, "[\"w\", table, key, version, kind]")?;
                    let kind = match a[4].as_str() {
                        Some("u") => WriteKind::Update,
                        Some("i") => WriteKind::Insert,
                        Some("d") => WriteKind::Delete,
                        other => {
                            return Err(bad(&format!(
                                "op {i}: write kind {other:?} is not \"u\", \"i\" or \"d\""
                            )))
                        }
                    };
                    HistOp::Write {
                        table: table(1)?,
                        key: n(2)?,
                        version: n(3)?,
                        kind,
                    }
                }
                Some("s") => {
                    shape(5, "[\"s\", table, lo, hi, [[key, version], ...]]")?;
                    let seen = scan_results(&a[4]).ok_or_else(|| {
                        bad(&format!(
                            "op {i}: scan results are not a list of [key, version]"
                        ))
                    })?;
                    let (lo, hi) = (n(2)?, n(3)?);
                    if lo > hi {
                        return Err(bad(&format!(
                            "op {i}: a scan from key {lo} down to {hi} (expected lo <= hi)"
                        )));
                    }
                    HistOp::Scan(ScanObs {
                        table: table(1)?,
                        lo,
                        hi,
                        seen,
                    })
                }
                other => {
                    return Err(bad(&format!(
                        "op {i}: kind {other:?} is not \"r\", \"w\" or \"s\""
                    )))
                }
            });
        }
        if lost && !ops.is_empty() {
            return Err(bad(&format!(
                "a lost attempt (status \"lost\") records no ops, but this one has {}",
                ops.len()
            )));
        }
        Ok(TxnRecord {
            id: u("id")?,
            tag: u("tag")?,
            coord: u32::try_from(u("coord")?).map_err(|_| bad("coord out of range"))?,
            attempt: u32::try_from(u("attempt")?).map_err(|_| bad("attempt out of range"))?,
            aborted,
            start_ns: u("start_ns")?,
            end_ns: u("end_ns")?,
            snapshot: optional("snapshot")?,
            commit: optional("commit")?,
            snapshot_vector: match v.get("vector") {
                None => None,
                Some(x) => Some(
                    x.as_array()
                        .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<_>>>())
                        .ok_or_else(|| {
                            bad(&format!(
                                "field 'vector' is not a list of whole numbers: {x}"
                            ))
                        })?,
                ),
            },
            commit_slot: optional("slot")?
                .map(|s| u32::try_from(s).map_err(|_| bad(&format!("slot {s} out of range"))))
                .transpose()?,
            lost,
            ops,
        })
    }
}

/// A history line's outcome: the abort reason (`None` when committed or lost) and whether
/// the attempt was lost in flight.
fn status_of(v: &Value) -> Result<(Option<String>, bool), String> {
    Ok(match v.get("status").and_then(Value::as_str) {
        Some("committed") => (None, false),
        Some("aborted") => (
            Some(
                v.get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown")
                    .to_string(),
            ),
            false,
        ),
        Some("lost") => (None, true),
        other => {
            return Err(format!(
                "status {other:?} is not \"committed\", \"aborted\" or \"lost\""
            ))
        }
    })
}

/// Records as the objects of history lines, for a node's summary: the same form and the
/// same validation as a history file's.
pub mod records {
    use super::TxnRecord;
    use serde::{Deserialize, Deserializer, Serializer};
    use serde_json::Value;

    pub fn serialize<S: Serializer>(h: &[TxnRecord], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(h.iter().map(TxnRecord::to_json_value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<TxnRecord>, D::Error> {
        Vec::<Value>::deserialize(d)?
            .iter()
            .enumerate()
            .map(|(i, v)| TxnRecord::from_json(i + 1, v).map_err(serde::de::Error::custom))
            .collect()
    }
}

/// A scan op's results, `[[key, version], ...]`; `None` if they are not that.
fn scan_results(v: &Value) -> Option<Vec<(u64, u64)>> {
    v.as_array()?
        .iter()
        .map(|p| match p.as_array().map(Vec::as_slice) {
            Some([k, v]) => Some((k.as_u64()?, v.as_u64()?)),
            _ => None,
        })
        .collect()
}

/// A whole history file: the header line, then one line per attempt.
pub fn to_text(h: &[TxnRecord], isolation: Isolation) -> String {
    let mut text = String::with_capacity(h.len() * 160 + 64);
    text.push_str(&header_line(isolation));
    text.push('\n');
    for r in h {
        text.push_str(&r.to_json_line());
        text.push('\n');
    }
    text
}

/// A history file that does not parse: the line, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("history line {line}: {what}")]
pub struct HistoryParseError {
    /// 1-based.
    pub line: usize,
    pub what: String,
}

impl HistoryParseError {
    fn new(line: usize, what: impl Into<String>) -> Self {
        HistoryParseError {
            line,
            what: what.into(),
        }
    }
}

/// Parses a history written by `--history`: a header line naming the format and its
/// version, then one JSON object per attempt.
pub fn parse(text: &str) -> Result<Vec<TxnRecord>, HistoryParseError> {
    parse_reader(text.as_bytes())
}

/// [`parse`] line by line from a reader: only the typed records are kept, never the file's
/// text or its JSON values (a history file can be many gigabytes).
pub fn parse_reader(r: impl std::io::BufRead) -> Result<Vec<TxnRecord>, HistoryParseError> {
    parse_with_header(r).map(|(_, h)| h)
}

/// [`parse_reader`], with what the header line says.
pub fn parse_with_header(
    r: impl std::io::BufRead,
) -> Result<(Header, Vec<TxnRecord>), HistoryParseError> {
    parse_with_header_bounded(r, u64::MAX)
}

/// Bytes of memory a parsed record takes, with what a checker builds from it beside (each
/// op's entry in the writers' index and the dependency graph): [`CHECKED_BYTES_PER_OP`] per
/// op and per key a scan saw, on top of the record.
pub fn checked_bytes(r: &TxnRecord) -> u64 {
    let scanned: usize = r
        .ops
        .iter()
        .map(|o| match o {
            HistOp::Scan(s) => s.seen.len(),
            _ => 0,
        })
        .sum();
    std::mem::size_of::<TxnRecord>() as u64
        + (r.ops.len() + scanned) as u64 * CHECKED_BYTES_PER_OP
        + r.snapshot_vector.as_ref().map_or(0, |v| v.len() as u64 * 8)
        + r.aborted.as_ref().map_or(0, |a| a.len() as u64)
}

/// Bytes one op (or key a scan saw) takes once parsed and checked: its `HistOp` (48 bytes),
/// its place in the writers' index or the reads' lists, and its graph edges. Measured with
/// `atoll check-history` on YCSB, SmallBank and TPC-C histories (docs/checking.md), rounded
/// up.
pub const CHECKED_BYTES_PER_OP: u64 = 256;

/// The header line of a history (`None`: the file is empty).
fn parse_header(first: Option<(usize, String)>) -> Result<Option<Header>, HistoryParseError> {
    let readable =
        format!("this atoll reads versions {FORMAT_VERSION_OLDEST_READ} to {FORMAT_VERSION}");
    Ok(match first {
        None => None,
        Some((i, first)) => {
            let line = i + 1;
            let v: Value = serde_json::from_str(&first)
                .map_err(|e| HistoryParseError::new(line, format!("not JSON: {e}")))?;
            let (format, version) = (v.get("format"), v.get("version").and_then(Value::as_u64));
            if format.and_then(Value::as_str) != Some(FORMAT) {
                return Err(HistoryParseError::new(
                    line,
                    format!(
                        "not an {FORMAT} file (its first line must be like {})",
                        header_line(Isolation::Serializable)
                    ),
                ));
            }
            let version = match version {
                Some(v) if (FORMAT_VERSION_OLDEST_READ..=FORMAT_VERSION).contains(&v) => v,
                Some(found) => {
                    return Err(HistoryParseError::new(
                        line,
                        format!("format version {found}, {readable}"),
                    ))
                }
                None => {
                    let what = "no format version (\"version\" missing or not a whole number)";
                    return Err(HistoryParseError::new(line, format!("{what}, {readable}")));
                }
            };
            let isolation = match v.get("isolation") {
                None => Isolation::Serializable,
                Some(x) => x.as_str().and_then(Isolation::parse).ok_or_else(|| {
                    HistoryParseError::new(
                        line,
                        format!(
                            "isolation {x} is not one of {}",
                            Isolation::ALL
                                .map(|i| format!("\"{}\"", i.name()))
                                .join(", ")
                        ),
                    )
                })?,
            };
            Some(Header { version, isolation })
        }
    })
}

/// A line may take at most this share of the memory bound (its text, then its JSON value).
const LINE_BYTES_PER_MEMORY_BYTE: u64 = 8;

/// [`parse_with_header`], refusing (at the line it reached) a history whose records would
/// take more than `memory_max_bytes` to check ([`checked_bytes`]): a pipe has no size to
/// judge up front, and a crafted line can hold far more ops than its bytes suggest.
pub fn parse_with_header_bounded(
    r: impl std::io::BufRead,
    memory_max_bytes: u64,
) -> Result<(Header, Vec<TxnRecord>), HistoryParseError> {
    let mut out = Vec::new();
    let mut checked = 0u64;
    // A line is read whole before it is parsed: bounded too, so an endless line (a stream
    // of zeroes) is refused rather than buffered until memory runs out. Its JSON value
    // takes a few times its text.
    use std::io::{BufRead as _, Read as _};
    let line_bytes_max = (memory_max_bytes / LINE_BYTES_PER_MEMORY_BYTE).max(1);
    let mut r = r;
    let mut n = 0usize;
    let mut lines = std::iter::from_fn(move || {
        let mut buf = Vec::new();
        let i = n;
        n += 1;
        match (&mut r).take(line_bytes_max).read_until(b'\n', &mut buf) {
            Ok(0) => None,
            Ok(_) if buf.last() != Some(&b'\n') && buf.len() as u64 == line_bytes_max => {
                Some(Err(HistoryParseError::new(
                    i + 1,
                    format!("a line over {line_bytes_max} bytes, the bound for the memory it may take to check: not a history line"),
                )))
            }
            Ok(_) => Some(
                String::from_utf8(buf)
                    .map(|l| (i, l))
                    .map_err(|_| HistoryParseError::new(i + 1, "not UTF-8 text".to_string())),
            ),
            Err(e) => Some(Err(HistoryParseError::new(i + 1, e.to_string()))),
        }
    })
    .filter(|l| !matches!(l, Ok((_, t)) if t.trim().is_empty()));
    let Some(header) = parse_header(lines.next().transpose()?)? else {
        return Ok((
            Header {
                version: FORMAT_VERSION,
                isolation: Isolation::Serializable,
            },
            out,
        ));
    };
    for l in lines {
        let (i, line) = l?;
        let v: Value = serde_json::from_str(&line)
            .map_err(|e| HistoryParseError::new(i + 1, format!("not JSON: {e}")))?;
        let rec = TxnRecord::from_json(i + 1, &v)?;
        checked = checked.saturating_add(checked_bytes(&rec));
        if checked > memory_max_bytes {
            return Err(HistoryParseError::new(
                i + 1,
                format!(
                    "checking the {} transactions up to here would take over {memory_max_bytes} bytes of memory, the bound: check a shorter history",
                    out.len() + 1
                ),
            ));
        }
        out.push(rec);
    }
    Ok((header, out))
}
