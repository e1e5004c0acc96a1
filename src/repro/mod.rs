//! `atoll repro`: the experiments the project reproduces, described as data in
//! `experiments/*.toml` and run by the binary: a sweep of `bench` settings (in this process
//! or as an `atoll cluster` of processes), each run's config file, `runs.csv`,
//! `summary.json`, an SVG plot and a table of claims, each judged from the figures measured
//! (against a peer system's figures where the user supplies them).

mod launch;
mod report;

pub use report::{claims_rows, CLAIMS_HEADER};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Most runs one experiment may ask for (its sweep times its series times its seeds): a
/// description that asks for more is refused before anything runs.
pub const RUNS_MAX: usize = 65_536;

/// The setting that makes a run an `atoll cluster` of processes over this UCX transport
/// (`shm` or `tcp`) rather than a run in this process; it is not a `bench` setting.
pub const CLUSTER_KEY: &str = "cluster";

/// One experiment, as its TOML file describes it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// What it reproduces, for the table and the plot's title.
    pub title: String,
    /// Where the claims come from (paper, section, figure).
    pub source: String,
    /// `bench` settings every run shares, as a config file's keys.
    #[serde(default)]
    pub fixed: toml::Table,
    /// Settings laid over `fixed` with `--quick`: a size that finishes in seconds.
    #[serde(default)]
    pub quick: toml::Table,
    /// The x axis: one setting, its values.
    pub sweep: Axis,
    /// The lines: a second setting, its values (one line if absent).
    pub series: Option<Axis>,
    /// Each point run once per seed; a point's figure is the median over its seeds.
    pub seeds: Option<Seeds>,
    /// Each run records its history and `atoll check-history` judges it: `serializable`,
    /// `snapshot`, or `promised` (the protocol's own level), the level a run must pass to be
    /// clean. Both levels' verdicts are recorded (for `share = "serializable"` claims over
    /// snapshot-isolation runs).
    pub check_history: Option<String>,
    /// The outside system some claims compare against, whose figures the user supplies.
    pub peer: Option<Peer>,
    /// The figure of each run: a dotted path into its report JSON
    /// (`summary.committed_per_s`, `summary.latency_us.p99`, `summary.abort_rate`).
    pub metric: String,
    #[serde(default, rename = "claim")]
    pub claims: Vec<Claim>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Axis {
    pub key: String,
    pub values: Vec<toml::Value>,
    /// The values `--quick` runs, if not all: a long sweep's ends, or a point at a smaller
    /// size. Each is labelled as one of `values` (claims name points by label).
    pub quick: Option<Vec<toml::Value>>,
}

impl Axis {
    /// The values run at this size.
    fn values_at(&self, quick: bool) -> &[toml::Value] {
        match (&self.quick, quick) {
            (Some(q), true) => q,
            _ => &self.values,
        }
    }
}

/// Seeds each point runs under, and settings that alternate by seed.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seeds {
    /// The first seed; the others follow it.
    #[serde(default = "first_seed_default")]
    pub first: u64,
    /// Seeds per point.
    pub count: usize,
    /// Seeds per point with `--quick`.
    pub quick: Option<usize>,
    /// Settings laid over a run by its seed's position modulo their number (a run of seed
    /// `first + i` gets `alternate[i % len]`): plans or shapes that take turns.
    #[serde(default)]
    pub alternate: Vec<toml::Table>,
}

fn first_seed_default() -> u64 {
    1
}

/// An outside system whose figures some claims divide by: the user supplies them in
/// `PEERS/NAME.toml` (`atoll repro NAME --peers PEERS`), else those claims are skipped.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    /// The system (`DBx1000`, `Deneva`).
    pub system: String,
    /// How to measure its figures so they compare: its build, settings and formula.
    pub how: String,
}

/// A peer's figures, as the user's file gives them.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerFigures {
    /// The system measured.
    pub system: String,
    /// Where, when and how the figures were measured.
    pub source: String,
    /// Each figure by the name the experiment's claims use.
    pub figures: BTreeMap<String, f64>,
}

