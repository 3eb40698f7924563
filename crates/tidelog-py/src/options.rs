//! `tidelog.open(path, **options)` and `tidelog.RingWal(...)`: Python option names to the
//! engine's `Config` and `RingConfig`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use std::path::PathBuf;

use tidelog::{
    Config, DirectIo, Durability, IoEngine, RecordFormat, Retention, RingBackend, RingConfig,
};

use crate::error::to_py;

/// Parses `fsync="interval"|"always"|"never"`.
pub fn durability(value: &str) -> PyResult<Durability> {
    match value {
        "interval" => Ok(Durability::Interval),
        "always" => Ok(Durability::Always),
        "never" => Ok(Durability::Never),
        _ => Err(to_py(tidelog::Error::InvalidArgument {
            name: "fsync",
            reason: format!("{value:?} is not one of \"interval\", \"always\", \"never\""),
        })),
    }
}

/// Parses `record_format=1|2`.
pub fn record_format(value: i64) -> PyResult<RecordFormat> {
    match value {
        1 => Ok(RecordFormat::V1),
        2 => Ok(RecordFormat::V2),
        _ => Err(to_py(tidelog::Error::InvalidArgument {
            name: "record_format",
            reason: format!("{value} is not 1 or 2"),
        })),
    }
}

/// `staged_adopt_bytes_min=` (the engine's name), or its deprecated earlier name
/// `staged_adopt_bytes=` with a `DeprecationWarning`; both at once is an error.
pub fn staged_adopt_bytes_min(
    py: Python<'_>,
    staged_adopt_bytes_min: Option<u64>,
    staged_adopt_bytes: Option<u64>,
) -> PyResult<u64> {
    match (staged_adopt_bytes_min, staged_adopt_bytes) {
        (Some(_), Some(_)) => Err(to_py(tidelog::Error::InvalidArgument {
            name: "staged_adopt_bytes",
            reason: "give staged_adopt_bytes_min only (staged_adopt_bytes is its old name)"
                .to_owned(),
        })),
        (None, Some(bytes)) => {
            PyErr::warn(
                py,
                &py.get_type::<pyo3::exceptions::PyDeprecationWarning>(),
                c"staged_adopt_bytes is deprecated: use staged_adopt_bytes_min",
                1,
            )?;
            Ok(bytes)
        }
        (bytes, None) => Ok(bytes.unwrap_or(tidelog::STAGED_ADOPT_BYTES_DEFAULT)),
    }
}

/// The Python name of a durability mode.
pub fn durability_name(durability: Durability) -> &'static str {
    match durability {
        Durability::Always => "always",
        Durability::Never => "never",
        _ => "interval",
    }
}

/// Longest wait the binding asks for (about a century): a larger timeout, `inf` included,
/// means "as long as needed" and is capped to this rather than refused.
const WAIT_MAX: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A `timeout=` argument in seconds.
pub fn timeout_seconds(value: f64) -> PyResult<Duration> {
    wait_seconds("timeout", value)
}

/// A wait argument `name` in seconds: 0 polls, huge values and `inf` saturate to
/// [`WAIT_MAX`]; NaN and negative values are `InvalidArgumentError`.
pub fn wait_seconds(name: &'static str, value: f64) -> PyResult<Duration> {
    if value.is_nan() || value < 0.0 {
        return Err(to_py(tidelog::Error::InvalidArgument {
            name,
            reason: format!("{value} is not a non-negative number of seconds"),
        }));
    }
    if value >= WAIT_MAX.as_secs_f64() {
        return Ok(WAIT_MAX);
    }
    // Only -0.0 fails here: no wait.
    Ok(Duration::try_from_secs_f64(value).unwrap_or(Duration::ZERO))
}

/// When a wait of `wait` from now ends; `None` (no end) if that is past what an `Instant`
/// holds.
pub fn deadline(wait: Duration) -> Option<Instant> {
    Instant::now().checked_add(wait)
}

/// A duration option `name` in seconds (a setting, not a wait: `inf` is refused).
pub fn seconds(name: &'static str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        to_py(tidelog::Error::InvalidArgument {
            name,
            reason: format!("{value} is not a non-negative number of seconds"),
        })
    })
}

/// Parses `direct_io="required"|"auto"|"off"` (default "auto").
pub fn direct_io(value: Option<&Bound<'_, PyAny>>) -> PyResult<DirectIo> {
    let Some(value) = value else {
        return Ok(DirectIo::Auto);
    };
    match value.extract::<&str>() {
        Ok("required") => Ok(DirectIo::Required),
        Ok("auto") => Ok(DirectIo::Auto),
        Ok("off") => Ok(DirectIo::Off),
        _ => Err(to_py(tidelog::Error::InvalidArgument {
            name: "direct_io",
            reason: format!(
                "{} is not one of \"required\", \"auto\", \"off\"",
                value
                    .repr()
                    .map_or_else(|_| "?".to_owned(), |r| r.to_string())
            ),
        })),
    }
}

