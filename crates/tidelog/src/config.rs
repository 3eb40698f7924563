//! Configuration: file geometry, every limit, durability, retention and the disk cap.
//!
//! Every queue, batch, record size and count has an explicit maximum here; breaking one is an
//! [`Error::LimitExceeded`] that names the field.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::format;
pub use crate::format::validate_name;
use crate::ring::RingConfig;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;
/// Default record and batch limit (64 MiB).
const DEFAULT_PAYLOAD_MAX: u64 = 64 * MIB;
/// Largest data file: positions inside a file are 32-bit.
pub const FILE_SIZE_MAX: u64 = 4 * GIB;
// A batch frame fits its extent, so its `u32` length field can say any batch's length.
const _: () = assert!(FILE_SIZE_MAX <= u32::MAX as u64 + 1);
/// Longest background flush period (one hour).
const SYNC_INTERVAL_MAX_MS: u64 = 3_600_000;
/// Longest group-commit wait (one second).
const GROUP_WAIT_MAX_US: u64 = 1_000_000;
/// Longest wait for disk space (one hour).
const SPACE_WAIT_MAX_MS: u64 = 3_600_000;
/// Most threads [`Config::recovery_threads`] may ask for.
pub const RECOVERY_THREADS_MAX: usize = 64;
/// Threads a recovery uses by default (`recovery_threads` 0).
pub const RECOVERY_THREADS_DEFAULT: usize = 8;

/// Default record and batch limit with the ring backend: every batch is one ring entry, and
/// the ring's block buffers are sized for the largest (see [`RingBackend`]).
const RING_PAYLOAD_DEFAULT: u64 = 4 * MIB;
/// Capacity of a ring file the ring backend creates when none was given (256 MiB).
pub const RING_CAPACITY_DEFAULT: u64 = 256 * MIB;
/// Default of [`Config::staged_ttl_ms`]: a day.
pub const STAGED_TTL_DEFAULT_MS: u64 = 24 * 3_600_000;
/// Default of [`Config::staged_adopt_bytes_min`]: 4 MiB.
pub const STAGED_ADOPT_BYTES_DEFAULT: u64 = 4 * MIB;
/// Name of the ring file inside the data directory when no device is given.
pub const RING_FILE: &str = "ring.wal";

/// When an append counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Durability {
    /// Appends return once copied; a background flush makes them durable every
    /// [`Config::sync_interval_ms`].
    #[default]
    Interval,
    /// An append returns only once its record is durable. Concurrent appenders share one
    /// sync (group commit).
    Always,
    /// No background flush: the OS writes back when it likes; [`crate::Wal::flush`] and close
    /// still make everything durable.
    Never,
}

/// How long a topic keeps records whatever its consumers did. Both limits are optional;
/// a record goes when either says so. A topic's newest extent is always kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Retention {
    /// Drop extents whose newest record is older than this many milliseconds.
    pub max_age_ms: Option<u64>,
    /// Drop the oldest extents while the topic would still hold at least this many bytes
    /// of records without them (Kafka's `retention.bytes`).
    pub max_bytes: Option<u64>,
}

impl Retention {
    /// Sets [`Retention::max_age_ms`].
    pub fn max_age_ms(mut self, age_ms: u64) -> Self {
        self.max_age_ms = Some(age_ms);
        self
    }
    /// Sets [`Retention::max_bytes`].
    pub fn max_bytes(mut self, bytes: u64) -> Self {
        self.max_bytes = Some(bytes);
        self
    }
    /// True when neither limit is set.
    pub fn is_unlimited(&self) -> bool {
        self.max_age_ms.is_none() && self.max_bytes.is_none()
    }
    fn validate(&self) -> Result<()> {
        if self.max_age_ms == Some(0) {
            return Err(Error::invalid("max_age_ms", "must be positive"));
        }
        if self.max_bytes == Some(0) {
            return Err(Error::invalid("max_bytes", "must be positive"));
        }
        Ok(())
    }
}

