//! The KV cost model: what sending one request to one (worker, rank) unit costs, in units of
//! the fleet reference's prefill time per block, and the pick among units (lowest cost, ties
//! toward the deeper overlap, then random).
//!
//! ```text
//! usable          = max(cached - lost, inflight_depth)              // prefix still there when it runs
//! new_prefill     = request_blocks - usable                         // blocks this request would prefill
//! wait = s_decode  * (w_decode * active_blocks                      // context of requests in flight
//!                   + w_queue  * active_requests)
//! computed        = new_prefill - lower_tier                        // pages loaded back from host / disk
//! cost = wait
//!      + s_prefill * w_prefill * computed                          // its own prefill
//!      + w_evict * displaced                                        // others' prefixes it evicts
//! ```
//!
//! `lower_tier` is the credit of the pages after `usable` that the unit's host and disk tiers
//! hold (`tiers.rs`: `host_credit * host_pages + disk_credit * disk_pages`, 0 without tiers).
//!
//! `s_prefill`, `s_decode` are the unit's learned speed factors (`rates.rs`: its seconds per
//! block / per token over the fleet reference's, 1 unless clearly different), so cost times the
//! reference's seconds per prefill block is seconds. `lost` (cached blocks expected to be
//! evicted during `wait`) and `displaced` (blocks this prefill pushes out of a full cache) come
//! from the unit's KV pressure (`pressure.rs`); `w_evict` is the chance such a block is wanted
//! again. With every factor 1 (a homogeneous fleet) and no pressure this is the block-count model
//! exactly. A stall term (this request's new prefill times the requests in flight on the unit,
//! the decode stall it imposes on them) was measured and removed (issue 27: docs/kv-routing.md,
//! "Knobs and the workloads that need them"), as was a softmax temperature over the costs.
//!
//! Others' prefill in flight on the unit is load like the rest of their context (in
//! `active_blocks` at `w_decode` and `active_requests`), not a separate term at the prefill
//! weight. Such a term (the prefill blocks in flight ahead of the request, at `w_prefill`) was
//! measured and removed (issue 28): it is this request's exact first-token wait under FCFS,
//! but it sends a request away from the unit that holds its prefix whenever that unit's queue
//! is deeper by more than the prefix, so a popular prefix is prefilled again elsewhere, evicts
//! there, and the fleet does more prefill in total. On the pressure suite's trace it cost 1-3
//! points of hit rate and raised TTFT p50 and p99 against `--no-predict` (whose bookings made
//! no in-flight marks, hence no such term); without it predictions match `--no-predict` there
//! and keep their lead on sibling bursts (docs/kv-routing.md, "Predictions: measured and
//! weighed").
//!
//! Unlike Dynamo's `w*prefill_blocks + decode_blocks` (where a shared system prompt is counted
//! once in the decode term, so every request piles onto its holder: Dynamo #737), the load
//! terms here count every in-flight request's whole context, so a unit's cost grows with each
//! request sent to it even when they share blocks; siblings still share one prefill because
//! the blocks in flight for their prompt count as usable (nothing new to prefill).

use rand::Rng;

pub use super::rates::Speed;

/// Weights of the cost terms (see module docs); defaults in `config::kv`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostWeights {
    pub prefill: f64,
    pub decode: f64,
    pub queue: f64,
    /// Per block the request's prefill evicts from a full cache (0 = off): the chance that
    /// block is needed again, i.e. its future re-prefill (`pressure.rs`).
    pub evict: f64,
}

/// The inputs of one unit's cost for one request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UnitInputs {
    /// Full pages in the request.
    pub request_blocks: u32,
    /// Leading request blocks cached there (deeper of confirmed and predicted).
    pub cached: u32,
    /// Leading request blocks whose prefill is in flight there.
    pub inflight_depth: u32,
    /// Sum of the request blocks of the requests in flight on the unit whose prompt differs
    /// from this one (identical siblings share KV and a prefill; they cost only a slot).
    pub active_blocks: u64,
    /// Requests in flight on the unit.
    pub active_requests: u64,
    /// Of `cached`, blocks expected to be evicted before this request's prefill starts.
    pub lost: u32,
    /// Blocks this request's new prefill would evict from the unit's full cache.
    pub displaced: u32,
    /// Prefill blocks saved by pages of lower cache tiers after the usable prefix (their
    /// credited count, `tiers.rs`; at most `new_prefill`).
    pub lower_tier: f64,
}

