//! The results of a run: what `--json` writes and what the summary prints.

use crate::config::ConfigReport;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// TPC-C's NewOrder, whose committed rate per minute is the benchmark's metric (tpmC).
const TPCC_NEW_ORDER: &str = atoll_workloads::tpcc::TYPES[atoll_workloads::tpcc::NEW_ORDER_TYPE];
const SECONDS_PER_MINUTE: f64 = 60.0;

/// Latency percentiles in microseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Latency {
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> Self {
        if h.is_empty() {
            return Latency::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Latency {
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
            mean: h.mean() / 1000.0,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub committed: u64,
    pub committed_per_s: f64,
    /// Attempts aborted by concurrency control (each retry that aborts counts once).
    pub aborted: u64,
    /// aborted / (committed + aborted): the concurrency-control abort rate.
    pub abort_rate: f64,
    /// Transactions whose logic decided to abort (SmallBank's insufficient funds); a
    /// complete outcome, neither retried nor in `abort_rate`.
    pub user_aborted: u64,
    pub aborts_by_reason: BTreeMap<String, u64>,
    /// Transactions abandoned: a final non-user abort (not found) or `attempts_max` reached.
    pub gave_up: u64,
    /// Those by the reason of their last attempt (reasons with none left out).
    pub gave_up_by_reason: BTreeMap<String, u64>,
    pub latency_us: Latency,
    /// Measured over every committed transaction (`committed_share` is 1).
    pub fidelity: Fidelity,
}

/// What committed transactions actually did, measured from their read and write sets (not
/// from the knobs that drew them): the workload's fidelity.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Fidelity {
    /// Share of all committed transactions (measured window).
    pub committed_share: f64,
    /// Share of these committed transactions that touched a record on another node than
    /// their coordinator's.
    pub remote_fraction: f64,
    /// Distinct records per committed transaction.
    pub records_per_txn: f64,
    /// writes / (reads + writes), an update counting as one read and one write, an insert
    /// or delete as one write.
    pub write_ratio: f64,
}

impl Fidelity {
    pub fn of(t: &crate::stats::Touched, committed: u64, all_committed: u64) -> Self {
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        Fidelity {
            committed_share: ratio(committed, all_committed),
            remote_fraction: ratio(t.remote_txns, committed),
            records_per_txn: ratio(t.records, committed),
            write_ratio: ratio(t.writes, t.reads + t.writes),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct TypeReport {
    pub name: String,
    pub committed: u64,
    pub committed_per_s: f64,
    pub aborts_by_reason: BTreeMap<String, u64>,
    pub latency_us: Latency,
    pub fidelity: Fidelity,
}

#[derive(Clone, Debug, Serialize)]
pub struct VerbReport {
    pub remote_ops: u64,
    pub remote_bytes: u64,
    pub local_ops: u64,
    pub remote_ops_per_txn: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct VerbsReport {
    pub by_kind: BTreeMap<String, VerbReport>,
    pub remote_ops_per_txn: f64,
    pub doorbells_per_txn: f64,
    pub round_trips_per_txn: f64,
    pub rpcs_served: u64,
    /// Under shared-data: RPCs served by each role's CPUs over the whole run (warm-up
    /// included), where the fabric counts them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpcs_served_by_role: Option<RpcsByRole>,
}

/// RPCs served per node role (shared-data), over the whole run.
#[derive(Clone, Debug, Serialize)]
pub struct RpcsByRole {
    pub memory_nodes: u64,
    pub compute_nodes: u64,
    /// Each of the family's roles, as `NAME_node`: RPCs its own node served (0 when the
    /// role runs on memory node 0, whose RPCs `memory_nodes` counts).
    #[serde(flatten)]
    pub service_nodes: std::collections::BTreeMap<String, u64>,
}

impl RpcsByRole {
    /// `served      RPCs served ...: memory nodes 12, compute nodes 0, ts node 40`.
    fn line(&self) -> String {
        let services: String = self
            .service_nodes
            .iter()
            .map(|(key, n)| format!(", {} {n}", key.replace('_', " ")))
            .collect();
        format!(
            "served      RPCs served over the whole run (warm-up included): memory nodes {}, compute nodes {}{services}",
            self.memory_nodes, self.compute_nodes
        )
    }
}

/// What a run tells its caller while it goes.
#[derive(Clone, Copy, Debug)]
pub enum Progress<'a> {
    /// A measured interval ended.
    Interval(&'a ProgressLine),
    /// A phase began (`loading`, `running`, `checking`), with what it covers.
    Phase {
        phase: &'static str,
        detail: &'a str,
    },
    /// Nothing else was reported for [`crate::run::HEARTBEAT_S`] wall seconds: the run is
    /// alive, `wall_s` into its phase, with what the phase can say of how far it is (the
    /// share loaded and when it will end; a simulation's virtual time).
    Heartbeat {
        phase: &'static str,
        wall_s: f64,
        detail: &'a str,
    },
}

/// The callback a run reports its [`Progress`] to.
pub type ProgressFn<'a> = dyn Fn(&Progress<'_>) + Sync + 'a;

/// One progress interval, cluster-wide.
#[derive(Clone, Debug, Serialize)]
pub struct ProgressLine {
    /// The interval's end, in measured seconds (virtual under the simulator).
    pub t_s: f64,
    pub interval_s: f64,
    /// Transactions committed and attempts ended in the interval.
    pub committed: u64,
    pub attempts: u64,
    pub committed_per_s: f64,
    pub abort_rate: f64,
    /// Aborted attempts by reason (the reasons seen).
    pub aborts_by_reason: BTreeMap<&'static str, u64>,
    /// Latency of the transactions committed in the interval (from their first attempt).
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub latency_us_max: f64,
    /// The interval's latency histogram (ns), for an HDR interval log; not in the JSON.
    #[serde(skip)]
    pub latency_ns: Option<hdrhistogram::Histogram<u64>>,
    /// What the run's memory budget held at the interval's end, and when the budget would
    /// be reached at the interval's growth (`None`: it did not grow).
    pub memory_bytes: u64,
    pub budget_reached_in_s: Option<f64>,
    /// Workers whose counts the interval holds, of the cluster's `workers`: fewer once a
    /// node died (its workers never report again), and such an interval is given at the
    /// run's end, in order with the rest.
    pub workers_reported: u32,
    pub workers: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

/// What a JSON report names itself, so a reader can refuse something else.
pub const FORMAT: &str = "atoll-report";
/// Raised whenever a field changes meaning or goes away (adding one does not).
pub const FORMAT_VERSION: u64 = 1;

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Always `FORMAT` and `FORMAT_VERSION`.
    pub format: &'static str,
    pub format_version: u64,
    /// The run was interrupted (Ctrl-C): the numbers cover `measured_s` only.
    pub partial: bool,
    /// Seconds actually measured: `config.duration_s`, or less when partial.
    pub measured_s: f64,
    pub config: ConfigReport,
    pub summary: Summary,
    pub txn_types: Vec<TypeReport>,
    /// Mean time per committed transaction spent in each stage, in microseconds.
    pub stage_us_mean: BTreeMap<String, f64>,
    pub verbs: VerbsReport,
    pub progress: Vec<ProgressLine>,
    pub checks: Vec<CheckReport>,
    /// All checks passed.
    pub passed: bool,
    /// Wall-clock seconds (in-process runs only: a simulated run's JSON holds only what
    /// the seed determines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_s: Option<f64>,
    /// Wall-clock seconds the simulator ran, for the printed simulation speed.
    #[serde(skip)]
    pub sim_wall_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sim: Option<SimInfo>,
    /// A cluster of processes over UCX (`atoll cluster`): the transport and how it carries
    /// each verb.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ucx: Option<UcxReport>,
    /// Old versions outside the records (NAM-DB's overflow area: `--overflow-versions`),
    /// summed over nodes, whole run: the mover's copies and the reads that walked chains;
    /// and the reads Tell's shared buffers served and missed
    /// ([`atoll_txn::versions::VersionEvent`] names the keys).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versions: Option<BTreeMap<String, u64>>,
    /// The nodes' own commit logs (`--instance-log`), summed over nodes, whole run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_log: Option<InstanceLogReport>,
    /// Per node holding records, in node order: a digest of its records at the end
    /// (`StorageCheck::digest`), to compare two runs' final states.
    pub state_digests: Vec<(u16, u64)>,
    /// A sequenced protocol's (CALVIN's) epochs and the parts of its latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequenced: Option<SeqReport>,
    /// What a replicated run served short of once a node was declared dead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub degraded: Option<DegradedReport>,
    /// Each node declared dead in a replicated partitioned run: when it stopped, was found
    /// dead and left the configuration, and the throughput around it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<FailureReport>,
    /// What the run took from its memory budget: its tables as they grew, and the rest.
    pub memory: MemoryReport,
    /// Build, machine and process: not determined by the seed, even in the simulator.
    pub env: crate::env::EnvReport,
    /// Every attempt, ordered by end time, when recording was asked for.
    #[serde(skip)]
    pub history: Vec<atoll_history::TxnRecord>,
}

/// The family's roles on nodes of their own (numbered from `first` on, after the compute
/// nodes), as the header names them: one role takes every such node (a role of several
/// instances, as Tell's commit managers, names its first only in `service_nodes`).
fn own_nodes(c: &ConfigReport, first: u16) -> String {
    let own: Vec<&str> = c
        .service_nodes
        .iter()
        .filter(|(_, &n)| n >= first)
        .map(|(key, _)| key.trim_end_matches("_node"))
        .collect();
    match own.as_slice() {
        [role] => format!(" + {} {role}", c.nodes.saturating_sub(first)),
        roles => roles.iter().map(|r| format!(" + 1 {r}")).collect(),
    }
}

/// The nodes' own commit logs' records and the group writes that carried them.
#[derive(Clone, Debug, Serialize)]
pub struct InstanceLogReport {
    pub records: u64,
    pub writes: u64,
    /// Records a write carried, on average: the group commit's group.
    pub records_per_write: f64,
}

impl Report {
    /// Every node's state digest: `node N HEX, ...`.
    pub fn digests_line(&self) -> String {
        self.state_digests
            .iter()
            .map(|(n, d)| format!("node {n} {d:016x}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A sequenced protocol's breakdown, measured window: per lane epoch (means), and per
/// committed transaction (means; their sum is about its mean latency).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SeqReport {
    pub lane_epochs: u64,
    /// Measured epoch: from its start to the barrier's end.
    pub epoch_us_mean: f64,
    pub batch_requests_mean: f64,
    pub sequence_us_mean: f64,
    pub dispatch_us_mean: f64,
    /// Waiting for the other nodes' batches, locks and values, and executing.
    pub run_us_mean: f64,
    /// Idle at the barrier.
    pub barrier_us_mean: f64,
    /// Of the epoch, the share lanes spent idle at the barrier.
    pub barrier_idle_share: f64,
    /// Executions per committed transaction (each active participant executes it).
    pub executions_per_txn: f64,
    pub queued_us_mean: f64,
    pub forward_us_mean: f64,
    pub execute_us_mean: f64,
    /// Requests whose records a reconnaissance read found (Calvin's OLLP).
    pub reconnaissance: u64,
    /// Of the committed transactions, the share run in an epoch's second pass (the `lane`
    /// order's cross-lane conflicts).
    pub second_pass_share: f64,
    /// Transactions sequenced again, their records changed since their reconnaissance.
    pub sequenced_again: u64,
}

/// How a replicated partitioned run served once nodes were declared dead: from when the
/// first configuration without one held at every survivor, the partitions no live node
/// serves and those left with fewer live copies than the run keeps.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DegradedReport {
    /// When (µs of the run's clock) the first configuration without a dead node held.
    pub from_us: f64,
    /// Copies the run keeps of each partition (`--replicas`).
    pub replicas: u16,
    /// Partitions whose primary is dead: not served, their records held by their live
    /// backups (fail-over to a backup is not built yet).
    pub unserved: Vec<u16>,
    /// Partitions served with fewer live copies than `replicas`: (partition, live copies).
    pub short_copies: Vec<(u16, u16)>,
}

/// One node's failure as the run saw it: its times on the run's clock (µs, virtual under
/// the simulator) and the cluster's throughput from its progress intervals.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FailureReport {
    pub node: u16,
    /// When it stopped (the simulator's crash); `None` for a node found dead that never
    /// stopped by itself (it froze, came back and was fenced).
    pub stopped_us: Option<f64>,
    /// When its recoverer found it dead, and when the configuration without it held at every
    /// survivor.
    pub detected_us: f64,
    pub configured_us: f64,
    /// Medians of the intervals wholly before it stopped (before it was found dead, if it
    /// never stopped) and wholly after the configuration; the lowest interval between.
    pub committed_per_s_before: Option<f64>,
    pub committed_per_s_after: Option<f64>,
    pub committed_per_s_lowest: Option<f64>,
    /// End of the first interval starting at or after the failure that committed at least
    /// [`STEADY_SHARE_MIN`] of `committed_per_s_after`: when throughput was back.
    pub back_us: Option<f64>,
}

/// The share of its after-failure median an interval reaches for throughput to count as
/// back.
pub const STEADY_SHARE_MIN: f64 = 0.9;

impl FailureReport {
    /// The report's line.
    pub fn line(&self) -> String {
        let rate = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.0}"));
        let stopped = self
            .stopped_us
            .map_or("froze".to_string(), |s| format!("stopped at {s:.1} µs"));
        let after_share = match (self.committed_per_s_before, self.committed_per_s_after) {
            (Some(b), Some(a)) if b > 0.0 => format!(" ({:.0}% of before)", a / b * 100.0),
            _ => String::new(),
        };
        format!(
            "failure     node {} {stopped}, found dead at {:.1} µs, configuration at {:.1} µs; {} tx/s before, {} after{after_share}, lowest {} between; back to {:.0}% of after at {}",
            self.node,
            self.detected_us,
            self.configured_us,
            rate(self.committed_per_s_before),
            rate(self.committed_per_s_after),
            rate(self.committed_per_s_lowest),
            STEADY_SHARE_MIN * 100.0,
            self.back_us.map_or(
                "- (too few intervals: a shorter --progress-interval gives them)".to_string(),
                |s| format!("{s:.1} µs")
            )
        )
    }
}

impl DegradedReport {
    /// The report's line.
    pub fn line(&self) -> String {
        // "partition 1", "partitions 0, 2".
        let list = |ps: &mut dyn Iterator<Item = u16>| {
            let ps: Vec<String> = ps.map(|p| p.to_string()).collect();
            let noun = if ps.len() == 1 {
                "partition"
            } else {
                "partitions"
            };
            format!("{noun} {}", ps.join(", "))
        };
        let mut parts = Vec::new();
        if !self.unserved.is_empty() {
            parts.push(format!(
                "{} not served (primary dead; its live backups hold it, fail-over is not built yet)",
                list(&mut self.unserved.iter().copied())
            ));
        }
        let mut by_copies: BTreeMap<u16, Vec<u16>> = BTreeMap::new();
        for &(p, live) in &self.short_copies {
            by_copies.entry(live).or_default().push(p);
        }
        for (live, ps) in by_copies {
            parts.push(format!(
                "{} at {live} of {} copies",
                list(&mut ps.into_iter()),
                self.replicas
            ));
        }
        format!(
            "degraded    from {:.1} µs: {}",
            self.from_us,
            parts.join("; ")
        )
    }
}

impl SeqReport {
    pub fn of(s: &crate::stats::SeqStats) -> SeqReport {
        let per = |x: u64, n: u64| if n == 0 { 0.0 } else { x as f64 / n as f64 };
        let e = s.lane_epochs;
        SeqReport {
            lane_epochs: e,
            epoch_us_mean: per(s.epoch_ns, e) / 1e3,
            batch_requests_mean: per(s.requests, e),
            sequence_us_mean: per(s.sequence_ns, e) / 1e3,
            dispatch_us_mean: per(s.dispatch_ns, e) / 1e3,
            run_us_mean: per(s.run_ns, e) / 1e3,
            barrier_us_mean: per(s.barrier_ns, e) / 1e3,
            barrier_idle_share: per(s.barrier_ns, s.epoch_ns),
            executions_per_txn: per(s.executions, s.txns),
            queued_us_mean: per(s.queued_ns, s.txns) / 1e3,
            forward_us_mean: per(s.forward_ns, s.txns) / 1e3,
            execute_us_mean: per(s.execute_ns, s.txns) / 1e3,
            reconnaissance: s.reconnaissance,
            second_pass_share: per(s.second_pass, s.txns),
            sequenced_again: s.sequenced_again,
        }
    }

    /// The report's line.
    pub fn line(&self) -> String {
        format!(
            "sequenced   epoch {:.1} us measured over {} lane epochs, {:.1} requests a batch; per lane epoch (us): sequence {:.1}, dispatch {:.1}, run {:.1}, barrier {:.1} ({:.0}% idle); per txn (us): queued {:.1}, forward {:.1}, execute {:.1}; {:.2} executions per txn, {} reconnaissance reads ({} sequenced again), {:.1}% in a second pass",
            self.epoch_us_mean,
            self.lane_epochs,
            self.batch_requests_mean,
            self.sequence_us_mean,
            self.dispatch_us_mean,
            self.run_us_mean,
            self.barrier_us_mean,
            self.barrier_idle_share * 100.0,
            self.queued_us_mean,
            self.forward_us_mean,
            self.execute_us_mean,
            self.executions_per_txn,
            self.reconnaissance,
            self.sequenced_again,
            self.second_pass_share * 100.0
        )
    }
}

/// What a run took from its memory budget (`--memory-max`).
#[derive(Clone, Debug, Serialize)]
pub struct MemoryReport {
    pub budget_bytes: u64,
    /// Where the budget's figure comes from.
    pub budget_source: String,
    /// What the run held at start: tables as loaded, logs, indexes, co-routines.
    pub start_bytes: u64,
    /// What it held at the end (the budget's count: tables as they grew, the rest fixed).
    pub end_bytes: u64,
    /// Bytes each table took at the end, summed over nodes, by table.
    pub table_bytes: BTreeMap<String, u64>,
    /// How fast the tables grew over the run (warm-up included), and when the budget would
    /// be reached at that rate, from the end (`None`: they did not grow).
    pub growth_bytes_per_s: f64,
    pub budget_reached_in_s: Option<f64>,
    /// The growth the budget refused, which stopped the run.
    pub refused: Option<String>,
}

/// How a UCX cluster ran: one process per node, over `transport`.
#[derive(Clone, Debug, Serialize)]
pub struct UcxReport {
    /// `shm` or `tcp`.
    pub transport: String,
    pub processes: u16,
    /// Verb (`read`, `write`, `cas`, `fetch_add`, `rpc`, `local`) -> how UCX carries it.
    pub verbs: BTreeMap<String, String>,
}

/// What the simulator did (deterministic for a seed).
#[derive(Clone, Debug, Serialize)]
pub struct SimInfo {
    /// Virtual seconds simulated.
    pub virtual_s: f64,
    /// Events processed.
    pub events: u64,
    /// Transactions committed in the whole simulated run, warm-up included.
    pub committed_total: u64,
    /// Share of the virtual time the simulated cores were busy (the CPU profile's costs),
    /// mean and highest over workers, whole run: near 1 a stage's time is mostly
    /// co-routines queueing for their core.
    pub cores_busy_mean: f64,
    pub cores_busy_max: f64,
}

impl Report {
    /// The `history.written` check: `written` attempts (how: `written as the run went`), or
    /// why the history file is incomplete, which fails the run.
    pub fn check_history_written(&mut self, written: Result<u64, String>, how: &str) {
        let (passed, detail) = match written {
            Ok(n) => (true, format!("{n} attempts {how}")),
            Err(e) => (false, e),
        };
        self.passed &= passed;
        self.checks.push(CheckReport {
            name: "history.written".into(),
            passed,
            detail,
        });
    }

    /// The human-readable summary.
    pub fn render(&self) -> String {
        let mut o = String::new();
        self.render_head(&mut o);
        self.render_outcome(&mut o);
        self.render_costs(&mut o);
        self.env.render(&mut o);
        for ch in &self.checks {
            let _ = writeln!(
                o,
                "check       {:<44} {}  {}",
                ch.name,
                if ch.passed { "PASS" } else { "FAIL" },
                ch.detail
            );
        }
        o
    }

    /// The title line, the table, an interruption, throughput and tpmC.
    fn render_head(&self, o: &mut String) {
        let c = &self.config;
        let s = &self.summary;
        let nodes = match (c.memory_nodes, c.compute_nodes) {
            (Some(m), Some(cn)) => format!(
                "shared-data {m} memory + {cn} compute{} nodes{}",
                own_nodes(c, m + cn),
                match (c.colocated == Some(true), c.homes == Some("any")) {
                    (true, true) => " (co-located in pairs; homes drawn per transaction)",
                    (true, false) => " (co-located in pairs)",
                    (false, true) => " (homes drawn per transaction)",
                    (false, false) => "",
                }
            ),
            _ => format!("{} nodes", c.nodes),
        };
        let _ = writeln!(
            o,
            "== {} / {} / plan {} | {nodes} x {} threads x {} co-routines | {} fabric, {:.*} s measured",
            c.workload,
            c.protocol,
            c.plan,
            c.threads,
            c.coroutines,
            c.fabric,
            // Short simulated runs last milliseconds: enough places to show them.
            if self.measured_s < 1.0 { 3 } else { 1 },
            self.measured_s
        );
        if let Some(p) = &c.placement {
            let _ = writeln!(o, "placement   {p}");
        }
        if let Some(m) = &c.machine_model {
            let _ = writeln!(o, "machines    {m}");
        }
        if let Some(l) = &c.instance_log {
            let _ = writeln!(o, "log         {l}");
        }
        if let Some(r) = c.rate_per_s {
            let _ = writeln!(
                o,
                "open loop   {r:.0} tx/s offered, {:.0} committed; latency counts from each scheduled start",
                self.summary.committed_per_s
            );
        }
        if let Some(n) = c.workload_knobs.get("table_records") {
            let per_node = c.workload_knobs.get("records").map_or("?", |s| s.as_str());
            let _ = writeln!(o, "table       {n} records ({per_node} per node)");
        }
        match (&self.memory.refused, self.partial) {
            (Some(r), _) => {
                let _ = writeln!(
                    o,
                    "stopped     after {:.2} of {:.2} s measured: {r}; every number covers that part only",
                    self.measured_s, c.duration_s
                );
            }
            (None, true) => {
                let _ = writeln!(
                    o,
                    "partial     interrupted after {:.2} of {:.2} s measured: every number covers that part only",
                    self.measured_s, c.duration_s
                );
            }
            (None, false) => {}
        }
        let _ = writeln!(
            o,
            "throughput  {:>12.0} committed tx/s   ({} committed, {} aborted attempts, abort rate {:.2}%, {} user aborts, gave up {}{})",
            s.committed_per_s,
            s.committed,
            s.aborted,
            s.abort_rate * 100.0,
            s.user_aborted,
            s.gave_up,
            if s.gave_up_by_reason.is_empty() {
                String::new()
            } else {
                let r: Vec<String> = s
                    .gave_up_by_reason
                    .iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect();
                format!(": {}", r.join(", "))
            }
        );
        // TPC-C's metric: committed NewOrders per minute, beside tx/s.
        if c.workload == atoll_workloads::tpcc::Tpcc::NAME_STR {
            if let Some(t) = self.txn_types.iter().find(|t| t.name == TPCC_NEW_ORDER) {
                let share = t.committed as f64 * 100.0 / s.committed.max(1) as f64;
                let _ = writeln!(
                    o,
                    "tpmC        {:>12.0} committed NewOrders per minute ({share:.1}% of committed transactions; no keying or think time, so not TPC-C's audited metric)",
                    t.committed_per_s * SECONDS_PER_MINUTE
                );
            }
        }
    }

    /// Fidelity, aborts by reason and latency per type.
    fn render_outcome(&self, o: &mut String) {
        let s = &self.summary;
        // Measured from what committed transactions touched, per type.
        let types: Vec<String> = self
            .txn_types
            .iter()
            .filter(|t| t.committed > 0)
            .map(|t| {
                format!(
                    "{} {:.1}% (remote {:.1}%, writes {:.1}%)",
                    t.name,
                    t.fidelity.committed_share * 100.0,
                    t.fidelity.remote_fraction * 100.0,
                    t.fidelity.write_ratio * 100.0
                )
            })
            .collect();
        let _ = writeln!(
            o,
            "fidelity    write ratio {:.1}%, remote {:.1}% of committed, {:.1} records/txn; {}",
            s.fidelity.write_ratio * 100.0,
            s.fidelity.remote_fraction * 100.0,
            s.fidelity.records_per_txn,
            types.join(", ")
        );
        let reasons: Vec<String> = s
            .aborts_by_reason
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        let _ = writeln!(
            o,
            "aborts      {}",
            if reasons.is_empty() {
                "none".into()
            } else {
                reasons.join(", ")
            }
        );
        let _ = writeln!(
            o,
            "latency us  {:<18} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "type", "p50", "p90", "p99", "p99.9", "max"
        );
        let row = |o: &mut String, name: &str, l: &Latency| {
            let _ = writeln!(
                o,
                "            {:<18} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                name, l.p50, l.p90, l.p99, l.p999, l.max
            );
        };
        row(o, "all", &s.latency_us);
        for t in &self.txn_types {
            row(o, &t.name, &t.latency_us);
        }
    }

    /// Verbs, versions, RPCs by role, stages, UCX and the simulation.
    /// The stages' mean times per committed transaction, the common ones in their order
    /// and then the family's own.
    fn stages_line(&self) -> String {
        if self.sequenced.is_some() {
            // Its stages run per lane epoch, not per attempt: their times are on that line.
            return "per lane epoch and per txn on the sequenced line".into();
        }
        let common: Vec<&str> = atoll_txn::Stage::COMMON.iter().map(|s| s.name()).collect();
        let own = self
            .stage_us_mean
            .keys()
            .map(String::as_str)
            .filter(|k| !common.contains(k));
        let stages: Vec<String> = common
            .iter()
            .copied()
            .chain(own)
            .filter_map(|name| {
                self.stage_us_mean
                    .get(name)
                    .map(|us| format!("{name} {us:.2}"))
            })
            .collect();
        format!("{} (mean per committed txn)", stages.join(", "))
    }

    fn render_costs(&self, o: &mut String) {
        let v = &self.verbs;
        let kinds: Vec<String> = v
            .by_kind
            .iter()
            .filter(|(_, r)| r.remote_ops > 0)
            .map(|(k, r)| format!("{k} {:.2}", r.remote_ops_per_txn))
            .collect();
        let _ = writeln!(
            o,
            "verbs/txn   {:.2} remote ({}), {:.2} doorbells, {:.2} round trips",
            v.remote_ops_per_txn,
            if kinds.is_empty() {
                "none".into()
            } else {
                kinds.join(", ")
            },
            v.doorbells_per_txn,
            v.round_trips_per_txn
        );
        if let Some(m) = &self.versions {
            use atoll_txn::versions::VersionEvent as E;
            let n = |e: E| m.get(e.name()).copied().unwrap_or(0);
            let (hits, misses) = (n(E::BufferHit), n(E::BufferMiss));
            let revalidated = n(E::BufferRevalidated);
            let served = hits + revalidated;
            if served + misses > 0 {
                let _ = writeln!(
                    o,
                    "buffer      {hits} reads served by the shared buffer, {revalidated} after their unit's stamp, {misses} fetched: hit ratio {:.2}%; whole run",
                    100.0 * served as f64 / (served + misses) as f64
                );
            }
            // A run whose only counts are the buffer's (Tell) has no overflow area to report.
            let buffer = [E::BufferHit, E::BufferMiss, E::BufferRevalidated];
            let others_zero = E::ALL.iter().all(|e| buffer.contains(e) || n(*e) == 0);
            let (hits, misses) = (served, misses);
            if hits + misses == 0 || !others_zero {
                let _ = writeln!(
                o,
                "versions    mover: {} passes, {} versions moved ({} moved bits set, {} lost to installs), ring wrapped {} times, {} entries reclaimed, {} versions waited for a free entry; reads: {} chain walks of {} hops, {} served from overflow, {} beyond the kept versions, and {} updates behind them (both aborted snapshot_too_old); whole run",
                n(E::MoverPass),
                n(E::VersionMoved),
                n(E::MovedBitSet),
                n(E::MovedBitLost),
                n(E::RingWrap),
                n(E::EntryReclaimed),
                n(E::MoverBlocked),
                n(E::ChainWalk),
                n(E::ChainHop),
                n(E::ChainRead),
                n(E::BeyondKept),
                n(E::UpdateBehind)
            );
            }
        }
        if let Some(r) = &v.rpcs_served_by_role {
            let _ = writeln!(o, "{}", r.line());
        }
        let _ = writeln!(o, "stages us   {}", self.stages_line());
        if let Some(d) = &self.degraded {
            let _ = writeln!(o, "{}", d.line());
        }
        for f in &self.failures {
            let _ = writeln!(o, "{}", f.line());
        }
        if let Some(q) = &self.sequenced {
            let _ = writeln!(o, "{}", q.line());
            // A deterministic protocol's final state is the point: printed, to compare runs.
            let _ = writeln!(o, "state       {}", self.digests_line());
        }
        if let Some(u) = &self.ucx {
            let _ = writeln!(
                o,
                "ucx         {} processes over {}: {}",
                u.processes,
                u.transport,
                u.verbs
                    .iter()
                    .filter(|(k, _)| *k == "read" || *k == "cas")
                    .map(|(_, v)| v.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        if let Some(sim) = &self.sim {
            let _ = writeln!(
                o,
                "simulation  {:.4} virtual s in {:.2} wall s: {:.0} committed tx per wall second ({:.1} M per minute), {:.0} events/s; simulated cores busy {:.1}% (mean), {:.1}% (busiest)",
                sim.virtual_s,
                self.sim_wall_s,
                sim.committed_total as f64 / self.sim_wall_s.max(1e-9),
                sim.committed_total as f64 * 60.0 / self.sim_wall_s.max(1e-9) / 1e6,
                sim.events as f64 / self.sim_wall_s.max(1e-9),
                sim.cores_busy_mean * 100.0,
                sim.cores_busy_max * 100.0
            );
        }
    }
}
