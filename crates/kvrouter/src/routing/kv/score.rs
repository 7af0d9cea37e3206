//! Stage 2 of a KV decision: each row's cost by the formula of `cost.rs`, with the pressure
//! terms (blocks lost before the prefill runs, blocks the prefill displaces) and the lower
//! tiers' credit. Pure apart from the lower tiers' memoised lookups.
//!
//! Predicted blocks (`--predict-credit learned`, opt-in) count at the unit's learned
//! confirm ratio; an identical prompt in flight there (a sibling: its KV is locked and the
//! request joins it) keeps full credit. With `full` (the default) every prediction counts
//! whole. Either way the predicted blocks a row credits are never at eviction risk: they were
//! routed there within the TTL, the head of the LRU order (docs/kv-routing.md "Predictions").
//!
//! `w_evict` is applied as `evict_weight * reuse * w_prefill`: the configured multiple of the
//! fleet's observed reuse fraction (`pressure.rs`), in prefill-block units, so a displaced
//! block costs its expected re-prefill (0 without pressure inputs).

use kvrouter_index::UnitOverlap;

use super::cost::{cost, wait, CostWeights, UnitInputs};
use super::read::UnitRow;
use super::tiers::TierRequest;
use super::PredictCredit;

/// What the score stage needs besides the rows.
pub(super) struct ScoreParams {
    pub weights: CostWeights,
    pub request_blocks: u32,
    /// Discount cached prefixes by the blocks expected to be evicted before they are used.
    pub eviction_risk: bool,
    /// How much a predicted block counts.
    pub predict_credit: PredictCredit,
    /// The fleet reference's seconds per prefill block (turns a wait into seconds).
    pub reference_secs: Option<f64>,
}

impl ScoreParams {
    /// The configured weights with `evict` turned into a cost per displaced block.
    pub(super) fn weights(configured: CostWeights, reuse: f64) -> CostWeights {
        CostWeights {
            evict: configured.evict * reuse * configured.prefill,
            ..configured
        }
    }
}

/// One scored row.
#[derive(Debug, Clone, Copy)]
pub(super) struct Scored {
    pub row: UnitRow,
    pub inputs: UnitInputs,
    pub cost: f64,
}

impl Scored {
    /// The overlap used for tie-breaking.
    pub(super) fn overlap(&self) -> u32 {
        self.inputs.overlap()
    }
}

/// Scores every row.
pub(super) fn score(
    p: &ScoreParams,
    rows: &[UnitRow],
    mut tiers: Option<&mut TierRequest<'_>>,
) -> Vec<Scored> {
    rows.iter()
        .map(|row| {
            let inputs = unit_inputs(p, row, tiers.as_deref_mut());
            Scored {
                row: *row,
                inputs,
                cost: cost(&p.weights, &inputs, row.speed),
            }
        })
        .collect()
}

fn unit_inputs(p: &ScoreParams, row: &UnitRow, tiers: Option<&mut TierRequest<'_>>) -> UnitInputs {
    let mut inputs = row.inputs(p.request_blocks);
    // An identical prompt in flight there: its KV is locked and this request joins it.
    let sibling = row.load.siblings > 0;
    let learned = p.predict_credit == PredictCredit::Learned;
    if let (true, false, Some(o)) = (learned, sibling, row.overlap) {
        inputs.cached = learned_cached(&o, row.confirm_ratio);
    }
    if let Some(t) = row.turnover {
        if let (true, Some(secs), Some(o)) = (p.eviction_risk, p.reference_secs, row.overlap) {
            let at_risk = inputs
                .cached
                .saturating_sub(safe_depth(&o, sibling, inputs.cached));
            inputs.lost = t.lost(at_risk, wait(&p.weights, &inputs, row.speed) * secs);
        }
        inputs.displaced = t.displaced(row.capacity, inputs.new_prefill());
    }
    if let Some(t) = tiers {
        inputs.lower_tier = t.credit(row.unit, inputs.usable());
    }
    inputs
}

/// The leading blocks of the `cached` depth a row credits that no eviction reaches before the
/// request runs: all of them when siblings are in flight (their prefix is locked), else the
/// prefix of a prefill in flight (locked) and the predicted prefix (routed there within the
/// TTL: just used, the head of SGLang's LRU order), as far as the credit counts it. One rule
/// for both credits: `learned` took its predicted blocks as exposed as cached ones, which
/// discounted a prefix routed there a moment ago as if it were the oldest in the cache.
fn safe_depth(o: &UnitOverlap, sibling: bool, cached: u32) -> u32 {
    if sibling {
        o.cached()
    } else {
        o.inflight.max(o.predicted.min(cached))
    }
}

/// The cached depth `learned` credit sees: what events confirm or a prefill in flight holds,
/// plus the predicted blocks past it at the unit's confirm ratio (their expected count).
fn learned_cached(o: &UnitOverlap, confirm_ratio: f64) -> u32 {
    let held = o.confirmed.max(o.inflight);
    let bet = o.predicted.saturating_sub(held);
    held + (f64::from(bet) * confirm_ratio.clamp(0.0, 1.0)).round() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlap(confirmed: u32, predicted: u32, inflight: u32) -> UnitOverlap {
        UnitOverlap {
            unit: kvrouter_index::Unit::new(crate::workers::WorkerId(1), 0),
            confirmed,
            predicted,
            inflight,
        }
    }

    #[test]
    fn the_predicted_prefix_a_row_credits_is_safe_from_eviction_under_either_credit() {
        // confirmed 4, predicted 10, in flight 2.
        let o = overlap(4, 10, 2);
        // Full credit counts all 10, all routed there recently: none at risk.
        assert_eq!(safe_depth(&o, false, o.cached()), 10);
        // Learned credit at ratio 0.5 counts 7: those 7 are safe, not only the 2 in flight.
        let learned = learned_cached(&o, 0.5);
        assert_eq!(learned, 7);
        assert_eq!(safe_depth(&o, false, learned), 7);
        // Confirmed past the prediction: only the predicted prefix is recent.
        let deep = overlap(12, 5, 0);
        assert_eq!(safe_depth(&deep, false, deep.cached()), 5);
        // Siblings in flight lock the whole cached prefix.
        assert_eq!(safe_depth(&deep, true, deep.cached()), 12);
    }

    #[test]
    fn learned_credit_weighs_only_the_predicted_blocks_past_what_is_held() {
        // 4 confirmed, 2 more in flight, 10 predicted: 4 are a bet, at half credit.
        assert_eq!(learned_cached(&overlap(4, 10, 6), 0.5), 8);
        assert_eq!(learned_cached(&overlap(4, 10, 6), 1.0), 10);
        assert_eq!(learned_cached(&overlap(4, 10, 6), 0.0), 6);
        // Confirmed deeper than predicted: nothing to weigh.
        assert_eq!(learned_cached(&overlap(12, 10, 0), 0.3), 12);
        assert_eq!(learned_cached(&overlap(0, 0, 0), f64::NAN), 0);
    }
}
