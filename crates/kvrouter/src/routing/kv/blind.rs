//! Placement of *blind* requests: rendezvous hashing with bounded loads (Mirrokni, Thorup,
//! Zadimoghaddam 2018; HAProxy's `hash-balance-factor`).
//!
//! A request is blind when the index cannot tell the candidate units apart: the spread of
//! their overlaps (deepest minus shallowest, confirmed / predicted / in flight) is below
//! `--kv-blind-threshold` of its blocks. For it, replicas that see the same prompt and a
//! similar load must pick the same unit without talking to each other, so the pick is not the
//! cost model's (whose ties each replica breaks at random) but: rank the units by a
//! highest-random-weight hash of (prompt key, unit URL, rank) and take the first whose cost is
//! at most `--kv-balance-factor` times the cheapest unit's: for a blind request the costs differ
//! only by load (and by less than the threshold in cached blocks), so this is consistent
//! hashing with loads bounded relative to the least-loaded unit, and a unit the cost model
//! would find too busy for the request's siblings is never chosen.
//! The prompt key is the last full block's sequence hash (it identifies the whole prompt, so
//! siblings agree). Design and measurements: docs/kv-routing.md "Blind placements".

use xxhash_rust::xxh3::Xxh3;

use crate::workers::Rank;

/// Settings of the blind rule (`settings::KvConfig`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlindSettings {
    /// A request is blind when its overlap spread is below this fraction of its blocks
    /// (0 = never: every request goes through the cost model's pick).
    pub threshold: f64,
    /// A unit takes a blind request only if its cost is at most this factor times the lowest.
    pub balance_factor: f64,
}

/// One candidate unit as the blind rule sees it.
#[derive(Debug, Clone, Copy)]
pub struct BlindUnit<'a> {
    /// The worker's URL: the unit's name that every replica shares (worker ids are local).
    pub url: &'a str,
    pub rank: Rank,
    /// Leading request blocks cached or in flight there.
    pub overlap: u32,
    /// The cost model's cost of this request there (its prefill plus the unit's load).
    pub cost: f64,
}

/// Whether the index cannot decide: the overlaps differ by less than `threshold * blocks`.
pub fn is_blind(threshold: f64, request_blocks: u32, units: &[BlindUnit<'_>]) -> bool {
    if request_blocks == 0 || threshold <= 0.0 || units.is_empty() {
        return false;
    }
    let max = units.iter().map(|u| u.overlap).max().unwrap_or(0);
    let min = units.iter().map(|u| u.overlap).min().unwrap_or(0);
    f64::from(max - min) < threshold * f64::from(request_blocks)
}

/// The rendezvous weight of a unit for a prompt key (the same on every replica and process).
pub fn weight(key: u64, url: &str, rank: Rank) -> u64 {
    // xxh3-64 (seed `key`) of `url ++ le(rank)`, streamed so no buffer is built per unit.
    let mut h = Xxh3::with_seed(key);
    h.update(url.as_bytes());
    h.update(&rank.to_le_bytes());
    h.digest()
}

/// What [`place`] chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Index into the units.
    pub unit: usize,
    /// The key's first unit was over the bound and a later one took the request.
    pub spilled: bool,
}

