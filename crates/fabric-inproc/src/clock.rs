//! The in-process fabric's clock: nanoseconds since the cluster started, read from the
//! CPU's time-stamp counter where the kernel trusts it, else from `Instant`.
//!
//! Stage timers, latencies and op timeouts read the clock ~16 times per transaction;
//! through `clock_gettime` each read cost ~90 instructions, ~4% of a local YCSB
//! transaction (issue #9). A TSC read and a multiply cost ~10.

use std::time::{Duration, Instant};

/// Where the kernel names its clock source; `tsc` means the counter is invariant and
/// synchronized across cores (the kernel checked both before choosing it).
const CLOCKSOURCE_PATH: &str = "/sys/devices/system/clocksource/clocksource0/current_clocksource";

/// How long the counter is compared with `Instant` at start-up: long enough that the
/// scale's error (two `Instant` reads of a few tens of ns) stays under 1e-4.
const CALIBRATION: Duration = Duration::from_millis(2);

/// Fractional bits of the ns-per-tick scale.
const SCALE_SHIFT: u32 = 32;

pub(crate) struct Clock {
    start: Instant,
    tsc: Option<Tsc>,
}

struct Tsc {
    base_ticks: u64,
    /// Nanoseconds per tick, times 2^SCALE_SHIFT.
    ns_per_tick_scaled: u64,
}

impl Clock {
    pub(crate) fn start() -> Clock {
        let tsc = tsc_trusted().then(calibrate).flatten();
        Clock {
            start: Instant::now(),
            tsc,
        }
    }

    /// Nanoseconds since [`Clock::start`] (never negative: a read before the base is 0).
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        match &self.tsc {
            Some(t) => {
                let ticks = read_tsc().saturating_sub(t.base_ticks);
                ((ticks as u128 * t.ns_per_tick_scaled as u128) >> SCALE_SHIFT) as u64
            }
            None => self.start.elapsed().as_nanos() as u64,
        }
    }
}

fn tsc_trusted() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string(CLOCKSOURCE_PATH).is_ok_and(|s| s.trim() == "tsc")
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn read_tsc() -> u64 {
    // SAFETY: RDTSC has no memory effects; every x86_64 CPU has it.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn read_tsc() -> u64 {
    0
}

/// The counter's rate against `Instant`, or `None` if it did not advance.
fn calibrate() -> Option<Tsc> {
    let t0 = Instant::now();
    let c0 = read_tsc();
    let mut t1 = Instant::now();
    while t1.duration_since(t0) < CALIBRATION {
        std::hint::spin_loop();
        t1 = Instant::now();
    }
    let c1 = read_tsc();
    let ticks = c1.checked_sub(c0).filter(|&t| t > 0)?;
    let ns = t1.duration_since(t0).as_nanos();
    Some(Tsc {
        base_ticks: c1,
        ns_per_tick_scaled: ((ns << SCALE_SHIFT) / ticks as u128) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_advances_at_the_rate_of_instant_within_a_percent() {
        let clock = Clock::start();
        let (a, t) = (clock.now_ns(), Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (b, elapsed) = (clock.now_ns(), t.elapsed().as_nanos() as u64);
        let measured = b - a;
        let diff = measured.abs_diff(elapsed);
        assert!(
            diff * 100 <= elapsed,
            "clock (tsc: {}) measured {measured} ns where Instant measured {elapsed} ns",
            clock.tsc.is_some()
        );
    }
}
