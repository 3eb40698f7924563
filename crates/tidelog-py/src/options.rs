//! `tidelog.open(path, **options)`: Python option names to the engine's `Config`.

use std::collections::HashMap;
use std::time::Duration;

use pyo3::prelude::*;
use tidelog::{Config, Durability, Retention};

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

/// The Python name of a durability mode.
pub fn durability_name(durability: Durability) -> &'static str {
    match durability {
        Durability::Always => "always",
        Durability::Never => "never",
        _ => "interval",
    }
}

/// A `timeout=` argument in seconds.
pub fn timeout_seconds(seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        to_py(tidelog::Error::InvalidArgument {
            name: "timeout",
            reason: format!("{seconds} is not a non-negative number of seconds"),
        })
    })
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
}

fn retention(max_age_ms: Option<u64>, max_bytes: Option<u64>) -> Retention {
    Retention {
        max_age_ms,
        max_bytes,
    }
}

impl OpenOptions {
    /// The engine config; validation (ranges, geometry) is the engine's.
    pub fn config(&self) -> PyResult<Config> {
        let mut config = Config::default();
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
