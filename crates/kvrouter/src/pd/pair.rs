//! Pair selection: a prefill worker and a decode worker per attempt, each booked through a
//! [`Selector`] restricted to its role's candidates. The prefill leg uses the router's own
//! selector by default (in kv mode the KV policy: exact index of the prefill workers' events
//! plus predict-on-route, so GRPO siblings land on one prefill worker); the decode leg uses
//! the same KV selector only when every decode candidate publishes its KV cache (SGLang's
//! decode-side radix cache), else least-load, or the basic policy `--decode-policy` names.
//! Sticky keys are namespaced per leg (`prefill:` / `decode:`, as SMG does).

use std::sync::Arc;

use super::config::{LegPolicy, PdConfig};
use super::roles::candidates;
use crate::routing::Mode;
use crate::routing::{policy_for, Booking, RoutingInput, Selector, StickyTable};
use crate::workers::{Role, Worker, WorkerId};

/// The legs' own selectors (those not shared with the router's).
pub struct PairSelector {
    prefill_own: Option<Selector>,
    decode_own: Option<Selector>,
    /// Decode by load when the decode workers publish no KV cache (`LegPolicy::Auto`).
    decode_load: Selector,
    /// The router's mode is kv (its selector holds the KV policy).
    kv: bool,
}

/// Which leg had no candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    Prefill,
    Decode,
}

/// A booked (prefill, decode) pair.
pub struct Pair {
    pub prefill: Booking,
    pub decode: Booking,
}

fn own(policy: LegPolicy, ttl: std::time::Duration) -> Option<Selector> {
    match policy {
        LegPolicy::Basic(mode) => Some(Selector::new(policy_for(mode), StickyTable::new(ttl))),
        LegPolicy::Router | LegPolicy::Auto => None,
    }
}

/// True when a decode worker publishes its KV cache (KV events and a radix cache), so the
/// KV index can tell how much of a prompt it already holds.
fn publishes_cache(w: &Worker) -> bool {
    w.info.kv_events_enabled() && !w.info.disable_radix_cache
}

impl PairSelector {
    pub fn new(config: &PdConfig, mode: Mode, sticky_ttl: std::time::Duration) -> PairSelector {
        PairSelector {
            prefill_own: own(config.prefill_policy, sticky_ttl),
            decode_own: own(config.decode_policy, sticky_ttl),
            decode_load: Selector::new(policy_for(Mode::LeastLoad), StickyTable::new(sticky_ttl)),
            kv: mode == Mode::Kv,
        }
    }

    /// The selector the decode leg uses over `pool`.
    fn decode_selector<'s>(&'s self, router: &'s Selector, pool: &[Arc<Worker>]) -> &'s Selector {
        if let Some(s) = &self.decode_own {
            return s;
        }
        if self.kv && !pool.is_empty() && pool.iter().all(|w| publishes_cache(w)) {
            router
        } else {
            &self.decode_load
        }
    }

    /// Books a pair among `routable` (the registry's routable list; those in `tried_*` last).
    pub fn book(
        &self,
        router: &Selector,
        routable: &[Arc<Worker>],
        input: &RoutingInput<'_>,
        routing_key: Option<&str>,
        tried_prefill: &[WorkerId],
        tried_decode: &[WorkerId],
    ) -> Result<Pair, Missing> {
        let prefill_pool = candidates(routable, Role::Prefill, tried_prefill);
        let decode_pool = candidates(routable, Role::Decode, tried_decode);
        if prefill_pool.is_empty() {
            return Err(Missing::Prefill);
        }
        if decode_pool.is_empty() {
            return Err(Missing::Decode);
        }
        let key = |leg: &str| routing_key.map(|k| format!("{leg}:{k}"));
        let prefill_selector = self.prefill_own.as_ref().unwrap_or(router);
        let prefill = prefill_selector
            .select(input, key("prefill").as_deref(), &prefill_pool)
            .ok_or(Missing::Prefill)?;
        let decode = self
            .decode_selector(router, &decode_pool)
            .select(input, key("decode").as_deref(), &decode_pool)
            .ok_or(Missing::Decode)?;
        Ok(Pair { prefill, decode })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::routing::Endpoint;
    use crate::workers::WorkerInfo;

    fn fleet(roles: &[Role]) -> Vec<Arc<Worker>> {
        roles
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut w = Worker::new(
                    WorkerId(i as u32),
                    &format!("http://127.0.0.1:{}", 32000 + i),
                    WorkerInfo::default(),
                );
                w.role = *r;
                Arc::new(w)
            })
            .collect()
    }

    fn config(prefill: LegPolicy, decode: LegPolicy) -> PdConfig {
        PdConfig {
            prefill: vec![],
            decode: vec![],
            prefill_policy: prefill,
            decode_policy: decode,
        }
    }

    #[test]
    fn each_leg_is_picked_among_its_role_and_decode_balances_by_load() {
        let f = fleet(&[Role::Prefill, Role::Decode, Role::Regular, Role::Decode]);
        let ttl = std::time::Duration::from_secs(60);
        let router = Selector::new(policy_for(Mode::RoundRobin), StickyTable::new(ttl));
        let pairs = PairSelector::new(
            &config(LegPolicy::Router, LegPolicy::Auto),
            Mode::RoundRobin,
            ttl,
        );
        let input = RoutingInput::parse(Endpoint::Generate, br#"{"input_ids":[1]}"#).unwrap();
        let held: Vec<Pair> = (0..4)
            .map(|_| pairs.book(&router, &f, &input, None, &[], &[]).unwrap())
            .collect();
        assert!(held.iter().all(|p| p.prefill.worker().id == WorkerId(0)));
        assert_eq!(f[1].in_flight(), 2, "decode split by load");
        assert_eq!(f[3].in_flight(), 2);
        assert_eq!(f[2].in_flight(), 0, "regular workers get no PD leg");
        let tried = pairs
            .book(&router, &f, &input, None, &[], &[WorkerId(1)])
            .unwrap();
        assert_eq!(tried.decode.worker().id, WorkerId(3));
        let no_decode = fleet(&[Role::Prefill]);
        assert_eq!(
            pairs
                .book(&router, &no_decode, &input, None, &[], &[])
                .err(),
            Some(Missing::Decode)
        );
        assert_eq!(
            pairs
                .book(&router, &fleet(&[Role::Decode]), &input, None, &[], &[])
                .err(),
            Some(Missing::Prefill)
        );
    }

    #[test]
    fn sticky_keys_are_per_leg() {
        let f = fleet(&[Role::Prefill, Role::Prefill, Role::Decode, Role::Decode]);
        let ttl = std::time::Duration::from_secs(60);
        let router = Selector::new(policy_for(Mode::RoundRobin), StickyTable::new(ttl));
        let pairs = PairSelector::new(
            &config(LegPolicy::Router, LegPolicy::Basic(Mode::RoundRobin)),
            Mode::RoundRobin,
            ttl,
        );
        let input = RoutingInput::parse(Endpoint::Generate, br#"{"input_ids":[1]}"#).unwrap();
        let first = pairs
            .book(&router, &f, &input, Some("s"), &[], &[])
            .unwrap();
        let (p, d) = (first.prefill.worker().id, first.decode.worker().id);
        for _ in 0..3 {
            let again = pairs
                .book(&router, &f, &input, Some("s"), &[], &[])
                .unwrap();
            assert_eq!(
                (again.prefill.worker().id, again.decode.worker().id),
                (p, d)
            );
        }
        assert_eq!(router.sticky().len(), 1, "prefill:s");
    }
}
