//! Routing policies (kv, round-robin, random, least-load), the KV cost model, sticky keys and bookings.
