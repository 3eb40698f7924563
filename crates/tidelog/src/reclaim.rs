//! Which extents at the front of a topic are consumed: committed past by every registered
//! cursor group, or outside the topic's retention. The `Wal` drops them from the chain and
//! marks them in their files' counters; a file whose counters then say so is deleted by the
//! background thread.

use std::sync::Arc;

use crate::block::Block;
use crate::config::Retention;
use crate::format;

/// How many extents at the front of `chain` are consumed.
///
/// `committed_min` is the lowest committed offset over the topic's registered groups (`None`
/// when it has none: then only retention consumes). Only extents that take no more records
/// qualify, and never the topic's newest extent, so its next offset survives a restart. Both
/// rules only ever grow the prefix: committed offsets only advance, ages only grow, and a
/// topic's bytes only shrink by this prefix.
pub fn consumable_prefix(
    chain: &[Arc<Block>],
    committed_min: Option<u64>,
    retention: Retention,
    now_us: u64,
) -> usize {
    let candidates = chain.len().saturating_sub(1);
    let extent_bytes = |b: &Block| b.published().1 - format::BLOCK_HEADER_BYTES;
    let mut remaining: u64 = chain.iter().map(|b| extent_bytes(b)).sum();
    let mut n = 0;
    while n < candidates {
        let block = &chain[n];
        let Some((count, end)) = block.final_state() else {
            break;
        };
        let bytes = end - format::BLOCK_HEADER_BYTES;
        let by_cursors = committed_min.is_some_and(|c| block.first_offset + count <= c);
        // An extent's max timestamp is the topic's running maximum, so ages are monotone.
        let by_age = retention.max_age_ms.is_some_and(|age_ms| {
            block
                .max_timestamp_us()
                .saturating_add(age_ms.saturating_mul(1000))
                < now_us
        });
        let by_bytes = retention
            .max_bytes
            .is_some_and(|max| remaining - bytes >= max);
        if !(by_cursors || by_age || by_bytes) {
            break;
        }
        remaining -= bytes;
        n += 1;
    }
    n
}
