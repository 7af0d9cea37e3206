//! `Summary`: the figures of one run, built from its records, serialisable as JSON
//! and printable as a table.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::makespan::{self, BatchSummary, MakespanSummary};
use super::record::{RequestRecord, RequestStatus};
use super::stats::{hit_rate, Percentiles};

/// Summary of one run (the `--json` output).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub workload: String,
    pub endpoint: String,
    pub stream: bool,
    pub urls: Vec<String>,
    pub seed: u64,
    /// Duration of the run in simulated seconds (wall x `sim_speedup`); every
    /// duration and rate here is in simulated time.
    pub duration_secs: f64,
    pub requests: RequestCounts,
    /// Over ok requests; first SSE data chunk when streaming, else equal to `e2e_ms`.
    pub ttft_ms: Option<Percentiles>,
    /// Over ok requests.
    pub e2e_ms: Option<Percentiles>,
    pub throughput: Throughput,
    pub tokens: TokenTotals,
    /// `tokens.cached / tokens.prompt_reported`; `None` if no response reported both.
    pub prefix_hit_rate: Option<f64>,
    /// By `x-kvrouter-worker` (or `direct`), in name order.
    pub per_worker: Vec<WorkerSummary>,
    /// Most frequent error messages, most frequent first (at most 5).
    pub errors: Vec<ErrorCount>,
    /// Rollout batches in order (absent for other workloads).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batches: Vec<BatchSummary>,
    /// Over `batches` (absent for other workloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub makespan_secs: Option<MakespanSummary>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCounts {
    pub total: u64,
    pub ok: u64,
    pub failed: u64,
    pub cancelled: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Ok requests per second of the run's (simulated) duration.
    pub requests_per_sec: f64,
    /// Completion tokens of ok requests per second of the run's (simulated) duration.
    pub output_tokens_per_sec: f64,
}

