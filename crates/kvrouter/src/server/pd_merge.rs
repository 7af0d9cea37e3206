//! The client's response from the two legs: the decode response as it is, except that with
//! `return_logprob` the prefill's `meta_info.input_token_logprobs` are prepended to the
//! decode's (in a whole body, per element of a batch; in a stream, to every decode event,
//! from the prefill's first event, as sgl-router's mini_lb does). The merge replaces only the
//! bytes of that one list; everything else is the decode worker's bytes. Also the prefill's
//! error heads mapped to the client's error, and the relay rewrites that end (or cancel) the
//! prefill leg with the decode body.

use bytes::{Bytes, BytesMut};
use http::StatusCode;
use serde::Deserialize;
use serde_json::value::RawValue;

use std::sync::Arc;

use crate::proxy::abort::abort_isolated;
use crate::proxy::rids::RidGuard;
use crate::proxy::{FrameRewrite, UpstreamClient};
use crate::server::error::ApiError;
use crate::workers::Worker;

#[derive(Deserialize)]
struct Top<'a> {
    #[serde(borrow, default)]
    meta_info: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(borrow, default)]
    input_token_logprobs: Option<&'a RawValue>,
}

/// The raw `meta_info.input_token_logprobs` of one response object, a slice of `obj`.
fn logprobs_raw(obj: &str) -> Option<&str> {
    let top: Top<'_> = serde_json::from_str(obj).ok()?;
    let meta: Meta<'_> = serde_json::from_str(top.meta_info?.get()).ok()?;
    meta.input_token_logprobs.map(RawValue::get)
}

/// Offset of `part` (a subslice of `whole`) in `whole`.
fn offset(whole: &str, part: &str) -> usize {
    part.as_ptr() as usize - whole.as_ptr() as usize
}

/// `prefill ++ decode` of two JSON arrays (raw).
fn concat(prefill: &str, decode: &str) -> Option<String> {
    let inner = |s: &str| -> Option<String> {
        let t = s.trim();
        t.strip_prefix('[')?
            .strip_suffix(']')
            .map(|i| i.trim().to_string())
    };
    let p = inner(prefill)?;
    let d = inner(decode)?;
    Some(match (p.is_empty(), d.is_empty()) {
        (true, _) => format!("[{d}]"),
        (_, true) => format!("[{p}]"),
        _ => format!("[{p},{d}]"),
    })
}

/// One decode object with `prefill_list` prepended to its input logprobs (`None`: unchanged).
fn merge_object(decode: &str, prefill_list: &str) -> Option<String> {
    let raw = logprobs_raw(decode)?;
    let merged = concat(prefill_list, raw)?;
    let at = offset(decode, raw);
    Some(format!(
        "{}{merged}{}",
        &decode[..at],
        &decode[at + raw.len()..]
    ))
}

/// A whole decode body with the prefill body's input logprobs merged in (objects, or arrays
/// of objects element by element); `None` when there is nothing to merge.
pub(crate) fn merge_bodies(prefill: &[u8], decode: &[u8]) -> Option<Bytes> {
    let p = std::str::from_utf8(prefill).ok()?;
    let d = std::str::from_utf8(decode).ok()?;
    let starts_array = |s: &str| s.trim_start().starts_with('[');
    if !starts_array(d) {
        return merge_object(d, logprobs_raw(p)?).map(Bytes::from);
    }
    let ps: Vec<&RawValue> = serde_json::from_str(p).ok()?;
    let ds: Vec<&RawValue> = serde_json::from_str(d).ok()?;
    let mut out = String::with_capacity(d.len() + p.len());
    let mut at = 0;
    let mut changed = false;
    for (pe, de) in ps.iter().zip(&ds) {
        let Some(list) = logprobs_raw(pe.get()) else {
            continue;
        };
        let Some(merged) = merge_object(de.get(), list) else {
            continue;
        };
        let start = offset(d, de.get());
        out.push_str(&d[at..start]);
        out.push_str(&merged);
        at = start + de.get().len();
        changed = true;
    }
    out.push_str(&d[at..]);
    changed.then(|| Bytes::from(out))
}

