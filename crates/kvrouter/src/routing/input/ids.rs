//! Fast decoder for a flat JSON array of u32 token ids (`[1, 2, 3]`), the bulk of a
//! tokenised request body.
//!
//! It validates while it decodes, eight bytes at a time (SWAR digit detection and
//! conversion), and accepts only the plain form: `0` or `[1-9][0-9]*` elements within u32
//! range, separated by `,` with JSON whitespace (space, tab, LF, CR) around separators.
//! Anything else (signs, fractions, exponents, nesting, out-of-range values, bad syntax)
//! returns `None` and the caller falls back to serde, so correctness never depends on
//! this path: whatever it accepts, serde accepts with the same values.

const ZEROS: u64 = 0x3030_3030_3030_3030;
const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
const ADD_TEN: u64 = 0x7676_7676_7676_7676;
const HIGH: u64 = 0x8080_8080_8080_8080;

#[inline(always)]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

#[inline(always)]
fn skip_ws(s: &[u8], mut p: usize) -> usize {
    while p < s.len() && is_ws(s[p]) {
        p += 1;
    }
    p
}

/// Decodes the array starting at `s[0] == b'['`. Returns the ids and the offset just past the
/// closing `]`, or `None` when the array is not in the plain form (see module docs).
pub(super) fn decode_u32_array(s: &[u8]) -> Option<(Vec<u32>, usize)> {
    if s.first() != Some(&b'[') {
        return None;
    }
    // A token id takes ~6-7 bytes with its separator: one allocation for typical arrays.
    let mut out = Vec::with_capacity(s.len() / 6);
    let mut p = skip_ws(s, 1);
    if s.get(p) == Some(&b']') {
        return Some((out, p + 1));
    }
    loop {
        let (value, len) = number(s, p)?;
        out.push(value);
        p += len;
        match s.get(p) {
            Some(b',') => p += 1,
            Some(b']') => return Some((out, p + 1)),
            Some(&b) if is_ws(b) => {
                p = skip_ws(s, p);
                match s.get(p) {
                    Some(b',') => p += 1,
                    Some(b']') => return Some((out, p + 1)),
                    _ => return None,
                }
            }
            _ => return None,
        }
        if !s.get(p).is_some_and(u8::is_ascii_digit) {
            p = skip_ws(s, p);
        }
    }
}

/// The unsigned integer starting at `s[p]` and its length in bytes.
#[inline(always)]
fn number(s: &[u8], p: usize) -> Option<(u32, usize)> {
    let chunk = match s.get(p..p + 8) {
        Some(b) => u64::from_le_bytes(b.try_into().ok()?),
        None => {
            let rest = s.get(p..)?;
            let mut buf = [b'x'; 8];
            buf[..rest.len()].copy_from_slice(rest);
            u64::from_le_bytes(buf)
        }
    };
    // Digits become 0..=9; a byte's high bit is set in `non_digit` iff it is not a digit.
    let x = chunk ^ ZEROS;
    let non_digit = (((x & LOW7) + ADD_TEN) | x) & HIGH;
    let len = (non_digit.trailing_zeros() / 8) as usize;
    match len {
        0 => None,
        8 => long_number(s, p),
        _ if len > 1 && x & 0xFF == 0 => None, // leading zero
        _ => Some((swar_value(x << (8 * (8 - len))), len)),
    }
}

/// The value of eight digit bytes (0..=9, most significant in the lowest byte).
#[inline(always)]
fn swar_value(v: u64) -> u32 {
    let v = (v.wrapping_mul(10).wrapping_add(v >> 8)) & 0x00FF_00FF_00FF_00FF;
    let v = (v.wrapping_mul(100).wrapping_add(v >> 16)) & 0x0000_FFFF_0000_FFFF;
    let v = (v.wrapping_mul(10_000).wrapping_add(v >> 32)) & 0xFFFF_FFFF;
    v as u32
}

/// Eight or more digits: at most ten fit a u32; larger or longer falls back to serde.
#[cold]
fn long_number(s: &[u8], p: usize) -> Option<(u32, usize)> {
    if s[p] == b'0' {
        return None;
    }
    let digits = s[p..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits > 10 {
        return None;
    }
    let value = s[p..p + digits]
        .iter()
        .fold(0u64, |acc, b| acc * 10 + u64::from(b - b'0'));
    Some((u32::try_from(value).ok()?, digits))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The fast path must agree with serde whenever it answers, and answer for plain arrays.
    fn check(text: &str) -> Option<Vec<u32>> {
        let fast = decode_u32_array(text.as_bytes());
        let serde = serde_json::from_str::<Vec<u32>>(text).ok();
        if let Some((ids, end)) = &fast {
            if *end == text.len() {
                assert_eq!(Some(ids), serde.as_ref(), "fast path accepted {text:?}");
            }
        }
        fast.filter(|(_, end)| *end == text.len())
            .map(|(ids, _)| ids)
    }

    #[test]
    fn plain_arrays_decode() {
        assert_eq!(check("[]"), Some(vec![]));
        assert_eq!(check("[ ]"), Some(vec![]));
        assert_eq!(check("[0]"), Some(vec![0]));
        assert_eq!(check("[1,22,333]"), Some(vec![1, 22, 333]));
        assert_eq!(check("[ 1 ,\n22,\t333\r]"), Some(vec![1, 22, 333]));
        assert_eq!(check("[4294967295]"), Some(vec![u32::MAX]));
        assert_eq!(
            check("[12345678,123456789]"),
            Some(vec![12_345_678, 123_456_789])
        );
        assert_eq!(check("[1234567, 7]"), Some(vec![1_234_567, 7]));
    }

    #[test]
    fn unusual_arrays_fall_back() {
        for text in [
            "[4294967296]",
            "[99999999999]",
            "[-1]",
            "[01]",
            "[00]",
            "[1.0]",
            "[1e3]",
            "[1E3]",
            "[1,]",
            "[,1]",
            "[1 2]",
            "[1,,2]",
            "[[1]]",
            "[\"1\"]",
            "[1",
            "[1,",
            "[",
            "[1\u{c}]",
            "[null]",
        ] {
            assert_eq!(check(text), None, "{text:?}");
        }
    }

    fn random_array(rng: &mut impl Rng) -> String {
        let n = rng.random_range(0..40);
        let mut s = String::from("[");
        for i in 0..n {
            if i > 0 {
                s.push_str([",", ", ", " ,", ",\n  ", "\t,\r"][rng.random_range(0..5)]);
            }
            let v: u64 = match rng.random_range(0..4) {
                0 => rng.random_range(0..10),
                1 => rng.random_range(0..200_000),
                2 => rng.random_range(0..=u64::from(u32::MAX)),
                _ => rng.random_range(0..100_000_000_000),
            };
            s.push_str(&v.to_string());
        }
        s.push(']');
        s
    }

    /// Randomised equivalence with serde on plain, then byte-mutated (often malformed) arrays.
    #[test]
    fn fuzz_matches_serde() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
        let alphabet = b"0123456789 ,[]-+.eE\"\n\tx\x0c";
        for _ in 0..20_000 {
            let text = random_array(&mut rng);
            let serde = serde_json::from_str::<Vec<u32>>(&text).ok();
            assert_eq!(check(&text), serde, "{text:?}");
            let mut bytes = text.into_bytes();
            crate::routing::input::mutate_bytes(&mut rng, &mut bytes, alphabet);
            if let Ok(text) = String::from_utf8(bytes) {
                check(&text);
            }
        }
    }
}
