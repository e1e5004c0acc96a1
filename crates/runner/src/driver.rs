//! The driver: merges the nodes' summaries ([`crate::node`]), hands the merged ledger back
//! for each node's checks, and builds the report from merged data only: totals, histograms
//! (merged exactly), abort reasons, verbs, stage times and the check verdicts. Every fabric
//! ends a run through [`conclude`], supplying its [`StoppedNodes`].
//!
//! The summaries and check parts reach it through a [`SummaryWire`]: in memory when the
//! nodes share the driver's process, or serialized as they cross a network; both give the
//! same report (a test compares them byte for byte).

use crate::config::{ConfigReport, Fabric, RunConfig};
use crate::node::{NodeChecks, NodeSummary};
use crate::report::*;
use crate::stats::NodeStats;
use atoll_fabric::{NodeId, VerbCounters, VerbKind};
use atoll_fabric_sim as sim;
use atoll_history::TxnRecord;
use atoll_txn::versions::VersionEvent;
use atoll_txn::{Abort, Protocol, Stage};
use atoll_workloads::Workload;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::BTreeMap;

/// How summaries, the merged ledger and check parts travel between nodes and the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SummaryWire {
    /// As they are: nodes and driver share a process.
    InMemory,
    /// Serialized to JSON and parsed back, as between processes.
    Json,
}

impl SummaryWire {
    /// Hands `value` over; a value that does not survive the trip is the engine's bug (the
    /// types serialize what they hold), reported with what failed.
    pub fn carry<T: Serialize + DeserializeOwned>(self, what: &str, value: T) -> T {
        match self {
            SummaryWire::InMemory => value,
            SummaryWire::Json => {
                let text = serde_json::to_string(&value)
                    .unwrap_or_else(|e| panic!("{what} does not serialize: {e}"));
                serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{what} does not parse back: {e}"))
            }
        }
    }
}

/// The nodes' ledgers merged, in node order.
pub fn merge_ledgers<W: Workload>(w: &W, summaries: &[NodeSummary<W::Ledger>]) -> W::Ledger {
    let mut ledger = W::Ledger::default();
    for s in summaries {
        w.merge(&mut ledger, s.ledger.clone());
    }
    ledger
}

/// The first transaction (in node order) whose op failed after its log was written.
pub fn failed_after_log<L>(summaries: &[NodeSummary<L>]) -> Option<(NodeId, u64)> {
    summaries
        .iter()
        .find_map(|s| s.failed_after_log)
        .map(|(n, t)| (NodeId(n), t))
}

/// A run's nodes as the driver reaches them once they stopped: in its own process (the
/// simulator and in-process fabrics) or as processes over a wire (`atoll cluster`). Each
/// supplies how summaries and checks travel; [`conclude`] is what every run does with them.
pub trait StoppedNodes<W: Workload> {
    type Error: From<crate::RunError>;

    /// Every node's summary, in node order.
    fn summaries(&mut self) -> Result<Vec<NodeSummary<W::Ledger>>, Self::Error>;

    /// Nodes an injected fault crashed, named when a commit failed after its log.
    fn crashed(&self) -> Vec<NodeId> {
        Vec::new()
    }

    /// Refuses a run whose records cannot be checked (a node crashed after it began
    /// transactions took the record of its commits with it).
    fn refuse_unchecked(&self) -> Result<(), crate::RunError> {
        Ok(())
    }

    /// Hands every node the merged ledger; the checks of the nodes holding records.
    fn checks(&mut self, ledger: &W::Ledger) -> Result<Vec<NodeChecks<W::NodeCheck>>, Self::Error>;
}

/// The driver's part of every run, whatever carried it: every node's summary, a commit that
/// failed after its log refused, the ledgers merged and handed back for each node's check
/// of its records, then the report from merged data only. RPCs served come from the
/// summaries when every node counted its own (over a wire), else from `facts` (the fabric
/// counted them).
pub fn conclude<W: Workload, P: Protocol, N: StoppedNodes<W>>(
    cfg: &RunConfig,
    w: &W,
    nodes: &mut N,
    mut facts: RunFacts,
    wall: std::time::Instant,
    env: impl FnOnce(u64) -> crate::env::EnvReport,
) -> Result<Report, N::Error> {
    let summaries = nodes.summaries()?;
    if let Some((node, txn)) = failed_after_log(&summaries) {
        let crashed = nodes.crashed();
        return Err(crate::RunError::NodeFailed { node, txn, crashed }.into());
    }
    nodes.refuse_unchecked()?;
    let ledger = merge_ledgers(w, &summaries);
    let checks = nodes.checks(&ledger)?;
    if let Some(served) = summaries.iter().map(|s| s.rpcs_served).collect() {
        facts.rpcs_served_by_node = served;
    }
    facts.wall_s = wall.elapsed().as_secs_f64();
    Ok(report::<W, P>(
        cfg, w, facts, summaries, &ledger, checks, env,
    ))
}

/// What the driver knows of a run besides the nodes' summaries: the process's and the
/// fabric's facts.
pub struct RunFacts {
    pub warmup_end_ns: u64,
    pub progress: Vec<ProgressLine>,
    pub load_s: f64,
    pub wall_s: f64,
    pub os_threads: usize,
    pub sim: Option<SimInfo>,
    pub log_ring_words: u32,
    pub memory_bytes: u64,
    /// What the tables of every node took at start (part of `memory_bytes`).
    pub tables_start_bytes: u64,
    /// Co-routines of live nodes that waited with nothing left to happen (a hang).
    pub coroutines_hung: usize,
    /// Nodes the fabric crashed: when (ns), and how many co-routines stopped with them.
    pub crashed: Vec<(NodeId, u64, usize)>,
    /// A family's recoveries of crashed compute nodes.
    pub recovered: Vec<atoll_txn::Recovered>,
    /// RPCs each node's CPU served over the whole run (warm-up included), from the
    /// fabric's worker counters; empty where the fabric does not report them.
    pub rpcs_served_by_node: Vec<u64>,
}

