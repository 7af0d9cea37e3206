//! The block slab: per distinct block its engine hash, content hash and run, in parallel
//! arrays indexed by a `u32` block id, and the index's one keyed structure, a table of block
//! ids keyed by engine hash (the key is read back from the slab, so a slot is 4 bytes plus
//! hashbrown's control byte).

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

/// `run` of a block that was reclaimed (its id is free until the next compaction).
pub(crate) const DEAD: u32 = u32::MAX;

/// Engine hashes are already hashes; one multiply spreads them over hashbrown's index bits
/// (low) and tag bits (top 7).
#[inline]
fn hash(e: u64) -> u64 {
    let h = e.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h ^ (h >> 32)
}

#[derive(Default)]
pub(crate) struct Slab {
    pub(crate) engine: Vec<u64>,
    pub(crate) content: Vec<u64>,
    /// The run each block belongs to (rewritten when a run splits), or [`DEAD`].
    pub(crate) run: Vec<u32>,
    ids: HashTable<u32>,
    /// Reclaimed ids (slots still in the arrays, no longer in `ids`).
    pub(crate) dead: usize,
}

impl Slab {
    /// Block ids handed out so far (live and dead).
    #[inline]
    pub(crate) fn len(&self) -> u32 {
        self.engine.len() as u32
    }

    #[inline]
    pub(crate) fn live(&self) -> usize {
        self.engine.len() - self.dead
    }

    /// The block with engine hash `e`.
    #[inline]
    pub(crate) fn lookup(&self, e: u64) -> Option<u32> {
        let engine = &self.engine;
        self.ids
            .find(hash(e), |&id| engine[id as usize] == e)
            .copied()
    }

    /// Appends the blocks of `engine` / `content` to the slab as members of `run`, stopping
    /// before the first one whose engine hash is already known (a conflict the caller reports).
    /// Returns how many were appended.
    pub(crate) fn append(&mut self, run: u32, engine: &[u64], content: &[u64]) -> usize {
        let Slab {
            engine: eng,
            content: con,
            run: runs,
            ids,
            ..
        } = self;
        ids.reserve(engine.len(), |&id| hash(eng[id as usize]));
        let base = eng.len();
        eng.extend_from_slice(engine);
        con.extend_from_slice(content);
        runs.resize(base + engine.len(), run);
        for (j, &e) in engine.iter().enumerate() {
            match ids.entry(
                hash(e),
                |&i| eng[i as usize] == e,
                |&i| hash(eng[i as usize]),
            ) {
                Entry::Occupied(_) => {
                    eng.truncate(base + j);
                    con.truncate(base + j);
                    runs.truncate(base + j);
                    return j;
                }
                Entry::Vacant(v) => {
                    v.insert((base + j) as u32);
                }
            }
        }
        engine.len()
    }

    /// Drops block `id` from the table; its slot stays until the next compaction.
    pub(crate) fn reclaim(&mut self, id: u32) {
        let e = self.engine[id as usize];
        if let Ok(entry) = self.ids.find_entry(hash(e), |&i| i == id) {
            entry.remove();
        }
        self.run[id as usize] = DEAD;
        self.dead += 1;
    }

    /// Rebuilds the slab from the live ranges `(start, len)` of every run, in the order given;
    /// returns each range's new start. The table is rebuilt, the arrays shrink.
    pub(crate) fn compact(&mut self, ranges: &[(u32, u32, u32)]) -> Vec<u32> {
        let live = self.live();
        let mut engine = Vec::with_capacity(live);
        let mut content = Vec::with_capacity(live);
        let mut run = Vec::with_capacity(live);
        let mut starts = Vec::with_capacity(ranges.len());
        for &(r, start, len) in ranges {
            let (s, e) = (start as usize, (start + len) as usize);
            starts.push(engine.len() as u32);
            engine.extend_from_slice(&self.engine[s..e]);
            content.extend_from_slice(&self.content[s..e]);
            run.extend(std::iter::repeat_n(r, len as usize));
        }
        let mut ids = HashTable::with_capacity(engine.len());
        for (id, &e) in engine.iter().enumerate() {
            ids.insert_unique(hash(e), id as u32, |&i| hash(engine[i as usize]));
        }
        *self = Slab {
            engine,
            content,
            run,
            ids,
            dead: 0,
        };
        starts
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.engine.capacity() * 8
            + self.content.capacity() * 8
            + self.run.capacity() * 4
            + self.ids.capacity() * 5
    }
}
