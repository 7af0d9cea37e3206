//! The text hook: which text prompt of a request the model's tokenizer should read, and the
//! ids it produced handed to the policy through [`RoutingInput::token_ids`].
//!
//! A request carries a text prompt when it has no `input_ids` (nor a tokenised completions
//! `prompt`) and is not a batch: chat `messages` (the whole body goes to the tokenizer: tools,
//! `continue_final_message` and template kwargs shape the prompt), `/generate` `text` or a
//! completions `prompt` string. [`tokenize`] runs the tokenizer off the executor
//! ([`TextRouting::tokenize`]) and stores the ids; the body bytes are never changed.

use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use super::{Endpoint, RoutingInput};
use crate::text::source::TextPrompt;
use crate::text::TextRouting;
use crate::workers::Registry;

/// Token ids of a text prompt (a `Mutex` so `RoutingInput` stays `Sync`; copied per call,
/// since a retried request asks again).
#[derive(Debug, Default)]
pub(super) struct TextIds(Mutex<Option<Arc<[u32]>>>);

impl TextIds {
    pub(super) fn get(&self) -> Option<Vec<u32>> {
        self.0.lock().as_ref().map(|ids| ids.to_vec())
    }

    pub(super) fn is_set(&self) -> bool {
        self.0.lock().is_some()
    }

    fn set(&self, ids: Vec<u32>) {
        *self.0.lock() = Some(ids.into());
    }
}

impl Clone for TextIds {
    fn clone(&self) -> Self {
        TextIds(Mutex::new(self.0.lock().clone()))
    }
}

impl<'a> RoutingInput<'a> {
    /// The text prompt to tokenize for routing (see module docs); `None` when the request
    /// already carries token ids, is a batch or has no text.
    pub fn text_prompt(&self, body: &Bytes) -> Option<TextPrompt> {
        if self.input_ids.is_some() || self.is_batch() {
            return None;
        }
        match self.endpoint {
            Endpoint::ChatCompletions => self.messages.map(|_| TextPrompt::Chat(body.clone())),
            Endpoint::Generate | Endpoint::Completions => {
                self.text().map(|t| TextPrompt::Text(t.into_owned()))
            }
        }
    }

    /// Hands the ids of the text prompt to [`RoutingInput::token_ids`].
    pub fn set_text_ids(&self, ids: Vec<u32>) {
        self.text_ids.set(ids);
    }
}

/// Tokenizes `input`'s text prompt, if any, with `text` (off the executor) and stores the ids.
/// The model paths the routable workers report are offered when no tokenizer is loaded yet.
pub(crate) async fn tokenize(
    input: &RoutingInput<'_>,
    body: &Bytes,
    text: &Arc<TextRouting>,
    registry: &Registry,
) {
    let Some(prompt) = input.text_prompt(body) else {
        return;
    };
    let model_paths = if text.current().is_some() {
        Vec::new()
    } else {
        let mut paths: Vec<String> = registry
            .routable()
            .iter()
            .filter_map(|w| w.info.model_path.clone())
            .collect();
        paths.dedup();
        paths
    };
    if let Some(ids) = text.tokenize(prompt, model_paths).await {
        input.set_text_ids(ids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(e: Endpoint, body: &'static str) -> Option<TextPrompt> {
        let bytes = Bytes::from_static(body.as_bytes());
        let input = RoutingInput::parse(e, body.as_bytes()).unwrap();
        input.text_prompt(&bytes)
    }

    #[test]
    fn only_single_text_prompts_are_tokenized() {
        assert!(matches!(
            prompt(
                Endpoint::ChatCompletions,
                r#"{"messages":[{"role":"user","content":"hi"}]}"#
            ),
            Some(TextPrompt::Chat(_))
        ));
        assert!(prompt(
            Endpoint::ChatCompletions,
            r#"{"messages":[],"input_ids":[1]}"#
        )
        .is_none());
        assert!(matches!(
            prompt(Endpoint::Generate, r#"{"text":"a b"}"#),
            Some(TextPrompt::Text(t)) if t == "a b"
        ));
        assert!(prompt(Endpoint::Generate, r#"{"text":["a","b"]}"#).is_none());
        assert!(matches!(
            prompt(Endpoint::Completions, r#"{"prompt":"x"}"#),
            Some(TextPrompt::Text(_))
        ));
        assert!(prompt(Endpoint::Completions, r#"{"prompt":[1,2]}"#).is_none());
    }

    #[test]
    fn stored_ids_are_the_token_ids_on_every_call() {
        let input = RoutingInput::parse(Endpoint::Generate, br#"{"text":"a"}"#).unwrap();
        assert!(input.token_ids().is_none());
        input.set_text_ids(vec![4, 5]);
        assert_eq!(input.token_ids().unwrap().unwrap(), vec![4, 5]);
        assert_eq!(input.token_ids().unwrap().unwrap(), vec![4, 5]);
        // Real token ids win over text ids.
        let input = RoutingInput::parse(Endpoint::Generate, br#"{"input_ids":[1]}"#).unwrap();
        input.set_text_ids(vec![9]);
        assert_eq!(input.token_ids().unwrap().unwrap(), vec![1]);
    }
}