impl UnitInputs {
    /// Leading blocks still there when the request runs (cached minus lost, or in flight).
    pub fn usable(&self) -> u32 {
        self.cached
            .saturating_sub(self.lost)
            .max(self.inflight_depth)
    }

    /// Blocks this request would add to the unit's prefill work (lower-tier pages included:
    /// loading them back takes GPU pages too).
    pub fn new_prefill(&self) -> u32 {
        self.request_blocks.saturating_sub(self.usable())
    }

    /// [`UnitInputs::new_prefill`] minus the lower tiers' credit: the prefill it computes.
    pub fn computed_prefill(&self) -> f64 {
        let new = f64::from(self.new_prefill());
        (new - self.lower_tier.clamp(0.0, new)).max(0.0)
    }

    /// The overlap used for tie-breaking.
    pub fn overlap(&self) -> u32 {
        self.cached.max(self.inflight_depth)
    }
}

/// The work ahead of the request on this unit at its `speed` (the `wait` of the module docs).
pub fn wait(w: &CostWeights, u: &UnitInputs, speed: Speed) -> f64 {
    let busy = u.active_requests as f64;
    let decode = w.decode * u.active_blocks as f64 + w.queue * busy;
    speed.decode * decode
}

/// Cost of sending the request to this unit (lower is better) at the unit's `speed`.
pub fn cost(w: &CostWeights, u: &UnitInputs, speed: Speed) -> f64 {
    let new = u.computed_prefill();
    wait(w, u, speed) + speed.prefill * w.prefill * new + w.evict * f64::from(u.displaced)
}

