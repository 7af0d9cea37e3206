//! Scheduler unit tests: memory conservation, retraction, policies, events.

use super::*;
use crate::mock::sampler::Sampler;

fn limits(total: usize, chunk: Option<usize>) -> Limits {
    Limits {
        page_size: 4,
        total_tokens: total,
        max_running: 8,
        max_prefill_tokens: 16384,
        chunk_size: chunk,
        timing: TimingModel::default(),
        policy: SchedulePolicy::Fcfs,
    }
}

fn req(
    prompt: Vec<u32>,
    max_new: usize,
    tx: &mpsc::UnboundedSender<Reply>,
    index: u32,
) -> EngineRequest {
    EngineRequest {
        rid: format!("r{index}"),
        index,
        sampler: Sampler::new(0, &prompt, None, 0, 32000),
        prompt,
        max_new_tokens: max_new,
        stop_token_ids: Vec::new(),
        ignore_eos: false,
        stream: false,
        reply: tx.clone(),
        arrival: Instant::now(),
        ns: Default::default(),
        prebuilt: None,
        hold: None,
    }
}

fn run_until_idle(s: &mut Scheduler) -> Vec<Done> {
    let mut done = Vec::new();
    for _ in 0..10_000 {
        if !s.has_work() {
            break;
        }
        s.step();
        for (_, r) in s.take_outbox() {
            if let Reply::Done(d) = r {
                done.push(*d);
            }
        }
    }
    done.sort_by_key(|d| d.index);
    done
}

#[test]
fn memory_is_conserved_and_released() {
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut s = Scheduler::new(0, limits(256, Some(8)), Arc::from("v"));
    s.submit(
        (0..5)
            .map(|i| req((0..30).map(|t| t + i * 100).collect(), 7, &tx, i))
            .collect(),
    );
    let done = run_until_idle(&mut s);
    assert_eq!(done.len(), 5);
    assert!(done
        .iter()
        .all(|d| d.output_ids.len() == 7 && d.finish == FinishReason::Length(7)));
    assert_eq!(s.req_pages, 0, "requests hold no pages when idle");
    assert_eq!(
        s.cache.evictable_pages(),
        s.cache.tree_pages(),
        "nothing stays locked"
    );
    assert!(s.cache.tree_pages() <= s.total_pages);
}

#[test]
fn pressure_retracts_then_completes() {
    let (tx, _rx) = mpsc::unbounded_channel();
    // 12 pages; 3 requests of 8-token prompts growing to 28 tokens each need 21 pages.
    let mut s = Scheduler::new(0, limits(48, None), Arc::from("v"));
    s.submit(
        (0..3)
            .map(|i| req((0..8).map(|t| t + i * 50).collect(), 20, &tx, i))
            .collect(),
    );
    let done = run_until_idle(&mut s);
    assert_eq!(done.len(), 3);
    let reasons: Vec<&FinishReason> = done.iter().map(|d| &d.finish).collect();
    assert!(done.iter().all(|d| d.output_ids.len() == 20), "{reasons:?}");
    assert_eq!(s.req_pages, 0);
}

#[test]
fn pd_prefill_holds_its_kv_until_released_and_prebuilt_decodes_skip_the_tree() {
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut s = Scheduler::new(0, limits(256, Some(8)), Arc::from("v"));
    let mut r = req((0..30).collect(), 1, &tx, 0);
    r.hold = Some(7);
    s.submit(vec![r]);
    let done = run_until_idle(&mut s);
    assert_eq!(done[0].output_ids.len(), 1);
    assert!(!s.holds_no_kv(), "held through the transfer");
    assert!(!s.flush(), "no flush while a transfer holds KV");
    assert!(s.cache.evictable_pages() < s.cache.tree_pages(), "locked");
    s.release_held(7);
    assert!(s.holds_no_kv());
    assert_eq!(s.req_pages, 0);
    assert_eq!(s.cache.evictable_pages(), s.cache.tree_pages());
    assert!(s.flush());
    // A prebuilt decode without the radix cache: no prefill time, the given first token,
    // nothing inserted, all pages freed.
    let mut r = req((100..130).collect(), 4, &tx, 1);
    r.prebuilt = Some(crate::mock::engine::Prebuilt {
        first: (999, -0.5),
        radix: false,
        cached: 12,
    });
    s.submit(vec![r]);
    assert_eq!(s.step().sim_ms, 0.0, "the prompt's KV was transferred");
    let done = run_until_idle(&mut s);
    assert_eq!(done[0].output_ids.len(), 4);
    assert_eq!(done[0].output_ids[0], 999);
    assert_eq!(done[0].cached_tokens, 12, "the prefill's reported hit");
    assert_eq!(s.cache.tree_pages(), 0, "no radix cache on this decode");
    assert_eq!(s.req_pages, 0);
}

