//! One (worker, rank) event stream: sequence cursor, decoding, page-size and
//! medium checks, the page fold of a worker whose pages divide the router's
//! (`fold.rs`), and application to the sink. Transport-agnostic and synchronous;
//! the ZMQ and NATS sources drive it (and perform replays it asks for).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use kvrouter_index::{EngineHash, KvEvent, NamespaceParts, Placement, Tier};
use tracing::{error, info, warn};

use super::cursor::{SeqCursor, Verdict};
use super::dynamo_wire::{DynamoData, DynamoEvent};
use super::fold::PageFold;
use super::metrics::metrics;
use super::sglang_wire::{decode_batch, WireEvent, WireNamespace};
use super::sink::{Absorbed, KvEventSink};
use crate::workers::{Rank, WorkerId};

/// Why a rank was cleared in the middle of its stream (carried to relay consumers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetReason {
    /// The publisher restarted (sequence went backwards).
    Restart,
    /// Events were lost and could not be replayed: the rank is recovering.
    Gap,
}

impl ResetReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ResetReason::Restart => "restart",
            ResetReason::Gap => "gap",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "restart" => Some(ResetReason::Restart),
            "gap" => Some(ResetReason::Gap),
            _ => None,
        }
    }
}

/// What happened to one offered batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// Applied; `reset` says whether the rank was cleared first.
    Applied { reset: Option<ResetReason> },
    /// Duplicate or stale: nothing applied.
    Skipped,
    /// Fetch the replay from `from`, offer each replayed batch with `can_replay =
    /// false`, then offer this batch again the same way, then call
    /// [`RankFeed::finish_replay`].
    NeedReplay { from: u64 },
}

