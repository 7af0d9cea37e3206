//! Latency percentiles and memory of the KV index on the conversation trace,
//! printed as plain lines (criterion reports means only):
//! `find_matches` p50/p99 at 8 / 64 / 512 workers, 64k-token cold query and
//! next turn, bytes per (block, worker) counted by a global allocator wrapper,
//! and memory after eviction churn.
//! `scale`: find p50/p99 against prompt length (1k..128k tokens) and a fleet of
//! 1,000 workers x 100k-token contexts filled a quarter at a time (bytes per
//! entry and find latency after each quarter: linear memory, flat find?).
//! Run: `cargo bench -p kvrouter-index --bench index_report`; `KVROUTER_BENCH_ONLY=ingest,find,long,memory,churn,scale`
//! picks sections (`scale` only when named: it holds ~6M entries), `KVROUTER_BENCH_REPS` sets the ingest repetitions (default 5).
#![allow(unsafe_code)] // the counting global allocator below must implement `GlobalAlloc`
#![allow(clippy::unwrap_used)] // tests and benches: an unwrap is an assertion

#[path = "common/index_data.rs"]
mod data;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use kvrouter_index::{seq_hashes, BlockHasher, KvEvent, KvIndex, WorkerId};

/// Counts live heap bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

const REQUESTS: usize = 1000;

fn stored_event(tokens: &[u32], identity: bool) -> KvEvent {
    let seqs = seq_hashes(tokens, data::PAGE);
    KvEvent::Stored {
        parent: None,
        block_hashes: seqs
            .iter()
            .map(|s| if identity { *s } else { data::engine_hash(*s) })
            .collect(),
        token_ids: tokens[..seqs.len() * data::PAGE].to_vec(),
        block_size: data::PAGE as u32,
    }
}

fn percentiles(mut samples: Vec<u64>) -> (u64, u64, u64) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99), at(1.0))
}

fn time_ns(mut f: impl FnMut()) -> u64 {
    let t = Instant::now();
    f();
    t.elapsed().as_nanos() as u64
}

