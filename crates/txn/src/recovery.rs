//! Membership and the recovery of a crashed node, for a partitioned run whose partitions
//! have backups ([`crate::log_ring`]).
//!
//! Every node holds a [`Membership`]: the configuration's epoch and the nodes dead in it.
//! The live node of lowest id (the manager) pings the others and each of them pings the
//! manager ([`watch`]); a ping that fails names a dead node. The manager (the next one, if
//! the manager died) then installs the next configuration at every survivor, each answering
//! once it holds it, and recovers the dead node's transactions from the survivors' log
//! rings: it gathers what each ring of the dead node's coordinators holds unapplied
//! ([`LogCleaner::doubts`]) and decides each coordinator's last logged transaction
//! ([`decide`]): committed if a backup applied it (a later writer of one of its keys saw it
//! installed) or if its record is whole on every live backup of every partition it wrote
//! (the coordinator passed its log, so it may have made writes visible), else aborted (no
//! write of it was visible anywhere: a write-back only follows a whole log). Every earlier
//! record of the coordinator committed (it logs a transaction only after the last one's
//! write-back). Each survivor then settles the decisions ([`RecoveryRequest::Settle`]): its
//! cleaner applies the committed records and voids the aborted ones; as a primary it
//! finishes the write-back of each committed transaction (under MVCC first keeping the
//! current version in an old slot, as far as the dead writer had not), takes back each
//! aborted one's inserts, and releases every lock a dead coordinator held (lock words
//! carry the owner's timestamp, whose low bits name its coordinator), taking back the
//! inserts an attempt placed before a log it never wrote.
//!
//! A node found dead may only have frozen and come back: the recoverer fences it first
//! ([`Membership::fences`]: every node refuses ops from nodes dead in its configuration,
//! and answers coming back from them, and a refused node stops), then waits out the lease
//! the node may hold (each answer of its own recoverer keeps it, [`Membership::lease_holds`];
//! a transaction that wrote nothing commits only within it) before the configuration goes
//! anywhere else.
//!
//! Until a dead node's partition fails over to a backup (TODO(#41)), it is not served:
//! survivors' transactions that touch it abort `node_failed` and retry; the others go on,
//! their log going to the partitions' live backups only.

use crate::log_ring::{
    LogCleaner, RingDoubt, LOG_ENTRY_HEAD_WORDS, LOG_RECORD_HEAD_WORDS, LOG_RECORD_TAIL_WORDS,
    RECORD_SET_TS_WORD, RECORD_TAG_WORD,
};
use crate::msg::{DecodeError, FamilyId, Reply, WordReader, WordWriter, WriteBack};
use crate::wire_tags;
use atoll_fabric::{Endpoint, NodeId, ReplyTo};
use atoll_storage::layout::{
    HEADER_WORDS, H_KEY, H_LOCK, H_VERSION, P_TAG, VERSION_ABSENT, VERSION_KEY_MASK,
};
use atoll_storage::slots::install_steps_due;
use atoll_storage::{Catalog, TableId};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The recovery's family id on the wire (served by [`RecoveryParticipant`]).
pub const FAMILY: FamilyId = FamilyId(7);

/// How often the manager pings every node and every node pings the manager: with the
/// fabric's op timeout, what bounds how long a crash goes unnoticed.
pub const HEARTBEAT_NS: u64 = 100_000;
/// Rounds of a manager's recovery that may each find another node dead (one per node).
const RECOVERY_ROUNDS_MAX: usize = 64;

/// A deliberately broken recovery, for the checks to catch: a test's protocol asks for one
/// ([`crate::Protocol::recovery_defect`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Defect {
    /// Decides every dead coordinator's last logged transaction aborted, committed or not.
    AbortsEveryLastRecord,
    /// Leaves the locks dead coordinators held where they are.
    KeepsDeadLocks,
    /// Neither fences a node declared dead nor holds nodes to their leases: a frozen node
    /// that comes back after its recovery goes on as if still in the configuration.
    NoFencing,
    /// Finishes a dead coordinator's committed MVCC update without keeping the version it
    /// replaces in an old slot (where the dead writer had not).
    DropsReplacedVersions,
}

/// What a primary's settling does beside finishing writes ([`RecoveryRequest::Settle`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settling {
    /// Release every lock the dead coordinators held.
    pub release_locks: bool,
    /// Keep in an old slot the version a finished multi-version write replaces.
    pub keep_versions: bool,
}

/// A node's view of the cluster's configuration.
pub struct Membership {
    /// Coordinators each node runs (a timestamp's issuer names its node by it).
    coordinators_per_node: u32,
    epoch: AtomicU64,
    dead: Vec<AtomicBool>,
    any_dead: AtomicBool,
    /// Nodes an op of this node (or one a peer reported) timed out on: declared dead by
    /// their recoverer at its next heartbeat, since an op given up may never be performed
    /// and its requester cannot tell ([`Membership::suspect`]).
    suspected: Vec<AtomicBool>,
    /// Installs are serialized (the node's workers serve configurations concurrently).
    install: Mutex<()>,
    /// Until when (the node's clock) it may still answer a transaction that wrote nothing:
    /// its lease, renewed by each heartbeat its recoverer answers ([`watch`]).
    lease_until_ns: AtomicU64,
    /// Whether it refuses ops from nodes dead in its configuration and holds itself to
    /// its lease (false only for a broken variant, [`Defect::NoFencing`]).
    fencing: AtomicBool,
}

impl Membership {
    /// Configuration 0 of `nodes` nodes, all alive, each running `coordinators_per_node`
    /// coordinators.
    pub fn new(nodes: u16, coordinators_per_node: u32) -> Self {
        Membership {
            coordinators_per_node: coordinators_per_node.max(1),
            epoch: AtomicU64::new(0),
            dead: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            any_dead: AtomicBool::new(false),
            suspected: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            install: Mutex::new(()),
            lease_until_ns: AtomicU64::new(u64::MAX),
            fencing: AtomicBool::new(true),
        }
    }