/// A claim, judged from the runs: the ratio of the metric at two points (or at a point and
/// a peer's figure), or the share of runs that were clean.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    pub text: String,
    /// The paper's figure, as text.
    pub paper: String,
    /// The point measured on top, by its sweep and series values.
    pub numerator: Option<toml::Table>,
    /// The point measured below...
    pub denominator: Option<toml::Table>,
    /// ... or no ratio: this point's figure itself is judged (an abort rate against the
    /// paper's).
    pub value: Option<toml::Table>,
    /// Which figure of the points a ratio or value takes: `metric` (the experiment's, the
    /// default), `abort_rate` or `committed_per_s`.
    pub figure: Option<String>,
    /// ... or the peer's figure of this name.
    pub peer: Option<String>,
    /// Divides the ratio by this one's (a ratio of ratios: "drops the most" is its 90% / 10%
    /// against another's 90% / 10%).
    pub relative_to: Option<Ratio>,
    /// The share of runs (those of the points `of` names, else all) with this property:
    /// `passed` (the run's checks), `serializable` or `snapshot` (its history at that
    /// level), `clean` (checks, figure and the experiment's history level).
    pub share: Option<String>,
    /// The points whose runs a `share` counts, by sweep and series values.
    pub of: Option<toml::Table>,
    /// The claim holds when the ratio or share is at least this...
    pub at_least: Option<f64>,
    /// ... or at most this.
    pub at_most: Option<f64>,
}

/// The figures of a run a claim may take ([`Claim::figure`]).
pub const FIGURES: [&str; 3] = ["metric", "abort_rate", "committed_per_s"];

/// The properties a `share` claim counts.
pub const SHARES: [&str; 4] = ["passed", "clean", "serializable", "snapshot"];

/// The history levels `check_history` accepts: `promised` is the level the run's protocol
/// promises (its history's header says which).
pub const HISTORY_LEVELS: [&str; 3] = ["serializable", "snapshot", "promised"];

/// The UCX transports a `cluster` setting accepts.
pub const CLUSTER_TRANSPORTS: [&str; 2] = ["shm", "tcp"];

/// Two points of an experiment whose figures a claim divides.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ratio {
    pub numerator: toml::Table,
    pub denominator: toml::Table,
}

/// One run's settings and figures.
#[derive(Clone, Debug, Serialize)]
pub struct RunRow {
    pub run: usize,
    pub x: String,
    pub series: String,
    pub seed: Option<u64>,
    /// `in-process`, or `cluster shm` / `cluster tcp`.
    pub launch: String,
    /// The command that runs it again (its config file is kept).
    pub replay: String,
    pub metric: Option<f64>,
    pub committed_per_s: Option<f64>,
    pub abort_rate: Option<f64>,
    pub passed: bool,
    /// The history checked serializable, if the experiment checks histories.
    pub serializable: Option<bool>,
    /// The history checked as snapshot isolation (where it records snapshots).
    pub snapshot: Option<bool>,
    /// Passed its checks, gave a figure, and its history passed the experiment's level.
    pub clean: bool,
    /// Why the run gave no figure or is not clean, if so.
    pub error: Option<String>,
}

/// A claim's verdict.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub text: String,
    pub paper: String,
    /// The ratio or share measured.
    pub ratio: Option<f64>,
    pub bound: String,
    /// `holds`, `does not hold`, `not judged` (a point missing or failed), or `skipped`
    /// (a peer's figures not supplied).
    pub verdict: String,
}

/// What one experiment's runs came to.
pub struct Outcome {
    pub verdicts: Vec<Verdict>,
    /// Every run clean.
    pub clean: bool,
}

