//! The simulated KV link between a prefill and a decode worker: a transfer moves the prompt's
//! pages the decode does not hold (SGLang `PrefillBootstrapQueue._num_pages_to_send`,
//! `disaggregation/prefill.py`: `kv_to_page_num(len(origin_input_ids) - decode_prefix_len)`),
//! and takes `tokens x bytes-per-token / bandwidth` (divided by `--speedup`, like every
//! simulated duration; instant with speedup 0).

use std::time::Duration;

use crate::mock::config::MockArgs;

/// Link parameters of one process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    bytes_per_token: u64,
    bytes_per_sec: f64,
    speedup: f64,
    page_size: usize,
}

impl Link {
    /// From `--disaggregation-link-gbps`, `--disaggregation-kv-bytes-per-token`,
    /// `--speedup` and `--page-size`.
    pub fn from_args(a: &MockArgs) -> Link {
        Link {
            bytes_per_token: a.disaggregation_kv_bytes_per_token,
            bytes_per_sec: a.disaggregation_link_gbps * 1e9,
            speedup: a.speedup,
            page_size: a.page_size.max(1),
        }
    }

    /// Tokens a transfer moves: the prompt beyond the decode's prefix, in whole pages (never
    /// more than the prompt).
    pub fn tokens(&self, prompt_len: usize, decode_prefix_len: usize) -> usize {
        let delta = prompt_len.saturating_sub(decode_prefix_len);
        (delta.div_ceil(self.page_size) * self.page_size).min(prompt_len)
    }

    /// Simulated model seconds of moving `tokens`.
    pub fn model_secs(&self, tokens: usize) -> f64 {
        if self.bytes_per_sec <= 0.0 {
            return 0.0;
        }
        tokens as f64 * self.bytes_per_token as f64 / self.bytes_per_sec
    }

    /// Wall time of moving `tokens` (`model_secs / speedup`; zero with speedup 0).
    pub fn wall(&self, tokens: usize) -> Duration {
        if self.speedup <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(self.model_secs(tokens) / self.speedup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn delta_in_pages_and_time() {
        let a = MockArgs::parse_from(["sglang-mock", "--page-size", "16", "--speedup", "2"]);
        let l = Link::from_args(&a);
        assert_eq!(l.tokens(100, 0), 100, "capped at the prompt");
        assert_eq!(l.tokens(100, 64), 48);
        assert_eq!(l.tokens(100, 100), 0);
        // 4000 tokens x 128 KiB at 25 GB/s = 20.97 ms of model time, half of it in wall time.
        let secs = l.model_secs(4000);
        assert!((secs - 0.020_971_52).abs() < 1e-9, "{secs}");
        assert_eq!(l.wall(4000), Duration::from_secs_f64(secs / 2.0));
        let a = MockArgs::parse_from(["sglang-mock", "--speedup", "0"]);
        assert_eq!(Link::from_args(&a).wall(4000), Duration::ZERO);
    }
}