    /// Marks `n` suspected: an op to it failed, so its recoverer is to declare it dead (a
    /// node that only froze and came back is fenced all the same, and stops).
    pub fn suspect(&self, n: NodeId) {
        if let Some(s) = self.suspected.get(n.0 as usize) {
            s.store(true, Ordering::Release);
        }
    }

    /// A node suspected and not dead yet, if any.
    fn suspect_pending(&self) -> Option<NodeId> {
        (0..self.nodes())
            .map(NodeId)
            .find(|&n| self.suspected[n.0 as usize].load(Ordering::Acquire) && !self.is_dead(n))
    }

    /// The node that recovers `n` if it dies: the live one of lowest id but `n`.
    fn recoverer_of(&self, n: NodeId) -> Option<NodeId> {
        self.recoverer_skipping(n, None)
    }

    /// As [`Membership::recoverer_of`], also passing over `skipped` (a node found failed
    /// and not declared dead yet).
    fn recoverer_skipping(&self, n: NodeId, skipped: Option<NodeId>) -> Option<NodeId> {
        (0..self.nodes())
            .map(NodeId)
            .find(|&m| m != n && !self.is_dead(m) && Some(m) != skipped)
    }

    /// Whether this node refuses every op from `n` ([`atoll_fabric::RpcHandler::refuses`]):
    /// `n` is dead in the configuration it holds.
    #[inline]
    pub fn fences(&self, n: NodeId) -> bool {
        self.is_dead(n) && self.fencing.load(Ordering::Relaxed)
    }

    /// Whether the node's lease holds at `now_ns`: if not, the node may have been declared
    /// dead and recovered without it (it froze), so what it reads may be stale.
    #[inline]
    pub fn lease_holds(&self, now_ns: u64) -> bool {
        now_ns < self.lease_until_ns.load(Ordering::Acquire)
            || !self.fencing.load(Ordering::Relaxed)
    }

    /// The lease holds until `until_ns` (never shortened).
    pub fn renew_lease(&self, until_ns: u64) {
        self.lease_until_ns.fetch_max(until_ns, Ordering::AcqRel);
    }

    /// Starts the lease at `until_ns`, the node's first heartbeat before it; with
    /// `fencing` false (a broken variant) neither fence nor lease holds.
    fn start_lease(&self, until_ns: u64, fencing: bool) {
        self.fencing.store(fencing, Ordering::Relaxed);
        self.lease_until_ns.store(until_ns, Ordering::Release);
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub fn nodes(&self) -> u16 {
        self.dead.len() as u16
    }

    /// Whether `n` is dead in the configuration this node holds.
    #[inline]
    pub fn is_dead(&self, n: NodeId) -> bool {
        self.any_dead.load(Ordering::Acquire)
            && self
                .dead
                .get(n.0 as usize)
                .is_some_and(|d| d.load(Ordering::Acquire))
    }

    /// Whether the coordinator that issued timestamp `ts` ran on a dead node.
    #[inline]
    pub fn issuer_dead(&self, ts: u64) -> bool {
        if !self.any_dead.load(Ordering::Acquire) {
            return false;
        }
        let Some(t) = crate::Timestamp::from_word(ts) else {
            return false;
        };
        let node = t.issuer() / self.coordinators_per_node as u64;
        node < self.nodes() as u64 && self.is_dead(NodeId(node as u16))
    }

    pub fn dead(&self) -> Vec<NodeId> {
        (0..self.nodes())
            .map(NodeId)
            .filter(|&n| self.is_dead(n))
            .collect()
    }

    pub fn live(&self) -> Vec<NodeId> {
        (0..self.nodes())
            .map(NodeId)
            .filter(|&n| !self.is_dead(n))
            .collect()
    }

    /// The node that watches the others: the live one of lowest id.
    pub fn manager(&self) -> Option<NodeId> {
        (0..self.nodes()).map(NodeId).find(|&n| !self.is_dead(n))
    }

    /// Installs configuration `epoch` whose dead nodes are `dead`, if it is newer than the
    /// one held (a node once dead stays dead: a later configuration only adds to them);
    /// whether it did. Names outside the cluster are refused by the caller.
    pub fn install(&self, epoch: u64, dead: &[NodeId]) -> bool {
        let _one = self.install.lock().expect("no poisoned membership");
        if epoch <= self.epoch() {
            return false;
        }
        for n in dead {
            if let Some(d) = self.dead.get(n.0 as usize) {
                d.store(true, Ordering::Release);
            }
        }
        if !dead.is_empty() {
            self.any_dead.store(true, Ordering::Release);
        }
        self.epoch.store(epoch, Ordering::Release);
        true
    }
}

wire_tags! {
    /// The first word of a recovery request's body.
    pub enum RecoveryTag ("recovery request") {
        Ping = 1,
        Config = 2,
        Doubts = 3,
        Settle = 4,
        Suspect = 5,
    }
}

/// A decided transaction of a dead coordinator, as a survivor settles it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub coord: u32,
    pub tag: u64,
    pub committed: bool,
    /// Its log record, for primaries to finish or take back its writes (empty for an
    /// earlier record of the coordinator, whose write-back it finished itself).
    pub record: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecoveryRequest {
    /// Answered with the epoch the node holds.
    Ping { epoch: u64 },
    /// Install configuration `epoch`, whose dead nodes are `dead`.
    Config { epoch: u64, dead: Vec<u16> },
    /// The rings of `node`'s coordinators as this node's cleaner holds them.
    Doubts { node: u16 },
    /// An op to `node` failed at the sender: as its recoverer, declare it dead.
    Suspect { node: u16 },
    /// Settle dead `node`'s transactions as decided, doing beside it what `settling` asks
    /// (every part of it true but for a broken variant).
    Settle {
        node: u16,
        settling: Settling,
        decisions: Vec<Decision>,
    },
}

impl RecoveryRequest {
    pub fn encode(&self, e: &mut WordWriter<'_>) {
        match self {
            RecoveryRequest::Ping { epoch } => {
                e.tag(RecoveryTag::Ping);
                e.w(*epoch);
            }
            RecoveryRequest::Config { epoch, dead } => {
                e.tag(RecoveryTag::Config);
                e.w(*epoch);
                e.w(dead.len() as u64);
                for &n in dead {
                    e.w(n as u64);
                }
            }
            RecoveryRequest::Doubts { node } => {
                e.tag(RecoveryTag::Doubts);
                e.w(*node as u64);
            }
            RecoveryRequest::Suspect { node } => {
                e.tag(RecoveryTag::Suspect);
                e.w(*node as u64);
            }
            RecoveryRequest::Settle {
                node,
                settling,
                decisions,
            } => {
                e.tag(RecoveryTag::Settle);
                e.w(*node as u64);
                e.w(settling.release_locks as u64);
                e.w(settling.keep_versions as u64);
                e.w(decisions.len() as u64);
                for d in decisions {
                    e.w(d.coord as u64);
                    e.w(d.tag);
                    e.w(d.committed as u64);
                    e.words(&d.record);
                }
            }
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        crate::msg::family_request(FAMILY, |e| self.encode(e))
    }

    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut d = WordReader::new(body, "recovery request");
        let node = |d: &mut WordReader<'_>| -> Result<u16, DecodeError> {
            let v = d.w()?;
            u16::try_from(v).map_err(|_| DecodeError(format!("node {v} out of range")))
        };
        let r = match RecoveryTag::try_from(d.w()?)? {
            RecoveryTag::Ping => RecoveryRequest::Ping { epoch: d.w()? },
            RecoveryTag::Config => RecoveryRequest::Config {
                epoch: d.w()?,
                dead: d.list(|d| node(d))?,
            },
            RecoveryTag::Doubts => RecoveryRequest::Doubts {
                node: node(&mut d)?,
            },
            RecoveryTag::Suspect => RecoveryRequest::Suspect {
                node: node(&mut d)?,
            },
            RecoveryTag::Settle => RecoveryRequest::Settle {
                node: node(&mut d)?,
                settling: Settling {
                    release_locks: d.bool()?,
                    keep_versions: d.bool()?,
                },
                decisions: d.list(|d| {
                    Ok(Decision {
                        coord: d.u32()?,
                        tag: d.w()?,
                        committed: d.bool()?,
                        record: d.word_vec()?,
                    })
                })?,
            },
        };
        d.done()?;
        Ok(r)
    }
}

