//! `sglang-mock` binary (placeholder).
fn main() {}
