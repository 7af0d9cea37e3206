//! The concurrent block slab. Readers see fixed-size chunks of atomics (engine hash,
//! content hash, run per block id), allocated once and never moved; only the writer
//! appends, so the slots a run covers are written before the run's length (published under
//! the run's lock) reaches them. The writer alone owns the engine-hash table (block ids
//! keyed by engine hash, 32 hash bits per slot as in the prototype's `slab.rs`): `find`
//! walks by content hash and never reads it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

use super::arena::Arena;

/// `run` of a block that was reclaimed.
pub(crate) const DEAD: u32 = u32::MAX;

const CHUNK_BITS: u32 = 15;
/// Blocks per chunk: the longest run.
pub(crate) const CHUNK: u32 = 1 << CHUNK_BITS;

#[inline]
fn tag(e: u64) -> u32 {
    (e.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32
}

#[inline]
fn spread(t: u32) -> u64 {
    let t = u64::from(t);
    (t << 32) | t
}

#[inline]
fn at(id: u32) -> (u32, usize) {
    (id >> CHUNK_BITS, (id & (CHUNK - 1)) as usize)
}

/// Whether ids `a` and `b` lie in the same chunk.
#[inline]
pub(crate) fn same_chunk(a: u32, b: u32) -> bool {
    a >> CHUNK_BITS == b >> CHUNK_BITS
}

struct Chunk {
    engine: Box<[AtomicU64]>,
    content: Box<[AtomicU64]>,
    run: Box<[AtomicU32]>,
}

impl Chunk {
    fn new() -> Box<Self> {
        // Zeroed allocations (fresh pages from the allocator, no memset); a slot's run is
        // read only while the slot is live.
        let n = CHUNK as usize;
        Box::new(Chunk {
            engine: bytemuck::zeroed_slice_box(n),
            content: bytemuck::zeroed_slice_box(n),
            run: bytemuck::zeroed_slice_box(n),
        })
    }
}

/// Length of the common prefix of `a` (loaded relaxed) and `b`, eight at a time.
#[inline]
fn prefix(a: &[AtomicU64], b: &[u64]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut i = 0;
    while i + 8 <= n {
        let mut diff = 0u64;
        for j in 0..8 {
            diff |= a[i + j].load(Relaxed) ^ b[i + j];
        }
        if diff != 0 {
            break;
        }
        i += 8;
    }
    i + a[i..]
        .iter()
        .zip(&b[i..])
        .take_while(|(x, y)| x.load(Relaxed) == **y)
        .count()
}

/// The chunks every thread reads.
pub(crate) struct Chunks {
    chunks: Arena<OnceLock<Box<Chunk>>>,
}

impl Default for Chunks {
    fn default() -> Self {
        Chunks {
            chunks: Arena::new(4),
        }
    }
}

impl Chunks {
    #[inline]
    fn chunk(&self, c: u32) -> &Chunk {
        self.chunks.get(c).get_or_init(Chunk::new)
    }

    /// Common prefix of the content hashes at `start..` (one run: one chunk) and `q`.
    #[inline]
    pub(crate) fn content_prefix(&self, start: u32, len: usize, q: &[u64]) -> usize {
        let (c, i) = at(start);
        prefix(&self.chunk(c).content[i..i + len], q)
    }

    /// Common prefix of the engine hashes at `start..` and `q`.
    #[inline]
    pub(crate) fn engine_prefix(&self, start: u32, len: usize, q: &[u64]) -> usize {
        let (c, i) = at(start);
        prefix(&self.chunk(c).engine[i..i + len], q)
    }

    #[inline]
    pub(crate) fn engine_at(&self, id: u32) -> u64 {
        let (c, i) = at(id);
        self.chunk(c).engine[i].load(Relaxed)
    }

    #[inline]
    pub(crate) fn content_at(&self, id: u32) -> u64 {
        let (c, i) = at(id);
        self.chunk(c).content[i].load(Relaxed)
    }

    #[inline]
    pub(crate) fn run_of(&self, id: u32) -> u32 {
        let (c, i) = at(id);
        self.chunk(c).run[i].load(Relaxed)
    }

    /// Blocks `start..start + len` now belong to `run` (writer only).
    pub(crate) fn set_run(&self, start: u32, len: u32, run: u32) {
        let (c, i) = at(start);
        for r in &self.chunk(c).run[i..i + len as usize] {
            r.store(run, Relaxed);
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        // Allocated chunks are a prefix of the chunk numbers (the writer fills them in order).
        let chunks = (0..1u32 << (32 - CHUNK_BITS))
            .take_while(|&c| self.chunks.peek(c).is_some_and(|o| o.get().is_some()))
            .count();
        self.chunks.heap_bytes() + chunks * CHUNK as usize * 20
    }
}

/// The writer's half: the engine-hash table and the id counters.
#[derive(Default)]
pub(crate) struct SlabWriter {
    /// `(block id, tag of its engine hash)`.
    ids: HashTable<(u32, u32)>,
    /// The id the next appended block gets.
    next: u32,
    used: usize,
    dead: usize,
}

impl SlabWriter {
    #[inline]
    pub(crate) fn next_id(&self) -> u32 {
        self.next
    }

    #[inline]
    pub(crate) fn live(&self) -> usize {
        self.used - self.dead
    }

    /// Makes room to append up to `n` blocks contiguously and returns how many fit (all of
    /// them when `n <= CHUNK`, skipping to the next chunk when this one is short of room).
    pub(crate) fn make_room(&mut self, n: usize) -> usize {
        let off = (self.next & (CHUNK - 1)) as usize;
        let room = CHUNK as usize - off;
        if room >= n {
            return n;
        }
        if off > 0 && n > CHUNK as usize {
            return room;
        }
        self.next = (self.next | (CHUNK - 1)) + 1;
        n.min(CHUNK as usize)
    }

    /// The block with engine hash `e`.
    #[inline]
    pub(crate) fn lookup(&self, sh: &Chunks, e: u64) -> Option<u32> {
        let t = tag(e);
        self.ids
            .find(spread(t), |&(id, tt)| tt == t && sh.engine_at(id) == e)
            .map(|&(id, _)| id)
    }

    /// Appends `engine` / `content` at [`SlabWriter::next_id`] as members of `run` (at most
    /// the room [`SlabWriter::make_room`] gave), stopping before the first engine hash
    /// already known. Returns how many were appended. The slots are invisible to readers
    /// until a run's length covers them.
    pub(crate) fn append(
        &mut self,
        sh: &Chunks,
        run: u32,
        engine: &[u64],
        content: &[u64],
    ) -> usize {
        let first = self.next;
        let (c, base) = at(first);
        debug_assert!(base + engine.len() <= CHUNK as usize);
        let chunk = sh.chunk(c);
        self.ids.reserve(engine.len(), |&(_, t)| spread(t));
        let mut stored = engine.len();
        // The slots first, array by array (streams, as the prototype's `extend_from_slice`),
        // then the keys; slots past a conflict stay unused.
        let n = engine.len();
        for (slot, &e) in chunk.engine[base..base + n].iter().zip(engine) {
            slot.store(e, Relaxed);
        }
        for (slot, &h) in chunk.content[base..base + n].iter().zip(content) {
            slot.store(h, Relaxed);
        }
        for slot in &chunk.run[base..base + n] {
            slot.store(run, Relaxed);
        }
        for (j, &e) in engine.iter().enumerate() {
            let t = tag(e);
            let entry = self.ids.entry(
                spread(t),
                |&(id, tt)| tt == t && sh.engine_at(id) == e,
                |&(_, t)| spread(t),
            );
            match entry {
                Entry::Occupied(_) => {
                    stored = j;
                    break;
                }
                Entry::Vacant(v) => {
                    v.insert((first + j as u32, t));
                }
            }
        }
        self.next += stored as u32;
        self.used += stored;
        stored
    }

    /// Drops block `id` from the table (its slot is reused only after the slab empties).
    pub(crate) fn reclaim(&mut self, sh: &Chunks, id: u32) {
        let e = sh.engine_at(id);
        if let Ok(entry) = self.ids.find_entry(spread(tag(e)), |&(i, _)| i == id) {
            entry.remove();
        }
        let (c, i) = at(id);
        sh.chunk(c).run[i].store(DEAD, Relaxed);
        self.dead += 1;
    }

    /// Once nothing is live, ids restart from 0 (the chunks stay allocated and are reused:
    /// no run covers any slot, so no reader can be reading one).
    pub(crate) fn maybe_reset(&mut self) {
        if self.used > 0 && self.live() == 0 {
            *self = SlabWriter {
                ids: std::mem::take(&mut self.ids),
                ..SlabWriter::default()
            };
            self.ids.clear();
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.ids.capacity() * 9
    }
}
