//! The one comparison runs are made of: how many leading hashes two arrays share, compared
//! eight at a time (slice equality the compiler vectorizes) before finding the first
//! difference inside the last group.

/// Length of the common prefix of `a` and `b`.
#[inline]
pub(crate) fn common_prefix(a: &[u64], b: &[u64]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut i = 0;
    while i + 8 <= n && a[i..i + 8] == b[i..i + 8] {
        i += 8;
    }
    i + a[i..]
        .iter()
        .zip(&b[i..])
        .take_while(|(x, y)| x == y)
        .count()
}

#[cfg(test)]
mod tests {
    use super::common_prefix;

    #[test]
    fn every_split_point() {
        for n in 0..40 {
            let a: Vec<u64> = (0..n as u64).collect();
            assert_eq!(common_prefix(&a, &a), n);
            for k in 0..n {
                let mut b = a.clone();
                b[k] = 999;
                assert_eq!(common_prefix(&a, &b), k);
                assert_eq!(common_prefix(&a[..k], &b), k);
                assert_eq!(common_prefix(&b, &a[..n - 1]), k.min(n - 1));
            }
        }
    }
}