/// The ring backend: appends are made durable in a direct-I/O ring (a block device or a
/// preallocated file) and moved into the data files in the background (see
/// `docs/ARCHITECTURE.md`, "The topic log on the ring").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RingBackend {
    /// The ring's block device or file; `None` means [`RING_FILE`] inside the data directory.
    pub device: Option<PathBuf>,
    /// The ring's settings. A missing file is created at `capacity_bytes`, or at
    /// [`RING_CAPACITY_DEFAULT`] when that is `None`. `max_record_bytes` is ignored: the
    /// ring's entry limit follows the Wal's record and batch limits.
    pub ring: RingConfig,
}

impl RingBackend {
    /// The ring in `device` with default settings.
    pub fn device(path: impl Into<PathBuf>) -> Self {
        RingBackend {
            device: Some(path.into()),
            ring: RingConfig::default(),
        }
    }
    /// Sets the ring's settings.
    pub fn ring(mut self, ring: RingConfig) -> Self {
        self.ring = ring;
        self
    }
}

/// Object storage behind a directory ([`Config::tier`]): sealed extents are copied to the
/// bucket under the URL's prefix, and a manifest there says which objects hold which offsets
/// (see `docs/ARCHITECTURE.md`, "The tier"). Needs the `tier` cargo feature.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct TierConfig {
    /// Any URL the `object_store` crate parses: `s3://bucket/prefix`, `file:///path`,
    /// `memory://name/prefix` (one bucket per process and name, for tests), ...
    pub url: String,
    /// `object_store`'s keys for the URL's store (`aws_endpoint`, `aws_region`,
    /// `aws_access_key_id`, `aws_allow_http`, ...); for S3, `AWS_*` variables of the
    /// environment fill those not given. A key the store does not know is an error.
    pub options: BTreeMap<String, String>,
    /// Take the prefix over from another directory that holds it (its next upload then fails
    /// with `Fenced`). Without it, opening a directory on a prefix another one holds fails.
    pub takeover: bool,
    /// How long the local directory keeps records the bucket holds (Kafka's
    /// `local.retention.ms` and `local.retention.bytes`), for every topic; a limit it does
    /// not set (or `None`, the default) is the retention's (`Config::retention`,
    /// `topic_retention`). Each limit at most the retention's. Either way an extent leaves
    /// the disk only once the bucket holds it (or the bucket's retention dropped it).
    pub local_retention: Option<Retention>,
    /// How long an object retention dropped from the manifest (or one a crash left
    /// unnamed) stays in the bucket before it is deleted, so readers of an older manifest
    /// version still find it (Kafka's `file.delete.delay.ms`). `None`:
    /// [`TIER_DELETE_DELAY_DEFAULT_MS`].
    pub delete_delay_ms: Option<u64>,
    /// At most this long after an append its record is in the bucket: the upload thread
    /// ends each topic's open extent once it has held records that long, and uploads it
    /// (`None`, the default: extents are uploaded as they fill). Each such end starts a new
    /// extent, so a short time makes many small objects.
    pub tail_upload_ms: Option<u64>,
}

/// [`TierConfig::delete_delay_ms`] when not set: one minute, as Kafka's.
pub const TIER_DELETE_DELAY_DEFAULT_MS: u64 = 60_000;

impl TierConfig {
    /// A tier at `url` with no options.
    pub fn new(url: impl Into<String>) -> TierConfig {
        TierConfig {
            url: url.into(),
            ..TierConfig::default()
        }
    }

    /// Adds the store option `key` = `value`.
    pub fn option(mut self, key: impl Into<String>, value: impl Into<String>) -> TierConfig {
        self.options.insert(key.into(), value.into());
        self
    }

    /// Sets [`TierConfig::takeover`].
    pub fn takeover(mut self, takeover: bool) -> TierConfig {
        self.takeover = takeover;
        self
    }

    /// Sets [`TierConfig::local_retention`].
    pub fn local_retention(mut self, retention: Retention) -> TierConfig {
        self.local_retention = Some(retention);
        self
    }