/// What a survivor did settling a dead node's transactions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// As a backup: records its cleaner applied and voided.
    pub records_applied: u64,
    pub records_voided: u64,
    /// As a primary: writes it finished for committed transactions, inserts it took back,
    /// locks of dead coordinators it released.
    pub writes_finished: u64,
    pub inserts_undone: u64,
    pub locks_released: u64,
    /// Records whose family words of the dead node's transactions it took back
    /// ([`crate::knobs::FamilyConfig::settle_dead_node`]: WAITDIE's waiter counters).
    pub family_cleared: u64,
    /// Entries it could not settle as logged (each a failed recovery check).
    pub problems: u64,
}

fn encode_doubts(doubts: &[RingDoubt]) -> Reply {
    crate::msg::family_reply(FAMILY, |e| {
        e.w(doubts.len() as u64);
        for r in doubts {
            e.w(r.ring as u64);
            e.w(r.applied_tag);
            e.words(&r.applied);
            e.w(r.unapplied.len() as u64);
            for u in &r.unapplied {
                e.words(u);
            }
        }
    })
}

fn decode_doubts(body: &[u8]) -> Result<Vec<RingDoubt>, DecodeError> {
    let mut d = WordReader::new(body, "recovery doubts");
    let r = d.list(|d| {
        Ok(RingDoubt {
            ring: d.u32()?,
            applied_tag: d.w()?,
            applied: d.word_vec()?,
            unapplied: d.list(|d| d.word_vec())?,
        })
    })?;
    d.done()?;
    Ok(r)
}

fn encode_settled(s: &Settled) -> Reply {
    crate::msg::family_reply(FAMILY, |e| {
        for w in [
            s.records_applied,
            s.records_voided,
            s.writes_finished,
            s.inserts_undone,
            s.locks_released,
            s.family_cleared,
            s.problems,
        ] {
            e.w(w);
        }
    })
}

fn decode_settled(body: &[u8]) -> Result<Settled, DecodeError> {
    let mut d = WordReader::new(body, "recovery settled");
    let s = Settled {
        records_applied: d.w()?,
        records_voided: d.w()?,
        writes_finished: d.w()?,
        inserts_undone: d.w()?,
        locks_released: d.w()?,
        family_cleared: d.w()?,
        problems: d.w()?,
    };
    d.done()?;
    Ok(s)
}

/// One entry of a whole log record: what (table, access, partition), key, version, payload.
struct LoggedEntry<'a> {
    table: TableId,
    access: crate::Access,
    partition: NodeId,
    key: u64,
    /// The key's version after the write, and the whole version word it was logged as.
    version: u64,
    version_word: u64,
    payload: &'a [u64],
}

/// The entries of whole log record `rec` (none past its length).
fn logged_entries(rec: &[u64]) -> Vec<LoggedEntry<'_>> {
    let mut out = Vec::new();
    if rec.len() < (LOG_RECORD_HEAD_WORDS + LOG_RECORD_TAIL_WORDS) as usize {
        return out;
    }
    let end = rec.len() - LOG_RECORD_TAIL_WORDS as usize;
    let mut at = LOG_RECORD_HEAD_WORDS as usize;
    for _ in 0..rec[2] {
        let p = at + LOG_ENTRY_HEAD_WORDS as usize;
        if p > end || p + rec[at + 3] as usize > end {
            break;
        }
        let len = rec[at + 3] as usize;
        if let Some((table, access, partition)) = crate::log_ring::what_parts(rec[at]) {
            out.push(LoggedEntry {
                table,
                access,
                partition,
                key: rec[at + 1],
                version: rec[at + 2] & VERSION_KEY_MASK,
                version_word: rec[at + 2],
                payload: &rec[p..p + len],
            });
        }
        at = p + len;
    }
    out
}

