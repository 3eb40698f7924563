//! What a `Wal` reports about itself: per topic, disk use, and the ring in front.

use std::path::PathBuf;

/// Summary of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicInfo {
    /// The topic name.
    pub name: String,
    /// First offset still stored: on disk, or in the tier's bucket (whose records the
    /// handle's readers read too).
    pub first_offset: u64,
    /// First offset still on disk (`first_offset` without a tier).
    pub local_first_offset: u64,
    /// Offset the next append gets (after the last published record).
    pub next_offset: u64,
    /// Offset after the last record known to be durable (what a
    /// [`Visibility::Durable`](crate::Visibility::Durable) reader may read up to).
    pub durable_offset: u64,
    /// Bytes of record frames stored (headers and padding included).
    pub bytes: u64,
    /// Extents in the topic's chain.
    pub extents: usize,
    /// Consumer groups with a cursor file.
    pub groups: Vec<String>,
}

/// The process that leads housekeeping (retention, file deletion) among the processes
/// sharing a directory (shared mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The pid of the process that last took the lead. It keeps it until it closes or dies;
    /// after its death, until another process's housekeeping takes over (within one sync
    /// interval), this still names it.
    pub pid: u32,
    /// Bumped each time a process takes the lead (0: none has yet).
    pub epoch: u64,
    /// Milliseconds since the leader last began a housekeeping pass (it begins one every
    /// sync interval): a large value means a stopped or stuck leader, which keeps the lead
    /// until it dies or closes.
    pub idle_ms: u64,
}

/// Disk space the data files of a directory occupy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiskUsage {
    /// Data files (including the spare prepared ahead of need).
    pub files: u64,
    /// Bytes reserved on disk: file headers and every extent handed out.
    pub bytes: u64,
}

/// The ring in front of a directory's data files (the ring backend), as of one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RingStats {
    /// The ring's block device or file.
    pub device: PathBuf,
    /// Its size, header slots included.
    pub capacity_bytes: u64,
    /// Entries below this ring offset are in the durable data files and gone from the ring.
    pub trim_offset: u64,
    /// The ring offset the next entry gets.
    pub next_offset: u64,
    /// Everything below this ring offset is durable in the ring.
    pub flushed_offset: u64,
    /// Ring bytes free for new entries.
    pub free_bytes: u64,
    /// Checkpoints run since open.
    pub checkpoints: u64,
    /// True when the ring writes with `O_DIRECT`.
    pub direct_io: bool,
}