    /// Sets [`TierConfig::delete_delay_ms`].
    pub fn delete_delay_ms(mut self, delay_ms: u64) -> TierConfig {
        self.delete_delay_ms = Some(delay_ms);
        self
    }

    /// Sets [`TierConfig::tail_upload_ms`].
    pub fn tail_upload_ms(mut self, after_ms: u64) -> TierConfig {
        self.tail_upload_ms = Some(after_ms);
        self
    }

    /// [`TierConfig::delete_delay_ms`], or its default.
    pub fn delete_delay(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.delete_delay_ms.unwrap_or(TIER_DELETE_DELAY_DEFAULT_MS),
        )
    }
}

impl std::fmt::Debug for TierConfig {
    // Option values hold credentials: only their keys are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TierConfig")
            .field("url", &self.url)
            .field("options", &self.options.keys().collect::<Vec<_>>())
            .field("takeover", &self.takeover)
            .field("local_retention", &self.local_retention)
            .field("delete_delay_ms", &self.delete_delay_ms)
            .field("tail_upload_ms", &self.tail_upload_ms)
            .finish()
    }
}

/// Settings for [`crate::Wal::open`]. Build with [`Config::default`] and the setters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Size of each sparse data file, header page included. Default 1 GiB.
    pub file_size_bytes: u64,
    /// Size of one block, the unit the allocator hands to a topic. Default 10 MiB.
    pub block_size_bytes: u64,
    /// Largest record (key plus value). `None` (the default) means 64 MiB, or less when
    /// one file of the configured geometry holds less; an explicit value above that is an error.
    pub max_record_bytes: Option<u64>,
    /// Most records in one batch. Default 65,536.
    pub max_batch_records: u64,
    /// Most bytes (keys plus values) in one batch. `None` (the default) means 64 MiB, or
    /// what one file of the configured geometry holds if that is less.
    pub max_batch_bytes: Option<u64>,
    /// Most topics one directory may hold. Default 100,000.
    pub max_topics: u64,
    /// When an append is durable. Default [`Durability::Interval`]; a writer may override it.
    pub durability: Durability,
    /// Period of the background flush in milliseconds: data in `Interval` mode, progress slots
    /// and seals in `Interval` and `Always` modes. Default 200.
    pub sync_interval_ms: u64,
    /// Longest time the sync thread holds a group open for appenders that are still copying
    /// (`Always` mode), in microseconds. It never waits when no appender is in flight.
    /// Default 1000.
    pub group_wait_us: u64,
    /// A group is synced at once when it holds this many bytes. Default 16 MiB.
    pub group_bytes_max: u64,
    /// Retention for every topic without its own entry in `topic_retention`.
    pub retention: Retention,
    /// Per-topic retention overrides.
    pub topic_retention: BTreeMap<String, Retention>,
    /// Most bytes the data files may occupy on disk; `None` (the default) means no cap.
    pub disk_bytes_max: Option<u64>,
    /// How long an append that needs space beyond `disk_bytes_max` waits for deletions
    /// before failing, in milliseconds. Default 0 (fail at once).
    pub space_wait_ms: u64,
    /// Data bytes between two entries of a topic's sparse offset/time index (Kafka's
    /// `index.interval.bytes`). Default 4096.
    pub index_interval_bytes: u64,
    /// Puts a ring in front of the data files (`None`, the default: appends go to the data
    /// files alone). Record and batch limits then default to 4 MiB.
    pub ring: Option<RingBackend>,
    /// A staged job that was never committed or aborted (its Spark driver died) is removed
    /// by the directory's holder once none of its files changed for this long, in
    /// milliseconds. `None` keeps such jobs forever. Default a day.
    pub staged_ttl_ms: Option<u64>,
    /// A staged segment with at least this many bytes of records is adopted whole as a data
    /// file when its job is published (its records are not copied); a smaller one is
    /// copied into its topics (no small file per micro-batch). Default 4 MiB.
    pub staged_adopt_bytes_min: u64,
    /// One writing handle per directory, in any process: a second writable open fails with
    /// `Locked` (the ring backend always works so). `false` (the default) is shared mode:
    /// any number of processes of one host open the directory at once and append to any
    /// topic (see `docs/ARCHITECTURE.md`, "Many processes").
    pub exclusive: bool,
    /// Object storage behind the directory (`None`, the default: the directory alone).
    pub tier: Option<TierConfig>,
    /// Threads an open (or a read-only refresh) uses to check topics and to sync the slots
    /// of the extents it resumes, several topics at a time. 0 (the default) means 8, also
    /// on fewer CPUs: recovery mostly waits for the device. 1 takes the topics one by one.
    /// At most 64.
    pub recovery_threads: usize,
    /// How new data files store records. [`RecordFormat::V2`] (the default) costs less per
    /// record; [`RecordFormat::V1`] keeps a directory readable by builds before it.
    pub record_format: RecordFormat,
}