/// The report of a run from every node's summary and checks, in node order.
pub fn report<W: Workload, P: Protocol>(
    cfg: &RunConfig,
    w: &W,
    facts: RunFacts,
    summaries: Vec<NodeSummary<W::Ledger>>,
    ledger: &W::Ledger,
    checks: Vec<NodeChecks<W::NodeCheck>>,
    env: impl FnOnce(u64) -> crate::env::EnvReport,
) -> Report {
    let mut all = NodeStats::new(w.txn_types().len());
    for s in &summaries {
        all.merge(&s.stats);
    }
    // Seconds measured: the whole duration, or up to the first worker that saw a stop.
    let stopped_ns = summaries
        .iter()
        .filter_map(|s| s.stopped_ns)
        .min()
        .unwrap_or(u64::MAX);
    // A source drained (a library session closed) ends the window normally, when its last
    // co-routine finished.
    let drained_ns = summaries.iter().filter_map(|s| s.drained_ns).max();
    let versions = version_report(cfg, &summaries);
    let (instance_log, own_log) = own_log_check(&summaries).unzip();
    let memory = memory_report(cfg, w, &facts, &summaries, stopped_ns);
    // Every attempt, ordered by end time (ties by id), whichever node ran it.
    let mut history: Vec<TxnRecord> = summaries.into_iter().flat_map(|s| s.history).collect();
    history.sort_by_key(|r| (r.end_ns, r.id));
    let partial = stopped_ns != u64::MAX;
    let measured_s = match (partial, drained_ns) {
        (true, _) => {
            (stopped_ns.saturating_sub(facts.warmup_end_ns) as f64 / 1e9).min(cfg.duration_s)
        }
        (false, Some(ns)) => {
            (ns.saturating_sub(facts.warmup_end_ns) as f64 / 1e9).min(cfg.duration_s)
        }
        (false, None) => cfg.duration_s,
    };
    // A run stopped in warm-up measured nothing: no rate rather than a division by zero.
    let secs = if measured_s > 0.0 {
        measured_s
    } else {
        f64::INFINITY
    };
    let summary = summary_of(&all, secs);
    let committed = summary.committed;
    let topology = cfg.topology();
    let holds = |n: NodeId| topology.holds_records(n);
    let state_digests = checks.iter().map(|c| (c.node, c.storage.digest)).collect();
    let mut checks = cluster_checks::<W, P>(w, &all, checks, ledger, &facts, &holds);
    checks.extend(work_checks(
        &summary,
        &facts.progress,
        cfg.progress_interval_s,
        measured_s,
        w.full_table_expected().then_some(W::NAME),
    ));
    checks.push(budget_check(&memory));
    checks.extend(own_log);
    let passed = checks.iter().all(|c| c.passed);
    let failures = failure_reports(&facts);
    Report {
        format: FORMAT,
        format_version: FORMAT_VERSION,
        partial,
        measured_s,
        env: env(committed),
        config: config_report::<W, P>(cfg, w, &facts),
        summary,
        txn_types: type_reports(w.txn_types(), &all, secs, committed),
        stage_us_mean: Stage::COMMON
            .iter()
            .chain(cfg.protocol.family_stages())
            .map(|s| {
                let ns = per_txn(all.stage_ns[s.index()], committed);
                (s.name().to_string(), ns / 1000.0)
            })
            .collect(),
        verbs: verbs_report(cfg, &all, &facts, committed),
        progress: facts.progress,
        checks,
        passed,
        load_s: facts.sim.is_none().then_some(facts.load_s),
        wall_s: facts.sim.is_none().then_some(facts.wall_s),
        sim_wall_s: 0.0,
        ucx: None,
        versions,
        instance_log,
        state_digests,
        sequenced: P::SEQUENCED.then(|| crate::report::SeqReport::of(&all.seq)),
        degraded: degraded_report(cfg, &facts.recovered),
        failures,
        memory,
        history,
        sim: facts.sim.map(|s| SimInfo {
            committed_total: all.committed_all,
            ..s
        }),
    }
}

/// What a replicated partitioned run served short of once its recoveries declared nodes
/// dead (none when no partition recovery ran): each partition's copies are its primary and
/// its `--replicas` - 1 backups ([`atoll_storage::Topology::partition_backup`]).
fn degraded_report(
    cfg: &RunConfig,
    recovered: &[atoll_txn::Recovered],
) -> Option<crate::report::DegradedReport> {
    let partition: Vec<_> = recovered
        .iter()
        .filter_map(|r| r.partition.as_ref().map(|p| (r.node, p.configured_ns)))
        .collect();
    let from_ns = partition.iter().map(|&(_, ns)| ns).min()?;
    let topology = cfg.topology();
    let dead = |n: NodeId| partition.iter().any(|&(d, _)| d == n);
    let backups = cfg.log_replicas;
    let mut unserved = Vec::new();
    let mut short_copies = Vec::new();
    for p in (0..topology.memory_nodes()).map(NodeId) {
        let live = std::iter::once(p)
            .chain((0..backups).map(|b| topology.partition_backup(p, b)))
            .filter(|&n| !dead(n))
            .count() as u16;
        if dead(p) {
            unserved.push(p.0);
        } else if live < backups + 1 {
            short_copies.push((p.0, live));
        }
    }
    Some(crate::report::DegradedReport {
        from_us: from_ns as f64 / 1e3,
        replicas: backups + 1,
        unserved,
        short_copies,
    })
}

