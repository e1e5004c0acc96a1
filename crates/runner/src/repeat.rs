//! `--repeat N`: the same configuration run N times, each on a fresh cluster, summarised by
//! the median and the spread (min, max, (max - min) / median) of throughput and of p50 and
//! p99 latency, so one lucky or unlucky run does not become the number.

use crate::config::{ConfigError, RunConfig};
use crate::report::{ProgressFn, Report, FORMAT, FORMAT_VERSION};
pub use crate::stats::{median_and_spread, Spread};
use serde::Serialize;
use std::fmt::Write;

/// Most repeats accepted: each is a full run (load, warm-up, duration), so a typo such as
/// 1000 would hold the machine for hours; a longer series belongs in a script over seeds.
pub const REPEAT_MAX: u32 = 100;

/// Checks `--repeat N` against what the other flags allow.
pub fn check(n: u32, recording_history: bool, plan_all: bool) -> Result<(), ConfigError> {
    if !(1..=REPEAT_MAX).contains(&n) {
        return Err(ConfigError(format!(
            "repeat={n} is out of range: expected runs in 1..={REPEAT_MAX}"
        )));
    }
    if n > 1 && recording_history {
        return Err(ConfigError(format!(
            "repeat={n} with --history: a history file holds one run (use --repeat 1)"
        )));
    }
    if n > 1 && plan_all {
        return Err(ConfigError(format!(
            "repeat={n} with --plan all: the ranking runs each plan once (use one plan)"
        )));
    }
    Ok(())
}

/// The figures summarised over the runs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Figures<T> {
    pub committed_per_s: T,
    pub p50_us: T,
    pub p99_us: T,
}

/// What `--repeat N` reports: every run, then the medians and spreads.
#[derive(Clone, Debug, Serialize)]
pub struct Repeated {
    pub format: &'static str,
    pub format_version: u64,
    /// Interrupted: the last run is partial and the runs after it never started.
    pub partial: bool,
    /// Every run's checks passed.
    pub passed: bool,
    pub repeat: u32,
    pub repeats: Vec<Report>,
    /// Over every run in `repeats` (a partial one included).
    pub median: Figures<f64>,
    pub spread: Figures<Spread>,
}

/// Runs `cfg` `n` times; `done` sees each report as it finishes. Stops early when
/// interrupted.
pub fn run(
    cfg: &RunConfig,
    n: u32,
    progress: &ProgressFn<'_>,
    done: &mut dyn FnMut(usize, &Report),
) -> Result<Repeated, crate::RunError> {
    let mut repeats = Vec::new();
    for i in 0..n as usize {
        if i > 0 && crate::interrupt::requested() {
            break;
        }
        let r = crate::run(cfg, progress)?;
        done(i, &r);
        repeats.push(r);
    }
    Ok(summarise(n, repeats))
}

/// Medians and spreads over `repeats`.
pub fn summarise(n: u32, repeats: Vec<Report>) -> Repeated {
    let of =
        |f: &dyn Fn(&Report) -> f64| median_and_spread(&repeats.iter().map(f).collect::<Vec<_>>());
    let (t, ts) = of(&|r| r.summary.committed_per_s);
    let (p50, p50s) = of(&|r| r.summary.latency_us.p50);
    let (p99, p99s) = of(&|r| r.summary.latency_us.p99);
    Repeated {
        format: FORMAT,
        format_version: FORMAT_VERSION,
        partial: repeats.len() < n as usize || repeats.iter().any(|r| r.partial),
        passed: repeats.iter().all(|r| r.passed),
        repeat: n,
        median: Figures {
            committed_per_s: t,
            p50_us: p50,
            p99_us: p99,
        },
        spread: Figures {
            committed_per_s: ts,
            p50_us: p50s,
            p99_us: p99s,
        },
        repeats,
    }
}

/// One run's line: `run 2/5  123456 committed tx/s  p50 ... p99 ...`.
pub fn line(i: usize, n: u32, r: &Report) -> String {
    let s = &r.summary;
    format!(
        "run {:>3}/{n}  {:>12.0} committed tx/s  abort rate {:>6.2}%  p50 {:>9.1} us  p99 {:>9.1} us  {:.2} s measured{}{}",
        i + 1,
        s.committed_per_s,
        s.abort_rate * 100.0,
        s.latency_us.p50,
        s.latency_us.p99,
        r.measured_s,
        if r.partial { "  PARTIAL" } else { "" },
        if r.passed { "" } else { "  CHECK FAILED" }
    )
}

impl Repeated {
    /// The medians and spreads, then the first run's build and machine lines (and the
    /// busy warning if any run started on a busy machine).
    pub fn render(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "== median of {} runs{}: {:<16} {:>12} {:>12} {:>12} {:>8}",
            self.repeats.len(),
            if self.partial { " (interrupted)" } else { "" },
            "",
            "median",
            "min",
            "max",
            "spread"
        );
        let row = |o: &mut String, name: &str, m: f64, s: &Spread| {
            let _ = writeln!(
                o,
                "{:<38} {:>12.1} {:>12.1} {:>12.1} {:>7.1}%",
                name,
                m,
                s.min,
                s.max,
                s.relative * 100.0
            );
        };
        row(
            &mut o,
            "throughput committed tx/s",
            self.median.committed_per_s,
            &self.spread.committed_per_s,
        );
        row(
            &mut o,
            "latency p50 us",
            self.median.p50_us,
            &self.spread.p50_us,
        );
        row(
            &mut o,
            "latency p99 us",
            self.median.p99_us,
            &self.spread.p99_us,
        );
        if let Some(first) = self.repeats.first() {
            let mut env = first.env.clone();
            if let Some(busy) = self.repeats.iter().find(|r| r.env.busy_at_start) {
                env.loadavg_1m_start = busy.env.loadavg_1m_start;
                env.busy_at_start = true;
            }
            env.render(&mut o);
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_is_the_middle_value_or_the_mean_of_the_middle_two() {
        let (m, s) = median_and_spread(&[3.0, 1.0, 2.0]);
        assert_eq!(m, 2.0);
        assert_eq!(
            s,
            Spread {
                min: 1.0,
                max: 3.0,
                relative: 1.0
            }
        );
        assert_eq!(median_and_spread(&[4.0, 1.0, 2.0, 3.0]).0, 2.5);
        assert_eq!(median_and_spread(&[0.0, 0.0]).1.relative, 0.0);
        assert_eq!(median_and_spread(&[]).0, 0.0);
    }

    #[test]
    fn repeat_outside_its_range_or_with_history_or_plan_all_is_refused() {
        assert!(check(1, true, true).is_ok(), "one run is always fine");
        assert!(check(REPEAT_MAX, false, false).is_ok());
        let e = check(0, false, false).unwrap_err().0;
        assert!(e.contains("repeat=0") && e.contains("1..="), "{e}");
        assert!(check(REPEAT_MAX + 1, false, false).is_err());
        assert!(check(2, true, false).unwrap_err().0.contains("--history"));
        assert!(check(2, false, true).unwrap_err().0.contains("--plan all"));
    }
}
