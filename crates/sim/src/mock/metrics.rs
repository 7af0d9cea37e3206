//! SGLang's Prometheus metrics (`sglang:*` names) in a registry private to the mock, so
//! `/metrics` looks like a worker's and not like kvrouter's own `kvrouter_*` registry.
//! Counters and histograms are fed when requests finish; scheduler gauges are sampled
//! from each rank's load view at scrape time.

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

use crate::mock::engine::{Done, FinishReason, LoadView};

/// The mock's metric handles.
pub struct MockMetrics {
    registry: Registry,
    model: String,
    prompt_tokens: IntCounterVec,
    generation_tokens: IntCounterVec,
    cached_tokens: IntCounterVec,
    requests: IntCounterVec,
    aborted: IntCounterVec,
    ttft: HistogramVec,
    e2e: HistogramVec,
    gauges: Vec<(&'static str, GaugeVec)>,
}

const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
];

const GAUGES: &[(&str, &str)] = &[
    ("sglang:num_running_reqs", "The number of running requests."),
    (
        "sglang:num_queue_reqs",
        "The number of requests in the waiting queue.",
    ),
    ("sglang:num_used_tokens", "The number of used KV tokens."),
    (
        "sglang:token_usage",
        "The token usage (used / max, idle cache excluded).",
    ),
    (
        "sglang:cache_hit_rate",
        "The prefix cache hit rate of the latest prefill batch.",
    ),
    ("sglang:max_total_num_tokens", "The KV capacity in tokens."),
    (
        "sglang:gen_throughput",
        "The generation throughput (token/s).",
    ),
    (
        "sglang:decode_sum_seq_lens",
        "The sum of sequence lengths of the decode batch.",
    ),
    (
        "sglang:num_grammar_queue_reqs",
        "The number of requests in the grammar queue.",
    ),
];

impl MockMetrics {
    /// Handles labelled with `model_name`.
    pub fn new(model: &str) -> prometheus::Result<MockMetrics> {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| -> prometheus::Result<IntCounterVec> {
            let c = IntCounterVec::new(Opts::new(name, help), &["model_name"])?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let hist = |name: &str, help: &str| -> prometheus::Result<HistogramVec> {
            let h = HistogramVec::new(
                HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()),
                &["model_name"],
            )?;
            registry.register(Box::new(h.clone()))?;
            Ok(h)
        };
        let prompt_tokens = counter(
            "sglang:prompt_tokens_total",
            "Number of prefill tokens processed.",
        )?;
        let generation_tokens = counter(
            "sglang:generation_tokens_total",
            "Number of generation tokens processed.",
        )?;
        let cached_tokens = counter(
            "sglang:cached_tokens_total",
            "Number of cached prompt tokens.",
        )?;
        let requests = counter("sglang:num_requests_total", "Number of requests processed.")?;
        let aborted = counter(
            "sglang:num_aborted_requests_total",
            "Number of requests aborted.",
        )?;
        let ttft = hist(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
        )?;
        let e2e = hist(
            "sglang:e2e_request_latency_seconds",
            "Histogram of end-to-end request latency in seconds.",
        )?;
        let mut gauges = Vec::new();
        for (name, help) in GAUGES {
            let g = GaugeVec::new(Opts::new(*name, *help), &["model_name", "dp_rank"])?;
            registry.register(Box::new(g.clone()))?;
            gauges.push((*name, g));
        }
        Ok(MockMetrics {
            registry,
            model: model.to_string(),
            prompt_tokens,
            generation_tokens,
            cached_tokens,
            requests,
            aborted,
            ttft,
            e2e,
            gauges,
        })
    }

    /// Records a finished request.
    pub fn observe_done(&self, d: &Done) {
        let m = [self.model.as_str()];
        self.prompt_tokens
            .with_label_values(&m)
            .inc_by(d.prompt_tokens as u64);
        self.generation_tokens
            .with_label_values(&m)
            .inc_by(d.output_ids.len() as u64);
        self.cached_tokens
            .with_label_values(&m)
            .inc_by(d.cached_tokens as u64);
        self.requests.with_label_values(&m).inc();
        if matches!(d.finish, FinishReason::Abort(_)) {
            self.aborted.with_label_values(&m).inc();
        }
        if let Some(t) = d.ttft {
            self.ttft.with_label_values(&m).observe(t);
        }
    }

    /// Records an end-to-end latency measured by the HTTP side.
    pub fn observe_e2e(&self, secs: f64) {
        self.e2e
            .with_label_values(&[self.model.as_str()])
            .observe(secs);
    }

    /// Renders every metric, sampling gauges from `ranks` (load view, KV capacity).
    pub fn render(&self, ranks: &[(u32, LoadView)], max_total_tokens: usize) -> String {
        for (rank, v) in ranks {
            let r = rank.to_string();
            let labels = [self.model.as_str(), r.as_str()];
            let usage = v.snap.used_tokens as f64 / max_total_tokens as f64;
            let values = [
                v.snap.running as f64,
                v.snap.waiting as f64,
                v.snap.used_tokens as f64,
                usage,
                v.snap.last_hit_rate,
                max_total_tokens as f64,
                v.gen_throughput,
                v.snap.decode_sum_seq_lens as f64,
                0.0,
            ];
            for ((_, g), value) in self.gauges.iter().zip(values) {
                g.with_label_values(&labels).set(value);
            }
        }
        let mut buf = Vec::new();
        if TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .is_err()
        {
            return String::new();
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}