/// Each node a partition's recovery declared dead, with the throughput around its failure
/// from the progress intervals (every survivor's: a dead node's workers report nothing
/// after it stopped, [`crate::run::collect_progress`]).
fn failure_reports(facts: &RunFacts) -> Vec<crate::report::FailureReport> {
    let us = |ns: u64| ns as f64 / 1e3;
    // Each interval's start and end on the run's clock (µs), and its rate.
    let intervals: Vec<(f64, f64, f64)> = facts
        .progress
        .iter()
        .map(|l| {
            let end = us(facts.warmup_end_ns) + l.t_s * 1e6;
            (end - l.interval_s * 1e6, end, l.committed_per_s)
        })
        .collect();
    let median = |mut v: Vec<f64>| -> Option<f64> {
        v.sort_by(f64::total_cmp);
        (!v.is_empty()).then(|| v[v.len() / 2])
    };
    facts
        .recovered
        .iter()
        .filter_map(|r| r.partition.as_ref().map(|p| (r, p)))
        .map(|(r, p)| {
            let stopped_us = facts
                .crashed
                .iter()
                .find(|&&(n, _, stopped)| n == r.node && stopped > 0)
                .map(|&(_, at_ns, _)| us(at_ns));
            let (detected_us, configured_us) = (us(r.detected_ns), us(p.configured_ns));
            let failed_us = stopped_us.unwrap_or(detected_us);
            let before = median(
                intervals
                    .iter()
                    .filter(|i| i.1 <= failed_us)
                    .map(|i| i.2)
                    .collect(),
            );
            let after_all: Vec<&(f64, f64, f64)> =
                intervals.iter().filter(|i| i.0 >= configured_us).collect();
            let after = median(after_all.iter().map(|i| i.2).collect());
            let lowest = intervals
                .iter()
                .filter(|i| i.1 > failed_us && i.0 < configured_us)
                .map(|i| i.2)
                .reduce(f64::min);
            let back_us = after.and_then(|a| {
                let floor = a * crate::report::STEADY_SHARE_MIN;
                intervals
                    .iter()
                    .find(|i| i.0 >= failed_us && i.2 >= floor)
                    .map(|i| i.1)
            });
            crate::report::FailureReport {
                node: r.node.0,
                stopped_us,
                detected_us,
                configured_us,
                committed_per_s_before: before,
                committed_per_s_after: after,
                committed_per_s_lowest: lowest,
                back_us,
            }
        })
        .collect()
}

/// What the run took from its budget, from every node's summary: its tables' bytes at the
/// end, and what it held beside them from the start.
fn memory_report<W: Workload, L>(
    cfg: &RunConfig,
    w: &W,
    facts: &RunFacts,
    summaries: &[NodeSummary<L>],
    stopped_ns: u64,
) -> MemoryReport {
    let (budget_bytes, budget_source) = crate::sizing::memory_limit(cfg);
    let names: Vec<String> = w
        .tables(cfg.memory_nodes())
        .into_iter()
        .map(|t| t.name)
        .collect();
    let mut table_bytes: BTreeMap<String, u64> = names.iter().map(|n| (n.clone(), 0)).collect();
    for s in summaries {
        for (name, b) in names.iter().zip(&s.table_bytes) {
            *table_bytes.get_mut(name).expect("a named table") += b;
        }
    }
    let tables_end: u64 = table_bytes.values().sum();
    let beside = facts.memory_bytes - facts.tables_start_bytes;
    let end_bytes = beside + tables_end;
    let elapsed_s = (stopped_ns.min(((cfg.warmup_s + cfg.duration_s) * 1e9) as u64) as f64 / 1e9)
        .max(f64::MIN_POSITIVE);
    // The sizing's start estimate and the stores' slab-rounded takes differ by up to a
    // slab per table and node: less than that is no growth.
    let noise = atoll_storage::store::SLAB_BYTES * (names.len() * summaries.len()) as u64;
    let grew = tables_end.saturating_sub(facts.tables_start_bytes);
    let growth_bytes_per_s = if grew > noise {
        grew as f64 / elapsed_s
    } else {
        0.0
    };
    MemoryReport {
        budget_bytes,
        budget_source,
        start_bytes: facts.memory_bytes,
        end_bytes,
        table_bytes,
        growth_bytes_per_s,
        budget_reached_in_s: (growth_bytes_per_s > 0.0)
            .then(|| budget_bytes.saturating_sub(end_bytes) as f64 / growth_bytes_per_s),
        refused: summaries.iter().find_map(|s| s.budget_refusal.clone()),
    }
}

/// Whether the run stayed within its memory budget: a table refused growth stops the run
/// (and fails it), naming what grew.
/// The nodes' own logs (`--instance-log`), if the run kept them: their counts, and the
/// check that every write succeeded, stating how many records a write carried.
fn own_log_check<L>(
    summaries: &[NodeSummary<L>],
) -> Option<(crate::report::InstanceLogReport, CheckReport)> {
    let logs: Vec<_> = summaries
        .iter()
        .filter_map(|s| s.own_log.as_ref())
        .collect();
    if logs.is_empty() {
        return None;
    }
    let records: u64 = logs.iter().map(|l| l.0).sum();
    let writes: u64 = logs.iter().map(|l| l.1).sum();
    let records_per_write = records as f64 / writes.max(1) as f64;
    let failure = logs.iter().find_map(|l| l.2.clone());
    let check = CheckReport {
        name: "run.instance_log".into(),
        passed: failure.is_none(),
        detail: match failure {
            Some(f) => format!("a node's own log failed: {f}"),
            None => format!(
                "{records} records in {writes} group writes ({records_per_write:.2} records a write) over {} nodes' own logs, whole run",
                logs.len()
            ),
        },
    };
    let report = crate::report::InstanceLogReport {
        records,
        writes,
        records_per_write,
    };
    Some((report, check))
}