/// How records are stored in the data files a handle creates (`docs/FORMAT.md`, "Record
/// frame" and "Batch frame"). Every build since batch frames reads both; an extent keeps
/// the format of its file, so a directory may hold both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordFormat {
    /// One 40-byte frame header per record, in data files of version 1.
    V1,
    /// One batch frame per append: a header and checksum per batch, a few varint bytes per
    /// record, in data files of version 3.
    #[default]
    V2,
}

impl RecordFormat {
    /// The version of the data files that store records this way.
    pub fn file_version(self) -> u32 {
        match self {
            RecordFormat::V1 => crate::format::VERSION_ABSOLUTE,
            RecordFormat::V2 => crate::format::VERSION_BATCHED,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            file_size_bytes: GIB,
            block_size_bytes: 10 * MIB,
            max_record_bytes: None,
            max_batch_records: 65_536,
            max_batch_bytes: None,
            max_topics: 100_000,
            durability: Durability::Interval,
            sync_interval_ms: 200,
            group_wait_us: 1000,
            group_bytes_max: 16 * MIB,
            retention: Retention::default(),
            topic_retention: BTreeMap::new(),
            disk_bytes_max: None,
            space_wait_ms: 0,
            index_interval_bytes: 4 * KIB,
            ring: None,
            staged_ttl_ms: Some(STAGED_TTL_DEFAULT_MS),
            staged_adopt_bytes_min: STAGED_ADOPT_BYTES_DEFAULT,
            exclusive: false,
            tier: None,
            recovery_threads: 0,
            record_format: RecordFormat::default(),
        }
    }
}

impl Config {
    /// Sets [`Config::tier`]: object storage behind the directory.
    pub fn tier(mut self, tier: TierConfig) -> Self {
        self.tier = Some(tier);
        self
    }

    /// Sets [`Config::exclusive`].
    pub fn exclusive(mut self, exclusive: bool) -> Self {
        self.exclusive = exclusive;
        self
    }

    /// True when handles of this configuration share the directory with other processes:
    /// not exclusive, and no ring.
    pub fn is_shared(&self) -> bool {
        !self.exclusive && self.ring.is_none()
    }

