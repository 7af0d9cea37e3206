//! `rollout`: GRPO rollout batches shaped like miles'. A batch is `prompts` prompt
//! groups; each group is `samples` requests with identical `input_ids` fired together
//! (miles' `generate_and_rm_group` gathers one `/generate` per sample; grpo's
//! [`siblings`] builds them), all groups of a batch submitted at once and held to
//! `--concurrency` in flight by the runner's slots (miles' rollout semaphore). The
//! next batch starts only when every request of the previous one has ended (a
//! synchronous rollout step). Prompt lengths are uniform in the configured range,
//! each sample's output length lognormal and capped at `max_new_tokens`; with
//! `ignore_eos` the asked length is the generated length. With `prime_prefix` each group
//! first sends its prompt once with `max_new_tokens` 0 and waits for it, as SGLang does for
//! `n > 1` (`TokenizerManager._handle_batch_request`: "Cache the common prefix for parallel
//! sampling"), so the samples find the prompt cached instead of prefilling it side by side.

use std::future::Future;
use std::sync::Arc;

use crate::loadgen::config::RolloutConfig;
use crate::loadgen::dist::{self, OutputLen, Stream};
use crate::loadgen::request::RequestSpec;
use crate::loadgen::runner::Runner;
use crate::loadgen::synth::Domain;
use crate::loadgen::workloads::grpo;

/// Identity of prompt `prompt` of batch `batch` (token block and random stream).
pub fn group_id(batch: u32, prompt: u32) -> u64 {
    u64::from(batch) << 32 | u64::from(prompt)
}

/// The sibling requests of one prompt: its length and its samples' output lengths
/// come from the group's own random stream, so they do not depend on send order.
pub fn group_requests(
    cfg: &RolloutConfig,
    seed: u64,
    batch: u32,
    prompt: u32,
    max_new_tokens: u32,
) -> Vec<RequestSpec> {
    let id = group_id(batch, prompt);
    let mut rng = dist::rng(seed, Stream::RolloutGroup, id);
    let len = dist::uniform_len(&mut rng, cfg.prompt_len_min, cfg.prompt_len_max);
    let outputs = OutputLen::new(cfg.output_len_median, cfg.output_len_sigma, max_new_tokens);
    let lens: Vec<u32> = (0..cfg.samples)
        .map(|_| outputs.map_or(max_new_tokens, |o| o.sample(&mut rng)))
        .collect();
    let tokens = grpo::prompt(seed, cfg.system_prefix_len, Domain::RolloutPrompt, id, len);
    let tag = format!("b{batch}/g{prompt}");
    let mut specs = grpo::siblings(&tag, Arc::from(tokens), seed, id, lens);
    for s in &mut specs {
        s.batch = Some(batch);
    }
    specs
}

/// The groups of `batch` (each one prompt's samples), in prompt order.
pub fn batch_groups(
    cfg: &RolloutConfig,
    seed: u64,
    batch: u32,
    max_new_tokens: u32,
) -> Vec<Vec<RequestSpec>> {
    (0..cfg.prompts)
        .map(|p| group_requests(cfg, seed, batch, p, max_new_tokens))
        .collect()
}

/// Every request of `batch`, group after group.
pub fn batch_requests(
    cfg: &RolloutConfig,
    seed: u64,
    batch: u32,
    max_new_tokens: u32,
) -> Vec<RequestSpec> {
    batch_groups(cfg, seed, batch, max_new_tokens)
        .into_iter()
        .flatten()
        .collect()
}

/// The request that caches a group's prompt before its samples: the first sample with
/// `max_new_tokens` 0, tagged `<group>/prime`.
pub fn prime_request(group: &[RequestSpec]) -> Option<RequestSpec> {
    let first = group.first()?;
    let mut prime = first.clone();
    prime.tag = match first.tag.rsplit_once('/') {
        Some((g, _)) => format!("{g}/prime"),
        None => format!("{}/prime", first.tag),
    };
    prime.max_new_tokens = 0;
    Some(prime)
}

/// Runs the batches through the runner.
pub async fn run(runner: &Runner, cfg: &RolloutConfig, seed: u64, max_new_tokens: u32) {
    let plan = |batch| {
        let scheduled = runner.start().elapsed();
        let mut groups = batch_groups(cfg, seed, batch, max_new_tokens);
        for s in groups.iter_mut().flatten() {
            s.scheduled = scheduled;
        }
        groups
    };
    let send_group = |group: Vec<RequestSpec>| async move {
        if cfg.prime_prefix {
            if let Some(prime) = prime_request(&group) {
                runner.send(prime).await;
            }
        }
        futures::future::join_all(group.into_iter().map(|s| runner.send(s))).await;
    };
    run_batches(cfg.batches, || runner.expired(), plan, send_group).await;
}

