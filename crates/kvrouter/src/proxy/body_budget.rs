//! The memory budget shared by request bodies in flight (`--max-inflight-body-bytes`): every
//! body frame takes its bytes from one semaphore as it arrives, and gives them back when the
//! request's [`BodyPermit`] drops. A body that would pass the budget is refused (503), so a
//! crowd of slow or trickling uploads holds at most the budget, not connections x
//! `max_payload_size`.

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::metrics::bounds::BoundsMetrics;

/// The budget (cheap to clone).
#[derive(Clone)]
pub struct BodyBudget {
    sem: Arc<Semaphore>,
    total: usize,
}

/// Bytes one request holds from the budget, returned on drop.
pub struct BodyPermit {
    sem: Arc<Semaphore>,
    held: usize,
}

impl BodyBudget {
    /// A budget of `total` bytes (capped at tokio's `Semaphore::MAX_PERMITS`).
    pub fn new(total: usize) -> BodyBudget {
        let total = total.min(Semaphore::MAX_PERMITS);
        BodyBudget {
            sem: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// The budget in bytes.
    pub fn total(&self) -> usize {
        self.total
    }

    /// An empty permit of this budget.
    pub fn permit(&self) -> BodyPermit {
        BodyPermit {
            sem: self.sem.clone(),
            held: 0,
        }
    }
}

impl BodyPermit {
    /// Takes `n` more bytes; false (nothing taken) when the budget has fewer left.
    pub fn grow(&mut self, n: usize) -> bool {
        if n == 0 {
            return true;
        }
        let Ok(n32) = u32::try_from(n) else {
            return false;
        };
        match self.sem.try_acquire_many(n32) {
            Ok(p) => {
                p.forget();
                self.held += n;
                BoundsMetrics::get().inflight_body_bytes.add(n as i64);
                true
            }
            Err(_) => false,
        }
    }

    /// Bytes held.
    pub fn held(&self) -> usize {
        self.held
    }
}

impl Drop for BodyPermit {
    fn drop(&mut self) {
        if self.held > 0 {
            self.sem.add_permits(self.held);
            BoundsMetrics::get()
                .inflight_body_bytes
                .sub(self.held as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_taken_until_the_budget_is_spent_and_returned_on_drop() {
        let b = BodyBudget::new(100);
        let mut a = b.permit();
        assert!(a.grow(60));
        let mut c = b.permit();
        assert!(!c.grow(50), "60 + 50 > 100");
        assert!(c.grow(40));
        assert_eq!((a.held(), c.held()), (60, 40));
        drop(a);
        assert!(c.grow(50));
        assert!(b.permit().grow(0));
    }
}