/// The first unit in the key's rendezvous order whose cost is within `balance_factor` of the
/// lowest (None only for no units). The cheapest unit always qualifies, so a unit is found
/// whenever there is one.
pub fn place(key: u64, units: &[BlindUnit<'_>], balance_factor: f64) -> Option<Placement> {
    if units.is_empty() {
        return None;
    }
    let min = units.iter().map(|u| u.cost).fold(f64::INFINITY, f64::min);
    // Tolerance for float sums: costs are sums of multiples of the cost weights.
    let bound = balance_factor * min + 1e-9;
    let mut order: Vec<(u64, usize)> = units
        .iter()
        .enumerate()
        .map(|(i, u)| (weight(key, u.url, u.rank), i))
        .collect();
    // Highest weight first; equal weights (never in practice) by URL and rank, not by position.
    order.sort_unstable_by(|a, b| {
        b.0.cmp(&a.0)
            .then_with(|| units[a.1].url.cmp(units[b.1].url))
            .then_with(|| units[a.1].rank.cmp(&units[b.1].rank))
    });
    let first = order.first()?.1;
    let unit = order
        .iter()
        .map(|&(_, i)| i)
        .find(|&i| units[i].cost <= bound)
        .or_else(|| {
            // Unreachable for finite costs (the cheapest qualifies); NaN-safe fallback.
            units
                .iter()
                .enumerate()
                .min_by(|a, b| a.1.cost.total_cmp(&b.1.cost))
                .map(|(i, _)| i)
        })?;
    Some(Placement {
        unit,
        spilled: unit != first,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weight_is_the_one_shot_hash_of_url_and_rank() {
        // Replicas of different builds must rank units alike: pin the definition.
        let mut name = b"http://10.0.0.1:30000".to_vec();
        name.extend_from_slice(&3u32.to_le_bytes());
        let one_shot = xxhash_rust::xxh3::xxh3_64_with_seed(&name, 42);
        assert_eq!(weight(42, "http://10.0.0.1:30000", 3), one_shot);
    }

    const URLS: [&str; 8] = [
        "http://10.0.0.1:30000",
        "http://10.0.0.2:30000",
        "http://10.0.0.3:30000",
        "http://10.0.0.4:30000",
        "http://10.0.0.5:30000",
        "http://10.0.0.6:30000",
        "http://10.0.0.7:30000",
        "http://10.0.0.8:30000",
    ];

    fn units(costs: &[f64]) -> Vec<BlindUnit<'static>> {
        costs
            .iter()
            .zip(URLS)
            .map(|(&cost, url)| BlindUnit {
                url,
                rank: 0,
                overlap: 0,
                cost,
            })
            .collect()
    }

    #[test]
    fn blind_means_the_overlaps_do_not_tell_units_apart() {
        let mut u = units(&[0.0; 4]);
        assert!(is_blind(0.5, 100, &u));
        // A common system prefix cached everywhere is no reason to prefer a unit.
        u.iter_mut().for_each(|x| x.overlap = 25);
        assert!(is_blind(0.5, 100, &u));
        u[2].overlap = 74;
        assert!(is_blind(0.5, 100, &u));
        u[2].overlap = 75;
        assert!(!is_blind(0.5, 100, &u));
        assert!(!is_blind(0.0, 100, &units(&[0.0; 4])), "threshold 0 = off");
        assert!(
            !is_blind(0.5, 0, &units(&[0.0; 4])),
            "no tokens = load only"
        );
        assert!(!is_blind(0.5, 100, &[]));
    }

    #[test]
    fn the_same_key_picks_the_same_unit_whatever_the_candidate_order() {
        let u = units(&[64.0; 8]);
        let mut reversed = u.clone();
        reversed.reverse();
        let mut seen = std::collections::HashSet::new();
        for key in 0..200u64 {
            let a = u[place(key, &u, 1.25).unwrap().unit].url;
            let b = reversed[place(key, &reversed, 1.25).unwrap().unit].url;
            assert_eq!(a, b, "key {key}");
            seen.insert(a);
        }
        // Keys spread over the units (200 keys on 8 units miss one with probability ~8e-12).
        assert_eq!(seen.len(), 8);
    }

    #[test]
    fn ranks_of_one_worker_are_distinct_units() {
        assert_ne!(weight(7, URLS[0], 0), weight(7, URLS[0], 1));
    }

    #[test]
    fn a_loaded_first_choice_spills_to_the_next_unit_in_the_key_order() {
        let key = 42;
        let idle = units(&[64.0; 8]);
        let first = place(key, &idle, 1.25).unwrap();
        assert!(!first.spilled);
        // The key's unit is busy: its cost is over 1.25 x the cheapest, the request moves.
        let mut costs = [64.0; 8];
        costs[first.unit] = 64.0 * 1.25 + 1.0;
        let p = place(key, &units(&costs), 1.25).unwrap();
        assert!(p.spilled);
        assert_ne!(p.unit, first.unit);
        // Its second choice is the same on every replica with that view.
        assert_eq!(place(key, &units(&costs), 1.25), Some(p));
        // Within the bound, the key's own unit keeps it.
        costs[first.unit] = 80.0;
        assert_eq!(place(key, &units(&costs), 1.25), Some(first));
        // Equal load everywhere: the key's own unit keeps it.
        assert_eq!(place(key, &units(&[300.0; 8]), 1.25), Some(first));
    }

    #[test]
    fn the_bound_is_respected() {
        for key in 0..500u64 {
            let costs: Vec<f64> = (0..8)
                .map(|i| 8.0 + ((key * 7 + i * 13) % 11) as f64)
                .collect();
            let u = units(&costs);
            let min = costs.iter().copied().fold(f64::INFINITY, f64::min);
            let p = place(key, &u, 1.25).unwrap();
            assert!(costs[p.unit] <= 1.25 * min + 1e-9, "key {key}: {costs:?}");
            // Every unit ahead of it in the key's order was over the bound.
            let w = weight(key, u[p.unit].url, 0);
            for (i, x) in u.iter().enumerate() {
                if weight(key, x.url, 0) > w {
                    assert!(costs[i] > 1.25 * min, "key {key}: skipped unit {i}");
                }
            }
        }
    }

    #[test]
    fn no_units_no_placement() {
        assert_eq!(place(1, &[], 1.25), None);
    }
}
