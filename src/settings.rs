//! `bench`'s settings: its flags and a config file's keys as one struct ([`BenchArgs`]),
//! the protocol families' knobs added from their declarations ([`FamilyKnobArgs`]), and the
//! run configuration they resolve to ([`resolve`]).

use atoll_fabric::names::did_you_mean;
use atoll_protocols::ProtocolKind;
use atoll_runner::config::Fabric;
use atoll_runner::config::FaultConfig;
use atoll_runner::config::{Roles, NODES_MAX, REPLICAS_MAX};
use atoll_runner::RunConfig;
use atoll_storage::{Architecture, Placement, RoleSpec};
use atoll_txn::{KnobKind, KnobSpec};
use atoll_workloads::{Params, WorkloadKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::PLAN_ALL;

/// The protocol families' knobs as flags: one `--NAME` per knob some family declares
/// ([`ProtocolKind::all_knobs`]), its help saying which families. The values given, by the
/// knob's name, are checked against the run's family when the configuration is resolved.
#[derive(Clone, Debug, Default)]
pub struct FamilyKnobArgs {
    pub given: BTreeMap<String, String>,
    /// The families' node roles placed (`--NAME-node memory|own`), by role name.
    pub placements: BTreeMap<String, String>,
}

/// A node role's help line: the families declaring it, and where it can run.
fn role_help(role: &RoleSpec, families: &[ProtocolKind]) -> String {
    let owners: Vec<String> = families.iter().map(|p| p.title()).collect();
    let several = role.count_knob.map_or(String::new(), |k| {
        format!(
            "; with several (--{}), the i-th on memory node i, or each on a node of its own",
            k.replace('_', "-")
        )
    });
    format!(
        "{} only, shared-data: where the {} runs: memory (a role of memory node 0) or own (a node of its own){several} [default: memory]",
        owners.join(" and "),
        role.what
    )
}

/// A knob's help line: the families declaring it, what it does, its default and range.
fn knob_help(spec: &KnobSpec, families: &[ProtocolKind]) -> String {
    let owners: Vec<String> = families.iter().map(|p| p.title()).collect();
    let accepted = match spec.kind {
        KnobKind::Flag => String::new(),
        KnobKind::Number { default, .. } => {
            format!(" [default: {default}; {}]", spec.accepted())
        }
        KnobKind::Choice { default, .. } => {
            format!(" [default: {default}; {}]", spec.accepted())
        }
    };
    format!("{} only: {}{accepted}", owners.join(" and "), spec.help)
}

impl clap::Args for FamilyKnobArgs {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        for (spec, families) in ProtocolKind::all_knobs() {
            let arg = clap::Arg::new(spec.name)
                .long(spec.flag())
                .help(knob_help(&spec, &families));
            cmd = cmd.arg(match spec.kind {
                KnobKind::Flag => arg.action(clap::ArgAction::SetTrue),
                KnobKind::Number { .. } => arg.value_name("N"),
                KnobKind::Choice { accepted, .. } => arg.value_name(accepted.join("|")),
            });
        }
        for (role, families) in ProtocolKind::all_roles() {
            cmd = cmd.arg(
                clap::Arg::new(role.key())
                    .long(role.flag().trim_start_matches('-').to_string())
                    .value_name("memory|own")
                    .help(role_help(&role, &families)),
            );
        }
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for FamilyKnobArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut a = FamilyKnobArgs::default();
        a.update_from_arg_matches(m)?;
        Ok(a)
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        for (spec, _) in ProtocolKind::all_knobs() {
            let value = match spec.kind {
                KnobKind::Flag => m.get_flag(spec.name).then(|| "true".to_string()),
                _ => m.get_one::<String>(spec.name).cloned(),
            };
            if let Some(v) = value {
                self.given.insert(spec.name.to_string(), v);
            }
        }
        for (role, _) in ProtocolKind::all_roles() {
            if let Some(v) = m.get_one::<String>(&role.key()) {
                self.placements.insert(role.name.to_string(), v.clone());
            }
        }
        Ok(())
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `net_latency_us` in a config file: a number (every class) or a per-class string.
fn string_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Option::<toml::Value>::deserialize(d)? {
        None => None,
        Some(toml::Value::String(s)) => Some(s),
        Some(other) => Some(other.to_string()),
    })
}

/// A TOML value as a knob's text.
fn toml_text(v: toml::Value) -> String {
    match v {
        toml::Value::String(s) => s,
        other => other.to_string(),
    }
}

