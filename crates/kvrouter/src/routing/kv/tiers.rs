//! Lower KV cache tiers: SGLang HiCache's host memory (`CPU_PINNED`, L2) and storage (`DISK`
//! L3, `EXTERNAL` L4), each kept in its own [`KvIndex`] beside the GPU index, and the credit a
//! request's prefix found there earns in the cost model (docs/kv-routing.md "Cache tiers").
//!
//! A unit's effective cached prefix is
//!
//! ```text
//! usable + host_credit * host_extra + disk_credit * disk_extra
//! ```
//!
//! `usable` is its GPU prefix (`cost.rs`), `host_extra` the pages the host tier holds
//! contiguously after it, `disk_extra` the pages the disk tier holds contiguously after those:
//! the engine loads such pages back instead of recomputing them. Defaults 0.75 and 0.25 of a
//! GPU hit, Dynamo's weights for host and disk overlap (`host_w`, `disk_w` in its cost,
//! shared/reference/dynamo.md section 5.2). A credit of 0 leaves that tier unindexed (its
//! events are dropped, as before tiers existed).

use std::sync::Arc;

use kvrouter_index::{KvIndex, Overlaps, SeqHash, Tier, Unit};

use crate::workers::{Rank, WorkerId};

/// What a page found only in a lower tier is worth, as a fraction of a GPU hit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TierCredits {
    /// Host memory (`CPU_PINNED`).
    pub host: f64,
    /// Storage (`DISK`, `EXTERNAL`).
    pub disk: f64,
}

impl Default for TierCredits {
    fn default() -> Self {
        TierCredits::DEFAULT
    }
}

impl TierCredits {
    /// Dynamo's host and disk weights (see module docs).
    pub const DEFAULT: TierCredits = TierCredits {
        host: 0.75,
        disk: 0.25,
    };
    /// Lower tiers ignored.
    pub const OFF: TierCredits = TierCredits {
        host: 0.0,
        disk: 0.0,
    };

    /// Parses `--kv-tier-credit`: `host=F,disk=F` (either part may be left out and keeps its
    /// default; each F a number in 0..=1), or `off` (both 0).
    pub fn parse(s: &str) -> Result<TierCredits, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("off") || s.eq_ignore_ascii_case("none") {
            return Ok(TierCredits::OFF);
        }
        let mut out = TierCredits::DEFAULT;
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((name, value)) = part.split_once('=') else {
                return Err(format!(
                    "expected TIER=CREDIT pairs like host=0.75,disk=0.25 (got {part:?})"
                ));
            };
            let credit: f64 = value
                .trim()
                .parse()
                .map_err(|_| format!("credit of {:?} is not a number ({value:?})", name.trim()))?;
            if !(0.0..=1.0).contains(&credit) {
                return Err(format!(
                    "credit of {:?} must be between 0 and 1 (got {credit})",
                    name.trim()
                ));
            }
            match name.trim().to_ascii_lowercase().as_str() {
                "host" | "cpu" => out.host = credit,
                "disk" | "storage" => out.disk = credit,
                other => return Err(format!("unknown tier {other:?} (tiers: host, disk)")),
            }
        }
        Ok(out)
    }

    /// The credit of `tier` (1 for the GPU).
    pub fn of(&self, tier: Tier) -> f64 {
        match tier {
            Tier::Gpu => 1.0,
            Tier::Host => self.host,
            Tier::Disk => self.disk,
        }
    }
}

/// The pages a unit holds in the lower tiers right after its usable GPU prefix.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierExtra {
    /// Host-tier pages contiguous after the GPU prefix.
    pub host: u32,
    /// Disk-tier pages contiguous after those.
    pub disk: u32,
}

impl TierExtra {
    /// Their credit in blocks of prefill saved (the module docs' formula minus `usable`).
    pub fn credit(&self, c: &TierCredits) -> f64 {
        c.host * f64::from(self.host) + c.disk * f64::from(self.disk)
    }
}

/// The tiers below the GPU: one [`KvIndex`] per tier, same page size, same default entry cap
/// per unit ([`kvrouter_index::DEFAULT_UNIT_CAP_BLOCKS`]: the router does not read the size
/// of the engine's host pool or storage). Share it as `Arc<LowerTiers>`.
pub struct LowerTiers {
    credits: TierCredits,
    host: KvIndex,
    disk: KvIndex,
}

impl LowerTiers {
    pub fn new(page_size: u32, credits: TierCredits) -> Arc<LowerTiers> {
        Arc::new(LowerTiers {
            credits,
            host: KvIndex::new(page_size),
            disk: KvIndex::new(page_size),
        })
    }

