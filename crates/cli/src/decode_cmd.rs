//! `softrnic decode`: prints a capture's iWARP exchange, one line per MPA frame or FPDU,
//! then a summary per connection; `--json` prints the same as JSON lines.

use serde_json::{Value, json};
use softrnic_cli::decode::{
    BodyInfo, ConnectionDecode, CrcStatus, DirSummary, Event, FpduInfo, MpaFrameInfo, decode_all,
    placement_text,
};
use softrnic_wire::ddp::Placement;
use softrnic_wire::mpa::MpaFrameKind;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// Runs the subcommand; errors are printed by `main` and make the exit status non-zero.
pub fn run(file: &Path, json: bool) -> Result<(), String> {
    let conns =
        softrnic_capture::read_capture(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let decoded = decode_all(&conns);
    if decoded.is_empty() {
        return Err(format!(
            "{}: no iWARP traffic ({} TCP connection(s), none opens with an MPA request)",
            file.display(),
            conns.len()
        ));
    }
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let written = if json {
        decoded.iter().try_for_each(|c| print_json(&mut out, c))
    } else {
        decoded.iter().try_for_each(|c| print_text(&mut out, c))
    };
    written
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing output: {e}"))?;
    let errors: Vec<String> = decoded
        .iter()
        .flat_map(|c| {
            [(&c.to_server, "c->s"), (&c.to_client, "s->c")]
                .into_iter()
                .filter_map(move |(s, d)| s.error.map(|e| format!("conn {} {d}: {e}", c.index)))
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("malformed iWARP traffic: {}", errors.join("; ")))
    }
}

fn crc_text(c: &CrcStatus) -> String {
    match c {
        CrcStatus::NotUsed(0) => "crc off".into(),
        CrcStatus::NotUsed(v) => format!("crc off (field {v:#010x})"),
        CrcStatus::Good => "crc good".into(),
        CrcStatus::Bad { received, computed } => {
            format!("crc BAD (got {received:#010x}, want {computed:#010x})")
        }
    }
}

fn mpa_text(m: &MpaFrameInfo) -> String {
    let kind = match m.kind {
        MpaFrameKind::Request => "Request",
        MpaFrameKind::Reply => "Reply  ",
    };
    let mut s = format!(
        "MPA {kind} rev {} M={} C={} R={}",
        m.revision, m.markers as u8, m.crc as u8, m.reject as u8
    );
    if let Some(p) = m.rfc6581 {
        s += &format!(" enhanced IRD={} ORD={}", p.ird, p.ord);
        let rtr: Vec<&str> = [
            (p.rtr_send, "send"),
            (p.rtr_write, "write"),
            (p.rtr_read, "read"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| *n)
        .collect();
        if p.peer_to_peer {
            s += &format!(" P2P RTR={}", rtr.join("|"));
        }
    } else if m.enhanced {
        s += " enhanced-flag";
    }
    s + &format!(" pd={}B", m.private_data.len())
}

fn fpdu_text(f: &FpduInfo) -> String {
    let op = f.header.opcode;
    let mut s = format!("{:<9} {}", op.name(), placement_text(&f.header.placement));
    match f.body {
        BodyInfo::Payload(n) | BodyInfo::Opaque(n) => s += &format!(" len {n}"),
        BodyInfo::ReadRequest(rr) => {
            s += &format!(
                " sink {:#010x}@{:#x} size {} src {:#010x}@{:#x}",
                rr.sink_stag, rr.sink_to, rr.size, rr.source_stag, rr.source_to
            )
        }
        BodyInfo::Terminate { cause, layout, .. } => {
            s += &format!(" {cause}");
            if layout == softrnic_wire::TerminateLayout::SiwLittleEndian {
                s += " [siw's bit-field layout]";
            }
        }
    }
    if let Placement::Untagged { rsvd_ulp, .. } = f.header.placement
        && op.invalidates()
    {
        s += &format!(" inv {rsvd_ulp:#010x}");
    }
    let mut flags = Vec::new();
    if f.header.last {
        flags.push("L");
    }
    if op.solicited() {
        flags.push("SE");
    }
    format!("{s} [{}] {}", flags.join(","), crc_text(&f.crc))
}

fn summary_text(s: &DirSummary) -> String {
    let ops: Vec<String> = s
        .opcodes
        .iter()
        .map(|(o, n)| format!("{}x{n}", o.name()))
        .collect();
    let mut t = format!(
        "{} FPDUs ({}), {} payload B, CRC good {} bad {} off {}",
        s.fpdus,
        if ops.is_empty() {
            "-".into()
        } else {
            ops.join(" ")
        },
        s.payload_bytes,
        s.crc_good,
        s.crc_bad,
        s.crc_not_used
    );
    if s.trailing_bytes > 0 {
        t += &format!(", {} B cut off by the capture's end", s.trailing_bytes);
    }
    if let Some(e) = s.error {
        t += &format!(", STOPPED: {e}");
    }
    t + match (s.fin, s.rst) {
        (_, true) => ", RST",
        (true, false) => ", FIN",
        _ => "",
    }
}

fn print_text(out: &mut impl Write, c: &ConnectionDecode) -> io::Result<()> {
    writeln!(out, "conn {} {} -> {}", c.index, c.client, c.server)?;
    for e in &c.events {
        let (frame, dir, text) = match e {
            Event::Mpa(m) => (m.frame, m.dir, mpa_text(m)),
            Event::Fpdu(f) => (f.frame, f.dir, fpdu_text(f)),
            Event::Error {
                frame,
                dir,
                offset,
                error,
            } => (
                *frame,
                *dir,
                format!(
                    "ERROR at stream offset {offset}: {error} -> Terminate {}",
                    error.terminate_cause()
                ),
            ),
        };
        writeln!(out, "  #{frame:<6} {} {text}", dir.label())?;
    }
    writeln!(out, "  summary c->s: {}", summary_text(&c.to_server))?;
    writeln!(out, "  summary s->c: {}", summary_text(&c.to_client))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn crc_json(c: &CrcStatus) -> Value {
    match c {
        CrcStatus::NotUsed(v) => json!({"status": "off", "field": v}),
        CrcStatus::Good => json!({"status": "good"}),
        CrcStatus::Bad { received, computed } => {
            json!({"status": "bad", "received": received, "computed": computed})
        }
    }
}

fn event_json(conn: usize, e: &Event) -> Value {
    match e {
        Event::Mpa(m) => {
            let mut v = json!({
                "type": "mpa", "conn": conn, "frame": m.frame, "dir": m.dir.label(),
                "kind": match m.kind { MpaFrameKind::Request => "request", MpaFrameKind::Reply => "reply" },
                "revision": m.revision, "markers": m.markers, "crc": m.crc, "reject": m.reject,
                "enhanced": m.enhanced, "private_data": hex(&m.private_data),
            });
            if let Some(p) = m.rfc6581 {
                v["ird"] = json!(p.ird);
                v["ord"] = json!(p.ord);
                v["peer_to_peer"] = json!(p.peer_to_peer);
                v["rtr_send"] = json!(p.rtr_send);
                v["rtr_write"] = json!(p.rtr_write);
                v["rtr_read"] = json!(p.rtr_read);
            }
            v
        }
        Event::Fpdu(f) => {
            let mut v = json!({
                "type": "fpdu", "conn": conn, "frame": f.frame, "dir": f.dir.label(),
                "stream_offset": f.range.start, "wire_len": f.range.len(),
                "opcode": f.header.opcode.name(), "last": f.header.last,
                "solicited": f.header.opcode.solicited(), "ulpdu_len": f.ulpdu_len,
                "crc": crc_json(&f.crc),
            });
            match f.header.placement {
                Placement::Tagged { stag, to } => {
                    v["tagged"] = json!(true);
                    v["stag"] = json!(stag);
                    v["to"] = json!(to);
                }
                Placement::Untagged {
                    rsvd_ulp,
                    qn,
                    msn,
                    mo,
                } => {
                    v["tagged"] = json!(false);
                    v["qn"] = json!(qn);
                    v["msn"] = json!(msn);
                    v["mo"] = json!(mo);
                    if f.header.opcode.invalidates() {
                        v["invalidate_stag"] = json!(rsvd_ulp);
                    }
                }
            }
            match f.body {
                BodyInfo::Payload(n) | BodyInfo::Opaque(n) => v["payload_len"] = json!(n),
                BodyInfo::ReadRequest(rr) => {
                    v["read_request"] = json!({
                        "sink_stag": rr.sink_stag, "sink_to": rr.sink_to, "size": rr.size,
                        "source_stag": rr.source_stag, "source_to": rr.source_to,
                    })
                }
                BodyInfo::Terminate {
                    cause,
                    ddp_header,
                    rdmap_header,
                    layout,
                } => {
                    v["terminate"] = json!({
                        "layer": cause.layer.to_bits(), "etype": cause.etype, "code": cause.code,
                        "description": cause.describe(), "ddp_header": ddp_header,
                        "rdmap_header": rdmap_header,
                        "siw_layout": layout == softrnic_wire::TerminateLayout::SiwLittleEndian,
                    })
                }
            }
            v
        }
        Event::Error {
            frame,
            dir,
            offset,
            error,
        } => {
            let t = error.terminate_cause();
            json!({
                "type": "error", "conn": conn, "frame": frame, "dir": dir.label(),
                "stream_offset": offset, "error": error.to_string(),
                "terminate": {"layer": t.layer.to_bits(), "etype": t.etype, "code": t.code},
            })
        }
    }
}

fn summary_json(s: &DirSummary) -> Value {
    let ops: serde_json::Map<String, Value> = s
        .opcodes
        .iter()
        .map(|(o, n)| (o.name().to_string(), json!(n)))
        .collect();
    json!({
        "fpdus": s.fpdus, "opcodes": ops, "payload_bytes": s.payload_bytes,
        "crc_good": s.crc_good, "crc_bad": s.crc_bad, "crc_off": s.crc_not_used,
        "trailing_bytes": s.trailing_bytes, "fin": s.fin, "rst": s.rst,
        "error": s.error.map(|e| e.to_string()),
    })
}

fn print_json(out: &mut impl Write, c: &ConnectionDecode) -> io::Result<()> {
    for e in &c.events {
        writeln!(out, "{}", event_json(c.index, e))?;
    }
    let summary = json!({
        "type": "summary", "conn": c.index,
        "client": c.client.to_string(), "server": c.server.to_string(),
        "crc": c.crc, "markers_to_server": c.markers.0, "markers_to_client": c.markers.1,
        "to_server": summary_json(&c.to_server), "to_client": summary_json(&c.to_client),
    });
    writeln!(out, "{summary}")
}