fn budget_check(m: &MemoryReport) -> CheckReport {
    use crate::sizing::human_bytes;
    CheckReport {
        name: "run.memory_budget".into(),
        passed: m.refused.is_none(),
        detail: match &m.refused {
            Some(r) => format!(
                "stopped: {r} ({} budget from {})",
                human_bytes(m.budget_bytes),
                m.budget_source
            ),
            None => format!(
                "grew to {} of the {} budget ({}; {} at start){}",
                human_bytes(m.end_bytes),
                human_bytes(m.budget_bytes),
                m.budget_source,
                human_bytes(m.start_bytes),
                match m.budget_reached_in_s {
                    Some(s) => format!(
                        ", {}/s: the budget in {s:.0} s more",
                        human_bytes(m.growth_bytes_per_s as u64)
                    ),
                    None => String::new(),
                }
            ),
        },
    }
}

/// `x` per committed transaction (0 when none committed).
fn per_txn(x: u64, committed: u64) -> f64 {
    if committed == 0 {
        0.0
    } else {
        x as f64 / committed as f64
    }
}

/// Aborts by reason's name, every reason listed.
fn reason_map(counts: &dyn Fn(Abort) -> u64) -> BTreeMap<String, u64> {
    Abort::ALL
        .iter()
        .map(|a| (a.name().to_string(), counts(*a)))
        .collect()
}

/// The version events the nodes counted; reported where some table keeps an overflow area,
/// or anything was counted.
fn version_report<L>(
    cfg: &RunConfig,
    summaries: &[NodeSummary<L>],
) -> Option<BTreeMap<String, u64>> {
    let mut version_counts = [0u64; VersionEvent::COUNT];
    for s in summaries {
        for (sum, x) in version_counts.iter_mut().zip(s.versions) {
            *sum += x;
        }
    }
    (cfg.family_config().overflow_per_record() > 0 || version_counts.iter().any(|&x| x > 0)).then(
        || {
            VersionEvent::ALL
                .iter()
                .map(|e| (e.name().to_string(), version_counts[*e as usize]))
                .collect::<BTreeMap<String, u64>>()
        },
    )
}

/// The family's knobs at their values, then the fields it derives from them.
fn family_report(cfg: &RunConfig) -> crate::config::FamilyReport {
    let (knobs, family) = cfg
        .family()
        .unwrap_or_else(|e| panic!("the run's knobs were validated at start-up: {e}"));
    crate::config::FamilyReport(
        knobs
            .iter()
            .chain(family.report_fields(&cfg.cluster_shape()))
            .collect(),
    )
}

/// The whole run's figures over `secs` measured.
fn summary_of(all: &NodeStats, secs: f64) -> Summary {
    let committed: u64 = all.committed.iter().sum();
    let aborted: u64 = all.aborts.iter().flat_map(|r| r.iter()).sum();
    let mut lat_all = crate::stats::new_histogram();
    for h in &all.latency_ns {
        lat_all.add(h).expect("same bounds");
    }
    Summary {
        committed,
        committed_per_s: committed as f64 / secs,
        aborted,
        abort_rate: if committed + aborted == 0 {
            0.0
        } else {
            aborted as f64 / (committed + aborted) as f64
        },
        user_aborted: all.user_aborted.iter().sum(),
        aborts_by_reason: reason_map(&|a| {
            if a == Abort::UserAbort {
                all.user_aborted.iter().sum()
            } else {
                all.aborts.iter().map(|r| r[a.index()]).sum()
            }
        }),
        gave_up: all.gave_up.iter().sum(),
        gave_up_by_reason: reason_map(&|a| all.gave_up[a.index()])
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect(),
        latency_us: Latency::of(&lat_all),
        fidelity: {
            let mut t = crate::stats::Touched::default();
            for x in &all.touched {
                t.merge(x);
            }
            Fidelity::of(&t, committed, committed)
        },
    }
}

/// Each transaction type's figures.
fn type_reports(types: &[&str], all: &NodeStats, secs: f64, committed: u64) -> Vec<TypeReport> {
    types
        .iter()
        .enumerate()
        .map(|(t, name)| TypeReport {
            name: name.to_string(),
            committed: all.committed[t],
            committed_per_s: all.committed[t] as f64 / secs,
            aborts_by_reason: reason_map(&|a| {
                if a == Abort::UserAbort {
                    all.user_aborted[t]
                } else {
                    all.aborts[t][a.index()]
                }
            }),
            latency_us: Latency::of(&all.latency_ns[t]),
            fidelity: Fidelity::of(&all.touched[t], all.committed[t], committed),
        })
        .collect()
}