/// The experiment in `path`, checked: its axes name settings, its claims name points of it.
pub fn load(path: &Path) -> Result<Experiment, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read experiment {}: {e}", path.display()))?;
    let e: Experiment = toml::from_str(&text)
        .map_err(|e| format!("experiment {}: {}", path.display(), e.message().trim_end()))?;
    let fail = |m: String| format!("experiment {}: {m}", path.display());
    let series_len = e.series.as_ref().map_or(1, |s| s.values.len());
    let seeds = e
        .seeds
        .as_ref()
        .map_or(1, |s| s.count.max(s.quick.unwrap_or(0)));
    let runs = e.sweep.values.len() * series_len * seeds;
    if e.seeds
        .as_ref()
        .is_some_and(|s| s.count == 0 || s.quick == Some(0))
    {
        return Err(fail("seeds: count and quick must be at least 1".into()));
    }
    if runs == 0 || runs > RUNS_MAX {
        return Err(fail(format!(
            "{runs} runs (sweep x series x seeds): expected 1..={RUNS_MAX}"
        )));
    }
    if let Some(level) = e
        .check_history
        .as_deref()
        .filter(|l| !HISTORY_LEVELS.contains(l))
    {
        return Err(fail(format!(
            "check_history = {level:?}: expected one of {}",
            HISTORY_LEVELS.join(", ")
        )));
    }
    for a in std::iter::once(&e.sweep).chain(&e.series) {
        let labels: Vec<String> = a.values.iter().map(text_of).collect();
        let stray = a
            .quick
            .iter()
            .flatten()
            .map(text_of)
            .find(|v| !labels.contains(v));
        if let Some(v) = stray {
            return Err(fail(format!(
                "{}: quick value {v} is labelled as none of its values ({})",
                a.key,
                labels.join(", ")
            )));
        }
    }
    for c in &e.claims {
        check_claim(&e, c).map_err(|m| fail(format!("claim {:?}: {m}", c.text)))?;
    }
    check_launches(&e).map_err(fail)?;
    Ok(e)
}

/// Every `cluster` setting names a transport a cluster runs over.
fn check_launches(e: &Experiment) -> Result<(), String> {
    let axes = std::iter::once(&e.sweep).chain(&e.series);
    let axis_values = axes.flat_map(|a| {
        let own = a.values.iter().chain(a.quick.iter().flatten());
        own.filter_map(move |v| match v {
            toml::Value::Table(t) => t.get(CLUSTER_KEY),
            v if a.key == CLUSTER_KEY => Some(v),
            _ => None,
        })
    });
    let alternates = e.seeds.iter().flat_map(|s| &s.alternate);
    let tables = [&e.fixed, &e.quick].into_iter().chain(alternates);
    let mut all = tables.filter_map(|t| t.get(CLUSTER_KEY)).chain(axis_values);
    match all.find(|v| !v.as_str().is_some_and(|t| CLUSTER_TRANSPORTS.contains(&t))) {
        Some(v) => Err(format!(
            "{CLUSTER_KEY} = {v}: expected one of {} (a run as atoll cluster processes over that UCX transport)",
            CLUSTER_TRANSPORTS.join(", ")
        )),
        None => Ok(()),
    }
}

/// A claim is a ratio (numerator over denominator or a peer figure), a value (one point's
/// figure) or a share, with exactly one bound, naming only points of its experiment.
fn check_claim(e: &Experiment, c: &Claim) -> Result<(), String> {
    if c.at_least.is_none() == c.at_most.is_none() {
        return Err("expected exactly one of at_least, at_most".into());
    }
    if let Some(f) = c.figure.as_deref().filter(|f| !FIGURES.contains(f)) {
        return Err(format!(
            "figure = {f:?}: expected one of {}",
            FIGURES.join(", ")
        ));
    }
    let ratio = c.numerator.is_some();
    let below = c.denominator.is_some() as u8 + c.peer.is_some() as u8;
    if c.value.is_some() {
        if ratio || below > 0 || c.share.is_some() || c.relative_to.is_some() {
            return Err("a value claim names its point only (no numerator, denominator, peer, share or relative_to)".into());
        }
    }
    match (ratio, below, &c.share) {
        (true, 1, None) => {}
        (false, 0, None) if c.value.is_some() => {}
        (false, 0, Some(s)) if SHARES.contains(&s.as_str()) => {
            if c.relative_to.is_some() {
                return Err("a share has no relative_to".into());
            }
            if matches!(s.as_str(), "serializable" | "snapshot") && e.check_history.is_none() {
                return Err(format!(
                    "share = {s:?} counts histories: the experiment needs check_history"
                ));
            }
        }
        (false, 0, Some(s)) => {
            return Err(format!(
                "share = {s:?}: expected one of {}",
                SHARES.join(", ")
            ))
        }
        _ => {
            return Err(
                "expected numerator with one of denominator or peer, value, or share (with of)"
                    .into(),
            )
        }
    }
    if c.peer.is_some() && e.peer.is_none() {
        return Err("names a peer figure, but the experiment has no [peer]".into());
    }
    let relative = c
        .relative_to
        .iter()
        .flat_map(|r| [&r.numerator, &r.denominator]);
    let points = [&c.numerator, &c.denominator, &c.of, &c.value]
        .into_iter()
        .flatten();
    for point in points.chain(relative) {
        for k in point.keys() {
            let known = *k == e.sweep.key || e.series.as_ref().is_some_and(|s| *k == s.key);
            if !known {
                return Err(format!(
                    "names {k}, which is neither the sweep's key ({}) nor the series'",
                    e.sweep.key
                ));
            }
        }
    }
    Ok(())
}