/// The line of `text` that sets top-level key `key`, for an error that names it.
fn line_of(text: &str, key: &str) -> String {
    text.lines()
        .enumerate()
        .find(|(_, l)| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map(|(i, l)| format!(" line {} `{}`:", i + 1, clip(l.trim())))
        .unwrap_or_default()
}

/// Most characters of a file's text an error echoes: a 10 MB key is named by its start.
const ECHO_CHARS_MAX: usize = 200;

/// `text` as an error echoes it: whole if short, else its start and its length.
fn clip(text: &str) -> String {
    if text.chars().count() <= ECHO_CHARS_MAX {
        return text.to_string();
    }
    let start: String = text.chars().take(ECHO_CHARS_MAX).collect();
    format!("{start}… ({} bytes in all)", text.len())
}

/// The config file's settings (`--config FILE.toml`), or none. Its protocol-family knobs are
/// taken out first; every other key is a [`BenchArgs`] field, and an unknown key or a value
/// of the wrong type is refused with the line it is on.
fn read_config_file(path: Option<&std::path::Path>) -> Result<BenchArgs, String> {
    let Some(path) = path else {
        return Ok(BenchArgs::default());
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
    let refuse = |at: String, e: toml::de::Error| {
        format!(
            "config file {}:{at} {}",
            path.display(),
            clip(e.message().trim_end())
        )
    };
    let mut table: toml::Table = toml::from_str(&text).map_err(|e| {
        let at = e
            .span()
            .map(|sp| text[..sp.start].matches('\n').count() + 1)
            .map(|l| {
                format!(
                    " line {l} `{}`:",
                    clip(text.lines().nth(l - 1).unwrap_or("").trim())
                )
            })
            .unwrap_or_default();
        refuse(at, e)
    })?;
    let mut knobs = FamilyKnobArgs::default();
    for (spec, _) in ProtocolKind::all_knobs() {
        if let Some(v) = table.remove(spec.name) {
            knobs.given.insert(spec.name.to_string(), toml_text(v));
        }
    }
    for (role, _) in ProtocolKind::all_roles() {
        if let Some(v) = table.remove(&role.key()) {
            knobs.placements.insert(role.name.to_string(), toml_text(v));
        }
    }
    if let Some(r) = REPLACED.iter().find(|r| table.contains_key(r.old)) {
        return Err(format!(
            "config file {}:{} {}",
            path.display(),
            line_of(&text, r.old),
            r.refusal(false)
        ));
    }
    // Each key alone first, so a refusal names the line of the key refused.
    for (k, v) in &table {
        let one: toml::Table = [(k.clone(), v.clone())].into_iter().collect();
        if let Err(e) = BenchArgs::deserialize(toml::Value::Table(one)) {
            let knobs: Vec<String> = ProtocolKind::all_knobs()
                .iter()
                .map(|(s, _)| s.name.to_string())
                .chain(ProtocolKind::all_roles().iter().map(|(r, _)| r.key()))
                .collect();
            let also = if e.message().starts_with("unknown field") {
                format!(", or a protocol family's knob: {}", knobs.join(", "))
            } else {
                String::new()
            };
            return Err(refuse(line_of(&text, k), e) + &also);
        }
    }
    let mut file =
        BenchArgs::deserialize(toml::Value::Table(table)).map_err(|e| refuse(String::new(), e))?;
    file.knobs = knobs;
    Ok(file)
}

/// The settings the flags give over the file's: a flag given replaces the file's value,
/// the family knobs merge by name, and what only flags say (output files, `-p`) comes from
/// the flags.
fn overlay(file: BenchArgs, flags: &BenchArgs) -> Result<BenchArgs, String> {
    let as_table = |a: &BenchArgs| match toml::Value::try_from(a) {
        Ok(toml::Value::Table(t)) => Ok(t),
        other => Err(format!("settings do not form a table: {other:?}")),
    };
    let mut merged = as_table(&file)?;
    merged.extend(as_table(flags)?);
    let mut out = BenchArgs::deserialize(toml::Value::Table(merged))
        .map_err(|e| format!("settings: {}", e.message()))?;
    out.file_params = file.file_params;
    out.knobs = file.knobs;
    out.knobs.given.extend(flags.knobs.given.clone());
    out.knobs.placements.extend(flags.knobs.placements.clone());
    out.coalesce = flags.coalesce.clone();
    out.config = flags.config.clone();
    out.params = flags.params.clone();
    out.json = flags.json.clone();
    out.results = flags.results.clone();
    out.replay_faults = flags.replay_faults.clone();
    out.history = flags.history.clone();
    out.quiet = flags.quiet;
    Ok(out)
}

/// `bench`'s settings: its flags, and the keys of a config file (`--config FILE.toml`).
/// One struct for both: the file's settings are read into it, and the flags given override
/// them ([`overlay`]); a setting only one side has is skipped on the other.
#[derive(clap::Args, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BenchArgs {
    /// Fabric: inproc (threads in this process) or sim (deterministic simulator, virtual time)
    /// [default: inproc].
    #[arg(help_heading = "Cluster shape", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fabric: Option<String>,
    /// Simulator network profile: edr-ib, fdr-ib, qdr-ib, 10gbe-tcp, ipoib.
    #[arg(help_heading = "Simulator", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net: Option<String>,
    /// Simulator CPU profile: calibrated (measured by `atoll calibrate`, the default) or xeon
    /// (the first estimate, no coordinator CPU).
    #[arg(help_heading = "Simulator", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_profile: Option<String>,
    /// Simulator only: multiply every cost of the CPU profile by this factor (default 1).
    #[arg(help_heading = "Simulator", long, allow_negative_numbers = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_scale: Option<f64>,
    /// Simulator faults: none, some, or any of spikes=N,spike_us=X,spike_len_us=Y,pauses=N,
    /// pause_us=Z,tear_words=W,tear_ns=S,stall_permille=P,stall_us=T,crash_node=C,crash_us=U,
    /// crash_spread_us=V (the crash at U plus a seeded draw of up to V), freeze_us=F (the
    /// node freezes F instead of crashing, then goes on), op_timeout_us=O (unnamed keys as
    /// in `some`).
    #[arg(help_heading = "Simulator", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<String>,
    /// A sequenced protocol's determinism check (CALVIN): record the run's epochs (every
    /// lane's batches, so its inputs and order), replay them under these faults (as
    /// --faults), and require every node to end in the same state (digests compared)
    #[arg(help_heading = "Simulator", long, value_name = "FAULTS")]
    #[serde(skip)]
    pub replay_faults: Option<String>,
    // The workloads and what each is come from their registration, so a new one needs no
    // edit here.
    #[arg(help_heading = "Workload and protocol", long, help = format!("Workload [default: smallbank]: {} (list one's knobs with --knobs)", WorkloadKind::described()))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    // The protocols come from their registration, as the workloads do.
    #[arg(help_heading = "Workload and protocol", long, help = format!("Protocol [default: occ]: {}", ProtocolKind::accepted()))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Stage plan: one-sided, rpc, per stage (e.g. read=rpc,lock=one-sided,commit=one-sided),
    /// or all (every valid plan of the protocol, ranked) [default: one-sided; rpc for a
    /// protocol with stages not built one-sided (calvin)].
    #[arg(help_heading = "Workload and protocol", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Nodes of the cluster (partitioned architecture) [default: 2].
    #[arg(help_heading = "Cluster shape", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u16>,
    /// partitioned (every node holds a partition and runs transactions) or shared-data
    /// (memory nodes hold the records, compute nodes run the transactions) [default:
    /// partitioned].
    #[arg(help_heading = "Cluster shape", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// Shared-data: nodes holding the records [default: 1].
    #[arg(help_heading = "Cluster shape", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_nodes: Option<u16>,
    /// Shared-data: nodes running the transactions [default: 2].
    #[arg(help_heading = "Cluster shape", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_nodes: Option<u16>,
    /// Shared-data: compute node i shares memory node i's machine and reaches its records
    /// with the CPU's own loads, stores and atomics, not the network (NAM-DB's locality;
    /// simulated and in-process fabrics).
    #[arg(help_heading = "Cluster shape", long)]
    #[serde(skip_serializing_if = "is_false")]
    pub colocate: bool,
    /// Shared-data: where a transaction's local keys (its home warehouse, its local
    /// accounts) are: near (its compute node's home memory node, i mod M) or any (a memory
    /// node drawn for each transaction: no locality, as Tell's processing nodes) [default:
    /// near].
    #[arg(help_heading = "Cluster shape", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub homes: Option<String>,
    /// Worker threads per node [default: 1; 1..=128].
    #[arg(help_heading = "Cluster shape", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<u16>,
    /// Hardware islands: machines the instances are placed on (with --granularity, the
    /// nodes and threads derive from the machines; --nodes and --threads are not given)
    /// [default: 1, or the preset's].
    #[arg(help_heading = "Machines", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machines: Option<u16>,
    /// Sockets of each machine [default: 1, or the preset's].
    #[arg(help_heading = "Machines", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sockets_per_machine: Option<u16>,
    /// Cores of each socket [default: 1, or the preset's].
    #[arg(help_heading = "Machines", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cores_per_socket: Option<u16>,
    /// A machine model of the hardware-islands paper: x5660-cluster (8 machines x 2
    /// sockets x 6 cores) or e7-80core (1 x 8 x 10, a twisted cube); --machines and the
    /// other counts override its.
    #[arg(help_heading = "Machines", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_preset: Option<String>,
    /// An instance per core, socket or machine, or N instances per machine
    /// [default: machine].
    #[arg(help_heading = "Machines", long)]
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_or_number"
    )]
    pub granularity: Option<String>,
    /// Simulator: the channel between instances of one machine: shm, tcp-local or unix
    /// [default: shm]; instances on different machines talk over --net.
    #[arg(help_heading = "Machines", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Simulator, islands model: ns a core pays per socket hop to its page's memory
    /// [default: 41; sources give 25..70].
    #[arg(help_heading = "Machines", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_ns_per_hop: Option<u64>,
    /// Simulator, islands model: ns for a line another core of the socket wrote last
    /// [default: 40; sources give 25..60].
    #[arg(help_heading = "Machines", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line_same_socket_ns: Option<u64>,
    /// Simulator, islands model: ns per hop for a line a core of another socket wrote last
    /// [default: 100; sources give 60..150].
    #[arg(help_heading = "Machines", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line_ns_per_hop: Option<u64>,
    /// Simulator, islands model: µs between two moves of an unbound thread, on average
    /// [default: 4000; sources give 1000..16000].
    #[arg(help_heading = "Machines", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration_interval_us: Option<u64>,
    /// Simulator, islands model: µs a move costs the moved thread (its caches refilled)
    /// [default: 50; sources give 10..200].
    #[arg(help_heading = "Machines", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration_cost_us: Option<u64>,
    /// Each instance (node) keeps its own commit log, shared by its threads with group
    /// commit: a committing writer's record reaches it before any backup's. The simulator
    /// models its writes; real fabrics write a ring file per node.
    #[arg(help_heading = "Machines", long)]
    #[serde(skip_serializing_if = "is_false")]
    pub instance_log: bool,
    /// Real fabrics: where the nodes' own log files go [default: /dev/shm, else the
    /// temporary directory]; needs --instance-log.
    #[arg(help_heading = "Machines", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_log_dir: Option<std::path::PathBuf>,
    /// Simulator: after each group's write, µs until its device has it (0: a file in memory,
    /// the paper's memory-mapped log; 75: fdatasync to this machine's disk) [default: 0;
    /// 0..=1000000]; needs --instance-log.
    #[arg(help_heading = "Machines", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_log_sync_us: Option<f64>,
    /// Coordinator co-routines per thread [default: 8; 1..=256].
    #[arg(help_heading = "Cluster shape", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coroutines: Option<u16>,
    /// Measured seconds [default: 10].
    #[arg(help_heading = "Run", long, allow_negative_numbers = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<f64>,
    /// Warm-up seconds before measuring [default: 1; 0..=3600].
    #[arg(help_heading = "Run", long, allow_negative_numbers = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warmup: Option<f64>,
    /// Seed of every random choice [default: 1].
    #[arg(help_heading = "Run", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Memory the run may take, everything it allocates counted (tables as they grow,
    /// indexes, logs, co-routines): bytes, or with a unit (512MiB, 8GiB); default 75% of
    /// physical memory. A run that would grow past it stops, naming what grew (exit 1).
    #[arg(help_heading = "Run", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_max: Option<String>,
    /// Round-trip latency added to remote verbs, in microseconds: one number for all, or
    /// per class, e.g. read=2,write=2,cas=2.5,fetch_add=2.5,rpc=4.
    #[arg(help_heading = "Cluster shape", long, allow_hyphen_values = true)]
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_or_number"
    )]
    pub net_latency_us: Option<String>,
    /// Copies of each partition: its primary and R-1 backups a commit logs to (1..=3;
    /// default 2, or 1 on a single node).
    #[arg(help_heading = "Cluster shape", long, value_name = "R")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u16>,
    /// `--log-replicas`, replaced by `--replicas` ([`LOG_REPLICAS`]): taken with any value
    /// or none, and hidden, only to be refused naming its replacement.
    #[arg(
        long,
        hide = true,
        num_args = 0..=1,
        default_missing_value = "",
        allow_hyphen_values = true
    )]
    #[serde(skip)]
    pub log_replicas: Option<String>,
    /// Pin worker threads to cores.
    #[arg(help_heading = "Cluster shape", long)]
    #[serde(skip_serializing_if = "is_false")]
    pub pin: bool,
    /// `atoll cluster` only: coalesce the UCX active messages a worker sends one peer worker
    /// within an event-loop turn into one (on, the default), or send each at once (off).
    #[arg(help_heading = "Cluster shape", long)]
    #[serde(skip)]
    pub coalesce: Option<String>,
    /// OS threads carrying the workers (default: one per core).
    #[arg(help_heading = "Cluster shape", long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os_threads: Option<usize>,
    /// A TOML file with any of these settings and a [params] table of workload knobs.
    #[arg(help_heading = "Workload and protocol", long, value_name = "FILE.toml")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// A workload knob, e.g. -p hot_prob=0.5 (repeatable; overrides the config file).
    #[arg(
        help_heading = "Workload and protocol",
        short = 'p',
        value_name = "KEY=VALUE"
    )]
    #[serde(skip)]
    pub params: Vec<String>,
    /// Write the resolved configuration and every result to this file.
    #[arg(help_heading = "Output", long, value_name = "FILE")]
    #[serde(skip)]
    pub json: Option<PathBuf>,
    /// Record every transaction attempt's reads and writes (JSON lines) for check-history.
    #[arg(help_heading = "Output", long, value_name = "FILE")]
    #[serde(skip)]
    pub history: Option<PathBuf>,
    /// List the workload's knobs with their defaults on this cluster shape, and exit.
    #[arg(help_heading = "Workload and protocol", long = "knobs")]
    #[serde(skip)]
    pub list_knobs: bool,
    /// Print only the summary.
    #[arg(help_heading = "Output", long)]
    #[serde(skip)]
    pub quiet: bool,
    /// Seconds of measured time per progress line and results row (virtual seconds under
    /// the simulator; default 1).
    #[arg(help_heading = "Output", long, value_name = "SECONDS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress_interval: Option<f64>,
    /// Write the results to this directory as the run goes: intervals.csv (per interval:
    /// commits, attempts, aborts by reason, p50/p90/p99/max latency), latency.hlog (an HDR
    /// histogram interval log) and summary.json (the report).
    #[arg(help_heading = "Output", long, value_name = "DIR")]
    #[serde(skip)]
    pub results: Option<PathBuf>,
    /// Run the same configuration N times (fresh cluster each) and print the median and
    /// spread of throughput and p50/p99 latency (default 1).
    #[arg(help_heading = "Run", long, value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u32>,
    /// Open loop: offer this many transactions per second in all, each co-routine starting
    /// its next on a fixed schedule, and measure latency from the scheduled start (queueing
    /// included, as YCSB's -target and wrk2 do) [default: closed loop].
    #[arg(help_heading = "Run", long, value_name = "TX_PER_S")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Attempts of one transaction before the driver gives up on it (config file only).
    #[arg(skip)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts_max: Option<u32>,
    /// The config file's `[params]` table of workload knobs (`-p` overrides them).
    #[arg(skip)]
    #[serde(rename = "params", skip_serializing)]
    pub file_params: Option<BTreeMap<String, toml::Value>>,
    /// The protocol family's knobs (`--NAME`, or `NAME = ...` in the file), from the
    /// families' declarations.
    #[command(flatten)]
    #[serde(skip)]
    pub knobs: FamilyKnobArgs,
}