/// Index of the chosen unit among `scored` (`(cost, overlap)` per unit), or None if empty.
/// The lowest cost, ties toward the deeper overlap, then uniformly random.
pub fn pick(scored: &[(f64, u32)], rng: &mut impl Rng) -> Option<usize> {
    if scored.is_empty() {
        return None;
    }
    let min = scored.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
    const EPS: f64 = 1e-9;
    let best_overlap = scored
        .iter()
        .filter(|s| s.0 <= min + EPS)
        .map(|s| s.1)
        .max()?;
    // Reservoir-sample uniformly among the units tied on both keys.
    let mut chosen = None;
    let mut seen = 0u32;
    for (i, s) in scored.iter().enumerate() {
        if s.0 <= min + EPS && s.1 == best_overlap {
            seen += 1;
            if rng.random_range(0..seen) == 0 {
                chosen = Some(i);
            }
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: CostWeights = CostWeights {
        prefill: 1.0,
        decode: 1.0 / 8.0,
        queue: 0.5,
        evict: 0.0,
    };
    const S: Speed = Speed::UNIT;

    /// 64-block request; `siblings` in flight with the same prompt, `others` (64 blocks each) not.
    fn inputs(cached: u32, inflight_depth: u32, siblings: u64, others: u64) -> UnitInputs {
        UnitInputs {
            request_blocks: 64,
            cached,
            inflight_depth,
            active_blocks: others * 64,
            active_requests: siblings + others,
            lost: 0,
            displaced: 0,
            lower_tier: 0.0,
        }
    }

    #[test]
    fn terms() {
        let u = inputs(16, 0, 0, 2);
        assert_eq!(u.new_prefill(), 48);
        assert_eq!(cost(&W, &u, S), 48.0 + 16.0 + 1.0);
    }

    #[test]
    fn a_sibling_joins_the_inflight_prefill_instead_of_starting_another() {
        // First sibling is prefilling all 64 blocks on A; B is idle and cold.
        let a = inputs(64, 64, 1, 0);
        let b = inputs(0, 0, 0, 0);
        assert!(cost(&W, &a, S) < cost(&W, &b, S));
    }

    #[test]
    fn the_prefix_holder_keeps_a_request_while_another_prefill_runs_there() {
        // A holds 48 of the 64 blocks and prefills another request's 64 cold blocks; B is
        // idle and cold. A's in-flight prefill is load (its context at w_decode, one slot),
        // not 64 blocks of wait: re-prefilling 48 blocks on B would cost the fleet more.
        let a = inputs(48, 0, 0, 1);
        let b = inputs(0, 0, 0, 0);
        assert_eq!(wait(&W, &a, S), 64.0 / 8.0 + 0.5);
        assert!(cost(&W, &a, S) < cost(&W, &b, S));
    }

    #[test]
    fn thirty_two_siblings_stay_but_a_new_group_goes_elsewhere() {
        let a31 = inputs(64, 64, 31, 0);
        let b = inputs(16, 0, 0, 0); // cold except the shared system prefix
        assert!(cost(&W, &a31, S) < cost(&W, &b, S));
        // A new group sharing only the system prefix with A's busy group: B wins.
        let a_new_group = inputs(16, 16, 0, 32);
        assert!(cost(&W, &a_new_group, S) > cost(&W, &b, S));
    }

    #[test]
    fn shared_system_prompt_does_not_hot_spot() {
        // Every session shares a 16-block prefix cached on A only; A already runs 4 sessions.
        let a = inputs(16, 0, 0, 4);
        let b = inputs(0, 0, 0, 0);
        assert!(cost(&W, &a, S) > cost(&W, &b, S));
        // With no load, the cached prefix wins.
        assert!(cost(&W, &inputs(16, 0, 0, 0), S) < cost(&W, &b, S));
    }

    #[test]
    fn unit_speed_keeps_the_order_and_a_slow_unit_pays_its_factor() {
        // Equal factors scale every cost alike: the same order as the block model.
        let (a, b) = (inputs(16, 0, 0, 2), inputs(0, 0, 0, 1));
        let two = Speed {
            prefill: 2.0,
            decode: 2.0,
        };
        assert_eq!(
            cost(&W, &a, S) < cost(&W, &b, S),
            cost(&W, &a, two) < cost(&W, &b, two)
        );
        assert_eq!(cost(&W, &a, two), 2.0 * cost(&W, &a, S));
        // A 2x slower idle cold unit loses to a busy holder it would beat at equal speed.
        let holder = inputs(48, 0, 0, 6);
        let cold = inputs(0, 0, 0, 0);
        assert!(cost(&W, &cold, S) < cost(&W, &holder, S));
        let slow = Speed {
            prefill: 2.0,
            decode: 1.0,
        };
        assert!(cost(&W, &cold, slow) > cost(&W, &holder, S));
    }

    #[test]
    fn blocks_lost_before_the_prefill_are_prefilled_again() {
        let u = inputs(48, 0, 0, 0);
        let lossy = UnitInputs { lost: 16, ..u };
        assert_eq!(lossy.new_prefill(), 32);
        assert_eq!(cost(&W, &lossy, S) - cost(&W, &u, S), 16.0);
        // Blocks whose prefill is in flight are locked: nothing of them is lost.
        let locked = UnitInputs {
            inflight_depth: 48,
            ..lossy
        };
        assert_eq!(locked.new_prefill(), 16);
    }

    #[test]
    fn displacing_a_full_cache_costs_the_evict_weight_per_block() {
        let w = CostWeights { evict: 0.5, ..W };
        let u = UnitInputs {
            displaced: 40,
            ..inputs(16, 0, 0, 0)
        };
        assert_eq!(cost(&w, &u, S) - cost(&W, &u, S), 20.0);
        assert_eq!(wait(&w, &u, S), wait(&W, &u, S));
    }

    #[test]
    fn lower_tier_pages_save_their_credit_of_a_prefill() {
        // 64 blocks, none on the GPU, 32 in host memory at 0.75: 24 blocks saved.
        let cold = inputs(0, 0, 0, 0);
        let host = UnitInputs {
            lower_tier: 24.0,
            ..cold
        };
        assert_eq!(host.computed_prefill(), 40.0);
        assert_eq!(host.new_prefill(), 64, "loading back still takes GPU pages");
        assert_eq!(cost(&W, &cold, S) - cost(&W, &host, S), 24.0);
        // A GPU holder of those 32 blocks beats the host holder.
        let gpu = inputs(32, 0, 0, 0);
        assert!(cost(&W, &gpu, S) < cost(&W, &host, S));
        // The credit never makes the prefill negative.
        let over = UnitInputs {
            lower_tier: 100.0,
            ..gpu
        };
        assert_eq!(over.computed_prefill(), 0.0);
    }

    #[test]
    fn pick_lowest_then_deeper_overlap_then_random() {
        let mut rng = rand::rng();
        assert_eq!(pick(&[(3.0, 0), (1.0, 0), (2.0, 9)], &mut rng), Some(1));
        assert_eq!(pick(&[(1.0, 0), (1.0, 5), (2.0, 9)], &mut rng), Some(1));
        let mut hits = [0u32; 2];
        for _ in 0..400 {
            hits[pick(&[(1.0, 3), (1.0, 3)], &mut rng).unwrap()] += 1;
        }
        assert!(hits[0] > 100 && hits[1] > 100, "{hits:?}");
        assert_eq!(pick(&[], &mut rng), None);
    }
}
