//! Appends: [`Writer`], and the two entry points every append of a `Wal` or a `Writer`
//! goes through (checks, validation, then the durability strategy).

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::durability::WriteOpts;
use super::follow;
use super::state::State;
use crate::alloc::SHARED_LOCK_WAIT;
use crate::config::Durability;
use crate::error::Result;
use crate::poison::PanicGuard;
use crate::record::Append;
use crate::shared::TopicGuard;
use crate::sync::AppendHandle;
use crate::topic::Topic;

/// Between two looks of an appender at a topic a staged job's publish reserved.
const RESERVED_POLL: Duration = Duration::from_millis(1);

/// Appends `records` to `topic` as one crash-atomic batch; returns once they are as durable
/// as `opts` asks.
#[inline]
pub(super) fn append(
    state: &State,
    topic: &Topic,
    records: &[Append<'_>],
    opts: WriteOpts,
) -> Result<Range<u64>> {
    state.check_writable()?;
    state.validate_records(records)?;
    append_checked(state, topic, records, opts)
}

/// [`append`] for records the caller has checked already (`Wal`'s appends check before
/// they create the topic).
#[inline]
pub(super) fn append_checked(
    state: &State,
    topic: &Topic,
    records: &[Append<'_>],
    opts: WriteOpts,
) -> Result<Range<u64>> {
    let _panic = PanicGuard::new(&state.sync.poison, "append");
    let held = lock_topic(state, topic)?;
    state
        .durable
        .append(&state.appending(opts), topic, records, opts, held)
}

/// Shared mode: takes `topic`'s append lock and lines its tail up with what other
/// processes appended (`None` otherwise). Released once the records are published, before
/// any wait for durability.
pub(super) fn lock_topic<'t>(state: &State, topic: &'t Topic) -> Result<Option<TopicGuard<'t>>> {
    if !state.topics.is_shared_mode() {
        return Ok(None);
    }
    let slot = super::topics::slot_of(topic)?;
    let mut start = None;
    loop {
        let guard = slot.lock(SHARED_LOCK_WAIT)?;
        follow::check_live(state, topic, slot)?;
        follow::line_up(state, topic, slot)?;
        if slot.publisher() == 0 {
            crate::process::crash_point("append-locked");
            return Ok(Some(guard));
        }
        // A staged job's publish owns the offsets after its start (see `wal::publish`):
        // its publisher, or the next one after it died, ends the reservation.
        drop(guard);
        let waited = start.get_or_insert_with(Instant::now).elapsed();
        if waited >= SHARED_LOCK_WAIT {
            return Err(crate::Error::LockTimeout {
                lock: "staged publish",
                holder_pid: slot.publisher_pid(),
                waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
            });
        }
        state.check_writable()?;
        std::thread::sleep(RESERVED_POLL);
    }
}

/// Appends `records` to `topic` and returns at once with a handle that completes once they
/// are durable.
pub(super) fn append_async(
    state: &State,
    topic: &Topic,
    records: &[Append<'_>],
    opts: WriteOpts,
) -> Result<AppendHandle> {
    state.check_writable()?;
    state.validate_records(records)?;
    append_async_checked(state, topic, records, opts)
}

/// [`append_async`] for records the caller has checked already.
pub(super) fn append_async_checked(
    state: &State,
    topic: &Topic,
    records: &[Append<'_>],
    opts: WriteOpts,
) -> Result<AppendHandle> {
    let _panic = PanicGuard::new(&state.sync.poison, "append");
    let held = lock_topic(state, topic)?;
    state
        .durable
        .append_async(&state.appending(opts), topic, records, opts, held)
}

/// Appends to one topic. Cheap to clone; `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Writer {
    state: Arc<State>,
    topic: Arc<Topic>,
    opts: WriteOpts,
}

impl Writer {
    pub(super) fn new(state: Arc<State>, topic: Arc<Topic>) -> Writer {
        Writer {
            opts: state.default_opts(),
            state,
            topic,
        }
    }

    /// The topic this writer appends to.
    pub fn topic(&self) -> &str {
        &self.topic.name
    }

    /// This writer with its own durability instead of the Wal's.
    pub fn with_durability(mut self, durability: Durability) -> Writer {
        self.state.durable.note_writer(durability);
        self.opts.durability = durability;
        self
    }

    /// The durability this writer's appends get.
    pub fn durability(&self) -> Durability {
        self.opts.durability
    }

    /// This writer waiting up to `wait` for space when the disk cap is reached, instead of
    /// the Wal's `space_wait_ms`.
    pub fn wait_for_space(mut self, wait: Duration) -> Writer {
        self.opts.space_wait = wait;
        self
    }

    /// Appends `value`; returns its offset. With [`Durability::Always`] it returns once the
    /// record is durable.
    #[inline]
    pub fn append(&self, value: &[u8]) -> Result<u64> {
        self.append_record(Append::value(value))
    }

    /// Appends one record with an optional key and timestamp; returns its offset.
    #[inline]
    pub fn append_record(&self, record: Append<'_>) -> Result<u64> {
        Ok(append(&self.state, &self.topic, &[record], self.opts)?.start)
    }

    /// Appends `values` as one batch: after a crash either all of them are there or none.
    pub fn append_batch<V: AsRef<[u8]>>(&self, values: &[V]) -> Result<Range<u64>> {
        let records: Vec<Append<'_>> = values.iter().map(|v| Append::value(v.as_ref())).collect();
        self.append_batch_records(&records)
    }

    /// Appends `records` (keys, values, timestamps) as one crash-atomic batch.
    pub fn append_batch_records(&self, records: &[Append<'_>]) -> Result<Range<u64>> {
        append(&self.state, &self.topic, records, self.opts)
    }

    /// Appends `value` and returns at once with its offset and a handle that completes when
    /// it is durable: at once requested with [`Durability::Always`], else at the next
    /// periodic flush or [`crate::Wal::flush`].
    pub fn append_async(&self, value: &[u8]) -> Result<AppendHandle> {
        self.append_batch_async(&[Append::value(value)])
    }

    /// [`Writer::append_async`] for a crash-atomic batch.
    pub fn append_batch_async(&self, records: &[Append<'_>]) -> Result<AppendHandle> {
        append_async(&self.state, &self.topic, records, self.opts)
    }

    /// The offset the next append gets.
    pub fn next_offset(&self) -> u64 {
        self.topic.next_offset()
    }

    /// Makes everything appended so far (to every topic) durable.
    pub fn flush(&self) -> Result<()> {
        self.state.check_writable()?;
        let _panic = PanicGuard::new(&self.state.sync.poison, "flush");
        self.state.durable.flush_all(&self.state.flusher)
    }
}
