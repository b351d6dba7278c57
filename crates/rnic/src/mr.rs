//! Protection domains and memory regions.
//!
//! ## The memory-safety model
//! A remote peer writes into a region (RDMA Write, Read Response, Send) on an engine
//! thread at any moment the region's STag is exposed, and the RNIC reads from it while
//! transmitting. So the program never holds a Rust reference into region memory through
//! the safe API: it copies in and out with [`Mr::write`] and [`Mr::read`], which are
//! always sound (a concurrent remote write may be seen half-done, exactly as with a
//! hardware RNIC, but the bytes are plain `u8` with no invalid values). Memory the
//! program owns elsewhere can be registered with the `unsafe` [`Pd::register_raw`], whose
//! contract is that the memory outlives the region and is not touched except through it.
//! Deregistration ([`Mr`] drop) removes the STag first, and the engine keeps the memory
//! alive until in-flight transfers that already resolved it finish.

use crate::device::Shared;
use crate::error::{Error, Result};
use crate::limits::Reservation;
use crate::region::Region;
use softrnic_proto::tpt::TptEntry;
use softrnic_proto::{Access, PdId, RegionId, STag};
use std::sync::Arc;

/// A protection domain: QPs and memory regions in one PD may work together.
#[derive(Clone)]
pub struct Pd {
    pub(crate) dev: Arc<Shared>,
    pub(crate) id: PdId,
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pd({})", self.id.0)
    }
}

/// A registered memory region. Dropping it deregisters it.
pub struct Mr {
    dev: Arc<Shared>,
    /// This region's share of [`crate::DeviceConfig::max_registered`].
    _reservation: Reservation,
    region: Arc<Region>,
    stag: STag,
    access: Access,
    pd: PdId,
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("stag", &format_args!("{:#010x}", self.stag))
            .field("addr", &format_args!("{:#x}", self.region.addr()))
            .field("len", &self.region.len())
            .field("access", &self.access)
            .finish()
    }
}

impl Pd {
    /// The PD's identifier.
    pub fn id(&self) -> PdId {
        self.id
    }

    /// Allocates `len` zeroed octets and registers them with the given rights.
    pub fn alloc_mr(&self, len: usize, access: Access) -> Result<Mr> {
        self.register_with(len, access, |id| Ok(Region::alloc(id, len)?))
    }

    /// Registers memory the program owns, like `ibv_reg_mr`.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` octets until the returned [`Mr`]
    /// and every clone of its region the device holds are dropped (the device holds one
    /// only while a transfer through it is in flight; after the `Mr` is dropped and the
    /// QPs using it are idle or destroyed, none remain). The program must not access the
    /// memory except through the [`Mr`] while it is registered.
    pub unsafe fn register_raw(&self, ptr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        self.register_with(len, access, |id| {
            // SAFETY: forwarded: the caller guarantees what `Region::from_raw` requires.
            Ok(unsafe { Region::from_raw(id, ptr, len) })
        })
    }

    /// Registers `len` octets that `make` provides: within the device's limits
    /// ([`crate::DeviceConfig::max_mr_size`] for one region,
    /// [`crate::DeviceConfig::max_registered`] for all), checked before anything is
    /// allocated.
    fn register_with(
        &self,
        len: usize,
        access: Access,
        make: impl FnOnce(RegionId) -> Result<Region>,
    ) -> Result<Mr> {
        if len as u64 > self.dev.cfg.max_mr_size {
            return Err(Error::Limit("max_mr_size"));
        }
        let reservation = self.dev.registered.reserve(len as u64)?;
        if access.contains(Access::REMOTE_INVALIDATE)
            && !softrnic_proto::tpt::remotely_invalidatable(access)
        {
            return Err(Error::InvalidArgument(
                "REMOTE_INVALIDATE needs REMOTE_READ or REMOTE_WRITE",
            ));
        }
        let key = self.dev.next_key()?;
        let id = self.dev.reserve_region_id()?;
        let region = match make(id) {
            Ok(r) => Arc::new(r),
            Err(e) => {
                self.dev.release_region_id(id);
                return Err(e);
            }
        };
        let entry = TptEntry {
            pd: self.id,
            key,
            base: region.addr(),
            len: region.len() as u64,
            access,
            region: id,
            valid: true,
        };
        self.dev.install_region(region.clone());
        let stag = match self.dev.tpt.insert(entry) {
            Some(s) => s,
            None => {
                self.dev.remove_region(id);
                return Err(Error::Limit("STag space exhausted"));
            }
        };
        Ok(Mr {
            _reservation: reservation,
            dev: self.dev.clone(),
            region,
            stag,
            access,
            pd: self.id,
        })
    }
}

impl Mr {
    /// Local key (the STag) for SGEs.
    pub fn lkey(&self) -> STag {
        self.stag
    }
    /// Remote key (the same STag) to hand to a peer.
    pub fn rkey(&self) -> STag {
        self.stag
    }
    /// The tagged offset of the first octet (its address, as libibverbs uses).
    pub fn addr(&self) -> u64 {
        self.region.addr()
    }
    /// Length in octets.
    pub fn len(&self) -> usize {
        self.region.len()
    }
    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.region.is_empty()
    }
    /// The rights it was registered with.
    pub fn access(&self) -> Access {
        self.access
    }
    /// Its protection domain.
    pub fn pd(&self) -> PdId {
        self.pd
    }
    /// Copies `data` into the region at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        Ok(self.region.write(offset, data)?)
    }
    /// Copies from the region at `offset` into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        Ok(self.region.read(offset, out)?)
    }
    /// Fills `len` octets at `offset` with `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<()> {
        Ok(self.region.fill(offset, len, byte)?)
    }
    /// Reads the whole region into a vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len()];
        // Cannot fail: the vector has exactly the region's length.
        let _ = self.region.read(0, &mut v);
        v
    }
    /// An SGE covering `len` octets at `offset`.
    pub fn sge(&self, offset: usize, len: usize) -> softrnic_proto::Sge {
        softrnic_proto::Sge {
            addr: self.addr() + offset as u64,
            len: len as u32,
            lkey: self.stag,
        }
    }
    /// Whether the STag is currently valid (not invalidated).
    pub fn is_valid(&self) -> bool {
        self.dev.tpt.get(self.stag).is_some_and(|e| e.valid)
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        self.dev.tpt.remove(self.stag);
        self.dev.remove_region(self.region.id());
    }
}