/// The experiments in `dir`, by name (file stem), in name order.
pub fn catalog(dir: &Path) -> Result<BTreeMap<String, PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        format!(
            "cannot read the experiments directory {}: {e}",
            dir.display()
        )
    })?;
    Ok(entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .filter_map(|p| Some((p.file_stem()?.to_string_lossy().into_owned(), p)))
        .collect())
}

/// The peer's figures for experiment `name` from `peers/NAME.toml`: `Ok(None)` if the user
/// supplied no directory or no file for it (its peer claims are then skipped); an error
/// for a file that is there but unreadable, or lacks a figure a claim names.
pub fn peer_figures(
    name: &str,
    e: &Experiment,
    peers: Option<&Path>,
) -> Result<Option<PeerFigures>, String> {
    let (Some(peer), Some(dir)) = (&e.peer, peers) else {
        return Ok(None);
    };
    let path = dir.join(format!("{name}.toml"));
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|err| format!("cannot read peer figures {}: {err}", path.display()))?;
    let f: PeerFigures = toml::from_str(&text).map_err(|err| {
        format!(
            "peer figures {}: {} (expected system, source and a [figures] table)",
            path.display(),
            err.message().trim_end()
        )
    })?;
    for wanted in e.claims.iter().filter_map(|c| c.peer.as_ref()) {
        if !f.figures.contains_key(wanted) {
            let have: Vec<&str> = f.figures.keys().map(String::as_str).collect();
            return Err(format!(
                "peer figures {}: no figure {wanted:?} of {} (it has {}; {})",
                path.display(),
                peer.system,
                have.join(", "),
                peer.how
            ));
        }
    }
    Ok(Some(f))
}

/// A value's label on its axis: a setting's value, or a group of settings' `label`.
fn text_of(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Table(t) => t.get("label").map(text_of).unwrap_or_else(|| t.to_string()),
        other => other.to_string(),
    }
}

/// The settings of the run at `x` (and `s` on the series axis) under `seed`'s turn.
fn settings(
    e: &Experiment,
    quick: bool,
    x: &toml::Value,
    s: Option<&toml::Value>,
    seed: Option<(usize, u64)>,
) -> toml::Table {
    let mut t = e.fixed.clone();
    if quick {
        for (k, v) in &e.quick {
            set(&mut t, k, v.clone());
        }
    }
    apply(&mut t, &e.sweep.key, x);
    if let (Some(axis), Some(v)) = (&e.series, s) {
        apply(&mut t, &axis.key, v);
    }
    if let (Some(seeds), Some((i, seed))) = (&e.seeds, seed) {
        if !seeds.alternate.is_empty() {
            let turn = toml::Value::Table(seeds.alternate[i % seeds.alternate.len()].clone());
            apply(&mut t, "", &turn);
        }
        t.insert("seed".into(), toml::Value::Integer(seed as i64));
    }
    t
}

/// Sets an axis's value: one setting, or a table of several (`{ label = "...", plan = "rpc",
/// net = "ipoib" }`), its `label` naming the point.
fn apply(t: &mut toml::Table, key: &str, v: &toml::Value) {
    match v {
        toml::Value::Table(group) => {
            for (k, v) in group.iter().filter(|(k, _)| *k != "label") {
                set(t, k, v.clone());
            }
        }
        v => set(t, key, v.clone()),
    }
}