/// The fabric, and the simulator's network, faults and CPU model (refused without it).
fn resolve_fabric(cfg: &mut RunConfig, a: &BenchArgs) -> Result<(), String> {
    let net = a.net.as_ref();
    let faults = a.faults.as_ref();
    let cpu_profile = a.cpu_profile.as_ref();
    let cpu_scale = a.cpu_scale;
    match a.fabric.as_deref().unwrap_or("inproc") {
        "inproc" => {
            if let Some(n) = net {
                return Err(format!(
                    "--net {n} needs --fabric sim (the in-process fabric has no network model)"
                ));
            }
            if let Some(f) = faults {
                return Err(format!("--faults {f} needs --fabric sim"));
            }
            if let Some(p) = cpu_profile {
                return Err(format!(
                    "--cpu-profile {p} needs --fabric sim (the in-process fabric spends real CPU)"
                ));
            }
            if let Some(x) = cpu_scale {
                return Err(format!("--cpu-scale {x} needs --fabric sim"));
            }
        }
        "sim" => {
            cfg.fabric = Fabric::Sim {
                net: net.cloned().unwrap_or_else(|| "edr-ib".into()),
                faults: FaultConfig::parse(faults.map(String::as_str).unwrap_or("none"))
                    .map_err(|e| e.to_string())?,
            }
        }
        other => {
            return Err(format!(
                "unknown fabric '{other}': accepted fabrics are inproc, sim{}",
                did_you_mean(other, ["inproc", "sim"])
            ))
        }
    }
    if let Some(p) = cpu_profile {
        cfg.cpu_profile = p.clone();
    }
    if let Some(x) = cpu_scale {
        cfg.cpu_scale = x;
    }
    Ok(())
}

