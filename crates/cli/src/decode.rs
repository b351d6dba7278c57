//! Decodes the iWARP conversation inside each TCP connection of a capture: the MPA
//! request/reply exchange, then every FPDU of both directions (markers and CRC as
//! negotiated), down to DDP and RDMAP fields.

use softrnic_capture::{Connection, Direction, Endpoint};
use softrnic_wire::ddp::Placement;
use softrnic_wire::mpa::{self, MAX_FPDU_LEN, MpaFrameKind, MpaFrameRepr};
use softrnic_wire::{Body, Opcode, Ulpdu, WireError};
use std::collections::BTreeMap;
use std::ops::Range;

/// Which way an octet travelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    /// From the connecting side (the MPA initiator).
    ToServer,
    /// From the accepting side (the MPA responder).
    ToClient,
}

impl Dir {
    /// Short label for output.
    pub fn label(self) -> &'static str {
        match self {
            Dir::ToServer => "c->s",
            Dir::ToClient => "s->c",
        }
    }
}

/// An MPA Request or Reply as seen on the wire, with owned private data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpaFrameInfo {
    /// Capture frame that carried the first octet.
    pub frame: u64,
    /// Direction.
    pub dir: Dir,
    /// The decoded frame; `private_data` borrows from the connection's stream.
    pub kind: MpaFrameKind,
    /// M, C, R and enhanced flags.
    pub markers: bool,
    /// C flag.
    pub crc: bool,
    /// R flag.
    pub reject: bool,
    /// RFC 6581 enhanced flag.
    pub enhanced: bool,
    /// MPA revision.
    pub revision: u8,
    /// RFC 6581 IRD/ORD word, if present.
    pub rfc6581: Option<softrnic_wire::Rfc6581>,
    /// The application's private data.
    pub private_data: Vec<u8>,
    /// Where the frame sits in its direction's stream.
    pub range: Range<usize>,
}

/// CRC status of one FPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrcStatus {
    /// CRC was not negotiated; the field holds this value (zero from siw).
    NotUsed(u32),
    /// CRC negotiated and correct.
    Good,
    /// CRC negotiated and wrong.
    Bad {
        /// The CRC in the FPDU.
        received: u32,
        /// The CRC computed over the FPDU.
        computed: u32,
    },
}

/// Decoded body details that tools print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyInfo {
    /// Payload octets.
    Payload(usize),
    /// An RDMA Read Request.
    ReadRequest(softrnic_wire::ReadRequest),
    /// A Terminate: its cause and which headers it copied.
    Terminate {
        /// Layer/type/code.
        cause: softrnic_wire::TerminateCause,
        /// Whether the offending DDP header was copied.
        ddp_header: bool,
        /// Whether the offending Read Request header was copied.
        rdmap_header: bool,
        /// The control word's layout (siw's differs from RFC 5040 on x86).
        layout: softrnic_wire::TerminateLayout,
    },
    /// An uninterpreted body.
    Opaque(usize),
}

/// One FPDU as decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FpduInfo {
    /// Capture frame that carried the FPDU's first octet.
    pub frame: u64,
    /// Direction.
    pub dir: Dir,
    /// Where the FPDU sits in its direction's stream (markers included).
    pub range: Range<usize>,
    /// ULPDU length.
    pub ulpdu_len: usize,
    /// The DDP header and RDMAP control.
    pub header: softrnic_wire::DdpRepr,
    /// The body.
    pub body: BodyInfo,
    /// CRC status.
    pub crc: CrcStatus,
}

/// One decoded item, in capture order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An MPA Request or Reply.
    Mpa(MpaFrameInfo),
    /// An FPDU.
    Fpdu(FpduInfo),
    /// Decoding of a direction stopped here.
    Error {
        /// Capture frame of the offending octet.
        frame: u64,
        /// Direction.
        dir: Dir,
        /// Stream offset.
        offset: usize,
        /// What was wrong.
        error: WireError,
    },
}

impl Event {
    /// The capture frame the event starts in.
    pub fn frame(&self) -> u64 {
        match self {
            Event::Mpa(m) => m.frame,
            Event::Fpdu(f) => f.frame,
            Event::Error { frame, .. } => *frame,
        }
    }
}