#[test]
fn oversized_request_is_aborted_not_spun() {
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut s = Scheduler::new(0, limits(16, None), Arc::from("v"));
    s.submit(vec![req((0..40).collect(), 1, &tx, 0)]);
    let done = run_until_idle(&mut s);
    assert!(matches!(done[0].finish, FinishReason::Abort(_)));
    assert!(!s.has_work());
}

#[test]
fn abort_by_rid_prefix_and_pause_modes() {
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut s = Scheduler::new(0, limits(1024, None), Arc::from("v"));
    s.submit(vec![
        req(vec![1, 2, 3], 100, &tx, 0),
        req(vec![4, 5, 6], 100, &tx, 1),
    ]);
    s.step();
    s.take_outbox();
    s.abort(Some("r1"), false, "x");
    assert_eq!(s.take_outbox().len(), 1);
    s.pause(PauseMode::InPlace);
    assert!(!s.flush(), "in-place pause keeps KV");
    s.resume();
    s.pause(PauseMode::Retract);
    assert!(s.flush(), "retracted requests hold no KV");
    s.resume();
    let done = run_until_idle(&mut s);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].output_ids.len(), 100);
}

#[test]
fn events_replayed_reproduce_the_resident_set() {
    use crate::mock::cache::CacheEvent;
    use rand::{Rng, SeedableRng};
    use std::collections::HashSet;
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut s = Scheduler::new(0, limits(160, Some(12)), Arc::from("v"));
    let mut resident: HashSet<i64> = HashSet::new();
    let mut removals = 0usize;
    let mut apply = |evs: Vec<CacheEvent>, resident: &mut HashSet<i64>| {
        for e in evs {
            match e {
                CacheEvent::Stored { hashes, .. } => resident.extend(hashes),
                CacheEvent::Removed { hashes, .. } => {
                    removals += 1;
                    for h in hashes {
                        assert!(resident.remove(&h), "removed a block never stored");
                    }
                }
                CacheEvent::Cleared => resident.clear(),
            }
        }
    };
    for round in 0..40u32 {
        let n = rng.random_range(1..5);
        let reqs = (0..n)
            .map(|i| {
                let shared = rng.random_range(0..3u32) * 1000;
                let len = rng.random_range(1..40usize);
                let prompt: Vec<u32> = (0..len as u32)
                    .map(|t| if t < 16 { shared + t } else { round * 100 + t })
                    .collect();
                req(prompt, rng.random_range(1..10), &tx, i)
            })
            .collect();
        if round % 13 == 12 {
            assert!(s.flush(), "idle rank flushes");
        }
        s.submit(reqs);
        while s.has_work() {
            s.step();
            s.take_outbox();
            let evs = s.cache_mut().take_events();
            apply(evs, &mut resident);
        }
        let evs = s.cache_mut().take_events();
        apply(evs, &mut resident);
        assert_eq!(resident, s.cache.resident_hashes(), "round {round}");
        assert_eq!(s.req_pages, 0);
    }
    assert!(removals > 0, "the workload exercised eviction");
}

fn limits_with(total: usize, max_running: usize, policy: SchedulePolicy) -> Limits {
    Limits {
        max_running,
        policy,
        ..limits(total, None)
    }
}

fn waiting_rids(s: &Scheduler) -> Vec<String> {
    s.waiting.iter().map(|q| q.req.rid.clone()).collect()
}

fn drain_done(s: &mut Scheduler, done: &mut Vec<Done>) {
    for (_, r) in s.take_outbox() {
        if let Reply::Done(d) = r {
            done.push(*d);
        }
    }
}

#[test]
fn new_request_reserves_its_whole_clipped_output() {
    // 16 pages of 4. A (8 + 20 out) runs; B needs 8 + 31 + one page = 43 tokens but only
    // 56 - 0.7 x 19 = 42.7 remain: SGLang's `total_tokens >= rem_total_tokens` says no. A
    // ratio-scaled reservation for B (2 + 6 pages beside A's 4) would have admitted it.
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut s = Scheduler::new(0, limits(64, None), Arc::from("v"));
    s.submit(vec![req((0..8).collect(), 20, &tx, 0)]);
    s.step();
    s.submit(vec![req((100..108).collect(), 31, &tx, 1)]);
    s.step();
    assert_eq!(s.snapshot().waiting, 1, "B waits for memory");
    assert!(s.batch_full, "a memory stop marks the batch full");
    let done = run_until_idle(&mut s);
    assert_eq!(done.len(), 2);
    assert!(done
        .iter()
        .all(|d| !matches!(d.finish, FinishReason::Abort(_))));
}