/// The verbs the run posted and served, per kind and per committed transaction.
fn verbs_report(cfg: &RunConfig, all: &NodeStats, facts: &RunFacts, committed: u64) -> VerbsReport {
    let verbs: &VerbCounters = &all.verbs;
    let topology = cfg.topology();
    let shared_data = topology.architecture() == atoll_storage::Architecture::SharedData;
    let by_kind = VerbKind::ALL
        .iter()
        .map(|k| {
            let i = *k as usize;
            (
                k.name().to_string(),
                VerbReport {
                    remote_ops: verbs.remote_ops[i],
                    remote_bytes: verbs.remote_bytes[i],
                    local_ops: verbs.local_ops[i],
                    remote_ops_per_txn: per_txn(verbs.remote_ops[i], committed),
                },
            )
        })
        .collect();
    VerbsReport {
        by_kind,
        remote_ops_per_txn: per_txn(verbs.total_remote_ops(), committed),
        doorbells_per_txn: per_txn(verbs.doorbells, committed),
        round_trips_per_txn: per_txn(verbs.round_trips, committed),
        rpcs_served: verbs.rpcs_served,
        rpcs_served_by_role: (shared_data && !facts.rpcs_served_by_node.is_empty()).then(|| {
            let by = |keep: &dyn Fn(NodeId) -> bool| -> u64 {
                (0..facts.rpcs_served_by_node.len())
                    .filter(|&n| keep(NodeId(n as u16)))
                    .map(|n| facts.rpcs_served_by_node[n])
                    .sum()
            };
            RpcsByRole {
                memory_nodes: by(&|n| topology.holds_records(n)),
                compute_nodes: by(&|n| topology.runs_coordinators(n)),
                service_nodes: topology
                    .services()
                    .map(|(role, _, node)| {
                        (role.key(), by(&|n| n == node && !topology.holds_records(n)))
                    })
                    .collect(),
            }
        }),
    }
}

/// Every check's verdict: torn reads, the storage checks, the workload's (a check of what
/// only serializability guarantees binds only a serializable protocol's run), the fabric's.
fn cluster_checks<W: Workload, P: Protocol>(
    w: &W,
    all: &NodeStats,
    checks: Vec<NodeChecks<W::NodeCheck>>,
    ledger: &W::Ledger,
    facts: &RunFacts,
    holds: &dyn Fn(NodeId) -> bool,
) -> Vec<CheckReport> {
    let torn = atoll_workloads::CheckResult {
        name: "txn.no_torn_read_committed".into(),
        binds: atoll_workloads::Binds::Always,
        passed: all.committed_torn_reads == 0,
        detail: format!(
            "{} committed transactions had read a payload that failed its check word (torn, or another record's)",
            all.committed_torn_reads
        ),
    };
    // A node that crashed holding records lost them, unless its partition's recovery
    // settled them at its backups (whose replica is then checked in its place): a lost
    // node's memory is not judged, and the workload's checks over every node's records
    // cannot be.
    let recovered_partition = |n: NodeId| {
        facts
            .recovered
            .iter()
            .any(|r| r.node == n && r.partition.is_some())
    };
    let lost: Vec<(NodeId, u64)> = facts
        .crashed
        .iter()
        .filter(|c| holds(c.0) && !recovered_partition(c.0))
        .map(|c| (c.0, c.1))
        .collect();
    let lost_text = lost
        .iter()
        .map(|(n, at)| format!("node {} at {} µs", n.0, at / 1000))
        .collect::<Vec<_>>()
        .join(", ");
    let replicas = replica_check(&checks, &facts.crashed);
    let (storage, parts): (Vec<_>, Vec<_>) = checks
        .into_iter()
        .map(|c| (c.storage, (c.node, c.workload)))
        .unzip();
    let storage: Vec<_> = storage
        .into_iter()
        .zip(&parts)
        .filter(|(_, (n, _))| !lost.iter().any(|l| l.0 .0 == *n))
        .map(|(s, _)| s)
        .collect();
    let parts: Vec<_> = parts.into_iter().map(|(_, p)| p).collect();
    let workload = w.check_cluster(parts, ledger).into_iter().map(|mut c| {
        // What still holds on the crashed node's frozen records is reported as it is.
        if !lost.is_empty() && !c.passed {
            c.passed = true;
            c.detail = format!("not judged: {lost_text} crashed holding records, which are lost (no recovery yet): {}", c.detail);
        }
        c
    });
    let mut checks: Vec<CheckReport> = std::iter::once(torn)
        .chain(atoll_workloads::storage_check_cluster(&storage))
        .chain(workload)
        .map(|c| c.under(P::ISOLATION))
        .map(|c| CheckReport {
            name: c.name,
            passed: c.passed,
            detail: c.detail,
        })
        .collect();
    if !lost.is_empty() {
        checks.push(CheckReport {
            name: "fabric.crash_named".into(),
            passed: true,
            detail: format!(
                "{lost_text} crashed holding records: the storage checks judge the {} other nodes holding records, and a workload check its lost records fail is not judged",
                storage.len()
            ),
        });
    }
    checks.extend(replicas);
    checks.extend(recovery_checks(&facts));
    checks.extend(fabric_checks(facts));
    checks
}

