//! Tell's management role (Tell §4.4): on the first storage node, a task that probes every
//! processing node and recovers one that stopped answering.
//!
//! A probe is a one-sided READ of a word of each processing node's memory, every
//! [`PROBE_INTERVAL_NS`]; one that fails (the fabric's typed failure: unreachable, timed
//! out) names a dead node. Its
//! recovery, in this order:
//! 1. **fence** it at every storage node: a put or insert it sent before it crashed that
//!    arrives from now on is refused, so nothing of it lands after the recovery looked;
//! 2. **its active tids** from the commit manager, which refuses its starts from now on;
//! 3. **its log**: the entry at the start of each of its coordinators' log rings (a
//!    coordinator runs one attempt at a time, so that is the only one not yet settled);
//! 4. **undo**: every version of an entry whose commit flag is unset is taken out of each
//!    record of its write set by a get and a conditional put (an insert's new slot is left
//!    a deletion at the version before it, as a coordinator's own undo leaves it), and
//!    under SBVS each undone record's cache-unit stamp bumped;
//! 5. **end its tids** at the commit manager: flagged ones committed, every other aborted;
//! 6. **read back** each record it undid: a version of an aborted tid still there is a
//!    problem the run's report fails on;
//! 7. ask the commit manager again: no tid of the node may be left active;
//! 8. then, every probe, the commit manager's base, until it lies past every tid of the
//!    node (when a live node's older tid still holds the base, later: reported, not
//!    judged, since a live node's long transaction holds it as it would without a crash).
//!
//! What it finds goes to the run as a [`Recovered`] report, which also tells the driver the
//! outcome of each coordinator's last logged attempt (by its tag): committed iff flagged.
//! Requests go to the nodes' CPUs whatever the plan (a recovery is rare, and a storage
//! node's put is atomic on its CPU).

use super::cm::Pn;
use super::config::{Buffering, TellConfig};
use super::descriptor::Tid;
use super::msg::{PutItem, TellReply, TellRequest};
use super::node::CM_ROLE;
use super::record;
use super::recovery::{self, LogEntry, Rid, HEAD_WORDS};
use atoll_fabric::{NodeId, RemotePtr};
use atoll_storage::layout::{CID_LOCKED, H_LOCK, VERSION_ABSENT};
use atoll_txn::{NodeTask, Recovered};

/// How often the management role probes every processing node.
pub const PROBE_INTERVAL_NS: u64 = 50_000;

/// Rounds of get and conditional put a record's undo takes at most (a survivor's put may
/// race it; a survivor's slot held by puts is read again after [`BUSY_PAUSE_NS`]).
pub const UNDO_ROUNDS_MAX: u32 = 256;
pub const BUSY_PAUSE_NS: u64 = 2_000;

/// A deliberately broken recovery, for the tests that show the run's checks catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Defect {
    /// Ends the dead node's unflagged tids at the commit manager without taking their
    /// versions out of the records (nor reading them back).
    KeepsUnflaggedVersions,
}

/// The management role's loop, on the first storage node only, until the run is over.
pub async fn run(task: NodeTask) {
    run_with(task, None).await
}

/// [`run`], with `defect` if given.
pub async fn run_with(task: NodeTask, defect: Option<Defect>) {
    let topo = task.catalog.topology();
    // Without a log there is nothing to recover from (and nothing to probe).
    if task.ep.node() != NodeId(0)
        || !topo.holds_records(task.ep.node())
        || task.cfg.log_region_words() == 0
    {
        return;
    }
    let mut alive: Vec<NodeId> = (0..topo.compute_nodes())
        .map(|i| topo.compute_node(i))
        .collect();
    // Reports whose node's tids the base has not passed yet: (report, highest tid).
    let mut settling: Vec<(usize, u64)> = Vec::new();
    // Bounded by the run's end.
    loop {
        task.ep.sleep(PROBE_INTERVAL_NS).await;
        if (task.over)(task.ep.now_ns()) {
            break;
        }
        if let Some(dead) = probe(&task, &alive).await {
            alive.retain(|&n| n != dead);
            let (report, last_tid) = recover(&task, dead, defect).await;
            let mut out = task.recovered.lock().expect("no poisoned recovery reports");
            out.push(report);
            settling.push((out.len() - 1, last_tid));
        }
        if !settling.is_empty() {
            settle(&task, &mut settling).await;
        }
    }
}

