//! Per-rank cache options that come from the command line rather than [`Limits`]: the
//! KV-event hash format (`KVEventsConfig.format`), the adapters whose names KV events
//! resolve (`KvEventLoraNames.from_lora_refs`), and the HiCache host tier
//! (`--enable-hierarchical-cache`, `--hicache-ratio`, `--hicache-write-policy`).
//!
//! [`Limits`]: super::Limits

use super::Scheduler;
use crate::mock::config::{KvEventsConfig, MockArgs, DEFAULT_HICACHE_RATIO};
use crate::mock::lora::Adapters;

/// Applies the cache options of `args` to a new rank's scheduler.
pub fn configure(mut sched: Scheduler, args: &MockArgs, kv: Option<&KvEventsConfig>) -> Scheduler {
    let cache = sched.cache_mut();
    cache.set_dynamo_format(kv.is_some_and(KvEventsConfig::dynamo_format));
    if let Ok(adapters) = Adapters::from_args(args) {
        for a in &adapters.list {
            cache.register_adapter(&a.id, &a.name);
        }
    }
    if args.enable_hierarchical_cache {
        let ratio = args.hicache_ratio.unwrap_or(DEFAULT_HICACHE_RATIO);
        let device_pages = args.max_total_tokens / args.page_size.max(1);
        let host_pages = (device_pages as f64 * ratio).floor() as usize;
        cache.enable_host(host_pages, args.hicache_write_policy != "write_back");
        sched.set_host_load_fraction(args.hicache_load_cost);
    }
    sched
}
