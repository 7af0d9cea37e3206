//! `loadgen` binary (placeholder).
fn main() {}