/// Probes every node of `alive` at once, by a one-sided READ of the first word of its log
/// region (a processing node's CPU serves no request: it is a heartbeat of its NIC and
/// memory): the first that failed, if any.
async fn probe(task: &NodeTask, alive: &[NodeId]) -> Option<NodeId> {
    let region = task
        .catalog
        .extra_region(atoll_txn::coord::LOG_EXTRA_REGION);
    let mut d = task.ep.doorbell_for(alive.len());
    for &n in alive {
        d.read(RemotePtr::new(n, region, 0), 1);
    }
    d.submit().await.err().map(|e| e.node)
}

/// One request to `node` and its reply; `None` if the op failed (another node is down:
/// the run names it).
async fn ask(task: &NodeTask, node: NodeId, req: TellRequest) -> Option<TellReply> {
    let reply = task.ep.rpc(node, req.to_bytes()).await.ok()?;
    Some(TellReply::of(&reply))
}

/// Recovers dead processing node `dead`: its report, and the highest tid it had.
async fn recover(task: &NodeTask, dead: NodeId, defect: Option<Defect>) -> (Recovered, u64) {
    let topo = task.catalog.topology();
    let pn = Pn(topo.compute_index(dead).expect("a processing node"));
    let mut rep = Recovered {
        node: dead,
        detected_ns: task.ep.now_ns(),
        ..Recovered::default()
    };
    for m in 0..topo.memory_nodes() {
        if ask(task, NodeId(m), TellRequest::Fence { node: dead }).await != Some(TellReply::Done) {
            rep.problems
                .push(format!("storage node {m} did not fence node {}", dead.0));
        }
    }
    // The manager it started its transactions at.
    let cm = super::node::cm_of(topo, pn);
    let active = match ask(task, cm, TellRequest::Recover { pn }).await {
        Some(TellReply::Active(tids)) => tids,
        other => {
            rep.problems.push(format!(
                "the commit manager answered the recovery with {other:?}"
            ));
            Vec::new()
        }
    };
    let entries = read_log(task, dead, &mut rep).await;
    let mut plan = recovery::plan(entries.iter(), pn, 0, &active);
    if defect == Some(Defect::KeepsUnflaggedVersions) {
        plan.undo.clear();
    }
    let mut undone = Vec::new();
    for &(rid, tid) in &plan.undo {
        rep.versions_removed += undo(task, rid, tid, &mut rep.problems).await;
        undone.push(rid);
    }
    // SBVS: the undone records' units change stamps before their tids end (a buffer
    // holding an undone version must not pass it off as unchanged to a snapshot that
    // sees the aborted tid).
    bump_units(task, &undone, &mut rep.problems).await;
    for (&tid, commit) in plan
        .commit
        .iter()
        .map(|t| (t, true))
        .chain(plan.abort.iter().map(|t| (t, false)))
    {
        let req = if commit {
            TellRequest::SetCommitted { tid }
        } else {
            TellRequest::SetAborted { tid }
        };
        match ask(task, cm, req).await {
            Some(TellReply::Committed { .. }) if commit => rep.tids_committed += 1,
            Some(TellReply::Done) if !commit => rep.tids_aborted += 1,
            // Its own end, sent before it crashed, arrived since the commit manager named
            // it active: the same end (its set_committed follows its flag, its set_aborted
            // its undo, both before the crash, so the log said what it did).
            Some(TellReply::NotActive { .. }) if commit => rep.tids_committed += 1,
            Some(TellReply::NotActive { .. }) => rep.tids_aborted += 1,
            other => rep.problems.push(format!(
                "the commit manager ended tid {} with {other:?}",
                tid.0
            )),
        }
    }
    // Nothing of it may stay active: asked again, the commit manager names what is.
    match ask(task, cm, TellRequest::Recover { pn }).await {
        Some(TellReply::Active(left)) if left.is_empty() => {}
        other => rep.problems.push(format!(
            "after its recovery the commit manager still had {other:?}"
        )),
    }
    let gone: Vec<Tid> = entries
        .iter()
        .filter(|e| !e.committed)
        .map(|e| e.tid)
        .chain(plan.abort.iter().copied())
        .collect();
    undone.sort_unstable();
    undone.dedup();
    for rid in undone {
        read_back(task, rid, &gone, &mut rep.problems).await;
    }
    rep.done_ns = task.ep.now_ns();
    let last = entries
        .iter()
        .map(|e| e.tid.0)
        .chain(active.iter().map(|t| t.0))
        .max()
        .unwrap_or(0);
    (rep, last)
}

