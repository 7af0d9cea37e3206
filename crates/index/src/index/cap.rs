//! Per-unit entry cap: a (worker, rank) never holds more index entries than its KV cache
//! can hold pages, plus slack. A publisher that claims more (bug, lost removals, a
//! misconfigured page size) gets its unit cleared and marked recovering instead of
//! growing the router without bound. Design notes: docs/index.md `## Entry cap`.

/// Cap of a unit whose worker does not advertise `max_total_num_tokens`: 2^21 pages
/// (about 180 MB of index at the worst-case ~85 B/entry; 32M tokens at page 16).
pub const DEFAULT_UNIT_CAP_BLOCKS: usize = 1 << 21;

/// Fixed slack on top of the advertised capacity, in pages.
pub(crate) const CAP_SLACK_PAGES: usize = 64;

/// The entry cap of a unit whose worker advertises `max_total_num_tokens` (per rank):
/// `pages + pages / 10 + 64` with `pages = ceil(tokens / page_size)`; the slack absorbs
/// events in flight across an eviction and rounding. Unknown (or zero) capacity gives
/// [`DEFAULT_UNIT_CAP_BLOCKS`].
pub(crate) fn unit_cap_blocks(max_total_num_tokens: Option<u64>, page_size: u32) -> usize {
    match max_total_num_tokens {
        Some(tokens) if tokens > 0 => {
            let pages = tokens.div_ceil(u64::from(page_size.max(1)));
            let pages = usize::try_from(pages).unwrap_or(usize::MAX);
            pages
                .saturating_add(pages / 10)
                .saturating_add(CAP_SLACK_PAGES)
        }
        _ => DEFAULT_UNIT_CAP_BLOCKS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_is_capacity_in_pages_plus_slack() {
        assert_eq!(unit_cap_blocks(Some(4096), 4), 1024 + 102 + 64);
        assert_eq!(unit_cap_blocks(Some(10), 4), 3 + 64);
        assert_eq!(unit_cap_blocks(None, 4), DEFAULT_UNIT_CAP_BLOCKS);
        assert_eq!(unit_cap_blocks(Some(0), 4), DEFAULT_UNIT_CAP_BLOCKS);
    }
}
