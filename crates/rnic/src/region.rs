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
    /// a mixture of old and new data.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), RegionError> {
        self.check(offset, out.len())?;
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
    /// Safe at any time, as [`Region::read`].
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

/// A bounds-checked raw view of part of a [`Region`], borrowed from it.
///
/// Holding a `RegionSlice` creates no reference to region memory; it is a pointer and a
/// length that are known to be inside the region and valid while the borrow lasts.
pub struct RegionSlice<'a> {
    ptr: NonNull<u8>,
    len: usize,
    _region: PhantomData<&'a Region>,
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

#[cfg(test)]
mod tests {
    use super::*;

    const ID: RegionId = RegionId(7);

    fn oob(offset: usize, len: usize, region_len: usize) -> RegionError {
        RegionError::OutOfBounds {
            offset,
            len,
            region_len,
        }
    }

    #[test]
    fn alloc_is_zeroed_and_page_aligned() {
        let r = Region::alloc(ID, 10_000).unwrap();
        assert_eq!(r.id(), ID);
        assert_eq!(r.len(), 10_000);
        assert!(!r.is_empty());
        assert!(r.is_owned());
        assert_eq!(r.addr() % REGION_ALIGN as u64, 0);
        let mut out = vec![0xaa; 10_000];
        r.read(0, &mut out).unwrap();
        assert!(out.iter().all(|&b| b == 0));
    }

    #[test]
    fn alloc_zero_len() {
        let r = Region::alloc(ID, 0).unwrap();
        assert!(r.is_empty());
        assert_eq!(r.addr() % REGION_ALIGN as u64, 0);
        assert_ne!(r.addr(), 0);
        // Zero-length copies at offset 0 work (they go through the dangling pointer).
        r.write(0, &[]).unwrap();
        r.read(0, &mut []).unwrap();
        r.fill(0, 0, 1).unwrap();
        let s = r.io_slice(0, 0).unwrap();
        assert!(s.is_empty());
        // SAFETY: the view is empty; nobody can write zero bytes.
        assert!(unsafe { s.as_slice() }.is_empty());
        assert_eq!(r.write(0, &[1]), Err(oob(0, 1, 0)));
        assert_eq!(r.read(1, &mut []), Err(oob(1, 0, 0)));
    }

    #[test]
    fn alloc_64_mib() {
        const LEN: usize = 64 << 20;
        let r = Region::alloc(ID, LEN).unwrap();
        assert_eq!(r.len(), LEN);
        // Spot-check zeroing on every page without a 64 MiB scan.
        let mut b = [0xffu8; 1];
        for page in (0..LEN).step_by(REGION_ALIGN) {
            r.read(page, &mut b).unwrap();
            assert_eq!(b[0], 0, "page at {page}");
        }
        r.write(LEN - 4, &[1, 2, 3, 4]).unwrap();
        let mut tail = [0u8; 8];
        r.read(LEN - 8, &mut tail).unwrap();
        assert_eq!(tail, [0, 0, 0, 0, 1, 2, 3, 4]);
    }

    #[test]
    fn alloc_too_large() {
        assert_eq!(
            Region::alloc(ID, usize::MAX).unwrap_err(),
            RegionError::TooLarge(usize::MAX)
        );
        assert_eq!(
            Region::alloc(ID, isize::MAX as usize + 1).unwrap_err(),
            RegionError::TooLarge(isize::MAX as usize + 1)
        );
        // Within isize::MAX but over it once rounded up to the page alignment.
        let n = isize::MAX as usize - 10;
        assert_eq!(Region::alloc(ID, n).unwrap_err(), RegionError::TooLarge(n));
    }

    #[test]
    fn alloc_failure_is_an_error() {
        // Page-aligned and under isize::MAX, but far beyond any address space: the
        // allocator returns null and we must report it, not abort.
        let n = 1usize << 62;
        assert_eq!(
            Region::alloc(ID, n).unwrap_err(),
            RegionError::AllocFailed(n)
        );
    }

