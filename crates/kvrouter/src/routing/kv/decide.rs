//! Stage 3 of a KV decision: the rules, in order. Each rule sees the choice of the rules
//! before it and may set or override it:
//!
//! 1. [`Rule::Blind`]: a request the index cannot place (every unit's overlap within
//!    `--kv-blind-threshold` of the others) goes to its prompt's rendezvous unit among those
//!    within the balance bound (`blind.rs`), so that router replicas agree.
//! 2. [`Rule::Cheapest`]: the lowest cost, ties toward the deeper overlap, then random
//!    (`cost.rs` `pick`).
//! 3. [`Rule::Sticky`]: a sticky key's worker keeps the request with its best rank unless that
//!    costs more than `factor * best + slack` (docs/kv-routing.md).
//!
//! No side effects: what each rule did is returned for the book stage to count.

use super::blind::{self, BlindSettings, BlindUnit};
use super::cost::pick;
use super::score::Scored;
use crate::workers::Worker;
use std::sync::Arc;

/// The decision rules (see module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rule {
    Blind,
    Cheapest,
    Sticky,
}

/// The rules in the order they apply.
pub(super) const RULES: [Rule; 3] = [Rule::Blind, Rule::Cheapest, Rule::Sticky];

/// What the rules need besides the scores.
pub(super) struct DecideParams<'a> {
    pub candidates: &'a [Arc<Worker>],
    /// The prompt's key (its last block hash), if it has a full page.
    pub prompt: Option<u64>,
    pub request_blocks: u32,
    /// `None` when the blind rule is off (no predictions, or threshold 0).
    pub blind: Option<BlindSettings>,
    /// The sticky key's worker (position among the candidates).
    pub preferred: Option<usize>,
    pub sticky_overload_factor: f64,
    /// `sticky_slack_blocks * w_prefill`.
    pub sticky_slack: f64,
}

/// The rules' outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Decision {
    /// Index into the scored rows.
    pub chosen: usize,
    /// The rule whose choice stands.
    pub by: Rule,
    /// The blind rule placed the request: `Some(true)` on a unit other than its rendezvous
    /// first choice (spilled), `Some(false)` on that choice; `None` not blind.
    pub blind_spilled: Option<bool>,
    /// Sticky rule: `Some(true)` kept, `Some(false)` yielded, `None` no sticky key.
    pub sticky_kept: Option<bool>,
}

/// Applies [`RULES`] to `scored`; None when there is nothing to choose from.
pub(super) fn decide(p: &DecideParams<'_>, scored: &[Scored]) -> Option<Decision> {
    let mut d: Option<Decision> = None;
    for rule in RULES {
        match rule {
            Rule::Blind if d.is_none() => d = blind_rule(p, scored),
            Rule::Cheapest if d.is_none() => d = cheapest(scored),
            Rule::Sticky => {
                if let (Some(current), Some(kept)) = (d.as_mut(), p.preferred) {
                    sticky(p, scored, current, kept);
                }
            }
            _ => {}
        }
    }
    d
}

fn blind_rule(p: &DecideParams<'_>, scored: &[Scored]) -> Option<Decision> {
    let settings = p.blind?;
    let key = p.prompt?;
    let units: Vec<BlindUnit<'_>> = scored
        .iter()
        .map(|s| BlindUnit {
            url: &p.candidates[s.row.candidate].url,
            rank: s.row.unit.rank,
            overlap: s.overlap(),
            cost: s.cost,
        })
        .collect();
    if !blind::is_blind(settings.threshold, p.request_blocks, &units) {
        return None;
    }
    let placed = blind::place(key, &units, settings.balance_factor)?;
    Some(Decision {
        chosen: placed.unit,
        by: Rule::Blind,
        blind_spilled: Some(placed.spilled),
        sticky_kept: None,
    })
}

fn cheapest(scored: &[Scored]) -> Option<Decision> {
    let keys: Vec<(f64, u32)> = scored.iter().map(|s| (s.cost, s.overlap())).collect();
    let chosen = pick(&keys, &mut rand::rng())?;
    Some(Decision {
        chosen,
        by: Rule::Cheapest,
        blind_spilled: None,
        sticky_kept: None,
    })
}

/// Keeps the preferred worker's best rank unless it is overloaded.
fn sticky(p: &DecideParams<'_>, scored: &[Scored], d: &mut Decision, preferred: usize) {
    let best = scored.iter().map(|s| s.cost).fold(f64::INFINITY, f64::min);
    let own = scored
        .iter()
        .enumerate()
        .filter(|(_, s)| s.row.candidate == preferred)
        .min_by(|(_, a), (_, b)| {
            a.cost
                .total_cmp(&b.cost)
                .then(b.overlap().cmp(&a.overlap()))
        });
    match own {
        Some((i, own)) if own.cost <= best * p.sticky_overload_factor + p.sticky_slack => {
            d.chosen = i;
            d.by = Rule::Sticky;
            d.sticky_kept = Some(true);
        }
        _ => d.sticky_kept = Some(false),
    }
}
