//! Where and how a report's numbers were made: the build (commit, profile, target), the
//! machine (CPU model, cores, load average, what a cache line costs between two cores) and
//! the process (CPU time per committed transaction, peak resident memory). Read from `/proc`
//! and `getrusage`, or measured in a few milliseconds; anything that cannot be read is
//! reported as unknown rather than failing the run.

use serde::Serialize;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A 1-minute load average above this many runnable tasks per core at the start of a run
/// means other work held a good part of the machine: at 0.5 per core, on average half the
/// cores were already taken before our workers started, so throughput and latency are
/// suspect (our own workers want every core).
pub const BUSY_LOAD_PER_CORE: f64 = 0.5;

/// What the binary was built from; the `atoll` binary sets it from its build script.
#[derive(Clone, Debug, Serialize)]
pub struct Build {
    /// `git rev-parse --short HEAD`, with `-dirty` when the tree had changes, or "unknown".
    pub git_commit: String,
    /// Cargo profile: "release" or "debug".
    pub profile: String,
    pub target: String,
    /// Cargo features of the binary, comma-separated (empty: none).
    pub features: String,
}

impl Build {
    fn unknown() -> Self {
        Build {
            git_commit: "unknown".into(),
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .into(),
            target: "unknown".into(),
            features: String::new(),
        }
    }
}

static BUILD: OnceLock<Build> = OnceLock::new();

/// Names the build every later report carries (first call wins). Reports made without it
/// (library tests) name the commit "unknown".
pub fn set_build(b: Build) {
    let _ = BUILD.set(b);
}

/// The build and machine metadata of one run, and its process costs.
#[derive(Clone, Debug, Serialize)]
pub struct EnvReport {
    pub build: Build,
    /// `model name` from /proc/cpuinfo, or "unknown".
    pub cpu_model: String,
    /// Cores this process may use (`available_parallelism`).
    pub cores: usize,
    /// 1-minute load average when the run started and when it ended (None: no /proc).
    pub loadavg_1m_start: Option<f64>,
    pub loadavg_1m_end: Option<f64>,
    /// The start load exceeded `BUSY_LOAD_PER_CORE` × cores: numbers are suspect.
    pub busy_at_start: bool,
    /// Process CPU time (user + system, every thread) over the measured window.
    pub cpu_measured_s: Option<f64>,
    /// `cpu_measured_s` per committed transaction, in microseconds.
    pub cpu_us_per_txn: Option<f64>,
    /// Peak resident memory of the process so far (VmHWM): with `--repeat`, of all runs
    /// up to this one.
    pub rss_peak_bytes: Option<u64>,
    /// What one cache line's round trip between two of this process's cores took just
    /// before the run and just after it ([`core_round_trip_ns`]; None: one core, a
    /// simulated run, or the probe's threads never met). On a VM it moves with where the
    /// hypervisor puts the virtual CPUs, 0.07-0.4 us on the 2-core machines here, and a
    /// run whose workers talk across cores moves with it (issue #9).
    pub core_round_trip_ns_start: Option<f64>,
    pub core_round_trip_ns_end: Option<f64>,
}

/// Process CPU time (user + system) in microseconds, every thread included.
pub fn process_cpu_us() -> Option<u64> {
    // SAFETY: getrusage writes the struct it is given and nothing else.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return None;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Some(us(ru.ru_utime) + us(ru.ru_stime))
}

