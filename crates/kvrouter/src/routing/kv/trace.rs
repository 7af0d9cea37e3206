//! One debug line per KV decision (target `kvrouter::decision`): the rule that decided and,
//! for the cheapest units read (at most [`UNITS`]), every term of their cost. Built only when
//! that target is enabled at debug level (`RUST_LOG=kvrouter::decision=debug`).

use std::fmt::Write;
use std::sync::Arc;

use super::decide::Decision;
use super::score::Scored;
use crate::workers::Worker;

/// Units listed per line.
const UNITS: usize = 8;

/// Logs `decision` over `scored` (see module docs).
pub(super) fn decision(candidates: &[Arc<Worker>], scored: &[Scored], decision: &Decision) {
    if !tracing::enabled!(target: "kvrouter::decision", tracing::Level::DEBUG) {
        return;
    }
    let mut order: Vec<&Scored> = scored.iter().collect();
    order.sort_by(|a, b| a.cost.total_cmp(&b.cost));
    let mut units = String::new();
    for s in order.iter().take(UNITS) {
        let u = &s.inputs;
        let _ = write!(
            units,
            "[{} r{} cost={:.2} cached={} inflight={} active_blocks={} requests={} \
             lost={} displaced={} lower_tier={:.1} speed={:.2}/{:.2}] ",
            candidates[s.row.candidate].url,
            s.row.unit.rank,
            s.cost,
            u.cached,
            u.inflight_depth,
            u.active_blocks,
            u.active_requests,
            u.lost,
            u.displaced,
            u.lower_tier,
            s.row.speed.prefill,
            s.row.speed.decode,
        );
    }
    let chosen = &scored[decision.chosen];
    tracing::debug!(
        target: "kvrouter::decision",
        rule = ?decision.by,
        chosen = %candidates[chosen.row.candidate].url,
        rank = chosen.row.unit.rank,
        read = scored.len(),
        "{units}"
    );
}