/// Counts for one direction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirSummary {
    /// FPDUs decoded.
    pub fpdus: usize,
    /// FPDUs per opcode.
    pub opcodes: BTreeMap<Opcode, usize>,
    /// CRCs checked and correct.
    pub crc_good: usize,
    /// CRCs checked and wrong.
    pub crc_bad: usize,
    /// FPDUs whose CRC was not negotiated.
    pub crc_not_used: usize,
    /// Payload octets carried (Write, Read Response, Sends).
    pub payload_bytes: u64,
    /// Octets left over after the last whole FPDU (the capture ended mid-FPDU).
    pub trailing_bytes: usize,
    /// Whether decoding stopped on an error.
    pub error: Option<WireError>,
    /// TCP FIN seen.
    pub fin: bool,
    /// TCP RST seen.
    pub rst: bool,
}

/// The decode of one TCP connection that carried MPA.
#[derive(Debug, Clone)]
pub struct ConnectionDecode {
    /// Index of the TCP connection in the capture.
    pub index: usize,
    /// The MPA initiator's endpoint.
    pub client: Endpoint,
    /// The MPA responder's endpoint.
    pub server: Endpoint,
    /// Whether CRC was negotiated (either side asked).
    pub crc: bool,
    /// Markers in each direction: (client->server, server->client).
    pub markers: (bool, bool),
    /// Everything decoded, in capture-frame order.
    pub events: Vec<Event>,
    /// Counts client->server.
    pub to_server: DirSummary,
    /// Counts server->client.
    pub to_client: DirSummary,
}

impl ConnectionDecode {
    /// The MPA frame of the given kind, if seen.
    pub fn mpa(&self, kind: MpaFrameKind) -> Option<&MpaFrameInfo> {
        self.events.iter().find_map(|e| match e {
            Event::Mpa(m) if m.kind == kind => Some(m),
            _ => None,
        })
    }

    /// The FPDUs, in capture order.
    pub fn fpdus(&self) -> impl Iterator<Item = &FpduInfo> {
        self.events.iter().filter_map(|e| match e {
            Event::Fpdu(f) => Some(f),
            _ => None,
        })
    }
}

/// The capture frame that carried stream offset `offset`.
fn frame_at(d: &Direction, offset: usize) -> u64 {
    let off = offset as u64;
    let i = d
        .segments
        .partition_point(|s| s.offset + u64::from(s.len) <= off);
    d.segments.get(i).map_or(0, |s| s.frame)
}

fn frame_info(d: &Direction, dir: Dir, f: &MpaFrameRepr<'_>, len: usize) -> MpaFrameInfo {
    MpaFrameInfo {
        frame: frame_at(d, 0),
        dir,
        kind: f.kind,
        markers: f.markers,
        crc: f.crc,
        reject: f.reject,
        enhanced: f.enhanced,
        revision: f.revision,
        rfc6581: f.rfc6581,
        private_data: f.private_data.to_vec(),
        range: 0..len,
    }
}

/// Decodes the FPDUs of one direction from `start`.
fn decode_fpdus(
    d: &Direction,
    dir: Dir,
    start: usize,
    markers: bool,
    crc: bool,
    events: &mut Vec<Event>,
    summary: &mut DirSummary,
) {
    let mut scratch = vec![0u8; MAX_FPDU_LEN];
    let mut at = start;
    let mut marker_pos = 0u64;
    while at < d.bytes.len() {
        let input = &d.bytes[at..];
        let parsed = mpa::parse_fpdu(input, markers.then_some(marker_pos), crc, &mut scratch)
            .and_then(|fp| Ok((fp, Ulpdu::parse(fp.ulpdu)?)));
        let (fp, ulpdu) = match parsed {
            Ok(v) => v,
            Err(WireError::Truncated { .. }) => {
                summary.trailing_bytes = input.len();
                break;
            }
            Err(error) => {
                events.push(Event::Error {
                    frame: frame_at(d, at),
                    dir,
                    offset: at,
                    error,
                });
                summary.error = Some(error);
                break;
            }
        };
        let crc_status = match fp.crc_computed {
            None => CrcStatus::NotUsed(fp.crc_received),
            Some(c) if c == fp.crc_received => CrcStatus::Good,
            Some(c) => CrcStatus::Bad {
                received: fp.crc_received,
                computed: c,
            },
        };
        match crc_status {
            CrcStatus::NotUsed(_) => summary.crc_not_used += 1,
            CrcStatus::Good => summary.crc_good += 1,
            CrcStatus::Bad { .. } => summary.crc_bad += 1,
        }
        let body = match ulpdu.body {
            Body::Payload(p) => {
                summary.payload_bytes += p.len() as u64;
                BodyInfo::Payload(p.len())
            }
            Body::ReadRequest(rr) => BodyInfo::ReadRequest(rr),
            Body::Terminate(t) => BodyInfo::Terminate {
                cause: t.cause,
                ddp_header: t.ddp.is_some(),
                rdmap_header: t.rdmap.is_some(),
                layout: t.layout,
            },
            Body::Opaque(p) => BodyInfo::Opaque(p.len()),
        };
        summary.fpdus += 1;
        *summary.opcodes.entry(ulpdu.header.opcode).or_default() += 1;
        events.push(Event::Fpdu(FpduInfo {
            frame: frame_at(d, at),
            dir,
            range: at..at + fp.consumed,
            ulpdu_len: fp.ulpdu.len(),
            header: ulpdu.header,
            body,
            crc: crc_status,
        }));
        at += fp.consumed;
        marker_pos += fp.consumed as u64;
    }
}

