//! Page-size compatibility between a worker and the router: which worker pages tile a
//! router block (the router's events side folds them, `events/fold.rs`; kv-mode
//! registration refuses the rest, `workers/probe.rs`).

/// Whether `worker_page`-token pages fold into `router_page`-token blocks: smaller than
/// the router's page, and a divisor of it (SGLang's default page size 1 always is).
pub fn folds_into(worker_page: u32, router_page: u32) -> bool {
    worker_page > 0 && worker_page < router_page && router_page.is_multiple_of(worker_page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_smaller_divisors_fold() {
        assert!(folds_into(1, 16) && folds_into(4, 16) && folds_into(8, 16));
        assert!(!folds_into(16, 16), "equal pages need no fold");
        assert!(!folds_into(32, 16) && !folds_into(24, 16) && !folds_into(6, 16));
        assert!(!folds_into(0, 16));
    }
}
