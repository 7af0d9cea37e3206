//! The block slab: per distinct block its canonical engine hash, its key (the router's
//! sequence hash) and its run, in pages of atomics allocated once and never moved (readers
//! read them under a run's lock, without the writer). Ids are handed out in chunks of
//! `CHUNK`; a run stays within one chunk and may span pages. Only the writer appends, so the
//! slots a run covers are written before the run's length (published under the run's lock)
//! reaches them.
//!
//! The writer alone owns the engine-hash table: block ids keyed by their canonical engine
//! hash (the name the first unit that stored the block gave it), 32 hash bits per slot so
//! growth never reads the slab. A block whose name was already taken by another block (units
//! that disagree) gets [`NO_NAME`] as its canonical engine hash and is named per unit only
//! (`names.rs`). `find` walks by key and never reads the table.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

use std::collections::{BTreeMap, BTreeSet};

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

use super::arena::Arena;

/// `run` of a block that was reclaimed (its slot is free for reuse).
pub(crate) const DEAD: u32 = u32::MAX;

/// The canonical engine hash of a block that has none (its first name belonged to another
/// block): never in the table, never equal to a name (a unit sending this value as an engine
/// hash gets it as a per-unit alias).
pub(crate) const NO_NAME: u64 = 0x6e6f_5f6e_616d_6521;

pub(crate) const CHUNK_BITS: u32 = 15;
/// Blocks per chunk: the longest run.
pub(crate) const CHUNK: u32 = 1 << CHUNK_BITS;

