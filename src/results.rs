//! `bench --results DIR`: a run's results as files beside its printed report. The
//! per-interval series as CSV (written as the run goes, so an interrupted run keeps what it
//! measured), each interval's latency histogram as an HDR histogram interval log (mergeable,
//! readable by HdrHistogram's tools), and the report as JSON. Only the CLI writes CSV.

use atoll_runner::{ProgressLine, Report};
use atoll_txn::Abort;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The per-interval series.
pub const INTERVALS_CSV: &str = "intervals.csv";
/// Each interval's latency histogram (ns), HDR interval log format (V2, compressed).
pub const LATENCY_HLOG: &str = "latency.hlog";
/// The report, as `--json` writes it.
pub const SUMMARY_JSON: &str = "summary.json";

/// HdrHistogram's tools print values divided by this: the log holds nanoseconds, its
/// readers show microseconds.
const HLOG_MAX_VALUE_DIVISOR: f64 = 1_000.0;

/// An open results directory.
pub struct Results {
    dir: PathBuf,
    csv: Mutex<csv::Writer<std::fs::File>>,
    /// The first CSV write error, reported at the end (the run itself goes on).
    error: Mutex<Option<String>>,
}

impl Results {
    /// Creates `dir` (and its parents) and the CSV with its header, before the run starts,
    /// so an unwritable place is refused up front rather than after the run.
    pub fn create(dir: &Path) -> Result<Results, String> {
        let bad = |e: &dyn std::fmt::Display| {
            format!(
                "--results {}: cannot write there ({e}): give a directory that can be created and written",
                dir.display()
            )
        };
        std::fs::create_dir_all(dir).map_err(|e| bad(&e))?;
        let path = dir.join(INTERVALS_CSV);
        let mut csv = csv::Writer::from_path(&path).map_err(|e| bad(&e))?;
        csv.write_record(header()).map_err(|e| bad(&e))?;
        csv.flush().map_err(|e| bad(&e))?;
        // The other files are written at the end: make sure they can be.
        for name in [LATENCY_HLOG, SUMMARY_JSON] {
            std::fs::File::create(dir.join(name)).map_err(|e| bad(&e))?;
        }
        Ok(Results {
            dir: dir.to_path_buf(),
            csv: Mutex::new(csv),
            error: Mutex::new(None),
        })
    }

    /// Appends one interval to the CSV, flushed at once (a reader may follow it).
    pub fn interval(&self, l: &ProgressLine) {
        let mut csv = self.csv.lock().unwrap_or_else(|p| p.into_inner());
        let r = csv.write_record(row(l)).and_then(|()| Ok(csv.flush()?));
        if let Err(e) = r {
            let mut error = self.error.lock().unwrap_or_else(|p| p.into_inner());
            error.get_or_insert_with(|| format!("writing {INTERVALS_CSV}: {e}"));
        }
    }

    /// Writes the report and the latency log; the files written, or the first error.
    pub fn finish(&self, report: &Report) -> Result<Vec<PathBuf>, String> {
        if let Some(e) = self.error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(format!("{}: {e}", self.dir.display()));
        }
        let summary = self.dir.join(SUMMARY_JSON);
        let text = serde_json::to_string_pretty(report).expect("reports serialise");
        std::fs::write(&summary, text + "\n")
            .map_err(|e| format!("cannot write {}: {e}", summary.display()))?;
        let hlog = self.dir.join(LATENCY_HLOG);
        std::fs::write(&hlog, latency_log(&report.progress)?)
            .map_err(|e| format!("cannot write {}: {e}", hlog.display()))?;
        Ok(vec![self.dir.join(INTERVALS_CSV), hlog, summary])
    }
}