    #[test]
    fn bounds() {
        let r = Region::alloc(ID, 100).unwrap();
        assert_eq!(r.check(0, 100), Ok(()));
        assert_eq!(r.check(100, 0), Ok(()), "len 0 at the end");
        assert_eq!(r.check(101, 0), Err(oob(101, 0, 100)), "one past the end");
        assert_eq!(r.check(100, 1), Err(oob(100, 1, 100)));
        assert_eq!(r.check(1, 100), Err(oob(1, 100, 100)));
        assert_eq!(r.check(usize::MAX, 1), Err(oob(usize::MAX, 1, 100)));
        assert_eq!(r.check(1, usize::MAX), Err(oob(1, usize::MAX, 100)));
        assert_eq!(
            r.check(usize::MAX, usize::MAX),
            Err(oob(usize::MAX, usize::MAX, 100))
        );
        assert_eq!(
            r.fill(50, usize::MAX - 10, 0),
            Err(oob(50, usize::MAX - 10, 100))
        );
        assert!(r.io_slice(usize::MAX - 1, 2).is_err());
        assert!(r.io_slice(99, 2).is_err());
        // Failed writes do not touch anything.
        assert!(r.write(98, &[9, 9, 9]).is_err());
        let mut out = [1u8; 3];
        r.read(97, &mut out).unwrap();
        assert_eq!(out, [0, 0, 0]);
        // Edge writes that fit.
        r.write(99, &[5]).unwrap();
        r.write(100, &[]).unwrap();
        r.read(99, &mut out[..1]).unwrap();
        assert_eq!(out[0], 5);
        assert!(r.io_slice(100, 0).unwrap().is_empty());
        let msg = oob(1, 2, 3).to_string();
        assert!(msg.contains("outside"), "{msg}");
    }

    #[test]
    fn write_read_round_trip_and_fill() {
        let r = Region::alloc(ID, 4096).unwrap();
        let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        r.write(123, &data).unwrap();
        let mut out = vec![0; 1000];
        r.read(123, &mut out).unwrap();
        assert_eq!(out, data);

        r.fill(200, 50, 0xee).unwrap();
        let mut out = vec![0; 60];
        r.read(195, &mut out).unwrap();
        assert_eq!(&out[..5], &data[72..77]);
        assert!(out[5..55].iter().all(|&b| b == 0xee));
        assert_eq!(&out[55..], &data[127..132]);
    }

    #[test]
    fn append_to_extends_with_the_region_bytes_and_checks_bounds() {
        let r = Region::alloc(ID, 4096).unwrap();
        let data: Vec<u8> = (0..=255u8).cycle().take(300).collect();
        r.write(1000, &data).unwrap();
        let mut out = vec![9u8; 3];
        r.append_to(1000, 300, &mut out).unwrap();
        assert_eq!(&out[..3], &[9, 9, 9]);
        assert_eq!(&out[3..], &data[..]);
        r.append_to(4000, 96, &mut out).unwrap();
        assert_eq!(out.len(), 399);
        assert_eq!(r.append_to(4000, 97, &mut out), Err(oob(4000, 97, 4096)));
        assert_eq!(out.len(), 399, "nothing appended on an error");
    }

    #[test]
    fn from_raw_over_vec() {
        let mut buf = vec![3u8; 256];
        // SAFETY: `buf`'s heap buffer is valid for 256 bytes of reads and writes, the
        // pointer comes from `as_mut_ptr` (write provenance), `buf` is neither touched
        // nor resized until the region is dropped at the end of the block.
        let r = unsafe { Region::from_raw(RegionId(1), buf.as_mut_ptr(), buf.len()) };
        {
            assert!(!r.is_owned());
            assert_eq!(r.len(), 256);
            assert_eq!(r.addr(), buf.as_ptr().addr() as u64);
            r.write(10, b"hello").unwrap();
            let mut out = [0u8; 7];
            r.read(9, &mut out).unwrap();
            assert_eq!(&out, b"\x03hello\x03");
            assert!(format!("{r:?}").contains("owned: false"));
        }
        drop(r); // does not free the Vec's buffer
        assert_eq!(&buf[10..15], b"hello");
        assert_eq!(buf.len(), 256);
    }

    #[test]
    #[should_panic(expected = "null pointer")]
    fn from_raw_null_panics() {
        // SAFETY: the contract is violated on purpose; `from_raw` checks for null and
        // panics before creating anything.
        let _ = unsafe { Region::from_raw(ID, ptr::null_mut(), 0) };
    }

    #[test]
    fn io_slice_views() {
        let r = Region::alloc(ID, 64).unwrap();
        r.write(0, &[1; 64]).unwrap();
        let s = r.io_slice(8, 16).unwrap();
        assert_eq!(s.len(), 16);
        assert!(!s.is_empty());
        assert_eq!(s.as_ptr().addr() as u64, r.addr() + 8);
        let iov = s.as_iovec();
        assert_eq!(iov.iov_len, 16);
        assert_eq!(iov.iov_base as usize, s.as_ptr() as usize);
        assert!(format!("{s:?}").contains("len: 16"));
        {
            // SAFETY: this test is the only user of the region; the mutable slice is the
            // only access to bytes 8..24 while it lives.
            let m = unsafe { s.as_mut_slice() };
            for (i, b) in m.iter_mut().enumerate() {
                *b = i as u8 + 100;
            }
        }
        let mut out = [0u8; 18];
        r.read(7, &mut out).unwrap();
        assert_eq!(out[0], 1);
        assert_eq!(out[17], 1);
        assert_eq!(&out[1..17], &(100..116).collect::<Vec<u8>>()[..]);
        // SAFETY: nobody writes the region while the shared slice lives.
        let shared = unsafe { s.as_slice() };
        assert_eq!(shared[0], 100);
        assert_eq!(shared[15], 115);
    }

