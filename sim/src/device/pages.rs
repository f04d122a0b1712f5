//! Fresh device allocations on the operating system's large pages, where it offers them.
//!
//! A step beyond the caches streams every member's buffer from memory; with 4 KiB pages each
//! stream crosses a page, and may miss the translation cache, every 4 KiB. Asking Linux for
//! transparent huge pages (`madvise(MADV_HUGEPAGE)`, which its default `madvise` mode honours
//! only where asked) before the memory is first touched backs each aligned 2 MiB of the
//! allocation with one page. On the VM of `perf/PERF.md` (`ruccl-perf -g W -b 1M -e 16M`, with
//! and without the advice alternated in one run, three rounds): at 16 MiB out of place, W = 2,
//! 0.87–0.97 ms against 0.91–1.12; W = 4, 1.8–2.0 ms against 2.0–2.3. Like a GPU framework's
//! caching allocator (and a GPU's own large pages), this is how the device's memory is laid out,
//! not a change to what a step moves.
//!
//! The advice is a hint: where the system refuses it (THP off, another OS, a model checker's
//! build) the allocation is the same, on small pages.

/// From how many bytes a fresh allocation asks for large pages: one with room for a whole
/// aligned 2 MiB page at least once its start is rounded up.
const LARGE_FROM_BYTES: usize = 4 << 20;

/// An empty vector with room for `len` elements; from [`LARGE_FROM_BYTES`], advised onto large
/// pages before any of it is touched.
pub(crate) fn with_capacity<T>(len: usize) -> Vec<T> {
    let values: Vec<T> = Vec::with_capacity(len);
    let bytes = values.capacity().saturating_mul(size_of::<T>());
    if bytes >= LARGE_FROM_BYTES {
        advise_large(values.as_ptr().cast(), bytes);
    }
    values
}

/// Ask for large pages over every aligned 2 MiB of `bytes` bytes from `start`.
#[cfg(all(target_os = "linux", not(any(ruccl_loom, ruccl_shuttle))))]
fn advise_large(start: *const u8, bytes: usize) {
    const LARGE_PAGE: usize = 2 << 20;
    let first = (start as usize).next_multiple_of(LARGE_PAGE);
    let end = (start as usize).saturating_add(bytes) & !(LARGE_PAGE - 1);
    if end <= first {
        return;
    }
    // SAFETY: `[first, end)` lies inside the allocation of `bytes` bytes at `start`, which the
    // caller's new vector owns and nobody else can reach yet; the range is aligned to 2 MiB, a
    // multiple of every base page size. `MADV_HUGEPAGE` only marks how the kernel backs the
    // range — no byte is read or written, and no mapping is added or removed — so the vector's
    // memory stays valid whether the call succeeds or fails. A failure (transparent huge pages
    // not built in, or off) leaves small pages: nothing to report.
    unsafe {
        libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
    }
}

/// Elsewhere, and under a model checker (whose tensors are a few elements): small pages.
#[cfg(not(all(target_os = "linux", not(any(ruccl_loom, ruccl_shuttle)))))]
fn advise_large(_start: *const u8, _bytes: usize) {}

#[cfg(test)]
mod tests {
    use super::{LARGE_FROM_BYTES, with_capacity};

    #[test]
    fn a_large_allocation_has_the_room_asked_and_holds_what_is_written() {
        let len = LARGE_FROM_BYTES / size_of::<u32>() + 17;
        let mut values: Vec<u32> = with_capacity(len);
        assert!(values.capacity() >= len);
        values.extend((0..len).map(|index| index as u32));
        assert!(
            values
                .iter()
                .enumerate()
                .all(|(index, &v)| v == index as u32)
        );
        let small: Vec<u8> = with_capacity(3);
        assert!(small.capacity() >= 3 && small.is_empty());
    }

    /// The flags of the mapping of this process that holds `address`, from `/proc/self/smaps`.
    #[cfg(all(target_os = "linux", not(any(ruccl_loom, ruccl_shuttle))))]
    fn mapping_flags(address: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().and_then(|field| {
                let (low, high) = field.split_once('-')?;
                let low = usize::from_str_radix(low, 16).ok()?;
                let high = usize::from_str_radix(high, 16).ok()?;
                Some(low..high)
            });
            match (range, line.strip_prefix("VmFlags:")) {
                (Some(range), _) => inside = range.contains(&address),
                (None, Some(flags)) if inside => return Some(flags.to_owned()),
                _ => {}
            }
        }
        None
    }

    /// Whether the page holding `address` is marked for huge pages (`hg`).
    #[cfg(all(target_os = "linux", not(any(ruccl_loom, ruccl_shuttle))))]
    fn marked(address: usize) -> bool {
        let flags = mapping_flags(address).unwrap_or_default();
        flags.split_whitespace().any(|flag| flag == "hg")
    }

    /// Where the kernel has transparent huge pages (its switch exists), every aligned 2 MiB of a
    /// large allocation is marked for them (`hg` in its mapping's flags) before it is touched,
    /// and nothing else is: not the allocation's unaligned head and tail, so no memory outside
    /// it. 40 MiB: above glibc's largest threshold for `mmap`, so the allocation is a mapping of
    /// its own, not memory another allocation once advised.
    #[cfg(all(target_os = "linux", not(any(ruccl_loom, ruccl_shuttle))))]
    #[test]
    fn a_large_allocations_aligned_pages_and_nothing_else_are_marked_for_huge_pages() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            return;
        }
        const PAGE: usize = 2 << 20;
        let values: Vec<u8> = with_capacity(40 << 20);
        let start = values.as_ptr() as usize;
        let end = start + values.capacity();
        let (first, last) = (start.next_multiple_of(PAGE), end / PAGE * PAGE);
        assert!(marked(first), "the first aligned page");
        assert!(marked(last - 1), "the last aligned page");
        if first > start {
            assert!(!marked(first - 1), "the head before the first aligned page");
        }
        if last < end {
            assert!(!marked(last), "the tail after the last aligned page");
        }
    }
}
