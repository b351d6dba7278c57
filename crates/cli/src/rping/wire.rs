//! What goes over the wire: the 16-octet buffer advert and rping's ping data.

use softrnic_rnic::Mr;

/// The 16-octet buffer advert rping sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advert {
    /// Buffer address (tagged offset).
    pub addr: u64,
    /// Its rkey.
    pub rkey: u32,
    /// Its size.
    pub size: u32,
}

impl Advert {
    /// The advert for all of `size` octets of `mr`.
    pub fn of(mr: &Mr, size: usize) -> Advert {
        Advert {
            addr: mr.addr(),
            rkey: mr.rkey(),
            size: size as u32,
        }
    }

    /// Wire form.
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.size.to_be_bytes());
        b
    }

    /// From wire form.
    pub fn parse(b: &[u8]) -> Option<Advert> {
        Some(Advert {
            addr: u64::from_be_bytes(b.get(..8)?.try_into().ok()?),
            rkey: u32::from_be_bytes(b.get(8..12)?.try_into().ok()?),
            size: u32::from_be_bytes(b.get(12..16)?.try_into().ok()?),
        })
    }
}

/// rping's ping data: "rdma-ping-N: " then printable characters.
pub fn ping_data(iter: u64, size: usize) -> Vec<u8> {
    let mut v = format!("rdma-ping-{iter}: ").into_bytes();
    let mut c = 65 + (iter % 62) as u8;
    while v.len() < size {
        v.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    v.truncate(size);
    if let Some(last) = v.last_mut() {
        *last = 0;
    }
    v
}
