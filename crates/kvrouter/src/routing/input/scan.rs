//! Fast reader of the routing fields: a strict scanner over the top-level object that
//! decodes a plain `input_ids` array in place (see `ids`) and hands every other value to
//! serde_json to validate and delimit.
//!
//! It answers only for bodies it fully understands and returns `None` for anything else
//! (escaped or non-ASCII keys, duplicate routing keys, an unusual `input_ids`, any syntax or
//! value error, nesting close to serde's depth limit); the caller then runs the serde reader,
//! so errors and edge cases keep serde's exact behaviour.

use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use super::fields::Fields;
use super::ids::decode_u32_array;

/// serde_json's nesting limit; inside the top-level object a value may nest one less.
const SERDE_DEPTH_LIMIT: usize = 128;

fn skip_ws(s: &[u8], mut p: usize) -> usize {
    while p < s.len() && matches!(s[p], b' ' | b'\t' | b'\n' | b'\r') {
        p += 1;
    }
    p
}

/// Fields of `body` plus the decoded `input_ids` when they were a plain u32 array.
pub(super) fn scan(body: &[u8]) -> Option<(Fields<'_>, Option<Vec<u32>>)> {
    let mut fields = Fields::default();
    let mut ids = None;
    let mut seen = [false; 11];
    let mut p = skip_ws(body, 0);
    if body.get(p) != Some(&b'{') {
        return None;
    }
    p = skip_ws(body, p + 1);
    if body.get(p) == Some(&b'}') {
        p += 1;
    } else {
        loop {
            let (key, after_key) = plain_key(body, p)?;
            p = skip_ws(body, after_key);
            if body.get(p) != Some(&b':') {
                return None;
            }
            p = skip_ws(body, p + 1);
            match slot(key) {
                None => p = skip_value(body, p)?,
                Some(slot) => {
                    if std::mem::replace(&mut seen[slot], true) {
                        return None; // serde reports the duplicate field
                    }
                    p += read_value(&mut fields, &mut ids, slot, &body[p..])?;
                }
            }
            p = skip_ws(body, p);
            match body.get(p) {
                Some(b',') => p = skip_ws(body, p + 1),
                Some(b'}') => {
                    p += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    (skip_ws(body, p) == body.len()).then_some((fields, ids))
}

/// The slot of a routing key (its index in `scan`'s `seen`; `input_ids` is 0), `None` for
/// any other key.
#[inline]
fn slot(key: &[u8]) -> Option<usize> {
    Some(match key {
        b"input_ids" => 0,
        b"text" => 1,
        b"prompt" => 2,
        b"messages" => 3,
        b"input_embeds" => 4,
        b"stream" => 5,
        b"rid" => 6,
        b"cache_salt" => 7,
        b"extra_key" => 8,
        b"lora_path" => 9,
        b"model" => 10,
        _ => return None,
    })
}

/// Reads the value of routing field `slot` at the start of `rest` into `fields` (a plain
/// `input_ids` array also decoded into `ids`); the value's length.
#[inline]
fn read_value<'a>(
    fields: &mut Fields<'a>,
    ids: &mut Option<Vec<u32>>,
    slot: usize,
    rest: &'a [u8],
) -> Option<usize> {
    if slot == 0 && rest.first() == Some(&b'[') {
        let (decoded, len) = decode_u32_array(rest)?;
        fields.input_ids = Some(std::str::from_utf8(&rest[..len]).ok()?);
        *ids = Some(decoded);
        return Some(len);
    }
    let (raw, len) = raw_value(rest)?;
    // serde reads `null` into an absent `Option<&RawValue>`.
    let raw = Some(raw).filter(|r| *r != "null");
    match slot {
        0 => fields.input_ids = raw,
        1 => fields.text = raw,
        2 => fields.prompt = raw,
        3 => fields.messages = raw,
        4 => fields.input_embeds = raw,
        5 => fields.stream = serde_json::from_str::<Option<bool>>(raw.unwrap_or("null")).ok()?,
        6 => fields.rid = raw,
        7 => fields.cache_salt = raw,
        8 => fields.extra_key = raw,
        9 => fields.lora_path = raw,
        _ => fields.model = raw,
    }
    Some(len)
}

/// A key of plain ASCII without escapes, and the offset after its closing quote.
fn plain_key(s: &[u8], p: usize) -> Option<(&[u8], usize)> {
    if s.get(p) != Some(&b'"') {
        return None;
    }
    let start = p + 1;
    let len = s.get(start..)?.iter().position(|&b| b == b'"')?;
    let key = &s[start..start + len];
    key.iter()
        .all(|&b| (0x20..0x80).contains(&b) && b != b'\\')
        .then_some((key, start + len + 1))
}

/// Delimits (and validates, as serde would skip it) an unknown field's value.
fn skip_value(body: &[u8], p: usize) -> Option<usize> {
    let rest = &body[p..];
    let mut stream = serde_json::Deserializer::from_slice(rest).into_iter::<IgnoredAny>();
    stream.next()?.ok()?;
    let len = stream.byte_offset();
    (!too_deep(&rest[..len])).then_some(p + len)
}

/// A routing field's value as raw JSON text, and its length.
fn raw_value(rest: &[u8]) -> Option<(&str, usize)> {
    let mut stream = serde_json::Deserializer::from_slice(rest).into_iter::<&RawValue>();
    let raw = stream.next()?.ok()?;
    let len = stream.byte_offset();
    (!too_deep(raw.get().as_bytes())).then_some((raw.get(), len))
}

/// True when a (valid) value nests as deep as serde allows at the top level: inside the body's
/// object serde would reject it, so the whole body goes to serde for the exact error.
fn too_deep(value: &[u8]) -> bool {
    if !matches!(value.first(), Some(b'[' | b'{')) {
        return false;
    }
    // Cheap exact prefilter: that depth needs as many openers (SIMD search, stops early).
    let openers = memchr::memchr2_iter(b'[', b'{', value)
        .take(SERDE_DEPTH_LIMIT)
        .count();
    if openers + 1 < SERDE_DEPTH_LIMIT {
        return false;
    }
    let mut depth = 0usize;
    let mut i = 0;
    while i < value.len() {
        match value[i] {
            b'"' => {
                // Skip the string: to its closing quote, stepping over escapes.
                i += 1;
                loop {
                    match memchr::memchr2(b'"', b'\\', &value[i..]) {
                        Some(k) if value[i + k] == b'\\' => i += k + 2,
                        Some(k) => {
                            i += k + 1;
                            break;
                        }
                        None => return false,
                    }
                }
                continue;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth + 1 >= SERDE_DEPTH_LIMIT {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::input::fields::read_with_serde;
    use rand::{Rng, SeedableRng};

    /// Whenever the scanner answers, serde accepts the body with the same fields and ids.
    fn check(body: &[u8]) -> bool {
        let Some((fields, ids)) = scan(body) else {
            return false;
        };
        let expected = read_with_serde(body).expect("scanner accepted what serde rejects");
        assert_eq!(fields, expected, "{:?}", String::from_utf8_lossy(body));
        if let Some(ids) = ids {
            let raw = expected.input_ids.expect("ids come from input_ids");
            assert_eq!(Some(ids), serde_json::from_str::<Vec<u32>>(raw).ok());
        }
        true
    }

    #[test]
    fn common_bodies_take_the_fast_path() {
        for body in [
            r#"{}"#,
            r#" { "input_ids" : [1, 2] , "stream" : true } "#,
            r#"{"messages":[{"role":"user","content":"a\"}{[b"}],"input_ids":[7],"x":{"y":[1e3]}}"#,
            r#"{"text":["a","b"],"rid":null,"stream":null,"input_ids":"oops"}"#,
        ] {
            assert!(check(body.as_bytes()), "{body}");
        }
    }

    #[test]
    fn unusual_bodies_go_to_serde() {
        for body in [
            r#"{"input_ids":[1],"input_ids":[2]}"#,
            r#"{"input\u005fids":[1]}"#,
            r#"{"input_ids":[1.0]}"#,
            r#"{"input_ids":[[1],[2]]}"#,
            r#"{"input_ids":[-1]}"#,
            r#"{"stream":"yes","text":"x"}"#,
            r#"{"text":"x"} x"#,
            r#"{"text":"x",}"#,
            "{\"text\":\"x\"\u{c}}",
            r#"{"text":"x""#,
        ] {
            assert!(!check(body.as_bytes()), "{body}");
        }
    }

    #[test]
    fn depth_limit_matches_serde() {
        for depth in 120..135 {
            let value = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            for key in ["messages", "unknown"] {
                let body = format!(r#"{{"{key}":{value}}}"#);
                check(body.as_bytes());
                assert_eq!(
                    scan(body.as_bytes()).is_some() || read_with_serde(body.as_bytes()).is_ok(),
                    read_with_serde(body.as_bytes()).is_ok(),
                    "depth {depth}"
                );
            }
        }
    }

    fn random_body(rng: &mut impl Rng) -> String {
        let ws = [" ", "", "", "\n  ", "\t", "\r\n"];
        let w = |rng: &mut dyn rand::RngCore| ws[rng.random_range(0..ws.len())];
        let values = [
            r#"[1, 2, 3]"#,
            r#"[]"#,
            r#"[151000,0,42]"#,
            r#"[[1,2],[3]]"#,
            r#""hello \"x\" \u00e9""#,
            r#"["a", "b"]"#,
            r#"[{"role":"user","content":"c{o}d[e]"}]"#,
            r#"null"#,
            r#"true"#,
            r#"false"#,
            r#"{"temperature":0.7,"stop":[1e2,-3]}"#,
            r#"-12.5e3"#,
            r#"[1, 4294967296]"#,
            r#""sql""#,
            r#"["a", null]"#,
        ];
        let keys = [
            "input_ids",
            "text",
            "prompt",
            "messages",
            "input_embeds",
            "stream",
            "rid",
            "cache_salt",
            "extra_key",
            "lora_path",
            "model",
            "sampling_params",
            "x",
        ];
        let mut s = format!("{}{{", w(rng));
        let n = rng.random_range(0..6);
        for i in 0..n {
            if i > 0 {
                s.push_str(&format!("{},{}", w(rng), w(rng)));
            }
            let key = keys[rng.random_range(0..keys.len())];
            let value = values[rng.random_range(0..values.len())];
            s.push_str(&format!("\"{key}\"{}:{}{value}", w(rng), w(rng)));
        }
        s.push_str(&format!("{}}}{}", w(rng), w(rng)));
        s
    }

    /// Randomised equivalence with serde on generated bodies and byte-mutated copies.
    #[test]
    fn fuzz_matches_serde() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0xb0d7);
        let alphabet = b"0123456789 ,:[]{}-.e\"\\\n\tx\x0c";
        let mut fast = 0;
        for _ in 0..20_000 {
            let body = random_body(&mut rng);
            let serde_ok = read_with_serde(body.as_bytes()).is_ok();
            if check(body.as_bytes()) {
                fast += 1;
            } else {
                // Only unusual bodies may leave the fast path.
                assert!(
                    !serde_ok
                        || body.contains("\"input_ids\"")
                        || body.contains("\"stream\"")
                        || keys_repeat(&body),
                    "{body:?}"
                );
            }
            let mut bytes = body.into_bytes();
            crate::routing::input::mutate_bytes(&mut rng, &mut bytes, alphabet);
            check(&bytes);
        }
        assert!(fast > 1_000, "fast path taken only {fast} times");
    }

    fn keys_repeat(body: &str) -> bool {
        [
            "input_ids",
            "text",
            "prompt",
            "messages",
            "input_embeds",
            "rid",
            "cache_salt",
            "extra_key",
            "lora_path",
            "model",
        ]
        .iter()
        .any(|k| body.matches(&format!("\"{k}\"")).count() > 1)
    }
}
