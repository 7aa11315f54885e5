//! Raw memory for the big structures: one anonymous mapping per structure, made once at
//! partition creation, zero-filled by the kernel, with transparent huge pages requested so that
//! random GETs over gigabytes do not pay a TLB miss each. Also the prefetch hint.
//!
//! This is one of the few modules with `unsafe`; everything else uses the safe slices it hands
//! out. A mapping may also be read from other threads (`SharedBytes`, MICA's concurrent reads):
//! only with atomic loads, by readers that validate what they copied before using it.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// The mapping itself: unmapped when the last of its owner and its readers is gone.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory; its owner (`Region`) is the only writer, and every other
// thread reads it only through `SharedBytes`' atomic loads.
unsafe impl Send for Mapping {}
// SAFETY: as above: shared access is atomic loads only.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly the mapping created in `Region::new`, unmapped only here,
        // when neither the Region nor any SharedBytes can reach it any more.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// An anonymous, zero-filled, page-aligned memory mapping, unmapped on drop (of it and of
/// every `SharedBytes` view).
pub(crate) struct Region {
    ptr: NonNull<u8>,
    len: usize,
    map: Arc<Mapping>,
}

// SAFETY: a Region is its mapping's only writer, like a Box<[u8]>; moving it to another thread
// moves that role. Other threads hold only `SharedBytes`.
unsafe impl Send for Region {}

/// The alignment every Region guarantees (the smallest page size).
pub(crate) const REGION_ALIGN: usize = 4096;

const HUGE_PAGE_BYTES: usize = 2 << 20;

impl Region {
    /// Maps `len` zeroed bytes (`len` > 0), or returns None when the kernel refuses.
    pub(crate) fn new(len: usize) -> Option<Region> {
        Region::map(len, true)
    }

    /// Like `new`, without huge pages: for a mapping touched a little at a time, whose
    /// resident size should follow what is used in 4 KiB steps, not 2 MiB ones.
    pub(crate) fn new_small_pages(len: usize) -> Option<Region> {
        Region::map(len, false)
    }

    fn map(len: usize, huge: bool) -> Option<Region> {
        assert!(len > 0);
        // SAFETY: an anonymous private mapping with no address hint touches no existing memory;
        // the result is checked against MAP_FAILED before use.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        if huge && len >= HUGE_PAGE_BYTES {
            // SAFETY: the range is exactly the mapping just created. A failure only means no
            // huge pages, which is a speed loss, not an error.
            unsafe {
                libc::madvise(raw, len, libc::MADV_HUGEPAGE);
            }
        }
        let ptr = NonNull::new(raw.cast::<u8>())?;
        debug_assert_eq!(ptr.as_ptr() as usize % REGION_ALIGN, 0);
        Some(Region { ptr, len, map: Arc::new(Mapping { ptr, len }) })
    }

    /// A read-only view for other threads; it keeps the mapping alive.
    pub(crate) fn shared(&self) -> SharedBytes {
        SharedBytes { map: Arc::clone(&self.map) }
    }

    /// The mapping's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Gives the pages wholly inside `start..end` back to the kernel; they read as zeros
    /// afterwards. Partial pages at either end are kept.
    pub(crate) fn release(&mut self, start: usize, end: usize) {
        let end = end.min(self.len);
        let first = start.next_multiple_of(REGION_ALIGN);
        let last = end & !(REGION_ALIGN - 1);
        if first >= last {
            return;
        }
        // SAFETY: first..last lies inside the mapping (end is clamped to len) and is
        // page-aligned. MADV_DONTNEED on a private anonymous mapping only drops the pages'
        // contents (they read as zeros again); &mut self means no borrow sees the change.
        unsafe {
            libc::madvise(self.ptr.as_ptr().add(first).cast(), last - first, libc::MADV_DONTNEED);
        }
    }

    /// The mapping as bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is a live mapping owned by self, readable and writable, and the
        // returned borrow is tied to &self so the mapping outlives it.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The mapping as mutable bytes.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and &mut self guarantees no other borrow exists.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Stores the 8-byte word at byte `offset` (a multiple of 8) with Release, for words other
    /// threads load (`SharedBytes::load_u64`): what was written before it is visible to them.
    #[inline]
    pub(crate) fn store_u64(&mut self, offset: usize, value: u64) {
        assert!(offset.is_multiple_of(8) && offset + 8 <= self.len);
        // SAFETY: an 8-aligned word inside the live mapping (checked); &mut self makes this the
        // only writer, and readers on other threads use atomic loads.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(offset).cast::<u64>()).store(value, Ordering::Release) }
    }

    /// The mapping as a slice of `T`, for plain-old-data `T` that is valid when all bytes are
    /// zero, whose alignment divides the page size and whose size divides `len`.
    pub(crate) fn typed_mut<T: ZeroIsValid>(&mut self) -> &mut [T] {
        let count = self.count_of::<T>();
        // SAFETY: the pointer is page-aligned, hence aligned for T (checked above); the length
        // covers exactly len bytes of the live mapping; every bit pattern the mapping can hold
        // started as zeros, which ZeroIsValid promises is a valid T, and T (plain integers) has
        // no invalid bit patterns afterwards either. &mut self makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast::<T>(), count) }
    }

    /// Read-only view of `typed_mut`.
    pub(crate) fn typed<T: ZeroIsValid>(&self) -> &[T] {
        let count = self.count_of::<T>();
        // SAFETY: as in `typed_mut`, with a shared borrow.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<T>(), count) }
    }

    /// How many `T` fill the region exactly; asserts the size and alignment rules that make
    /// a typed view sound.
    fn count_of<T>(&self) -> usize {
        let size = std::mem::size_of::<T>();
        assert!(size > 0 && self.len.is_multiple_of(size));
        assert!(REGION_ALIGN.is_multiple_of(std::mem::align_of::<T>()));
        self.len / size
    }
}

