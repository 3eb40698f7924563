//! `tidelog._native`: the Python binding of the tidelog engine.
//!
//! A thin layer: argument conversion, the GIL, the buffer protocol and error mapping. Every
//! storage decision is the engine's (`crates/tidelog`).

mod arrow;
mod buffer;
mod call;
mod columns;
mod error;
mod headers;
mod options;
mod reader;
mod record;
mod remote;
mod ring;
mod stage;
mod stream;
mod wal;

use std::collections::HashMap;
use std::path::PathBuf;

use pyo3::prelude::*;

use crate::call::detached;
use crate::options::OpenOptions;

/// Opens (creating if needed) the log directory at `path`. See the stubs for the options.
#[pyfunction]
#[pyo3(signature = (
    path,
    *,
    fsync = None,
    fsync_interval_ms = None,
    readonly = false,
    block_size = None,
    file_size = None,
    max_record_bytes = None,
    max_batch_records = None,
    max_batch_bytes = None,
    max_topics = None,
    retention_ms = None,
    retention_bytes = None,
    topic_retention = None,
    disk_bytes_max = None,
    space_wait_ms = None,
    group_wait_us = None,
    group_bytes_max = None,
    backend = None,
    device = None,
    capacity = None,
    direct_io = None,
    format = false,
    staged_ttl_ms = Some(tidelog::STAGED_TTL_DEFAULT_MS),
    staged_adopt_bytes_min = None,
    staged_adopt_bytes = None,
    exclusive = false,
    tier = None,
    storage_options = None,
    tier_takeover = false,
    local_retention_ms = None,
    local_retention_bytes = None,
    tier_delete_delay_ms = None,
    tail_upload_ms = None,
    recovery_threads = None,
    record_format = 2,
),
text_signature = "(path, *, fsync=None, fsync_interval_ms=200, readonly=False, \
    block_size=None, file_size=None, max_record_bytes=None, max_batch_records=None, \
    max_batch_bytes=None, max_topics=None, retention_ms=None, retention_bytes=None, \
    topic_retention=None, disk_bytes_max=None, space_wait_ms=None, group_wait_us=None, \
    group_bytes_max=None, backend='mmap', device=None, capacity=None, direct_io='auto', \
    format=False, staged_ttl_ms=86400000, staged_adopt_bytes_min=4194304, \
    staged_adopt_bytes=None, exclusive=False, tier=None, storage_options=None, \
    tier_takeover=False, local_retention_ms=None, local_retention_bytes=None, \
    tier_delete_delay_ms=60000, tail_upload_ms=None, recovery_threads=None, record_format=2)")]
