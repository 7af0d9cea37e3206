//! Text routing: the model's own tokenizer and chat template turn text requests (chat
//! `messages`, `/generate` `text`, completions `prompt`) into the token ids SGLang will prefill,
//! so KV mode can route them by prefix overlap. Tokenization is for routing only: the bytes
//! forwarded to the worker are never changed.
//!
//! `tokenizer` loads and runs one model's tokenizer, `template` renders chat templates as HF
//! transformers does, `chat` prepares a request's messages as SGLang's serving_chat does,
//! `pyjson` is Python's `json.dumps` for `tojson`, `prefix_cache` is the per-session cache and
//! `source` decides at run time which tokenizer to use (configured path or the workers' local
//! model path) and runs it off the async executor. See docs/text-routing.md.

pub(crate) mod chat;
pub mod fixture;
pub(crate) mod prefix_cache;
pub(crate) mod pyjson;
pub(crate) mod source;
pub(crate) mod template;
pub(crate) mod tokenizer;

pub use source::{TextMetrics, TextRouting, TextSettings};
pub use tokenizer::TextTokenizer;

/// Why a text request could not be tokenized (it is then routed by approximate text pages
/// and counted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error("cannot load tokenizer: {0}")]
    Load(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("the tokenizer has no chat template")]
    NoChatTemplate,
    #[error("tokenizer: {0}")]
    Tokenize(String),
    #[error("request: {0}")]
    Request(String),
}
