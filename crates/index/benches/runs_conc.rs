//! The concurrent run index (`kvrouter_index::runs::conc::ConcRunIndex`) with one writer
//! thread and one reader thread (the machine has two cores), next to the prototype behind a
//! `Mutex` (`Mutex<RunIndex>`: what "one lock around it" costs a reader). The index holds
//! the conversation trace at `RUNS_CONC_WORKERS` workers (default 512, request i on worker
//! i % W, page 16); the reader times `find` over the trace's prompts; the writer replays
//! events on units W..2W in rounds (store every request, then remove them all), either
//! **shared** (the same blocks as the resident trace: the store walks and raises cuts in
//! the very runs the reader walks, splits and reclaims) or **fresh** (the trace with other
//! content and engine hashes: every block is appended and keyed). Reported: find p50/p99
//! alone and while the writer runs; the writer's stored blocks per second (wall, and per
//! CPU-second of the writer thread) alone and while the reader runs, the reader either
//! back to back ("spin") or sleeping 50 us between finds (~15k finds/s: a router's request
//! rate, leaving the writer its core).
//! `RUNS_CONC_PROFILE=proto|conc` only ingests the trace `RUNS_CONC_ROUNDS` times into
//! fresh indexes, reading no clock (callgrind cannot run rustix's vDSO clock).
#![allow(clippy::unwrap_used)] // benches: an unwrap is an assertion

#[path = "common/index_data.rs"]
mod data;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kvrouter_index::runs::conc::{ConcRunIndex, FindScratch};
use kvrouter_index::runs::RunIndex;
use kvrouter_index::seq_hashes;
use parking_lot::Mutex;

struct Ev {
    unit: u32,
    engine: Vec<u64>,
    content: Vec<u64>,
}

fn events(prompts: &[Vec<u32>], workers: usize, unit_base: u32, salt: u64) -> Vec<Ev> {
    prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let seq = seq_hashes(p, data::PAGE);
            Ev {
                unit: unit_base + data::owner(i, workers),
                engine: seq.iter().map(|s| data::engine_hash(*s ^ salt)).collect(),
                content: data::content_hashes(p)
                    .iter()
                    .map(|c| c ^ salt.rotate_left(7))
                    .collect(),
            }
        })
        .collect()
}

// One of each per measurement: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
enum Ix {
    Conc(ConcRunIndex),
    Locked(Mutex<RunIndex>),
}

impl Ix {
    fn name(&self) -> &'static str {
        match self {
            Ix::Conc(_) => "ConcRunIndex",
            Ix::Locked(_) => "Mutex<RunIndex>",
        }
    }
    fn store(&self, e: &Ev) {
        let _ = match self {
            Ix::Conc(ix) => ix.store(e.unit, None, &e.engine, &e.content),
            Ix::Locked(ix) => ix.lock().store(e.unit, None, &e.engine, &e.content),
        };
    }
    fn remove(&self, e: &Ev) {
        match self {
            Ix::Conc(ix) => ix.remove(e.unit, &e.engine),
            Ix::Locked(ix) => ix.lock().remove(e.unit, &e.engine),
        }
    }
    fn find(&self, q: &[u64], sc: &mut FindScratch) -> usize {
        match self {
            Ix::Conc(ix) => ix.find_into(q, sc).len(),
            Ix::Locked(ix) => ix.lock().find(q).len(),
        }
    }
}

fn thread_cpu() -> f64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn percentiles(mut v: Vec<u64>) -> (f64, f64) {
    v.sort_unstable();
    let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize] as f64 / 1e3;
    (at(0.5), at(0.99))
}

/// Writer rounds: store every event, then remove them all. Returns (stored blocks per wall
/// second of the store phases, per CPU-second of them).
fn write(ix: &Ix, evs: &[Ev], rounds: usize) -> (f64, f64) {
    let blocks: usize = evs.iter().map(|e| e.engine.len()).sum();
    let (mut wall, mut cpu) = (0.0, 0.0);
    for _ in 0..rounds {
        let (t, c) = (Instant::now(), thread_cpu());
        for e in evs {
            ix.store(e);
        }
        wall += t.elapsed().as_secs_f64();
        cpu += thread_cpu() - c;
        for e in evs {
            ix.remove(e);
        }
    }
    let n = (blocks * rounds) as f64;
    (n / wall / 1e6, n / cpu.max(1e-9) / 1e6)
}