#[expect(clippy::too_many_arguments, reason = "mirrors Python keyword options")]
fn open(
    py: Python<'_>,
    path: PathBuf,
    fsync: Option<String>,
    fsync_interval_ms: Option<u64>,
    readonly: bool,
    block_size: Option<u64>,
    file_size: Option<u64>,
    max_record_bytes: Option<u64>,
    max_batch_records: Option<u64>,
    max_batch_bytes: Option<u64>,
    max_topics: Option<u64>,
    retention_ms: Option<u64>,
    retention_bytes: Option<u64>,
    topic_retention: Option<HashMap<String, HashMap<String, u64>>>,
    disk_bytes_max: Option<u64>,
    space_wait_ms: Option<u64>,
    group_wait_us: Option<u64>,
    group_bytes_max: Option<u64>,
    backend: Option<&str>,
    device: Option<PathBuf>,
    capacity: Option<u64>,
    direct_io: Option<&Bound<'_, PyAny>>,
    format: bool,
    staged_ttl_ms: Option<u64>,
    staged_adopt_bytes_min: Option<u64>,
    staged_adopt_bytes: Option<u64>,
    exclusive: bool,
    tier: Option<String>,
    storage_options: Option<HashMap<String, Bound<'_, PyAny>>>,
    tier_takeover: bool,
    local_retention_ms: Option<u64>,
    local_retention_bytes: Option<u64>,
    tier_delete_delay_ms: Option<u64>,
    tail_upload_ms: Option<u64>,
    recovery_threads: Option<usize>,
    record_format: i64,
) -> PyResult<wal::PyWal> {
    let record_format = options::record_format(record_format)?;
    let local = (local_retention_ms.is_some() || local_retention_bytes.is_some())
        .then(|| options::retention(local_retention_ms, local_retention_bytes));
    let tier = options::tier(
        tier,
        storage_options,
        options::TierOptions {
            takeover: tier_takeover,
            local_retention: local,
            delete_delay_ms: tier_delete_delay_ms,
            tail_upload_ms,
        },
    )?;
    let staged_adopt_bytes_min =
        options::staged_adopt_bytes_min(py, staged_adopt_bytes_min, staged_adopt_bytes)?;
    let config = OpenOptions {
        fsync,
        fsync_interval_ms,
        block_size,
        file_size,
        max_record_bytes,
        max_batch_records,
        max_batch_bytes,
        max_topics,
        retention_ms,
        retention_bytes,
        topic_retention,
        disk_bytes_max,
        space_wait_ms,
        group_wait_us,
        group_bytes_max,
        ring: options::ring_backend(backend, device, capacity, direct_io, format)?,
    }
    .config()?
    .staged_ttl_ms(staged_ttl_ms)
    .staged_adopt_bytes_min(staged_adopt_bytes_min)
    .exclusive(exclusive);
    let config = config.record_format(record_format);
    let config = match recovery_threads {
        Some(threads) => config.recovery_threads(threads),
        None => config,
    };
    let config = match tier {
        Some(tier) => config.tier(tier),
        None => config,
    };
    let shown = path.display().to_string();
    let wal = detached(py, || {
        if readonly {
            tidelog::Wal::open_read_only_with(&path, config)
        } else {
            tidelog::Wal::open_with(&path, config)
        }
    })?;
    Ok(wal::PyWal::new(wal, shown))
}

/// Runs the `tidelog` command line `argv` (program name first) with the GIL released and
/// returns its exit status: the wheel's `tidelog` console script. The wheel has no
/// benchmark: `tidelog bench` says in one line how to run it from a checkout.
#[pyfunction]
fn cli(py: Python<'_>, argv: Vec<std::ffi::OsString>) -> PyResult<u8> {
    detached(py, || Ok(tidelog_cli::run_without_bench(argv)))
}

#[pymodule]
#[pyo3(name = "_native")]
fn tidelog_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add_function(wrap_pyfunction!(remote::open_remote, m)?)?;
    m.add_class::<remote::PyRemoteLog>()?;
    m.add_class::<remote::PyRemoteReader>()?;
    m.add_class::<stream::PyArrowStream>()?;
    m.add_class::<stream::PyArrowBatch>()?;
    m.add_class::<remote::PyRemoteRecord>()?;
    m.add_class::<wal::PyWal>()?;
    m.add_class::<wal::PyWriter>()?;
    m.add_class::<wal::PyAppendHandle>()?;
    m.add_class::<wal::PyTopicInfo>()?;
    m.add_class::<wal::PyRecoveryReport>()?;
    m.add_class::<reader::PyReader>()?;
    m.add_class::<record::PyRecord>()?;
    m.add_class::<ring::PyRingWal>()?;
    m.add_class::<ring::PyRingAppendHandle>()?;
    m.add_class::<ring::PyRingRecovery>()?;
    m.add_class::<ring::PyRingRecoverIter>()?;
    m.add_class::<stage::PyStagedWriter>()?;
    m.add_function(wrap_pyfunction!(stage::stage_commit, m)?)?;
    m.add_function(wrap_pyfunction!(stage::stage_wait, m)?)?;
    m.add_function(wrap_pyfunction!(stage::stage_abort, m)?)?;
    m.add_function(wrap_pyfunction!(stage::stage_sink_batch, m)?)?;
    m.add_function(wrap_pyfunction!(stage::bucket_stage_upload, m)?)?;
    m.add_function(wrap_pyfunction!(stage::bucket_stage_commit, m)?)?;
    m.add_function(wrap_pyfunction!(stage::bucket_stage_wait, m)?)?;
    m.add_function(wrap_pyfunction!(stage::bucket_stage_abort, m)?)?;
    m.add_function(wrap_pyfunction!(stage::bucket_stage_sink_batch, m)?)?;
    Ok(())
}