/// The backups a record of these entries went to: every backup of every partition written,
/// as [`crate::stages::log_targets`] chooses them.
pub fn record_targets(catalog: &Catalog, backups: u16, rec: &[u64]) -> Vec<NodeId> {
    let topo = catalog.topology();
    let mut nodes: Vec<NodeId> = Vec::new();
    for e in logged_entries(rec) {
        for b in 0..backups {
            let n = topo.partition_backup(e.partition, b);
            if !nodes.contains(&n) {
                nodes.push(n);
            }
        }
    }
    nodes
}

/// The decisions on dead coordinators `coords`' transactions from what the survivors'
/// rings hold (`doubts`: each survivor's rings, a ring's index being its coordinator's id):
/// per coordinator, every unapplied record older than its last logged transaction
/// committed, and that last one committed if any backup applied it or its record is whole
/// on every live one of `targets(record)`. A coordinator no ring holds anything of gets no
/// decision (it logged nothing the survivors hold).
pub fn decide(
    doubts: &[(NodeId, Vec<RingDoubt>)],
    coords: std::ops::Range<u32>,
    targets: impl Fn(&[u64]) -> Vec<NodeId>,
    dead: impl Fn(NodeId) -> bool,
) -> Vec<Decision> {
    let mut out = Vec::new();
    for c in coords {
        let rings: Vec<(NodeId, &RingDoubt)> = doubts
            .iter()
            .flat_map(|(n, rs)| rs.iter().filter(|r| r.ring == c).map(move |r| (*n, r)))
            .collect();
        let applied_max = rings.iter().map(|(_, r)| r.applied_tag).max().unwrap_or(0);
        let unapplied_max = rings
            .iter()
            .flat_map(|(_, r)| r.unapplied.iter().map(|u| u[RECORD_TAG_WORD]))
            .max()
            .unwrap_or(0);
        let last = applied_max.max(unapplied_max);
        if last == 0 {
            continue;
        }
        let mut older: Vec<u64> = rings
            .iter()
            .flat_map(|(_, r)| r.unapplied.iter().map(|u| u[RECORD_TAG_WORD]))
            .filter(|&t| t < last)
            .collect();
        older.sort_unstable();
        older.dedup();
        out.extend(older.into_iter().map(|tag| Decision {
            coord: c,
            tag,
            committed: true,
            record: Vec::new(),
        }));
        let copy = |r: &RingDoubt| -> Option<Vec<u64>> {
            r.unapplied
                .iter()
                .find(|u| u[RECORD_TAG_WORD] == last)
                .cloned()
                .or_else(|| {
                    (r.applied_tag == last && !r.applied.is_empty()).then(|| r.applied.clone())
                })
        };
        let record = rings.iter().find_map(|(_, r)| copy(r)).unwrap_or_default();
        let committed = applied_max == last
            || targets(&record).into_iter().filter(|&t| !dead(t)).all(|t| {
                rings
                    .iter()
                    .any(|(n, r)| *n == t && r.unapplied.iter().any(|u| u[RECORD_TAG_WORD] == last))
            });
        out.push(Decision {
            coord: c,
            tag: last,
            committed,
            record,
        });
    }
    out
}

/// The recovery's participant on one node: answers pings, installs configurations, and
/// gathers and settles a dead node's transactions on its rings and records.
pub struct RecoveryParticipant {
    pub membership: Arc<Membership>,
    pub cleaner: Option<Arc<Mutex<LogCleaner>>>,
    pub cfg: Arc<crate::TxnConfig>,
}

impl RecoveryParticipant {
    /// The ring (and coordinator id) range of `node`'s coordinators.
    fn coords_of(&self, node: u16) -> std::ops::Range<u32> {
        let per = self.cfg.coordinators_per_node;
        node as u32 * per..(node as u32 + 1) * per
    }

    fn log<'l>(&self, local: &'l crate::handler::Local) -> &'l atoll_fabric::Region {
        let store = local.store();
        store
            .memory()
            .region(store.catalog.extra_region(crate::coord::LOG_EXTRA_REGION))
    }

    fn settle(
        &self,
        local: &crate::handler::Local,
        node: u16,
        settling: Settling,
        decisions: &[Decision],
    ) -> Settled {
        let mut s = Settled::default();
        let coords = self.coords_of(node);
        if let Some(cl) = &self.cleaner {
            let mut cl = cl.lock().expect("no poisoned cleaner");
            let outcome = |tag: u64| decisions.iter().find(|d| d.tag == tag).map(|d| d.committed);
            let before = cl.problems_seen();
            (s.records_applied, s.records_voided) =
                cl.settle(self.log(local), coords.clone(), outcome);
            s.problems += cl.problems_seen() - before;
        }
        settle_primary(local, coords, settling, decisions, &mut s);
        if settling.release_locks {
            s.family_cleared = self.cfg.family.settle_dead_node(
                local.store(),
                NodeId(node),
                self.cfg.coordinators_per_node,
            );
        }
        s
    }
}

