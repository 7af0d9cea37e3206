//! Open-loop sending, shared by `trace` and `tenants`: each request goes out at its
//! own offset from the start of the run (simulated time, slept as wall time through
//! the runner's speedup), whatever the earlier ones are doing; when all
//! `concurrency` slots are busy it goes out late. At most `concurrency` requests are
//! materialised at a time.

use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};

use crate::loadgen::request::RequestSpec;
use crate::loadgen::runner::Runner;

/// Sends request `k` (built by `make(k, wall offset)`) at the `k`-th offset of
/// `offsets` (an offset already past goes out at once). Stops early when the run stops.
pub async fn run(
    runner: &Runner,
    concurrency: usize,
    offsets: impl Iterator<Item = Duration>,
    mut make: impl FnMut(usize, Duration) -> RequestSpec,
) {
    let mut inflight = FuturesUnordered::new();
    for (index, sim_offset) in offsets.enumerate() {
        let offset = runner.wall(sim_offset);
        let at = runner.start().checked_add(offset);
        let mut due = std::pin::pin!(async {
            match at {
                Some(at) => runner.sleep_until(at).await,
                None => false,
            }
        });
        let on_time = loop {
            tokio::select! {
                on_time = &mut due, if inflight.len() < concurrency => break on_time,
                Some(_) = inflight.next(), if !inflight.is_empty() => {}
            }
        };
        if !on_time || runner.expired() {
            break;
        }
        inflight.push(runner.send(make(index, offset)));
    }
    while inflight.next().await.is_some() {}
}