    pub fn credits(&self) -> TierCredits {
        self.credits
    }

    /// The index of a lower `tier`; None for the GPU and for a tier credited 0 (not indexed).
    pub fn index(&self, tier: Tier) -> Option<&KvIndex> {
        let index = match tier {
            Tier::Gpu => return None,
            Tier::Host => &self.host,
            Tier::Disk => &self.disk,
        };
        (self.credits.of(tier) > 0.0).then_some(index)
    }

    fn all(&self) -> [&KvIndex; 2] {
        [&self.host, &self.disk]
    }

    /// Drops `(worker, rank)`'s blocks in every lower tier (restart, flush, gap).
    pub fn clear_rank(&self, worker: WorkerId, rank: Rank) {
        for index in self.all() {
            index.clear_rank(worker, rank);
        }
    }

    /// The worker left the fleet: it disappears from every lower tier.
    pub fn remove_worker(&self, worker: WorkerId) {
        for index in self.all() {
            index.remove_worker(worker);
        }
    }

    /// Resident blocks of `(worker, rank)` in `tier` (0 for the GPU: ask the GPU index).
    pub fn unit_blocks(&self, tier: Tier, worker: WorkerId, rank: Rank) -> usize {
        self.index(tier)
            .map_or(0, |index| index.unit_blocks(worker, rank))
    }

    /// Resident (block, unit) entries of `tier` (0 for the GPU).
    pub fn resident_blocks(&self, tier: Tier) -> usize {
        self.index(tier).map_or(0, KvIndex::resident_blocks)
    }

    /// Heap bytes of both lower-tier indexes.
    pub fn memory_bytes(&self) -> usize {
        self.all().iter().map(|i| i.memory_bytes()).sum()
    }

    /// The lower tiers' view of one request's sequence hashes; None when neither tier holds a
    /// block (then scoring costs nothing extra).
    pub fn request<'a>(&'a self, seqs: &'a [SeqHash]) -> Option<TierRequest<'a>> {
        let any = [Tier::Host, Tier::Disk]
            .into_iter()
            .any(|t| self.resident_blocks(t) > 0);
        (any && !seqs.is_empty()).then(|| TierRequest {
            tiers: self,
            seqs,
            memo: Vec::new(),
        })
    }
}

/// One request's lookups in the lower tiers: one `find_matches` of the whole request per
/// tier, memoised (a unit's pages from page `start` on are its depth there past `start`).
pub struct TierRequest<'a> {
    tiers: &'a LowerTiers,
    seqs: &'a [SeqHash],
    memo: Vec<(Tier, Overlaps)>,
}