/// `replicas.match`: after every backup drained its log rings, each replica holds what its
/// partition's primary holds (the same live records, each at the same key version with the
/// same payload), each in its backup's registered memory (where fail-over will serve it),
/// and no cleaner found a record it could not apply; a crashed node's
/// partition, recovered, is held alike by every live backup.
fn replica_check<C>(
    checks: &[NodeChecks<C>],
    crashed: &[(NodeId, u64, usize)],
) -> Option<CheckReport> {
    let with: Vec<(u16, &crate::node::ReplicaCheck)> = checks
        .iter()
        .filter_map(|c| c.replicas.as_ref().map(|r| (c.node, r)))
        .collect();
    if with.is_empty() {
        return None;
    }
    let name = "replicas.match".to_string();
    let primary: BTreeMap<u16, (u64, u64)> = with.iter().map(|(n, r)| (*n, r.primary)).collect();
    let mut wrong = Vec::new();
    let (mut copies, mut applied, mut entries, mut waits) = (0u64, 0u64, 0u64, 0u64);
    let (mut by_successor, mut held, mut parked) = (0u64, 0u64, 0u64);
    let mut dead_copies: BTreeMap<u16, (u64, u64)> = BTreeMap::new();
    for (n, r) in &with {
        applied += r.applied_records;
        entries += r.applied_entries;
        waits += r.waits;
        by_successor += r.decided_by_successor;
        held += r.held_at_end;
        parked += r.parked;
        for p in &r.problems {
            wrong.push(format!("node {n}: {p}"));
        }
        if r.problems_seen > r.problems.len() as u64 {
            wrong.push(format!(
                "node {n}: {} more problems",
                r.problems_seen - r.problems.len() as u64
            ));
        }
        for &(p, records, digest) in &r.copies {
            copies += 1;
            if crashed.iter().any(|c| c.0 .0 == p) {
                // A crashed primary holds what it held when it died: its partition is what
                // its live backups hold, each the same.
                match dead_copies.insert(p, (records, digest)) {
                    Some(first) if first != (records, digest) => wrong.push(format!(
                        "the live backups' replicas of crashed partition {p} differ ({records} live records against {})",
                        first.0
                    )),
                    _ => {}
                }
                continue;
            }
            match primary.get(&p) {
                Some(&(pr, pd)) if (pr, pd) == (records, digest) => {}
                Some(&(pr, _)) => wrong.push(format!(
                    "node {n}'s replica of partition {p} differs from its primary ({records} live records against {pr}{})",
                    if pr == records { ", the same count: some record's version or payload" } else { "" }
                )),
                None => wrong.push(format!("node {n} holds a replica of partition {p}, whose primary reported none")),
            }
        }
    }
    let records: u64 = primary.values().map(|p| p.0).sum();
    Some(CheckReport {
        name,
        passed: wrong.is_empty(),
        detail: if wrong.is_empty() {
            format!(
                "{copies} replicas of {} partitions ({records} live records in the primaries) each equal to its primary and held in its backup's registered memory; the backups' cleaners applied {applied} log records ({entries} entries of the partitions they back up), an entry waited for another ring's earlier write {waits} times, {by_successor} records were known committed by a later write of their keys before their coordinator logged again, {held} were still undecided at the end (settled as committed: a live coordinator's, or a dead one's its recovery committed), {parked} inserts found their replica's table full and waited outside it for a delete to free a slot{}",
                primary.len(),
                if dead_copies.is_empty() {
                    String::new()
                } else {
                    format!("; crashed partitions {:?} held alike by their live backups", dead_copies.keys().collect::<Vec<_>>())
                }
            )
        } else {
            format!("{} wrong: {}", wrong.len(), wrong.join("; "))
        },
    })
}

/// A family's recovery of each crashed compute node: it found nothing left wrong when it
/// read its records back and asked the commit manager (no tid of the node left active, so
/// nothing of it holds snapshots back); when the base passed the node's tids is reported.
fn recovery_checks(facts: &RunFacts) -> Vec<CheckReport> {
    let us = |ns: u64| ns as f64 / 1e3;
    facts
        .recovered
        .iter()
        .map(|r| {
            let crashed_ns = facts
                .crashed
                .iter()
                .find(|c| c.0 == r.node)
                .map_or(r.detected_ns, |c| c.1);
            let settled = match r.settled_ns {
                Some(ns) => format!("its tids all behind the base {:.1} µs after", us(ns - r.done_ns)),
                None => "the base had not passed its tids by the run's end (a live node's older tid held it)".into(),
            };
            let committed = r.attempts.iter().filter(|a| matches!(a.1, Some((_, true)))).count();
            if let Some(p) = &r.partition {
                return partition_recovery_check(r, p, crashed_ns);
            }
            CheckReport {
                name: "recovery.compute_node".into(),
                passed: r.problems.is_empty(),
                detail: format!(
                    "compute node {} crashed at {:.1} µs, found dead {:.1} µs later, recovered in {:.1} µs ({} tids committed from the log, {} aborted, {} versions taken out, {committed} of its {} coordinators' last logged attempts committed), {settled}{}",
                    r.node.0,
                    us(crashed_ns),
                    us(r.detected_ns.saturating_sub(crashed_ns)),
                    us(r.done_ns - r.detected_ns),
                    r.tids_committed,
                    r.tids_aborted,
                    r.versions_removed,
                    r.attempts.len(),
                    if r.problems.is_empty() {
                        String::new()
                    } else {
                        format!("; wrong: {}", r.problems.join("; "))
                    }
                ),
            }
        })
        .collect()
}