fn report(name: &str, samples: Vec<u64>) {
    let (p50, p99, max) = percentiles(samples);
    println!(
        "{name:<44} p50 {:>9.2} us  p99 {:>9.2} us  max {:>9.2} us",
        p50 as f64 / 1e3,
        p99 as f64 / 1e3,
        max as f64 / 1e3
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let prompts = data::trace_prompts(REQUESTS);
    let queries: Vec<Vec<u64>> = prompts.iter().map(|p| seq_hashes(p, data::PAGE)).collect();

    if data::section("ingest") {
        ingest(&prompts, &queries);
    }
    if data::section("find") {
        find(&prompts, &queries);
    }
    if data::section("long") {
        long(&prompts);
    }
    if data::section("memory") {
        memory(&prompts);
    }
    if data::section("churn") {
        churn();
    }
    if std::env::var("KVROUTER_BENCH_ONLY").is_ok_and(|v| v.split(',').any(|s| s == "scale")) {
        by_length(&prompts);
        big_fleet();
    }
}

fn ingest(prompts: &[Vec<u32>], queries: &[Vec<u64>]) {
    println!("== ingest (SGLang-like events: opaque engine hashes, parent None)");
    for w in [8usize, 64, 512] {
        let evs: Vec<_> = prompts.iter().map(|p| stored_event(p, false)).collect();
        let blocks: usize = queries.iter().map(Vec::len).sum();
        let mut best = (0.0f64, 0.0f64);
        let reps = std::env::var("KVROUTER_BENCH_REPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5);
        for _ in 0..reps {
            let idx = KvIndex::new(data::PAGE as u32);
            let (t, cpu) = (Instant::now(), data::cpu_secs());
            for (i, ev) in evs.iter().enumerate() {
                let _ = idx.apply(WorkerId(data::owner(i, w)), 0, ev);
            }
            let wall = blocks as f64 / t.elapsed().as_secs_f64() / 1e6;
            let per_cpu = blocks as f64 / (data::cpu_secs() - cpu).max(0.01) / 1e6;
            best = (best.0.max(wall), best.1.max(per_cpu));
        }
        println!("ingest {w:>3} workers: {blocks} blocks, best of {reps}: {:.2} M blocks/s wall, {:.2} M blocks/CPU-s", best.0, best.1);
    }
}

fn find(prompts: &[Vec<u32>], queries: &[Vec<u64>]) {
    println!("== find_matches latency ({REQUESTS} trace requests stored round-robin, page 16)");
    for w in [8usize, 64, 512, 1000] {
        let evs: Vec<_> = prompts.iter().map(|p| stored_event(p, false)).collect();
        let idx = KvIndex::new(data::PAGE as u32);
        for (i, ev) in evs.iter().enumerate() {
            let _ = idx.apply(WorkerId(data::owner(i, w)), 0, ev);
        }
        let mut s = Vec::new();
        let mut h = Vec::new();
        for round in 0..5 {
            for (q, p) in queries.iter().zip(prompts) {
                s.push(time_ns(|| {
                    black_box(idx.find_matches(black_box(q)));
                }));
                if round == 0 {
                    h.push(time_ns(|| {
                        black_box(idx.find_matches(&seq_hashes(black_box(p), data::PAGE)));
                    }));
                }
            }
        }
        report(&format!("find (seq hashes given) {w} workers"), s);
        report(&format!("hash + find (trace prompt) {w} workers"), h);
    }
}

fn long(prompts: &[Vec<u32>]) {
    println!("== 64k-token prompt (stored on one of 64 workers holding the trace)");
    let idx = KvIndex::new(data::PAGE as u32);
    for (i, p) in prompts.iter().enumerate() {
        let _ = idx.apply(WorkerId(data::owner(i, 64)), 0, &stored_event(p, false));
    }
    let long = data::long_prompt(65_536, 7);
    let _ = idx.apply(WorkerId(3), 0, &stored_event(&long, false));
    let mut next = long.clone();
    next.extend(data::long_prompt(1024, 8));
    let (mut cold, mut turn, mut miss) = (Vec::new(), Vec::new(), Vec::new());
    let unknown = data::long_prompt(65_536, 9);
    let mut hasher = BlockHasher::from_tokens(data::PAGE, &long);
    for _ in 0..300 {
        cold.push(time_ns(|| {
            black_box(idx.find_matches(&seq_hashes(black_box(&long), data::PAGE)));
        }));
        miss.push(time_ns(|| {
            black_box(idx.find_matches(&seq_hashes(black_box(&unknown), data::PAGE)));
        }));
        turn.push(time_ns(|| {
            hasher.advance_to(black_box(&next), long.len());
            black_box(idx.find_matches(hasher.seq_hashes()));
        }));
    }
    report("64k cold hash + find (4096 blocks matched)", cold);
    report("64k cold hash + find (nothing matched)", miss);
    report("next turn: hash 1k new tokens + find", turn);
}

fn memory(prompts: &[Vec<u32>]) {
    println!("== memory per (block, worker) entry, counted by the allocator");
    for identity in [false, true] {
        for w in [8usize, 64, 512] {
            let evs: Vec<_> = prompts.iter().map(|p| stored_event(p, identity)).collect();
            let before = live();
            let idx = KvIndex::new(data::PAGE as u32);
            for (i, ev) in evs.iter().enumerate() {
                let _ = idx.apply(WorkerId(data::owner(i, w)), 0, ev);
            }
            let bytes = live() - before;
            let entries = idx.resident_blocks();
            println!(
                "{:<8} {w:>3} workers: {entries:>7} entries, {:>6} distinct blocks, {bytes:>10} B counted = {:.1} B/entry (memory_bytes() says {:.1})",
                if identity { "identity" } else { "opaque" },
                idx.distinct_blocks(),
                bytes as f64 / entries as f64,
                idx.memory_bytes() as f64 / entries as f64,
            );
            drop(idx);
        }
    }
}

fn churn() {
    println!("== eviction churn (64 workers; window of 500 requests slides over 2000)");
    let prompts = data::trace_prompts(2000);
    let evs: Vec<_> = prompts.iter().map(|p| stored_event(p, false)).collect();
    let before = live();
    let idx = KvIndex::new(data::PAGE as u32);
    let removal = |i: usize| match &evs[i] {
        KvEvent::Stored { block_hashes, .. } => KvEvent::Removed {
            block_hashes: block_hashes.clone(),
        },
        _ => unreachable!(),
    };
    let mut peak = 0;
    for i in 0..evs.len() {
        let _ = idx.apply(WorkerId(data::owner(i, 64)), 0, &evs[i]);
        if i >= 500 {
            let _ = idx.apply(WorkerId(data::owner(i - 500, 64)), 0, &removal(i - 500));
        }
        peak = peak.max(live() - before);
        if i == 499 || i == evs.len() - 1 {
            println!(
                "after {:>4} requests: {:>7} entries, {:>10} B counted ({:.1} B/entry), peak {peak} B",
                i + 1,
                idx.resident_blocks(),
                live() - before,
                (live() - before) as f64 / idx.resident_blocks().max(1) as f64
            );
        }
    }
    for i in evs.len() - 500..evs.len() {
        let _ = idx.apply(WorkerId(data::owner(i, 64)), 0, &removal(i));
    }
    println!(
        "after evicting everything: {} entries, {} B counted (memory_bytes() says {})",
        idx.resident_blocks(),
        live() - before,
        idx.memory_bytes()
    );
}

/// find latency against prompt length: a 128k-token prompt stored on one of 64
/// workers holding the trace; its first 1k / 8k / 32k / 128k tokens queried.
fn by_length(prompts: &[Vec<u32>]) {
    println!("== find_matches against prompt length (64 workers hold the trace)");
    let idx = KvIndex::new(data::PAGE as u32);
    for (i, p) in prompts.iter().enumerate() {
        let _ = idx.apply(WorkerId(data::owner(i, 64)), 0, &stored_event(p, false));
    }
    let long = data::long_prompt(131_072, 11);
    let _ = idx.apply(WorkerId(3), 0, &stored_event(&long, false));
    for len in [1024usize, 8192, 32_768, 131_072] {
        let q = seq_hashes(&long[..len], data::PAGE);
        let (mut f, mut hf) = (Vec::new(), Vec::new());
        for _ in 0..2000 {
            f.push(time_ns(|| {
                black_box(idx.find_matches(black_box(&q)));
            }));
        }
        for _ in 0..200 {
            hf.push(time_ns(|| {
                black_box(idx.find_matches(&seq_hashes(black_box(&long[..len]), data::PAGE)));
            }));
        }
        report(&format!("find {len:>6} tokens (all matched)"), f);
        report(&format!("hash + find {len:>6} tokens"), hf);
    }
}

/// 1,000 workers, each holding one 100k-token context (a shared 2k-token
/// system prompt, the rest its own), filled a quarter at a time.
fn big_fleet() {
    const WORKERS: usize = 1000;
    const TOKENS: usize = 100_000;
    println!("== {WORKERS} workers x {TOKENS}-token contexts (opaque engine hashes)");
    let system = data::long_prompt(2048, 21);
    let before = live();
    let idx = KvIndex::new(data::PAGE as u32);
    let (mut cpu, mut blocks) = (0.0f64, 0usize);
    let context = |w: usize| {
        let mut t = system.clone();
        t.extend(data::long_prompt(TOKENS - system.len(), 1000 + w as u64));
        t
    };
    for quarter in 1..=4 {
        for w in (quarter - 1) * WORKERS / 4..quarter * WORKERS / 4 {
            let ev = stored_event(&context(w), false);
            if let KvEvent::Stored { block_hashes, .. } = &ev {
                blocks += block_hashes.len();
            }
            let c = data::cpu_secs();
            let _ = idx.apply(WorkerId(w as u32), 0, &ev);
            cpu += data::cpu_secs() - c;
        }
        let entries = idx.resident_blocks();
        let bytes = live() - before;
        let probe = seq_hashes(&context(0), data::PAGE);
        let shared = seq_hashes(&system, data::PAGE);
        let (mut own, mut sys) = (Vec::new(), Vec::new());
        for _ in 0..500 {
            own.push(time_ns(|| {
                black_box(idx.find_matches(black_box(&probe)));
            }));
            sys.push(time_ns(|| {
                black_box(idx.find_matches(black_box(&shared)));
            }));
        }
        println!(
            "{:>4} workers: {entries:>8} entries, {bytes:>11} B = {:.1} B/entry, ingest {:.2} M blocks/CPU-s so far",
            quarter * WORKERS / 4,
            bytes as f64 / entries.max(1) as f64,
            blocks as f64 / cpu.max(1e-9) / 1e6
        );
        report(&format!("  find one context ({} blocks)", probe.len()), own);
        report(
            &format!(
                "  find system prompt ({} blocks, all hold it)",
                shared.len()
            ),
            sys,
        );
    }
}
