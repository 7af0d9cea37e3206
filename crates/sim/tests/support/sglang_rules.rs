//! What SGLang's HTTP answers look like to a client: SSE framing and the page-size
//! rule for cached tokens.

/// Reads an SSE body into its `data:` payloads, checking the framing.
pub fn sse_events(body: &str) -> Vec<String> {
    assert!(
        body.ends_with("data: [DONE]\n\n"),
        "stream ends with [DONE]: {body:?}"
    );
    body.split_terminator("\n\n")
        .map(|chunk| {
            chunk
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("bad SSE chunk {chunk:?}"))
                .to_string()
        })
        .collect()
}

/// Page-size rule of SGLang: cached tokens of a fully cached prompt of `len` tokens.
pub fn cached_rule(len: usize, page: usize) -> usize {
    (len - 1) / page * page
}
