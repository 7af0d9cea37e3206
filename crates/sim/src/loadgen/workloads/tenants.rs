//! `tenants`: multi-tenant chat traffic. Each of `tenants` tenants has its own system
//! prompt (length uniform in the configured range); each request picks a tenant with
//! Zipf popularity (tenant 0 the most popular) and appends a short user suffix of its
//! own. Requests arrive as a Poisson process of `rate` per simulated second (open
//! loop, exponential gaps), whatever the fleet is doing.

use std::sync::Arc;
use std::time::Duration;

use crate::loadgen::config::TenantsConfig;
use crate::loadgen::dist::{self, ExpWait, Stream, ZipfPick};
use crate::loadgen::request::RequestSpec;
use crate::loadgen::runner::Runner;
use crate::loadgen::synth::{self, Domain};
use crate::loadgen::workloads::open_loop;

/// The system prompt of `tenant`.
pub fn tenant_prompt(cfg: &TenantsConfig, seed: u64, tenant: u32) -> Vec<u32> {
    let mut rng = dist::rng(seed, Stream::TenantLen, u64::from(tenant));
    let len = dist::uniform_len(&mut rng, cfg.system_len_min, cfg.system_len_max);
    synth::block(seed, Domain::TenantSystem, u64::from(tenant), len as usize)
}

/// `X-SMG-Routing-Key` of `tenant` (with `routing_key` on).
pub fn tenant_key(tenant: u32) -> String {
    format!("tenant-{tenant}")
}

/// Arrival time (simulated, from the start) and tenant of every request: the first
/// at 0, then exponential gaps of mean `1 / rate`.
pub fn plan(cfg: &TenantsConfig, seed: u64) -> Vec<(Duration, u32)> {
    let gaps = ExpWait::new(1.0 / cfg.rate);
    let pick = ZipfPick::new(cfg.tenants, cfg.zipf_s);
    let mut gap_rng = dist::rng(seed, Stream::Arrivals, 0);
    let mut pick_rng = dist::rng(seed, Stream::TenantPick, 0);
    let mut at = Duration::ZERO;
    (0..cfg.requests)
        .map(|k| {
            if k > 0 {
                at += gaps.map_or(Duration::ZERO, |g| g.sample(&mut gap_rng));
            }
            (at, pick.map_or(0, |p| p.sample(&mut pick_rng)))
        })
        .collect()
}

/// Request `k`: `system` (its tenant's prompt) + `suffix_len` tokens unique to it.
pub fn request(
    cfg: &TenantsConfig,
    seed: u64,
    system: &[u32],
    k: usize,
    tenant: u32,
    max_new_tokens: u32,
) -> RequestSpec {
    let mut tokens = Vec::with_capacity(system.len() + cfg.suffix_len as usize);
    tokens.extend_from_slice(system);
    let suffix = cfg.suffix_len as usize;
    synth::extend(&mut tokens, seed, Domain::UserSuffix, k as u64, suffix);
    RequestSpec {
        tag: format!("ten{tenant}/r{k}"),
        input_ids: Arc::from(tokens),
        max_new_tokens,
        sampling_seed: Some(seed.wrapping_add(k as u64)),
        routing_key: cfg.routing_key.then(|| tenant_key(tenant)),
        affinity: u64::from(tenant),
        scheduled: Duration::ZERO,
        batch: None,
        text_segments: None,
    }
}

/// Sends the planned requests open loop (at most `concurrency` materialised at once).
pub async fn run(
    runner: &Runner,
    cfg: &TenantsConfig,
    seed: u64,
    max_new_tokens: u32,
    concurrency: usize,
) {
    let systems: Vec<Vec<u32>> = (0..cfg.tenants)
        .map(|t| tenant_prompt(cfg, seed, t))
        .collect();
    let plan = plan(cfg, seed);
    let offsets = plan.iter().map(|(at, _)| *at);
    open_loop::run(runner, concurrency, offsets, |k, wall_offset| {
        let tenant = plan[k].1;
        let system = systems.get(tenant as usize).map_or(&[][..], |s| &s[..]);
        let mut spec = request(cfg, seed, system, k, tenant, max_new_tokens);
        spec.scheduled = wall_offset;
        spec
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> TenantsConfig {
        TenantsConfig {
            tenants: 16,
            system_len_min: 50,
            system_len_max: 80,
            zipf_s: 1.0,
            suffix_len: 8,
            rate: 100.0,
            requests: 4000,
            routing_key: false,
        }
    }

    #[test]
    fn tenants_have_distinct_system_prompts_in_range() {
        let a = tenant_prompt(&cfg(), 1, 0);
        let b = tenant_prompt(&cfg(), 1, 1);
        assert!((50..=80).contains(&a.len()) && (50..=80).contains(&b.len()));
        assert_ne!(a[..10], b[..10]);
        assert_eq!(a, tenant_prompt(&cfg(), 1, 0));
    }

    #[test]
    fn requests_are_the_tenant_prompt_then_a_unique_suffix() {
        let c = TenantsConfig {
            routing_key: true,
            ..cfg()
        };
        let sys = tenant_prompt(&c, 1, 3);
        let r1 = request(&c, 1, &sys, 10, 3, 32);
        let r2 = request(&c, 1, &sys, 11, 3, 32);
        assert_eq!(r1.input_ids.len(), sys.len() + 8);
        assert_eq!(r1.input_ids[..sys.len()], sys[..]);
        assert_eq!(r2.input_ids[..sys.len()], sys[..]);
        assert_ne!(r1.input_ids[sys.len()..], r2.input_ids[sys.len()..]);
        assert_eq!(r1.routing_key.as_deref(), Some("tenant-3"));
        assert_eq!((r1.tag.as_str(), r1.affinity), ("ten3/r10", 3));
        assert_eq!(request(&cfg(), 1, &sys, 10, 3, 32).routing_key, None);
    }

    #[test]
    fn arrivals_are_poisson_at_the_rate_and_tenants_zipf() {
        let p = plan(&cfg(), 2);
        assert_eq!(p.len(), 4000);
        assert_eq!(p[0].0, Duration::ZERO);
        assert!(p.windows(2).all(|w| w[0].0 <= w[1].0));
        // 3999 gaps of mean 10 ms: ~40 s (std of the sum ~0.63 s).
        let span = p[p.len() - 1].0.as_secs_f64();
        assert!((37.5..42.5).contains(&span), "span {span}");
        let mut counts = [0u32; 16];
        for (_, t) in &p {
            counts[*t as usize] += 1;
        }
        assert!(counts[0] > counts[1] && counts[1] > counts[4] && counts[4] > counts[15]);
        assert_eq!(p, plan(&cfg(), 2));
        assert_ne!(p, plan(&cfg(), 3));
    }
}
