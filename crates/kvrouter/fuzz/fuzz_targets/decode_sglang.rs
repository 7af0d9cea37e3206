//! Fuzz target: the SGLang KV event batch decoder must never panic, and whatever
//! it accepts must also go through a rank feed (cursor, checks, sink) unharmed.
#![no_main]

use std::sync::Arc;

use kvrouter::events::sglang_wire::decode_batch;
use kvrouter::events::{Payload, RankFeed, RecordingSink};
use kvrouter::workers::WorkerId;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode_batch(data);
    let sink = RecordingSink::new();
    let mut feed = RankFeed::new(WorkerId(0), 0, Arc::from("fuzz"), 16, 0, sink);
    let _ = feed.offer(0, Payload::Sglang(data), false);
});