/// A batch as it arrived.
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    /// Raw msgpack SGLang `KVEventBatch`.
    Sglang(&'a [u8]),
    /// One decoded Dynamo event.
    Dynamo(&'a DynamoEvent),
}

/// Log-once flags of one feed.
#[derive(Default)]
struct Warned {
    page_size: bool,
    rank: bool,
    decode: bool,
    unknown_tag: bool,
}

/// The event stream of one (worker, rank).
pub struct RankFeed {
    worker: WorkerId,
    rank: Rank,
    label: Arc<str>,
    page_size: u32,
    sink: Arc<dyn KvEventSink>,
    cursor: SeqCursor,
    recovering: bool,
    replaying: bool,
    pending_reset: Option<ResetReason>,
    warned: Warned,
    /// The worker's pages folded into router blocks, once its stores carry a `block_size`
    /// that divides the router's page size; dropped whenever the rank is cleared.
    fold: Option<PageFold>,
    /// The most worker pages `fold` may hold (the rank's cap times pages per block; read
    /// from the sink when first exceeded, 0 until then).
    fold_cap: usize,
}

impl RankFeed {
    /// A feed for `(worker, rank)`; `label` names the worker in logs (its URL);
    /// `origin` is the stream's first sequence number (SGLang 0, Dynamo 1).
    pub fn new(
        worker: WorkerId,
        rank: Rank,
        label: Arc<str>,
        page_size: u32,
        origin: u64,
        sink: Arc<dyn KvEventSink>,
    ) -> Self {
        Self {
            worker,
            rank,
            label,
            page_size,
            sink,
            cursor: SeqCursor::new(origin),
            recovering: false,
            replaying: false,
            pending_reset: None,
            warned: Warned::default(),
            fold: None,
            fold_cap: 0,
        }
    }

    pub fn worker(&self) -> WorkerId {
        self.worker
    }

    pub fn is_recovering(&self) -> bool {
        self.recovering
    }

    /// The last applied sequence number.
    pub fn last_seq(&self) -> Option<u64> {
        self.cursor.last()
    }

    /// The transport reconnected: a non-advancing sequence next means a restart.
    pub fn mark_reconnected(&mut self) {
        self.cursor.mark_reconnected();
    }

    /// Ends a replay started by [`ApplyOutcome::NeedReplay`].
    pub fn finish_replay(&mut self) {
        self.replaying = false;
    }

    /// Clears the rank on an upstream relay's word and restarts the cursor.
    pub fn reset(&mut self, reason: ResetReason) {
        match reason {
            ResetReason::Restart => metrics().restarts.inc(),
            ResetReason::Gap => metrics().gaps.inc(),
        }
        info!(worker = %self.label, rank = self.rank, reason = reason.as_str(), "kv events: relay reset, rank cleared");
        self.clear(reason);
        self.cursor.reset();
    }

    /// Offers batch `seq`. `can_replay` says whether the caller can fetch a replay.
    pub fn offer(&mut self, seq: u64, payload: Payload<'_>, can_replay: bool) -> ApplyOutcome {
        let origin = self.cursor.origin();
        match self.cursor.classify(seq) {
            Verdict::Stale => {
                metrics().duplicates.inc();
                return ApplyOutcome::Skipped;
            }
            Verdict::Contiguous => {}
            Verdict::First => {
                if can_replay && seq > origin {
                    return self.start_replay(origin);
                }
            }
            Verdict::Gap { expected } => {
                if !self.replaying {
                    metrics().gaps.inc();
                }
                if can_replay {
                    warn!(worker = %self.label, rank = self.rank, expected, got = seq, "kv events: sequence gap, requesting replay");
                    return self.start_replay(expected);
                }
                metrics().recoveries.inc();
                warn!(worker = %self.label, rank = self.rank, expected, got = seq, "kv events: sequence gap not recoverable, rank cleared and recovering");
                self.clear(ResetReason::Gap);
            }
            Verdict::Restart { last } => {
                metrics().restarts.inc();
                warn!(worker = %self.label, rank = self.rank, last, got = seq, "kv events: sequence went backwards (worker restart), rank cleared");
                self.clear(ResetReason::Restart);
                self.cursor.reset();
                if can_replay && seq > origin {
                    return self.start_replay(origin);
                }
            }
        }
        self.cursor.accept(seq);
        match payload {
            Payload::Sglang(bytes) => self.apply_sglang(bytes),
            Payload::Dynamo(event) => self.apply_dynamo(event),
        }
        ApplyOutcome::Applied {
            reset: self.pending_reset.take(),
        }
    }

    fn start_replay(&mut self, from: u64) -> ApplyOutcome {
        self.replaying = true;
        ApplyOutcome::NeedReplay { from }
    }

    /// Clears the rank in the sink and records why (for the relay).
    fn clear(&mut self, reason: ResetReason) {
        self.drop_fold();
        self.sink.apply(self.worker, self.rank, KvEvent::Cleared);
        self.pending_reset = Some(reason);
        self.set_recovering(reason == ResetReason::Gap);
    }

    fn set_recovering(&mut self, recovering: bool) {
        if self.recovering == recovering {
            return;
        }
        self.recovering = recovering;
        if recovering {
            metrics().recovering_ranks.inc();
        } else {
            metrics().recovering_ranks.dec();
            info!(worker = %self.label, rank = self.rank, "kv events: rank recovered (cache reset observed)");
        }
        self.sink.set_recovering(self.worker, self.rank, recovering);
    }

    /// Applies one event; a rank the sink cleared for going over its capacity cap is
    /// counted and marked recovering (the next cache reset ends it, as after a gap).
    fn absorb(&mut self, event: KvEvent) {
        self.absorb_in(Placement::GPU, event);
    }

    /// [`RankFeed::absorb`] of an event of a namespace and / or lower tier.
    fn absorb_in(&mut self, place: Placement, event: KvEvent) {
        if let Absorbed::OverCap { blocks, cap } =
            self.sink.apply_placed(self.worker, self.rank, place, event)
        {
            self.over_cap("blocks", blocks, cap);
        }
    }

    /// The rank went past its cap (the sink cleared it, or the caller did): count it, forget
    /// the fold, mark the rank recovering.
    fn over_cap(&mut self, what: &str, held: usize, cap: usize) {
        self.drop_fold();
        let m = metrics();
        m.index_cap_exceeded.with_label_values(&[&self.label]).inc();
        m.recoveries.inc();
        if !self.recovering {
            warn!(worker = %self.label, rank = self.rank, held, cap, what,
                "kv events: rank holds more than its KV capacity allows, rank cleared and recovering");
        }
        self.set_recovering(true);
    }

    fn drop_fold(&mut self) {
        self.fold = None;
        self.fold_cap = 0;
    }

    /// A store of `block_size`-token pages, `block_size` not the router's page size: folded
    /// into router blocks when it divides it, refused (counted, logged once) otherwise.
    fn fold_stored(
        &mut self,
        place: Placement,
        parent: Option<EngineHash>,
        hashes: &[EngineHash],
        tokens: &[u32],
        block_size: u32,
    ) {
        if self
            .fold
            .as_ref()
            .is_none_or(|f| f.worker_page() != block_size)
        {
            self.drop_fold();
            self.fold = PageFold::new(block_size, self.page_size);
        }
        let Some(fold) = self.fold.as_mut() else {
            self.page_size_mismatch(block_size, hashes.len(), tokens.len());
            return;
        };
        let folded = fold.stored(parent, hashes, tokens);
        let (held, per_block) = (fold.len(), fold.pages_per_block());
        match folded {
            Ok(events) => {
                for event in events {
                    self.absorb_in(place, event);
                }
            }
            Err(e) => {
                metrics()
                    .ignored
                    .with_label_values(&["fold_unknown_parent"])
                    .inc();
                tracing::debug!(worker = %self.label, rank = self.rank, error = %e, "kv events: store not folded");
            }
        }
        if held > self.fold_cap {
            let cap = self.sink.unit_cap(self.worker, self.rank);
            self.fold_cap = cap.saturating_mul(per_block as usize);
            if held > self.fold_cap {
                let cap = self.fold_cap;
                self.sink.apply(self.worker, self.rank, KvEvent::Cleared);
                self.over_cap("worker pages", held, cap);
            }
        }
    }

    fn page_size_mismatch(&mut self, block_size: u32, blocks: usize, tokens: usize) {
        let m = metrics();
        m.page_size_mismatches.inc();
        m.ignored.with_label_values(&["page_size"]).inc();
        if !std::mem::replace(&mut self.warned.page_size, true) {
            error!(
                worker = %self.label, rank = self.rank, configured_page_size = self.page_size,
                event_block_size = block_size, blocks, tokens,
                "kv events: page size mismatch, BlockStored events of this worker are NOT applied; \
                 start the worker with --page-size equal to the router's or a divisor of it"
            );
        }
    }

    fn apply_sglang(&mut self, bytes: &[u8]) {
        let batch = match decode_batch(bytes) {
            Ok(batch) => batch,
            Err(e) => {
                metrics().decode_errors.with_label_values(&["sglang"]).inc();
                metrics().recoveries.inc();
                if !std::mem::replace(&mut self.warned.decode, true) {
                    error!(worker = %self.label, rank = self.rank, error = %e, "kv events: undecodable batch, rank cleared and recovering");
                }
                self.clear(ResetReason::Gap);
                return;
            }
        };
        observe_lag(batch.ts);
        if let Some(batch_rank) = batch.dp_rank.filter(|r| *r != self.rank) {
            if !std::mem::replace(&mut self.warned.rank, true) {
                warn!(worker = %self.label, rank = self.rank, batch_rank, "kv events: batch attn_dp_rank differs from the subscribed rank; using the subscribed rank");
            }
        }
        for event in batch.events {
            self.apply_wire_event(event);
        }
    }

    fn apply_wire_event(&mut self, event: WireEvent) {
        let m = metrics();
        match event {
            WireEvent::Stored {
                block_hashes,
                parent,
                token_ids,
                block_size,
                medium,
                namespace,
            } => {
                m.received.with_label_values(&["stored"]).inc();
                let Some(tier) = Tier::from_medium(medium.as_deref()) else {
                    m.ignored.with_label_values(&["medium"]).inc();
                    return;
                };
                let place = Placement {
                    namespace: namespace_key(&namespace),
                    tier,
                };
                self.apply_wire_stored(place, parent, block_hashes, token_ids, block_size);
            }
            WireEvent::Removed {
                block_hashes,
                medium,
            } => {
                m.received.with_label_values(&["removed"]).inc();
                let Some(tier) = Tier::from_medium(medium.as_deref()) else {
                    m.ignored.with_label_values(&["medium"]).inc();
                    return;
                };
                self.apply_wire_removed(tier, block_hashes);
            }
            WireEvent::Cleared => {
                m.received.with_label_values(&["cleared"]).inc();
                self.drop_fold();
                self.sink.apply(self.worker, self.rank, KvEvent::Cleared);
                self.set_recovering(false);
            }
            WireEvent::Unknown { tag } => {
                m.received.with_label_values(&["unknown"]).inc();
                m.ignored.with_label_values(&["unknown_tag"]).inc();
                if !std::mem::replace(&mut self.warned.unknown_tag, true) {
                    warn!(worker = %self.label, rank = self.rank, tag, "kv events: unknown event tag skipped");
                }
            }
        }
    }

    /// A store of `block_hashes` in `place` (its medium known): applied as is at the router's
    /// page size, folded from a smaller one on the GPU tier, refused when its token count
    /// does not match.
    fn apply_wire_stored(
        &mut self,
        place: Placement,
        parent: Option<u64>,
        block_hashes: Vec<u64>,
        token_ids: Vec<u32>,
        block_size: u32,
    ) {
        let tier = place.tier;
        let expected_tokens = block_hashes.len() * block_size as usize;
        if token_ids.len() != expected_tokens {
            self.page_size_mismatch(block_size, block_hashes.len(), token_ids.len());
            return;
        }
        if block_size != self.page_size && tier != Tier::Gpu {
            // The page fold follows the GPU tier's tree only.
            metrics().ignored.with_label_values(&["tier_fold"]).inc();
            return;
        }
        if block_size != self.page_size {
            self.fold_stored(place, parent, &block_hashes, &token_ids, block_size);
            return;
        }
        self.absorb_in(
            place,
            KvEvent::Stored {
                parent,
                block_hashes,
                token_ids,
                block_size,
            },
        );
    }

    /// A removal on `tier`: a lower tier's goes to the tiers as is, the GPU tier's through
    /// the page fold when there is one (applied when something is left, or without a fold).
    fn apply_wire_removed(&mut self, tier: Tier, block_hashes: Vec<u64>) {
        if tier != Tier::Gpu {
            let place = Placement {
                namespace: None,
                tier,
            };
            self.absorb_in(place, KvEvent::Removed { block_hashes });
            return;
        }
        let block_hashes = match self.fold.as_mut() {
            Some(fold) => fold.removed(&block_hashes),
            None => block_hashes,
        };
        if self.fold.is_none() || !block_hashes.is_empty() {
            self.sink
                .apply(self.worker, self.rank, KvEvent::Removed { block_hashes });
        }
    }

    fn apply_dynamo(&mut self, event: &DynamoEvent) {
        let m = metrics();
        let kind = match event.data {
            DynamoData::Stored { .. } => "stored",
            DynamoData::Removed { .. } => "removed",
            DynamoData::Cleared => "cleared",
        };
        m.received.with_label_values(&[kind]).inc();
        if !event.on_device && event.data != DynamoData::Cleared {
            m.ignored.with_label_values(&["medium"]).inc();
            return;
        }
        let converted = match &event.data {
            DynamoData::Stored {
                parent,
                block_hashes,
                local_hashes,
            } => KvEvent::StoredHashed {
                parent: *parent,
                block_hashes: block_hashes.clone(),
                local_hashes: local_hashes.clone(),
            },
            DynamoData::Removed { block_hashes } => KvEvent::Removed {
                block_hashes: block_hashes.clone(),
            },
            DynamoData::Cleared => KvEvent::Cleared,
        };
        let cleared = converted == KvEvent::Cleared;
        self.absorb(converted);
        if cleared {
            self.set_recovering(false);
        }
    }
}

impl Drop for RankFeed {
    fn drop(&mut self) {
        if self.recovering {
            metrics().recovering_ranks.dec();
        }
    }
}

/// The namespace key of a store (`tokens::namespace`): its salt and adapter name, or its
/// adapter id when the name is missing (a key no request produces).
fn namespace_key(ns: &WireNamespace) -> Option<kvrouter_index::SeqHash> {
    NamespaceParts {
        cache_salt: ns.cache_salt.as_deref(),
        lora: ns.lora_name.as_deref(),
        extra_key: None,
        lora_id: ns.lora_id.filter(|_| ns.lora_name.is_none()),
    }
    .key()
}

fn observe_lag(ts: f64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    if ts > 0.0 && ts.is_finite() {
        metrics().lag_seconds.observe((now - ts).max(0.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::sink::{Record, RecordingSink};
    use rmpv::Value as V;

    const PAGE: u32 = 2;

    fn batch(events: Vec<V>) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(
            &mut out,
            &V::Array(vec![V::F64(1.0), V::Array(events), V::from(0)]),
        )
        .unwrap();
        out
    }

    fn stored(hash: i64, tokens: &[i64], block_size: i64) -> V {
        V::Array(vec![
            V::from("BlockStored"),
            V::Array(vec![V::from(hash)]),
            V::Nil,
            V::Array(tokens.iter().map(|t| V::from(*t)).collect()),
            V::from(block_size),
            V::Nil,
        ])
    }

    fn stored_batch(hash: i64) -> Vec<u8> {
        batch(vec![stored(hash, &[1, 2], PAGE as i64)])
    }

    fn feed(sink: &Arc<RecordingSink>) -> RankFeed {
        RankFeed::new(WorkerId(1), 0, "http://w".into(), PAGE, 0, sink.clone())
    }

    fn stored_hashes(sink: &RecordingSink) -> Vec<Option<u64>> {
        sink.events()
            .into_iter()
            .map(|(_, _, e)| match e {
                KvEvent::Stored { block_hashes, .. } => Some(block_hashes[0]),
                _ => None, // Cleared
            })
            .collect()
    }

    #[test]
    fn contiguous_batches_apply_in_order() {
        let sink = RecordingSink::new();
        let mut f = feed(&sink);
        for seq in 0..3 {
            let out = f.offer(seq, Payload::Sglang(&stored_batch(seq as i64)), false);
            assert_eq!(out, ApplyOutcome::Applied { reset: None });
        }
        assert_eq!(stored_hashes(&sink), vec![Some(0), Some(1), Some(2)]);
    }

    #[test]
    fn duplicate_is_skipped() {
        let sink = RecordingSink::new();
        let mut f = feed(&sink);
        f.offer(0, Payload::Sglang(&stored_batch(0)), false);
        assert_eq!(
            f.offer(0, Payload::Sglang(&stored_batch(0)), false),
            ApplyOutcome::Skipped
        );
        assert_eq!(stored_hashes(&sink), vec![Some(0)]);
    }

    #[test]
    fn gap_without_replay_clears_and_recovers_on_cache_reset() {
        let sink = RecordingSink::new();
        let mut f = feed(&sink);
        f.offer(0, Payload::Sglang(&stored_batch(0)), false);
        let out = f.offer(5, Payload::Sglang(&stored_batch(5)), false);
        assert_eq!(
            out,
            ApplyOutcome::Applied {
                reset: Some(ResetReason::Gap)
            }
        );
        assert!(f.is_recovering());
        assert_eq!(stored_hashes(&sink), vec![Some(0), None, Some(5)]);
        let cleared = batch(vec![V::Array(vec![V::from("AllBlocksCleared")])]);
        f.offer(6, Payload::Sglang(&cleared), false);
        assert!(!f.is_recovering());
        let recovering: Vec<_> = sink
            .records()
            .into_iter()
            .filter(|r| matches!(r, Record::Recovering(..)))
            .collect();
        assert_eq!(
            recovering,
            vec![
                Record::Recovering(WorkerId(1), 0, true),
                Record::Recovering(WorkerId(1), 0, false)
            ]
        );
    }

    #[test]
    fn gap_with_replay_asks_for_the_missing_range() {
        let sink = RecordingSink::new();
        let mut f = feed(&sink);
        f.offer(0, Payload::Sglang(&stored_batch(0)), true);
        assert_eq!(
            f.offer(3, Payload::Sglang(&stored_batch(3)), true),
            ApplyOutcome::NeedReplay { from: 1 }
        );
        // Replayed 1..=3, then the live 3 again.
        for seq in 1..=3 {
            assert_eq!(
                f.offer(seq, Payload::Sglang(&stored_batch(seq as i64)), false),
                ApplyOutcome::Applied { reset: None }
            );
        }
        assert_eq!(
            f.offer(3, Payload::Sglang(&stored_batch(3)), false),
            ApplyOutcome::Skipped
        );
        f.finish_replay();
        assert!(!f.is_recovering());
        assert_eq!(
            stored_hashes(&sink),
            vec![Some(0), Some(1), Some(2), Some(3)]
        );
    }

    #[test]
    fn first_message_mid_stream_asks_for_replay_from_origin() {
        let sink = RecordingSink::new();
        let mut f = feed(&sink);
        assert_eq!(
            f.offer(7, Payload::Sglang(&stored_batch(7)), true),
            ApplyOutcome::NeedReplay { from: 0 }
        );
        // The replay failed: the live batch is simply the first.
        assert_eq!(
            f.offer(7, Payload::Sglang(&stored_batch(7)), false),
            ApplyOutcome::Applied { reset: None }
        );
    }

    #[test]
    fn restart_clears_and_restarts_the_cursor() {
        let sink = RecordingSink::new();
        let mut f = feed(&sink);
        for seq in 0..4 {
            f.offer(seq, Payload::Sglang(&stored_batch(seq as i64)), false);
        }
        let out = f.offer(0, Payload::Sglang(&stored_batch(100)), false);
        assert_eq!(
            out,
            ApplyOutcome::Applied {
                reset: Some(ResetReason::Restart)
            }
        );
        assert!(!f.is_recovering());
        assert_eq!(
            f.offer(1, Payload::Sglang(&stored_batch(101)), false),
            ApplyOutcome::Applied { reset: None }
        );
        assert_eq!(
            stored_hashes(&sink),
            vec![
                Some(0),
                Some(1),
                Some(2),
                Some(3),
                None,
                Some(100),
                Some(101)
            ]
        );
    }

    #[test]
    fn page_size_mismatch_is_not_applied() {
        let sink = RecordingSink::new();
        let mut f = feed(&sink);
        let before = metrics().page_size_mismatches.get();
        // Wrong block size, then right block size with the wrong token count.
        f.offer(
            0,
            Payload::Sglang(&batch(vec![stored(1, &[1, 2, 3, 4], 4)])),
            false,
        );
        f.offer(
            1,
            Payload::Sglang(&batch(vec![stored(1, &[1, 2, 3], 2)])),
            false,
        );
        assert!(sink.events().is_empty());
        assert!(metrics().page_size_mismatches.get() >= before + 2);
    }

    /// `BlockStored` of single-token pages chained after `parent`.
    fn stored_pages(hashes: &[i64], parent: Option<i64>, tokens: &[i64]) -> V {
        V::Array(vec![
            V::from("BlockStored"),
            V::Array(hashes.iter().map(|h| V::from(*h)).collect()),
            parent.map_or(V::Nil, V::from),
            V::Array(tokens.iter().map(|t| V::from(*t)).collect()),
            V::from(1),
            V::Nil,
            V::from("GPU"),
        ])
    }

    fn removed_pages(hashes: &[i64]) -> V {
        V::Array(vec![
            V::from("BlockRemoved"),
            V::Array(hashes.iter().map(|h| V::from(*h)).collect()),
            V::from("GPU"),
        ])
    }

    #[test]
    fn single_token_pages_are_folded_into_router_blocks() {
        let sink = RecordingSink::new();
        let mut f = RankFeed::new(WorkerId(1), 0, "http://w".into(), 4, 0, sink.clone());
        // SGLang at page size 1: one BlockStored per token, each chained to the previous.
        let events: Vec<V> = (1..=6)
            .map(|h| stored_pages(&[h], (h > 1).then_some(h - 1), &[10 + h]))
            .collect();
        f.offer(0, Payload::Sglang(&batch(events)), false);
        assert_eq!(
            sink.events(),
            vec![(
                WorkerId(1),
                0,
                KvEvent::Stored {
                    parent: None,
                    block_hashes: vec![4],
                    token_ids: vec![11, 12, 13, 14],
                    block_size: 4
                }
            )]
        );
        // Two more tokens complete the second block, chained to the first.
        f.offer(
            1,
            Payload::Sglang(&batch(vec![stored_pages(&[7, 8], Some(6), &[17, 18])])),
            false,
        );
        // Evicting the tail page removes the block it belongs to.
        f.offer(2, Payload::Sglang(&batch(vec![removed_pages(&[8])])), false);
        let events = sink.events();
        assert_eq!(
            events[1].2,
            KvEvent::Stored {
                parent: Some(4),
                block_hashes: vec![8],
                token_ids: vec![15, 16, 17, 18],
                block_size: 4
            }
        );
        assert_eq!(
            events[2].2,
            KvEvent::Removed {
                block_hashes: vec![8]
            }
        );
        assert_eq!(events.len(), 3);
        // A removal inside no complete block changes nothing downstream.
        f.offer(3, Payload::Sglang(&batch(vec![removed_pages(&[7])])), false);
        assert_eq!(sink.events().len(), 3);
    }

    #[test]
    fn the_fold_restarts_with_the_rank() {
        let sink = RecordingSink::new();
        let mut f = RankFeed::new(WorkerId(1), 0, "http://w".into(), 2, 0, sink.clone());
        f.offer(
            0,
            Payload::Sglang(&batch(vec![stored_pages(&[1], None, &[5])])),
            false,
        );
        // Cleared: the pending page is forgotten, so its child cannot complete a block.
        let cleared = V::Array(vec![V::from("AllBlocksCleared")]);
        f.offer(1, Payload::Sglang(&batch(vec![cleared])), false);
        f.offer(
            2,
            Payload::Sglang(&batch(vec![stored_pages(&[2], Some(1), &[6])])),
            false,
        );
        assert_eq!(sink.events(), vec![(WorkerId(1), 0, KvEvent::Cleared)]);
        // After a restart (sequence back to 0) the worker starts over: fold from scratch.
        f.offer(
            0,
            Payload::Sglang(&batch(vec![stored_pages(&[1, 2], None, &[5, 6])])),
            false,
        );
        let events = sink.events();
        assert_eq!(events[1].2, KvEvent::Cleared, "restart clears the rank");
        assert_eq!(
            events[2].2,
            KvEvent::Stored {
                parent: None,
                block_hashes: vec![2],
                token_ids: vec![5, 6],
                block_size: 2
            }
        );
    }

    #[test]
    fn pages_that_do_not_divide_the_router_page_are_refused() {
        let sink = RecordingSink::new();
        let mut f = RankFeed::new(WorkerId(1), 0, "http://w".into(), 16, 0, sink.clone());
        let before = metrics().page_size_mismatches.get();
        let tokens: Vec<i64> = (0..24).collect();
        f.offer(
            0,
            Payload::Sglang(&batch(vec![stored(1, &tokens, 24)])),
            false,
        );
        assert!(sink.events().is_empty());
        assert!(metrics().page_size_mismatches.get() > before);
    }

    #[test]
    fn a_fold_past_its_capacity_clears_the_rank() {
        let index = Arc::new(kvrouter_index::KvIndex::new(4));
        // 4 tokens: cap 1 + 0 + 64 = 65 router blocks = 260 single-token pages.
        index.set_worker_capacity(WorkerId(1), Some(4));
        let sink: Arc<dyn KvEventSink> = index.clone();
        let mut f = RankFeed::new(WorkerId(1), 0, "http://fold-capped".into(), 4, 0, sink);
        // 260 root-level pages (each its own sequence of one token): none completes a block.
        let pages: Vec<V> = (0..260).map(|h| stored_pages(&[h], None, &[h])).collect();
        f.offer(0, Payload::Sglang(&batch(pages)), false);
        assert!(!f.is_recovering());
        f.offer(
            1,
            Payload::Sglang(&batch(vec![stored_pages(&[999], None, &[1])])),
            false,
        );
        assert!(f.is_recovering(), "the 261st page is past the cap");
        assert_eq!(
            metrics()
                .index_cap_exceeded
                .with_label_values(&["http://fold-capped"])
                .get(),
            1
        );
    }

    /// Records the tier of every placed event.
    #[derive(Default)]
    struct TierSink(parking_lot::Mutex<Vec<(Tier, KvEvent)>>);

    impl KvEventSink for TierSink {
        fn apply(&self, _: WorkerId, _: Rank, event: KvEvent) {
            self.0.lock().push((Tier::Gpu, event));
        }
        fn apply_placed(&self, _: WorkerId, _: Rank, p: Placement, event: KvEvent) -> Absorbed {
            self.0.lock().push((p.tier, event));
            Absorbed::Ok
        }
    }

    fn with_medium(mut event: V, medium: &str) -> V {
        if let V::Array(items) = &mut event {
            items.push(V::from(medium));
        }
        event
    }

    #[test]
    fn lower_tier_events_reach_the_sink_with_their_tier() {
        let sink = Arc::new(TierSink::default());
        let mut f = RankFeed::new(WorkerId(1), 0, "http://w".into(), PAGE, 0, sink.clone());
        let removed = |medium: &str| {
            V::Array(vec![
                V::from("BlockRemoved"),
                V::Array(vec![V::from(1)]),
                V::from(medium),
            ])
        };
        f.offer(
            0,
            Payload::Sglang(&batch(vec![
                with_medium(stored(1, &[1, 2], 2), "CPU_PINNED"),
                with_medium(stored(2, &[1, 2], 2), "DISK"),
                removed("CPU_PINNED"),
                removed("EXTERNAL"),
                // Worker pages of another size are folded for the GPU tree only.
                with_medium(stored(3, &[1], 1), "CPU_PINNED"),
            ])),
            false,
        );
        let tiers: Vec<(Tier, &str)> = sink
            .0
            .lock()
            .iter()
            .map(|(t, e)| {
                let kind = match e {
                    KvEvent::Stored { .. } => "stored",
                    KvEvent::Removed { .. } => "removed",
                    _ => "other",
                };
                (*t, kind)
            })
            .collect();
        assert_eq!(
            tiers,
            vec![
                (Tier::Host, "stored"),
                (Tier::Disk, "stored"),
                (Tier::Host, "removed"),
                (Tier::Disk, "removed"),
            ]
        );
    }

    #[test]
    fn unknown_medium_and_unknown_tags_are_skipped() {
        let sink = RecordingSink::new();
        let mut f = feed(&sink);
        let host = with_medium(stored(1, &[1, 2], 2), "NVRAM");
        let removed_host = V::Array(vec![
            V::from("BlockRemoved"),
            V::Array(vec![V::from(1)]),
            V::from("NVRAM"),
        ]);
        let unknown = V::Array(vec![V::from("BlockPinned")]);
        f.offer(
            0,
            Payload::Sglang(&batch(vec![
                host,
                removed_host,
                unknown,
                stored(2, &[1, 2], 2),
            ])),
            false,
        );
        assert_eq!(stored_hashes(&sink), vec![Some(2)]);
    }

    #[test]
    fn undecodable_batch_clears_and_recovers() {
        let sink = RecordingSink::new();
        let mut f = feed(&sink);
        f.offer(0, Payload::Sglang(&stored_batch(0)), false);
        let out = f.offer(1, Payload::Sglang(b"\xc1garbage"), false);
        assert_eq!(
            out,
            ApplyOutcome::Applied {
                reset: Some(ResetReason::Gap)
            }
        );
        assert!(f.is_recovering());
    }

    #[test]
    fn dynamo_events_map_to_hashed_stores() {
        let sink = RecordingSink::new();
        let mut f = RankFeed::new(WorkerId(2), 1, "dynamo:9".into(), PAGE, 1, sink.clone());
        let ev = DynamoEvent {
            worker_id: 9,
            event_id: 1,
            dp_rank: 1,
            on_device: true,
            tier: crate::events::dynamo_wire::DynamoTier::Device,
            data: DynamoData::Stored {
                parent: None,
                block_hashes: vec![5],
                local_hashes: vec![6],
            },
        };
        assert_eq!(
            f.offer(1, Payload::Dynamo(&ev), false),
            ApplyOutcome::Applied { reset: None }
        );
        assert_eq!(
            sink.events(),
            vec![(
                WorkerId(2),
                1,
                KvEvent::StoredHashed {
                    parent: None,
                    block_hashes: vec![5],
                    local_hashes: vec![6]
                }
            )]
        );
    }

    #[test]
    fn a_rank_past_its_capacity_is_cleared_recovering_and_counted() {
        let index = Arc::new(kvrouter_index::KvIndex::new(PAGE));
        // 4 tokens = 2 pages of 2: cap 2 + 0 + 64 = 66 entries.
        index.set_worker_capacity(WorkerId(1), Some(4));
        let sink: Arc<dyn KvEventSink> = index.clone();
        let mut f = RankFeed::new(WorkerId(1), 0, "http://capped".into(), PAGE, 0, sink);
        let counted = || {
            metrics()
                .index_cap_exceeded
                .with_label_values(&["http://capped"])
                .get()
        };
        let recoveries = metrics().recoveries.get();
        // 66 distinct stored pages: at the cap, nothing changes.
        let events: Vec<V> = (0..66).map(|h| stored(h, &[h, h + 1], 2)).collect();
        f.offer(0, Payload::Sglang(&batch(events)), false);
        assert_eq!(index.unit_blocks(WorkerId(1), 0), 66);
        assert!(!f.is_recovering());
        assert_eq!(counted(), 0);
        // One more: cleared, recovering, counted; never more than the cap.
        f.offer(
            1,
            Payload::Sglang(&batch(vec![stored(100, &[7, 7], 2)])),
            false,
        );
        assert_eq!(index.unit_blocks(WorkerId(1), 0), 0);
        assert!(f.is_recovering());
        assert_eq!(counted(), 1);
        assert!(metrics().recoveries.get() > recoveries);
        // Later stores apply again; a cache reset ends the recovery, as after a gap.
        f.offer(2, Payload::Sglang(&stored_batch(5)), false);
        assert_eq!(index.unit_blocks(WorkerId(1), 0), 1);
        let cleared = batch(vec![V::Array(vec![V::from("AllBlocksCleared")])]);
        f.offer(3, Payload::Sglang(&cleared), false);
        assert!(!f.is_recovering());
    }
}