/// 32 bits of a well-mixed hash of engine hash `e` (kept in the table's slot).
#[inline]
fn tag(e: u64) -> u32 {
    (e.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32
}

/// The table's hash, rebuilt from the slot's 32 bits: hashbrown takes the bucket from the
/// low bits and its control tag from the top 7.
#[inline]
fn spread(t: u32) -> u64 {
    let t = u64::from(t);
    (t << 32) | t
}

/// Whether ids `a` and `b` lie in the same chunk.
#[inline]
pub(crate) fn same_chunk(a: u32, b: u32) -> bool {
    a >> CHUNK_BITS == b >> CHUNK_BITS
}

/// Slots per page: the unit of allocation, zeroed by the writer right before it fills it
/// (a whole chunk zeroed at once would be out of cache again by the time it is filled).
const PAGE_BITS: u32 = 10;
const PAGE: u32 = 1 << PAGE_BITS;

#[inline]
fn at(id: u32) -> (u32, usize) {
    (id >> PAGE_BITS, (id & (PAGE - 1)) as usize)
}

struct Page {
    engine: Box<[AtomicU64]>,
    key: Box<[AtomicU64]>,
    run: Box<[AtomicU32]>,
}

impl Page {
    fn new() -> Self {
        // Zeroed allocations; a slot's run is read only while the slot is live.
        let n = PAGE as usize;
        Page {
            engine: bytemuck::zeroed_slice_box(n),
            key: bytemuck::zeroed_slice_box(n),
            run: bytemuck::zeroed_slice_box(n),
        }
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

/// The slots every thread reads, in pages allocated on first use and never moved.
pub(crate) struct Chunks {
    pages: Arena<OnceLock<Page>>,
    allocated: AtomicUsize,
}

impl Default for Chunks {
    fn default() -> Self {
        Chunks {
            pages: Arena::new(6),
            allocated: AtomicUsize::new(0),
        }
    }
}

impl Chunks {
    #[inline]
    fn page(&self, p: u32) -> &Page {
        self.pages.get(p).get_or_init(|| {
            self.allocated.fetch_add(1, Relaxed);
            Page::new()
        })
    }

    /// Calls `f(page, offset, position, n)` for each page-sized piece of `start..start + len`.
    #[inline]
    fn pieces(
        &self,
        start: u32,
        len: usize,
        mut f: impl FnMut(&Page, usize, usize, usize) -> bool,
    ) {
        let mut done = 0;
        while done < len {
            let (p, i) = at(start + done as u32);
            let n = (len - done).min(PAGE as usize - i);
            if !f(self.page(p), i, done, n) {
                return;
            }
            done += n;
        }
    }

    /// Common prefix of the keys at `start..start + len` and `q`. Keys are sequence hashes
    /// (each names its whole chain so far), so when the last ones agree every earlier one
    /// does: one compare settles a stretch that matches to its end, the common case, and
    /// only a stretch that leaves the run is compared key by key.
    #[inline]
    pub(crate) fn key_prefix(&self, start: u32, len: usize, q: &[u64]) -> usize {
        let len = len.min(q.len());
        if len == 0 {
            return 0;
        }
        if self.key_at(start + len as u32 - 1) == q[len - 1] {
            return len;
        }
        self.column_prefix(start, len - 1, q, |pg| &pg.key)
    }

    /// Common prefix of the engine hashes at `start..start + len` and `q`.
    #[inline]
    pub(crate) fn engine_prefix(&self, start: u32, len: usize, q: &[u64]) -> usize {
        self.column_prefix(start, len, q, |pg| &pg.engine)
    }

    /// Common prefix of one column (`col`) of the slots at `start..start + len` and `q`.
    #[inline]
    fn column_prefix(
        &self,
        start: u32,
        len: usize,
        q: &[u64],
        col: impl Fn(&Page) -> &[AtomicU64],
    ) -> usize {
        let len = len.min(q.len());
        let mut m = 0;
        self.pieces(start, len, |pg, i, at, n| {
            let k = prefix(&col(pg)[i..i + n], &q[at..at + n]);
            m += k;
            k == n
        });
        m
    }

    #[inline]
    pub(crate) fn engine_at(&self, id: u32) -> u64 {
        let (p, i) = at(id);
        self.page(p).engine[i].load(Relaxed)
    }

    #[inline]
    pub(crate) fn key_at(&self, id: u32) -> u64 {
        let (p, i) = at(id);
        self.page(p).key[i].load(Relaxed)
    }

    #[inline]
    pub(crate) fn run_of(&self, id: u32) -> u32 {
        let (p, i) = at(id);
        self.page(p).run[i].load(Relaxed)
    }

    /// Block `id`'s canonical engine hash becomes `e` (writer only, before a run covers it).
    fn set_engine(&self, id: u32, e: u64) {
        let (p, i) = at(id);
        self.page(p).engine[i].store(e, Relaxed);
    }

    /// Blocks `start..start + len` now belong to `run` (writer only).
    pub(crate) fn set_run(&self, start: u32, len: u32, run: u32) {
        self.pieces(start, len as usize, |pg, i, _, n| {
            for r in &pg.run[i..i + n] {
                r.store(run, Relaxed);
            }
            true
        });
    }

    /// Writes blocks `engine` / `key` of `run` into the slots from `start` (writer only).
    fn fill(&self, start: u32, run: u32, engine: &[u64], key: &[u64]) {
        self.pieces(start, engine.len(), |pg, i, at, n| {
            for (slot, &e) in pg.engine[i..i + n].iter().zip(&engine[at..at + n]) {
                slot.store(e, Relaxed);
            }
            for (slot, &h) in pg.key[i..i + n].iter().zip(&key[at..at + n]) {
                slot.store(h, Relaxed);
            }
            for slot in &pg.run[i..i + n] {
                slot.store(run, Relaxed);
            }
            true
        });
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.pages.heap_bytes() + self.allocated.load(Relaxed) * PAGE as usize * 20
    }
}

/// Free ranges shorter than this are not handed out to a store that wants more (they wait
/// for their neighbours to die and merge), so runs do not fragment into slivers.
const MIN_REUSE: usize = 64;

/// The writer's half: the engine-hash table and the id allocation.
///
/// Ids are handed out from a *region* (`next..end`, within one chunk): a new chunk, or a free
/// range of dead slots. A slot is dead once no run covers it (reclaim shortens or empties the
/// run under its write lock first), so no reader can be reading it and it can be reused at
/// once; dead ranges are merged with their neighbours within a chunk, so a chunk whose blocks
/// all died becomes one range again.
#[derive(Default)]
pub(crate) struct SlabWriter {
    /// `(block id, tag of its engine hash)`.
    ids: HashTable<(u32, u32)>,
    /// The id the next appended block gets, and the end of its region (0 and 0: none yet).
    next: u32,
    end: u32,
    live: usize,
    /// Chunks opened so far (their ids are below `chunks << CHUNK_BITS`).
    chunks: u32,
    /// Free ranges, `start -> len`, and the same as `(len, start)` (largest first out).
    free: BTreeMap<u32, u32>,
    by_len: BTreeSet<(u32, u32)>,
}

impl SlabWriter {
    #[inline]
    pub(crate) fn next_id(&self) -> u32 {
        self.next
    }

    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Makes room to append up to `n` blocks contiguously and returns how many fit: all of
    /// them when the region has room; otherwise the region is left (its rest freed) for the
    /// largest free range (when it holds `n`, or at least [`MIN_REUSE`]), or a new chunk.
    pub(crate) fn make_room(&mut self, n: usize) -> usize {
        let room = (self.end - self.next) as usize;
        if room >= n {
            return n;
        }
        if room > 0 && n > CHUNK as usize {
            return room;
        }
        if room > 0 {
            self.put_free(self.next, room as u32);
        }
        match self.take_free(n) {
            Some((start, len)) => {
                self.next = start;
                self.end = start + len;
            }
            None => {
                self.next = self.chunks << CHUNK_BITS;
                self.end = self.next + CHUNK;
                self.chunks += 1;
            }
        }
        n.min((self.end - self.next) as usize)
    }

    /// Slots `start..start + len` (one chunk) are free: merged with free neighbours.
    fn put_free(&mut self, mut start: u32, mut len: u32) {
        if let Some((&s, &l)) = self.free.range(..start).next_back() {
            if s + l == start && same_chunk(s, start) {
                self.free.remove(&s);
                self.by_len.remove(&(l, s));
                start = s;
                len += l;
            }
        }
        if let Some(&l) = self.free.get(&(start + len)) {
            let s = start + len;
            if same_chunk(start, s) {
                self.free.remove(&s);
                self.by_len.remove(&(l, s));
                len += l;
            }
        }
        self.free.insert(start, len);
        self.by_len.insert((len, start));
    }

    /// The largest free range, if it holds `n` slots or at least [`MIN_REUSE`].
    fn take_free(&mut self, n: usize) -> Option<(u32, u32)> {
        let &(len, start) = self.by_len.last()?;
        if (len as usize) < n.min(MIN_REUSE) {
            return None;
        }
        self.by_len.remove(&(len, start));
        self.free.remove(&start);
        Some((start, len))
    }

    /// The block with engine hash `e`.
    #[inline]
    pub(crate) fn lookup(&self, sh: &Chunks, e: u64) -> Option<u32> {
        let t = tag(e);
        self.ids
            .find(spread(t), |&(id, tt)| tt == t && sh.engine_at(id) == e)
            .map(|&(id, _)| id)
    }

    /// Appends `engine` / `key` at [`SlabWriter::next_id`] as members of `run` (at most
    /// the room [`SlabWriter::make_room`] gave). A block whose engine hash already names
    /// another block (or is [`NO_NAME`]) is appended without a canonical name: its slot holds
    /// [`NO_NAME`] and its offset in `engine` is pushed to `unnamed`. The slots are invisible
    /// to readers until a run's length covers them.
    pub(crate) fn append(
        &mut self,
        sh: &Chunks,
        run: u32,
        engine: &[u64],
        key: &[u64],
        unnamed: &mut Vec<usize>,
    ) {
        let first = self.next;
        debug_assert!(((first & (CHUNK - 1)) as usize) + engine.len() <= CHUNK as usize);
        self.ids.reserve(engine.len(), |&(_, t)| spread(t));
        // The slots first, array by array, then the names.
        sh.fill(first, run, engine, key);
        for (j, &e) in engine.iter().enumerate() {
            let t = tag(e);
            let entry = self.ids.entry(
                spread(t),
                |&(id, tt)| tt == t && sh.engine_at(id) == e,
                |&(_, t)| spread(t),
            );
            match entry {
                Entry::Vacant(v) if e != NO_NAME => {
                    v.insert((first + j as u32, t));
                }
                _ => {
                    sh.set_engine(first + j as u32, NO_NAME);
                    unnamed.push(j);
                }
            }
        }
        let n = engine.len();
        self.next += n as u32;
        self.live += n;
    }

    /// Blocks `start..start + len` (no run covers them any more) leave the table; their
    /// slots are free for reuse.
    pub(crate) fn reclaim(&mut self, sh: &Chunks, start: u32, len: u32) {
        if len == 0 {
            return;
        }
        for id in start..start + len {
            let e = sh.engine_at(id);
            if let Ok(entry) = self.ids.find_entry(spread(tag(e)), |&(i, _)| i == id) {
                entry.remove();
            }
            let (p, i) = at(id);
            sh.page(p).run[i].store(DEAD, Relaxed);
        }
        self.live -= len as usize;
        self.put_free(start, len);
    }

    /// Once nothing is live, ids restart from 0 (the pages stay allocated and are reused:
    /// no run covers any slot, so no reader can be reading one).
    pub(crate) fn maybe_reset(&mut self) {
        if self.live == 0 && self.chunks > 0 {
            // An emptied index gives the table back (the pages stay: see the module doc).
            *self = SlabWriter::default();
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        // B-tree entries: 8 and 8 bytes, about 1.5x with node overhead.
        self.ids.capacity() * 9 + self.free.len() * 24
    }

    /// Chunks opened (tests: churn reuses dead slots).
    #[cfg(test)]
    pub(crate) fn chunks(&self) -> usize {
        self.chunks as usize
    }
}