/// Parses `io_engine="auto"|"io_uring"|"threads"` (default "auto").
pub fn io_engine(value: Option<&str>) -> PyResult<IoEngine> {
    match value {
        None | Some("auto") => Ok(IoEngine::Auto),
        Some("io_uring") => Ok(IoEngine::IoUring),
        Some("threads") => Ok(IoEngine::Threads),
        Some(other) => Err(to_py(tidelog::Error::InvalidArgument {
            name: "io_engine",
            reason: format!("{other:?} is not one of \"auto\", \"io_uring\", \"threads\""),
        })),
    }
}

/// Options of `tidelog.RingWal`, as Python passes them.
#[derive(Debug, Default)]
pub struct RingOptions<'a, 'py> {
    pub capacity: Option<u64>,
    pub direct_io: Option<&'a Bound<'py, PyAny>>,
    pub format: bool,
    pub block_bytes: Option<u64>,
    /// Seconds.
    pub block_delay: Option<f64>,
    pub inflight_blocks: Option<usize>,
    pub max_record_bytes: Option<u64>,
    pub io_engine: Option<&'a str>,
}

impl RingOptions<'_, '_> {
    /// The engine config; validation (ranges, geometry) is the engine's, at open.
    pub fn config(&self) -> PyResult<RingConfig> {
        let mut config = RingConfig::default()
            .direct_io(direct_io(self.direct_io)?)
            .io_engine(io_engine(self.io_engine)?)
            .format(self.format);
        if let Some(c) = self.capacity {
            config = config.capacity_bytes(c);
        }
        if let Some(b) = self.block_bytes {
            config = config.block_bytes(b);
        }
        if let Some(d) = self.block_delay {
            let d = seconds("block_delay", d)?;
            // Whole microseconds, rounded: 0.000333 is 333 µs, not 332.
            let us = (d.as_nanos() + 500) / 1000;
            config = config.block_delay_us(u64::try_from(us).unwrap_or(u64::MAX));
        }
        if let Some(n) = self.inflight_blocks {
            config = config.inflight_blocks(n);
        }
        if let Some(m) = self.max_record_bytes {
            config = config.max_record_bytes(m);
        }
        Ok(config)
    }
}

/// Options of `tidelog.open`, as Python passes them.
#[derive(Debug, Default)]
pub struct OpenOptions {
    pub fsync: Option<String>,
    pub fsync_interval_ms: Option<u64>,
    pub block_size: Option<u64>,
    pub file_size: Option<u64>,
    pub max_record_bytes: Option<u64>,
    pub max_batch_records: Option<u64>,
    pub max_batch_bytes: Option<u64>,
    pub max_topics: Option<u64>,
    pub retention_ms: Option<u64>,
    pub retention_bytes: Option<u64>,
    pub topic_retention: Option<HashMap<String, HashMap<String, u64>>>,
    pub disk_bytes_max: Option<u64>,
    pub space_wait_ms: Option<u64>,
    pub group_wait_us: Option<u64>,
    pub group_bytes_max: Option<u64>,
    /// `backend="ring"` and its options.
    pub ring: Option<RingBackend>,
}

/// Parses `backend="mmap"|"ring"` with the ring's options (`device`, `capacity`,
/// `direct_io`, `format`), which only the ring backend takes.
pub fn ring_backend(
    backend: Option<&str>,
    device: Option<PathBuf>,
    capacity: Option<u64>,
    direct_io_mode: Option<&Bound<'_, PyAny>>,
    format: bool,
) -> PyResult<Option<RingBackend>> {
    match backend {
        None | Some("mmap") => {
            let stray = [
                ("device", device.is_some()),
                ("capacity", capacity.is_some()),
                ("direct_io", direct_io_mode.is_some()),
                ("format", format),
            ];
            if let Some((name, _)) = stray.iter().find(|(_, given)| *given) {
                return Err(to_py(tidelog::Error::InvalidArgument {
                    name: "backend",
                    reason: format!("{name}= is an option of backend=\"ring\""),
                }));
            }
            Ok(None)
        }
        Some("ring") => {
            let ring = RingOptions {
                capacity,
                direct_io: direct_io_mode,
                format,
                ..RingOptions::default()
            }
            .config()?;
            Ok(Some(RingBackend { device, ring }))
        }
        Some(other) => Err(to_py(tidelog::Error::InvalidArgument {
            name: "backend",
            reason: format!("{other:?} is not one of \"mmap\", \"ring\""),
        })),
    }
}

pub fn retention(max_age_ms: Option<u64>, max_bytes: Option<u64>) -> Retention {
    Retention {
        max_age_ms,
        max_bytes,
    }
}

