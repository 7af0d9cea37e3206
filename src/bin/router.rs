//! `router` binary (placeholder).
fn main() {}
