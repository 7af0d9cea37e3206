//! `TextRouting`: which tokenizer text requests use, and running it off the executor.
//!
//! The tokenizer comes from `--tokenizer-path` / `--model-path` (loaded at start), else from
//! the `model_path` a worker reports, when that is a local directory holding a
//! `tokenizer.json` (loaded on the first text request that finds one). Nothing is ever
//! downloaded. Without a tokenizer, the KV policy routes text requests by approximate text
//! pages (`routing/input/approx.rs`) and counts them
//! (`kvrouter_routing_input_total{source="text_approx"}`), with one warning.
//!
//! Tokenization (and loading) runs in `tokio::task::spawn_blocking`, never on the async
//! executor threads; its duration and outcome are exported here.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts};
use tokio::time::Instant;

use super::TextTokenizer;

/// Text tokenization metrics.
pub struct TextMetrics {
    /// `kvrouter_text_tokenize_seconds{kind}`: render + tokenize time per request.
    pub seconds: HistogramVec,
    /// `kvrouter_text_requests_total{kind,outcome}`: text requests by outcome
    /// (`tokenized`, `no_tokenizer`, `error`).
    pub requests: IntCounterVec,
}

impl TextMetrics {
    pub fn get() -> &'static TextMetrics {
        static M: OnceLock<TextMetrics> = OnceLock::new();
        M.get_or_init(|| {
            let r = crate::metrics::registry();
            let seconds = HistogramVec::new(
                HistogramOpts::new(
                    "kvrouter_text_tokenize_seconds",
                    "Time to render and tokenize a text request for routing (off the executor)",
                )
                .buckets(vec![
                    1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.5,
                ]),
                &["kind"],
            )
            .unwrap_or_else(|e| unreachable!("static histogram: {e}"));
            let requests = IntCounterVec::new(
                Opts::new(
                    "kvrouter_text_requests_total",
                    "Text requests seen in KV mode, by kind and tokenization outcome",
                ),
                &["kind", "outcome"],
            )
            .unwrap_or_else(|e| unreachable!("static counter: {e}"));
            let _ = r.register(Box::new(seconds.clone()));
            let _ = r.register(Box::new(requests.clone()));
            TextMetrics { seconds, requests }
        })
    }
}

enum State {
    /// No tokenizer yet; worker-reported paths are still looked at.
    Pending,
    Ready(Arc<TextTokenizer>),
    /// Given up (a configured path failed, or a worker's path is not a local tokenizer).
    Unavailable,
}

/// What text requests are tokenized with (see module docs).
pub struct TextRouting {
    cache_bytes: usize,
    state: Mutex<State>,
    /// Worker model paths already tried (each warned about once).
    tried: Mutex<Vec<String>>,
}

/// What a text request asks to tokenize.
#[derive(Debug, Clone)]
pub enum TextPrompt {
    /// A chat request: the whole body (messages, tools, template kwargs).
    Chat(bytes::Bytes),
    /// `/generate` `text` or a completions `prompt` string.
    Text(String),
}

impl TextPrompt {
    fn kind(&self) -> &'static str {
        match self {
            TextPrompt::Chat(_) => "chat",
            TextPrompt::Text(_) => "text",
        }
    }
}

/// Where text requests' tokenizer comes from and its cache budget (`Config::text`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TextSettings {
    /// `--tokenizer-path`, else `--model-path`.
    pub tokenizer_path: Option<std::path::PathBuf>,
    /// Byte budget of the per-session tokenization cache (0: off).
    pub cache_bytes: usize,
}

impl TextRouting {
    /// With `configured` (`--tokenizer-path`, else `--model-path`) loaded now; a failure is
    /// logged once and text requests are then routed by approximate text pages. Without it, the start-up
    /// warning says text requests wait for a worker's local model path.
    pub fn new(configured: Option<&Path>, cache_bytes: usize) -> TextRouting {
        let state = match configured {
            Some(path) => match TextTokenizer::load(path, cache_bytes) {
                Ok(t) => {
                    tracing::info!(
                        path = %path.display(),
                        chat_template = t.has_chat_template(),
                        session_cache = t.caches(),
                        "text routing: tokenizer loaded"
                    );
                    State::Ready(Arc::new(t))
                }
                Err(e) => {
                    tracing::warn!("text routing disabled: {e}; text requests are routed by approximate text pages");
                    State::Unavailable
                }
            },
            None => {
                tracing::warn!(
                    "no --model-path/--tokenizer-path: text requests are routed by approximate text pages until a \
                     worker reports a local model directory with a tokenizer.json"
                );
                State::Pending
            }
        };
        TextRouting {
            cache_bytes,
            state: Mutex::new(state),
            tried: Mutex::new(Vec::new()),
        }
    }