/// The batch barrier: batch b's groups are all handed to `send_group` at once, and batch
/// b + 1 is planned only after every one of them has completed. No batch starts once
/// `stopped()`.
pub async fn run_batches<F, Fut>(
    batches: u32,
    stopped: impl Fn() -> bool,
    plan: impl Fn(u32) -> Vec<Vec<RequestSpec>>,
    send_group: F,
) where
    F: Fn(Vec<RequestSpec>) -> Fut,
    Fut: Future,
{
    for batch in 0..batches {
        if stopped() {
            return;
        }
        futures::future::join_all(plan(batch).into_iter().map(&send_group)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    fn cfg() -> RolloutConfig {
        RolloutConfig {
            prompts: 4,
            samples: 8,
            batches: 3,
            prompt_len_min: 100,
            prompt_len_max: 200,
            system_prefix_len: 20,
            output_len_median: 50.0,
            output_len_sigma: 1.0,
            prime_prefix: false,
        }
    }

    #[test]
    fn siblings_share_the_prompt_and_draw_their_own_capped_lengths() {
        let reqs = group_requests(&cfg(), 7, 1, 2, 120);
        assert_eq!(reqs.len(), 8);
        let len = reqs[0].input_ids.len();
        assert!((100..=200).contains(&len), "{len}");
        for (i, r) in reqs.iter().enumerate() {
            assert_eq!(r.input_ids, reqs[0].input_ids);
            assert_eq!(r.tag, format!("b1/g2/s{i}"));
            assert_eq!(r.batch, Some(1));
            assert_eq!(r.sampling_seed, Some(7 + i as u64));
            assert!((1..=120).contains(&r.max_new_tokens));
        }
        let distinct: std::collections::HashSet<u32> =
            reqs.iter().map(|r| r.max_new_tokens).collect();
        assert!(distinct.len() > 1, "output lengths vary per sample");
    }

    #[test]
    fn plans_are_deterministic_given_the_seed() {
        let lens = |seed| -> Vec<(usize, u32)> {
            batch_requests(&cfg(), seed, 0, 4096)
                .iter()
                .map(|r| (r.input_ids.len(), r.max_new_tokens))
                .collect()
        };
        assert_eq!(lens(3), lens(3));
        assert_ne!(lens(3), lens(4));
        let a = batch_requests(&cfg(), 3, 0, 4096);
        assert_eq!(
            a[0].input_ids,
            batch_requests(&cfg(), 3, 0, 4096)[0].input_ids
        );
    }

    #[test]
    fn prompts_share_only_the_system_prefix_across_groups_and_batches() {
        let a = &group_requests(&cfg(), 1, 0, 0, 64)[0].input_ids;
        let b = &group_requests(&cfg(), 1, 0, 1, 64)[0].input_ids;
        let c = &group_requests(&cfg(), 1, 1, 0, 64)[0].input_ids;
        assert_eq!(a[..20], b[..20]);
        assert_eq!(a[..20], c[..20]);
        assert_ne!(a[20..25], b[20..25]);
        assert_ne!(a[20..25], c[20..25], "batch 1 has new prompts");
    }

    #[test]
    fn lengths_cover_the_prompt_range_and_hit_the_output_cap() {
        let c = RolloutConfig {
            prompts: 256,
            ..cfg()
        };
        let reqs = batch_requests(&c, 0, 0, 200);
        assert_eq!(reqs.len(), 256 * 8);
        let lens: Vec<usize> = reqs.iter().map(|r| r.input_ids.len()).collect();
        assert!(lens.iter().all(|l| (100..=200).contains(l)));
        assert!(lens.iter().any(|&l| l < 110) && lens.iter().any(|&l| l > 190));
        // median 50, sigma 1: P(> 200) = P(Z > ln 4) ~ 8% of 2048 samples.
        let capped = reqs.iter().filter(|r| r.max_new_tokens == 200).count();
        assert!((80..=260).contains(&capped), "{capped}");
        assert!(reqs.iter().all(|r| r.max_new_tokens <= 200));
    }

    #[tokio::test]
    async fn a_batch_starts_only_after_the_previous_one_ended() {
        #[derive(Debug, PartialEq)]
        enum Ev {
            Start(u32),
            End(u32),
        }
        let log = Mutex::new(Vec::new());
        let c = cfg();
        let send = |s: RequestSpec| {
            let log = &log;
            async move {
                let batch = s.batch.unwrap_or(u32::MAX);
                log.lock().push(Ev::Start(batch));
                // Uneven service times so requests of a batch interleave.
                for _ in 0..=s.max_new_tokens % 7 {
                    tokio::task::yield_now().await;
                }
                log.lock().push(Ev::End(batch));
            }
        };
        let send_group = |g: Vec<RequestSpec>| futures::future::join_all(g.into_iter().map(send));
        run_batches(
            c.batches,
            || false,
            |b| batch_groups(&c, 0, b, 64),
            send_group,
        )
        .await;
        let log = log.into_inner();
        assert_eq!(log.len(), 2 * 3 * 4 * 8);
        for b in 1..3 {
            let first_start = log.iter().position(|e| *e == Ev::Start(b)).unwrap();
            let last_end_before = log.iter().rposition(|e| *e == Ev::End(b - 1)).unwrap();
            assert!(
                last_end_before < first_start,
                "batch {b} overlapped batch {}",
                b - 1
            );
        }
        // Within a batch, every request is sent before the first one ends (fired together).
        let first_end = log.iter().position(|e| *e == Ev::End(0)).unwrap();
        let starts_before = log[..first_end]
            .iter()
            .filter(|e| **e == Ev::Start(0))
            .count();
        assert_eq!(starts_before, 32);
    }

    #[test]
    fn a_prime_is_the_groups_prompt_with_no_output() {
        let group = group_requests(&cfg(), 7, 1, 2, 120);
        let prime = prime_request(&group).expect("a group has samples");
        assert_eq!(prime.input_ids, group[0].input_ids);
        assert_eq!(prime.max_new_tokens, 0);
        assert_eq!(prime.tag, "b1/g2/prime");
        assert_eq!(prime.batch, Some(1));
        assert!(prime_request(&[]).is_none());
    }

    #[tokio::test]
    async fn no_batch_starts_once_stopped() {
        let sent = Mutex::new(0u32);
        let c = cfg();
        let send = |_s: RequestSpec| {
            *sent.lock() += 1;
            async {}
        };
        let stopped = || *sent.lock() >= 32;
        let send_group = |g: Vec<RequestSpec>| futures::future::join_all(g.into_iter().map(send));
        run_batches(
            c.batches,
            stopped,
            |b| batch_groups(&c, 0, b, 64),
            send_group,
        )
        .await;
        assert_eq!(sent.into_inner(), 32);
    }
}