/// The input logprobs (raw list) of the first SSE `data:` event of a prefill stream.
pub(crate) fn first_event_logprobs(event: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(event).ok()?;
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .find(|d| d.starts_with('{'))
        .and_then(logprobs_raw)
        .map(str::to_string)
}

/// The end of the first complete SSE event in `buf` (after its blank line), if any.
pub(crate) fn event_end(buf: &[u8]) -> Option<usize> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// One SSE event with `prefill_list` prepended to each `data:` object's input logprobs.
fn merge_event(event: &[u8], prefill_list: &str) -> Option<Bytes> {
    let text = std::str::from_utf8(event).ok()?;
    let mut out = String::with_capacity(text.len() + prefill_list.len());
    let mut changed = false;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let merged = body
            .strip_prefix("data:")
            .and_then(|d| {
                let lead = d.len() - d.trim_start().len();
                merge_object(d.trim_start(), prefill_list).map(|m| (lead, m))
            })
            .map(|(lead, m)| format!("data:{}{m}", " ".repeat(lead)));
        match merged {
            Some(m) => {
                out.push_str(&m);
                out.push_str(&line[body.len()..]);
                changed = true;
            }
            None => out.push_str(line),
        }
    }
    changed.then(|| Bytes::from(out))
}

/// The client's error for a prefill leg that answered `status` with `body`: its 4xx as it is
/// (`prefill_bad_request`), a 5xx as 502 `prefill_server_error` (SMG's codes).
pub(crate) fn prefill_error(status: StatusCode, url: &str, body: &[u8]) -> ApiError {
    let shown: String = String::from_utf8_lossy(&body[..body.len().min(2048)]).into_owned();
    let (status, code) = if status.is_client_error() {
        (status, "prefill_bad_request")
    } else {
        (StatusCode::BAD_GATEWAY, "prefill_server_error")
    };
    ApiError::new(
        status,
        code,
        format!("prefill worker {url} answered {status}: {shown}"),
    )
}

/// The prefill leg while the decode body is relayed: its drain task, and whom to abort if
/// the decode body does not end cleanly (client gone, decode broken).
pub(crate) struct PrefillLeg {
    pub task: Option<tokio::task::JoinHandle<()>>,
    pub client: UpstreamClient,
    /// Where the prefill's aborts are sent from.
    pub tasks: crate::tasks::Tasks,
    /// The prefill worker.
    pub worker: Arc<Worker>,
    /// The request's tracked rids (see `RidGuard::abortable`).
    pub rids: Option<RidGuard>,
    /// Set when the decode body ended cleanly: the drain then runs to its own end.
    pub decode_done: bool,
}

impl Drop for PrefillLeg {
    fn drop(&mut self) {
        if self.decode_done {
            return;
        }
        if let Some(task) = self.task.take() {
            if !task.is_finished() {
                task.abort();
                abort_isolated(&self.tasks, &self.client, &self.worker, self.rids.as_ref());
            }
        }
    }
}

/// The decode body unchanged (the rewrite only ends or cancels the prefill leg).
pub(crate) struct Passthrough(pub PrefillLeg);

impl FrameRewrite for Passthrough {
    fn data(&mut self, chunk: Bytes) -> Bytes {
        chunk
    }
    fn end(&mut self) -> Option<Bytes> {
        self.0.decode_done = true;
        None
    }
    fn passthrough(&self) -> bool {
        true
    }
}

/// The decode SSE stream with the prefill's input logprobs merged into every event.
pub(crate) struct SseMerge {
    pub leg: PrefillLeg,
    pub prefill_list: String,
    pub buf: BytesMut,
}