/// Finds over `queries` until `stop` (or `passes` passes when `stop` is None), sleeping
/// `pace` between finds (zero: back to back); latencies in ns.
fn read(
    ix: &Ix,
    queries: &[Vec<u64>],
    stop: Option<&AtomicBool>,
    passes: usize,
    pace: Duration,
) -> Vec<u64> {
    let mut sc = FindScratch::new();
    let mut lat = Vec::new();
    'outer: for pass in 0.. {
        if stop.is_none() && pass == passes {
            break;
        }
        for q in queries {
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                break 'outer;
            }
            let t = Instant::now();
            black_box(ix.find(q, &mut sc));
            lat.push(t.elapsed().as_nanos() as u64);
            if !pace.is_zero() {
                std::thread::sleep(pace);
            }
        }
        if lat.len() > 20_000_000 {
            break;
        }
    }
    lat
}

fn profile(kind: &str, prompts: &[Vec<u32>], workers: usize) {
    let rounds: usize = std::env::var("RUNS_CONC_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let evs = events(prompts, workers, 0, 0);
    for _ in 0..rounds {
        if kind == "proto" {
            let mut ix = RunIndex::new();
            for e in &evs {
                let _ = ix.store(e.unit, None, &e.engine, &e.content);
            }
            black_box(ix.distinct_blocks());
        } else {
            let ix = ConcRunIndex::new();
            for e in &evs {
                let _ = ix.store(e.unit, None, &e.engine, &e.content);
            }
            black_box(ix.distinct_blocks());
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let prompts = data::trace_prompts(1000);
    let workers: usize = std::env::var("RUNS_CONC_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512);
    if let Ok(kind) = std::env::var("RUNS_CONC_PROFILE") {
        profile(&kind, &prompts, workers);
        return;
    }
    let rounds: usize = std::env::var("RUNS_CONC_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let base = events(&prompts, workers, 0, 0);
    let queries: Vec<Vec<u64>> = base.iter().map(|e| e.content.clone()).collect();
    let blocks: usize = base.iter().map(|e| e.engine.len()).sum();
    println!(
        "trace: 1000 requests, {blocks} blocks, {workers} workers resident; writer: {rounds} rounds of store-all + remove-all on units {workers}..{}",
        2 * workers
    );
    println!(
        "{:<16} {:<7} {:>6} {:>10} {:>10} {:>10} {:>10} {:>9} {:>20} {:>20}",
        "index",
        "writes",
        "reader",
        "find p50",
        "find p99",
        "+w p50",
        "+w p99",
        "+w finds",
        "ingest M/s wall|cpu",
        "+reader wall|cpu"
    );
    for kind in 0..2 {
        for (wname, salt) in [("shared", 0u64), ("fresh", 0xF4E5_5000_0000_0001)] {
            let ix = if kind == 0 {
                Ix::Conc(ConcRunIndex::new())
            } else {
                Ix::Locked(Mutex::new(RunIndex::new()))
            };
            for e in &base {
                ix.store(e);
            }
            let churn = events(&prompts, workers, workers as u32, salt);
            let (f50, f99) = percentiles(read(&ix, &queries, None, 5, Duration::ZERO));
            let (iw, ic) = write(&ix, &churn, rounds);
            for pace_us in [0u64, 50] {
                let pace = Duration::from_micros(pace_us);
                let stop = AtomicBool::new(false);
                let ((rw, rc), lat) = std::thread::scope(|s| {
                    let reader = s.spawn(|| read(&ix, &queries, Some(&stop), 0, pace));
                    let w = write(&ix, &churn, rounds);
                    stop.store(true, Ordering::Relaxed);
                    (w, reader.join().unwrap())
                });
                let n = lat.len();
                let (g50, g99) = percentiles(lat);
                println!(
                    "{:<16} {:<7} {:>6} {:>8.2}us {:>8.2}us {:>8.2}us {:>8.2}us {:>9} {:>9.2} |{:>9.2} {:>9.2} |{:>9.2}",
                    ix.name(),
                    wname,
                    if pace_us == 0 { "spin".to_string() } else { format!("{pace_us}us") },
                    f50,
                    f99,
                    g50,
                    g99,
                    n,
                    iw,
                    ic,
                    rw,
                    rc
                );
            }
        }
    }
}
