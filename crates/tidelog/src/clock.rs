//! Wall-clock timestamps in microseconds since the Unix epoch.
//!
//! `clock_gettime` costs about 45 ns on the VMs we measured, a third of a small append. On
//! x86-64 with an invariant TSC, [`Clock`] reads the TSC instead and converts with a scale the
//! owning `Wal`'s background thread recalibrates against the wall clock (every tick), so the
//! error stays far below a microsecond per tick of drift. Elsewhere it reads the wall clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Stands in for a wait too long for an `Instant` (`Duration::MAX`): about a century.
const WAIT_FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `Instant::now() + wait`, saturating: a caller may pass `Duration::MAX` to mean "as long as
/// needed", which `Instant + Duration` would panic on.
pub(crate) fn deadline_after(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .or_else(|| now.checked_add(WAIT_FOREVER))
        .unwrap_or(now)
}

/// Nanoseconds since the Unix epoch from the OS wall clock.
fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Microseconds since the Unix epoch from the OS wall clock.
#[inline]
pub fn now_us() -> u64 {
    wall_ns() / 1000
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn ticks() -> Option<u64> {
    #[expect(unsafe_code, reason = "rdtsc has no safe wrapper")]
    // SAFETY: RDTSC reads a counter; it has no memory effects and exists on every x86-64 CPU.
    let t = unsafe { core::arch::x86_64::_rdtsc() };
    Some(t)
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn ticks() -> Option<u64> {
    None
}

fn tsc_usable() -> bool {
    // A fact of the CPU: read once per process, never changed.
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USABLE.get_or_init(|| {
        cfg!(target_arch = "x86_64")
            && std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|info| {
                info.lines()
                    .find(|l| l.starts_with("flags"))
                    .is_some_and(|l| {
                        let has = |f: &str| l.split_whitespace().any(|x| x == f);
                        has("constant_tsc") && has("nonstop_tsc")
                    })
            })
    })
}

/// Shortest baseline trusted for the tick rate: with read jitter of ~50 ns, one second bounds
/// the rate error near 5e-8, about 10 ns over a 200 ms tick between re-anchors.
const CALIBRATION_MIN_NS: u64 = 1_000_000_000;

/// Fixed-point shift of the nanoseconds-per-tick scale.
const SCALE_SHIFT: u32 = 32;

/// A per-`Wal` clock: TSC-based where that is sound, the OS wall clock otherwise.
#[derive(Debug)]
pub struct Clock {
    /// Seqlock sequence: odd while a recalibration is being written.
    seq: AtomicU64,
    base_ns: AtomicU64,
    base_ticks: AtomicU64,
    /// Nanoseconds per tick, times 2^32; 0 = use the OS clock.
    scale: AtomicU64,
    /// First calibration sample, for a long baseline.
    origin_ns: u64,
    origin_ticks: u64,
}

impl Clock {
    /// A clock calibrated from now on; falls back to the OS clock without an invariant TSC.
    /// It reads the OS clock until the calibration baseline is long enough (see
    /// [`CALIBRATION_MIN_NS`]).
    pub fn new() -> Clock {
        let ns0 = wall_ns();
        let ticks0 = if tsc_usable() { ticks() } else { None };
        Clock {
            seq: AtomicU64::new(0),
            base_ns: AtomicU64::new(ns0),
            base_ticks: AtomicU64::new(ticks0.unwrap_or(0)),
            scale: AtomicU64::new(0),
            origin_ns: ns0,
            origin_ticks: ticks0.unwrap_or(0),
        }
    }

    /// Re-anchors the clock to the OS wall clock and re-estimates the tick rate over the whole
    /// time since creation. Called by the background thread.
    pub fn recalibrate(&self) {
        if self.origin_ticks == 0 {
            return;
        }
        // Wall clock first, ticks second: the estimate then trails true time by the gap
        // between the two reads (tens of ns) rather than running ahead of it.
        let ns = wall_ns();
        let Some(t) = ticks() else {
            return;
        };
        let dt = t.wrapping_sub(self.origin_ticks);
        let dns = ns.saturating_sub(self.origin_ns);
        if dt == 0 || dns < CALIBRATION_MIN_NS {
            return;
        }
        let scale =
            ((u128::from(dns) << SCALE_SHIFT) / u128::from(dt)).min(u128::from(u64::MAX)) as u64;
        self.seq.fetch_add(1, Ordering::AcqRel);
        self.base_ns.store(ns, Ordering::Release);
        self.base_ticks.store(t, Ordering::Release);
        self.scale.store(scale, Ordering::Release);
        self.seq.fetch_add(1, Ordering::AcqRel);
    }

    /// Microseconds since the Unix epoch.
    #[inline]
    pub fn now_us(&self) -> u64 {
        loop {
            let seq = self.seq.load(Ordering::Acquire);
            if seq % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let scale = self.scale.load(Ordering::Acquire);
            if scale == 0 {
                return now_us();
            }
            let base_ns = self.base_ns.load(Ordering::Acquire);
            let base_ticks = self.base_ticks.load(Ordering::Acquire);
            let Some(t) = ticks() else {
                return now_us();
            };
            if self.seq.load(Ordering::Acquire) != seq {
                continue;
            }
            // Ticks read on another core may be slightly behind the base: clamp at zero.
            let delta = t.saturating_sub(base_ticks);
            let ns = base_ns + ((u128::from(delta) * u128::from(scale)) >> SCALE_SHIFT) as u64;
            return ns / 1000;
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_the_wall_clock() {
        let clock = Clock::new();
        std::thread::sleep(std::time::Duration::from_millis(1100));
        for _ in 0..5 {
            std::thread::sleep(std::time::Duration::from_millis(30));
            clock.recalibrate();
            let a = now_us();
            let b = clock.now_us();
            let c = now_us();
            // Close to the OS clock read around it; a preempted calibration sample on a busy
            // machine can skew it by some microseconds, so the bound is loose.
            assert!(
                b + 500 >= a && b <= c + 500,
                "clock {b} outside [{a}, {c}] by more than 500 us"
            );
        }
    }
}