/// The entry at the start of each of `dead`'s coordinators' log rings on its first log
/// backup; per coordinator, its tag and flag into the report.
async fn read_log(task: &NodeTask, dead: NodeId, rep: &mut Recovered) -> Vec<LogEntry> {
    let topo = task.catalog.topology();
    let cfg = &task.cfg;
    let per_node = cfg.coordinators_per_node;
    let first = topo.compute_index(dead).expect("a processing node") as u32 * per_node;
    let (backup, slot) = topo.log_backup(dead, 0);
    let region = task
        .catalog
        .extra_region(atoll_txn::coord::LOG_EXTRA_REGION);
    let ring = |id: u32| RemotePtr::new(backup, region, cfg.log_ring_offset(id, slot));
    let mut entries = Vec::new();
    for id in first..first + per_node {
        // The head says how long the entry is; a never-written or torn one decodes as none.
        let Ok(head) = task.ep.read(ring(id), HEAD_WORDS).await else {
            rep.problems
                .push(format!("the log of coordinator {id} could not be read"));
            continue;
        };
        let n = head[3].min(u64::from(cfg.log_ring_words));
        let len = LogEntry::words_for(n as usize).min(cfg.log_ring_words);
        let entry = match task.ep.read(ring(id), len).await {
            Ok(w) => LogEntry::find(&w),
            Err(_) => None,
        };
        rep.attempts
            .push((id, entry.as_ref().map(|e| (e.tag, e.committed))));
        entries.extend(entry);
    }
    entries
}

/// SBVS: bumps the cache-unit stamps of records `rids`, a request per storage node.
async fn bump_units(task: &NodeTask, rids: &[Rid], problems: &mut Vec<String>) {
    let cfg = task.cfg.family_as::<TellConfig>();
    if cfg.buffering != Buffering::Versioned {
        return;
    }
    for m in 0..task.catalog.topology().memory_nodes() {
        let words: Vec<u32> = rids
            .iter()
            .filter(|r| r.node == NodeId(m))
            .map(|r| super::sbvs::stamp_word(r.table, r.key, cfg.sbvs_unit))
            .collect();
        if words.is_empty() {
            continue;
        }
        let n = words.len();
        match ask(task, NodeId(m), TellRequest::Stamps { bump: true, words }).await {
            Some(TellReply::Stamps(s)) if s.len() == n => {}
            other => problems.push(format!(
                "storage node {m} answered a bump of {n} unit stamps with {other:?}"
            )),
        }
    }
}

