//! Stage 2 of a KV decision: each row's cost by the formula of `cost.rs`, with the pressure
//! terms (blocks lost before the prefill runs, blocks the prefill displaces) and the lower
//! tiers' credit. Pure apart from the lower tiers' memoised lookups.
//!
//! Predicted blocks (`--predict-credit learned`, opt-in) count at the unit's learned
//! confirm ratio and are as exposed to eviction as cached ones; an identical prompt in flight
//! there (a sibling: its KV is locked and the request joins it) keeps full credit. With `full`
//! (the default) every prediction counts whole and is never at risk (docs/kv-routing.md
//! "Predictions").
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
            // Locked: the prefix of a prefill in flight or of siblings in flight. `full`
            // credit also takes recently predicted blocks as just used (head of the LRU order).
            let safe = match (sibling, learned) {
                (true, _) => o.cached(),
                (false, true) => o.inflight,
                (false, false) => o.inflight.max(o.predicted),
            };
            let at_risk = inputs.cached.saturating_sub(safe);
            inputs.lost = t.lost(at_risk, wait(&p.weights, &inputs, row.speed) * secs);
        }
        inputs.displaced = t.displaced(row.capacity, inputs.new_prefill());
    }
    if let Some(t) = tiers {
        inputs.lower_tier = t.credit(row.unit, inputs.usable());
    }
    inputs
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