/// A primary's part of settling a dead node's transactions: finishes the writes of the
/// committed ones its partition holds, takes back the aborted ones' inserts, then releases
/// every lock a coordinator in `coords` holds, taking back the inserts such a coordinator
/// placed in an attempt later than its last logged one (placed before a log never written).
pub fn settle_primary(
    local: &crate::handler::Local,
    coords: std::ops::Range<u32>,
    settling: Settling,
    decisions: &[Decision],
    s: &mut Settled,
) {
    let store = local.store();
    let me = store.node;
    for d in decisions.iter().filter(|d| !d.record.is_empty()) {
        let ts = d.record[0];
        let set_ts = d.record[RECORD_SET_TS_WORD];
        for e in logged_entries(&d.record)
            .into_iter()
            .filter(|e| e.partition == me)
        {
            if !local.valid_table(e.table) {
                s.problems += 1;
                continue;
            }
            let slot = store.find_slot(e.table, e.key);
            let Some(idx) = slot else {
                s.problems += 1;
                continue;
            };
            let (region, off) = local.record(e.table, idx);
            let v = region.load(off + H_VERSION as usize);
            let live = v & VERSION_ABSENT == 0;
            let kv = v & VERSION_KEY_MASK;
            let locked = region.load(off + H_LOCK as usize) == ts;
            use crate::Access;
            match (d.committed, e.access) {
                (true, Access::Update) => {
                    if live && locked && kv + 1 == e.version {
                        if settling.keep_versions {
                            keep_current_version(store, e.table, region, off, set_ts);
                        }
                        let wb = WriteBack {
                            ts,
                            release: true,
                            set_ts,
                            items: Vec::new(),
                        };
                        local.write_back_one(&wb, e.table, idx, e.payload);
                        s.writes_finished += 1;
                    }
                }
                (true, Access::Delete) => {
                    if live && locked && kv + 1 == e.version && store.delete(e.table, e.key).is_ok()
                    {
                        s.writes_finished += 1;
                    }
                }
                // A committed insert is placed already: its lock's release makes it visible.
                (true, Access::Insert) | (_, Access::Read) => {}
                (false, Access::Insert) => {
                    if live && locked && store.undo_insert(e.table, e.key, ts).is_ok() {
                        s.inserts_undone += 1;
                    }
                }
                // Nothing of an aborted transaction's updates or deletes was written.
                (false, Access::Update | Access::Delete) => {}
            }
        }
    }
    if settling.release_locks {
        release_dead_locks(local, coords, decisions, s);
    }
}

/// Before a dead coordinator's committed update of a multi-version record (MVCC) is
/// written: the steps of keeping the current version in an old slot that it had not done
/// (it may have stopped after any of them, [`install_steps_due`]).
fn keep_current_version(
    store: &atoll_storage::Store,
    t: TableId,
    region: &atoll_fabric::Region,
    off: usize,
    new_wts: u64,
) {
    let layout = store.catalog.layout(t);
    if layout.version_slots <= 1 {
        return;
    }
    let mut rec = vec![0u64; layout.record_words as usize];
    region.read_into(off, &mut rec);
    for (at, words) in install_steps_due(layout, &rec, new_wts) {
        region.write_from(off + at as usize, &words);
    }
}

/// Releases every lock a coordinator in `coords` holds on this primary, taking back the
/// inserts such a coordinator placed in an attempt later than its last logged one (placed
/// before a log never written).
fn release_dead_locks(
    local: &crate::handler::Local,
    coords: std::ops::Range<u32>,
    decisions: &[Decision],
    s: &mut Settled,
) {
    let store = local.store();
    // The last logged tag of each dead coordinator: an insert it placed later was never
    // logged.
    let last_logged = |c: u32| {
        decisions
            .iter()
            .filter(|d| d.coord == c)
            .map(|d| d.tag)
            .max()
            .unwrap_or(0)
    };
    for t in (0..store.catalog.table_count()).map(|t| TableId(t as u16)) {
        if store.region(t).len_words() == 0 || store.catalog.is_replicated(t) {
            continue;
        }
        for idx in 0..store.used_slots(t) {
            let (region, off) = local.record(t, idx);
            let lock = region.load(off + H_LOCK as usize);
            let Some(owner) = crate::Timestamp::from_word(lock) else {
                continue;
            };
            let c = owner.issuer() as u32;
            if !coords.contains(&c) || lock == crate::handler::LOCK_UNSTABLE {
                continue;
            }
            let v = region.load(off + H_VERSION as usize);
            let tag = region.load(off + (HEADER_WORDS + P_TAG) as usize);
            let placed_unlogged = v & VERSION_ABSENT == 0
                && crate::coord::tag_coord(tag) == Some(c)
                && tag > last_logged(c);
            if placed_unlogged {
                let key = region.load(off + H_KEY as usize);
                if store.undo_insert(t, key, lock).is_ok() {
                    s.inserts_undone += 1;
                    continue;
                }
            }
            crate::handler::Local::unlock(region, off, lock);
            s.locks_released += 1;
        }
    }
}

impl crate::handler::Participant for RecoveryParticipant {
    fn family(&self) -> FamilyId {
        FAMILY
    }

    fn serve(&self, local: &crate::handler::Local, _from: ReplyTo, body: &[u8]) -> Option<Reply> {
        let Ok(req) = RecoveryRequest::decode(body) else {
            return Some(Reply::BadRequest);
        };
        let nodes = self.membership.nodes();
        Some(match req {
            RecoveryRequest::Ping { .. } => Reply::Word {
                value: self.membership.epoch(),
            },
            RecoveryRequest::Config { epoch, dead } => {
                if dead.iter().any(|&n| n >= nodes) {
                    return Some(Reply::BadRequest);
                }
                let dead: Vec<NodeId> = dead.into_iter().map(NodeId).collect();
                self.membership.install(epoch, &dead);
                Reply::Ok
            }
            RecoveryRequest::Doubts { node } if node < nodes => {
                let doubts = match &self.cleaner {
                    Some(cl) => cl
                        .lock()
                        .expect("no poisoned cleaner")
                        .doubts(self.log(local), self.coords_of(node)),
                    None => Vec::new(),
                };
                encode_doubts(&doubts)
            }
            RecoveryRequest::Settle {
                node,
                settling,
                decisions,
            } if node < nodes => encode_settled(&self.settle(local, node, settling, &decisions)),
            RecoveryRequest::Suspect { node } if node < nodes => {
                self.membership.suspect(NodeId(node));
                Reply::Ok
            }
            RecoveryRequest::Doubts { .. }
            | RecoveryRequest::Settle { .. }
            | RecoveryRequest::Suspect { .. } => Reply::BadRequest,
        })
    }
}

