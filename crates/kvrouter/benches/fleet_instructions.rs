//! Instructions per KV decision by fleet size, a count that other load on the machine does not
//! move (wall-clock medians moved by up to 2x between runs of one binary on a loaded 2-core
//! machine). Run under callgrind by `benches/fleet/report.py --instructions`, which runs
//! `fleet_instructions N 0 [full]` and `fleet_instructions N K [full]` and divides the
//! difference by K: the fleet's setup cancels out.
//!
//! usage: fleet_instructions <workers> <decisions> [full]
#![allow(clippy::unwrap_used)] // a bench: an unwrap is an assertion

#[path = "fleet/setup.rs"]
mod fleet;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let (Some(n), Some(k)) = (args.first(), args.get(1)) else {
        eprintln!("usage: fleet_instructions <workers> <decisions> [full]");
        std::process::exit(2);
    };
    let n: u32 = n.parse().unwrap();
    let k: u64 = k.parse().unwrap();
    let every_unit = args.get(2).is_some_and(|a| a == "full");
    let (prompt, body) = fleet::prompt();
    let candidates = fleet::fleet_workers(n);
    let (selector, _held) = fleet::fleet_selector(&candidates, &prompt, every_unit);
    for _ in 0..k {
        fleet::decide(&selector, &body, &candidates);
    }
}