/// The workload's knobs: the config file's `[params]`, overridden by `-p KEY=VALUE`.
fn resolve_params(a: &BenchArgs) -> Result<Params, String> {
    let mut params = Params::new();
    for (k, v) in a.file_params.clone().unwrap_or_default() {
        let s = match v {
            toml::Value::String(s) => s,
            other => other.to_string(),
        };
        params.insert(k, s);
    }
    let mut seen = std::collections::BTreeSet::new();
    for p in &a.params {
        let (k, v) = p
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| format!("-p '{p}' is not KEY=VALUE (for example -p hot_prob=0.5)"))?;
        // A -p overrides the config file's key; two -p of one key are a mistake, not an
        // override (the last would win in silence).
        if !seen.insert(k.trim()) {
            return Err(format!(
                "-p {} is given twice: expected each workload knob once",
                k.trim()
            ));
        }
        params.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(params)
}

/// A resolved `bench` command: the run's configuration, and whether `--plan all` (from the
/// flag or the config file) asks for one run per valid plan.
pub struct Resolved {
    pub cfg: RunConfig,
    pub plan_all: bool,
    pub repeat: u32,
    /// `--replay-faults`: the recorded epochs are replayed under these faults.
    pub replay: Option<atoll_runner::config::FaultConfig>,
}

