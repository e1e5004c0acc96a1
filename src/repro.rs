//! `atoll repro`: the experiments the project reproduces, described as data in
//! `experiments/*.toml` and run by the binary: a sweep of `bench` settings, each run's
//! config file, `runs.csv`, `summary.json`, an SVG plot and a table of claims, each judged
//! from the figures measured.

use crate::settings::{resolve, BenchArgs};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Most runs one experiment may ask for (its sweep times its series): a description that
/// asks for more is refused before anything runs.
pub const RUNS_MAX: usize = 512;

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
}

/// A claim of the paper, judged as a ratio of the metric at two points.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    pub text: String,
    /// The paper's figure, as text.
    pub paper: String,
    /// The point measured on top, by its sweep and series values.
    pub numerator: toml::Table,
    /// The point measured below.
    pub denominator: toml::Table,
    /// Divides the ratio by this one's (a ratio of ratios: "drops the most" is its 90% / 10%
    /// against another's 90% / 10%).
    pub relative_to: Option<Ratio>,
    /// The claim holds when numerator / denominator is at least this...
    pub at_least: Option<f64>,
    /// ... or at most this.
    pub at_most: Option<f64>,
}

/// Two points of an experiment whose figures a claim divides.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ratio {
    pub numerator: toml::Table,
    pub denominator: toml::Table,
}

/// One run's settings and figure.
#[derive(Clone, Debug, Serialize)]
pub struct RunRow {
    pub run: usize,
    pub x: String,
    pub series: String,
    pub metric: Option<f64>,
    pub committed_per_s: Option<f64>,
    pub abort_rate: Option<f64>,
    pub passed: bool,
    /// Why the run gave no figure, if it gave none.
    pub error: Option<String>,
}

/// A claim's verdict.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub text: String,
    pub paper: String,
    pub ratio: Option<f64>,
    pub bound: String,
    /// `holds`, `does not hold`, or `not judged` (a point missing or failed).
    pub verdict: &'static str,
}

/// The experiment in `path`, checked: its axes name settings, its claims name points of it.
pub fn load(path: &Path) -> Result<Experiment, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read experiment {}: {e}", path.display()))?;
    let e: Experiment = toml::from_str(&text)
        .map_err(|e| format!("experiment {}: {}", path.display(), e.message().trim_end()))?;
    let series_len = e.series.as_ref().map_or(1, |s| s.values.len());
    let runs = e.sweep.values.len() * series_len;
    if runs == 0 || runs > RUNS_MAX {
        return Err(format!(
            "experiment {}: {runs} runs (sweep x series): expected 1..={RUNS_MAX}",
            path.display()
        ));
    }
    for c in &e.claims {
        if c.at_least.is_none() == c.at_most.is_none() {
            return Err(format!(
                "experiment {}: claim {:?}: expected exactly one of at_least, at_most",
                path.display(),
                c.text
            ));
        }
        let relative = c
            .relative_to
            .iter()
            .flat_map(|r| [&r.numerator, &r.denominator]);
        for point in [&c.numerator, &c.denominator].into_iter().chain(relative) {
            for k in point.keys() {
                let known = *k == e.sweep.key || e.series.as_ref().is_some_and(|s| *k == s.key);
                if !known {
                    return Err(format!(
                        "experiment {}: claim {:?} names {k}, which is neither the sweep's key ({}) nor the series'",
                        path.display(),
                        c.text,
                        e.sweep.key
                    ));
                }
            }
        }
    }
    Ok(e)
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

/// A value's label on its axis: a setting's value, or a group of settings' `label`.
fn text_of(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Table(t) => t.get("label").map(text_of).unwrap_or_else(|| t.to_string()),
        other => other.to_string(),
    }
}