/// What a node's watcher works with.
pub struct Watch {
    pub ep: Endpoint,
    pub membership: Arc<Membership>,
    pub catalog: Arc<Catalog>,
    pub cfg: Arc<crate::TxnConfig>,
    /// Whether the run is over at worker time `now_ns`.
    pub over: std::rc::Rc<dyn Fn(u64) -> bool>,
    /// Where a manager's recoveries report (the run's, shared).
    pub report: Arc<Mutex<Vec<crate::Recovered>>>,
    /// A broken recovery a test asked for.
    pub defect: Option<Defect>,
    /// How long a heartbeat's answer holds the node's lease, from when it was sent; a
    /// recoverer waits as long after fencing a dead node before it installs the next
    /// configuration anywhere else, so no lease the dead node holds outlives its old one.
    pub lease_ns: u64,
}

/// A node's watcher, until the run is over: the manager pings every live node each
/// [`HEARTBEAT_NS`], the others ping the manager; a dead node found is recovered by the
/// manager (the next live node of lowest id, if the manager itself died).
///
/// The node's lease is renewed by each answer of the node that would recover it (the live
/// node of lowest id but itself, [`Membership::recoverer_of`], not counting a manager it
/// found failed and whose recoverer has not declared it yet): that node answers only while
/// it does not hold this one dead, and it waits one lease after fencing it before it
/// installs a configuration without it anywhere else.
pub async fn watch(w: Watch) {
    let me = w.ep.node();
    w.membership.start_lease(
        w.ep.now_ns().saturating_add(w.lease_ns),
        w.defect != Some(Defect::NoFencing),
    );
    // The manager this node found failed, while its own recoverer may not have found it
    // yet, and until when its pings go to the next node instead (then to it again, in
    // case it only stalled).
    let mut gone: Option<(NodeId, u64)> = None;
    while !(w.over)(w.ep.now_ns()) {
        if let Some(s) = w.membership.suspect_pending() {
            // An op to it timed out here or at a peer: its recoverer declares it dead.
            match w.membership.recoverer_of(s) {
                Some(r) if r == me => {
                    recover(&w, s).await;
                    continue;
                }
                Some(r) => {
                    // Told again each heartbeat until it is declared; a recoverer that
                    // fails to answer is found dead below.
                    let _ =
                        w.ep.rpc(r, RecoveryRequest::Suspect { node: s.0 }.to_bytes())
                            .await;
                }
                None => return,
            }
        }
        let Some(manager) = w.membership.manager() else {
            return;
        };
        if gone.is_some_and(|(g, until_ns)| w.membership.is_dead(g) || w.ep.now_ns() >= until_ns) {
            gone = None;
        }
        let skipped = gone.map(|(g, _)| g);
        let recoverer = w.membership.recoverer_skipping(me, skipped);
        let peers: Vec<NodeId> = if manager == me {
            w.membership
                .live()
                .into_iter()
                .filter(|&n| n != me)
                .collect()
        } else if skipped == Some(manager) {
            recoverer.into_iter().collect()
        } else {
            vec![manager]
        };
        let mut found = None;
        for p in peers {
            if let Err(e) = ping(&w, p, Some(p) == recoverer).await {
                found = Some(e.node);
                break;
            }
        }
        if let Some(dead) = found {
            if w.membership.is_dead(dead) {
                continue;
            }
            // The manager recovers; if it is the one found dead, the next live node does.
            let next = (0..w.membership.nodes())
                .map(NodeId)
                .find(|&n| n != dead && !w.membership.is_dead(n));
            if next == Some(me) {
                recover(&w, dead).await;
            } else if dead == manager {
                // Its recoverer is to find it too; meanwhile that node's answers hold the
                // lease, as they will once it has recovered the manager.
                gone = Some((dead, w.ep.now_ns().saturating_add(2 * w.lease_ns)));
            }
            continue;
        }
        w.ep.sleep(HEARTBEAT_NS).await;
    }
}

/// Pings `peer` with the epoch held; when `renews` (`peer` is the node that would recover
/// this one) its answer holds the lease from the send.
async fn ping(w: &Watch, peer: NodeId, renews: bool) -> Result<(), atoll_fabric::OpError> {
    let ping = RecoveryRequest::Ping {
        epoch: w.membership.epoch(),
    };
    let sent_ns = w.ep.now_ns();
    w.ep.rpc(peer, ping.to_bytes()).await?;
    if renews {
        w.membership.renew_lease(sent_ns.saturating_add(w.lease_ns));
    }
    Ok(())
}

/// Sleeps `ns` while this node's lease is renewed by its recoverer's answers to a ping
/// each [`HEARTBEAT_NS`] (a recoverer waiting out a dead node's lease holds its own).
async fn sleep_renewing(w: &Watch, ns: u64) {
    let end_ns = w.ep.now_ns().saturating_add(ns);
    loop {
        let now_ns = w.ep.now_ns();
        if now_ns >= end_ns {
            return;
        }
        if let Some(r) = w.membership.recoverer_of(w.ep.node()) {
            // A recoverer that fails to answer is found dead by the heartbeats later.
            let _ = ping(w, r, true).await;
        }
        let left_ns = end_ns.saturating_sub(w.ep.now_ns());
        w.ep.sleep(left_ns.min(HEARTBEAT_NS)).await;
    }
}