/// Decodes one TCP connection; `None` if its client stream does not open with an MPA
/// Request (not iWARP).
pub fn decode_connection(c: &Connection) -> Option<ConnectionDecode> {
    let req = MpaFrameRepr::parse(&c.to_server.bytes).ok()?;
    if req.kind != MpaFrameKind::Request {
        return None;
    }
    let req_len = req.buffer_len();
    let mut events = vec![Event::Mpa(frame_info(
        &c.to_server,
        Dir::ToServer,
        &req,
        req_len,
    ))];
    let mut out = ConnectionDecode {
        index: c.index,
        client: c.client,
        server: c.server,
        crc: false,
        markers: (false, false),
        events: Vec::new(),
        to_server: DirSummary {
            fin: c.to_server.fin,
            rst: c.to_server.rst,
            ..Default::default()
        },
        to_client: DirSummary {
            fin: c.to_client.fin,
            rst: c.to_client.rst,
            ..Default::default()
        },
    };
    match MpaFrameRepr::parse(&c.to_client.bytes) {
        Ok(rep) if rep.kind == MpaFrameKind::Reply => {
            let rep_len = rep.buffer_len();
            events.push(Event::Mpa(frame_info(
                &c.to_client,
                Dir::ToClient,
                &rep,
                rep_len,
            )));
            if !rep.reject {
                out.crc = req.crc || rep.crc;
                // Each side's M flag asks for markers in the FPDUs it receives.
                out.markers = (rep.markers, req.markers);
                decode_fpdus(
                    &c.to_server,
                    Dir::ToServer,
                    req_len,
                    out.markers.0,
                    out.crc,
                    &mut events,
                    &mut out.to_server,
                );
                decode_fpdus(
                    &c.to_client,
                    Dir::ToClient,
                    rep_len,
                    out.markers.1,
                    out.crc,
                    &mut events,
                    &mut out.to_client,
                );
            }
        }
        Ok(_) => {
            let error = WireError::UnexpectedMpaKind;
            events.push(Event::Error {
                frame: frame_at(&c.to_client, 0),
                dir: Dir::ToClient,
                offset: 0,
                error,
            });
            out.to_client.error = Some(error);
        }
        // No reply captured (yet): the request alone is still worth showing.
        Err(WireError::Truncated { have: 0, .. }) => {}
        Err(error) => {
            events.push(Event::Error {
                frame: frame_at(&c.to_client, 0),
                dir: Dir::ToClient,
                offset: 0,
                error,
            });
            out.to_client.error = Some(error);
        }
    }
    events.sort_by_key(|e| e.frame());
    out.events = events;
    Some(out)
}

/// Decodes every iWARP connection in a capture's TCP connections.
pub fn decode_all(conns: &[Connection]) -> Vec<ConnectionDecode> {
    conns.iter().filter_map(decode_connection).collect()
}

/// The direction's reassembled stream, for re-emit checks.
pub fn stream(c: &Connection, dir: Dir) -> &[u8] {
    match dir {
        Dir::ToServer => &c.to_server.bytes,
        Dir::ToClient => &c.to_client.bytes,
    }
}

/// Placement fields as printed: `STag 0x... TO 0x...` or `QN n MSN n MO n`.
pub fn placement_text(p: &Placement) -> String {
    match *p {
        Placement::Tagged { stag, to } => format!("STag {stag:#010x} TO {to:#x}"),
        Placement::Untagged { qn, msn, mo, .. } => format!("QN {qn} MSN {msn} MO {mo}"),
    }
}
