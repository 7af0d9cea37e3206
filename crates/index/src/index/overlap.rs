//! What `find_matches` returns: per unit, how deep the request's prefix is
//! confirmed, predicted and in flight there.

use super::unit::Unit;

/// Prefix depths (in blocks) of one request on one unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitOverlap {
    pub unit: Unit,
    /// Leading blocks resident per KV events.
    pub confirmed: u32,
    /// Leading blocks predicted by earlier routing decisions (live, unexpired).
    pub predicted: u32,
    /// Leading blocks whose prefill is in flight there.
    pub inflight: u32,
}

impl UnitOverlap {
    /// The overlap the request sees: the deeper of confirmed and predicted.
    pub fn cached(&self) -> u32 {
        self.confirmed.max(self.predicted)
    }

    /// Blocks of a `request_blocks`-long request that would need a new prefill
    /// here: neither cached nor already in flight.
    pub fn prefill_added(&self, request_blocks: u32) -> u32 {
        request_blocks.saturating_sub(self.cached().max(self.inflight))
    }
}

/// Per-unit overlaps of one request; units absent from `units` have depth 0
/// everywhere (their prefill would add every block).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overlaps {
    /// Full pages in the request.
    pub request_blocks: u32,
    /// Units with any non-zero depth, in no particular order.
    pub units: Vec<UnitOverlap>,
}

impl Overlaps {
    /// The entry of `unit`, if it has any depth.
    pub fn get(&self, unit: Unit) -> Option<&UnitOverlap> {
        self.units.iter().find(|o| o.unit == unit)
    }

    /// The cached depth (confirmed or predicted) on `unit`.
    pub fn cached(&self, unit: Unit) -> u32 {
        self.get(unit).map_or(0, UnitOverlap::cached)
    }

    /// Blocks a new prefill on `unit` would compute.
    pub fn prefill_added(&self, unit: Unit) -> u32 {
        self.get(unit).map_or(self.request_blocks, |o| {
            o.prefill_added(self.request_blocks)
        })
    }
}
