//! Stage 2 of a KV decision: each row's cost by the formula of `cost.rs`, with the pressure
//! terms (blocks lost before the prefill runs, blocks the prefill displaces) and the lower
//! tiers' credit. Pure apart from the lower tiers' memoised lookups.
//!
//! `w_evict` is applied as `evict_weight * reuse * w_prefill`: the configured multiple of the
//! fleet's observed reuse fraction (`pressure.rs`), in prefill-block units, so a displaced
//! block costs its expected re-prefill (0 without pressure inputs).

use super::cost::{cost, wait, CostWeights, UnitInputs};
use super::read::UnitRow;
use super::tiers::TierRequest;

/// What the score stage needs besides the rows.
pub struct ScoreParams {
    pub weights: CostWeights,
    pub request_blocks: u32,
    /// Discount cached prefixes by the blocks expected to be evicted before they are used.
    pub eviction_risk: bool,
    /// The fleet reference's seconds per prefill block (turns a wait into seconds).
    pub reference_secs: Option<f64>,
}

impl ScoreParams {
    /// The configured weights with `evict` turned into a cost per displaced block.
    pub fn weights(configured: CostWeights, reuse: f64) -> CostWeights {
        CostWeights {
            evict: configured.evict * reuse * configured.prefill,
            ..configured
        }
    }
}

/// One scored row.
#[derive(Debug, Clone, Copy)]
pub struct Scored {
    pub row: UnitRow,
    pub inputs: UnitInputs,
    pub cost: f64,
}

impl Scored {
    /// The overlap used for tie-breaking.
    pub fn overlap(&self) -> u32 {
        self.inputs.overlap()
    }
}

/// Scores every row.
pub fn score(
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
    if let Some(t) = row.turnover {
        if let (true, Some(secs), Some(o)) = (p.eviction_risk, p.reference_secs, row.overlap) {
            // Locked: the prefix of a prefill in flight or of siblings in flight; recently
            // predicted blocks were just touched (head of the LRU order).
            let safe = if row.load.siblings > 0 {
                o.cached()
            } else {
                o.inflight.max(o.predicted)
            };
            let at_risk = o.cached().saturating_sub(safe);
            inputs.lost = t.lost(at_risk, wait(&p.weights, &inputs, row.speed) * secs);
        }
        inputs.displaced = t.displaced(row.capacity, inputs.new_prefill());
    }
    if let Some(t) = tiers {
        inputs.lower_tier = t.credit(row.unit, inputs.usable());
    }
    inputs
}
