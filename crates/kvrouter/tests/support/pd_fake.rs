//! A small in-process PD fake of SGLang workers (hyper), until `sglang-mock` has its PD roles:
//! `--disaggregation-mode prefill|decode` behaviour as shared/reference/pd.md §3.1 and §3.6 state
//! it. Both roles answer 400 "Disaggregated request received without bootstrap room id" to a
//! body without `bootstrap_room`; `bootstrap_host` 2.2.2.2 completes locally (SGLang's fake
//! transfer). Otherwise the prefill and decode of one room meet in a [`Rendezvous`] shared by the
//! fleet (standing in for the bootstrap server and the KV transfer): the prefill answers after
//! the decode of its room arrived, the decode after the prefill's transfer, each waiting up to
//! 300 s (SGLang's bootstrap and waiting timeouts) — so a leg the router forgets to cancel hangs.
//! Every data request's body is recorded, every response the fake sent too, and a data request
//! whose connection went away before its answer counts as `cancelled`. A fleet test only reads
//! URLs, bodies and counters, so switching to `sglang-mock` later swaps [`PdFleet::start`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use serde_json::{json, Value};

use super::stub::json_resp;

/// How long a leg waits for its peer (SGLang's 300 s defaults).
const PEER_WAIT: Duration = Duration::from_secs(300);

/// The rooms of a fleet: which decodes arrived and which transfers are done.
#[derive(Default)]
pub struct Rendezvous {
    rooms: Mutex<HashMap<u64, (bool, bool)>>,
    changed: Mutex<Option<tokio::sync::watch::Sender<u64>>>,
}

impl Rendezvous {
    fn sender(&self) -> tokio::sync::watch::Sender<u64> {
        self.changed
            .lock()
            .get_or_insert_with(|| tokio::sync::watch::channel(0).0)
            .clone()
    }

    fn update(&self, rooms: &[u64], decode: bool) {
        let mut map = self.rooms.lock();
        for r in rooms {
            let e = map.entry(*r).or_default();
            if decode {
                e.0 = true;
            } else {
                e.1 = true;
            }
        }
        drop(map);
        self.sender().send_modify(|v| *v += 1);
    }

    /// Waits until `done` holds for every room (false after [`PEER_WAIT`]).
    async fn wait(&self, rooms: &[u64], done: impl Fn((bool, bool)) -> bool) -> bool {
        let mut rx = self.sender().subscribe();
        let all = || {
            let map = self.rooms.lock();
            rooms.iter().all(|r| map.get(r).is_some_and(|e| done(*e)))
        };
        let wait = async {
            while !all() {
                if rx.changed().await.is_err() {
                    return false;
                }
            }
            true
        };
        tokio::time::timeout(PEER_WAIT, wait).await.unwrap_or(false)
    }
}

/// What a data request does instead of its role's work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fail {
    #[default]
    None,
    /// Answer this status at once.
    Status(u16),
    /// Close the connection without an answer.
    Drop,
}

/// One fake's recorded traffic and settings.
#[derive(Default)]
pub struct PdState {
    /// (path, body) of every data request.
    pub bodies: Vec<(String, Bytes)>,
    /// Every data response body sent (whole, streams concatenated).
    pub responses: Vec<Bytes>,
    /// Requests per path.
    pub hits: HashMap<String, u64>,
    /// Data requests whose client went away before the answer.
    pub cancelled: u64,
    pub fail: Fail,
    pub dp_size: u32,
    /// Prompts (`input_ids`) prefilled before: a radix cache of whole prompts, so a repeated
    /// prompt reports its cached pages in `cached_tokens` as SGLang does.
    pub seen: std::collections::HashSet<String>,
}