    /// Sets [`Config::file_size_bytes`].
    pub fn file_size_bytes(mut self, bytes: u64) -> Self {
        self.file_size_bytes = bytes;
        self
    }
    /// Sets [`Config::block_size_bytes`].
    pub fn block_size_bytes(mut self, bytes: u64) -> Self {
        self.block_size_bytes = bytes;
        self
    }
    /// Sets [`Config::max_record_bytes`].
    pub fn max_record_bytes(mut self, bytes: u64) -> Self {
        self.max_record_bytes = Some(bytes);
        self
    }
    /// Sets [`Config::max_batch_records`].
    pub fn max_batch_records(mut self, count: u64) -> Self {
        self.max_batch_records = count;
        self
    }
    /// Sets [`Config::max_batch_bytes`].
    pub fn max_batch_bytes(mut self, bytes: u64) -> Self {
        self.max_batch_bytes = Some(bytes);
        self
    }
    /// Sets [`Config::max_topics`].
    pub fn max_topics(mut self, count: u64) -> Self {
        self.max_topics = count;
        self
    }
    /// Sets [`Config::durability`].
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }
    /// Sets [`Config::sync_interval_ms`].
    pub fn sync_interval_ms(mut self, interval_ms: u64) -> Self {
        self.sync_interval_ms = interval_ms;
        self
    }
    /// Sets [`Config::group_wait_us`].
    pub fn group_wait_us(mut self, wait_us: u64) -> Self {
        self.group_wait_us = wait_us;
        self
    }
    /// Sets [`Config::group_bytes_max`].
    pub fn group_bytes_max(mut self, bytes: u64) -> Self {
        self.group_bytes_max = bytes;
        self
    }
    /// Sets [`Config::retention`], the policy of every topic without an override.
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }
    /// Sets the retention of `topic`, overriding [`Config::retention`].
    pub fn topic_retention(mut self, topic: &str, retention: Retention) -> Self {
        self.topic_retention.insert(topic.to_owned(), retention);
        self
    }
    /// Sets [`Config::disk_bytes_max`].
    pub fn disk_bytes_max(mut self, bytes: u64) -> Self {
        self.disk_bytes_max = Some(bytes);
        self
    }
    /// Sets [`Config::staged_ttl_ms`].
    pub fn staged_ttl_ms(mut self, ttl_ms: Option<u64>) -> Self {
        self.staged_ttl_ms = ttl_ms;
        self
    }

    /// Sets [`Config::staged_adopt_bytes_min`].
    pub fn staged_adopt_bytes_min(mut self, bytes: u64) -> Self {
        self.staged_adopt_bytes_min = bytes;
        self
    }

    /// Sets [`Config::space_wait_ms`].
    pub fn space_wait_ms(mut self, wait_ms: u64) -> Self {
        self.space_wait_ms = wait_ms;
        self
    }

    /// The retention policy of `topic`.
    pub fn retention_for(&self, topic: &str) -> Retention {
        self.topic_retention
            .get(topic)
            .copied()
            .unwrap_or(self.retention)
    }

    /// The retention the local directory applies to `topic`: each limit of the tier's local
    /// retention, where it sets one, else [`Config::retention_for`]'s.
    pub fn local_retention_for(&self, topic: &str) -> Retention {
        let all = self.retention_for(topic);
        match self.tier.as_ref().and_then(|t| t.local_retention) {
            Some(local) => Retention {
                max_age_ms: local.max_age_ms.or(all.max_age_ms),
                max_bytes: local.max_bytes.or(all.max_bytes),
            },
            None => all,
        }
    }
    /// Sets [`Config::record_format`].
    pub fn record_format(mut self, format: RecordFormat) -> Self {
        self.record_format = format;
        self
    }
    /// Sets [`Config::recovery_threads`].
    pub fn recovery_threads(mut self, threads: usize) -> Self {
        self.recovery_threads = threads;
        self
    }
    /// The threads a recovery uses: [`Config::recovery_threads`], or its default.
    pub fn effective_recovery_threads(&self) -> usize {
        match self.recovery_threads {
            0 => RECOVERY_THREADS_DEFAULT,
            n => n,
        }
    }
    /// Sets [`Config::index_interval_bytes`].
    pub fn index_interval_bytes(mut self, bytes: u64) -> Self {
        self.index_interval_bytes = bytes;
        self
    }
    /// Sets [`Config::ring`]: the ring backend.
    pub fn ring(mut self, ring: RingBackend) -> Self {
        self.ring = Some(ring);
        self
    }

    /// The default payload limit: 64 MiB, or 4 MiB with the ring backend.
    fn payload_default(&self) -> u64 {
        if self.ring.is_some() {
            RING_PAYLOAD_DEFAULT
        } else {
            DEFAULT_PAYLOAD_MAX
        }
    }

    /// The record size limit in force: [`Config::max_record_bytes`], or its default.
    pub fn effective_max_record_bytes(&self) -> u64 {
        self.max_record_bytes.unwrap_or_else(|| {
            self.payload_default()
                .min(self.extent_payload_max())
                .min(format::FRAME_PAYLOAD_MAX)
        })
    }

    /// The batch size limit in force: [`Config::max_batch_bytes`], or its default.
    pub fn effective_max_batch_bytes(&self) -> u64 {
        self.max_batch_bytes
            .unwrap_or_else(|| self.payload_default().min(self.extent_payload_max()))
    }

    /// The record size limit in force (the setter is [`Config::max_record_bytes`]).
    #[deprecated(note = "named like the setter now: use `effective_max_record_bytes`")]
    pub fn record_bytes_max(&self) -> u64 {
        self.effective_max_record_bytes()
    }

    /// The batch size limit in force (the setter is [`Config::max_batch_bytes`]).
    #[deprecated(note = "named like the setter now: use `effective_max_batch_bytes`")]
    pub fn batch_bytes_max(&self) -> u64 {
        self.effective_max_batch_bytes()
    }

    /// Blocks in one data file.
    pub(crate) fn blocks_per_file(&self) -> u64 {
        (self.file_size_bytes - format::FILE_HEADER_BYTES) / self.block_size_bytes
    }

    /// Largest payload a single extent (a whole file's worth of blocks) can carry, after the
    /// block header, one record's framing (in either version) and the index footer reserve.
    pub(crate) fn extent_payload_max(&self) -> u64 {
        let extent = self.blocks_per_file() * self.block_size_bytes;
        extent
            .saturating_sub(format::BLOCK_HEADER_BYTES)
            .saturating_sub(crate::batch::RECORD_OVERHEAD_MAX)
            .saturating_sub(format::footer_bytes_max(extent, self.index_interval_bytes))
    }

    /// Checks every field; called by `Wal::open`. The checks run in a fixed order (the
    /// first failure is the one reported): geometry, limits, the background flush,
    /// retention, disk space, the ring.
    pub fn validate(&self) -> Result<()> {
        self.validate_geometry()?;
        self.validate_limits()?;
        self.validate_flush()?;
        for (topic, r) in &self.topic_retention {
            validate_name(topic)?;
            r.validate()?;
        }
        self.retention.validate()?;
        self.validate_space()?;
        self.validate_tier()?;
        self.validate_ring()
    }

    /// Checks the file and block sizes and the index interval: every later check and the
    /// limits derived from them rely on these.
    fn validate_geometry(&self) -> Result<()> {
        let page = format::PAGE_BYTES;
        if self.block_size_bytes < 2 * page || !self.block_size_bytes.is_multiple_of(page) {
            return Err(Error::invalid(
                "block_size_bytes",
                format!(
                    "{} must be a multiple of {page} and at least {}",
                    self.block_size_bytes,
                    2 * page
                ),
            ));
        }
        if !self.file_size_bytes.is_multiple_of(page)
            || self.file_size_bytes < format::FILE_HEADER_BYTES + self.block_size_bytes
        {
            return Err(Error::invalid(
                "file_size_bytes",
                format!(
                    "{} must be a multiple of {page} holding the file header and at least one block",
                    self.file_size_bytes
                ),
            ));
        }
        if self.file_size_bytes > FILE_SIZE_MAX {
            return Err(Error::invalid(
                "file_size_bytes",
                format!(
                    "{} is above the maximum of {FILE_SIZE_MAX} (positions are 32-bit)",
                    self.file_size_bytes
                ),
            ));
        }
        if self.index_interval_bytes == 0 {
            return Err(Error::invalid("index_interval_bytes", "must be positive"));
        }
        Ok(())
    }

    /// Checks the record, batch and topic limits (a record within one frame and one file of
    /// this geometry, a batch within one file, counts within 32 bits) and recovery's threads.
    fn validate_limits(&self) -> Result<()> {
        let payload_max = self.extent_payload_max().min(format::FRAME_PAYLOAD_MAX);
        let record_max = self.effective_max_record_bytes();
        if record_max == 0 || record_max > payload_max {
            return Err(Error::invalid(
                "max_record_bytes",
                format!(
                    "{record_max} must be between 1 and {payload_max} (what one file of this geometry holds)"
                ),
            ));
        }
        if self.max_batch_records == 0 || self.max_batch_records > u64::from(u32::MAX) {
            return Err(Error::invalid(
                "max_batch_records",
                "must be between 1 and 2^32-1",
            ));
        }
        let batch_max = self.effective_max_batch_bytes();
        if batch_max == 0 || batch_max > self.extent_payload_max() {
            return Err(Error::invalid(
                "max_batch_bytes",
                format!(
                    "{batch_max} must be between 1 and {} (a batch must fit in one file)",
                    self.extent_payload_max()
                ),
            ));
        }
        if self.max_topics == 0 || self.max_topics > u64::from(u32::MAX) {
            return Err(Error::invalid("max_topics", "must be between 1 and 2^32-1"));
        }
        if self.recovery_threads > RECOVERY_THREADS_MAX {
            return Err(Error::invalid(
                "recovery_threads",
                format!(
                    "must be at most {RECOVERY_THREADS_MAX} (0: the default, {RECOVERY_THREADS_DEFAULT})"
                ),
            ));
        }
        Ok(())
    }

    /// Checks the background flush's period and the group commit's wait and size.
    fn validate_flush(&self) -> Result<()> {
        if self.sync_interval_ms == 0 || self.sync_interval_ms > SYNC_INTERVAL_MAX_MS {
            return Err(Error::invalid(
                "sync_interval_ms",
                format!(
                    "must be between 1 and {SYNC_INTERVAL_MAX_MS} (use Durability::Never to turn the background flush off)"
                ),
            ));
        }
        if self.group_wait_us > GROUP_WAIT_MAX_US {
            return Err(Error::invalid(
                "group_wait_us",
                format!("must be at most {GROUP_WAIT_MAX_US}"),
            ));
        }
        if self.group_bytes_max == 0 {
            return Err(Error::invalid("group_bytes_max", "must be positive"));
        }
        Ok(())
    }

    /// Checks the disk cap (room for at least one file header and one block) and how long
    /// an append waits for space.
    fn validate_space(&self) -> Result<()> {
        if let Some(max) = self.disk_bytes_max {
            let floor = format::FILE_HEADER_BYTES + self.block_size_bytes;
            if max < floor {
                return Err(Error::invalid(
                    "disk_bytes_max",
                    format!("{max} cannot hold even one file header and one block ({floor})"),
                ));
            }
        }
        if self.space_wait_ms > SPACE_WAIT_MAX_MS {
            return Err(Error::invalid(
                "space_wait_ms",
                format!("must be at most {SPACE_WAIT_MAX_MS}"),
            ));
        }
        Ok(())
    }

    /// With the ring backend, checks that the largest record or batch fits in one ring
    /// entry (every batch is one).
    fn validate_tier(&self) -> Result<()> {
        let Some(tier) = &self.tier else {
            return Ok(());
        };
        if tier.url.is_empty() {
            return Err(Error::invalid("tier", "the URL is empty"));
        }
        if tier.tail_upload_ms == Some(0) {
            return Err(Error::invalid(
                "tail_upload_ms",
                "must be positive (each end of an open extent makes an object)",
            ));
        }
        if let Some(local) = tier.local_retention {
            local.validate()?;
            // Kafka's rule: the local copy keeps no more than the log does.
            let within = |local: Option<u64>, all: Option<u64>| match (local, all) {
                (Some(local), Some(all)) => local <= all,
                _ => true,
            };
            let retentions =
                std::iter::once(self.retention).chain(self.topic_retention.values().copied());
            for r in retentions {
                if !within(local.max_age_ms, r.max_age_ms) || !within(local.max_bytes, r.max_bytes)
                {
                    return Err(Error::invalid(
                        "local_retention",
                        "each limit must be at most the retention's (the local copy keeps no \
                         more than the log)",
                    ));
                }
            }
        }
        if self.ring.is_some() {
            return Err(Error::invalid(
                "tier",
                "the ring backend keeps records in its ring first; a tier needs the data files alone",
            ));
        }
        if !cfg!(feature = "tier") {
            return Err(Error::invalid(
                "tier",
                "this build of tidelog has no tier (cargo feature `tier`)",
            ));
        }
        Ok(())
    }

    fn validate_ring(&self) -> Result<()> {
        if self.ring.is_none() {
            return Ok(());
        }
        let (record_max, batch_max) = (
            self.effective_max_record_bytes(),
            self.effective_max_batch_bytes(),
        );
        let entry = crate::ring::entry::entry_bytes_max(record_max, batch_max);
        if entry > crate::ring::RECORD_BYTES_MAX {
            return Err(Error::invalid(
                "max_batch_bytes",
                format!(
                    "with the ring backend, records and batches are at most {} bytes \
                     (every batch is one ring entry)",
                    crate::ring::RECORD_BYTES_MAX - (entry - record_max.max(batch_max))
                ),
            ));
        }
        Ok(())
    }
}

