//! Fuzz target: the Dynamo `RouterEvent` decoder (JSON, msgpack, event-plane
//! envelope) must never panic.
#![no_main]

use kvrouter::events::dynamo_wire::decode_router_event;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode_router_event(data);
});
