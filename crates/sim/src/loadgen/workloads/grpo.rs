//! `grpo`: G prompt groups x N samples. Each group's N requests carry identical
//! `input_ids` and are fired at once (as miles' `n_samples_per_prompt` siblings,
//! sibling i with `sampling_seed = seed + i`); `groups_in_flight` groups run at a time.

use std::sync::Arc;

use futures::stream::{self, StreamExt};

use crate::loadgen::config::GrpoConfig;
use crate::loadgen::request::RequestSpec;
use crate::loadgen::runner::Runner;
use crate::loadgen::synth::{self, Domain};

/// Prompt of `group`: the shared system prefix, then tokens unique to the group.
pub fn group_prompt(cfg: &GrpoConfig, seed: u64, group: u32) -> Vec<u32> {
    prompt(
        seed,
        cfg.system_prefix_len,
        Domain::GrpoPrompt,
        u64::from(group),
        cfg.prompt_len,
    )
}

/// A prompt of `len` tokens: the first `system_prefix_len` shared by every prompt of
/// the run, the rest block `id` of `domain` (`system_prefix_len` <= `len`).
pub fn prompt(seed: u64, system_prefix_len: u32, domain: Domain, id: u64, len: u32) -> Vec<u32> {
    let prefix = system_prefix_len.min(len) as usize;
    let mut prompt = Vec::with_capacity(len as usize);
    synth::extend(&mut prompt, seed, Domain::SystemPrefix, 0, prefix);
    synth::extend(&mut prompt, seed, domain, id, len as usize - prefix);
    prompt
}

/// The N sibling requests of `group`.
pub fn group_requests(
    cfg: &GrpoConfig,
    seed: u64,
    group: u32,
    max_new_tokens: u32,
) -> Vec<RequestSpec> {
    let prompt: Arc<[u32]> = group_prompt(cfg, seed, group).into();
    let outputs = std::iter::repeat_n(max_new_tokens, cfg.samples as usize);
    siblings(
        &format!("g{group}"),
        prompt,
        seed,
        u64::from(group),
        outputs,
    )
}

/// One request per output length, all with the same `input_ids` (miles'
/// `n_samples_per_prompt` siblings): sibling i is tagged `<tag>/s<i>` and gets
/// `sampling_seed = seed + i`.
pub fn siblings(
    tag: &str,
    prompt: Arc<[u32]>,
    seed: u64,
    affinity: u64,
    output_lens: impl IntoIterator<Item = u32>,
) -> Vec<RequestSpec> {
    output_lens
        .into_iter()
        .enumerate()
        .map(|(sample, max_new_tokens)| RequestSpec {
            tag: format!("{tag}/s{sample}"),
            input_ids: prompt.clone(),
            max_new_tokens,
            sampling_seed: Some(seed.wrapping_add(sample as u64)),
            routing_key: None,
            affinity,
            scheduled: std::time::Duration::ZERO,
            batch: None,
            text_segments: None,
        })
        .collect()
}

/// Runs every group (none starts once the run has stopped).
pub async fn run(runner: &Runner, cfg: &GrpoConfig, seed: u64, max_new_tokens: u32) {
    stream::iter(0..cfg.groups)
        .map(|group| async move {
            if runner.expired() {
                return;
            }
            let scheduled = runner.start().elapsed();
            let sends = group_requests(cfg, seed, group, max_new_tokens)
                .into_iter()
                .map(|mut spec| {
                    spec.scheduled = scheduled;
                    runner.send(spec)
                });
            futures::future::join_all(sends).await;
        })
        .buffer_unordered(cfg.groups_in_flight as usize)
        .collect::<()>()
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> GrpoConfig {
        GrpoConfig {
            groups: 3,
            samples: 4,
            prompt_len: 100,
            system_prefix_len: 40,
            groups_in_flight: 1,
        }
    }

    #[test]
    fn prompts_share_the_prefix_and_nothing_else() {
        let a = group_prompt(&cfg(), 1, 0);
        let b = group_prompt(&cfg(), 1, 1);
        assert_eq!((a.len(), b.len()), (100, 100));
        assert_eq!(a[..40], b[..40]);
        let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        assert!(
            common < 42,
            "groups diverge right after the prefix ({common})"
        );
    }

    #[test]
    fn generation_is_deterministic_given_the_seed() {
        assert_eq!(group_prompt(&cfg(), 9, 2), group_prompt(&cfg(), 9, 2));
        assert_ne!(group_prompt(&cfg(), 9, 2), group_prompt(&cfg(), 10, 2));
    }

    #[test]
    fn siblings_are_identical_but_for_the_sampling_seed() {
        let reqs = group_requests(&cfg(), 7, 1, 16);
        assert_eq!(reqs.len(), 4);
        for (i, r) in reqs.iter().enumerate() {
            assert_eq!(r.input_ids, reqs[0].input_ids);
            assert_eq!(r.sampling_seed, Some(7 + i as u64));
            assert_eq!(r.max_new_tokens, 16);
            assert_eq!(r.affinity, 1);
            assert_eq!(r.tag, format!("g1/s{i}"));
        }
    }

    #[test]
    fn prefix_may_be_the_whole_prompt_or_nothing() {
        let whole = GrpoConfig {
            system_prefix_len: 100,
            ..cfg()
        };
        assert_eq!(group_prompt(&whole, 1, 0), group_prompt(&whole, 1, 1));
        let none = GrpoConfig {
            system_prefix_len: 0,
            ..cfg()
        };
        assert_ne!(group_prompt(&none, 1, 0)[0], group_prompt(&none, 1, 1)[0]);
    }
}