/// Token sums over ok requests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenTotals {
    /// Prompt tokens loadgen sent.
    pub prompt_sent: u64,
    /// `prompt_tokens` of responses that reported both it and `cached_tokens`.
    pub prompt_reported: u64,
    /// `cached_tokens` of those responses.
    pub cached: u64,
    /// `completion_tokens` reported.
    pub completion: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerSummary {
    pub worker: String,
    pub requests: u64,
    pub ok: u64,
    pub failed: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub hit_rate: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCount {
    pub message: String,
    pub count: u64,
}

/// Facts about the run that the records do not carry.
#[derive(Clone, Debug)]
pub struct RunMeta {
    pub workload: String,
    pub endpoint: String,
    pub stream: bool,
    pub urls: Vec<String>,
    pub seed: u64,
    pub duration_secs: f64,
}

#[derive(Default)]
struct Tally {
    requests: u64,
    ok: u64,
    failed: u64,
    prompt: u64,
    cached: u64,
}

impl Tally {
    fn add(&mut self, r: &RequestRecord) {
        self.requests += 1;
        match r.status {
            RequestStatus::Ok => self.ok += 1,
            RequestStatus::Failed => self.failed += 1,
            RequestStatus::Cancelled => {}
        }
        if let (true, Some(p), Some(c)) = (r.is_ok(), r.prompt_tokens, r.cached_tokens) {
            self.prompt += p;
            self.cached += c;
        }
    }
}

impl Summary {
    /// Aggregates `records` of a run described by `meta`.
    pub fn from_records(meta: RunMeta, records: &[RequestRecord]) -> Summary {
        let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.is_ok()).collect();
        let count = |s| records.iter().filter(|r| r.status == s).count() as u64;
        let mut all = Tally::default();
        let mut workers: BTreeMap<&str, Tally> = BTreeMap::new();
        for r in records {
            all.add(r);
            workers.entry(&r.worker).or_default().add(r);
        }
        let tokens = TokenTotals {
            prompt_sent: ok.iter().map(|r| r.prompt_len).sum(),
            prompt_reported: all.prompt,
            cached: all.cached,
            completion: ok.iter().filter_map(|r| r.completion_tokens).sum(),
        };
        let per_sec = |x: f64| {
            if meta.duration_secs > 0.0 {
                x / meta.duration_secs
            } else {
                0.0
            }
        };
        let mut errors: BTreeMap<String, u64> = BTreeMap::new();
        for r in records {
            if let Some(e) = &r.error {
                *errors.entry(error_kind(e)).or_default() += 1;
            }
        }
        let mut errors: Vec<ErrorCount> = errors
            .into_iter()
            .map(|(message, count)| ErrorCount { message, count })
            .collect();
        errors.sort_by(|a, b| b.count.cmp(&a.count).then(a.message.cmp(&b.message)));
        errors.truncate(5);
        let batches = makespan::batches(records);
        Summary {
            workload: meta.workload,
            endpoint: meta.endpoint,
            stream: meta.stream,
            urls: meta.urls,
            seed: meta.seed,
            duration_secs: meta.duration_secs,
            requests: RequestCounts {
                total: records.len() as u64,
                ok: ok.len() as u64,
                failed: count(RequestStatus::Failed),
                cancelled: count(RequestStatus::Cancelled),
            },
            ttft_ms: Percentiles::of(ok.iter().map(|r| r.ttft_ms.unwrap_or(r.e2e_ms))),
            e2e_ms: Percentiles::of(ok.iter().map(|r| r.e2e_ms)),
            throughput: Throughput {
                requests_per_sec: per_sec(ok.len() as f64),
                output_tokens_per_sec: per_sec(tokens.completion as f64),
            },
            prefix_hit_rate: hit_rate(tokens.cached, tokens.prompt_reported),
            tokens,
            per_worker: workers
                .into_iter()
                .map(|(worker, t)| WorkerSummary {
                    worker: worker.to_string(),
                    requests: t.requests,
                    ok: t.ok,
                    failed: t.failed,
                    prompt_tokens: t.prompt,
                    cached_tokens: t.cached,
                    hit_rate: hit_rate(t.cached, t.prompt),
                })
                .collect(),
            errors,
            makespan_secs: makespan::summary(&batches),
            batches,
        }
    }

    /// The human-readable table printed on stdout.
    pub fn render_table(&self) -> String {
        let mut s = String::new();
        let mode = if self.stream {
            "streaming"
        } else {
            "non-streaming"
        };
        let _ = writeln!(
            s,
            "loadgen {} -> {} ({mode}), {} url(s), seed {}, {:.2} s",
            self.workload,
            self.endpoint,
            self.urls.len(),
            self.seed,
            self.duration_secs
        );
        let r = &self.requests;
        let _ = writeln!(
            s,
            "requests        {} total, {} ok, {} failed, {} cancelled",
            r.total, r.ok, r.failed, r.cancelled
        );
        let _ = writeln!(
            s,
            "{:<14}{:>10}{:>10}{:>10}{:>10}{:>10}",
            "latency (ms)", "p50", "p90", "p99", "mean", "max"
        );
        for (name, p) in [("TTFT", &self.ttft_ms), ("end-to-end", &self.e2e_ms)] {
            match p {
                Some(p) => {
                    let _ = writeln!(
                        s,
                        "{name:<14}{:>10.2}{:>10.2}{:>10.2}{:>10.2}{:>10.2}",
                        p.p50, p.p90, p.p99, p.mean, p.max
                    );
                }
                None => {
                    let _ = writeln!(s, "{name:<14}{:>10}", "-");
                }
            }
        }
        let _ = writeln!(
            s,
            "throughput      {:.2} req/s, {:.1} output tok/s",
            self.throughput.requests_per_sec, self.throughput.output_tokens_per_sec
        );
        let t = &self.tokens;
        let _ = writeln!(
            s,
            "tokens          {} prompt sent, {} prompt reported, {} cached, {} completion",
            t.prompt_sent, t.prompt_reported, t.cached, t.completion
        );
        let _ = writeln!(s, "prefix hit rate {}", pct(self.prefix_hit_rate));
        if let Some(m) = &self.makespan_secs {
            let _ = writeln!(
                s,
                "makespan (s)    {} batches: mean {:.2}, max {:.2}, total {:.2}",
                self.batches.len(),
                m.mean,
                m.max,
                m.total
            );
        }
        let _ = writeln!(
            s,
            "{:<30}{:>9}{:>8}{:>8}{:>12}{:>12}{:>10}",
            "worker", "requests", "ok", "failed", "prompt tok", "cached tok", "hit rate"
        );
        for w in &self.per_worker {
            let _ = writeln!(
                s,
                "{:<30}{:>9}{:>8}{:>8}{:>12}{:>12}{:>10}",
                w.worker,
                w.requests,
                w.ok,
                w.failed,
                w.prompt_tokens,
                w.cached_tokens,
                pct(w.hit_rate)
            );
        }
        if !self.errors.is_empty() {
            let _ = writeln!(s, "errors");
            for e in &self.errors {
                let _ = writeln!(s, "  {:>6} x {}", e.count, e.message);
            }
        }
        s
    }
}

/// Groups error messages that differ only in sizes or ids: numbers of 4 or more
/// digits become `N` (status codes such as `HTTP 400` stay).
pub fn error_kind(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut digits = String::new();
    let flush = |digits: &mut String, out: &mut String| {
        if digits.len() >= 4 {
            out.push('N');
        } else {
            out.push_str(digits);
        }
        digits.clear();
    };
    for c in message.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            flush(&mut digits, &mut out);
            out.push(c);
        }
    }
    flush(&mut digits, &mut out);
    out
}