/// A running PD fake worker.
pub struct PdFake {
    pub url: String,
    pub port: u16,
    pub role: &'static str,
    pub state: Arc<Mutex<PdState>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PdFake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PdFake {
    /// Starts a `role` ("prefill" / "decode") fake on an ephemeral port.
    pub async fn start(role: &'static str, dp_size: u32, rendezvous: Arc<Rendezvous>) -> PdFake {
        let state = Arc::new(Mutex::new(PdState {
            dp_size,
            ..PdState::default()
        }));
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                let rv = rendezvous.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (st, rv) = (st.clone(), rv.clone());
                        async move { answer(role, req, st, rv).await }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        PdFake {
            url: format!("http://127.0.0.1:{port}"),
            port,
            role,
            state,
            task,
        }
    }

    pub fn hits(&self, path: &str) -> u64 {
        self.state.lock().hits.get(path).copied().unwrap_or(0)
    }
    pub fn bodies(&self) -> Vec<(String, Bytes)> {
        self.state.lock().bodies.clone()
    }
    pub fn responses(&self) -> Vec<Bytes> {
        self.state.lock().responses.clone()
    }
    pub fn cancelled(&self) -> u64 {
        self.state.lock().cancelled
    }
    pub fn set_fail(&self, fail: Fail) {
        self.state.lock().fail = fail;
    }
    /// Data requests received (bodies recorded).
    pub fn served(&self) -> usize {
        self.state.lock().bodies.len()
    }
}

/// A fleet of fakes sharing one rendezvous.
pub struct PdFleet {
    pub prefill: Vec<PdFake>,
    pub decode: Vec<PdFake>,
}

impl PdFleet {
    /// `p` prefill and `d` decode fakes (prefill DP size `p_dp`, decode `d_dp`).
    pub async fn start(p: usize, d: usize, p_dp: u32, d_dp: u32) -> PdFleet {
        let rv = Arc::new(Rendezvous::default());
        let mut prefill = Vec::new();
        for _ in 0..p {
            prefill.push(PdFake::start("prefill", p_dp, rv.clone()).await);
        }
        let mut decode = Vec::new();
        for _ in 0..d {
            decode.push(PdFake::start("decode", d_dp, rv.clone()).await);
        }
        PdFleet { prefill, decode }
    }

    /// `--pd-disaggregation --prefill URL PORT ... --decode URL ...` (bootstrap port 8998 +i).
    pub fn router_args(&self) -> Vec<String> {
        let mut args = vec!["--pd-disaggregation".to_string()];
        for (i, p) in self.prefill.iter().enumerate() {
            args.extend(["--prefill".into(), p.url.clone(), (8998 + i).to_string()]);
        }
        for d in &self.decode {
            args.extend(["--decode".into(), d.url.clone()]);
        }
        args
    }
}

fn server_info(role: &str, dp_size: u32) -> Value {
    json!({
        "model_path": "pd-model", "tokenizer_path": "pd-model", "served_model_name": "pd-model",
        "page_size": 16, "dp_size": dp_size, "tp_size": 1, "pp_size": 1,
        "enable_dp_attention": dp_size > 1, "max_running_requests": null,
        "disable_radix_cache": false, "kv_events_config": null, "max_total_num_tokens": 65536,
        "disaggregation_mode": role, "disaggregation_bootstrap_port": 8998,
        "internal_states": [{"effective_max_running_requests_per_dp": 256, "page_size": 16}],
        "version": "0.5.23"
    })
}

/// Counts the request as cancelled if dropped before `answered`.
struct CancelWatch {
    state: Arc<Mutex<PdState>>,
    answered: bool,
}

impl Drop for CancelWatch {
    fn drop(&mut self) {
        if !self.answered {
            self.state.lock().cancelled += 1;
        }
    }
}

fn as_list(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a.clone(),
        Value::Null => vec![],
        other => vec![other.clone()],
    }
}

async fn answer(
    role: &'static str,
    req: Request<Incoming>,
    state: Arc<Mutex<PdState>>,
    rv: Arc<Rendezvous>,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let path = req.uri().path().to_string();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let (fail, dp) = {
        let mut st = state.lock();
        *st.hits.entry(path.clone()).or_default() += 1;
        (st.fail, st.dp_size)
    };
    let data = matches!(
        path.as_str(),
        "/generate" | "/v1/chat/completions" | "/v1/completions"
    );
    if !data {
        return Ok(match path.as_str() {
            "/health" => json_resp(200, &json!({})),
            "/server_info" | "/get_server_info" => json_resp(200, &server_info(role, dp)),
            "/model_info" | "/get_model_info" => json_resp(
                200,
                &json!({"model_path": "pd-model", "is_generation": true, "role": role}),
            ),
            "/flush_cache" | "/abort_request" => json_resp(200, &json!({"success": true})),
            _ => json_resp(404, &json!({"detail": "Not Found"})),
        });
    }
    state.lock().bodies.push((path.clone(), body.clone()));
    match fail {
        Fail::Status(s) => {
            return Ok(json_resp(
                s,
                &json!({"error": {"message": format!("{role} failed on purpose")}}),
            ))
        }
        Fail::Drop => return Err(std::io::Error::other("dropped on purpose")),
        Fail::None => {}
    }
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let rooms: Vec<u64> = as_list(&v["bootstrap_room"])
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    if rooms.is_empty() {
        return Ok(json_resp(
            400,
            &json!({"error": {"message": "Disaggregated request received without bootstrap room id"}}),
        ));
    }
    let fake_host = as_list(&v["bootstrap_host"]).iter().all(|h| h == "2.2.2.2");
    let mut watch = CancelWatch {
        state: state.clone(),
        answered: false,
    };
    if !fake_host {
        let met = if role == "prefill" {
            let ok = rv.wait(&rooms, |(decode, _)| decode).await;
            rv.update(&rooms, false);
            ok
        } else {
            rv.update(&rooms, true);
            rv.wait(&rooms, |(_, transferred)| transferred).await
        };
        if !met {
            watch.answered = true;
            return Ok(json_resp(
                500,
                &json!({"error": {"message": format!("{role}: KV transfer timed out")}}),
            ));
        }
    }
    watch.answered = true;
    let key = v["input_ids"].to_string();
    let cached = !state.lock().seen.insert(key);
    let (content_type, out) = output(role, &path, &v, rooms.len(), cached);
    state.lock().responses.push(out.clone());
    Ok(Response::builder()
        .status(200)
        .header("content-type", content_type)
        .header("x-fake-role", role)
        .body(Full::new(out))
        .expect("response"))
}

