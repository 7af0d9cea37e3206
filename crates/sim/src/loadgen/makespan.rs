//! Makespans of rollout batches, from the records: a batch's makespan runs from its
//! first request sent to its last response received (any status, so a batch held
//! up by a failing request still shows it), in simulated seconds like every record.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::record::RequestRecord;

/// One rollout batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchSummary {
    pub batch: u32,
    pub makespan_secs: f64,
    /// Requests sent in the batch (any status).
    pub requests: u64,
    pub ok: u64,
}

/// Makespans over the batches.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MakespanSummary {
    pub mean: f64,
    pub max: f64,
    /// Sum of the batches' makespans.
    pub total: f64,
}

/// The batches of `records` (those with a `batch`), in batch order.
pub fn batches(records: &[RequestRecord]) -> Vec<BatchSummary> {
    struct Span {
        first_start: f64,
        last_end: f64,
        requests: u64,
        ok: u64,
    }
    let mut spans: BTreeMap<u32, Span> = BTreeMap::new();
    for r in records {
        let Some(b) = r.batch else { continue };
        let span = spans.entry(b).or_insert(Span {
            first_start: f64::INFINITY,
            last_end: f64::NEG_INFINITY,
            requests: 0,
            ok: 0,
        });
        span.first_start = span.first_start.min(r.start_ms);
        span.last_end = span.last_end.max(r.end_ms());
        span.requests += 1;
        span.ok += u64::from(r.is_ok());
    }
    spans
        .into_iter()
        .map(|(batch, s)| BatchSummary {
            batch,
            makespan_secs: (s.last_end - s.first_start).max(0.0) / 1000.0,
            requests: s.requests,
            ok: s.ok,
        })
        .collect()
}

/// Mean, max and total of the makespans; `None` without batches.
pub fn summary(batches: &[BatchSummary]) -> Option<MakespanSummary> {
    if batches.is_empty() {
        return None;
    }
    let total: f64 = batches.iter().map(|b| b.makespan_secs).sum();
    Some(MakespanSummary {
        mean: total / batches.len() as f64,
        max: batches.iter().map(|b| b.makespan_secs).fold(0.0, f64::max),
        total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::record::RequestStatus;

    fn rec(batch: Option<u32>, start_ms: f64, e2e_ms: f64, status: RequestStatus) -> RequestRecord {
        RequestRecord {
            index: 0,
            tag: "t".into(),
            batch,
            routing_key: None,
            url: "u".into(),
            worker: "w".into(),
            status,
            http_status: None,
            error: None,
            scheduled_ms: 0.0,
            start_ms,
            ttft_ms: None,
            e2e_ms,
            prompt_len: 1,
            prompt_tokens: None,
            cached_tokens: None,
            completion_tokens: None,
            finish_reason: None,
        }
    }

    #[test]
    fn a_batch_spans_first_send_to_last_response() {
        use RequestStatus::{Failed, Ok};
        let records = vec![
            rec(Some(0), 100.0, 500.0, Ok),      // ends 600
            rec(Some(0), 150.0, 1850.0, Failed), // ends 2000: the straggler counts
            rec(Some(1), 2000.0, 250.0, Ok),     // ends 2250
            rec(Some(1), 2010.0, 490.0, Ok),     // ends 2500
            rec(None, 0.0, 9000.0, Ok),          // not a rollout request
        ];
        let b = batches(&records);
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].batch, b[0].requests, b[0].ok), (0, 2, 1));
        assert!((b[0].makespan_secs - 1.9).abs() < 1e-9);
        assert!((b[1].makespan_secs - 0.5).abs() < 1e-9);
        let s = summary(&b).unwrap();
        assert!((s.mean - 1.2).abs() < 1e-9);
        assert!((s.max - 1.9).abs() < 1e-9);
        assert!((s.total - 2.4).abs() < 1e-9);
        assert_eq!(summary(&[]), None);
        assert!(batches(&records[4..]).is_empty());
    }
}
