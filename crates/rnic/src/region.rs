//! Registered memory: the bytes an RNIC reads and writes behind the program's back.
//!
//! # The problem
//!
//! Once memory is registered, the RNIC may touch it at any moment: a remote RDMA Write
//! or Read Response is placed into it on an engine thread, a received Send is scattered
//! into a posted receive buffer, and transmit reads it out again for Sends, Writes and
//! Read Responses. If the program held a `&[u8]` or `&mut [u8]` over those bytes while
//! an engine thread wrote them, Rust's aliasing rules would be broken: a shared
//! reference promises the bytes do not change, a mutable one promises nobody else looks.
//!
//! # The model
//!
//! [`Region`] therefore never hands out a Rust reference to its memory from safe code.
//! It keeps a raw base pointer and a length, and every safe operation is a bounds-checked
//! *copy* between the region and a caller-owned buffer ([`Region::write`],
//! [`Region::read`], [`Region::fill`]). Such a copy may run at the same time as an
//! engine thread places remote data into the same bytes. The outcome is what RDMA
//! hardware gives you in the same situation: the copy may see a mixture of old and new
//! bytes ("torn" data). That is a correctness problem for the application's protocol
//! (which must not look at a buffer before the completion or the peer's message says
//! it is ready), not a memory-safety problem: `u8` has no invalid bit patterns, no
//! reference to the bytes exists, and the pointer stays valid for the region's life.
//!
//! The zero-copy path the I/O layer needs — `readv`/`writev` straight into and out of
//! registered memory, CRC over a payload in place — goes through [`Region::io_slice`],
//! which returns a bounds-checked raw view ([`RegionSlice`]). Its pointer and length
//! can be given to a system call without creating a reference at all
//! ([`RegionSlice::as_iovec`]); turning it into a Rust slice is `unsafe`
//! ([`RegionSlice::as_slice`], [`RegionSlice::as_mut_slice`]) because only the caller
//! can know that nobody else writes (or, for the mutable slice, touches) those bytes
//! while the slice lives — for example because the TPT/QP logic guarantees that the
//! bytes belong to one in-flight operation.
//!
//! # An honest caveat
//!
//! Under the strict Rust abstract machine, two threads performing a non-atomic write
//! and a non-atomic read (or two writes) of the same byte without synchronisation is a
//! data race, and a data race is undefined behaviour even when it goes through raw
//! pointers. The safe copies here are plain `memcpy`s, so two engine threads, or an
//! engine thread and the program, copying into overlapping bytes at the same time are
//! formally racing. The project takes the same position as shared-memory IPC crates
//! and as the kernel does with user memory: region memory is treated as externally
//! mutated memory (a remote peer really does write it at arbitrary times), the safe API
//! never forms references to it so no aliasing guarantee the compiler relies on is
//! violated, the element type has no validity invariant, and no safe method reads a
//! byte twice expecting it unchanged. Making every byte an `AtomicU8` would
//! satisfy the abstract machine but would rule out `memcpy` and `readv` speeds, which is
//! the whole point of an RNIC. The tests exercise concurrent, overlapping copies and
//! check that nothing worse than tearing happens, and `crates/rnic/valgrind.sh` runs
//! them under memcheck (every access inside live, initialised memory, every owned
//! region freed once). helgrind/drd can be run the same way but flag these
//! deliberate races and std's futex-based locks alike, so they are informative only.

use std::alloc::{self, Layout};
use std::fmt;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use softrnic_proto::verbs::RegionId;

mod slice;

pub use slice::RegionSlice;

/// Alignment of memory allocated by [`Region::alloc`]: one page, so that a region can
/// be handed to page-granular interfaces (`mmap`-style pinning, `O_DIRECT`, huge
/// transfers) and so that its tagged-offset base is a round address.
pub const REGION_ALIGN: usize = 4096;

/// Errors from region allocation and bounds checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RegionError {
    /// `offset..offset + len` is not inside the region (or `offset + len` overflows).
    #[error("range {offset}+{len} is outside the region of {region_len} bytes")]
    OutOfBounds {
        /// Requested start.
        offset: usize,
        /// Requested length.
        len: usize,
        /// The region's length.
        region_len: usize,
    },
    /// The requested size cannot be allocated on this platform (over `isize::MAX`
    /// once rounded to the page alignment).
    #[error("a region of {0} bytes is too large")]
    TooLarge(usize),
    /// The allocator returned no memory.
    #[error("allocating a region of {0} bytes failed")]
    AllocFailed(usize),
}

