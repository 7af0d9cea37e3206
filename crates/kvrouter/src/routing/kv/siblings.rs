//! Serializes the routing decisions of identical prompts (GRPO siblings): between scoring a
//! request and booking it there is a window in which a sibling scored on another thread sees
//! neither the booking nor the load, picks another worker on a tie, and the group starts on
//! two workers with two prefills. Requests with the same last block hash (the same prompt)
//! take the same stripe of a small lock array for that window, so the second sibling scores
//! after the first one's booking. Different prompts almost never share a stripe.

use kvrouter_index::SeqHash;
use parking_lot::{Mutex, MutexGuard};

const STRIPES: usize = 64;

/// Striped locks over prompt keys.
pub struct SiblingLocks {
    stripes: Box<[Mutex<()>]>,
}

impl Default for SiblingLocks {
    fn default() -> Self {
        SiblingLocks {
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }
}

impl SiblingLocks {
    /// Held from scoring to booking by requests whose prompt ends in block `key`; `None`
    /// (no full page of tokens) takes no lock.
    pub fn hold(&self, key: Option<SeqHash>) -> Option<MutexGuard<'_, ()>> {
        key.map(|k| self.stripes[(k as usize) % STRIPES].lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_prompt_waits_and_others_do_not() {
        let locks = SiblingLocks::default();
        let held = locks.hold(Some(7));
        assert!(held.is_some());
        assert!(
            locks.stripes[7].try_lock().is_none(),
            "a sibling would wait"
        );
        assert!(
            locks.stripes[8].try_lock().is_some(),
            "another prompt would not"
        );
        assert!(locks.hold(None).is_none());
        drop(held);
        assert!(locks.stripes[7].try_lock().is_some());
    }
}
