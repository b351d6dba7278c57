//! The raw view of registered memory that zero-copy I/O uses: a checked pointer and
//! length that system calls take as an `iovec`, and that only `unsafe` code turns into
//! a Rust slice (see the parent module for why).

use super::Region;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// A bounds-checked raw view of part of a [`Region`], borrowed from it.
///
/// Holding a `RegionSlice` creates no reference to region memory; it is a pointer and a
/// length that are known to be inside the region and valid while the borrow lasts.
pub struct RegionSlice<'a> {
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
    pub(super) _region: PhantomData<&'a Region>,
}

// SAFETY: a `RegionSlice` is a `&Region` narrowed to a checked range; `Region` is `Sync`,
// so `&Region` (and this view) may move between threads. Its only operations that
// dereference are `unsafe` with contracts that already cover other threads.
unsafe impl Send for RegionSlice<'_> {}

// SAFETY: sharing `&RegionSlice` exposes `as_ptr`/`len`/`as_iovec` (no dereference) and
// the `unsafe` slice accessors, whose contracts govern concurrent use.
unsafe impl Sync for RegionSlice<'_> {}

impl<'a> RegionSlice<'a> {
    /// Pointer to the first byte (for `readv`/`writev` or `memcpy`).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first `len` bytes of the view (all of it if it is shorter), e.g. for a
    /// transport that reads less than it was offered.
    pub fn prefix(&self, len: usize) -> RegionSlice<'a> {
        RegionSlice {
            ptr: self.ptr,
            len: len.min(self.len),
            _region: PhantomData,
        }
    }

    /// The view as an `iovec`, for `readv`/`writev`/`sendmsg`/`recvmsg` without ever
    /// forming a Rust reference. The kernel's accesses are outside the Rust abstract
    /// machine; the caller still decides (as for any iovec) that the kernel writing or
    /// reading these bytes is what it wants.
    pub fn as_iovec(&self) -> libc::iovec {
        libc::iovec {
            iov_base: self.ptr.as_ptr().cast(),
            iov_len: self.len,
        }
    }

    /// Borrows the bytes as a shared slice.
    ///
    /// # Safety
    ///
    /// While the returned slice is alive, nobody may write any of its bytes: not through
    /// a [`Region::write`]/[`Region::fill`] (of this or an overlapping `Region`), not
    /// through another `RegionSlice`, not by the RNIC placing remote data, not by the
    /// kernel. The usual way to know this is that the bytes belong to one operation in
    /// progress (e.g. the payload of a Send being transmitted from a buffer the
    /// program may not touch until the completion, with no remote write access).
    pub unsafe fn as_slice(&self) -> &'a [u8] {
        // SAFETY: `ptr..ptr + len` is inside the region (checked by `io_slice`), non-null,
        // and valid for reads while the `'a` borrow of the `Region` keeps it alive. The
        // caller guarantees no writes happen while the slice lives, so the `&[u8]`
        // invariant (immutability) holds.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Borrows the bytes as a mutable slice.
    ///
    /// # Safety
    ///
    /// While the returned slice is alive, nobody else may read or write any of its
    /// bytes: no other slice from this or an overlapping view (including a second call
    /// of this method on the same `RegionSlice`), no [`Region::read`], `write` or
    /// `fill` over them, no RNIC placement or transmission, no kernel I/O. This holds,
    /// for example, while the engine places one inbound segment into a range only that
    /// segment's operation may use.
    pub unsafe fn as_mut_slice(&self) -> &'a mut [u8] {
        // SAFETY: `ptr..ptr + len` is inside the region, non-null, valid for reads and
        // writes while the `'a` borrow keeps the `Region` alive, and the pointer's
        // provenance permits writes (it comes from the allocator or from `from_raw`'s
        // writable pointer, never from a `&`). The caller guarantees exclusive access for
        // the slice's life, which is the `&mut [u8]` invariant.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl fmt::Debug for RegionSlice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegionSlice")
            .field("addr", &format_args!("{:#x}", self.ptr.as_ptr().addr()))
            .field("len", &self.len)
            .finish()
    }
}
