//! The waiting-queue order before each prefill admission (SGLang `SchedulePolicy.calc_priority`,
//! `managers/schedule_policy.py`): `fcfs` keeps arrival order; `lpm` sorts by the longest
//! prefix matched in the radix tree, with SGLang's in-batch prefix caching (a request whose
//! tree match is short but that shares its first tokens with an earlier waiting request is
//! moved to the back, so one of them warms the cache for the others) and its fallback to
//! `fcfs` when more than 128 requests wait.

use std::collections::HashSet;
use std::str::FromStr;

use super::Scheduler;

/// `--schedule-policy` (SGLang's names; SGLang's default is `fcfs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchedulePolicy {
    #[default]
    Fcfs,
    Lpm,
}

impl FromStr for SchedulePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fcfs" => Ok(SchedulePolicy::Fcfs),
            "lpm" => Ok(SchedulePolicy::Lpm),
            other => Err(format!(
                "--schedule-policy: unknown policy {other:?} (expected fcfs or lpm)"
            )),
        }
    }
}

/// `_determine_active_policy`: above this many waiting requests lpm behaves as fcfs.
pub const LPM_FALLBACK_QUEUE_LEN: usize = 128;
/// `IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD`: tree matches up to this length run the
/// in-batch check.
pub const IN_BATCH_CHECK_THRESHOLD: usize = 32;
/// `IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD`: an in-batch match this long defers the
/// request. SGLang's waiting-queue tree is a simulated radix tree with page size 1, so the
/// match is "the first 32 tokens equal those of an earlier checked request".
pub const IN_BATCH_DEPRIORITIZE_THRESHOLD: usize = 32;

impl Scheduler {
    /// Reorders `waiting` according to the policy (a no-op for fcfs).
    pub(super) fn order_waiting(&mut self) {
        if self.limits.policy != SchedulePolicy::Lpm
            || self.waiting.len() > LPM_FALLBACK_QUEUE_LEN
            || self.waiting.len() < 2
        {
            return;
        }
        // `_compute_prefix_matches`: match every waiting request against the tree (this
        // refreshes LRU times, as SGLang's match_prefix does), then the in-batch check.
        let mut seen: HashSet<&[u32]> = HashSet::new();
        let mut keys: Vec<(bool, usize)> = Vec::with_capacity(self.waiting.len());
        let cache = &mut self.cache;
        for s in self.waiting.iter() {
            let (_, matched) = cache.match_prefix_in(s.ns, &s.tokens);
            let mut deferred = false;
            if matched <= IN_BATCH_CHECK_THRESHOLD
                && s.tokens.len() >= IN_BATCH_DEPRIORITIZE_THRESHOLD
            {
                deferred = !seen.insert(&s.tokens[..IN_BATCH_DEPRIORITIZE_THRESHOLD]);
            }
            keys.push((deferred, matched));
        }
        // `_sort_by_longest_prefix`: stable sort by -match, deferred ones last.
        let mut order: Vec<usize> = (0..self.waiting.len()).collect();
        order.sort_by_key(|&i| {
            let (deferred, matched) = keys[i];
            (deferred, usize::MAX - matched)
        });
        if order.iter().enumerate().all(|(pos, &i)| pos == i) {
            return;
        }
        let mut old: Vec<Option<super::Seq>> = self.waiting.drain(..).map(Some).collect();
        for i in order {
            if let Some(s) = old[i].take() {
                self.waiting.push_back(s);
            }
        }
    }
}
