//! A cache prefetch hint (the index's only `unsafe`): ingest issues the loads of
//! a batch's table slots together so their cache misses overlap.

/// Asks the CPU to bring `value`'s cache line into L1; no effect on results.
#[inline(always)]
pub(crate) fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: PREFETCHT0 is a hint: it never faults, writes nothing and has no
    // architectural effect; the pointer comes from a live reference anyway. SSE
    // is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (value as *const T).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