    /// An already loaded tokenizer (tests, the demo).
    pub fn with_tokenizer(tokenizer: Arc<TextTokenizer>) -> TextRouting {
        TextRouting {
            cache_bytes: 0,
            state: Mutex::new(State::Ready(tokenizer)),
            tried: Mutex::new(Vec::new()),
        }
    }

    /// The tokenizer in use, if any.
    pub fn current(&self) -> Option<Arc<TextTokenizer>> {
        match &*self.state.lock() {
            State::Ready(t) => Some(t.clone()),
            _ => None,
        }
    }

    /// True when worker-reported model paths may still provide a tokenizer.
    fn pending(&self) -> bool {
        matches!(&*self.state.lock(), State::Pending)
    }

    /// Blocking: the tokenizer, loading it from the first untried worker `model_path` that is
    /// a local directory with a `tokenizer.json`. A path that is not one is warned about once.
    fn resolve(&self, model_paths: &[String]) -> Option<Arc<TextTokenizer>> {
        if let Some(t) = self.current() {
            return Some(t);
        }
        if !self.pending() {
            return None;
        }
        for path in model_paths {
            {
                let mut tried = self.tried.lock();
                if tried.contains(path) {
                    continue;
                }
                tried.push(path.clone());
            }
            let dir = Path::new(path);
            if !dir.join("tokenizer.json").is_file() {
                tracing::warn!(
                    model_path = %path,
                    "a worker's model path is not a local directory with a tokenizer.json: \
                     text requests are routed by approximate text pages (set --model-path or --tokenizer-path)"
                );
                continue;
            }
            match TextTokenizer::load(dir, self.cache_bytes) {
                Ok(t) => {
                    tracing::info!(model_path = %path, "text routing: tokenizer loaded from a worker's model path");
                    let t = Arc::new(t);
                    let mut state = self.state.lock();
                    if let State::Pending = *state {
                        *state = State::Ready(t.clone());
                    }
                    return Some(t);
                }
                Err(e) => tracing::warn!(model_path = %path, "text routing: {e}"),
            }
        }
        None
    }

    /// The token ids of a text prompt, computed on the blocking pool. `None` (counted) when
    /// there is no tokenizer or the prompt cannot be tokenized.
    pub async fn tokenize(
        self: &Arc<Self>,
        prompt: TextPrompt,
        model_paths: Vec<String>,
    ) -> Option<Vec<u32>> {
        let kind = prompt.kind();
        let m = TextMetrics::get();
        let model_paths: Vec<String> = {
            let tried = self.tried.lock();
            model_paths
                .into_iter()
                .filter(|p| !tried.contains(p))
                .collect()
        };
        if self.current().is_none() && (!self.pending() || model_paths.is_empty()) {
            m.requests.with_label_values(&[kind, "no_tokenizer"]).inc();
            return None;
        }
        let this = self.clone();
        let job = tokio::task::spawn_blocking(move || {
            let tokenizer = this.resolve(&model_paths)?;
            let t0 = Instant::now();
            let result = match &prompt {
                TextPrompt::Chat(body) => tokenizer.encode_chat(body),
                TextPrompt::Text(text) => tokenizer.encode_text(text),
            };
            Some((result, t0.elapsed()))
        });
        match job.await {
            Ok(Some((Ok(ids), took))) => {
                m.seconds
                    .with_label_values(&[kind])
                    .observe(took.as_secs_f64());
                m.requests.with_label_values(&[kind, "tokenized"]).inc();
                Some(ids)
            }
            Ok(Some((Err(e), _))) => {
                tracing::debug!("text request not tokenized: {e}");
                m.requests.with_label_values(&[kind, "error"]).inc();
                None
            }
            Ok(None) | Err(_) => {
                m.requests.with_label_values(&[kind, "no_tokenizer"]).inc();
                None
            }
        }
    }
}