/// `--replay-faults`: one simulated run of a sequenced protocol, whose epochs it records.
fn resolve_replay(
    cfg: &mut RunConfig,
    a: &BenchArgs,
    plan_all: bool,
    repeat: u32,
) -> Result<Option<FaultConfig>, String> {
    let Some(spec) = &a.replay_faults else {
        return Ok(None);
    };
    let faults = FaultConfig::parse(spec).map_err(|e| format!("--replay-faults {spec}: {e}"))?;
    if !matches!(cfg.fabric, Fabric::Sim { .. }) {
        return Err(format!(
            "--replay-faults {spec} needs --fabric sim (only the simulator's runs replay exactly)"
        ));
    }
    if !cfg.protocol.sequenced() {
        return Err(format!(
            "--replay-faults {spec}: --protocol {} has no epochs to replay (a sequenced protocol has: calvin)",
            cfg.protocol.name()
        ));
    }
    if faults.crash.is_some() {
        return Err(format!(
            "--replay-faults {spec}: a crashed node loses its records (no recovery yet, issue 41); give faults without crash_node"
        ));
    }
    if plan_all || repeat > 1 {
        return Err(format!(
            "--replay-faults {spec} with --plan all or --repeat: it replays one run"
        ));
    }
    cfg.epoch_log = Some(atoll_txn::EpochLogMode::Record(Default::default()));
    Ok(Some(faults))
}

