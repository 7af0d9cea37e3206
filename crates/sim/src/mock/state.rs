//! Process-wide state shared by the HTTP handlers: configuration, rank handles, the
//! current weight version, DP dispatch, this launch's marker and the test hooks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use crate::mock::config::MockArgs;
use crate::mock::engine::{LoadView, RankHandle};
use crate::mock::lora::Adapters;
use crate::mock::metrics::MockMetrics;

/// Everything a handler needs.
pub struct MockState {
    pub args: MockArgs,
    pub ranks: Vec<RankHandle>,
    pub metrics: Arc<MockMetrics>,
    /// `kv_events_config` as reported by `/server_info` (actual endpoints).
    pub kv_events_config: Option<String>,
    pub started: Instant,
    /// The HTTP port actually bound.
    pub port: u16,
    /// What tells this launch from another with the same flags.
    pub launch: Launch,
    weight_version: RwLock<Arc<str>>,
    next_rank: AtomicUsize,
    pub hooks: Hooks,
    /// PD role, rooms and tasks (`crate::mock::pd`).
    pub pd: Arc<crate::mock::pd::state::PdState>,
    /// `--lora-paths` parsed once (`mock::start` has checked them; the request paths read
    /// this instead of parsing the flags again).
    pub adapters: Adapters,
}

/// This launch's `/server_info.random_seed` and `startup_time`, the two values SGLang's body
/// has that differ between two launches with the same flags (a router compares them to tell
/// a relaunch behind the same URL).
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// `--seed` when given, else drawn for this launch as SGLang draws it
    /// (`arg_groups/serving_hook.py`: `random.randint(0, 1 << 30)` when unset).
    pub random_seed: u64,
    /// Measured startup phases in seconds (`observability/startup_time.py`
    /// `build_scheduler_startup_time`): the mock's stand-in for weight loading (tokenizer
    /// install), building the ranks' caches and schedulers, and start to listening.
    pub load_weight: f64,
    pub kv_cache_allocation: f64,
    pub scheduler_e2e: f64,
}

impl Launch {
    /// The marker of a launch with `seed` (`--seed`) and its measured phases.
    pub fn new(
        seed: Option<u64>,
        load_weight: Duration,
        kv_cache_allocation: Duration,
        scheduler_e2e: Duration,
    ) -> Launch {
        Launch {
            random_seed: seed.unwrap_or_else(|| rand::random_range(0..=1u64 << 30)),
            load_weight: load_weight.as_secs_f64(),
            kv_cache_allocation: kv_cache_allocation.as_secs_f64(),
            scheduler_e2e: scheduler_e2e.as_secs_f64(),
        }
    }
}

/// Test hooks (`/mock/*` endpoints and `--fail-weight-updates`).
#[derive(Default)]
pub struct Hooks {
    /// Remaining injected failures per path.
    fail_next: Mutex<HashMap<String, u32>>,
    /// When set, `/health` and `/health_generate` answer 503.
    pub unhealthy: AtomicBool,
}

impl Hooks {
    /// Arms `count` failures of `path`.
    pub fn fail_next(&self, path: &str, count: u32) {
        self.fail_next.lock().insert(path.to_string(), count);
    }

    /// Consumes one armed failure of `path`, if any.
    pub fn take_failure(&self, path: &str) -> bool {
        let mut map = self.fail_next.lock();
        match map.get_mut(path) {
            Some(n) if *n > 0 => {
                *n -= 1;
                if *n == 0 {
                    map.remove(path);
                }
                true
            }
            _ => false,
        }
    }
}

impl MockState {
    /// Builds the state around started ranks.
    pub fn new(
        args: MockArgs,
        ranks: Vec<RankHandle>,
        metrics: Arc<MockMetrics>,
        kv_events_config: Option<String>,
        port: u16,
        launch: Launch,
        pd: Arc<crate::mock::pd::state::PdState>,
    ) -> MockState {
        let version: Arc<str> = Arc::from(args.weight_version.as_str());
        let adapters = Adapters::from_args(&args).unwrap_or_default();
        MockState {
            args,
            ranks,
            metrics,
            kv_events_config,
            started: Instant::now(),
            port,
            launch,
            weight_version: RwLock::new(version),
            next_rank: AtomicUsize::new(0),
            hooks: Hooks::default(),
            adapters,
            pd,
        }
    }

    /// The current weight version.
    pub fn weight_version(&self) -> Arc<str> {
        self.weight_version.read().clone()
    }

    /// Replaces the weight version.
    pub fn set_weight_version(&self, v: Arc<str>) {
        *self.weight_version.write() = v;
    }

    /// The rank for a request without an explicit one.
    pub fn pick_rank(&self) -> usize {
        let n = self.ranks.len();
        if n == 1 {
            return 0;
        }
        if self.args.load_balance_method == "shortest_queue" {
            return (0..n)
                .min_by_key(|&r| {
                    let v = self.ranks[r].snapshot.lock();
                    v.snap.running + v.snap.waiting
                })
                .unwrap_or(0);
        }
        self.next_rank.fetch_add(1, Ordering::Relaxed) % n
    }

    /// Load views of every rank.
    pub fn views(&self) -> Vec<(u32, LoadView)> {
        self.ranks
            .iter()
            .map(|r| (r.rank, *r.snapshot.lock()))
            .collect()
    }

    /// True once the warm-up delay has elapsed and no hook marks the server unhealthy.
    pub fn healthy(&self) -> bool {
        self.started.elapsed().as_secs_f64() >= self.args.warmup_secs
            && !self.hooks.unhealthy.load(Ordering::Relaxed)
    }
}

/// The deterministic next weight version: increments a trailing number
/// (`"3"` -> `"4"`, `"v9"` -> `"v10"`), otherwise appends `-1` (`"default"` -> `"default-1"`).
pub fn next_version(v: &str) -> String {
    let digits = v.chars().rev().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return format!("{v}-1");
    }
    let (head, tail) = v.split_at(v.len() - digits);
    match tail.parse::<u128>() {
        Ok(n) => format!("{head}{}", n + 1),
        Err(_) => format!("{v}-1"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_version_rules() {
        assert_eq!(next_version("default"), "default-1");
        assert_eq!(next_version("default-1"), "default-2");
        assert_eq!(next_version("9"), "10");
        assert_eq!(next_version("v19"), "v20");
    }

    #[test]
    fn fail_next_counts_down() {
        let h = Hooks::default();
        h.fail_next("/x", 2);
        assert!(h.take_failure("/x"));
        assert!(h.take_failure("/x"));
        assert!(!h.take_failure("/x"));
    }
}
