//! One run of an experiment: its config file written, the run made in this process or as
//! an `atoll cluster` of processes, its report read back, and its history checked.

use super::{Experiment, RunRow, CLUSTER_KEY, CLUSTER_TRANSPORTS};
use crate::settings::{resolve, BenchArgs};
use std::path::Path;

/// How a run is made.
enum Launch {
    InProcess,
    /// `atoll cluster --nodes N --transport T bench --config K.toml`; without `--nodes` for
    /// a deployment on machines (its placement gives the nodes).
    Cluster {
        transport: String,
        nodes: Option<u16>,
    },
}

impl Launch {
    /// Takes the launch setting out of `table` (it is not a `bench` setting).
    fn take(table: &mut toml::Table) -> Result<Launch, String> {
        match table.remove(CLUSTER_KEY) {
            None => Ok(Launch::InProcess),
            Some(toml::Value::String(t)) if CLUSTER_TRANSPORTS.contains(&t.as_str()) => {
                let on_machines = MACHINE_KEYS.iter().any(|k| table.contains_key(*k));
                let nodes = table
                    .get("nodes")
                    .and_then(|n| n.as_integer())
                    .and_then(|n| u16::try_from(n).ok())
                    .or((!on_machines).then_some(CLUSTER_NODES_DEFAULT));
                Ok(Launch::Cluster {
                    transport: t,
                    nodes,
                })
            }
            Some(v) => Err(format!(
                "{CLUSTER_KEY} = {v}: expected one of {} (a run as atoll cluster processes over that UCX transport)",
                CLUSTER_TRANSPORTS.join(", ")
            )),
        }
    }

    fn name(&self) -> String {
        match self {
            Launch::InProcess => "in-process".into(),
            Launch::Cluster { transport, .. } => format!("cluster {transport}"),
        }
    }

    /// The command that replays run `config` (recording its history again, if it did).
    fn replay(&self, config: &Path, history: Option<&Path>) -> String {
        let history = history.map_or(String::new(), |h| format!(" --history {}", h.display()));
        match self {
            Launch::InProcess => format!("atoll bench --config {}{history}", config.display()),
            Launch::Cluster { transport, nodes } => format!(
                "atoll cluster{} --transport {transport} bench --config {}{history}",
                nodes.map_or(String::new(), |n| format!(" --nodes {n}")),
                config.display()
            ),
        }
    }
}

/// Node processes of a cluster run whose settings name no `nodes` (bench's default).
const CLUSTER_NODES_DEFAULT: u16 = 2;

/// Settings that make a deployment on machines, whose placement gives the nodes.
const MACHINE_KEYS: [&str; 5] = [
    "machines",
    "machine_preset",
    "sockets_per_machine",
    "cores_per_socket",
    "granularity",
];

/// Runs run `k` of `e` with settings `table`, labelled `(x, series)`: an error only when
/// its files cannot be written (a run that fails is a row that says why).
pub(super) fn run_one(
    k: usize,
    mut table: toml::Table,
    e: &Experiment,
    runs_dir: &Path,
    (x, series): (String, String),
    seed: Option<u64>,
) -> Result<RunRow, String> {
    let config = runs_dir.join(format!("{k}.toml"));
    let history = runs_dir.join(format!("{k}.history.jsonl"));
    let launch = Launch::take(&mut table);
    let history = e.check_history.as_ref().map(|_| history);
    let text = toml::to_string(&table).map_err(|err| err.to_string())?;
    std::fs::write(&config, text)
        .map_err(|err| format!("cannot write {}: {err}", config.display()))?;
    let mut row = RunRow {
        run: k,
        x,
        series,
        seed,
        launch: launch.as_ref().map_or("-".into(), Launch::name),
        replay: launch
            .as_ref()
            .map_or(String::new(), |l| l.replay(&config, history.as_deref())),
        metric: None,
        committed_per_s: None,
        abort_rate: None,
        passed: false,
        serializable: None,
        snapshot: None,
        clean: false,
        error: None,
    };
    let report = launch.and_then(|l| match l {
        Launch::InProcess => in_process(&config, history.as_deref()),
        Launch::Cluster { transport, nodes } => {
            cluster(&config, history.as_deref(), &transport, nodes)
        }
    });
    match report {
        Ok(v) => {
            row.metric = metric_of(&v, &e.metric);
            row.committed_per_s = metric_of(&v, "summary.committed_per_s");
            row.abort_rate = metric_of(&v, "summary.abort_rate");
            row.passed = v.get("passed").and_then(|p| p.as_bool()) == Some(true);
            if row.metric.is_none() {
                row.error = Some(format!("the report has no number at {}", e.metric));
            } else if !row.passed {
                row.error = Some("a check FAILED".into());
            }
        }
        Err(err) => row.error = Some(err),
    }
    if let (Some(level), Some(path)) = (&e.check_history, &history) {
        judge_history(&mut row, level, path);
    }
    row.clean = row.passed && row.metric.is_some() && row.error.is_none();
    if let Some(path) = history.as_ref().filter(|_| row.clean) {
        // A clean run's history is judged and done with: only failing ones stay to replay.
        let _ = std::fs::remove_file(path);
    }
    Ok(row)
}

/// A run in this process from its config file: its report as JSON, also written beside it.
fn in_process(config: &Path, history: Option<&Path>) -> Result<serde_json::Value, String> {
    let args = BenchArgs {
        config: Some(config.to_path_buf()),
        history: history.map(Path::to_path_buf),
        quiet: true,
        ..BenchArgs::default()
    };
    let r = resolve(&args)
        .and_then(|r| atoll_runner::run(&r.cfg, &|_| {}).map_err(|e| e.to_string()))?;
    let v = serde_json::to_value(&r).expect("reports serialise");
    let json = config.with_extension("json");
    std::fs::write(&json, v.to_string() + "\n")
        .map_err(|err| format!("cannot write {}: {err}", json.display()))?;
    Ok(v)
}