fn pct(rate: Option<f64>) -> String {
    rate.map_or_else(|| "-".to_string(), |r| format!("{:.2} %", r * 100.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(
        worker: &str,
        status: RequestStatus,
        e2e: f64,
        prompt: u64,
        cached: u64,
    ) -> RequestRecord {
        RequestRecord {
            index: 0,
            tag: "t".into(),
            batch: None,
            routing_key: None,
            url: "http://127.0.0.1:1".into(),
            worker: worker.into(),
            status,
            http_status: Some(200),
            error: (status == RequestStatus::Failed).then(|| "boom".to_string()),
            scheduled_ms: 0.0,
            start_ms: 0.0,
            ttft_ms: None,
            e2e_ms: e2e,
            prompt_len: prompt,
            prompt_tokens: Some(prompt),
            cached_tokens: Some(cached),
            completion_tokens: Some(4),
            finish_reason: Some("length".into()),
        }
    }

    fn meta() -> RunMeta {
        RunMeta {
            workload: "grpo".into(),
            endpoint: "generate".into(),
            stream: false,
            urls: vec!["http://127.0.0.1:1".into()],
            seed: 0,
            duration_secs: 2.0,
        }
    }

    #[test]
    fn hit_rate_sums_tokens_not_ratios() {
        let records = vec![
            record("a", RequestStatus::Ok, 10.0, 100, 0),
            record("a", RequestStatus::Ok, 20.0, 100, 96),
            record("b", RequestStatus::Ok, 30.0, 1000, 992),
            record("b", RequestStatus::Failed, 1.0, 50, 48),
            record("b", RequestStatus::Cancelled, 1.0, 50, 48),
        ];
        let s = Summary::from_records(meta(), &records);
        assert_eq!(
            s.requests,
            RequestCounts {
                total: 5,
                ok: 3,
                failed: 1,
                cancelled: 1
            }
        );
        assert_eq!(s.tokens.prompt_reported, 1200);
        assert_eq!(s.tokens.cached, 1088);
        assert_eq!(s.prefix_hit_rate, Some(1088.0 / 1200.0));
        assert_eq!(s.per_worker.len(), 2);
        assert_eq!(s.per_worker[0].worker, "a");
        assert_eq!(s.per_worker[0].hit_rate, Some(0.48));
        assert_eq!(
            (
                s.per_worker[1].requests,
                s.per_worker[1].ok,
                s.per_worker[1].failed
            ),
            (3, 1, 1)
        );
        assert_eq!(s.per_worker[1].hit_rate, Some(0.992));
        assert_eq!(s.throughput.requests_per_sec, 1.5);
        assert_eq!(s.throughput.output_tokens_per_sec, 6.0);
        // Non-streaming: TTFT equals end-to-end.
        assert_eq!(s.ttft_ms, s.e2e_ms);
        assert_eq!(s.e2e_ms.unwrap().p50, 20.0);
        assert_eq!(
            s.errors,
            vec![ErrorCount {
                message: "boom".into(),
                count: 1
            }]
        );
    }

    #[test]
    fn responses_without_counts_do_not_dilute_the_hit_rate() {
        let mut r = record("a", RequestStatus::Ok, 1.0, 100, 0);
        r.cached_tokens = None;
        let s = Summary::from_records(meta(), &[r, record("a", RequestStatus::Ok, 1.0, 100, 50)]);
        assert_eq!(s.prefix_hit_rate, Some(0.5));
        let empty = Summary::from_records(meta(), &[]);
        assert_eq!(empty.prefix_hit_rate, None);
        assert_eq!(empty.ttft_ms, None);
    }

    #[test]
    fn errors_differing_in_sizes_group_together() {
        assert_eq!(
            error_kind("HTTP 400: The input (120633 tokens) is longer than 32768 tokens."),
            "HTTP 400: The input (N tokens) is longer than N tokens."
        );
        assert_eq!(error_kind("timeout after 5s"), "timeout after 5s");
        let mut a = record("a", RequestStatus::Failed, 1.0, 1, 0);
        a.error = Some("too long: 12345".into());
        let mut b = a.clone();
        b.error = Some("too long: 67890".into());
        let s = Summary::from_records(meta(), &[a, b]);
        assert_eq!(
            s.errors,
            vec![ErrorCount {
                message: "too long: N".into(),
                count: 2
            }]
        );
    }

    #[test]
    fn table_and_json_round_trip() {
        let s = Summary::from_records(meta(), &[record("w0", RequestStatus::Ok, 5.0, 64, 48)]);
        let table = s.render_table();
        assert!(table.contains("prefix hit rate 75.00 %"), "{table}");
        assert!(table.contains("w0"), "{table}");
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Summary>(&json).unwrap(), s);
    }
}
