//! Identifiers of routing targets: a router-assigned `WorkerId` and a DP `Rank`.

use std::fmt;

/// Router-assigned, stable identifier of a registered worker (never reused
/// within one router process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerId(pub u32);

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "w{}", self.0)
    }
}

/// Data-parallel rank inside one worker (0 when the worker has `dp_size == 1`).
pub type Rank = u32;
