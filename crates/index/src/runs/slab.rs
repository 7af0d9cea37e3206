//! The block slab: per distinct block its engine hash, content hash and run, in parallel
//! arrays of fixed-size chunks (a `u32` block id is chunk and slot; chunks never move, so
//! growing the slab copies nothing), and the index's one keyed structure: a table of block
//! ids keyed by engine hash, each slot keeping 32 bits of the key's hash so that growing the
//! table never reads the slab. A run's blocks always sit in one chunk.

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

/// `run` of a block that was reclaimed (its slot is free until the next compaction, or in
/// `conc/` until its chunk is reused).
pub(crate) const DEAD: u32 = u32::MAX;

pub(crate) const CHUNK_BITS: u32 = 15;
/// Blocks per chunk: the longest run.
pub(crate) const CHUNK: u32 = 1 << CHUNK_BITS;

/// 32 bits of a well-mixed hash of engine hash `e` (kept in the table's slot).
#[inline]
pub(crate) fn tag(e: u64) -> u32 {
    (e.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32
}

/// The table's hash, rebuilt from the slot's 32 bits: hashbrown takes the bucket from the
/// low bits and its control tag from the top 7.
#[inline]
pub(crate) fn spread(t: u32) -> u64 {
    let t = u64::from(t);
    (t << 32) | t
}

#[inline]
fn at(id: u32) -> (usize, usize) {
    ((id >> CHUNK_BITS) as usize, (id & (CHUNK - 1)) as usize)
}

/// Whether ids `a` and `b` lie in the same chunk.
#[inline]
pub(crate) fn same_chunk(a: u32, b: u32) -> bool {
    a >> CHUNK_BITS == b >> CHUNK_BITS
}

struct Chunk {
    engine: Vec<u64>,
    content: Vec<u64>,
    run: Vec<u32>,
}

impl Chunk {
    fn new() -> Self {
        let n = CHUNK as usize;
        Chunk {
            engine: Vec::with_capacity(n),
            content: Vec::with_capacity(n),
            run: Vec::with_capacity(n),
        }
    }
}

#[derive(Default)]
pub(crate) struct Slab {
    chunks: Vec<Chunk>,
    /// `(block id, tag of its engine hash)`.
    ids: HashTable<(u32, u32)>,
    /// Ids handed out (live and dead).
    used: usize,
    /// Reclaimed ids (slots still in the chunks, no longer in `ids`).
    dead: usize,
}

impl Slab {
    /// The id the next appended block gets.
    #[inline]
    pub(crate) fn next_id(&self) -> u32 {
        match self.chunks.last() {
            Some(c) => ((self.chunks.len() as u32 - 1) << CHUNK_BITS) + c.engine.len() as u32,
            None => 0,
        }
    }

    #[inline]
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    #[inline]
    pub(crate) fn dead(&self) -> usize {
        self.dead
    }

    #[inline]
    pub(crate) fn live(&self) -> usize {
        self.used - self.dead
    }

    /// Makes room to append up to `n` blocks contiguously and returns how many fit: all of
    /// them when `n <= CHUNK` (opening a new chunk when the last one is short of room).
    pub(crate) fn make_room(&mut self, n: usize) -> usize {
        let room = self
            .chunks
            .last()
            .map_or(0, |c| CHUNK as usize - c.engine.len());
        if room >= n {
            return n;
        }
        if room > 0 && n > CHUNK as usize {
            return room;
        }
        self.chunks.push(Chunk::new());
        n.min(CHUNK as usize)
    }

    /// The block with engine hash `e`.
    #[inline]
    pub(crate) fn lookup(&self, e: u64) -> Option<u32> {
        let t = tag(e);
        self.ids
            .find(spread(t), |&(id, tt)| tt == t && self.engine_at(id) == e)
            .map(|&(id, _)| id)
    }

    #[inline]
    pub(crate) fn engine_at(&self, id: u32) -> u64 {
        let (c, i) = at(id);
        self.chunks[c].engine[i]
    }

    #[inline]
    pub(crate) fn content_at(&self, id: u32) -> u64 {
        let (c, i) = at(id);
        self.chunks[c].content[i]
    }

    #[inline]
    pub(crate) fn run_of(&self, id: u32) -> u32 {
        let (c, i) = at(id);
        self.chunks[c].run[i]
    }

    /// Engine hashes of blocks `start..start + len` (one run: one chunk).
    #[inline]
    pub(crate) fn engines(&self, start: u32, len: usize) -> &[u64] {
        let (c, i) = at(start);
        &self.chunks[c].engine[i..i + len]
    }

    /// Content hashes of blocks `start..start + len` (one run: one chunk).
    #[inline]
    pub(crate) fn contents(&self, start: u32, len: usize) -> &[u64] {
        let (c, i) = at(start);
        &self.chunks[c].content[i..i + len]
    }

    /// Blocks `start..start + len` now belong to `run`.
    pub(crate) fn set_run(&mut self, start: u32, len: u32, run: u32) {
        let (c, i) = at(start);
        self.chunks[c].run[i..i + len as usize].fill(run);
    }

    /// Appends the blocks of `engine` / `content` as members of `run` (at most the room
    /// [`Slab::make_room`] gave), stopping before the first one whose engine hash is already
    /// known (a conflict the caller reports). Returns how many were appended.
    pub(crate) fn append(&mut self, run: u32, engine: &[u64], content: &[u64]) -> usize {
        let Slab {
            chunks, ids, used, ..
        } = self;
        let Some(chunk) = chunks.last_mut() else {
            return 0;
        };
        let base = chunk.engine.len();
        debug_assert!(base + engine.len() <= CHUNK as usize);
        let first = (((chunks.len() - 1) as u32) << CHUNK_BITS) + base as u32;
        ids.reserve(engine.len(), |&(_, t)| spread(t));
        let chunk = chunks.last_mut().expect("a chunk");
        chunk.engine.extend_from_slice(engine);
        chunk.content.extend_from_slice(content);
        chunk.run.resize(base + engine.len(), run);
        let mut stored = engine.len();
        let read = &*chunks;
        for (j, &e) in engine.iter().enumerate() {
            let t = tag(e);
            let entry = ids.entry(
                spread(t),
                |&(id, tt)| {
                    tt == t && {
                        let (c, i) = at(id);
                        read[c].engine[i] == e
                    }
                },
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
        if stored < engine.len() {
            let chunk = chunks.last_mut().expect("a chunk");
            chunk.engine.truncate(base + stored);
            chunk.content.truncate(base + stored);
            chunk.run.truncate(base + stored);
        }
        *used += stored;
        stored
    }

    /// Drops block `id` from the table; its slot stays until the next compaction.
    pub(crate) fn reclaim(&mut self, id: u32) {
        let e = self.engine_at(id);
        if let Ok(entry) = self.ids.find_entry(spread(tag(e)), |&(i, _)| i == id) {
            entry.remove();
        }
        let (c, i) = at(id);
        self.chunks[c].run[i] = DEAD;
        self.dead += 1;
    }

    /// A new slab holding the ranges `(run, start, len)` in the order given (each `len <=
    /// CHUNK`), with each range's new start.
    pub(crate) fn compact(&self, ranges: &[(u32, u32, u32)]) -> (Slab, Vec<u32>) {
        let mut new = Slab::default();
        let mut starts = Vec::with_capacity(ranges.len());
        for &(run, start, len) in ranges {
            let n = len as usize;
            new.make_room(n);
            starts.push(new.next_id());
            new.append(run, self.engines(start, n), self.contents(start, n));
        }
        (new, starts)
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.chunks.len() * CHUNK as usize * 20 + self.ids.capacity() * 9
    }
}
