//! SGLang's page-size rule for cached tokens, as a client sees it (SSE framing is
//! `http::sse_data`).

/// Page-size rule of SGLang: cached tokens of a fully cached prompt of `len` tokens.
pub fn cached_rule(len: usize, page: usize) -> usize {
    (len - 1) / page * page
}
