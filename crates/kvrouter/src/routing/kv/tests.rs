//! In-process tests of `KvPolicy` and the KV-mode `Selector`: overlap, predict-on-route,
//! sticky preference and yield, DP ranks, requests without token ids.

use std::sync::Arc;
use std::time::Duration;

use kvrouter_index::{KvEvent, KvIndex};

use super::*;
use crate::routing::{Endpoint, Policy, RoutingInput, Selector, StickyTable};
use crate::workers::{Worker, WorkerId, WorkerInfo};

const PAGE: u32 = 4;

fn worker(id: u32, dp: u32) -> Arc<Worker> {
    worker_holding(id, dp, None)
}

/// A worker with `dp` ranks advertising `max_total_num_tokens` of KV per rank.
fn worker_holding(id: u32, dp: u32, max_total_num_tokens: Option<u64>) -> Arc<Worker> {
    let info = WorkerInfo {
        page_size: PAGE,
        dp_size: dp,
        max_total_num_tokens,
        ..WorkerInfo::default()
    };
    Arc::new(Worker::new(
        WorkerId(id),
        &format!("http://10.0.0.{id}:30000"),
        info,
    ))
}

fn settings(predict: bool) -> KvPolicySettings {
    KvPolicySettings::from_config(&crate::routing::kv::KvConfig {
        predict,
        ..crate::routing::kv::KvConfig::default()
    })
}

fn policy(predict: bool) -> (KvPolicy, Arc<KvIndex>) {
    let index = Arc::new(KvIndex::new(PAGE));
    let p = KvPolicy::new(
        index.clone(),
        Arc::new(UnitLoads::default()),
        settings(predict),
    );
    (p, index)
}

fn body(tokens: &[u32]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "input_ids": tokens })).unwrap()
}

fn stream_body(tokens: &[u32]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "input_ids": tokens, "stream": true })).unwrap()
}

fn store(index: &KvIndex, w: u32, rank: u32, tokens: &[u32]) {
    let n = tokens.len() / PAGE as usize;
    index
        .apply(
            WorkerId(w),
            rank,
            &KvEvent::Stored {
                parent: None,
                block_hashes: (0..n as u64).map(|i| 1000 + i).collect(),
                token_ids: tokens[..n * PAGE as usize].to_vec(),
                block_size: PAGE,
            },
        )
        .unwrap();
}

fn tokens(seed: u32, len: u32) -> Vec<u32> {
    (0..len).map(|i| seed * 100_000 + i).collect()
}

#[test]
fn the_cached_worker_wins() {
    let (p, index) = policy(true);
    let ws = vec![worker(1, 1), worker(2, 1), worker(3, 1)];
    let t = tokens(1, 64);
    store(&index, 2, 0, &t);
    let b = body(&t);
    let input = RoutingInput::parse(Endpoint::Generate, &b).unwrap();
    for _ in 0..5 {
        let c = p.select(&input, &ws).unwrap();
        assert_eq!(ws[c.index].id, WorkerId(2));
        assert_eq!(c.rank, None);
    }
}

#[test]
fn predict_on_route_keeps_siblings_together_and_no_predict_spreads_them() {
    for predict in [true, false] {
        let (p, _) = policy(predict);
        let ws = vec![worker(1, 1), worker(2, 1), worker(3, 1), worker(4, 1)];
        let b = body(&tokens(2, 256));
        let input = RoutingInput::parse(Endpoint::Generate, &b).unwrap();
        let held: Vec<_> = (0..16).map(|_| p.select(&input, &ws).unwrap()).collect();
        let mut used: Vec<usize> = held.iter().map(|c| c.index).collect();
        used.sort_unstable();
        used.dedup();
        if predict {
            assert_eq!(used.len(), 1, "siblings spread with prediction: {used:?}");
        } else {
            assert_eq!(
                used.len(),
                4,
                "no-predict burst should use every worker: {used:?}"
            );
        }
    }
}

