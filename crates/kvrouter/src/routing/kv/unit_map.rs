//! The hasher of the KV policy's per-unit maps (loads, rates, pressure, the board): a decision
//! reads each of them for every unit it reads (all of a fleet of up to 32 workers, about 16
//! units past that). foldhash, seeded per process like std's SipHash (the prompt-keyed
//! load map is keyed by client-derived hashes), at a fraction of SipHash's instructions:
//! a 1,000-worker decision spent a quarter of its instructions in SipHash before.

use dashmap::DashMap;

/// The build hasher of the per-unit maps.
pub(super) type UnitHasher = foldhash::fast::RandomState;

/// A concurrent map keyed by unit (or unit and prompt).
pub(super) type UnitMap<K, V> = DashMap<K, V, UnitHasher>;
