//! Shared trace loading for the peer benches.