/// The settings of the run at `x` (and `s` on the series axis).
fn settings(e: &Experiment, quick: bool, x: &toml::Value, s: Option<&toml::Value>) -> toml::Table {
    let mut t = e.fixed.clone();
    if quick {
        t.extend(e.quick.clone());
    }
    apply(&mut t, &e.sweep.key, x);
    if let (Some(axis), Some(v)) = (&e.series, s) {
        apply(&mut t, &axis.key, v);
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
/// its `[params]` table, any other key a top-level setting.
fn set(t: &mut toml::Table, key: &str, v: toml::Value) {
    match key.strip_prefix("params.") {
        Some(knob) => {
            let params = t
                .entry("params")
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(p) = params {
                p.insert(knob.to_string(), v);
            }
        }
        None => {
            t.insert(key.to_string(), v);
        }
    }
}

/// The number at dotted `path` of `report`.
fn metric_of(report: &serde_json::Value, path: &str) -> Option<f64> {
    path.split('.')
        .try_fold(report, |v, k| v.get(k))
        .and_then(|v| v.as_f64())
}

/// Runs one experiment into `out` (its directory, created), printing as it goes: the
/// claims' verdicts, and whether every run passed its checks with a figure.
pub fn run(
    name: &str,
    e: &Experiment,
    quick: bool,
    out: &Path,
) -> Result<(Vec<Verdict>, bool), String> {
    let runs_dir = out.join("runs");
    std::fs::create_dir_all(&runs_dir)
        .map_err(|err| format!("cannot create {}: {err}", runs_dir.display()))?;
    let series: Vec<Option<&toml::Value>> = match &e.series {
        Some(s) => s.values.iter().map(Some).collect(),
        None => vec![None],
    };
    let mut rows = Vec::new();
    for s in &series {
        for x in &e.sweep.values {
            let k = rows.len();
            let table = settings(e, quick, x, *s);
            let config = runs_dir.join(format!("{k}.toml"));
            let text = toml::to_string(&table).map_err(|err| err.to_string())?;
            std::fs::write(&config, text)
                .map_err(|err| format!("cannot write {}: {err}", config.display()))?;
            let row = run_one(
                k,
                &config,
                &e.metric,
                text_of(x),
                s.map(text_of).unwrap_or_default(),
            );
            println!(
                "{name} run {k}: {}={}{} -> {}",
                e.sweep.key,
                row.x,
                e.series
                    .as_ref()
                    .map(|a| format!(" {}={}", a.key, row.series))
                    .unwrap_or_default(),
                match (&row.metric, &row.error) {
                    (Some(m), _) => format!(
                        "{} {m:.3}{}",
                        e.metric,
                        if row.passed { "" } else { " (a check FAILED)" }
                    ),
                    (None, Some(err)) => format!("no figure: {err}"),
                    (None, None) => "no figure".into(),
                }
            );
            rows.push(row);
        }
    }
    let verdicts: Vec<Verdict> = e.claims.iter().map(|c| judge(e, c, &rows)).collect();
    write_outputs(name, e, quick, out, &rows, &verdicts)?;
    let clean = rows.iter().all(|r| r.passed && r.metric.is_some());
    Ok((verdicts, clean))
}

fn run_one(k: usize, config: &Path, metric: &str, x: String, series: String) -> RunRow {
    let mut row = RunRow {
        run: k,
        x,
        series,
        metric: None,
        committed_per_s: None,
        abort_rate: None,
        passed: false,
        error: None,
    };
    let args = BenchArgs {
        config: Some(config.to_path_buf()),
        ..BenchArgs::default()
    };
    let report =
        resolve(&args).and_then(|r| atoll_runner::run(&r.cfg, &|_| {}).map_err(|e| e.to_string()));
    match report {
        Ok(r) => {
            let v = serde_json::to_value(&r).expect("reports serialise");
            std::fs::write(config.with_extension("json"), v.to_string() + "\n").ok();
            row.metric = metric_of(&v, metric);
            row.committed_per_s = Some(r.summary.committed_per_s);
            row.abort_rate = Some(r.summary.abort_rate);
            row.passed = r.passed;
            if row.metric.is_none() {
                row.error = Some(format!("the report has no number at {metric}"));
            }
        }
        Err(e) => row.error = Some(e),
    }
    row
}

/// Whether `row` is the point `point` names.
fn is_point(e: &Experiment, row: &RunRow, point: &toml::Table) -> bool {
    point.iter().all(|(k, v)| {
        if *k == e.sweep.key {
            row.x == text_of(v)
        } else {
            row.series == text_of(v)
        }
    })
}

fn judge(e: &Experiment, c: &Claim, rows: &[RunRow]) -> Verdict {
    let figure = |p: &toml::Table| {
        rows.iter()
            .find(|r| is_point(e, r, p))
            .filter(|r| r.passed)
            .and_then(|r| r.metric)
    };
    let ratio_of = |n: &toml::Table, d: &toml::Table| match (figure(n), figure(d)) {
        (Some(n), Some(d)) if d > 0.0 => Some(n / d),
        _ => None,
    };
    let ratio = ratio_of(&c.numerator, &c.denominator).and_then(|r| match &c.relative_to {
        None => Some(r),
        Some(rel) => ratio_of(&rel.numerator, &rel.denominator)
            .filter(|&q| q > 0.0)
            .map(|q| r / q),
    });
    let (bound, holds) = match (c.at_least, c.at_most) {
        (Some(b), _) => (format!(">= {b}"), ratio.map(|r| r >= b)),
        (_, Some(b)) => (format!("<= {b}"), ratio.map(|r| r <= b)),
        _ => unreachable!("load refuses a claim without a bound"),
    };
    Verdict {
        text: c.text.clone(),
        paper: c.paper.clone(),
        ratio,
        bound,
        verdict: match holds {
            Some(true) => "holds",
            Some(false) => "does not hold",
            None => "not judged",
        },
    }
}

/// The claims of one experiment as Markdown table rows.
pub fn claims_rows(name: &str, verdicts: &[Verdict]) -> String {
    let mut o = String::new();
    for v in verdicts {
        let _ = writeln!(
            o,
            "| {name} | {} | {} | {} | {} | {} |",
            v.text,
            v.paper,
            v.ratio.map_or("-".into(), |r| format!("{r:.3}")),
            v.bound,
            v.verdict
        );
    }
    o
}

pub const CLAIMS_HEADER: &str =
    "| experiment | claim | paper | ours (ratio) | holds when | verdict |\n| --- | --- | --- | --- | --- | --- |\n";

fn write_outputs(
    name: &str,
    e: &Experiment,
    quick: bool,
    out: &Path,
    rows: &[RunRow],
    verdicts: &[Verdict],
) -> Result<(), String> {
    let fail =
        |p: &Path, err: &dyn std::fmt::Display| format!("cannot write {}: {err}", p.display());
    let csv_path = out.join("runs.csv");
    let mut w = csv::Writer::from_path(&csv_path).map_err(|err| fail(&csv_path, &err))?;
    for r in rows {
        w.serialize(r).map_err(|err| fail(&csv_path, &err))?;
    }
    w.flush().map_err(|err| fail(&csv_path, &err))?;
    let summary = serde_json::json!({
        "experiment": name,
        "title": e.title,
        "source": e.source,
        "quick": quick,
        "metric": e.metric,
        "sweep": e.sweep.key,
        "series": e.series.as_ref().map(|s| s.key.clone()),
        "runs": rows,
        "claims": verdicts,
        "commit": env!("ATOLL_GIT_COMMIT"),
    });
    let summary_path = out.join("summary.json");
    std::fs::write(
        &summary_path,
        serde_json::to_string_pretty(&summary).expect("json") + "\n",
    )
    .map_err(|err| fail(&summary_path, &err))?;
    let md_path = out.join("claims.md");
    let md = format!(
        "# {}\n\n{}\n\n{CLAIMS_HEADER}{}",
        e.title,
        e.source,
        claims_rows(name, verdicts)
    );
    std::fs::write(&md_path, md).map_err(|err| fail(&md_path, &err))?;
    let svg_path = out.join(format!("{name}.svg"));
    plot(e, rows, &svg_path).map_err(|err| fail(&svg_path, &err))
}

/// The metric against the sweep (by position: its values may be names), a line per series.
fn plot(e: &Experiment, rows: &[RunRow], path: &Path) -> Result<(), String> {
    use plotters::prelude::*;
    let xs = &e.sweep.values;
    let top = rows.iter().filter_map(|r| r.metric).fold(0.0f64, f64::max);
    let root = SVGBackend::new(path, (720, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|err| err.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&e.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(
            -0.5f64..(xs.len() as f64 - 0.5),
            0f64..(top * 1.1).max(1e-9),
        )
        .map_err(|err| err.to_string())?;
    let labels: Vec<String> = xs.iter().map(text_of).collect();
    chart
        .configure_mesh()
        .x_labels(xs.len())
        .x_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc(&e.sweep.key)
        .y_desc(&e.metric)
        .draw()
        .map_err(|err| err.to_string())?;
    let names: Vec<String> = match &e.series {
        Some(s) => s.values.iter().map(text_of).collect(),
        None => vec![String::new()],
    };
    for (i, s) in names.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.series == *s)
            .enumerate()
            .filter_map(|(j, r)| Some((j as f64, r.metric?)))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|err| err.to_string())?
            .label(if s.is_empty() {
                e.metric.clone()
            } else {
                s.clone()
            })
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, color.filled())),
            )
            .map_err(|err| err.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|err| err.to_string())?;
    root.present().map_err(|err| err.to_string())
}