/// A run as `atoll cluster` processes of this program: its report from the JSON it writes.
fn cluster(
    config: &Path,
    history: Option<&Path>,
    transport: &str,
    nodes: Option<u16>,
) -> Result<serde_json::Value, String> {
    let exe = std::env::current_exe()
        .map_err(|err| format!("cannot find this program to start a cluster: {err}"))?;
    let json = config.with_extension("json");
    let _ = std::fs::remove_file(&json);
    let nodes = nodes.map(|n| ["--nodes".to_string(), n.to_string()]);
    let out = std::process::Command::new(exe)
        .arg("cluster")
        .args(nodes.iter().flatten())
        .args(["--transport", transport, "bench", "--quiet", "--config"])
        .arg(config)
        .arg("--json")
        .arg(&json)
        .args(
            history
                .iter()
                .flat_map(|h| [std::ffi::OsStr::new("--history"), h.as_os_str()]),
        )
        .output()
        .map_err(|err| format!("cannot start atoll cluster: {err}"))?;
    let read = std::fs::read_to_string(&json).ok();
    match read.and_then(|t| serde_json::from_str(&t).ok()) {
        // A run that failed a check still wrote its report: the row says which.
        Some(v) => Ok(v),
        None => {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().rev().find(|l| !l.trim().is_empty());
            Err(format!(
                "atoll cluster exited {} without a report: {}",
                out.status,
                last.unwrap_or("(no message)")
            ))
        }
    }
}

/// Checks run `row`'s history at both levels (snapshot only where it records snapshots);
/// the experiment's `level` decides whether the run is clean.
fn judge_history(row: &mut RunRow, level: &str, path: &Path) {
    use atoll_check as history;
    let parsed = std::fs::File::open(path)
        .map_err(|err| format!("cannot read history {}: {err}", path.display()))
        .and_then(|f| {
            history::parse_with_header_bounded(std::io::BufReader::new(f), HISTORY_BYTES_MAX)
                .map_err(|err| format!("history {}: {err}", path.display()))
        });
    let (header, h) = match parsed {
        Ok(p) => p,
        Err(err) => {
            row.error.get_or_insert(err);
            return;
        }
    };
    row.serializable = Some(history::check(&h, history::Mode::Serializable).ok());
    if history::has_snapshots(&h) {
        row.snapshot = Some(history::check(&h, history::Mode::Snapshot).ok());
    }
    let level = match level {
        "promised" => header.isolation.name(),
        other => other,
    };
    let verdict = match level {
        "snapshot" => row.snapshot,
        _ => row.serializable,
    };
    if verdict != Some(true) && row.error.is_none() {
        row.error = Some(match verdict {
            None => format!("the history records no snapshots to check as {level}"),
            _ => format!(
                "its history is not {level} (atoll check-history {})",
                path.display()
            ),
        });
    }
}

/// Most memory one run's history may take to check: an experiment's histories are of short
/// simulated runs; a longer one is refused, not checked slowly.
const HISTORY_BYTES_MAX: u64 = 4 << 30;

/// The number at dotted `path` of `report`.
fn metric_of(report: &serde_json::Value, path: &str) -> Option<f64> {
    path.split('.')
        .try_fold(report, |v, k| v.get(k))
        .and_then(|v| v.as_f64())
}

/// A line on run `row`: its point, figure or failure, and how to replay a failure.
pub(super) fn describe(e: &Experiment, row: &RunRow) -> String {
    let point = format!(
        "run {}: {}={}{}{}",
        row.run,
        e.sweep.key,
        row.x,
        e.series
            .as_ref()
            .map(|a| format!(" {}={}", a.key, row.series))
            .unwrap_or_default(),
        row.seed.map(|s| format!(" seed={s}")).unwrap_or_default()
    );
    let figure = row.metric.map(|m| format!("{} {m:.3}", e.metric));
    match (&figure, &row.error) {
        (Some(f), None) => format!("{point} -> {f}"),
        (f, Some(err)) => format!(
            "{point} -> {}{err}; replay: {}",
            f.as_ref()
                .map_or("no figure: ".into(), |f| format!("{f}, ")),
            row.replay
        ),
        (None, None) => format!("{point} -> no figure"),
    }
}

/// A line on one point's runs over its seeds: how many were clean, the median figure.
pub(super) fn describe_point(e: &Experiment, rows: &[RunRow]) -> String {
    let clean = rows.iter().filter(|r| r.clean).count();
    let count =
        |f: fn(&RunRow) -> Option<bool>| rows.iter().filter(|r| f(r) == Some(false)).count();
    let first = &rows[0];
    format!(
        "{}={}{}: {clean} of {} seeds clean, median {} {}{}",
        e.sweep.key,
        first.x,
        e.series
            .as_ref()
            .map(|a| format!(" {}={}", a.key, first.series))
            .unwrap_or_default(),
        rows.len(),
        e.metric,
        super::report::median(rows.iter().filter(|r| r.clean).filter_map(|r| r.metric))
            .map_or("-".into(), |m| format!("{m:.3}")),
        if e.check_history.is_some() {
            format!(
                "; histories not serializable {}, not snapshot isolation {}",
                count(|r| r.serializable),
                count(|r| r.snapshot)
            )
        } else {
            String::new()
        }
    )
}
