//! `RequestRecord`: what loadgen measured and read for one request, and the
//! `--records` JSONL writer.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// How one request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestStatus {
    /// 2xx, no error in the body, not aborted.
    Ok,
    /// Transport error, non-2xx, error body or chunk, abort, or per-request timeout.
    Failed,
    /// Still in flight when `max_duration_secs` ran out.
    Cancelled,
}

/// One request, as one line of the `--records` file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Dispatch order within the run (0-based).
    pub index: u64,
    /// Workload origin, e.g. `g3/s1`, `sess2/t0`, `trace17`, `b0/g3/s1`, `ten5/r17`.
    pub tag: String,
    /// The rollout batch (rollout only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
    /// `X-SMG-Routing-Key` sent, if any.
    pub routing_key: Option<String>,
    /// Base URL the request went to.
    pub url: String,
    /// `x-kvrouter-worker` response header, else `direct` (`direct@host:port` with several URLs).
    pub worker: String,
    pub status: RequestStatus,
    pub http_status: Option<u16>,
    pub error: Option<String>,
    /// When the workload meant to send it, ms from run start. Like every duration
    /// here it is in simulated time (wall time x `sim_speedup`).
    pub scheduled_ms: f64,
    /// When it was sent (after waiting for a concurrency slot), ms from run start.
    pub start_ms: f64,
    /// Time to first SSE data chunk; equals `e2e_ms` for non-streaming requests.
    pub ttft_ms: Option<f64>,
    /// Send to last byte.
    pub e2e_ms: f64,
    /// Prompt tokens loadgen sent.
    pub prompt_len: u64,
    /// Prompt tokens the server reported.
    pub prompt_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub finish_reason: Option<String>,
}

impl RequestRecord {
    pub fn is_ok(&self) -> bool {
        self.status == RequestStatus::Ok
    }

    /// When its response ended, ms from run start.
    pub fn end_ms(&self) -> f64 {
        self.start_ms + self.e2e_ms
    }
}

/// One `--records` line: the record plus `ok` (status is ok), for readers that want a
/// boolean; reading a line back as a `RequestRecord` ignores it.
#[derive(Serialize)]
struct Line<'a> {
    #[serde(flatten)]
    record: &'a RequestRecord,
    ok: bool,
}

/// Writes `records` as JSON lines to `path` (replacing it).
pub fn write_jsonl(path: &Path, records: &[RequestRecord]) -> anyhow::Result<()> {
    use anyhow::Context;
    let file = std::fs::File::create(path)
        .with_context(|| format!("cannot create records file {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    for r in records {
        serde_json::to_writer(
            &mut out,
            &Line {
                record: r,
                ok: r.is_ok(),
            },
        )?;
        out.write_all(b"\n")?;
    }
    out.flush()
        .with_context(|| format!("cannot write records file {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_carry_ok_and_read_back() {
        let r = RequestRecord {
            index: 3,
            tag: "b0/g1/s2".into(),
            batch: Some(0),
            routing_key: None,
            url: "http://127.0.0.1:1".into(),
            worker: "direct".into(),
            status: RequestStatus::Ok,
            http_status: Some(200),
            error: None,
            scheduled_ms: 0.0,
            start_ms: 1.0,
            ttft_ms: Some(2.0),
            e2e_ms: 2.0,
            prompt_len: 8,
            prompt_tokens: Some(8),
            cached_tokens: Some(0),
            completion_tokens: Some(4),
            finish_reason: Some("length".into()),
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let failed = RequestRecord {
            status: RequestStatus::Failed,
            batch: None,
            ..r.clone()
        };
        write_jsonl(&path, &[r.clone(), failed]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["ok"], true);
        assert_eq!(lines[0]["batch"], 0);
        assert_eq!(lines[1]["ok"], false);
        assert!(lines[1].get("batch").is_none());
        let back: RequestRecord = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
