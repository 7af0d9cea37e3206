//! Deterministic pseudo-tokens: the output token at position `i` of a request is a pure
//! function of the server seed, the request's sampling key and `i`.
//!
//! The sampling key mixes the prompt tokens, `sampling_params.sampling_seed` (if given)
//! and the sample index within `n`. Identical prompts without a sampling seed therefore
//! produce identical outputs (as greedy decoding would).

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// Generator state of one request.
#[derive(Debug, Clone, Copy)]
pub struct Sampler {
    key: u64,
    vocab: u32,
}

impl Sampler {
    /// A sampler for a request with `prompt`, optional `sampling_seed` and sample index `n_index`.
    pub fn new(
        server_seed: u64,
        prompt: &[u32],
        sampling_seed: Option<u64>,
        n_index: u32,
        vocab: u32,
    ) -> Sampler {
        let mut bytes = Vec::with_capacity(prompt.len() * 4);
        for t in prompt {
            bytes.extend_from_slice(&t.to_le_bytes());
        }
        let prompt_hash = xxh3_64(&bytes);
        let key = xxh3_64_with_seed(
            &[
                prompt_hash.to_le_bytes(),
                sampling_seed.unwrap_or(u64::MAX).to_le_bytes(),
                u64::from(n_index).to_le_bytes(),
            ]
            .concat(),
            server_seed,
        );
        Sampler { key, vocab }
    }

    /// Token and its logprob at output position `i`; tokens are in `[256, vocab)`.
    pub fn token(&self, i: usize) -> (u32, f32) {
        let h = xxh3_64_with_seed(&(i as u64).to_le_bytes(), self.key);
        let token = 256 + (h % u64::from(self.vocab - 256)) as u32;
        let logprob = -(((h >> 40) % 4000) as f32) / 1000.0;
        (token, logprob)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_per_request_and_seed() {
        let a = Sampler::new(1, &[1, 2, 3], None, 0, 32000);
        let b = Sampler::new(1, &[1, 2, 3], None, 0, 32000);
        let c = Sampler::new(2, &[1, 2, 3], None, 0, 32000);
        let d = Sampler::new(1, &[1, 2, 3], Some(7), 0, 32000);
        assert_eq!(a.token(5), b.token(5));
        assert_ne!(a.token(5).0, c.token(5).0);
        assert_ne!(a.token(5).0, d.token(5).0);
        assert!(a.token(0).0 >= 256 && a.token(0).1 <= 0.0);
    }
}