/// Sets setting `key` of a config file's table: `params.NAME` is the workload knob NAME in
/// its `[params]` table (a `params` table merges knob by knob), any other key a top-level
/// setting.
fn set(t: &mut toml::Table, key: &str, v: toml::Value) {
    let params = || toml::Value::Table(toml::Table::new());
    match (key.strip_prefix("params."), v) {
        (Some(knob), v) => {
            if let toml::Value::Table(p) = t.entry("params").or_insert_with(params) {
                p.insert(knob.to_string(), v);
            }
        }
        (None, toml::Value::Table(knobs)) if key == "params" => {
            for (k, v) in knobs {
                set(t, &format!("params.{k}"), v);
            }
        }
        (None, v) => {
            t.insert(key.to_string(), v);
        }
    }
}

/// Why `e`'s cluster runs cannot run with this build, if it has any and they cannot: an
/// experiment of processes is skipped, and says so, where UCX was not built in.
fn cluster_unavailable(e: &Experiment) -> Option<String> {
    let named = |t: &toml::Table| t.contains_key(CLUSTER_KEY);
    let in_axis =
        |a: &Axis| a.key == CLUSTER_KEY || a.values.iter().any(|v| v.as_table().is_some_and(named));
    let alternates = e.seeds.iter().flat_map(|s| &s.alternate);
    let any = named(&e.fixed)
        || named(&e.quick)
        || in_axis(&e.sweep)
        || e.series.as_ref().is_some_and(in_axis)
        || alternates.into_iter().any(named);
    if !any {
        return None;
    }
    atoll_cluster::ucx_available()
        .err()
        .map(|err| format!("its runs are atoll cluster processes, and {err}"))
}

/// The seeds each point runs under: `(position, seed)`, or one run without a seed of its own.
fn seeds_of(e: &Experiment, quick: bool) -> Vec<Option<(usize, u64)>> {
    match &e.seeds {
        None => vec![None],
        Some(s) => {
            let n = if quick {
                s.quick.unwrap_or(s.count)
            } else {
                s.count
            };
            (0..n).map(|i| Some((i, s.first + i as u64))).collect()
        }
    }
}

/// Runs one experiment into `out` (its directory, created), printing as it goes: the
/// claims' verdicts, and whether every run was clean.
pub fn run(
    name: &str,
    e: &Experiment,
    quick: bool,
    out: &Path,
    peer: Option<&PeerFigures>,
) -> Result<Outcome, String> {
    let runs_dir = out.join("runs");
    std::fs::create_dir_all(&runs_dir)
        .map_err(|err| format!("cannot create {}: {err}", runs_dir.display()))?;
    let series: Vec<Option<&toml::Value>> = match &e.series {
        Some(s) => s.values_at(quick).iter().map(Some).collect(),
        None => vec![None],
    };
    if let Some(why) = cluster_unavailable(e) {
        println!("{name}: skipped: {why}");
        let verdicts = e
            .claims
            .iter()
            .map(|c| Verdict {
                text: c.text.clone(),
                paper: c.paper.clone(),
                ratio: None,
                bound: String::new(),
                verdict: format!("skipped: {why}"),
            })
            .collect();
        return Ok(Outcome {
            verdicts,
            clean: true,
        });
    }
    let seeds = seeds_of(e, quick);
    let mut rows = Vec::new();
    for s in &series {
        for x in e.sweep.values_at(quick) {
            let first = rows.len();
            for &seed in &seeds {
                let k = rows.len();
                let table = settings(e, quick, x, *s, seed);
                let labels = (text_of(x), s.map(text_of).unwrap_or_default());
                let row = launch::run_one(k, table, e, &runs_dir, labels, seed.map(|p| p.1))?;
                if e.seeds.is_none() || !row.clean {
                    println!("{name} {}", launch::describe(e, &row));
                }
                rows.push(row);
            }
            if e.seeds.is_some() {
                println!("{name} {}", launch::describe_point(e, &rows[first..]));
            }
        }
    }
    let verdicts: Vec<Verdict> = e
        .claims
        .iter()
        .map(|c| report::judge(e, c, &rows, peer))
        .collect();
    report::write_outputs(name, e, quick, out, &rows, &verdicts, peer)?;
    let clean = rows.iter().all(|r| r.clean);
    Ok(Outcome { verdicts, clean })
}