/// Another thread's view of a Region: atomic loads only, so a read that races with the owner's
/// write is not undefined behaviour; what it returns may be torn, and callers validate it
/// (a sequence number or position checked after the copy) before they use it.
#[derive(Clone)]
pub(crate) struct SharedBytes {
    map: Arc<Mapping>,
}

impl SharedBytes {
    pub(crate) fn len(&self) -> usize {
        self.map.len
    }

    /// The 8-byte word at byte `offset` (a multiple of 8 inside the mapping), loaded with
    /// Acquire: what its writer stored before a Release store of it is visible after.
    #[inline]
    pub(crate) fn load_u64(&self, offset: usize) -> u64 {
        assert!(offset.is_multiple_of(8) && offset + 8 <= self.map.len);
        // SAFETY: the word lies inside the live mapping (checked; the Arc keeps it mapped) and
        // is 8-aligned (the mapping is page-aligned, the offset a multiple of 8). Every access
        // to it from other threads is atomic; its owner writes it with atomic stores (`store_u64`).
        unsafe { AtomicU64::from_ptr(self.map.ptr.as_ptr().add(offset).cast::<u64>()).load(Ordering::Acquire) }
    }

    /// Copies `out.len()` bytes from byte `offset` with relaxed atomic loads (words where
    /// aligned). The copy may be torn if the owner wrote meanwhile: validate before use.
    pub(crate) fn copy_to(&self, offset: usize, out: &mut [u8]) {
        let end = offset.checked_add(out.len()).expect("no overflow");
        assert!(end <= self.map.len);
        let base = self.map.ptr.as_ptr();
        let mut at = offset;
        while at < end {
            if at.is_multiple_of(8) && at + 8 <= end {
                // SAFETY: an 8-aligned word inside the live mapping (checked above).
                let word = unsafe { AtomicU64::from_ptr(base.add(at).cast::<u64>()).load(Ordering::Relaxed) };
                out[at - offset..at - offset + 8].copy_from_slice(&word.to_ne_bytes());
                at += 8;
            } else {
                // SAFETY: one byte inside the live mapping (checked above).
                out[at - offset] = unsafe { AtomicU8::from_ptr(base.add(at)).load(Ordering::Relaxed) };
                at += 1;
            }
        }
    }
}

/// Marker for plain-old-data types made only of integers (every bit pattern valid, zero too).
///
/// # Safety
/// Implement only for types whose every bit pattern, including all zeros, is a valid value.
pub(crate) unsafe trait ZeroIsValid: Copy {}

// SAFETY: integers accept every bit pattern.
unsafe impl ZeroIsValid for u64 {}

/// Hints the CPU to start loading the cache line holding `ptr`. Never faults, even for an
/// address outside any mapping.
#[inline(always)]
pub(crate) fn prefetch<T>(ptr: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: SSE is part of the x86_64 baseline, and a prefetch is only a hint: it never
        // dereferences the pointer architecturally and cannot fault.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ptr.cast::<i8>()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ptr;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_is_zeroed_aligned_and_writable() {
        let mut r = Region::new(3 * HUGE_PAGE_BYTES + 10).expect("mmap");
        assert_eq!(r.len(), 3 * HUGE_PAGE_BYTES + 10);
        assert!(r.bytes().iter().all(|&b| b == 0));
        r.bytes_mut()[5] = 7;
        assert_eq!(r.bytes()[5], 7);
        assert_eq!(r.bytes().as_ptr() as usize % REGION_ALIGN, 0);
    }

    #[test]
    fn typed_view_covers_the_region() {
        let mut r = Region::new(64 * 10).expect("mmap");
        let words = r.typed_mut::<u64>();
        assert_eq!(words.len(), 80);
        words[79] = u64::MAX;
        assert_eq!(r.typed::<u64>()[79], u64::MAX);
        assert_eq!(r.bytes()[639], 0xFF);
        prefetch(r.bytes().as_ptr());
        prefetch(std::ptr::null::<u8>());
    }

    #[test]
    fn released_pages_read_as_zeros_and_partial_pages_are_kept() {
        let mut r = Region::new(4 * REGION_ALIGN).expect("mmap");
        r.bytes_mut().fill(9);
        r.release(REGION_ALIGN / 2, 3 * REGION_ALIGN + 1);
        let bytes = r.bytes();
        assert!(bytes[..REGION_ALIGN].iter().all(|&b| b == 9), "the partial first page stays");
        assert!(bytes[REGION_ALIGN..3 * REGION_ALIGN].iter().all(|&b| b == 0));
        assert!(bytes[3 * REGION_ALIGN..].iter().all(|&b| b == 9), "the partial last page stays");
        r.release(0, usize::MAX);
        assert!(r.bytes().iter().all(|&b| b == 0));
    }
}