/// Where a new reader starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartPosition {
    /// The group's committed offset; the earliest stored offset when it never committed
    /// or has no group.
    #[default]
    Committed,
    /// The first stored offset.
    Earliest,
    /// The next offset to be appended: only new records.
    Latest,
    /// This offset (between the first stored offset and the next offset, inclusive).
    Offset(u64),
}

/// When a grouped reader persists its position. A read-only handle refuses a reader of any
/// mode but `Explicit` (`Error::ReadOnly`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommitMode {
    /// Only [`crate::Reader::commit`] and [`crate::Reader::commit_offset`] persist.
    #[default]
    Explicit,
    /// At-least-once: every N records, the next read first commits what was returned
    /// before it (a crash replays at most N records).
    AutoEvery(u64),
    /// Commit each record's successor before returning it: at-most-once (a crash after the
    /// read loses that record for this group, never repeats it). One fdatasync per read.
    Strict,
}

/// Which records a reader returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Visibility {
    /// Every record whose append returned (in any process): the lowest latency. A record
    /// the writer's machine loses in a crash (power loss) before it was durable may have
    /// been read.
    #[default]
    Published,
    /// Only records that are durable on disk: what a crash of any kind keeps. They arrive
    /// after the sync that covers them (`fsync="always"`: at once; `interval`: within
    /// `sync_interval_ms`; `never`: at `flush()` or close).
    Durable,
}