    #[test]
    fn io_slice_through_a_syscall() {
        // The intended zero-copy path: the kernel fills region memory via an iovec,
        // no Rust reference involved.
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a valid array of two ints for `pipe` to fill.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let msg = b"placed by the kernel";
        // SAFETY: writes `msg.len()` bytes from a live buffer to the pipe we own.
        let n = unsafe { libc::write(fds[1], msg.as_ptr().cast(), msg.len()) };
        assert_eq!(n, msg.len() as isize);
        let r = Region::alloc(ID, 64).unwrap();
        let iov = r.io_slice(4, msg.len()).unwrap().as_iovec();
        // SAFETY: `iov` describes bytes inside `r`, which outlives the call, and nothing
        // else accesses them meanwhile; `fds[0]` is our pipe's read end.
        let n = unsafe { libc::readv(fds[0], &iov, 1) };
        assert_eq!(n, msg.len() as isize);
        let mut out = [0u8; 20];
        r.read(4, &mut out).unwrap();
        assert_eq!(&out, msg);
        // SAFETY: closing the two descriptors we created.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }

    #[test]
    fn concurrent_disjoint_and_overlapping_copies() {
        const CHUNK: usize = 4096;
        const ROUNDS: usize = 200;
        let r = Region::alloc(ID, 4 * CHUNK).unwrap();
        std::thread::scope(|s| {
            // Writers on disjoint chunks 0 and 1, each with its own pattern.
            for w in 0..2u8 {
                let r = &r;
                s.spawn(move || {
                    let pat = vec![w + 1; CHUNK];
                    for _ in 0..ROUNDS {
                        r.write(w as usize * CHUNK, &pat).unwrap();
                    }
                });
            }
            // Two writers fighting over chunks 2..4 with different patterns, offset by
            // half a chunk so their ranges overlap partially.
            for w in 0..2u8 {
                let r = &r;
                s.spawn(move || {
                    let pat = vec![0x10 + w; CHUNK];
                    for i in 0..ROUNDS {
                        let off = 2 * CHUNK + (w as usize) * CHUNK / 2;
                        r.write(off, &pat).unwrap();
                        r.fill(off + (i % CHUNK), 1, 0x10 + w).unwrap();
                    }
                });
            }
            // A reader spanning everything, racing all writers.
            let r = &r;
            s.spawn(move || {
                let mut out = vec![0u8; 4 * CHUNK];
                for _ in 0..ROUNDS {
                    r.read(0, &mut out).unwrap();
                    // Every byte is one that some writer wrote, or the initial zero.
                    assert!(out.iter().all(|&b| matches!(b, 0 | 1 | 2 | 0x10 | 0x11)));
                }
            });
        });
        let mut out = vec![0u8; 4 * CHUNK];
        r.read(0, &mut out).unwrap();
        assert!(out[..CHUNK].iter().all(|&b| b == 1));
        assert!(out[CHUNK..2 * CHUNK].iter().all(|&b| b == 2));
        // Contested bytes hold one of the two patterns; the uncontested edges are exact.
        assert!(
            out[2 * CHUNK..2 * CHUNK + CHUNK / 2]
                .iter()
                .all(|&b| b == 0x10)
        );
        assert!(
            out[2 * CHUNK + CHUNK / 2..3 * CHUNK]
                .iter()
                .all(|&b| b == 0x10 || b == 0x11)
        );
        assert!(
            out[3 * CHUNK..3 * CHUNK + CHUNK / 2]
                .iter()
                .all(|&b| b == 0x11)
        );
        assert!(out[3 * CHUNK + CHUNK / 2..].iter().all(|&b| b == 0));
    }

    #[test]
    fn region_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Region>();
        assert_send_sync::<RegionSlice<'static>>();
        // Moving a region to another thread and dropping it there frees it there.
        let r = Region::alloc(ID, 1 << 16).unwrap();
        r.fill(0, 1 << 16, 9).unwrap();
        let sum = std::thread::spawn(move || {
            let mut out = vec![0u8; 1 << 16];
            r.read(0, &mut out).unwrap();
            out.iter().map(|&b| b as usize).sum::<usize>()
        })
        .join()
        .unwrap();
        assert_eq!(sum, 9 << 16);
    }
}