/// Predict-on-route on the runtime's clock: a booking draws its siblings until its TTL, and
/// not after.
#[tokio::test(start_paused = true)]
async fn a_prediction_draws_siblings_until_its_ttl_and_not_after() {
    use tokio::time::advance;
    let (p, index) = policy(true);
    let ttl = settings(true).predict_ttl.unwrap();
    // The siblings are read by a policy on the same index that books nothing: a booking of
    // theirs would extend the predicted blocks' TTL (the index keeps the latest per block).
    let reader = KvPolicy::new(
        index.clone(),
        Arc::new(UnitLoads::default()),
        settings(false),
    );
    // The index counts time from its creation on the std clock: start past it.
    advance(Duration::from_secs(10)).await;
    let (w1, w2) = (worker(1, 1), worker(2, 1));
    let t = tokens(8, 64);
    store(&index, 2, 0, &t[..32]); // worker 2 holds the first half of the prompt
    let b = body(&t);
    let input = RoutingInput::parse(Endpoint::Generate, &b).unwrap();
    // The first request has only worker 1: its 16 blocks are predicted there. It ends (after
    // its first byte: the prediction stays, its load goes).
    let mut first = p.select(&input, std::slice::from_ref(&w1)).unwrap();
    let obs = first.observer.as_mut().unwrap();
    obs.on_response_head(http::StatusCode::OK);
    obs.on_data(br#"{"meta_info":{"cached_tokens":0}}"#);
    drop(first);
    let both = vec![w1, w2];
    advance(ttl - Duration::from_millis(10)).await;
    let sibling = reader.select(&input, &both).unwrap();
    assert_eq!(
        both[sibling.index].id,
        WorkerId(1),
        "predicted until the TTL"
    );
    drop(sibling);
    advance(Duration::from_millis(20)).await;
    let late = reader.select(&input, &both).unwrap();
    assert_eq!(both[late.index].id, WorkerId(2), "expired after it");
}

#[test]
fn a_failed_request_before_prefill_releases_its_prediction() {
    let (p, index) = policy(true);
    let ws = vec![worker(1, 1), worker(2, 1)];
    let t = tokens(3, 64);
    let seqs = kvrouter_index::seq_hashes(&t, PAGE as usize);
    for b in [stream_body(&t), body(&t)] {
        let input = RoutingInput::parse(Endpoint::Generate, &b).unwrap();
        let c = p.select(&input, &ws).unwrap();
        let chosen = ws[c.index].id;
        // Streaming: in flight until the first byte; non-streaming: only predicted.
        let inflight = if input.stream { 16 } else { 0 };
        assert_eq!(index.inflight_blocks(chosen, 0), inflight);
        assert_eq!(index.find_matches(&seqs).units[0].predicted, 16);
        drop(c); // dropped before the first byte
        assert_eq!(index.inflight_blocks(chosen, 0), 0);
        assert!(index.find_matches(&seqs).units.is_empty());
    }
}

#[test]
fn first_byte_ends_the_inflight_prefill_and_keeps_the_prediction() {
    let (p, index) = policy(true);
    let ws = vec![worker(1, 1)];
    let t = tokens(4, 64);
    let b = stream_body(&t);
    let input = RoutingInput::parse(Endpoint::Generate, &b).unwrap();
    let mut c = p.select(&input, &ws).unwrap();
    assert_eq!(index.inflight_blocks(WorkerId(1), 0), 16);
    let obs = c.observer.as_mut().unwrap();
    obs.on_response_head(http::StatusCode::OK);
    obs.on_data(br#"data: {"meta_info":{"cached_tokens":0}}"#);
    assert_eq!(index.inflight_blocks(WorkerId(1), 0), 0);
    let seqs = kvrouter_index::seq_hashes(&t, PAGE as usize);
    assert_eq!(index.find_matches(&seqs).units[0].predicted, 16);
    drop(c); // after the first byte: the prediction stays
    assert_eq!(index.find_matches(&seqs).units[0].predicted, 16);
}

#[test]
fn the_prefix_holder_keeps_a_request_while_another_prefill_is_in_flight_there() {
    let (p, index) = policy(true);
    let ws = vec![worker(1, 1), worker(2, 1)];
    // Y (64 blocks) starts its prefill on worker 1, which holds its first 8 blocks.
    let y = tokens(7, 256);
    store(&index, 1, 0, &y[..32]);
    let yb = stream_body(&y);
    let y_input = RoutingInput::parse(Endpoint::Generate, &yb).unwrap();
    let y_choice = p.select(&y_input, &ws).unwrap();
    assert_eq!(ws[y_choice.index].id, WorkerId(1));
    assert_eq!(index.inflight_blocks(WorkerId(1), 0), 56);
    // A (16 blocks), 12 of them held on worker 1: it joins worker 1's queue rather than
    // prefilling all 16 on the idle worker 2 (with the removed queued-prefill term, Y's 56
    // blocks in flight sent it away).
    let a = tokens(8, 64);
    index
        .apply(
            WorkerId(1),
            0,
            &KvEvent::Stored {
                parent: None,
                block_hashes: (0..12).map(|i| 5000 + i).collect(),
                token_ids: a[..48].to_vec(),
                block_size: PAGE,
            },
        )
        .unwrap();
    let ab = stream_body(&a);
    let a_input = RoutingInput::parse(Endpoint::Generate, &ab).unwrap();
    let a_choice = p.select(&a_input, &ws).unwrap();
    assert_eq!(ws[a_choice.index].id, WorkerId(1));
    drop(y_choice);
}

#[test]
fn an_error_status_cancels_the_prediction_through_the_booking() {
    let (p, index) = policy(true);
    let ws = vec![worker(1, 1)];
    let t = tokens(6, 64);
    let seqs = kvrouter_index::seq_hashes(&t, PAGE as usize);
    let b = stream_body(&t);
    let input = RoutingInput::parse(Endpoint::Generate, &b).unwrap();
    let c = p.select(&input, &ws).unwrap();
    let mut booking = crate::routing::Booking::new(ws[c.index].clone(), c.rank, c.observer);
    booking.on_response_head(http::StatusCode::OK);
    assert_eq!(index.find_matches(&seqs).units[0].predicted, 16);
    booking.on_response_head(http::StatusCode::SERVICE_UNAVAILABLE);
    assert!(index.find_matches(&seqs).units.is_empty());
    assert_eq!(index.inflight_blocks(WorkerId(1), 0), 0);
    booking.on_data(b"data: {}");
    drop(booking);
    assert!(index.find_matches(&seqs).units.is_empty());
}

#[test]
fn dp_ranks_are_units_and_the_rank_is_returned() {
    let (p, index) = policy(true);
    let ws = vec![worker(1, 2), worker(2, 1)];
    let t = tokens(5, 64);
    store(&index, 1, 1, &t);
    let b = body(&t);
    let input = RoutingInput::parse(Endpoint::Generate, &b).unwrap();
    let c = p.select(&input, &ws).unwrap();
    assert_eq!((ws[c.index].id, c.rank), (WorkerId(1), Some(1)));
}

#[test]
fn requests_without_token_ids_are_routed_by_load() {
    let (p, _) = policy(true);
    let ws = vec![worker(1, 1), worker(2, 1)];
    let b = br#"{"text":"hello"}"#;
    let input = RoutingInput::parse(Endpoint::Generate, b).unwrap();
    let before = metrics::KvMetrics::get()
        .no_tokens
        .with_label_values(&["no_token_ids"])
        .get();
    let first = p.select(&input, &ws).unwrap();
    let second = p.select(&input, &ws).unwrap();
    assert_ne!(first.index, second.index, "load must spread text requests");
    let after = metrics::KvMetrics::get()
        .no_tokens
        .with_label_values(&["no_token_ids"])
        .get();
    assert!(after >= before + 2);
}

#[test]
fn sticky_key_is_kept_unless_its_worker_is_overloaded() {
    let index = Arc::new(KvIndex::new(PAGE));
    let loads = Arc::new(UnitLoads::default());
    let p = KvPolicy::new(index.clone(), loads.clone(), settings(true));
    let selector = Selector::new(Box::new(p), StickyTable::new(Duration::from_secs(60)));
    let ws = vec![worker(1, 1), worker(2, 1)];
    let t = tokens(6, 64);
    let b = body(&t);
    let input = RoutingInput::parse(Endpoint::Generate, &b).unwrap();
    let first = selector.select(&input, Some("session"), &ws).unwrap();
    let home = first.worker().id;
    drop(first);
    // Moderate load on the home worker: the key stays.
    let _some: Vec<_> = (0..4).map(|_| loads.begin(home, 0, None, 64)).collect();
    let again = selector.select(&input, Some("session"), &ws).unwrap();
    assert_eq!(again.worker().id, home);
    drop(again);
    // Overloaded: yields to the cost model, and the key follows.
    let _many: Vec<_> = (0..200).map(|_| loads.begin(home, 0, None, 64)).collect();
    let moved = selector.select(&input, Some("session"), &ws).unwrap();
    assert_ne!(moved.worker().id, home);
    let new_home = moved.worker().id;
    drop(moved);
    drop(_many);
    let back = selector.select(&input, Some("session"), &ws).unwrap();
    assert_eq!(back.worker().id, new_home, "the key moved with the yield");
}

#[test]
fn a_unit_learned_to_be_slow_is_scaled_and_equal_units_are_not() {
    let index = Arc::new(KvIndex::new(PAGE));
    let rates = Arc::new(UnitRates::new(rates::RateSettings::default()));
    let p = KvPolicy::new(
        index.clone(),
        Arc::new(UnitLoads::default()),
        settings(true),
    )
    .with_rates(rates.clone());
    let ws = vec![worker(1, 1), worker(2, 1)];
    // 64 tokens = 16 blocks; worker 2 reports 3x the prefill and decode time of worker 1.
    let feed = |w: usize, scale: f64, seed: u32| {
        // Distinct prefill latencies (one pass each), 1-2% apart.
        let scale = scale * (1.0 + f64::from(seed % 100) / 5000.0);
        let b = body(&tokens(seed, 64));
        let input = RoutingInput::parse(Endpoint::Generate, &b).unwrap();
        let c = p.select(&input, &ws[w..=w]).unwrap();
        let mut obs = c.observer.unwrap();
        obs.on_response_head(http::StatusCode::OK);
        let meta = serde_json::json!({"meta_info": {"prompt_tokens": 64, "cached_tokens": 0,
            "completion_tokens": 11, "queue_time": 0.0, "prefill_launch_latency": 0.016 * scale,
            "e2e_latency": 0.016 * scale + 0.1 * scale}});
        obs.on_data(&serde_json::to_vec(&meta).unwrap());
    };
    for i in 0..20 {
        feed(0, 1.0, 100 + i);
        feed(1, 1.2, 200 + i); // within the tolerance: same speed
    }
    rates.refresh();
    assert_eq!(rates.speed(WorkerId(2), 0), rates::Speed::UNIT);
    for i in 0..64 {
        feed(1, 3.0, 300 + i); // the window now holds only 3x samples
    }
    rates.refresh();
    let slow = rates.speed(WorkerId(2), 0);
    assert!((slow.prefill - 3.0).abs() < 0.1, "{slow:?}");
    assert!((slow.decode - 3.0).abs() < 0.1, "{slow:?}");
    // 4 of 16 blocks cached on the slow worker: the block model sends it there (12 < 16),
    // the time model to the fast cold one (3 * 12 > 16).
    let t = tokens(9, 64);
    store(&index, 2, 0, &t[..16]);
    let b = body(&t);
    let input = RoutingInput::parse(Endpoint::Generate, &b).unwrap();
    let c = p.select(&input, &ws).unwrap();
    assert_eq!(ws[c.index].id, WorkerId(1));
    let (block, _) = policy(true);
    store(block.index(), 2, 0, &t[..16]);
    assert_eq!(ws[block.select(&input, &ws).unwrap().index].id, WorkerId(2));
}

/// A policy of its own (index, loads) over workers `ids` (URLs `http://10.0.0.{id}:30000`)
/// registered under local ids offset by `id_base`, in the given order: another replica.
fn replica(
    ids: &[u32],
    id_base: u32,
    blind_threshold: f64,
) -> (KvPolicy, Vec<Arc<Worker>>, Arc<UnitLoads>) {
    let loads = Arc::new(UnitLoads::default());
    let mut s = settings(true);
    s.blind.threshold = blind_threshold;
    let p = KvPolicy::new(Arc::new(KvIndex::new(PAGE)), loads.clone(), s);
    // Worker `i` of the list is `10.0.0.{ids[i]}` with id `id_base + i + 1`: each replica
    // numbers the workers in the order it registered them (the candidates' order), so replicas
    // given the URLs in different orders list them in different orders.
    let ws = (1..)
        .zip(ids)
        .map(|(i, &id)| {
            let info = WorkerInfo {
                page_size: PAGE,
                ..WorkerInfo::default()
            };
            Arc::new(Worker::new(
                WorkerId(id_base + i),
                &format!("http://10.0.0.{id}:30000"),
                info,
            ))
        })
        .collect();
    (p, ws, loads)
}

/// For prompts 100.., whether replicas A and B send each cold prompt to the same URL.
fn replicas_agree(blind_threshold: f64, prompts: u32) -> Vec<bool> {
    let (a, wa, _) = replica(&[1, 2, 3, 4], 0, blind_threshold);
    let (b, wb, _) = replica(&[4, 3, 2, 1], 50, blind_threshold);
    (100..100 + prompts)
        .map(|seed| {
            let body = body(&tokens(seed, 64));
            let input = RoutingInput::parse(Endpoint::Generate, &body).unwrap();
            let ca = a.select(&input, &wa).unwrap();
            let cb = b.select(&input, &wb).unwrap();
            wa[ca.index].url == wb[cb.index].url
        })
        .collect()
}

#[test]
fn replicas_place_a_blind_prompt_on_the_same_worker_without_talking() {
    assert!(replicas_agree(0.5, 20).iter().all(|&x| x));
    // With the rule off, ties are broken at random: 20 agreements by chance have p = 4^-20.
    assert!(replicas_agree(0.0, 20).iter().any(|&x| !x));
}

#[test]
fn a_prefix_cached_everywhere_keeps_a_request_blind() {
    let (a, wa, _) = replica(&[1, 2, 3], 0, 0.5);
    let (b, wb, _) = replica(&[3, 1, 2], 70, 0.5);
    // A 16-token system prefix (4 of the 16 blocks) cached on every worker of both replicas.
    let system = tokens(9, 16);
    for (p, ws) in [(&a, &wa), (&b, &wb)] {
        for w in ws.iter() {
            store(p.index(), w.id.0, 0, &system);
        }
    }
    for seed in 200..210 {
        let mut t = system.clone();
        t.extend(tokens(seed, 48));
        let body = body(&t);
        let input = RoutingInput::parse(Endpoint::Generate, &body).unwrap();
        let ca = a.select(&input, &wa).unwrap();
        let cb = b.select(&input, &wb).unwrap();
        assert_eq!(wa[ca.index].url, wb[cb.index].url, "prompt {seed}");
    }
}

#[test]
fn a_real_overlap_is_decided_by_the_cost_model() {
    // The prompt's deepest overlap (12 of 16 blocks on worker 2) is no blind case: every
    // replica sends it there, whatever the prompt's rendezvous order.
    for seed in 300..310 {
        let (p, ws, _) = replica(&[1, 2, 3, 4], 0, 0.5);
        let t = tokens(seed, 64);
        store(p.index(), 2, 0, &t[..48]);
        let body = body(&t);
        let input = RoutingInput::parse(Endpoint::Generate, &body).unwrap();
        assert_eq!(ws[p.select(&input, &ws).unwrap().index].id, WorkerId(2));
    }
}

#[test]
fn a_loaded_first_choice_spills_the_same_way_on_both_replicas() {
    let (a, wa, la) = replica(&[1, 2, 3, 4], 0, 0.5);
    let (b, wb, lb) = replica(&[2, 4, 1, 3], 10, 0.5);
    let body = body(&tokens(400, 64));
    let input = RoutingInput::parse(Endpoint::Generate, &body).unwrap();
    // Where an idle replica sends it (a third one: A's own booking would make it not blind).
    let (c, wc, _) = replica(&[1, 2, 3, 4], 20, 0.5);
    let idle = wc[c.select(&input, &wc).unwrap().index].url.clone();
    // Both replicas see that worker busy with other requests (each its own share).
    let busy = |ws: &[Arc<Worker>], loads: &UnitLoads| {
        let w = ws.iter().find(|w| w.url == idle).unwrap();
        (0..8)
            .map(|_| loads.begin(w.id, 0, None, 64))
            .collect::<Vec<_>>()
    };
    let _ga = busy(&wa, &la);
    let _gb = busy(&wb, &lb);
    let ca = a.select(&input, &wa).unwrap();
    let cb = b.select(&input, &wb).unwrap();
    assert_ne!(wa[ca.index].url, idle, "over the bound: the request moves");
    assert_eq!(wa[ca.index].url, wb[cb.index].url, "to the same next unit");
}

/// Two single-rank workers holding `tokens` KV tokens each, a policy with rates and pressure
/// (reference prefill 1 s per block), its loads and its pressure.
fn pressured(
    eviction_risk: bool,
    capacity: u64,
) -> (
    KvPolicy,
    Vec<Arc<Worker>>,
    Arc<UnitLoads>,
    Arc<UnitPressure>,
) {
    let index = Arc::new(KvIndex::new(PAGE));
    let loads = Arc::new(UnitLoads::default());
    let rates = Arc::new(UnitRates::new(rates::RateSettings::default()));
    rates.set_reference_prefill_secs(1.0);
    let pressure = Arc::new(UnitPressure::default());
    let settings = KvPolicySettings {
        eviction_risk,
        ..settings(true)
    };
    let p = KvPolicy::new(index, loads.clone(), settings)
        .with_rates(rates)
        .with_pressure(pressure.clone());
    let ws = vec![
        worker_holding(1, 1, Some(capacity)),
        worker_holding(2, 1, Some(capacity)),
    ];
    (p, ws, loads, pressure)
}

#[test]
fn a_prefix_the_holder_will_evict_before_it_runs_is_not_worth_its_queue() {
    for risk in [true, false] {
        let (p, ws, loads, pressure) = pressured(risk, 1 << 20);
        let t = tokens(500, 64); // 16 blocks
        store(p.index(), 1, 0, &t);
        // Worker 1 also held 100 other blocks and evicted them all within a second ...
        let other = tokens(501, 400);
        p.index()
            .apply(
                WorkerId(1),
                0,
                &KvEvent::Stored {
                    parent: None,
                    block_hashes: (0..100).map(|i| 5000 + i).collect(),
                    token_ids: other,
                    block_size: PAGE,
                },
            )
            .unwrap();
        let t0 = tokio::time::Instant::now();
        pressure.refresh(p.index(), t0);
        let gone = KvEvent::Removed {
            block_hashes: (0..100).map(|i| 5000 + i).collect(),
        };
        p.index().apply(WorkerId(1), 0, &gone).unwrap();
        pressure.refresh(p.index(), t0 + Duration::from_secs(1));
        // ... and runs another request: ours would wait 8.5 s while 18 blocks/s leave a
        // cache of 16: its prefix is gone by then, the cold idle worker is faster.
        let _busy = loads.begin(WorkerId(1), 0, None, 64);
        let b = body(&t);
        let input = RoutingInput::parse(Endpoint::Generate, &b).unwrap();
        let c = p.select(&input, &ws).unwrap();
        let want = if risk { WorkerId(2) } else { WorkerId(1) };
        assert_eq!(ws[c.index].id, want, "eviction risk {risk}");
    }
}

#[test]
fn a_full_cache_pays_for_the_prefixes_a_new_prefill_evicts() {
    // 16-block caches; worker 1 is full of other blocks, worker 2 is empty.
    let (p, ws, _, pressure) = pressured(true, 64);
    store(p.index(), 1, 0, &tokens(600, 64));
    pressure.refresh(p.index(), tokio::time::Instant::now());
    for _ in 0..1024 {
        pressure.observe_reuse(0.5);
    }
    for seed in 601..609 {
        // Distinct cold prompts, equal load: only the 8 displaced blocks tell them apart.
        let b = body(&tokens(seed, 32));
        let input = RoutingInput::parse(Endpoint::Generate, &b).unwrap();
        let c = p.select(&input, &ws).unwrap();
        assert_eq!(ws[c.index].id, WorkerId(2));
    }
}

/// Worker 1 holds a live prediction of `t` that nothing confirmed; its earlier predictions
/// expired unconfirmed by the thousand (its store events name other blocks).
fn unconfirmed_predictions(credit: crate::routing::kv::PredictCredit) -> (KvPolicy, Vec<u32>) {
    let index = Arc::new(KvIndex::new(PAGE));
    let settings = KvPolicySettings {
        predict_credit: credit,
        ..settings(true)
    };
    let p = KvPolicy::new(index.clone(), Arc::new(UnitLoads::default()), settings);
    store(&index, 1, 0, &tokens(90, 8));
    store(&index, 2, 0, &tokens(91, 8));
    let t0 = tokio::time::Instant::now().into_std();
    for seed in 0..100 {
        let seqs = kvrouter_index::seq_hashes(&tokens(100 + seed, 256), PAGE as usize);
        let mut b = index
            .book_at(WorkerId(1), 0, &seqs, Duration::from_millis(1), t0)
            .unwrap();
        b.prefill_done();
    }
    index.expire_predictions(t0 + Duration::from_secs(1));
    let t = tokens(7, 64);
    let seqs = kvrouter_index::seq_hashes(&t, PAGE as usize);
    let mut live = index
        .book(WorkerId(1), 0, &seqs, Duration::from_secs(600))
        .unwrap();
    live.prefill_done();
    drop(live);
    (p, t)
}

#[test]
fn learned_credit_stops_trusting_a_unit_whose_predictions_never_confirm() {
    use crate::routing::kv::PredictCredit;
    for credit in [PredictCredit::Full, PredictCredit::Learned] {
        let (p, t) = unconfirmed_predictions(credit);
        let ws = vec![worker(1, 1), worker(2, 1)];
        let b = body(&t);
        let input = RoutingInput::parse(Endpoint::Generate, &b).unwrap();
        let mut used = [0; 2];
        for _ in 0..40 {
            // Dropped at once: the booking is cancelled and the unit's load released.
            used[p.select(&input, &ws).unwrap().index] += 1;
        }
        if credit == PredictCredit::Full {
            assert_eq!(used, [40, 0], "full credit trusts the prediction");
        } else {
            assert!(used[0] > 0 && used[1] > 0, "{credit:?}: {used:?} (a tie)");
        }
    }
}