/// Takes `tid`'s versions out of record `rid`: the versions removed (0: it held none).
async fn undo(task: &NodeTask, rid: Rid, tid: Tid, problems: &mut Vec<String>) -> u64 {
    let layout = task.catalog.layout(rid.table);
    for _ in 0..UNDO_ROUNDS_MAX {
        let get = TellRequest::Get {
            items: vec![(rid.table, rid.key)],
        };
        let (loc, words) = match ask(task, rid.node, get).await {
            Some(TellReply::Records(mut r)) => match r.pop().flatten() {
                Some(found) => found,
                // Its insert never placed the key.
                None => return 0,
            },
            Some(TellReply::Busy) => {
                task.ep.sleep(BUSY_PAUSE_NS).await;
                continue;
            }
            other => {
                problems.push(format!("a get of {rid:?} answered {other:?}"));
                return 0;
            }
        };
        let Ok(rec) = record::decode(layout, &words) else {
            problems.push(format!("{rid:?} holds no tell record"));
            return 0;
        };
        let mut set = rec.versions.clone();
        if !set.unwrite(tid) {
            return 0;
        }
        if set.is_empty() {
            // Its insert into a new slot: absent at the version before it.
            let word = rec.versions.versions()[0].word;
            set.write(Tid(0), (word - 1) | VERSION_ABSENT, None);
        }
        let new = record::encode(layout, &words, &set).expect("fewer versions fit");
        let put = TellRequest::PutIf {
            origin: task.ep.node(),
            items: vec![PutItem {
                table: rid.table,
                loc,
                seq: words[H_LOCK as usize] & !CID_LOCKED,
                words: new,
            }],
        };
        match ask(task, rid.node, put).await {
            Some(TellReply::Puts(p)) if p == [true] => return 1,
            // A survivor's put got in between: read it again.
            Some(TellReply::Puts(_)) => continue,
            other => {
                problems.push(format!("a put of {rid:?} answered {other:?}"));
                return 0;
            }
        }
    }
    problems.push(format!(
        "tid {} stayed in {rid:?} through {UNDO_ROUNDS_MAX} rounds",
        tid.0
    ));
    0
}

/// Reads record `rid` back: a version of a tid in `gone` is a problem.
async fn read_back(task: &NodeTask, rid: Rid, gone: &[Tid], problems: &mut Vec<String>) {
    let layout = task.catalog.layout(rid.table);
    for _ in 0..UNDO_ROUNDS_MAX {
        let get = TellRequest::Get {
            items: vec![(rid.table, rid.key)],
        };
        match ask(task, rid.node, get).await {
            Some(TellReply::Records(mut r)) => {
                let Some((_, words)) = r.pop().flatten() else {
                    return;
                };
                let kept: Vec<u64> = record::decode(layout, &words)
                    .map(|r| {
                        r.versions
                            .versions()
                            .iter()
                            .filter(|v| gone.contains(&v.tid))
                            .map(|v| v.tid.0)
                            .collect()
                    })
                    .unwrap_or_default();
                if !kept.is_empty() {
                    problems.push(format!("{rid:?} keeps versions of aborted tids {kept:?}"));
                }
                return;
            }
            Some(TellReply::Busy) => task.ep.sleep(BUSY_PAUSE_NS).await,
            other => {
                problems.push(format!("a get of {rid:?} answered {other:?}"));
                return;
            }
        }
    }
}

/// Asks every commit manager for its base; a report whose node's tids every one passed is
/// settled now.
async fn settle(task: &NodeTask, settling: &mut Vec<(usize, u64)>) {
    let mut base = u64::MAX;
    for cm in task.catalog.topology().service_nodes(CM_ROLE.name) {
        let Some(TellReply::State { base: b, .. }) = ask(task, cm, TellRequest::State).await else {
            return;
        };
        base = base.min(b);
    }
    let now = task.ep.now_ns();
    let mut out = task.recovered.lock().expect("no poisoned recovery reports");
    settling.retain(|&(i, last)| {
        if base >= last {
            out[i].settled_ns = Some(now);
            return false;
        }
        true
    });
}
