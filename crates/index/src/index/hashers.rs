//! Hashers for u64-keyed maps: block sequence hashes are already uniform xxh3
//! outputs (identity is enough); engine hashes are opaque and may be sequential
//! (a multiplicative mix spreads them).

use std::hash::{BuildHasherDefault, Hasher};

/// Passes a u64 key through unchanged.
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Multiplies the u64 key by an odd constant (Fibonacci hashing).
#[derive(Default, Clone, Copy)]
pub(crate) struct MulHasher(u64);

impl Hasher for MulHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(self.0 ^ u64::from(*b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(20);
    }
}

pub(crate) type IdBuild = BuildHasherDefault<IdHasher>;
pub(crate) type MulBuild = BuildHasherDefault<MulHasher>;