/// `recovery.node`: a crashed node of a replicated partitioned run was found dead, every
/// survivor held the configuration without it, and the survivors settled its coordinators'
/// transactions (applied or voided their records, finished or took back their writes,
/// released their locks) with nothing they could not settle as logged.
fn partition_recovery_check(
    r: &atoll_txn::Recovered,
    p: &atoll_txn::PartitionRecovered,
    crashed_ns: u64,
) -> CheckReport {
    let us = |ns: u64| ns as f64 / 1e3;
    let s = &p.settled;
    let last = r.attempts.iter().filter(|a| a.1.is_some()).count();
    let committed = r
        .attempts
        .iter()
        .filter(|a| matches!(a.1, Some((_, true))))
        .count();
    // A node that froze is found dead before it stops: fenced, it stops when it comes back
    // and a survivor refuses it (or, never refused, at the run's end).
    let died = if crashed_ns <= r.detected_ns {
        format!(
            "node {} crashed at {:.1} µs, found dead {:.1} µs later",
            r.node.0,
            us(crashed_ns),
            us(r.detected_ns - crashed_ns)
        )
    } else {
        format!(
            "node {} stopped answering and was found dead at {:.1} µs, fenced, and stopped {:.1} µs later",
            r.node.0,
            us(r.detected_ns),
            us(crashed_ns - r.detected_ns)
        )
    };
    CheckReport {
        name: "recovery.node".into(),
        passed: r.problems.is_empty(),
        detail: format!(
            "{died}, configuration {} held by every survivor {:.1} µs after that, its transactions settled {:.1} µs later: of its {} coordinators {last} had a last logged transaction, {committed} committed; the backups applied {} of its records and voided {}, the primaries finished {} writes, took back {} inserts, released {} locks and took back the family's words of {} records{}",
            p.epoch,
            us(p.configured_ns.saturating_sub(r.detected_ns)),
            us(r.done_ns.saturating_sub(p.configured_ns)),
            r.attempts.len(),
            s.records_applied,
            s.records_voided,
            s.writes_finished,
            s.inserts_undone,
            s.locks_released,
            s.family_cleared,
            if r.problems.is_empty() {
                String::new()
            } else {
                format!("; wrong: {}", r.problems.join("; "))
            }
        ),
    }
}

/// Abort reasons that are no conflict but a limit reached: a transaction aborted so cannot
/// do its work on any retry (a full table refuses every insert).
const CAPACITY_ABORTS: [Abort; 1] = [Abort::TableFull];

/// Attempts in which one limit refusal is tolerated, and the fewest refusals judged at all:
/// a bounded set of slots a workload cycles through on purpose (Cycle's `dyn_slots`)
/// refuses a few inserts in a short run (at most 9 in 600 attempts across the test
/// matrices); a limit that stops a run refuses every attempt that needs it (a full TPC-C
/// order table: 268,576 of 583,565 attempts in 2.5 s).
const ATTEMPTS_PER_LIMIT_ABORT_MIN: u64 = 100;
const LIMIT_ABORTS_JUDGED_MIN: u64 = 100;

/// The shortest progress interval judged for commits: a shorter one can fall inside one
/// injected pause or think time (the simulator's tests use 1 ms intervals).
const KEPT_COMMITTING_INTERVAL_S_MIN: f64 = 0.1;

/// Whether the run kept doing its work: every progress interval of the measured window
/// committed something (intervals of at least [`KEPT_COMMITTING_INTERVAL_S_MIN`]; with no
/// such interval, the window did), and at most one attempt in
/// [`ATTEMPTS_PER_LIMIT_ABORT_MIN`] aborted on a limit ([`CAPACITY_ABORTS`]), once there
/// are [`LIMIT_ABORTS_JUDGED_MIN`] such aborts, unless the workload fills a bounded table on
/// purpose (`full_table_expected`, its name).
fn work_checks(
    summary: &Summary,
    progress: &[ProgressLine],
    interval_s: f64,
    measured_s: f64,
    full_table_expected: Option<&str>,
) -> Vec<CheckReport> {
    let progress = if interval_s >= KEPT_COMMITTING_INTERVAL_S_MIN {
        progress
    } else {
        &[]
    };
    let empty: Vec<&ProgressLine> = progress
        .iter()
        .filter(|l| l.committed_per_s == 0.0)
        .collect();
    let kept = CheckReport {
        name: "run.kept_committing".into(),
        passed: empty.is_empty() && summary.committed > 0,
        detail: match (progress.len(), empty.first()) {
            (_, Some(first)) => format!(
                "{} of {} progress intervals committed nothing, the first ending at {:.1} s",
                empty.len(),
                progress.len(),
                first.t_s
            ),
            (0, None) => format!(
                "{} committed in the measured {measured_s:.3} s (no whole progress interval of {KEPT_COMMITTING_INTERVAL_S_MIN} s or more)",
                summary.committed
            ),
            (n, None) => format!(
                "each of {n} progress intervals committed, the lowest {:.0} tx/s",
                progress
                    .iter()
                    .map(|l| l.committed_per_s)
                    .fold(f64::INFINITY, f64::min)
            ),
        },
    };
    let reason = |a: Abort| summary.aborts_by_reason.get(a.name()).copied().unwrap_or(0);
    let capacity: u64 = CAPACITY_ABORTS.iter().map(|&a| reason(a)).sum();
    let names = CAPACITY_ABORTS.map(|a| a.name()).join(", ");
    let attempts = summary.committed + summary.aborted;
    let passed = full_table_expected.is_some()
        || capacity < LIMIT_ABORTS_JUDGED_MIN
        || capacity * ATTEMPTS_PER_LIMIT_ABORT_MIN <= attempts;
    let limits = CheckReport {
        name: "run.no_limit_reached".into(),
        passed,
        detail: if let Some(workload) = full_table_expected {
            format!("{capacity} of {attempts} attempts aborted on a limit ({names}): {workload} fills a bounded table on purpose, not judged")
        } else if passed {
            format!("{capacity} of {attempts} attempts aborted on a limit ({names}): fewer than {LIMIT_ABORTS_JUDGED_MIN}, or at most 1 in {ATTEMPTS_PER_LIMIT_ABORT_MIN}")
        } else {
            format!(
                "{capacity} of {attempts} attempts aborted on a limit ({names}), beside {} committed: a table is sized too small for the run (see the workload's capacity knobs; under atoll cluster, --memory-max gives its tables room)",
                summary.committed
            )
        },
    };
    vec![kept, limits]
}

