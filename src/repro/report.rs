//! An experiment's verdicts and files: each claim judged from the runs (a ratio of two
//! points' medians, of a point and a peer's figure, or a share of runs), `runs.csv`,
//! `summary.json`, `claims.md` and the SVG plot.

use super::{text_of, Claim, Experiment, PeerFigures, RunRow, Verdict};
use std::fmt::Write as _;
use std::path::Path;

/// The median of `xs`, if any.
pub(super) fn median(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = xs.collect();
    (!v.is_empty()).then(|| atoll_runner::stats::median_and_spread(&v).0)
}

/// Whether `row` is of the point `point` names (a partial point names a set of them).
fn is_point(e: &Experiment, row: &RunRow, point: &toml::Table) -> bool {
    point.iter().all(|(k, v)| {
        if *k == e.sweep.key {
            row.x == text_of(v)
        } else {
            row.series == text_of(v)
        }
    })
}

/// A point's figure: the median over its clean runs (its seeds); none if any run of it
/// was not clean, so a claim is never judged on a failed run.
fn figure(e: &Experiment, rows: &[RunRow], point: &toml::Table, which: &str) -> Option<f64> {
    let of: Vec<&RunRow> = rows.iter().filter(|r| is_point(e, r, point)).collect();
    if of.is_empty() || of.iter().any(|r| !r.clean) {
        return None;
    }
    median(of.iter().filter_map(|r| match which {
        "abort_rate" => r.abort_rate,
        "committed_per_s" => r.committed_per_s,
        _ => r.metric,
    }))
}

/// The share of the runs `of` names with the property `share`.
fn share(e: &Experiment, rows: &[RunRow], share: &str, of: Option<&toml::Table>) -> Option<f64> {
    let all = toml::Table::new();
    let runs: Vec<&RunRow> = rows
        .iter()
        .filter(|r| is_point(e, r, of.unwrap_or(&all)))
        .collect();
    let has: Vec<bool> = runs
        .iter()
        .filter_map(|r| match share {
            "passed" => Some(r.passed),
            "clean" => Some(r.clean),
            "serializable" => r.serializable,
            _ => r.snapshot,
        })
        .collect();
    // Every run must have been judged: a share over some of them would mislead.
    if has.is_empty() || has.len() != runs.len() {
        return None;
    }
    Some(has.iter().filter(|&&b| b).count() as f64 / has.len() as f64)
}

pub(super) fn judge(
    e: &Experiment,
    c: &Claim,
    rows: &[RunRow],
    peer: Option<&PeerFigures>,
) -> Verdict {
    let ratio_of = |n: Option<f64>, d: Option<f64>| match (n, d) {
        (Some(n), Some(d)) if d > 0.0 => Some(n / d),
        _ => None,
    };
    let which = c.figure.as_deref().unwrap_or("metric");
    let point = |p: &Option<toml::Table>| p.as_ref().and_then(|p| figure(e, rows, p, which));
    let (figure_, skipped) = match (&c.share, &c.peer) {
        (Some(s), _) => (share(e, rows, s, c.of.as_ref()), false),
        (None, None) if c.value.is_some() => (point(&c.value), false),
        (None, Some(name)) => match peer {
            Some(f) => (
                ratio_of(point(&c.numerator), f.figures.get(name).copied()),
                false,
            ),
            None => (None, true),
        },
        (None, None) => (ratio_of(point(&c.numerator), point(&c.denominator)), false),
    };
    let ratio = figure_.and_then(|r| match &c.relative_to {
        None => Some(r),
        Some(rel) => ratio_of(
            figure(e, rows, &rel.numerator, which),
            figure(e, rows, &rel.denominator, which),
        )
        .filter(|&q| q > 0.0)
        .map(|q| r / q),
    });
    let (bound, holds) = match (c.at_least, c.at_most) {
        (Some(b), _) => (format!(">= {b}"), ratio.map(|r| r >= b)),
        (_, Some(b)) => (format!("<= {b}"), ratio.map(|r| r <= b)),
        _ => unreachable!("load refuses a claim without a bound"),
    };
    let peer_note = match (&c.peer, peer) {
        (Some(name), Some(f)) => format!(
            " ({} {name} = {}, {})",
            f.system,
            f.figures.get(name).map_or("-".into(), |v| v.to_string()),
            f.source
        ),
        _ => String::new(),
    };
    Verdict {
        text: c.text.clone(),
        paper: c.paper.clone() + &peer_note,
        ratio,
        bound,
        verdict: match (holds, skipped) {
            (_, true) => format!(
                "skipped: no peer figures (supply them with --peers DIR, as DIR/NAME.toml; {})",
                e.peer.as_ref().map_or("", |p| p.how.as_str())
            ),
            (Some(true), _) => "holds".into(),
            (Some(false), _) => "does not hold".into(),
            (None, _) => "not judged".into(),
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
    "| experiment | claim | paper | ours (ratio or share) | holds when | verdict |\n| --- | --- | --- | --- | --- | --- |\n";

pub(super) fn write_outputs(
    name: &str,
    e: &Experiment,
    quick: bool,
    out: &Path,
    rows: &[RunRow],
    verdicts: &[Verdict],
    peer: Option<&PeerFigures>,
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
        "seeds": e.seeds.as_ref().map(|s| s.count),
        "check_history": e.check_history,
        "peer": peer.map(|p| serde_json::json!({
            "system": p.system, "source": p.source, "figures": p.figures,
        })),
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
        "# {}\n\n{}\n\n{}{}",
        e.title,
        e.source,
        super::CLAIMS_HEADER,
        claims_rows(name, verdicts)
    );
    std::fs::write(&md_path, md).map_err(|err| fail(&md_path, &err))?;
    let svg_path = out.join(format!("{name}.svg"));
    plot(e, rows, &svg_path).map_err(|err| fail(&svg_path, &err))
}

/// The metric (each point's median over its seeds) against the sweep (by position: its
/// values may be names), a line per series.
fn plot(e: &Experiment, rows: &[RunRow], path: &Path) -> Result<(), String> {
    use plotters::prelude::*;
    let xs = &e.sweep.values;
    let labels: Vec<String> = xs.iter().map(text_of).collect();
    let names: Vec<String> = match &e.series {
        Some(s) => s.values.iter().map(text_of).collect(),
        None => vec![String::new()],
    };
    let lines: Vec<Vec<(f64, f64)>> = names
        .iter()
        .map(|s| {
            let at = |x: &String| {
                median(
                    rows.iter()
                        .filter(|r| r.series == *s && r.x == *x)
                        .filter_map(|r| r.metric),
                )
            };
            labels
                .iter()
                .enumerate()
                .filter_map(|(j, x)| Some((j as f64, at(x)?)))
                .collect()
        })
        .collect();
    let top = lines.iter().flatten().map(|p| p.1).fold(0.0f64, f64::max);
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
    for (i, (s, points)) in names.iter().zip(lines).enumerate() {
        let color = Palette99::pick(i).to_rgba();
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