/// The manager's recovery of `dead`: the next configuration installed at every survivor,
/// then the dead node's transactions decided and settled.
async fn recover(w: &Watch, dead: NodeId) {
    let detected_ns = w.ep.now_ns();
    let mut problems = Vec::new();
    let epoch = configure(w, dead).await;
    let configured_ns = w.ep.now_ns();
    let doubts = gather(w, dead, &mut problems).await;
    let per = w.cfg.coordinators_per_node;
    let coords = dead.0 as u32 * per..(dead.0 as u32 + 1) * per;
    let decisions = decide(
        &doubts,
        coords.clone(),
        |rec| record_targets(&w.catalog, w.cfg.log_replicas, rec),
        |n| w.membership.is_dead(n),
    );
    let mut decisions = decisions;
    if w.defect == Some(Defect::AbortsEveryLastRecord) {
        for c in coords.clone() {
            if let Some(d) = decisions
                .iter_mut()
                .filter(|d| d.coord == c)
                .max_by_key(|d| d.tag)
            {
                d.committed = false;
            }
        }
    }
    let settle = RecoveryRequest::Settle {
        node: dead.0,
        settling: Settling {
            release_locks: w.defect != Some(Defect::KeepsDeadLocks),
            keep_versions: w.defect != Some(Defect::DropsReplacedVersions),
        },
        decisions: decisions.clone(),
    };
    let settled = settle_all(w, &settle, &mut problems).await;
    if settled.problems > 0 {
        problems.push(format!(
            "{} log records or entries could not be settled as logged",
            settled.problems
        ));
    }
    let attempts = coords
        .map(|c| {
            let last = decisions
                .iter()
                .filter(|d| d.coord == c)
                .max_by_key(|d| d.tag)
                .map(|d| (d.tag, d.committed));
            (c, last)
        })
        .collect();
    let committed = decisions.iter().filter(|d| d.committed).count() as u32;
    let writes = decisions
        .iter()
        .filter(|d| d.committed && !d.record.is_empty())
        .map(|d| (d.coord, d.tag, history_writes(&d.record)))
        .collect();
    w.report
        .lock()
        .expect("no poisoned recovery reports")
        .push(crate::Recovered {
            node: dead,
            detected_ns,
            done_ns: w.ep.now_ns(),
            settled_ns: Some(w.ep.now_ns()),
            attempts,
            tids_committed: committed,
            tids_aborted: decisions.len() as u32 - committed,
            versions_removed: 0,
            problems,
            partition: Some(crate::PartitionRecovered {
                epoch,
                configured_ns,
                settled,
                writes,
            }),
        });
}

/// Fences `dead` here, waits out its lease, then installs the next configuration at every
/// survivor: its epoch.
async fn configure(w: &Watch, dead: NodeId) -> u64 {
    let mut dead_now = w.membership.dead();
    dead_now.push(dead);
    // Fenced here at once, so its heartbeats renew no lease from now on; the lease it
    // holds ends within `lease_ns`, before any other survivor takes the configuration
    // that recovers it (a node that froze may still answer a read-only transaction until
    // then, never after).
    let mut epoch = w.membership.epoch() + 1;
    w.membership.install(epoch, &dead_now);
    sleep_renewing(w, w.lease_ns).await;
    // Every survivor holds the configuration before any settles; one that fails to answer
    // is dead too, and a configuration without it goes out again.
    for round in 0..RECOVERY_ROUNDS_MAX {
        if round > 0 {
            epoch += 1;
        }
        w.membership.install(epoch, &dead_now);
        let config = RecoveryRequest::Config {
            epoch,
            dead: dead_now.iter().map(|n| n.0).collect(),
        };
        match send_all(w, &config.to_bytes()).await {
            Ok(_) => break,
            Err(also) => dead_now.push(also),
        }
    }
    epoch
}

/// The writes of whole log record `rec` as a history records an attempt's writes: each
/// key's version word after it (a delete's marked absent).
pub fn history_writes(rec: &[u64]) -> Vec<crate::HistOp> {
    logged_entries(rec)
        .into_iter()
        .filter_map(|e| {
            let kind = match e.access {
                crate::Access::Read => return None,
                crate::Access::Update => crate::WriteKind::Update,
                crate::Access::Insert => crate::WriteKind::Insert,
                crate::Access::Delete => crate::WriteKind::Delete,
            };
            Some(crate::HistOp::Write {
                table: e.table,
                key: e.key,
                version: match kind {
                    crate::WriteKind::Delete => e.version_word | VERSION_ABSENT,
                    _ => e.version_word,
                },
                kind,
            })
        })
        .collect()
}

/// What every survivor's rings hold of `dead`'s coordinators.
async fn gather(
    w: &Watch,
    dead: NodeId,
    problems: &mut Vec<String>,
) -> Vec<(NodeId, Vec<RingDoubt>)> {
    let doubts_req = RecoveryRequest::Doubts { node: dead.0 }.to_bytes();
    let mut doubts = Vec::new();
    match send_all(w, &doubts_req).await {
        Ok(replies) => {
            for (n, body) in replies {
                match family_body(&body).and_then(|b| decode_doubts(&b)) {
                    Ok(d) => doubts.push((n, d)),
                    Err(e) => problems.push(format!("node {}'s rings: {e}", n.0)),
                }
            }
        }
        Err(n) => problems.push(format!(
            "node {} failed while the recovery gathered its rings",
            n.0
        )),
    }
    doubts
}

/// Has every survivor settle `settle`: what they did, summed.
async fn settle_all(w: &Watch, settle: &RecoveryRequest, problems: &mut Vec<String>) -> Settled {
    let mut settled = Settled::default();
    match send_all(w, &settle.to_bytes()).await {
        Ok(replies) => {
            for (n, body) in replies {
                match family_body(&body).and_then(|b| decode_settled(&b)) {
                    Ok(s) => {
                        settled.records_applied += s.records_applied;
                        settled.records_voided += s.records_voided;
                        settled.writes_finished += s.writes_finished;
                        settled.inserts_undone += s.inserts_undone;
                        settled.locks_released += s.locks_released;
                        settled.family_cleared += s.family_cleared;
                        settled.problems += s.problems;
                    }
                    Err(e) => problems.push(format!("node {}'s settling: {e}", n.0)),
                }
            }
        }
        Err(n) => problems.push(format!("node {} failed while the recovery settled", n.0)),
    }
    settled
}

