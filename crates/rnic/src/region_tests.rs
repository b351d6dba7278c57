//! `Region`'s own tests: allocation, bounds, copies, raw views handed to system calls,
//! and concurrent copies that may tear but never fault.

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

/// `read`'s short copy (two overlapping fixed-size copies, at most 16 octets) gives
/// the octets `copy_from_slice` gives, for every length 0..=16 at offsets from the
/// region's start to its very end, and leaves the rest of `out` alone.
#[test]
fn short_reads_match_a_slice_copy_at_every_length_and_offset() {
    const LEN: usize = 64;
    let r = Region::alloc(ID, LEN).unwrap();
    let data: Vec<u8> = (0..LEN as u8).map(|b| b.wrapping_mul(37) ^ 0x5a).collect();
    r.write(0, &data).unwrap();
    for len in 0..=17usize {
        for offset in (0..=LEN - len).filter(|o| *o < 9 || *o + len + 9 > LEN) {
            let mut out = [0xeeu8; 20];
            r.read(offset, &mut out[1..1 + len]).unwrap();
            let mut want = [0xeeu8; 20];
            want[1..1 + len].copy_from_slice(&data[offset..offset + len]);
            assert_eq!(out, want, "len {len} offset {offset}");
        }
        assert_eq!(
            r.read(LEN - len + 1, &mut [0u8; 17][..len]),
            Err(oob(LEN - len + 1, len, LEN)),
            "len {len} one past the end"
        );
    }
}
