//! `--text` chat requests: OpenAI `messages` only, no `input_ids`, so the server (and a
//! KV router) must tokenize them with the model's tokenizer and chat template.
//!
//! A request's token ids become words: id `N` is the word `t<N>`, joined by spaces, which
//! round-trips through the mock's stand-in tokenizer and through a WordLevel tokenizer whose
//! word `t<N>` is token `N` (the fixture the tests and docs/text-routing.md use). The agent's
//! context is split into messages by `RequestSpec::text_segments`: `system` (shared prefix),
//! `user` (the task), then per turn `assistant` (the model's output ids) and `user` (the
//! tool output). Without segments the whole prompt is one user message.

use serde::Serialize;

/// One chat message.
#[derive(Serialize)]
pub struct Message {
    pub role: &'static str,
    pub content: String,
}

/// The words of `ids` (`t<N>` per id, space-separated).
pub fn words(ids: &[u32]) -> String {
    let mut s = String::with_capacity(ids.len() * 6);
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push('t');
        s.push_str(&id.to_string());
    }
    s
}

/// The conversation of `ids` split by `segments` (see module docs).
pub fn messages(ids: &[u32], segments: Option<&[u32]>) -> Vec<Message> {
    let Some(segments) = segments else {
        return vec![Message {
            role: "user",
            content: words(ids),
        }];
    };
    let mut out = Vec::with_capacity(segments.len());
    let mut at = 0usize;
    for (i, &len) in segments.iter().enumerate() {
        let end = (at + len as usize).min(ids.len());
        let role = match i {
            0 => "system",
            i if i % 2 == 0 => "assistant",
            _ => "user",
        };
        out.push(Message {
            role,
            content: words(&ids[at..end]),
        });
        at = end;
    }
    if at < ids.len() {
        out.push(Message {
            role: "user",
            content: words(&ids[at..]),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_alternate_roles_after_the_system_prompt_and_the_rest_is_a_user_turn() {
        let roles = |m: &[Message]| m.iter().map(|m| m.role).collect::<Vec<_>>();
        let m = messages(&[1, 2, 3, 4, 5, 6, 7, 8], Some(&[2, 1, 3]));
        assert_eq!(roles(&m), ["system", "user", "assistant", "user"]);
        assert_eq!(m[2].content, "t4 t5 t6");
        assert_eq!(m[3].content, "t7 t8");
        let whole = messages(&[9, 10], None);
        assert_eq!(roles(&whole), ["user"]);
        assert_eq!(whole[0].content, "t9 t10");
    }
}