/// The CSV's columns: one per abort reason, whichever occurred, so every run's file has the
/// same shape.
fn header() -> Vec<String> {
    let mut h: Vec<String> = [
        "t_s",
        "interval_s",
        "committed",
        "attempts",
        "committed_per_s",
    ]
    .map(String::from)
    .into();
    h.push("abort_rate".into());
    h.extend(Abort::ALL.iter().map(|a| format!("aborts_{}", a.name())));
    h.extend(
        [
            "p50_us",
            "p90_us",
            "p99_us",
            "latency_us_max",
            "memory_bytes",
            "workers_reported",
            "workers",
        ]
        .map(String::from),
    );
    h
}

fn row(l: &ProgressLine) -> Vec<String> {
    let mut r = vec![
        format!("{:.6}", l.t_s),
        format!("{:.6}", l.interval_s),
        l.committed.to_string(),
        l.attempts.to_string(),
        format!("{:.1}", l.committed_per_s),
        format!("{:.6}", l.abort_rate),
    ];
    r.extend(Abort::ALL.iter().map(|a| {
        l.aborts_by_reason
            .get(a.name())
            .copied()
            .unwrap_or(0)
            .to_string()
    }));
    r.extend(
        [l.p50_us, l.p90_us, l.p99_us, l.latency_us_max]
            .iter()
            .map(|v| format!("{v:.3}")),
    );
    r.push(l.memory_bytes.to_string());
    r.push(l.workers_reported.to_string());
    r.push(l.workers.to_string());
    r
}

/// The intervals' histograms as an HDR interval log: each at its start in measured time.
fn latency_log(progress: &[ProgressLine]) -> Result<Vec<u8>, String> {
    use hdrhistogram::serialization::{interval_log, V2DeflateSerializer};
    use std::time::Duration;
    let mut out = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let mut log = interval_log::IntervalLogWriterBuilder::new()
        .add_comment("atoll: committed transactions' latency per progress interval, in ns")
        .with_max_value_divisor(HLOG_MAX_VALUE_DIVISOR)
        .begin_log_with(&mut out, &mut serializer)
        .map_err(|e| format!("writing {LATENCY_HLOG}: {e}"))?;
    for l in progress {
        let Some(h) = &l.latency_ns else { continue };
        let start = Duration::from_secs_f64((l.t_s - l.interval_s).max(0.0));
        log.write_histogram(h, start, Duration::from_secs_f64(l.interval_s), None)
            .map_err(|e| format!("writing {LATENCY_HLOG}: {e:?}"))?;
    }
    drop(log);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_every_csv_row_has_the_headers_columns_and_the_log_reads_back() {
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        h.record(12_000).unwrap();
        let l = ProgressLine {
            t_s: 2.0,
            interval_s: 1.0,
            committed: 5,
            attempts: 7,
            committed_per_s: 5.0,
            abort_rate: 2.0 / 7.0,
            aborts_by_reason: [("conflict", 2)].into(),
            p50_us: 12.0,
            p90_us: 12.0,
            p99_us: 12.0,
            latency_us_max: 12.0,
            latency_ns: Some(h),
            memory_bytes: 1 << 20,
            budget_reached_in_s: None,
            workers_reported: 4,
            workers: 4,
        };
        let (head, r) = (header(), row(&l));
        assert_eq!(head.len(), r.len());
        let at = head.iter().position(|c| c == "aborts_conflict").unwrap();
        assert_eq!(r[at], "2");
        let log = latency_log(&[l]).unwrap();
        let entries: Vec<_> =
            hdrhistogram::serialization::interval_log::IntervalLogIterator::new(&log)
                .filter_map(|e| match e {
                    Ok(hdrhistogram::serialization::interval_log::LogEntry::Interval(i)) => Some(i),
                    _ => None,
                })
                .collect();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].start_timestamp().as_secs_f64(), 1.0);
    }

    #[test]
    fn results_an_unwritable_directory_is_refused_before_the_run() {
        let e = Results::create(Path::new("/proc/atoll-results"))
            .err()
            .expect("nothing can be created under /proc");
        assert!(e.contains("--results /proc/atoll-results"), "{e}");
    }
}