/// The body of a recovery family reply.
fn family_body(reply: &[u8]) -> Result<Vec<u8>, DecodeError> {
    match Reply::decode(reply)? {
        Reply::Family { family, body } if family == FAMILY => Ok(body),
        r => Err(DecodeError(format!("unexpected reply {r:?}"))),
    }
}

/// Sends `req` to every live node (this one included) at once: each one's reply, or the
/// first node found failed.
async fn send_all(w: &Watch, req: &[u8]) -> Result<Vec<(NodeId, Vec<u8>)>, NodeId> {
    let live = w.membership.live();
    let mut d = w.ep.doorbell_for(live.len());
    for &n in &live {
        d.rpc(n, req.to_vec());
    }
    let sent_ns = w.ep.now_ns();
    let res = d.submit().await.map_err(|e| e.node)?;
    // Its recoverer among those that answered: the lease holds from the send.
    if w.membership.recoverer_of(w.ep.node()).is_some() {
        w.membership.renew_lease(sent_ns.saturating_add(w.lease_ns));
    }
    Ok(live
        .iter()
        .enumerate()
        .map(|(j, &n)| (n, res.rpc(j).to_vec()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tag: u64, partition: u16) -> Vec<u64> {
        let what =
            crate::log_ring::entry_what(TableId(0), crate::Access::Update, NodeId(partition));
        let mut r = vec![5, 0, 1, 0, tag, 0, what, 9, 2, 1, 77];
        r[3] = r.len() as u64 + 1;
        r.push(0);
        r
    }

    fn ring(ring: u32, applied_tag: u64, unapplied: Vec<Vec<u64>>) -> RingDoubt {
        RingDoubt {
            ring,
            applied_tag,
            applied: Vec::new(),
            unapplied,
        }
    }

    #[test]
    fn recovery_commits_a_dead_coordinators_last_record_only_where_every_live_backup_holds_it() {
        // Coordinator 4 of dead node 2 wrote partition 0, backed up by nodes 1 and 3: its
        // last record (tag 12) reached node 1 only; its earlier one (tag 11) sits unapplied
        // on node 3 behind it.
        let targets = |_: &[u64]| vec![NodeId(1), NodeId(3)];
        let doubts = vec![
            (NodeId(1), vec![ring(4, 11, vec![rec(12, 0)])]),
            (NodeId(3), vec![ring(4, 10, vec![rec(11, 0)])]),
        ];
        let d = decide(&doubts, 4..6, targets, |n| n == NodeId(2));
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(
            (d[0].tag, d[0].committed),
            (11, true),
            "an earlier record committed"
        );
        assert_eq!(
            (d[1].tag, d[1].committed),
            (12, false),
            "not on every live backup"
        );
        assert_eq!(d[1].record, rec(12, 0));
        // Node 3 dead as well: every live backup holds it.
        let d = decide(&doubts[..1], 4..5, targets, |n| {
            n == NodeId(2) || n == NodeId(3)
        });
        assert_eq!((d[0].tag, d[0].committed), (12, true), "{d:?}");
    }

    #[test]
    fn recovery_commits_a_last_record_a_backup_applied_and_decides_nothing_for_a_silent_coordinator(
    ) {
        let targets = |_: &[u64]| vec![NodeId(1), NodeId(3)];
        let mut applied = ring(4, 12, vec![]);
        applied.applied = rec(12, 0);
        let doubts = vec![
            (NodeId(1), vec![applied]),
            (NodeId(3), vec![ring(4, 11, vec![])]),
        ];
        let d = decide(&doubts, 4..6, targets, |n| n == NodeId(2));
        assert_eq!(d.len(), 1, "coordinator 5 logged nothing: {d:?}");
        assert_eq!((d[0].tag, d[0].committed), (12, true));
        assert_eq!(
            d[0].record,
            rec(12, 0),
            "the applied copy is what primaries finish"
        );
    }

    #[test]
    fn recovery_requests_round_trip_and_their_truncations_are_refused() {
        let reqs = [
            RecoveryRequest::Ping { epoch: 3 },
            RecoveryRequest::Config {
                epoch: 4,
                dead: vec![1, 2],
            },
            RecoveryRequest::Doubts { node: 2 },
            RecoveryRequest::Suspect { node: 1 },
            RecoveryRequest::Settle {
                node: 2,
                settling: Settling {
                    release_locks: true,
                    keep_versions: false,
                },
                decisions: vec![Decision {
                    coord: 4,
                    tag: 12,
                    committed: true,
                    record: rec(12, 0),
                }],
            },
        ];
        for r in reqs {
            let b = r.to_bytes();
            let Ok(Some((FAMILY, body))) = crate::msg::split_family(&b) else {
                panic!("not a recovery request")
            };
            assert_eq!(RecoveryRequest::decode(body), Ok(r.clone()));
            for cut in (0..body.len()).step_by(8) {
                assert!(
                    RecoveryRequest::decode(&body[..cut]).is_err(),
                    "{r:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn membership_installs_only_newer_configurations_and_names_the_next_manager() {
        let m = Membership::new(4, 2);
        assert_eq!(m.manager(), Some(NodeId(0)));
        assert!(m.install(1, &[NodeId(0)]));
        assert!(!m.install(1, &[NodeId(2)]), "the same epoch again");
        assert!(m.is_dead(NodeId(0)) && !m.is_dead(NodeId(2)));
        assert_eq!(m.manager(), Some(NodeId(1)));
        assert_eq!(m.live(), vec![NodeId(1), NodeId(2), NodeId(3)]);
        assert!(
            m.issuer_dead(1 << crate::ts::TS_ID_BITS | 1),
            "coordinator 1 ran on node 0"
        );
        assert!(!m.issuer_dead(1 << crate::ts::TS_ID_BITS | 2));
    }
}
