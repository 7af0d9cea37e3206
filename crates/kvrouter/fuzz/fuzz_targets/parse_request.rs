//! Fuzzes the request-routing parser: any bytes on any endpoint must give `Ok` or `Err`,
//! never a panic, and every lazy accessor must be total on what `parse` accepted.
#![no_main]

use kvrouter::routing::{Endpoint, RoutingInput};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for endpoint in [
        Endpoint::Generate,
        Endpoint::ChatCompletions,
        Endpoint::Completions,
    ] {
        if let Ok(input) = RoutingInput::parse(endpoint, data) {
            let _ = input.is_batch();
            let _ = input.token_ids();
            let _ = input.batch_token_ids();
            let _ = input.text();
            let _ = input.messages_json();
            let _ = input.rids();
            assert!(input.batch_size >= 1 || input.is_batch());
        }
    }
});
