//! Upstream forwarding: client pool, byte-exact relay of bodies and SSE streams, retries before the first byte.
