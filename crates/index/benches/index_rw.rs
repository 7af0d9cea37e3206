//! `KvIndex` with one writer thread and one reader thread (the machine has two cores), next
//! to the same index behind a `Mutex` (what "one lock around it" would cost a reader). The
//! index holds the conversation trace at `INDEX_RW_WORKERS` workers (default 512, request i
//! on worker i % W, page 16); the reader times `find_matches` over the trace's prompts; the
//! writer replays content-hashed store events on workers W..2W in rounds (store every
//! request, then remove them all), either **shared** (the same blocks as the resident trace:
//! the store walks and raises cuts in the very runs the reader walks, splits and reclaims)
//! or **fresh** (other content and engine hashes: every block is appended and keyed).
//! Reported: find p50/p99 alone and while the writer runs; the writer's stored blocks per
//! second (wall, and per CPU-second of the writer thread) alone and while the reader runs,
//! the reader either back to back ("spin") or sleeping 50 us between finds (~15k finds/s: a
//! router's request rate, leaving the writer its core). Ported from the `runs_conc` bench of
//! the run-index prototype.
#![allow(clippy::unwrap_used)] // benches: an unwrap is an assertion

#[path = "common/index_data.rs"]
mod data;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kvrouter_index::{seq_hashes, KvEvent, KvIndex, WorkerId};
use parking_lot::Mutex;

struct Ev {
    worker: u32,
    store: KvEvent,
    remove: KvEvent,
}

fn events(prompts: &[Vec<u32>], workers: usize, worker_base: u32, salt: u64) -> Vec<Ev> {
    prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let seq = seq_hashes(p, data::PAGE);
            let engine: Vec<u64> = seq.iter().map(|s| data::engine_hash(*s ^ salt)).collect();
            Ev {
                worker: worker_base + data::owner(i, workers),
                store: KvEvent::StoredHashed {
                    parent: None,
                    block_hashes: engine.clone(),
                    local_hashes: data::content_hashes(p)
                        .iter()
                        .map(|c| c ^ salt.rotate_left(7))
                        .collect(),
                },
                remove: KvEvent::Removed {
                    block_hashes: engine,
                },
            }
        })
        .collect()
}

fn blocks_of(e: &Ev) -> usize {
    match &e.remove {
        KvEvent::Removed { block_hashes } => block_hashes.len(),
        _ => 0,
    }
}

enum Ix {
    Plain(KvIndex),
    Locked(Mutex<KvIndex>),
}

impl Ix {
    fn name(&self) -> &'static str {
        match self {
            Ix::Plain(_) => "KvIndex",
            Ix::Locked(_) => "Mutex<KvIndex>",
        }
    }
    fn apply(&self, worker: u32, ev: &KvEvent) {
        let _ = match self {
            Ix::Plain(ix) => ix.apply(WorkerId(worker), 0, ev),
            Ix::Locked(ix) => ix.lock().apply(WorkerId(worker), 0, ev),
        };
    }
    fn find(&self, q: &[u64]) -> usize {
        match self {
            Ix::Plain(ix) => ix.find_matches(q).units.len(),
            Ix::Locked(ix) => ix.lock().find_matches(q).units.len(),
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
    let blocks: usize = evs.iter().map(blocks_of).sum();
    let (mut wall, mut cpu) = (0.0, 0.0);
    for _ in 0..rounds {
        let (t, c) = (Instant::now(), thread_cpu());
        for e in evs {
            ix.apply(e.worker, &e.store);
        }
        wall += t.elapsed().as_secs_f64();
        cpu += thread_cpu() - c;
        for e in evs {
            ix.apply(e.worker, &e.remove);
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
            black_box(ix.find(q));
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

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let prompts = data::trace_prompts(1000);
    let workers: usize = std::env::var("INDEX_RW_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512);
    let rounds: usize = std::env::var("INDEX_RW_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let base = events(&prompts, workers, 0, 0);
    let queries: Vec<Vec<u64>> = prompts.iter().map(|p| seq_hashes(p, data::PAGE)).collect();
    let blocks: usize = base.iter().map(blocks_of).sum();
    println!(
        "trace: 1000 requests, {blocks} blocks, {workers} workers resident; writer: {rounds} rounds of store-all + remove-all on workers {workers}..{}",
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
            let page = data::PAGE as u32;
            let ix = if kind == 0 {
                Ix::Plain(KvIndex::new(page))
            } else {
                Ix::Locked(Mutex::new(KvIndex::new(page)))
            };
            for e in &base {
                ix.apply(e.worker, &e.store);
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