/// Who owns the bytes behind a [`Region`].
#[derive(Debug, Clone, Copy)]
enum Backing {
    /// Allocated by [`Region::alloc`] with this layout; freed on drop.
    Owned(Layout),
    /// Allocated with length 0: a dangling, never-dereferenced pointer; nothing to free.
    Empty,
    /// The program's memory, lent through [`Region::from_raw`]; never freed here.
    Borrowed,
}

/// A block of registered memory, accessed only through raw-pointer copies.
///
/// See the [module documentation](self) for the safety model.
pub struct Region {
    /// Base of the memory. Its provenance covers `len` bytes (from the allocator or
    /// from the `from_raw` caller); it never comes from a Rust reference, so writing
    /// through it from `&self` creates no aliasing conflict.
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
    id: RegionId,
}

// SAFETY: A `Region` is a pointer to memory that stays valid for the `Region`'s whole
// life, independent of which thread holds it (owned memory comes from the global
// allocator, which may free from any thread; borrowed memory is guaranteed valid by
// the `from_raw` contract). Sending it to another thread only moves that pointer.
unsafe impl Send for Region {}

// SAFETY: Sharing `&Region` between threads lets several threads call `write`, `read`,
// `fill` and `io_slice` at once. The safe methods only ever copy bytes through the raw
// pointer, within bounds, and never create a Rust reference to region memory, so
// concurrent calls cannot invalidate a reference another thread holds; overlapping
// concurrent copies produce torn bytes, which is acceptable for `u8` data with no
// validity invariant (the module documentation states the project's position on the
// formal data race). Creating references from an `io_slice` is `unsafe` and its
// contract puts the exclusion burden on the caller.
unsafe impl Sync for Region {}

impl Region {
    /// Allocates a zeroed, page-aligned ([`REGION_ALIGN`]) region of `len` bytes.
    ///
    /// `len == 0` yields a valid empty region whose base address is page-aligned but
    /// which owns no memory. Fails (rather than aborting) when `len` is too large or
    /// the allocator has no memory.
    pub fn alloc(id: RegionId, len: usize) -> Result<Region, RegionError> {
        if len > isize::MAX as usize {
            return Err(RegionError::TooLarge(len));
        }
        if len == 0 {
            // A non-null, page-aligned address with no provenance: only ever used for
            // zero-length copies, which do not dereference it.
            let ptr = NonNull::new(ptr::without_provenance_mut(REGION_ALIGN))
                .expect("REGION_ALIGN is non-zero");
            return Ok(Region {
                ptr,
                len: 0,
                backing: Backing::Empty,
                id,
            });
        }
        let layout =
            Layout::from_size_align(len, REGION_ALIGN).map_err(|_| RegionError::TooLarge(len))?;
        // SAFETY: `layout` has a non-zero size (len > 0 was checked above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(RegionError::AllocFailed(len))?;
        Ok(Region {
            ptr,
            len,
            backing: Backing::Owned(layout),
            id,
        })
    }

    /// Registers `len` bytes of the program's memory at `ptr` (the analogue of
    /// `ibv_reg_mr`). The memory is not freed when the `Region` drops.
    ///
    /// # Panics
    ///
    /// If `ptr` is null.
    ///
    /// # Safety
    ///
    /// From this call until the returned `Region` is dropped:
    ///
    /// - `ptr..ptr + len` must be valid for reads and writes of `len` bytes (one live
    ///   allocation, or one mapping, of at least that size; `len <= isize::MAX`), and
    ///   `ptr` must carry provenance that permits writing (e.g. from
    ///   `Vec::as_mut_ptr`, `Box::into_raw`, `mmap`, not from a `&T`);
    /// - the memory must not be freed, reallocated, unmapped or moved (a `Vec` must
    ///   not grow, a stack buffer must outlive the `Region`);
    /// - the program must not access those bytes except through the API of `Region`s
    ///   (this one, or other `Region`s registered over overlapping memory) and the
    ///   [`RegionSlice`]s they hand out. In particular no `&[u8]`/`&mut [u8]` over the
    ///   bytes may be used while the `Region` lives: the RNIC may write them at any
    ///   time from another thread. (Using the pointer again after the `Region` is
    ///   dropped is fine.)
    pub unsafe fn from_raw(id: RegionId, ptr: *mut u8, len: usize) -> Region {
        let ptr = NonNull::new(ptr).expect("Region::from_raw: null pointer");
        Region {
            ptr,
            len,
            backing: Backing::Borrowed,
            id,
        }
    }

