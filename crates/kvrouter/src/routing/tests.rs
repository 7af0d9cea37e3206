//! Unit tests of policies, bookings and sticky keys over standalone workers (no I/O).

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::config::Mode;
use crate::workers::{Worker, WorkerId, WorkerInfo};

fn workers(n: u32) -> Vec<Arc<Worker>> {
    (0..n)
        .map(|i| {
            Arc::new(Worker::new(
                WorkerId(i),
                &format!("http://127.0.0.1:{}", 1000 + i),
                WorkerInfo::default(),
            ))
        })
        .collect()
}

fn input() -> RoutingInput<'static> {
    RoutingInput::parse(Endpoint::Generate, br#"{"text":"x"}"#).unwrap()
}

fn selector(mode: Mode, ttl: Duration) -> Selector {
    Selector::new(policy_for(mode), StickyTable::new(ttl))
}

#[test]
fn booking_counts_in_flight_until_dropped() {
    let ws = workers(1);
    let s = selector(Mode::LeastLoad, Duration::from_secs(60));
    let b = s.select(&input(), None, &ws).unwrap();
    assert_eq!(ws[0].in_flight(), 1);
    drop(b);
    assert_eq!(ws[0].in_flight(), 0);
}

#[test]
fn least_load_picks_the_idlest_worker() {
    let ws = workers(3);
    let s = selector(Mode::LeastLoad, Duration::from_secs(60));
    let _held: Vec<_> = [0usize, 0, 2]
        .iter()
        .map(|&i| Booking::new(ws[i].clone(), None, None))
        .collect();
    for _ in 0..5 {
        let b = s.select(&input(), None, &ws).unwrap();
        assert_eq!(b.worker().id, WorkerId(1));
    }
}

#[test]
fn round_robin_cycles_and_empty_gives_none() {
    let ws = workers(3);
    let s = selector(Mode::RoundRobin, Duration::from_secs(60));
    let ids: Vec<u32> = (0..6)
        .map(|_| s.select(&input(), None, &ws).unwrap().worker().id.0)
        .collect();
    assert_eq!(ids, vec![0, 1, 2, 0, 1, 2]);
    assert!(s.select(&input(), None, &[]).is_none());
    let r = selector(Mode::Random, Duration::from_secs(60));
    assert!(r.select(&input(), None, &ws).is_some());
}

#[test]
fn sticky_key_stays_then_moves_when_its_worker_leaves() {
    let ws = workers(3);
    let s = selector(Mode::RoundRobin, Duration::from_secs(60));
    let first = s.select(&input(), Some("k"), &ws).unwrap().worker().id;
    for _ in 0..5 {
        assert_eq!(
            s.select(&input(), Some("k"), &ws).unwrap().worker().id,
            first
        );
    }
    let rest: Vec<_> = ws.iter().filter(|w| w.id != first).cloned().collect();
    let moved = s.select(&input(), Some("k"), &rest).unwrap().worker().id;
    assert_ne!(moved, first);
    // Stays on the new worker even when the old one is back.
    assert_eq!(
        s.select(&input(), Some("k"), &ws).unwrap().worker().id,
        moved
    );
    assert_eq!(s.sticky().len(), 1);
}

#[test]
fn sticky_entries_expire_after_the_ttl() {
    let ws = workers(2);
    let s = selector(Mode::LeastLoad, Duration::from_millis(1));
    s.select(&input(), Some("k"), &ws).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(s.sticky().sweep(), 1);
    assert!(s.sticky().is_empty());
}

#[test]
fn policy_attachment_is_released_with_the_booking() {
    struct Flag(Arc<std::sync::atomic::AtomicBool>);
    impl crate::routing::RequestObserver for Flag {}
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let ws = workers(1);
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let b = Booking::new(
        ws[0].clone(),
        Some(0),
        Some(Box::new(Flag(dropped.clone()))),
    );
    assert!(!dropped.load(std::sync::atomic::Ordering::SeqCst));
    drop(b);
    assert!(dropped.load(std::sync::atomic::Ordering::SeqCst));
}
