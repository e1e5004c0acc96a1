//! A run's phases and heartbeat: what its caller hears while nothing else happens (a long
//! load, a simulation slower than its virtual clock, the checks), so no run is silent.

use crate::report::{Progress, ProgressFn};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Wall seconds without any report after which a heartbeat is sent.
pub const HEARTBEAT_S: f64 = 5.0;

struct State {
    phase: &'static str,
    phase_start: Instant,
    last_report: Instant,
    stopped: bool,
}

/// Forwards a run's progress, and sends a heartbeat when nothing was reported for
/// [`HEARTBEAT_S`]: run [`Pulse::beat`] on a thread of its own, and [`Pulse::stop`] it.
pub struct Pulse<'p> {
    progress: &'p ProgressFn<'p>,
    state: Mutex<State>,
    wake: Condvar,
    every: Duration,
}

impl<'p> Pulse<'p> {
    pub fn new(progress: &'p ProgressFn<'p>) -> Self {
        Self::every(progress, Duration::from_secs_f64(HEARTBEAT_S))
    }

    /// A pulse that beats after `every` of silence (tests).
    pub fn every(progress: &'p ProgressFn<'p>, every: Duration) -> Self {
        let now = Instant::now();
        Pulse {
            progress,
            state: Mutex::new(State {
                phase: "starting",
                phase_start: now,
                last_report: now,
                stopped: false,
            }),
            wake: Condvar::new(),
            every,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Phase `phase` begins.
    pub fn phase(&self, phase: &'static str, detail: &str) {
        {
            let mut s = self.lock();
            let now = Instant::now();
            s.phase = phase;
            s.phase_start = now;
            s.last_report = now;
        }
        (self.progress)(&Progress::Phase { phase, detail });
    }

    /// Forwards `p`, which counts as the run being heard from.
    pub fn report(&self, p: &Progress<'_>) {
        self.lock().last_report = Instant::now();
        (self.progress)(p);
    }

    /// Beats until stopped; `detail(phase, wall_s)` says how far the phase is.
    pub fn beat(&self, detail: &dyn Fn(&'static str, f64) -> String) {
        let mut s = self.lock();
        // Bounded by `stop`, which every run calls when its phases end.
        loop {
            if s.stopped {
                return;
            }
            let quiet = s.last_report.elapsed();
            if quiet >= self.every {
                let (phase, wall_s) = (s.phase, s.phase_start.elapsed().as_secs_f64());
                s.last_report = Instant::now();
                drop(s);
                let d = detail(phase, wall_s);
                (self.progress)(&Progress::Heartbeat {
                    phase,
                    wall_s,
                    detail: &d,
                });
                s = self.lock();
                continue;
            }
            s = self
                .wake
                .wait_timeout(s, self.every - quiet)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    pub fn stop(&self) {
        self.lock().stopped = true;
        self.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_phase_gets_heartbeats_naming_it_and_a_report_defers_them() {
        let seen = Mutex::new(Vec::new());
        let record = |p: &Progress<'_>| {
            let s = match p {
                Progress::Phase { phase, .. } => format!("phase {phase}"),
                Progress::Heartbeat { phase, detail, .. } => format!("beat {phase} {detail}"),
                Progress::Interval(_) => "interval".into(),
            };
            seen.lock().unwrap().push(s);
        };
        let pulse = Pulse::every(&record, Duration::from_millis(20));
        std::thread::scope(|sc| {
            sc.spawn(|| pulse.beat(&|phase, _| format!("{phase}-far")));
            pulse.phase("loading", "");
            std::thread::sleep(Duration::from_millis(70));
            pulse.stop();
        });
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen[0], "phase loading");
        let beats = seen
            .iter()
            .filter(|s| *s == "beat loading loading-far")
            .count();
        assert!((1..=4).contains(&beats), "{seen:?}");
    }
}