/// The role's answer for a data request `v` with `n` rooms (`cached`: its prompt was seen).
fn output(role: &str, path: &str, v: &Value, n: usize, cached: bool) -> (&'static str, Bytes) {
    let stream = v["stream"].as_bool() == Some(true);
    let logprob = v["return_logprob"].as_bool() == Some(true);
    let prompts: Vec<Vec<u64>> = match &v["input_ids"] {
        Value::Array(a) if a.first().is_some_and(Value::is_array) => a
            .iter()
            .map(|p| as_list(p).iter().filter_map(Value::as_u64).collect())
            .collect(),
        Value::Array(a) => vec![a.iter().filter_map(Value::as_u64).collect()],
        _ => vec![vec![1, 2, 3]; n],
    };
    let meta = |ids: &[u64], i: usize| {
        let mut m = json!({"id": format!("{role}-{i}"), "prompt_tokens": ids.len(),
            "completion_tokens": if role == "prefill" { 0 } else { 2 },
            "cached_tokens": if cached { ids.len().saturating_sub(1) / 16 * 16 } else { 0 },
            "finish_reason": {"type": "length", "length": if role == "prefill" { 0 } else { 2 }}});
        if logprob {
            m["input_token_logprobs"] = if role == "prefill" {
                Value::Array(
                    ids.iter()
                        .enumerate()
                        .map(|(k, t)| {
                            json!([if k == 0 { Value::Null } else { json!(-0.25) }, t, null])
                        })
                        .collect(),
                )
            } else {
                json!([[-0.5, 999, null]])
            };
        }
        m
    };
    let text = if role == "prefill" { "" } else { "decoded" };
    let body = match path {
        "/generate" => {
            let items: Vec<Value> = prompts
                .iter()
                .enumerate()
                .map(|(i, ids)| json!({"text": text, "meta_info": meta(ids, i)}))
                .collect();
            if stream {
                let mut s = String::new();
                for item in &items {
                    s.push_str(&format!("data: {item}\n\n"));
                }
                s.push_str("data: [DONE]\n\n");
                return ("text/event-stream", Bytes::from(s));
            }
            if items.len() == 1
                && !v["input_ids"]
                    .as_array()
                    .is_some_and(|a| a.first().is_some_and(Value::is_array))
            {
                items[0].clone()
            } else {
                Value::Array(items)
            }
        }
        "/v1/chat/completions" => {
            if stream {
                let chunk = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"content": text}}]});
                return (
                    "text/event-stream",
                    Bytes::from(format!("data: {chunk}\n\ndata: [DONE]\n\n")),
                );
            }
            let choices: Vec<Value> = (0..n)
                .map(|i| json!({"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}))
                .collect();
            json!({"id": "chatcmpl-1", "object": "chat.completion", "choices": choices,
                   "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
        }
        _ => {
            let choices: Vec<Value> = (0..n)
                .map(|i| json!({"index": i, "text": text, "finish_reason": "length"}))
                .collect();
            if stream {
                let chunk =
                    json!({"id": "cmpl-1", "object": "text_completion", "choices": choices});
                return (
                    "text/event-stream",
                    Bytes::from(format!("data: {chunk}\n\ndata: [DONE]\n\n")),
                );
            }
            json!({"id": "cmpl-1", "object": "text_completion", "choices": choices,
                   "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
        }
    };
    ("application/json", Bytes::from(body.to_string()))
}
