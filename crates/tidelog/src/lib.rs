//! # tidelog
//!
//! A crash-safe, embedded write-ahead log organised by topic. Each topic is a chain of
//! extents (runs of 10 MiB blocks) inside sparse, memory-mapped 1 GiB data files. Appends
//! reserve space under a short per-topic lock, then checksum and copy with no lock held;
//! every append returns the record's per-topic offset. Readers borrow records straight from
//! the mapping, and named consumer groups persist their position.
//!
//! ```
//! use tidelog::{Wal, Config, ReaderOptions, StartPosition};
//!
//! # fn main() -> tidelog::Result<()> {
//! # let dir = tempfile::tempdir().map_err(|e| tidelog::Error::Io { op: "tempdir", path: ".".into(), source: e })?;
//! let wal = Wal::open_with(dir.path(), Config::default().file_size_bytes(64 << 20).block_size_bytes(1 << 20))?;
//! let orders = wal.writer("orders")?;
//! assert_eq!(orders.append(b"first")?, 0);
//! assert_eq!(orders.append(b"second")?, 1);
//! wal.flush()?; // durable now
//!
//! let mut reader = wal.reader("orders", "billing")?; // starts at the group's commit
//! while let Some(record) = reader.next()? {
//!     println!("{} {:?}", record.offset, record.value);
//! }
//! reader.commit()?; // the group resumes at offset 2 next time
//! # Ok(())
//! # }
//! ```
//!
//! See `docs/ARCHITECTURE.md` for the write, read, sync and recovery paths and
//! `docs/FORMAT.md` for every byte on disk.

#![warn(missing_docs)]

mod alloc;
pub mod batch;
mod clock;
mod config;
mod cursor;
mod dio;
mod error;
mod extent;
mod file;
/// Every byte on disk (docs/FORMAT.md is the description): for the tools and tests, not
/// the API a user needs, so hidden from the docs.
#[doc(hidden)]
pub mod format;
mod futex;
mod headers;
#[doc(hidden)]
pub mod internals;
pub mod io;
mod journal;
mod mmap;
mod ofd;
mod poison;
mod prefault;
mod process;
mod reader;
mod reclaim;
mod record;
mod recovery;
pub mod ring;
mod shared;
mod spin;
pub mod stage;
mod start;
mod status;
mod sync;
mod tier;
mod topic;
mod uring;
mod varint;
mod wal;

pub use config::{
    CommitMode, Config, Durability, FILE_SIZE_MAX, RING_CAPACITY_DEFAULT, RING_FILE, ReaderOptions,
    RecordFormat, Retention, RingBackend, SPIN_MAX, STAGED_ADOPT_BYTES_DEFAULT,
    STAGED_TTL_DEFAULT_MS, StartPosition, TIER_DELETE_DELAY_DEFAULT_MS, TierConfig, Visibility,
    validate_name,
};
pub use error::{Error, Result};
pub use file::FileState;
pub use format::TOPIC_NAME_MAX;
pub use headers::{HEADER_COUNT_MAX, HEADER_KEY_MAX, HeaderBlock, HeaderIter, Headers};
pub use journal::MARKER_FILE as RING_MARKER_FILE;
pub use reader::{Reader, Record, RecordRef};
pub use record::{Append, TIMESTAMP_US_MAX};
pub use recovery::RecoveryReport;
pub use ring::{DirectIo, IoEngine, RingAppend, RingConfig, RingRecovery, RingWal};
pub use stage::{StagedPart, StagedWriter};
pub use sync::AppendHandle;
pub use tier::TierStatus;
#[cfg(feature = "tier")]
#[doc(hidden)]
pub use tier::faults as tier_faults;
#[cfg(feature = "tier")]
pub use tier::staging as tier_stage;
#[cfg(feature = "tier")]
pub use tier::{
    READAHEAD_OBJECTS, REFRESH_INTERVAL, RemoteLog, RemoteReader, RemoteRecord, RemoteRecordRef,
    RemoteTopicInfo,
};
#[cfg(feature = "tier")]
pub use wal::TierFlush;
pub use wal::{DiskUsage, LOCK_FILE, Leader, RingStats, TopicInfo, Wal, Writer, commit_staged};

/// Microseconds since the Unix epoch from the OS wall clock. Records are stamped by each
/// `Wal`'s own clock, which tracks this one to within about a microsecond.
pub fn now_us() -> u64 {
    clock::now_us()
}
