//! The ring's settings: `RingConfig` and its checks, the direct-I/O and I/O engine modes,
//! and the build's limits.

use super::format::{self, ALIGN_BYTES, BH_LEN, RR_HEADER_LEN, align_up};
use crate::error::{Error, Result};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
/// Largest record body this build accepts in any configuration.
pub const RECORD_BYTES_MAX: u64 = 64 * MIB;
/// Most blocks in flight.
pub const INFLIGHT_BLOCKS_MAX: usize = 64;
/// Longest block time threshold (one second).
pub const BLOCK_DELAY_MAX_US: u64 = 1_000_000;

/// Whether the ring uses `O_DIRECT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DirectIo {
    /// Fail to open if the target refuses `O_DIRECT`.
    Required,
    /// Use `O_DIRECT`, or buffered I/O where it is refused (tmpfs, some FUSE mounts).
    #[default]
    Auto,
    /// Buffered I/O. Every write is still durable on return (`O_DSYNC`).
    Off,
}

/// How block writes are issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoEngine {
    /// io_uring where the kernel allows it (and the storage layer is the real file system),
    /// threads otherwise.
    #[default]
    Auto,
    /// One thread keeping `inflight_blocks` writes in flight through io_uring; fail to open
    /// where that is not possible.
    IoUring,
    /// `inflight_blocks` threads, each doing one blocking write at a time.
    Threads,
}

/// Settings for [`RingWal::open`](crate::RingWal::open).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingConfig {
    /// Total bytes, header slots included (a multiple of 4096). Needed to create a file;
    /// checked against an existing file, device or header. Default: none.
    pub capacity_bytes: Option<u64>,
    /// Direct I/O mode. Default [`DirectIo::Auto`].
    pub direct_io: DirectIo,
    /// Write a new, empty ring even if the target holds one (or holds anything else).
    /// A block device is never written without it unless it already holds a ring.
    pub format: bool,
    /// A block is sealed once it holds this many bytes. Default 256 KiB.
    pub block_bytes: u64,
    /// A block is sealed once it has been open this long (µs). Default 333 (1/3000 s).
    pub block_delay_us: u64,
    /// A block is also sealed as soon as no other block is queued or being written, so an
    /// append on an idle ring waits for one write and not for `block_delay_us`; under load
    /// blocks still fill while writes are out (group commit). Default true.
    pub seal_when_idle: bool,
    /// Most blocks written at once. Default 4.
    pub inflight_blocks: usize,
    /// Largest record body, 1 byte up to `RECORD_BYTES_MAX`. Default 1 MiB.
    pub max_record_bytes: u64,
    /// How block writes are issued. Default [`IoEngine::Auto`].
    pub io_engine: IoEngine,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            capacity_bytes: None,
            direct_io: DirectIo::Auto,
            format: false,
            block_bytes: 256 * KIB,
            block_delay_us: 333,
            seal_when_idle: true,
            inflight_blocks: 4,
            max_record_bytes: MIB,
            io_engine: IoEngine::Auto,
        }
    }
}

impl RingConfig {
    /// Sets [`RingConfig::capacity_bytes`].
    pub fn capacity_bytes(mut self, bytes: u64) -> Self {
        self.capacity_bytes = Some(bytes);
        self
    }
    /// Sets [`RingConfig::direct_io`].
    pub fn direct_io(mut self, mode: DirectIo) -> Self {
        self.direct_io = mode;
        self
    }
    /// Sets [`RingConfig::format`].
    pub fn format(mut self, format: bool) -> Self {
        self.format = format;
        self
    }
    /// Sets [`RingConfig::block_bytes`].
    pub fn block_bytes(mut self, bytes: u64) -> Self {
        self.block_bytes = bytes;
        self
    }
    /// Sets [`RingConfig::block_delay_us`].
    pub fn block_delay_us(mut self, us: u64) -> Self {
        self.block_delay_us = us;
        self
    }
    /// Sets [`RingConfig::seal_when_idle`].
    pub fn seal_when_idle(mut self, seal: bool) -> Self {
        self.seal_when_idle = seal;
        self
    }
    /// Sets [`RingConfig::inflight_blocks`].
    pub fn inflight_blocks(mut self, n: usize) -> Self {
        self.inflight_blocks = n;
        self
    }
    /// Sets [`RingConfig::max_record_bytes`].
    pub fn max_record_bytes(mut self, bytes: u64) -> Self {
        self.max_record_bytes = bytes;
        self
    }

    /// Sets [`RingConfig::io_engine`].
    pub fn io_engine(mut self, engine: IoEngine) -> Self {
        self.io_engine = engine;
        self
    }

    pub(super) fn validate(&self) -> Result<()> {
        if !(ALIGN_BYTES..=format::BLOCK_BYTES_MAX / 2).contains(&self.block_bytes) {
            return Err(Error::invalid(
                "block_bytes",
                format!("must be in {ALIGN_BYTES}..={}", format::BLOCK_BYTES_MAX / 2),
            ));
        }
        if self.block_delay_us > BLOCK_DELAY_MAX_US {
            return Err(Error::limit(
                "block_delay_us",
                self.block_delay_us,
                BLOCK_DELAY_MAX_US,
            ));
        }
        if self.inflight_blocks == 0 || self.inflight_blocks > INFLIGHT_BLOCKS_MAX {
            return Err(Error::invalid(
                "inflight_blocks",
                format!("must be in 1..={INFLIGHT_BLOCKS_MAX}"),
            ));
        }
        // 0 would refuse every record but an empty one.
        if self.max_record_bytes == 0 {
            return Err(Error::invalid("max_record_bytes", "must be positive"));
        }
        if self.max_record_bytes > RECORD_BYTES_MAX {
            return Err(Error::limit(
                "max_record_bytes",
                self.max_record_bytes,
                RECORD_BYTES_MAX,
            ));
        }
        Ok(())
    }

    /// Block buffers: twice the blocks in flight, so sealed blocks wait ready while the
    /// device completes the ones before them.
    pub(super) fn buffer_count(&self) -> usize {
        2 * self.inflight_blocks
    }

    /// Bytes of each block buffer: a full block, or one largest record alone.
    pub(super) fn buffer_bytes(&self) -> u64 {
        align_up(
            self.block_bytes
                .max(BH_LEN as u64 + RR_HEADER_LEN as u64 + self.max_record_bytes),
        )
    }
}
