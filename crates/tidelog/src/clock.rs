//! Wall-clock timestamps in microseconds since the Unix epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch (0 if the clock is before it).
#[inline]
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}