impl FrameRewrite for SseMerge {
    fn data(&mut self, chunk: Bytes) -> Bytes {
        self.buf.extend_from_slice(&chunk);
        let mut out = BytesMut::new();
        while let Some(end) = event_end(&self.buf) {
            let event = self.buf.split_to(end).freeze();
            match merge_event(&event, &self.prefill_list) {
                Some(m) => out.extend_from_slice(&m),
                None => out.extend_from_slice(&event),
            }
        }
        out.freeze()
    }
    fn end(&mut self) -> Option<Bytes> {
        self.leg.decode_done = true;
        Some(self.buf.split().freeze())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn merges_only_the_logprob_list() {
        let p = br#"{"text":"","meta_info":{"input_token_logprobs":[[null,1,null],[-0.5,2,null]],"id":"p"}}"#;
        let d = br#"{"text":"out", "meta_info":{"id":"d","input_token_logprobs":[[-0.25,3,null]] ,"x":1}}"#;
        let m = merge_bodies(p, d).unwrap();
        assert_eq!(
            std::str::from_utf8(&m).unwrap(),
            r#"{"text":"out", "meta_info":{"id":"d","input_token_logprobs":[[null,1,null],[-0.5,2,null],[-0.25,3,null]] ,"x":1}}"#
        );
        let none = br#"{"meta_info":{"input_token_logprobs":null}}"#;
        assert!(
            merge_bodies(p, none).is_none(),
            "a null decode list stays null"
        );
        assert!(merge_bodies(p, br#"{"meta_info":{}}"#).is_none());
        let pb = format!(
            "[{}, {}]",
            std::str::from_utf8(p).unwrap(),
            r#"{"meta_info":{"input_token_logprobs":[[0,9,null]]}}"#
        );
        let db = r#"[{"meta_info":{"input_token_logprobs":[]}},{"meta_info":{"input_token_logprobs":[[1,8,null]]}}]"#;
        let m = merge_bodies(pb.as_bytes(), db.as_bytes()).unwrap();
        assert_eq!(
            std::str::from_utf8(&m).unwrap(),
            r#"[{"meta_info":{"input_token_logprobs":[[null,1,null],[-0.5,2,null]]}},{"meta_info":{"input_token_logprobs":[[0,9,null],[1,8,null]]}}]"#
        );
    }

    #[test]
    fn merges_sse_events_across_chunks() {
        let first = b"data: {\"meta_info\":{\"input_token_logprobs\":[[null,1,null]]}}\n\n";
        let list = first_event_logprobs(first).unwrap();
        assert_eq!(list, "[[null,1,null]]");
        let leg = PrefillLeg {
            task: None,
            tasks: crate::tasks::Tasks::new(),
            client: crate::proxy::client::build_client(
                std::time::Duration::from_secs(1),
                std::time::Duration::from_secs(1),
            ),
            worker: Arc::new(Worker::new(
                crate::workers::WorkerId(0),
                "http://127.0.0.1:1",
                crate::workers::WorkerInfo::default(),
            )),
            rids: None,
            decode_done: false,
        };
        let mut rw = SseMerge {
            leg,
            prefill_list: list,
            buf: BytesMut::new(),
        };
        let a = rw.data(Bytes::from_static(
            b"data: {\"text\":\"a\",\"meta_info\":{\"input_token_logprobs\":[[-1,2,null]]}}",
        ));
        assert!(a.is_empty());
        let b = rw.data(Bytes::from_static(b"\n\ndata: [DONE]\n\n"));
        assert_eq!(
            std::str::from_utf8(&b).unwrap(),
            "data: {\"text\":\"a\",\"meta_info\":{\"input_token_logprobs\":[[null,1,null],[-1,2,null]]}}\n\ndata: [DONE]\n\n"
        );
        assert_eq!(rw.end().unwrap().len(), 0);
        assert!(rw.leg.decode_done);
    }

    #[test]
    fn prefill_errors_name_the_leg() {
        let e = prefill_error(StatusCode::BAD_REQUEST, "http://p:1", b"no room");
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_REQUEST, "prefill_bad_request")
        );
        assert!(e.message.contains("prefill worker http://p:1") && e.message.contains("no room"));
        let e = prefill_error(StatusCode::SERVICE_UNAVAILABLE, "http://p:1", b"");
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_GATEWAY, "prefill_server_error")
        );
    }
}