    /// The region's identifier.
    pub fn id(&self) -> RegionId {
        self.id
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the memory was allocated by [`Region::alloc`] (and is freed on drop).
    pub fn is_owned(&self) -> bool {
        !matches!(self.backing, Backing::Borrowed)
    }

    /// The base virtual address. Tagged offsets are virtual addresses (TO = VA, as
    /// libibverbs and siw use them), so byte `i` of the region has tagged offset
    /// `addr() + i`.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr().addr() as u64
    }

    /// Checks that `offset..offset + len` lies inside the region.
    #[inline]
    pub fn check(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(RegionError::OutOfBounds {
                offset,
                len,
                region_len: self.len,
            }),
        }
    }

    /// Pointer to byte `offset`, after `check(offset, len)` succeeded.
    fn ptr_at(&self, offset: usize) -> *mut u8 {
        // `wrapping_add` keeps this method safe; callers only use it for offsets that
        // passed `check`, for which it equals the in-bounds `add`.
        self.ptr.as_ptr().wrapping_add(offset)
    }

    /// Copies `data` into the region at `offset`.
    ///
    /// Safe at any time, even while the RNIC writes the same bytes (the result is then
    /// a mixture of both writes, as on hardware).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), RegionError> {
        self.check(offset, data.len())?;
        // SAFETY: `check` proved `offset..offset + data.len()` is inside the region, whose
        // memory is valid for writes for `self`'s life (owned allocation, or the
        // `from_raw` contract; a zero-length copy from the dangling empty-region pointer
        // is allowed since it is non-null and aligned for `u8`). `data` is a live
        // shared borrow of caller memory, which cannot be region memory because the safe
        // API never hands out references to region memory and the `unsafe` ones forbid
        // writes under a live `&` (see `RegionSlice::as_slice`), so the ranges do not
        // overlap. No reference to region memory is created.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), self.ptr_at(offset), data.len()) };
        Ok(())
    }

    /// Copies `out.len()` bytes from the region at `offset` into `out`.
    ///
    /// Safe at any time; if the RNIC writes the same bytes concurrently, `out` may hold
    /// a mixture of old and new data. Inlined: the single post frames its payload
    /// with it (`transmit::single`). At most [`SHORT_COPY`] octets are copied inline
    /// ([`copy_short`]): for a ping-pong's 8 octets, glibc's `memcpy` was a call and
    /// five size tests (13 instructions of the post). Always inlined: with the short
    /// copy, `#[inline]` left it a call of its own in the post (6 instructions more).
    #[inline(always)]
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), RegionError> {
        self.check(offset, out.len())?;
        if out.len() <= SHORT_COPY {
            // SAFETY: as below: the source range is inside the region (checked) and
            // readable for `self`'s life, and it is not `out`'s memory.
            unsafe { copy_short(self.ptr_at(offset), out) };
            return Ok(());
        }
        // SAFETY: the source range is inside the region (checked) and valid for reads for
        // `self`'s life; `out` is a live unique borrow of caller memory, which does not
        // overlap region memory for the same reason as in `write` (an `as_mut_slice`
        // borrow forbids any other access to its bytes, including this read).
        unsafe { ptr::copy_nonoverlapping(self.ptr_at(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Appends `len` bytes from the region at `offset` to `out`, without zeroing the
    /// room first (the transmit path gathers small FPDUs this way).
    ///
    /// Safe at any time, as [`Region::read`]. Inlined: a small FPDU's gather calls it
    /// once per message, and the call cost more than the copy of a small payload.
    #[inline]
    pub fn append_to(
        &self,
        offset: usize,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), RegionError> {
        self.check(offset, len)?;
        out.reserve(len);
        let at = out.len();
        // SAFETY: the source range is inside the region (checked) and valid for reads
        // for `self`'s life. After `reserve`, `out` has room for `len` more bytes at
        // `at`; that spare capacity belongs to the vector's own allocation, which is not
        // region memory, so the ranges do not overlap. The copy initialises exactly
        // those `len` bytes, so `set_len` exposes only initialised bytes.
        unsafe {
            ptr::copy_nonoverlapping(self.ptr_at(offset), out.as_mut_ptr().add(at), len);
            out.set_len(at + len);
        }
        Ok(())
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), RegionError> {
        self.check(offset, len)?;
        // SAFETY: the range is inside the region (checked) and valid for writes for
        // `self`'s life; `write_bytes` writes through the raw pointer without creating a
        // reference.
        unsafe { ptr::write_bytes(self.ptr_at(offset), byte, len) };
        Ok(())
    }

    /// A bounds-checked raw view of `len` bytes at `offset`, for zero-copy I/O.
    pub fn io_slice(&self, offset: usize, len: usize) -> Result<RegionSlice<'_>, RegionError> {
        self.check(offset, len)?;
        // `ptr_at` of a checked offset is in bounds (or one past the end for `len == 0`)
        // of a non-null allocation, hence non-null; `self.ptr` is the fallback that can
        // never be taken but keeps this free of `unsafe`.
        let ptr = NonNull::new(self.ptr_at(offset)).unwrap_or(self.ptr);
        Ok(RegionSlice {
            ptr,
            len,
            _region: PhantomData,
        })
    }
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region")
            .field("id", &self.id)
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("owned", &self.is_owned())
            .finish()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Backing::Owned(layout) = self.backing {
            // SAFETY: `ptr` was returned by `alloc_zeroed(layout)` in `Region::alloc` and
            // has not been freed: `Region` is not `Clone`, and `drop` runs once. Any
            // `RegionSlice` borrows `self`, so none outlives this point.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

/// Reads of at most this many octets are copied by [`copy_short`].
const SHORT_COPY: usize = 16;

/// Copies `out.len()` (at most [`SHORT_COPY`]) octets from `src` into `out` with at
/// most two fixed-size copies that overlap in the middle (8 and 8 for 8..=16 octets, 4
/// and 4 for 4..=7, 2 and 2 for 2..=3, one octet for 1): each compiles to one load and
/// one store, where a copy of a length known only at run time is a call to `memcpy`.
///
/// # Safety
/// `src` is valid for reads of `out.len()` octets, none of them `out`'s memory.
#[inline(always)]
unsafe fn copy_short(src: *const u8, out: &mut [u8]) {
    let n = out.len();
    debug_assert!(n <= SHORT_COPY);
    let dst = out.as_mut_ptr();
    let width = if n >= 8 {
        8
    } else if n >= 4 {
        4
    } else if n >= 2 {
        2
    } else {
        n
    };
    if width == 0 {
        return;
    }
    let tail = n - width;
    // SAFETY: `width <= n`, so the copies read `src[0..width]` and `src[tail..n]`,
    // inside the `n` octets the caller guarantees readable, and write `out[0..width]`
    // and `out[tail..n]`, inside `out`. Source and destination do not overlap (the
    // caller's contract); the two destination ranges may overlap each other, which two
    // separate copies allow (both write the same octets there).
    unsafe {
        copy_fixed(src, dst, width);
        copy_fixed(src.add(tail), dst.add(tail), width);
    }
}

/// One copy of 1, 2, 4 or 8 octets, the count a constant in each arm so that each is
/// a single load and store.
///
/// # Safety
/// `src` valid for reads and `dst` for writes of `width` octets, not overlapping.
#[inline(always)]
unsafe fn copy_fixed(src: *const u8, dst: *mut u8, width: usize) {
    // SAFETY: the caller's contract, for exactly `width` octets in every arm.
    unsafe {
        match width {
            8 => ptr::copy_nonoverlapping(src, dst, 8),
            4 => ptr::copy_nonoverlapping(src, dst, 4),
            2 => ptr::copy_nonoverlapping(src, dst, 2),
            _ => ptr::copy_nonoverlapping(src, dst, 1),
        }
    }
}

#[cfg(test)]
#[path = "region_tests.rs"]
mod tests;
