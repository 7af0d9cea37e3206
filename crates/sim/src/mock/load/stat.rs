//! SGLang 0.5.23's `LoadStat` (`managers/scheduler_components/load_publisher.py`) and its
//! msgpack form: a msgspec tagged array without `omit_defaults`,
//! `["LoadStat", num_running_reqs, num_waiting_reqs, num_tokens, max_total_num_tokens,
//! attn_dp_rank, num_waiting_uncached_tokens, num_total_tokens, max_running_requests,
//! total_prefill_uncached_tokens, total_prefill_busy_us]`, integers in their smallest form.

use rmp::encode as mp;

/// One rank's load reading, fields in SGLang's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadStat {
    pub num_running_reqs: u64,
    pub num_waiting_reqs: u64,
    /// KV tokens in use.
    pub num_tokens: u64,
    /// KV capacity.
    pub max_total_num_tokens: u64,
    pub attn_dp_rank: u64,
    /// Uncached prompt tokens awaiting prefill.
    pub num_waiting_uncached_tokens: u64,
    /// KV tokens in use plus queued request tokens.
    pub num_total_tokens: u64,
    pub max_running_requests: u64,
    /// Cumulative uncached prefill tokens.
    pub total_prefill_uncached_tokens: u64,
    /// Cumulative prefill step time in microseconds.
    pub total_prefill_busy_us: u64,
}

impl LoadStat {
    /// The fields in wire order.
    pub fn fields(&self) -> [u64; 10] {
        [
            self.num_running_reqs,
            self.num_waiting_reqs,
            self.num_tokens,
            self.max_total_num_tokens,
            self.attn_dp_rank,
            self.num_waiting_uncached_tokens,
            self.num_total_tokens,
            self.max_running_requests,
            self.total_prefill_uncached_tokens,
            self.total_prefill_busy_us,
        ]
    }

    /// The msgpack payload, as `msgspec.msgpack.Encoder().encode(LoadStat(...))` writes it.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48);
        // Writes into a Vec cannot fail.
        let _ = self.write(&mut out);
        out
    }

    fn write(&self, out: &mut Vec<u8>) -> Result<(), mp::ValueWriteError> {
        mp::write_array_len(out, 11)?;
        mp::write_str(out, "LoadStat")?;
        for v in self.fields() {
            mp::write_uint(out, v)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_idle_reading() {
        // Observed from SGLang 0.5.23 (docs: reference "Load publisher"); also in
        // tests/data/server_info/load_stat.json.
        let s = LoadStat {
            num_tokens: 336,
            max_total_num_tokens: 65536,
            num_total_tokens: 336,
            max_running_requests: 256,
            ..LoadStat::default()
        };
        let hex: String = s.encode().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "9ba84c6f6164537461740000cd0150ce000100000000cd0150cd01000000"
        );
    }
}