/// Options for [`crate::Wal::reader_with`].
#[derive(Debug, Clone, Default)]
pub struct ReaderOptions {
    /// The consumer group whose cursor is used and committed; `None` for an anonymous reader.
    pub group: Option<String>,
    /// Where to start.
    pub start: StartPosition,
    /// When to commit (grouped readers only).
    pub commit: CommitMode,
    /// Skip checksum verification on reads (default: verify every record).
    pub skip_checksums: bool,
    /// Published records (the default) or only durable ones.
    pub visibility: Visibility,
    /// How long a wait for records (`Wal::wait_for_records`) first watches for them on a
    /// CPU before it sleeps: a record appended meanwhile, in any process, is seen without a
    /// wake-up (whose cost the kernel sets: 5-15 us on the machines we measured). Zero (the
    /// default) sleeps at once; at most [`SPIN_MAX`]. The wait burns its CPU meanwhile.
    pub spin: Duration,
}

/// The longest [`ReaderOptions::spin`].
pub const SPIN_MAX: Duration = Duration::from_millis(10);

impl ReaderOptions {
    /// Options for a reader of `group`.
    pub fn group(group: impl Into<String>) -> Self {
        ReaderOptions {
            group: Some(group.into()),
            ..Self::default()
        }
    }
    /// Sets the start position.
    pub fn start(mut self, start: StartPosition) -> Self {
        self.start = start;
        self
    }
    /// Sets the commit mode.
    pub fn commit(mut self, commit: CommitMode) -> Self {
        self.commit = commit;
        self
    }
    /// Sets which records the reader returns.
    pub fn visibility(mut self, visibility: Visibility) -> Self {
        self.visibility = visibility;
        self
    }
    /// Sets how long a wait watches for records before it sleeps (see
    /// [`ReaderOptions::spin`]).
    pub fn spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }
}