/// The 1-minute load average (first field of /proc/loadavg).
pub fn loadavg_1m() -> Option<f64> {
    parse_loadavg(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

fn parse_loadavg(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// The first `model name` of /proc/cpuinfo (x86; other architectures may lack it).
pub fn cpu_model() -> Option<String> {
    parse_cpu_model(&std::fs::read_to_string("/proc/cpuinfo").ok()?)
}

fn parse_cpu_model(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == "model name")
        .map(|(_, v)| v.trim().to_string())
}

/// Peak resident set size of this process (VmHWM of /proc/self/status), in bytes.
pub fn rss_peak_bytes() -> Option<u64> {
    parse_vm_hwm(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// Memory the kernel says can be taken without swapping (MemAvailable of /proc/meminfo),
/// in bytes.
pub fn mem_available_bytes() -> Option<u64> {
    parse_kb_field(
        &std::fs::read_to_string("/proc/meminfo").ok()?,
        "MemAvailable:",
    )
}

/// Bytes per `kB` in /proc's status files.
const KIB: u64 = 1024;

fn parse_vm_hwm(text: &str) -> Option<u64> {
    parse_kb_field(text, "VmHWM:")
}

fn parse_kb_field(text: &str, field: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * KIB)
}

/// How long [`core_round_trip_ns`] bounces its line at most: long enough for tens of
/// thousands of round trips on an idle machine, short beside any run.
const BOUNCE_PROBE: Duration = Duration::from_millis(5);
/// Round trips timed together (one clock read per batch, not per trip).
const BOUNCE_BATCH: u32 = 64;
/// Spins between two looks at the probe's deadline, so a partner thread that is never
/// scheduled costs at most the deadline.
const BOUNCE_SPINS_PER_CHECK: u32 = 1024;

/// A cache line of its own (two, for the adjacent-line prefetcher).
#[repr(align(128))]
struct Line(AtomicU64);

/// The median time of one cache line's round trip between the first two cores this process
/// may use (two threads pinned there hand a counter back and forth for at most
/// `BOUNCE_PROBE`), in nanoseconds; None with one core or if no batch of round trips
/// finished in time (the machine was too busy to schedule both threads). The caller's
/// own thread is left where it was.
pub fn core_round_trip_ns() -> Option<f64> {
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    let (&a, &b) = (ids.first()?, ids.get(1)?);
    let line = Line(AtomicU64::new(0));
    let stop = Line(AtomicU64::new(0));
    std::thread::scope(|s| {
        s.spawn(|| {
            core_affinity::set_for_current(b);
            // Answers every odd value with the next even one until told to stop.
            while stop.0.load(Ordering::Relaxed) == 0 {
                let v = line.0.load(Ordering::Acquire);
                if v % 2 == 1 {
                    line.0.store(v + 1, Ordering::Release);
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        let timer = s.spawn(|| {
            core_affinity::set_for_current(a);
            let deadline = Instant::now() + BOUNCE_PROBE;
            let mut batches_ns: Vec<f64> = Vec::new();
            let mut v = 0u64;
            'probe: while Instant::now() < deadline {
                let t = Instant::now();
                for _ in 0..BOUNCE_BATCH {
                    line.0.store(v + 1, Ordering::Release);
                    let mut spins = 0u32;
                    while line.0.load(Ordering::Acquire) != v + 2 {
                        spins += 1;
                        if spins % BOUNCE_SPINS_PER_CHECK == 0 && Instant::now() >= deadline {
                            break 'probe;
                        }
                        std::hint::spin_loop();
                    }
                    v += 2;
                }
                batches_ns.push(t.elapsed().as_nanos() as f64 / BOUNCE_BATCH as f64);
            }
            stop.0.store(1, Ordering::Relaxed);
            (!batches_ns.is_empty()).then(|| crate::stats::median_and_spread(&batches_ns).0)
        });
        timer.join().ok().flatten()
    })
}

/// Cores this process may use.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Process CPU time at the edges of the measured window: the first worker to cross an
/// edge takes the reading (every worker crosses it within one transaction of the others).
#[derive(Debug)]
pub struct CpuWindow {
    start_us: AtomicU64,
    end_us: AtomicU64,
}

/// Not yet read.
const UNSET: u64 = u64::MAX;

impl Default for CpuWindow {
    fn default() -> Self {
        CpuWindow {
            start_us: AtomicU64::new(UNSET),
            end_us: AtomicU64::new(UNSET),
        }
    }
}

impl CpuWindow {
    fn mark(slot: &AtomicU64) {
        if slot.load(Ordering::Relaxed) == UNSET {
            if let Some(us) = process_cpu_us() {
                let _ = slot.compare_exchange(UNSET, us, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
    }
    /// The measured window starts (warm-up is over).
    pub fn mark_start(&self) {
        Self::mark(&self.start_us)
    }
    /// The measured window ends (duration reached or the run was interrupted).
    pub fn mark_end(&self) {
        Self::mark(&self.end_us)
    }
    /// CPU seconds inside the window; None if it never started (interrupted in warm-up).
    pub fn seconds(&self) -> Option<f64> {
        let start = self.start_us.load(Ordering::Relaxed);
        if start == UNSET {
            return None;
        }
        // A window cut off before any worker saw its end closes now.
        self.mark_end();
        let end = self.end_us.load(Ordering::Relaxed);
        (end != UNSET).then(|| end.saturating_sub(start) as f64 / 1e6)
    }
}

/// Readings taken when a run starts; `finish` completes them into an `EnvReport`.
#[derive(Debug)]
pub struct Probe {
    loadavg_1m_start: Option<f64>,
    /// Whether the run's threads are real ones on this machine's cores (not simulated), so
    /// the cross-core round trip bears on its numbers.
    real_cores: bool,
    core_round_trip_ns_start: Option<f64>,
}

impl Probe {
    /// Readings before a run; `real_cores`: its workers are threads on this machine (the
    /// cross-core round trip is measured before and after it).
    pub fn start(real_cores: bool) -> Self {
        Probe {
            loadavg_1m_start: loadavg_1m(),
            real_cores,
            core_round_trip_ns_start: real_cores.then(core_round_trip_ns).flatten(),
        }
    }

    pub fn finish(&self, window: &CpuWindow, committed: u64) -> EnvReport {
        let cores = cores();
        let cpu_measured_s = window.seconds();
        EnvReport {
            build: BUILD.get().cloned().unwrap_or_else(Build::unknown),
            cpu_model: cpu_model().unwrap_or_else(|| "unknown".into()),
            cores,
            loadavg_1m_start: self.loadavg_1m_start,
            loadavg_1m_end: loadavg_1m(),
            busy_at_start: is_busy(self.loadavg_1m_start, cores),
            cpu_measured_s,
            cpu_us_per_txn: cpu_measured_s
                .filter(|_| committed > 0)
                .map(|s| s * 1e6 / committed as f64),
            rss_peak_bytes: rss_peak_bytes(),
            core_round_trip_ns_start: self.core_round_trip_ns_start,
            core_round_trip_ns_end: self.real_cores.then(core_round_trip_ns).flatten(),
        }
    }
}

/// Whether a 1-minute load of `load` on `cores` cores means the machine was busy.
pub fn is_busy(load: Option<f64>, cores: usize) -> bool {
    load.is_some_and(|l| l > BUSY_LOAD_PER_CORE * cores as f64)
}

/// Round trips before and after a run further apart than this factor mean the machine
/// changed under it: the two regimes seen here are ~80 and ~380 ns, while a steady machine's
/// probes agree within ~20%.
pub const CORES_MOVED_RATIO: f64 = 1.5;

/// Bytes per MiB, for the printed peak RSS.
const MIB: f64 = 1024.0 * 1024.0;

impl EnvReport {
    /// The summary lines: build, machine, process, and a warning when the machine was busy.
    pub fn render(&self, o: &mut String) {
        let b = &self.build;
        let _ = writeln!(
            o,
            "build       atoll {} ({}, {}{})",
            b.git_commit,
            b.profile,
            b.target,
            if b.features.is_empty() {
                String::new()
            } else {
                format!(", features {}", b.features)
            }
        );
        let load = |l: Option<f64>| l.map_or("unknown".into(), |l| format!("{l:.2}"));
        let _ = writeln!(
            o,
            "machine     {}, {} cores, 1-minute load {} at start, {} at end",
            self.cpu_model,
            self.cores,
            load(self.loadavg_1m_start),
            load(self.loadavg_1m_end)
        );
        if self.core_round_trip_ns_start.is_some() || self.core_round_trip_ns_end.is_some() {
            let ns = |n: Option<f64>| n.map_or("unknown".into(), |n| format!("{n:.0} ns"));
            let _ = writeln!(
                o,
                "cores       a cache line's round trip between two cores: {} before the run, {} after",
                ns(self.core_round_trip_ns_start),
                ns(self.core_round_trip_ns_end)
            );
        }
        let _ = writeln!(
            o,
            "process     {} CPU us per committed txn ({} CPU s measured), peak RSS {}",
            self.cpu_us_per_txn
                .map_or("unknown".into(), |u| format!("{u:.1}")),
            self.cpu_measured_s
                .map_or("unknown".into(), |s| format!("{s:.2}")),
            self.rss_peak_bytes
                .map_or("unknown".into(), |b| format!("{:.1} MiB", b as f64 / MIB))
        );
        if let Some(w) = self.busy_warning() {
            let _ = writeln!(o, "warning     {w}");
        }
        if let Some(w) = self.cores_moved_warning() {
            let _ = writeln!(o, "warning     {w}");
        }
    }

    /// The warning when the cross-core round trip before and after the run differ by more
    /// than [`CORES_MOVED_RATIO`]: the machine changed under the run (on a VM, the
    /// hypervisor moved the vCPUs), so its numbers mix two regimes. Else None.
    pub fn cores_moved_warning(&self) -> Option<String> {
        let (a, b) = (self.core_round_trip_ns_start?, self.core_round_trip_ns_end?);
        (a.max(b) > CORES_MOVED_RATIO * a.min(b)).then(|| {
            format!(
                "the cores changed under the run: a cache line's round trip between two cores took {a:.0} ns before it and {b:.0} ns after (more than {CORES_MOVED_RATIO}x apart); cross-core figures mix both"
            )
        })
    }

    /// The warning when the machine was busy at the start, else None.
    pub fn busy_warning(&self) -> Option<String> {
        let load = self.loadavg_1m_start.filter(|_| self.busy_at_start)?;
        Some(format!(
            "the machine was busy: 1-minute load {load:.2} at start on {} cores (over {BUSY_LOAD_PER_CORE} per core); these numbers are suspect",
            self.cores
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_loadavg("1.26 1.27 1.31 3/97 2156\n"), Some(1.26));
        assert_eq!(parse_loadavg(""), None);
        assert_eq!(
            parse_cpu_model(
                "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n"
            ),
            Some("AMD EPYC 7B13".into())
        );
        assert_eq!(parse_cpu_model("processor\t: 0\n"), None);
        assert_eq!(
            parse_vm_hwm("VmPeak:\t  20000 kB\nVmHWM:\t    1234 kB\nVmRSS:\t 1000 kB\n"),
            Some(1234 * 1024)
        );
        assert_eq!(parse_vm_hwm("VmRSS:\t 1000 kB\n"), None);
    }

    #[test]
    fn a_load_above_the_threshold_per_core_marks_the_machine_busy() {
        assert!(!is_busy(None, 2));
        assert!(!is_busy(Some(BUSY_LOAD_PER_CORE * 2.0), 2));
        assert!(is_busy(Some(BUSY_LOAD_PER_CORE * 2.0 + 0.01), 2));
    }

    #[test]
    fn this_process_reports_cpu_time_and_peak_rss() {
        let w = CpuWindow::default();
        assert_eq!(w.seconds(), None, "a window never started has no CPU time");
        w.mark_start();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        w.mark_end();
        assert!(w.seconds().is_some_and(|s| s >= 0.0));
        assert!(rss_peak_bytes().is_some_and(|b| b > 0));
    }

    #[test]
    fn the_cross_core_probe_returns_within_its_bound_and_measures_only_with_two_cores() {
        let t = Instant::now();
        let rt = core_round_trip_ns();
        // Its own bound plus two thread starts: far under a second even on a busy machine.
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "took {:?}",
            t.elapsed()
        );
        let two = core_affinity::get_core_ids().is_some_and(|c| c.len() >= 2);
        if !two {
            assert_eq!(rt, None, "one core has no round trip between cores");
        }
        // With two cores the partner may never be scheduled on a loaded machine (None), but
        // a measured trip is a real one: positive and under the probe's whole duration.
        if let Some(ns) = rt {
            assert!(
                ns > 0.0 && ns < BOUNCE_PROBE.as_nanos() as f64,
                "round trip {ns} ns"
            );
        }
        let mut r = Probe::start(false).finish(&CpuWindow::default(), 0);
        assert_eq!(
            r.cores_moved_warning(),
            None,
            "nothing measured, nothing to warn of"
        );
        (r.core_round_trip_ns_start, r.core_round_trip_ns_end) = (Some(50.0), Some(60.0));
        assert_eq!(r.cores_moved_warning(), None, "a steady machine");
        r.core_round_trip_ns_end = Some(390.0);
        let w = r.cores_moved_warning().expect("the vCPUs moved");
        assert!(w.contains("50 ns before it and 390 ns after"), "{w}");
        let p = Probe::start(false);
        let r = p.finish(&CpuWindow::default(), 0);
        assert_eq!(
            (r.core_round_trip_ns_start, r.core_round_trip_ns_end),
            (None, None),
            "a simulated run does not probe the cores"
        );
    }
}