impl OpenOptions {
    /// The engine config; validation (ranges, geometry) is the engine's.
    pub fn config(&self) -> PyResult<Config> {
        let mut config = Config::default();
        if let Some(ring) = &self.ring {
            // With a ring, a durable append costs one ring block write: the natural mode.
            config = config.ring(ring.clone()).durability(Durability::Always);
        }
        if let Some(fsync) = &self.fsync {
            config = config.durability(durability(fsync)?);
        }
        let set = |c: Config, v: Option<u64>, f: fn(Config, u64) -> Config| match v {
            Some(v) => f(c, v),
            None => c,
        };
        config = set(config, self.fsync_interval_ms, Config::sync_interval_ms);
        config = set(config, self.block_size, Config::block_size_bytes);
        config = set(config, self.file_size, Config::file_size_bytes);
        config = set(config, self.max_record_bytes, Config::max_record_bytes);
        config = set(config, self.max_batch_records, Config::max_batch_records);
        config = set(config, self.max_batch_bytes, Config::max_batch_bytes);
        config = set(config, self.max_topics, Config::max_topics);
        config = set(config, self.disk_bytes_max, Config::disk_bytes_max);
        config = set(config, self.space_wait_ms, Config::space_wait_ms);
        config = set(config, self.group_wait_us, Config::group_wait_us);
        config = set(config, self.group_bytes_max, Config::group_bytes_max);
        config = config.retention(retention(self.retention_ms, self.retention_bytes));
        for (topic, options) in self.topic_retention.iter().flatten() {
            if let Some(unknown) = options
                .keys()
                .find(|k| !matches!(k.as_str(), "retention_ms" | "retention_bytes"))
            {
                return Err(to_py(tidelog::Error::InvalidArgument {
                    name: "topic_retention",
                    reason: format!(
                        "unknown option {unknown:?} for topic {topic:?}: use retention_ms, retention_bytes"
                    ),
                }));
            }
            config = config.topic_retention(
                topic,
                retention(
                    options.get("retention_ms").copied(),
                    options.get("retention_bytes").copied(),
                ),
            );
        }
        config.validate().map_err(to_py)?;
        Ok(config)
    }
}

/// The tier settings of `tidelog.open` besides the URL and the store's options.
#[derive(Debug, Default)]
pub struct TierOptions {
    pub takeover: bool,
    pub local_retention: Option<Retention>,
    pub delete_delay_ms: Option<u64>,
    pub tail_upload_ms: Option<u64>,
}

/// The tier of `tidelog.open`: its URL, the store's options (strings, or booleans and
/// integers written as strings) and the other tier settings. Any of those without a URL is
/// refused.
pub fn tier(
    url: Option<String>,
    options: Option<HashMap<String, Bound<'_, PyAny>>>,
    settings: TierOptions,
) -> PyResult<Option<tidelog::TierConfig>> {
    let Some(url) = url else {
        let TierOptions {
            takeover,
            local_retention,
            delete_delay_ms,
            tail_upload_ms,
        } = settings;
        if options.is_some()
            || takeover
            || local_retention.is_some()
            || delete_delay_ms.is_some()
            || tail_upload_ms.is_some()
        {
            return Err(to_py(tidelog::Error::InvalidArgument {
                name: "tier",
                reason: "storage_options, tier_takeover, local_retention_*, tier_delete_delay_ms \
                         and tail_upload_ms need a tier URL"
                    .to_owned(),
            }));
        }
        return Ok(None);
    };
    let mut config = tier_config(url, options, settings.takeover)?;
    if let Some(local) = settings.local_retention {
        config = config.local_retention(local);
    }
    if let Some(delay_ms) = settings.delete_delay_ms {
        config = config.delete_delay_ms(delay_ms);
    }
    if let Some(after_ms) = settings.tail_upload_ms {
        config = config.tail_upload_ms(after_ms);
    }
    Ok(Some(config))
}

/// A tier configuration: the URL, the store's options (strings, or booleans and integers
/// written as strings) and the takeover flag.
pub fn tier_config(
    url: String,
    options: Option<HashMap<String, Bound<'_, PyAny>>>,
    takeover: bool,
) -> PyResult<tidelog::TierConfig> {
    let mut config = tidelog::TierConfig::new(url).takeover(takeover);
    for (key, value) in options.unwrap_or_default() {
        let text = if let Ok(flag) = value.cast::<pyo3::types::PyBool>() {
            flag.is_true().to_string()
        } else if let Ok(s) = value.extract::<String>() {
            s
        } else if let Ok(n) = value.extract::<i64>() {
            n.to_string()
        } else {
            return Err(to_py(tidelog::Error::InvalidArgument {
                name: "storage_options",
                reason: format!("{key:?} must be a string, a boolean or an integer"),
            }));
        };
        config = config.option(key, text);
    }
    Ok(config)
}

/// Longest `next_batch` in records.
const BATCH_RECORDS_MAX: usize = 1 << 20;

/// A reader's `next_batch` size: between 1 and [`BATCH_RECORDS_MAX`].
pub fn batch_records(max_records: usize) -> PyResult<()> {
    if max_records == 0 || max_records > BATCH_RECORDS_MAX {
        return Err(to_py(tidelog::Error::InvalidArgument {
            name: "max_records",
            reason: format!("must be between 1 and {BATCH_RECORDS_MAX}, not {max_records}"),
        }));
    }
    Ok(())
}