/// The configuration as the report states it.
fn config_report<W: Workload, P: Protocol>(
    cfg: &RunConfig,
    w: &W,
    facts: &RunFacts,
) -> ConfigReport {
    let topology = cfg.topology();
    let shared_data = topology.architecture() == atoll_storage::Architecture::SharedData;
    ConfigReport {
        fabric: cfg.fabric.name(),
        net_profile: match &cfg.fabric {
            Fabric::Sim { net, .. } => sim::net::profile(net)
                .ok()
                .map(|p| crate::config::NetReport::of(&p)),
            Fabric::InProc => None,
        },
        cpu_profile: match &cfg.fabric {
            Fabric::Sim { .. } => cfg.sim_cpu().ok().map(|p| crate::config::CpuReport::of(&p)),
            Fabric::InProc => None,
        },
        faults: match &cfg.fabric {
            Fabric::Sim { faults, .. } => Some(faults.to_keys()),
            Fabric::InProc => None,
        },
        workload: W::NAME,
        workload_knobs: w.knobs(),
        protocol: P::NAME,
        isolation: P::ISOLATION.name(),
        plan: cfg.plan.to_string(),
        nodes: cfg.nodes,
        architecture: topology.architecture().name(),
        memory_nodes: shared_data.then(|| topology.memory_nodes()),
        compute_nodes: shared_data.then(|| topology.compute_nodes()),
        service_nodes: topology
            .services()
            .filter(|_| shared_data)
            .map(|(role, _, node)| (role.key(), node.0))
            .collect(),
        colocated: shared_data.then(|| topology.is_colocated()),
        homes: shared_data.then(|| topology.homes().name()),
        threads: cfg.threads,
        coroutines: cfg.coroutines,
        duration_s: cfg.duration_s,
        warmup_s: cfg.warmup_s,
        seed: cfg.seed,
        net_latency_us: VerbKind::ALL
            .iter()
            .map(|k| (k.name().to_string(), cfg.net_latency_us[*k as usize]))
            .collect(),
        pin_threads: cfg.pin_threads,
        os_threads: facts.os_threads,
        replicas: cfg.log_replicas + 1,
        attempts_max: cfg.attempts_max,
        rate_per_s: cfg.rate_per_s,
        family: family_report(cfg),
        log_ring_words: facts.log_ring_words,
        memory_bytes: facts.memory_bytes,
        placement: cfg.islands.as_ref().map(|i| i.placement.to_string()),
        channel: cfg
            .islands
            .as_ref()
            .and_then(|i| i.channel.as_deref())
            .and_then(|c| sim::net::channel(c).ok())
            .map(|p| crate::config::NetReport::of(&p)),
        machine_model: match (&cfg.fabric, &cfg.islands) {
            (Fabric::Sim { .. }, Some(i)) => Some(crate::run::sim_islands(cfg, i).0.describe()),
            _ => None,
        },
        instance_log: cfg.instance_log.as_ref().map(|l| match (&cfg.fabric, &l.dir) {
            (Fabric::Sim { .. }, _) => {
                let d = sim::net::LogDevice::measured((l.sync_us * 1e3).round() as u64);
                format!(
                    "each node's own, group commit: a write {:.2} µs + {:.2} µs/KiB of CPU (measured into /dev/shm), then {} µs for its device",
                    d.write_base_ns as f64 / 1e3,
                    d.write_ns_per_kib as f64 / 1e3,
                    l.sync_us
                )
            }
            (_, dir) => format!(
                "each node's own, group commit: a ring file in {} written by one write per group",
                dir.as_ref()
                    .map(|d| d.display().to_string())
                    .unwrap_or_else(|| format!(
                        "{} (else the temporary directory)",
                        crate::config::INSTANCE_LOG_DIR_DEFAULT
                    ))
            ),
        }),
    }
}

/// The fabric's own checks: no co-routine of a live node hung; a crashed node's co-routines
/// stopped with it, which is named but is no failure (the crash was injected).
fn fabric_checks(facts: &RunFacts) -> Vec<CheckReport> {
    let stopped: usize = facts.crashed.iter().map(|c| c.2).sum();
    let crashed = facts
        .crashed
        .iter()
        .map(|(n, at_ns, k)| format!("node {} at {} µs ({k} co-routines)", n.0, at_ns / 1000))
        .collect::<Vec<_>>()
        .join(", ");
    if facts.sim.is_none() && facts.crashed.is_empty() {
        return Vec::new();
    }
    vec![CheckReport {
        name: "fabric.every_coroutine_finished".into(),
        passed: facts.coroutines_hung == 0,
        detail: match (facts.coroutines_hung, stopped) {
            (0, 0) if crashed.is_empty() => "every co-routine finished".into(),
            // A crashed node that ran no co-routine (a memory or timestamp node) is named too.
            (0, 0) => format!("every co-routine finished; crashed: {crashed}"),
            (0, _) => format!(
                "every co-routine of a live node finished; {stopped} stopped with their crashed node: {crashed}"
            ),
            (hung, _) => format!(
                "{hung} co-routines of live nodes still waited when the simulation had nothing left to do (a hang); crashed: {}",
                if crashed.is_empty() { "none".to_string() } else { crashed }
            ),
        },
    }]
}