#[test]
fn retraction_takes_fewest_outputs_appends_to_queue_and_resets_ratio() {
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut s = Scheduler::new(0, limits(64, None), Arc::from("v"));
    s.submit(vec![req((0..8).collect(), 30, &tx, 0)]);
    s.step(); // A prefilled
    s.step(); // A decodes once
    s.new_token_ratio = 0.0; // let B in without reserving A's output
    s.submit(vec![
        req((100..108).collect(), 30, &tx, 1),
        req((200..208).collect(), 40, &tx, 2),
    ]);
    let mut done = Vec::new();
    let mut seen = false;
    for _ in 0..200 {
        s.step();
        drain_done(&mut s, &mut done);
        if let Some(b) = s.waiting.iter().find(|q| q.retractions > 0) {
            assert_eq!(b.req.rid, "r1", "B has fewer outputs than A");
            assert_eq!(
                waiting_rids(&s),
                ["r2", "r1"],
                "retracted requests go to the back"
            );
            assert_eq!(b.kv_len, 0, "its KV is freed");
            let a = &s.running[0];
            let want = ((a.output_len() + 20) as f64 / 31.0).min(1.0);
            assert!((s.new_token_ratio - want).abs() < 1e-9);
            seen = true;
            break;
        }
    }
    assert!(seen, "the workload retracted");
    done.extend(run_until_idle(&mut s));
    done.sort_by_key(|d| d.index);
    assert_eq!(done.len(), 3);
    assert_eq!(done[1].retractions, 1);
    assert_eq!(
        done[1].output_ids.len(),
        30,
        "a retracted request still completes"
    );
    assert_eq!(s.req_pages, 0);
}

#[test]
fn lpm_orders_by_cached_prefix_and_defers_in_batch_duplicates() {
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut s = Scheduler::new(0, limits_with(1024, 1, SchedulePolicy::Lpm), Arc::from("v"));
    let cached: Vec<u32> = (1000..1040).collect();
    s.submit(vec![req(cached.clone(), 1, &tx, 9)]);
    run_until_idle(&mut s);
    let dup: Vec<u32> = (0..40).collect();
    let mut warm = cached.clone();
    warm.extend(500..510);
    s.submit(vec![
        req(dup.clone(), 1, &tx, 0),
        req((2000..2040).collect(), 1, &tx, 1),
        req(dup, 1, &tx, 2),
        req(warm, 1, &tx, 3),
    ]);
    s.order_waiting();
    // r3 matches 40 cached tokens; r2 repeats r0's first 32 tokens, so it goes last.
    assert_eq!(waiting_rids(&s), ["r3", "r0", "r1", "r2"]);

    let mut f = Scheduler::new(
        0,
        limits_with(1024, 1, SchedulePolicy::Fcfs),
        Arc::from("v"),
    );
    f.submit(vec![
        req((0..40).collect(), 1, &tx, 0),
        req((5..45).collect(), 1, &tx, 1),
    ]);
    f.order_waiting();
    assert_eq!(waiting_rids(&f), ["r0", "r1"], "fcfs keeps arrival order");
}

#[test]
fn lpm_falls_back_to_fcfs_above_128_waiting() {
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut s = Scheduler::new(0, limits_with(8192, 1, SchedulePolicy::Lpm), Arc::from("v"));
    let cached: Vec<u32> = (1000..1040).collect();
    s.submit(vec![req(cached.clone(), 1, &tx, 999)]);
    run_until_idle(&mut s);
    let mut reqs: Vec<EngineRequest> = (0..129u32)
        .map(|i| req((10_000 + i * 50..10_040 + i * 50).collect(), 1, &tx, i))
        .collect();
    reqs.push(req(cached.clone(), 1, &tx, 129));
    s.submit(reqs);
    s.order_waiting();
    assert_eq!(s.waiting.back().map(|q| q.req.rid.as_str()), Some("r129"));
    s.waiting.truncate(127);
    s.submit(vec![req(cached, 1, &tx, 500)]);
    s.order_waiting();
    assert_eq!(s.waiting.front().map(|q| q.req.rid.as_str()), Some("r500"));
}

#[test]
fn roofline_decode_time_follows_batch_and_context() {
    use crate::mock::engine::timing::Roofline;
    let (tx, _rx) = mpsc::unbounded_channel();
    let lim = Limits {
        timing: TimingModel::Roofline(Roofline::default()),
        ..limits(8192, None)
    };
    let mut one = Scheduler::new(0, lim.clone(), Arc::from("v"));
    one.submit(vec![req((0..400).collect(), 5, &tx, 0)]);
    one.step();
    let short = one.step().sim_ms;
    let mut long = Scheduler::new(0, lim.clone(), Arc::from("v"));
    long.submit(vec![req((0..4000).collect(), 5, &tx, 0)]);
    long.step();
    assert!(long.step().sim_ms > short, "more context, slower step");
    let mut many = Scheduler::new(0, lim, Arc::from("v"));
    many.submit(
        (0..4u32)
            .map(|i| req((i * 1000..i * 1000 + 100).collect(), 5, &tx, i))
            .collect(),
    );
    many.step();
    assert!(many.step().sim_ms > short, "more requests, slower step");
}