impl TierRequest<'_> {
    /// `unit`'s lower-tier pages after its first `usable` pages (see [`TierExtra`]).
    pub fn extra(&mut self, unit: Unit, usable: u32) -> TierExtra {
        let host = self.depth(Tier::Host, unit, usable);
        let disk = self.depth(Tier::Disk, unit, usable.saturating_add(host));
        TierExtra { host, disk }
    }

    /// `unit`'s lower-tier credit in blocks (see [`TierExtra::credit`]).
    pub fn credit(&mut self, unit: Unit, usable: u32) -> f64 {
        let credits = self.tiers.credits;
        self.extra(unit, usable).credit(&credits)
    }

    /// Units holding the request's first page in a lower tier (they may win on credit alone).
    pub fn holders(&mut self) -> Vec<Unit> {
        let mut out = Vec::new();
        for tier in [Tier::Host, Tier::Disk] {
            if let Some(at) = self.lookup(tier) {
                out.extend(self.memo[at].1.units.iter().map(|o| o.unit));
            }
        }
        out
    }

    /// Pages of the request from page `start` on that `tier` holds on `unit`, contiguously:
    /// its depth in the tier past `start` (a tier's chains start at the request's first page,
    /// as stores under a parent the tier does not hold are dropped).
    fn depth(&mut self, tier: Tier, unit: Unit, start: u32) -> u32 {
        if start as usize >= self.seqs.len() {
            return 0;
        }
        self.lookup(tier).map_or(0, |at| {
            self.memo[at]
                .1
                .get(unit)
                .map_or(0, |o| o.confirmed.saturating_sub(start))
        })
    }

    /// The memo entry of the tier's matches (None: nothing to match).
    fn lookup(&mut self, tier: Tier) -> Option<usize> {
        let index = self.tiers.index(tier)?;
        if self.seqs.is_empty() || index.resident_blocks() == 0 {
            return None;
        }
        let found = self.memo.iter().position(|(t, _)| *t == tier);
        Some(found.unwrap_or_else(|| {
            self.memo.push((tier, index.find_matches(self.seqs)));
            self.memo.len() - 1
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvrouter_index::{seq_hashes, KvEvent, Placement};

    const PAGE: u32 = 4;

    fn store(index: &KvIndex, worker: u32, tokens: &[u32], first_hash: u64) {
        let pages = tokens.len() / PAGE as usize;
        let parent = None;
        index
            .apply_in(
                WorkerId(worker),
                0,
                Placement::GPU,
                &KvEvent::Stored {
                    parent,
                    block_hashes: (0..pages as u64).map(|i| first_hash + i).collect(),
                    token_ids: tokens.to_vec(),
                    block_size: PAGE,
                },
            )
            .unwrap();
    }

    fn unit(worker: u32) -> Unit {
        Unit::new(WorkerId(worker), 0)
    }

    #[test]
    fn credits_parse_validate_and_default() {
        assert_eq!(TierCredits::default(), TierCredits::DEFAULT);
        assert_eq!(
            TierCredits::parse("host=0.75,disk=0.25").unwrap(),
            TierCredits::DEFAULT
        );
        assert_eq!(
            TierCredits::parse("host=0.5").unwrap(),
            TierCredits {
                host: 0.5,
                disk: 0.25
            }
        );
        assert_eq!(
            TierCredits::parse(" disk = 0 , host=1 ").unwrap(),
            TierCredits {
                host: 1.0,
                disk: 0.0
            }
        );
        assert_eq!(TierCredits::parse("off").unwrap(), TierCredits::OFF);
        assert_eq!(
            TierCredits::parse("host=0,disk=0").unwrap(),
            TierCredits::OFF
        );
        for bad in [
            "host=1.5",
            "host=-0.1",
            "host=x",
            "gpu=0.5",
            "host",
            "host=NaN",
        ] {
            assert!(TierCredits::parse(bad).is_err(), "{bad}");
        }
        assert!(TierCredits::parse("host=2")
            .unwrap_err()
            .contains("between 0 and 1"));
    }

    #[test]
    fn credit_is_host_then_disk_pages_at_their_fractions() {
        let e = TierExtra { host: 4, disk: 8 };
        assert_eq!(e.credit(&TierCredits::DEFAULT), 3.0 + 2.0);
        assert_eq!(e.credit(&TierCredits::OFF), 0.0);
        assert_eq!(TierCredits::DEFAULT.of(Tier::Gpu), 1.0);
    }

    #[test]
    fn extra_pages_count_only_contiguously_after_the_gpu_prefix() {
        let tiers = LowerTiers::new(PAGE, TierCredits::DEFAULT);
        let tokens: Vec<u32> = (0..32).collect(); // 8 pages
        let seqs = seq_hashes(&tokens, PAGE as usize);
        // Worker 1: host holds pages 0..6, disk 0..8.
        store(tiers.index(Tier::Host).unwrap(), 1, &tokens[..24], 100);
        store(tiers.index(Tier::Disk).unwrap(), 1, &tokens, 100);
        let mut r = tiers.request(&seqs).unwrap();
        // No GPU prefix: 6 host pages, then 2 disk pages.
        assert_eq!(r.extra(unit(1), 0), TierExtra { host: 6, disk: 2 });
        assert_eq!(r.credit(unit(1), 0), 6.0 * 0.75 + 2.0 * 0.25);
        // GPU holds 2 pages: host adds 4, disk 2.
        assert_eq!(r.extra(unit(1), 2), TierExtra { host: 4, disk: 2 });
        // GPU holds all: nothing extra.
        assert_eq!(r.extra(unit(1), 8), TierExtra::default());
        // Another unit holds nothing anywhere.
        assert_eq!(r.extra(unit(2), 0), TierExtra::default());
    }

    #[test]
    fn a_host_run_that_does_not_reach_the_gpu_prefix_end_is_not_contiguous() {
        let tiers = LowerTiers::new(PAGE, TierCredits::DEFAULT);
        let tokens: Vec<u32> = (0..32).collect();
        let seqs = seq_hashes(&tokens, PAGE as usize);
        // Host holds pages 0..2 only; the GPU prefix is 4 pages: host adds nothing.
        store(tiers.index(Tier::Host).unwrap(), 1, &tokens[..8], 100);
        let mut r = tiers.request(&seqs).unwrap();
        assert_eq!(r.extra(unit(1), 4), TierExtra::default());
        assert_eq!(r.extra(unit(1), 1), TierExtra { host: 1, disk: 0 });
    }

    #[test]
    fn an_empty_or_zero_credit_tier_is_not_looked_up() {
        let tiers = LowerTiers::new(PAGE, TierCredits::DEFAULT);
        let seqs = seq_hashes(&(0..16).collect::<Vec<u32>>(), PAGE as usize);
        assert!(tiers.request(&seqs).is_none());
        let off = LowerTiers::new(
            PAGE,
            TierCredits {
                host: 0.0,
                disk: 0.5,
            },
        );
        assert!(off.index(Tier::Host).is_none());
        assert!(off.index(Tier::Disk).is_some());
        assert!(off.index(Tier::Gpu).is_none());
        assert_eq!(off.resident_blocks(Tier::Host), 0);
    }

    /// The policy over three single-rank workers, predict-on-route off (choices independent).
    fn policy_with(tiers: &Arc<LowerTiers>) -> (super::super::KvPolicy, Arc<KvIndex>) {
        use super::super::{KvPolicy, KvPolicySettings, UnitLoads};
        let settings = KvPolicySettings::from_config(&crate::routing::kv::KvConfig {
            predict: false,
            ..crate::routing::kv::KvConfig::default()
        });
        let gpu = Arc::new(KvIndex::new(PAGE));
        let p = KvPolicy::new(gpu.clone(), Arc::new(UnitLoads::default()), settings)
            .with_tiers(tiers.clone());
        (p, gpu)
    }

    fn choose(p: &super::super::KvPolicy, tokens: &[u32]) -> u32 {
        use crate::routing::{Endpoint, Policy, RoutingInput};
        use crate::workers::{Worker, WorkerInfo};
        let workers: Vec<Arc<Worker>> = (1..=3)
            .map(|id| {
                let info = WorkerInfo {
                    page_size: PAGE,
                    ..WorkerInfo::default()
                };
                Arc::new(Worker::new(
                    WorkerId(id),
                    &format!("http://10.0.0.{id}:30000"),
                    info,
                ))
            })
            .collect();
        let body = serde_json::to_vec(&serde_json::json!({ "input_ids": tokens })).unwrap();
        let input = RoutingInput::parse(Endpoint::Generate, &body).unwrap();
        let c = p.select(&input, &workers).unwrap();
        workers[c.index].id.0
    }

    #[test]
    fn the_policy_prefers_a_host_holder_to_none_and_a_gpu_holder_to_a_host_holder() {
        let tokens: Vec<u32> = (0..64).map(|i| 7_000 + i).collect(); // 16 pages
        let tiers = LowerTiers::new(PAGE, TierCredits::DEFAULT);
        let (p, gpu) = policy_with(&tiers);
        // Worker 2 holds the whole prefix in host memory only: 16 - 12 = 4 < 16.
        store(tiers.index(Tier::Host).unwrap(), 2, &tokens, 100);
        for _ in 0..8 {
            assert_eq!(choose(&p, &tokens), 2);
        }
        // Worker 3 holds it on the GPU: 0 < 4.
        store(&gpu, 3, &tokens, 100);
        assert_eq!(choose(&p, &tokens), 3);
        // Worker 1: 4 GPU pages (cost 12) against worker 2's 16 host pages (cost 4), once
        // worker 3 is gone from the GPU.
        gpu.apply(WorkerId(3), 0, &KvEvent::Cleared).unwrap();
        store(&gpu, 1, &tokens[..16], 200);
        assert_eq!(choose(&p, &tokens), 2);
        // Credit off: worker 1's GPU pages win.
        let off = LowerTiers::new(PAGE, TierCredits::OFF);
        let (p_off, gpu_off) = policy_with(&off);
        store(&gpu_off, 1, &tokens[..16], 200);
        assert_eq!(choose(&p_off, &tokens), 1);
    }

    #[test]
    fn a_gpu_prefix_continued_in_host_memory_is_credited_after_it() {
        let tokens: Vec<u32> = (0..64).map(|i| 9_000 + i).collect();
        let tiers = LowerTiers::new(PAGE, TierCredits::DEFAULT);
        let (p, gpu) = policy_with(&tiers);
        // Worker 1: 8 GPU pages (cost 8). Worker 2: 2 GPU pages and all 16 in host memory
        // (14 extra at 0.75: cost 14 - 10.5 = 3.5).
        store(&gpu, 1, &tokens[..32], 100);
        store(&gpu, 2, &tokens[..8], 300);
        store(tiers.index(Tier::Host).unwrap(), 2, &tokens, 300);
        assert_eq!(choose(&p, &tokens), 2);
    }
}