/// The architecture and node roles from the flags and the config file: `--nodes` for
/// partitioned, `--memory-nodes`, `--compute-nodes` and the family's `--NAME-node` for
/// shared-data.
fn resolve_roles(cfg: &mut RunConfig, a: &BenchArgs) -> Result<(), String> {
    if let Some(h) = a.homes.as_deref() {
        cfg.homes = atoll_storage::Homes::parse(h).ok_or_else(|| {
            format!(
                "--homes '{h}' is not a placement of home keys: accepted are {}",
                atoll_storage::Homes::accepted()
            )
        })?;
    }
    let architecture = a
        .architecture
        .as_deref()
        .unwrap_or(Architecture::Partitioned.name());
    let memory = a.memory_nodes;
    let compute = a.compute_nodes;
    let placements = &a.knobs.placements;
    match Architecture::parse(architecture) {
        Some(Architecture::Partitioned) => {
            let given = [
                memory.map(|_| "--memory-nodes".to_string()),
                compute.map(|_| "--compute-nodes".to_string()),
            ]
            .into_iter()
            .flatten()
            .chain(
                placements
                    .keys()
                    .map(|r| format!("--{}-node", r.replace('_', "-"))),
            )
            .next();
            if let Some(flag) = given {
                return Err(format!(
                    "{flag} needs --architecture shared-data (a partitioned cluster has --nodes, each holding records and running transactions)"
                ));
            }
        }
        Some(Architecture::SharedData) => {
            if let Some(n) = a.nodes {
                return Err(format!(
                    "--nodes {n} with --architecture shared-data: expected --memory-nodes M --compute-nodes C in its place"
                ));
            }
            let memory = memory.unwrap_or(SHARED_DATA_MEMORY_NODES_DEFAULT);
            let placed = cfg
                .protocol
                .place_roles(placements.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .and_then(|placed| {
                    let knobs = a.knobs.given.iter();
                    cfg.protocol.role_instances(
                        placed,
                        knobs.map(|(k, v)| (k.as_str(), v.as_str())),
                        memory,
                    )
                })
                .map_err(|e| e.0)?;
            let own: Vec<String> = placed
                .iter()
                .filter(|(_, p)| *p == Placement::Own)
                .map(|(r, _)| format!(" {} own", r.flag()))
                .collect();
            let compute = compute.unwrap_or(SHARED_DATA_COMPUTE_NODES_DEFAULT);
            if memory == 0 || compute == 0 {
                return Err(format!(
                    "--memory-nodes {memory} --compute-nodes {compute}: shared-data needs at least one of each (expected 1..={NODES_MAX} each)"
                ));
            }
            let total = memory as u32 + compute as u32 + own.len() as u32;
            if total > NODES_MAX as u32 {
                return Err(format!(
                    "--memory-nodes {memory} --compute-nodes {compute}{} make {total} nodes, out of range: expected at most {NODES_MAX}",
                    own.concat()
                ));
            }
            cfg.nodes = total as u16;
            cfg.roles = Roles::SharedData {
                memory_nodes: memory,
            };
            cfg.placements = placements.clone();
        }
        None => {
            return Err(format!(
                "unknown architecture '{architecture}': accepted are partitioned, shared-data{}",
                did_you_mean(architecture, ["partitioned", "shared-data"])
            ))
        }
    }
    Ok(())
}

/// A deployment on machines (`--machines`, `--granularity`, ...): the placement, and from
/// it the nodes and threads, which are then not given.
fn resolve_islands(cfg: &mut RunConfig, a: &BenchArgs) -> Result<(), String> {
    use atoll_fabric::machine::{self, Granularity, Machines, SocketLinks};
    let given = a.machines.is_some()
        || a.sockets_per_machine.is_some()
        || a.cores_per_socket.is_some()
        || a.machine_preset.is_some()
        || a.granularity.is_some();
    if !given {
        if let Some(c) = &a.channel {
            return Err(format!(
                "--channel {c} needs a deployment on machines (--machines or --machine-preset, --granularity)"
            ));
        }
        if let Some((name, v)) = islands_constants(a).first() {
            return Err(format!(
                "--{} {v} needs a deployment on machines (--machines or --machine-preset, --granularity)",
                name.replace('_', "-")
            ));
        }
        return Ok(());
    }
    if let Some(flag) = [
        a.nodes.map(|n| format!("--nodes {n}")),
        a.threads.map(|t| format!("--threads {t}")),
    ]
    .into_iter()
    .flatten()
    .next()
    {
        return Err(format!(
            "{flag} with a deployment on machines: the machines and --granularity give the nodes and threads"
        ));
    }
    let base = match &a.machine_preset {
        Some(name) => machine::preset(name).map_err(|e| e.to_string())?,
        None => Machines {
            machines: 1,
            sockets_per_machine: 1,
            cores_per_socket: 1,
            links: SocketLinks::Full,
        },
    };
    let machines = Machines {
        machines: a.machines.unwrap_or(base.machines),
        sockets_per_machine: a.sockets_per_machine.unwrap_or(base.sockets_per_machine),
        cores_per_socket: a.cores_per_socket.unwrap_or(base.cores_per_socket),
        // A preset's links hold for its own socket count; another is a full mesh.
        links: match a.sockets_per_machine {
            Some(s) if s != base.sockets_per_machine => SocketLinks::Full,
            _ => base.links,
        },
    };
    let g = a.granularity.as_deref().unwrap_or("machine");
    let granularity = Granularity::parse(g).ok_or_else(|| {
        format!(
            "--granularity '{g}' is not a deployment: expected {} or a number of instances per machine",
            Granularity::NAMES.join(", ")
        )
    })?;
    let placement =
        machine::Placement::derive(machines, granularity, NODES_MAX).map_err(|e| e.to_string())?;
    cfg.nodes = placement.nodes();
    cfg.threads = placement.threads_per_node;
    cfg.islands = Some(atoll_runner::config::IslandsConfig {
        placement,
        channel: a.channel.clone(),
        constants: islands_constants(a),
    });
    Ok(())
}

/// Each node's own log (`--instance-log`, its directory and device), or none; its other
/// flags without it refused.
fn resolve_instance_log(
    a: &BenchArgs,
) -> Result<Option<atoll_runner::config::InstanceLogConfig>, String> {
    match (a.instance_log, &a.instance_log_dir, a.instance_log_sync_us) {
        (false, None, None) => Ok(None),
        (false, dir, _) => Err(format!(
            "{} needs --instance-log",
            if dir.is_some() {
                "--instance-log-dir"
            } else {
                "--instance-log-sync-us"
            }
        )),
        (true, dir, sync) => Ok(Some(atoll_runner::config::InstanceLogConfig {
            dir: dir.clone(),
            sync_us: sync.unwrap_or(0.0),
        })),
    }
}

/// The islands model's constants the flags set, by the model's names.
fn islands_constants(a: &BenchArgs) -> Vec<(String, u64)> {
    [
        ("remote_ns_per_hop", a.remote_ns_per_hop),
        ("line_same_socket_ns", a.line_same_socket_ns),
        ("line_ns_per_hop", a.line_ns_per_hop),
        ("migration_interval_us", a.migration_interval_us),
        ("migration_cost_us", a.migration_cost_us),
    ]
    .into_iter()
    .filter_map(|(name, v)| v.map(|v| (name.to_string(), v)))
    .collect()
}

/// Shared-data's shape when `--memory-nodes` or `--compute-nodes` is not given.
const SHARED_DATA_MEMORY_NODES_DEFAULT: u16 = 1;
const SHARED_DATA_COMPUTE_NODES_DEFAULT: u16 = 2;

/// Progress lines a simulated run prints over its duration when `--progress-interval` is
/// not given.
const SIM_PROGRESS_LINES: f64 = 10.0;

/// `--progress-interval`, or for a simulated run a tenth of it (at most the usual second):
/// simulated runs are mostly sub-second in virtual time, and print progress too.
fn progress_interval_s(cfg: &RunConfig, a: &BenchArgs) -> f64 {
    match a.progress_interval {
        Some(v) => v,
        None if matches!(cfg.fabric, Fabric::Sim { .. }) => (cfg.duration_s / SIM_PROGRESS_LINES)
            .clamp(atoll_runner::config::PROGRESS_INTERVAL_S_MIN, 1.0),
        None => cfg.progress_interval_s,
    }
}

/// Outputs that hold one run, refused with `--plan all` or `--repeat`.
fn one_run_outputs(a: &BenchArgs, plan_all: bool) -> Result<(), String> {
    if let (Some(dir), true) = (&a.results, plan_all || a.repeat.unwrap_or(1) > 1) {
        return Err(format!(
            "--results {} with --plan all or --repeat: a results directory holds one run (use --json for theirs)",
            dir.display()
        ));
    }
    Ok(())
}

/// The plan `--plan` gives (`Ok(true)` for `all`, which `bench` resolves: every valid plan
/// of the protocol, one run each); without one, the default, or over rpc for a protocol
/// that refuses it, rather than a refusal of a default nobody chose.
fn resolve_plan(cfg: &mut RunConfig, plan: Option<&str>) -> Result<bool, String> {
    match plan {
        Some(p) if p.trim() == PLAN_ALL => return Ok(true),
        Some(p) => cfg.plan = cfg.protocol.parse_plan(p).map_err(|e| e.0)?,
        None if cfg.protocol.check_plan(&cfg.plan).is_err() => {
            if let Ok(rpc) = cfg.protocol.parse_plan("rpc") {
                if cfg.protocol.check_plan(&rpc).is_ok() {
                    cfg.plan = rpc;
                }
            }
        }
        None => {}
    }
    Ok(false)
}

/// The backups each commit logs to (`RunConfig::log_replicas`): `--replicas R` less the
/// primary, or unless given, one when there is another node to hold it. `--replicas 0`
/// leaves the default, for [`no_replicas_refused`] to refuse once the shape is validated.
fn resolve_replicas(cfg: &mut RunConfig, a: &BenchArgs) {
    cfg.log_replicas = match (a.replicas, cfg.roles) {
        (Some(r), _) if r > 0 => r - 1,
        (_, Roles::Partitioned) => RunConfig::default_log_replicas(cfg.nodes),
        // Every compute node has a memory node to log to, unless co-located with the only one.
        (_, Roles::SharedData { .. }) => cfg.topology().log_replicas_max().min(1),
    };
}

/// `--replicas 0` refused: a partition's primary is its first copy. Named with the range
/// the run's shape accepts (as [`RunConfig::validate`] bounds it).
fn no_replicas_refused(cfg: &RunConfig, a: &BenchArgs) -> Result<(), String> {
    if a.replicas != Some(0) {
        return Ok(());
    }
    let max = REPLICAS_MAX.min(cfg.topology().log_replicas_max() + 1);
    Err(format!(
        "replicas=0 is out of range: expected 1..={max} (the copies of each partition count its primary)"
    ))
}

/// A setting replaced by another: a flag or config-file key of its old name is refused
/// naming the new one (exit 2), rather than as unknown.
struct Replaced {
    /// The old key (its flag: `--` and dashes).
    old: &'static str,
    /// The new key.
    new: &'static str,
    /// The new key's value, as its refusal names it.
    value: &'static str,
    /// How an old value becomes a new one.
    how: &'static str,
    /// An old value and the new one it is.
    example: (&'static str, &'static str),
}

/// `--log-replicas B` (the backups each commit logs to), replaced by `--replicas R` (the
/// copies of each partition) in issue 41.
const LOG_REPLICAS: Replaced = Replaced {
    old: "log_replicas",
    new: "replicas",
    value: "R",
    how: "R = backups + 1",
    example: ("0", "1"),
};

/// The settings replaced so far, each also a hidden [`BenchArgs`] flag to be refused.
const REPLACED: &[Replaced] = &[LOG_REPLICAS];

impl Replaced {
    /// Its refusal, as a flag (`--log-replicas`) or as a config file's key.
    fn refusal(&self, as_flag: bool) -> String {
        let (old, new, ex) = (self.old, self.new, self.example);
        if as_flag {
            let (old, new) = (old.replace('_', "-"), new.replace('_', "-"));
            format!(
                "--{old} was replaced by --{new} {} ({}: --{old} {} is --{new} {})",
                self.value, self.how, ex.0, ex.1
            )
        } else {
            format!(
                "{old} was replaced by {new} = {} ({}: {old} = {} is {new} = {})",
                self.value, self.how, ex.0, ex.1
            )
        }
    }
}

/// A `bench` command's run configuration, from its flags over its config file's settings.
pub fn resolve(flags: &BenchArgs) -> Result<Resolved, String> {
    if flags.log_replicas.is_some() {
        return Err(LOG_REPLICAS.refusal(true));
    }
    let merged = overlay(read_config_file(flags.config.as_deref())?, flags)?;
    let a = &merged;
    let mut cfg = RunConfig::default();
    resolve_fabric(&mut cfg, a)?;
    if let Some(w) = a.workload.as_ref() {
        cfg.workload = WorkloadKind::parse(w).ok_or_else(|| {
            format!(
                "unknown workload '{w}': accepted workloads are {}{}",
                WorkloadKind::accepted(),
                did_you_mean(w, WorkloadKind::ALL.iter().map(|k| k.name()))
            )
        })?;
    }
    if let Some(p) = a.protocol.as_ref() {
        cfg.protocol = ProtocolKind::parse(p).ok_or_else(|| {
            format!(
                "unknown protocol '{p}': accepted protocols are {}{}",
                ProtocolKind::accepted(),
                did_you_mean(p, ProtocolKind::ALL.iter().map(|k| k.name()))
            )
        })?;
    }
    let plan_all = resolve_plan(&mut cfg, a.plan.as_deref())?;
    if let Some(v) = a.nodes {
        cfg.nodes = v;
    }
    resolve_roles(&mut cfg, a)?;
    if let Some(v) = a.threads {
        cfg.threads = v;
    }
    resolve_islands(&mut cfg, a)?;
    cfg.instance_log = resolve_instance_log(a)?;
    if let Some(v) = a.coroutines {
        cfg.coroutines = v;
    }
    if let Some(v) = a.duration {
        cfg.duration_s = v;
    }
    if let Some(v) = a.warmup {
        cfg.warmup_s = v;
    }
    if let Some(v) = a.seed {
        cfg.seed = v;
    }
    cfg.progress_interval_s = progress_interval_s(&cfg, a);
    if let Some(s) = a.memory_max.as_ref() {
        cfg.memory_max_bytes =
            Some(atoll_runner::config::parse_bytes("--memory-max", s).map_err(|e| e.0)?);
    }
    if let Some(s) = a.net_latency_us.as_ref() {
        cfg.net_latency_us = atoll_runner::config::parse_latency_us(s).map_err(|e| e.0)?;
    }
    cfg.colocate = a.colocate;
    resolve_replicas(&mut cfg, a);
    cfg.attempts_max = a.attempts_max.unwrap_or(cfg.attempts_max);
    cfg.rate_per_s = a.rate;
    cfg.pin_threads = a.pin;
    cfg.knobs = a.knobs.given.clone();
    cfg.os_threads = a.os_threads;
    cfg.params = resolve_params(a)?;
    cfg.record_history = a.history.is_some();
    // Streamed to the file as the run goes: memory stays bounded whatever the duration.
    cfg.history_file = a.history.clone();
    if let Some(path) = a.history.as_ref().filter(|_| !a.quiet) {
        eprintln!(
            "history: written to {} as the run goes (one JSON line per attempt)",
            path.display()
        );
    }
    cfg.validate().map_err(|e| e.0)?;
    no_replicas_refused(&cfg, a)?;
    one_run_outputs(a, plan_all)?;
    if plan_all && cfg.record_history {
        return Err(
            "--history with --plan all: a history file holds one run (name one plan)".into(),
        );
    }
    let repeat = a.repeat.unwrap_or(1);
    atoll_runner::repeat::check(repeat, cfg.record_history, plan_all).map_err(|e| e.0)?;
    let replay = resolve_replay(&mut cfg, a, plan_all, repeat)?;
    Ok(Resolved {
        cfg,
        plan_all,
        repeat,
        replay,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_a_family_knob_is_no_setting_of_bench_itself() {
        for (spec, _) in ProtocolKind::all_knobs() {
            let one: toml::Table = [(spec.name.to_string(), toml::Value::Boolean(true))]
                .into_iter()
                .collect();
            let e = BenchArgs::deserialize(toml::Value::Table(one))
                .err()
                .unwrap_or_else(|| panic!("knob {} is also a bench setting", spec.name));
            assert!(
                e.message().starts_with("unknown field"),
                "{}: {e}",
                spec.name
            );
        }
    }

    #[test]
    fn settings_flags_given_override_the_files_and_knobs_merge() {
        let file = BenchArgs {
            nodes: Some(4),
            threads: Some(2),
            colocate: true,
            knobs: FamilyKnobArgs {
                given: [("rsi_versions".to_string(), "2".to_string())].into(),
                placements: [("ts".to_string(), "own".to_string())].into(),
            },
            ..BenchArgs::default()
        };
        let flags = BenchArgs {
            nodes: Some(3),
            knobs: FamilyKnobArgs {
                given: [("vector_fetcher".to_string(), "true".to_string())].into(),
                placements: [("ts".to_string(), "memory".to_string())].into(),
            },
            ..BenchArgs::default()
        };
        let m = overlay(file, &flags).unwrap();
        assert_eq!((m.nodes, m.threads, m.colocate), (Some(3), Some(2), true));
        assert_eq!(m.knobs.given.len(), 2);
        assert_eq!(
            m.knobs.placements["ts"], "memory",
            "the flag's placement wins"
        );
    }
}
